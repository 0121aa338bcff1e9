/*
 * Simulator, bounds, max-flow, views and selection on views: closed forms on
 * hand-made graphs, link sharing, pipelining, routes, the bounds of DGX-1,
 * the selector's pick against every generator on every machine model, and
 * how tree and ring scale across DGX-H100 hosts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "collectives/flow.h"
#include "collectives/generators.h"
#include "collectives/plan.h"
#include "collectives/route.h"
#include "collectives/select.h"
#include "collectives/sim.h"
#include "collectives/view.h"
#include "src/log.h"
#include "tests/collectives/gen_try.h"

/* n GPUs in a ring of NVLinks of bw GB/s and lat us each. */
static topo_graph *ring_graph(int n, double bw, double lat) {
  topo_graph *g = topo_graph_new("ring");
  cr_assert_not_null(g);
  for (int i = 0; i < n; i++)
    cr_assert_geq(topo_add_vertex(g, TOPO_GPU, NULL), 0);
  for (int i = 0; i < n; i++)
    cr_assert_geq(topo_add_link(g, topo_nth(g, TOPO_GPU, i),
                                topo_nth(g, TOPO_GPU, (i + 1) % n),
                                TOPO_LINK_NVL, bw, lat, 1),
                  0);
  return g;
}

static topo_graph *model(const char *name) {
  topo_graph *g = NULL;
  cr_assert_eq(topo_model_load(name, &g), BRAID_SUCCESS, "%s: %s", name,
               err_msg());
  return g;
}

static sched *gen(const char *name, sched_coll coll, const sched_view *v,
                  int root, int nch, size_t bytes) {
  const gen_desc *d = gen_find(name);
  cr_assert_not_null(d, "%s", name);
  gen_params gp = {coll, v->nranks, root, nch, v, bytes, 0};
  sched *s = gen_try(d->fn, &gp);
  cr_assert_not_null(s, "%s %s on %d ranks", name, sched_coll_name(coll),
                     v->nranks);
  return s;
}

static double sim_time(const sched *s, const sched_view *v, size_t bytes,
                       const sim_params *p) {
  sim_result r;
  cr_assert_eq(sim_run(s, v, bytes, p, &r), 0, "%s: %s", s->algo, err_msg());
  cr_assert_gt(r.time_us, 0);
  return r.time_us;
}

/* A one-step transfer from rank 0 to rank 1 on each channel, with routes. */
static sched *pair_sched(int nch, const uint8_t *routes) {
  sched *s;
  cr_assert_eq(sched_new(SCHED_BROADCAST, 2, 0, 1, nch, "pair", &s),
               BRAID_SUCCESS);
  cr_assert_not_null(s);
  for (int c = 0; c < nch; c++) {
    s->route[c] = routes[c];
    cr_assert_eq(
        sched_send(sched_chan(s, 0, c), 1, sched_ck(SCHED_BUF_IN, 0, 1)), 0);
    cr_assert_eq(
        sched_recv(sched_chan(s, 1, c), 0, sched_ck(SCHED_BUF_OUT, 0, 1)), 0);
  }
  return s;
}

/* ---- max-flow ------------------------------------------------------------ */

Test(sim, flow_known_networks) {
  /* CLRS's example network: max flow 23. */
  flow_net *f = flow_new(6);
  cr_assert_not_null(f);
  double e[][3] = {{0, 1, 16}, {0, 2, 13}, {1, 3, 12}, {2, 1, 4}, {2, 4, 14},
                   {3, 2, 9},  {3, 5, 20}, {4, 3, 7},  {4, 5, 4}};
  for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
    f->cap[(int)e[i][0] * 6 + (int)e[i][1]] = e[i][2];
  cr_assert_float_eq(flow_maxflow(f, 0, 5), 23.0, 1e-9);
  cr_assert_float_eq(flow_maxflow(f, 0, 5), 23.0, 1e-9, "f is unchanged");
  cr_assert_float_eq(flow_maxflow(f, 5, 0), 0.0, 1e-9);
  flow_free(f);
  /* A star: the broadcast rate from the hub is the thinnest spoke; from a
   * leaf, its own spoke. */
  f = flow_new(4);
  double spoke[] = {0, 10, 20, 30};
  for (int i = 1; i < 4; i++)
    f->cap[i] = f->cap[i * 4] = spoke[i];
  cr_assert_float_eq(flow_broadcast_rate(f, 0), 10.0, 1e-9);
  cr_assert_float_eq(flow_broadcast_rate(f, 3), 10.0, 1e-9);
  flow_free(f);
}

