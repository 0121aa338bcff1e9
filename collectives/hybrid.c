/*
 * Hybrid NVLink + PCIe generator: an NVLink plan and a PCIe plan run at the
 * same time, each channel a ring (ring.c's steps), the data split R : 1 with
 * R = BW_NVLink / BW_PCIe, the bandwidth each plan gives one rank.
 *
 *   NVLink plan  multiring's rings (multiring_plan), route SCHED_ROUTE_NVL;
 *                BW_NVLink = the sum of its channels' bottlenecks (every
 *                rank sends on every channel).
 *   PCIe plan    one directed ring over the host paths (PCIe switches and
 *                CPUs, never NVLink nor another GPU), route
 *                SCHED_ROUTE_HOST, whose order loads the busiest PCIe/CPU
 *                link least (exhaustive over orders up to HY_MAX_PERMS).
 *                BW_PCIe = that ring's rate: the GPU's own PCIe link on
 *                DGX-1, used in both directions (every rank sends to the next
 *                and receives from the previous). Running the ring backwards
 *                as well would add nothing (the same links, the same
 *                directions), but two flows on each multi-hop path would
 *                cross each other's hops; instead the ring carries two
 *                channels in the same direction, so that one channel's
 *                message fills a link while the other's waits on its
 *                previous hop (a slice is stored and forwarded).
 * Weights: the NVLink channels share R / (R + 1) in proportion to their
 * bottlenecks, the PCIe channels 1 / (R + 1) equally. With max_channels M,
 * the PCIe ring gets min(2, M - 1) channels and multiring the rest. Needs every
 * rank on a GPU with an NVLink ring plan and a host path to every other rank;
 * NULL otherwise.
 */
#include <stdlib.h>
#include <string.h>

#include "gen_util.h"
#include "view.h"

#define HY_COLLS                                                               \
  ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |                         \
   (1u << SCHED_REDUCE_SCATTER))
/* Ring orders the PCIe plan tries (all of them up to 9 ranks). */
#define HY_MAX_PERMS 50000L

/* Host paths between the ranks: for each ordered pair, its directed links
 * (2 * link id + 0 when crossed from links[l].a to .b, + 1 the other way). */
typedef struct host_paths {
  int n;
  int *hops;   /* n * n: links on the path, -1 when there is none */
  int *dlinks; /* n * n * maxh */
  int maxh;
} host_paths;

static int host_vertex_ok(const topo_graph *g, int v) {
  return g->v[v].type == TOPO_PCI || g->v[v].type == TOPO_CPU;
}

/* Widest path from s to every vertex over PCI and SYS links through PCIe
 * switches and CPUs only (fewest hops among the widest). */
static void widest(const topo_graph *g, int s, double *bw, int *hops, int *pred,
                   int *done) {
  for (int v = 0; v < g->nv; v++) {
    bw[v] = -1;
    hops[v] = 0;
    pred[v] = -1;
    done[v] = 0;
  }
  bw[s] = 1e30;
  for (;;) {
    int u = -1;
    for (int v = 0; v < g->nv; v++)
      if (!done[v] && bw[v] >= 0 &&
          (u < 0 || bw[v] > bw[u] || (bw[v] == bw[u] && hops[v] < hops[u])))
        u = v;
    if (u < 0)
      return;
    done[u] = 1;
    if (u != s && !host_vertex_ok(g, u))
      continue; /* a GPU ends a path; it does not forward */
    for (int i = 0; i < g->v[u].nadj; i++) {
      int l = g->v[u].adj[i];
      const topo_link *lk = &g->links[l];
      if (lk->type != TOPO_LINK_PCI && lk->type != TOPO_LINK_SYS)
        continue;
      int w = topo_other(g, l, u);
      double b = lk->bw < bw[u] ? lk->bw : bw[u];
      if (done[w])
        continue;
      if (b > bw[w] || (b == bw[w] && hops[u] + 1 < hops[w])) {
        bw[w] = b;
        hops[w] = hops[u] + 1;
        pred[w] = l;
      }
    }
  }
}

static void host_paths_free(host_paths *h) {
  free(h->hops);
  free(h->dlinks);
}

static int host_paths_make(const sched_view *v, host_paths *h) {
  const topo_graph *g = v->g;
  int n = v->nranks, nv = g->nv;
  memset(h, 0, sizeof(*h));
  h->n = n;
  h->maxh = nv;
  h->hops = calloc((size_t)n * (size_t)n, sizeof(int));
  h->dlinks = calloc((size_t)n * (size_t)n * (size_t)nv, sizeof(int));
  double *bw = calloc((size_t)nv, sizeof(double));
  int *hops = calloc((size_t)nv, sizeof(int));
  int *pred = calloc((size_t)nv, sizeof(int));
  int *done = calloc((size_t)nv, sizeof(int));
  int rc = -1;
  if (h->hops && h->dlinks && bw && hops && pred && done) {
    rc = 0;
    for (int a = 0; a < n; a++) {
      widest(g, v->vertex[a], bw, hops, pred, done);
      for (int b = 0; b < n; b++) {
        int t = v->vertex[b], k = hops[t];
        if (a == b || bw[t] <= 0) {
          h->hops[a * n + b] = a == b ? 0 : -1;
          continue;
        }
        h->hops[a * n + b] = k;
        int *dl = h->dlinks + ((size_t)a * (size_t)n + (size_t)b) * (size_t)nv;
        for (int x = t; x != v->vertex[a];) {
          int l = pred[x], from = topo_other(g, l, x);
          dl[--k] = 2 * l + (g->links[l].a == from ? 0 : 1);
          x = from;
        }
      }
    }
  }
  free(bw);
  free(hops);
  free(pred);
  free(done);
  if (rc)
    host_paths_free(h);
  return rc;
}

