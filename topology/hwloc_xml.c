/*
 * hwloc XML (version 2, and the object tree of version 1): NUMA nodes become
 * CPU vertices; the PCI tree becomes PCI switches, GPUs and NICs; the
 * NVLinkBandwidth distances matrix that hwloc's NVML backend writes becomes
 * NVLinks (NVSwitch ports merged into one NVS vertex, so that a GPU's
 * bandwidth to the fabric is the sum over its ports).
 *
 * PCI bridges: a host bridge adds no vertex (its children hang from the
 * CPU). A PCI-PCI bridge below a bridge that fans out is a downstream port
 * and joins its parent's switch; a bridge with a single child is a
 * pass-through (a root port) and adds no vertex; any other PCI-PCI bridge is
 * a PCI switch.
 */
#include "topology/topo_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SET_WORDS 256 /* 8192 CPUs */

typedef struct bitmap {
  unsigned w[MAX_SET_WORDS];
  int n;
} bitmap;

typedef struct gp_map {
  unsigned long long gp;
  int vertex;
  int is_gpu;
} gp_map;

typedef struct numa_info {
  int vertex;
  bitmap set;
} numa_info;

typedef struct hx {
  topo_graph *g;
  const char *fname;
  gp_map *gp;
  int ngp, capgp;
  numa_info *numa;
  int nnuma;
  char arch[16];
} hx;

#define HX_FAIL(h, ...) return ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__)

static int bitmap_parse(const char *s, bitmap *b) {
  memset(b, 0, sizeof(*b));
  if (!s || !*s)
    return -1;
  /* words, most significant first, comma separated, optional 0x each */
  unsigned tmp[MAX_SET_WORDS];
  int n = 0;
  const char *p = s;
  for (;;) {
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
      p += 2;
    if (n == MAX_SET_WORDS)
      return -1;
    if (!strncmp(p, "f...f", 5)) { /* infinite set: treat as empty tail */
      p += 5;
      tmp[n++] = 0xffffffffu;
    } else {
      char *e;
      unsigned long v = strtoul(p, &e, 16);
      if (e == p || e - p > 8)
        return -1;
      tmp[n++] = (unsigned)v;
      p = e;
    }
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p)
      return -1;
    break;
  }
  b->n = n;
  for (int i = 0; i < n; i++)
    b->w[i] = tmp[n - 1 - i];
  return 0;
}

static int bitmap_first(const bitmap *b) {
  for (int i = 0; i < b->n; i++)
    if (b->w[i])
      for (int k = 0; k < 32; k++)
        if (b->w[i] >> k & 1)
          return i * 32 + k;
  return -1;
}

static int bitmap_has(const bitmap *b, int bit) {
  return bit >= 0 && bit / 32 < b->n && (b->w[bit / 32] >> (bit % 32) & 1);
}

static braid_result gp_add(hx *h, unsigned long long gp, int vertex,
                           int is_gpu) {
  if (h->ngp == h->capgp) {
    int cap = h->capgp ? 2 * h->capgp : 64;
    gp_map *n = realloc(h->gp, (size_t)cap * sizeof(*n));
    if (!n)
      return TOPO_NOMEM(h->fname);
    h->gp = n;
    h->capgp = cap;
  }
  h->gp[h->ngp++] = (gp_map){gp, vertex, is_gpu};
  return BRAID_SUCCESS;
}

static const gp_map *gp_find(const hx *h, unsigned long long gp) {
  for (int i = 0; i < h->ngp; i++)
    if (h->gp[i].gp == gp)
      return &h->gp[i];
  return NULL;
}

static const char *info_get(const xml_node *n, const char *name) {
  for (int i = 0; i < n->nkids; i++) {
    const xml_node *k = n->kids[i];
    if (!strcmp(k->name, "info")) {
      const char *nm = xml_get(k, "name");
      if (nm && !strcmp(nm, name))
        return xml_get(k, "value");
    }
  }
  return NULL;
}

static int is_obj(const xml_node *n) { return !strcmp(n->name, "object"); }

static braid_result obj_type(hx *h, const xml_node *n, const char **t) {
  return xml_require(n, "type", t, h->fname);
}