Test(sim, flow_from_view_dgx1) {
  topo_graph *g = model("dgx1-v100");
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  flow_net *f = flow_from_view(v, SCHED_ROUTE_NVL);
  cr_assert_not_null(f);
  /* NVLink capacities are the links' bandwidths, from the link list. */
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (k->type != TOPO_LINK_NVL)
      continue;
    int a = g->v[k->a].index, b = g->v[k->b].index;
    cr_assert_float_eq(f->cap[a * 8 + b], k->bw, 1e-9);
  }
  /* Every GPU has six 25 GB/s lanes: the broadcast rate is 150 GB/s. */
  cr_assert_float_eq(flow_broadcast_rate(f, 0), 150.0, 1e-6);
  flow_free(f);
  /* The host route avoids NVLink: PCIe bottlenecks only. */
  f = flow_from_view(v, SCHED_ROUTE_HOST);
  cr_assert_not_null(f);
  double pcie = topo_pcie_bw(8.0, 16);
  for (int i = 0; i < 64; i++)
    cr_assert(i / 8 == i % 8 || fabs(f->cap[i] - pcie) < 1e-6, "cap %d: %g", i,
              f->cap[i]);
  flow_free(f);
  view_free(v);
  topo_graph_free(g);
  /* Through an NVSwitch a GPU's port is shared by its peers, so its
   * broadcast rate is the port's bandwidth. */
  g = model("dgx-a100");
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  int l = topo_link_between(g, v->vertex[0], topo_nth(g, TOPO_NVS, 0));
  cr_assert_geq(l, 0);
  f = flow_from_view(v, SCHED_ROUTE_ANY);
  cr_assert_not_null(f);
  cr_assert_float_eq(flow_broadcast_rate(f, 3), g->links[l].bw, 1e-6);
  flow_free(f);
  view_free(v);
  topo_graph_free(g);
}

/* ---- views -----------------------------------------------------------------
 */

Test(sim, views) {
  topo_graph *h = model("dgx-h100"), *g = NULL;
  cr_assert_eq(topo_cluster(h, 3, 0, &g), BRAID_SUCCESS, "%s", err_msg());
  int gpus[] = {2, 5};
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, gpus, 2, &v), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(v->nranks, 6);
  cr_assert_eq(v->nhosts, 3);
  cr_assert_eq(v->rails, 8);
  cr_assert_str_eq(g->v[v->vertex[3]].name, "h1.GPU5");
  cr_assert_eq(v->host[3], 1);
  int ranks[8];
  cr_assert_eq(view_host_ranks(v, 2, ranks), 2);
  cr_assert_eq(ranks[0], 4);
  cr_assert_eq(ranks[1], 5);
  view_free(v);
  int bad[] = {0, 9};
  cr_assert_eq(view_gpus(g, bad, 2, &v), BRAID_ERR_INVALID_ARG);
  cr_assert_null(v);
  cr_assert(strstr(err_msg(), "GPU 9"), "%s", err_msg());
  int hosts[] = {0, 2, 2, 1};
  cr_assert_eq(view_hosts(g, 4, hosts, &v), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g->v[v->vertex[1]].name, "h2.CPU0");
  cr_assert_eq(view_host_ranks(v, 2, NULL), 2);
  view_free(v);
  int far[] = {0, 3};
  cr_assert_eq(view_hosts(g, 2, far, &v), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "host 3"), "%s", err_msg());
  cr_assert_eq(view_hosts(NULL, 4, hosts, &v), BRAID_SUCCESS, "%s",
               err_msg()); /* host map only */
  cr_assert_eq(v->nhosts, 3);
  cr_assert_eq(v->vertex[0], -1);
  view_free(v);
  topo_graph_free(g);
  topo_graph_free(h);
}

/* ---- the model -------------------------------------------------------------
 */

Test(sim, ring_allreduce_closed_form) {
  const int n = 8;
  const double bw = 20.0, lat = 0.7;
  topo_graph *g = ring_graph(n, bw, lat);
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  p.gamma_ns = 0;
  size_t sizes[] = {8 * 1000, 8u << 20, 96u << 20};
  for (size_t i = 0; i < 3; i++) {
    size_t bytes = sizes[i];
    p.slice_bytes = bytes; /* one slice: no pipelining within a step */
    sched *s = gen("ring", SCHED_ALLREDUCE, v, 0, 1, bytes);
    double t = sim_time(s, v, bytes, &p);
    double want = 2.0 * (n - 1) / n * (double)bytes / (bw * 1e3) +
                  2.0 * (n - 1) * (p.alpha_intra_us + lat);
    cr_assert(fabs(t - want) < 0.03 * want, "%zu B: sim %.3f us, closed %.3f",
              bytes, t, want);
    sched_free(s);
  }
  view_free(v);
  topo_graph_free(g);
}

