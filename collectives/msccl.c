/*
 * The MSCCL importer (see msccl.h): reads <algo>/<gpu>/<tb>/<step> into the
 * file's model, checks every attribute against the collective's buffers,
 * hands the model to the merge (msccl_order.c) and the result to the
 * verifier, whose message is given the MSCCL step it is about.
 */
#include "msccl_int.h"
#include "msccl_xml.h"
#include "verify.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rdr {
  ms_algo *a;
  const mxml_doc *d;
} rdr;

static const char *const type_names[MS_NUM_TYPES] = {
    "s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"};

const char *ms_type_name(ms_type t) {
  return (unsigned)t < MS_NUM_TYPES ? type_names[t] : "?";
}
int ms_recvs(ms_type t) {
  return t == MS_RECV || t == MS_RCS || t == MS_RRS || t == MS_RRC ||
         t == MS_RRCS;
}
int ms_sends(ms_type t) {
  return t == MS_SEND || t == MS_RCS || t == MS_RRS || t == MS_RRCS;
}
static int uses_src(ms_type t) {
  return t == MS_SEND || t == MS_RRS || t == MS_RRC || t == MS_RRCS ||
         t == MS_CPY || t == MS_RE;
}
static int uses_dst(ms_type t) {
  return t == MS_RECV || t == MS_RCS || t == MS_RRC || t == MS_RRCS ||
         t == MS_CPY || t == MS_RE;
}

int msccl_is_xml(const char *buf, size_t len) {
  size_t i = 0;
  if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3))
    i = 3;
  while (i < len &&
         (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
    i++;
  return i < len && buf[i] == '<';
}

/* Records "fname:line: message" for the calling thread (ERR, at the
 * caller's line): a file braid refuses (xerr, BRAID_ERR_INVALID_ARG), or out
 * of memory. */
__attribute__((format(printf, 6, 7))) static braid_result
xerr_at(const char *file, int line, const rdr *r, braid_result res, size_t pos,
        const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return err_at(file, line, res, "%s:%d: %s", r->a->fname,
                mxml_line(r->a->buf, r->a->len, pos), msg);
}
#define xerr(r, pos, ...)                                                      \
  xerr_at(__FILE__, __LINE__, (r), BRAID_ERR_INVALID_ARG, (pos), __VA_ARGS__)
#define xerr_nomem(r, pos)                                                     \
  xerr_at(__FILE__, __LINE__, (r), BRAID_ERR_NOMEM, (pos), "out of memory")

/* An integer attribute in [lo, hi]; absent: def when !required. */
static braid_result get_int(const rdr *r, int32_t el, const char *name, int lo,
                            int hi, int required, int def, int *out) {
  uint32_t pos = r->d->e[el].pos;
  const char *v = mxml_get(r->d, el, name, &pos);
  if (!v) {
    if (required)
      return xerr(r, pos, "<%s> needs attribute '%s'", mxml_name(r->d, el),
                  name);
    *out = def;
    return BRAID_SUCCESS;
  }
  const char *p = v;
  int neg = *p == '-';
  p += neg;
  long long x = 0;
  int nd = 0;
  while (*p >= '0' && *p <= '9' && nd < 12) {
    x = x * 10 + (*p++ - '0');
    nd++;
  }
  if (neg)
    x = -x;
  if (!nd || *p || x < lo || x > hi)
    return xerr(r, pos,
                "<%s> attribute %s=\"%s\": expected an integer in "
                "%d..%d",
                mxml_name(r->d, el), name, v, lo, hi);
  *out = (int)x;
  return BRAID_SUCCESS;
}

static const char *const coll_names[] = {"allreduce", "allgather",
                                         "reduce_scatter", "alltoall"};
static const sched_coll coll_ids[] = {SCHED_ALLREDUCE, SCHED_ALLGATHER,
                                      SCHED_REDUCE_SCATTER, SCHED_ALLTOALL};

static braid_result read_algo(const rdr *r, msccl_info *info) {
  ms_algo *a = r->a;
  const mxml_doc *d = r->d;
  if (strcmp(mxml_name(d, 0), "algo") != 0)
    return xerr(r, d->e[0].pos, "the root element is <%s>, not <algo>",
                mxml_name(d, 0));
  uint32_t pos = d->e[0].pos;
  const char *c = mxml_get(d, 0, "coll", &pos);
  if (!c)
    return xerr(r, pos, "<algo> needs attribute 'coll'");
  int ci = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(c, coll_names[i]) || (i == 2 && !strcmp(c, "reducescatter")))
      ci = i;
  if (ci < 0)
    return xerr(r, pos,
                "coll=\"%s\": braid imports allreduce, allgather, "
                "reduce_scatter and alltoall",
                c);
  a->coll = coll_ids[ci];
  int ncpl = 1, nch = 1;
  CHECKR(get_int(r, 0, "ngpus", 1, MSCCL_MAX_GPUS, 1, 0, &a->ngpus));
  CHECKR(get_int(r, 0, "nchunksperloop", 1, MSCCL_MAX_CHUNKS, 1, 0, &ncpl));
  CHECKR(get_int(r, 0, "nchannels", 1, 64, 0, 1, &nch));
  CHECKR(get_int(r, 0, "inplace", 0, 1, 0, -1, &info->inplace));
  CHECKR(get_int(r, 0, "outofplace", 0, 1, 0, -1, &info->outofplace));
  const char *p = mxml_get(d, 0, "proto", &pos);
  if (p && strcmp(p, "LL") && strcmp(p, "LL128") && strcmp(p, "Simple"))
    return xerr(r, pos, "proto=\"%s\": expected LL, LL128 or Simple", p);
  snprintf(info->proto, sizeof(info->proto), "%s", p ? p : "Simple");
  const char *nm = mxml_get(d, 0, "name", NULL);
  snprintf(info->name, sizeof(info->name), "%s", nm && *nm ? nm : "msccl");
  for (char *q = info->name; *q; q++) /* a name for logs: printable ASCII */
    if (*q < 0x20 || *q > 0x7e || *q == '"' || *q == '\\')
      *q = '_';
  int blocks = sched_in_blocks(a->coll, a->ngpus);
  if (sched_out_blocks(a->coll, a->ngpus) > blocks)
    blocks = sched_out_blocks(a->coll, a->ngpus);
  if (ncpl % blocks)
    return xerr(r, d->e[0].pos,
                "nchunksperloop=%d is not a multiple of %d, the blocks of "
                "%s's largest buffer on %d gpus: chunks would not be of one "
                "size",
                ncpl, blocks, coll_names[ci], a->ngpus);
  a->K = ncpl / blocks;
  info->ngpus = a->ngpus;
  info->nchunksperloop = ncpl;
  info->nchannels = nch;
  return BRAID_SUCCESS;
}

