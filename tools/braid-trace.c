/*
 * braid-trace: reads the flight-recorder dumps of a job's ranks
 * (docs/TRACE.md) and says, per communicator, which rank is the likely
 * culprit of a hang or a failure: the ranks behind the furthest call, who
 * waits for whom (cycles marked, and the rank at the end of each chain), and
 * the calls the ranks disagree on.
 *
 * Exit status: 0 analyzed (whatever was found), 2 bad usage or input.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_dump.h"
#include "trace_words.h"

/* One communicator's dumps, by rank, and what the analysis derives. */
typedef struct {
  const char *comm;
  const char *id; /* its "comm_id", or "" (older dumps) */
  int nranks;
  trace_dump **by_rank;     /* NULL: no dump from that rank */
  const trace_call **last;  /* the rank's furthest collective, or NULL */
  const trace_call **wait;  /* its oldest waiting call, or NULL */
  int *next;                /* the rank it waits for, or -1 */
  const trace_call *newest; /* a furthest collective of any rank */
  int *tmp;                 /* nranks ints of scratch */
} group;

/* Ranks that agree on one call. */
typedef struct {
  const trace_call *call;
  int *ranks, n;
} agree_class;

/* The first call (lowest seq) the ranks disagree on. */
typedef struct {
  long long seq;
  agree_class *cls; /* largest first */
  int ncls, with_fp;
} disagreement;

static void usage(FILE *f) {
  fprintf(f, "usage: braid-trace analyze DUMP...\n"
             "  DUMP  a flight-recorder dump (BRAID_FLIGHT_RECORDER), or a "
             "directory:\n"
             "        every *.json and *.jsonl file in it\n"
             "Says per communicator which ranks are behind, who waits for whom "
             "and which\n"
             "calls the ranks disagree on, under a verdict line "
             "(docs/TRACE.md).\n"
             "exit status: 0 analyzed, 2 bad usage or input\n");
}

/* snprintf for the report's sentences, which are cut at the buffer's end
 * when a dump's strings are long. */
