/*
 * Binomial trees rooted at `root` (rank 0 for allreduce). With virtual rank
 * v = (rank - root) mod nranks, v's parent is v with its lowest set bit
 * cleared and its children are v + 2^i for every 2^i below that bit (v = 0:
 * every power of two below nranks). The subtree of child v + 2^i covers the
 * virtual ranks [v + 2^i, min(v + 2^(i+1), nranks)).
 *
 *   broadcast  a rank receives from its parent, then sends to its children,
 *              largest subtree first.
 *   reduce     a rank reduces its children's sums (smallest subtree first)
 *              into its own and sends the result up; non-roots use one
 *              scratch block.
 *   allreduce  reduce to rank 0 (into out), then broadcast from rank 0.
 *   gather     a rank forwards its own block and then its subtree's blocks
 *              (kept in scratch in virtual-rank order) to its parent; the root
 *              receives them straight into out.
 *   scatter    the reverse of gather: the root sends each child its
 *              subtree's blocks; a rank keeps its block in out and the rest
 *              of its subtree's blocks in scratch.
 */
#include "gen_util.h"

static int lowbit(int v) { return v & -v; }

/* Highest power of two strictly below the limit of v's children: the
 * children of v are v + m for m = top/2 .. 1 (m < lowbit(v), or every power
 * of two below n for v = 0), keeping those < n. */
static int child_limit(int v, int n) {
  if (v)
    return lowbit(v);
  int m = 1;
  while (m < n)
    m <<= 1;
  return m;
}

static int subtree(int v, int n) {
  int lim = v ? v + lowbit(v) : n;
  return (lim < n ? lim : n) - v;
}

typedef struct bctx {
  int n, root, K;
} bctx;

static int real_rank(const bctx *b, int v) { return (v + b->root) % b->n; }

static braid_result bcast(sched_channel *c, const bctx *b, int v,
                          sched_chunks src) {
  int n = b->n, first = 1;
  if (v)
    src = gen_out(0, 1);
  for (int m = child_limit(v, n) / 2; m >= 1; m /= 2) {
    if (v + m >= n)
      continue;
    int kid = real_rank(b, v + m);
    if (v && first) {
      CHECKR(sched_recv_copy_send(c, real_rank(b, v - lowbit(v)), gen_out(0, 1),
                                  kid));
      first = 0;
      continue;
    }
    first = 0;
    CHECKR(sched_send(c, kid, src));
  }
  if (v && first)
    CHECKR(sched_recv(c, real_rank(b, v - lowbit(v)), gen_out(0, 1)));
  return BRAID_SUCCESS;
}

/* Reduce the subtree's sum into acc, sending it to the parent (non-root). */
static braid_result reduce(sched_channel *c, const bctx *b, int v,
                           sched_chunks acc) {
  int n = b->n;
  int kids[32], nk = 0;
  for (int m = 1; m < child_limit(v, n); m *= 2)
    if (v + m < n)
      kids[nk++] = real_rank(b, v + m);
  int parent = v ? real_rank(b, v - lowbit(v)) : -1;
  if (nk == 0)
    return parent >= 0 ? sched_send(c, parent, gen_in(0, 1)) : BRAID_SUCCESS;
  for (int i = 0; i < nk; i++) {
    sched_chunks src = i == 0 ? gen_in(0, 1) : acc;
    if (i == nk - 1 && parent >= 0)
      CHECKR(sched_recv_reduce_send(c, kids[i], src, acc, parent));
    else
      CHECKR(sched_recv_reduce(c, kids[i], src, acc));
  }
  return BRAID_SUCCESS;
}

/* Out block index of virtual ranks [v0, v0 + cnt) splits in at most two
 * contiguous real ranges. */
static braid_result gather(sched_channel *c, const bctx *b, int v) {
  int n = b->n, K = b->K;
  for (int m = 1; m < child_limit(v, n); m *= 2) {
    int u = v + m;
    if (u >= n)
      continue;
    int cnt = subtree(u, n), kid = real_rank(b, u);
    if (v == 0) {
      /* Real ranks root+u .. root+u+cnt-1 (mod n) into out. */
      int r0 = real_rank(b, u);
      int first = r0 + cnt <= n ? cnt : n - r0;
      CHECKR(sched_recv(c, kid,
                        gen_out((uint32_t)(r0 * K), (uint32_t)(first * K))));
      if (first < cnt)
        CHECKR(sched_recv(c, kid, gen_out(0, (uint32_t)((cnt - first) * K))));
    } else {
      CHECKR(sched_recv(
          c, kid, gen_scr((uint32_t)((u - v - 1) * K), (uint32_t)(cnt * K))));
    }
  }
  if (v == 0) {
    CHECKR(sched_copy(c, gen_in(0, (uint32_t)K),
                      gen_out((uint32_t)(b->root * K), (uint32_t)K)));
  } else {
    int parent = real_rank(b, v - lowbit(v)), cnt = subtree(v, n);
    CHECKR(sched_send(c, parent, gen_in(0, (uint32_t)K)));
    if (cnt > 1)
      CHECKR(sched_send(c, parent, gen_scr(0, (uint32_t)((cnt - 1) * K))));
  }
  return BRAID_SUCCESS;
}

