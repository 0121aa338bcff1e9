/*
 * The rank-order check (verify.h, verify_rank_order): does every reduction
 * of a schedule end as the serial fold x0 op x1 op .. op x(n-1), left to
 * right? The schedule is run symbolically, each channel on its own, with
 * one state per chunk: nothing, rank q's input alone (q >= 1), the fold of
 * ranks 0..k-1 in rank order (k >= 1; rank 0's input alone is k = 1), or
 * any other expression. A reduction a op b (RECV_REDUCE: a is the local
 * operand, b the message; RECV_REDUCE_REV: a is the message, b the local
 * operand; REDUCE: a is dst, b is src — the order the
 * reduction kernels take them, src/reduce.h) extends the fold of ranks
 * 0..k-1 only with rank k's input as b; everything else is out of order.
 * Which contributions a chunk holds is verify_sched's business: this check
 * assumes it passed, and messages are buffered without limit here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "verify.h"

#define ORD_NONE 0
#define ORD_BAD INT32_MIN
#define ORD_MAX_RANKS 512 /* n * n message queues */

typedef struct ord_queue {
  int32_t *v;
  int head, len, cap;
} ord_queue;

/* The schedule's geometry, as verify.c's. */
typedef struct ord_geom {
  const sched *s;
  int n, K, inplace, c;
  int in_n, out_n, scr_n, ncells; /* chunks per rank */
} ord_geom;

typedef struct ord_ctx {
  ord_geom v;
  int32_t *cell;
  ord_queue *q; /* n * n: from * n + to */
  int *pc, *k;
  char bad_at[200]; /* where the first out-of-order fold was made */
} ord_ctx;

static int buf_chunks(const ord_geom *v, int buf) {
  switch (buf) {
  case SCHED_BUF_IN:
    return v->in_n;
  case SCHED_BUF_OUT:
    return v->out_n;
  case SCHED_BUF_SCRATCH:
    return v->scr_n;
  default:
    return 0;
  }
}

/* In place, the in chunk that out chunk i of `rank` shares storage with
 * (the reducing collectives' conventions, as the executor's), or -1. */
static int out_alias(const ord_geom *v, int rank, int i) {
  if (!v->inplace)
    return -1;
  if (v->s->coll == SCHED_REDUCE_SCATTER)
    return rank * v->K + i;
  return i; /* allreduce, reduce */
}

static int cell_of(const ord_geom *v, int rank, int buf, int i) {
  int base = rank * v->ncells;
  if (buf == SCHED_BUF_IN)
    return base + i;
  if (buf == SCHED_BUF_OUT) {
    int a = out_alias(v, rank, i);
    return base + (a >= 0 ? a : v->in_n + i);
  }
  return base + v->in_n + v->out_n + i;
}

static int32_t combine(int n, int32_t a, int32_t b) {
  if (a >= 1 && a < n && b == -a)
    return a + 1;
  return ORD_BAD;
}

static void state_str(char *b, size_t len, int n, int32_t x) {
  if (x == ORD_NONE)
    snprintf(b, len, "nothing");
  else if (x == ORD_BAD)
    snprintf(b, len, "a fold out of rank order");
  else if (x < 0)
    snprintf(b, len, "rank %d's input alone", -x);
  else if (x < n)
    snprintf(b, len, "the fold of ranks 0..%d only", x - 1);
  else
    snprintf(b, len, "the fold of every rank");
}

static int push(ord_ctx *o, int from, int to, int32_t x) {
  ord_queue *q = &o->q[from * o->v.n + to];
  if (q->head + q->len == q->cap) {
    int cap = q->cap ? 2 * q->cap : 8;
    int32_t *nv = realloc(q->v, sizeof(int32_t) * (size_t)cap);
    if (nv == NULL)
      return -1;
    q->v = nv;
    q->cap = cap;
  }
  q->v[q->head + q->len++] = x;
  return 0;
}

static int cell(ord_ctx *o, int r, sched_chunks c, int k) {
  if (c.buf == SCHED_BUF_NONE || (uint32_t)k >= c.count ||
      (int)(c.index + (uint32_t)k) >= buf_chunks(&o->v, c.buf))
    return -1;
  return cell_of(&o->v, r, c.buf, (int)(c.index + (uint32_t)k));
}

/* Runs chunk k of rank r's step st: 1 done, 0 waits for a message, -1
 * malformed. */
