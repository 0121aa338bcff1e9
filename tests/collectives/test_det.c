/*
 * Deterministic reductions (BRAID_DETERMINISTIC): the generators marked
 * GEN_RANK_ORDER fold every reduction in rank order on every rank, the
 * rank-order check refuses schedules that do not, and the planner under
 * the setting picks only marked generators and handles BRAID_ALGO as
 * documented.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "collectives/plan.h"
#include "collectives/select.h"
#include "collectives/verify.h"
#include "tests/collectives/gen_try.h"

/* plan_select's pick (it must not refuse). */
static const gen_desc *plan_pick(const plan_request *rq) {
  const gen_desc *g = NULL;
  cr_assert_eq(plan_select(rq, &g), BRAID_SUCCESS, "%s", err_msg());
  return g;
}

static const sched_coll red_colls[] = {SCHED_ALLREDUCE, SCHED_REDUCE,
                                       SCHED_REDUCE_SCATTER};

static sched *make(const gen_desc *g, sched_coll coll, int n, int root,
                   int nch) {
  gen_params p = {coll, n, root, nch, NULL, 0, 0};
  return gen_try(g->fn, &p);
}

/* Both in and out of place: a correct schedule, and one in rank order. */
static void check_sched(const sched *s, const char *what) {
  for (int ip = 0; ip < 2; ip++) {
    cr_assert(verify_sched(s, ip, 2) == 0, "%s ip=%d: %s", what, ip, err_msg());
    cr_assert(verify_rank_order(s, ip) == 0, "%s ip=%d: %s", what, ip,
              err_msg());
  }
}

Test(det, marked_generators_fold_in_rank_order) {
  int nmarked = 0;
  GEN_FOREACH (g) {
    if (!(g->flags & GEN_RANK_ORDER))
      continue;
    nmarked++;
    for (size_t ci = 0; ci < 3; ci++) {
      sched_coll coll = red_colls[ci];
      cr_assert(gen_supports(g, coll, 4), "%s lacks %s", g->name,
                sched_coll_name(coll));
      for (int n = 1; n <= 17; n++)
        for (int nch = 1; nch <= 3; nch++)
          for (int root = 0; root < (coll == SCHED_REDUCE ? n : 1); root++) {
            sched *s = make(g, coll, n, root, nch);
            char what[96];
            snprintf(what, sizeof what, "%s %s n=%d ch=%d root=%d", g->name,
                     sched_coll_name(coll), n, nch, root);
            cr_assert_not_null(s, "%s: no schedule", what);
            check_sched(s, what);
            sched_free(s);
          }
    }
  }
  cr_assert_eq(nmarked, 2, "direct and det are the marked generators");
}

/* The check can fail: ring and tree allreduce fold from a different rank
 * per chunk, and the message names where. */
Test(det, unmarked_generators_are_refused) {
  const char *names[] = {"ring", "tree", "rhd", "binomial"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const gen_desc *g = gen_find(names[i]);
    cr_assert_not_null(g);
    cr_assert(!(g->flags & GEN_RANK_ORDER));
    sched *s = make(g, SCHED_ALLREDUCE, 4, 0, 1);
    cr_assert_not_null(s);
    cr_assert(verify_sched(s, 0, 2) == 0, "%s", err_msg());
    cr_assert(verify_rank_order(s, 0) != 0, "%s passed", names[i]);
    cr_assert(strstr(err_msg(), "out[") != NULL, "%s: %s", names[i], err_msg());
    sched_free(s);
  }
}

/* Operand order counts: rank 0 of two receives x1 into out and folds its
 * own input into it, x1 op x0 — the right contributions, the wrong order. */
Test(det, swapped_operands_are_refused) {
  sched *s;
  cr_assert_eq(sched_new(SCHED_REDUCE, 2, 0, 1, 1, "swapped", &s),
               BRAID_SUCCESS);
  cr_assert_not_null(s);
  sched_channel *c0 = sched_chan(s, 0, 0), *c1 = sched_chan(s, 1, 0);
  cr_assert(sched_recv(c0, 1, sched_ck(SCHED_BUF_OUT, 0, 1)) == 0);
  cr_assert(sched_reduce_local(c0, sched_ck(SCHED_BUF_IN, 0, 1),
                               sched_ck(SCHED_BUF_OUT, 0, 1)) == 0);
  cr_assert(sched_send(c1, 0, sched_ck(SCHED_BUF_IN, 0, 1)) == 0);
  cr_assert(verify_sched(s, 0, 2) == 0, "%s", err_msg());
  cr_assert(verify_rank_order(s, 0) != 0);
  cr_assert(strstr(err_msg(), "first fold out of rank order: rank 0 channel 0 "
                              "step 1 (REDUCE") != NULL,
            "%s", err_msg());
  sched_free(s);
}

/* RECV_REDUCE_REV puts the message first: at root 1 of two, x0 arriving
 * and folded with its own input is x0 op x1, in order; at root 0 the same
 * step gives x1 op x0, refused, and the message names the step. */
Test(det, message_first_reduction) {
  for (int root = 0; root < 2; root++) {
    sched *s;
    cr_assert_eq(sched_new(SCHED_REDUCE, 2, root, 1, 1, "rev", &s),
                 BRAID_SUCCESS);
    sched_channel *cr = sched_chan(s, root, 0),
                  *co = sched_chan(s, 1 - root, 0);
    cr_assert(sched_recv_reduce_rev(cr, 1 - root, sched_ck(SCHED_BUF_IN, 0, 1),
                                    sched_ck(SCHED_BUF_OUT, 0, 1)) == 0);
    cr_assert(sched_send(co, root, sched_ck(SCHED_BUF_IN, 0, 1)) == 0);
    cr_assert(verify_sched(s, 0, 2) == 0, "%s", err_msg());
    cr_assert(verify_sched(s, 1, 2) == 0, "%s", err_msg());
    if (root == 1) {
      cr_assert(verify_rank_order(s, 0) == 0, "%s", err_msg());
      cr_assert(verify_rank_order(s, 1) == 0, "%s", err_msg());
    } else {
      cr_assert(verify_rank_order(s, 0) != 0);
      cr_assert(strstr(err_msg(), "rank 0 channel 0 step 0 (RECV_REDUCE_REV "
                                  "from 1") != NULL,
                "%s", err_msg());
    }
    sched_free(s);
  }
}

