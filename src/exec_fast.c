/*
 * The small-call path: the repeats of a small call run a precompiled list
 * of transport actions instead of the executor's loop (docs/RUNTIME.md,
 * "The small-call path").
 *
 * The list is made from the same prepared schedule the loop would run
 * (src/executor.c, prep_keep), step after step, channel after channel, so
 * both send the same messages on the same connections: a rank that takes
 * this path and one that does not still meet. A run starts only when every
 * send has room at once (on each connection for all the list sends there,
 * so the room checked first is still there when their turn comes); each
 * connection's messages go and are taken in the order of the steps, as
 * the loop's do; a receive takes its message
 * only when the whole expected one is there, after a short spin where
 * spinning can help. Where one finds nothing, the run stops and the loop
 * goes on from that receive (exec_fast_resume), waiting, timing out and
 * naming dead peers and mismatched calls as for any other call.
 */
#include <string.h>

#include "src/check.h"
#include "src/exec_int.h"

/* Polls of a receive before the loop takes over (each one PAUSE apart,
 * where the peer runs on another CPU): 8-byte calls between 2 ranks meet
 * within a few hundred nanoseconds when both are in step. */
#define EXEC_FAST_POLLS 64

/* Appends an action; 0 when the call cannot take the path. */
static int add(braid_comm *c, const xop *x, const xchan *h, exec_fast *f,
               exec_fast_act a) {
  if (f->n == EXEC_FAST_MAX)
    return 0;
  if (a.prim == EXEC_FAST_SEND || a.prim == EXEC_FAST_RECV) {
    a.conn = x_conn(c, x, h, a.peer);
    a.ops = x_ops(c, x, h, a.peer);
    if (a.conn == NULL || a.ops->fast_room == NULL ||
        a.len > a.ops->fast_max(a.conn))
      return 0;
  }
  if (a.prim == EXEC_FAST_SEND) { /* counted on its connection's first */
    exec_fast_act *first = NULL;
    for (int i = 0; i < f->n && first == NULL; i++)
      if (f->a[i].prim == EXEC_FAST_SEND && f->a[i].conn == a.conn)
        first = &f->a[i];
    if (first == NULL)
      first = &a;
    first->nsend++;
    if (a.len > first->maxlen)
      first->maxlen = a.len;
  }
  a.ch = (int)(h - x->chans);
  f->a[f->n++] = a;
  return 1;
}

/* p as the list keeps it: an offset into the scratch when it is there
 * (the scratch may have moved by the next call: it grows), else itself. */
static char *kept(const xop *x, uint8_t buf, char *p) {
  if (buf != SCHED_BUF_SCRATCH || p == NULL)
    return p;
  return (char *)(uintptr_t)(p - x->bufs[SCHED_BUF_SCRATCH]);
}

/* The actions of chunk `sub` of step k; 0 when it cannot take the path. */
static int add_step(braid_comm *c, const xop *x, const xchan *h, int k,
                    uint32_t sub, exec_fast *f) {
  const sched_step *st = &h->sc->steps[k];
  size_t len = 0, len2 = 0;
  char *src = st->src.buf != SCHED_BUF_NONE
                  ? exec_cptr(x, h, st->src, sub, &len)
                  : NULL;
  char *dst = st->dst.buf != SCHED_BUF_NONE
                  ? exec_cptr(x, h, st->dst, sub, &len2)
                  : NULL;
  if (src == NULL)
    len = len2;
  if (len == 0)
    return 1; /* the loop skips it too */
  int src_scr = st->src.buf == SCHED_BUF_SCRATCH;
  int dst_scr = st->dst.buf == SCHED_BUF_SCRATCH;
  exec_fast_act a = {.step = k,
                     .sub = sub,
                     .src = kept(x, st->src.buf, src),
                     .dst = kept(x, st->dst.buf, dst),
                     .scr = (src_scr ? EXEC_FAST_SRC_SCR : 0) |
                            (dst_scr ? EXEC_FAST_DST_SCR : 0),
                     .len = len,
                     .peer = st->peer};
  exec_fast_act fwd = {.prim = EXEC_FAST_SEND,
                       .step = k,
                       .sub = sub,
                       .src = a.dst,
                       .scr = dst_scr ? EXEC_FAST_SRC_SCR : 0,
                       .len = len,
                       .peer = st->peer_out};
  switch ((sched_prim)st->prim) {
  case SCHED_P_SEND:
    a.prim = EXEC_FAST_SEND;
    return add(c, x, h, f, a);
  case SCHED_P_RECV:
  case SCHED_P_RECV_COPY_SEND:
    a.prim = EXEC_FAST_RECV;
    a.src = NULL;
    a.scr &= ~EXEC_FAST_SRC_SCR;
    return add(c, x, h, f, a) &&
           (st->prim == SCHED_P_RECV || add(c, x, h, f, fwd));
  case SCHED_P_RECV_REDUCE:
  case SCHED_P_RECV_REDUCE_SEND:
  case SCHED_P_RECV_REDUCE_REV:
    a.prim = EXEC_FAST_RECV;
    a.red = st->prim == SCHED_P_RECV_REDUCE_REV ? x->red_rev.base : x->red.base;
    return add(c, x, h, f, a) &&
           (st->prim != SCHED_P_RECV_REDUCE_SEND || add(c, x, h, f, fwd));
  case SCHED_P_COPY:
    a.prim = EXEC_FAST_COPY;
    return src != NULL && dst != NULL && (src == dst || add(c, x, h, f, a));
  case SCHED_P_REDUCE:
    a.prim = EXEC_FAST_REDUCE;
    a.red = x->red.base;
    return src != NULL && dst != NULL && add(c, x, h, f, a);
  default:
    return 0;
  }
}

