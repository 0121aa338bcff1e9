/*
 * Multi-ring generator: several rings over the ranks' GPUs that together use
 * every fast link, each channel carrying a share of the data proportional to
 * its bottleneck bandwidth. The steps of each ring are ring.c's
 * (ring_build_channel); only the rank order differs per channel.
 *
 * Finding the rings (multiring_plan):
 *   NVSwitch   every rank's GPU links to one NVSwitch: any order is a ring,
 *              and one direction already loads every GPU's switch link both
 *              ways (each rank sends to the next, receives from the
 *              previous); the other direction would add nothing. The ring
 *              in rank order carries MR_SWITCH_CHANNELS channels in the same
 *              direction, equal weights: while one channel's slice waits on
 *              its previous hop, the others keep the links busy. (Predicted
 *              on DGX A100 / H100 at 256 MiB: 2 channels 87% / 68% of the
 *              bound, 4 channels 100%; 2 channels in opposite directions
 *              66%, since their two-hop paths through the switch cross.)
 *   direct     the multigraph of NVLink lanes between the ranks' vertices (a
 *              link of count 2 is two lanes) is split into edge-disjoint
 *              Hamiltonian cycles by a depth-first search with backtracking:
 *              find a cycle in what is left, take its lanes, recurse; keep the
 *              largest set (then the highest total bandwidth). The search
 *              stops at the upper bound floor(min lanes per rank / 2) or after
 *              MR_BUDGET visited nodes. Each cycle runs in both directions
 *              (two channels), so every lane carries one ring per direction.
 *   fallback   no Hamiltonian cycle on direct NVLink lanes (fragmented
 *              allocations, PCIe-only machines, CPU ranks): one ring over the
 *              best paths (route ANY), the order with the widest bottleneck,
 *              on two channels: both directions where the reverse takes other
 *              links, else twice forwards (path_ring).
 * A channel's bandwidth is one lane's (link bandwidth / count) for its
 * thinnest hop. With more channels than max_channels, the widest are kept.
 */
#include <stdlib.h>
#include <string.h>

#include "gen_util.h"
#include "view.h"

/* Nodes the cycle searches may visit (bounds the time on large views). */
#define MR_BUDGET 2000000L
/* Channels on an NVSwitch (see above). */
#define MR_SWITCH_CHANNELS 4
/* Views with more ranks get one ring in rank order (no search). */
#define MR_MAX_SEARCH 64

void ring_plan_free(ring_plan *pl) {
  if (!pl)
    return;
  free(pl->order);
  free(pl->bw);
  free(pl->route);
  memset(pl, 0, sizeof(*pl));
}

braid_result ring_plan_alloc(ring_plan *pl, int n, int nch) {
  memset(pl, 0, sizeof(*pl));
  pl->n = n;
  pl->order = calloc((size_t)n * (size_t)(nch > 0 ? nch : 1), sizeof(int));
  pl->bw = calloc((size_t)(nch > 0 ? nch : 1), sizeof(double));
  pl->route = calloc((size_t)(nch > 0 ? nch : 1), 1);
  if (!pl->order || !pl->bw || !pl->route) {
    ring_plan_free(pl);
    return ERR(BRAID_ERR_NOMEM,
               "no memory for a ring plan of %d channels of %d ranks", nch, n);
  }
  return BRAID_SUCCESS;
}

/* Appends ring `ord` as channel pl->nch (forwards) and, when both, as the
 * next channel backwards (ord[0], ord[n-1], .., ord[1]). */
void ring_plan_add(ring_plan *pl, const int *ord, double bw, int route,
                   int both) {
  int n = pl->n;
  for (int d = 0; d < (both ? 2 : 1); d++) {
    int *o = pl->order + (size_t)pl->nch * (size_t)n;
    for (int q = 0; q < n; q++)
      o[q] = d == 0 ? ord[q] : ord[(n - q) % n];
    pl->bw[pl->nch] = bw;
    pl->route[pl->nch] = (uint8_t)route;
    pl->nch++;
  }
}

