/*
 * The transport vtable (DESIGN §4). A transport knows nothing of collectives:
 * it moves ordered messages on connections. One connection per (peer,
 * channel); messages on a connection are delivered in order. Nothing here
 * blocks: calls return TP_AGAIN when they cannot finish now, and the executor
 * retries them after other work or after waiting.
 *
 * Sizes are known to both ends (the schedule decides them); a transport may
 * still carry a length to catch mismatches and report them.
 *
 * Errors: calls return braid_result codes, plus TP_AGAIN ("not yet"). A
 * call that fails records its message for the calling thread with ERR
 * (src/log.h) when it returns the failure, naming the peer; a connection
 * that stays broken records the same message again at every later call
 * that fails for it (transports/common.h, tp_keep). The executor turns the
 * code and the message into the communicator's error in one place
 * (exec_tp_fail, src/exec_wait.c).
 */
#ifndef BRAID_TRANSPORTS_TRANSPORT_H
#define BRAID_TRANSPORTS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

#define TP_AGAIN (-1) /* returned (as int) when the call should be retried */

/* Reduction kernel handed to recv_reduce: dst[i] = a[i] (+) b[i], n elements.
 */
typedef struct tp_reducer {
  void (*fn)(void *dst, const void *a, const void *b, size_t n);
  size_t elem_size;
} tp_reducer;

/* The executor hands recv_reduce the `base` of one of these, always: a
 * transport that carries device buffers reads the reduction from it
 * (tp_reducer_dev) and runs cudev_reduce(dst, src, message, len / elem_size,
 * dt, op, dev_stream). dev_stream is the communicator's internal stream for
 * an operation on device buffers and NULL for host buffers; fn stays the CPU
 * kernel of (dt, op). (A separate struct rather than more tp_reducer fields,
 * so callers that fill a tp_reducer positionally stay warning-free.) */
typedef struct tp_dev_reducer {
  tp_reducer base;
  braid_dtype dt;
  braid_op op;
  void *dev_stream;
  /* 1: dst = message (+) src, the operands the other way round (a
   * schedule's RECV_REDUCE_REV); base.fn then already takes them so, and a
   * device transport swaps them for cudev_reduce. */
  int rev;
} tp_dev_reducer;

static inline const tp_dev_reducer *tp_reducer_dev(const tp_reducer *r) {
  return (const tp_dev_reducer *)(const void *)r;
}

struct tp_bootstrap; /* src/bootstrap.h */

/* A collective mismatch: rank `by` met a message, or a wait, of call
 * `theirs` (a fingerprint, transports/call_fp.h) from rank `peer` where it
 * runs call `mine`. */
typedef struct tp_mismatch {
  int32_t by, peer;
  uint64_t theirs, mine;
} tp_mismatch;

typedef struct tp_conn tp_conn; /* one per (peer, channel), transport-owned */

/* The settings of the environment that transports read (docs/ENV.md; the
 * cuda transports read none). A transport reads no environment itself: src/
 * fills this from its cached configuration (cfg_tp_settings, src/config.h)
 * and hands it over in tp_setup, or to a probe. Each field holds the value
 * of its variable as src/ took it, the default when unset. A test that
 * builds a tp_setup by hand fills it the same way: a zeroed one is not the
 * defaults (shm_cma 0 turns single-copy off, heartbeat_ms 0 turns
 * heartbeats off, ib_gid_index 0 picks GID 0). */
typedef struct tp_settings {
  int shm_cma;               /* shm: BRAID_SHM_CMA, 1 single-copy (default) */
  size_t cma_threshold;      /* shm: BRAID_SHM_CMA_THRESHOLD, 0: 16K or 64K */
  int heartbeat_ms;          /* tcp: BRAID_HEARTBEAT_MS (1000), 0: off */
  const char *socket_ifname; /* ofi: BRAID_SOCKET_IFNAME, NULL: the first up
                                non-loopback interface */
  const char *ofi_provider;  /* ofi: BRAID_OFI_PROVIDER, NULL: fastest */
  const char *ofi_domain;    /* ofi: BRAID_OFI_DOMAIN, NULL: automatic */
  const char *ib_hca;        /* ibverbs: BRAID_IB_HCA, NULL: all devices */
  int ib_gid_index;          /* ibverbs: BRAID_IB_GID_INDEX, -1: automatic */
} tp_settings;

/* What a transport needs from the communicator at setup. */
typedef struct tp_setup {
  struct tp_bootstrap *boot; /* allgather / p2p exchange of small blobs */
  int rank, nranks;
  int nchannels;     /* connections per peer */
  int nslots;        /* messages a connection buffers */
  size_t slot_bytes; /* largest message */
  int timeout_ms;
  tp_settings set; /* the environment's settings (above) */
} tp_setup;

