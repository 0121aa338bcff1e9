/*
 * Recursive halving / doubling (Rabenseifner for allreduce).
 *
 * Non-powers of two: with p2 the largest power of two <= nranks and
 * rem = nranks - p2, the first 2 * rem ranks pair up (2i, 2i + 1). The even
 * rank folds its data into the odd one before the power-of-two phase and
 * gets the result back at the end; the odd rank takes part as "new rank" i,
 * every rank r >= 2 * rem as new rank r - rem. New rank groups map to
 * contiguous block ranges: new rank i < rem owns blocks {2i, 2i + 1}, new
 * rank i >= rem owns block i + rem.
 *
 *   allreduce       K = p2 chunks; reduce-scatter by recursive halving
 *                   (distance p2/2 down to 1; new rank i ends with chunk i
 *                   fully reduced), then allgather by recursive doubling.
 *   allgather       recursive doubling over new-rank groups of blocks.
 *   reduce_scatter  recursive halving over new-rank groups of blocks; the
 *                   partial sums live in scratch (nranks blocks, indexed by
 *                   block) and each rank copies its block to out at the end.
 *
 * Every pairwise exchange is cut into bursts (gen_exchange) so that both
 * partners never have more than GEN_BURST messages in flight towards the
 * other before receiving.
 */
#include "gen_util.h"

typedef struct rhd {
  int n, p2, rem;
} rhd;

static int new_rank(const rhd *h, int r) {
  if (r < 2 * h->rem)
    return (r & 1) ? r / 2 : -1;
  return r - h->rem;
}

static int old_rank(const rhd *h, int nr) {
  return nr < h->rem ? 2 * nr + 1 : nr + h->rem;
}

/* First block owned by new rank nr (nr == p2 gives nranks). */
static int first_block(const rhd *h, int nr) {
  return nr < h->rem ? 2 * nr : nr + h->rem;
}

static sched_chunks none(void) { return sched_ck(SCHED_BUF_NONE, 0, 0); }

static sched_chunks rng(sched_buf b, int lo, int hi) {
  if (hi <= lo)
    return none();
  return sched_ck(b, (uint32_t)lo, (uint32_t)(hi - lo));
}

static braid_result rhd_allreduce(sched_channel *c, const rhd *h, int r) {
  int K = h->p2, nr = new_rank(h, r);
  sched_buf cur = SCHED_BUF_IN;
  if (nr < 0) {
    CHECKR(sched_send(c, r + 1, gen_in(0, (uint32_t)K)));
    CHECKR(sched_recv(c, r + 1, gen_out(0, (uint32_t)K)));
    return BRAID_SUCCESS;
  }
  if (r < 2 * h->rem) {
    CHECKR(sched_recv_reduce(c, r - 1, gen_in(0, (uint32_t)K),
                             gen_out(0, (uint32_t)K)));
    cur = SCHED_BUF_OUT;
  }
  int lo = 0, hi = K;
  for (int d = h->p2 / 2; d >= 1; d /= 2) {
    int partner = old_rank(h, nr ^ d), half = (hi - lo) / 2;
    int klo = (nr & d) ? lo + half : lo, slo = (nr & d) ? lo : lo + half;
    CHECKR(gen_exchange(c, partner, rng(cur, slo, slo + half),
                        rng(SCHED_BUF_OUT, klo, klo + half),
                        rng(cur, klo, klo + half)));
    cur = SCHED_BUF_OUT;
    lo = klo;
    hi = klo + half;
  }
  for (int d = 1; d < h->p2; d *= 2) {
    int mine = nr & ~(d - 1), theirs = (nr ^ d) & ~(d - 1);
    CHECKR(gen_exchange(c, old_rank(h, nr ^ d),
                        rng(SCHED_BUF_OUT, mine, mine + d),
                        rng(SCHED_BUF_OUT, theirs, theirs + d), none()));
  }
  if (r < 2 * h->rem)
    CHECKR(sched_send(c, r - 1, gen_out(0, (uint32_t)K)));
  return BRAID_SUCCESS;
}

static braid_result rhd_allgather(sched_channel *c, const rhd *h, int r) {
  int nr = new_rank(h, r), n = h->n;
  CHECKR(sched_copy(c, gen_in(0, 1), gen_out((uint32_t)r, 1)));
  if (nr < 0) {
    CHECKR(sched_send(c, r + 1, gen_in(0, 1)));
    if (r > 0)
      CHECKR(sched_recv(c, r + 1, rng(SCHED_BUF_OUT, 0, r)));
    if (r + 1 < n)
      CHECKR(sched_recv(c, r + 1, rng(SCHED_BUF_OUT, r + 1, n)));
    return BRAID_SUCCESS;
  }
  if (r < 2 * h->rem)
    CHECKR(sched_recv(c, r - 1, gen_out((uint32_t)(r - 1), 1)));
  for (int d = 1; d < h->p2; d *= 2) {
    int a = nr & ~(d - 1), pa = (nr ^ d) & ~(d - 1);
    CHECKR(gen_exchange(
        c, old_rank(h, nr ^ d),
        rng(SCHED_BUF_OUT, first_block(h, a), first_block(h, a + d)),
        rng(SCHED_BUF_OUT, first_block(h, pa), first_block(h, pa + d)),
        none()));
  }
  if (r < 2 * h->rem) {
    if (r - 1 > 0)
      CHECKR(sched_send(c, r - 1, rng(SCHED_BUF_OUT, 0, r - 1)));
    if (r < n)
      CHECKR(sched_send(c, r - 1, rng(SCHED_BUF_OUT, r, n)));
  }
  return BRAID_SUCCESS;
}

