/*
 * Schedule files: a schedule as JSON (format in docs/SCHEDULES.md, limits in
 * sched_json.h). The writer prints one step per line; the reader is strict:
 * every error names file:line:column and the field (as a path such as
 * channels[0].ranks[3][7].peer), and every schedule it returns has passed the
 * verifier in place and out of place with 2 slots per connection.
 */
#include "sched_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "msccl.h"
#include "sched_json.h"
#include "topology/topo.h"
#include "verify.h"

#define SCHED_FILE_VERSION 1
#define VERIFY_SLOTS 2

/* ---- writer ---- */

static void put_chunks(FILE *f, const char *key, sched_chunks c) {
  fprintf(f, ", \"%s\": [\"%s\", %u", key, sched_buf_name((sched_buf)c.buf),
          c.index);
  if (c.count != 1)
    fprintf(f, ", %u", c.count);
  fputc(']', f);
}

/* Which fields each primitive has. */
enum { F_PEER = 1, F_SRC = 2, F_DST = 4, F_PEER_OUT = 8 };
static const unsigned prim_fields[SCHED_NUM_PRIMS] = {
    [SCHED_P_SEND] = F_PEER | F_SRC,
    [SCHED_P_RECV] = F_PEER | F_DST,
    [SCHED_P_RECV_REDUCE] = F_PEER | F_SRC | F_DST,
    [SCHED_P_RECV_REDUCE_SEND] = F_PEER | F_SRC | F_DST | F_PEER_OUT,
    [SCHED_P_RECV_COPY_SEND] = F_PEER | F_DST | F_PEER_OUT,
    [SCHED_P_COPY] = F_SRC | F_DST,
    [SCHED_P_REDUCE] = F_SRC | F_DST,
    [SCHED_P_RECV_REDUCE_REV] = F_PEER | F_SRC | F_DST,
};

static void put_prim(FILE *f, sched_prim p) {
  char name[32];
  const char *n = sched_prim_name(p);
  size_t i = 0;
  for (; n[i] && i + 1 < sizeof(name); i++)
    name[i] = (char)(n[i] >= 'A' && n[i] <= 'Z' ? n[i] - 'A' + 'a' : n[i]);
  name[i] = '\0';
  fprintf(f, "{\"op\": \"%s\"", name);
}

static void put_step(FILE *f, const sched_step *st) {
  unsigned fl = st->prim < SCHED_NUM_PRIMS ? prim_fields[st->prim] : 0;
  put_prim(f, (sched_prim)st->prim);
  if (fl & F_PEER)
    fprintf(f, ", \"peer\": %d", (int)st->peer);
  if (fl & F_SRC)
    put_chunks(f, "src", st->src);
  if (fl & F_DST)
    put_chunks(f, "dst", st->dst);
  if (fl & F_PEER_OUT)
    fprintf(f, ", \"peer_out\": %d", (int)st->peer_out);
  fputc('}', f);
}

