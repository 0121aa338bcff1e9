/*
 * The simulator's lower bounds (see sim.h): a bandwidth term from cuts and
 * flows, plus a latency floor.
 *
 * Cuts. For every vertex that holds ranks and, on several hosts, for every
 * host, the links crossing the cut carry at least what the collective must
 * move across it; with k of the n ranks inside, blocks of b bytes and cut
 * bandwidth B (per direction):
 *   allgather, reduce_scatter:  (n - k) b / B     (every outside block in)
 *   allreduce:                  2 (n - k) (b / n) / B   (both halves: a
 *                               reduce_scatter and an allgather of b / n)
 *   gather, scatter:            (n - k) b / B around the root, k b / B
 *                               elsewhere
 *   alltoall:                   k (n - k) b / B
 *   broadcast, reduce:          b / B, and b / rate where rate is the min
 *                               over ranks v of maxflow(root -> v) on the
 *                               whole graph (Edmonds' theorem; collectives/
 *                               flow.c), on graphs of at most 512 vertices.
 * Links counted: on one host whose ranks are all joined by NVLink, NVLink
 * only (the fabric a GPU collective runs on, as NCCL does; a schedule that
 * also uses PCIe can then beat the bound, which reads as an efficiency
 * above 1); otherwise every link.
 *
 * Ranks sharing a vertex: what they must copy among themselves through its
 * memory at loc_bw, as the simulator moves it (see mem_term).
 *
 * Latency floor: one message from the root (rank 0 when there is none) to
 * the farthest rank: that class's alpha plus the path's hop latencies.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"
#include "route.h"
#include "sim.h"

#define FLOW_MAX_VERTICES 512

/* Are all ranks GPUs on one host, joined by NVLink (through GPUs or
 * NVSwitches)? */
static int nvl_only(const sched_view *v) {
  const topo_graph *g = v->g;
  if (v->nhosts > 1)
    return 0;
  for (int r = 0; r < v->nranks; r++)
    if (g->v[v->vertex[r]].type != TOPO_GPU)
      return 0;
  char *seen = calloc((size_t)g->nv, 1);
  int *stack = malloc((size_t)g->nv * sizeof(int));
  int ok = seen && stack, n = 0;
  if (ok) {
    stack[n++] = v->vertex[0];
    seen[v->vertex[0]] = 1;
    while (n > 0) {
      int u = stack[--n];
      for (int i = 0; i < g->v[u].nadj; i++) {
        int l = g->v[u].adj[i];
        int w = topo_other(g, l, u);
        if (g->links[l].type == TOPO_LINK_NVL && !seen[w]) {
          seen[w] = 1;
          stack[n++] = w;
        }
      }
    }
    for (int r = 0; r < v->nranks; r++)
      if (!seen[v->vertex[r]])
        ok = 0;
  }
  free(seen);
  free(stack);
  return ok;
}

/* Time (us) to move what `coll` needs across a cut of bandwidth bw holding k
 * of n ranks (with the root inside or not); -1: disconnected. */
static double cut_term(sched_coll coll, int n, int k, int has_root, double b,
                       double bw) {
  if (k <= 0 || k >= n)
    return 0;
  if (!(bw > 0))
    return -1;
  double out = (double)(n - k), in = k;
  switch (coll) {
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
    return out * b / bw * 1e-3;
  case SCHED_ALLREDUCE:
    return 2 * out * (b / n) / bw * 1e-3;
  case SCHED_GATHER:
  case SCHED_SCATTER:
    return (has_root ? out : in) * b / bw * 1e-3;
  case SCHED_ALLTOALL:
    return in * out * b / bw * 1e-3;
  default: /* broadcast, reduce */
    return b / bw * 1e-3;
  }
}

/* Time (us) of the copies among the k ranks that share one vertex: the
 * simulator moves every message between them through the vertex's memory
 * at loc_bw (GB/s), k (k - 1) blocks for allgather, reduce_scatter and
 * alltoall, 2 (k - 1) k / n blocks for allreduce, k - 1 around a root. */
static double mem_term(sched_coll coll, int n, int k, int has_root, double b,
                       double loc_bw) {
  if (k < 2 || !(loc_bw > 0))
    return 0;
  double km = (double)k * (k - 1), copies = 0;
  switch (coll) {
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
  case SCHED_ALLTOALL:
    copies = km;
    break;
  case SCHED_ALLREDUCE:
    copies = 2 * km / n;
    break;
  default: /* rooted */
    copies = has_root ? k - 1 : 0;
    break;
  }
  return copies * b / loc_bw * 1e-3;
}