/* ---- pass 1: NUMA nodes ---- */
static braid_result find_numa(hx *h, const xml_node *n, const xml_node *pkg,
                              int depth) {
  if (depth > TOPO_MAX_XML_DEPTH)
    HX_FAIL(h, "%s:%d: objects nested too deep", h->fname, n->line);
  for (int i = 0; i < n->nkids; i++) {
    const xml_node *k = n->kids[i];
    if (!is_obj(k))
      continue;
    const char *t;
    braid_result r = obj_type(h, k, &t);
    if (r != BRAID_SUCCESS)
      return r;
    if (!strcmp(t, "Machine")) {
      const char *a = info_get(k, "Architecture");
      if (a)
        snprintf(h->arch, sizeof(h->arch), "%s", a);
    }
    if (!strcmp(t, "NUMANode")) {
      long os = h->nnuma;
      CHECKR(xml_get_int(k, "os_index", 0, 4095, 0, &os, h->fname));
      char name[24];
      snprintf(name, sizeof(name), "CPU%ld", os);
      int id = topo_add_vertex(h->g, TOPO_CPU, name);
      if (id < 0)
        HX_FAIL(h, "%s:%d: <object> attribute 'os_index': NUMA node %ld twice",
                h->fname, k->line, os);
      numa_info *nn = realloc(h->numa, (size_t)(h->nnuma + 1) * sizeof(*nn));
      if (!nn)
        return TOPO_NOMEM(h->fname);
      h->numa = nn;
      numa_info *ni = &h->numa[h->nnuma++];
      ni->vertex = id;
      const char *cs = xml_get(k, "cpuset");
      if (!cs || bitmap_parse(cs, &ni->set)) {
        if (cs)
          HX_FAIL(h,
                  "%s:%d: <object> attribute 'cpuset': not a cpu set "
                  "(got '%.40s')",
                  h->fname, k->line, cs);
        memset(&ni->set, 0, sizeof(ni->set));
      }
      topo_vertex *v = &h->g->v[id];
      v->numa = (int)os;
      double mem = 0;
      CHECKR(xml_get_double(k, "local_memory", 0, 1e20, 0, &mem, h->fname));
      v->mem_bytes = (uint64_t)mem;
      /* NCCL-style affinity: 32-bit words, most significant first */
      size_t off = 0;
      for (int w = ni->set.n - 1; w >= 0 && off + 10 < sizeof(v->affinity); w--)
        off += (size_t)snprintf(v->affinity + off, sizeof(v->affinity) - off,
                                "%s%08x", w == ni->set.n - 1 ? "" : ",",
                                ni->set.w[w]);
      snprintf(v->arch, sizeof(v->arch), "%s", h->arch);
      if (pkg) {
        const char *s;
        if ((s = info_get(pkg, "CPUVendor")))
          snprintf(v->vendor, sizeof(v->vendor), "%s", s);
        if ((s = info_get(pkg, "CPUFamilyNumber")))
          v->family = atoi(s);
        if ((s = info_get(pkg, "CPUModelNumber")))
          v->model = atoi(s);
      }
    }
    r = find_numa(h, k, !strcmp(t, "Package") ? k : pkg, depth + 1);
    if (r != BRAID_SUCCESS)
      return r;
  }
  return BRAID_SUCCESS;
}

/* ---- pass 2: cores, and which CPU vertex a non-I/O object belongs to ---- */
static int numa_of_set(hx *h, const bitmap *set, const bitmap *nodeset) {
  int first = nodeset ? bitmap_first(nodeset) : -1;
  if (first >= 0)
    for (int i = 0; i < h->nnuma; i++)
      if (h->g->v[h->numa[i].vertex].numa == first)
        return h->numa[i].vertex;
  int bit = set ? bitmap_first(set) : -1;
  for (int i = 0; i < h->nnuma; i++)
    if (bitmap_has(&h->numa[i].set, bit))
      return h->numa[i].vertex;
  return h->nnuma ? h->numa[0].vertex : -1;
}

static braid_result io_walk(hx *h, const xml_node *n, int attach, int numa,
                            int parent_fans_out, int depth);

static int count_io_kids(const xml_node *n) {
  int c = 0;
  for (int i = 0; i < n->nkids; i++) {
    const char *t = is_obj(n->kids[i]) ? xml_get(n->kids[i], "type") : NULL;
    if (t && (!strcmp(t, "Bridge") || !strcmp(t, "PCIDev")))
      c++;
  }
  return c;
}

