/*
 * Showing a graph: a tree and the GPU/NIC matrix in the form of
 * `nvidia-smi topo -m`, and Graphviz dot text.
 */
#include "topology/topo_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void topo_pci_tree(const topo_graph *g, int *parent, int *work) {
  int n = g->nv, qh = 0, qt = 0;
  char *seen = (char *)(work + n); /* n bytes fit in n ints */
  memset(seen, 0, (size_t)n);
  for (int i = 0; i < n; i++)
    parent[i] = -1;
  for (int c = 0; c < topo_count(g, TOPO_CPU); c++) {
    int id = topo_nth(g, TOPO_CPU, c);
    seen[id] = 1;
    work[qt++] = id;
  }
  while (qh < qt) {
    int u = work[qh++];
    if (g->v[u].type != TOPO_CPU && g->v[u].type != TOPO_PCI)
      continue; /* only CPUs and switches have PCI children */
    for (int k = 0; k < g->v[u].nadj; k++) {
      int l = g->v[u].adj[k];
      if (g->links[l].type != TOPO_LINK_PCI)
        continue;
      int o = topo_other(g, l, u);
      topo_vtype t = g->v[o].type;
      if (seen[o] || (t != TOPO_PCI && t != TOPO_GPU && t != TOPO_NIC))
        continue;
      seen[o] = 1;
      parent[o] = u;
      work[qt++] = o;
    }
  }
}

static void describe(const topo_graph *g, int id, FILE *f) {
  const topo_vertex *v = &g->v[id];
  fprintf(f, "%s", v->name);
  switch (v->type) {
  case TOPO_CPU:
    fprintf(f, " NUMA %d", v->numa);
    if (v->vendor[0])
      fprintf(f, " %s", v->vendor);
    if (v->arch[0])
      fprintf(f, " %s", v->arch);
    if (v->cores)
      fprintf(f, ", %d cores", v->cores);
    if (v->pus && v->pus != v->cores)
      fprintf(f, " / %d threads", v->pus);
    if (v->mem_bytes)
      fprintf(f, ", %.1f GiB", (double)v->mem_bytes / 1073741824.0);
    if (v->l3_bytes)
      fprintf(f, ", L3 %.0f MiB", (double)v->l3_bytes / 1048576.0);
    if (v->affinity[0])
      fprintf(f, ", cpus %s", v->affinity);
    break;
  case TOPO_GPU:
    if (v->busid[0])
      fprintf(f, " %s", v->busid);
    if (v->dev >= 0)
      fprintf(f, " dev %d", v->dev);
    if (v->sm)
      fprintf(f, " sm%d", v->sm);
    break;
  case TOPO_NIC:
    if (v->netdev[0])
      fprintf(f, " %s", v->netdev);
    if (v->busid[0])
      fprintf(f, " %s", v->busid);
    fprintf(f, " %.1f GB/s%s", topo_nic_bw(g, id), v->speed > 0 ? "" : " (?)");
    break;
  case TOPO_PCI:
    fprintf(f, " switch");
    if (v->busid[0])
      fprintf(f, " %s", v->busid);
    break;
  default:
    break;
  }
  if (v->link_gts > 0 && v->link_width > 0)
    fprintf(f, " [PCIe gen%d x%d]", topo_pcie_gen(v->link_gts), v->link_width);
}

static void tree_rec(const topo_graph *g, const int *parent, int p, int d,
                     FILE *f) {
  for (int i = 0; i < g->nv; i++) {
    if (parent[i] != p)
      continue;
    fprintf(f, "%*s", 2 * d, "");
    describe(g, i, f);
    int l = topo_link_between(g, i, p);
    if (l >= 0)
      fprintf(f, "  (PCI %.1f GB/s)", g->links[l].bw);
    fputc('\n', f);
    tree_rec(g, parent, i, d + 1, f);
  }
}

/* The cell of the matrix: "X", "NV<n>", or the class name. */
static void cell(topo_graph *g, int a, int b, char *out, size_t n) {
  if (a == b) {
    snprintf(out, n, "X");
    return;
  }
  topo_pclass c = topo_path_class(g, a, b);
  if (c == TOPO_PATH_NVL) {
    topo_path p;
    if (topo_path_get(g, a, b, &p) == BRAID_SUCCESS && p.nhops >= 1) {
      int lanes = g->links[p.links[0]].count;
      for (int i = 1; i < p.nhops; i++)
        if (g->links[p.links[i]].count < lanes)
          lanes = g->links[p.links[i]].count;
      snprintf(out, n, "NV%d", lanes);
      topo_path_release(&p);
      return;
    }
    topo_path_release(&p);
  }
  snprintf(out, n, "%s", topo_pclass_name(c));
}