/* NVLink lanes between two vertices, and one lane's bandwidth. */
static int nvl_lanes(const topo_graph *g, int a, int b, double *lane_bw) {
  const topo_vertex *va = &g->v[a];
  for (int i = 0; i < va->nadj; i++) {
    const topo_link *l = &g->links[va->adj[i]];
    if (l->type == TOPO_LINK_NVL && topo_other(g, va->adj[i], a) == b) {
      int c = l->count > 0 ? l->count : 1;
      *lane_bw = l->bw / c;
      return c;
    }
  }
  *lane_bw = 0;
  return 0;
}

/* The NVSwitch every rank's vertex links to by NVLink: its id, and the fewest
 * lanes and least bandwidth of those links. -1 when there is none. */
static int common_nvswitch(const sched_view *v, int *lanes, double *bw) {
  const topo_graph *g = v->g;
  for (int k = 0; k < topo_count(g, TOPO_NVS); k++) {
    int s = topo_nth(g, TOPO_NVS, k);
    int minl = 0;
    double minbw = 0;
    int all = 1;
    for (int r = 0; r < v->nranks && all; r++) {
      double lb;
      int c = nvl_lanes(g, v->vertex[r], s, &lb);
      if (c == 0) {
        all = 0;
        break;
      }
      if (r == 0 || c < minl)
        minl = c;
      if (r == 0 || c * lb < minbw)
        minbw = c * lb;
    }
    if (all) {
      *lanes = minl;
      *bw = minbw;
      return s;
    }
  }
  return -1;
}

/* The Hamiltonian cycle decomposition search. */
typedef struct mr_search {
  int n;
  int *lanes;     /* n * n residual lanes */
  double *lbw;    /* n * n one lane's bandwidth */
  int *used;      /* (maxc + 1) * n: on the path, per depth */
  int *cand;      /* (maxc + 1) * n * n: next ranks to try, per length */
  int *stack;     /* (maxc + 1) * n: the cycles taken, then the path */
  double *cbw;    /* maxc: their bandwidths */
  int depth;      /* cycles taken */
  int maxc;       /* upper bound on the number of cycles */
  int *best;      /* maxc * n */
  double *bestbw; /* maxc */
  int nbest;
  double best_total;
  long budget;
} mr_search;

static int deg(const mr_search *m, int a) {
  int d = 0;
  for (int b = 0; b < m->n; b++)
    d += m->lanes[a * m->n + b];
  return d;
}

static void record(mr_search *m) {
  double tot = 0;
  for (int i = 0; i < m->depth; i++)
    tot += m->cbw[i];
  if (m->depth > m->nbest || (m->depth == m->nbest && tot > m->best_total)) {
    m->nbest = m->depth;
    m->best_total = tot;
    memcpy(m->best, m->stack, sizeof(int) * (size_t)m->depth * (size_t)m->n);
    memcpy(m->bestbw, m->cbw, sizeof(double) * (size_t)m->depth);
  }
}

static int done(const mr_search *m) {
  return m->budget <= 0 || m->nbest >= m->maxc;
}

static void decompose(mr_search *m);

/* Extends the path of the cycle at depth m->depth (row m->depth of stack,
 * used and cand) at length len, with the lanes of its hops taken; on a full
 * cycle, takes the closing lane and searches for the next cycle. */
static void extend(mr_search *m, int len) {
  int n = m->n, d = m->depth;
  if (done(m))
    return;
  m->budget--;
  int *path = m->stack + (size_t)d * (size_t)n;
  int *used = m->used + (size_t)d * (size_t)n;
  int a = path[len - 1];
  if (len == n) {
    /* Close the cycle; count each cycle once (path[1] < path[n-1]). */
    int z = path[0];
    if (m->lanes[a * n + z] <= 0 || path[1] > path[n - 1])
      return;
    double bw = 0;
    for (int q = 0; q < n; q++) {
      double lb = m->lbw[path[q] * n + path[(q + 1) % n]];
      if (q == 0 || lb < bw)
        bw = lb;
    }
    m->cbw[d] = bw;
    m->lanes[a * n + z]--, m->lanes[z * n + a]--;
    m->depth++;
    record(m);
    decompose(m);
    m->depth--;
    m->lanes[a * n + z]++, m->lanes[z * n + a]++;
    return;
  }
  /* Neighbours with the most lanes left first: they are the ones that need
   * several cycles. */
  int *cand = m->cand + ((size_t)d * (size_t)n + (size_t)len) * (size_t)n;
  int nc = 0;
  for (int b = 0; b < n; b++) {
    int l = m->lanes[a * n + b];
    if (l <= 0 || used[b])
      continue;
    int i = nc++;
    while (i > 0 && m->lanes[a * n + cand[i - 1]] < l) {
      cand[i] = cand[i - 1];
      i--;
    }
    cand[i] = b;
  }
  for (int i = 0; i < nc && !done(m); i++) {
    int b = cand[i];
    used[b] = 1;
    path[len] = b;
    m->lanes[a * n + b]--, m->lanes[b * n + a]--;
    extend(m, len + 1);
    m->lanes[a * n + b]++, m->lanes[b * n + a]++;
    used[b] = 0;
  }
}