static braid_result parse_pci_type(hx *h, const xml_node *n, int *cls, int *ven,
                                   int *dev, int *sven, int *sdev) {
  const xml_attr *a = xml_attr_get(n, "pci_type");
  *cls = -1;
  *ven = *dev = *sven = *sdev = -1;
  if (!a)
    return BRAID_SUCCESS;
  unsigned c, v, d, sv, sd;
  int k = sscanf(a->value, "%x [%x:%x] [%x:%x]", &c, &v, &d, &sv, &sd);
  if (k < 3 || c > 0xffff || v > 0xffff || d > 0xffff)
    HX_FAIL(h,
            "%s:%d: <object> attribute 'pci_type': expected 'CCCC [VVVV:DDDD] "
            "...' (got '%.40s')",
            h->fname, a->line, a->value);
  *cls = (int)(c << 8);
  *ven = (int)v;
  *dev = (int)d;
  if (k == 5 && sv <= 0xffff && sd <= 0xffff) {
    *sven = (int)sv;
    *sdev = (int)sd;
  }
  return BRAID_SUCCESS;
}

static braid_result pci_common(hx *h, const xml_node *n, topo_vertex *v,
                               double *bw) {
  const xml_attr *a = xml_attr_get(n, "pci_busid");
  if (a && topo_busid_norm(a->value, v->busid, sizeof(v->busid)))
    HX_FAIL(h,
            "%s:%d: <object> attribute 'pci_busid': not a PCI bus id (got "
            "'%.40s')",
            h->fname, a->line, a->value);
  double speed = 0;
  CHECKR(xml_get_double(n, "pci_link_speed", 0, 1e6, 0, &speed, h->fname));
  *bw = speed; /* hwloc gives GB/s for the whole link */
  return parse_pci_type(h, n, &v->pci_class, &v->vendor_id, &v->device_id,
                        &v->subsys_vendor, &v->subsys_device);
}

static braid_result add_pcidev(hx *h, const xml_node *n, int attach, int numa) {
  topo_graph *g = h->g;
  int cls, ven, dev, sv, sd;
  braid_result r = parse_pci_type(h, n, &cls, &ven, &dev, &sv, &sd);
  if (r != BRAID_SUCCESS)
    return r;
  unsigned long long gp = 0;
  const char *gps = xml_get(n, "gp_index");
  if (gps)
    gp = strtoull(gps, NULL, 10);
  /* OS devices below tell what the device is */
  int gpu_osdev = 0, nfab = 0, nnet = 0;
  for (int i = 0; i < n->nkids; i++) {
    const xml_node *k = n->kids[i];
    const char *t = is_obj(k) ? xml_get(k, "type") : NULL;
    if (!t || strcmp(t, "OSDev"))
      continue;
    const char *ot = xml_get(k, "osdev_type"), *sub = xml_get(k, "subtype");
    const char *nm = xml_get(k, "name");
    int ost = ot ? atoi(ot) : -1;
    if ((sub && (!strcmp(sub, "CUDA") || !strcmp(sub, "NVML"))) ||
        (nm && (!strncmp(nm, "cuda", 4) || !strncmp(nm, "nvml", 4))))
      gpu_osdev = 1;
    if (ost == 3)
      nfab++;
    else if (ost == 2)
      nnet++;
  }
  int base = cls >= 0 ? cls >> 16 : -1;
  if ((base == 0x03 && ven == 0x10de) || gpu_osdev) {
    int id = topo_add_vertex(g, TOPO_GPU, NULL);
    if (id < 0)
      return TOPO_NOMEM(h->fname);
    topo_vertex *v = &g->v[id];
    double bw = 0;
    if ((r = pci_common(h, n, v, &bw)) != BRAID_SUCCESS)
      return r;
    v->numa = numa;
    if (topo_add_link(g, id, attach, TOPO_LINK_PCI, bw, -1, 1) < 0)
      return TOPO_NOMEM(h->fname);
    if ((r = gp_add(h, gp, id, 1)) != BRAID_SUCCESS)
      return r;
    for (int i = 0; i < n->nkids; i++) {
      const xml_node *k = n->kids[i];
      const char *t = is_obj(k) ? xml_get(k, "type") : NULL;
      if (!t || strcmp(t, "OSDev"))
        continue;
      const char *nm = xml_get(k, "name"), *kgp = xml_get(k, "gp_index");
      if (kgp &&
          (r = gp_add(h, strtoull(kgp, NULL, 10), id, 1)) != BRAID_SUCCESS)
        return r;
      if (nm && !strncmp(nm, "cuda", 4))
        g->v[id].dev = atoi(nm + 4);
      else if (nm && !strncmp(nm, "nvml", 4) && g->v[id].dev < 0)
        g->v[id].dev = atoi(nm + 4);
      const char *cc = info_get(k, "CUDAComputeCapability");
      if (!cc)
        cc = info_get(k, "NVIDIAComputeCapability");
      if (cc) {
        int maj = 0, min = 0;
        if (sscanf(cc, "%d.%d", &maj, &min) >= 1 && maj > 0 && maj < 100)
          g->v[id].sm = maj * 10 + min;
      }
    }
    return BRAID_SUCCESS;
  }
  if (base == 0x02) {
    int want = nfab ? 3 : 2, made = 0;
    for (int i = 0; i <= n->nkids; i++) {
      const xml_node *k = i < n->nkids ? n->kids[i] : NULL;
      const char *nm = NULL;
      if (k) {
        const char *t = is_obj(k) ? xml_get(k, "type") : NULL;
        const char *ot =
            t && !strcmp(t, "OSDev") ? xml_get(k, "osdev_type") : NULL;
        if (!ot || atoi(ot) != want)
          continue;
        nm = xml_get(k, "name");
      } else if (made)
        break;
      int id = topo_add_vertex(g, TOPO_NIC, NULL);
      if (id < 0)
        return TOPO_NOMEM(h->fname);
      topo_vertex *v = &g->v[id];
      double bw = 0;
      if ((r = pci_common(h, n, v, &bw)) != BRAID_SUCCESS)
        return r;
      snprintf(v->netdev, sizeof(v->netdev), "%s", nm ? nm : "");
      const char *sp = k ? info_get(k, "BraidNICSpeed") : NULL;
      if (sp && atof(sp) > 0 && atof(sp) < 1e5)
        v->speed = atof(sp);
      v->numa = numa;
      if (topo_add_link(g, id, attach, TOPO_LINK_PCI, bw, -1, 1) < 0)
        return TOPO_NOMEM(h->fname);
      made++;
    }
  }
  return BRAID_SUCCESS;
}

