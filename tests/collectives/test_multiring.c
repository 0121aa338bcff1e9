/*
 * multiring and hybrid (collectives/multiring.c, hybrid.c) on the machine
 * models: every collective through the verifier on whole machines and
 * fragmented allocations; the DGX-1 decomposition uses every NVLink lane once
 * per direction; weights follow the bottlenecks; max_channels holds; hybrid
 * splits R : 1; and, where the simulator is linked, the predicted efficiency.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/gen_util.h"
#include "collectives/generators.h"
#include "collectives/sim.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "src/log.h"
#include "tests/collectives/gen_try.h"

/* One verifier workspace for the whole test process (verify.h). */
static verify_ws *test_ws(void) {
  static verify_ws *w;
  if (w == NULL)
    w = verify_ws_new();
  return w;
}

/* A view built by hand: rank i on GPU gpus[i], one host. */
typedef struct tview {
  sched_view v;
  int vertex[16];
  int host[16];
} tview;

static topo_graph *load(const char *name) {
  topo_graph *g = NULL;
  braid_result r = topo_model_load(name, &g);
  cr_assert_eq(r, BRAID_SUCCESS, "model %s: %s", name, err_msg());
  return g;
}

static void mkview(tview *t, topo_graph *g, const int *gpus, int n) {
  memset(t, 0, sizeof(*t));
  cr_assert_leq(n, 16);
  for (int i = 0; i < n; i++) {
    t->vertex[i] =
        gpus ? topo_nth(g, TOPO_GPU, gpus[i]) : topo_nth(g, TOPO_GPU, i);
    cr_assert_geq(t->vertex[i], 0, "no GPU %d", gpus ? gpus[i] : i);
    t->host[i] = 0;
  }
  t->v.g = g;
  t->v.nranks = n;
  t->v.vertex = t->vertex;
  t->v.host = t->host;
  t->v.nhosts = 1;
  t->v.rails = 1;
}

static sched *gen(const char *name, sched_coll c, int n, int root,
                  const sched_view *v, int maxch) {
  gen_params p = {c, n, root, 1, v, (size_t)1 << 20, maxch};
  return gen_try(gen_find(name)->fn, &p);
}

static int rooted(sched_coll c) {
  return c == SCHED_BROADCAST || c == SCHED_REDUCE;
}

/* Every supported collective (every root for rooted ones), in place and out
 * of place, with 8 and 2 slots. Returns the schedules verified. */
static int verify_all(const char *name, const sched_view *v, int maxch) {
  const gen_desc *g = gen_find(name);
  cr_assert_not_null(g);
  int n = v->nranks, runs = 0;
  for (int c = 0; c < SCHED_NUM_COLLS; c++) {
    if (!(g->colls & (1u << c)))
      continue;
    cr_assert(gen_supports_view(g, (sched_coll)c, n, v));
    for (int root = 0; root < (rooted((sched_coll)c) ? n : 1); root++) {
      sched *s = gen(name, (sched_coll)c, n, root, v, maxch);
      cr_assert_not_null(s, "%s %s n=%d root=%d: no schedule", name,
                         sched_coll_name((sched_coll)c), n, root);
      cr_assert_str_eq(s->algo, name);
      cr_assert_geq(s->nchannels, 1);
      cr_assert_leq(s->nchannels, maxch > 0 ? maxch : GEN_MAX_CHANNELS);
      double sum = 0;
      for (int ch = 0; ch < s->nchannels; ch++) {
        cr_assert_gt(s->weights[ch], 0);
        sum += s->weights[ch];
      }
      cr_assert_float_eq(sum, 1.0, 1e-9, "%s: weights sum to %g", name, sum);
      for (int ip = 0; ip < 2; ip++)
        for (int slots = 8; slots >= 2; slots -= 6) {
          int rc = verify_sched_ws(s, ip, slots, test_ws());
          cr_assert_eq(rc, 0, "%s %s n=%d root=%d inplace=%d slots=%d: %s",
                       name, sched_coll_name((sched_coll)c), n, root, ip, slots,
                       err_msg());
          runs++;
        }
      sched_free(s);
    }
  }
  return runs;
}

