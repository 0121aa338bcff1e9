/*
 * Hybrid NVLink + PCIe generator: an NVLink plan and a PCIe plan run at the
 * same time, each channel a ring (ring.c's steps), the data split R : 1 with
 * R = BW_NVLink / BW_PCIe, the bandwidth each plan gives one rank.
 *
 *   NVLink plan  multiring's rings (multiring_plan), route SCHED_ROUTE_NVL;
 *                BW_NVLink = the sum of its channels' bottlenecks (every
 *                rank sends on every channel).
 *   PCIe plan    one directed ring over the host paths (route_find's
 *                SCHED_ROUTE_HOST: staged through the GPUs' CPUs as the
 *                runtime does, never NVLink nor another GPU), whose order
 *                loads the busiest PCIe/CPU link least (exhaustive over
 *                orders up to HY_MAX_PERMS). BW_PCIe = that ring's rate: on
 *                DGX-1 half a PCIe switch's uplink, which carries its two
 *                GPUs' sends one way and their receives the other. Running
 *                the ring backwards as well would add nothing (the same
 *                links, the same directions), but two flows on each
 *                multi-hop path would cross each other's hops; instead the
 *                ring carries two channels in the same direction, so that
 *                one channel's message fills a link while the other's waits
 *                on its previous hop (a slice is stored and forwarded).
 * Weights: the NVLink channels share R / (R + 1) in proportion to their
 * bottlenecks, the PCIe channels 1 / (R + 1) equally. With max_channels M,
 * the PCIe ring gets min(2, M - 1) channels and multiring the rest. Needs every
 * rank on a GPU with an NVLink ring plan and a host path to every other rank;
 * refuses otherwise.
 */
#include <stdlib.h>
#include <string.h>

#include "gen_util.h"
#include "route.h"
#include "view.h"

/* Ring orders the PCIe plan tries (all of them up to 9 ranks). */
#define HY_MAX_PERMS 50000L

/* Host paths between the ranks (route_find's SCHED_ROUTE_HOST: staged
 * through the GPUs' CPUs, as the runtime takes them), one per ordered pair
 * (a * n + b); nhops < 0 when there is none. */
typedef struct host_paths {
  int n;
  topo_path *p;
} host_paths;

static void host_paths_free(host_paths *h) {
  for (int i = 0; h->p && i < h->n * h->n; i++)
    topo_path_release(&h->p[i]);
  free(h->p);
}

static braid_result host_paths_make(const sched_view *v, host_paths *h) {
  int n = v->nranks;
  h->n = n;
  h->p = calloc((size_t)n * (size_t)n, sizeof(topo_path));
  route_ctx *rc = route_ctx_new(v->g);
  int rc_ok = h->p != NULL && rc != NULL;
  for (int a = 0; rc_ok && a < n; a++)
    for (int b = 0; b < n; b++) {
      topo_path *tp = &h->p[a * n + b];
      if (a != b &&
          route_find(rc, v->vertex[a], v->vertex[b], SCHED_ROUTE_HOST, tp) != 0)
        tp->nhops = -1;
    }
  route_ctx_free(rc);
  if (!rc_ok) {
    host_paths_free(h);
    return ERR(BRAID_ERR_NOMEM,
               "hybrid: no memory for the host paths of %d ranks", n);
  }
  return BRAID_SUCCESS;
}

/* The rate of the directed ring `ord` over the host paths' links (the
 * widest link share along it, each link counted per direction); 0 when a
 * hop has no host path. */
