/*
 * braid's own topology format: a line-oriented text file a user can read and
 * edit (docs/TOPOLOGY.md). First line "braid-topology 1"; then
 *   name <text>            the machine's name
 *   <type> <NAME> key=value...   a vertex (gpu, cpu, pci, nvs, nic, net)
 *   link <A> <B> <nvl|pci|sys|net> key=value...
 * '#' starts a comment. Values with spaces are double-quoted.
 */
#include "topology/topo_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOK 48

typedef struct tok {
  const char *key; /* NULL for a bare word */
  char *val;
} tok;

typedef struct bf {
  const char *fname;
  int line;
} bf;

/* Fails with "fname:line: what" (BRAID_ERR_INVALID_ARG). */
__attribute__((format(printf, 2, 3))) static braid_result
bf_err(const bf *b, const char *fmt, ...) {
  char m[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof(m), fmt, ap);
  va_end(ap);
  return ERR(BRAID_ERR_INVALID_ARG, "%s:%d: %s", b->fname, b->line, m);
}
#define BF_FAIL(b, ...)                                                        \
  do {                                                                         \
    (void)bf_err(b, __VA_ARGS__);                                              \
    return BRAID_ERR_INVALID_ARG;                                              \
  } while (0)

/* Splits a line in place into *nt tokens. */
static braid_result tokenize(bf *b, char *s, tok *t, int *nt) {
  int n = 0;
  for (;;) {
    while (*s == ' ' || *s == '\t' || *s == '\r')
      s++;
    if (!*s || *s == '#') {
      *nt = n;
      return BRAID_SUCCESS;
    }
    if (n == MAX_TOK)
      BF_FAIL(b, "more than %d fields on one line", MAX_TOK);
    t[n].key = NULL;
    char *start = s;
    while (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '=' &&
           *s != '"')
      s++;
    if (*s == '=') {
      *s++ = 0;
      t[n].key = start;
      if (!*start)
        BF_FAIL(b, "'=' without a key");
      start = s;
    }
    if (*s == '"') {
      char *w = ++s, *val = s;
      while (*s && *s != '"') {
        if (*s == '\\' && s[1])
          s++;
        *w++ = *s++;
      }
      if (*s != '"')
        BF_FAIL(b, "unterminated quoted value");
      s++;
      *w = 0;
      t[n].val = val;
      if (*s && *s != ' ' && *s != '\t' && *s != '\r')
        BF_FAIL(b, "text right after a quoted value");
      if (*s)
        s++;
    } else {
      while (*s && *s != ' ' && *s != '\t' && *s != '\r')
        s++;
      if (*s)
        *s++ = 0;
      t[n].val = start;
    }
    n++;
  }
}

static braid_result num(bf *b, const tok *t, double lo, double hi,
                        double *out) {
  char *e;
  errno = 0;
  double v = strtod(t->val, &e);
  if (e == t->val || *e || errno || !isfinite(v))
    BF_FAIL(b, "attribute '%s': not a number (got '%.40s')", t->key, t->val);
  if (v < lo || v > hi)
    BF_FAIL(b, "attribute '%s': out of range [%g, %g] (got '%.40s')", t->key,
            lo, hi, t->val);
  *out = v;
  return BRAID_SUCCESS;
}

static braid_result inum(bf *b, const tok *t, long lo, long hi, int *out) {
  char *e;
  errno = 0;
  long v = strtol(t->val, &e, 0);
  if (e == t->val || *e || errno)
    BF_FAIL(b, "attribute '%s': not an integer (got '%.40s')", t->key, t->val);
  if (v < lo || v > hi)
    BF_FAIL(b, "attribute '%s': out of range [%ld, %ld] (got '%.40s')", t->key,
            lo, hi, t->val);
  *out = (int)v;
  return BRAID_SUCCESS;
}

static braid_result str(bf *b, const tok *t, char *out, size_t n) {
  if (strlen(t->val) >= n)
    BF_FAIL(b, "attribute '%s': longer than %zu characters", t->key, n - 1);
  snprintf(out, n, "%s", t->val);
  return BRAID_SUCCESS;
}

