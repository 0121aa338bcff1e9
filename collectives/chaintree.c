/*
 * Trees of chains (after NCCL's tree algorithm across nodes): a double
 * binary tree across hosts, one leader per host, and a chain inside each host
 * from the leader through the host's other ranks. The two trees (tree_dbt,
 * the trees tree.c builds over ranks, here over hosts) are complementary and
 * each carries half of the data: a leader interior in one is a leaf in the
 * other, so every host's network link carries about the same load. Latency
 * grows with the trees' depth, about log2(H) + 1 inter-host hops each way,
 * instead of the H - 1 of a ring across hosts.
 *
 * Leaders: the root for its host (broadcast, reduce), else the host's lowest
 * rank; the top of both trees is the root's host (rank 0's for allreduce).
 * The chain of a host is its leader, then its other ranks in rank order
 * (reversed on odd channels).
 *
 * Channels, as tree.c: with an even channel count, channel c runs tree
 * c % 2 on whole blocks (K = 1); with an odd count, blocks are cut in K = 2
 * chunks, the last channel runs tree 0 on chunk 0 and tree 1 on chunk 1, the
 * others alternate trees.
 *
 *   allreduce  reduce up each chain into its leader, up the tree to the top,
 *              which completes the sum; broadcast down the tree, then down
 *              each chain. Each element is reduced once, then copied.
 *   broadcast  down the tree from the root, then down each chain.
 *   reduce     up each chain, then up the tree to the root; non-roots keep
 *              partial sums in one scratch block.
 */
#include <stdlib.h>

#include "gen_util.h"

typedef struct ctree {
  const gen_hosts *L;
  int root;    /* rooted collectives: the root; allreduce: 0 */
  int rev;     /* odd channel: chains reversed */
  int *parent; /* per host: parent host in the tree, -1 at the top */
  int *kid;    /* per host: 2 child hosts, -1 when absent */
} ctree;

static int leader(const ctree *t, int h) {
  return t->L->host[t->root] == h ? t->root : t->L->rank[t->L->start[h]];
}

/* Rank at chain index i (0: the leader) of host h, and a rank's index. */
static int chain_at(const ctree *t, int h, int i) {
  const gen_hosts *L = t->L;
  int ld = leader(t, h), n = L->size[h];
  if (i == 0)
    return ld;
  int k = t->rev ? n - 1 - i : i - 1; /* among the non-leaders */
  int q = k < L->loc[ld] ? k : k + 1;
  return L->rank[L->start[h] + q];
}
static int chain_idx(const ctree *t, int r) {
  const gen_hosts *L = t->L;
  int h = L->host[r], ld = leader(t, h), n = L->size[h];
  if (r == ld)
    return 0;
  int q = L->loc[r], k = q < L->loc[ld] ? q : q - 1;
  return t->rev ? n - 1 - k : k + 1;
}

static sched_chunks as(sched_chunks c, sched_buf b) {
  return sched_ck(b, c.index, c.count);
}

/* Up the chain into the leader: the rank at chain index i > 0 adds its input
 * to what comes from index i + 1 and passes it to index i - 1, keeping the
 * partial sum in `acc`. */
static braid_result chain_up(sched_channel *c, const ctree *t, int r,
                             sched_chunks acc) {
  int h = t->L->host[r], n = t->L->size[h], i = chain_idx(t, r);
  sched_chunks in = as(acc, SCHED_BUF_IN);
  int to = chain_at(t, h, i - 1);
  if (i == n - 1)
    return sched_send(c, to, in);
  return sched_recv_reduce_send(c, chain_at(t, h, i + 1), in, acc, to);
}

/* Down the chain from the leader (which sends `from`). */
static braid_result chain_down(sched_channel *c, const ctree *t, int r,
                               sched_chunks from) {
  int h = t->L->host[r], n = t->L->size[h], i = chain_idx(t, r);
  if (i == 0)
    return n > 1 ? sched_send(c, chain_at(t, h, 1), from) : BRAID_SUCCESS;
  sched_chunks out = as(from, SCHED_BUF_OUT);
  int pv = chain_at(t, h, i - 1);
  if (i < n - 1)
    return sched_recv_copy_send(c, pv, out, chain_at(t, h, i + 1));
  return sched_recv(c, pv, out);
}

/* Leader of host h up the tree: `part` is the host's sum (or the leader's
 * input), the subtree's sum ends in `acc` and goes to the parent. */
static braid_result tree_up(sched_channel *c, const ctree *t, int h,
                            sched_chunks part, sched_chunks acc) {
  int k[2], nk = 0;
  for (int s = 0; s < 2; s++)
    if (t->kid[2 * h + s] >= 0)
      k[nk++] = leader(t, t->kid[2 * h + s]);
  int P = t->parent[h] >= 0 ? leader(t, t->parent[h]) : -1;
  if (nk == 0)
    return P >= 0 ? sched_send(c, P, part) : sched_copy(c, part, acc);
  if (nk == 1)
    return P >= 0 ? sched_recv_reduce_send(c, k[0], part, acc, P)
                  : sched_recv_reduce(c, k[0], part, acc);
  CHECKR(sched_recv_reduce(c, k[0], part, acc));
  if (P >= 0)
    return sched_recv_reduce_send(c, k[1], acc, acc, P);
  return sched_recv_reduce(c, k[1], acc, acc);
}

