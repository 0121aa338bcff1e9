/*
 * Selected rank counts above 64, up to 1024: every generator and collective
 * whose verification stays within seconds there (the symbolic state grows
 * with ranks x chunks x contributions), out of place and in place, 8 slots.
 * Topology-blind generators on their own; hier and chaintree on host maps of
 * 8 ranks per host.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

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

static void check(const char *name, sched_coll coll, int n, int root,
                  const sched_view *v) {
  const gen_desc *g = gen_find(name);
  cr_assert_not_null(g, "%s", name);
  gen_params p = {coll, n, root, 2, v, 0, 0};
  sched *s = gen_try(g->fn, &p);
  cr_assert_not_null(s, "%s %s n=%d: no schedule", name, sched_coll_name(coll),
                     n);
  for (int ip = 0; ip < 2; ip++)
    cr_assert_eq(verify_sched_ws(s, ip, 8, test_ws()), 0,
                 "%s %s n=%d root=%d inplace=%d: %s", name,
                 sched_coll_name(coll), n, root, ip, err_msg());
  sched_free(s);
}

static const int sizes[] = {65, 100, 128, 255, 512, 1000, 1024};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

Test(generators_large, trees_and_roots, .timeout = 240) {
  const char *gens[] = {"tree", "binomial", "linear"};
  sched_coll colls[] = {SCHED_BROADCAST, SCHED_REDUCE, SCHED_ALLREDUCE};
  for (int i = 0; i < NSIZES; i++)
    for (int k = 0; k < 3; k++)
      for (int c = 0; c < 3; c++) {
        int n = sizes[i];
        if (!gen_supports(gen_find(gens[k]), colls[c], n))
          continue;
        check(gens[k], colls[c], n, 0, NULL);
        if (colls[c] != SCHED_ALLREDUCE)
          check(gens[k], colls[c], n, n - 1, NULL);
      }
}

Test(generators_large, rings_and_halving, .timeout = 240) {
  /* block-per-rank collectives: up to 255 ranks (ranks^2 chunks) */
  for (int i = 0; i < NSIZES && sizes[i] <= 255; i++) {
    int n = sizes[i];
    check("ring", SCHED_ALLGATHER, n, 0, NULL);
    check("ring", SCHED_REDUCE_SCATTER, n, 0, NULL);
    check("rhd", SCHED_ALLGATHER, n, 0, NULL);
    check("ring", SCHED_BROADCAST, n, n / 2, NULL);
    check("binomial", SCHED_GATHER, n, 1, NULL);
    check("binomial", SCHED_SCATTER, n, n - 1, NULL);
  }
  check("ring", SCHED_ALLREDUCE, 128, 0, NULL);
  check("rhd", SCHED_ALLREDUCE, 100, 0, NULL);
}

Test(generators_large, hosts_of_eight, .timeout = 240) {
  for (int i = 0; i < NSIZES; i++) {
    int n = sizes[i];
    int *host = malloc(sizeof(int) * (size_t)n);
    cr_assert_not_null(host);
    for (int r = 0; r < n; r++)
      host[r] = r / 8;
    sched_view *v = NULL;
    cr_assert_eq(view_hosts(NULL, n, host, &v), BRAID_SUCCESS, "%s", err_msg());
    check("chaintree", SCHED_ALLREDUCE, n, 0, v);
    check("chaintree", SCHED_BROADCAST, n, n - 1, v);
    check("hier", SCHED_BROADCAST, n, n / 2, v);
    check("hier", SCHED_REDUCE, n, 3, v);
    if (n <= 128) /* P x H chunks per block */
      check("hier", SCHED_ALLREDUCE, n, 0, v);
    view_free(v);
    free(host);
  }
}