static void put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void put_sched(const sched *s, FILE *f, const char *ind) {
  fprintf(f, "%s{\n", ind);
  fprintf(f, "%s  \"braid_schedule\": %d,\n", ind, SCHED_FILE_VERSION);
  fprintf(f, "%s  \"collective\": \"%s\",\n", ind, sched_coll_name(s->coll));
  fprintf(f, "%s  \"nranks\": %d,\n", ind, s->nranks);
  fprintf(f, "%s  \"root\": %d,\n", ind, s->root);
  fprintf(f, "%s  \"chunks_per_block\": %d,\n", ind, s->chunks_per_block);
  fprintf(f, "%s  \"scratch_blocks\": %d,\n", ind, s->scratch_blocks);
  fprintf(f, "%s  \"algo\": ", ind);
  put_string(f, s->algo);
  fprintf(f, ",\n%s  \"channels\": [\n", ind);
  for (int c = 0; c < s->nchannels; c++) {
    fprintf(f, "%s    {\n%s      \"weight\": %.17g,\n", ind, ind,
            s->weights[c]);
    fprintf(f, "%s      \"route\": \"%s\",\n", ind,
            sched_route_name((sched_route)s->route[c]));
    fprintf(f, "%s      \"ranks\": [", ind);
    for (int r = 0; r < s->nranks; r++) {
      const sched_channel *ch = sched_chan_c(s, r, c);
      fprintf(f, "%s\n%s        [", r ? "," : "", ind);
      for (int k = 0; k < ch->nsteps; k++) {
        fprintf(f, "%s\n%s          ", k ? "," : "", ind);
        put_step(f, &ch->steps[k]);
      }
      fprintf(f, "%s]", ch->nsteps ? "\n        " : "");
      if (ch->nsteps)
        fputs(ind, f);
    }
    fprintf(f, "\n%s      ]\n%s    }%s\n", ind, ind,
            c + 1 < s->nchannels ? "," : "");
  }
  fprintf(f, "%s  ]\n%s}", ind, ind);
}

int sched_file_write(const sched *s, FILE *f) {
  if (!s || !f)
    return -1;
  put_sched(s, f, "");
  fputc('\n', f);
  return ferror(f) || fflush(f) ? -1 : 0;
}

braid_result sched_file_save(const sched *s, const char *path) {
  if (!s || !path || !path[0])
    return ERR(BRAID_ERR_INVALID_ARG, "sched_file_save: no schedule or path");
  long long steps = 0;
  for (int c = 0; c < s->nchannels; c++)
    for (int r = 0; r < s->nranks; r++)
      steps += sched_chan_c(s, r, c)->nsteps;
  const char *what = NULL;
  long long have = 0, limit = 0;
  if (s->nranks > SCHED_FILE_MAX_RANKS)
    what = "ranks", have = s->nranks, limit = SCHED_FILE_MAX_RANKS;
  else if (s->nchannels > SCHED_FILE_MAX_CHANNELS)
    what = "channels", have = s->nchannels, limit = SCHED_FILE_MAX_CHANNELS;
  else if (steps > SCHED_FILE_MAX_STEPS)
    what = "steps", have = steps, limit = SCHED_FILE_MAX_STEPS;
  if (what != NULL)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s: not written: the schedule has %lld %s, more than a "
               "schedule file may hold (%lld)",
               path, have, what, limit);
  /* whole or not at all: a failure leaves what was at path */
  topo_wfile w;
  CHECKR(topo_wfile_open(&w, path));
  int bad = sched_file_write(s, w.f);
  long size = bad ? 0 : ftell(w.f);
  if (!bad && size > (long)SCHED_FILE_MAX_BYTES) {
    topo_wfile_close(&w, 1);
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s: not written: the schedule takes %ld bytes, more than a "
               "schedule file may (%u)",
               path, size, SCHED_FILE_MAX_BYTES);
  }
  return topo_wfile_close(&w, 0);
}

int sched_file_write_all(sched *const *s, int n, FILE *f) {
  if (!f || n < 0 || (n > 0 && !s))
    return -1;
  fputs("[\n", f);
  for (int i = 0; i < n; i++) {
    if (!s[i])
      return -1;
    put_sched(s[i], f, "  ");
    fputs(i + 1 < n ? ",\n" : "\n", f);
  }
  fputs("]\n", f);
  return ferror(f) || fflush(f) ? -1 : 0;
}

/* ---- reader ---- */

typedef struct rd {
  const sjson_doc *d;
  const char *buf;
  size_t len;
  const char *fname;
  long nsteps; /* of the schedule being read */
} rd;

/* Records "file:line:column: path: message" for the calling thread (ERR, at
 * the caller's line): a file braid refuses (rerr, BRAID_ERR_INVALID_ARG), or
 * another result (rerr_r). */