__attribute__((format(printf, 3, 4))) static void say(char *buf, size_t len,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

static int is_state(const trace_call *c, const char *s) {
  return strcmp(c->state, s) == 0;
}

/* An alltoallv's count is what its rank sends, which differs by rank. */
static int same_call(const trace_call *a, const trace_call *b) {
  int own_counts = strcmp(a->kind, "alltoallv") == 0;
  return strcmp(a->kind, b->kind) == 0 &&
         (own_counts || a->count == b->count) &&
         strcmp(a->dtype, b->dtype) == 0 && strcmp(a->op, b->op) == 0 &&
         a->root == b->root && (!a->has_fp || !b->has_fp || a->fp == b->fp);
}

/* ---- deriving the group's facts --------------------------------------- */

static void derive(group *g) {
  for (int r = 0; r < g->nranks; r++) {
    const trace_dump *d = g->by_rank[r];
    g->next[r] = -1;
    for (int i = 0; d != NULL && i < d->ncall; i++) {
      const trace_call *c = &d->calls[i];
      if (!trace_is_p2p(c) && (g->last[r] == NULL || c->seq >= g->last[r]->seq))
        g->last[r] = c;
      if (is_state(c, "waiting") && g->wait[r] == NULL) {
        g->wait[r] = c;
        g->next[r] = (int)c->waits_on;
      }
    }
    if (g->last[r] != NULL &&
        (g->newest == NULL || g->last[r]->seq > g->newest->seq))
      g->newest = g->last[r];
  }
}

typedef struct {
  long long seq;
  int rank;
  const trace_call *call;
} seq_entry;

static int by_seq(const void *a, const void *b) {
  const seq_entry *x = a, *y = b;
  if (x->seq != y->seq)
    return x->seq < y->seq ? -1 : 1;
  return x->rank - y->rank;
}

static int by_size(const void *a, const void *b) {
  const agree_class *x = a, *y = b;
  return x->n != y->n ? y->n - x->n : x->ranks[0] - y->ranks[0];
}

/* Splits one seq's calls (e[0..n), one per rank) into classes; 1 if they
 * disagree, with the classes in *dis. */
static int classify(const seq_entry *e, int n, disagreement *dis) {
  agree_class *cls = calloc((size_t)n, sizeof *cls);
  int *ranks = malloc((size_t)n * sizeof *ranks), ncls = 0, used = 0;
  if (cls == NULL || ranks == NULL) {
    free(cls), free(ranks);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int k = 0;
    while (k < ncls && !same_call(cls[k].call, e[i].call))
      k++;
    if (k == ncls) {
      cls[ncls].call = e[i].call;
      cls[ncls++].ranks = ranks + used;
      /* a class's ranks are contiguous: count this seq's members first */
      for (int j = i; j < n; j++)
        if (same_call(e[i].call, e[j].call))
          used++;
    }
    cls[k].ranks[cls[k].n++] = e[i].rank;
  }
  if (ncls < 2) {
    free(cls), free(ranks);
    return 0;
  }
  qsort(cls, (size_t)ncls, sizeof *cls, by_size);
  char a[160], b[160];
  words_sig(cls[0].call, 0, a, sizeof a);
  words_sig(cls[1].call, 0, b, sizeof b);
  dis->seq = e[0].seq;
  dis->cls = cls;
  dis->ncls = ncls;
  dis->with_fp = strcmp(a, b) == 0; /* only the fingerprints differ */
  return 1;
}

/* Every disagreement, lowest seq first; out[0] is the first (when any). */
static int disagreements(const group *g, disagreement *out, int max) {
  int n = 0, found = 0;
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; g->by_rank[r] && i < g->by_rank[r]->ncall; i++)
      n++;
  seq_entry *e = malloc((size_t)(n ? n : 1) * sizeof *e);
  if (e == NULL)
    return 0;
  n = 0;
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; g->by_rank[r] && i < g->by_rank[r]->ncall; i++) {
      const trace_call *c = &g->by_rank[r]->calls[i];
      if (trace_is_p2p(c))
        continue;
      if (n > 0 && e[n - 1].rank == r && e[n - 1].seq == c->seq)
        n--; /* a repeated seq on one rank: its newest line counts */
      e[n++] = (seq_entry){c->seq, r, c};
    }
  qsort(e, (size_t)n, sizeof *e, by_seq);
  for (int i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && e[j].seq == e[i].seq; j++)
      ;
    disagreement d;
    if (j - i >= 2 && classify(e + i, j - i, &d)) {
      if (found < max)
        out[found] = d;
      else
        free(d.cls[0].ranks), free(d.cls);
      found++;
    }
  }
  free(e);
  return found;
}

static void free_disagreements(disagreement *d, int n) {
  for (int i = 0; i < n; i++) {
    int *lowest = d[i].cls[0].ranks; /* the shared rank array's start */
    for (int k = 1; k < d[i].ncls; k++)
      if (d[i].cls[k].ranks < lowest)
        lowest = d[i].cls[k].ranks;
    free(lowest);
    free(d[i].cls);
  }
}

/* Where rank r's chain of waits ends: the first rank not waiting, or -2
 * when it runs into a cycle. */
static int chain_end(const group *g, int r) {
  for (int steps = 0; steps <= g->nranks; steps++) {
    if (g->next[r] < 0)
      return r;
    r = g->next[r];
  }
  return -2;
}

/* The cycle rank r's chain runs into, from its lowest rank: its length, the
 * ranks in out (at most nranks). */
static int cycle_of(const group *g, int r, int *out) {
  for (int steps = 0; steps < g->nranks; steps++)
    r = g->next[r]; /* now inside the cycle */
  int lo = r, n = 0;
  for (int x = g->next[r]; x != r; x = g->next[x])
    if (x < lo)
      lo = x;
  int x = lo;
  do {
    out[n++] = x;
    x = g->next[x];
  } while (x != lo);
  return n;
}

static void cycle_words(const int *cyc, int n, char *buf, size_t len) {
  size_t at = 0;
  for (int i = 0; i <= n && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? " -> " : "",
                           cyc[i % n]);
}

/* ---- the verdict ------------------------------------------------------- */

static int behind(const group *g, int r) {
  return g->by_rank[r] != NULL && g->newest != NULL &&
         (g->last[r] == NULL || g->last[r]->seq < g->newest->seq);
}

static void sort_ranks(int *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: few ranks, mostly sorted */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      int t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
}