static double flow_term(const sched_view *v, int root, int only_nvl, double b) {
  const topo_graph *g = v->g;
  if (g->nv > FLOW_MAX_VERTICES)
    return 0;
  flow_net *f = flow_new(g->nv);
  if (!f)
    return 0;
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (only_nvl && k->type != TOPO_LINK_NVL)
      continue;
    f->cap[(size_t)k->a * g->nv + k->b] += k->bw;
    f->cap[(size_t)k->b * g->nv + k->a] += k->bw;
  }
  int rv = v->vertex[root];
  double rate = INFINITY;
  char *done = calloc((size_t)g->nv, 1);
  for (int r = 0; done && r < v->nranks; r++) {
    int u = v->vertex[r];
    if (u == rv || done[u])
      continue;
    done[u] = 1;
    double m = flow_maxflow(f, rv, u);
    if (m < rate)
      rate = m;
  }
  free(done);
  flow_free(f);
  if (rate == INFINITY)
    return 0;
  return rate > 0 ? b / rate * 1e-3 : -1;
}

static double latency_floor(const sched_view *v, int r0, const sim_params *p) {
  route_ctx *rc = route_ctx_new(v->g);
  if (!rc)
    return 0;
  int n = v->nranks, hl = v->host[n - 1], h0 = v->host[r0];
  double worst = 0;
  for (int r = 0; r < n; r++) {
    if (r == r0 || (n > 64 && v->host[r] != h0 && v->host[r] != hl))
      continue;
    double a = v->host[r] == h0 ? p->alpha_intra_us : p->alpha_net_us;
    topo_path tp;
    if (route_find(rc, v->vertex[r0], v->vertex[r], SCHED_ROUTE_ANY, &tp) ==
        0) {
      a += tp.lat_us;
      topo_path_release(&tp);
    }
    if (a > worst)
      worst = a;
  }
  route_ctx_free(rc);
  return worst;
}

double sim_bound_us(sched_coll coll, int root, const sched_view *v,
                    size_t bytes, const sim_params *p) {
  if (!v || !v->g || !p || v->nranks < 1 || (int)coll < 0 ||
      coll >= SCHED_NUM_COLLS || coll == SCHED_SEND || coll == SCHED_RECV)
    return -1;
  int n = v->nranks;
  int rooted = coll == SCHED_BROADCAST || coll == SCHED_REDUCE ||
               coll == SCHED_GATHER || coll == SCHED_SCATTER;
  if (!rooted || root < 0 || root >= n)
    root = 0;
  if (n == 1)
    return 0;
  const topo_graph *g = v->g;
  for (int r = 0; r < n; r++)
    if (v->vertex[r] < 0 || v->vertex[r] >= g->nv)
      return -1;
  int only = nvl_only(v);
  double b = (double)bytes, worst = 0;
  int nh = v->nhosts > 1 ? v->nhosts : 1;
  int *kv = calloc((size_t)g->nv, sizeof(int));
  int *kh = calloc((size_t)nh, sizeof(int));
  double *bh = calloc((size_t)nh, sizeof(double));
  if (!kv || !kh || !bh) {
    worst = -1;
    goto out;
  }
  for (int r = 0; r < n; r++) {
    kv[v->vertex[r]]++;
    if (v->host[r] >= 0 && v->host[r] < nh)
      kh[v->host[r]]++;
  }
  for (int u = 0; u < g->nv && worst >= 0; u++) {
    if (!kv[u])
      continue;
    double bw = 0;
    for (int i = 0; i < g->v[u].nadj; i++) {
      const topo_link *k = &g->links[g->v[u].adj[i]];
      if (!only || k->type == TOPO_LINK_NVL)
        bw += k->bw;
    }
    double t = cut_term(coll, n, kv[u], u == v->vertex[root], b, bw);
    worst = t < 0 ? -1 : t > worst ? t : worst;
    t = mem_term(coll, n, kv[u], u == v->vertex[root], b, p->loc_bw);
    worst = worst >= 0 && t > worst ? t : worst;
  }
  if (nh > 1 && g->nhosts > 1 && worst >= 0) {
    for (int l = 0; l < g->nl; l++) {
      const topo_link *k = &g->links[l];
      int ha = g->v[k->a].type == TOPO_NET ? -1 : g->v[k->a].host;
      int hb = g->v[k->b].type == TOPO_NET ? -1 : g->v[k->b].host;
      if (ha == hb)
        continue;
      if (ha >= 0 && ha < nh)
        bh[ha] += k->bw;
      if (hb >= 0 && hb < nh)
        bh[hb] += k->bw;
    }
    for (int h = 0; h < nh && worst >= 0; h++) {
      double t = cut_term(coll, n, kh[h], h == v->host[root], b, bh[h]);
      worst = t < 0 ? -1 : t > worst ? t : worst;
    }
  }
  if (worst >= 0 && (coll == SCHED_BROADCAST || coll == SCHED_REDUCE)) {
    double t = flow_term(v, root, only, b);
    worst = t < 0 ? -1 : t > worst ? t : worst;
  }
  if (worst >= 0)
    worst += latency_floor(v, root, p);
out:
  free(kv);
  free(kh);
  free(bh);
  return worst;
}