__attribute__((format(printf, 7, 8))) static braid_result
rerr_at(const char *file, int line, const rd *c, braid_result r, size_t pos,
        const char *path, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int l, col;
  sjson_linecol(c->buf, c->len, pos, &l, &col);
  return err_at(file, line, r, "%s:%d:%d: %s%s%s", c->fname, l, col, path,
                path[0] ? ": " : "", msg);
}
#define rerr(c, pos, path, ...)                                                \
  rerr_at(__FILE__, __LINE__, (c), BRAID_ERR_INVALID_ARG, (pos), (path),       \
          __VA_ARGS__)
#define rerr_r(c, r, pos, path, ...)                                           \
  rerr_at(__FILE__, __LINE__, (c), (r), (pos), (path), __VA_ARGS__)
#define rerr_nomem(c, pos, path)                                               \
  rerr_r((c), BRAID_ERR_NOMEM, (pos), (path), "out of memory")

/* Field paths ("channels[0].ranks[3][7].peer"); truncation is harmless. */
__attribute__((format(printf, 3, 4))) static void pfmt(char *b, size_t n,
                                                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, n, fmt, ap);
  va_end(ap);
}

static const sjson_val *V(const rd *c, uint32_t id) {
  return sjson_get(c->d, id);
}

static braid_result want_type(rd *c, const sjson_val *x, sjson_type t,
                              const char *path) {
  if (x->type == t)
    return BRAID_SUCCESS;
  return rerr(c, x->pos, path, "expected %s, found %s", sjson_type_name(t),
              sjson_type_name((sjson_type)x->type));
}

/* An integer in [lo, hi]. */
static braid_result get_int(rd *c, const sjson_val *x, const char *path,
                            double lo, double hi, long long *out) {
  CHECKR(want_type(c, x, SJSON_NUM, path));
  if (!x->isint)
    return rerr(c, x->pos, path, "expected an integer, found %.17g", x->num);
  if (x->num < lo || x->num > hi)
    return rerr(c, x->pos, path, "%.0f is out of range (%.0f..%.0f)", x->num,
                lo, hi);
  *out = (long long)x->num;
  return BRAID_SUCCESS;
}

/* Finds the members of object x named in keys[0..n) (ids into vals; 0 when
 * absent); any other key is an error. */
static braid_result members(rd *c, const sjson_val *x, const char *path,
                            const char *const *keys, int n, uint32_t *vals) {
  CHECKR(want_type(c, x, SJSON_OBJ, path));
  memset(vals, 0, (size_t)n * sizeof(*vals));
  for (uint32_t m = x->a; m; m = V(c, m)->next) {
    const char *k = sjson_key(c->d, V(c, m));
    int i = 0;
    while (i < n && strcmp(keys[i], k) != 0)
      i++;
    if (i == n)
      return rerr(c, V(c, m)->kpos, path, "unknown key \"%s\"", k);
    vals[i] = m;
  }
  return BRAID_SUCCESS;
}

static braid_result need(rd *c, const sjson_val *obj, uint32_t id,
                         const char *path, const char *key) {
  if (id)
    return BRAID_SUCCESS;
  return rerr(c, obj->pos, path, "missing key \"%s\"", key);
}

static braid_result get_chunks(rd *c, const sjson_val *x, const char *path,
                               sched_chunks *out) {
  CHECKR(want_type(c, x, SJSON_ARR, path));
  if (x->n < 2 || x->n > 3)
    return rerr(c, x->pos, path,
                "a chunk range is [buffer, index] or [buffer, index, count], "
                "found %u elements",
                x->n);
  const sjson_val *b = V(c, x->a), *i = V(c, b->next);
  const sjson_val *n = i->next ? V(c, i->next) : NULL;
  CHECKR(want_type(c, b, SJSON_STR, path));
  const char *bn = sjson_str(c->d, b);
  int buf = -1;
  for (int k = SCHED_BUF_IN; k <= SCHED_BUF_SCRATCH; k++)
    if (!strcmp(bn, sched_buf_name((sched_buf)k)))
      buf = k;
  if (buf < 0)
    return rerr(c, b->pos, path, "unknown buffer \"%s\" (in, out or scratch)",
                bn);
  long long idx = 0, cnt = 1;
  CHECKR(get_int(c, i, path, 0, UINT32_MAX - 1.0, &idx));
  if (n)
    CHECKR(get_int(c, n, path, 1, UINT32_MAX, &cnt));
  if (idx + cnt > (long long)UINT32_MAX)
    return rerr(c, x->pos, path, "chunk range past 2^32");
  *out = sched_ck((sched_buf)buf, (uint32_t)idx, (uint32_t)cnt);
  return BRAID_SUCCESS;
}

