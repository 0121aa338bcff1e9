/*
 * Algorithm selection: cost model and BRAID_ALGO filters (see select.h).
 *
 * Cost model. The parameters per transport class are in cost_model.c; each
 * generator's file holds its own formula (its descriptor's cost function).
 * Pipelined chains and trees cut a block into S slices so that their depth
 * costs (depth + S - 1) slice times instead of depth block times.
 */
#include "select.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "collectives/plan.h" /* plan_channels: the runtime's channels */

static int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n)
    l++;
  return l;
}

/* Slices a pipelined algorithm cuts a block into (64 KiB each, 1..64). */
static double slices(double m) {
  double s = ceil(m / 65536.0);
  if (s < 1)
    s = 1;
  if (s > 64)
    s = 64;
  return s;
}

double select_cost(const gen_desc *g, sched_coll coll, int nranks, size_t bytes,
                   int transport_class) {
  const select_model *md = select_model_get(transport_class);
  if (!md || !gen_supports(g, coll, nranks))
    return -1;
  double b = md->beta_ns * 1e-3, gm = md->gamma_ns * 1e-3; /* us per byte */
  gen_cost_in in = {.coll = coll,
                    .nranks = nranks,
                    .n = nranks,
                    .m = (double)bytes,
                    .a = md->alpha_us,
                    .b = b,
                    .gm = gm,
                    .o = md->overhead_us,
                    .red = sched_reduces(coll) ? gm : 0,
                    .L = ceil_log2(nranks),
                    .S = slices((double)bytes)};
  if (nranks == 1)
    return in.m * b; /* one local copy, whatever the algorithm */
  if (g->cost != NULL)
    return g->cost(&in);
  /* A generator without a model: a pessimistic guess, so that a modelled
   * one is preferred. */
  return 10 * (in.n - 1) * (in.a + in.m * (b + in.red));
}

/* ---- filters ---- */

static int ngens(void) { return gen_count(); }

static void trim(const char **s, const char **e) {
  while (*s < *e && isspace((unsigned char)**s))
    (*s)++;
  while (*e > *s && isspace((unsigned char)(*e)[-1]))
    (*e)--;
}

/* Parses "[^]name[,name...]" in [s, e) into a mask. */
static braid_result parse_list(const char *s, const char *e, uint32_t *mask,
                               uint32_t *asked) {
  uint32_t all = (ngens() >= 32) ? 0xffffffffu : ((1u << ngens()) - 1u);
  uint32_t m = 0;
  int neg = 0;
  trim(&s, &e);
  if (s < e && *s == '^') {
    neg = 1;
    s++;
  }
  const char *p = s;
  for (;;) {
    const char *q = p;
    while (q < e && *q != ',')
      q++;
    const char *ts = p, *te = q;
    trim(&ts, &te);
    if (ts == te) {
      return ERR(BRAID_ERR_INVALID_ARG,
                 "BRAID_ALGO: empty algorithm name in \"%.*s\" (expected a "
                 "comma-separated list such as ring,tree)",
                 (int)(e - s), s);
    }
    int found = -1;
    for (int i = 0; gen_table[i] != NULL; i++)
      if (strlen(gen_table[i]->name) == (size_t)(te - ts) &&
          strncasecmp(gen_table[i]->name, ts, (size_t)(te - ts)) == 0)
        found = i;
    if (found < 0) {
      char known[160] = "";
      size_t o = 0;
      for (int i = 0; gen_table[i] != NULL && o < sizeof(known); i++)
        o += (size_t)snprintf(known + o, sizeof(known) - o, "%s%s",
                              i ? ", " : "", gen_table[i]->name);
      return ERR(BRAID_ERR_INVALID_ARG,
                 "BRAID_ALGO: unknown algorithm \"%.*s\" (known: %s)",
                 (int)(te - ts), ts, known);
    }
    m |= 1u << found;
    if (q >= e)
      break;
    p = q + 1;
  }
  *mask = neg ? (all & ~m) : m;
  *asked = neg ? 0 : m;
  return BRAID_SUCCESS;
}