static void verdict_disagree(const disagreement *d, char *buf, size_t len) {
  char who[128], maj[128], sig[160], msig[160];
  int unique = d->cls[0].n > d->cls[1].n, ncul = 0, total = 0;
  for (int k = 0; k < d->ncls; k++)
    total += d->cls[k].n;
  int *cul = malloc((size_t)(total ? total : 1) * sizeof *cul);
  if (cul == NULL) {
    say(buf, len, "ranks of call #%lld (out of memory)", d->seq);
    return;
  }
  for (int k = unique ? 1 : 0; k < d->ncls; k++)
    for (int i = 0; i < d->cls[k].n; i++)
      cul[ncul++] = d->cls[k].ranks[i];
  sort_ranks(cul, ncul);
  words_ranks(cul, ncul, who, sizeof who);
  free(cul);
  words_sig(d->cls[0].call, d->with_fp, msig, sizeof msig);
  words_ranks(d->cls[0].ranks, d->cls[0].n, maj, sizeof maj);
  words_sig(d->cls[1].call, d->with_fp, sig, sizeof sig);
  if (!unique)
    say(buf, len, "%s (they disagree on call #%lld, with no majority)", who,
        d->seq);
  else if (d->ncls == 2)
    say(buf, len, "%s (%s on call #%lld: %s where %s call%s %s)", who,
        ncul == 1 ? "disagrees" : "disagree", d->seq, sig, maj,
        d->cls[0].n == 1 ? "s" : "", msig);
  else
    say(buf, len, "%s (disagree on call #%lld with %s, which call %s)", who,
        d->seq, maj, msig);
}

/* Ranks at the end of a chain of waits: those waited for, not waiting. */
static int chain_ends(const group *g, int *out) {
  int n = 0;
  memset(g->tmp, 0, (size_t)g->nranks * sizeof *g->tmp);
  for (int r = 0; r < g->nranks; r++) {
    int t = g->next[r] >= 0 ? chain_end(g, r) : -1;
    if (t >= 0 && !g->tmp[t]) {
      g->tmp[t] = 1;
      out[n++] = t;
    }
  }
  sort_ranks(out, n);
  return n;
}

static void verdict_end(const group *g, int t, char *buf, size_t len) {
  int n = 0;
  for (int r = 0; r < g->nranks; r++)
    if (r != t && g->next[r] >= 0 && chain_end(g, r) == t)
      g->tmp[n++] = r;
  char who[128], why[160], name[96];
  words_ranks(g->tmp, n, who, sizeof who);
  const trace_dump *d = g->by_rank[t];
  const trace_call *lastc =
      d && d->ncall ? &d->calls[d->ncall - 1] : NULL; /* its newest */
  if (d == NULL)
    say(why, sizeof why, "no dump from it");
  else if (lastc && is_state(lastc, "failed")) {
    words_call(lastc, name, sizeof name);
    char res[64];
    words_clean(lastc->result, res, sizeof res);
    say(why, sizeof why, "its %s failed: %s", name, res);
  } else
    say(why, sizeof why, "it is not waiting in braid");
  say(buf, len, "rank %d (%s wait%s for it; %s)", t, who, n == 1 ? "s" : "",
      why);
}

/* In a cycle, the ranks whose calls differ from the others' (by seq). */
static int verdict_cycle(const group *g, char *buf, size_t len) {
  int start = -1;
  for (int r = 0; r < g->nranks && start < 0; r++)
    if (g->next[r] >= 0 && chain_end(g, r) == -2)
      start = r;
  if (start < 0)
    return 0;
  int *cyc = g->tmp, n = cycle_of(g, start, cyc);
  char path[256], who[128], name[96], other[96];
  cycle_words(cyc, n, path, sizeof path);
  /* the seq most of the cycle waits in, and the one rank not in it */
  int odd = -1, nodd = 0;
  for (int i = 0; i < n; i++) {
    int same = 0;
    for (int j = 0; j < n; j++)
      same += g->wait[cyc[j]]->seq == g->wait[cyc[i]]->seq;
    if (2 * same <= n && !trace_is_p2p(g->wait[cyc[i]]))
      odd = cyc[i], nodd++;
  }
  if (nodd == 1 && n >= 3) {
    const trace_call *o = g->wait[odd], *m = g->wait[cyc[odd == cyc[0]]];
    words_call(o, name, sizeof name);
    words_call(m, other, sizeof other);
    say(buf, len,
        "rank %d (in the cycle %s it waits in %s, the others in %s: "
        "it skipped or added a call)",
        odd, path, name, other);
    return 1;
  }
  sort_ranks(cyc, n); /* the path is written: the ranks, in order */
  words_ranks(cyc, n, who, sizeof who);
  say(buf, len, "%s (they wait for each other: cycle %s)", who, path);
  return 1;
}