static braid_result get_step(rd *c, const sjson_val *x, const char *path,
                             int nranks, sched_channel *ch) {
  static const char *const keys[] = {"op", "peer", "src", "dst", "peer_out"};
  uint32_t m[5];
  char sub[192];
  CHECKR(members(c, x, path, keys, 5, m));
  CHECKR(need(c, x, m[0], path, "op"));
  const sjson_val *op = V(c, m[0]);
  pfmt(sub, sizeof(sub), "%s.op", path);
  CHECKR(want_type(c, op, SJSON_STR, sub));
  int prim = -1;
  for (int p = 0; p < SCHED_NUM_PRIMS; p++)
    if (!strcasecmp(sjson_str(c->d, op), sched_prim_name((sched_prim)p)))
      prim = p;
  if (prim < 0)
    return rerr(c, op->pos, sub,
                "unknown op \"%s\" (send, recv, recv_reduce, "
                "recv_reduce_send, recv_copy_send, copy, reduce, "
                "recv_reduce_rev)",
                sjson_str(c->d, op));
  const char *opn = sjson_str(c->d, op);
  unsigned fl = prim_fields[prim];
  int peer[2] = {-1, -1};
  sched_chunks ck[2] = {sched_ck(SCHED_BUF_NONE, 0, 0),
                        sched_ck(SCHED_BUF_NONE, 0, 0)};
  static const unsigned bit[5] = {0, F_PEER, F_SRC, F_DST, F_PEER_OUT};
  for (int k = 1; k < 5; k++) {
    if (!(fl & bit[k])) {
      if (m[k])
        return rerr(c, V(c, m[k])->kpos, path,
                    "key \"%s\" does not apply to op \"%s\"", keys[k], opn);
      continue;
    }
    CHECKR(need(c, x, m[k], path, keys[k]));
    const sjson_val *v = V(c, m[k]);
    pfmt(sub, sizeof(sub), "%s.%s", path, keys[k]);
    if (k == 1 || k == 4) {
      CHECKR(want_type(c, v, SJSON_NUM, sub));
      if (v->isint && (v->num < 0 || v->num >= nranks))
        return rerr(c, v->pos, sub, "peer %.0f is out of range (nranks %d)",
                    v->num, nranks);
      long long pv;
      CHECKR(get_int(c, v, sub, 0, nranks - 1, &pv));
      peer[k == 4] = (int)pv;
    } else
      CHECKR(get_chunks(c, v, sub, &ck[k == 3]));
  }
  if (++c->nsteps > SCHED_FILE_MAX_STEPS)
    return rerr(c, x->pos, path, "too many steps (limit %d per schedule)",
                SCHED_FILE_MAX_STEPS);
  if (sched_add(ch, (sched_prim)prim, peer[0], peer[1], ck[0], ck[1]))
    return rerr_nomem(c, x->pos, path);
  return BRAID_SUCCESS;
}

