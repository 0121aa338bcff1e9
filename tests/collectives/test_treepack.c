/*
 * Spanning-tree packing (collectives/treepack.c): every collective on the
 * DGX-1 (whole and fragmented allocations), DGX-A100, DGX-H100 and a PCIe
 * machine, roots 0 and n-1, verified in and out of place with 8 and 2
 * slots. The rate the trees achieve is computed here from the schedule's
 * messages and weights on the links their routes cross, and compared with
 * bounds computed here: Edmonds' broadcast rate (flow_broadcast_rate) for
 * broadcast and reduce, the Nash-Williams / Tutte tree-packing bound for
 * allreduce, on the graph of the links that join the ranks directly (where
 * those links join them all) or on flow_from_view's graph. Then the issue's
 * targets on the simulator: DGX-1 allocations of 3 to 7 GPUs, treepack
 * against the best ring.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/flow.h"
#include "collectives/gen_util.h"
#include "collectives/generators.h"
#include "collectives/route.h"
#include "collectives/sim.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "src/log.h"
#include "tests/collectives/gen_try.h"
#include "topology/topo.h"

/* One verifier workspace for the whole test process (verify.h). */
static verify_ws *test_ws(void) {
  static verify_ws *w;
  if (w == NULL)
    w = verify_ws_new();
  return w;
}

typedef struct tcase {
  const char *model;
  int n; /* 0: every GPU */
  int gpus[8];
  /* Ranks not all joined by direct links, and routes that share links
   * (NVLink paths through other GPUs, PCIe switch uplinks) which
   * flow_from_view's graph counts as independent: neither bound is tight;
   * check half of it. */
  int loose;
} tcase;

static const tcase cases[] = {
    {"dgx1-v100", 0, {0}, 0},
    {"dgx1-v100", 3, {0, 1, 3}, 0},
    {"dgx1-v100", 5, {0, 2, 4, 5, 6}, 0},
    {"dgx1-v100", 6, {1, 2, 3, 5, 6, 7}, 0},
    {"dgx1-v100", 2, {0, 1}, 0},
    {"dgx1-v100", 2, {0, 5}, 0},
    {"dgx1-v100", 3, {0, 1, 2}, 0},
    {"dgx1-v100", 4, {4, 5, 6, 7}, 0},
    {"dgx1-v100", 4, {0, 3, 4, 7}, 0},
    {"dgx1-v100", 4, {0, 1, 6, 7}, 1},
    {"dgx1-v100", 5, {0, 1, 2, 5, 7}, 0},
    {"dgx1-v100", 7, {0, 1, 2, 3, 4, 5, 6}, 0},
    {"dgx-a100", 0, {0}, 0},
    {"dgx-a100", 3, {1, 4, 6}, 0},
    {"dgx-h100", 0, {0}, 0},
    {"pcie-4gpu", 0, {0}, 1},
    {"pcie-4gpu", 3, {0, 2, 3}, 1},
};
#define NCASES (int)(sizeof(cases) / sizeof(cases[0]))

static sched_view *load_view(const tcase *tc, topo_graph **gp) {
  topo_graph *g = NULL;
  braid_result rc = topo_model_load(tc->model, &g);
  cr_assert_eq(rc, BRAID_SUCCESS, "model %s: %s", tc->model, err_msg());
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, tc->n ? tc->gpus : NULL, tc->n, &v), BRAID_SUCCESS,
               "view of %s: %s", tc->model, err_msg());
  *gp = g;
  return v;
}

static void case_name(const tcase *tc, char *buf, size_t len) {
  int off = snprintf(buf, len, "%s", tc->model);
  if (tc->n) {
    off += snprintf(buf + off, len - (size_t)off, "{");
    for (int i = 0; i < tc->n; i++)
      off += snprintf(buf + off, len - (size_t)off, "%s%d", i ? "," : "",
                      tc->gpus[i]);
    snprintf(buf + off, len - (size_t)off, "}");
  }
}

