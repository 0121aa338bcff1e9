/*
 * Routes for the simulator and the flow graphs (see route.h).
 *
 * One widest-path search (maximise the bottleneck bandwidth, then minimise
 * the hop count, then the latency) over states (vertex, kind of the link it
 * was entered by), with scratch arrays reused between searches and reset
 * only where a search touched them, so that a query on a 1000-host cluster
 * costs the size of the two hosts involved, not of the cluster.
 */
#include "route.h"

#include <stdlib.h>
#include <string.h>

#include "schedule.h"

#define NK 3 /* entry kinds: NVLink, PCIe/SYS, network (and "start") */

typedef struct hent {
  double bw;
  int hops;
  double lat;
  int s;
} hent;

struct route_ctx {
  topo_graph *g;
  int ns;
  double *bw, *lat;
  int *hops, *prev_s, *prev_l;
  unsigned char *done;
  int *touched;
  int ntouched;
  hent *heap;
  int nheap, capheap;
};

static int kind_of(topo_ltype t) {
  return t == TOPO_LINK_NVL ? 0 : t == TOPO_LINK_NET ? 2 : 1;
}

route_ctx *route_ctx_new(topo_graph *g) {
  route_ctx *rc = calloc(1, sizeof *rc);
  if (!rc)
    return NULL;
  rc->g = g;
  rc->ns = g->nv * NK;
  size_t n = (size_t)(rc->ns ? rc->ns : 1);
  rc->bw = malloc(n * sizeof(double));
  rc->lat = malloc(n * sizeof(double));
  rc->hops = malloc(n * sizeof(int));
  rc->prev_s = malloc(n * sizeof(int));
  rc->prev_l = malloc(n * sizeof(int));
  rc->done = calloc(n, 1);
  rc->touched = malloc(n * sizeof(int));
  rc->capheap = 64;
  rc->heap = malloc((size_t)rc->capheap * sizeof(hent));
  if (!rc->bw || !rc->lat || !rc->hops || !rc->prev_s || !rc->prev_l ||
      !rc->done || !rc->touched || !rc->heap) {
    route_ctx_free(rc);
    return NULL;
  }
  for (int i = 0; i < rc->ns; i++)
    rc->bw[i] = -1;
  return rc;
}

void route_ctx_free(route_ctx *rc) {
  if (!rc)
    return;
  free(rc->bw);
  free(rc->lat);
  free(rc->hops);
  free(rc->prev_s);
  free(rc->prev_l);
  free(rc->done);
  free(rc->touched);
  free(rc->heap);
  free(rc);
}

static int better(const hent *a, const hent *b) {
  if (a->bw != b->bw)
    return a->bw > b->bw;
  if (a->hops != b->hops)
    return a->hops < b->hops;
  return a->lat < b->lat;
}

static int heap_push(route_ctx *rc, hent e) {
  if (rc->nheap == rc->capheap) {
    int cap = rc->capheap > 0 ? rc->capheap * 2 : 64;
    hent *h = realloc(rc->heap, (size_t)cap * sizeof(hent));
    if (!h)
      return -1;
    rc->heap = h;
    rc->capheap = cap;
  }
  int i = rc->nheap++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!better(&e, &rc->heap[p]))
      break;
    rc->heap[i] = rc->heap[p];
    i = p;
  }
  rc->heap[i] = e;
  return 0;
}

static hent heap_pop(route_ctx *rc) {
  hent top = rc->heap[0], last = rc->heap[--rc->nheap];
  int i = 0, n = rc->nheap;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && better(&rc->heap[c + 1], &rc->heap[c]))
      c++;
    if (!better(&rc->heap[c], &last))
      break;
    rc->heap[i] = rc->heap[c];
    i = c;
  }
  if (n > 0)
    rc->heap[i] = last;
  return top;
}

static void reset(route_ctx *rc) {
  for (int i = 0; i < rc->ntouched; i++) {
    int s = rc->touched[i];
    rc->bw[s] = -1;
    rc->done[s] = 0;
  }
  rc->ntouched = 0;
  rc->nheap = 0;
}