/* Searches for one more cycle in what is left. */
static void decompose(mr_search *m) {
  int n = m->n, ub = -1;
  for (int a = 0; a < n; a++) {
    int d = deg(m, a) / 2;
    if (ub < 0 || d < ub)
      ub = d;
  }
  if (m->depth + ub <= m->nbest || m->depth >= m->maxc || done(m))
    return;
  int *row = m->stack + (size_t)m->depth * (size_t)n;
  int *used = m->used + (size_t)m->depth * (size_t)n;
  memset(used, 0, sizeof(int) * (size_t)n);
  row[0] = 0;
  used[0] = 1;
  extend(m, 1);
}

/* Hamiltonian cycles over direct NVLink lanes (n >= 3): appends them to pl
 * (none where there is none). BRAID_SUCCESS or BRAID_ERR_NOMEM. */
static braid_result direct_rings(const sched_view *v, ring_plan *pl) {
  int n = v->nranks;
  mr_search m;
  memset(&m, 0, sizeof(m));
  m.n = n;
  m.lanes = calloc((size_t)n * (size_t)n, sizeof(int));
  m.lbw = calloc((size_t)n * (size_t)n, sizeof(double));
  int mindeg = -1;
  if (m.lanes && m.lbw) {
    for (int a = 0; a < n; a++) {
      int d = 0;
      for (int b = 0; b < n; b++) {
        if (a == b)
          continue;
        m.lanes[a * n + b] =
            nvl_lanes(v->g, v->vertex[a], v->vertex[b], &m.lbw[a * n + b]);
        d += m.lanes[a * n + b];
      }
      if (mindeg < 0 || d < mindeg)
        mindeg = d;
    }
  }
  m.maxc = mindeg > 0 ? mindeg / 2 : 0;
  if (m.maxc > GEN_MAX_CHANNELS / 2)
    m.maxc = GEN_MAX_CHANNELS / 2;
  int cap = m.maxc > 0 ? m.maxc : 1;
  m.stack = calloc((size_t)(cap + 1) * (size_t)n, sizeof(int));
  m.used = calloc((size_t)(cap + 1) * (size_t)n, sizeof(int));
  m.cand = calloc((size_t)(cap + 1) * (size_t)n * (size_t)n, sizeof(int));
  m.best = calloc((size_t)cap * (size_t)n, sizeof(int));
  m.cbw = calloc((size_t)cap, sizeof(double));
  m.bestbw = calloc((size_t)cap, sizeof(double));
  braid_result rc = BRAID_SUCCESS;
  if (m.lanes && m.lbw && m.used && m.cand && m.stack && m.best && m.cbw &&
      m.bestbw) {
    m.budget = MR_BUDGET;
    if (m.maxc > 0)
      decompose(&m);
    for (int i = 0; i < m.nbest; i++)
      ring_plan_add(pl, m.best + (size_t)i * (size_t)n, m.bestbw[i],
                    SCHED_ROUTE_NVL, 1);
  } else {
    rc = ERR(BRAID_ERR_NOMEM, "no memory to search rings over %d ranks", n);
  }
  free(m.lanes);
  free(m.lbw);
  free(m.used);
  free(m.cand);
  free(m.stack);
  free(m.best);
  free(m.cbw);
  free(m.bestbw);
  return rc;
}