static braid_result vertex_attr(bf *b, topo_vertex *v, const tok *t) {
  const char *k = t->key;
  double d;
  if (!k)
    BF_FAIL(b, "unexpected word '%.40s' (expected key=value)", t->val);
  if (!strcmp(k, "busid")) {
    if (topo_busid_norm(t->val, v->busid, sizeof(v->busid)))
      BF_FAIL(b, "attribute 'busid': not a PCI bus id (got '%.40s')", t->val);
    return BRAID_SUCCESS; /* unique on its host: checked once the line ends */
  }
  if (!strcmp(k, "numa"))
    return inum(b, t, -1, 4095, &v->numa);
  if (!strcmp(k, "host"))
    return inum(b, t, 0, 1 << 20, &v->host);
  if (!strcmp(k, "dev"))
    return inum(b, t, -1, 65535, &v->dev);
  if (!strcmp(k, "sm"))
    return inum(b, t, 0, 10000, &v->sm);
  if (!strcmp(k, "rank"))
    return inum(b, t, -1, 1 << 30, &v->rank);
  if (!strcmp(k, "gdr"))
    return inum(b, t, -1, 1, &v->gdr);
  if (!strcmp(k, "netdev"))
    return str(b, t, v->netdev, sizeof(v->netdev));
  if (!strcmp(k, "port"))
    return inum(b, t, -1, 1024, &v->port);
  if (!strcmp(k, "speed"))
    return num(b, t, 0, 1e5, &v->speed);
  if (!strcmp(k, "guid")) {
    char *e;
    unsigned long long u = strtoull(t->val, &e, 0);
    if (e == t->val || *e)
      BF_FAIL(b, "attribute 'guid': not a number (got '%.40s')", t->val);
    v->guid = u;
    return BRAID_SUCCESS;
  }
  if (!strcmp(k, "maxconn"))
    return inum(b, t, 0, 1 << 30, &v->maxconn);
  if (!strcmp(k, "arch"))
    return str(b, t, v->arch, sizeof(v->arch));
  if (!strcmp(k, "vendor"))
    return str(b, t, v->vendor, sizeof(v->vendor));
  if (!strcmp(k, "family"))
    return inum(b, t, -1, 1 << 20, &v->family);
  if (!strcmp(k, "model"))
    return inum(b, t, -1, 1 << 20, &v->model);
  if (!strcmp(k, "cores"))
    return inum(b, t, 0, 1 << 20, &v->cores);
  if (!strcmp(k, "pus"))
    return inum(b, t, 0, 1 << 20, &v->pus);
  if (!strcmp(k, "mem_gb")) {
    CHECKR(num(b, t, 0, 1e7, &d));
    v->mem_bytes = (uint64_t)(d * 1073741824.0);
    return BRAID_SUCCESS;
  }
  if (!strcmp(k, "l3_mb")) {
    CHECKR(num(b, t, 0, 1e9, &d));
    v->l3_bytes = (uint64_t)(d * 1048576.0);
    return BRAID_SUCCESS;
  }
  if (!strcmp(k, "affinity"))
    return str(b, t, v->affinity, sizeof(v->affinity));
  if (!strcmp(k, "class"))
    return inum(b, t, -1, 0xffffff, &v->pci_class);
  if (!strcmp(k, "vendor_id"))
    return inum(b, t, -1, 0xffff, &v->vendor_id);
  if (!strcmp(k, "device_id"))
    return inum(b, t, -1, 0xffff, &v->device_id);
  if (!strcmp(k, "gts"))
    return num(b, t, 0, 1000, &v->link_gts);
  if (!strcmp(k, "gen")) {
    int gen;
    static const double gts[] = {0, 2.5, 5, 8, 16, 32, 64};
    CHECKR(inum(b, t, 1, 6, &gen));
    v->link_gts = gts[gen];
    return BRAID_SUCCESS;
  }
  if (!strcmp(k, "width"))
    return inum(b, t, 0, 64, &v->link_width);
  BF_FAIL(b, "unknown attribute '%.40s' for a %s", k, topo_vtype_name(v->type));
}

