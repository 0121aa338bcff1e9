/*
 * Helpers shared by the generators (collectives/<algo>.c). Internal to
 * collectives/.
 */
#ifndef BRAID_COLLECTIVES_GEN_UTIL_H
#define BRAID_COLLECTIVES_GEN_UTIL_H

#include "generators.h"

/* Symmetric exchanges (both partners send, then receive) are cut into bursts
 * of at most GEN_BURST chunks, so that a runtime buffering at least GEN_BURST
 * messages per connection cannot deadlock on them (BRAID_NSLOTS >= 2). */
#define GEN_BURST 2
/* Upper bounds the generators accept. */
#define GEN_MAX_RANKS 65536
#define GEN_MAX_CHANNELS 64

/* A generator's refusal: the reason, in words the user sees and naming the
 * generator, becomes the thread's message; gives BRAID_ERR_UNSUPPORTED. */
#define gen_refuse(...) ERR(BRAID_ERR_UNSUPPORTED, __VA_ARGS__)

/* A generator's last step: *out = s when r is BRAID_SUCCESS, else s is
 * freed (and *out left as it is: NULL). Returns r. */
static inline braid_result gen_done(sched *s, braid_result r, sched **out) {
  if (r != BRAID_SUCCESS)
    sched_free(s);
  else
    *out = s;
  return r;
}

/* Validates p for generator d (its collectives, the rank and channel
 * counts, the root): BRAID_SUCCESS when usable, else a refusal (gen_refuse)
 * saying why; BRAID_ERR_INVALID_ARG when p or d is NULL. */
braid_result gen_check(const gen_params *p, const gen_desc *d);

/* Checks that p's view gives what d needs (d->needs: GEN_NEEDS_GRAPH,
 * GEN_NEEDS_HOSTS): BRAID_SUCCESS, or a refusal saying why. */
braid_result gen_check_view(const gen_params *p, const gen_desc *d);

/* The cost model's contention of n - 1 simultaneous streams into or out of
 * one rank (incast, cache and memory traffic): 5% more per byte for every
 * stream beyond the first, at most twice the time (direct.c, det.c). */
static inline double gen_cost_contention(double n) {
  double cont = 1 + 0.05 * (n - 2);
  return cont > 2 ? 2 : cont;
}

/* Chunk range shorthands. */
static inline sched_chunks gen_in(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_IN, i, n);
}
static inline sched_chunks gen_out(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_OUT, i, n);
}
static inline sched_chunks gen_scr(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_SCRATCH, i, n);
}

/* Pairwise exchange with `peer`: sends `snd` and receives into `rcv`
 * (RECV, or RECV_REDUCE with local operand `rsrc` when rsrc.buf != NONE),
 * interleaved in bursts of GEN_BURST chunks. Either range may have count 0
 * (then buf must be SCHED_BUF_NONE or count 0). Fails as sched_add. */
braid_result gen_exchange(sched_channel *c, int peer, sched_chunks snd,
                          sched_chunks rcv, sched_chunks rsrc);

/* The rank-order fold of one chunk at rank r of n >= 2 (direct.c, det.c):
 * dst = x0 op x1 op .. op x(n-1), folded left to right, where rank r's own
 * operand is `mine` and every other rank q's arrives from q, received in
 * rank order. Rank 1 reduces rank 0's message with mine straight into dst
 * (RECV_REDUCE_REV); ranks r > 1 fold the operands before their own in
 * `scr` (mine may alias dst in place); dst may be scr. Every rank that folds a
 * chunk this way gets the same bits (collectives/verify.h,
 * verify_rank_order). Fails as sched_add. */
braid_result gen_fold_rank_order(sched_channel *c, int n, int r,
                                 sched_chunks mine, sched_chunks scr,
                                 sched_chunks dst);