static braid_result get_channel(rd *c, const sjson_val *x, const char *path,
                                sched *s, int ci) {
  static const char *const keys[] = {"weight", "route", "ranks"};
  uint32_t m[3];
  char sub[160], sp[192];
  CHECKR(members(c, x, path, keys, 3, m));
  CHECKR(need(c, x, m[0], path, "weight"));
  CHECKR(need(c, x, m[2], path, "ranks"));
  const sjson_val *w = V(c, m[0]);
  pfmt(sub, sizeof(sub), "%s.weight", path);
  CHECKR(want_type(c, w, SJSON_NUM, sub));
  if (!(w->num >= 0 && w->num <= 1))
    return rerr(c, w->pos, sub, "weight %.17g is not in [0, 1]", w->num);
  s->weights[ci] = w->num;
  s->route[ci] = SCHED_ROUTE_ANY;
  if (m[1]) {
    const sjson_val *r = V(c, m[1]);
    pfmt(sub, sizeof(sub), "%s.route", path);
    CHECKR(want_type(c, r, SJSON_STR, sub));
    int route = -1;
    for (int k = 0; k < SCHED_NUM_ROUTES; k++)
      if (!strcmp(sjson_str(c->d, r), sched_route_name((sched_route)k)))
        route = k;
    if (route < 0)
      return rerr(c, r->pos, sub, "unknown route \"%s\" (any, nvl or host)",
                  sjson_str(c->d, r));
    s->route[ci] = (uint8_t)route;
  }
  const sjson_val *rk = V(c, m[2]);
  pfmt(sub, sizeof(sub), "%s.ranks", path);
  CHECKR(want_type(c, rk, SJSON_ARR, sub));
  if ((int)rk->n != s->nranks)
    return rerr(c, rk->pos, sub, "%u ranks, but nranks is %d", rk->n,
                s->nranks);
  int r = 0;
  for (uint32_t e = rk->a; e; e = V(c, e)->next, r++) {
    const sjson_val *steps = V(c, e);
    pfmt(sp, sizeof(sp), "%s[%d]", sub, r);
    CHECKR(want_type(c, steps, SJSON_ARR, sp));
    sched_channel *ch = sched_chan(s, r, ci);
    int k = 0;
    for (uint32_t t = steps->a; t; t = V(c, t)->next, k++) {
      char stp[192];
      pfmt(stp, sizeof(stp), "%s[%d]", sp, k);
      CHECKR(get_step(c, V(c, t), stp, s->nranks, ch));
    }
  }
  return BRAID_SUCCESS;
}