static braid_result link_line(bf *b, topo_graph *g, tok *t, int n) {
  if (n < 4)
    BF_FAIL(b, "link needs two vertices and a type: link A B nvl|pci|sys|net");
  for (int i = 1; i < 4; i++)
    if (t[i].key)
      BF_FAIL(b, "link: expected a name, got '%s='", t[i].key);
  int a = topo_find(g, t[1].val), c = topo_find(g, t[2].val);
  if (a < 0)
    BF_FAIL(b, "link: unknown vertex '%.40s'", t[1].val);
  if (c < 0)
    BF_FAIL(b, "link: unknown vertex '%.40s'", t[2].val);
  if (a == c)
    BF_FAIL(b, "link: %s links to itself", t[1].val);
  int type = topo_ltype_parse(t[3].val);
  if (type < 0)
    BF_FAIL(b, "link: unknown link type '%.40s' (nvl, pci, sys, net)",
            t[3].val);
  double bw = -1, lat = -1, gts = 0;
  int count = 1, width = 0;
  for (int i = 4; i < n; i++) {
    const char *k = t[i].key;
    if (!k)
      BF_FAIL(b, "unexpected word '%.40s' (expected key=value)", t[i].val);
    braid_result r;
    if (!strcmp(k, "bw"))
      r = num(b, &t[i], 1e-6, 1e6, &bw);
    else if (!strcmp(k, "lat"))
      r = num(b, &t[i], 0, 1e6, &lat);
    else if (!strcmp(k, "count"))
      r = inum(b, &t[i], 1, TOPO_MAX_NVL_COUNT, &count);
    else if (!strcmp(k, "width"))
      r = inum(b, &t[i], 1, 64, &width);
    else if (!strcmp(k, "gen")) {
      int gen;
      static const double tab[] = {0, 2.5, 5, 8, 16, 32, 64};
      r = inum(b, &t[i], 1, 6, &gen);
      if (r == BRAID_SUCCESS)
        gts = tab[gen];
    } else if (!strcmp(k, "gts"))
      r = num(b, &t[i], 0.1, 1000, &gts);
    else
      BF_FAIL(b, "unknown attribute '%.40s' for a link", k);
    if (r != BRAID_SUCCESS)
      return r;
  }
  if (bw < 0) {
    if (type == TOPO_LINK_NVL) {
      int sm = g->v[a].type == TOPO_GPU ? g->v[a].sm : g->v[c].sm;
      bw = topo_nvlink_lane_bw(sm) * count;
    } else if (type == TOPO_LINK_PCI && gts > 0)
      bw = topo_pcie_bw(gts, width ? width : 16);
    else if (type == TOPO_LINK_NET) {
      double s = g->v[a].type == TOPO_NIC ? g->v[a].speed : g->v[c].speed;
      if (s > 0)
        bw = s;
    }
  }
  if (topo_link_between(g, a, c) >= 0 &&
      g->links[topo_link_between(g, a, c)].type == (topo_ltype)type)
    BF_FAIL(b, "link %s %s %s: given twice (use count=)", t[1].val, t[2].val,
            t[3].val);
  if (topo_add_link(g, a, c, (topo_ltype)type, bw, lat, count) < 0)
    BF_FAIL(b, "link: too many links or out of memory");
  return BRAID_SUCCESS;
}