static braid_result rhd_reduce_scatter(sched_channel *c, const rhd *h, int r) {
  int nr = new_rank(h, r), n = h->n;
  sched_buf cur = SCHED_BUF_IN;
  if (nr < 0) {
    CHECKR(sched_send(c, r + 1, gen_in(0, (uint32_t)n)));
    CHECKR(sched_recv(c, r + 1, gen_out(0, 1)));
    return BRAID_SUCCESS;
  }
  if (r < 2 * h->rem) {
    CHECKR(sched_recv_reduce(c, r - 1, gen_in(0, (uint32_t)n),
                             gen_scr(0, (uint32_t)n)));
    cur = SCHED_BUF_SCRATCH;
  }
  int lo = 0, hi = h->p2;
  for (int d = h->p2 / 2; d >= 1; d /= 2) {
    int partner = old_rank(h, nr ^ d), half = (hi - lo) / 2;
    int klo = (nr & d) ? lo + half : lo, slo = (nr & d) ? lo : lo + half;
    int kb0 = first_block(h, klo), kb1 = first_block(h, klo + half);
    int sb0 = first_block(h, slo), sb1 = first_block(h, slo + half);
    CHECKR(gen_exchange(c, partner, rng(cur, sb0, sb1),
                        rng(SCHED_BUF_SCRATCH, kb0, kb1), rng(cur, kb0, kb1)));
    cur = SCHED_BUF_SCRATCH;
    lo = klo;
    hi = klo + half;
  }
  if (r < 2 * h->rem)
    CHECKR(sched_send(c, r - 1, gen_scr((uint32_t)(r - 1), 1)));
  CHECKR(sched_copy(c, gen_scr((uint32_t)r, 1), gen_out(0, 1)));
  return BRAID_SUCCESS;
}

static braid_result rhd_fill(sched *s, const rhd *h) {
  for (int ch = 0; ch < s->nchannels; ch++) {
    for (int r = 0; r < h->n; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      if (h->n == 1) {
        CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
        continue;
      }
      switch (s->coll) {
      case SCHED_ALLREDUCE:
        CHECKR(rhd_allreduce(c, h, r));
        break;
      case SCHED_ALLGATHER:
        CHECKR(rhd_allgather(c, h, r));
        break;
      case SCHED_REDUCE_SCATTER:
        CHECKR(rhd_reduce_scatter(c, h, r));
        break;
      default:
        return ERR(BRAID_ERR_INTERNAL, "rhd: no steps for %s",
                   sched_coll_name(s->coll));
      }
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_rhd(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_rhd_desc));
  rhd h;
  h.n = p->nranks;
  h.p2 = 1;
  while (h.p2 * 2 <= h.n)
    h.p2 *= 2;
  h.rem = h.n - h.p2;
  int K = p->coll == SCHED_ALLREDUCE ? h.p2 : 1;
  sched *s;
  CHECKR(sched_new(p->coll, h.n, p->root, K, p->nchannels, "rhd", &s));
  if (p->coll == SCHED_REDUCE_SCATTER && h.n > 1)
    s->scratch_blocks = h.n;
  return gen_done(s, rhd_fill(s, &h), out);
}

/* Recursive halving/doubling over the largest power of two p2 <= n, the
 * other ranks folded in first. Exchanges go in bursts of GEN_BURST chunks:
 * distance d moves d chunks (or blocks) each way in ceil(d / GEN_BURST)
 * round trips. */
static double rhd_cost(const gen_cost_in *c) {
  int p2 = 1;
  while (p2 * 2 <= c->nranks)
    p2 *= 2;
  double l2 = 0;
  for (int d = 1; d < p2; d *= 2)
    l2 += (d + GEN_BURST - 1) / GEN_BURST;
  double P = p2, fold = c->nranks != p2, n = c->n, m = c->m, a = c->a;
  double b = c->b, gm = c->gm;
  switch (c->coll) {
  case SCHED_ALLREDUCE:
    return 2 * l2 * a + (P - 1) / P * m * (2 * b + gm) +
           fold * (2 * a + m * (2 * b + gm));
  case SCHED_ALLGATHER:
    return l2 * a + (n - 1) * m * b + fold * (2 * a + n * m * b);
  default: /* reduce_scatter */
    return l2 * a + (n - 1) * m * (b + gm) +
           fold * (2 * a + n * m * (b + gm) + m * b);
  }
}

const gen_desc gen_rhd_desc = {
    .name = "rhd",
    .fn = gen_rhd,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER)),
    .needs = 0,
    .flags = 0,
    .cost = rhd_cost,
};