static braid_result read_step(const rdr *r, int32_t el, const ms_gpu *g,
                              const ms_tb *tb, int idx, ms_step *st) {
  const mxml_doc *d = r->d;
  st->pos = d->e[el].pos;
  if (strcmp(mxml_name(d, el), "step") != 0)
    return xerr(r, st->pos, "<%s> inside <tb>: expected <step>",
                mxml_name(d, el));
  int s = 0;
  CHECKR(get_int(r, el, "s", 0, INT_MAX, 1, 0, &s));
  if (s != idx)
    return xerr(r, st->pos,
                "step s=%d is the threadblock's step %d: steps "
                "are numbered 0, 1, ... in order",
                s, idx);
  uint32_t pos = st->pos;
  const char *t = mxml_get(d, el, "type", &pos);
  if (!t)
    return xerr(r, pos, "<step> needs attribute 'type'");
  st->type = MS_NUM_TYPES;
  for (int i = 0; i < MS_NUM_TYPES; i++)
    if (!strcmp(t, type_names[i]))
      st->type = (uint8_t)i;
  if (st->type == MS_NUM_TYPES)
    return xerr(r, pos,
                "step type \"%s\": expected s, r, rcs, rrs, rrc, "
                "rrcs, cpy, re or nop",
                t);
  ms_type ty = (ms_type)st->type;
  if (ms_sends(ty) && tb->send < 0)
    return xerr(r, st->pos, "step type %s sends, but its <tb> has send=-1", t);
  if (ms_recvs(ty) && tb->recv < 0)
    return xerr(r, st->pos, "step type %s receives, but its <tb> has recv=-1",
                t);
  CHECKR(get_int(r, el, "cnt", 1, MSCCL_MAX_CHUNKS, ty != MS_NOP, 1, &st->cnt));
  CHECKR(get_int(r, el, "depid", -1, MSCCL_MAX_TBS - 1, 0, -1, &st->depid));
  CHECKR(get_int(r, el, "deps", -1, INT_MAX, 0, -1, &st->deps));
  if ((st->depid < 0) != (st->deps < 0))
    return xerr(r, st->pos, "depid=%d with deps=%d: both -1 or both set",
                st->depid, st->deps);
  for (int k = 0; k < 2; k++) {
    int used = k ? uses_dst(ty) : uses_src(ty);
    uint8_t *bufp = k ? &st->dbuf : &st->sbuf;
    int *offp = k ? &st->doff : &st->soff;
    const char *an = k ? "dstbuf" : "srcbuf";
    *bufp = SCHED_BUF_NONE;
    *offp = 0;
    if (!used)
      continue;
    const char *b = mxml_get(d, el, an, &pos);
    if (!b)
      return xerr(r, st->pos, "step type %s needs attribute '%s'", t, an);
    int lim;
    if (!strcmp(b, "i")) {
      *bufp = SCHED_BUF_IN;
      lim = g->ichunks;
    } else if (!strcmp(b, "o")) {
      *bufp = SCHED_BUF_OUT;
      lim = g->ochunks;
    } else if (!strcmp(b, "s")) {
      *bufp = SCHED_BUF_SCRATCH;
      lim = g->schunks;
    } else {
      return xerr(r, pos, "%s=\"%s\": expected i, o or s", an, b);
    }
    CHECKR(get_int(r, el, k ? "dstoff" : "srcoff", 0, MSCCL_MAX_CHUNKS, 1, 0,
                   offp));
    if (*offp + st->cnt > lim)
      return xerr(r, st->pos,
                  "%s chunks %d..%d are outside the gpu's %s buffer of %d "
                  "chunks",
                  k ? "dst" : "src", *offp, *offp + st->cnt - 1, b, lim);
  }
  return BRAID_SUCCESS;
}