/* The rate (GB/s of the block) the schedule reaches on the machine: every
 * channel sends its weighted share once over each of its arcs, along the
 * arc's route (SCHED_ROUTE_ANY, as the simulator takes it); each direction
 * of each link carries at most its bandwidth. */
static double sched_rate(const sched *s, const sched_view *v) {
  int n = s->nranks, nl = v->g->nl;
  double *load = calloc(2 * (size_t)nl, sizeof(double));
  char *used = malloc((size_t)n * n);
  route_ctx *rc = route_ctx_new(v->g);
  cr_assert(load && used && rc);
  for (int c = 0; c < s->nchannels; c++) {
    memset(used, 0, (size_t)n * n);
    for (int r = 0; r < n; r++) {
      const sched_channel *ch = sched_chan_c(s, r, c);
      for (int i = 0; i < ch->nsteps; i++) {
        const sched_step *st = &ch->steps[i];
        int to = st->prim == SCHED_P_SEND ? st->peer : st->peer_out;
        if (to < 0 || used[r * n + to] || v->vertex[r] == v->vertex[to])
          continue;
        used[r * n + to] = 1;
        topo_path tp;
        cr_assert_eq(
            route_find(rc, v->vertex[r], v->vertex[to], SCHED_ROUTE_ANY, &tp),
            0, "no route from rank %d to %d", r, to);
        for (int h = 0; h < tp.nhops; h++) {
          int l = tp.links[h];
          load[2 * l + (v->g->links[l].a == tp.verts[h] ? 0 : 1)] +=
              s->weights[c];
        }
        topo_path_release(&tp);
      }
    }
  }
  double rate = INFINITY;
  for (int i = 0; i < 2 * nl; i++)
    if (load[i] > 0 && v->g->links[i / 2].bw / load[i] < rate)
      rate = v->g->links[i / 2].bw / load[i];
  route_ctx_free(rc);
  free(used);
  free(load);
  return rate;
}

/* The ranks joined by the links between their vertices (one hop). */
static flow_net *hop_graph(const sched_view *v) {
  int n = v->nranks;
  flow_net *f = flow_new(n);
  cr_assert_not_null(f);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      int l = a == b ? -1 : topo_link_between(v->g, v->vertex[a], v->vertex[b]);
      f->cap[a * n + b] = l >= 0 ? v->g->links[l].bw : 0;
    }
  return f;
}

/* What any rank's links carry at most (every rank receives the data, or
 * sends its contribution): the smallest sum of link bandwidths at a rank. */
static double port_bound(const sched_view *v) {
  double best = INFINITY;
  for (int r = 0; r < v->nranks; r++) {
    const topo_vertex *x = &v->g->v[v->vertex[r]];
    double sum = 0;
    for (int i = 0; i < x->nadj; i++)
      sum += v->g->links[x->adj[i]].bw;
    if (sum < best)
      best = sum;
  }
  return best;
}

/* Nash-Williams / Tutte: the largest fractional packing of spanning trees
 * of the undirected graph min(c_ab, c_ba) is min over partitions P of the
 * capacity across P / (|P| - 1). Enumerates every partition (n <= 10). */
static double nw_bound(const flow_net *f) {
  int n = f->n, part[16] = {0}, mx[16] = {0};
  double best = INFINITY;
  for (;;) {
    int np = 0;
    for (int i = 0; i < n; i++)
      if (part[i] + 1 > np)
        np = part[i] + 1;
    if (np > 1) {
      double cross = 0;
      for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
          if (part[a] != part[b])
            cross += fmin(f->cap[a * n + b], f->cap[b * n + a]);
      if (cross / (np - 1) < best)
        best = cross / (np - 1);
    }
    /* Next restricted growth string. */
    int i = n - 1;
    while (i > 0 && part[i] == mx[i - 1] + 1)
      i--;
    if (i == 0)
      break;
    part[i]++;
    mx[i] = mx[i - 1] > part[i] ? mx[i - 1] : part[i];
    for (int j = i + 1; j < n; j++) {
      part[j] = 0;
      mx[j] = mx[i];
    }
  }
  return best;
}

