/*
 * The hierarchical generators (hier, chaintree) over many host maps: even,
 * uneven, hosts of one rank, hosts whose ranks are not contiguous, 64 ranks,
 * an empty host in the view; every collective x roots x nchannels x in/out of
 * place x 8 and 2 slots through the verifier. Then what they promise beyond
 * correctness: hier allreduce moves 2 (H - 1) / H of each host's data across
 * hosts, chaintree's sequential inter-host hops grow like log2(H).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/gen_util.h"
#include "collectives/generators.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "tests/collectives/gen_try.h"

/* One verifier workspace for the whole test process (verify.h). */
static verify_ws *test_ws(void) {
  static verify_ws *w;
  if (w == NULL)
    w = verify_ws_new();
  return w;
}

#define MAXR 64

typedef struct hmap {
  int n, nhosts;
  int host[MAXR];
  char name[64];
} hmap;

static sched_view mkview(hmap *m, int *vertex) {
  for (int r = 0; r < m->n; r++)
    vertex[r] = -1;
  sched_view v = {NULL, m->n, vertex, m->host, m->nhosts, 1, 0};
  return v;
}

/* Contiguous hosts of the given sizes. */
static hmap sizes(const int *sz, int H) {
  hmap m = {0, H, {0}, ""};
  int len = snprintf(m.name, sizeof(m.name), "sizes");
  for (int h = 0; h < H; h++) {
    for (int i = 0; i < sz[h]; i++)
      m.host[m.n++] = h;
    if (len < (int)sizeof(m.name) - 4)
      len += snprintf(m.name + len, sizeof(m.name) - (size_t)len, " %d", sz[h]);
  }
  return m;
}

/* Rank r on host r % H. */
static hmap modmap(int n, int H) {
  hmap m = {n, H, {0}, ""};
  for (int r = 0; r < n; r++)
    m.host[r] = r % H;
  snprintf(m.name, sizeof(m.name), "n=%d host=r%%%d", n, H);
  return m;
}

/* Random hosts for n ranks on H hosts, every host non-empty (fixed seed). */
static hmap randmap(int n, int H, unsigned *seed) {
  hmap m = {n, H, {0}, ""};
  for (int r = 0; r < n; r++)
    m.host[r] = r < H ? r : (int)(rand_r(seed) % (unsigned)H);
  for (int r = n - 1; r > 0; r--) { /* shuffle */
    int k = (int)(rand_r(seed) % (unsigned)(r + 1)), t = m.host[r];
    m.host[r] = m.host[k];
    m.host[k] = t;
  }
  snprintf(m.name, sizeof(m.name), "random n=%d H=%d", n, H);
  return m;
}

static int nmaps;
static hmap maps[256];

static void add(hmap m) {
  cr_assert_lt(nmaps, 256);
  maps[nmaps++] = m;
}

static void build_maps(void) {
  if (nmaps)
    return;
  for (int H = 2; H <= 8; H++) /* even, contiguous */
    for (int k = 1; k <= 8; k++) {
      int sz[8];
      for (int h = 0; h < H; h++)
        sz[h] = k;
      add(sizes(sz, H));
    }
  static const int uneven[][9] = {
      {2, 3, 1},
      {2, 1, 5},
      {3, 1, 1, 4},
      {3, 8, 2, 5},
      {4, 1, 2, 3, 4},
      {5, 7, 1, 1, 6, 2},
      {8, 2, 3, 4, 5, 6, 7, 8, 1},
      {2, 1, 1},
      {2, 8, 1},
      {3, 2, 6, 3},
  };
  for (size_t i = 0; i < sizeof(uneven) / sizeof(uneven[0]); i++)
    add(sizes(&uneven[i][1], uneven[i][0]));
  add(modmap(6, 3));
  add(modmap(7, 3));
  add(modmap(10, 4));
  add(modmap(17, 5));
  add(modmap(64, 8));
  add(modmap(64, 3));
  int big[32] = {33};
  for (int h = 1; h < 32; h++)
    big[h] = 1;
  add(sizes(big, 32)); /* 64 ranks: one host of 33, 31 of one */
  int two[2] = {32, 32}, sixty4[64];
  add(sizes(two, 2));
  for (int h = 0; h < 64; h++)
    sixty4[h] = 1;
  add(sizes(sixty4, 64));
  unsigned seed = 12345;
  for (int i = 0; i < 8; i++)
    add(randmap(5 + 7 * i, 2 + i % 7, &seed));
  /* A view naming a host without ranks (host 1 of 3). */
  hmap e = {5, 3, {0, 2, 0, 2, 2}, "empty host 1"};
  add(e);
}