/* Leader of host h down the tree (the top sends `from`). */
static braid_result tree_down(sched_channel *c, const ctree *t, int h,
                              sched_chunks from) {
  int k[2], nk = 0;
  for (int s = 0; s < 2; s++)
    if (t->kid[2 * h + s] >= 0)
      k[nk++] = leader(t, t->kid[2 * h + s]);
  sched_chunks out = as(from, SCHED_BUF_OUT);
  if (t->parent[h] < 0) {
    for (int i = 0; i < nk; i++)
      CHECKR(sched_send(c, k[i], from));
    return BRAID_SUCCESS;
  }
  int P = leader(t, t->parent[h]);
  if (nk == 0)
    return sched_recv(c, P, out);
  CHECKR(sched_recv_copy_send(c, P, out, k[0]));
  if (nk == 2)
    CHECKR(sched_send(c, k[1], out));
  return BRAID_SUCCESS;
}

/* The steps of rank r on chunks [j0, j0 + cnt) for tree t. */
static braid_result ct_rank(sched_channel *c, sched_coll coll, const ctree *t,
                            int r, uint32_t j0, uint32_t cnt) {
  int h = t->L->host[r], n = t->L->size[h];
  int is_ld = r == leader(t, h);
  sched_chunks in = gen_in(j0, cnt), out = gen_out(j0, cnt);
  switch (coll) {
  case SCHED_ALLREDUCE:
    if (is_ld) {
      sched_chunks part = in;
      if (n > 1) {
        CHECKR(sched_recv_reduce(c, chain_at(t, h, 1), in, out));
        part = out;
      }
      CHECKR(tree_up(c, t, h, part, out));
      CHECKR(tree_down(c, t, h, out));
    } else {
      CHECKR(chain_up(c, t, r, out));
    }
    CHECKR(chain_down(c, t, r, out));
    break;
  case SCHED_BROADCAST:
    if (r == t->root) {
      CHECKR(tree_down(c, t, h, in));
      CHECKR(chain_down(c, t, r, in));
      CHECKR(sched_copy(c, in, out));
    } else {
      if (is_ld)
        CHECKR(tree_down(c, t, h, out));
      CHECKR(chain_down(c, t, r, out));
    }
    break;
  case SCHED_REDUCE: {
    sched_chunks acc = r == t->root ? out : gen_scr(j0, cnt);
    if (!is_ld)
      return chain_up(c, t, r, acc);
    sched_chunks part = in;
    if (n > 1) {
      CHECKR(sched_recv_reduce(c, chain_at(t, h, 1), in, acc));
      part = acc;
    }
    CHECKR(tree_up(c, t, h, part, acc));
    break;
  }
  default:
    return ERR(BRAID_ERR_INTERNAL, "chaintree: no steps for %s",
               sched_coll_name(coll));
  }
  return BRAID_SUCCESS;
}

static braid_result chaintree_fill(sched *s, const gen_hosts *L, int root,
                                   int *par, int *kid) {
  int H = L->H, nch = s->nchannels, K = s->chunks_per_block;
  ctree t[2] = {{L, root, 0, par, kid}, {L, root, 0, par + H, kid + 2 * H}};
  for (int w = 0; w < 2; w++)
    CHECKR(tree_dbt(H, L->host[root], w, t[w].parent, t[w].kid));
  for (int ch = 0; ch < nch; ch++) {
    t[0].rev = t[1].rev = ch % 2;
    for (int r = 0; r < s->nranks; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      if (K == 2 && ch == nch - 1) {
        CHECKR(ct_rank(c, s->coll, &t[0], r, 0, 1));
        CHECKR(ct_rank(c, s->coll, &t[1], r, 1, 1));
      } else {
        CHECKR(ct_rank(c, s->coll, &t[ch % 2], r, 0, (uint32_t)K));
      }
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_chaintree(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_chaintree_desc));
  CHECKR(gen_check_view(p, &gen_chaintree_desc));
  gen_hosts L;
  braid_result r = gen_hosts_init(&L, p);
  if (r != BRAID_SUCCESS)
    return ERR_WRAP(r, "chaintree");
  int nch = p->nchannels, H = L.H;
  int K = nch % 2 == 1 ? 2 : 1;
  int root = p->coll == SCHED_ALLREDUCE ? 0 : p->root;
  int *par = malloc(sizeof(int) * 2 * (size_t)H);
  int *kid = malloc(sizeof(int) * 4 * (size_t)H);
  sched *s = NULL;
  if (!par || !kid)
    r = ERR(BRAID_ERR_NOMEM, "chaintree: no memory for the trees of %d hosts",
            H);
  else
    r = sched_new(p->coll, p->nranks, p->root, K, nch, "chaintree", &s);
  if (r == BRAID_SUCCESS) {
    if (p->coll == SCHED_REDUCE)
      s->scratch_blocks = 1;
    r = gen_done(s, chaintree_fill(s, &L, root, par, kid), out);
  }
  free(par);
  free(kid);
  gen_hosts_free(&L);
  return r;
}

const gen_desc gen_chaintree_desc = {
    .name = "chaintree",
    .fn = gen_chaintree,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = GEN_NEEDS_HOSTS,
    .flags = 0,
    .cost = NULL,
};