/* The bottleneck of a ring order over best paths. */
static double order_bw(const double *pbw, const int *ord, int n) {
  double bw = -1;
  for (int q = 0; q < n; q++) {
    double b = pbw[ord[q] * n + ord[(q + 1) % n]];
    if (bw < 0 || b < bw)
      bw = b;
  }
  return bw;
}

typedef struct perm_search {
  int n;
  const double *pbw;
  int *cur, *used, *best;
  double bestbw;
  long budget;
} perm_search;

static void perm_dfs(perm_search *s, int len, double bn) {
  int n = s->n;
  if (s->budget-- <= 0 || bn <= s->bestbw)
    return;
  if (len == n) {
    double b = s->pbw[s->cur[n - 1] * n + s->cur[0]];
    if (b < bn)
      bn = b;
    if (bn > s->bestbw) {
      s->bestbw = bn;
      memcpy(s->best, s->cur, sizeof(int) * (size_t)n);
    }
    return;
  }
  for (int b = 1; b < n; b++) {
    if (s->used[b])
      continue;
    double e = s->pbw[s->cur[len - 1] * n + b];
    s->used[b] = 1;
    s->cur[len] = b;
    perm_dfs(s, len + 1, e < bn ? e : bn);
    s->used[b] = 0;
  }
}

/* The rate of ring `ord` over best paths when it runs forwards only (both
 * 0) or forwards and backwards at once (both 1, the sum of the two): the
 * widest share of the busiest directed link. load: 2 * g->nl counters. */
static double paths_rate(const sched_view *v, const int *ord, int both,
                         int *load) {
  topo_graph *g = v->g;
  int n = v->nranks;
  memset(load, 0, sizeof(int) * 2 * (size_t)g->nl);
  for (int d = 0; d < (both ? 2 : 1); d++)
    for (int q = 0; q < n; q++) {
      int a = v->vertex[ord[q]], b = v->vertex[ord[(q + 1) % n]];
      topo_path tp;
      if (d)
        a = v->vertex[ord[(q + 1) % n]], b = v->vertex[ord[q]];
      if (topo_path_get(g, a, b, &tp) != BRAID_SUCCESS)
        return -1;
      for (int i = 0; i < tp.nhops; i++) {
        int l = tp.links[i];
        load[2 * l + (g->links[l].a == tp.verts[i] ? 0 : 1)]++;
      }
      topo_path_release(&tp);
    }
  double x = -1;
  for (int i = 0; i < 2 * g->nl; i++)
    if (load[i] > 0 && (x < 0 || g->links[i / 2].bw / load[i] < x))
      x = g->links[i / 2].bw / load[i];
  return x > 0 ? x * (both ? 2 : 1) : 0;
}

/* Does running ring `ord` backwards as well add bandwidth? It does when the
 * two directions take different links (direct links, paths through GPUs);
 * it does not when every hop crosses a switch or a CPU that both directions
 * load alike (each GPU's one link already carries the ring both ways).
 * *adds: 1 yes, 0 no. BRAID_ERR_UNSUPPORTED where a hop has no path,
 * BRAID_ERR_NOMEM. */
static braid_result reverse_adds(const sched_view *v, const int *ord,
                                 int *adds) {
  int *load = calloc(2 * (size_t)(v->g->nl > 0 ? v->g->nl : 1), sizeof(int));
  if (!load)
    return ERR(BRAID_ERR_NOMEM, "no memory for the loads of %d links",
               v->g->nl);
  double one = paths_rate(v, ord, 0, load);
  double two = paths_rate(v, ord, 1, load);
  free(load);
  if (one < 0 || two < 0)
    return ERR(BRAID_ERR_UNSUPPORTED, "no ring through every rank's vertex");
  *adds = two > one * (1 + 1e-9);
  return BRAID_SUCCESS;
}

/* One ring over best paths (route ANY) on two channels: forwards and
 * backwards, or twice forwards when the reverse adds nothing (reverse_adds):
 * two channels on the same links keep them busy while one waits on its
 * previous hop. */
