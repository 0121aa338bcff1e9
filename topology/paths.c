/*
 * Paths between vertices. For a source, the class of the best path to each
 * target is the lowest class c such that the target is reachable using only
 * hops of class <= c; within that class the path maximises the bottleneck
 * bandwidth, then minimises the hop count. Each class level is one
 * widest-path Dijkstra run. Hop classes:
 *   NVL link -> NVL; PCI link -> PHB when one end is a CPU, PXB between two
 *   PCI switches, PIX otherwise; SYS link -> SYS; NET link -> NET;
 *   passing through a GPU (NVLink in and out only) -> NVB.
 * A path never passes through a GPU over PCI, nor through a NIC from PCI to
 * PCI (NICs are only traversed between PCI and the network). Because these
 * rules depend on how a vertex was entered, the search runs over states
 * (vertex, kind of link it was entered by), so reachability is exact and
 * classes and bandwidths are symmetric. A path may leave through a NIC and
 * come back in through the same NIC (a hairpin through the network switch)
 * when nothing better joins two PCI trees.
 */
#include "topology/topo_int.h"

#include <stdlib.h>
#include <string.h>

#define NLEVELS (TOPO_PATH_NET - TOPO_PATH_NVL + 1)

/* entry kinds of a state */
#define NKINDS 3
static int kind_of(topo_ltype t) {
  return t == TOPO_LINK_NVL ? 0 : t == TOPO_LINK_NET ? 2 : 1;
}

struct topo_path_row {
  unsigned char *cls;
  double *bw, *lat;
  int *hops;
  int *end;                               /* final state of each target */
  int *prev_s[NLEVELS], *prev_l[NLEVELS]; /* per state */
};

static topo_pclass link_class(const topo_graph *g, int l) {
  const topo_link *k = &g->links[l];
  switch (k->type) {
  case TOPO_LINK_NVL:
    return TOPO_PATH_NVL;
  case TOPO_LINK_SYS:
    return TOPO_PATH_SYS;
  case TOPO_LINK_NET:
    return TOPO_PATH_NET;
  default: {
    topo_vtype ta = g->v[k->a].type, tb = g->v[k->b].type;
    if (ta == TOPO_CPU || tb == TOPO_CPU)
      return TOPO_PATH_PHB;
    if (ta == TOPO_PCI && tb == TOPO_PCI)
      return TOPO_PATH_PXB;
    return TOPO_PATH_PIX;
  }
  }
}

/* May a path enter u over link lin and leave over lout at level c? */
static int transit_ok(const topo_graph *g, int u, int lin, int lout,
                      topo_pclass c) {
  topo_ltype tin = g->links[lin].type, tout = g->links[lout].type;
  switch (g->v[u].type) {
  case TOPO_GPU:
    return c >= TOPO_PATH_NVB && tin == TOPO_LINK_NVL && tout == TOPO_LINK_NVL;
  case TOPO_NIC:
    return (tin == TOPO_LINK_NET) != (tout == TOPO_LINK_NET);
  default:
    return 1;
  }
}

typedef struct heap_ent {
  double bw;
  int hops, v;
} heap_ent;

static int ent_better(const heap_ent *a, const heap_ent *b) {
  return a->bw > b->bw || (a->bw == b->bw && a->hops < b->hops);
}

static void heap_push(heap_ent *h, int *n, heap_ent e) {
  int i = (*n)++;
  h[i] = e;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!ent_better(&h[i], &h[p]))
      break;
    heap_ent t = h[i];
    h[i] = h[p];
    h[p] = t;
    i = p;
  }
}

static heap_ent heap_pop(heap_ent *h, int *n) {
  heap_ent top = h[0];
  h[0] = h[--(*n)];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, b = i;
    if (l < *n && ent_better(&h[l], &h[b]))
      b = l;
    if (r < *n && ent_better(&h[r], &h[b]))
      b = r;
    if (b == i)
      break;
    heap_ent t = h[i];
    h[i] = h[b];
    h[b] = t;
    i = b;
  }
  return top;
}

static void row_free(topo_path_row *r) {
  if (!r)
    return;
  free(r->cls);
  free(r->bw);
  free(r->lat);
  free(r->hops);
  free(r->end);
  for (int i = 0; i < NLEVELS; i++) {
    free(r->prev_s[i]);
    free(r->prev_l[i]);
  }
  free(r);
}

void topo_paths_reset(topo_graph *g) {
  if (!g->rows)
    return;
  for (int i = 0; i < g->nv; i++)
    row_free(g->rows[i]);
  free(g->rows);
  g->rows = NULL;
}

