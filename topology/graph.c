/*
 * The system graph: vertices, links, lookups, copies, comparisons, and the
 * bandwidth facts links are built from.
 */
#include "topology/topo.h"
#include "topology/topo_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const vtype_names[TOPO_NVTYPES] = {"GPU", "CPU", "PCI",
                                                      "NVS", "NIC", "NET"};
static const char *const ltype_names[TOPO_NLTYPES] = {"NVL", "PCI", "SYS",
                                                      "NET"};
static const char *const pclass_names[TOPO_NPCLASSES] = {
    "LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS", "NET", "DIS"};

const char *topo_vtype_name(topo_vtype t) {
  return (t >= 0 && t < TOPO_NVTYPES) ? vtype_names[t] : "?";
}
const char *topo_ltype_name(topo_ltype t) {
  return (t >= 0 && t < TOPO_NLTYPES) ? ltype_names[t] : "?";
}
const char *topo_pclass_name(topo_pclass c) {
  return (c >= 0 && c < TOPO_NPCLASSES) ? pclass_names[c] : "?";
}
int topo_vtype_parse(const char *s) {
  for (int i = 0; i < TOPO_NVTYPES; i++)
    if (!strcasecmp(s, vtype_names[i]))
      return i;
  if (!strcasecmp(s, "nvswitch"))
    return TOPO_NVS;
  return -1;
}
int topo_ltype_parse(const char *s) {
  for (int i = 0; i < TOPO_NLTYPES; i++)
    if (!strcasecmp(s, ltype_names[i]))
      return i;
  return -1;
}

/* ---- bandwidth facts ----
 * PCIe per lane and direction: gen1 2.5 GT/s and gen2 5 GT/s use 8b/10b;
 * gen3 (8) and later use 128b/130b. NVLink lane bandwidth per direction:
 * NVLink2 (V100) 25 GB/s, NVLink3 (A100) 25 GB/s, NVLink4 (H100) ~25 GB/s;
 * NVLink1 (P100) 20 GB/s. */
double topo_pcie_bw(double gts, int width) {
  if (gts <= 0 || width <= 0)
    return 0;
  double enc = gts < 7.0 ? 0.8 : 128.0 / 130.0;
  return gts * enc * width / 8.0;
}
int topo_pcie_gen(double gts) {
  if (gts <= 0)
    return 0;
  if (gts < 3)
    return 1;
  if (gts < 6)
    return 2;
  if (gts < 12)
    return 3;
  if (gts < 24)
    return 4;
  if (gts < 48)
    return 5;
  return 6;
}
double topo_nvlink_lane_bw(int sm) {
  if (sm > 0 && sm < 70)
    return 20.0;
  return 25.0;
}

double topo_default_bw(topo_ltype t) {
  switch (t) {
  case TOPO_LINK_NVL:
    return TOPO_NVL_LANE_BW;
  case TOPO_LINK_PCI:
    return TOPO_PCI_DEFAULT_BW;
  case TOPO_LINK_SYS:
    return TOPO_SYS_DEFAULT_BW;
  default:
    return TOPO_NET_DEFAULT_BW;
  }
}
double topo_default_lat(topo_ltype t) {
  switch (t) {
  case TOPO_LINK_NVL:
    return 0.5;
  case TOPO_LINK_PCI:
    return 1.0;
  case TOPO_LINK_SYS:
    return 1.0;
  default:
    return 2.0;
  }
}

/* ---- building ---- */
topo_graph *topo_graph_new(const char *name) {
  topo_graph *g = calloc(1, sizeof(*g));
  if (!g)
    return NULL;
  snprintf(g->name, sizeof(g->name), "%s", name ? name : "");
  g->nhosts = 1;
  return g;
}

void topo_graph_free(topo_graph *g) {
  if (!g)
    return;
  topo_paths_reset(g);
  for (int i = 0; i < g->nv; i++)
    free(g->v[i].adj);
  free(g->v);
  free(g->links);
  for (int t = 0; t < TOPO_NVTYPES; t++)
    free(g->of_type[t]);
  free(g->names);
  free(g);
}

/* The name index (topo_graph.names): a cluster of 1024 hosts has 50000
 * vertices, and a scan per added vertex took most of topo_cluster's time. */