static braid_result path_ring(const sched_view *v, ring_plan *pl) {
  int n = v->nranks;
  double *pbw = calloc((size_t)n * (size_t)n, sizeof(double));
  perm_search s;
  memset(&s, 0, sizeof(s));
  s.cur = calloc((size_t)n, sizeof(int));
  s.used = calloc((size_t)n, sizeof(int));
  s.best = calloc((size_t)n, sizeof(int));
  braid_result rc = BRAID_SUCCESS;
  if (!pbw || !s.cur || !s.used || !s.best)
    rc = ERR(BRAID_ERR_NOMEM, "no memory to search a ring over %d ranks", n);
  else {
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        int va = v->vertex[a], vb = v->vertex[b];
        pbw[a * n + b] = va == vb ? 1e9 : topo_path_bw(v->g, va, vb);
      }
    for (int q = 0; q < n; q++)
      s.best[q] = q; /* the rank order unless a wider ring turns up */
    s.n = n;
    s.pbw = pbw;
    s.bestbw = order_bw(pbw, s.best, n);
    s.budget = MR_BUDGET;
    s.cur[0] = 0;
    s.used[0] = 1;
    if (n > 2)
      perm_dfs(&s, 1, 1e18);
    double bw = s.bestbw > 0 ? s.bestbw : 1.0;
    int both = 0;
    rc = n > 1 ? reverse_adds(v, s.best, &both) : BRAID_SUCCESS;
    if (rc == BRAID_SUCCESS) {
      /* Two channels: the ring both ways, or twice forwards. */
      ring_plan_add(pl, s.best, bw, SCHED_ROUTE_ANY, both);
      if (!both && n > 1)
        ring_plan_add(pl, s.best, bw, SCHED_ROUTE_ANY, 0);
    }
  }
  free(pbw);
  free(s.cur);
  free(s.used);
  free(s.best);
  return rc;
}

/* Keeps the `max` widest channels (stable: a ring's two directions stay
 * together unless max cuts between them). */
static void plan_trim(ring_plan *pl, int max) {
  int n = pl->n;
  while (pl->nch > max) {
    int worst = 0;
    for (int c = 1; c < pl->nch; c++)
      if (pl->bw[c] <= pl->bw[worst])
        worst = c;
    for (int c = worst; c + 1 < pl->nch; c++) {
      memmove(pl->order + (size_t)c * (size_t)n,
              pl->order + (size_t)(c + 1) * (size_t)n, sizeof(int) * (size_t)n);
      pl->bw[c] = pl->bw[c + 1];
      pl->route[c] = pl->route[c + 1];
    }
    pl->nch--;
  }
}

int mr_view_check(const sched_view *v, int nranks) {
  if (!v || !v->g || v->nranks != nranks || !v->vertex)
    return -1;
  for (int r = 0; r < nranks; r++) {
    if (v->vertex[r] < 0 || v->vertex[r] >= v->g->nv)
      return -1;
    for (int q = 0; q < r; q++)
      if (v->vertex[q] == v->vertex[r])
        return -1;
  }
  return 0;
}

