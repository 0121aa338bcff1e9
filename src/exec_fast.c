/*
 * The small-call path: the repeats of a small call that only moves data
 * (broadcast, scatter: at most one receive, then sends) run a precompiled
 * list of transport actions instead of the executor's loop
 * (docs/RUNTIME.md, "The small-call path").
 *
 * The list is made from the same prepared schedule the loop would run
 * (src/executor.c, prep_keep), so both send the same messages on the same
 * connections: a rank that takes this path and one that does not still
 * meet. A run starts only when every send has room at once, and its one
 * receive, if any, comes first and is taken only when the whole expected
 * message is already there; otherwise it gives the call back untouched to
 * the loop, which waits, times out, names dead peers and mismatched calls
 * as for any other call.
 */
#include <string.h>

#include "src/check.h"
#include "src/exec_int.h"

static int add(exec_fast *f, int prim, tp_conn *conn, const tp_ops *ops,
               const char *src, char *dst, size_t len) {
  if (f->n == EXEC_FAST_MAX)
    return 0;
  if (prim != EXEC_FAST_COPY &&
      (conn == NULL || ops->fast_room == NULL || len > ops->fast_max))
    return 0;
  /* one message per connection: fast_room answers for one */
  for (int i = 0; prim == EXEC_FAST_SEND && i < f->n; i++)
    if (f->a[i].prim == EXEC_FAST_SEND && f->a[i].conn == conn)
      return 0;
  f->a[f->n++] = (exec_fast_act){prim, conn, ops, src, dst, len};
  return 1;
}

/* The actions of one step's chunk; 0 when the step does not qualify. */
static int add_step(braid_comm *c, const xop *x, const xchan *h,
                    const sched_step *st, uint32_t sub, exec_fast *f) {
  size_t len = 0, len2 = 0;
  if ((st->src.buf != SCHED_BUF_NONE && st->src.buf != SCHED_BUF_IN &&
       st->src.buf != SCHED_BUF_OUT) ||
      (st->dst.buf != SCHED_BUF_NONE && st->dst.buf != SCHED_BUF_IN &&
       st->dst.buf != SCHED_BUF_OUT))
    return 0; /* scratch may move between calls */
  const char *src = st->src.buf != SCHED_BUF_NONE
                        ? exec_cptr(x, h, st->src, sub, &len)
                        : NULL;
  char *dst = st->dst.buf != SCHED_BUF_NONE
                  ? exec_cptr(x, h, st->dst, sub, &len2)
                  : NULL;
  if (src == NULL)
    len = len2;
  if (len == 0)
    return 1; /* the loop skips it too */
  int recv = st->prim == SCHED_P_RECV || st->prim == SCHED_P_RECV_COPY_SEND;
  if (recv && f->n > 0)
    return 0; /* one receive, before anything else */
  switch ((sched_prim)st->prim) {
  case SCHED_P_SEND:
    return add(f, EXEC_FAST_SEND, x_conn(c, x, h, st->peer),
               x_ops(c, x, h, st->peer), src, NULL, len);
  case SCHED_P_RECV:
    return add(f, EXEC_FAST_RECV, x_conn(c, x, h, st->peer),
               x_ops(c, x, h, st->peer), NULL, dst, len);
  case SCHED_P_RECV_COPY_SEND:
    return add(f, EXEC_FAST_RECV, x_conn(c, x, h, st->peer),
               x_ops(c, x, h, st->peer), NULL, dst, len) &&
           add(f, EXEC_FAST_SEND, x_conn(c, x, h, st->peer_out),
               x_ops(c, x, h, st->peer_out), dst, NULL, len);
  case SCHED_P_COPY:
    return src != NULL && dst != NULL &&
           (src == dst || add(f, EXEC_FAST_COPY, NULL, NULL, src, dst, len));
  default:
    return 0; /* reductions: the loop's */
  }
}

void exec_fast_compile(braid_comm *c, const xop *x, exec_fast *f) {
  f->n = 0;
  if (x->dev >= 0 || x->s == NULL || x->is_p2p)
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
        if (!add_step(c, x, h, st, sub, f))
          goto no;
    }
  }
  return;
no:
  f->n = 0;
}

int exec_fast_run(braid_comm *c, exec_op *op, const exec_fast *f) {
  for (int i = 0; i < f->n; i++) {
    const exec_fast_act *a = &f->a[i];
    if (a->prim == EXEC_FAST_SEND && !a->ops->fast_room(a->conn, a->len))
      return 0;
  }
  /* what the loop gives the transports before the call's first message */
  uint64_t fp = op->fp ? op->fp : check_call_fp(op);
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->set_fp != NULL)
      c->tp[i]->set_fp(c->tp_state[i], fp);
  int i = 0;
  if (f->a[0].prim == EXEC_FAST_RECV) {
    if (!f->a[0].ops->fast_recv(f->a[0].conn, f->a[0].dst, f->a[0].len))
      return 0;
    i = 1;
  }
  for (; i < f->n; i++) {
    const exec_fast_act *a = &f->a[i];
    if (a->prim == EXEC_FAST_SEND)
      a->ops->fast_send(a->conn, a->src, a->len);
    else
      memmove(a->dst, a->src, a->len);
  }
  return 1;
}