static uint32_t name_hash(const char *s) { /* FNV-1a */
  uint32_t h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static void names_put(int *tab, int cap, const topo_graph *g, int id) {
  uint32_t m = (uint32_t)cap - 1;
  uint32_t h = name_hash(g->v[id].name) & m;
  while (tab[h] != 0)
    h = (h + 1) & m;
  tab[h] = id + 1;
}

/* Room in the index for one more vertex; -1 when out of memory. */
static int names_reserve(topo_graph *g) {
  if (2 * (g->nv + 1) <= g->capnames)
    return 0;
  int cap = g->capnames ? g->capnames * 2 : 64;
  int *tab = calloc((size_t)cap, sizeof *tab);
  if (!tab)
    return -1;
  for (int i = 0; i < g->nv; i++)
    names_put(tab, cap, g, i);
  free(g->names);
  g->names = tab;
  g->capnames = cap;
  return 0;
}

int topo_find(const topo_graph *g, const char *name) {
  if (g->capnames == 0)
    return -1;
  uint32_t m = (uint32_t)g->capnames - 1;
  for (uint32_t h = name_hash(name) & m; g->names[h] != 0; h = (h + 1) & m)
    if (!strcmp(g->v[g->names[h] - 1].name, name))
      return g->names[h] - 1;
  return -1;
}

int topo_find_busid(const topo_graph *g, const char *busid) {
  if (!busid || !*busid)
    return -1;
  for (int i = 0; i < g->nv; i++)
    if (g->v[i].busid[0] && !strcasecmp(g->v[i].busid, busid))
      return i;
  return -1;
}

int topo_add_vertex(topo_graph *g, topo_vtype type, const char *name) {
  if (type < 0 || type >= TOPO_NVTYPES)
    return -1;
  char auto_name[48];
  if (!name || !*name) {
    snprintf(auto_name, sizeof(auto_name), "%s%d", vtype_names[type],
             g->ntype[type]);
    for (int k = 1; topo_find(g, auto_name) >= 0 && k < 1000; k++)
      snprintf(auto_name, sizeof(auto_name), "%s%d_%d", vtype_names[type],
               g->ntype[type], k); /* a file already used that name */
    name = auto_name;
  }
  if (strlen(name) >= sizeof(g->v[0].name) || topo_find(g, name) >= 0)
    return -1;
  if (g->nv >= TOPO_MAX_VERTICES)
    return -1;
  if (g->nv == g->capv) {
    int cap = g->capv ? g->capv * 2 : 16;
    topo_vertex *nv = realloc(g->v, (size_t)cap * sizeof(*nv));
    if (!nv)
      return -1;
    g->v = nv;
    g->capv = cap;
  }
  int *ot =
      realloc(g->of_type[type], (size_t)(g->ntype[type] + 1) * sizeof(int));
  if (!ot)
    return -1;
  g->of_type[type] = ot;
  if (names_reserve(g) != 0)
    return -1;
  topo_paths_reset(g);
  int id = g->nv++;
  topo_vertex *v = &g->v[id];
  memset(v, 0, sizeof(*v));
  v->type = type;
  v->index = g->ntype[type];
  ot[g->ntype[type]++] = id;
  snprintf(v->name, sizeof(v->name), "%s", name);
  names_put(g->names, g->capnames, g, id);
  v->numa = -1;
  v->dev = -1;
  v->rank = -1;
  v->gdr = -1;
  v->port = -1;
  v->pci_class = -1;
  v->vendor_id = v->device_id = v->subsys_vendor = v->subsys_device = -1;
  v->family = v->model = -1;
  return id;
}

static int adj_push(topo_vertex *v, int l) {
  if (v->nadj == v->capadj) {
    int cap = v->capadj ? v->capadj * 2 : 4;
    int *na = realloc(v->adj, (size_t)cap * sizeof(int));
    if (!na)
      return -1;
    v->adj = na;
    v->capadj = cap;
  }
  v->adj[v->nadj++] = l;
  return 0;
}

int topo_add_link(topo_graph *g, int a, int b, topo_ltype type, double bw,
                  double lat_us, int count) {
  if (a < 0 || b < 0 || a >= g->nv || b >= g->nv || a == b || type < 0 ||
      type >= TOPO_NLTYPES)
    return -1;
  if (count < 1)
    count = 1;
  if (!(bw > 0) || !isfinite(bw))
    bw = topo_default_bw(type) * (type == TOPO_LINK_NVL ? count : 1);
  if (!(lat_us >= 0) || !isfinite(lat_us))
    lat_us = topo_default_lat(type);
  topo_paths_reset(g);
  for (int i = 0; i < g->v[a].nadj; i++) {
    topo_link *l = &g->links[g->v[a].adj[i]];
    if (l->type == type && topo_other(g, g->v[a].adj[i], a) == b) {
      l->count += count;
      l->bw += bw;
      return g->v[a].adj[i];
    }
  }
  if (g->nl >= TOPO_MAX_LINKS)
    return -1;
  if (g->nl == g->capl) {
    int cap = g->capl ? g->capl * 2 : 32;
    topo_link *nl = realloc(g->links, (size_t)cap * sizeof(*nl));
    if (!nl)
      return -1;
    g->links = nl;
    g->capl = cap;
  }
  int id = g->nl;
  if (adj_push(&g->v[a], id) || adj_push(&g->v[b], id)) {
    if (g->v[a].nadj && g->v[a].adj[g->v[a].nadj - 1] == id)
      g->v[a].nadj--;
    return -1;
  }
  g->nl++;
  topo_link *l = &g->links[id];
  l->a = a;
  l->b = b;
  l->type = type;
  l->bw = bw;
  l->lat_us = lat_us;
  l->count = count;
  return id;
}

int topo_link_between(const topo_graph *g, int a, int b) {
  int best = -1;
  if (a < 0 || a >= g->nv)
    return -1;
  for (int i = 0; i < g->v[a].nadj; i++) {
    int l = g->v[a].adj[i];
    if (topo_other(g, l, a) == b &&
        (best < 0 || g->links[l].bw > g->links[best].bw))
      best = l;
  }
  return best;
}

topo_graph *topo_graph_copy(const topo_graph *g) {
  topo_graph *c = topo_graph_new(g->name);
  if (!c)
    return NULL;
  c->nhosts = g->nhosts;
  for (int i = 0; i < g->nv; i++) {
    int id = topo_add_vertex(c, g->v[i].type, g->v[i].name);
    if (id < 0) {
      topo_graph_free(c);
      return NULL;
    }
    int *adj = c->v[id].adj;
    int index = c->v[id].index;
    c->v[id] = g->v[i];
    c->v[id].adj = adj;
    c->v[id].nadj = c->v[id].capadj = 0;
    c->v[id].index = index;
  }
  for (int i = 0; i < g->nl; i++) {
    const topo_link *l = &g->links[i];
    if (topo_add_link(c, l->a, l->b, l->type, l->bw, l->lat_us, l->count) < 0) {
      topo_graph_free(c);
      return NULL;
    }
  }
  return c;
}

static int bw_close(double a, double b) {
  return fabs(a - b) <= 0.01 * fmax(fabs(a), fabs(b)) + 1e-9;
}

braid_result topo_graph_compare(const topo_graph *a, const topo_graph *b) {
  if (a->nv != b->nv)
    return ERR(BRAID_ERR_MISMATCH, "%d vertices vs %d", a->nv, b->nv);
  if (a->nl != b->nl)
    return ERR(BRAID_ERR_MISMATCH, "%d links vs %d", a->nl, b->nl);
  for (int i = 0; i < a->nv; i++) {
    const topo_vertex *va = &a->v[i];
    int j = topo_find(b, va->name);
    if (j < 0)
      return ERR(BRAID_ERR_MISMATCH, "vertex %s missing", va->name);
    const topo_vertex *vb = &b->v[j];
    if (va->type != vb->type || strcasecmp(va->busid, vb->busid))
      return ERR(BRAID_ERR_MISMATCH,
                 "vertex %s differs (type %s/%s, busid '%s'/'%s')", va->name,
                 topo_vtype_name(va->type), topo_vtype_name(vb->type),
                 va->busid, vb->busid);
  }
  for (int i = 0; i < a->nl; i++) {
    const topo_link *la = &a->links[i];
    int ba = topo_find(b, a->v[la->a].name),
        bb = topo_find(b, a->v[la->b].name);
    int found = 0;
    for (int k = 0; k < b->v[ba].nadj && !found; k++) {
      const topo_link *lb = &b->links[b->v[ba].adj[k]];
      int other = lb->a == ba ? lb->b : lb->a;
      if (other == bb && lb->type == la->type && lb->count == la->count &&
          bw_close(lb->bw, la->bw))
        found = 1;
    }
    if (!found)
      return ERR(BRAID_ERR_MISMATCH,
                 "link %s-%s %s x%d %.2f GB/s missing or different",
                 a->v[la->a].name, a->v[la->b].name, topo_ltype_name(la->type),
                 la->count, la->bw);
  }
  return BRAID_SUCCESS;
}

braid_result topo_graph_check(const topo_graph *g) {
  for (int t = 0; t < TOPO_NVTYPES; t++)
    for (int i = 0; i < g->ntype[t]; i++) {
      int id = g->of_type[t][i];
      if (id < 0 || id >= g->nv || g->v[id].type != (topo_vtype)t ||
          g->v[id].index != i)
        return ERR(BRAID_ERR_INTERNAL, "%s %d: bad type index",
                   topo_vtype_name(t), i);
    }
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (k->a < 0 || k->b < 0 || k->a >= g->nv || k->b >= g->nv ||
        k->a == k->b || !(k->bw > 0))
      return ERR(BRAID_ERR_INTERNAL, "link %d is malformed", l);
  }
  return BRAID_SUCCESS;
}