/* A call that failed while it waited for a rank (a peer that died): that
 * rank, named by the first such call. */
static int verdict_failed_wait(const group *g, char *buf, size_t len) {
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; g->by_rank[r] && i < g->by_rank[r]->ncall; i++) {
      const trace_call *c = &g->by_rank[r]->calls[i];
      if (!is_state(c, "failed") || c->waits_on < 0 || c->waits_on == r)
        continue;
      char name[96], res[64];
      words_call(c, name, sizeof name);
      words_clean(c->result, res, sizeof res);
      say(buf, len, "rank %lld (rank %d's %s failed waiting for it: %s)",
          c->waits_on, r, name, res);
      return 1;
    }
  return 0;
}

/* The likely culprit, by the strongest evidence first (docs/TRACE.md). */
static void verdict(const group *g, const disagreement *first, int ndis,
                    char *buf, size_t len) {
  char what[512], who[128], name[96] = "";
  int *set = malloc((size_t)g->nranks * sizeof *set), n = 0;
  if (set == NULL) {
    say(buf, len, "no culprit found (out of memory)");
    return;
  }
  if (g->newest != NULL)
    words_call(g->newest, name, sizeof name);
  /* 1. a call the ranks disagree on; 2. ranks behind, not waiting */
  if (ndis > 0) {
    verdict_disagree(first, what, sizeof what);
    goto found;
  }
  for (int r = 0; r < g->nranks; r++)
    if (behind(g, r) && g->wait[r] == NULL)
      set[n++] = r;
  if (n > 0) {
    words_ranks(set, n, who, sizeof who);
    say(what, sizeof what, "%s (never reached %s)", who, name);
    goto found;
  }
  /* 3. the end of a chain of waits; 4. a cycle; 5. ranks behind */
  if ((n = chain_ends(g, set)) > 0) {
    verdict_end(g, set[0], what, sizeof what);
    if (n > 1) {
      size_t at = strlen(what);
      say(what + at, sizeof what - at, "; other chains end elsewhere");
    }
    goto found;
  }
  if (verdict_failed_wait(g, what, sizeof what))
    goto found;
  if (verdict_cycle(g, what, sizeof what))
    goto found;
  for (int r = 0; r < g->nranks; r++)
    if (behind(g, r))
      set[n++] = r;
  if (n > 0) {
    words_ranks(set, n, who, sizeof who);
    say(what, sizeof what, "%s (never reached %s)", who, name);
    goto found;
  }
  free(set);
  say(buf, len, "no culprit found");
  return;
found:
  free(set);
  say(buf, len, "likely culprit: %s", what);
}

/* ---- the report -------------------------------------------------------- */

static void print_dumps(const group *g) {
  char t[64], host[128], reason[64], err[512];
  printf("dumps:\n");
  for (int r = 0; r < g->nranks; r++) {
    const trace_dump *d = g->by_rank[r];
    if (d == NULL)
      continue;
    words_time(d->time_us, 1, t, sizeof t);
    words_clean(d->host[0] ? d->host : "?", host, sizeof host);
    words_clean(d->reason[0] ? d->reason : "?", reason, sizeof reason);
    words_clean(d->error, err, sizeof err);
    printf("  rank %d: %s at %s, host %s pid %lld%s%s\n", r, reason, t, host,
           d->pid, err[0] ? ": " : "", err);
  }
  int n = 0;
  for (int r = 0; r < g->nranks; r++)
    if (g->by_rank[r] == NULL)
      g->tmp[n++] = r;
  if (n > 0) {
    char who[256];
    words_ranks(g->tmp, n, who, sizeof who);
    printf("warning: no dump from %s\n", who);
  }
  for (int r = 0; r < g->nranks; r++) {
    const trace_dump *d = g->by_rank[r];
    if (d != NULL && d->truncated[0])
      printf("warning: rank %d's dump %s is cut short: %s\n", r, d->path,
             d->truncated);
  }
}

