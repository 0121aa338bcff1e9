/*
 * Selector: never picks a generator that does not support the collective,
 * follows the cost model's broad shape, and parses BRAID_ALGO filters in
 * NCCL_ALGO's syntax with errors that name the bad token.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "collectives/plan.h"
#include "collectives/select.h"
#include "collectives/verify.h"
#include "tests/collectives/gen_try.h"

/* select_algo's pick, NULL when it refuses (why: err_msg()). */
static const gen_desc *pick(sched_coll c, int n, size_t bytes, int tp,
                            const char *filter) {
  const gen_desc *g = NULL;
  braid_result r = select_algo(c, n, bytes, tp, filter, &g);
  cr_assert_eq(r == BRAID_SUCCESS, g != NULL, "%s", err_msg());
  return g;
}

/* The same for select_algo_f. */
static const gen_desc *pick_f(sched_coll c, int n, size_t bytes, int tp,
                              const select_filter *f) {
  const gen_desc *g = NULL;
  braid_result r = select_algo_f(c, n, bytes, tp, f, &g);
  cr_assert_eq(r == BRAID_SUCCESS, g != NULL, "%s", err_msg());
  return g;
}

Test(select, never_unsupported) {
  size_t sizes[] = {0, 1, 8, 4096, 65536, 1u << 20, 64u << 20};
  const char *filters[] = {NULL,
                           "",
                           "ring",
                           "^tree",
                           "ring,tree,direct",
                           "allreduce:rhd;broadcast:^tree",
                           "^direct,linear"};
  for (int tp = 0; tp < SELECT_TP_NUM; tp++)
    for (int c = 0; c < SCHED_NUM_COLLS; c++)
      for (int n = 1; n <= 64; n++)
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
          for (size_t fi = 0; fi < sizeof(filters) / sizeof(filters[0]); fi++) {
            const gen_desc *g =
                pick((sched_coll)c, n, sizes[si], tp, filters[fi]);
            if (!g) {
              /* Only a collective's own entry may leave nothing, and it
               * must say so. */
              cr_assert(filters[fi] && strchr(filters[fi], ':'), "%s n=%d: %s",
                        sched_coll_name(c), n, err_msg());
              cr_assert(strstr(err_msg(), "leaves no algorithm for"), "%s",
                        err_msg());
              cr_assert(strstr(err_msg(), sched_coll_name(c)), "%s", err_msg());
              continue;
            }
            cr_assert(gen_supports(g, (sched_coll)c, n), "%s picked for %s",
                      g->name, sched_coll_name(c));
            cr_assert_geq(select_cost(g, (sched_coll)c, n, sizes[si], tp), 0);
          }
}

Test(select, picks_verify) {
  /* What the selector picks generates a schedule the verifier accepts. */
  for (int c = 0; c < SCHED_NUM_COLLS; c++)
    for (int n = 1; n <= 17; n += 4) {
      const gen_desc *g = pick((sched_coll)c, n, 1 << 20, SELECT_TP_TCP, NULL);
      cr_assert_not_null(g, "%s", err_msg());
      gen_params p = {(sched_coll)c, n, n - 1, 1, NULL, 0, 0};
      sched *s = gen_try(g->fn, &p);
      cr_assert_not_null(s);
      cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
      sched_free(s);
    }
}

Test(select, model_shape) {
  const gen_desc *ring = gen_find("ring"), *direct = gen_find("direct");
  /* Small allreduce on 8 ranks: one-shot beats the 14-step ring. */
  cr_assert_lt(select_cost(direct, SCHED_ALLREDUCE, 8, 8, SELECT_TP_SHM),
               select_cost(ring, SCHED_ALLREDUCE, 8, 8, SELECT_TP_SHM));
  /* Large allreduce: the ring moves 2(n-1)/n of the data, one-shot n-1. */
  cr_assert_lt(
      select_cost(ring, SCHED_ALLREDUCE, 8, 64 << 20, SELECT_TP_TCP),
      select_cost(direct, SCHED_ALLREDUCE, 8, 64 << 20, SELECT_TP_TCP));
  /* Unsupported: -1. */
  cr_assert_lt(select_cost(gen_find("tree"), SCHED_GATHER, 8, 8, 0), 0);
  cr_assert_lt(select_cost(ring, SCHED_ALLREDUCE, 8, 8, 7), 0);
  /* tcp is slower than shm for the same call. */
  cr_assert_lt(select_cost(ring, SCHED_ALLREDUCE, 8, 4096, SELECT_TP_SHM),
               select_cost(ring, SCHED_ALLREDUCE, 8, 4096, SELECT_TP_TCP));
  cr_assert_not_null(select_model_get(SELECT_TP_SHM));
  cr_assert_null(select_model_get(SELECT_TP_NUM));
  /* Small messages on many ranks avoid the ring's 2(n-1) latency. */
  const gen_desc *g = pick(SCHED_ALLREDUCE, 64, 64, SELECT_TP_TCP, NULL);
  cr_assert_str_neq(g->name, "ring");
}

