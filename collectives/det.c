/*
 * Deterministic generator ("det"): reductions whose every element is the
 * serial fold x0 op x1 op .. op x(n-1) of the ranks' inputs in rank order,
 * on every rank, whatever the channels, slicing, transport and size — the
 * bits a one-process loop computes. BRAID_DETERMINISTIC=1 makes the planner
 * choose among generators that fold this way (GEN_RANK_ORDER: this one for
 * large messages, direct.c for small ones).
 *
 *   allreduce       K = nranks chunks per block; chunk j's owner is rank j.
 *                   Phase 1: every rank sends chunk j to rank j, and rank j
 *                   folds chunk j in rank order (gen_fold_rank_order).
 *                   Phase 2: each owner sends its folded chunk to every
 *                   rank (an allgather). Each rank moves 2 (n - 1) / n of a
 *                   block each way, as a ring does, in two bursts.
 *   reduce          phase 1 as allreduce (owners other than the root fold
 *                   in scratch), then the owners send their chunks to the
 *                   root.
 *   reduce_scatter  every rank sends block q to rank q, which folds the
 *                   blocks in rank order.
 * A rank sends to its peers in the order r + 1, r + 2, .. (mod nranks), so
 * that the first messages of different ranks go to different peers.
 */
#include "gen_util.h"

/* Phase 1 of allreduce and reduce: chunk j of every input to its owner j,
 * folded there into `dst` (chunk r of the output, or of scratch). */
static braid_result det_fold_chunks(sched_channel *c, int n, int r,
                                    sched_chunks dst) {
  for (int i = 1; i < n; i++) {
    uint32_t q = (uint32_t)((r + i) % n);
    CHECKR(sched_send(c, (int)q, gen_in(q, 1)));
  }
  return gen_fold_rank_order(c, n, r, gen_in((uint32_t)r, 1),
                             gen_scr((uint32_t)r, 1), dst);
}

static braid_result det_allreduce(sched_channel *c, int n, int r) {
  CHECKR(det_fold_chunks(c, n, r, gen_out((uint32_t)r, 1)));
  for (int i = 1; i < n; i++) /* phase 2: the owners' chunks to all */
    CHECKR(sched_send(c, (r + i) % n, gen_out((uint32_t)r, 1)));
  for (int i = 1; i < n; i++) {
    uint32_t q = (uint32_t)((r - i + n) % n);
    CHECKR(sched_recv(c, (int)q, gen_out(q, 1)));
  }
  return BRAID_SUCCESS;
}

static braid_result det_reduce(sched_channel *c, int n, int r, int root) {
  if (r != root) {
    CHECKR(det_fold_chunks(c, n, r, gen_scr((uint32_t)r, 1)));
    return sched_send(c, root, gen_scr((uint32_t)r, 1));
  }
  CHECKR(det_fold_chunks(c, n, r, gen_out((uint32_t)r, 1)));
  for (int i = 1; i < n; i++) {
    uint32_t q = (uint32_t)((r + i) % n);
    CHECKR(sched_recv(c, (int)q, gen_out(q, 1)));
  }
  return BRAID_SUCCESS;
}

static braid_result det_reduce_scatter(sched_channel *c, int n, int r) {
  for (int i = 1; i < n; i++) {
    uint32_t q = (uint32_t)((r + i) % n);
    CHECKR(sched_send(c, (int)q, gen_in(q, 1)));
  }
  return gen_fold_rank_order(c, n, r, gen_in((uint32_t)r, 1), gen_scr(0, 1),
                             gen_out(0, 1));
}

static braid_result det_rank(sched_channel *c, const sched *s, int r) {
  int n = s->nranks;
  if (n == 1) /* one rank: the result is the input */
    return sched_copy(c, gen_in(0, 1), gen_out(0, 1));
  switch (s->coll) {
  case SCHED_ALLREDUCE:
    return det_allreduce(c, n, r);
  case SCHED_REDUCE:
    return det_reduce(c, n, r, s->root);
  case SCHED_REDUCE_SCATTER:
    return det_reduce_scatter(c, n, r);
  default:
    return ERR(BRAID_ERR_INTERNAL, "det: no steps for %s",
               sched_coll_name(s->coll));
  }
}

static braid_result det_fill(sched *s) {
  for (int ch = 0; ch < s->nchannels; ch++)
    for (int r = 0; r < s->nranks; r++)
      CHECKR(det_rank(sched_chan(s, r, ch), s, r));
  return BRAID_SUCCESS;
}

braid_result gen_det(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_det_desc));
  int n = p->nranks;
  int K = p->coll == SCHED_REDUCE_SCATTER ? 1 : n;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, K, p->nchannels, "det", &s));
  s->scratch_blocks = n > 1 ? 1 : 0;
  return gen_done(s, det_fill(s), out);
}

/* reduce_scatter: direct's; else two bursts of n - 1 chunks of m / n (to
 * the owners, then from them), the owners folding theirs. */
static double det_cost(const gen_cost_in *c) {
  double n = c->n, m = c->m, cont = gen_cost_contention(n);
  if (c->coll == SCHED_REDUCE_SCATTER)
    return c->a + (n - 1) * (c->o + m * (c->b * cont + c->gm));
  return 2 * c->a + 2 * (n - 1) * (c->o + m / n * c->b * cont) +
         (n - 1) * m / n * c->gm;
}

const gen_desc gen_det_desc = {
    .name = "det",
    .fn = gen_det,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_REDUCE) |
              (1u << SCHED_REDUCE_SCATTER)),
    .needs = 0,
    .flags = GEN_OPT_IN | GEN_RANK_ORDER,
    .cost = det_cost,
};
