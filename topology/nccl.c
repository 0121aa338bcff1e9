/*
 * NCCL topology XML (the files NCCL_TOPO_FILE reads and NCCL_TOPO_DUMP_FILE
 * writes): <system> of <cpu numaid>, nested <pci busid class link_speed
 * link_width>, <gpu dev sm> with <nvlink target count tclass>, <nic> with
 * <net name dev speed port ...>. Reading and writing.
 */
#include "topology/topo_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct nv_pending {
  int gpu;
  char target[24];
  long count, tclass;
  int line;
} nv_pending;

typedef struct nccl_rd {
  topo_graph *g;
  const char *fname;
  nv_pending *nv;
  int nnv, capnv;
} nccl_rd;

#define RD_FAIL(r, ...) return ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__)

static braid_result nomem(nccl_rd *r) { return TOPO_NOMEM(r->fname); }

static braid_result get_busid(nccl_rd *r, const xml_node *n, char *out,
                              size_t outlen) {
  const xml_attr *a = xml_attr_get(n, "busid");
  if (!a)
    RD_FAIL(r, "%s:%d: <%s> attribute 'busid': missing", r->fname, n->line,
            n->name);
  if (topo_busid_norm(a->value, out, outlen))
    RD_FAIL(r, "%s:%d: <%s> attribute 'busid': not a PCI bus id (got '%.40s')",
            r->fname, a->line, n->name, a->value);
  return BRAID_SUCCESS;
}

static braid_result read_net(nccl_rd *r, const xml_node *n, int parent,
                             const xml_node *pci, const char *busid) {
  topo_graph *g = r->g;
  int id = topo_add_vertex(g, TOPO_NIC, NULL);
  if (id < 0)
    return nomem(r);
  topo_vertex *v = &g->v[id];
  long dev = -1, port = -1, maxconn = 0, gdr = -1;
  double speed = 0, lat = 0;
  CHECKR(xml_get_int(n, "dev", 0, 65535, 0, &dev, r->fname));
  CHECKR(xml_get_int(n, "port", 0, 1024, 0, &port, r->fname));
  CHECKR(xml_get_int(n, "maxconn", 0, 1L << 30, 0, &maxconn, r->fname));
  CHECKR(xml_get_int(n, "gdr", 0, 1, 0, &gdr, r->fname));
  CHECKR(xml_get_double(n, "speed", 0, 1e8, 0, &speed, r->fname));
  CHECKR(xml_get_double(n, "latency", 0, 1e9, 0, &lat, r->fname));
  const xml_attr *ga = xml_attr_get(n, "guid");
  if (ga) {
    char *e;
    unsigned long long u = strtoull(ga->value, &e, 0);
    if (e == ga->value || *e)
      RD_FAIL(r, "%s:%d: <net> attribute 'guid': not a number (got '%.40s')",
              r->fname, ga->line, ga->value);
    v->guid = u;
  }
  const char *name = xml_get(n, "name");
  snprintf(v->netdev, sizeof(v->netdev), "%s", name ? name : "");
  v->dev = (int)dev;
  v->port = (int)port;
  v->maxconn = (int)maxconn;
  v->gdr = (int)gdr;
  v->speed = speed / 8000.0; /* Mb/s -> GB/s */
  snprintf(v->busid, sizeof(v->busid), "%s", busid ? busid : "");
  if (parent >= 0)
    v->numa = g->v[parent].numa;
  double bw = v->speed > 0 ? v->speed : 0;
  if (pci) {
    long cls = -1;
    CHECKR(xml_get_hex(pci, "class", 0, &cls, r->fname));
    v->pci_class = (int)cls;
    v->link_gts = topo_parse_gts(xml_get(pci, "link_speed"));
    long w = 0;
    CHECKR(xml_get_int(pci, "link_width", 0, 64, 0, &w, r->fname));
    v->link_width = (int)w;
    double pbw = topo_pcie_bw(v->link_gts, v->link_width);
    if (pbw > 0)
      bw = pbw;
  }
  if (parent >= 0 && topo_add_link(g, id, parent, TOPO_LINK_PCI, bw, -1, 1) < 0)
    return nomem(r);
  return BRAID_SUCCESS;
}