Test(sim, link_sharing) {
  /* GPU0 - GPU1 by one NVLink, and by PCIe through a CPU at the same
   * bandwidth: two channels both on NVLink share it and take twice as long
   * as one on NVLink and one on PCIe. */
  topo_graph *g = topo_graph_new("pair");
  int g0 = topo_add_vertex(g, TOPO_GPU, NULL);
  int g1 = topo_add_vertex(g, TOPO_GPU, NULL);
  int c0 = topo_add_vertex(g, TOPO_CPU, NULL);
  cr_assert_geq(topo_add_link(g, g0, g1, TOPO_LINK_NVL, 20, 0.5, 1), 0);
  cr_assert_geq(topo_add_link(g, g0, c0, TOPO_LINK_PCI, 20, 0.5, 1), 0);
  cr_assert_geq(topo_add_link(g, g1, c0, TOPO_LINK_PCI, 20, 0.5, 1), 0);
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  size_t bytes = 256u << 20;
  uint8_t same[] = {SCHED_ROUTE_NVL, SCHED_ROUTE_NVL};
  uint8_t apart[] = {SCHED_ROUTE_NVL, SCHED_ROUTE_HOST};
  uint8_t any[] = {SCHED_ROUTE_ANY, SCHED_ROUTE_ANY};
  sched *s1 = pair_sched(2, same), *s2 = pair_sched(2, apart);
  sched *s3 = pair_sched(2, any);
  double t1 = sim_time(s1, v, bytes, &p), t2 = sim_time(s2, v, bytes, &p);
  double t3 = sim_time(s3, v, bytes, &p);
  cr_assert(fabs(t1 / t2 - 2.0) < 0.05, "shared %.1f us, disjoint %.1f us", t1,
            t2);
  cr_assert(fabs(t1 - (double)bytes / 20e3) < 0.02 * t1, "%.1f us", t1);
  cr_assert(fabs(t3 - t1) < 0.01 * t1, "ANY takes the NVLink: %.1f vs %.1f", t3,
            t1);
  sched_free(s1);
  sched_free(s2);
  sched_free(s3);
  view_free(v);
  topo_graph_free(g);
}

Test(sim, routes_host_avoids_nvlink) {
  topo_graph *g = model("dgx1-v100");
  int gpus[] = {0, 1};
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, gpus, 2, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  size_t bytes = 64u << 20;
  uint8_t nvl[] = {SCHED_ROUTE_NVL}, host[] = {SCHED_ROUTE_HOST};
  sched *a = pair_sched(1, nvl), *b = pair_sched(1, host);
  double ta = sim_time(a, v, bytes, &p), tb = sim_time(b, v, bytes, &p);
  /* GPU0-GPU1 is one NVLink lane (25 GB/s); the host path is PCIe gen3. */
  double pcie = topo_pcie_bw(8.0, 16);
  cr_assert(tb > ta, "PCIe %.1f us, NVLink %.1f us", tb, ta);
  cr_assert(fabs(tb - (double)bytes / (pcie * 1e3)) < 0.05 * tb, "%.1f us", tb);
  cr_assert(fabs(ta - (double)bytes / 25e3) < 0.05 * ta, "%.1f us", ta);
  view_free(v);
  topo_graph_free(g);
  /* No NVLink at all: an NVLink route is an error that says so. */
  g = model("pcie-4gpu");
  cr_assert_eq(view_gpus(g, gpus, 2, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_result r;
  cr_assert_eq(sim_run(a, v, bytes, &p, &r), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "nvl") && strstr(err_msg(), "rank 0"), "%s",
            err_msg());
  cr_assert_eq(sim_run(b, v, bytes, &p, &r), 0, "%s", err_msg());
  sched_free(a);
  sched_free(b);
  view_free(v);
  topo_graph_free(g);
}

/* The host route between two GPUs is the runtime's staging path
 * (transports/cuda/staged.c): up to the sender's CPU, across the
 * inter-socket link when the receiver's CPU is another, down to the
 * receiver; never over NVLink nor through a GPU, and no link crossed twice
 * in one direction. */
Test(sim, host_route_stages_through_cpus) {
  topo_graph *g = model("dgx1-v100");
  route_ctx *rc = route_ctx_new(g);
  cr_assert_not_null(rc);
  int cpu0 = topo_find(g, "CPU0"), cpu1 = topo_find(g, "CPU1");
  cr_assert(cpu0 >= 0 && cpu1 >= 0);
  static const struct {
    int a, b, via0, via1;
  } cases[] = {{0, 1, 1, 0}, {0, 4, 1, 1}, {5, 6, 0, 1}, {7, 2, 1, 1}};
  int *used = calloc(2 * (size_t)g->nl, sizeof(int));
  cr_assert_not_null(used);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int a = topo_nth(g, TOPO_GPU, cases[k].a);
    int b = topo_nth(g, TOPO_GPU, cases[k].b);
    topo_path tp;
    cr_assert_eq(route_find(rc, a, b, SCHED_ROUTE_HOST, &tp), 0);
    cr_assert_eq(tp.verts[0], a);
    cr_assert_eq(tp.verts[tp.nhops], b);
    memset(used, 0, 2 * (size_t)g->nl * sizeof(int));
    int seen0 = 0, seen1 = 0;
    for (int i = 0; i < tp.nhops; i++) {
      const topo_link *l = &g->links[tp.links[i]];
      cr_assert_neq(l->type, TOPO_LINK_NVL);
      cr_assert((l->a == tp.verts[i] && l->b == tp.verts[i + 1]) ||
                (l->b == tp.verts[i] && l->a == tp.verts[i + 1]));
      int d = 2 * tp.links[i] + (l->a == tp.verts[i] ? 0 : 1);
      cr_assert_eq(used[d]++, 0, "GPU%d to GPU%d crosses link %d twice",
                   cases[k].a, cases[k].b, tp.links[i]);
      seen0 += tp.verts[i] == cpu0;
      seen1 += tp.verts[i] == cpu1;
      if (i > 0)
        cr_assert_neq(g->v[tp.verts[i]].type, TOPO_GPU);
    }
    cr_assert(seen0 == cases[k].via0 && seen1 == cases[k].via1,
              "GPU%d to GPU%d: CPU0 %d times, CPU1 %d times", cases[k].a,
              cases[k].b, seen0, seen1);
    cr_assert_float_eq(tp.bw, topo_pcie_bw(8.0, 16), 1e-6);
    topo_path_release(&tp);
  }
  free(used);
  route_ctx_free(rc);
  topo_graph_free(g);
}