/* The rank after r on channel ch: the peer of r's first SEND (every ring
 * collective but reduce starts each rank's allgather/reduce-scatter with it;
 * use allgather schedules). */
static int next_of(const sched *s, int r, int ch) {
  const sched_channel *c = sched_chan_c(s, r, ch);
  for (int i = 0; i < c->nsteps; i++) {
    if (c->steps[i].prim == SCHED_P_SEND)
      return c->steps[i].peer;
    if (c->steps[i].peer_out >= 0)
      return c->steps[i].peer_out;
  }
  return -1;
}

/* NVLink lanes and per-lane bandwidth between two vertices, read from the
 * graph. */
static int lanes(const topo_graph *g, int a, int b, double *lane_bw) {
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (k->type == TOPO_LINK_NVL &&
        ((k->a == a && k->b == b) || (k->a == b && k->b == a))) {
      *lane_bw = k->bw / k->count;
      return k->count;
    }
  }
  *lane_bw = 0;
  return 0;
}

/* Checks that every channel is a ring (a single cycle through every rank)
 * over direct NVLink lanes when its route is NVL; returns in bn[] each
 * channel's bottleneck lane bandwidth (0 for other routes). */
static void rings_of(const sched *s, const sched_view *v, double *bn) {
  int n = s->nranks;
  for (int ch = 0; ch < s->nchannels; ch++) {
    int seen[16] = {0}, r = 0;
    bn[ch] = 0;
    for (int k = 0; k < n; k++) {
      cr_assert_eq(seen[r], 0, "channel %d visits rank %d twice", ch, r);
      seen[r] = 1;
      int nx = next_of(s, r, ch);
      cr_assert(nx >= 0 && nx < n, "channel %d rank %d: no next", ch, r);
      if (s->route[ch] == SCHED_ROUTE_NVL) {
        double lb;
        int l = lanes(v->g, v->vertex[r], v->vertex[nx], &lb);
        for (int w = 0; l == 0 && w < topo_count(v->g, TOPO_NVS); w++) {
          /* through an NVSwitch: both GPUs link to it */
          int sw = topo_nth(v->g, TOPO_NVS, w);
          double x;
          l = lanes(v->g, v->vertex[r], sw, &x) > 0 &&
              lanes(v->g, v->vertex[nx], sw, &x) > 0;
          lb = 0;
        }
        cr_assert_gt(l, 0, "channel %d: rank %d -> %d is not an NVLink", ch, r,
                     nx);
        if (k == 0 || lb < bn[ch])
          bn[ch] = lb;
      }
      r = nx;
    }
    cr_assert_eq(r, 0, "channel %d does not close", ch);
  }
}

static const int dgx1_all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
static const int sub0[4] = {0, 1, 2, 3};
static const int sub1[3] = {0, 1, 3};
static const int sub2[5] = {0, 2, 4, 5, 6};
static const int sub3[6] = {1, 2, 3, 5, 6, 7};

Test(multiring, dgx1_every_lane_once_per_direction) {
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  sched *s = gen("multiring", SCHED_ALLGATHER, 8, 0, &t.v, 0);
  cr_assert_not_null(s);
  /* 24 lanes, 6 per GPU: three Hamiltonian cycles, six directed rings. */
  cr_assert_eq(s->nchannels, 6, "%d channels", s->nchannels);
  int used[8][8] = {{0}};
  for (int ch = 0; ch < s->nchannels; ch++) {
    cr_assert_eq(s->route[ch], SCHED_ROUTE_NVL);
    for (int r = 0; r < 8; r++)
      used[r][next_of(s, r, ch)]++;
  }
  int total = 0;
  for (int a = 0; a < 8; a++)
    for (int b = 0; b < 8; b++) {
      if (a == b)
        continue;
      double lb;
      int l = lanes(g, t.vertex[a], t.vertex[b], &lb);
      cr_assert_eq(used[a][b], l, "GPU%d -> GPU%d: %d rings on %d lanes", a, b,
                   used[a][b], l);
      if (a < b)
        cr_assert_eq(used[a][b] + used[b][a], 2 * l);
      total += used[a][b];
    }
  cr_assert_eq(total, 48, "directed ring edges %d", total);
  double bn[GEN_MAX_CHANNELS];
  rings_of(s, &t.v, bn);
  for (int ch = 0; ch < s->nchannels; ch++)
    cr_assert_float_eq(s->weights[ch] / s->weights[0], bn[ch] / bn[0], 1e-9);
  sched_free(s);
  topo_graph_free(g);
}