static int count_children(const mxml_doc *d, int32_t el) {
  int n = 0;
  for (int32_t c = d->e[el].child; c >= 0; c = d->e[c].next)
    n++;
  return n;
}

static braid_result read_tb(const rdr *r, int32_t el, int gid, ms_gpu *g,
                            int *nsteps) {
  const mxml_doc *d = r->d;
  int id = 0;
  CHECKR(get_int(r, el, "id", 0, g->ntb - 1, 1, 0, &id));
  ms_tb *tb = &g->tb[id];
  if (tb->steps || tb->pos)
    return xerr(r, d->e[el].pos, "gpu %d has two threadblocks with id %d", gid,
                id);
  tb->pos = d->e[el].pos;
  int n = r->a->ngpus;
  CHECKR(get_int(r, el, "send", -1, n - 1, 1, 0, &tb->send));
  CHECKR(get_int(r, el, "recv", -1, n - 1, 1, 0, &tb->recv));
  CHECKR(get_int(r, el, "chan", 0, 63, 0, 0, &tb->chan));
  if (tb->send == gid || tb->recv == gid)
    return xerr(r, tb->pos, "gpu %d threadblock %d talks to itself", gid, id);
  for (int o = 0; o < g->ntb; o++) {
    const ms_tb *u = &g->tb[o];
    if (o == id || !u->pos || u->chan != tb->chan)
      continue;
    if ((tb->send >= 0 && u->send == tb->send) ||
        (tb->recv >= 0 && u->recv == tb->recv))
      return xerr(
          r, tb->pos,
          "gpu %d threadblocks %d and %d both %s gpu %d on channel "
          "%d: one threadblock per connection",
          gid, o, id,
          tb->send >= 0 && u->send == tb->send ? "send to" : "receive from",
          tb->send >= 0 && u->send == tb->send ? tb->send : tb->recv, tb->chan);
  }
  tb->nsteps = count_children(d, el);
  *nsteps += tb->nsteps;
  if (*nsteps > MSCCL_MAX_STEPS)
    return xerr(r, tb->pos, "more than %d steps", MSCCL_MAX_STEPS);
  tb->steps = calloc((size_t)(tb->nsteps ? tb->nsteps : 1), sizeof(ms_step));
  if (!tb->steps)
    return xerr_nomem(r, tb->pos);
  int i = 0;
  for (int32_t c = d->e[el].child; c >= 0; c = d->e[c].next, i++)
    CHECKR(read_step(r, c, g, tb, i, &tb->steps[i]));
  return BRAID_SUCCESS;
}

