/*
 * Double binary tree (after NCCL's idea): two complementary binary trees,
 * each carrying half of the data on its own channel(s); a rank that is a
 * leaf in one tree is interior in the other, so every rank's links carry
 * about the same load.
 *
 * Construction. A top rank T (the root, or rank 0 for allreduce) has one
 * child; the other m = nranks - 1 ranks, o_i = (T + i) mod nranks for
 * i = 1..m, sit at positions 1..m of an in-order binary tree: the root of a
 * position range is its element with the most trailing zero bits, its left
 * and right sub-ranges are the subtrees. In that tree odd positions are
 * exactly the leaves. Tree 0 puts o_i at position i; tree 1 puts o_i at
 * position m + 1 - i when m is even and at (i mod m) + 1 when m is odd, which
 * flips every position's parity (for odd m one rank stays a leaf in both).
 *
 * Channels. With an even channel count, channel c runs tree c % 2 on whole
 * blocks (K = 1). With an odd count, blocks are cut in K = 2 chunks: the
 * last channel runs tree 0 on chunk 0 and then tree 1 on chunk 1, the others
 * alternate trees on both chunks. Either way each tree carries half of the
 * data and the schedule has exactly the channels asked for.
 *
 *   allreduce  reduce up the tree, the top rank completes the sum, broadcast
 *              down (each element is reduced once, then copied).
 *   broadcast  down the tree from the root.
 *   reduce     up the tree to the root; interior non-roots keep partial sums
 *              in one scratch block.
 */
#include <stdlib.h>

#include "gen_util.h"

typedef struct btree {
  int *parent; /* -1 at the top */
  int *kid;    /* 2 per rank, -1 when absent */
} btree;

/* The element of [lo, hi] with the most trailing zeros. */
static int range_root(int lo, int hi) {
  for (int b = 30; b >= 0; b--) {
    int x = (hi >> b) << b;
    if (x >= lo && x > 0)
      return x;
  }
  return lo;
}

/* Places the members rk[lo..hi] (by position) under `parent` (slot 0 or
 * 1 of its children). */
static void build(const int *rk, int lo, int hi, int parent, int slot, int *par,
                  int *kid) {
  if (lo > hi)
    return;
  int x = range_root(lo, hi);
  int r = rk[x];
  par[r] = parent;
  if (parent >= 0)
    kid[2 * parent + slot] = r;
  build(rk, lo, x - 1, r, 0, par, kid);
  build(rk, x + 1, hi, r, 1, par, kid);
}

braid_result tree_dbt(int n, int top, int which, int *parent, int *kid) {
  if (n < 1 || top < 0 || top >= n || which < 0 || which > 1 || !parent || !kid)
    return ERR(BRAID_ERR_INVALID_ARG,
               "tree: no tree %d over %d members from member %d", which, n,
               top);
  int m = n - 1;
  int *rk = malloc(sizeof(int) * (size_t)(m + 1));
  if (!rk)
    return ERR(BRAID_ERR_NOMEM, "tree: no memory for a tree of %d members", n);
  for (int r = 0; r < n; r++) {
    parent[r] = -1;
    kid[2 * r] = kid[2 * r + 1] = -1;
  }
  for (int i = 1; i <= m; i++) {
    int pos = i;
    if (which == 1)
      pos = (m % 2 == 0) ? m + 1 - i : (i % m) + 1;
    rk[pos] = (top + i) % n;
  }
  /* The top member's single child is the root of the position tree. */
  build(rk, 1, m, top, 0, parent, kid);
  parent[top] = -1;
  free(rk);
  return BRAID_SUCCESS;
}

/* Builds tree `which` (0 or 1) with top rank `top` over n ranks. */
static braid_result make_tree(btree *t, int n, int top, int which) {
  t->parent = malloc(sizeof(int) * (size_t)n);
  t->kid = malloc(sizeof(int) * 2 * (size_t)n);
  if (!t->parent || !t->kid)
    return ERR(BRAID_ERR_NOMEM, "tree: no memory for a tree of %d ranks", n);
  return tree_dbt(n, top, which, t->parent, t->kid);
}

static void free_tree(btree *t) {
  free(t->parent);
  free(t->kid);
}

static int nkids(const btree *t, int r, int *k) {
  int nk = 0;
  for (int s = 0; s < 2; s++)
    if (t->kid[2 * r + s] >= 0)
      k[nk++] = t->kid[2 * r + s];
  return nk;
}

/* Reduce up: the sum of the subtree ends in `acc` (and is sent to the
 * parent), leaves send their input. */