/* Ring steps (ring.c) for generators that choose their own ring orders
 * (multiring.c, hybrid.c). ring_sched_new makes a schedule of `nchannels`
 * channels for p's collective (allreduce, allgather, reduce_scatter,
 * broadcast, reduce) with the geometry ring steps need (K, scratch) into
 * *out; ring_build_channel appends, for every rank, channel ch's steps on
 * the ring order[0] -> order[1] -> .. -> order[n-1] -> order[0] (order: a
 * permutation of the ranks). BRAID_ERR_INVALID_ARG on bad arguments,
 * BRAID_ERR_NOMEM, with the message. */
braid_result ring_sched_new(const gen_params *p, int nchannels,
                            const char *algo, sched **out);
braid_result ring_build_channel(sched *s, int ch, const int *order);

/* Double binary tree (tree.c) over n members 0..n-1 with top member `top`
 * (which has one child): fills parent[0..n) (-1 at the top) and
 * kid[0..2n) (kid[2i], kid[2i+1]: member i's children, -1 when absent) of
 * tree `which` (0 or 1). The two trees are complementary: a member interior
 * in one is a leaf in the other. tree.c's schedules use exactly these trees
 * over ranks. BRAID_ERR_INVALID_ARG on bad arguments, BRAID_ERR_NOMEM. */
braid_result tree_dbt(int n, int top, int which, int *parent, int *kid);

/* The ranks of p->view grouped by host (hier.c), for the hierarchical
 * generators. Hosts without ranks are dropped and the others renumbered
 * 0..H-1 in the view's order; ranks keep rank order within a host. */
typedef struct gen_hosts {
  int n;      /* ranks */
  int H;      /* hosts with ranks */
  int P;      /* ranks on the largest host */
  int *host;  /* per rank: host 0..H-1 */
  int *loc;   /* per rank: index within its host */
  int *start; /* per host: first entry in rank[] */
  int *size;  /* per host: its ranks */
  int *rank;  /* ranks, host after host */
} gen_hosts;
/* BRAID_ERR_UNSUPPORTED ("the view puts every rank on one host or names a
 * host it does not have") when p has no view, the view does not match
 * p->nranks, names a host outside 0..nhosts-1 or puts every rank on one
 * host; BRAID_ERR_NOMEM. The caller names itself (ERR_WRAP). */
braid_result gen_hosts_init(gen_hosts *h, const gen_params *p);
void gen_hosts_free(gen_hosts *h);

/* Ring plans: a ring order per channel, shared by multiring.c (which finds
 * them) and hybrid.c. */
typedef struct ring_plan {
  int n;          /* ranks */
  int nch;        /* channels */
  int *order;     /* nch * n: channel c's ring order at order + c * n */
  double *bw;     /* per channel: bottleneck GB/s of one direction */
  uint8_t *route; /* per channel: sched_route */
} ring_plan;
/* Room for `cap` channels of n ranks; BRAID_SUCCESS or BRAID_ERR_NOMEM. */
braid_result ring_plan_alloc(ring_plan *pl, int n, int cap);
void ring_plan_free(ring_plan *pl);
/* Appends ring `ord` as one channel, and when `both` the same ring backwards
 * (ord[0], ord[n-1], .., ord[1]) as the next one. The caller keeps nch within
 * the capacity. */
void ring_plan_add(ring_plan *pl, const int *ord, double bw, int route,
                   int both);
/* The rings multiring uses on view v (multiring.c), at most max_channels
 * channels (0: GEN_MAX_CHANNELS): BRAID_SUCCESS, BRAID_ERR_UNSUPPORTED ("no
 * ring through every rank's vertex": a bad view, a pair of ranks without a
 * path; the caller names itself) or BRAID_ERR_NOMEM. */
braid_result multiring_plan(const struct sched_view *v, int max_channels,
                            ring_plan *pl);
/* A schedule of ring steps (ring_build_channel) with one channel per plan
 * channel, routes from the plan and weights proportional to `weights` (NULL:
 * to the plan's bandwidths), into *out. */
braid_result ring_plan_sched(const gen_params *p, const ring_plan *pl,
                             const double *weights, const char *algo,
                             sched **out);
/* Does v place p's nranks ranks on distinct vertices of a graph? 0 yes. */
int mr_view_check(const struct sched_view *v, int nranks);

#endif