braid_result multiring_plan(const sched_view *v, int max_channels,
                            ring_plan *pl) {
  memset(pl, 0, sizeof(*pl));
  if (!v || !v->g || v->nranks < 1)
    return ERR(BRAID_ERR_UNSUPPORTED, "no ring through every rank's vertex");
  int n = v->nranks;
  if (max_channels <= 0 || max_channels > GEN_MAX_CHANNELS)
    max_channels = GEN_MAX_CHANNELS;
  /* Room for every candidate before plan_trim: at most GEN_MAX_CHANNELS / 2
   * cycles of two channels, or a few switch or path channels. */
  CHECKR(ring_plan_alloc(pl, n, 2 * GEN_MAX_CHANNELS + 2));
  if (n == 1) {
    int o = 0;
    ring_plan_add(pl, &o, 1.0, SCHED_ROUTE_ANY, 0);
    return BRAID_SUCCESS;
  }
  int sw_lanes = 0;
  double sw_bw = 0;
  if (common_nvswitch(v, &sw_lanes, &sw_bw) >= 0) {
    int *ord = malloc(sizeof(int) * (size_t)n);
    if (!ord) {
      ring_plan_free(pl);
      return ERR(BRAID_ERR_NOMEM, "no memory for a ring of %d ranks", n);
    }
    for (int q = 0; q < n; q++)
      ord[q] = q;
    for (int k = 0; k < MR_SWITCH_CHANNELS; k++)
      ring_plan_add(pl, ord, sw_bw / MR_SWITCH_CHANNELS, SCHED_ROUTE_NVL, 0);
    free(ord);
  } else if (n > MR_MAX_SEARCH) {
    /* Too many ranks to search: one ring in rank order over best paths. */
    int *ord = malloc(sizeof(int) * (size_t)n);
    if (!ord) {
      ring_plan_free(pl);
      return ERR(BRAID_ERR_NOMEM, "no memory for a ring of %d ranks", n);
    }
    for (int q = 0; q < n; q++)
      ord[q] = q;
    ring_plan_add(pl, ord, 1.0, SCHED_ROUTE_ANY, 1);
    free(ord);
  } else if (n == 2) {
    /* Two ranks: a ring is the pair; its two directions share one lane
     * each way, so a link of L lanes carries max(1, L / 2) rings. */
    double lb;
    int l = nvl_lanes(v->g, v->vertex[0], v->vertex[1], &lb);
    int o[2] = {0, 1};
    int nr = l >= 2 ? l / 2 : l;
    if (nr > GEN_MAX_CHANNELS / 2)
      nr = GEN_MAX_CHANNELS / 2;
    for (int k = 0; k < nr; k++)
      ring_plan_add(pl, o, l >= 2 ? lb : lb / 2, SCHED_ROUTE_NVL, 1);
  } else {
    braid_result r = direct_rings(v, pl);
    if (r != BRAID_SUCCESS) {
      ring_plan_free(pl);
      return r;
    }
  }
  if (pl->nch == 0) {
    braid_result r = path_ring(v, pl);
    if (r != BRAID_SUCCESS) {
      ring_plan_free(pl);
      return r;
    }
  }
  plan_trim(pl, max_channels);
  return BRAID_SUCCESS;
}

static braid_result ring_plan_fill(sched *s, const ring_plan *pl,
                                   const double *weights) {
  double tot = 0;
  for (int c = 0; c < pl->nch; c++)
    tot += weights ? weights[c] : pl->bw[c];
  for (int c = 0; c < pl->nch; c++) {
    double w = weights ? weights[c] : pl->bw[c];
    s->weights[c] = tot > 0 ? w / tot : 1.0 / pl->nch;
    s->route[c] = pl->route[c];
    CHECKR(ring_build_channel(s, c, pl->order + (size_t)c * (size_t)pl->n));
  }
  return BRAID_SUCCESS;
}

braid_result ring_plan_sched(const gen_params *p, const ring_plan *pl,
                             const double *weights, const char *algo,
                             sched **out) {
  *out = NULL;
  if (!pl || pl->nch < 1 || pl->n != p->nranks)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s: a ring plan of %d channels over %d ranks for %d ranks",
               algo, pl ? pl->nch : 0, pl ? pl->n : 0, p->nranks);
  sched *s;
  CHECKR(ring_sched_new(p, pl->nch, algo, &s));
  return gen_done(s, ring_plan_fill(s, pl, weights), out);
}

braid_result gen_multiring(const gen_params *p, sched **out) {
  *out = NULL;
  if (!p)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  gen_params q = *p;
  q.nchannels = 1; /* the rings decide the channels */
  CHECKR(gen_check(&q, &gen_multiring_desc));
  CHECKR(gen_check_view(p, &gen_multiring_desc));
  ring_plan pl;
  braid_result r = multiring_plan(p->view, p->max_channels, &pl);
  if (r != BRAID_SUCCESS)
    return ERR_WRAP(r, "multiring");
  r = ring_plan_sched(p, &pl, NULL, "multiring", out);
  ring_plan_free(&pl);
  return r;
}

const gen_desc gen_multiring_desc = {
    .name = "multiring",
    .fn = gen_multiring,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = GEN_NEEDS_GRAPH,
    .flags = 0,
    .cost = NULL,
};