braid_result topo_parse_braid(const char *buf, size_t len, const char *fname,
                              topo_graph **out) {
  *out = NULL;
  bf b = {fname ? fname : "<buffer>", 0};
  topo_graph *g = topo_graph_new("");
  char *line = malloc(4097);
  tok t[MAX_TOK];
  int header = 0;
  braid_result rc = BRAID_SUCCESS;
  if (!g || !line) {
    free(line);
    topo_graph_free(g);
    return TOPO_NOMEM(b.fname);
  }
  size_t pos = 0;
  while (pos < len && rc == BRAID_SUCCESS) {
    b.line++;
    size_t e = pos;
    while (e < len && buf[e] != '\n')
      e++;
    size_t n = e - pos;
    if (n > 4096) {
      rc = bf_err(&b, "line longer than 4096 characters");
      break;
    }
    memcpy(line, buf + pos, n);
    line[n] = 0;
    pos = e + 1;
    if (memchr(line, 0, n)) {
      rc = bf_err(&b, "NUL byte in a text file");
      break;
    }
    int nt;
    if ((rc = tokenize(&b, line, t, &nt)) != BRAID_SUCCESS)
      break;
    if (nt == 0)
      continue;
    if (!header) {
      if (t[0].key || strcmp(t[0].val, "braid-topology") || nt != 2 ||
          strcmp(t[1].val, "1")) {
        rc = bf_err(&b, "expected the header 'braid-topology 1'");
        break;
      }
      header = 1;
      continue;
    }
    if (t[0].key) {
      rc = bf_err(&b, "a line starts with a keyword, not '%s='", t[0].key);
    } else if (!strcmp(t[0].val, "name")) {
      if (nt != 2 || t[1].key)
        rc = bf_err(&b, "name takes one value (quote spaces)");
      else
        snprintf(g->name, sizeof(g->name), "%s", t[1].val);
    } else if (!strcmp(t[0].val, "hosts")) {
      if (nt != 2 || t[1].key) {
        rc = bf_err(&b, "hosts takes one number (hosts N)");
      } else {
        t[1].key = "hosts";
        rc = inum(&b, &t[1], 1, 1 << 20, &g->nhosts);
      }
    } else if (!strcmp(t[0].val, "link")) {
      rc = link_line(&b, g, t, nt);
    } else {
      int type = topo_vtype_parse(t[0].val);
      if (type < 0) {
        rc = bf_err(&b, "unknown keyword '%.40s'", t[0].val);
        break;
      }
      if (nt < 2 || t[1].key) {
        rc = bf_err(&b, "%s needs a name", t[0].val);
        break;
      }
      if (topo_find(g, t[1].val) >= 0) {
        rc = bf_err(&b, "vertex '%.40s' defined twice", t[1].val);
        break;
      }
      int id = topo_add_vertex(g, (topo_vtype)type, t[1].val);
      if (id < 0) {
        rc = bf_err(&b, "bad vertex name '%.40s' or too many", t[1].val);
        break;
      }
      for (int i = 2; i < nt && rc == BRAID_SUCCESS; i++)
        rc = vertex_attr(&b, &g->v[id], &t[i]);
      const topo_vertex *v = &g->v[id];
      for (int i = 0; i < id && rc == BRAID_SUCCESS && v->busid[0]; i++)
        if (v->type != TOPO_NIC && g->v[i].type != TOPO_NIC &&
            g->v[i].host == v->host && !strcmp(g->v[i].busid, v->busid))
          rc = bf_err(&b, "attribute 'busid': %s already used by %s%s",
                      v->busid, g->v[i].name,
                      g->nhosts > 1 || v->host ? " on the same host" : "");
    }
  }
  free(line);
  if (rc == BRAID_SUCCESS && !header)
    rc = ERR(BRAID_ERR_INVALID_ARG,
             "%s:1: empty file (expected 'braid-topology 1')", b.fname);
  if (rc != BRAID_SUCCESS) {
    topo_graph_free(g);
    return rc;
  }
  for (int i = 0; i < g->nv; i++)
    if (g->v[i].host >= g->nhosts)
      g->nhosts = g->v[i].host + 1;
  *out = g;
  return BRAID_SUCCESS;
}

/* A value as the tokenizer reads it back: as is, or quoted with '"' and
 * '\\' escaped where it holds a space, a quote, '#', '=' or '\\'. */
