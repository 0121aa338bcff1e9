/*
 * The transports for device buffers (DESIGN §4), used by src/comm_dev.c:
 *
 * - tp_cuda (cuda_ipc.c): ranks of one host, on one GPU or several. The
 *   receiver owns FIFOs of slots in its device memory, mapped by the senders
 *   through CUDA IPC; counters and lengths live in host shm
 *   (transports/cuda/cuda_fifo.h). Set up like any transport (collective
 *   over the bootstrap); the CUDA device must be current on the calling
 *   thread for setup and for every call.
 * - staged (staged.c): an adapter that carries device buffers over a host
 *   transport's connection (tcp, ofi, ibverbs, shm) through pinned host
 *   memory, pipelined. Created with staged_new over an existing host
 *   transport; it makes no connections of its own.
 */
#ifndef BRAID_TRANSPORTS_CUDA_TP_H
#define BRAID_TRANSPORTS_CUDA_TP_H

#include <stddef.h>

#include "transports/cuda/cuda_fifo.h"
#include "transports/transport.h"

extern const tp_ops tp_cuda;
extern const tp_ops tp_staged; /* setup: use staged_new instead */

/* Makes every copy of a tp_cuda state run on `stream` (the communicator's
 * internal stream), after the kernels that wrote the sources: the copies
 * then keep stream order with the executor's work. NULL: the transport's own
 * streams (one for sends, one for receives). The caller keeps the stream
 * alive until teardown. */
void cuda_tp_set_stream(void *state, void *stream);

/* ---- device memory that peers map (cuda_release.c) -----------------------
 * A rank frees its device memory that peers map through CUDA IPC only once
 * none of them holds a mapping any more (the counts of cuf_held in its
 * segment) or each that still does has exited; until then it stays on a
 * list of this process that later teardowns and setups go through. */

/* Most allocations one release frees: tp_cuda's slots and what it adopted. */
#define CUDA_RELEASE_DEVS 4

/* Frees dev[0..ndev) (cudev_malloc'd; NULL entries skipped) and unmaps seg
 * (this rank's, with the peers' counts) once peers[0..npeers) let go of
 * them: now, or in a later call of this or of cuda_release_sweep. Takes seg
 * (zeroed), the memory and peers (malloc'd; their pidfds are closed). */
void cuda_release(int rank, cuf_seg *seg, void *const *dev, int ndev,
                  cuf_peer *peers, int npeers);
/* Frees what peers have let go of, and what cuda_free_later kept when no
 * stream is held by braid any more; returns how many releases wait still. */
int cuda_release_sweep(void);

/* Work of braid's that holds a CUDA stream until braid's threads act: one
 * more (1) or one less (-1) gate not yet released or collective kernel not
 * yet ended, in this process. */
void cuda_held(int delta);
/* Frees p (cudev_host_alloc'd when pinned, else cudev_malloc'd) now when
 * cuda_held counts nothing, else at the first cuda_release_sweep that finds
 * it so: freeing waits for the whole device, the held streams included. */
void cuda_free_later(void *p, int pinned);
/* How many buffers cuda_free_later keeps and peers' segments whose
 * mappings cuda_close_later keeps (tests). */
int cuda_free_waiting(void);
/* Closes base[0..nbase) (mappings of a peer's memory, cudev_ipc_open'd;
 * NULL entries skipped), then takes drop from the count of this rank
 * (rank) in the peer's segment seg and unmaps it: now when cuda_held counts
 * nothing, else at the first cuda_release_sweep that finds it so. Some
 * drivers wait for the whole device in cudaIpcCloseMemHandle, as in
 * cudaFree (an H100's did). Takes seg (zeroed). */
void cuda_close_later(cuf_seg *seg, int rank, int drop, void *const *base,
                      int nbase);

/* One more (delta 1, before opening it) or one less (-1, once closed)
 * mapping of rank's device memory that this rank holds, counted in rank's
 * segment of a tp_cuda state; BRAID_ERR_INTERNAL when rank is not a peer. */
int cuda_tp_hold(void *state, int rank, int delta);
/* Hands base (a mapping of rank's memory, counted with cuda_tp_hold) to a
 * tp_cuda state, which closes it with its own mappings of rank's memory at
 * teardown and then gives the count back (cuda_close_later);
 * BRAID_ERR_NOMEM when it holds too many (close it and give the count back
 * now), BRAID_ERR_INTERNAL when rank is not a peer. */
int cuda_tp_close_later(void *state, int rank, void *base);
/* Hands dev (this rank's cudev_malloc'd memory, which peers map) to a
 * tp_cuda state, which frees it with its own slots at teardown, once the
 * peers have let go of both; BRAID_ERR_NOMEM when it holds too many. */
int cuda_tp_adopt(void *state, void *dev);

/* The device layer as a copy engine (cuda_ipc.c). */
extern const cuf_engine cuf_cuda_engine;

/* Where the staged adapter finds the host connection of (peer, channel);
 * called lazily, on the first use of each connection. */
typedef tp_conn *(*staged_inner_fn)(void *arg, int peer, int channel);

/* Memory for the pinned staging slots (cudev_host_alloc in the library;
 * tests pass malloc). */
typedef struct staged_mem {
  int (*alloc)(void **p, size_t n);
  void (*free)(void *p);
} staged_mem;

extern const staged_mem staged_pinned; /* cudev_host_alloc / host_free */

typedef struct staged_cfg {
  const tp_ops *inner; /* the host transport */
  void *inner_state;   /* its state (owned by the caller) */
  staged_inner_fn inner_conn;
  void *inner_arg;
  const cuf_engine *eng;
  const staged_mem *mem;
  void *stream; /* stream for the copies (owned by the caller) */
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes;
} staged_cfg;

/* The adapter's state for tp_staged's calls; teardown with
 * tp_staged.teardown (which leaves the inner transport alone). A failure's
 * message is recorded (ERR). */
int staged_new(const staged_cfg *cfg, void **state);

#endif
