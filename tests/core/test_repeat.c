/*
 * A repeated small call starts from a copy of its prepared state
 * (src/executor.c, prep_take): the same kind, buffers, count, dtype, op and
 * root as the last small call skip the schedule lookup and the channels'
 * layout. These ranks check that the copy is never stale: values that
 * change between repeats, the same buffers with another count, in place
 * and out of place on one buffer, the communicator's scratch grown (and so
 * moved) between two repeats, and the schedule cache emptied
 * (c->cache_gen) between two repeats. Every result is checked; under
 * ASan a stale schedule, scratch or send map is a use after free.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/exec_int.h"
#include "src/log.h"

#define FAIL(code, ...)                                                        \
  do {                                                                         \
    snprintf(msg, len, __VA_ARGS__);                                           \
    return (code);                                                             \
  } while (0)

/* The small call every phase repeats: 2 floats, sum. */
static int small(braid_comm *c, int rank, int n, int it, float *s, float *r,
                 char *msg, size_t len) {
  s[0] = (float)(rank + it);
  s[1] = (float)(2 * rank - it);
  r[0] = r[1] = -1.0f;
  braid_result e = braid_allreduce(s, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  float want0 = (float)(n * (n - 1) / 2 + n * it);
  float want1 = (float)(n * (n - 1) - n * it);
  if (e != BRAID_SUCCESS)
    FAIL(10, "repeat %d: %s", it, braid_comm_last_error(c));
  if (r[0] != want0 || r[1] != want1)
    FAIL(11, "repeat %d: got %g %g, want %g %g", it, r[0], r[1], want0, want1);
  return 0;
}

/* One call of a varied kind (collective, root, size), to fill the
 * schedule cache: ignores the values, checks the result code. */
static int variety(braid_comm *c, int n, int k, char *buf, size_t cap,
                   char *msg, size_t len) {
  static const size_t sizes[] = {8, 4096, 65536, 1 << 20};
  size_t bytes = sizes[k % 4], cnt = bytes / 4;
  int root = (k / 4) % n;
  braid_result e = BRAID_SUCCESS;
  char *out = buf + cap / 2;
  if (cnt * (size_t)n * 4 > cap / 2)
    cnt = cap / 2 / 4 / (size_t)n;
  switch ((k / (4 * n)) % 7) {
  case 0:
    e = braid_broadcast(buf, buf, cnt, BRAID_FLOAT32, root, c, NULL);
    break;
  case 1:
    e = braid_reduce(buf, out, cnt, BRAID_FLOAT32, BRAID_MAX, root, c, NULL);
    break;
  case 2:
    e = braid_gather(buf, out, cnt, BRAID_FLOAT32, root, c, NULL);
    break;
  case 3:
    e = braid_scatter(buf, out, cnt, BRAID_FLOAT32, root, c, NULL);
    break;
  case 4:
    e = braid_allgather(buf, out, cnt, BRAID_FLOAT32, c, NULL);
    break;
  case 5:
    e = braid_reduce_scatter(buf, out, cnt, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    break;
  default:
    e = braid_alltoall(buf, out, cnt, BRAID_FLOAT32, c, NULL);
    break;
  }
  if (e != BRAID_SUCCESS)
    FAIL(20, "variety %d: %s", k, braid_comm_last_error(c));
  return 0;
}

static int rank_repeat(int rank, int n, const braid_unique_id *id, void *arg,
                       char *msg, size_t len) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = arg;
  cfg.timeout_ms = 60000;
  braid_comm *c = NULL;
  if (braid_comm_init(&c, n, id, rank, &cfg) != BRAID_SUCCESS)
    FAIL(1, "init: %s", err_msg());
  float s[2], r[2];
  int bad = 0;
  /* values that change between repeats */
  for (int it = 0; it < 20 && !bad; it++)
    bad = small(c, rank, n, it, s, r, msg, len);
  if (!bad && !exec_prep_fresh(c))
    FAIL(2, "20 repeats of an 8-byte allreduce kept no prepared call");
  /* the same buffers, another count, then back */
  float got = -1; /* s[0] is rank + 19 from the last repeat */
  if (!bad && (braid_allreduce(s, &got, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
                   BRAID_SUCCESS ||
               got != (float)(n * (n - 1) / 2 + 19 * n)))
    FAIL(3, "count 1 after count 2: got %g (%s)", got,
         braid_comm_last_error(c));
  if (!bad)
    bad = small(c, rank, n, 21, s, r, msg, len);
  /* in place on the output buffer, then out of place again */
  r[0] = (float)rank;
  r[1] = 1.0f;
  if (!bad && (braid_allreduce(r, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
                   BRAID_SUCCESS ||
               r[0] != (float)(n * (n - 1) / 2) || r[1] != (float)n))
    FAIL(4, "in place: got %g %g", r[0], r[1]);
  if (!bad)
    bad = small(c, rank, n, 22, s, r, msg, len);
  /* the scratch grown, and so moved, between two repeats: larger calls of
   * every size up to 4 MiB, a repeat after each */
  size_t cap = (size_t)16 << 20;
  char *buf = calloc(1, cap);
  if (buf == NULL)
    FAIL(5, "no memory");
  for (size_t cnt = 256; cnt <= ((size_t)1 << 20) && !bad; cnt *= 4) {
    float *big = (float *)buf, *res = (float *)(buf + cap / 2);
    if (braid_allreduce(big, res, cnt, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
        BRAID_SUCCESS)
      FAIL(6, "allreduce of %zu: %s", cnt, braid_comm_last_error(c));
    if (braid_reduce_scatter(big, res, cnt / (size_t)n, BRAID_FLOAT32,
                             BRAID_SUM, c, NULL) != BRAID_SUCCESS)
      FAIL(7, "reduce_scatter of %zu: %s", cnt, braid_comm_last_error(c));
    bad = small(c, rank, n, 30 + (int)(cnt % 97), s, r, msg, len);
  }
  /* varied calls, each followed by a repeat; every fifth, the schedule
   * cache emptied (as an eviction or comm_free does) before the repeat */
  int k = 0;
  for (; k < 40 && !bad; k++) {
    bad = variety(c, n, k * 7, buf, cap, msg, len);
    if (!bad && k % 5 == 4) {
      exec_sched_cache_clear(c);
      if (exec_prep_fresh(c))
        FAIL(8, "the kept call outlived the schedules it was made from");
    }
    if (!bad)
      bad = small(c, rank, n, 100 + k, s, r, msg, len);
    if (!bad && !exec_prep_fresh(c))
      FAIL(9, "varied call %d: the repeat kept no fresh prepared call", k);
  }
  free(buf);
  if (braid_comm_finalize(c) != BRAID_SUCCESS && !bad)
    FAIL(12, "finalize: %s", err_msg());
  braid_comm_destroy(c);
  if (!bad)
    snprintf(msg, len, "%d varied calls", k);
  return bad;
}

static void repeat_on(const char *tp, int n) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  int failed = run_ranks(n, &id, rank_repeat, (void *)tp, 240000, p);
  for (int r = 0; r < n; r++)
    cr_expect_eq(p[r].status, 0, "%s, %d ranks: rank %d: status %d: %s", tp, n,
                 r, p[r].status, p[r].msg);
  cr_assert_eq(failed, 0);
  printf("repeat %s %d ranks: %s\n", tp, n, p[0].msg);
}

Test(repeat, shm_2) { repeat_on("shm", 2); }
Test(repeat, shm_3) { repeat_on("shm", 3); }
Test(repeat, tcp_2) { repeat_on("tcp", 2); }

/* A call with the same arguments as the last one that passed the argument
 * checks skips them (src/api.c, checked_before): a call that differs in
 * any one argument is checked again, a refused call leaves nothing behind,
 * and what the checks found (in place or not) is never taken from another
 * call. One rank, so every result is known. */
Test(repeat, checks_again) {
  braid_unique_id id;
  braid_comm *c = NULL;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  cr_assert_eq(braid_comm_init(&c, 1, &id, 0, NULL), BRAID_SUCCESS, "%s",
               err_msg());
  float s[4] = {1, 2, 3, 4}, r[4] = {0};
  for (int i = 0; i < 2; i++) /* checked, then the same again */
    cr_assert_eq(braid_allreduce(s, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
                 BRAID_SUCCESS, "%s", braid_comm_last_error(c));
  cr_expect(r[0] == 1 && r[1] == 2 && r[2] == 0);
  /* one argument changed, each refused with its own reason */
  cr_expect_eq(braid_allreduce(s, r, 2, BRAID_FLOAT32, BRAID_BAND, c, NULL),
               BRAID_ERR_INVALID_ARG);
  cr_expect(strstr(braid_comm_last_error(c), "not defined on dtype float32"),
            "%s", braid_comm_last_error(c));
  cr_expect_eq(braid_allreduce(s, s + 1, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
               BRAID_ERR_INVALID_ARG);
  cr_expect(strstr(braid_comm_last_error(c), "overlap"), "%s",
            braid_comm_last_error(c));
  cr_expect_eq(
      braid_allreduce((char *)s + 1, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      BRAID_ERR_INVALID_ARG);
  cr_expect_eq(braid_broadcast(s, r, 2, BRAID_FLOAT32, 1, c, NULL),
               BRAID_ERR_INVALID_ARG); /* root 1 of 1 rank */
  cr_expect_eq(braid_allreduce(s, NULL, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
               BRAID_ERR_INVALID_ARG);
  /* the first call again, after the refusals */
  r[0] = r[1] = 0;
  cr_expect_eq(braid_allreduce(s, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
               BRAID_SUCCESS, "%s", braid_comm_last_error(c));
  cr_expect(r[0] == 1 && r[1] == 2);
  /* in place, then out of place from the same output: each its own */
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(braid_allreduce(r, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
                 BRAID_SUCCESS, "%s", braid_comm_last_error(c));
    cr_expect(r[0] == 1 && r[1] == 2);
  }
  s[0] = 7;
  cr_expect_eq(braid_allreduce(s, r, 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
               BRAID_SUCCESS, "%s", braid_comm_last_error(c));
  cr_expect(r[0] == 7 && r[1] == 2);
  braid_comm_destroy(c);
}
