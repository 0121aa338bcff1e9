/*
 * Shared-memory transport (tp_shm): the segment layout, the protocol, and
 * hooks for tests. The transport itself is used through the vtable in
 * transports/transport.h.
 *
 * Each rank owns one POSIX shm segment per communicator that holds its
 * INCOMING rings: a header (pid, doorbell, CMA probe word, the sender rank of
 * each ring group), then one ring per (shm peer, channel). A ring is a
 * two-cache-line header (the consumer counter `tail` alone on the first)
 * followed by nslots slots; a slot is a 64-byte header (sequence word,
 * lengths, the sender's call fingerprint, a descriptor or a fragment of at
 * most SHM_INLINE bytes) followed
 * by slot_data bytes (slot_bytes rounded up to 64) for larger fragments.
 *
 * Send: the sender copies a message, or the next fragment of one larger than
 * a slot, into the next free slot and publishes it by storing the slot's
 * sequence word (absolute slot index + 1) with release order. A message that
 * needs more slots than are free is pushed as slots free up, by any later
 * call on the same transport state; the sender's send_done reports it once
 * all of it is in the ring.
 *
 * Receive: the receiver waits for the expected sequence word (acquire),
 * copies or reduces straight out of the slot, then stores the new `tail`
 * (release). `tail` tells the sender which slots are free and doubles as
 * the acknowledgment of single-copy messages.
 *
 * Single-copy (CMA): a message of at least the CMA threshold, to a receiver
 * that could read the sender's memory when probed at setup, takes one slot
 * holding (sender address, length); the receiver reads it with
 * process_vm_readv (for reductions, in 64 KiB pieces through a buffer) and
 * releases the slot after the read, which completes the sender's send_done.
 *
 * Doorbell: a 32-bit counter in the owner's header that a peer bumps, with a
 * FUTEX_WAKE, after publishing or releasing a slot when the owner has
 * announced (`sleeping`) that it sleeps in bell_wait; the owner, having
 * announced it, looks at its rings once more before it sleeps, so a slot
 * published before the announcement is not slept through.
 *
 * Setup exchanges the segment names with the bootstrap, maps every peer's
 * segment, exchanges a status (so that every rank fails together), and then
 * every rank unlinks its own name: nothing stays in /dev/shm, whatever
 * happens to the processes later.
 */
#ifndef BRAID_TRANSPORTS_SHM_H
#define BRAID_TRANSPORTS_SHM_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transports/common.h"
#include "transports/transport.h"

/* ---- segment layout (one per rank and communicator) ------------------- */

#define SHM_MAGIC 0x316d736469617262ULL /* "braidsm1" */
#define SHM_CL 64
#define SHM_KIND_DATA 1u
#define SHM_KIND_CMA 2u
#define SHM_INLINE 24 /* bytes of data a slot header holds (shm_slot.inl) */
#define SHM_PIECE (64 * 1024) /* CMA reduce: bytes read per piece */
/* A single-copy message of at least SHM_SHARE_FROM bytes, from a sender
 * with nothing else to copy (isend_shared), is copied in pieces that the
 * receiver (reading) and the sender (writing, while it waits for the
 * send) take in turn: 2 to SHM_SHARE_SPLIT pieces, of SHM_SHARE_PIECE
 * bytes or more (docs/PERFORMANCE.md, "Single copy, shared"). */
#define SHM_SHARE_FROM (128 * 1024)
#define SHM_SHARE_SPLIT 8
#define SHM_SHARE_PIECE (128 * 1024)
/* BRAID_SHM_CMA_THRESHOLD's default: single copy from 16 KiB where the
 * host's ranks of the communicator have a CPU each, from 64 KiB where they
 * share CPUs (shm_cma_default; docs/PERFORMANCE.md, "Single copy from 16
 * KiB"). */
#define SHM_CMA_THRESHOLD_OWN_CPU (16 * 1024)
#define SHM_DEFAULT_CMA_THRESHOLD (64 * 1024)
size_t shm_cma_default(int nlocal);
/* 1 when nlocal ranks have a CPU each among those this thread may run on. */
int shm_ranks_fit(int nlocal);
/* The pieces a single-copy message of len bytes is copied in when both
 * ranks copy it (1: the receiver alone), and their size. */
uint32_t shm_share_pieces(uint64_t len, uint64_t *piece);

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
               "shm needs lock-free 32- and 64-bit atomics");