static braid_result read_nic(nccl_rd *r, const xml_node *n, int parent,
                             const xml_node *pci, const char *busid) {
  int any = 0;
  for (int i = 0; i < n->nkids; i++) {
    const xml_node *k = n->kids[i];
    if (strcmp(k->name, "net"))
      continue;
    braid_result res = read_net(r, k, parent, pci, busid);
    if (res != BRAID_SUCCESS)
      return res;
    any = 1;
  }
  if (!any && !pci)
    RD_FAIL(r, "%s:%d: <nic> without <net> and not under a <pci>", r->fname,
            n->line);
  return BRAID_SUCCESS;
}

static braid_result read_pci(nccl_rd *r, const xml_node *n, int parent,
                             int numa);

static braid_result read_gpu(nccl_rd *r, const xml_node *pci, int parent,
                             int numa, const char *busid) {
  topo_graph *g = r->g;
  if (topo_find_busid(g, busid) >= 0)
    RD_FAIL(r, "%s:%d: <pci> attribute 'busid': %s appears twice", r->fname,
            pci->line, busid);
  int id = topo_add_vertex(g, TOPO_GPU, NULL);
  if (id < 0)
    return nomem(r);
  topo_vertex *v = &g->v[id];
  snprintf(v->busid, sizeof(v->busid), "%s", busid);
  v->numa = numa;
  long cls = -1, ven = -1, dev = -1, sv = -1, sd = -1, w = 0;
  CHECKR(xml_get_hex(pci, "class", 1, &cls, r->fname));
  CHECKR(xml_get_hex(pci, "vendor", 0, &ven, r->fname));
  CHECKR(xml_get_hex(pci, "device", 0, &dev, r->fname));
  CHECKR(xml_get_hex(pci, "subsystem_vendor", 0, &sv, r->fname));
  CHECKR(xml_get_hex(pci, "subsystem_device", 0, &sd, r->fname));
  CHECKR(xml_get_int(pci, "link_width", 0, 64, 0, &w, r->fname));
  v->pci_class = (int)cls;
  v->vendor_id = (int)ven;
  v->device_id = (int)dev;
  v->subsys_vendor = (int)sv;
  v->subsys_device = (int)sd;
  v->link_gts = topo_parse_gts(xml_get(pci, "link_speed"));
  v->link_width = (int)w;
  if (topo_add_link(g, id, parent, TOPO_LINK_PCI,
                    topo_pcie_bw(v->link_gts, v->link_width), -1, 1) < 0)
    return nomem(r);
  for (int i = 0; i < pci->nkids; i++) {
    const xml_node *k = pci->kids[i];
    if (strcmp(k->name, "gpu"))
      continue;
    long d = -1, sm = 0, rank = -1, gdr = -1;
    CHECKR(xml_get_int(k, "dev", 0, 65535, 0, &d, r->fname));
    CHECKR(xml_get_int(k, "sm", 0, 10000, 0, &sm, r->fname));
    CHECKR(xml_get_int(k, "rank", 0, 1L << 30, 0, &rank, r->fname));
    CHECKR(xml_get_int(k, "gdr", 0, 1, 0, &gdr, r->fname));
    v = &g->v[id];
    v->dev = (int)d;
    v->sm = (int)sm;
    v->rank = (int)rank;
    v->gdr = (int)gdr;
    for (int j = 0; j < k->nkids; j++) {
      const xml_node *nl = k->kids[j];
      if (strcmp(nl->name, "nvlink"))
        continue;
      nv_pending p = {.gpu = id, .line = nl->line, .tclass = 0x030200};
      const xml_attr *t = xml_attr_get(nl, "target");
      if (!t)
        RD_FAIL(r, "%s:%d: <nvlink> attribute 'target': missing", r->fname,
                nl->line);
      if (topo_busid_norm(t->value, p.target, sizeof(p.target)))
        RD_FAIL(r,
                "%s:%d: <nvlink> attribute 'target': not a PCI bus id (got "
                "'%.40s')",
                r->fname, t->line, t->value);
      CHECKR(xml_get_int(nl, "count", 1, TOPO_MAX_NVL_COUNT, 1, &p.count,
                         r->fname));
      CHECKR(xml_get_hex(nl, "tclass", 0, &p.tclass, r->fname));
      if (r->nnv == r->capnv) {
        int cap = r->capnv ? 2 * r->capnv : 16;
        nv_pending *np = realloc(r->nv, (size_t)cap * sizeof(*np));
        if (!np)
          return nomem(r);
        r->nv = np;
        r->capnv = cap;
      }
      r->nv[r->nnv++] = p;
    }
  }
  return BRAID_SUCCESS;
}