static braid_result io_walk(hx *h, const xml_node *n, int attach, int numa,
                            int parent_fans_out, int depth) {
  if (depth > TOPO_MAX_XML_DEPTH)
    HX_FAIL(h, "%s:%d: objects nested too deep", h->fname, n->line);
  for (int i = 0; i < n->nkids; i++) {
    const xml_node *k = n->kids[i];
    if (!is_obj(k))
      continue;
    const char *t;
    braid_result r = obj_type(h, k, &t);
    if (r != BRAID_SUCCESS)
      return r;
    if (!strcmp(t, "Bridge")) {
      const char *bt = xml_get(k, "bridge_type");
      int host = !bt || !strncmp(bt, "0-", 2);
      int nkids = count_io_kids(k);
      int child_attach = attach, fans = 0;
      const char *sw = info_get(k, "BraidPCISwitch");
      if (!host) {
        fans = nkids >= 2;
        if (sw || (!parent_fans_out && nkids >= 2)) {
          int id = topo_add_vertex(h->g, TOPO_PCI, NULL);
          if (id < 0)
            return TOPO_NOMEM(h->fname);
          double bw = 0;
          if ((r = pci_common(h, k, &h->g->v[id], &bw)) != BRAID_SUCCESS)
            return r;
          h->g->v[id].numa = numa;
          if (topo_add_link(h->g, id, attach, TOPO_LINK_PCI, bw, -1, 1) < 0)
            return TOPO_NOMEM(h->fname);
          child_attach = id;
        }
        if (sw)
          fans = 1;
      }
      r = io_walk(h, k, child_attach, numa, host ? 0 : fans, depth + 1);
    } else if (!strcmp(t, "PCIDev")) {
      r = add_pcidev(h, k, attach, numa);
    } else if (!strcmp(t, "OSDev") || !strcmp(t, "Misc")) {
      r = BRAID_SUCCESS;
    } else {
      /* a CPU-side object: its I/O children hang from its NUMA node */
      bitmap set, nodeset;
      const char *cs = xml_get(k, "cpuset"), *ns = xml_get(k, "nodeset");
      int hs = cs && !bitmap_parse(cs, &set);
      int hn = ns && !bitmap_parse(ns, &nodeset);
      int cpu = numa_of_set(h, hs ? &set : NULL, hn ? &nodeset : NULL);
      int cnuma = cpu >= 0 ? h->g->v[cpu].numa : numa;
      if (!strcmp(t, "Core") && hs)
        for (int j = 0; j < h->nnuma; j++)
          if (bitmap_has(&h->numa[j].set, bitmap_first(&set)))
            h->g->v[h->numa[j].vertex].cores++;
      if (!strcmp(t, "L3Cache") && hs) {
        double sz = 0;
        CHECKR(xml_get_double(k, "cache_size", 0, 1e15, 0, &sz, h->fname));
        for (int j = 0; j < h->nnuma; j++)
          if (bitmap_has(&h->numa[j].set, bitmap_first(&set)))
            h->g->v[h->numa[j].vertex].l3_bytes += (uint64_t)sz;
      }
      if (!strcmp(t, "PU") && hs)
        for (int j = 0; j < h->nnuma; j++)
          if (bitmap_has(&h->numa[j].set, bitmap_first(&set)))
            h->g->v[h->numa[j].vertex].pus++;
      r = io_walk(h, k, cpu >= 0 ? cpu : attach, cnuma, 0, depth + 1);
    }
    if (r != BRAID_SUCCESS)
      return r;
  }
  return BRAID_SUCCESS;
}