static int rooted(sched_coll c) {
  return c == SCHED_BROADCAST || c == SCHED_REDUCE;
}

/* Verifies every collective of generator `name` over every map; returns the
 * number of verifications. */
static int matrix(const char *name, int slots, int maxn) {
  const gen_desc *g = gen_find(name);
  cr_assert_not_null(g, "%s is not in gen_table", name);
  build_maps();
  int runs = 0, vertex[MAXR];
  for (int mi = 0; mi < nmaps; mi++) {
    hmap *m = &maps[mi];
    if (m->n > maxn)
      continue;
    sched_view v = mkview(m, vertex);
    int n = m->n;
    for (int c = 0; c < SCHED_NUM_COLLS; c++) {
      if (!gen_supports_view(g, (sched_coll)c, n, &v))
        continue;
      /* Roots: first, second, middle, last, and the last rank of the first
       * rank's host's neighbour (often on a small host). */
      int roots[5] = {0, 1 % n, n / 2, n - 1, 0}, nroots = rooted(c) ? 5 : 1;
      for (int r = 0; r < n; r++)
        if (m->host[r] != m->host[0])
          roots[4] = r;
      for (int ri = 0; ri < nroots; ri++) {
        int dup = 0;
        for (int k = 0; k < ri; k++)
          dup |= roots[k] == roots[ri];
        if (dup)
          continue;
        for (int nch = 1; nch <= 3; nch++) {
          if (nch == 3 && n > 16)
            continue;
          gen_params p = {(sched_coll)c, n, roots[ri], nch, &v, 0, 0};
          sched *s = gen_try(g->fn, &p);
          cr_assert_not_null(s, "%s %s %s root=%d nch=%d: no schedule", name,
                             sched_coll_name(c), m->name, roots[ri], nch);
          cr_assert_str_eq(s->algo, name);
          cr_assert_eq(s->nchannels, nch);
          cr_assert_eq(s->nranks, n);
          for (int ip = 0; ip < 2; ip++) {
            int rc = verify_sched_ws(s, ip, slots, test_ws());
            cr_assert_eq(rc, 0,
                         "%s %s [%s] root=%d nch=%d inplace=%d slots=%d: %s",
                         name, sched_coll_name(c), m->name, roots[ri], nch, ip,
                         slots, err_msg());
            runs++;
          }
          sched_free(s);
        }
      }
    }
  }
  return runs;
}

Test(hier, verify_8_slots) { cr_assert_gt(matrix("hier", 8, MAXR), 1000); }
Test(hier, verify_2_slots) {
  cr_assert_gt(matrix("hier", GEN_BURST, MAXR), 1000);
}
Test(chaintree, verify_8_slots) {
  cr_assert_gt(matrix("chaintree", 8, MAXR), 1000);
}
Test(chaintree, verify_2_slots) {
  cr_assert_gt(matrix("chaintree", GEN_BURST, MAXR), 1000);
}