static const struct {
  const char *name;
  uint32_t colls;
} coll_names[] = {
    {"allreduce", 1u << SCHED_ALLREDUCE},
    {"broadcast", 1u << SCHED_BROADCAST},
    {"reduce", 1u << SCHED_REDUCE},
    {"allgather", 1u << SCHED_ALLGATHER},
    {"reducescatter", 1u << SCHED_REDUCE_SCATTER},
    {"reduce_scatter", 1u << SCHED_REDUCE_SCATTER},
    {"gather", 1u << SCHED_GATHER},
    {"scatter", 1u << SCHED_SCATTER},
    {"alltoall", 1u << SCHED_ALLTOALL},
    {"send", 1u << SCHED_SEND},
    {"recv", 1u << SCHED_RECV},
    {"sendrecv", (1u << SCHED_SEND) | (1u << SCHED_RECV)},
};

braid_result select_filter_parse(const char *text, select_filter *f) {
  uint32_t all = (ngens() >= 32) ? 0xffffffffu : ((1u << ngens()) - 1u);
  uint32_t per[SCHED_NUM_COLLS], set = 0, def = all;
  uint32_t per_asked[SCHED_NUM_COLLS], def_asked = 0;
  int have_def = 0;
  if (!f)
    return ERR(BRAID_ERR_INVALID_ARG, "select_filter_parse: no filter");
  for (int c = 0; c < SCHED_NUM_COLLS; c++) {
    per[c] = all;
    per_asked[c] = 0;
  }
  const char *p = text ? text : "";
  const char *end = p + strlen(p);
  /* Text that is only separators (";;") names nothing: a slip, not the
   * default. */
  if (p[strspn(p, "; \t\n")] == '\0' && strchr(p, ';') != NULL)
    return ERR(BRAID_ERR_INVALID_ARG,
               "BRAID_ALGO=\"%s\" names no algorithm (expected entries such "
               "as ring,tree or allreduce:ring;broadcast:tree)",
               p);
  while (p <= end) {
    const char *q = p;
    while (q < end && *q != ';')
      q++;
    const char *s = p, *e = q;
    trim(&s, &e);
    if (s < e) {
      const char *colon = memchr(s, ':', (size_t)(e - s));
      uint32_t mask, asked;
      if (!colon) {
        if (have_def) {
          return ERR(BRAID_ERR_INVALID_ARG,
                     "BRAID_ALGO: second entry without a collective: \"%.*s\"",
                     (int)(e - s), s);
        }
        CHECKR(parse_list(s, e, &mask, &asked));
        def = mask;
        def_asked = asked;
        have_def = 1;
      } else {
        const char *cs = s, *ce = colon;
        trim(&cs, &ce);
        uint32_t colls = 0;
        for (size_t i = 0; i < sizeof(coll_names) / sizeof(coll_names[0]); i++)
          if (strlen(coll_names[i].name) == (size_t)(ce - cs) &&
              strncasecmp(coll_names[i].name, cs, (size_t)(ce - cs)) == 0)
            colls = coll_names[i].colls;
        if (!colls) {
          return ERR(
              BRAID_ERR_INVALID_ARG,
              "BRAID_ALGO: unknown collective \"%.*s\" (known: allreduce, "
              "broadcast, reduce, allgather, reducescatter, gather, "
              "scatter, alltoall, send, recv, sendrecv)",
              (int)(ce - cs), cs);
        }
        if (colls & set) {
          return ERR(BRAID_ERR_INVALID_ARG,
                     "BRAID_ALGO: collective \"%.*s\" named twice",
                     (int)(ce - cs), cs);
        }
        CHECKR(parse_list(colon + 1, e, &mask, &asked));
        set |= colls;
        for (int c = 0; c < SCHED_NUM_COLLS; c++)
          if (colls & (1u << c)) {
            per[c] = mask;
            per_asked[c] = asked;
          }
      }
    }
    if (q >= end)
      break;
    p = q + 1;
  }
  for (int c = 0; c < SCHED_NUM_COLLS; c++) {
    int own = (set & (1u << c)) != 0;
    f->allow[c] = own ? per[c] : def;
    f->asked[c] = own ? per_asked[c] : def_asked;
  }
  f->named = set;
  return BRAID_SUCCESS;
}

void select_filter_all(select_filter *f) {
  for (int c = 0; c < SCHED_NUM_COLLS; c++)
    f->allow[c] = f->asked[c] = 0xffffffffu;
  f->named = 0;
}

