/*
 * Hierarchical generator: rings inside each host, rings (or a chain) across
 * hosts, from the host map of p->view. Works for any host map with >= 2
 * hosts: uneven hosts, hosts of one rank, ranks of a host anywhere in rank
 * order.
 *
 * Notation: H hosts, host h has n_h ranks at local positions 0..n_h-1 (rank
 * order; reversed on odd channels, as is the host order, so that two
 * channels load both directions of every ring); P = max n_h.
 *
 *   allreduce  K = P * H. The block is cut into P pieces of H chunks; on
 *              host h piece i belongs to local position i mod n_h.
 *              1. reduce-scatter inside each host (ring over the host's
 *                 ranks): position q ends with its pieces reduced over the
 *                 host, in out;
 *              2. for each piece i, ring allreduce (H chunks, as ring.c) over
 *                 the ranks holding it, one per host ("rail" i); a rank
 *                 holding several pieces runs their rings in piece order;
 *              3. allgather inside each host.
 *              Each rank sends 2 (H - 1) / H of its pieces across hosts: with
 *              n ranks on every host, 2 (H - 1) / (H n) of the block.
 *   allgather  K = 1. 1. rail g (g < P; on host h the rank at position
 *              g mod n_h) runs a ring allgather across hosts of the blocks of
 *              the ranks at position g; 2. ring allgather inside each host of
 *              what each position gathered.
 *   reduce_scatter  the reverse: ring reduce-scatter inside each host into
 *              scratch (nranks blocks, indexed by block), then rail rings
 *              reduce-scatter across hosts; the owner finishes in out.
 *   broadcast  K = 1. Chain across the host leaders from the root (the
 *              root leads its host, the first rank leads the others), each
 *              leader then starts a chain through its host.
 *   reduce     the reverse: chains into each leader, a chain of leaders
 *              ending at the root; partial sums of non-roots in scratch.
 *
 * Rings inside a host move one chunk per step ("lanes": the ring runs once
 * for every chunk position of the groups it carries), so that no rank sends
 * more than one message ahead of its receives (deadlock-free with 2 slots).
 * Every element is reduced along one path (host ring, then rail ring) and
 * then copied: results are bitwise identical on every rank.
 */
#include <stdlib.h>

#include "gen_util.h"
#include "view.h"

/* ---- host layout (declared in gen_util.h) ---- */

void gen_hosts_free(gen_hosts *h) {
  free(h->host);
  free(h->loc);
  free(h->start);
  free(h->size);
  free(h->rank);
  h->host = h->loc = h->start = h->size = h->rank = NULL;
}

braid_result gen_hosts_init(gen_hosts *h, const gen_params *p) {
  static const char why[] =
      "the view puts every rank on one host or names a host it does not have";
  h->host = h->loc = h->start = h->size = h->rank = NULL;
  const sched_view *v = p ? p->view : NULL;
  if (!v || !v->host || v->nranks != p->nranks || v->nhosts < 1 ||
      p->nranks < 1)
    return ERR(BRAID_ERR_UNSUPPORTED, "%s", why);
  int n = p->nranks, nh = v->nhosts;
  for (int r = 0; r < n; r++)
    if (v->host[r] < 0 || v->host[r] >= nh)
      return ERR(BRAID_ERR_UNSUPPORTED, "%s", why);
  int *map = calloc((size_t)nh, sizeof(int));
  h->host = malloc(sizeof(int) * (size_t)n);
  h->loc = malloc(sizeof(int) * (size_t)n);
  h->rank = malloc(sizeof(int) * (size_t)n);
  h->start = calloc((size_t)nh + 1, sizeof(int));
  h->size = calloc((size_t)nh + 1, sizeof(int));
  if (!map || !h->host || !h->loc || !h->rank || !h->start || !h->size) {
    free(map);
    gen_hosts_free(h);
    return ERR(BRAID_ERR_NOMEM,
               "no memory for the host map of %d ranks on %d hosts", n, nh);
  }
  for (int r = 0; r < n; r++)
    map[v->host[r]]++;
  int H = 0;
  for (int x = 0; x < nh; x++)
    map[x] = map[x] ? H++ : -1;
  h->n = n;
  h->H = H;
  for (int r = 0; r < n; r++) {
    int x = map[v->host[r]];
    h->host[r] = x;
    h->loc[r] = h->size[x]++;
  }
  h->P = 0;
  for (int x = 0; x < H; x++) {
    h->start[x + 1] = h->start[x] + h->size[x];
    if (h->size[x] > h->P)
      h->P = h->size[x];
  }
  for (int r = 0; r < n; r++)
    h->rank[h->start[h->host[r]] + h->loc[r]] = r;
  free(map);
  if (H < 2) {
    gen_hosts_free(h);
    return ERR(BRAID_ERR_UNSUPPORTED, "%s", why);
  }
  return BRAID_SUCCESS;
}