/* May the search use link l entering from state kind `kin` at vertex u? */
static int link_ok(const topo_graph *g, int u, int kin, int l, int r,
                   int nvl_only, int ha, int hb) {
  const topo_link *k = &g->links[l];
  int w = topo_other(g, l, u);
  const topo_vertex *vw = &g->v[w];
  if (vw->type != TOPO_NET && vw->host != ha && vw->host != hb)
    return 0;
  if (r == SCHED_ROUTE_NVL || nvl_only) {
    if (k->type != TOPO_LINK_NVL)
      return 0;
  } else if (r == SCHED_ROUTE_HOST && k->type == TOPO_LINK_NVL)
    return 0;
  if (kin < 0) /* leaving the source */
    return 1;
  switch (g->v[u].type) {
  case TOPO_GPU: /* transit through a GPU: NVLink in and out (ANY only) */
    return r == SCHED_ROUTE_ANY && kin == 0 && k->type == TOPO_LINK_NVL;
  case TOPO_NIC:
    return (kin == 2) != (k->type == TOPO_LINK_NET);
  default:
    return 1;
  }
}

static int path_class(topo_ltype t) {
  return t == TOPO_LINK_NVL   ? TOPO_PATH_NVL
         : t == TOPO_LINK_NET ? TOPO_PATH_NET
         : t == TOPO_LINK_SYS ? TOPO_PATH_SYS
                              : TOPO_PATH_PHB;
}

/* Widest path search from a to b, or with b < 0 to the first CPU reached
 * (the CPU nearest a over the widest path). Returns the end state, -1 when
 * none is reached, -2 when out of memory. */
static int search(route_ctx *rc, int a, int b, int r, int nvl_only) {
  topo_graph *g = rc->g;
  int ha = g->v[a].host, hb = b >= 0 ? g->v[b].host : ha;
  reset(rc);
  int s0 = a * NK + 1; /* the start state (kind unused) */
  rc->bw[s0] = 1e300;
  rc->hops[s0] = 0;
  rc->lat[s0] = 0;
  rc->prev_s[s0] = -1;
  rc->prev_l[s0] = -1;
  rc->touched[rc->ntouched++] = s0;
  if (heap_push(rc, (hent){1e300, 0, 0, s0}))
    return -2;
  while (rc->nheap > 0) {
    hent e = heap_pop(rc);
    if (rc->done[e.s])
      continue;
    rc->done[e.s] = 1;
    int u = e.s / NK;
    if (u == b || (b < 0 && u != a && g->v[u].type == TOPO_CPU))
      return e.s;
    int kin = e.s == s0 ? -1 : e.s % NK;
    const topo_vertex *vu = &g->v[u];
    for (int i = 0; i < vu->nadj; i++) {
      int l = vu->adj[i];
      if (!link_ok(g, u, kin, l, r, nvl_only, ha, hb))
        continue;
      const topo_link *k = &g->links[l];
      int w = topo_other(g, l, u);
      int ns = w * NK + kind_of(k->type);
      if (rc->done[ns])
        continue;
      hent c = {e.bw < k->bw ? e.bw : k->bw, e.hops + 1, e.lat + k->lat_us, ns};
      if (rc->bw[ns] >= 0) {
        hent old = {rc->bw[ns], rc->hops[ns], rc->lat[ns], ns};
        if (!better(&c, &old))
          continue;
      } else {
        rc->touched[rc->ntouched++] = ns;
      }
      rc->bw[ns] = c.bw;
      rc->hops[ns] = c.hops;
      rc->lat[ns] = c.lat;
      rc->prev_s[ns] = e.s;
      rc->prev_l[ns] = l;
      if (heap_push(rc, c))
        return -2;
    }
  }
  return -1;
}

/* Starts out as the empty path at vertex a; 0, or -1 when out of memory. */
static int path_start(topo_path *out, int a) {
  out->verts = malloc(sizeof(int));
  if (!out->verts)
    return -1;
  out->verts[0] = a;
  out->bw = 1e300;
  out->cls = TOPO_PATH_NVL; /* raised to the worst link's class */
  return 0;
}