static braid_result get_sched(rd *c, const sjson_val *x, const char *pre,
                              sched **out) {
  static const char *const keys[] = {
      "braid_schedule",   "collective",     "nranks", "root",
      "chunks_per_block", "scratch_blocks", "algo",   "channels"};
  enum { K_VER, K_COLL, K_N, K_ROOT, K_K, K_SCR, K_ALGO, K_CH, K_NUM };
  uint32_t m[K_NUM];
  char sub[96];
  const char *path = pre[0] ? pre : "";
  *out = NULL;
  CHECKR(members(c, x, path, keys, K_NUM, m));
  for (int k = 0; k < K_NUM; k++)
    if (k != K_ROOT && k != K_SCR && k != K_ALGO)
      CHECKR(need(c, x, m[k], path, keys[k]));
  long long ver, n, root = 0, K, scr = 0;
#define SUB(key)                                                               \
  (pfmt(sub, sizeof(sub), "%s%s%s", pre, pre[0] ? "." : "", key), sub)
  CHECKR(get_int(c, V(c, m[K_VER]), SUB("braid_schedule"), 0, 1e9, &ver));
  if (ver != SCHED_FILE_VERSION)
    return rerr(c, V(c, m[K_VER])->pos, sub,
                "unsupported version %lld (this braid reads %d)", ver,
                SCHED_FILE_VERSION);
  const sjson_val *co = V(c, m[K_COLL]);
  CHECKR(want_type(c, co, SJSON_STR, SUB("collective")));
  int coll = -1;
  for (int k = 0; k < SCHED_NUM_COLLS; k++)
    if (!strcmp(sjson_str(c->d, co), sched_coll_name((sched_coll)k)))
      coll = k;
  if (coll < 0)
    return rerr(c, co->pos, sub, "unknown collective \"%s\"",
                sjson_str(c->d, co));
  const sjson_val *nv = V(c, m[K_N]);
  CHECKR(get_int(c, nv, SUB("nranks"), 1, SCHED_FILE_MAX_RANKS, &n));
  if (m[K_ROOT])
    CHECKR(get_int(c, V(c, m[K_ROOT]), SUB("root"), 0, n - 1, &root));
  CHECKR(get_int(c, V(c, m[K_K]), SUB("chunks_per_block"), 1,
                 SCHED_FILE_MAX_CHUNKS, &K));
  if (m[K_SCR])
    CHECKR(get_int(c, V(c, m[K_SCR]), SUB("scratch_blocks"), 0,
                   SCHED_FILE_MAX_CHUNKS, &scr));
  const char *algo = "file";
  if (m[K_ALGO]) {
    const sjson_val *a = V(c, m[K_ALGO]);
    CHECKR(want_type(c, a, SJSON_STR, SUB("algo")));
    if (a->n >= sizeof(((sched *)0)->algo))
      return rerr(c, a->pos, sub, "longer than %zu characters",
                  sizeof(((sched *)0)->algo) - 1);
    algo = sjson_str(c->d, a);
  }
  const sjson_val *chs = V(c, m[K_CH]);
  CHECKR(want_type(c, chs, SJSON_ARR, SUB("channels")));
  if (chs->n == 0)
    return rerr(c, chs->pos, sub, "no channels");
  if (chs->n > SCHED_FILE_MAX_CHANNELS)
    return rerr(c, chs->pos, sub, "too many channels: %u (limit %d)", chs->n,
                SCHED_FILE_MAX_CHANNELS);
#undef SUB
  sched *s;
  if (sched_new((sched_coll)coll, (int)n, (int)root, (int)K, (int)chs->n, algo,
                &s) != BRAID_SUCCESS)
    return rerr_nomem(c, x->pos, path);
  s->scratch_blocks = (int)scr;
  c->nsteps = 0;
  int ci = 0;
  double sum = 0;
  for (uint32_t e = chs->a; e; e = V(c, e)->next, ci++) {
    char cp[64];
    pfmt(cp, sizeof(cp), "%s[%d]", sub, ci);
    braid_result r = get_channel(c, V(c, e), cp, s, ci);
    if (r != BRAID_SUCCESS) {
      sched_free(s);
      return r;
    }
    sum += s->weights[ci];
  }
  if (fabs(sum - 1.0) > 1e-9) {
    sched_free(s);
    return rerr(c, chs->pos, sub,
                "channel weights sum to %.17g, not 1 (within 1e-9)", sum);
  }
  *out = s;
  return BRAID_SUCCESS;
}

static braid_result verify_one(rd *c, const sjson_val *x, int idx,
                               const sched *s, verify_ws *ws) {
  for (int ip = 0; ip < 2; ip++) {
    braid_result r = verify_sched_ws(s, ip, VERIFY_SLOTS, ws);
    if (r != BRAID_SUCCESS) {
      char verr[512];
      snprintf(verr, sizeof verr, "%s", err_msg());
      return rerr_r(c, r, x->pos, "",
                    "schedule %d (%s, algo \"%s\", %d ranks) fails the "
                    "verifier %s: %s",
                    idx, sched_coll_name(s->coll), s->algo, s->nranks,
                    ip ? "in place" : "out of place", verr);
    }
  }
  return BRAID_SUCCESS;
}