Test(multiring, unequal_lanes_weighted_by_bottleneck) {
  /* Four GPUs, every one with four lanes: two Hamiltonian cycles use them
   * all, 0-1-2-3 (thinnest lane 30 GB/s) and 0-1-3-2 (20 GB/s). */
  topo_graph *g = topo_graph_new("k4");
  cr_assert_not_null(g);
  int v[4];
  for (int i = 0; i < 4; i++)
    v[i] = topo_add_vertex(g, TOPO_GPU, NULL);
  struct {
    int a, b, count;
    double bw;
  } links[6] = {{0, 1, 2, 100}, {2, 3, 2, 100}, {0, 2, 1, 20},
                {1, 3, 1, 20},  {0, 3, 1, 30},  {1, 2, 1, 30}};
  for (int i = 0; i < 6; i++)
    cr_assert_geq(topo_add_link(g, v[links[i].a], v[links[i].b], TOPO_LINK_NVL,
                                links[i].bw, -1, links[i].count),
                  0);
  tview t;
  mkview(&t, g, NULL, 4);
  cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
  sched *s = gen("multiring", SCHED_ALLGATHER, 4, 0, &t.v, 0);
  cr_assert_eq(s->nchannels, 4);
  double bn[GEN_MAX_CHANNELS], tot = 0;
  rings_of(s, &t.v, bn);
  for (int ch = 0; ch < 4; ch++)
    tot += bn[ch];
  for (int ch = 0; ch < 4; ch++)
    cr_assert_float_eq(s->weights[ch], bn[ch] / tot, 1e-9, "channel %d", ch);
  /* Every lane once per direction. */
  int used[4][4] = {{0}};
  for (int ch = 0; ch < 4; ch++)
    for (int r = 0; r < 4; r++)
      used[r][next_of(s, r, ch)]++;
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(used[links[i].a][links[i].b], links[i].count);
    cr_assert_eq(used[links[i].b][links[i].a], links[i].count);
  }
  sched_free(s);
  /* Two channels allowed: the wider ring, both directions. */
  s = gen("multiring", SCHED_ALLREDUCE, 4, 0, &t.v, 2);
  cr_assert_eq(s->nchannels, 2);
  rings_of(s, &t.v, bn);
  cr_assert_float_eq(bn[0], 30.0, 1e-9);
  cr_assert_float_eq(bn[1], 30.0, 1e-9);
  sched_free(s);
  topo_graph_free(g);
}

static void check_machine(const char *model, const int *gpus, int n) {
  topo_graph *g = load(model);
  tview t;
  mkview(&t, g, gpus, n);
  cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
  /* Weights proportional to the bottlenecks of the NVLink rings. */
  sched *s = gen("multiring", SCHED_ALLGATHER, n, 0, &t.v, 0);
  cr_assert_not_null(s);
  double bn[GEN_MAX_CHANNELS];
  rings_of(s, &t.v, bn);
  int nvl = 0;
  for (int ch = 0; ch < s->nchannels; ch++)
    nvl += s->route[ch] == SCHED_ROUTE_NVL;
  /* Either every channel is an NVLink ring, or one ring over best paths. */
  cr_assert(nvl == s->nchannels || nvl == 0, "%s: mixed routes", model);
  if (nvl && bn[0] > 0)
    for (int ch = 0; ch < s->nchannels; ch++)
      if (bn[ch] > 0) /* NVSwitch rings: equal shares of the switch */
        cr_assert_float_eq(s->weights[ch] / s->weights[0], bn[ch] / bn[0], 1e-9,
                           "%s channel %d", model, ch);
  sched_free(s);
  topo_graph_free(g);
}