/* Appends the path that search() ended at `end` to out (verts[0] set by
 * path_start for the first piece); 0, or -1 when out of memory. */
static int append(route_ctx *rc, int end, topo_path *out) {
  topo_graph *g = rc->g;
  int n = rc->hops[end], m = out->nhops + n;
  int *verts = realloc(out->verts, (size_t)(m + 1) * sizeof(int));
  if (verts)
    out->verts = verts;
  int *links = realloc(out->links, (size_t)(m ? m : 1) * sizeof(int));
  if (links)
    out->links = links;
  if (!verts || !links)
    return -1;
  for (int s = end, i = m; i > out->nhops; i--) {
    int l = rc->prev_l[s];
    out->links[i - 1] = l;
    out->verts[i] = s / NK;
    int c = path_class(g->links[l].type);
    if (c > (int)out->cls)
      out->cls = (topo_pclass)c;
    s = rc->prev_s[s];
  }
  out->nhops = m;
  out->bw = rc->bw[end] < out->bw ? rc->bw[end] : out->bw;
  out->lat_us += rc->lat[end];
  return 0;
}

/* SCHED_ROUTE_HOST between two GPUs: the way the runtime stages it (the
 * staging adapter of transports/cuda/staged.c), from GPU a to the memory of
 * its CPU, from there to b's CPU (over the inter-socket link, or through
 * the NICs and the network on another host), and on to GPU b. Each GPU's CPU
 * is the one nearest it over the widest path. 1 when out holds that path
 * (out empty on entry), 0 when there is none, -1 when out of memory; out is
 * released by the caller either way. */
static int staged(route_ctx *rc, int a, int b, topo_path *out) {
  int end = search(rc, a, -1, SCHED_ROUTE_HOST, 0); /* a up to its CPU */
  if (end < 0)
    return end == -2 ? -1 : 0;
  int ca = end / NK;
  if (path_start(out, a) || append(rc, end, out))
    return -1;
  end = search(rc, b, -1, SCHED_ROUTE_HOST, 0); /* which CPU is b's */
  if (end < 0)
    return end == -2 ? -1 : 0;
  int stops[3] = {ca, end / NK, b};
  for (int i = 0; i < 2; i++) {
    if (stops[i] == stops[i + 1])
      continue;
    end = search(rc, stops[i], stops[i + 1], SCHED_ROUTE_HOST, 0);
    if (end < 0)
      return end == -2 ? -1 : 0;
    if (append(rc, end, out))
      return -1;
  }
  return 1;
}

int route_find(route_ctx *rc, int a, int b, int r, topo_path *out) {
  topo_graph *g = rc->g;
  memset(out, 0, sizeof *out);
  out->cls = TOPO_PATH_DIS;
  if (a < 0 || b < 0 || a >= g->nv || b >= g->nv)
    return -1;
  if (r == SCHED_ROUTE_ANY && g->nhosts <= 1) {
    if (topo_path_get(g, a, b, out) != BRAID_SUCCESS)
      return -1;
    if (out->cls == TOPO_PATH_DIS) {
      topo_path_release(out);
      return -1;
    }
    return 0;
  }
  if (a == b) {
    out->cls = TOPO_PATH_LOC;
    out->verts = malloc(sizeof(int));
    if (!out->verts)
      return -1;
    out->verts[0] = a;
    return 0;
  }
  if (r == SCHED_ROUTE_HOST && g->v[a].type == TOPO_GPU &&
      g->v[b].type == TOPO_GPU) {
    int k = staged(rc, a, b, out);
    if (k == 1)
      return 0;
    topo_path_release(out);
    memset(out, 0, sizeof *out);
    out->cls = TOPO_PATH_DIS;
    if (k < 0)
      return -1;
  }
  int end = -1;
  if (r == SCHED_ROUTE_ANY)
    end = search(rc, a, b, r, 1);
  if (end < 0)
    end = search(rc, a, b, r, 0);
  if (end < 0)
    return -1;
  if (path_start(out, a) || append(rc, end, out)) {
    topo_path_release(out);
    return -1;
  }
  return 0;
}