static braid_result read_gpu(const rdr *r, int32_t el, int *nsteps) {
  ms_algo *a = r->a;
  const mxml_doc *d = r->d;
  if (strcmp(mxml_name(d, el), "gpu") != 0)
    return xerr(r, d->e[el].pos, "<%s> inside <algo>: expected <gpu>",
                mxml_name(d, el));
  int id = 0;
  CHECKR(get_int(r, el, "id", 0, a->ngpus - 1, 1, 0, &id));
  ms_gpu *g = &a->gpu[id];
  if (g->pos)
    return xerr(r, d->e[el].pos, "two <gpu> with id %d", id);
  g->pos = d->e[el].pos;
  int K = a->K, n = a->ngpus;
  int ib = sched_in_blocks(a->coll, n), ob = sched_out_blocks(a->coll, n);
  CHECKR(get_int(r, el, "i_chunks", 0, ib * K, 1, 0, &g->ichunks));
  CHECKR(get_int(r, el, "o_chunks", 0, ob * K, 1, 0, &g->ochunks));
  CHECKR(get_int(r, el, "s_chunks", 0, MSCCL_MAX_CHUNKS, 0, 0, &g->schunks));
  int sb = (g->schunks + K - 1) / K;
  if (sb > a->scratch_blocks)
    a->scratch_blocks = sb;
  g->ntb = count_children(d, el);
  if (g->ntb > MSCCL_MAX_TBS)
    return xerr(r, g->pos, "gpu %d has %d threadblocks (at most %d)", id,
                g->ntb, MSCCL_MAX_TBS);
  g->tb = calloc((size_t)(g->ntb ? g->ntb : 1), sizeof(ms_tb));
  if (!g->tb)
    return xerr_nomem(r, g->pos);
  for (int32_t c = d->e[el].child; c >= 0; c = d->e[c].next) {
    if (strcmp(mxml_name(d, c), "tb") != 0)
      return xerr(r, d->e[c].pos, "<%s> inside <gpu>: expected <tb>",
                  mxml_name(d, c));
    CHECKR(read_tb(r, c, id, g, nsteps));
  }
  /* dependencies name existing threadblocks and steps */
  for (int t = 0; t < g->ntb; t++)
    for (int s = 0; s < g->tb[t].nsteps; s++) {
      const ms_step *st = &g->tb[t].steps[s];
      if (st->depid >= 0 &&
          (st->depid >= g->ntb || st->deps >= g->tb[st->depid].nsteps))
        return xerr(r, st->pos,
                    "gpu %d threadblock %d step %d depends on threadblock %d "
                    "step %d, which does not exist",
                    id, t, s, st->depid, st->deps);
    }
  return BRAID_SUCCESS;
}

static void free_model(ms_algo *a) {
  if (!a->gpu)
    return;
  for (int g = 0; g < a->ngpus; g++) {
    for (int t = 0; t < a->gpu[g].ntb; t++)
      free(a->gpu[g].tb[t].steps);
    free(a->gpu[g].tb);
  }
  free(a->gpu);
  a->gpu = NULL;
}