static void expect_pick(const char *filter, sched_coll c, const char *want) {
  const gen_desc *g = pick(c, 8, 1 << 20, SELECT_TP_SHM, filter);
  cr_assert_not_null(g, "%s: %s", filter, err_msg());
  cr_assert_str_eq(g->name, want, "filter \"%s\" on %s", filter,
                   sched_coll_name(c));
}

Test(select, filter_include_exclude) {
  expect_pick("ring", SCHED_ALLREDUCE, "ring");
  expect_pick("RING", SCHED_ALLREDUCE, "ring");
  expect_pick(" tree ", SCHED_ALLREDUCE, "tree");
  expect_pick("binomial", SCHED_BROADCAST, "binomial");
  expect_pick("^ring,rhd,tree,direct", SCHED_ALLREDUCE, "binomial");
  expect_pick("allreduce:ring;broadcast:linear", SCHED_ALLREDUCE, "ring");
  expect_pick("allreduce:ring;broadcast:linear", SCHED_BROADCAST, "linear");
  /* Per-collective entries override the default entry, in either order. */
  expect_pick("direct;allreduce:tree", SCHED_ALLREDUCE, "tree");
  expect_pick("allreduce:tree;direct", SCHED_ALLGATHER, "direct");
  expect_pick("reducescatter:ring", SCHED_REDUCE_SCATTER, "ring");
  expect_pick("reduce_scatter:ring", SCHED_REDUCE_SCATTER, "ring");
  expect_pick("allreduce:^rhd,direct,binomial,tree", SCHED_ALLREDUCE, "ring");
  /* Trailing separator is harmless. */
  expect_pick("allreduce:ring;", SCHED_ALLREDUCE, "ring");

  select_filter f;
  cr_assert_eq(select_filter_parse("^tree", &f), 0);
  cr_assert_not(select_filter_allows(&f, SCHED_ALLREDUCE, gen_find("tree")));
  cr_assert(select_filter_allows(&f, SCHED_ALLREDUCE, gen_find("ring")));
  cr_assert_eq(select_filter_parse("sendrecv:linear", &f), 0);
  cr_assert(select_filter_allows(&f, SCHED_RECV, gen_find("linear")));
  cr_assert_not(select_filter_allows(&f, SCHED_SEND, gen_find("ring")));
  cr_assert(select_filter_allows(&f, SCHED_ALLREDUCE, gen_find("ring")));
}

static void expect_error(const char *filter, const char *msg) {
  select_filter f;
  cr_assert_eq(select_filter_parse(filter, &f), BRAID_ERR_INVALID_ARG,
               "\"%s\" accepted", filter);
  cr_assert(strstr(err_msg(), msg), "\"%s\": \"%s\" lacks \"%s\"", filter,
            err_msg(), msg);
  cr_assert_null(pick(SCHED_ALLREDUCE, 4, 8, 0, filter));
  cr_assert(strstr(err_msg(), msg));
}

Test(select, filter_errors) {
  expect_error("rign", "unknown algorithm \"rign\"");
  expect_error("ring,bogus", "unknown algorithm \"bogus\"");
  expect_error("allreduce:ring;brodcast:tree",
               "unknown collective \"brodcast\"");
  expect_error("ring;tree", "second entry without a collective: \"tree\"");
  expect_error("allreduce:ring;allreduce:tree",
               "collective \"allreduce\" named twice");
  expect_error("ring,,tree", "empty algorithm name");
  expect_error("^", "empty algorithm name");
  expect_error("allreduce:", "empty algorithm name");
  expect_error(";;", "BRAID_ALGO=\";;\" names no algorithm");
  expect_error(" ; ", "names no algorithm");
}