static void print_reached(const group *g) {
  char name[96], st[192], last[96], lst[192];
  printf("calls reached:\n");
  for (int r = 0; r < g->nranks; r++) {
    const trace_dump *d = g->by_rank[r];
    if (d == NULL)
      continue;
    if (g->last[r] == NULL) {
      printf("  rank %d: no collective call in its dump\n", r);
      continue;
    }
    words_call(g->last[r], name, sizeof name);
    words_state(g->last[r], st, sizeof st);
    printf("  rank %d: %s, %s", r, name, st);
    const trace_call *c = &d->calls[d->ncall - 1]; /* its newest call */
    if (c != g->last[r] && trace_is_p2p(c)) {
      words_call(c, name, sizeof name);
      words_state(c, st, sizeof st);
      printf("; then %s, %s", name, st);
    }
    printf("\n");
  }
  if (g->newest == NULL)
    return;
  words_call(g->newest, name, sizeof name);
  for (int r = 0; r < g->nranks; r++) {
    if (!behind(g, r))
      continue;
    if (g->last[r] == NULL) {
      printf("  rank %d never reached %s (no collective call in its dump)\n", r,
             name);
      continue;
    }
    words_call(g->last[r], last, sizeof last);
    words_state(g->last[r], lst, sizeof lst);
    printf("  rank %d never reached %s (its last call: %s, %s)\n", r, name,
           last, lst);
  }
}

static void print_end(const group *g, int t) {
  const trace_dump *d = g->by_rank[t];
  char name[96], st[192];
  if (d == NULL) {
    printf("  rank %d has no dump: what it does is not known\n", t);
    return;
  }
  const trace_call *c = d->ncall ? &d->calls[d->ncall - 1] : NULL;
  if (c == NULL) {
    printf("  rank %d is not waiting in braid: stopped, computing, or "
           "elsewhere (no call in its dump)\n",
           t);
    return;
  }
  words_call(c, name, sizeof name);
  words_state(c, st, sizeof st);
  if (is_state(c, "done"))
    printf("  rank %d is not waiting in braid: stopped, computing, or "
           "elsewhere (its last call: %s, %s)\n",
           t, name, st);
  else if (is_state(c, "failed"))
    printf("  rank %d is not waiting in braid: its %s %s\n", t, name, st);
  else
    printf("  rank %d is not waiting in braid: its %s is %s\n", t, name, st);
}

static void print_waits(const group *g) {
  char name[96], prim[64], path[512];
  int any = 0;
  printf("waits:\n");
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; g->by_rank[r] && i < g->by_rank[r]->ncall; i++) {
      const trace_call *c = &g->by_rank[r]->calls[i];
      if (!is_state(c, "waiting"))
        continue;
      any = 1;
      if (trace_is_p2p(c)) /* "waits for rank 1 in a recv" */
        say(name, sizeof name, "a %s", c->kind[0] == 's' ? "send" : "recv");
      else
        words_call(c, name, sizeof name);
      words_clean(c->prim[0] ? c->prim : "?", prim, sizeof prim);
      if (c->waits_on >= 0)
        printf("  rank %d waits for rank %lld in %s (channel %lld, step %lld "
               "%s)\n",
               r, c->waits_on, name, c->channel, c->step, prim);
      else
        printf("  rank %d waits in %s, on no rank it names (channel %lld, "
               "step %lld %s)\n",
               r, name, c->channel, c->step, prim);
    }
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; g->by_rank[r] && i < g->by_rank[r]->ncall; i++) {
      const trace_call *c = &g->by_rank[r]->calls[i];
      if (!is_state(c, "failed") || c->waits_on < 0)
        continue;
      char res[64];
      words_call(c, name, sizeof name);
      words_clean(c->prim[0] ? c->prim : "?", prim, sizeof prim);
      words_clean(c->result, res, sizeof res);
      printf("  rank %d's %s failed waiting for rank %lld (channel %lld, "
             "step %lld %s): %s\n",
             r, name, c->waits_on, c->channel, c->step, prim, res);
    }
  if (!any) {
    printf("  no rank waits in braid\n");
    return;
  }
  /* each cycle once, from its lowest rank */
  int *cyc = malloc((size_t)g->nranks * sizeof *cyc);
  if (cyc == NULL)
    return;
  memset(g->tmp, 0, (size_t)g->nranks * sizeof *g->tmp);
  for (int r = 0; r < g->nranks; r++) {
    if (g->next[r] < 0 || chain_end(g, r) != -2)
      continue;
    int n = cycle_of(g, r, cyc);
    if (g->tmp[cyc[0]])
      continue;
    g->tmp[cyc[0]] = 1;
    cycle_words(cyc, n, path, sizeof path);
    printf("  cycle: %s\n", path);
  }
  int n = chain_ends(g, cyc);
  for (int i = 0; i < n; i++)
    print_end(g, cyc[i]);
  free(cyc);
}