/* ---- channel orders ---- */

typedef struct hctx {
  const gen_hosts *L;
  int rev; /* odd channel: host and local orders reversed */
  int K;
} hctx;

static int mod(int a, int m) { return ((a % m) + m) % m; }
/* Host at ring position q, and a host's position. */
static int host_at(const hctx *x, int q) {
  q = mod(q, x->L->H);
  return x->rev ? x->L->H - 1 - q : q;
}
static int host_pos(const hctx *x, int h) {
  return x->rev ? x->L->H - 1 - h : h;
}
/* Rank at local position q of host h, and a rank's local position. */
static int member(const hctx *x, int h, int q) {
  int n = x->L->size[h];
  q = mod(q, n);
  return x->L->rank[x->L->start[h] + (x->rev ? n - 1 - q : q)];
}
static int lpos(const hctx *x, int r) {
  int n = x->L->size[x->L->host[r]];
  return x->rev ? n - 1 - x->L->loc[r] : x->L->loc[r];
}

/* ---- allreduce ---- */

/* Chunk c of the piece at lane t of local position q on a host of n ranks
 * (-1 when that position has no t-th piece). */
static int ar_chunk(const hctx *x, int n, int q, int t, int c) {
  int i = mod(q, n) + t * n;
  return i < x->L->P ? i * x->L->H + c : -1;
}

static braid_result hier_allreduce(sched_channel *c, const hctx *x, int r) {
  const gen_hosts *L = x->L;
  int H = L->H, h = L->host[r], n = L->size[h], j = lpos(x, r);
  int next = member(x, h, j + 1), prev = member(x, h, j - 1);
  int T = (L->P + n - 1) / n;
  sched_buf part = n > 1 ? SCHED_BUF_OUT : SCHED_BUF_IN;
  /* 1. Reduce-scatter inside the host, one lane at a time. */
  for (int t = 0; n > 1 && t < T; t++)
    for (int cc = 0; cc < H; cc++) {
      int k = ar_chunk(x, n, j - 1, t, cc);
      if (k >= 0)
        CHECKR(sched_send(c, next, gen_in((uint32_t)k, 1)));
      for (int s = 1; s < n - 1; s++)
        if ((k = ar_chunk(x, n, j - 1 - s, t, cc)) >= 0)
          CHECKR(sched_recv_reduce_send(c, prev, gen_in((uint32_t)k, 1),
                                        gen_out((uint32_t)k, 1), next));
      if ((k = ar_chunk(x, n, j, t, cc)) >= 0)
        CHECKR(sched_recv_reduce(c, prev, gen_in((uint32_t)k, 1),
                                 gen_out((uint32_t)k, 1)));
    }
  /* 2. Ring allreduce of each of this rank's pieces across hosts. */
  int hp = host_pos(x, h);
  for (int i = j; i < L->P; i += n) {
    int nx = member(x, host_at(x, hp + 1), i);
    int pv = member(x, host_at(x, hp - 1), i);
#define CK(q) ((uint32_t)(i * H + mod((q), H)))
    CHECKR(sched_send(c, nx, sched_ck(part, CK(hp), 1)));
    for (int s = 1; s < H - 1; s++)
      CHECKR(sched_recv_reduce_send(c, pv, sched_ck(part, CK(hp - s), 1),
                                    gen_out(CK(hp - s), 1), nx));
    CHECKR(sched_recv_reduce_send(c, pv, sched_ck(part, CK(hp + 1), 1),
                                  gen_out(CK(hp + 1), 1), nx));
    for (int t = 0; t < H - 2; t++)
      CHECKR(sched_recv_copy_send(c, pv, gen_out(CK(hp - t), 1), nx));
    CHECKR(sched_recv(c, pv, gen_out(CK(hp + 2), 1)));
#undef CK
  }
  /* 3. Allgather inside the host, one lane at a time. */
  for (int t = 0; n > 1 && t < T; t++)
    for (int cc = 0; cc < H; cc++) {
      int k = ar_chunk(x, n, j, t, cc);
      if (k >= 0)
        CHECKR(sched_send(c, next, gen_out((uint32_t)k, 1)));
      for (int s = 1; s < n - 1; s++)
        if ((k = ar_chunk(x, n, j - s, t, cc)) >= 0)
          CHECKR(sched_recv_copy_send(c, prev, gen_out((uint32_t)k, 1), next));
      if ((k = ar_chunk(x, n, j + 1, t, cc)) >= 0)
        CHECKR(sched_recv(c, prev, gen_out((uint32_t)k, 1)));
    }
  return BRAID_SUCCESS;
}

