/*
 * Linear generator: point-to-point, and root-centred collectives where the
 * root serves the other ranks one after another in rank order.
 *
 * Point-to-point schedules are per call. For SCHED_SEND with root = peer P,
 * every rank r != P has one step, SEND(P, in[0]); for SCHED_RECV with
 * root = P, every rank r != P has RECV(P, out[0]). The executor runs the
 * calling rank's channels only: a braid_send(peer = P) on rank r runs rank
 * r's steps of the SEND schedule for P, and the matching braid_recv(peer = r)
 * on P runs P's steps of the RECV schedule for r; both sides build them with
 * the same channel count, so channel c of one side meets channel c of the
 * other. Rank P itself has no steps (a self send/recv is a local copy the
 * executor pairs up).
 *
 *   broadcast  the root sends to ranks 0, 1, ... in turn.
 *   reduce     the root folds the inputs in rank order.
 *   gather     the root receives from ranks 0, 1, ... in turn.
 *   scatter    the root sends to ranks 0, 1, ... in turn.
 */
#include "gen_util.h"

static braid_result linear_rank(sched_channel *c, sched_coll coll, int n,
                                int root, int r) {
  int first = 1;
  switch (coll) {
  case SCHED_SEND:
    return r == root ? BRAID_SUCCESS : sched_send(c, root, gen_in(0, 1));
  case SCHED_RECV:
    return r == root ? BRAID_SUCCESS : sched_recv(c, root, gen_out(0, 1));
  case SCHED_BROADCAST:
    if (r != root)
      return sched_recv(c, root, gen_out(0, 1));
    for (int q = 0; q < n; q++)
      if (q != root)
        CHECKR(sched_send(c, q, gen_in(0, 1)));
    return sched_copy(c, gen_in(0, 1), gen_out(0, 1));
  case SCHED_REDUCE:
    if (r != root)
      return sched_send(c, root, gen_in(0, 1));
    /* ((in0 + in1) + in2) ...: the root's own input enters at its rank. */
    if (root != 0) {
      /* out may alias in: fold the prefix in out only once in is used. */
      for (int q = 0; q < n; q++) {
        if (q == root)
          continue;
        if (first && q < root) {
          CHECKR(sched_recv(c, q, gen_scr(0, 1)));
        } else if (q < root) {
          CHECKR(sched_recv_reduce(c, q, gen_scr(0, 1), gen_scr(0, 1)));
        } else if (q == root + 1) {
          CHECKR(sched_reduce_local(c, gen_in(0, 1), gen_scr(0, 1)));
          CHECKR(sched_recv_reduce(c, q, gen_scr(0, 1), gen_out(0, 1)));
        } else {
          CHECKR(sched_recv_reduce(c, q, gen_out(0, 1), gen_out(0, 1)));
        }
        first = 0;
      }
      if (root == n - 1) {
        CHECKR(sched_reduce_local(c, gen_in(0, 1), gen_scr(0, 1)));
        CHECKR(sched_copy(c, gen_scr(0, 1), gen_out(0, 1)));
      }
      return BRAID_SUCCESS;
    }
    for (int q = 1; q < n; q++)
      CHECKR(sched_recv_reduce(c, q, q == 1 ? gen_in(0, 1) : gen_out(0, 1),
                               gen_out(0, 1)));
    return BRAID_SUCCESS;
  case SCHED_GATHER:
    if (r != root)
      return sched_send(c, root, gen_in(0, 1));
    CHECKR(sched_copy(c, gen_in(0, 1), gen_out((uint32_t)r, 1)));
    for (int q = 0; q < n; q++)
      if (q != root)
        CHECKR(sched_recv(c, q, gen_out((uint32_t)q, 1)));
    return BRAID_SUCCESS;
  case SCHED_SCATTER:
    if (r != root)
      return sched_recv(c, root, gen_out(0, 1));
    for (int q = 0; q < n; q++)
      if (q != root)
        CHECKR(sched_send(c, q, gen_in((uint32_t)q, 1)));
    return sched_copy(c, gen_in((uint32_t)r, 1), gen_out(0, 1));
  default:
    return ERR(BRAID_ERR_INTERNAL, "linear: no steps for %s",
               sched_coll_name(coll));
  }
}

static braid_result linear_fill(sched *s, const gen_params *p) {
  int n = p->nranks;
  for (int ch = 0; ch < p->nchannels; ch++)
    for (int r = 0; r < n; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      if (n == 1 && p->coll != SCHED_SEND && p->coll != SCHED_RECV)
        CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
      else
        CHECKR(linear_rank(c, p->coll, n, p->root, r));
    }
  return BRAID_SUCCESS;
}

braid_result gen_linear(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_linear_desc));
  int n = p->nranks;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, 1, p->nchannels, "linear", &s));
  if (p->coll == SCHED_REDUCE && n > 1 && p->root != 0)
    s->scratch_blocks = 1;
  return gen_done(s, linear_fill(s, p), out);
}

/* The root talks to each rank in turn; send/recv is one message. */
static double linear_cost(const gen_cost_in *c) {
  if (c->coll == SCHED_SEND || c->coll == SCHED_RECV)
    return c->a + c->m * c->b;
  return (c->n - 1) * (c->a + c->m * (c->b + c->red));
}

const gen_desc gen_linear_desc = {
    .name = "linear",
    .fn = gen_linear,
    .colls = ((1u << SCHED_SEND) | (1u << SCHED_RECV) | (1u << SCHED_GATHER) |
              (1u << SCHED_SCATTER) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = 0,
    .flags = 0,
    .cost = linear_cost,
};