int select_filter_allows(const select_filter *f, sched_coll coll,
                         const gen_desc *g) {
  if (!g || (int)coll < 0 || coll >= SCHED_NUM_COLLS)
    return 0;
  int i = gen_index(g);
  if (i < 0 || i >= 32)
    return 0;
  if (g->flags & GEN_OPT_IN)
    return f ? (f->allow[coll] & f->asked[coll]) >> i & 1u : 0;
  return f ? (f->allow[coll] >> i) & 1u : 1;
}

braid_result select_algo_f(sched_coll coll, int nranks, size_t bytes,
                           int transport_class, const select_filter *fin,
                           const gen_desc **out) {
  select_filter f;
  *out = NULL;
  if ((int)coll < 0 || coll >= SCHED_NUM_COLLS)
    return ERR(BRAID_ERR_INVALID_ARG, "unknown collective %d", (int)coll);
  if (nranks < 1)
    return ERR(BRAID_ERR_INVALID_ARG, "bad rank count %d", nranks);
  if (!select_model_get(transport_class))
    return ERR(BRAID_ERR_INVALID_ARG, "unknown transport class %d",
               transport_class);
  if (fin) {
    f = *fin;
  } else {
    select_filter_all(&f);
    for (int c = 0; c < SCHED_NUM_COLLS; c++)
      f.asked[c] = 0; /* no filter: the opt-in generators stay out */
  }
  /* A default entry that rules out every algorithm of this collective does
   * not apply to it (see select.h). */
  if (!(f.named & (1u << coll))) {
    int any = 0;
    GEN_FOREACH (g)
      any |= gen_supports(g, coll, nranks) && select_filter_allows(&f, coll, g);
    if (!any)
      f.allow[coll] = 0xffffffffu;
  }
  const gen_desc *best = NULL;
  double best_cost = 0;
  GEN_FOREACH (g) {
    if (!gen_supports(g, coll, nranks) || !select_filter_allows(&f, coll, g))
      continue;
    double c = select_cost(g, coll, nranks, bytes, transport_class);
    if (c < 0)
      continue;
    if (!best || c < best_cost) {
      best = g;
      best_cost = c;
    }
  }
  if (!best) {
    char sup[160] = "";
    size_t o = 0;
    GEN_FOREACH (g) {
      if (o >= sizeof(sup))
        break;
      if (gen_supports(g, coll, nranks))
        o += (size_t)snprintf(sup + o, sizeof(sup) - o, "%s%s", o ? ", " : "",
                              g->name);
    }
    return ERR(BRAID_ERR_INVALID_ARG,
               "the algorithm filter leaves no algorithm for %s on %d ranks "
               "(algorithms that support it: %s)",
               sched_coll_name(coll), nranks, sup);
  }
  *out = best;
  return BRAID_SUCCESS;
}

braid_result select_algo(sched_coll coll, int nranks, size_t bytes,
                         int transport_class, const char *algo_filter,
                         const gen_desc **out) {
  select_filter f;
  *out = NULL;
  CHECKR(select_filter_parse(algo_filter, &f));
  braid_result r = select_algo_f(coll, nranks, bytes, transport_class, &f, out);
  if (r != BRAID_SUCCESS && algo_filter &&
      strstr(err_msg(), "leaves no algorithm"))
    return ERR_WRAP(r, "BRAID_ALGO=\"%s\"", algo_filter);
  return r;
}

/* ---- selection on a view, by simulation ---- */