/* Four GPUs under one PCIe switch, all-to-all on two channels: every GPU's
 * link carries three blocks each way, on paths of two hops that share
 * their links with different partners. A message waits for each link of its
 * path in turn, not for all of them to be free at once, so no link idles
 * while another holds its message up: the run takes the busiest link's load
 * (waiting for all links at once took twice that). */
Test(sim, multi_hop_paths_keep_links_busy) {
  topo_graph *g = topo_graph_new("star");
  cr_assert_not_null(g);
  int sw = topo_add_vertex(g, TOPO_PCI, NULL);
  for (int i = 0; i < 4; i++)
    cr_assert_geq(topo_add_link(g, topo_add_vertex(g, TOPO_GPU, NULL), sw,
                                TOPO_LINK_PCI, 20, 0.5, 1),
                  0);
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  size_t bytes = 64u << 20; /* a block: each rank sends 3, receives 3 */
  sched *s = gen("direct", SCHED_ALLTOALL, v, 0, 2, bytes);
  double t = sim_time(s, v, bytes, &p);
  double bound = 3.0 * (double)bytes / 20e3;
  cr_log_info("all-to-all on a PCIe star: %.1f us, the busiest link %.1f us", t,
              bound);
  cr_assert(t >= bound && t < 1.1 * bound, "%.1f us, the busiest link %.1f us",
            t, bound);
  sched_free(s);
  view_free(v);
  topo_graph_free(g);
}

Test(sim, pipelining) {
  /* A chain broadcast of 64 MiB over 8 GPUs: cutting it into more slices
   * pays off while the pipeline's fill dominates, then flattens. */
  topo_graph *g = ring_graph(8, 50, 0.5);
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  size_t bytes = 64u << 20;
  sched *s = gen("ring", SCHED_BROADCAST, v, 0, 1, bytes);
  double t[9];
  for (int k = 0; k <= 8; k++) { /* 1, 2, 4, ... 256 slices */
    p.slice_bytes = bytes >> k;
    t[k] = sim_time(s, v, bytes, &p);
  }
  for (int k = 1; k <= 4; k++)
    cr_assert_lt(t[k], 0.8 * t[k - 1], "%d slices %.1f us, %d: %.1f us", 1 << k,
                 t[k], 1 << (k - 1), t[k - 1]);
  cr_assert_lt(t[0] / t[6], 10.0 / 1.1); /* n - 1 = 7 hops: at most ~7x */
  cr_assert_gt(t[7] / t[6], 0.85, "64 slices %.1f us, 128: %.1f us", t[6],
               t[7]);
  cr_assert_gt(t[8] / t[7], 0.85, "128 slices %.1f us, 256: %.1f us", t[7],
               t[8]);
  sched_free(s);
  view_free(v);
  topo_graph_free(g);
}