static double bound(const flow_net *f, sched_coll coll, int root) {
  if (coll == SCHED_ALLREDUCE)
    return nw_bound(f);
  if (coll == SCHED_BROADCAST)
    return flow_broadcast_rate(f, root);
  int n = f->n; /* reduce: broadcast on the reversed graph */
  flow_net *t = flow_new(n);
  cr_assert_not_null(t);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      t->cap[a * n + b] = f->cap[b * n + a];
  double r = flow_broadcast_rate(t, root);
  flow_free(t);
  return r;
}

static void check_sched(const sched *s, const char *what) {
  cr_assert_str_eq(s->algo, "treepack");
  double sum = 0;
  for (int c = 0; c < s->nchannels; c++) {
    cr_assert_gt(s->weights[c], 0, "%s: channel %d has weight 0", what, c);
    sum += s->weights[c];
  }
  cr_assert_float_eq(sum, 1.0, 1e-9, "%s: weights sum to %g", what, sum);
  for (int ip = 0; ip < 2; ip++)
    for (int slots = 8; slots >= 2; slots -= 6) {
      int rc = verify_sched_ws(s, ip, slots, test_ws());
      cr_assert_eq(rc, 0, "%s inplace=%d slots=%d: %s", what, ip, slots,
                   err_msg());
    }
}

static const sched_coll colls[3] = {SCHED_BROADCAST, SCHED_REDUCE,
                                    SCHED_ALLREDUCE};

Test(treepack, rate_and_verify_all_machines, .timeout = 240) {
  double worst = INFINITY;
  for (int ci = 0; ci < NCASES; ci++) {
    topo_graph *g = NULL;
    sched_view *v = load_view(&cases[ci], &g);
    flow_net *f = flow_from_view(v, SCHED_ROUTE_ANY), *h = hop_graph(v);
    cr_assert_not_null(f);
    int n = v->nranks;
    char name[96];
    case_name(&cases[ci], name, sizeof(name));
    for (int k = 0; k < 3; k++) {
      int roots[2] = {0, n - 1};
      for (int ri = 0; ri < (colls[k] == SCHED_ALLREDUCE ? 1 : 2); ri++) {
        gen_params p = {colls[k], n, roots[ri], 1, v, 0, 0};
        sched *s = gen_try(gen_treepack, &p);
        char what[160];
        snprintf(what, sizeof(what), "%s %s root=%d", name,
                 sched_coll_name(colls[k]), roots[ri]);
        cr_assert_not_null(s, "%s: no schedule", what);
        check_sched(s, what);
        cr_assert_leq(s->nchannels, GEN_MAX_CHANNELS, "%s", what);
        double rate = sched_rate(s, v);
        double bf = bound(f, colls[k], roots[ri]);
        double bh = bound(h, colls[k], roots[ri]);
        /* Direct links joining every rank: trees on them alone reach bh,
         * so the packing must too. Otherwise (switches, PCIe): the flow
         * graph's bound, or the ranks' links where they carry less. */
        double b = bh > 0 ? bh : fmin(bf, port_bound(v));
        double need = (bh <= 0 && cases[ci].loose) ? 0.5 : 0.9;
        fprintf(stderr,
                "treepack %-34s %-9s root=%d ch=%2d rate=%7.2f "
                "hop-bound=%7.2f flow-bound=%7.2f rate/bound=%.3f\n",
                name, sched_coll_name(colls[k]), roots[ri], s->nchannels, rate,
                bh, bf, rate / b);
        cr_assert_geq(rate, need * b, "%s: rate %.2f < %.1f x bound %.2f", what,
                      rate, need, b);
        if (rate / b < worst)
          worst = rate / b;
        sched_free(s);
      }
    }
    flow_free(f);
    flow_free(h);
    view_free(v);
    topo_graph_free(g);
  }
  fprintf(stderr, "treepack: worst rate / bound %.3f\n", worst);
}

