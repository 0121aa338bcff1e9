/*
 * Device memory on a communicator (src/comm_dev.c): which transport carries
 * device buffers to each peer, the internal CUDA stream, device scratch and
 * pinned staging. Set up on the first call with device buffers; every rank
 * of the communicator sets it up in that same call (a collective step over
 * the bootstrap). Built without CUDA, setup reports BRAID_ERR_UNSUPPORTED.
 */
#ifndef BRAID_SRC_COMM_DEV_H
#define BRAID_SRC_COMM_DEV_H

#include <stddef.h>

#include "src/comm.h"
#include "transports/transport.h"

typedef struct comm_dev {
  int device;     /* this rank's CUDA device */
  void *stream;   /* internal stream for copies and kernels */
  int gpu_vertex; /* this GPU's vertex in c->topo, -1 unknown */
  /* every rank's GPU on c->topo when all are on this host, each on a GPU
   * of its own found by bus id: device calls select and generate on it
   * (src/executor.c); NULL: the communicator's host view */
  struct sched_view *view;
  /* per peer: the transport for device buffers and its state; NULL ops:
   * none (the executor stages the whole call through host memory) */
  const tp_ops **ops;
  void **state;
  /* per peer: the path through host memory, for channels routed
   * SCHED_ROUTE_HOST (hybrid's PCIe share): a same-host peer on CUDA IPC is
   * reached through pinned staging over its host transport instead; any
   * other peer as in ops/state */
  const tp_ops **host_ops;
  void **host_state;
  /* device scratch and pinned host staging, grown on demand (an outgrown
   * buffer is freed at teardown, never during an operation: see
   * src/comm_dev.c, "Device-wide waits") */
  void *scratch;
  size_t scratch_bytes; /* written under c->lock, read atomically */
  void *stage;
  size_t stage_bytes; /* the same */
  /* pre-multiplied sums' products of device inputs (src/premul.c), grown
   * the same way */
  void *premul;
  size_t premul_bytes;
  /* scratch needs the issuing thread knows (src/exec_dev.c), by call */
  struct {
    int coll, root;
    size_t bytes, need;
  } known[8];
  int nknown;
  /* BRAID_CUDA_HOST_MAX as rank 0 has it (every rank uses the same, so
   * all take the same path for a call): device calls whose largest buffer
   * is at most this many bytes run on the host transports through pinned
   * host memory (src/exec_dev.c); 0: never */
  size_t host_max;
  /* slot and pipeline slice of the cuda transport (BRAID_CUDA_BUFFSIZE /
   * BRAID_NSLOTS, rank 0's); channels whose every peer is on it (ipc_all:
   * all ranks on this host over CUDA IPC; not the host-routed channels)
   * slice device buffers by slice_bytes, the others by slice_mixed: the
   * host transports' c->slice_bytes, at most one cuda slot when the job
   * uses cuda anywhere. Every rank derives the same, so both ends of a
   * connection cut messages alike. */
  size_t slot_bytes, slice_bytes, slice_mixed;
  int ipc_all;
  /* the end of the last call on a CUDA stream, and that stream (NULL: the
   * legacy default stream): a call on another stream waits for it first
   * (src/enqueue.c, "Order"); order_set: there is such a call */
  void *order_ev;
  void *order_stream;
  int order_set;
  /* collectives in one kernel (src/exec_kernel.c) when set up: its state,
   * and BRAID_CUDA_KERNEL_MAX as rank 0 has it */
  void *exk;
  size_t kernel_max;
} comm_dev;

/* Sets c->dev up for CUDA device `device`. Collective. */
braid_result comm_dev_setup(braid_comm *c, int device);
void comm_dev_teardown(braid_comm *c);
/* The transport, its state and the connection for device buffers to `peer`
 * on a channel whose route hint is `route` (a sched_route; channel
 * c->nchannels is the point-to-point one), or NULL. */
const tp_ops *comm_dev_ops(braid_comm *c, int peer, int route);
void *comm_dev_state(braid_comm *c, int peer, int route);
tp_conn *comm_dev_conn(braid_comm *c, int peer, int channel, int route);
/* Whether a host-routed channel has reached `peer` through pinned host
 * memory instead of its device transport (once per communicator, logged). */
int comm_dev_host_routed(const braid_comm *c, int peer);
/* The device transports of c->dev (tp_cuda and the staged adapters, each
 * once): sets *ops and *state to the one at or after position i and
 * returns the position to go on from; 0 when none is left (start with
 * i = 0). */
int comm_dev_transports(braid_comm *c, int i, const tp_ops **ops, void **state);
/* The pipeline slice of a device call's channel routed `route` (see
 * slice_bytes above); c->slice_bytes before the device side is set up. */
size_t comm_dev_slice(const braid_comm *c, int route);
/* Device scratch / pinned staging / the products of pre-multiplied sums
 * (device memory), of at least `bytes`. */
braid_result comm_dev_scratch(braid_comm *c, size_t bytes, void **p);
braid_result comm_dev_stage(braid_comm *c, size_t bytes, void **p);
braid_result comm_dev_premul(braid_comm *c, size_t bytes, void **p);
/* Loose staging: device sends and receives before the device side is set
 * up (setup is collective, they are not) stage through pinned memory and a
 * stream of GPU `dev` that the communicator keeps until it ends (src/
 * exec_dev.c). comm_dev_loose makes or grows them to at least `bytes`;
 * another GPU than the first one's is BRAID_ERR_INVALID_ARG (a rank uses
 * one GPU). comm_dev_loose_bytes: how many bytes they hold (0 before the
 * first; no lock needed). comm_dev_loose_free: at the communicator's end. */
braid_result comm_dev_loose(braid_comm *c, int dev, size_t bytes, void **host,
                            void **stream);
size_t comm_dev_loose_bytes(const braid_comm *c);
void comm_dev_loose_free(braid_comm *c);

/* Order across CUDA streams (src/enqueue.c, "Order"): before a call on a
 * CUDA stream puts anything on `stream`, comm_dev_order_after makes it
 * wait for the last call's work when that was on another stream (errors
 * name the call by `name`); once it put everything there,
 * comm_dev_order_mark records the end. No-ops before the device setup. */
braid_result comm_dev_order_after(braid_comm *c, const char *name,
                                  void *stream);
void comm_dev_order_mark(braid_comm *c, void *stream);

/* The GPU of a call's work on a user's stream: the communicator's, or
 * before its device side is set up, the call's buffers'. comm_dev_select
 * (_of) makes it (or dev) current, *mine the caller's, which
 * comm_dev_restore(_of) gives back (src/enqueue.c). */
int comm_dev_of(const braid_comm *c, const exec_op *op);
braid_result comm_dev_select_of(braid_comm *c, const char *name, int dev,
                                int *mine);
braid_result comm_dev_select(braid_comm *c, const char *name, int *mine);
void comm_dev_restore_of(int dev, int mine);
void comm_dev_restore(const braid_comm *c, int mine);

#endif