/* ---- distances ---- */
static braid_result read_u64s(hx *h, const xml_node *d, const char *tag,
                              unsigned long long *out, char *types, long want,
                              int hetero) {
  long got = 0;
  for (int i = 0; i < d->nkids; i++) {
    const xml_node *k = d->kids[i];
    if (strcmp(k->name, tag))
      continue;
    const char *p = k->text ? k->text : "";
    for (;;) {
      while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
      if (!*p)
        break;
      if (got == want)
        HX_FAIL(h, "%s:%d: <%s>: more than %ld values", h->fname, k->line, tag,
                want);
      if (hetero) {
        const char *colon = strchr(p, ':');
        if (!colon || colon - p > 15)
          HX_FAIL(h, "%s:%d: <%s>: expected Type:index (got '%.20s')", h->fname,
                  k->line, tag, p);
        types[got] = (!strncmp(p, "NUMANode", 8) || !strncmp(p, "Package", 7))
                         ? 'C'
                         : 'O';
        p = colon + 1;
      }
      char *e;
      unsigned long long u = strtoull(p, &e, 0);
      if (e == p)
        HX_FAIL(h, "%s:%d: <%s>: not a number (got '%.20s')", h->fname, k->line,
                tag, p);
      out[got++] = u;
      p = e;
    }
  }
  if (got != want)
    HX_FAIL(h,
            "%s:%d: <%s> attribute 'nbobjs': %ld values expected in <%s>, "
            "found %ld",
            h->fname, d->line, d->name, want, tag, got);
  return BRAID_SUCCESS;
}

static braid_result nvlink_distances(hx *h, const xml_node *d) {
  int hetero = !strcmp(d->name, "distances2hetero");
  long nb = 0;
  CHECKR(xml_get_int(d, "nbobjs", 1, 4096, 1, &nb, h->fname));
  const char *type = xml_get(d, "type");
  if (!hetero && !type)
    HX_FAIL(h, "%s:%d: <distances2> attribute 'type': missing", h->fname,
            d->line);
  unsigned long long *idx = malloc((size_t)nb * sizeof(*idx));
  unsigned long long *val = malloc((size_t)nb * (size_t)nb * sizeof(*val));
  char *types = malloc((size_t)nb);
  int *vert = malloc((size_t)nb * sizeof(int));
  braid_result r = BRAID_SUCCESS;
  if (!idx || !val || !types || !vert) {
    r = TOPO_NOMEM(h->fname);
    goto out;
  }
  memset(types, 'O', (size_t)nb);
  if ((r = read_u64s(h, d, "indexes", idx, types, nb, hetero)) ||
      (r = read_u64s(h, d, "u64values", val, NULL, nb * nb, 0)))
    goto out;
  int nvs = -1;
  for (long i = 0; i < nb; i++) {
    const gp_map *m = gp_find(h, idx[i]);
    if (m && m->is_gpu)
      vert[i] = m->vertex;
    else if (types[i] == 'C' || (type && !strcmp(type, "NUMANode"))) {
      vert[i] = -1;
      for (int j = 0; j < h->nnuma; j++)
        if ((unsigned long long)h->g->v[h->numa[j].vertex].numa == idx[i])
          vert[i] = h->numa[j].vertex;
    } else {
      /* NVSwitch ports (or unknown objects): one merged NVS vertex */
      if (nvs < 0 && (nvs = topo_add_vertex(h->g, TOPO_NVS, NULL)) < 0) {
        r = TOPO_NOMEM(h->fname);
        goto out;
      }
      vert[i] = nvs;
    }
  }
  for (long i = 0; i < nb; i++)
    for (long j = i + 1; j < nb; j++) {
      unsigned long long mb =
          val[i * nb + j] > val[j * nb + i] ? val[i * nb + j] : val[j * nb + i];
      int a = vert[i], b = vert[j];
      if (!mb || a < 0 || b < 0 || a == b)
        continue;
      if (h->g->v[a].type != TOPO_GPU && h->g->v[b].type != TOPO_GPU)
        continue;
      if (mb > 100000000ull) {
        r = ERR(BRAID_ERR_INVALID_ARG,
                "%s:%d: <%s> NVLinkBandwidth value %llu MB/s is not "
                "plausible",
                h->fname, d->line, d->name, mb);
        goto out;
      }
      double bw = (double)mb / 1000.0;
      int sm = h->g->v[a].type == TOPO_GPU ? h->g->v[a].sm : h->g->v[b].sm;
      double lane = topo_nvlink_lane_bw(sm);
      int count = (int)(bw / lane + 0.5);
      if (count < 1)
        count = 1;
      if (topo_add_link(h->g, a, b, TOPO_LINK_NVL, bw, -1, count) < 0) {
        r = TOPO_NOMEM(h->fname);
        goto out;
      }
    }
out:
  free(idx);
  free(val);
  free(types);
  free(vert);
  return r;
}