static braid_result read_pci(nccl_rd *r, const xml_node *n, int parent,
                             int numa) {
  topo_graph *g = r->g;
  char busid[24];
  braid_result res = get_busid(r, n, busid, sizeof(busid));
  if (res != BRAID_SUCCESS)
    return res;
  long cls = -1;
  CHECKR(xml_get_hex(n, "class", 1, &cls, r->fname));
  int base = (int)(cls >> 16), sub = (int)((cls >> 8) & 0xff);
  if (base == 0x06 && sub == 0x04) { /* PCI bridge: a switch */
    if (topo_find_busid(g, busid) >= 0)
      RD_FAIL(r, "%s:%d: <pci> attribute 'busid': %s appears twice", r->fname,
              n->line, busid);
    int id = topo_add_vertex(g, TOPO_PCI, NULL);
    if (id < 0)
      return nomem(r);
    topo_vertex *v = &g->v[id];
    snprintf(v->busid, sizeof(v->busid), "%s", busid);
    v->numa = numa;
    v->pci_class = (int)cls;
    long w = 0, ven = -1, dev = -1, sv = -1, sd = -1;
    CHECKR(xml_get_int(n, "link_width", 0, 64, 0, &w, r->fname));
    CHECKR(xml_get_hex(n, "vendor", 0, &ven, r->fname));
    CHECKR(xml_get_hex(n, "device", 0, &dev, r->fname));
    CHECKR(xml_get_hex(n, "subsystem_vendor", 0, &sv, r->fname));
    CHECKR(xml_get_hex(n, "subsystem_device", 0, &sd, r->fname));
    v->link_width = (int)w;
    v->vendor_id = (int)ven;
    v->device_id = (int)dev;
    v->subsys_vendor = (int)sv;
    v->subsys_device = (int)sd;
    v->link_gts = topo_parse_gts(xml_get(n, "link_speed"));
    if (topo_add_link(g, id, parent, TOPO_LINK_PCI,
                      topo_pcie_bw(v->link_gts, v->link_width), -1, 1) < 0)
      return nomem(r);
    for (int i = 0; i < n->nkids; i++) {
      const xml_node *k = n->kids[i];
      if (!strcmp(k->name, "pci")) {
        if ((res = read_pci(r, k, id, numa)) != BRAID_SUCCESS)
          return res;
      } else if (!strcmp(k->name, "nic")) {
        if ((res = read_nic(r, k, id, NULL, NULL)) != BRAID_SUCCESS)
          return res;
      }
    }
    return BRAID_SUCCESS;
  }
  if (base == 0x03) /* display controller */
    return read_gpu(r, n, parent, numa, busid);
  if (base == 0x02) { /* network controller */
    for (int i = 0; i < n->nkids; i++)
      if (!strcmp(n->kids[i]->name, "nic"))
        return read_nic(r, n->kids[i], parent, n, busid);
    /* a NIC as a bare PCI device: one port, speed unknown */
    res = read_net(r, n, parent, n, busid);
    if (res == BRAID_SUCCESS) {
      topo_vertex *v = &g->v[g->nv - 1];
      v->dev = -1;
    }
    return res;
  }
  return BRAID_SUCCESS; /* storage and others: not part of the graph */
}