typedef struct tp_ops {
  const char *name;
  /* Create per-communicator state. peers[i] != 0 marks the ranks this
   * transport must connect to. Collective over all ranks of the comm. A
   * failure's message is the calling thread's (err_msg). */
  int (*setup)(tp_setup *st, const uint8_t *peers, void **state);
  tp_conn *(*conn)(void *state, int peer, int channel);
  /* Send len bytes. BRAID_SUCCESS: accepted (*ticket set; src may still be
   * read until send_done(ticket)); TP_AGAIN: no room now; else an error. */
  int (*isend)(tp_conn *c, const void *src, size_t len, uint64_t *ticket);
  /* Optional: like isend, for a source the caller overwrites soon after:
   * the transport must not read src after this call unless its own bounded
   * buffering (nslots messages) lets send_done complete without any action
   * of the receiver. NULL: isend already behaves so. (shm: never
   * single-copy.) */
  int (*isend_copy)(tp_conn *c, const void *src, size_t len, uint64_t *ticket);
  /* Optional: like isend, with the data copied by the sender into the
   * transport's own buffers rather than read from src by the receiver
   * (the executor asks for it in large calls where the sender's core would
   * otherwise sit idle, src/exec_int.h EXEC_SEND_STAGE). NULL: isend
   * already does so. (shm: never single-copy.) */
  int (*isend_staged)(tp_conn *c, const void *src, size_t len,
                      uint64_t *ticket);
  /* Optional: like isend, from a sender that copies nothing else while the
   * message travels (src/exec_int.h EXEC_SEND_SHARE): the transport may
   * have it copy part of the message itself, in send_done. NULL: isend.
   * (shm: large single-copy messages are copied by both ranks.) */
  int (*isend_shared)(tp_conn *c, const void *src, size_t len,
                      uint64_t *ticket);
  /* BRAID_SUCCESS once every send up to ticket no longer reads its source. */
  int (*send_done)(tp_conn *c, uint64_t ticket);
  /* Receive the next message (len bytes) into dst. Resumable: TP_AGAIN until
   * all of it has arrived. */
  int (*recv)(tp_conn *c, void *dst, size_t len);
  /* Optional: recv into an output nobody reads soon (recv_reduce_fwd),
   * written past the cache. NULL: recv. */
  int (*recv_stream)(tp_conn *c, void *dst, size_t len);
  /* Receive the next message and combine: dst = src (+) message. */
  int (*recv_reduce)(tp_conn *c, const void *src, void *dst, size_t len,
                     const tp_reducer *r);
  /* Optional, host buffers, for an output nobody reads soon (a large
   * out-of-place call's): recv_reduce whose result also goes on to out, a
   * connection of the same transport, as a staged send (isend_staged)
   * while it is made, piece by piece while in this core's cache; dst is
   * written past the cache. *ticket: that send's, for send_done on out; 0
   * when it could not start (the caller sends dst itself). NULL: not done. */
  int (*recv_reduce_fwd)(tp_conn *c, const void *src, void *dst, size_t len,
                         const tp_reducer *r, tp_conn *out, uint64_t *ticket);
  /* File descriptor to poll for readiness, or -1 (shm uses its doorbell). */
  int (*pollfd)(tp_conn *c);
  /* Optional doorbell (shm): a counter in this rank's memory that peers bump
   * (with a futex wake when the waiter sleeps) whenever they publish a message
   * or free a slot for it. The executor reads it, makes progress, and if
   * nothing moved sleeps in bell_wait until it changes or timeout_us passes.
   * NULL for transports that wait through pollfd. */
  uint32_t (*bell_read)(void *state);
  void (*bell_wait)(void *state, uint32_t seen, int timeout_us);
  /* Optional (shm, tcp, ofi, ibverbs): the fingerprint of the collective this
   * rank runs from now (src/check.c, check_call_fp; 0: none). Messages sent on
   * the collective channels (all but the last, which carries send/recv) carry
   * it, and a message that arrives there with another is refused with
   * BRAID_ERR_MISMATCH and a message naming both calls (tp_fp_mismatch). */
  void (*set_fp)(void *state, uint64_t fp);
  /* Optional (shm, tcp): a wait that lasted. note_wait records that this
   * rank waits for rank `on` (-1: no longer waits) in call `fp`; peer_wait
   * reads what `peer` recorded (1: it waits, for *on, in call *fp, its
   * *epoch-th such note; 0: it does not wait; -1: not known here: tcp
   * passes a note only to the rank waited for); quiet says 1 when no
   * message is in flight between this rank and `peer`, either way.
   * src/exec_wait.c names who waits for whom with them, and finds two
   * ranks waiting for each other in different calls. */
  void (*note_wait)(void *state, int on, uint64_t fp);
  int (*peer_wait)(void *state, int peer, int *on, uint64_t *fp,
                   uint32_t *epoch);
  int (*quiet)(void *state, int peer);
  /* Optional (shm): this rank is about to wait on `cpu`; the CPU a peer
   * last noted, or -1. A waiter whose peer is on its own CPU yields at once
   * instead of spinning (src/exec_wait.c). */
  void (*note_cpu)(void *state, int cpu);
  int (*peer_cpu)(void *state, int peer);
  /* Check the peers once (dead process, closed socket). BRAID_SUCCESS,
   * BRAID_ERR_REMOTE with *dead_rank set, or BRAID_ERR_MISMATCH when a peer
   * told of a collective mismatch (tell_mismatch; its message names it). */
  int (*check_peers)(void *state, int *dead_rank);
  /* Optional: this rank gives up because dead_rank died; peers that see this
   * rank leave next should name dead_rank as the cause. */
  void (*set_cause)(void *state, int dead_rank);
  /* Optional (shm, tcp): collective mismatches told to every rank.
   * mismatch: 1 with *m when this state met one (a message of another
   * call) or a peer told of one, else 0. tell_mismatch: this rank broke on
   * mismatch m: tells every peer of this state without waiting; their
   * check_peers then returns BRAID_ERR_MISMATCH naming it. */
  int (*mismatch)(void *state, tp_mismatch *m);
  void (*tell_mismatch)(void *state, const tp_mismatch *m);
  /* Optional (tcp): called at each health check of a wait that has lasted
   * BRAID_HEARTBEAT_MS: sends a heartbeat to every peer that has none
   * unanswered and was not heard from for an interval (a thread of each
   * rank answers them, also while the program computes); returns a peer
   * that has left one unanswered for two intervals or more (the longest
   * silence, *silent_ms), or -1. */
  int (*heartbeat)(void *state, int *silent_ms);
  void (*teardown)(void *state);
  /* Optional: writes out what the transport still holds in its own buffers
   * (isend_copy's copies, whose send_done was immediate) without waiting.
   * BRAID_SUCCESS when nothing is left, TP_AGAIN while something is, else an
   * error. Only calls on the transport push such data out, and a peer may be
   * waiting for it: a rank should not leave an operation before this says
   * BRAID_SUCCESS. NULL: the transport never holds such data. */
  int (*flush)(void *state);
  /* Optional: makes what the connection needs (memory, events) now instead
   * of on its first use; BRAID_SUCCESS or an error (its message says). The
   * executor calls it before a call on a CUDA stream goes behind its gate,
   * where allocating could wait for the user's threads (docs/CUDA.md, §3).
   * NULL: nothing to make ahead. */
  int (*prepare)(tp_conn *c);
  /* Optional (shm): the small-call path (src/exec_fast.c), for messages of
   * at most fast_max(c) bytes on c, with the fingerprint set_fp gave.
   * fast_room: 1 when fast_send can send n such messages (each at most len
   * bytes) on c now, one after the other, whole and behind every earlier
   * one, else 0. fast_send: sends one; called only after fast_room said 1
   * for at least as many, so it cannot fail. fast_recv: 1 when the next
   * message on c was one of len bytes of this rank's call and is now in
   * dst (r NULL), or combined as dst = src (+) message (recv_reduce's
   * r); 0 when it has not arrived, or is anything else (another call or
   * size, a part of a larger message, a broken connection): then nothing
   * was taken, and recv or recv_reduce meets it as usual. NULL: no
   * small-call path. */
  int (*fast_room)(tp_conn *c, size_t len, int n);
  void (*fast_send)(tp_conn *c, const void *src, size_t len);
  int (*fast_recv)(tp_conn *c, const void *src, void *dst, size_t len,
                   const tp_reducer *r);
  size_t (*fast_max)(tp_conn *c);
} tp_ops;

extern const tp_ops tp_self;
extern const tp_ops tp_shm;
extern const tp_ops tp_tcp;
/* Always defined; setup returns BRAID_ERR_UNSUPPORTED when the library was
 * built without libfabric/libibverbs or no provider/device is present. */
extern const tp_ops tp_ofi;
extern const tp_ops tp_ibverbs;

#endif