/* The direct allreduce of two ranks: rank 1 reduces rank 0's message with
 * its input straight into the output, one step, and no scratch. */
Test(det, direct_two_ranks_one_pass) {
  sched *s = make(gen_find("direct"), SCHED_ALLREDUCE, 2, 0, 1);
  cr_assert_not_null(s);
  const sched_channel *c1 = sched_chan(s, 1, 0);
  cr_assert_eq(c1->nsteps, 2);
  cr_assert_eq(c1->steps[1].prim, SCHED_P_RECV_REDUCE_REV);
  cr_assert_eq(c1->steps[1].dst.buf, SCHED_BUF_OUT);
  cr_assert_eq(s->scratch_blocks, 0);
  cr_assert(verify_rank_order(s, 1) == 0, "%s", err_msg());
  sched_free(s);
}

/* Collectives that do not reduce have nothing to fold. */
Test(det, non_reducing_pass) {
  sched *s = make(gen_find("ring"), SCHED_ALLGATHER, 4, 0, 2);
  cr_assert_not_null(s);
  cr_assert(verify_rank_order(s, 0) == 0, "%s", err_msg());
  sched_free(s);
}

Test(det, planner_picks_rank_order_only) {
  size_t sizes[] = {0, 8, 4096, 65536, 1u << 20, 64u << 20};
  const char *filters[] = {NULL, "", "ring", "^direct", "det,ring"};
  for (int tp = 0; tp < SELECT_TP_NUM; tp++)
    for (size_t ci = 0; ci < 3; ci++)
      for (int n = 1; n <= 9; n++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
          for (size_t fi = 0; fi < sizeof filters / sizeof filters[0]; fi++) {
            plan_request rq;
            plan_request_defaults(&rq, red_colls[ci], n, sizes[si], NULL, 0);
            rq.transport_class = tp;
            rq.algo = filters[fi];
            rq.deterministic = 1;
            const gen_desc *g = plan_pick(&rq);
            cr_assert(g->flags & GEN_RANK_ORDER, "%s picked for %s n=%d",
                      g->name, sched_coll_name(red_colls[ci]), n);
            if (filters[fi] && !strcmp(filters[fi], "^direct"))
              cr_assert_str_eq(g->name, "det");
          }
  /* small allreduces in one step (direct), large ones through the owners
   * (det); without the setting, det is never chosen */
  plan_request rq;
  plan_request_defaults(&rq, SCHED_ALLREDUCE, 4, 8, NULL, 0);
  rq.deterministic = 1;
  cr_assert_str_eq(plan_pick(&rq)->name, "direct");
  rq.bytes = 64u << 20;
  cr_assert_str_eq(plan_pick(&rq)->name, "det");
  rq.deterministic = 0;
  cr_assert_str_neq(plan_pick(&rq)->name, "det");
  /* collectives that do not reduce are not restricted */
  plan_request_defaults(&rq, SCHED_ALLGATHER, 4, 64u << 20, NULL, 0);
  rq.deterministic = 1;
  rq.algo = "ring";
  cr_assert_str_eq(plan_pick(&rq)->name, "ring");
}

Test(det, filter_rules) {
  select_filter f;
  int ignored = -1;
  /* a collective's own entry naming no rank-order generator: an error */
  cr_assert(plan_det_filter("allreduce:ring", SCHED_ALLREDUCE, &f, &ignored) !=
            0);
  cr_assert(strstr(err_msg(), "BRAID_DETERMINISTIC") &&
                strstr(err_msg(), "allreduce") &&
                strstr(err_msg(), "direct, det"),
            "%s", err_msg());
  /* ... which leaves the other collectives alone */
  cr_assert(plan_det_filter("allreduce:ring", SCHED_REDUCE, &f, &ignored) == 0,
            "%s", err_msg());
  cr_assert_eq(ignored, 0);
  /* a default entry naming none: ignored for the reductions */
  cr_assert(plan_det_filter("ring", SCHED_REDUCE_SCATTER, &f, &ignored) == 0,
            "%s", err_msg());
  cr_assert_eq(ignored, 1);
  cr_assert(select_filter_allows(&f, SCHED_REDUCE_SCATTER, gen_find("det")));
  cr_assert(select_filter_allows(&f, SCHED_REDUCE_SCATTER, gen_find("direct")));
  cr_assert(!select_filter_allows(&f, SCHED_REDUCE_SCATTER, gen_find("ring")));
  /* the filter still narrows the rank-order ones */
  cr_assert(plan_det_filter("direct", SCHED_ALLREDUCE, &f, &ignored) == 0);
  cr_assert_eq(ignored, 0);
  cr_assert(!select_filter_allows(&f, SCHED_ALLREDUCE, gen_find("det")));
  cr_assert(select_filter_allows(&f, SCHED_ALLREDUCE, gen_find("direct")));
  /* a malformed filter is still refused */
  cr_assert(plan_det_filter("nosuch", SCHED_ALLREDUCE, &f, &ignored) != 0);
  cr_assert(strstr(err_msg(), "unknown algorithm"), "%s", err_msg());
}