static braid_result resolve_nvlinks(nccl_rd *r) {
  topo_graph *g = r->g;
  int nvs = -1;
  for (int i = 0; i < r->nnv; i++) {
    nv_pending *p = &r->nv[i];
    double lane = topo_nvlink_lane_bw(g->v[p->gpu].sm);
    int target;
    if ((p->tclass >> 8) == 0x0680) { /* NVSwitch: all ports merged */
      if (nvs < 0 && (nvs = topo_add_vertex(g, TOPO_NVS, NULL)) < 0)
        return nomem(r);
      target = nvs;
    } else {
      target = topo_find_busid(g, p->target);
      if (target == p->gpu)
        continue; /* a GPU listing itself: nothing to link */
      if (target < 0) {
        if ((p->tclass >> 16) == 0x06 && g->v[p->gpu].numa >= 0) {
          /* NVLink to the CPU (POWER) */
          for (int c = 0; c < topo_count(g, TOPO_CPU); c++)
            if (g->v[topo_nth(g, TOPO_CPU, c)].numa == g->v[p->gpu].numa)
              target = topo_nth(g, TOPO_CPU, c);
        }
        if (target < 0)
          continue; /* a GPU outside this file (not visible) */
      }
    }
    int l = topo_link_between(g, p->gpu, target);
    if (l >= 0 && g->links[l].type == TOPO_LINK_NVL) {
      /* both GPUs list the pair: keep the larger count, do not add */
      if (target != nvs && p->count > g->links[l].count) {
        g->links[l].count = (int)p->count;
        g->links[l].bw = lane * (double)p->count;
      } else if (target == nvs) {
        g->links[l].count += (int)p->count;
        g->links[l].bw += lane * (double)p->count;
      }
      continue;
    }
    if (topo_add_link(g, p->gpu, target, TOPO_LINK_NVL, lane * (double)p->count,
                      -1, (int)p->count) < 0)
      return nomem(r);
  }
  return BRAID_SUCCESS;
}

braid_result topo_parse_nccl(const char *buf, size_t len, const char *fname,
                             topo_graph **out) {
  *out = NULL;
  xml_node *root;
  CHECKR(xml_parse(buf, len, fname, &root));
  nccl_rd r = {.fname = fname};
  braid_result res = BRAID_SUCCESS;
  if (strcmp(root->name, "system")) {
    res = ERR(BRAID_ERR_INVALID_ARG,
              "%s:%d: root element is <%s>, expected <system> (NCCL "
              "topology)",
              fname, root->line, root->name);
    goto out;
  }
  if (!(r.g = topo_graph_new(""))) {
    res = TOPO_NOMEM(fname);
    goto out;
  }
  for (int i = 0; i < root->nkids && res == BRAID_SUCCESS; i++) {
    const xml_node *c = root->kids[i];
    if (strcmp(c->name, "cpu"))
      continue;
    long numa = topo_count(r.g, TOPO_CPU), fam = -1, model = -1;
    if ((res = xml_get_int(c, "numaid", 0, 4095, 0, &numa, fname)) ||
        (res = xml_get_int(c, "familyid", 0, 1L << 20, 0, &fam, fname)) ||
        (res = xml_get_int(c, "modelid", 0, 1L << 20, 0, &model, fname)))
      break;
    char name[24];
    snprintf(name, sizeof(name), "CPU%ld", numa);
    int id = topo_add_vertex(r.g, TOPO_CPU, name);
    if (id < 0) {
      res = ERR(BRAID_ERR_INVALID_ARG,
                "%s:%d: <cpu> attribute 'numaid': %ld appears twice", fname,
                c->line, numa);
      break;
    }
    topo_vertex *v = &r.g->v[id];
    v->numa = (int)numa;
    v->family = (int)fam;
    v->model = (int)model;
    const char *s;
    if ((s = xml_get(c, "affinity")))
      snprintf(v->affinity, sizeof(v->affinity), "%s", s);
    if ((s = xml_get(c, "arch")))
      snprintf(v->arch, sizeof(v->arch), "%s", s);
    if ((s = xml_get(c, "vendor")))
      snprintf(v->vendor, sizeof(v->vendor), "%s", s);
    for (int j = 0; j < c->nkids && res == BRAID_SUCCESS; j++) {
      const xml_node *k = c->kids[j];
      if (!strcmp(k->name, "pci"))
        res = read_pci(&r, k, id, (int)numa);
      else if (!strcmp(k->name, "nic"))
        res = read_nic(&r, k, id, NULL, NULL);
    }
  }
  if (res == BRAID_SUCCESS && topo_count(r.g, TOPO_CPU) == 0)
    res = ERR(BRAID_ERR_INVALID_ARG, "%s:%d: <system> has no <cpu>", fname,
              root->line);
  if (res == BRAID_SUCCESS)
    res = resolve_nvlinks(&r);
  /* sockets: every pair of CPUs joined by the inter-socket link */
  for (int a = 0; res == BRAID_SUCCESS && a < topo_count(r.g, TOPO_CPU); a++)
    for (int b = a + 1; b < topo_count(r.g, TOPO_CPU); b++)
      if (topo_add_link(r.g, topo_nth(r.g, TOPO_CPU, a),
                        topo_nth(r.g, TOPO_CPU, b), TOPO_LINK_SYS, -1, -1,
                        1) < 0)
        res = TOPO_NOMEM(fname);
  if (res == BRAID_SUCCESS && topo_attach_net(r.g) != BRAID_SUCCESS)
    res = TOPO_NOMEM(fname);
out:
  free(r.nv);
  xml_free(root);
  if (res != BRAID_SUCCESS) {
    topo_graph_free(r.g);
    return res;
  }
  *out = r.g;
  return BRAID_SUCCESS;
}

