/*
 * Writing hwloc XML (version 2): one Package per CPU vertex holding its NUMA
 * node, cores and a host bridge with the PCI tree; NVLinks as an
 * NVLinkBandwidth distances matrix (MB/s) between the GPUs' OS devices and
 * the NVSwitches. PCI switches carry an info "BraidPCISwitch" so that a
 * switch with a single device survives a round trip.
 */
#include "topology/topo_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct hw {
  const topo_graph *g;
  FILE *f;
  const int *parent;
  unsigned long long gp;
  unsigned long long *osdev_gp; /* per vertex: GPU OS device / NVS gp index */
} hw;

static void set_str(char *out, size_t n, int first, int count) {
  /* bits [first, first+count) as hwloc writes a bitmap */
  int words = (first + count + 31) / 32;
  if (words < 1)
    words = 1;
  size_t off = 0;
  for (int w = words - 1; w >= 0 && off + 12 < n; w--) {
    unsigned v = 0;
    for (int b = 0; b < 32; b++) {
      int bit = w * 32 + b;
      if (bit >= first && bit < first + count)
        v |= 1u << b;
    }
    off += (size_t)snprintf(out + off, n - off, "%s0x%08x",
                            w == words - 1 ? "" : ",", v);
  }
}

static void esc(FILE *f, const char *s) {
  for (; *s; s++)
    switch (*s) {
    case '<':
      fputs("&lt;", f);
      break;
    case '&':
      fputs("&amp;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    default:
      fputc(*s, f);
    }
}

static void ind(FILE *f, int d) {
  for (int i = 0; i < d; i++)
    fputs("  ", f);
}

static void pci_attrs(hw *w, int id, int dflt) {
  const topo_vertex *v = &w->g->v[id];
  char b[24];
  if (v->busid[0])
    snprintf(b, sizeof(b), "%s", v->busid);
  else
    snprintf(b, sizeof(b), "%04x:%02x:00.0", 0xb000 + (id >> 8), id & 0xff);
  int cls = v->pci_class >= 0 ? v->pci_class : dflt;
  double bw = 0;
  int l = w->parent[id] >= 0 ? topo_link_between(w->g, id, w->parent[id]) : -1;
  if (l >= 0)
    bw = w->g->links[l].bw;
  fprintf(w->f,
          " pci_busid=\"%s\" pci_type=\"%04x [%04x:%04x] [%04x:%04x] 00\" "
          "pci_link_speed=\"%f\"",
          b, (cls >> 8) & 0xffff, v->vendor_id >= 0 ? v->vendor_id : 0,
          v->device_id >= 0 ? v->device_id : 0,
          v->subsys_vendor >= 0 ? v->subsys_vendor : 0,
          v->subsys_device >= 0 ? v->subsys_device : 0, bw);
}

static void io_rec(hw *w, int p, int d) {
  const topo_graph *g = w->g;
  for (int i = 0; i < g->nv; i++) {
    if (w->parent[i] != p)
      continue;
    const topo_vertex *v = &g->v[i];
    ind(w->f, d);
    if (v->type == TOPO_PCI) {
      fprintf(w->f,
              "<object type=\"Bridge\" gp_index=\"%llu\" "
              "bridge_type=\"1-1\" depth=\"%d\"",
              w->gp++, d);
      pci_attrs(w, i, 0x060400);
      fputs(">\n", w->f);
      ind(w->f, d + 1);
      fputs("<info name=\"BraidPCISwitch\" value=\"1\"/>\n", w->f);
      io_rec(w, i, d + 1);
    } else {
      fprintf(w->f, "<object type=\"PCIDev\" gp_index=\"%llu\"", w->gp++);
      pci_attrs(w, i, v->type == TOPO_GPU ? 0x030200 : 0x020700);
      fputs(">\n", w->f);
      ind(w->f, d + 1);
      if (v->type == TOPO_GPU) {
        w->osdev_gp[i] = w->gp;
        fprintf(w->f,
                "<object type=\"OSDev\" gp_index=\"%llu\" name=\"nvml%d\" "
                "subtype=\"NVML\" osdev_type=\"1\">\n",
                w->gp++, v->dev >= 0 ? v->dev : v->index);
        if (v->sm > 0) {
          ind(w->f, d + 2);
          fprintf(w->f,
                  "<info name=\"NVIDIAComputeCapability\" value=\"%d.%d\"/>\n",
                  v->sm / 10, v->sm % 10);
        }
      } else {
        const char *nm = v->netdev[0] ? v->netdev : v->name;
        int fab = !strncmp(nm, "mlx", 3) || !strncmp(nm, "ib", 2);
        fprintf(w->f, "<object type=\"OSDev\" gp_index=\"%llu\" name=\"",
                w->gp++);
        esc(w->f, nm);
        fprintf(w->f, "\" osdev_type=\"%d\">\n", fab ? 3 : 2);
        if (v->speed > 0) {
          ind(w->f, d + 2);
          fprintf(w->f, "<info name=\"BraidNICSpeed\" value=\"%g\"/>\n",
                  v->speed);
        }
      }
      ind(w->f, d + 1);
      fputs("</object>\n", w->f);
    }
    ind(w->f, d);
    fputs("</object>\n", w->f);
  }
}

braid_result topo_write_hwloc(const topo_graph *g, FILE *f) {
  int n = g->nv ? g->nv : 1;
  int *parent = malloc((size_t)n * sizeof(int));
  int *work = malloc((size_t)n * 2 * sizeof(int));
  unsigned long long *osgp = calloc((size_t)n, sizeof(*osgp));
  int *first = malloc((size_t)n * sizeof(int));
  if (!parent || !work || !osgp || !first) {
    free(parent);
    free(work);
    free(osgp);
    free(first);
    return BRAID_ERR_NOMEM;
  }
  topo_pci_tree(g, parent, work);
  hw w = {g, f, parent, 2, osgp};
  int ncpu = topo_count(g, TOPO_CPU), total = 0, maxnuma = 0;
  for (int c = 0; c < ncpu; c++) {
    const topo_vertex *v = &g->v[topo_nth(g, TOPO_CPU, c)];
    first[c] = total;
    total += v->pus > 0 ? v->pus : v->cores > 0 ? v->cores : 1;
    if (v->numa > maxnuma)
      maxnuma = v->numa;
  }
  char all[2400], nodes[2400], set[2400];
  set_str(all, sizeof(all), 0, total);
  set_str(nodes, sizeof(nodes), 0, maxnuma + 1);
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
        "<topology version=\"2.0\">\n",
        f);
  fprintf(f,
          "  <object type=\"Machine\" os_index=\"0\" cpuset=\"%s\" "
          "complete_cpuset=\"%s\" allowed_cpuset=\"%s\" nodeset=\"%s\" "
          "complete_nodeset=\"%s\" allowed_nodeset=\"%s\" gp_index=\"1\">\n",
          all, all, all, nodes, nodes, nodes);
  const char *arch = ncpu ? g->v[topo_nth(g, TOPO_CPU, 0)].arch : "";
  if (arch[0]) {
    fputs("    <info name=\"Architecture\" value=\"", f);
    esc(f, arch);
    fputs("\"/>\n", f);
  }
  for (int c = 0; c < ncpu; c++) {
    int id = topo_nth(g, TOPO_CPU, c);
    const topo_vertex *v = &g->v[id];
    int npu = v->pus > 0 ? v->pus : v->cores > 0 ? v->cores : 1;
    int ncore = v->cores > 0 ? v->cores : npu;
    int numa = v->numa >= 0 ? v->numa : c;
    char ns[2400];
    set_str(set, sizeof(set), first[c], npu);
    set_str(ns, sizeof(ns), numa, 1);
    fprintf(f,
            "    <object type=\"Package\" os_index=\"%d\" cpuset=\"%s\" "
            "complete_cpuset=\"%s\" nodeset=\"%s\" complete_nodeset=\"%s\" "
            "gp_index=\"%llu\">\n",
            c, set, set, ns, ns, w.gp++);
    if (v->vendor[0]) {
      fputs("      <info name=\"CPUVendor\" value=\"", f);
      esc(f, v->vendor);
      fputs("\"/>\n", f);
    }
    if (v->family >= 0)
      fprintf(f, "      <info name=\"CPUFamilyNumber\" value=\"%d\"/>\n",
              v->family);
    if (v->model >= 0)
      fprintf(f, "      <info name=\"CPUModelNumber\" value=\"%d\"/>\n",
              v->model);
    fprintf(f,
            "      <object type=\"NUMANode\" os_index=\"%d\" cpuset=\"%s\" "
            "complete_cpuset=\"%s\" nodeset=\"%s\" complete_nodeset=\"%s\" "
            "gp_index=\"%llu\" local_memory=\"%llu\"/>\n",
            numa, set, set, ns, ns, w.gp++, (unsigned long long)v->mem_bytes);
    if (v->l3_bytes)
      fprintf(f,
              "      <object type=\"L3Cache\" cpuset=\"%s\" "
              "complete_cpuset=\"%s\" nodeset=\"%s\" complete_nodeset=\"%s\" "
              "gp_index=\"%llu\" cache_size=\"%llu\" depth=\"3\" "
              "cache_linesize=\"64\" cache_associativity=\"0\" "
              "cache_type=\"0\">\n",
              set, set, ns, ns, w.gp++, (unsigned long long)v->l3_bytes);
    int per = npu / ncore > 0 ? npu / ncore : 1;
    for (int k = 0; k < ncore; k++) {
      char cs[2400];
      int cf = first[c] + k * per;
      int cn = k == ncore - 1 ? npu - k * per : per;
      if (cn < 1)
        break;
      set_str(cs, sizeof(cs), cf, cn);
      fprintf(f,
              "      <object type=\"Core\" os_index=\"%d\" cpuset=\"%s\" "
              "complete_cpuset=\"%s\" nodeset=\"%s\" complete_nodeset=\"%s\" "
              "gp_index=\"%llu\">\n",
              cf, cs, cs, ns, ns, w.gp++);
      for (int p = 0; p < cn; p++) {
        char ps[2400];
        set_str(ps, sizeof(ps), cf + p, 1);
        fprintf(f,
                "        <object type=\"PU\" os_index=\"%d\" cpuset=\"%s\" "
                "complete_cpuset=\"%s\" nodeset=\"%s\" "
                "complete_nodeset=\"%s\" gp_index=\"%llu\"/>\n",
                cf + p, ps, ps, ns, ns, w.gp++);
      }
      fputs("      </object>\n", f);
    }
    if (v->l3_bytes)
      fputs("      </object>\n", f);
    int has_io = 0;
    for (int i = 0; i < g->nv; i++)
      if (parent[i] == id)
        has_io = 1;
    if (has_io) {
      fprintf(f,
              "      <object type=\"Bridge\" gp_index=\"%llu\" "
              "bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"%04x:[00-ff]\">\n",
              w.gp++, c);
      io_rec(&w, id, 4);
      fputs("      </object>\n", f);
    }
    fputs("    </object>\n", f);
  }
  for (int i = 0; i < g->nv; i++)
    if (g->v[i].type == TOPO_NVS) {
      osgp[i] = w.gp++;
      fprintf(f,
              "    <object type=\"Misc\" subtype=\"NVSwitch\" name=\"%s\" "
              "gp_index=\"%llu\"/>\n",
              g->v[i].name, osgp[i]);
    }
  fputs("  </object>\n", f);
  /* NVLinkBandwidth: GPUs' OS devices and NVSwitches (as Misc objects) */
  int nobj = 0;
  int *objs = work; /* reuse */
  for (int i = 0; i < g->nv; i++) {
    int nvl = 0;
    for (int k = 0; k < g->v[i].nadj; k++)
      if (g->links[g->v[i].adj[k]].type == TOPO_LINK_NVL)
        nvl = 1;
    if (nvl && (g->v[i].type == TOPO_GPU || g->v[i].type == TOPO_NVS)) {
      if (osgp[i])
        objs[nobj++] = i;
    }
  }
  if (nobj >= 2) {
    fprintf(f,
            "  <distances2hetero nbobjs=\"%d\" kind=\"%d\" "
            "name=\"NVLinkBandwidth\" indexing=\"gp\">\n",
            nobj, 1 | 8 | 16);
    /* hwloc's "length" is the length of the text, so build it first */
    size_t cap = (size_t)nobj * (size_t)nobj * 24 + (size_t)nobj * 32 + 64;
    char *txt = malloc(cap);
    if (!txt) {
      free(parent);
      free(work);
      free(osgp);
      free(first);
      return BRAID_ERR_NOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < nobj; i++)
      off += (size_t)snprintf(txt + off, cap - off, "%s:%llu ",
                              g->v[objs[i]].type == TOPO_GPU ? "OSDev" : "Misc",
                              osgp[objs[i]]);
    fprintf(f, "    <indexes length=\"%zu\">%s</indexes>\n", off, txt);
    off = 0;
    for (int i = 0; i < nobj; i++)
      for (int j = 0; j < nobj; j++) {
        int l = i == j ? -1 : topo_link_between(g, objs[i], objs[j]);
        double mb = l >= 0 && g->links[l].type == TOPO_LINK_NVL
                        ? g->links[l].bw * 1000.0
                        : 0;
        off += (size_t)snprintf(txt + off, cap - off, "%.0f ", mb);
      }
    fprintf(f, "    <u64values length=\"%zu\">%s", off, txt);
    free(txt);
    fputs("</u64values>\n  </distances2hetero>\n", f);
  }
  fputs("</topology>\n", f);
  free(parent);
  free(work);
  free(osgp);
  free(first);
  return ferror(f) ? BRAID_ERR_SYSTEM : BRAID_SUCCESS;
}