static void put_value(FILE *f, const char *s) {
  int plain = s[0] != '\0';
  for (const char *p = s; *p; p++)
    if (isspace((unsigned char)*p) || *p == '"' || *p == '#' || *p == '=' ||
        *p == '\\')
      plain = 0;
  if (plain) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fputc('\\', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

static void wq(FILE *f, const char *key, const char *s) {
  if (!s[0])
    return;
  fprintf(f, " %s=", key);
  put_value(f, s);
}

braid_result topo_write_braid(const topo_graph *g, FILE *f) {
  static const char *const kw[TOPO_NVTYPES] = {"gpu", "cpu", "pci",
                                               "nvs", "nic", "net"};
  fputs("braid-topology 1\n", f);
  if (g->name[0]) {
    fputs("name ", f);
    put_value(f, g->name);
    fputc('\n', f);
  }
  if (g->nhosts > 1)
    fprintf(f, "hosts %d\n", g->nhosts);
  for (int i = 0; i < g->nv; i++) {
    const topo_vertex *v = &g->v[i];
    fprintf(f, "%s ", kw[v->type]);
    put_value(f, v->name);
    if (v->host)
      fprintf(f, " host=%d", v->host);
    wq(f, "busid", v->busid);
    if (v->numa >= 0)
      fprintf(f, " numa=%d", v->numa);
    if (v->dev >= 0)
      fprintf(f, " dev=%d", v->dev);
    if (v->sm > 0)
      fprintf(f, " sm=%d", v->sm);
    if (v->rank >= 0)
      fprintf(f, " rank=%d", v->rank);
    if (v->gdr >= 0)
      fprintf(f, " gdr=%d", v->gdr);
    wq(f, "netdev", v->netdev);
    if (v->port >= 0)
      fprintf(f, " port=%d", v->port);
    if (v->speed > 0)
      fprintf(f, " speed=%.6g", v->speed);
    if (v->guid)
      fprintf(f, " guid=0x%llx", (unsigned long long)v->guid);
    if (v->maxconn > 0)
      fprintf(f, " maxconn=%d", v->maxconn);
    wq(f, "arch", v->arch);
    wq(f, "vendor", v->vendor);
    if (v->family >= 0)
      fprintf(f, " family=%d", v->family);
    if (v->model >= 0)
      fprintf(f, " model=%d", v->model);
    if (v->cores > 0)
      fprintf(f, " cores=%d", v->cores);
    if (v->pus > 0)
      fprintf(f, " pus=%d", v->pus);
    if (v->mem_bytes)
      fprintf(f, " mem_gb=%.6g", (double)v->mem_bytes / 1073741824.0);
    if (v->l3_bytes)
      fprintf(f, " l3_mb=%.6g", (double)v->l3_bytes / 1048576.0);
    wq(f, "affinity", v->affinity);
    if (v->pci_class >= 0)
      fprintf(f, " class=0x%06x", v->pci_class);
    if (v->vendor_id >= 0)
      fprintf(f, " vendor_id=0x%04x", v->vendor_id);
    if (v->device_id >= 0)
      fprintf(f, " device_id=0x%04x", v->device_id);
    if (v->link_gts > 0)
      fprintf(f, " gts=%.6g", v->link_gts);
    if (v->link_width > 0)
      fprintf(f, " width=%d", v->link_width);
    fputc('\n', f);
  }
  for (int i = 0; i < g->nl; i++) {
    const topo_link *l = &g->links[i];
    static const char *const lk[TOPO_NLTYPES] = {"nvl", "pci", "sys", "net"};
    fputs("link ", f);
    put_value(f, g->v[l->a].name);
    fputc(' ', f);
    put_value(f, g->v[l->b].name);
    fprintf(f, " %s bw=%.6g lat=%.6g", lk[l->type], l->bw, l->lat_us);
    if (l->count > 1)
      fprintf(f, " count=%d", l->count);
    fputc('\n', f);
  }
  return ferror(f) ? BRAID_ERR_SYSTEM : BRAID_SUCCESS;
}