Test(multiring, dgx1_all) { check_machine("dgx1-v100", dgx1_all, 8); }
Test(multiring, dgx1_0123) { check_machine("dgx1-v100", sub0, 4); }
Test(multiring, dgx1_013) { check_machine("dgx1-v100", sub1, 3); }
Test(multiring, dgx1_02456) { check_machine("dgx1-v100", sub2, 5); }
Test(multiring, dgx1_123567) { check_machine("dgx1-v100", sub3, 6); }
Test(multiring, pcie4) {
  check_machine("pcie-4gpu", NULL, 4);
  /* Every GPU has one PCIe link: running the ring backwards would load the
   * same links the same ways, so both channels run forwards. */
  topo_graph *g = load("pcie-4gpu");
  tview t;
  mkview(&t, g, NULL, 4);
  sched *s = gen("multiring", SCHED_ALLREDUCE, 4, 0, &t.v, 0);
  cr_assert_eq(s->nchannels, 2);
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(s->route[0], SCHED_ROUTE_ANY);
    cr_assert_eq(next_of(s, r, 1), next_of(s, r, 0));
  }
  sched_free(s);
  topo_graph_free(g);
}

Test(multiring, fragments_without_nvlink_cycle) {
  /* GPU0 and GPU5 share no NVLink, GPU5 and GPU6 do: no ring on NVLink
   * alone, so one ring over the best paths, both directions. */
  static const int gpus[3] = {0, 5, 6};
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, gpus, 3);
  cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
  sched *s = gen("multiring", SCHED_ALLREDUCE, 3, 0, &t.v, 0);
  cr_assert_eq(s->nchannels, 2);
  for (int ch = 0; ch < 2; ch++)
    cr_assert_eq(s->route[ch], SCHED_ROUTE_ANY);
  /* Its hops take NVLink paths through other GPUs: the reverse direction
   * takes other links, so the two channels run opposite ways. */
  for (int r = 0; r < 3; r++)
    cr_assert_eq(next_of(s, next_of(s, r, 1), 0), r);
  sched_free(s);
  /* Two GPUs joined by two lanes: one ring, both directions. */
  static const int pair[2] = {0, 3};
  mkview(&t, g, pair, 2);
  cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
  topo_graph_free(g);
}

Test(multiring, nvswitch) {
  const char *models[2] = {"dgx-a100", "dgx-h100"};
  for (int m = 0; m < 2; m++) {
    topo_graph *g = load(models[m]);
    tview t;
    mkview(&t, g, dgx1_all, 8);
    cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
    sched *s = gen("multiring", SCHED_ALLREDUCE, 8, 0, &t.v, 0);
    /* Several channels, no more than a GPU's switch lanes, on one ring in
     * one direction (which loads each GPU's switch link both ways), equal
     * shares. */
    int gpu_lanes = 0;
    double lb;
    for (int k = 0; k < topo_count(g, TOPO_NVS); k++)
      gpu_lanes += lanes(g, t.vertex[0], topo_nth(g, TOPO_NVS, k), &lb);
    cr_assert_gt(gpu_lanes, 0);
    cr_assert_geq(s->nchannels, 2, "%s: %d channels", models[m], s->nchannels);
    cr_assert_leq(s->nchannels, gpu_lanes);
    double bn[GEN_MAX_CHANNELS];
    rings_of(s, &t.v, bn);
    for (int ch = 0; ch < s->nchannels; ch++) {
      cr_assert_eq(s->route[ch], SCHED_ROUTE_NVL);
      cr_assert_float_eq(s->weights[ch], 1.0 / s->nchannels, 1e-9);
      for (int r = 0; r < 8; r++)
        cr_assert_eq(next_of(s, r, ch), next_of(s, r, 0));
    }
    sched_free(s);
    /* Subsets too. */
    mkview(&t, g, sub2, 5);
    cr_assert_gt(verify_all("multiring", &t.v, 0), 0);
    cr_assert_gt(verify_all("hybrid", &t.v, 0), 0);
    topo_graph_free(g);
  }
}

Test(multiring, max_channels) {
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  for (int m = 1; m <= 7; m++) {
    cr_assert_gt(verify_all("multiring", &t.v, m), 0);
    sched *s = gen("multiring", SCHED_ALLREDUCE, 8, 0, &t.v, m);
    cr_assert_eq(s->nchannels, m < 6 ? m : 6, "max %d: %d channels", m,
                 s->nchannels);
    double bn[GEN_MAX_CHANNELS];
    rings_of(s, &t.v, bn);
    for (int ch = 0; ch < s->nchannels; ch++)
      cr_assert_float_eq(s->weights[ch] / s->weights[0], bn[ch] / bn[0], 1e-9);
    sched_free(s);
  }
  topo_graph_free(g);
}