typedef struct shm_hdr {
  uint64_t magic;
  int32_t pid, rank;
  int32_t npeers, nchannels, nslots, pad0;
  uint64_t slot_data;  /* data bytes per slot (multiple of 64) */
  uint64_t slot_bytes; /* header + data */
  uint64_t ring_bytes; /* stride between rings */
  uint64_t rings_off;  /* offset of ring 0 */
  uint64_t total;      /* segment size */
  uint64_t cma_magic;  /* random; read by peers through CMA at setup */
  uint64_t cma_addr;   /* address of cma_magic in the owner's memory */
  alignas(SHM_CL) _Atomic uint32_t bell;
  alignas(SHM_CL) _Atomic uint32_t sleeping;
  /* The CPU this rank last waited on (-1: not yet): a peer that finds its
   * own CPU here knows spinning cannot help (src/exec_wait.c). Written
   * only when it changes. */
  _Atomic int32_t cpu;
  /* The rank whose death made this rank give up (-1: none), so that peers
   * who see this rank leave afterwards name the first cause. */
  alignas(SHM_CL) _Atomic int32_t cause;
  /* A wait of this rank that lasted (src/exec_wait.c): the rank it waits
   * for (-1: none), the fingerprint of its call, a count of such notes.
   * Peers read it to name who waits for whom. */
  alignas(SHM_CL) _Atomic int32_t wait_on;
  _Atomic uint32_t wait_epoch;
  _Atomic uint64_t wait_fp;
  /* A collective mismatch a peer found and told this rank of
   * (tp_ops.tell_mismatch, transports/shm_told.c): the first teller claims
   * told_claim (0 -> 1), writes the record, then sets told_ready. */
  alignas(SHM_CL) _Atomic uint32_t told_claim;
  _Atomic uint32_t told_ready;
  int32_t told_by, told_peer;
  uint64_t told_theirs, told_mine;
  alignas(SHM_CL) int32_t peer_rank[]; /* sender rank of each ring group */
} shm_hdr;

typedef struct shm_ring {
  alignas(SHM_CL) _Atomic uint64_t tail;   /* receiver: slots released */
  alignas(SHM_CL) _Atomic uint32_t cma_ok; /* receiver reads sender's memory */
} shm_ring;

typedef struct shm_slot {
  alignas(SHM_CL) _Atomic uint64_t seq; /* absolute slot index + 1 */
  uint64_t msg_len;                     /* whole message */
  uint64_t off;                         /* fragment offset in the message */
  uint64_t fp;       /* the sender's call (tp_ops.set_fp), or 0 */
  uint32_t frag_len; /* DATA: bytes here; CMA: 1 when copied by both ranks */
  uint32_t kind;
  union {
    /* SHM_KIND_CMA: the message's copy, shared by the two ranks
     * (transports/shm.c, "Single copy, shared") */
    struct {
      uint64_t addr;             /* the sender's address */
      _Atomic uint64_t dst;      /* the receiver's, once it copies; 0 before */
      _Atomic uint32_t claimed;  /* pieces taken, by either rank */
      _Atomic uint32_t finished; /* pieces copied; bit 31: one failed */
    } cma;
    /* SHM_KIND_DATA: a fragment of at most SHM_INLINE bytes lives here, on
     * the line of its sequence word: the receiver's one read brings both */
    uint8_t inl[24];
  } u;
} shm_slot;

_Static_assert(sizeof(shm_slot) == SHM_CL, "slot header is one cache line");
_Static_assert(sizeof(shm_ring) == 2 * SHM_CL, "ring header is two lines");

/* ---- per-process state (private to transports/shm.c and its tests) ---- */

typedef struct shm_cmaq {
  uint64_t msgno, slot_end;
  int shared; /* copied in pieces, by both ranks (shm_share_pieces > 1) */
} shm_cmaq;

struct tp_conn {
  struct shm_state *st;
  int peer, channel, lpeer;
  int err; /* sticky error of this connection */
  /* send side: our ring in the peer's segment */
  shm_hdr *tx_hdr;
  shm_ring *tx;
  char *tx_base; /* first slot */
  uint64_t tx_nslots, tx_stride, tx_cap;
  uint64_t tx_prod, tx_tail; /* next slot; last tail seen */
  uint64_t tx_msgno;
  int tx_cma;
  int tx_share; /* may write its single-copy sends into the peer itself */
  /* a message being pushed fragment by fragment */
  const char *pend_src;
  uint64_t pend_len, pend_off, pend_frags, pend_msgno, pend_fp;
  uint64_t pend_ready; /* bytes of it that may be pushed */
  uint64_t fwd_msgno;  /* a forward in progress (shm_recv_reduce_fwd) */
  /* single-copy sends not yet acknowledged */
  shm_cmaq *cmaq;
  uint64_t cmaq_head, cmaq_n;
  /* receive side: the peer's ring in our segment */
  shm_ring *rx;
  char *rx_base;
  uint64_t rx_cons, rx_off;
  int rx_shared; /* the current single-copy message's dst is published */
  char *bounce;
  uint64_t cma_sent, cma_recvd;
  uint64_t share_wrote; /* pieces this rank wrote into its peer (tests) */
  uint64_t fwd_frags;   /* fragments reduced straight into a slot (tests) */
};