/* No view, a view of one host, a view that does not match, a bad host. */
Test(hier, refuses_bad_views) {
  int vertex[MAXR], host[4] = {0, 0, 0, 0};
  sched_view one = {NULL, 4, vertex, host, 1, 1, 0};
  int bad[4] = {0, 1, 2, 1};
  sched_view badv = {NULL, 4, vertex, bad, 2, 1, 0};
  int ok[4] = {0, 1, 0, 1};
  sched_view okv = {NULL, 4, vertex, ok, 2, 1, 0};
  const char *names[] = {"hier", "chaintree"};
  for (int i = 0; i < 2; i++) {
    const gen_desc *g = gen_find(names[i]);
    gen_params p = {SCHED_ALLREDUCE, 4, 0, 1, NULL, 0, 0};
    cr_assert_null(gen_try(g->fn, &p), "%s without a view", names[i]);
    p.view = &one;
    cr_assert_null(gen_try(g->fn, &p), "%s on one host", names[i]);
    cr_assert_eq(gen_supports_view(g, SCHED_ALLREDUCE, 4, &one), 0);
    p.view = &badv;
    cr_assert_null(gen_try(g->fn, &p), "%s with host 2 of 2", names[i]);
    p.view = &okv;
    p.nranks = 3;
    cr_assert_null(gen_try(g->fn, &p), "%s with a view of 4 ranks for 3",
                   names[i]);
    p.nranks = 4;
    sched *s = gen_try(g->fn, &p);
    cr_assert_not_null(s);
    sched_free(s);
    p.coll = SCHED_ALLTOALL;
    cr_assert_null(gen_try(g->fn, &p), "%s made an alltoall", names[i]);
  }
}

static int cross(const hmap *m, int a, int b) {
  return a >= 0 && b >= 0 && m->host[a] != m->host[b];
}

/* Chunks rank r sends to other hosts (all channels; channels carry equal
 * shares, so per channel this is the same number). */
static long sent_across(const sched *s, const hmap *m, int r, int ch) {
  const sched_channel *c = sched_chan_c(s, r, ch);
  long k = 0;
  for (int i = 0; i < c->nsteps; i++) {
    const sched_step *st = &c->steps[i];
    if (st->prim == SCHED_P_SEND && cross(m, r, st->peer))
      k += st->src.count;
    if ((st->prim == SCHED_P_RECV_REDUCE_SEND ||
         st->prim == SCHED_P_RECV_COPY_SEND) &&
        cross(m, r, st->peer_out))
      k += st->dst.count;
  }
  return k;
}

/* hier allreduce: every host sends 2 (H - 1) / H of a block across hosts in
 * all (each rank 2 (H - 1) / (H n) of it with n ranks on every host); a
 * flat ring sends more whenever a host has several ranks placed apart. */
Test(hier, allreduce_traffic) {
  build_maps();
  int vertex[MAXR], checked = 0;
  for (int mi = 0; mi < nmaps; mi++) {
    hmap *m = &maps[mi];
    sched_view v = mkview(m, vertex);
    int H = 0, cnt[MAXR] = {0};
    for (int r = 0; r < m->n; r++)
      cnt[m->host[r]]++;
    for (int h = 0; h < m->nhosts; h++)
      H += cnt[h] > 0;
    gen_params p = {SCHED_ALLREDUCE, m->n, 0, 2, &v, 0, 0};
    sched *s = gen_try(gen_hier, &p);
    cr_assert_not_null(s);
    long K = s->chunks_per_block;
    for (int ch = 0; ch < 2; ch++) {
      long host_sum[MAXR] = {0};
      for (int r = 0; r < m->n; r++) {
        long k = sent_across(s, m, r, ch);
        host_sum[m->host[r]] += k;
        int nh = cnt[m->host[r]], even = 1;
        for (int h = 0; h < m->nhosts; h++)
          even &= cnt[h] == 0 || cnt[h] == nh;
        /* k / K == 2 (H - 1) / (H nh) */
        if (even)
          cr_assert_eq(k * H * nh, 2L * (H - 1) * K,
                       "[%s] rank %d sends %ld/%ld of a block across hosts",
                       m->name, r, k, K);
      }
      for (int h = 0; h < m->nhosts; h++)
        if (cnt[h])
          cr_assert_eq(host_sum[h] * H, 2L * (H - 1) * K,
                       "[%s] host %d sends %ld/%ld of a block across hosts",
                       m->name, h, host_sum[h], K);
    }
    checked++;
    sched_free(s);
  }
  cr_assert_gt(checked, 50);
  /* 8 hosts x 8 ranks: each rank sends 2*7/64 of a block across hosts. */
  hmap m = modmap(64, 8);
  sched_view v = mkview(&m, vertex);
  gen_params p = {SCHED_ALLREDUCE, 64, 0, 1, &v, 0, 0};
  sched *s = gen_try(gen_hier, &p);
  long k = sent_across(s, &m, 5, 0);
  cr_assert_eq(k * 64, 14L * s->chunks_per_block);
  sched_free(s);
  /* The flat ring on the same (non-contiguous) map crosses hosts at every
   * hop: 2 * 63 / 64 of a block per rank. */
  s = gen_try(gen_ring, &p);
  cr_assert_eq(sent_across(s, &m, 5, 0) * 64, 126L * s->chunks_per_block);
  sched_free(s);
}