/* ---- allgather / reduce_scatter ---- */

/* Lane t of the set gathered (allgather phase 1) by local position q of
 * host h: the blocks of the ranks at positions g = q + u n_h (g < P) on
 * every host, ordered by u, then by host position. -1 past the end. */
static int set_block(const hctx *x, int h, int q, int t) {
  const gen_hosts *L = x->L;
  int n = L->size[h];
  q = mod(q, n);
  for (int g = q; g < L->P; g += n)
    for (int a = 0; a < L->H; a++) {
      int hh = host_at(x, a);
      if (g < L->size[hh] && t-- == 0)
        return member(x, hh, g);
    }
  return -1;
}

static int set_lanes(const hctx *x, int h) {
  int m = 0;
  for (int q = 0; q < x->L->size[h]; q++) {
    int t = 0;
    while (set_block(x, h, q, t) >= 0)
      t++;
    if (t > m)
      m = t;
  }
  return m;
}

static braid_result hier_allgather(sched_channel *c, const hctx *x, int r) {
  const gen_hosts *L = x->L;
  int H = L->H, h = L->host[r], n = L->size[h], j = lpos(x, r);
  int hp = host_pos(x, h);
  CHECKR(sched_copy(c, gen_in(0, 1), gen_out((uint32_t)r, 1)));
  /* 1. Rails: ring allgather across hosts of the blocks at position g. */
  for (int g = j; g < L->P; g += n) {
    int nx = member(x, host_at(x, hp + 1), g);
    int pv = member(x, host_at(x, hp - 1), g);
    if (g < n) /* g == j: this rank's own block */
      CHECKR(sched_send(c, nx, gen_in(0, 1)));
    for (int t = 1; t < H; t++) {
      int hh = host_at(x, hp - t);
      if (g >= L->size[hh])
        continue;
      uint32_t b = (uint32_t)member(x, hh, g);
      if (t < H - 1)
        CHECKR(sched_recv_copy_send(c, pv, gen_out(b, 1), nx));
      else
        CHECKR(sched_recv(c, pv, gen_out(b, 1)));
    }
  }
  /* 2. Ring allgather inside the host of what each position gathered. */
  if (n < 2)
    return BRAID_SUCCESS;
  int next = member(x, h, j + 1), prev = member(x, h, j - 1);
  int lanes = set_lanes(x, h);
  for (int t = 0; t < lanes; t++) {
    int b = set_block(x, h, j, t);
    if (b >= 0)
      CHECKR(sched_send(c, next, gen_out((uint32_t)b, 1)));
    for (int s = 1; s < n - 1; s++)
      if ((b = set_block(x, h, j - s, t)) >= 0)
        CHECKR(sched_recv_copy_send(c, prev, gen_out((uint32_t)b, 1), next));
    if ((b = set_block(x, h, j + 1, t)) >= 0)
      CHECKR(sched_recv(c, prev, gen_out((uint32_t)b, 1)));
  }
  return BRAID_SUCCESS;
}