Test(select, impossible_filter) {
  /* A global list that no gather algorithm matches does not apply to gather;
   * gather's own entry does. */
  const gen_desc *g = pick(SCHED_GATHER, 8, 8, SELECT_TP_SHM, "tree");
  cr_assert_not_null(g, "%s", err_msg());
  cr_assert(gen_supports(g, SCHED_GATHER, 8));
  g = pick(SCHED_GATHER, 8, 8, SELECT_TP_SHM, "binomial");
  cr_assert_str_eq(g->name, "binomial");
  g = pick(SCHED_GATHER, 8, 8, SELECT_TP_SHM, "gather:tree");
  cr_assert_null(g);
  const char *want = "BRAID_ALGO=\"gather:tree\": the algorithm filter "
                     "leaves no algorithm for gather on 8 ranks";
  cr_assert_eq(strncmp(err_msg(), want, strlen(want)), 0, "%s", err_msg());
  g = pick(SCHED_ALLREDUCE, 8, 8, SELECT_TP_SHM, "allreduce:linear");
  cr_assert_null(g);
  cr_assert(strstr(err_msg(), "allreduce"), "%s", err_msg());
  cr_assert_null(pick(SCHED_ALLREDUCE, 0, 8, 0, NULL));
  cr_assert_null(pick(SCHED_ALLREDUCE, 4, 8, 9, NULL));
  cr_assert(strstr(err_msg(), "transport class 9"), "%s", err_msg());
  cr_assert(strstr(err_msg(), "transport class 9"), "%s", err_msg());
  /* The parsed-once form gives the same answers. */
  select_filter f;
  cr_assert_eq(select_filter_parse("allreduce:tree;ring", &f), 0);
  cr_assert_str_eq(pick_f(SCHED_ALLREDUCE, 8, 1 << 20, 0, &f)->name, "tree");
  cr_assert_str_eq(pick_f(SCHED_BROADCAST, 8, 1 << 20, 0, &f)->name, "ring");
  cr_assert_eq(pick_f(SCHED_ALLREDUCE, 8, 1 << 20, 0, NULL),
               pick(SCHED_ALLREDUCE, 8, 1 << 20, 0, NULL));
  cr_assert_eq(select_filter_parse("gather:tree", &f), 0);
  cr_assert_null(pick_f(SCHED_GATHER, 8, 8, 0, &f));
  cr_assert(strstr(err_msg(), "leaves no algorithm for gather"), "%s",
            err_msg());
}

/* The device paths' size rule (collectives/plan.c, which src/exec_plan.c
 * and braid-topo schedule apply): kernels for the collectives they run up
 * to BRAID_CUDA_KERNEL_MAX of the call's largest buffer (allgather's
 * output: nranks blocks), else through host memory up to
 * BRAID_CUDA_HOST_MAX, else the schedule on the device transports. */
Test(select, device_path_rule) {
  const char *why = NULL;
  cr_assert_eq(plan_device_path(SCHED_ALLREDUCE, 4, 1024, 4096, 0, &why),
               PLAN_PATH_KERNEL);
  cr_assert_not_null(strstr(why, "BRAID_CUDA_KERNEL_MAX"), "%s", why);
  /* allgather's largest buffer is 4 blocks: 4 KiB > 2 KiB of kernels */
  cr_assert_eq(plan_device_path(SCHED_ALLGATHER, 4, 1024, 2048, 4096, &why),
               PLAN_PATH_STAGED);
  cr_assert_not_null(strstr(why, "BRAID_CUDA_HOST_MAX"), "%s", why);
  cr_assert_eq(plan_device_path(SCHED_ALLGATHER, 4, 1024, 2048, 2048, NULL),
               PLAN_PATH_DEVICE);
  /* the kernels run no alltoall, gather or scatter */
  cr_assert_eq(plan_device_path(SCHED_ALLTOALL, 4, 8, SIZE_MAX, 0, NULL),
               PLAN_PATH_DEVICE);
  cr_assert_eq(plan_device_path(SCHED_GATHER, 4, 8, SIZE_MAX, 64, NULL),
               PLAN_PATH_STAGED);
  cr_assert_eq(plan_call_bytes(SCHED_REDUCE_SCATTER, 8, 100), 800u);
  cr_assert_eq(plan_call_bytes(SCHED_ALLREDUCE, 8, SIZE_MAX / 2), SIZE_MAX / 2);
  cr_assert_eq(plan_call_bytes(SCHED_ALLGATHER, 8, SIZE_MAX / 2), SIZE_MAX);
  cr_assert_str_eq(plan_path_name(PLAN_PATH_STAGED), "staged");
  cr_assert_str_eq(plan_path_name(PLAN_PATH_NUM), "unknown");
}
