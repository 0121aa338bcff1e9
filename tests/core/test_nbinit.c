/*
 * Non-blocking initialisation (braid_config.blocking = 0) and
 * braid_comm_get_async_error: a rank that joins late (the other sees
 * BRAID_IN_PROGRESS, calls refused with it, then BRAID_SUCCESS and a working
 * communicator), a rank that never joins (the error arrives at the
 * timeout, and destroying works), destroying one still being made, and a
 * non-blocking split.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

static char go[64];

static braid_config nonblocking(int timeout_ms) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.blocking = 0;
  cfg.timeout_ms = timeout_ms;
  cfg.transport = "shm";
  return cfg;
}

/* Polls until the communicator is made or failed: that result. */
static braid_result settle(braid_comm *c) {
  braid_result a = BRAID_IN_PROGRESS;
  for (int i = 0; i < 30000 && a == BRAID_IN_PROGRESS; i++) {
    if (braid_comm_get_async_error(c, &a) != BRAID_SUCCESS)
      return BRAID_ERR_INTERNAL;
    if (a == BRAID_IN_PROGRESS)
      usleep(1000);
  }
  return a;
}

static int sum_ok(braid_comm *c, int n) {
  float v[4] = {1, 1, 1, 1};
  if (braid_allreduce(v, v, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 0;
  return v[0] == (float)n && v[3] == (float)n;
}

static int rank_late(int rank, int n, const braid_unique_id *id, void *arg,
                     char *msg, size_t len) {
  (void)arg;
  braid_comm *c = NULL;
  if (rank == 1) { /* joins once rank 0 has seen its init in progress */
    for (int i = 0; i < 20000 && access(go, F_OK) != 0; i++)
      usleep(1000);
    braid_config cfg;
    braid_config_init(&cfg);
    cfg.transport = "shm";
    if (braid_comm_init(&c, n, id, rank, &cfg) != BRAID_SUCCESS)
      return 1;
  } else {
    braid_config cfg = nonblocking(30000);
    braid_result r = braid_comm_init(&c, n, id, rank, &cfg);
    if (r != BRAID_IN_PROGRESS || c == NULL) {
      snprintf(msg, len, "init gave %d, comm %p", (int)r, (void *)c);
      return 2;
    }
    braid_result a = BRAID_SUCCESS;
    if (braid_comm_get_async_error(c, &a) != BRAID_SUCCESS ||
        a != BRAID_IN_PROGRESS) {
      snprintf(msg, len, "async error %d before the peer came", (int)a);
      return 3;
    }
    float v = 1;
    r = braid_allreduce(&v, &v, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    if (r != BRAID_IN_PROGRESS ||
        strstr(braid_comm_last_error(c), "still being made") == NULL) {
      snprintf(msg, len, "a call during init gave %d: %s", (int)r,
               braid_comm_last_error(c));
      return 4;
    }
    int rk = -1;
    if (braid_comm_rank(c, &rk) != BRAID_SUCCESS || rk != 0)
      return 5;
    FILE *f = fopen(go, "w");
    if (f == NULL)
      return 6;
    fclose(f);
    a = settle(c);
    if (a != BRAID_SUCCESS) {
      snprintf(msg, len, "init ended with %d: %s", (int)a,
               braid_comm_last_error(c));
      return 7;
    }
  }
  int ok = sum_ok(c, n);
  braid_comm_destroy(c);
  return ok ? 0 : 8;
}

Test(nbinit, a_rank_that_joins_late, .timeout = 60) {
  snprintf(go, sizeof go, "/tmp/braid-nbinit.%d", (int)getpid());
  unlink(go);
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(2, &id, rank_late, NULL, 40000, NULL), 0);
  unlink(go);
}

static int rank_alone(int rank, int n, const braid_unique_id *id, void *arg,
                      char *msg, size_t len) {
  int destroy_at_once = *(int *)arg;
  braid_config cfg = nonblocking(1000);
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, n, id, rank, &cfg);
  if (r != BRAID_IN_PROGRESS || c == NULL)
    return 1;
  if (destroy_at_once) /* its maker frees it when its wait ends */
    return braid_comm_destroy(c) == BRAID_SUCCESS ? 0 : 2;
  braid_result a = settle(c);
  snprintf(msg, len, "%d|%s", (int)a, braid_comm_last_error(c));
  float v = 1;
  r = braid_allreduce(&v, &v, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  braid_comm_destroy(c);
  return a != BRAID_SUCCESS && a != BRAID_IN_PROGRESS && r == a ? 0 : 3;
}

Test(nbinit, a_rank_that_never_joins, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  int later = 0;
  rank_proc p[1];
  spawn_rank(&p[0], 0, 2, &id, rank_alone, &later); /* rank 1 never comes */
  wait_ranks(p, 1, 30000);
  cr_expect_eq(p[0].status, 0, "status %d: %s", p[0].status, p[0].msg);
  cr_expect(strlen(strchr(p[0].msg, '|') ? strchr(p[0].msg, '|') : "") > 1,
            "no reason given: %s", p[0].msg);
}

Test(nbinit, destroyed_while_being_made, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  int at_once = 1;
  rank_proc p[1];
  spawn_rank(&p[0], 0, 2, &id, rank_alone, &at_once);
  wait_ranks(p, 1, 30000);
  cr_expect_eq(p[0].status, 0, "status %d: %s", p[0].status, p[0].msg);
}

static int rank_split(int rank, int n, const braid_unique_id *id, void *arg,
                      char *msg, size_t len) {
  (void)arg;
  braid_config cfg = nonblocking(30000);
  braid_comm *c = NULL, *s = NULL;
  if (braid_comm_init(&c, n, id, rank, &cfg) != BRAID_IN_PROGRESS ||
      settle(c) != BRAID_SUCCESS)
    return 1;
  braid_result r = braid_comm_split(c, rank % 2, rank, &s);
  if (r != BRAID_IN_PROGRESS || s == NULL) {
    snprintf(msg, len, "split gave %d", (int)r);
    return 2;
  }
  braid_result a = settle(s);
  if (a != BRAID_SUCCESS) {
    snprintf(msg, len, "split ended with %d: %s", (int)a,
             braid_comm_last_error(s));
    return 3;
  }
  int ok = sum_ok(s, n / 2) && sum_ok(c, n);
  braid_comm_destroy(s);
  braid_comm_destroy(c);
  return ok ? 0 : 4;
}

Test(nbinit, split, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(4, &id, rank_split, NULL, 40000, NULL), 0);
}