void exec_fast_compile(braid_comm *c, const xop *x, exec_fast *f) {
  f->n = 0;
  const exec_op *op = x->op;
  if (x->dev >= 0 || x->s == NULL || x->is_p2p)
    return;
  /* what xop_finish does after the steps: the average's division, one
   * rank's bool normalised */
  if (sched_reduces(op->coll) &&
      (op->op == BRAID_AVG || (op->dt == BRAID_BOOL && c->nranks == 1)))
    return;
  for (int i = 0; i < x->nch; i++) {
    const xchan *h = &x->chans[i];
    if (!h->whole || h->nslices != 1)
      goto no;
    for (int k = 0; k < h->sc->nsteps; k++) {
      const sched_step *st = &h->sc->steps[k];
      uint32_t n =
          st->src.buf != SCHED_BUF_NONE ? st->src.count : st->dst.count;
      for (uint32_t sub = 0; sub < n; sub++)
        if (!add_step(c, x, h, k, sub, f))
          goto no;
    }
  }
  return;
no:
  f->n = 0;
}

/* Where a's source and destination are now: scr is the scratch. */
static const char *src_of(const exec_fast_act *a, char *scr) {
  return a->scr & EXEC_FAST_SRC_SCR ? scr + (uintptr_t)a->src : a->src;
}
static char *dst_of(const exec_fast_act *a, char *scr) {
  return a->scr & EXEC_FAST_DST_SCR ? scr + (uintptr_t)a->dst : a->dst;
}

/* 1 when receive a took its message. */
static int take(const exec_fast_act *a, char *scr) {
  return a->ops->fast_recv(a->conn, src_of(a, scr), dst_of(a, scr), a->len,
                           a->red.fn != NULL ? &a->red : NULL);
}

int exec_fast_run(braid_comm *c, exec_op *op, const exec_fast *f) {
  /* as the loop does at each call: a peer that waits on this rank decides
   * from this note whether to spin, and a note left stale by calls that
   * never wait would have it yield, or move onto this rank's CPU */
  exec_wait_note_cpu(c);
  for (int i = 0; i < f->n; i++) {
    const exec_fast_act *a = &f->a[i];
    if (a->nsend > 0 && !a->ops->fast_room(a->conn, a->maxlen, a->nsend))
      return 0;
  }
  /* what the loop gives the transports before the call's first message */
  exec_set_fp(c, op->fp ? op->fp : check_call_fp(op));
  /* the kept call reserved its scratch, which only grows */
  char *scr = c->scratch;
  for (int i = 0; i < f->n; i++) {
    const exec_fast_act *a = &f->a[i];
    switch (a->prim) {
    case EXEC_FAST_SEND:
      a->ops->fast_send(a->conn, src_of(a, scr), a->len);
      break;
    case EXEC_FAST_RECV:
      if (!take(a, scr)) {
        if (!exec_wait_may_spin(c, a->peer))
          return i;
        int n = 0;
        while (n < EXEC_FAST_POLLS && !take(a, scr)) {
          exec_cpu_relax();
          n++;
        }
        if (n == EXEC_FAST_POLLS)
          return i;
      }
      break;
    case EXEC_FAST_COPY:
      memmove(dst_of(a, scr), src_of(a, scr), a->len);
      break;
    default: /* EXEC_FAST_REDUCE */
      a->red.fn(dst_of(a, scr), dst_of(a, scr), src_of(a, scr),
                a->len / a->red.elem_size);
    }
  }
  return f->n;
}

void exec_fast_resume(const exec_fast *f, int k, xchan *chans) {
  const exec_fast_act *a = &f->a[k];
  for (int i = 0; i < a->ch; i++) /* every step of theirs is done */
    chans[i].step = chans[i].sc->nsteps;
  chans[a->ch].step = a->step;
  chans[a->ch].sub = a->sub;
  chans[a->ch].phase = 0;
}