static topo_path_row *row_compute(const topo_graph *g, int src) {
  int n = g->nv, ns = n * NKINDS;
  topo_path_row *r = calloc(1, sizeof(*r));
  double *best = malloc((size_t)ns * sizeof(double));
  int *bhops = malloc((size_t)ns * sizeof(int));
  char *done = malloc((size_t)ns);
  heap_ent *heap =
      malloc((size_t)(2 * g->nl * NKINDS + ns + 1) * sizeof(heap_ent));
  int ok = r && best && bhops && done && heap;
  if (ok) {
    r->cls = malloc((size_t)n);
    r->bw = calloc((size_t)n, sizeof(double));
    r->lat = calloc((size_t)n, sizeof(double));
    r->hops = calloc((size_t)n, sizeof(int));
    r->end = malloc((size_t)n * sizeof(int));
    ok = r->cls && r->bw && r->lat && r->hops && r->end;
    for (int i = 0; i < NLEVELS && ok; i++) {
      r->prev_s[i] = malloc((size_t)ns * sizeof(int));
      r->prev_l[i] = malloc((size_t)ns * sizeof(int));
      ok = r->prev_s[i] && r->prev_l[i];
    }
  }
  if (!ok) {
    row_free(r);
    free(best);
    free(bhops);
    free(done);
    free(heap);
    return NULL;
  }
  memset(r->cls, TOPO_PATH_DIS, (size_t)n);
  r->cls[src] = TOPO_PATH_LOC;
  r->end[src] = -1;
  int left = n - 1;
  /* the source is state (src, 1) and may leave by any link */
  int s0 = src * NKINDS + 1;
  for (int lv = 0; lv < NLEVELS && left > 0; lv++) {
    topo_pclass c = (topo_pclass)(TOPO_PATH_NVL + lv);
    int *ps = r->prev_s[lv], *pl = r->prev_l[lv];
    for (int i = 0; i < ns; i++) {
      best[i] = -1;
      bhops[i] = 0;
      ps[i] = pl[i] = -1;
      done[i] = 0;
    }
    int hn = 0;
    best[s0] = 1e300;
    heap_push(heap, &hn, (heap_ent){1e300, 0, s0});
    while (hn > 0) {
      heap_ent e = heap_pop(heap, &hn);
      int st = e.v, u = st / NKINDS;
      if (done[st] || e.bw != best[st] || e.hops != bhops[st])
        continue;
      done[st] = 1;
      for (int k = 0; k < g->v[u].nadj; k++) {
        int l = g->v[u].adj[k];
        if (link_class(g, l) > c)
          continue;
        if (st != s0 && !transit_ok(g, u, pl[st], l, c))
          continue;
        int w = topo_other(g, l, u);
        int ws = w * NKINDS + kind_of(g->links[l].type);
        if (done[ws] || w == src)
          continue;
        double nb = e.bw < g->links[l].bw ? e.bw : g->links[l].bw;
        int nh = e.hops + 1;
        if (nb > best[ws] || (nb == best[ws] && nh < bhops[ws])) {
          best[ws] = nb;
          bhops[ws] = nh;
          ps[ws] = st;
          pl[ws] = l;
          heap_push(heap, &hn, (heap_ent){nb, nh, ws});
        }
      }
    }
    for (int t = 0; t < n; t++) {
      if (t == src || r->cls[t] != TOPO_PATH_DIS)
        continue;
      int bs = -1;
      for (int k = 0; k < NKINDS; k++) {
        int s = t * NKINDS + k;
        if (done[s] && (bs < 0 || best[s] > best[bs] ||
                        (best[s] == best[bs] && bhops[s] < bhops[bs])))
          bs = s;
      }
      if (bs < 0)
        continue;
      r->cls[t] = (unsigned char)c;
      r->bw[t] = best[bs];
      r->hops[t] = bhops[bs];
      r->end[t] = bs;
      double lat = 0;
      for (int x = bs; x != s0; x = ps[x])
        lat += g->links[pl[x]].lat_us;
      r->lat[t] = lat;
      left--;
    }
  }
  free(best);
  free(bhops);
  free(done);
  free(heap);
  return r;
}

static topo_path_row *row_get(topo_graph *g, int src) {
  if (!g->rows) {
    g->rows = calloc((size_t)g->nv, sizeof(*g->rows));
    if (!g->rows)
      return NULL;
  }
  if (!g->rows[src])
    g->rows[src] = row_compute(g, src);
  return g->rows[src];
}

braid_result topo_paths_all(topo_graph *g) {
  for (int i = 0; i < g->nv; i++)
    if (!row_get(g, i))
      return BRAID_ERR_NOMEM;
  return BRAID_SUCCESS;
}

topo_pclass topo_path_class(topo_graph *g, int a, int b) {
  if (a < 0 || b < 0 || a >= g->nv || b >= g->nv)
    return TOPO_PATH_DIS;
  topo_path_row *r = row_get(g, a);
  return r ? (topo_pclass)r->cls[b] : TOPO_PATH_DIS;
}

double topo_path_bw(topo_graph *g, int a, int b) {
  if (a < 0 || b < 0 || a >= g->nv || b >= g->nv)
    return 0;
  topo_path_row *r = row_get(g, a);
  return r && a != b ? r->bw[b] : 0;
}

void topo_path_release(topo_path *p) {
  free(p->verts);
  free(p->links);
  p->verts = p->links = NULL;
}

braid_result topo_path_get(topo_graph *g, int a, int b, topo_path *out) {
  memset(out, 0, sizeof(*out));
  if (a < 0 || b < 0 || a >= g->nv || b >= g->nv)
    return BRAID_ERR_INVALID_ARG;
  topo_path_row *r = row_get(g, a);
  if (!r)
    return BRAID_ERR_NOMEM;
  out->cls = (topo_pclass)r->cls[b];
  if (out->cls == TOPO_PATH_DIS)
    return BRAID_SUCCESS;
  out->bw = a == b ? 0 : r->bw[b];
  out->lat_us = r->lat[b];
  out->nhops = r->hops[b];
  out->verts = malloc((size_t)(out->nhops + 1) * sizeof(int));
  out->links = malloc((size_t)(out->nhops + 1) * sizeof(int));
  if (!out->verts || !out->links) {
    topo_path_release(out);
    return BRAID_ERR_NOMEM;
  }
  out->verts[out->nhops] = b;
  if (out->nhops) {
    int lv = out->cls - TOPO_PATH_NVL;
    int x = r->end[b];
    for (int i = out->nhops - 1; i >= 0; i--) {
      out->links[i] = r->prev_l[lv][x];
      x = r->prev_s[lv][x];
      out->verts[i] = x / NKINDS;
    }
  }
  return BRAID_SUCCESS;
}