/* hier allgather: each rank receives (H - 1) blocks from other hosts when
 * hosts are even (the least possible: every host needs (H - 1) n blocks). */
Test(hier, allgather_traffic) {
  int vertex[MAXR];
  for (int H = 2; H <= 8; H += 3)
    for (int k = 1; k <= 8; k *= 2) {
      hmap m = modmap(H * k, H);
      sched_view v = mkview(&m, vertex);
      gen_params p = {SCHED_ALLGATHER, H * k, 0, 1, &v, 0, 0};
      sched *s = gen_try(gen_hier, &p);
      cr_assert_not_null(s);
      for (int r = 0; r < H * k; r++)
        cr_assert_eq(sent_across(s, &m, r, 0), H - 1, "H=%d k=%d rank %d", H, k,
                     r);
      sched_free(s);
    }
}

/* Sequential inter-host hops: a logical clock over the schedule (unbounded
 * queues), +1 for every message between hosts; the largest at the end. */
#define QCAP 1024
static int hops(const sched *s, const hmap *m) {
  int n = s->nranks, best = 0;
  int *qt = malloc(sizeof(int) * (size_t)n * (size_t)n * QCAP);
  int *qh = calloc((size_t)n * (size_t)n, sizeof(int));
  int *ql = calloc((size_t)n * (size_t)n, sizeof(int));
  int *pc = calloc((size_t)n, sizeof(int)),
      *tm = calloc((size_t)n, sizeof(int));
  cr_assert(qt && qh && ql && pc && tm);
  for (int ch = 0; ch < s->nchannels; ch++) {
    memset(qh, 0, sizeof(int) * (size_t)n * (size_t)n);
    memset(ql, 0, sizeof(int) * (size_t)n * (size_t)n);
    memset(pc, 0, sizeof(int) * (size_t)n);
    memset(tm, 0, sizeof(int) * (size_t)n);
    for (int moved = 1; moved;) {
      moved = 0;
      for (int r = 0; r < n; r++) {
        const sched_channel *c = sched_chan_c(s, r, ch);
        while (pc[r] < c->nsteps) {
          const sched_step *st = &c->steps[pc[r]];
          int rx = st->prim != SCHED_P_SEND && st->prim != SCHED_P_COPY &&
                   st->prim != SCHED_P_REDUCE;
          int cnt = (int)(rx ? st->dst.count : st->src.count);
          if (rx) {
            int q = st->peer * n + r;
            if (ql[q] - qh[q] < cnt)
              break;
            for (int i = 0; i < cnt; i++) {
              int t = qt[(size_t)q * QCAP + (size_t)(qh[q]++ % QCAP)];
              tm[r] = t > tm[r] ? t : tm[r];
            }
          }
          int to = st->prim == SCHED_P_SEND ? st->peer
                   : (st->prim == SCHED_P_RECV_REDUCE_SEND ||
                      st->prim == SCHED_P_RECV_COPY_SEND)
                       ? st->peer_out
                       : -1;
          if (to >= 0) {
            int q = r * n + to;
            cr_assert_lt(ql[q] - qh[q] + cnt, QCAP, "queue %d->%d", r, to);
            for (int i = 0; i < cnt; i++)
              qt[(size_t)q * QCAP + (size_t)(ql[q]++ % QCAP)] =
                  tm[r] + cross(m, r, to);
          }
          pc[r]++;
          moved = 1;
        }
      }
    }
    for (int r = 0; r < n; r++) {
      cr_assert_eq(pc[r], sched_chan_c(s, r, ch)->nsteps, "rank %d stuck", r);
      best = tm[r] > best ? tm[r] : best;
    }
  }
  free(qt);
  free(qh);
  free(ql);
  free(pc);
  free(tm);
  return best;
}