static int run_chunk(ord_ctx *o, int r, int si, const sched_step *st, int k) {
  int n = o->v.n;
  int src = cell(o, r, st->src, k), dst = cell(o, r, st->dst, k);
  int32_t msg = ORD_NONE, x;
  int recv = sched_prim_recvs((sched_prim)st->prim);
  if (recv) {
    if (st->peer < 0 || st->peer >= n || dst < 0)
      return -1;
    ord_queue *q = &o->q[st->peer * n + r];
    if (q->len == 0)
      return 0;
    msg = q->v[q->head++];
    q->len--;
  }
  switch ((sched_prim)st->prim) {
  case SCHED_P_SEND:
    if (src < 0 || st->peer < 0 || st->peer >= n)
      return -1;
    return push(o, r, st->peer, o->cell[src]) ? -1 : 1;
  case SCHED_P_RECV:
  case SCHED_P_RECV_COPY_SEND:
    x = msg;
    break;
  case SCHED_P_RECV_REDUCE:
  case SCHED_P_RECV_REDUCE_SEND:
    if (src < 0)
      return -1;
    x = combine(n, o->cell[src], msg);
    break;
  case SCHED_P_RECV_REDUCE_REV:
    if (src < 0)
      return -1;
    x = combine(n, msg, o->cell[src]);
    break;
  case SCHED_P_COPY:
    if (src < 0 || dst < 0)
      return -1;
    x = o->cell[src];
    break;
  case SCHED_P_REDUCE:
    if (src < 0 || dst < 0)
      return -1;
    x = combine(n, o->cell[dst], o->cell[src]);
    break;
  default:
    return -1;
  }
  if (x == ORD_BAD && !o->bad_at[0] &&
      (sched_prim_reduces_msg((sched_prim)st->prim) ||
       st->prim == SCHED_P_REDUCE)) {
    snprintf(o->bad_at, sizeof o->bad_at,
             "; the first fold out of rank order: rank %d channel %d step %d "
             "(%s from %d, chunk %d of the step)",
             r, o->v.c, si, sched_prim_name((sched_prim)st->prim),
             st->prim == SCHED_P_REDUCE ? r : st->peer, k);
  }
  o->cell[dst] = x;
  if (st->prim == SCHED_P_RECV_REDUCE_SEND ||
      st->prim == SCHED_P_RECV_COPY_SEND) {
    if (st->peer_out < 0 || st->peer_out >= n)
      return -1;
    return push(o, r, st->peer_out, x) ? -1 : 1;
  }
  return 1;
}

/* Is cell `out` chunk i of rank r a result the collective promises? */
static int is_result(const sched *s, int r) {
  return s->coll != SCHED_REDUCE || r == s->root;
}

static braid_result run_channel(ord_ctx *o) {
  const sched *s = o->v.s;
  int n = o->v.n, c = o->v.c;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < o->v.ncells; i++)
      o->cell[r * o->v.ncells + i] = ORD_NONE;
    for (int i = 0; i < o->v.in_n; i++)
      o->cell[cell_of(&o->v, r, SCHED_BUF_IN, i)] = r == 0 ? 1 : -r;
    o->pc[r] = o->k[r] = 0;
  }
  for (int i = 0; i < n * n; i++)
    o->q[i].head = o->q[i].len = 0;
  o->bad_at[0] = '\0';
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < n; r++) {
      const sched_channel *sc = sched_chan_c(s, r, c);
      while (o->pc[r] < sc->nsteps) {
        const sched_step *st = &sc->steps[o->pc[r]];
        uint32_t cnt = st->prim == SCHED_P_SEND ? st->src.count : st->dst.count;
        int x = run_chunk(o, r, o->pc[r], st, o->k[r]);
        if (x < 0)
          return ERR(BRAID_ERR_INVALID_ARG,
                     "rank %d channel %d step %d (%s): malformed step (run "
                     "verify_sched)",
                     r, c, o->pc[r], sched_prim_name((sched_prim)st->prim));
        if (x == 0)
          break;
        moved = 1;
        if ((uint32_t)++o->k[r] >= cnt) {
          o->k[r] = 0;
          o->pc[r]++;
        }
      }
    }
  }
  for (int r = 0; r < n; r++)
    if (o->pc[r] < sched_chan_c(s, r, c)->nsteps)
      return ERR(BRAID_ERR_INVALID_ARG, "rank %d channel %d step %d never runs",
                 r, c, o->pc[r]);
  for (int r = 0; r < n; r++) {
    if (!is_result(s, r))
      continue;
    for (int i = 0; i < o->v.out_n; i++) {
      int32_t x = o->cell[cell_of(&o->v, r, SCHED_BUF_OUT, i)];
      if (x == n)
        continue;
      char what[64];
      state_str(what, sizeof what, n, x);
      return ERR(BRAID_ERR_INVALID_ARG,
                 "rank %d channel %d: out[%d] ends as %s%s", r, c, i, what,
                 o->bad_at);
    }
  }
  return BRAID_SUCCESS;
}

braid_result verify_rank_order(const sched *s, int inplace) {
  if (s == NULL || s->nranks < 1 || s->chunks_per_block < 1)
    return ERR(BRAID_ERR_INVALID_ARG, "no schedule");
  if (!sched_reduces(s->coll))
    return BRAID_SUCCESS; /* nothing is folded */
  int n = s->nranks;
  if (n > ORD_MAX_RANKS)
    return ERR(BRAID_ERR_UNSUPPORTED,
               "the rank-order check takes at most %d ranks (this schedule "
               "has %d)",
               ORD_MAX_RANKS, n);
  ord_ctx o;
  memset(&o, 0, sizeof o);
  ord_geom *v = &o.v;
  v->s = s;
  v->n = n;
  v->K = s->chunks_per_block;
  v->inplace = inplace;
  CHECKR(verify_cells(s, &v->in_n, &v->out_n, &v->scr_n, &v->ncells));
  o.cell = calloc((size_t)n * (size_t)v->ncells, sizeof(int32_t));
  o.q = calloc((size_t)n * (size_t)n, sizeof(ord_queue));
  o.pc = malloc(sizeof(int) * (size_t)n);
  o.k = malloc(sizeof(int) * (size_t)n);
  braid_result rc;
  if (o.cell == NULL || o.q == NULL || o.pc == NULL || o.k == NULL)
    rc = ERR(BRAID_ERR_NOMEM, "out of memory");
  else
    for (rc = BRAID_SUCCESS; rc == BRAID_SUCCESS && v->c < s->nchannels; v->c++)
      rc = run_channel(&o);
  if (o.q != NULL)
    for (int i = 0; i < n * n; i++)
      free(o.q[i].v);
  free(o.q);
  free(o.cell);
  free(o.pc);
  free(o.k);
  return rc;
}
