/*
 * Ring generator. Channel c runs its ring forwards when c is even and
 * backwards when c is odd, so that two channels load both directions of
 * every link.
 *
 *   allreduce       reduce-scatter then allgather, K = nranks chunks per
 *                   block; a chunk is reduced once, along the ring, and the
 *                   result travels on (RECV_REDUCE_SEND, RECV_COPY_SEND).
 *   allgather       nranks - 1 steps forwarding blocks (RECV_COPY_SEND).
 *   reduce_scatter  block b's partial sum starts at the rank after b and ends
 *                   at b; partial sums live in one scratch block.
 *   broadcast       pipelined chain from the root along the ring.
 *   reduce          pipelined chain ending at the root; non-roots keep the
 *                   partial sum in scratch.
 */
#include "gen_util.h"

#include <stdlib.h>

/* A ring: rank order 0, 1, .. n-1 forwards (dir > 0) or backwards, or, when
 * ord is set, the order ord[0..n) (pos its inverse: pos[ord[p]] == p). */
typedef struct ring {
  int n, dir;
  const int *ord, *pos;
} ring;

/* Position of rank r on the ring, and the rank at position p. */
static int rpos(const ring *g, int r) {
  if (g->ord)
    return g->pos[r];
  return g->dir > 0 ? r : (g->n - r) % g->n;
}
static int rrank(const ring *g, int p) {
  p = ((p % g->n) + g->n) % g->n;
  if (g->ord)
    return g->ord[p];
  return g->dir > 0 ? p : (g->n - p) % g->n;
}

static braid_result ring_allreduce(sched_channel *c, const ring *g, int r) {
  int n = g->n, p = rpos(g, r);
  int next = rrank(g, p + 1), prev = rrank(g, p - 1);
#define CH(x) ((uint32_t)((((x) % n) + n) % n))
  /* Reduce-scatter: step s sends chunk p - s and receives chunk p - s - 1. */
  CHECKR(sched_send(c, next, gen_in(CH(p), 1)));
  for (int s = 1; s < n - 1; s++)
    CHECKR(sched_recv_reduce_send(c, prev, gen_in(CH(p - s), 1),
                                  gen_out(CH(p - s), 1), next));
  /* Chunk p + 1 is now complete here: finish it and start the allgather. */
  CHECKR(sched_recv_reduce_send(c, prev, gen_in(CH(p + 1), 1),
                                gen_out(CH(p + 1), 1), next));
  for (int t = 0; t < n - 2; t++)
    CHECKR(sched_recv_copy_send(c, prev, gen_out(CH(p - t), 1), next));
  CHECKR(sched_recv(c, prev, gen_out(CH(p + 2), 1)));
#undef CH
  return BRAID_SUCCESS;
}

static braid_result ring_allgather(sched_channel *c, const ring *g, int r,
                                   int K) {
  int n = g->n, p = rpos(g, r);
  int next = rrank(g, p + 1), prev = rrank(g, p - 1);
  CHECKR(sched_send(c, next, gen_in(0, K)));
  CHECKR(sched_copy(c, gen_in(0, K), gen_out((uint32_t)(r * K), K)));
  for (int t = 1; t < n; t++) {
    int b = rrank(g, p - t);
    if (t < n - 1)
      CHECKR(
          sched_recv_copy_send(c, prev, gen_out((uint32_t)(b * K), K), next));
    else
      CHECKR(sched_recv(c, prev, gen_out((uint32_t)(b * K), K)));
  }
  return BRAID_SUCCESS;
}

static braid_result ring_reduce_scatter(sched_channel *c, const ring *g, int r,
                                        int K) {
  int n = g->n, p = rpos(g, r);
  int next = rrank(g, p + 1), prev = rrank(g, p - 1);
  /* Block of the rank at position q. */
#define BLK(q) gen_in((uint32_t)(rrank(g, q) * K), K)
  CHECKR(sched_send(c, next, BLK(p - 1)));
  for (int s = 1; s < n - 1; s++)
    CHECKR(
        sched_recv_reduce_send(c, prev, BLK(p - 1 - s), gen_scr(0, K), next));
  CHECKR(sched_recv_reduce(c, prev, BLK(p), gen_out(0, K)));
#undef BLK
  return BRAID_SUCCESS;
}

static braid_result ring_broadcast(sched_channel *c, const ring *g, int r,
                                   int root, int K) {
  int n = g->n, p = rpos(g, r);
  int next = rrank(g, p + 1), prev = rrank(g, p - 1);
  int d = ((p - rpos(g, root)) % n + n) % n;
  if (d == 0) {
    CHECKR(sched_send(c, next, gen_in(0, K)));
    CHECKR(sched_copy(c, gen_in(0, K), gen_out(0, K)));
  } else if (d < n - 1) {
    CHECKR(sched_recv_copy_send(c, prev, gen_out(0, K), next));
  } else {
    CHECKR(sched_recv(c, prev, gen_out(0, K)));
  }
  return BRAID_SUCCESS;
}

static braid_result ring_reduce(sched_channel *c, const ring *g, int r,
                                int root, int K) {
  int n = g->n, p = rpos(g, r);
  int next = rrank(g, p + 1), prev = rrank(g, p - 1);
  int d = ((p - rpos(g, root)) % n + n) % n;
  if (d == 0)
    CHECKR(sched_recv_reduce(c, prev, gen_in(0, K), gen_out(0, K)));
  else if (d == 1)
    CHECKR(sched_send(c, next, gen_in(0, K)));
  else
    CHECKR(sched_recv_reduce_send(c, prev, gen_in(0, K), gen_scr(0, K), next));
  return BRAID_SUCCESS;
}

