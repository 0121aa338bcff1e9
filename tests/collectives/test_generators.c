/*
 * Every generator x every collective it supports x nranks 1..64 x a few
 * roots x nchannels {1, 2} x in/out of place, through the verifier.
 */
#include <criterion/criterion.h>
#include <stdio.h>
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

static int rooted(sched_coll c) {
  return c == SCHED_BROADCAST || c == SCHED_REDUCE || c == SCHED_GATHER ||
         c == SCHED_SCATTER || c == SCHED_SEND || c == SCHED_RECV;
}

/* Runs the matrix for one generator; returns the number of verifications. */
static int matrix(const char *name, int maxn, int slots) {
  const gen_desc *g = gen_find(name);
  cr_assert_not_null(g, "generator %s not in gen_table", name);
  int runs = 0;
  for (int c = 0; c < SCHED_NUM_COLLS; c++) {
    for (int n = 1; n <= maxn; n++) {
      if (!gen_supports(g, (sched_coll)c, n))
        continue;
      int roots[4] = {0, 1 % n, n / 2, n - 1}, nroots = rooted(c) ? 4 : 1;
      for (int ri = 0; ri < nroots; ri++) {
        int dup = 0;
        for (int k = 0; k < ri; k++)
          dup |= roots[k] == roots[ri];
        if (dup)
          continue;
        for (int nch = 1; nch <= 3; nch++) {
          gen_params p = {(sched_coll)c, n, roots[ri], nch, NULL, 0, 0};
          sched *s = gen_try(g->fn, &p);
          cr_assert_not_null(s, "%s %s n=%d root=%d nch=%d: no schedule", name,
                             sched_coll_name(c), n, roots[ri], nch);
          cr_assert_str_eq(s->algo, name);
          cr_assert_eq(s->coll, (sched_coll)c);
          cr_assert_eq(s->nranks, n);
          /* The executor runs at most the channels it asked for. */
          cr_assert_eq(s->nchannels, nch);
          for (int ip = 0; ip < 2; ip++) {
            int rc = verify_sched_ws(s, ip, slots, test_ws());
            cr_assert_eq(rc, 0,
                         "%s %s n=%d root=%d nch=%d inplace=%d slots=%d: %s",
                         name, sched_coll_name(c), n, roots[ri], nch, ip, slots,
                         err_msg());
            runs++;
          }
          sched_free(s);
        }
      }
    }
  }
  return runs;
}