static void print_disagreements(const disagreement *d, int shown, int ndis) {
  char who[256], sig[192];
  printf("disagreements:\n");
  if (ndis == 0)
    printf("  none: the ranks agree on every call that several dumps hold\n");
  for (int i = 0; i < shown; i++) {
    printf("  ranks disagree on call #%lld:", d[i].seq);
    for (int k = 0; k < d[i].ncls; k++) {
      words_ranks(d[i].cls[k].ranks, d[i].cls[k].n, who, sizeof who);
      words_sig(d[i].cls[k].call, d[i].with_fp, sig, sizeof sig);
      printf("%s %s: %s", k ? ";" : "", who, sig);
    }
    printf("\n");
  }
  if (ndis > shown)
    printf("  and %d more calls\n", ndis - shown);
}

#define MAX_SHOWN 16

static void report(group *g, int ngroups) {
  disagreement dis[MAX_SHOWN];
  char v[768], comm[128], id[80] = "";
  derive(g);
  int ndis = disagreements(g, dis, MAX_SHOWN);
  int shown = ndis < MAX_SHOWN ? ndis : MAX_SHOWN;
  verdict(g, dis, ndis, v, sizeof v);
  words_clean(g->comm, comm, sizeof comm);
  if (g->id[0] != '\0') {
    char clean[64];
    words_clean(g->id, clean, sizeof clean);
    say(id, sizeof id, ", id %s", clean);
  }
  if (ngroups > 1)
    printf("comm \"%s\" (%d ranks%s): %s\n", comm, g->nranks, id, v);
  else
    printf("%s\n", v);
  printf("comm \"%s\", %d ranks%s\n", comm, g->nranks, id);
  print_dumps(g);
  if (g->id[0] == '\0')
    printf("note: these dumps carry no comm_id (an older braid wrote them): "
           "grouped by comm name and size alone, so dumps of several jobs "
           "would be read as one\n");
  print_reached(g);
  print_waits(g);
  print_disagreements(dis, shown, ndis);
  free_disagreements(dis, shown);
}

/* ---- grouping ---------------------------------------------------------- */

static int by_comm(const void *a, const void *b) {
  const trace_dump *x = *(trace_dump *const *)a, *y = *(trace_dump *const *)b;
  int c = strcmp(x->comm, y->comm);
  if (c != 0)
    return c;
  if (x->nranks != y->nranks)
    return x->nranks < y->nranks ? -1 : 1;
  if ((c = strcmp(x->comm_id, y->comm_id)) != 0)
    return c;
  if (x->rank != y->rank)
    return x->rank < y->rank ? -1 : 1;
  return x->time_us < y->time_us ? -1 : x->time_us > y->time_us;
}

/* Reports dumps[0..n) (one communicator); returns -1 when out of memory. */
static int analyze_group(trace_dump **dumps, int n, int ngroups) {
  group g = {dumps[0]->comm,
             dumps[0]->comm_id,
             (int)dumps[0]->nranks,
             NULL,
             NULL,
             NULL,
             NULL,
             NULL,
             NULL};
  size_t nr = (size_t)g.nranks;
  g.by_rank = calloc(nr, sizeof *g.by_rank);
  g.last = calloc(nr, sizeof *g.last);
  g.wait = calloc(nr, sizeof *g.wait);
  g.next = calloc(nr, sizeof *g.next);
  g.tmp = calloc(nr, sizeof *g.tmp);
  int rc = -1;
  if (g.by_rank && g.last && g.wait && g.next && g.tmp) {
    for (int i = 0; i < n; i++) {
      trace_dump *d = dumps[i], *old = g.by_rank[d->rank];
      if (old != NULL) /* sorted by time: d is the later */
        fprintf(stderr,
                "braid-trace: warning: two dumps of rank %lld of comm "
                "\"%s\": %s and %s; reading the later, %s\n",
                d->rank, g.comm, old->path, d->path, d->path);
      g.by_rank[d->rank] = d;
    }
    report(&g, ngroups);
    rc = 0;
  }
  free(g.by_rank), free(g.last), free(g.wait), free(g.next), free(g.tmp);
  return rc;
}