static int ceil_log2(int x) {
  int l = 0;
  while ((1 << l) < x)
    l++;
  return l;
}

/* chaintree: the inter-host critical path of allreduce is twice the trees'
 * depth, at most 2 (ceil(log2 H) + 1), where hier's rail rings take
 * 2 (H - 1) hops; broadcast takes at most ceil(log2 H) + 1. */
Test(chaintree, depth_grows_like_log) {
  int vertex[MAXR], prev = 0;
  for (int H = 2; H <= 64; H *= 2) {
    int per = H <= 16 ? 64 / H < 4 ? 64 / H : 4 : 1;
    int sz[64];
    for (int h = 0; h < H; h++)
      sz[h] = per;
    hmap m = sizes(sz, H);
    sched_view v = mkview(&m, vertex);
    gen_params p = {SCHED_ALLREDUCE, m.n, 0, 2, &v, 0, 0};
    sched *s = gen_try(gen_chaintree, &p);
    cr_assert_not_null(s);
    int d = hops(s, &m), L = ceil_log2(H);
    cr_assert_leq(d, 2 * (L + 1), "H=%d: %d inter-host hops", H, d);
    cr_assert_geq(d, 2 * L, "H=%d: %d inter-host hops (below a tree's)", H, d);
    cr_assert_geq(d, prev, "H=%d: fewer hops than with H/2", H);
    prev = d;
    sched_free(s);
    s = gen_try(gen_hier, &p);
    cr_assert_eq(hops(s, &m), 2 * (H - 1), "hier H=%d", H);
    if (H >= 8)
      cr_assert_lt(d, 2 * (H - 1));
    sched_free(s);
    for (int root = 0; root < m.n; root += m.n / 2 + 1) {
      gen_params b = {SCHED_BROADCAST, m.n, root, 2, &v, 0, 0};
      s = gen_try(gen_chaintree, &b);
      cr_assert_leq(hops(s, &m), L + 1, "bcast H=%d root %d", H, root);
      sched_free(s);
    }
  }
}

/* The two inter-host trees are complementary: apart from the top host, a
 * leader forwards to other hosts in at most one of them. */
Test(chaintree, complementary_trees) {
  for (int H = 3; H <= 32; H++) {
    int par[2][64], kid[2][128];
    for (int w = 0; w < 2; w++)
      cr_assert_eq(tree_dbt(H, 0, w, par[w], kid[w]), 0);
    for (int h = 1; h < H; h++) {
      int in0 = kid[0][2 * h] >= 0 || kid[0][2 * h + 1] >= 0;
      int in1 = kid[1][2 * h] >= 0 || kid[1][2 * h + 1] >= 0;
      cr_assert(!(in0 && in1), "H=%d host %d interior in both trees", H, h);
      cr_assert(par[0][h] >= 0 && par[1][h] >= 0);
    }
    cr_assert_eq(par[0][0], -1);
  }
  cr_assert_eq(tree_dbt(0, 0, 0, NULL, NULL), BRAID_ERR_INVALID_ARG);
}