static braid_result scatter(sched_channel *c, const bctx *b, int v) {
  int n = b->n, K = b->K;
  if (v == 0) {
    CHECKR(sched_copy(c, gen_in((uint32_t)(b->root * K), (uint32_t)K),
                      gen_out(0, (uint32_t)K)));
  } else {
    int parent = real_rank(b, v - lowbit(v)), cnt = subtree(v, n);
    CHECKR(sched_recv(c, parent, gen_out(0, (uint32_t)K)));
    if (cnt > 1)
      CHECKR(sched_recv(c, parent, gen_scr(0, (uint32_t)((cnt - 1) * K))));
  }
  for (int m = child_limit(v, n) / 2; m >= 1; m /= 2) {
    int u = v + m;
    if (u >= n)
      continue;
    int cnt = subtree(u, n), kid = real_rank(b, u);
    if (v == 0) {
      int r0 = real_rank(b, u);
      int first = r0 + cnt <= n ? cnt : n - r0;
      CHECKR(sched_send(c, kid,
                        gen_in((uint32_t)(r0 * K), (uint32_t)(first * K))));
      if (first < cnt)
        CHECKR(sched_send(c, kid, gen_in(0, (uint32_t)((cnt - first) * K))));
    } else {
      CHECKR(sched_send(
          c, kid, gen_scr((uint32_t)((u - v - 1) * K), (uint32_t)(cnt * K))));
    }
  }
  return BRAID_SUCCESS;
}

static braid_result binomial_fill(sched *s, const bctx *b) {
  int n = b->n, root = b->root;
  for (int ch = 0; ch < s->nchannels; ch++) {
    for (int r = 0; r < n; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      int v = ((r - root) % n + n) % n;
      if (n == 1) {
        CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
        continue;
      }
      switch (s->coll) {
      case SCHED_BROADCAST:
        CHECKR(bcast(c, b, v, gen_in(0, 1)));
        if (v == 0)
          CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
        break;
      case SCHED_REDUCE:
        CHECKR(reduce(c, b, v, v == 0 ? gen_out(0, 1) : gen_scr(0, 1)));
        break;
      case SCHED_ALLREDUCE:
        CHECKR(reduce(c, b, v, gen_out(0, 1)));
        CHECKR(bcast(c, b, v, gen_out(0, 1)));
        break;
      case SCHED_GATHER:
        CHECKR(gather(c, b, v));
        break;
      case SCHED_SCATTER:
        CHECKR(scatter(c, b, v));
        break;
      default:
        return ERR(BRAID_ERR_INTERNAL, "binomial: no steps for %s",
                   sched_coll_name(s->coll));
      }
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_binomial(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_binomial_desc));
  int n = p->nranks, K = 1;
  int root = p->coll == SCHED_ALLREDUCE ? 0 : p->root;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, K, p->nchannels, "binomial", &s));
  if (p->coll == SCHED_REDUCE && n > 2)
    s->scratch_blocks = 1;
  if ((p->coll == SCHED_GATHER || p->coll == SCHED_SCATTER) && n > 2) {
    /* The largest non-root subtree, less the rank's own block. */
    int big = 1;
    while (big * 2 < n)
      big *= 2;
    s->scratch_blocks = subtree(big, n) - 1;
    if (s->scratch_blocks < 0)
      s->scratch_blocks = 0;
    for (int v = 1; v < n; v++)
      if (subtree(v, n) - 1 > s->scratch_blocks)
        s->scratch_blocks = subtree(v, n) - 1;
  }
  bctx b = {n, root, K};
  return gen_done(s, binomial_fill(s, &b), out);
}

/* L rounds; gather and scatter move n - 1 blocks through the root. */
static double binomial_cost(const gen_cost_in *c) {
  double L = c->L, m = c->m, a = c->a, b = c->b;
  switch (c->coll) {
  case SCHED_ALLREDUCE:
    return 2 * L * a + L * m * (2 * b + c->gm);
  case SCHED_GATHER:
  case SCHED_SCATTER:
    return L * a + (c->n - 1) * m * b;
  default:
    return L * (a + m * (b + c->red));
  }
}

const gen_desc gen_binomial_desc = {
    .name = "binomial",
    .fn = gen_binomial,
    .colls =
        ((1u << SCHED_BROADCAST) | (1u << SCHED_REDUCE) | (1u << SCHED_GATHER) |
         (1u << SCHED_SCATTER) | (1u << SCHED_ALLREDUCE)),
    .needs = 0,
    .flags = 0,
    .cost = binomial_cost,
};