Test(sim, rejects_bad_input) {
  topo_graph *g = model("dgx1-v100");
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  gen_params gp = {SCHED_ALLREDUCE, 4, 0, 1, NULL, 0, 0};
  sched *s = gen_try(gen_ring, &gp);
  sim_result r;
  cr_assert_eq(sim_run(s, v, 1024, &p, &r), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "4 ranks") && strstr(err_msg(), "8"), "%s",
            err_msg());
  sched_free(s);
  /* Both ranks receive first: a deadlock, named. */
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 8, 0, 1, 1, "stuck", &s),
               BRAID_SUCCESS);
  cr_assert_eq(
      sched_recv(sched_chan(s, 0, 0), 1, sched_ck(SCHED_BUF_OUT, 0, 1)), 0);
  cr_assert_eq(
      sched_recv(sched_chan(s, 1, 0), 0, sched_ck(SCHED_BUF_OUT, 0, 1)), 0);
  cr_assert_eq(sim_run(s, v, 1024, &p, &r), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "deadlock") && strstr(err_msg(), "rank 0"), "%s",
            err_msg());
  sched_free(s);
  /* A message nobody receives. */
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 8, 0, 1, 1, "lost", &s),
               BRAID_SUCCESS);
  cr_assert_eq(sched_send(sched_chan(s, 3, 0), 4, sched_ck(SCHED_BUF_IN, 0, 1)),
               0);
  cr_assert_eq(sim_run(s, v, 1024, &p, &r), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "rank 3") && strstr(err_msg(), "rank 4"), "%s",
            err_msg());
  sched_free(s);
  view_free(v);
  topo_graph_free(g);
}

/* ---- bounds ----------------------------------------------------------------
 */

/* Bandwidth per byte of the bound: its slope between two sizes (us / B). */
static double slope(sched_coll c, const sched_view *v, const sim_params *p) {
  size_t b1 = 1u << 20, b2 = 65u << 20;
  double t1 = sim_bound_us(c, 0, v, b1, p), t2 = sim_bound_us(c, 0, v, b2, p);
  cr_assert_gt(t1, 0);
  return (t2 - t1) / (double)(b2 - b1);
}

Test(sim, bounds_dgx1) {
  topo_graph *g = model("dgx1-v100");
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  /* A GPU's NVLink bandwidth, from the link list: 6 lanes x 25 GB/s. */
  double nvl = 0;
  for (int l = 0; l < g->nl; l++)
    if (g->links[l].type == TOPO_LINK_NVL &&
        (g->links[l].a == v->vertex[0] || g->links[l].b == v->vertex[0]))
      nvl += g->links[l].bw;
  cr_assert_float_eq(nvl, 150.0, 1e-9);
  int n = 8;
  double ag = slope(SCHED_ALLGATHER, v, &p);
  cr_assert(fabs(ag - (n - 1) / (nvl * 1e3)) < 1e-3 * ag, "%g", ag);
  double rs = slope(SCHED_REDUCE_SCATTER, v, &p);
  cr_assert(fabs(rs - ag) < 1e-3 * ag);
  double ar = slope(SCHED_ALLREDUCE, v, &p);
  cr_assert(fabs(ar - 2.0 * (n - 1) / n / (nvl * 1e3)) < 1e-3 * ar, "%g", ar);
  double bc = slope(SCHED_BROADCAST, v, &p);
  cr_assert(fabs(bc - 1 / (nvl * 1e3)) < 1e-3 * bc, "%g", bc);
  /* The latency floor: one message costs at least alpha. */
  double t0 = sim_bound_us(SCHED_ALLREDUCE, 0, v, 0, &p);
  cr_assert_geq(t0, p.alpha_intra_us);
  cr_assert_eq(sim_bound_us(SCHED_SEND, 0, v, 8, &p), -1);
  /* No schedule beats the bound. */
  size_t bytes = 256u << 20;
  const char *names[] = {"ring", "tree", "rhd", "direct"};
  sched_coll colls[] = {SCHED_ALLREDUCE, SCHED_ALLGATHER, SCHED_BROADCAST};
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < 3; c++) {
      if (!gen_supports_view(gen_find(names[i]), colls[c], n, v))
        continue;
      sched *s = gen(names[i], colls[c], v, 0, 2, bytes);
      sim_result r;
      cr_assert_eq(sim_run(s, v, bytes, &p, &r), 0, "%s", err_msg());
      cr_assert(r.efficiency > 0 && r.efficiency <= 1.0, "%s %s: %.3f",
                names[i], sched_coll_name(colls[c]), r.efficiency);
      double size = colls[c] == SCHED_ALLGATHER ? (double)bytes * n : bytes;
      cr_assert(fabs(r.algbw - size / (r.time_us * 1e3)) < 1e-6 * r.algbw);
      cr_assert(fabs(r.busbw - r.algbw * sim_bus_factor(colls[c], n)) <
                1e-6 * r.busbw);
      sched_free(s);
    }
  view_free(v);
  topo_graph_free(g);
}

/* ---- the selector on views
 * --------------------------------------------------- */

