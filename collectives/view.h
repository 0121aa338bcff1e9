/*
 * Where a communicator's ranks sit on the system graph: the "topology view"
 * that topology-aware generators, the simulator and the selector read.
 *
 * A view names, for every rank, its vertex in a topo_graph (a GPU, or a CPU
 * vertex for a CPU-only rank; several ranks may share a vertex) and its host.
 * A view without a graph (g == NULL) still carries the host map, which is all
 * the hierarchical generators need.
 */
#ifndef BRAID_COLLECTIVES_VIEW_H
#define BRAID_COLLECTIVES_VIEW_H

#include <stddef.h>

#include "src/log.h" /* braid_result; err_msg() reads the message */
#include "topology/topo.h"

typedef struct sched_view {
  topo_graph *g; /* the machine or cluster; NULL: hosts only */
  int nranks;
  int *vertex; /* per rank: vertex id in g (-1 when g is NULL) */
  int *host;   /* per rank: host number, 0 .. nhosts-1 */
  int nhosts;
  int rails;      /* NICs per host that carry inter-host traffic (>= 1) */
  int owns_graph; /* view_free frees g */
} sched_view;

/* Ranks on the GPUs `gpus[0..ngpus)` (GPU indices, as in GPU3) of every host
 * of g, host after host (rank = host * ngpus + i). gpus NULL: every GPU of
 * the host. A graph from topo_cluster has g->nhosts hosts; others have one.
 * BRAID_SUCCESS with *out set, or an error (*out NULL) whose message names
 * the bad GPU or host when they do not exist. */
braid_result view_gpus(topo_graph *g, const int *gpus, int ngpus,
                       sched_view **out);
/* The view of a CPU-only job: `nranks` ranks on hosts host[r] (NULL: all on
 * host 0). With g NULL, the view carries the host map only. With g set (one
 * host's graph, or a cluster of nhosts), every rank sits on its host's first
 * CPU vertex. BRAID_SUCCESS with *out set, or an error (*out NULL). */
braid_result view_hosts(topo_graph *g, int nranks, const int *host,
                        sched_view **out);
void view_free(sched_view *v);
/* Ranks on host h, in rank order (returns the count; ranks may be NULL). */
int view_host_ranks(const sched_view *v, int h, int *ranks);

#endif