void topo_print(topo_graph *g, FILE *f) {
  fprintf(f,
          "Machine: %s (%d host%s, %d GPU, %d NIC, %d NUMA node, %d PCI "
          "switch, %d NVSwitch)\n",
          g->name[0] ? g->name : "?", g->nhosts, g->nhosts > 1 ? "s" : "",
          topo_count(g, TOPO_GPU), topo_count(g, TOPO_NIC),
          topo_count(g, TOPO_CPU), topo_count(g, TOPO_PCI),
          topo_count(g, TOPO_NVS));
  int *parent = malloc((size_t)(g->nv ? g->nv : 1) * sizeof(int));
  int *work = malloc((size_t)(g->nv ? g->nv : 1) * 2 * sizeof(int));
  if (!parent || !work) {
    free(parent);
    free(work);
    return;
  }
  topo_pci_tree(g, parent, work);
  for (int h = 0; h < g->nhosts && h < 2; h++)
    for (int c = 0; c < topo_count(g, TOPO_CPU); c++) {
      int id = topo_nth(g, TOPO_CPU, c);
      if (g->v[id].host != h)
        continue;
      describe(g, id, f);
      fputc('\n', f);
      tree_rec(g, parent, id, 1, f);
    }
  if (g->nhosts > 2)
    fprintf(f, "... %d more hosts alike\n", g->nhosts - 2);
  free(parent);
  free(work);
  /* NVLink, inter-socket and network links (first host) */
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (k->type == TOPO_LINK_PCI || g->v[k->a].host > 0 || g->v[k->b].host > 0)
      continue;
    fprintf(f, "%s -- %s %s", g->v[k->a].name, g->v[k->b].name,
            topo_ltype_name(k->type));
    if (k->count > 1)
      fprintf(f, " x%d", k->count);
    fprintf(f, " %.1f GB/s\n", k->bw);
  }
  /* the matrix: GPUs and NICs of the first host (all when few) */
  int ids[128], n = 0;
  for (int t = 0; t < 2; t++) {
    topo_vtype ty = t ? TOPO_NIC : TOPO_GPU;
    for (int i = 0; i < topo_count(g, ty) && n < 128; i++) {
      int id = topo_nth(g, ty, i);
      if (g->v[id].host == 0 || g->nhosts * topo_count(g, TOPO_GPU) <= 16)
        ids[n++] = id;
    }
  }
  if (!n)
    return;
  int w = 6;
  for (int i = 0; i < n; i++)
    if ((int)strlen(g->v[ids[i]].name) + 2 > w)
      w = (int)strlen(g->v[ids[i]].name) + 2;
  fprintf(f, "\n%*s", w, "");
  for (int i = 0; i < n; i++)
    fprintf(f, "%-*s", w, g->v[ids[i]].name);
  fprintf(f, "NUMA\n");
  for (int i = 0; i < n; i++) {
    fprintf(f, "%-*s", w, g->v[ids[i]].name);
    for (int j = 0; j < n; j++) {
      char c[16];
      cell(g, ids[i], ids[j], c, sizeof(c));
      fprintf(f, "%-*s", w, c);
    }
    if (g->v[ids[i]].numa >= 0)
      fprintf(f, "%d", g->v[ids[i]].numa);
    else
      fprintf(f, "N/A");
    fputc('\n', f);
  }
  fprintf(f, "\nLegend: X self; NV# NVLink with # lanes (direct or through "
             "NVSwitch); NVB NVLink through another GPU; PIX one PCIe switch; "
             "PXB several PCIe switches; PHB through a CPU host bridge; SYS "
             "across sockets; NET through the network.\n");
}

/* ---- Graphviz ---- */
static const char *const fill[TOPO_NVTYPES] = {"#76b900", "#9ecae1", "#d9d9d9",
                                               "#fdae6b", "#fdd0a2", "#bcbddc"};
static const char *const shape[TOPO_NVTYPES] = {
    "box", "box3d", "ellipse", "hexagon", "cds", "doubleoctagon"};
static const char *const lcolor[TOPO_NLTYPES] = {"#4d7f00", "#525252",
                                                 "#cb181d", "#2171b5"};

const char *topo_dot_esc(const char *s, char *buf, size_t n) {
  size_t o = 0;
  for (; *s && o + 2 < n; s++) {
    if (*s == '"' || *s == '\\')
      buf[o++] = '\\';
    buf[o++] = *s;
  }
  buf[o] = '\0';
  return buf;
}

