/*
 * The protocol of the cuda transports without the GPU: FIFOs of slots in
 * device memory whose counters live in host shared memory, the bookkeeping
 * of slots, credits and publications, and liveness. Copies and reductions go
 * through a copy engine (a table of functions): the transports hand it the
 * device layer (device/cuda_dev.h), the unit tests a fake that
 * runs memcpy when the test says so. Nothing here includes CUDA.
 *
 * Layout. Each rank owns one host shm segment per communicator with the
 * control of its INCOMING connections: a header (pid, rank, doorbell, cause,
 * the sender rank of each ring group, and how many mappings of the owner's
 * device memory each of those peers holds), then one ring per (peer,
 * channel): two counters on their own cache lines -- `head` (written by the
 * sender: slots published) and `tail` (written by the receiver: slots
 * released) -- and a 32-byte header per slot (message length, offset and
 * length of the fragment, message number). The slot data is in the
 * receiver's device memory: one region per rank, ring i slot s at
 * (i * nslots + s) * slot_data.
 *
 * Send (cuf_tx): a message takes one slot per slot_data bytes (at least one).
 * For each fragment the sender waits for a free slot (prod - tail < nslots),
 * fills the slot header in host shm, issues the copy src -> peer slot on its
 * stream and records the slot's event. Slots are published in order (head =
 * slot index + 1, release) once their event has completed; a message is done
 * for send_done once its last fragment is published. Pending fragments and
 * publications advance on every call of the transport.
 *
 * Receive (cuf_rx): for each published slot of the current message the
 * receiver checks the header (length mismatch: BRAID_ERR_MISMATCH naming the
 * peer), issues the copy (or reduction) out of the slot and records the
 * slot's event; once the event has completed the slot is released (tail,
 * release order), which is the sender's credit. The receive completes when
 * every fragment is released.
 *
 * Doorbell: as in shm, a 32-bit counter in the owner's header that peers
 * bump after publishing or releasing, with a futex wake only when the owner
 * sleeps.
 */
#ifndef BRAID_TRANSPORTS_CUDA_FIFO_H
#define BRAID_TRANSPORTS_CUDA_FIFO_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/common.h"
#include "transports/transport.h"

#define CUF_MAGIC 0x3170636469617262ULL /* "braidcp1" */
#define CUF_CL 64
#define CUF_ALIGN 256 /* slot data alignment in device memory */

/* ---- copy engine ---------------------------------------------------------
 * Every call returns BRAID_SUCCESS or an error (error() says which call
 * failed); query returns BRAID_SUCCESS when the event's work is done,
 * TP_AGAIN while pending. */
typedef struct cuf_engine {
  int (*copy)(void *dst, const void *src, size_t bytes, void *stream);
  /* dst = a (+) b over bytes / r->elem_size elements */
  int (*reduce)(void *dst, const void *a, const void *b, size_t bytes,
                const tp_reducer *r, void *stream);
  int (*event_new)(void **ev);
  int (*record)(void *ev, void *stream);
  int (*query)(void *ev);
  void (*event_free)(void *ev);
  const char *(*error)(void);
} cuf_engine;

/* ---- host shm layout ----------------------------------------------------- */

typedef struct cuf_hdr {
  uint64_t magic;
  int32_t pid, rank;
  int32_t npeers, nchannels, nslots, pad0;
  uint64_t slot_data;  /* device bytes per slot (multiple of CUF_ALIGN) */
  uint64_t ring_bytes; /* stride between rings */
  uint64_t rings_off;  /* offset of ring 0 */
  uint64_t total;      /* segment size */
  alignas(CUF_CL) _Atomic uint32_t bell;
  alignas(CUF_CL) _Atomic uint32_t sleeping;
  alignas(CUF_CL) _Atomic int32_t cause; /* see shm_hdr.cause */
  /* sender rank of each ring group, then (cuf_held) how many mappings of
   * the owner's device memory each of them holds */
  alignas(CUF_CL) int32_t peer_rank[];
} cuf_hdr;

typedef struct cuf_ring {
  alignas(CUF_CL) _Atomic uint64_t head; /* sender: slots published */
  alignas(CUF_CL) _Atomic uint64_t tail; /* receiver: slots released */
} cuf_ring;

typedef struct cuf_slot {
  uint64_t msg_len, off, frag_len, msgno;
} cuf_slot;

_Static_assert(sizeof(cuf_ring) == 2 * CUF_CL, "ring counters: two lines");
_Static_assert(sizeof(cuf_slot) == 32, "slot header is 32 bytes");

/* A mapped segment (ours or a peer's). */
typedef struct cuf_seg {
  cuf_hdr *hdr;
  size_t size;
  char name[64];
  int owner, unlinked;
} cuf_seg;

/* Creates this rank's segment for npeers senders (peer_rank[i]) x nchannels
 * rings of nslots slots. token names the job in the segment's name. A
 * failure's message is recorded (ERR), as for the calls below. */
int cuf_seg_create(cuf_seg *s, int rank, int npeers, const int32_t *peer_rank,
                   int nchannels, int nslots, uint64_t slot_data,
                   uint64_t token);
/* Maps a peer's segment by name and checks its header. */
int cuf_seg_attach(cuf_seg *s, const char *name, uint64_t size, int rank,
                   int nchannels);