/* The steps of every rank on channel ch of s for ring g. */
static braid_result ring_fill(sched *s, int ch, const ring *g) {
  int n = s->nranks, K = s->chunks_per_block;
  for (int r = 0; r < n; r++) {
    sched_channel *c = sched_chan(s, r, ch);
    if (n == 1) {
      /* One rank: the result is the input. */
      CHECKR(sched_copy(c, gen_in(0, K), gen_out(0, K)));
      continue;
    }
    switch (s->coll) {
    case SCHED_ALLREDUCE:
      CHECKR(ring_allreduce(c, g, r));
      break;
    case SCHED_ALLGATHER:
      CHECKR(ring_allgather(c, g, r, K));
      break;
    case SCHED_REDUCE_SCATTER:
      CHECKR(ring_reduce_scatter(c, g, r, K));
      break;
    case SCHED_BROADCAST:
      CHECKR(ring_broadcast(c, g, r, s->root, K));
      break;
    case SCHED_REDUCE:
      CHECKR(ring_reduce(c, g, r, s->root, K));
      break;
    default:
      return ERR(BRAID_ERR_INTERNAL, "ring: no steps for %s",
                 sched_coll_name(s->coll));
    }
  }
  return BRAID_SUCCESS;
}

braid_result ring_sched_new(const gen_params *p, int nchannels,
                            const char *algo, sched **out) {
  *out = NULL;
  if (!p || (int)p->coll < 0 || p->coll >= SCHED_NUM_COLLS ||
      !(gen_ring_desc.colls & (1u << p->coll)) || p->nranks < 1 ||
      p->nranks > GEN_MAX_RANKS || nchannels < 1 ||
      nchannels > GEN_MAX_CHANNELS)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s: no ring schedule of %d channels for %s on %d ranks", algo,
               nchannels, p ? sched_coll_name(p->coll) : "nothing",
               p ? p->nranks : 0);
  if ((p->coll == SCHED_BROADCAST || p->coll == SCHED_REDUCE) &&
      (p->root < 0 || p->root >= p->nranks))
    return ERR(BRAID_ERR_INVALID_ARG, "%s: root %d is not a rank of %d", algo,
               p->root, p->nranks);
  int n = p->nranks;
  int K = (p->coll == SCHED_ALLREDUCE && n > 1) ? n : 1;
  sched *s;
  CHECKR(sched_new(p->coll, n, p->root, K, nchannels, algo, &s));
  if ((p->coll == SCHED_REDUCE_SCATTER || p->coll == SCHED_REDUCE) && n > 2)
    s->scratch_blocks = 1;
  *out = s;
  return BRAID_SUCCESS;
}

braid_result ring_build_channel(sched *s, int ch, const int *order) {
  if (!s || !order || ch < 0 || ch >= s->nchannels)
    return ERR(BRAID_ERR_INVALID_ARG, "ring: no channel %d to build", ch);
  int n = s->nranks;
  int *pos = malloc((size_t)n * sizeof(int));
  if (!pos)
    return ERR(BRAID_ERR_NOMEM, "ring: no memory for the positions of %d ranks",
               n);
  for (int r = 0; r < n; r++)
    pos[r] = -1;
  int bad = -1;
  for (int q = 0; q < n && bad < 0; q++) {
    if (order[q] < 0 || order[q] >= n || pos[order[q]] >= 0)
      bad = q; /* not a permutation of the ranks */
    else
      pos[order[q]] = q;
  }
  ring g = {n, 1, order, pos};
  braid_result r =
      bad >= 0 ? ERR(BRAID_ERR_INVALID_ARG,
                     "ring: channel %d's order names rank %d at %d: not a "
                     "permutation of the %d ranks",
                     ch, order[bad], bad, n)
               : ring_fill(s, ch, &g);
  free(pos);
  return r;
}

static braid_result ring_fill_all(sched *s) {
  for (int ch = 0; ch < s->nchannels; ch++) {
    ring g = {s->nranks, (ch % 2 == 0) ? 1 : -1, NULL, NULL};
    CHECKR(ring_fill(s, ch, &g));
  }
  return BRAID_SUCCESS;
}

braid_result gen_ring(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_ring_desc));
  sched *s;
  CHECKR(ring_sched_new(p, p->nchannels, "ring", &s));
  return gen_done(s, ring_fill_all(s), out);
}

/* Allreduce: reduce-scatter then allgather, 2 (n - 1) steps of m / n;
 * allgather, reduce_scatter: n - 1 steps of a block; broadcast, reduce: a
 * chain pipelined in S slices. */
static double ring_cost(const gen_cost_in *c) {
  double n = c->n, m = c->m, a = c->a, b = c->b;
  switch (c->coll) {
  case SCHED_ALLREDUCE:
    return 2 * (n - 1) * (a + m / n * b) + (n - 1) * m / n * c->gm;
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
    return (n - 1) * (a + m * (b + c->red));
  default: /* broadcast, reduce: pipelined chain */
    return (n - 1 + c->S - 1) * (a + m / c->S * (b + c->red));
  }
}

const gen_desc gen_ring_desc = {
    .name = "ring",
    .fn = gen_ring,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = 0,
    .flags = 0,
    .cost = ring_cost,
};