static braid_result hier_reduce_scatter(sched_channel *c, const hctx *x,
                                        int r) {
  const gen_hosts *L = x->L;
  int H = L->H, h = L->host[r], n = L->size[h], j = lpos(x, r);
  int hp = host_pos(x, h);
  sched_buf part = n > 1 ? SCHED_BUF_SCRATCH : SCHED_BUF_IN;
  /* 1. Ring reduce-scatter inside the host into scratch. */
  if (n > 1) {
    int next = member(x, h, j + 1), prev = member(x, h, j - 1);
    int lanes = set_lanes(x, h);
    for (int t = 0; t < lanes; t++) {
      int b = set_block(x, h, j - 1, t);
      if (b >= 0)
        CHECKR(sched_send(c, next, gen_in((uint32_t)b, 1)));
      for (int s = 1; s < n - 1; s++)
        if ((b = set_block(x, h, j - 1 - s, t)) >= 0)
          CHECKR(sched_recv_reduce_send(c, prev, gen_in((uint32_t)b, 1),
                                        gen_scr((uint32_t)b, 1), next));
      if ((b = set_block(x, h, j, t)) >= 0)
        CHECKR(sched_recv_reduce(c, prev, gen_in((uint32_t)b, 1),
                                 gen_scr((uint32_t)b, 1)));
    }
  }
  /* 2. Rails: ring reduce-scatter across hosts; block of the rank at
   * position g of host position a starts at position a + 1. */
  for (int g = j; g < L->P; g += n) {
    int nx = member(x, host_at(x, hp + 1), g);
    int pv = member(x, host_at(x, hp - 1), g);
    for (int s = 0; s < H; s++) {
      int hh = host_at(x, hp - 1 - s);
      if (g >= L->size[hh])
        continue;
      uint32_t b = (uint32_t)member(x, hh, g);
      sched_chunks src = sched_ck(part, b, 1);
      if (s == 0)
        CHECKR(sched_send(c, nx, src));
      else if (s < H - 1)
        CHECKR(sched_recv_reduce_send(c, pv, src, gen_scr(b, 1), nx));
      else
        CHECKR(sched_recv_reduce(c, pv, src, gen_out(0, 1)));
    }
  }
  return BRAID_SUCCESS;
}

/* ---- broadcast / reduce ---- */

/* Leader of host h for a rooted collective, and the local chain: leader,
 * then the host's other ranks in channel order. */
static int leader(const hctx *x, int h, int root) {
  return x->L->host[root] == h ? root : member(x, h, 0);
}
static int chain_at(const hctx *x, int h, int root, int i) {
  int ld = leader(x, h, root), lp = lpos(x, ld);
  return member(x, h, lp + i);
}
/* Host chain: the root's host first, then the others in channel order. */
static int hchain_at(const hctx *x, int root, int i) {
  return host_at(x, host_pos(x, x->L->host[root]) + i);
}

static braid_result hier_bcast(sched_channel *c, const hctx *x, int r,
                               int root) {
  const gen_hosts *L = x->L;
  int h = L->host[r], n = L->size[h], H = L->H;
  int ld = leader(x, h, root);
  int ci = mod(host_pos(x, h) - host_pos(x, L->host[root]), H);
  if (r == ld) {
    sched_chunks src = r == root ? gen_in(0, 1) : gen_out(0, 1);
    int nl = ci + 1 < H ? leader(x, hchain_at(x, root, ci + 1), root) : -1;
    if (r != root) {
      int pl = leader(x, hchain_at(x, root, ci - 1), root);
      CHECKR(nl >= 0 ? sched_recv_copy_send(c, pl, gen_out(0, 1), nl)
                     : sched_recv(c, pl, gen_out(0, 1)));
    } else {
      CHECKR(sched_send(c, nl, src));
    }
    if (n > 1)
      CHECKR(sched_send(c, chain_at(x, h, root, 1), src));
    if (r == root)
      CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
    return BRAID_SUCCESS;
  }
  int i = mod(lpos(x, r) - lpos(x, ld), n);
  int pv = chain_at(x, h, root, i - 1);
  if (i < n - 1)
    return sched_recv_copy_send(c, pv, gen_out(0, 1),
                                chain_at(x, h, root, i + 1));
  return sched_recv(c, pv, gen_out(0, 1));
}