static braid_result reduce_up(sched_channel *c, const btree *t, int r,
                              sched_chunks acc) {
  int k[2], nk = nkids(t, r, k), P = t->parent[r];
  sched_chunks in = sched_ck(SCHED_BUF_IN, acc.index, acc.count);
  if (nk == 0)
    return P >= 0 ? sched_send(c, P, in) : BRAID_SUCCESS;
  if (nk == 1) {
    if (P >= 0)
      return sched_recv_reduce_send(c, k[0], in, acc, P);
    return sched_recv_reduce(c, k[0], in, acc);
  }
  CHECKR(sched_recv_reduce(c, k[0], in, acc));
  if (P >= 0)
    CHECKR(sched_recv_reduce_send(c, k[1], acc, acc, P));
  else
    CHECKR(sched_recv_reduce(c, k[1], acc, acc));
  return BRAID_SUCCESS;
}

/* Broadcast down from out (the top already holds it in `from`). */
static braid_result bcast_down(sched_channel *c, const btree *t, int r,
                               sched_chunks from) {
  int k[2], nk = nkids(t, r, k), P = t->parent[r];
  sched_chunks out = sched_ck(SCHED_BUF_OUT, from.index, from.count);
  if (P < 0) {
    for (int i = 0; i < nk; i++)
      CHECKR(sched_send(c, k[i], from));
    return BRAID_SUCCESS;
  }
  if (nk == 0)
    return sched_recv(c, P, out);
  CHECKR(sched_recv_copy_send(c, P, out, k[0]));
  if (nk == 2)
    CHECKR(sched_send(c, k[1], out));
  return BRAID_SUCCESS;
}

/* The steps of rank r for tree t on chunks [j0, j0 + cnt). */
static braid_result tree_rank(sched_channel *c, const gen_params *p,
                              const btree *t, int top, int r, uint32_t j0,
                              uint32_t cnt) {
  switch (p->coll) {
  case SCHED_ALLREDUCE:
    CHECKR(reduce_up(c, t, r, gen_out(j0, cnt)));
    CHECKR(bcast_down(c, t, r, gen_out(j0, cnt)));
    break;
  case SCHED_BROADCAST:
    if (r == top) {
      CHECKR(bcast_down(c, t, r, gen_in(j0, cnt)));
      CHECKR(sched_copy(c, gen_in(j0, cnt), gen_out(j0, cnt)));
    } else {
      CHECKR(bcast_down(c, t, r, gen_out(j0, cnt)));
    }
    break;
  case SCHED_REDUCE:
    CHECKR(reduce_up(c, t, r, r == top ? gen_out(j0, cnt) : gen_scr(j0, cnt)));
    break;
  default:
    return ERR(BRAID_ERR_INTERNAL, "tree: no steps for %s",
               sched_coll_name(p->coll));
  }
  return BRAID_SUCCESS;
}

static braid_result tree_fill(sched *s, const gen_params *p, btree *t,
                              int top) {
  int n = p->nranks, nch = p->nchannels, K = s->chunks_per_block;
  if (n > 1) {
    CHECKR(make_tree(&t[0], n, top, 0));
    CHECKR(make_tree(&t[1], n, top, 1));
  }
  for (int ch = 0; ch < nch; ch++) {
    for (int r = 0; r < n; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      if (n == 1) {
        CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
      } else if (K == 2 && ch == nch - 1) {
        CHECKR(tree_rank(c, p, &t[0], top, r, 0, 1));
        CHECKR(tree_rank(c, p, &t[1], top, r, 1, 1));
      } else {
        CHECKR(tree_rank(c, p, &t[ch % 2], top, r, 0, (uint32_t)K));
      }
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_tree(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_tree_desc));
  int n = p->nranks, nch = p->nchannels;
  int K = (nch % 2 == 1 && n > 1) ? 2 : 1;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, K, nch, "tree", &s));
  if (p->coll == SCHED_REDUCE && n > 2)
    s->scratch_blocks = 1;
  int top = p->coll == SCHED_ALLREDUCE ? 0 : p->root;
  btree t[2] = {{NULL, NULL}, {NULL, NULL}};
  braid_result r = tree_fill(s, p, t, top);
  free_tree(&t[0]);
  free_tree(&t[1]);
  return gen_done(s, r, out);
}

/* Pipelined trees of depth L + 1 (the top rank adds one level); allreduce
 * goes up and down. */
static double tree_cost(const gen_cost_in *c) {
  double D = c->L + 1, S = c->S, m = c->m;
  if (c->coll == SCHED_ALLREDUCE)
    return 2 * (D + S - 1) * (c->a + m / S * c->b) + m * c->gm;
  return (D + S - 1) * (c->a + m / S * (c->b + c->red));
}

const gen_desc gen_tree_desc = {
    .name = "tree",
    .fn = gen_tree,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = 0,
    .flags = 0,
    .cost = tree_cost,
};