Test(treepack, max_channels_respected) {
  static const tcase full = {"dgx1-v100", 0, {0}, 0};
  topo_graph *g = NULL;
  sched_view *v = load_view(&full, &g);
  for (int k = 0; k < 3; k++)
    for (int m = 1; m <= 4; m++) {
      gen_params p = {colls[k], v->nranks, 3, 1, v, 0, m};
      sched *s = gen_try(gen_treepack, &p);
      char what[96];
      snprintf(what, sizeof(what), "dgx1 %s max_channels=%d",
               sched_coll_name(colls[k]), m);
      cr_assert_not_null(s, "%s", what);
      cr_assert_leq(s->nchannels, m, "%s: %d channels", what, s->nchannels);
      check_sched(s, what);
      double rate = sched_rate(s, v);
      cr_assert_gt(rate, 0, "%s", what);
      fprintf(stderr, "treepack %s: %d trees, rate %.2f\n", what, s->nchannels,
              rate);
      sched_free(s);
    }
  view_free(v);
  topo_graph_free(g);
}

Test(treepack, one_rank_and_no_view) {
  static const tcase one = {"dgx1-v100", 1, {5}, 0};
  topo_graph *g = NULL;
  sched_view *v = load_view(&one, &g);
  for (int k = 0; k < 3; k++) {
    gen_params p = {colls[k], 1, 0, 1, v, 0, 0};
    sched *s = gen_try(gen_treepack, &p);
    cr_assert_not_null(s);
    cr_assert_eq(s->nchannels, 1);
    check_sched(s, "one rank");
    sched_free(s);
    p.view = NULL; /* topology-aware: no view, no schedule */
    cr_assert_null(gen_try(gen_treepack, &p));
    p.view = v;
    p.nranks = 2; /* the view must match the rank count */
    cr_assert_null(gen_try(gen_treepack, &p));
  }
  view_free(v);
  topo_graph_free(g);
}

/* Ranks on one vertex, and a graph where some ranks are joined by nothing:
 * the trees still span every rank. */
Test(treepack, shared_vertex_and_disconnected) {
  topo_graph *g = topo_graph_new("islands");
  cr_assert_not_null(g);
  int a = topo_add_vertex(g, TOPO_GPU, NULL),
      b = topo_add_vertex(g, TOPO_GPU, NULL);
  int c = topo_add_vertex(g, TOPO_GPU, NULL);
  cr_assert(a >= 0 && b >= 0 && c >= 0);
  cr_assert_geq(topo_add_link(g, a, b, TOPO_LINK_NVL, 50, 1, 2), 0);
  int vert[5] = {a, b, c, a, b}, host[5] = {0};
  sched_view v = {g, 5, vert, host, 1, 1, 0};
  for (int k = 0; k < 3; k++) {
    for (int root = 0; root < 5; root += 2) {
      gen_params p = {colls[k], 5, root, 1, &v, 0, 0};
      sched *s = gen_try(gen_treepack, &p);
      cr_assert_not_null(s, "islands %s root=%d", sched_coll_name(colls[k]),
                         root);
      check_sched(s, "islands");
      sched_free(s);
    }
  }
  topo_graph_free(g);
}

/* ---- the targets, on the simulator ---- */

static double sim_algbw(sched *s, const sched_view *v, size_t bytes,
                        const char *what) {
  cr_assert_not_null(s, "%s: no schedule", what);
  sim_params sp;
  sim_params_gpu(&sp);
  sim_result r;
  braid_result rc = sim_run(s, v, bytes, &sp, &r);
  cr_assert_eq(rc, BRAID_SUCCESS, "%s: %s", what, err_msg());
  sched_free(s);
  return r.algbw;
}

/* Every DGX-1 allocation of 3 to 7 GPUs, allreduce and broadcast of
 * 256 MiB: treepack against the best of ring (2 channels, rank order) and
 * multiring. Fragmented allocations: trees at least 1.5x the best ring on
 * at least three of them, and never worse than 0.98x. */