/* ---------------- writing ---------------- */

static void fake_busid(const topo_vertex *v, int id, char *out, size_t n) {
  if (v->busid[0])
    snprintf(out, n, "%s", v->busid);
  else
    snprintf(out, n, "%04x:%02x:00.0", 0xb000 + (id >> 8), id & 0xff);
}

static const char *gts_str(double gts, char *buf, size_t n) {
  if (gts <= 0)
    snprintf(buf, n, "%s", "");
  else if (gts == (int)gts)
    snprintf(buf, n, "%d GT/s", (int)gts);
  else
    snprintf(buf, n, "%.1f GT/s", gts);
  return buf;
}

static void ind(FILE *f, int d) {
  for (int i = 0; i < d; i++)
    fputs("  ", f);
}

static void xml_esc(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
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
}

static void write_pci_attrs(FILE *f, const topo_vertex *v, int id,
                            int dflt_class) {
  char b[24], s[24];
  fake_busid(v, id, b, sizeof(b));
  fprintf(f, "<pci busid=\"%s\" class=\"0x%06x\"", b,
          v->pci_class >= 0 ? v->pci_class : dflt_class);
  if (v->vendor_id >= 0)
    fprintf(f, " vendor=\"0x%04x\"", v->vendor_id);
  if (v->device_id >= 0)
    fprintf(f, " device=\"0x%04x\"", v->device_id);
  if (v->subsys_vendor >= 0)
    fprintf(f, " subsystem_vendor=\"0x%04x\"", v->subsys_vendor);
  if (v->subsys_device >= 0)
    fprintf(f, " subsystem_device=\"0x%04x\"", v->subsys_device);
  fprintf(f, " link_speed=\"%s\" link_width=\"%d\"",
          gts_str(v->link_gts, s, sizeof(s)), v->link_width);
}

static void write_net(FILE *f, const topo_vertex *v, int d) {
  ind(f, d);
  fputs("<net name=\"", f);
  xml_esc(f, v->netdev[0] ? v->netdev : v->name);
  fprintf(f, "\" dev=\"%d\" speed=\"%.0f\" port=\"%d\" guid=\"0x%llx\"",
          v->dev >= 0 ? v->dev : v->index, v->speed * 8000.0,
          v->port >= 0 ? v->port : 1, (unsigned long long)v->guid);
  if (v->maxconn > 0)
    fprintf(f, " maxconn=\"%d\"", v->maxconn);
  if (v->gdr >= 0)
    fprintf(f, " gdr=\"%d\"", v->gdr);
  fputs("/>\n", f);
}

typedef struct nccl_wr {
  const topo_graph *g;
  FILE *f;
  int *parent; /* PCI-tree parent of each vertex, -1 none */
  char *done;
} nccl_wr;

static void write_children(nccl_wr *w, int p, int d);