#define GEN_TEST(nm)                                                           \
  Test(generators, nm) {                                                       \
    cr_assert_gt(matrix(#nm, 64, 8), 0);                                       \
    /* The schedules promise to run with GEN_BURST slots per connection. */    \
    cr_assert_gt(matrix(#nm, 20, GEN_BURST), 0);                               \
  }

GEN_TEST(ring)
GEN_TEST(tree)
GEN_TEST(binomial)
GEN_TEST(rhd)
GEN_TEST(direct)
GEN_TEST(linear)

Test(generators, table_and_support) {
  const char *names[] = {"ring", "tree", "binomial", "rhd", "direct", "linear"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_assert_not_null(gen_find(names[i]), "%s missing", names[i]);
  cr_assert_null(gen_find("nope"));
  cr_assert_null(gen_find(NULL));
  cr_assert_eq(gen_find("RING"), gen_find("ring"));
  /* Every collective has at least one generator. */
  for (int c = 0; c < SCHED_NUM_COLLS; c++) {
    int any = 0;
    GEN_FOREACH (g)
      any |= gen_supports(g, (sched_coll)c, 5);
    cr_assert(any, "no generator for %s", sched_coll_name(c));
  }
  /* A generator refuses what it does not support, and bad parameters. */
  GEN_FOREACH (g)
    for (int c = 0; c < SCHED_NUM_COLLS; c++) {
      gen_params p = {(sched_coll)c, 4, 0, 1, NULL, 0, 0};
      sched *s = gen_try(g->fn, &p);
      if (!gen_supports(g, (sched_coll)c, 4))
        cr_assert_null(s, "%s accepted %s", g->name, sched_coll_name(c));
      else
        cr_assert_not_null(s);
      sched_free(s);
      cr_assert_eq(gen_supports(g, (sched_coll)c, 0), 0);
    }
  gen_params bad[] = {
      {SCHED_BROADCAST, 4, 4, 1, NULL, 0, 0},  /* root out of range */
      {SCHED_BROADCAST, 4, -1, 1, NULL, 0, 0}, /* negative root */
      {SCHED_ALLREDUCE, 0, 0, 1, NULL, 0, 0},  /* no ranks */
      {SCHED_ALLREDUCE, 4, 0, 0, NULL, 0, 0},  /* no channels */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    GEN_FOREACH (g)
      cr_assert_null(gen_try(g->fn, &bad[i]), "%s accepted bad params %zu",
                     g->name, i);
}

/* A generator that cannot build a schedule says why (gen_build): a refusal
 * (BRAID_ERR_UNSUPPORTED) whose message names the generator and what was
 * wrong: a collective its descriptor does not list, a root out of range, a
 * view it needs and lacks. */
Test(generators, refusals_say_why) {
  int n = 0;
  sched *s = NULL;
  GEN_FOREACH (g)
    for (int c = 0; c < SCHED_NUM_COLLS; c++) {
      if (g->colls & (1u << c))
        continue;
      gen_params p = {(sched_coll)c, 4, 0, 1, NULL, 0, 0};
      cr_assert_eq(gen_build(g, &p, &s), BRAID_ERR_UNSUPPORTED, "%s %s: %s",
                   g->name, sched_coll_name(c), err_msg());
      cr_assert_null(s);
      cr_assert_not_null(strstr(err_msg(), g->name), "%s", err_msg());
      cr_assert_not_null(strstr(err_msg(), sched_coll_name(c)), "%s",
                         err_msg());
      n++;
    }
  cr_assert_gt(n, 20);
  gen_params root = {SCHED_BROADCAST, 4, 7, 1, NULL, 0, 0};
  cr_assert_eq(gen_build(gen_find("ring"), &root, &s), BRAID_ERR_UNSUPPORTED);
  cr_assert_str_eq(err_msg(), "ring: root 7 is not a rank of 4");
  /* the topology-aware ones without a view, and hier on one host */
  static const char *const aware[] = {"multiring", "treepack", "hybrid", "hier",
                                      "chaintree"};
  for (size_t i = 0; i < sizeof aware / sizeof aware[0]; i++) {
    const gen_desc *g = gen_find(aware[i]);
    cr_assert_neq(g->needs, 0u, "%s needs nothing", aware[i]);
    gen_params p = {SCHED_ALLREDUCE, 4, 0, 1, NULL, 0, 0};
    cr_assert_eq(gen_build(g, &p, &s), BRAID_ERR_UNSUPPORTED, "%s", aware[i]);
    cr_assert_not_null(strstr(err_msg(), "no topology view"), "%s: %s",
                       aware[i], err_msg());
  }
  sched_view *one = NULL;
  cr_assert_eq(view_hosts(NULL, 4, NULL, &one), BRAID_SUCCESS, "%s", err_msg());
  gen_params p = {SCHED_ALLREDUCE, 4, 0, 1, one, 0, 0};
  cr_assert_eq(gen_build(gen_find("hier"), &p, &s), BRAID_ERR_UNSUPPORTED);
  cr_assert_not_null(strstr(err_msg(), "two hosts"), "%s", err_msg());
  cr_assert_eq(gen_build(NULL, &p, &s), BRAID_ERR_INVALID_ARG);
  /* what succeeds gives its schedule */
  cr_assert_eq(gen_build(gen_find("ring"), &p, &s), BRAID_SUCCESS, "%s",
               err_msg());
  cr_assert_not_null(s);
  sched_free(s);
  view_free(one);
}

/* The table lists every descriptor once, in gen_index order, and each
 * reducing generator of the cost model has a cost for what it generates. */
Test(generators, descriptors) {
  int i = 0;
  GEN_FOREACH (g) {
    cr_assert_eq(gen_index(g), i, "%s", g->name);
    cr_assert_eq(gen_find(g->name), g);
    cr_assert_not_null(g->fn);
    cr_assert_neq(g->colls, 0u, "%s generates nothing", g->name);
    cr_assert(g->needs != 0 || g->cost != NULL, "%s: no cost function",
              g->name);
    i++;
  }
  cr_assert_eq(i, gen_count());
  cr_assert_eq(gen_index(NULL), -1);
}

/* Double binary tree: apart from the top rank (interior in both) and, for
 * an even rank count, one rank that is a leaf in both, every rank is a leaf
 * in one tree and interior in the other. Interior = sends to someone in the
 * broadcast phase. */
Test(generators, tree_complementary) {
  for (int n = 3; n <= 64; n++) {
    gen_params p = {SCHED_BROADCAST, n, 0, 2, NULL, 0, 0};
    sched *s = gen_try(gen_tree, &p);
    cr_assert_not_null(s);
    cr_assert_eq(s->nchannels, 2);
    int both_leaf = 0;
    for (int r = 1; r < n; r++) {
      int interior[2] = {0, 0};
      for (int t = 0; t < 2; t++) {
        const sched_channel *c = sched_chan_c(s, r, t);
        for (int i = 0; i < c->nsteps; i++)
          if (c->steps[i].prim == SCHED_P_SEND ||
              c->steps[i].prim == SCHED_P_RECV_COPY_SEND)
            interior[t] = 1;
      }
      cr_assert(!(interior[0] && interior[1]), "n=%d rank %d interior twice", n,
                r);
      both_leaf += !interior[0] && !interior[1];
    }
    cr_assert_leq(both_leaf, n % 2 == 0 ? 1 : 0, "n=%d: %d ranks leaf twice", n,
                  both_leaf);
    sched_free(s);
  }
  /* An odd channel count is kept: blocks are cut in two chunks and the last
   * channel runs both trees, one per chunk. */
  for (int nch = 1; nch <= 3; nch += 2) {
    gen_params p = {SCHED_ALLREDUCE, 8, 0, nch, NULL, 0, 0};
    sched *s = gen_try(gen_tree, &p);
    cr_assert_eq(s->nchannels, nch);
    cr_assert_eq(s->chunks_per_block, 2);
    cr_assert_eq(verify_sched(s, 1, 8), 0, "%s", err_msg());
    sched_free(s);
  }
}

/* Ring channels alternate direction. */
Test(generators, ring_directions) {
  gen_params p = {SCHED_ALLGATHER, 5, 0, 2, NULL, 0, 0};
  sched *s = gen_try(gen_ring, &p);
  cr_assert_eq(sched_chan_c(s, 0, 0)->steps[0].peer, 1);
  cr_assert_eq(sched_chan_c(s, 0, 1)->steps[0].peer, 4);
  sched_free(s);
}

/* Schedules never touch buffers a rank does not use, and reductions that are
 * not in the output stay in scratch on non-roots (checked by the verifier,
 * here made explicit for reduce). */
Test(generators, reduce_scratch) {
  const char *gens[] = {"ring", "tree", "binomial", "direct", "linear"};
  for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]); i++) {
    gen_params p = {SCHED_REDUCE, 9, 4, 1, NULL, 0, 0};
    sched *s = gen_try(gen_find(gens[i])->fn, &p);
    for (int r = 0; r < 9; r++) {
      if (r == 4)
        continue;
      const sched_channel *c = sched_chan_c(s, r, 0);
      for (int k = 0; k < c->nsteps; k++) {
        cr_assert_neq(c->steps[k].dst.buf, SCHED_BUF_OUT, "%s rank %d step %d",
                      gens[i], r, k);
        cr_assert_neq(c->steps[k].src.buf, SCHED_BUF_OUT);
      }
    }
    sched_free(s);
  }
}