/* The rate of the directed ring `ord` over the host paths' links (the
 * widest link share along it); 0 when a hop has no host path. */
static double ring_rate(const topo_graph *g, const host_paths *h,
                        const int *ord, int *load) {
  int n = h->n;
  memset(load, 0, sizeof(int) * 2 * (size_t)g->nl);
  for (int q = 0; q < n; q++) {
    int a = ord[q], b = ord[(q + 1) % n];
    int k = h->hops[a * n + b];
    if (k < 0)
      return 0;
    const int *dl =
        h->dlinks + ((size_t)a * (size_t)n + (size_t)b) * (size_t)h->maxh;
    for (int i = 0; i < k; i++)
      load[dl[i]]++;
  }
  double x = -1;
  for (int i = 0; i < 2 * g->nl; i++)
    if (load[i] > 0) {
      double r = g->links[i / 2].bw / load[i];
      if (x < 0 || r < x)
        x = r;
    }
  return x > 0 ? x : 0;
}

/* Next permutation of a[0..k) in lexicographic order; 0 after the last. */
static int next_perm(int *a, int k) {
  int i = k - 2;
  while (i >= 0 && a[i] >= a[i + 1])
    i--;
  if (i < 0)
    return 0;
  int j = k - 1;
  while (a[j] <= a[i])
    j--;
  int t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (int l = i + 1, r = k - 1; l < r; l++, r--)
    t = a[l], a[l] = a[r], a[r] = t;
  return 1;
}

/* The PCIe ring: its order in best[]; returns its rate (GB/s), 0 when some
 * hop has no host path, -1 when out of memory. */
static double pcie_ring(const sched_view *v, int *best) {
  int n = v->nranks;
  host_paths h;
  if (host_paths_make(v, &h))
    return -1;
  int *ord = calloc((size_t)n, sizeof(int));
  int *load = malloc(sizeof(int) * 2 * (size_t)(v->g->nl > 0 ? v->g->nl : 1));
  double bestx = -1;
  if (ord && load) {
    for (int q = 0; q < n; q++)
      ord[q] = best[q] = q;
    bestx = 0;
    long tries = 0;
    do {
      double x = ring_rate(v->g, &h, ord, load);
      if (x > bestx * (1 + 1e-9)) {
        bestx = x;
        memcpy(best, ord, sizeof(int) * (size_t)n);
      }
    } while (++tries < HY_MAX_PERMS && n > 2 && next_perm(ord + 1, n - 1));
  }
  free(ord);
  free(load);
  host_paths_free(&h);
  return bestx;
}

sched *gen_hybrid(const gen_params *p) {
  if (!p || (int)p->coll < 0 || p->coll >= SCHED_NUM_COLLS ||
      !(HY_COLLS & (1u << p->coll)) || p->nranks < 2 ||
      p->nranks > GEN_MAX_RANKS || mr_view_check(p->view, p->nranks))
    return NULL;
  const sched_view *v = p->view;
  int n = p->nranks;
  for (int r = 0; r < n; r++)
    if (v->g->v[v->vertex[r]].type != TOPO_GPU)
      return NULL;
  int maxc = p->max_channels > 0 && p->max_channels <= GEN_MAX_CHANNELS
                 ? p->max_channels
                 : GEN_MAX_CHANNELS;
  if (maxc < 2)
    return NULL; /* one channel per plan at least */
  int npcie = maxc >= 3 ? 2 : 1;
  ring_plan nvl, all;
  if (multiring_plan(v, maxc - npcie, &nvl))
    return NULL;
  sched *s = NULL;
  int *pord = calloc((size_t)n, sizeof(int));
  double *w = calloc((size_t)(nvl.nch + npcie), sizeof(double));
  double x = -1, bw_nvl = 0;
  int ok = pord && w && nvl.nch > 0;
  for (int c = 0; ok && c < nvl.nch; c++) {
    ok = nvl.route[c] == SCHED_ROUTE_NVL; /* NVLink rings, not a fallback */
    bw_nvl += nvl.bw[c];
  }
  if (ok)
    x = pcie_ring(v, pord);
  if (ok && x > 0 && bw_nvl > 0 &&
      ring_plan_alloc(&all, n, nvl.nch + npcie) == 0) {
    double R = bw_nvl / x;
    for (int c = 0; c < nvl.nch; c++) {
      ring_plan_add(&all, nvl.order + (size_t)c * (size_t)n, nvl.bw[c],
                    SCHED_ROUTE_NVL, 0);
      w[c] = R / (R + 1) * nvl.bw[c] / bw_nvl;
    }
    for (int c = 0; c < npcie; c++)
      ring_plan_add(&all, pord, x / npcie, SCHED_ROUTE_HOST, 0);
    for (int c = nvl.nch; c < all.nch; c++)
      w[c] = 1.0 / (R + 1) / npcie;
    s = ring_plan_sched(p, &all, w, "hybrid");
    ring_plan_free(&all);
  }
  free(pord);
  free(w);
  ring_plan_free(&nvl);
  return s;
}