static braid_result hier_reduce(sched_channel *c, const hctx *x, int r,
                                int root) {
  const gen_hosts *L = x->L;
  int h = L->host[r], n = L->size[h], H = L->H;
  int ld = leader(x, h, root);
  int ci = mod(host_pos(x, h) - host_pos(x, L->host[root]), H);
  if (r != ld) { /* chain towards the leader */
    int i = mod(lpos(x, r) - lpos(x, ld), n);
    int to = chain_at(x, h, root, i - 1);
    if (i == n - 1)
      return sched_send(c, to, gen_in(0, 1));
    return sched_recv_reduce_send(c, chain_at(x, h, root, i + 1), gen_in(0, 1),
                                  gen_scr(0, 1), to);
  }
  sched_chunks acc = r == root ? gen_out(0, 1) : gen_scr(0, 1);
  sched_chunks part = gen_in(0, 1);
  if (n > 1) {
    CHECKR(sched_recv_reduce(c, chain_at(x, h, root, 1), part, acc));
    part = acc;
  }
  int from = ci + 1 < H ? leader(x, hchain_at(x, root, ci + 1), root) : -1;
  if (r == root)
    return sched_recv_reduce(c, from, part, acc);
  int to = leader(x, hchain_at(x, root, ci - 1), root);
  if (from < 0)
    return sched_send(c, to, part);
  return sched_recv_reduce_send(c, from, part, acc, to);
}

static braid_result hier_fill(sched *s, const gen_hosts *L) {
  for (int ch = 0; ch < s->nchannels; ch++) {
    hctx x = {L, ch % 2, s->chunks_per_block};
    for (int r = 0; r < s->nranks; r++) {
      sched_channel *c = sched_chan(s, r, ch);
      switch (s->coll) {
      case SCHED_ALLREDUCE:
        CHECKR(hier_allreduce(c, &x, r));
        break;
      case SCHED_ALLGATHER:
        CHECKR(hier_allgather(c, &x, r));
        break;
      case SCHED_REDUCE_SCATTER:
        CHECKR(hier_reduce_scatter(c, &x, r));
        break;
      case SCHED_BROADCAST:
        CHECKR(hier_bcast(c, &x, r, s->root));
        break;
      case SCHED_REDUCE:
        CHECKR(hier_reduce(c, &x, r, s->root));
        break;
      default:
        return ERR(BRAID_ERR_INTERNAL, "hier: no steps for %s",
                   sched_coll_name(s->coll));
      }
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_hier(const gen_params *p, sched **out) {
  *out = NULL;
  CHECKR(gen_check(p, &gen_hier_desc));
  CHECKR(gen_check_view(p, &gen_hier_desc));
  gen_hosts L;
  braid_result r = gen_hosts_init(&L, p);
  if (r != BRAID_SUCCESS)
    return ERR_WRAP(r, "hier");
  long Kl = p->coll == SCHED_ALLREDUCE ? (long)L.P * L.H : 1;
  sched *s = NULL;
  if (Kl > GEN_MAX_RANKS)
    r = gen_refuse("hier: %d hosts of up to %d ranks make %ld chunks per "
                   "block (at most %d)",
                   L.H, L.P, Kl, GEN_MAX_RANKS);
  else
    r = sched_new(p->coll, p->nranks, p->root, (int)Kl, p->nchannels, "hier",
                  &s);
  if (r == BRAID_SUCCESS) {
    if (p->coll == SCHED_REDUCE_SCATTER)
      s->scratch_blocks = p->nranks;
    else if (p->coll == SCHED_REDUCE)
      s->scratch_blocks = 1;
    r = gen_done(s, hier_fill(s, &L), out);
  }
  gen_hosts_free(&L);
  return r;
}

const gen_desc gen_hier_desc = {
    .name = "hier",
    .fn = gen_hier,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_ALLGATHER) |
              (1u << SCHED_REDUCE_SCATTER) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = GEN_NEEDS_HOSTS,
    .flags = 0,
    .cost = NULL,
};