/* One communicator: its name, its size and its id. Dumps without an id
 * (older ones) are told apart by name and size alone. */
static int same_comm(const trace_dump *a, const trace_dump *b) {
  return strcmp(a->comm, b->comm) == 0 && a->nranks == b->nranks &&
         strcmp(a->comm_id, b->comm_id) == 0;
}

/* A communicator's dumps: set->dumps[at..at+n), d the first of them,
 * and the time of its earliest. */
typedef struct {
  int at, n;
  const trace_dump *d;
  long long first_us;
} span;

/* By name and size, then by time: two jobs' communicators of one name
 * come in the order they ran. */
static int by_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  const trace_dump *dx = x->d, *dy = y->d;
  int c = strcmp(dx->comm, dy->comm);
  if (c != 0)
    return c;
  if (dx->nranks != dy->nranks)
    return dx->nranks < dy->nranks ? -1 : 1;
  if (x->first_us != y->first_us)
    return x->first_us < y->first_us ? -1 : 1;
  return strcmp(dx->comm_id, dy->comm_id);
}

static int analyze(trace_set *set) {
  qsort(set->dumps, (size_t)set->n, sizeof *set->dumps, by_comm);
  span *sp = malloc((size_t)set->n * sizeof *sp);
  if (sp == NULL) {
    fprintf(stderr, "braid-trace: out of memory\n");
    return 2;
  }
  int ngroups = 0;
  for (int i = 0, j; i < set->n; i = j) {
    long long first = set->dumps[i]->time_us;
    for (j = i + 1; j < set->n && same_comm(set->dumps[i], set->dumps[j]); j++)
      if (set->dumps[j]->time_us < first)
        first = set->dumps[j]->time_us;
    sp[ngroups++] = (span){i, j - i, set->dumps[i], first};
  }
  qsort(sp, (size_t)ngroups, sizeof *sp, by_span);
  /* communicators that share a name and a size: say that each is read
   * on its own (the dumps of two jobs in one folder) */
  for (int i = 0, j; i < ngroups; i = j) {
    const trace_dump *d = sp[i].d;
    for (j = i + 1; j < ngroups; j++) {
      const trace_dump *e = sp[j].d;
      if (strcmp(d->comm, e->comm) != 0 || d->nranks != e->nranks)
        break;
    }
    if (j - i > 1) {
      char comm[128];
      words_clean(d->comm, comm, sizeof comm);
      fprintf(stderr,
              "braid-trace: note: %d communicators named \"%s\" with %lld "
              "ranks (dumps with different comm_id: other jobs, or other "
              "communicators of one job); each is analyzed on its own\n",
              j - i, comm, d->nranks);
    }
  }
  int rc = 0;
  for (int i = 0; i < ngroups && rc == 0; i++) {
    if (i > 0)
      printf("\n");
    if (analyze_group(set->dumps + sp[i].at, sp[i].n, ngroups) < 0) {
      fprintf(stderr, "braid-trace: out of memory\n");
      rc = 2;
    }
  }
  free(sp);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 &&
      (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
       strcmp(argv[1], "help") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc < 3 || strcmp(argv[1], "analyze") != 0) {
    if (argc >= 2 && strcmp(argv[1], "analyze") != 0)
      fprintf(stderr, "braid-trace: unknown command '%s'\n", argv[1]);
    else
      fprintf(stderr, "braid-trace: analyze needs a dump file or folder\n");
    usage(stderr);
    return 2;
  }
  trace_set set = {NULL, 0, 0};
  int errors = 0;
  for (int i = 2; i < argc; i++)
    errors += trace_load(&set, argv[i], stderr);
  int rc = 2;
  if (errors > 0)
    fprintf(stderr,
            "braid-trace: %d unreadable or malformed input%s: no "
            "analysis\n",
            errors, errors == 1 ? "" : "s");
  else if (set.n == 0)
    fprintf(stderr, "braid-trace: no dump to analyze\n");
  else
    rc = analyze(&set);
  trace_set_free(&set);
  return rc;
}