static void write_vertex(nccl_wr *w, int id, int d) {
  const topo_graph *g = w->g;
  const topo_vertex *v = &g->v[id];
  FILE *f = w->f;
  if (w->done[id])
    return;
  w->done[id] = 1;
  ind(f, d);
  if (v->type == TOPO_PCI) {
    write_pci_attrs(f, v, id, 0x060400);
    fputs(">\n", f);
    write_children(w, id, d + 1);
    ind(f, d);
    fputs("</pci>\n", f);
  } else if (v->type == TOPO_GPU) {
    write_pci_attrs(f, v, id, 0x030200);
    int has_nvl = 0;
    for (int k = 0; k < v->nadj; k++)
      has_nvl |= g->links[v->adj[k]].type == TOPO_LINK_NVL;
    if (v->dev < 0 && v->sm <= 0 && v->rank < 0 && !has_nvl) {
      fputs("/>\n", f); /* a bare PCI device, as the source had it */
      return;
    }
    fputs(">\n", f);
    ind(f, d + 1);
    fprintf(f, "<gpu dev=\"%d\" sm=\"%d\"", v->dev >= 0 ? v->dev : v->index,
            v->sm);
    if (v->rank >= 0)
      fprintf(f, " rank=\"%d\"", v->rank);
    if (v->gdr >= 0)
      fprintf(f, " gdr=\"%d\"", v->gdr);
    fputs(">\n", f);
    for (int k = 0; k < v->nadj; k++) {
      const topo_link *l = &g->links[v->adj[k]];
      if (l->type != TOPO_LINK_NVL)
        continue;
      int o = topo_other(g, v->adj[k], id);
      char b[24];
      fake_busid(&g->v[o], o, b, sizeof(b));
      int tclass = g->v[o].type == TOPO_NVS   ? 0x068000
                   : g->v[o].type == TOPO_CPU ? 0x060400
                                              : 0x030200;
      if (g->v[o].type == TOPO_NVS && !g->v[o].busid[0])
        snprintf(b, sizeof(b), "ffff:ff:1f.%d", g->v[o].index & 7);
      ind(f, d + 2);
      fprintf(f, "<nvlink target=\"%s\" count=\"%d\" tclass=\"0x%06x\"/>\n", b,
              l->count, tclass);
    }
    ind(f, d + 1);
    fputs("</gpu>\n", f);
    ind(f, d);
    fputs("</pci>\n", f);
  } else if (v->type == TOPO_NIC) {
    if (v->busid[0] && !v->netdev[0] && v->speed <= 0 && v->dev < 0) {
      write_pci_attrs(f, v, id, 0x020700);
      fputs("/>\n", f); /* a bare PCI device, as the source had it */
      return;
    }
    if (v->busid[0]) {
      write_pci_attrs(f, v, id, 0x020700);
      fputs(">\n", f);
      d++;
    }
    ind(f, d);
    fputs("<nic>\n", f);
    write_net(f, v, d + 1);
    /* other ports of the same device */
    for (int j = id + 1; v->busid[0] && j < g->nv; j++)
      if (g->v[j].type == TOPO_NIC && !w->done[j] &&
          !strcmp(g->v[j].busid, v->busid)) {
        w->done[j] = 1;
        write_net(f, &g->v[j], d + 1);
      }
    ind(f, d);
    fputs("</nic>\n", f);
    if (v->busid[0]) {
      ind(f, d - 1);
      fputs("</pci>\n", f);
    }
  }
}

static void write_children(nccl_wr *w, int p, int d) {
  for (int i = 0; i < w->g->nv; i++)
    if (w->parent[i] == p)
      write_vertex(w, i, d);
}

braid_result topo_write_nccl(const topo_graph *g, FILE *f) {
  int n = g->nv;
  int *parent = malloc((size_t)(n ? n : 1) * sizeof(int));
  int *queue = malloc((size_t)(n ? n : 1) * sizeof(int) * 2);
  char *done = calloc((size_t)(n ? n : 1), 1);
  if (!parent || !queue || !done) {
    free(parent);
    free(queue);
    free(done);
    return BRAID_ERR_NOMEM;
  }
  topo_pci_tree(g, parent, queue);
  memset(done, 0, (size_t)n);
  nccl_wr w = {g, f, parent, done};
  fputs("<system version=\"1\">\n", f);
  for (int c = 0; c < topo_count(g, TOPO_CPU); c++) {
    int id = topo_nth(g, TOPO_CPU, c);
    const topo_vertex *v = &g->v[id];
    fprintf(f, "  <cpu numaid=\"%d\"", v->numa >= 0 ? v->numa : v->index);
    if (v->affinity[0])
      fprintf(f, " affinity=\"%s\"", v->affinity);
    if (v->arch[0]) {
      fputs(" arch=\"", f);
      xml_esc(f, v->arch);
      fputc('"', f);
    }
    if (v->vendor[0]) {
      fputs(" vendor=\"", f);
      xml_esc(f, v->vendor);
      fputc('"', f);
    }
    if (v->family >= 0)
      fprintf(f, " familyid=\"%d\"", v->family);
    if (v->model >= 0)
      fprintf(f, " modelid=\"%d\"", v->model);
    fputs(">\n", f);
    write_children(&w, id, 2);
    fputs("  </cpu>\n", f);
  }
  fputs("</system>\n", f);
  free(parent);
  free(queue);
  free(done);
  return ferror(f) ? BRAID_ERR_SYSTEM : BRAID_SUCCESS;
}