braid_result select_sim_table(sched_coll coll, int root, const sched_view *v,
                              size_t bytes, const sim_params *p,
                              const select_filter *f, int max_channels,
                              select_cand *out, int max, int *count) {
  *count = 0;
  if ((int)coll < 0 || coll >= SCHED_NUM_COLLS || !v || !p || !out || max < 0)
    return ERR(BRAID_ERR_INVALID_ARG, "select_sim_table: bad arguments");
  /* no filter, or a default entry that leaves nothing for coll: every
   * generator but the opt-in ones */
  select_filter all;
  select_filter_all(&all);
  for (int c = 0; c < SCHED_NUM_COLLS; c++)
    all.asked[c] = 0;
  const select_filter *use = f ? f : &all;
  if (f && !(f->named & (1u << coll))) {
    int any = 0;
    GEN_FOREACH (g)
      any |= gen_supports_view(g, coll, v->nranks, v) &&
             select_filter_allows(f, coll, g);
    if (!any)
      use = &all;
  }
  /* topology-blind generators get the channels the runtime gives a call
   * of this size (plan_channels), so that each is timed as it would run */
  int blind = plan_channels(bytes, max_channels > 0 ? max_channels
                                                    : PLAN_DEFAULT_CHANNELS);
  int n = 0;
  GEN_FOREACH (g) {
    if (n >= max)
      break;
    if (!gen_supports_view(g, coll, v->nranks, v) ||
        !select_filter_allows(use, coll, g))
      continue;
    select_cand *c = &out[n++];
    memset(c, 0, sizeof *c);
    c->gen = g;
    gen_params gp = {coll, v->nranks, root < 0 ? 0 : root, blind,
                     v,    bytes,     max_channels};
    sched *s;
    braid_result r = gen_build(g, &gp, &s);
    if (r != BRAID_SUCCESS) {
      snprintf(c->note, sizeof c->note, "%s", err_why(r));
      continue;
    }
    c->nchannels = s->nchannels;
    if (sim_run(s, v, bytes, p, &c->res) == BRAID_SUCCESS)
      c->ok = 1;
    else /* the candidate's note, not the selection's failure */
      snprintf(c->note, sizeof c->note, "%s", err_msg());
    sched_free(s);
  }
  *count = n;
  return BRAID_SUCCESS;
}

/* The call's size is known to within its power-of-two bucket: the runtime
 * selects once per bucket [bytes, 2 bytes) at its lower end. Each candidate
 * is simulated at both ends and scored by its worst ratio to the fastest
 * there; the lowest score wins, then the lower time at `bytes`, then the
 * earlier entry. A generator that is fastest at both ends always wins. */
braid_result select_algo_view(sched_coll coll, const sched_view *v,
                              size_t bytes, const sim_params *p,
                              const select_filter *f, int max_channels,
                              const gen_desc **out) {
  select_cand lo[32], hi[32];
  int n = 0, nh = 0;
  *out = NULL;
  CHECKR(select_sim_table(coll, 0, v, bytes, p, f, max_channels, lo, 32, &n));
  if (n > 0 && bytes > 0 && bytes <= SIZE_MAX / 2)
    CHECKR(select_sim_table(coll, 0, v, 2 * bytes, p, f, max_channels, hi, 32,
                            &nh));
  double best_lo = INFINITY, best_hi = INFINITY;
  for (int i = 0; i < n; i++)
    if (lo[i].ok && lo[i].res.time_us < best_lo)
      best_lo = lo[i].res.time_us;
  for (int i = 0; i < nh; i++)
    if (hi[i].ok && hi[i].res.time_us < best_hi)
      best_hi = hi[i].res.time_us;
  const select_cand *best = NULL;
  double best_score = INFINITY;
  for (int i = 0; i < n; i++) {
    if (!lo[i].ok)
      continue;
    double score = best_lo > 0 ? lo[i].res.time_us / best_lo : 1;
    if (nh == n && hi[i].gen == lo[i].gen) {
      double r = !hi[i].ok     ? INFINITY
                 : best_hi > 0 ? hi[i].res.time_us / best_hi
                               : 1;
      if (r > score)
        score = r;
    }
    if (!best || score < best_score ||
        (score == best_score && lo[i].res.time_us < best->res.time_us)) {
      best = &lo[i];
      best_score = score;
    }
  }
  /* a default entry whose generators all declined the view (hybrid
   * without an NVLink ring through every rank) leaves the usual choice, as
   * one that names none for this collective does */
  if (!best && f != NULL && !(f->named & (1u << coll)))
    return select_algo_view(coll, v, bytes, p, NULL, max_channels, out);
  if (!best) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "no generator could be simulated for %s on %d ranks",
             sched_coll_name(coll), v->nranks);
    for (int i = 0; i < n; i++) { /* the first reason, to help */
      size_t o = strlen(msg);
      if (lo[i].note[0] && o + 8 < sizeof msg) {
        size_t nl = strlen(lo[i].gen->name); /* its name once */
        int named = strncmp(lo[i].note, lo[i].gen->name, nl) == 0 &&
                    lo[i].note[nl] == ':';
        snprintf(msg + o, sizeof msg - o, " (%s%s%s)",
                 named ? "" : lo[i].gen->name, named ? "" : ": ", lo[i].note);
        break;
      }
    }
    return ERR(BRAID_ERR_UNSUPPORTED, "%s", msg);
  }
  *out = best->gen;
  return BRAID_SUCCESS;
}
