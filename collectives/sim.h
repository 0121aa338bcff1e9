/*
 * The simulator: the time of a schedule on a system graph (DESIGN §1, the
 * third consumer of a schedule).
 *
 * Alpha-beta model with link sharing. Every message of every channel and
 * pipeline slice is a transfer from its sender's vertex to its receiver's
 * along the route the channel asks for (sched_route); each directed link is a
 * resource of its bandwidth, shared by the transfers that cross it at the
 * same time. Ranks on the same vertex copy through that vertex's memory. A
 * message costs the software latency of its class plus the hop latencies,
 * and its sender a posting overhead; a reduction costs gamma per byte at the
 * reducing rank. Steps of a channel run in order per slice, as the executor
 * runs them (src/executor.c), with at most `slots` messages in flight per
 * (sender, receiver, channel). The model, its defaults and the bounds are
 * described in collectives/sim.c, collectives/sim_bound.c and
 * docs/SCHEDULES.md.
 *
 * Bounds (what no schedule can beat on this graph, for these ranks):
 *   allgather / reduce_scatter: the cut bound — every rank (and every host)
 *     must receive (send) what the others hold through its own links;
 *   broadcast / reduce: bytes / min over v of maxflow(root -> v) (Edmonds);
 *   allreduce: the reduce_scatter bound plus the allgather bound on blocks of
 *     bytes / nranks ("both halves").
 */
#ifndef BRAID_COLLECTIVES_SIM_H
#define BRAID_COLLECTIVES_SIM_H

#include <stddef.h>

#include "schedule.h"
#include "view.h"

typedef struct sim_params {
  double alpha_intra_us; /* software latency per message inside a host */
  double alpha_net_us;   /* ... between hosts */
  double gamma_ns;       /* per byte reduced */
  double loc_bw;         /* GB/s of a copy between ranks on one vertex */
  size_t slice_bytes;    /* pipeline slice (the executor's BRAID_SLICE) */
  int slots;             /* messages in flight per connection */
  /* A sender's cost of posting one message (its channel is busy that long
   * after each send), inside a host and across hosts. */
  double overhead_intra_us;
  double overhead_net_us;
} sim_params;

/* Defaults for GPUs (NVLink-class latencies) and for CPU hosts. */
void sim_params_gpu(sim_params *p);
void sim_params_cpu(sim_params *p);

typedef struct sim_result {
  double time_us;    /* predicted time of the call */
  double algbw;      /* GB/s: size / time, nccl-tests' algbw and size (one
                      * block; all nranks blocks for allgather,
                      * reduce_scatter, gather, scatter, alltoall) */
  double busbw;      /* GB/s: algbw x the collective's bus factor */
  double bound_us;   /* the lower bound for this collective on this view */
  double efficiency; /* bound_us / time_us (1 = optimal) */
  size_t messages;   /* transfers simulated */
} sim_result;

/* Simulates `s` for a call whose blocks are `bytes` bytes (count x datatype
 * size) on view v (v->g must be set; v->nranks == s->nranks). BRAID_SUCCESS,
 * or an error with a message (ERR): BRAID_ERR_INVALID_ARG for a schedule or
 * view that cannot run (no route, a deadlock), BRAID_ERR_NOMEM. */
braid_result sim_run(const sched *s, const sched_view *v, size_t bytes,
                     const sim_params *p, sim_result *out);

/* The bound alone (microseconds); root for broadcast/reduce. -1 when the
 * collective has none here (send/recv, or disconnected ranks). */
double sim_bound_us(sched_coll coll, int root, const sched_view *v,
                    size_t bytes, const sim_params *p);

/* nccl-tests' bus bandwidth factor of a collective on n ranks. */
double sim_bus_factor(sched_coll coll, int n);

#endif