braid_result topo_parse_hwloc(const char *buf, size_t len, const char *fname,
                              topo_graph **out) {
  *out = NULL;
  xml_node *root;
  CHECKR(xml_parse(buf, len, fname, &root));
  hx h = {.fname = fname};
  braid_result r = BRAID_SUCCESS;
  if (strcmp(root->name, "topology")) {
    r = ERR(BRAID_ERR_INVALID_ARG,
            "%s:%d: root element is <%s>, expected <topology> (hwloc XML)",
            fname, root->line, root->name);
    goto out;
  }
  if (!(h.g = topo_graph_new(""))) {
    r = TOPO_NOMEM(fname);
    goto out;
  }
  if ((r = find_numa(&h, root, NULL, 0)) != BRAID_SUCCESS)
    goto out;
  if (h.nnuma == 0) {
    /* a machine without NUMA objects: one CPU vertex for the machine */
    int id = topo_add_vertex(h.g, TOPO_CPU, "CPU0");
    numa_info *nn = calloc(1, sizeof(*nn));
    if (id < 0 || !nn) {
      free(nn);
      r = TOPO_NOMEM(fname);
      goto out;
    }
    h.numa = nn;
    h.nnuma = 1;
    nn->vertex = id;
    h.g->v[id].numa = 0;
    for (int i = 0; i < root->nkids; i++)
      if (is_obj(root->kids[i]) && xml_get(root->kids[i], "cpuset"))
        bitmap_parse(xml_get(root->kids[i], "cpuset"), &nn->set);
  }
  if ((r = io_walk(&h, root, h.numa[0].vertex, h.g->v[h.numa[0].vertex].numa, 0,
                   0)) != BRAID_SUCCESS)
    goto out;
  for (int i = 0; i < root->nkids; i++) {
    const xml_node *d = root->kids[i];
    if (strcmp(d->name, "distances2") && strcmp(d->name, "distances2hetero"))
      continue;
    const char *nm = xml_get(d, "name");
    if (!nm || strcmp(nm, "NVLinkBandwidth"))
      continue;
    if ((r = nvlink_distances(&h, d)) != BRAID_SUCCESS)
      goto out;
  }
  for (int a = 0; a < topo_count(h.g, TOPO_CPU); a++)
    for (int b = a + 1; b < topo_count(h.g, TOPO_CPU); b++)
      if (topo_add_link(h.g, topo_nth(h.g, TOPO_CPU, a),
                        topo_nth(h.g, TOPO_CPU, b), TOPO_LINK_SYS, -1, -1,
                        1) < 0) {
        r = TOPO_NOMEM(fname);
        goto out;
      }
  if (topo_attach_net(h.g) != BRAID_SUCCESS)
    r = TOPO_NOMEM(fname);
out:
  xml_free(root);
  free(h.gp);
  free(h.numa);
  if (r != BRAID_SUCCESS) {
    topo_graph_free(h.g);
    return r;
  }
  *out = h.g;
  return BRAID_SUCCESS;
}
