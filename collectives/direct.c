/*
 * Direct (one-shot) generator for small messages: every rank sends its data
 * straight to every rank that needs it, and reductions happen locally. A rank
 * sends to its peers in the order r + 1, r + 2, ... (mod nranks), so that the
 * first messages of different ranks go to different peers.
 *
 *   allreduce       every rank receives every input and folds them in rank
 *                   order ((in0 + in1) + in2) + ... — the same order on every
 *                   rank, so the results are bitwise identical
 *                   (gen_fold_rank_order: rank 1 reduces rank 0's input
 *                   with its own straight into out, the message as the
 *                   left operand; ranks > 1 fold the prefix that precedes
 *                   their own input in one scratch block, as their input
 *                   may alias out).
 *   allgather       send in to all, receive block q from rank q.
 *   reduce_scatter  send block q to rank q; fold the blocks in rank order.
 *   alltoall        pairwise: in round k (0..nranks-1) rank r exchanges with
 *                   rank (k - r) mod nranks (send first, then receive: in
 *                   place is safe); the round where the partner is r itself
 *                   is a local copy.
 *   broadcast, reduce, gather, scatter
 *                   the root sends to / receives from every rank; reduce's
 *                   root folds in rank order.
 */
#include "gen_util.h"

static braid_result direct_allreduce(sched_channel *c, int n, int r) {
  for (int i = 1; i < n; i++)
    CHECKR(sched_send(c, (r + i) % n, gen_in(0, 1)));
  return gen_fold_rank_order(c, n, r, gen_in(0, 1), gen_scr(0, 1),
                             gen_out(0, 1));
}

static braid_result direct_rank(sched_channel *c, sched_coll coll, int n,
                                int root, int r) {
  switch (coll) {
  case SCHED_ALLREDUCE:
    return direct_allreduce(c, n, r);
  case SCHED_ALLGATHER:
    for (int i = 1; i < n; i++)
      CHECKR(sched_send(c, (r + i) % n, gen_in(0, 1)));
    CHECKR(sched_copy(c, gen_in(0, 1), gen_out((uint32_t)r, 1)));
    for (int i = 1; i < n; i++) {
      int q = (r - i + n) % n;
      CHECKR(sched_recv(c, q, gen_out((uint32_t)q, 1)));
    }
    return BRAID_SUCCESS;
  case SCHED_REDUCE_SCATTER:
    for (int i = 1; i < n; i++) {
      int q = (r + i) % n;
      CHECKR(sched_send(c, q, gen_in((uint32_t)q, 1)));
    }
    return gen_fold_rank_order(c, n, r, gen_in((uint32_t)r, 1), gen_scr(0, 1),
                               gen_out(0, 1));
  case SCHED_ALLTOALL:
    for (int k = 0; k < n; k++) {
      int q = ((k - r) % n + n) % n;
      if (q == r) {
        CHECKR(sched_copy(c, gen_in((uint32_t)r, 1), gen_out((uint32_t)r, 1)));
      } else {
        CHECKR(sched_send(c, q, gen_in((uint32_t)q, 1)));
        CHECKR(sched_recv(c, q, gen_out((uint32_t)q, 1)));
      }
    }
    return BRAID_SUCCESS;
  case SCHED_BROADCAST:
    if (r != root)
      return sched_recv(c, root, gen_out(0, 1));
    for (int i = 1; i < n; i++)
      CHECKR(sched_send(c, (r + i) % n, gen_in(0, 1)));
    return sched_copy(c, gen_in(0, 1), gen_out(0, 1));
  case SCHED_REDUCE:
    if (r != root)
      return sched_send(c, root, gen_in(0, 1));
    return gen_fold_rank_order(c, n, r, gen_in(0, 1), gen_scr(0, 1),
                               gen_out(0, 1));
  case SCHED_GATHER:
    if (r != root)
      return sched_send(c, root, gen_in(0, 1));
    CHECKR(sched_copy(c, gen_in(0, 1), gen_out((uint32_t)r, 1)));
    for (int i = 1; i < n; i++) {
      int q = (r + i) % n;
      CHECKR(sched_recv(c, q, gen_out((uint32_t)q, 1)));
    }
    return BRAID_SUCCESS;
  case SCHED_SCATTER:
    if (r != root)
      return sched_recv(c, root, gen_out(0, 1));
    for (int i = 1; i < n; i++) {
      int q = (r + i) % n;
      CHECKR(sched_send(c, q, gen_in((uint32_t)q, 1)));
    }
    return sched_copy(c, gen_in((uint32_t)r, 1), gen_out(0, 1));
  default:
    return ERR(BRAID_ERR_INTERNAL, "direct: no steps for %s",
               sched_coll_name(coll));
  }
}

static braid_result direct_fill(sched *s, const gen_params *p) {
  int n = p->nranks;
  for (int ch = 0; ch < p->nchannels; ch++)
    for (int r = 0; r < n; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      if (n == 1)
        CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
      else
        CHECKR(direct_rank(c, p->coll, n, p->root, r));
    }
  return BRAID_SUCCESS;
}

braid_result gen_direct(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_direct_desc));
  int n = p->nranks;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, 1, p->nchannels, "direct", &s));
  if (sched_reduces(p->coll) && n > 2) /* the prefix before a rank's own */
    s->scratch_blocks = 1;
  return gen_done(s, direct_fill(s, p), out);
}

/* One burst of n - 1 messages, contended (gen_cost_contention). */
static double direct_cost(const gen_cost_in *c) {
  double n = c->n, m = c->m;
  if (c->coll == SCHED_ALLTOALL)
    return (n - 1) * (c->a + m * c->b);
  return c->a + (n - 1) * (c->o + m * (c->b * gen_cost_contention(n) + c->red));
}

const gen_desc gen_direct_desc = {
    .name = "direct",
    .fn = gen_direct,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER) | (1u << SCHED_ALLTOALL) |
              (1u << SCHED_BROADCAST) | (1u << SCHED_REDUCE) |
              (1u << SCHED_GATHER) | (1u << SCHED_SCATTER)),
    .needs = 0,
    .flags = GEN_RANK_ORDER,
    .cost = direct_cost,
};