typedef struct shm_peer {
  int rank, pid, pidfd, dead;
  int pid_ok; /* its pid means the same process here (same pid namespace) */
  shm_hdr *hdr;
  size_t size;
  int can_read; /* we can read its memory */
} shm_peer;

typedef struct shm_state {
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes;
  int npeers;
  int *lidx; /* rank -> local peer index or -1 */
  shm_peer *peers;
  shm_hdr *me;
  size_t me_size;
  char name[64];
  int unlinked;
  tp_conn *conns; /* npeers * nchannels */
  tp_conn **pend; /* connections with a message half pushed */
  int npend;
  size_t cma_threshold;
  int ranks_fit;      /* the host's ranks have a CPU each (shm_ranks_fit) */
  uint32_t lone_bell; /* bell when the rank has no segment */
  uint64_t fp;        /* the call this rank runs (tp_ops.set_fp) */
  /* the mismatch this rank met or was told of (tp_ops.mismatch) */
  tp_mismatch mm;
  int mm_set;
  char why[TP_WHY]; /* the last failure's message (tp_keep) */
} shm_state;

/* The slot of absolute index idx in a ring of n slots, stride bytes apart. */
static inline shm_slot *slot_at(char *base, uint64_t stride, uint64_t n,
                                uint64_t idx) {
  return (shm_slot *)(base + (idx % n) * stride);
}

/* transports/shm.c: pushes the half-pushed messages as far as slots allow. */
void shm_pend_progress(shm_state *st);

/* transports/shm_bell.c: the doorbell, notes on waits and CPUs, liveness
 * (tp_shm's ops of those names) */
uint32_t shm_bell_read(void *state);
void shm_bell_wait(void *state, uint32_t seen, int timeout_us);
void shm_set_fp(void *state, uint64_t fp);
void shm_note_wait(void *state, int on, uint64_t fp);
int shm_peer_wait(void *state, int peer, int *on, uint64_t *fp,
                  uint32_t *epoch);
int shm_quiet(void *state, int peer);
void shm_note_cpu(void *state, int cpu);
int shm_peer_cpu(void *state, int peer);
int shm_check_peers(void *state, int *dead_rank);
void shm_set_cause(void *state, int dead_rank);

/* transports/shm_setup.c: the transport's setup and teardown (tp_shm's) */
/* Bytes of the segment a rank creates (and reserves in /dev/shm) for
 * npeers shm peers, nchannels channels each, nslots slots of slot_bytes;
 * 0 when that overflows. Every rank of a host maps one such segment per
 * communicator. */
uint64_t shm_segment_bytes(int npeers, int nchannels, int nslots,
                           size_t slot_bytes);
int shm_setup(tp_setup *su, const uint8_t *peers, void **state);
void shm_teardown(void *state);

/* transports/shm_told.c: mismatches told between the ranks (tp_shm's
 * mismatch and tell_mismatch), and shm_told: 1 when a peer told this rank
 * of one (recorded with ERR, and kept in st->why). */
int shm_mismatch(void *state, tp_mismatch *m);
void shm_tell_mismatch(void *state, const tp_mismatch *m);
int shm_told(shm_state *st);

/* Overrides BRAID_SHM_CMA (tp_setup's set.shm_cma) for setups that follow:
 * -1 (default) follows the setting, 0 forces copies, 1 allows single-copy
 * where the probe works. */
void shm_force_cma(int mode);
/* Tests: 1 makes a receiver of a shared single-copy message take no piece
 * itself (it waits for the sender to write them all), 0 (default) takes
 * turns. */
void shm_force_share_wait(int on);

/* 1 when messages of at least the CMA threshold from this rank to `peer` go
 * single-copy (the peer can read this process's memory), else 0. */
int shm_peer_cma(void *state, int peer);

/* Messages this connection has sent and received as CMA descriptors. */
uint64_t shm_conn_cma_sent(const tp_conn *c);
uint64_t shm_conn_cma_recvd(const tp_conn *c);
/* Pieces of its single-copy sends this rank wrote into the peer itself. */
uint64_t shm_conn_share_wrote(const tp_conn *c);
/* Fragments recv_reduce_fwd reduced straight into this connection's slots. */
uint64_t shm_conn_fwd_frags(const tp_conn *c);

#endif