Test(multiring, needs_a_view) {
  gen_params p = {SCHED_ALLREDUCE, 8, 0, 2, NULL, 0, 0};
  cr_assert_null(gen_try(gen_multiring, &p));
  cr_assert_null(gen_try(gen_hybrid, &p));
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  p.view = &t.v;
  p.nranks = 7; /* view of 8 ranks */
  cr_assert_null(gen_try(gen_multiring, &p));
  p.nranks = 8;
  p.coll = SCHED_ALLTOALL;
  cr_assert_null(gen_try(gen_multiring, &p));
  cr_assert_null(gen_try(gen_hybrid, &p));
  p.coll = SCHED_BROADCAST; /* multiring yes, hybrid no */
  sched *s = gen_try(gen_multiring, &p);
  cr_assert_not_null(s);
  sched_free(s);
  cr_assert_null(gen_try(gen_hybrid, &p));
  topo_graph_free(g);
}

/* R from the graph: a GPU's NVLink bandwidth over the rate of the PCIe
 * ring. That ring stages through CPU memory as the runtime does, so each GPU
 * sends up to its CPU and receives from it: the uplink of its PCIe switch
 * carries every GPU under the switch once each way, the GPU's own link
 * once. */
static double graph_ratio(const topo_graph *g, int gv) {
  double nvl = 0, pci = 0;
  int sw = -1;
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (k->a != gv && k->b != gv)
      continue;
    if (k->type == TOPO_LINK_NVL)
      nvl += k->bw;
    else if (k->type == TOPO_LINK_PCI) {
      pci += k->bw;
      sw = topo_other(g, l, gv);
    }
  }
  cr_assert_gt(pci, 0);
  cr_assert_eq(g->v[sw].type, TOPO_PCI);
  int gpus = 0;
  double up = 0;
  for (int i = 0; i < g->v[sw].nadj; i++) {
    int l = g->v[sw].adj[i], w = topo_other(g, l, sw);
    gpus += g->v[w].type == TOPO_GPU;
    if (g->v[w].type == TOPO_CPU)
      up = g->links[l].bw;
  }
  cr_assert(gpus > 0 && up > 0);
  double rate = up / gpus < pci ? up / gpus : pci;
  return nvl / rate;
}

static double route_share(const sched *s, int route) {
  double w = 0;
  for (int ch = 0; ch < s->nchannels; ch++)
    if (s->route[ch] == route)
      w += s->weights[ch];
  return w;
}

Test(hybrid, dgx1_split) {
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  cr_assert_gt(verify_all("hybrid", &t.v, 0), 0);
  double R = graph_ratio(g, t.vertex[0]);
  cr_assert_gt(R, 1);
  sched *s = gen("hybrid", SCHED_ALLREDUCE, 8, 0, &t.v, 0);
  cr_assert_not_null(s);
  cr_assert_eq(s->nchannels, 8, "6 NVLink rings + 2 PCIe: %d", s->nchannels);
  double wn = route_share(s, SCHED_ROUTE_NVL),
         wh = route_share(s, SCHED_ROUTE_HOST);
  cr_assert_float_eq(wn + wh, 1.0, 1e-9);
  cr_assert_float_eq(wn / wh, R, R * 1e-6, "split %g, graph says %g", wn / wh,
                     R);
  /* The NVLink channels are multiring's, with its relative weights. */
  sched *m = gen("multiring", SCHED_ALLREDUCE, 8, 0, &t.v, 0);
  int k = 0;
  for (int ch = 0; ch < s->nchannels; ch++)
    if (s->route[ch] == SCHED_ROUTE_NVL) {
      cr_assert_float_eq(s->weights[ch] / wn, m->weights[k], 1e-9);
      for (int r = 0; r < 8; r++)
        cr_assert_eq(next_of(s, r, ch), next_of(m, r, k));
      k++;
    }
  cr_assert_eq(k, m->nchannels);
  sched_free(m);
  sched_free(s);
  for (int mc = 2; mc <= 4; mc++) {
    cr_assert_gt(verify_all("hybrid", &t.v, mc), 0);
    s = gen("hybrid", SCHED_ALLGATHER, 8, 0, &t.v, mc);
    cr_assert_eq(s->nchannels, mc);
    cr_assert_gt(route_share(s, SCHED_ROUTE_HOST), 0);
    cr_assert_gt(route_share(s, SCHED_ROUTE_NVL), 0);
    sched_free(s);
  }
  cr_assert_null(gen("hybrid", SCHED_ALLGATHER, 8, 0, &t.v, 1));
  /* Subsets with NVLink rings. */
  mkview(&t, g, sub0, 4);
  cr_assert_gt(verify_all("hybrid", &t.v, 0), 0);
  mkview(&t, g, sub3, 6);
  cr_assert_gt(verify_all("hybrid", &t.v, 0), 0);
  /* No NVLink ring among GPUs 0, 5, 6: no hybrid. */
  static const int frag[3] = {0, 5, 6};
  mkview(&t, g, frag, 3);
  cr_assert_null(gen("hybrid", SCHED_ALLREDUCE, 3, 0, &t.v, 0));
  topo_graph_free(g);
}

