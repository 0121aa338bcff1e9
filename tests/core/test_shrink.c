/*
 * braid_comm_shrink: four ranks; one (or two) SIGKILLed as the others run an
 * allreduce; the survivors see the death, shrink without the dead rank's
 * help and without a new id, and finish a training loop on the new
 * communicator with exact sums. And a rank left out while alive: the others
 * shrink without it, and it learns it was excluded instead of waiting.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

typedef struct shrink_case {
  const char *tp;
  int kill[2]; /* ranks that die (-1: none) */
  int exclude; /* a live rank the others exclude (-1: none) */
  /* where the survivors meet the death: 0 an allreduce, 1 braid_comm_split,
   * 2 braid_comm_finalize (a failed bootstrap exchange leaves frames on the
   * control connections); with exclude: 1 the excluded rank does not call
   * shrink, and every rank splits the old communicator afterwards */
  int where;
} shrink_case;

/* The call in which the survivors meet the death. */
static braid_result meet_death(braid_comm *c, int rank, int where) {
  braid_comm *x = NULL;
  switch (where) {
  case 1:
    return braid_comm_split(c, 0, rank, &x);
  case 2:
    return braid_comm_finalize(c);
  default: {
    double buf[64] = {0};
    return braid_allreduce(buf, buf, 64, BRAID_FLOAT64, BRAID_SUM, c, NULL);
  }
  }
}

/* A split of the old communicator after some ranks shrank without a live
 * one: it stays as it was (the shrink's notes disturb nothing). */
static int old_split(braid_comm *c, int rank, int nranks, char *msg,
                     size_t len) {
  braid_comm *s = NULL;
  braid_result r = braid_comm_split(c, 0, rank, &s);
  int32_t one = 1, sum = 0;
  if (r == BRAID_SUCCESS)
    r = braid_allreduce(&one, &sum, 1, BRAID_INT32, BRAID_SUM, s, NULL);
  if (r != BRAID_SUCCESS || sum != nranks) {
    snprintf(msg, len, "the old communicator's split: %d (sum %d): %s", (int)r,
             (int)sum, braid_comm_last_error(s ? s : c));
    return 11;
  }
  braid_comm_destroy(s);
  return 0;
}

static int dies(const shrink_case *k, int rank) {
  return rank == k->kill[0] || rank == k->kill[1];
}

