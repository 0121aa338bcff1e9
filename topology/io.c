/*
 * Files: reading, format detection, dispatch to the parsers and writers, and
 * helpers the parsers share.
 */
#include "topology/topo_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

braid_result topo_read_file(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ERR(BRAID_ERR_INVALID_ARG, "%s: cannot open: %s", path,
               strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fclose(f);
    return ERR(BRAID_ERR_INVALID_ARG, "%s: is a directory", path);
  }
  size_t cap = 65536, n = 0;
  char *b = malloc(cap + 1);
  if (!b) {
    fclose(f);
    return TOPO_NOMEM(path);
  }
  for (;;) {
    if (n == cap) {
      if (cap >= TOPO_MAX_FILE_BYTES) {
        free(b);
        fclose(f);
        return ERR(BRAID_ERR_INVALID_ARG, "%s: larger than %u bytes", path,
                   TOPO_MAX_FILE_BYTES);
      }
      cap *= 2;
      char *nb = realloc(b, cap + 1);
      if (!nb) {
        free(b);
        fclose(f);
        return TOPO_NOMEM(path);
      }
      b = nb;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0) {
      if (ferror(f)) {
        free(b);
        fclose(f);
        return ERR(BRAID_ERR_SYSTEM, "%s: read error", path);
      }
      break;
    }
  }
  fclose(f);
  b[n] = 0;
  *buf = b;
  *len = n;
  return BRAID_SUCCESS;
}

int topo_busid_norm(const char *in, char *out, size_t outlen) {
  unsigned dom = 0, bus, dev, fn;
  char tail;
  if (!in || outlen < 13)
    return -1;
  if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) == 4) {
  } else if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) == 3) {
    dom = 0;
  } else
    return -1;
  if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
    return -1;
  for (const char *p = in; *p; p++)
    if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
      return -1;
  snprintf(out, outlen, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return 0;
}

double topo_parse_gts(const char *s) {
  if (!s)
    return 0;
  char *e;
  double v = strtod(s, &e);
  if (e == s || !(v > 0) || v > 1000)
    return 0;
  return v;
}

double topo_nic_bw(const topo_graph *g, int nic) {
  const topo_vertex *v = &g->v[nic];
  if (v->speed > 0)
    return v->speed;
  double pbw = topo_pcie_bw(v->link_gts, v->link_width);
  if (pbw > 0) {
    /* speed unknown: the fastest port of the NIC's PCIe generation (gen3
       EDR 100 Gb/s, gen4 HDR 200, gen5 NDR 400, gen6 XDR 800), bounded by
       the PCIe link */
    static const double by_gen[] = {0, 12.5, 12.5, 12.5, 25, 50, 100};
    double guess = by_gen[topo_pcie_gen(v->link_gts)];
    return guess > 0 && guess < pbw ? guess : pbw;
  }
  for (int k = 0; k < v->nadj; k++) {
    const topo_link *l = &g->links[v->adj[k]];
    if (l->type == TOPO_LINK_PCI && l->bw != TOPO_PCI_DEFAULT_BW)
      return l->bw; /* a measured PCIe figure (hwloc) */
  }
  return TOPO_NET_DEFAULT_BW;
}

braid_result topo_attach_net(topo_graph *g) {
  int net = -1;
  for (int i = 0; i < topo_count(g, TOPO_NIC); i++) {
    int nic = topo_nth(g, TOPO_NIC, i);
    int has = 0;
    for (int k = 0; k < g->v[nic].nadj; k++)
      if (g->links[g->v[nic].adj[k]].type == TOPO_LINK_NET)
        has = 1;
    if (has)
      continue;
    if (net < 0) {
      net = topo_count(g, TOPO_NET) ? topo_nth(g, TOPO_NET, 0)
                                    : topo_add_vertex(g, TOPO_NET, NULL);
      if (net < 0)
        return BRAID_ERR_NOMEM;
    }
    double bw = topo_nic_bw(g, nic);
    if (topo_add_link(g, nic, net, TOPO_LINK_NET, bw, -1, 1) < 0)
      return BRAID_ERR_NOMEM;
  }
  return BRAID_SUCCESS;
}