Test(hybrid, pcie_only_machine) {
  topo_graph *g = load("pcie-4gpu");
  tview t;
  mkview(&t, g, NULL, 4);
  cr_assert_null(gen("hybrid", SCHED_ALLREDUCE, 4, 0, &t.v, 0));
  topo_graph_free(g);
}

/* ---- predictions (the simulator) ---- */

static double predict(const char *name, sched_coll c, const sched_view *v,
                      size_t bytes, double *eff) {
  sched *s = gen(name, c, v->nranks, 0, v, 0);
  cr_assert_not_null(s);
  sim_params sp;
  sim_params_gpu(&sp);
  sim_result res;
  braid_result rc = sim_run(s, v, bytes, &sp, &res);
  cr_assert_eq(rc, BRAID_SUCCESS, "sim %s %s: %s", name, sched_coll_name(c),
               err_msg());
  sched_free(s);
  *eff = res.efficiency;
  return res.time_us;
}

Test(multiring, dgx1_predicted_efficiency) {
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  size_t bytes = (size_t)256 << 20;
  sched_coll colls[2] = {SCHED_ALLGATHER, SCHED_ALLREDUCE};
  for (int i = 0; i < 2; i++) {
    /* allgather blocks are bytes / nranks each: 256 MiB gathered. */
    size_t b = colls[i] == SCHED_ALLGATHER ? bytes / 8 : bytes;
    double eff, tm = predict("multiring", colls[i], &t.v, b, &eff);
    cr_log_info("multiring %s 256 MiB DGX-1: %.1f us, %.4f of the bound",
                sched_coll_name(colls[i]), tm, eff);
    cr_assert_geq(eff, 0.98, "multiring %s: %.4f of the bound",
                  sched_coll_name(colls[i]), eff);
  }
  topo_graph_free(g);
}

Test(hybrid, dgx1_predicted_gain) {
  topo_graph *g = load("dgx1-v100");
  tview t;
  mkview(&t, g, dgx1_all, 8);
  double R = graph_ratio(g, t.vertex[0]);
  size_t bytes = (size_t)256 << 20;
  sched_coll colls[2] = {SCHED_ALLGATHER, SCHED_ALLREDUCE};
  for (int i = 0; i < 2; i++) {
    size_t b = colls[i] == SCHED_ALLGATHER ? bytes / 8 : bytes;
    double e1, e2;
    double tm = predict("multiring", colls[i], &t.v, b, &e1);
    double th = predict("hybrid", colls[i], &t.v, b, &e2);
    double gain = tm / th;
    cr_log_info("%s 256 MiB DGX-1: multiring %.1f us, hybrid %.1f us, "
                "gain %.4f (PCIe share predicts %.4f)",
                sched_coll_name(colls[i]), tm, th, gain, 1 + 1 / R);
    /* Better than NVLink alone, by no more than the PCIe share. */
    cr_assert_gt(gain, 1, "%s: gain %.4f", sched_coll_name(colls[i]), gain);
    cr_assert_lt(gain, 1 + 1.2 / R);
  }
  topo_graph_free(g);
}
