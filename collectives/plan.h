/*
 * The planner: how one call runs, decided in one place for the runtime
 * (src/executor.c, src/comm_view.c) and for braid-topo schedule, so that the
 * tool shows what the library runs. A request says what the call is and
 * what the communicator knows (view, settings); plan_select names the
 * generator and plan_params gives it its parameters.
 */
#ifndef BRAID_COLLECTIVES_PLAN_H
#define BRAID_COLLECTIVES_PLAN_H

#include <stddef.h>

#include "collectives/generators.h"
#include "collectives/schedule.h"
#include "collectives/sim.h"
#include "src/log.h" /* braid_result; err_msg() reads the message */

/* The library's channels per call when BRAID_NCHANNELS is unset. */
#define PLAN_DEFAULT_CHANNELS 2
/* A call takes one channel per this many bytes of a block, at least one. */
#define PLAN_BYTES_PER_CHANNEL ((size_t)256 << 10)
/* Above this many ranks, simulating every candidate costs too much (tens of
 * milliseconds at tens of ranks, seconds at a thousand): the cost model
 * decides. */
#define PLAN_SIM_MAX_RANKS 256

typedef struct plan_request {
  sched_coll coll;
  int root;
  int nranks;
  size_t bytes;           /* one block: count times the datatype's size */
  const sched_view *view; /* where the ranks sit (NULL: unknown) */
  int on_gpus;            /* view places the ranks on GPUs of one host */
  const char *algo;       /* the algorithm filter (BRAID_ALGO); NULL: none */
  int transport_class;    /* SELECT_TP_*: the cost model's, without a graph */
  sim_params sim;         /* the simulator's, with a graph */
  int max_channels;       /* the communicator's channels (BRAID_NCHANNELS) */
  /* BRAID_DETERMINISTIC: allreduce, reduce and reduce_scatter only by
   * generators that fold in rank order (plan_det_filter) */
  int deterministic;
} plan_request;

/* A request for coll on view v with the library's defaults (no BRAID_*
 * setting): GPU or CPU simulation parameters after on_gpus, shm's cost
 * model, PLAN_DEFAULT_CHANNELS, no filter. */
void plan_request_defaults(plan_request *rq, sched_coll coll, int nranks,
                           size_t bytes, const sched_view *v, int on_gpus);

/* The power-of-two bucket of a size (0 for 0), and its lower end: the
 * selector decides once per bucket, at its lower end, so every size in a
 * bucket runs the same generator. */
int plan_bucket(size_t bytes);
size_t plan_bucket_bytes(size_t bytes);

/* The generator for the request, chosen for the lower end of rq->bytes'
 * bucket: on a view with a graph (several hosts, or the ranks' GPUs) by
 * simulating every candidate the filter allows (collectives/select.h:
 * select_algo_view; opt-in generators only where the filter names them),
 * elsewhere by the cost model (select_algo); under rq->deterministic,
 * reductions among plan_det_filter's. BRAID_SUCCESS with the generator in
 * *out, or an error with a message (ERR). */
braid_result plan_select(const plan_request *rq, const gen_desc **out);

struct select_filter; /* collectives/select.h */
/* The filter of a reducing collective under BRAID_DETERMINISTIC: what the
 * algorithm filter text `algo` (NULL: none) allows among the generators
 * that fold in rank order (GEN_RANK_ORDER; the opt-in "det" among them,
 * without being named). Where only the filter's default entry applies and
 * it leaves none of them, it is ignored for this collective (*ignored = 1
 * when ignored is not NULL), as select.h ignores a default entry that
 * leaves no algorithm; the collective's own entry ("allreduce:ring") that
 * leaves none is an error. BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG with a
 * message (ERR). */
braid_result plan_det_filter(const char *algo, sched_coll coll,
                             struct select_filter *f, int *ignored);

/* The channels a call with blocks of `bytes` takes: one per
 * PLAN_BYTES_PER_CHANNEL, from 1 to max_channels. */
int plan_channels(size_t bytes, int max_channels);

/* The generator's parameters for the request (channels by plan_channels). */
gen_params plan_params(const plan_request *rq);

/* ---- the path of a call ------------------------------------------------ */

/* How a call runs. */
typedef enum plan_path {
  PLAN_PATH_HOST = 0, /* host buffers: the schedule over the host transports */
  PLAN_PATH_DEVICE,   /* device buffers: the schedule over device transports */
  PLAN_PATH_STAGED,   /* device buffers copied through pinned host memory,
                       * the schedule over the host transports */
  PLAN_PATH_KERNEL,   /* device buffers: the direct (one-shot) schedule,
                       * executed by the collective kernels (their per-chunk
                       * logic, device/kcoll_chunk.h, follows it:
                       * tests/collectives/test_kcoll_direct.c) */
  PLAN_PATH_NUM
} plan_path;

/* "host", "device", "staged", "kernel". */
const char *plan_path_name(plan_path p);

/* BRAID_CUDA_HOST_MAX's default (src/config.c, docs/ENV.md). */
#define PLAN_CUDA_HOST_MAX_DEFAULT ((size_t)32 << 10)

/* Whether the collective kernels run coll (allreduce, reduce, broadcast,
 * allgather, reduce_scatter). */
int plan_kernel_coll(sched_coll coll);

/* The largest buffer of a call on any rank: blocks of `bytes` (count x
 * datatype size) times the most blocks of its input or output (at least
 * one); SIZE_MAX where that overflows. */
size_t plan_call_bytes(sched_coll coll, int nranks, size_t bytes);

/* The size rule of a device-buffer call whose blocks are `bytes` (> 0):
 * PLAN_PATH_KERNEL when the kernels run coll and the call's largest buffer
 * (plan_call_bytes) is at most kernel_max; else PLAN_PATH_STAGED when it is
 * at most host_max (0: never); else PLAN_PATH_DEVICE. *why (when not NULL)
 * says which rule decided, in static text. The runtime (src/exec_plan.c)
 * applies it where the device side allows each path; braid-topo schedule
 * prints it. */
plan_path plan_device_path(sched_coll coll, int nranks, size_t bytes,
                           size_t kernel_max, size_t host_max,
                           const char **why);

#endif