static braid_result read_model(const rdr *r, msccl_info *info) {
  ms_algo *a = r->a;
  CHECKR(read_algo(r, info));
  a->gpu = calloc((size_t)a->ngpus, sizeof(ms_gpu));
  if (!a->gpu)
    return xerr_nomem(r, 0);
  int nsteps = 0;
  for (int32_t c = r->d->e[0].child; c >= 0; c = r->d->e[c].next)
    CHECKR(read_gpu(r, c, &nsteps));
  for (int g = 0; g < a->ngpus; g++) {
    if (!a->gpu[g].pos)
      return xerr(r, r->d->e[0].pos, "ngpus=%d but there is no <gpu id=\"%d\">",
                  a->ngpus, g);
    info->nthreadblocks += a->gpu[g].ntb;
  }
  info->nsteps = nsteps;
  return BRAID_SUCCESS;
}

/* The verifier's message `msg` names "rank R channel C step S": add which
 * MSCCL step that braid step comes from. */
static void add_origin(const ms_algo *a, ms_origin *const *org, const int *norg,
                       char *msg, size_t size) {
  const char *p = strstr(msg, "rank ");
  int rk, ch, st;
  if (!p || sscanf(p, "rank %d channel %d step %d", &rk, &ch, &st) != 3 ||
      rk < 0 || rk >= a->ngpus || st < 0 || st >= norg[rk])
    return;
  const ms_origin *o = &org[rk][st];
  const ms_step *s = &a->gpu[rk].tb[o->tb].steps[o->step];
  size_t n = strlen(msg);
  snprintf(msg + n, size - n,
           " [MSCCL gpu %d threadblock %d step %d (type %s), line %d]", rk,
           o->tb, o->step, ms_type_name((ms_type)s->type),
           mxml_line(a->buf, a->len, s->pos));
}

static braid_result prove(const ms_algo *a, sched *s, ms_origin *const *org) {
  int *norg = calloc((size_t)a->ngpus, sizeof(int));
  if (!norg)
    return ERR(BRAID_ERR_NOMEM, "%s: out of memory", a->fname);
  for (int r = 0; r < a->ngpus; r++)
    norg[r] = sched_chan_c(s, r, 0)->nsteps;
  braid_result rc = BRAID_SUCCESS;
  char verr[1536];
  for (int ip = 0; ip < 2 && rc == BRAID_SUCCESS; ip++)
    if ((rc = verify_sched(s, ip, 2)) != BRAID_SUCCESS) {
      snprintf(verr, sizeof verr, "%s", err_msg());
      add_origin(a, org, norg, verr, sizeof(verr));
      rc = ERR(rc, "%s: %s on %d gpus fails the verifier %s: %s", a->fname,
               sched_coll_name(a->coll), a->ngpus,
               ip ? "in place" : "out of place", verr);
    }
  free(norg);
  return rc;
}

braid_result msccl_import(const char *buf, size_t len, const char *fname,
                          sched **out, msccl_info *info) {
  msccl_info dummy;
  if (!info)
    info = &dummy;
  memset(info, 0, sizeof(*info));
  if (!out)
    return ERR(BRAID_ERR_INVALID_ARG, "msccl_import: no result");
  *out = NULL;
  ms_algo a;
  memset(&a, 0, sizeof(a));
  a.buf = buf ? buf : "";
  a.len = buf ? len : 0;
  a.fname = fname ? fname : "<msccl>";
  mxml_doc d;
  size_t epos = 0;
  rdr r = {&a, &d};
  braid_result rc = mxml_parse(&d, a.buf, a.len, &epos);
  if (rc != BRAID_SUCCESS) {
    char xe[256];
    snprintf(xe, sizeof xe, "%s", err_msg());
    return xerr_at(__FILE__, __LINE__, &r, rc, epos, "%s", xe);
  }
  rc = read_model(&r, info);
  mxml_free(&d);
  ms_origin **org = NULL;
  sched *s = NULL;
  if (rc == BRAID_SUCCESS)
    rc = ms_build(&a, &s, &org);
  if (rc == BRAID_SUCCESS) {
    size_t nl = strnlen(info->name, sizeof(s->algo) - 1);
    memcpy(s->algo, info->name, nl);
    s->algo[nl] = '\0';
    rc = prove(&a, s, org);
  }
  if (org)
    for (int g = 0; g < a.ngpus; g++)
      free(org[g]);
  free(org);
  free_model(&a);
  if (rc != BRAID_SUCCESS) {
    sched_free(s);
    return rc;
  }
  *out = s;
  return BRAID_SUCCESS;
}