/* a vertex's name, escaped */
#define DOT_NAME(v, b) topo_dot_esc((v)->name, b, sizeof b)

static void dot_vertex(const topo_graph *g, int id, FILE *f) {
  const topo_vertex *v = &g->v[id];
  char nm[2 * sizeof v->name], e[2 * sizeof v->netdev];
  fprintf(f, "    \"%s\" [shape=%s, fillcolor=\"%s\", label=\"%s",
          DOT_NAME(v, nm), shape[v->type], fill[v->type], nm);
  if (v->type == TOPO_NIC && v->netdev[0])
    fprintf(f, "\\n%s", topo_dot_esc(v->netdev, e, sizeof e));
  if (v->type == TOPO_CPU && v->cores)
    fprintf(f, "\\n%d cores", v->cores);
  if (v->type == TOPO_GPU && v->sm)
    fprintf(f, "\\nsm%d", v->sm);
  if (v->busid[0] && v->type != TOPO_CPU)
    fprintf(f, "\\n%s", topo_dot_esc(v->busid, e, sizeof e));
  fprintf(f, "\"];\n");
}

braid_result topo_write_dot(const topo_graph *g, FILE *f) {
  char title[2 * sizeof g->name], na[2 * sizeof g->v[0].name], nb[sizeof na];
  fprintf(f, "graph braid_topology {\n");
  fprintf(f,
          "  graph [label=\"%s\", labelloc=t, fontname=\"Helvetica\", "
          "fontsize=20, newrank=true, nodesep=0.25, ranksep=0.9];\n",
          topo_dot_esc(g->name[0] ? g->name : "topology", title, sizeof title));
  fprintf(f, "  node [style=filled, fontname=\"Helvetica\", fontsize=11];\n");
  fprintf(f, "  edge [fontname=\"Helvetica\", fontsize=9];\n");
  for (int h = 0; h < g->nhosts; h++) {
    if (g->nhosts > 1)
      fprintf(f, "  subgraph cluster_h%d {\n    label=\"host %d\";\n", h, h);
    for (int i = 0; i < g->nv; i++)
      if (g->v[i].host == h && g->v[i].type != TOPO_NET)
        dot_vertex(g, i, f);
    if (g->nhosts > 1)
      fprintf(f, "  }\n");
  }
  for (int i = 0; i < g->nv; i++)
    if (g->v[i].type == TOPO_NET)
      dot_vertex(g, i, f);
  /* CPUs on top, then switches, then GPUs and NICs, NVSwitches and the
     network at the bottom: each edge is written from the upper end */
  static const int level[TOPO_NVTYPES] = {2, 0, 1, 3, 2, 3};
  fprintf(f, "  { rank=min;");
  for (int i = 0; i < topo_count(g, TOPO_CPU); i++)
    fprintf(f, " \"%s\";", DOT_NAME(&g->v[topo_nth(g, TOPO_CPU, i)], na));
  fprintf(f, " }\n  { rank=max;");
  for (int i = 0; i < g->nv; i++)
    if (g->v[i].type == TOPO_NVS || g->v[i].type == TOPO_NET)
      fprintf(f, " \"%s\";", DOT_NAME(&g->v[i], na));
  fprintf(f, " }\n");
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    double pw = 1.0 + log2(1.0 + k->bw / 12.5);
    int a = k->a, b = k->b;
    if (level[g->v[a].type] > level[g->v[b].type]) {
      a = k->b;
      b = k->a;
    }
    int flat = level[g->v[a].type] == level[g->v[b].type];
    fprintf(f,
            "  \"%s\" -- \"%s\" [color=\"%s\", penwidth=%.2f%s%s, label=\"%s",
            DOT_NAME(&g->v[a], na), DOT_NAME(&g->v[b], nb), lcolor[k->type], pw,
            k->type == TOPO_LINK_SYS ? ", style=dashed" : "",
            flat ? ", constraint=false" : "",
            flat && k->type == TOPO_LINK_NVL ? "NV" : topo_ltype_name(k->type));
    if (flat && k->type == TOPO_LINK_NVL)
      fprintf(f, "%d", k->count);
    if (flat && k->type == TOPO_LINK_NVL) {
      fprintf(f, "\"];\n"); /* GPU-GPU NVLink: the lane count says it */
      continue;
    }
    if (k->count > 1)
      fprintf(f, " x%d", k->count);
    fprintf(f, "\\n%.0f GB/s\"];\n", k->bw);
  }
  fprintf(f, "}\n");
  return ferror(f) ? BRAID_ERR_SYSTEM : BRAID_SUCCESS;
}