static size_t bucket(size_t b) {
  size_t k = 1;
  while (k * 2 <= b)
    k *= 2;
  return k;
}

/* With every generator, and with the topology-blind ones alone. */
static const char *const filters[] = {NULL, "ring,tree,binomial,rhd,direct"};

Test(sim, selector_within_5pct_on_every_model) {
  const char *const *names = topo_model_names();
  for (int fi = 0; fi < 2; fi++) {
    select_filter filt, *fp = NULL;
    if (filters[fi]) {
      cr_assert_eq(select_filter_parse(filters[fi], &filt), 0);
      fp = &filt;
    }
    size_t sizes[] = {8, 1000, 100000, 3u << 20, 50000000, 256u << 20};
    sched_coll colls[] = {SCHED_ALLREDUCE, SCHED_ALLGATHER, SCHED_BROADCAST};
    for (int m = 0; names[m]; m++) {
      topo_graph *g = model(names[m]);
      sched_view *v = NULL;
      braid_result rv;
      sim_params p;
      if (topo_count(g, TOPO_GPU) > 0) {
        int n = topo_count(g, TOPO_GPU) < 8 ? topo_count(g, TOPO_GPU) : 8;
        int gpus[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        rv = view_gpus(g, gpus, n, &v);
        sim_params_gpu(&p);
      } else {
        rv = view_hosts(g, 4, NULL, &v);
        sim_params_cpu(&p);
      }
      cr_assert_eq(rv, BRAID_SUCCESS, "%s: %s", names[m], err_msg());
      double worst = 1;
      for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
          const gen_desc *pick = NULL;
          cr_assert_eq(
              select_algo_view(colls[c], v, bucket(sizes[i]), &p, fp, 0, &pick),
              BRAID_SUCCESS, "%s: %s", names[m], err_msg());
          select_cand cand[32];
          int nc = 0;
          cr_assert_eq(select_sim_table(colls[c], 0, v, sizes[i], &p, fp, 0,
                                        cand, 32, &nc),
                       BRAID_SUCCESS, "%s", err_msg());
          cr_assert_gt(nc, 0);
          double best = INFINITY, got = -1;
          int baseline = 0;
          for (int k = 0; k < nc; k++) {
            if (!cand[k].ok)
              continue;
            if (cand[k].res.time_us < best)
              best = cand[k].res.time_us;
            if (cand[k].gen == pick)
              got = cand[k].res.time_us;
            baseline |= !strcmp(cand[k].gen->name, "ring") ||
                        !strcmp(cand[k].gen->name, "direct");
          }
          cr_assert(baseline, "%s: no baseline generator simulated", names[m]);
          cr_assert_gt(got, 0, "%s: %s not simulated at %zu B", names[m],
                       pick->name, sizes[i]);
          cr_assert_leq(
              got, 1.05 * best,
              "%s %s %zu B (picked at %zu B): %s %.2f us, best %.2f us",
              names[m], sched_coll_name(colls[c]), sizes[i], bucket(sizes[i]),
              pick->name, got, best);
          if (got / best > worst)
            worst = got / best;
        }
      cr_log_info("%s%s: the pick is at most %.1f%% slower than the best",
                  names[m], fp ? " (topology-blind)" : "", (worst - 1) * 100);
      view_free(v);
      topo_graph_free(g);
    }
  }
}

