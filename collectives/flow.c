/*
 * Max-flow on small dense capacity graphs (see flow.h): Dinic's algorithm
 * (BFS levels, then blocking flows by depth-first search with per-vertex
 * edge cursors), O(V^2 E) in the worst case and fast on the few hundred
 * vertices of a machine's ranks.
 */
#include "flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "schedule.h"

/* Capacity between two ranks on one vertex (GB/s): a memory copy, far above
 * any link, so that such ranks never limit a flow (sim_params' loc_bw is
 * the simulator's own figure). */
#define FLOW_LOC_BW 1000.0

flow_net *flow_new(int n) {
  if (n < 1)
    return NULL;
  flow_net *f = malloc(sizeof *f);
  if (!f)
    return NULL;
  f->n = n;
  f->cap = calloc((size_t)n * (size_t)n, sizeof(double));
  if (!f->cap) {
    free(f);
    return NULL;
  }
  return f;
}

void flow_free(flow_net *f) {
  if (!f)
    return;
  free(f->cap);
  free(f);
}

typedef struct dinic {
  int n;
  double *r; /* residual capacities */
  int *level, *it, *queue;
  double eps;
} dinic;

static int bfs(dinic *d, int s, int t) {
  int n = d->n, head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    d->level[i] = -1;
  d->level[s] = 0;
  d->queue[tail++] = s;
  while (head < tail) {
    int u = d->queue[head++];
    const double *row = d->r + (size_t)u * n;
    for (int v = 0; v < n; v++)
      if (d->level[v] < 0 && row[v] > d->eps) {
        d->level[v] = d->level[u] + 1;
        d->queue[tail++] = v;
      }
  }
  return d->level[t] >= 0;
}

static double dfs(dinic *d, int u, int t, double pushed) {
  if (u == t)
    return pushed;
  int n = d->n;
  for (; d->it[u] < n; d->it[u]++) {
    int v = d->it[u];
    double c = d->r[(size_t)u * n + v];
    if (c <= d->eps || d->level[v] != d->level[u] + 1)
      continue;
    double got = dfs(d, v, t, pushed < c ? pushed : c);
    if (got > d->eps) {
      d->r[(size_t)u * n + v] -= got;
      d->r[(size_t)v * n + u] += got;
      return got;
    }
  }
  return 0;
}

double flow_maxflow(const flow_net *f, int s, int t) {
  if (!f || s < 0 || t < 0 || s >= f->n || t >= f->n || s == t)
    return 0;
  int n = f->n;
  dinic d = {n, NULL, NULL, NULL, NULL, 0};
  d.r = malloc((size_t)n * n * sizeof(double));
  d.level = malloc((size_t)n * sizeof(int));
  d.it = malloc((size_t)n * sizeof(int));
  d.queue = malloc((size_t)n * sizeof(int));
  double total = 0, maxcap = 0;
  if (!d.r || !d.level || !d.it || !d.queue)
    goto out;
  memcpy(d.r, f->cap, (size_t)n * n * sizeof(double));
  for (size_t i = 0; i < (size_t)n * n; i++) {
    if (d.r[i] < 0)
      d.r[i] = 0;
    if (d.r[i] > maxcap)
      maxcap = d.r[i];
  }
  d.eps = maxcap * 1e-12;
  while (bfs(&d, s, t)) {
    memset(d.it, 0, (size_t)n * sizeof(int));
    double got;
    while ((got = dfs(&d, s, t, INFINITY)) > d.eps)
      total += got;
  }
out:
  free(d.r);
  free(d.level);
  free(d.it);
  free(d.queue);
  return total;
}

double flow_broadcast_rate(const flow_net *f, int root) {
  if (!f || root < 0 || root >= f->n)
    return 0;
  if (f->n == 1)
    return INFINITY;
  double best = INFINITY;
  for (int v = 0; v < f->n; v++) {
    if (v == root)
      continue;
    double m = flow_maxflow(f, root, v);
    if (m < best)
      best = m;
  }
  return best;
}

/* Bandwidth of the NVLink links joining a and b directly (0: none). */
static double nvl_direct(const topo_graph *g, int a, int b) {
  double bw = 0;
  const topo_vertex *va = &g->v[a];
  for (int i = 0; i < va->nadj; i++) {
    const topo_link *k = &g->links[va->adj[i]];
    if (k->type == TOPO_LINK_NVL && topo_other(g, va->adj[i], a) == b)
      bw += k->bw;
  }
  return bw;
}

flow_net *flow_from_view(const sched_view *v, int route) {
  if (!v || !v->g || v->nranks < 1)
    return NULL;
  int n = v->nranks;
  flow_net *f = flow_new(n);
  route_ctx *rc = route_ctx_new(v->g);
  double *nvs_bw = calloc((size_t)n * n, sizeof(double));
  int *nvs_deg = calloc((size_t)n, sizeof(int));
  if (!f || !rc || !nvs_bw || !nvs_deg) {
    flow_free(f);
    f = NULL;
    goto out;
  }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      if (a == b)
        continue;
      int va = v->vertex[a], vb = v->vertex[b];
      if (va < 0 || vb < 0)
        continue;
      if (va == vb) {
        f->cap[(size_t)a * n + b] = FLOW_LOC_BW;
        continue;
      }
      double c = 0;
      if (route != SCHED_ROUTE_HOST) {
        c = nvl_direct(v->g, va, vb);
        if (c <= 0) { /* through NVSwitches: share the port among peers */
          topo_path p;
          if (route_find(rc, va, vb, SCHED_ROUTE_NVL, &p) == 0) {
            nvs_bw[(size_t)a * n + b] = p.bw;
            nvs_deg[a]++;
            topo_path_release(&p);
            continue;
          }
        }
      }
      if (c <= 0 && route != SCHED_ROUTE_NVL) {
        topo_path p;
        if (route_find(rc, va, vb, route, &p) == 0) {
          c = p.bw;
          topo_path_release(&p);
        }
      }
      f->cap[(size_t)a * n + b] = c;
    }
  /* A GPU's NVSwitch port carries what it sends to all its peers through the
   * switch: each of the d peers gets a 1/d share, so the rank's total is the
   * port's bandwidth (and a broadcast through the switch reaches it). */
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (nvs_bw[(size_t)a * n + b] > 0)
        f->cap[(size_t)a * n + b] = nvs_bw[(size_t)a * n + b] / nvs_deg[a];
out:
  route_ctx_free(rc);
  free(nvs_bw);
  free(nvs_deg);
  return f;
}