void cuf_seg_unlink(cuf_seg *s);
void cuf_seg_unmap(cuf_seg *s); /* unlinks too when owned */

/* The ring of sender `rank` on `channel` in h, or NULL; *index set to its
 * ring number (for the slot data offset). */
cuf_ring *cuf_ring_of(cuf_hdr *h, int rank, int channel, int *index);
cuf_slot *cuf_ring_slots(cuf_ring *r);

/* How many mappings of h's owner's device memory (CUDA IPC) peer `rank`
 * holds, or NULL when it is not one of h's peers. Only that peer writes
 * it: one more before it opens a mapping, one less once it has closed one,
 * so that the owner frees its memory only when no peer holds any (CUDA
 * leaves freeing memory that another process still maps undefined). */
_Atomic int32_t *cuf_held(cuf_hdr *h, int rank);

void cuf_bell_ring(cuf_hdr *h);
/* Sleeps until h->bell differs from seen, or timeout_us passes. */
void cuf_bell_wait(cuf_hdr *h, uint32_t seen, int timeout_us);

/* ---- one connection -------------------------------------------------------
 * Both sides record a failure's message (ERR) and keep it in why (the
 * transport state's sticky message, TP_WHY bytes: tp_keep), and the failure
 * (sticky) in `failed`: every later call records the message again. */
typedef struct cuf_tx {
  const cuf_engine *eng;
  void *stream;
  int peer, channel;
  char *why;
  int failed;
  cuf_ring *ring;  /* in the receiver's segment */
  cuf_slot *slots; /* its slot headers */
  cuf_hdr *bell;   /* the receiver's header (doorbell) */
  char *data;      /* the receiver's slots, mapped here */
  uint64_t nslots, cap;
  void **ev;      /* per slot */
  uint64_t *last; /* per slot: message number when it ends a message */
  uint64_t prod;  /* slots issued */
  uint64_t pub;   /* slots published */
  uint64_t tail;  /* last tail seen */
  uint64_t msgs;  /* messages accepted */
  uint64_t done;  /* messages fully published */
  /* the message being issued */
  const char *src;
  uint64_t len, off;
  int pushing;
} cuf_tx;

typedef struct cuf_rx {
  const cuf_engine *eng;
  void *stream;
  int peer, channel;
  char *why;
  int failed;
  cuf_ring *ring; /* in our segment */
  cuf_slot *slots;
  cuf_hdr *bell; /* the sender's header (doorbell) */
  char *data;    /* our slots */
  uint64_t nslots, cap;
  void **ev;
  uint64_t issued;   /* slots whose copy-out was issued */
  uint64_t cons;     /* slots released */
  uint64_t off;      /* bytes of the current message issued */
  int all_issued;    /* the last fragment of the message is issued */
  void *stream_used; /* stream of the issued copies (for the events) */
} cuf_rx;

int cuf_tx_init(cuf_tx *t, const cuf_engine *eng, void *stream, cuf_ring *ring,
                cuf_hdr *bell, char *data, uint64_t nslots, uint64_t cap);
void cuf_tx_fini(cuf_tx *t);
/* Publishes completed copies and issues pending fragments. BRAID_SUCCESS or
 * the sticky error. */
int cuf_tx_progress(cuf_tx *t);
/* whole: accept only when every fragment's slot is free, so that all copies
 * reading src are issued before the call returns (isend_copy); a message of
 * more than nslots fragments is accepted fragment by fragment anyway. */
int cuf_tx_isend(cuf_tx *t, const void *src, size_t len, int whole,
                 uint64_t *ticket);
int cuf_tx_send_done(cuf_tx *t, uint64_t ticket);
/* 1 when everything accepted is published. */
int cuf_tx_idle(const cuf_tx *t);

int cuf_rx_init(cuf_rx *x, const cuf_engine *eng, void *stream, cuf_ring *ring,
                cuf_hdr *bell, char *data, uint64_t nslots, uint64_t cap);
void cuf_rx_fini(cuf_rx *x);
/* Receives (r == NULL) or reduces (dst = src (+) message) the next message.
 * stream: where the copies run (NULL: the connection's). Resumable. */
int cuf_rx_recv(cuf_rx *x, const void *src, void *dst, size_t len,
                const tp_reducer *r, void *stream);
/* 1 when a published slot waits to be read. */
int cuf_rx_waiting(const cuf_rx *x);
/* 1 when copies out of slots are still running. */
int cuf_rx_busy(const cuf_rx *x);

/* ---- liveness ------------------------------------------------------------ */

/* A peer process of this host. */
typedef struct cuf_peer {
  int rank, pid, pidfd, dead;
  int pid_ok;   /* same pid namespace: pid means that process */
  cuf_hdr *hdr; /* its segment (its cause), or NULL */
} cuf_peer;

/* Whether p's process has exited (remembered in p->dead); 0 when this
 * process cannot tell (another pid namespace). */
int cuf_peer_gone(cuf_peer *p);

/* Checks peers[0..n) once. A dead peer is reported only when waiting(arg,
 * i) says nothing it published is left unread (waiting may be NULL), as
 * BRAID_ERR_REMOTE with *dead_rank set -- to the cause it recorded when it
 * left because another rank died -- and a message naming both. */
int cuf_peers_check(cuf_peer *peers, int n, int self_rank,
                    int (*waiting)(void *arg, int i), void *arg,
                    int *dead_rank);

#endif