Test(sim, select_filter_and_table) {
  topo_graph *g = model("dgx-a100");
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  select_filter f;
  cr_assert_eq(select_filter_parse("allreduce:tree", &f), 0);
  const gen_desc *d = NULL;
  cr_assert_eq(select_algo_view(SCHED_ALLREDUCE, v, 1u << 28, &p, &f, 0, &d),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(d->name, "tree");
  select_cand cand[32];
  int n = 0;
  cr_assert_eq(select_sim_table(SCHED_ALLREDUCE, 0, v, 1u << 20, &p, NULL, 0,
                                cand, 32, &n),
               BRAID_SUCCESS, "%s", err_msg());
  int seen_ring = 0;
  for (int i = 0; i < n; i++) {
    cr_assert(gen_supports_view(cand[i].gen, SCHED_ALLREDUCE, 8, v));
    if (cand[i].ok) {
      cr_assert_gt(cand[i].res.time_us, 0);
      cr_assert_gt(cand[i].res.efficiency, 0);
    } else {
      cr_assert(cand[i].note[0], "%s skipped without a reason",
                cand[i].gen->name);
    }
    seen_ring |= cand[i].ok && !strcmp(cand[i].gen->name, "ring");
  }
  cr_assert(seen_ring);
  view_free(v);
  topo_graph_free(g);
}

/* A default BRAID_ALGO entry whose generator supports the view but
 * declines it when it builds (hybrid on DGX-1 GPUs 0, 5, 6: no NVLink ring
 * through the three) leaves the usual choice, as one naming a generator
 * the view does not support does; the collective's own entry is binding. */
Test(sim, a_default_entry_declined_by_the_view_leaves_the_usual_choice) {
  topo_graph *g = model("dgx1-v100");
  sched_view *v = NULL;
  int gpus[] = {0, 5, 6};
  cr_assert_eq(view_gpus(g, gpus, 3, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  const gen_desc *hybrid = gen_find("hybrid");
  cr_assert(gen_supports_view(hybrid, SCHED_ALLREDUCE, 3, v));
  select_filter f;
  cr_assert_eq(select_filter_parse("hybrid", &f), 0);
  const gen_desc *d = NULL;
  cr_assert_eq(select_algo_view(SCHED_ALLREDUCE, v, 1u << 20, &p, &f, 2, &d),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_not_null(d);
  cr_assert_str_neq(d->name, "hybrid");
  const gen_desc *usual = NULL;
  cr_assert_eq(
      select_algo_view(SCHED_ALLREDUCE, v, 1u << 20, &p, NULL, 2, &usual),
      BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(d, usual, "%s, not the usual %s", d->name, usual->name);
  cr_assert_eq(select_filter_parse("allreduce:hybrid", &f), 0);
  cr_assert_eq(select_algo_view(SCHED_ALLREDUCE, v, 1u << 20, &p, &f, 2, &d),
               BRAID_ERR_UNSUPPORTED);
  cr_assert_not_null(strstr(err_msg(), "no NVLink ring"), "%s", err_msg());
  view_free(v);
  topo_graph_free(g);
}

/* Each candidate the selector times is the schedule the runtime would run
 * at that size: built with the planner's parameters (plan_params, whose
 * channels grow with the size up to BRAID_NCHANNELS), it simulates to the
 * same time. A selector that timed every topology-blind generator on two
 * channels, where calls below 512 KiB run one, picked from times of
 * schedules that never ran. */
Test(sim, table_times_the_schedules_the_runtime_runs) {
  topo_graph *g = model("dgx1-v100");
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  sim_params p;
  sim_params_gpu(&p);
  size_t sizes[] = {8192, 256u << 10, 1u << 20, 64u << 20};
  int chans[] = {1, 2, 8};
  int compared = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (size_t m = 0; m < sizeof chans / sizeof chans[0]; m++) {
      select_filter every;
      select_filter_all(&every);
      select_cand cand[32];
      int nc = 0;
      cr_assert_eq(select_sim_table(SCHED_ALLREDUCE, 0, v, sizes[i], &p, &every,
                                    chans[m], cand, 32, &nc),
                   BRAID_SUCCESS, "%s", err_msg());
      plan_request rq;
      plan_request_defaults(&rq, SCHED_ALLREDUCE, v->nranks, sizes[i], v, 1);
      rq.max_channels = chans[m];
      gen_params gp = plan_params(&rq);
      for (int k = 0; k < nc; k++) {
        if (!cand[k].ok)
          continue;
        sched *s = NULL;
        cr_assert_eq(gen_build(cand[k].gen, &gp, &s), BRAID_SUCCESS, "%s: %s",
                     cand[k].gen->name, err_msg());
        sim_result r;
        cr_assert_eq(sim_run(s, v, sizes[i], &p, &r), BRAID_SUCCESS, "%s",
                     err_msg());
        cr_expect_eq(cand[k].nchannels, s->nchannels,
                     "%s at %zu B, BRAID_NCHANNELS=%d: timed on %d channels, "
                     "runs %d",
                     cand[k].gen->name, sizes[i], chans[m], cand[k].nchannels,
                     s->nchannels);
        cr_expect(fabs(cand[k].res.time_us - r.time_us) <= 1e-9 * r.time_us,
                  "%s at %zu B, BRAID_NCHANNELS=%d: timed %.3f us, runs %.3f",
                  cand[k].gen->name, sizes[i], chans[m], cand[k].res.time_us,
                  r.time_us);
        sched_free(s);
        compared++;
      }
    }
  cr_assert_gt(compared, 40, "only %d candidates compared", compared);
  view_free(v);
  topo_graph_free(g);
}

/* ---- scaling across hosts
 * ---------------------------------------------------- */

/* One rank per host (GPU0 of each DGX-H100). */
static sched_view *cluster_view(topo_graph *h, int hosts, int per) {
  topo_graph *g = NULL;
  cr_assert_eq(topo_cluster(h, hosts, 0, &g), BRAID_SUCCESS, "%s", err_msg());
  int gpus[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, gpus, per, &v), BRAID_SUCCESS, "%s", err_msg());
  v->owns_graph = 1;
  return v;
}

Test(sim, scaling_tree_vs_ring_across_hosts) {
  topo_graph *h = model("dgx-h100");
  sim_params p;
  sim_params_gpu(&p);
  select_filter f;
  cr_assert_eq(select_filter_parse("allreduce:ring,tree,chaintree", &f), 0);
  double tree[7] = {0}, ring[7] = {0};
  size_t sw[7] = {0};
  for (int i = 1, H = 2; H <= 64; i++, H *= 2) {
    sched_view *v = cluster_view(h, H, 1);
    sched *s = gen("tree", SCHED_ALLREDUCE, v, 0, 2, 8);
    tree[i] = sim_time(s, v, 8, &p);
    sched_free(s);
    s = gen("ring", SCHED_ALLREDUCE, v, 0, 2, 8);
    ring[i] = sim_time(s, v, 8, &p);
    sched_free(s);
    /* The smallest size (powers of 4) at which the selector picks ring. */
    sw[i] = 0;
    for (size_t b = 8; b <= (256u << 20); b *= 4) {
      const gen_desc *d = NULL;
      cr_assert_eq(select_algo_view(SCHED_ALLREDUCE, v, b, &p, &f, 0, &d),
                   BRAID_SUCCESS, "%s", err_msg());
      if (!strcmp(d->name, "ring")) {
        sw[i] = b;
        break;
      }
    }
    cr_assert_gt(sw[i], 0, "%d hosts: ring never picked", H);
    cr_log_info("%2d hosts: 8 B tree %.1f us, ring %.1f us; ring from %zu B", H,
                tree[i], ring[i], sw[i]);
    view_free(v);
  }
  /* Trees grow like log(hosts) (log2 64 / log2 2 = 6), rings linearly. */
  cr_assert_lt(tree[6] / tree[1], 7.5, "tree %.1f -> %.1f us", tree[1],
               tree[6]);
  cr_assert_lt(tree[6] / tree[3], 2.5, "tree %.1f -> %.1f us", tree[3],
               tree[6]);
  cr_assert_gt(ring[6] / ring[1], 10.0, "ring %.1f -> %.1f us", ring[1],
               ring[6]);
  for (int i = 2; i <= 6; i++)
    cr_assert_geq(sw[i], sw[i - 1], "switch size falls at %d hosts", 1 << i);
  cr_assert_gt(sw[6], sw[1]);
  topo_graph_free(h);
}

static double secs(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef BRAID_TEST_SMALL
#define SCALE_HOSTS 256
#else
#define SCALE_HOSTS 1024
#endif

Test(sim, speed_at_scale, .timeout = 120) {
  /* 1024 hosts: a 1024-rank ring allreduce at 8 B and 256 MiB, and an
   * 8192-rank tree at 8 B, simulated to the end with sane results. The CPU
   * time is logged, not asserted (speed is measured in benchmarks, not in
   * tests). BRAID_TEST_SMALL (the sanitizer build, where these took 11 s):
   * 256 hosts, the same code paths. */
  topo_graph *h = model("dgx-h100");
  sim_params p;
  sim_params_gpu(&p);
  sched_view *v = cluster_view(h, SCALE_HOSTS, 1);
  size_t sizes[] = {8, 256u << 20};
  double ring8 = 0;
  for (int i = 0; i < 2; i++) {
    sched *s = gen("ring", SCHED_ALLREDUCE, v, 0, 2, sizes[i]);
    double t0 = secs();
    double t = sim_time(s, v, sizes[i], &p);
    double dt = secs() - t0;
    cr_log_info("%d-rank ring allreduce, %zu B: simulated in %.2f s",
                SCALE_HOSTS, sizes[i], dt);
    /* 2 (H - 1) messages in sequence, each at least alpha across hosts */
    cr_assert_geq(t, 2.0 * (SCALE_HOSTS - 1) * p.alpha_net_us, "%.1f us", t);
    if (i == 0)
      ring8 = t;
    sched_free(s);
  }
  sched_view *v8 = NULL;
  cr_assert_eq(view_gpus(v->g, NULL, 0, &v8), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(v8->nranks, 8 * SCALE_HOSTS);
  sched *s = gen("tree", SCHED_ALLREDUCE, v8, 0, 2, 8);
  double t0 = secs();
  double t = sim_time(s, v8, 8, &p);
  double dt = secs() - t0;
  cr_assert_lt(t, ring8 / 10, "%d-rank tree %.1f us, %d-rank ring %.1f us",
               8 * SCALE_HOSTS, t, SCALE_HOSTS, ring8);
  cr_log_info("%d-rank tree allreduce, 8 B: simulated in %.2f s",
              8 * SCALE_HOSTS, dt);
  sched_free(s);
  view_free(v8);
  view_free(v);
  topo_graph_free(h);
}