/* ---------------- NCCL graph (channel) files ---------------- */

void topo_nccl_graphs_free(topo_nccl_graphs *gs) {
  if (!gs)
    return;
  for (int i = 0; i < gs->n; i++) {
    for (int c = 0; gs->g[i].ch != NULL && c < gs->g[i].nch; c++)
      free(gs->g[i].ch[c].gpus);
    free(gs->g[i].ch);
  }
  free(gs->g);
  free(gs);
}

braid_result topo_parse_nccl_graphs(const char *buf, size_t len,
                                    const char *fname, topo_nccl_graphs **out) {
  *out = NULL;
  xml_node *root;
  CHECKR(xml_parse(buf, len, fname, &root));
  braid_result res = BRAID_SUCCESS;
  topo_nccl_graphs *gs = calloc(1, sizeof(*gs));
  if (!gs) {
    res = TOPO_NOMEM(fname);
    goto out;
  }
  if (strcmp(root->name, "graphs")) {
    res = ERR(BRAID_ERR_INVALID_ARG,
              "%s:%d: root element is <%s>, expected <graphs>", fname,
              root->line, root->name);
    goto out;
  }
  gs->g = calloc((size_t)(root->nkids ? root->nkids : 1), sizeof(*gs->g));
  if (!gs->g) {
    res = TOPO_NOMEM(fname);
    goto out;
  }
  for (int i = 0; i < root->nkids && res == BRAID_SUCCESS; i++) {
    const xml_node *gn = root->kids[i];
    if (strcmp(gn->name, "graph"))
      continue;
    topo_nccl_pattern *p = &gs->g[gs->n++];
    long id = 0, pat = 0, nch = 0, cross = 0;
    if ((res = xml_get_int(gn, "id", 0, 1 << 20, 0, &id, fname)) ||
        (res = xml_get_int(gn, "pattern", 0, 1 << 20, 1, &pat, fname)) ||
        (res = xml_get_int(gn, "nchannels", 0, 4096, 1, &nch, fname)) ||
        (res = xml_get_int(gn, "crossnic", 0, 2, 0, &cross, fname)) ||
        (res = xml_get_double(gn, "speedintra", 0, 1e6, 0, &p->speed_intra,
                              fname)) ||
        (res = xml_get_double(gn, "speedinter", 0, 1e6, 0, &p->speed_inter,
                              fname)))
      break;
    p->id = (int)id;
    p->pattern = (int)pat;
    p->nchannels = (int)nch;
    p->crossnic = (int)cross;
    const char *s;
    if ((s = xml_get(gn, "typeintra")))
      snprintf(p->type_intra, sizeof(p->type_intra), "%s", s);
    if ((s = xml_get(gn, "typeinter")))
      snprintf(p->type_inter, sizeof(p->type_inter), "%s", s);
    p->ch = calloc((size_t)(gn->nkids ? gn->nkids : 1), sizeof(*p->ch));
    if (!p->ch) {
      res = TOPO_NOMEM(fname);
      break;
    }
    for (int c = 0; c < gn->nkids && res == BRAID_SUCCESS; c++) {
      const xml_node *cn = gn->kids[c];
      if (strcmp(cn->name, "channel"))
        continue;
      topo_nccl_channel *ch = &p->ch[p->nch++];
      ch->net_in = ch->net_out = -1;
      ch->gpus = malloc((size_t)(cn->nkids ? cn->nkids : 1) * sizeof(int));
      if (!ch->gpus) {
        res = TOPO_NOMEM(fname);
        break;
      }
      for (int k = 0; k < cn->nkids; k++) {
        const xml_node *e = cn->kids[k];
        long dev = -1;
        if ((res = xml_get_int(e, "dev", 0, 65535, 1, &dev, fname)))
          break;
        if (!strcmp(e->name, "gpu"))
          ch->gpus[ch->n++] = (int)dev;
        else if (!strcmp(e->name, "net")) {
          if (ch->n == 0)
            ch->net_in = (int)dev;
          else
            ch->net_out = (int)dev;
        }
      }
    }
  }
out:
  xml_free(root);
  if (res != BRAID_SUCCESS) {
    topo_nccl_graphs_free(gs);
    return res;
  }
  *out = gs;
  return BRAID_SUCCESS;
}