Test(treepack, dgx1_fragments_beat_rings, .timeout = 240) {
  const gen_desc *mr = gen_find("multiring");
  cr_assert_not_null(mr);
  topo_graph *g = NULL;
  cr_assert_eq(topo_model_load("dgx1-v100", &g), BRAID_SUCCESS, "%s",
               err_msg());
  size_t bytes = (size_t)256 << 20;
  static const sched_coll two[2] = {SCHED_ALLREDUCE, SCHED_BROADCAST};
  int wins[2] = {0, 0}, subsets = 0;
  double worst[2] = {INFINITY, INFINITY}, best[2] = {0, 0};
  for (int mask = 0; mask < 256; mask++) {
    int gpus[8], n = 0;
    for (int i = 0; i < 8; i++)
      if (mask >> i & 1)
        gpus[n++] = i;
    if (n < 3 || n > 7)
      continue;
    subsets++;
    sched_view *v = NULL;
    cr_assert_eq(view_gpus(g, gpus, n, &v), BRAID_SUCCESS, "%s", err_msg());
    tcase tc = {"dgx1-v100", n, {0}, 0};
    memcpy(tc.gpus, gpus, sizeof(gpus));
    char name[64];
    case_name(&tc, name, sizeof(name));
    for (int k = 0; k < 2; k++) {
      gen_params p = {two[k], n, 0, 2, v, bytes, 0};
      char what[128];
      snprintf(what, sizeof(what), "%s %s", name, sched_coll_name(two[k]));
      double tp = sim_algbw(gen_try(gen_treepack, &p), v, bytes, what);
      double ring = sim_algbw(gen_try(gen_ring, &p), v, bytes, what);
      double multi = sim_algbw(gen_try(mr->fn, &p), v, bytes, what);
      double rb = ring > multi ? ring : multi, x = tp / rb;
      fprintf(stderr,
              "treepack-sim %-24s %-9s treepack %6.1f ring %6.1f multiring "
              "%6.1f -> %.2fx\n",
              name, sched_coll_name(two[k]), tp, ring, multi, x);
      cr_expect_gt(x, 0.98, "%s: treepack %.1f GB/s < 0.98 x best ring %.1f",
                   what, tp, rb);
      wins[k] += x >= 1.5;
      if (x < worst[k])
        worst[k] = x;
      if (x > best[k])
        best[k] = x;
    }
    view_free(v);
  }
  for (int k = 0; k < 2; k++) {
    fprintf(stderr,
            "treepack-sim %s: %d of %d subsets >= 1.5x the best ring; "
            "worst %.2fx, best %.2fx\n",
            sched_coll_name(two[k]), wins[k], subsets, worst[k], best[k]);
    cr_assert_geq(wins[k], 3, "%s: only %d subsets >= 1.5x",
                  sched_coll_name(two[k]), wins[k]);
  }
  topo_graph_free(g);
}

/* Two DGX-1 hosts (16 ranks, the greedy packing for allreduce): still
 * correct, and every channel's tree spans the ranks. */
Test(treepack, two_hosts, .timeout = 120) {
  topo_graph *h = NULL, *g = NULL;
  cr_assert_eq(topo_model_load("dgx1-v100", &h), BRAID_SUCCESS, "%s",
               err_msg());
  cr_assert_eq(topo_cluster(h, 2, 0, &g), BRAID_SUCCESS, "%s", err_msg());
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, NULL, 0, &v), BRAID_SUCCESS, "%s", err_msg());
  for (int k = 0; k < 3; k++) {
    gen_params p = {colls[k], v->nranks, 5, 1, v, (size_t)64 << 20, 4};
    sched *s = gen_try(gen_treepack, &p);
    char what[96];
    snprintf(what, sizeof(what), "2 x dgx1 %s", sched_coll_name(colls[k]));
    cr_assert_not_null(s, "%s", what);
    cr_assert_leq(s->nchannels, 4, "%s", what);
    check_sched(s, what);
    cr_assert_gt(sched_rate(s, v), 0, "%s", what);
    sched_free(s);
  }
  view_free(v);
  topo_graph_free(g);
  topo_graph_free(h);
}
