/*
 * Max-flow on small capacity graphs, for the bounds (collectives/sim.c) and
 * spanning-tree packing (collectives/treepack.c). Internal to collectives/.
 */
#ifndef BRAID_COLLECTIVES_FLOW_H
#define BRAID_COLLECTIVES_FLOW_H

#include "view.h"

/* A directed capacity graph on n vertices, dense: cap[a * n + b] (GB/s). */
typedef struct flow_net {
  int n;
  double *cap;
} flow_net;

flow_net *flow_new(int n); /* zero capacities; NULL when out of memory */
void flow_free(flow_net *f);
/* Max flow from s to t (Dinic or push-relabel); f is left unchanged. */
double flow_maxflow(const flow_net *f, int s, int t);
/* min over every v != root of maxflow(root -> v): the broadcast rate. */
double flow_broadcast_rate(const flow_net *f, int root);

/* The capacity graph among the ranks of a view: vertex i = rank i,
 * cap[a][b] = bandwidth of the links joining their vertices directly, taking
 * only links of the route's kind (SCHED_ROUTE_NVL: NVLink; HOST: the
 * bottleneck of the host path; ANY: NVLink where there is one, else the
 * best path's bottleneck). NULL when v has no graph. */
flow_net *flow_from_view(const sched_view *v, int route);

#endif