static double ring_rate(const topo_graph *g, const host_paths *h,
                        const int *ord, int *load) {
  int n = h->n;
  memset(load, 0, sizeof(int) * 2 * (size_t)g->nl);
  for (int q = 0; q < n; q++) {
    const topo_path *tp = &h->p[ord[q] * n + ord[(q + 1) % n]];
    if (tp->nhops < 0)
      return 0;
    for (int i = 0; i < tp->nhops; i++) {
      int l = tp->links[i];
      load[2 * l + (g->links[l].a == tp->verts[i] ? 0 : 1)]++;
    }
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

/* The PCIe ring: its order in best[], its rate (GB/s) in *rate (0 when
 * some hop has no host path). BRAID_SUCCESS or BRAID_ERR_NOMEM. */
static braid_result pcie_ring(const sched_view *v, int *best, double *rate) {
  int n = v->nranks;
  host_paths h;
  CHECKR(host_paths_make(v, &h));
  int *ord = calloc((size_t)n, sizeof(int));
  int *load = malloc(sizeof(int) * 2 * (size_t)(v->g->nl > 0 ? v->g->nl : 1));
  double bestx = 0;
  braid_result r = BRAID_SUCCESS;
  if (!ord || !load) {
    r = ERR(BRAID_ERR_NOMEM, "hybrid: no memory to search a PCIe ring");
  } else {
    for (int q = 0; q < n; q++)
      ord[q] = best[q] = q;
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
  *rate = bestx;
  return r;
}

/* The NVLink plan nvl and the PCIe ring pord of rate x as one ring plan,
 * with the channels' weights in w, into *out. */
static braid_result hybrid_sched(const gen_params *p, const ring_plan *nvl,
                                 double bw_nvl, const int *pord, double x,
                                 int npcie, double *w, sched **out) {
  int n = p->nranks;
  ring_plan all;
  CHECKR(ring_plan_alloc(&all, n, nvl->nch + npcie));
  double R = bw_nvl / x;
  for (int c = 0; c < nvl->nch; c++) {
    ring_plan_add(&all, nvl->order + (size_t)c * (size_t)n, nvl->bw[c],
                  SCHED_ROUTE_NVL, 0);
    w[c] = R / (R + 1) * nvl->bw[c] / bw_nvl;
  }
  for (int c = 0; c < npcie; c++)
    ring_plan_add(&all, pord, x / npcie, SCHED_ROUTE_HOST, 0);
  for (int c = nvl->nch; c < all.nch; c++)
    w[c] = 1.0 / (R + 1) / npcie;
  braid_result r = ring_plan_sched(p, &all, w, "hybrid", out);
  ring_plan_free(&all);
  return r;
}

braid_result gen_hybrid(const gen_params *p, sched **out) {
  *out = NULL;
  if (!p)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  gen_params q = *p;
  q.nchannels = 1; /* the plans decide the channels */
  CHECKR(gen_check(&q, &gen_hybrid_desc));
  CHECKR(gen_check_view(p, &gen_hybrid_desc));
  if (p->nranks < 2)
    return gen_refuse("hybrid needs two ranks or more");
  const sched_view *v = p->view;
  int n = p->nranks;
  for (int r = 0; r < n; r++)
    if (v->g->v[v->vertex[r]].type != TOPO_GPU)
      return gen_refuse("hybrid needs every rank on a GPU (rank %d is not)", r);
  int maxc = p->max_channels > 0 && p->max_channels <= GEN_MAX_CHANNELS
                 ? p->max_channels
                 : GEN_MAX_CHANNELS;
  if (maxc < 2) /* one channel per plan at least */
    return gen_refuse("hybrid needs two channels or more (%d allowed)", maxc);
  int npcie = maxc >= 3 ? 2 : 1;
  ring_plan nvl;
  braid_result r = multiring_plan(v, maxc - npcie, &nvl);
  if (r != BRAID_SUCCESS)
    return ERR_WRAP(r, "hybrid");
  int *pord = calloc((size_t)n, sizeof(int));
  double *w = calloc((size_t)(nvl.nch + npcie), sizeof(double));
  double x = 0, bw_nvl = 0;
  int nvlink = nvl.nch > 0;
  for (int c = 0; c < nvl.nch; c++) {
    nvlink &= nvl.route[c] == SCHED_ROUTE_NVL; /* not a fallback */
    bw_nvl += nvl.bw[c];
  }
  if (!pord || !w)
    r = ERR(BRAID_ERR_NOMEM, "hybrid: no memory for the plans of %d ranks", n);
  else if (!nvlink || !(bw_nvl > 0))
    r = gen_refuse("hybrid: no NVLink ring through every rank");
  else
    r = pcie_ring(v, pord, &x);
  if (r == BRAID_SUCCESS && !(x > 0))
    r = gen_refuse("hybrid: no ring over host paths through every rank");
  if (r == BRAID_SUCCESS)
    r = hybrid_sched(p, &nvl, bw_nvl, pord, x, npcie, w, out);
  free(pord);
  free(w);
  ring_plan_free(&nvl);
  return r;
}

const gen_desc gen_hybrid_desc = {
    .name = "hybrid",
    .fn = gen_hybrid,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER)),
    .needs = GEN_NEEDS_GRAPH,
    .flags = GEN_OPT_IN,
    .cost = NULL,
};