int topo_format_parse(const char *s) {
  if (!s)
    return -1;
  if (!strcasecmp(s, "braid") || !strcasecmp(s, "topo"))
    return TOPO_FMT_BRAID;
  if (!strcasecmp(s, "nccl"))
    return TOPO_FMT_NCCL;
  if (!strcasecmp(s, "hwloc"))
    return TOPO_FMT_HWLOC;
  if (!strcasecmp(s, "auto"))
    return TOPO_FMT_AUTO;
  return -1;
}

topo_format topo_format_sniff(const char *buf, size_t len) {
  size_t n = len < 4096 ? len : 4096;
  /* first non-comment, non-declaration token */
  size_t i = 0;
  while (i < n) {
    while (i < n && isspace((unsigned char)buf[i]))
      i++;
    if (i < n && buf[i] == '#') {
      while (i < n && buf[i] != '\n')
        i++;
      continue;
    }
    if (i + 1 < n && buf[i] == '<' &&
        (buf[i + 1] == '?' || buf[i + 1] == '!')) {
      while (i < n && buf[i] != '>')
        i++;
      i++;
      continue;
    }
    break;
  }
  if (i >= n)
    return TOPO_FMT_AUTO;
  const char *p = buf + i;
  size_t rest = n - i;
#define STARTS(s) (rest >= strlen(s) && !memcmp(p, s, strlen(s)))
  if (STARTS("braid-topology"))
    return TOPO_FMT_BRAID;
  if (STARTS("<system"))
    return TOPO_FMT_NCCL;
  if (STARTS("<topology"))
    return TOPO_FMT_HWLOC;
#undef STARTS
  return TOPO_FMT_AUTO;
}

braid_result topo_parse(const char *buf, size_t len, const char *fname,
                        topo_format fmt, topo_graph **out) {
  *out = NULL;
  if (fmt == TOPO_FMT_AUTO)
    fmt = topo_format_sniff(buf, len);
  switch (fmt) {
  case TOPO_FMT_BRAID:
    return topo_parse_braid(buf, len, fname, out);
  case TOPO_FMT_NCCL:
    return topo_parse_nccl(buf, len, fname, out);
  case TOPO_FMT_HWLOC:
    return topo_parse_hwloc(buf, len, fname, out);
  default: {
    int graphs = 0;
    for (size_t i = 0; i + 7 <= len && i < 256 && !graphs; i++)
      graphs = !memcmp(buf + i, "<graphs", 7);
    if (graphs)
      return ERR(BRAID_ERR_INVALID_ARG,
                 "%s:1: is an NCCL graph (channel) file (NCCL_GRAPH_FILE's), "
                 "not a topology: give NCCL_TOPO_FILE's XML, hwloc XML or "
                 "braid's format",
                 fname);
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s:1: unknown topology format (expected 'braid-topology', "
               "<system> (NCCL) or <topology> (hwloc))",
               fname);
  }
  }
}

braid_result topo_load(const char *path, topo_format fmt, topo_graph **out) {
  char *buf;
  size_t len;
  *out = NULL;
  CHECKR(topo_read_file(path, &buf, &len));
  braid_result r = topo_parse(buf, len, path, fmt, out);
  free(buf);
  if (r == BRAID_SUCCESS && (!(*out)->name[0])) {
    const char *base = strrchr(path, '/');
    snprintf((*out)->name, sizeof((*out)->name), "%s", base ? base + 1 : path);
  }
  return r;
}

braid_result topo_save(const topo_graph *g, const char *path, topo_format fmt) {
  if (fmt == TOPO_FMT_AUTO) {
    const char *dot = strrchr(path, '.');
    fmt = (dot && !strcasecmp(dot, ".xml")) ? TOPO_FMT_NCCL : TOPO_FMT_BRAID;
  }
  topo_wfile w;
  CHECKR(topo_wfile_open(&w, path));
  braid_result r = fmt == TOPO_FMT_NCCL    ? topo_write_nccl(g, w.f)
                   : fmt == TOPO_FMT_HWLOC ? topo_write_hwloc(g, w.f)
                                           : topo_write_braid(g, w.f);
  if (r != BRAID_SUCCESS) {
    topo_wfile_close(&w, 1);
    return ERR(r, "%s: cannot express this graph in that format", path);
  }
  return topo_wfile_close(&w, 0);
}