braid_result sched_file_parse(const char *buf, size_t len, const char *fname,
                              sched ***out, int *n) {
  if (!out || !n || (!buf && len))
    return ERR(BRAID_ERR_INVALID_ARG, "sched_file_parse: bad arguments");
  *out = NULL;
  *n = 0;
  if (!fname)
    fname = "<schedule>";
  if (buf && msccl_is_xml(buf, len)) { /* an MSCCL XML schedule */
    sched **one = calloc(1, sizeof(*one));
    if (!one)
      return ERR(BRAID_ERR_NOMEM, "%s: out of memory", fname);
    braid_result r = msccl_import(buf, len, fname, one, NULL);
    if (r != BRAID_SUCCESS) {
      free(one);
      return r;
    }
    *out = one;
    *n = 1;
    return BRAID_SUCCESS;
  }
  sjson_doc d;
  size_t epos = 0;
  rd c = {&d, buf ? buf : "", len, fname, 0};
  braid_result rc = sjson_parse(&d, c.buf, len, &epos);
  if (rc != BRAID_SUCCESS) {
    char jerr[256];
    snprintf(jerr, sizeof jerr, "%s", err_msg());
    sjson_free(&d);
    return rerr_r(&c, rc, epos, "", "%s", jerr);
  }
  const sjson_val *root = V(&c, 1);
  int many = root->type == SJSON_ARR;
  if (!many && root->type != SJSON_OBJ) {
    rc = rerr(&c, root->pos, "",
              "expected a schedule object or an array of them");
    sjson_free(&d);
    return rc;
  }
  int cnt = many ? (int)root->n : 1;
  if (cnt == 0 || cnt > SCHED_FILE_MAX_SCHEDULES) {
    rc = rerr(&c, root->pos, "", "%d schedules (1..%d per file)", cnt,
              SCHED_FILE_MAX_SCHEDULES);
    sjson_free(&d);
    return rc;
  }
  sched **arr = calloc((size_t)cnt, sizeof(*arr));
  if (!arr) {
    sjson_free(&d);
    return rerr_nomem(&c, 0, "");
  }
  int i = 0;
  verify_ws *ws = verify_ws_new(); /* NULL: each check allocates its own */
  for (uint32_t e = many ? root->a : 1; e && i < cnt && rc == BRAID_SUCCESS;
       e = many ? V(&c, e)->next : 0, i++) {
    char pre[32] = "";
    if (many)
      pfmt(pre, sizeof(pre), "[%d]", i);
    rc = get_sched(&c, V(&c, e), pre, &arr[i]);
    if (rc == BRAID_SUCCESS)
      rc = verify_one(&c, V(&c, e), i, arr[i], ws);
  }
  verify_ws_free(ws);
  sjson_free(&d);
  if (rc != BRAID_SUCCESS) {
    for (int k = 0; k < cnt; k++)
      sched_free(arr[k]);
    free(arr);
    return rc;
  }
  *out = arr;
  *n = cnt;
  return BRAID_SUCCESS;
}

braid_result sched_file_load(const char *path, sched ***out, int *n) {
  if (!path || !out || !n)
    return ERR(BRAID_ERR_INVALID_ARG, "sched_file_load: bad arguments");
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return ERR(BRAID_ERR_SYSTEM, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  braid_result rc = BRAID_SUCCESS;
  while (buf) {
    if (len == cap) {
      if (cap > SCHED_FILE_MAX_BYTES) {
        rc = ERR(BRAID_ERR_INVALID_ARG, "%s: larger than %u bytes", path,
                 SCHED_FILE_MAX_BYTES);
        break;
      }
      size_t ncap =
          cap * 2 > SCHED_FILE_MAX_BYTES ? SCHED_FILE_MAX_BYTES + 1 : cap * 2;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  if (!buf)
    rc = ERR(BRAID_ERR_NOMEM, "%s: out of memory", path);
  else if (rc == BRAID_SUCCESS && ferror(f))
    rc = ERR(BRAID_ERR_SYSTEM, "%s: read error: %s", path, strerror(errno));
  fclose(f);
  if (rc == BRAID_SUCCESS)
    rc = sched_file_parse(buf, len, path, out, n);
  free(buf);
  return rc;
}