static int rank_shrink(int rank, int nranks, const braid_unique_id *id,
                       void *arg, char *msg, size_t len) {
  const shrink_case *k = arg;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = k->tp;
  cfg.timeout_ms = 30000;
  braid_comm *c = NULL;
  if (braid_comm_init(&c, nranks, id, rank, &cfg) != BRAID_SUCCESS)
    return 1;
  double buf[64];
  for (int it = 0; it < 3; it++) {
    for (int i = 0; i < 64; i++)
      buf[i] = rank + it;
    if (braid_allreduce(buf, buf, 64, BRAID_FLOAT64, BRAID_SUM, c, NULL))
      return 2;
  }
  braid_comm *nc = NULL;
  braid_result r;
  if (k->exclude >= 0) {
    int ex = k->exclude;
    if (rank == ex && k->where == 1) /* it splits with the others, later */
      return old_split(c, rank, nranks, msg, len);
    r = rank == ex ? braid_comm_shrink(c, NULL, 0, &nc)
                   : braid_comm_shrink(c, &ex, 1, &nc);
    if (rank == ex) {
      snprintf(msg, len, "%d|%s", (int)r, braid_comm_last_error(c));
      braid_comm_destroy(c);
      return r == BRAID_ERR_INVALID_ARG && nc == NULL ? 0 : 3;
    }
  } else {
    if (dies(k, rank))
      raise(SIGKILL); /* as the others enter the call */
    r = meet_death(c, rank, k->where);
    if (r != BRAID_ERR_REMOTE) {
      snprintf(msg, len, "call %d with a dead rank gave %d: %s", k->where,
               (int)r, braid_comm_last_error(c));
      return 4;
    }
    braid_result async = BRAID_SUCCESS;
    braid_comm_get_async_error(c, &async);
    if (async != BRAID_ERR_REMOTE) {
      snprintf(msg, len, "call %d met a dead rank; the async error is %d",
               k->where, (int)async);
      return 12;
    }
    r = braid_comm_shrink(c, NULL, 0, &nc);
  }
  if (r != BRAID_SUCCESS || nc == NULL) {
    snprintf(msg, len, "shrink: %d: %s", (int)r, braid_comm_last_error(c));
    return 5;
  }
  int nr = -1, nn = -1;
  braid_comm_rank(nc, &nr);
  braid_comm_size(nc, &nn);
  int left = nranks - (k->kill[0] >= 0) - (k->kill[1] >= 0) - (k->exclude >= 0);
  /* new ranks keep the old order */
  int want = 0;
  for (int p = 0; p < rank; p++)
    want += !dies(k, p) && p != k->exclude;
  if (nn != left || nr != want) {
    snprintf(msg, len, "rank %d is %d of %d, want %d of %d", rank, nr, nn, want,
             left);
    return 6;
  }
  /* a training loop: every collective exact */
  for (int it = 0; it < 20; it++) {
    for (int i = 0; i < 64; i++)
      buf[i] = (nr + 1) * (double)(it + i);
    if (braid_allreduce(buf, buf, 64, BRAID_FLOAT64, BRAID_SUM, nc, NULL)) {
      snprintf(msg, len, "step %d: %s", it, braid_comm_last_error(nc));
      return 7;
    }
    double tri = (double)nn * (nn + 1) / 2;
    for (int i = 0; i < 64; i++)
      if (buf[i] != tri * (it + i)) {
        snprintf(msg, len, "step %d: element %d is %g, want %g", it, i, buf[i],
                 tri * (it + i));
        return 8;
      }
    float one = (float)nr, all[8];
    if (braid_allgather(&one, all, 1, BRAID_FLOAT32, nc, NULL))
      return 9;
    for (int q = 0; q < nn; q++)
      if (all[q] != (float)q)
        return 10;
  }
  braid_comm_destroy(nc);
  if (k->exclude >= 0 && k->where == 1) {
    int e = old_split(c, rank, nranks, msg, len);
    if (e != 0)
      return e;
  }
  braid_comm_abort(c);
  return 0;
}

static void run_case(const shrink_case *k) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  run_ranks(4, &id, rank_shrink, (void *)k, 60000, p);
  for (int r = 0; r < 4; r++) {
    if (dies(k, r)) {
      cr_expect_eq(p[r].status, -SIGKILL, "%s: rank %d should have died: %d",
                   k->tp, r, p[r].status);
      continue;
    }
    cr_expect_eq(p[r].status, 0, "%s: rank %d: status %d: %s", k->tp, r,
                 p[r].status, p[r].msg);
    if (r == k->exclude && k->where == 0) /* it called shrink */
      cr_expect(strstr(p[r].msg, "excluded") != NULL, "%s: %s", k->tp,
                p[r].msg);
  }
}

Test(shrink, one_rank_killed_shm, .timeout = 120) {
  run_case(&(shrink_case){"shm", {2, -1}, -1, 0});
}
Test(shrink, one_rank_killed_tcp, .timeout = 120) {
  run_case(&(shrink_case){"tcp", {0, -1}, -1, 0});
}
Test(shrink, two_ranks_killed, .timeout = 120) {
  run_case(&(shrink_case){"shm", {1, 3}, -1, 0});
}
/* The death met in a split or a finalize, whose failed bootstrap exchange
 * left frames unread: the survivors still agree (each made a communicator
 * of its own). */
Test(shrink, death_met_in_a_split, .timeout = 120) {
  run_case(&(shrink_case){"shm", {1, -1}, -1, 1});
}
Test(shrink, death_met_in_a_finalize, .timeout = 120) {
  run_case(&(shrink_case){"tcp", {2, -1}, -1, 2});
}
Test(shrink, live_rank_excluded, .timeout = 120) {
  run_case(&(shrink_case){"shm", {-1, -1}, 3, 0});
}
/* The others shrink without a live rank that does not call shrink; then
 * every rank splits the old communicator (the notes it never read broke
 * that split). */
Test(shrink, old_communicator_usable_after_an_exclusion, .timeout = 120) {
  run_case(&(shrink_case){"shm", {-1, -1}, 3, 1});
}
