/*
 * The small-call path (src/exec_fast.c): the repeats of a small call run a
 * precompiled list of transport actions. These ranks check that it is
 * tried by every repeat where it should be (c->fast_tried: messages in a
 * slot header and in a slot's data, barriers) and by none where it should not
 * (a message larger than a slot, tcp, an average), and finishes calls
 * (c->fast_calls) or hands them on (c->fast_resumed),
 * that every result is right whichever path each rank took (values that
 * change between repeats; a root far ahead of its receivers, whose sends
 * then find no room; a rank late now and then, so that the others' runs
 * stop at a receive and the loop goes on from there; in place and out of
 * place; another root), that its calls are finished in the flight
 * recorder, and that a call it gives back to the executor's loop still
 * fails as any call does: another call on the peer is named as a
 * mismatch, a dead root as a dead rank, and nothing hangs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/flight.h"
#include "src/log.h"

#define FAIL(code, ...)                                                        \
  do {                                                                         \
    snprintf(msg, len, __VA_ARGS__);                                           \
    return (code);                                                             \
  } while (0)

static braid_comm *up(int rank, int n, const braid_unique_id *id,
                      const char *tp, int timeout_ms) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = tp;
  cfg.timeout_ms = timeout_ms;
  braid_comm *c = NULL;
  return braid_comm_init(&c, n, id, rank, &cfg) == BRAID_SUCCESS ? c : NULL;
}

/* `reps` broadcasts of `cnt` int32 from `root`, values new in each: the
 * root's are it * 1000 + i; every rank checks what it got. */
static int bcasts(braid_comm *c, int rank, int root, size_t cnt, int reps,
                  int inplace, int32_t *in, int32_t *out, char *msg,
                  size_t len) {
  for (int it = 0; it < reps; it++) {
    for (size_t i = 0; i < cnt; i++) {
      in[i] = rank == root ? it * 1000 + (int32_t)i : -1;
      out[i] = -2;
    }
    int32_t *o = inplace ? in : out;
    if (braid_broadcast(in, o, cnt, BRAID_INT32, root, c, NULL) !=
        BRAID_SUCCESS)
      FAIL(10, "broadcast %d of %zu from %d: %s", it, cnt, root,
           braid_comm_last_error(c));
    for (size_t i = 0; i < cnt; i++)
      if (o[i] != it * 1000 + (int32_t)i)
        FAIL(11, "broadcast %d of %zu from %d%s: element %zu is %d, want %d",
             it, cnt, root, inplace ? " in place" : "", i, o[i],
             it * 1000 + (int)i);
  }
  return 0;
}

/* How many of the last `reps` calls tried the path; the ones in between
 * (`c->fast_tried` before them in *t0) must be reps - 1 or reps where the
 * path applies (the first of a new call is prepared, its repeats try),
 * 0 where it does not. */
static int tried(const braid_comm *c, uint64_t *t0, int reps, int applies,
                 const char *what, char *msg, size_t len) {
  uint64_t t = c->fast_tried - *t0;
  *t0 = c->fast_tried;
  if (applies ? t + 1 < (uint64_t)reps || t > (uint64_t)reps : t != 0)
    FAIL(30, "%d %s tried the small-call path %llu times (%s)", reps, what,
         (unsigned long long)t,
         applies ? "every repeat should" : "none should");
  return 0;
}

/* What c's calls did on the path, and `more`, into msg. */
static void counts(const braid_comm *c, const char *more, char *msg,
                   size_t len) {
  snprintf(msg, len,
           "%llu calls tried the small-call path, %llu finished on it, "
           "%llu went on in the loop%s",
           (unsigned long long)c->fast_tried, (unsigned long long)c->fast_calls,
           (unsigned long long)c->fast_resumed, more);
}

static int rank_paths(int rank, int n, const braid_unique_id *id, void *arg,
                      char *msg, size_t len) {
  const char *tp = arg;
  int shm = strcmp(tp, "shm") == 0;
  braid_comm *c = up(rank, n, id, tp, 60000);
  if (c == NULL)
    FAIL(1, "init: %s", err_msg());
  int32_t in[64], out[64 * 8];
  uint64_t t0 = c->fast_tried;
  /* 2000 repeats: the root runs ahead until its slots are full, so both
   * paths run on both sides */
  int bad = bcasts(c, rank, 0, 2, 2000, 0, in, out, msg, len);
  if (!bad)
    bad = tried(c, &t0, 2000, shm, "8-byte broadcasts", msg, len);
  if (!bad && shm && c->fast_calls == 0)
    FAIL(2, "2000 repeated 8-byte broadcasts never finished on the path");
  /* in place, another root */
  for (int root = 0; root < n && !bad; root++) {
    bad = bcasts(c, rank, root, 6, 200, root % 2, in, out, msg, len);
    if (!bad)
      bad = tried(c, &t0, 200, shm, "24-byte broadcasts", msg, len);
  }
  /* a message in a slot's data area (1 KiB): the path too; larger than a
   * slot (8 KiB; ctest runs this with BRAID_BUFFSIZE=32K, 4 KiB slots):
   * the executor's loop every time */
  int32_t *big = calloc(2 * 2048, sizeof *big);
  if (big == NULL)
    FAIL(17, "no memory");
  uint64_t f0 = c->fast_calls;
  if (!bad)
    bad = bcasts(c, rank, n - 1, 256, 200, 0, big, big + 2048, msg, len);
  if (!bad)
    bad = tried(c, &t0, 200, shm, "1 KiB broadcasts", msg, len);
  if (!bad && shm && c->fast_calls == f0)
    FAIL(18, "200 repeated 1 KiB broadcasts never finished on the path");
  if (!bad)
    bad = bcasts(c, rank, n - 1, 2048, 50, 0, big, big + 2048, msg, len);
  free(big);
  if (!bad)
    bad = tried(c, &t0, 50, 0, "8 KiB broadcasts (two slots)", msg, len);
  /* reductions: direct, a reduce-scatter and an allgather, two messages
   * each way on every connection from 3 ranks; the path takes every
   * repeat; the average never (its division is the loop's) */
  for (int it = 0; it < 200 && !bad; it++) {
    int32_t v = rank + it, s = -1;
    if (braid_allreduce(&v, &s, 1, BRAID_INT32, BRAID_SUM, c, NULL) !=
            BRAID_SUCCESS ||
        s != n * (n - 1) / 2 + n * it)
      FAIL(5, "allreduce %d: got %d (%s)", it, s, braid_comm_last_error(c));
  }
  if (!bad)
    bad = tried(c, &t0, 200, shm, "4-byte allreduces", msg, len);
  t0 = c->fast_tried;
  for (int it = 0; it < 50 && !bad; it++) {
    float v = (float)(rank + it), s = -1;
    if (braid_allreduce(&v, &s, 1, BRAID_FLOAT32, BRAID_AVG, c, NULL) !=
            BRAID_SUCCESS ||
        s != (float)(n - 1) / 2 + (float)it)
      FAIL(13, "average %d: got %g (%s)", it, s, braid_comm_last_error(c));
  }
  if (!bad)
    bad = tried(c, &t0, 50, 0, "averages", msg, len);
  /* one rank late now and then: the others' runs stop at the receive and
   * the loop goes on from there; every result still right */
  uint64_t r0 = c->fast_resumed;
  for (int it = 0; it < 600 && !bad; it++) {
    if (it % 8 == 0 && it / 8 % n == rank)
      usleep(300);
    int32_t v[2] = {rank + it, -rank}, s[2] = {-1, -1};
    if (braid_allreduce(v, s, 2, BRAID_INT32, BRAID_SUM, c, NULL) !=
            BRAID_SUCCESS ||
        s[0] != n * (n - 1) / 2 + n * it || s[1] != -(n * (n - 1) / 2))
      FAIL(15, "allreduce %d with a late rank: got %d %d (%s)", it, s[0], s[1],
           braid_comm_last_error(c));
  }
  if (!bad && shm && c->fast_resumed == r0)
    FAIL(16, "a late peer never made the small-call path hand over");
  /* barriers: a one-byte allreduce in bytes of the call's own; its
   * repeats from here try the path */
  t0 = c->fast_tried;
  for (int it = 0; it < 300 && !bad; it++)
    if (braid_barrier(c, NULL) != BRAID_SUCCESS)
      FAIL(19, "barrier %d: %s", it, braid_comm_last_error(c));
  if (!bad)
    bad = tried(c, &t0, 300, shm, "barriers", msg, len);
  /* scatter: the root's sends, one receive each */
  t0 = c->fast_tried;
  for (int it = 0; it < 500 && !bad; it++) {
    int32_t got = -1;
    for (int q = 0; q < n; q++)
      out[q] = it * 10 + q;
    if (braid_scatter(out, &got, 1, BRAID_INT32, 1 % n, c, NULL) !=
            BRAID_SUCCESS ||
        got != it * 10 + rank)
      FAIL(7, "scatter %d: got %d, want %d (%s)", it, got, it * 10 + rank,
           braid_comm_last_error(c));
  }
  if (!bad)
    bad = tried(c, &t0, 500, shm, "scatters", msg, len);
  if (!bad && flight_unfinished(c))
    FAIL(9, "the flight recorder holds an unfinished call");
  if (braid_comm_finalize(c) != BRAID_SUCCESS && !bad)
    FAIL(12, "finalize: %s", err_msg());
  if (!bad)
    counts(c, "", msg, len);
  braid_comm_destroy(c);
  return bad;
}

static void paths_on(const char *tp, int n) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  int failed = run_ranks(n, &id, rank_paths, (void *)tp, 240000, p);
  for (int r = 0; r < n; r++)
    cr_expect_eq(p[r].status, 0, "%s, %d ranks: rank %d: status %d: %s", tp, n,
                 r, p[r].status, p[r].msg);
  cr_assert_eq(failed, 0);
  printf("fast %s %d ranks: %s\n", tp, n, p[0].msg);
}

Test(fast, shm_2) { paths_on("shm", 2); }
Test(fast, shm_3) { paths_on("shm", 3); }
Test(fast, shm_4) { paths_on("shm", 4); }
Test(fast, tcp_2) { paths_on("tcp", 2); }

/* Forced algorithms (BRAID_ALGO, set by the test before the ranks start):
 * schedules with several messages on one connection (ring, rhd's
 * exchanges, tree up and down) and with steps in the scratch (direct: its
 * ranks above 1 fold there). 200 allreduces out of place, 200 in place,
 * then a large one, which is not kept and grows the scratch (direct's
 * rank 2 must see it move: the list keeps offsets into it), then 200 in
 * place again; 5 int32, one rank late now and then; every result checked,
 * every repeat tries the path. arg: the algorithm. */
static int small_sums(braid_comm *c, int rank, int n, int inplace, char *msg,
                      size_t len) {
  int32_t in[5], out[5];
  for (int it = 0; it < 200; it++) {
    if (it % 16 == 0 && it / 16 % n == rank)
      usleep(200);
    for (int i = 0; i < 5; i++)
      in[i] = (rank + 1) * (it + i), out[i] = -1;
    int32_t *o = inplace ? in : out;
    if (braid_allreduce(in, o, 5, BRAID_INT32, BRAID_SUM, c, NULL) !=
        BRAID_SUCCESS)
      FAIL(2, "allreduce %d: %s", it, braid_comm_last_error(c));
    for (int i = 0; i < 5; i++)
      if (o[i] != n * (n + 1) / 2 * (it + i))
        FAIL(3, "allreduce %d%s: element %d is %d, want %d", it,
             inplace ? " in place" : "", i, o[i], n * (n + 1) / 2 * (it + i));
  }
  return 0;
}

static int rank_forced(int rank, int n, const braid_unique_id *id, void *arg,
                       char *msg, size_t len) {
  const char *algo = arg;
  braid_comm *c = up(rank, n, id, "shm", 60000);
  if (c == NULL)
    FAIL(1, "init: %s", err_msg());
  uint64_t t0 = c->fast_tried;
  int bad = small_sums(c, rank, n, 0, msg, len);
  if (!bad)
    bad = tried(c, &t0, 200, 1, "allreduces", msg, len);
  if (!bad)
    bad = small_sums(c, rank, n, 1, msg, len);
  if (!bad)
    bad = tried(c, &t0, 200, 1, "in-place allreduces", msg, len);
  enum { BIG = 1 << 20 };
  int32_t *big = bad ? NULL : malloc(BIG * sizeof *big);
  const void *scr = c->scratch;
  if (!bad && big == NULL)
    FAIL(4, "no memory for %d int32", BIG);
  for (int i = 0; !bad && i < BIG; i++)
    big[i] = rank + i % 7;
  if (!bad && (braid_allreduce(big, big, BIG, BRAID_INT32, BRAID_SUM, c,
                               NULL) != BRAID_SUCCESS ||
               big[BIG - 1] != n * (n - 1) / 2 + n * ((BIG - 1) % 7)))
    FAIL(5, "the large allreduce: got %d (%s)", big[BIG - 1],
         braid_comm_last_error(c));
  free(big);
  int moved = c->scratch != scr;
  if (!bad && !moved && rank >= 2 && strcmp(algo, "direct") == 0)
    FAIL(6, "the large direct allreduce left the scratch where it was (%p)",
         scr);
  t0 = c->fast_tried;
  if (!bad)
    bad = small_sums(c, rank, n, 1, msg, len);
  if (!bad)
    bad = tried(c, &t0, 200, 1, "in-place allreduces after a large one", msg,
                len);
  if (!bad)
    counts(c, moved ? "; the scratch moved" : "; the scratch stayed", msg, len);
  braid_comm_destroy(c);
  return bad;
}

/* Each algorithm in a test of its own: a process reads its configuration
 * once, and the ranks are forked from it. */
static void forced(const char *algo) {
  setenv("BRAID_ALGO", algo, 1);
  for (int n = 2; n <= 3; n++) {
    braid_unique_id id;
    cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
    rank_proc p[3];
    int failed = run_ranks(n, &id, rank_forced, (void *)algo, 60000, p);
    for (int r = 0; r < n; r++)
      cr_expect_eq(p[r].status, 0, "%s, %d ranks: rank %d: status %d: %s", algo,
                   n, r, p[r].status, p[r].msg);
    cr_assert_eq(failed, 0);
    printf("fast, %s, %d ranks: %s\n", algo, n, p[n - 1].msg);
  }
}

Test(fast, forced_ring) { forced("ring"); }
Test(fast, forced_rhd) { forced("rhd"); }
Test(fast, forced_tree) { forced("tree"); }
Test(fast, forced_direct) { forced("direct"); }

/* After repeats, rank 0 broadcasts another count (mode 0) or dies (mode
 * 1); rank 1 repeats the broadcast once more. Its receive finds another
 * call's message, or none, and the executor's loop names the mismatch or
 * the dead rank within the timeout. */
static int rank_fail(int rank, int n, const braid_unique_id *id, void *arg,
                     char *msg, size_t len) {
  int mode = *(const int *)arg;
  braid_comm *c = up(rank, n, id, "shm", 20000);
  if (c == NULL)
    FAIL(1, "init: %s", err_msg());
  int32_t in[4], out[4];
  int bad = bcasts(c, rank, 0, 2, 100, 0, in, out, msg, len);
  if (!bad && c->fast_calls == 0)
    FAIL(2, "100 repeats never took the small-call path");
  if (bad) {
    braid_comm_destroy(c);
    return bad;
  }
  if (rank == 0 && mode == 1)
    _exit(0); /* dies with the communicator up */
  braid_result want = mode == 0 ? BRAID_ERR_MISMATCH : BRAID_ERR_REMOTE;
  const char *words = mode == 0 ? "broadcast" : "rank 0 died";
  braid_result r =
      braid_broadcast(in, out, rank == 0 ? 1 : 2, BRAID_INT32, 0, c, NULL);
  if (rank == 0) /* the root's send goes out; its next call is told */
    r = braid_barrier(c, NULL);
  const char *e = braid_comm_last_error(c);
  if (r != want || strstr(e, words) == NULL)
    bad = 20,
    snprintf(msg, len, "got %s (%s), want %s naming \"%s\"",
             braid_result_string(r), e, braid_result_string(want), words);
  else
    snprintf(msg, len, "%s", e);
  braid_comm_abort(c);
  return bad;
}

static void fail_on(int mode) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  int failed = run_ranks(2, &id, rank_fail, &mode, 60000, p);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
  cr_assert_eq(failed, 0);
  printf("fast, %s: rank 1: %s\n", mode ? "dead root" : "mismatch", p[1].msg);
}

Test(fast, mismatch) { fail_on(0); }
Test(fast, dead_root) { fail_on(1); }

/* BRAID_FAST_PATH=0: every call takes the loop, with the same results. */
static int rank_off(int rank, int n, const braid_unique_id *id, void *arg,
                    char *msg, size_t len) {
  (void)arg;
  braid_comm *c = up(rank, n, id, "shm", 60000);
  if (c == NULL)
    FAIL(1, "init: %s", err_msg());
  int32_t in[8], out[8];
  int bad = bcasts(c, rank, 0, 2, 300, 0, in, out, msg, len);
  for (int it = 0; it < 300 && !bad; it++) {
    int32_t v = rank + it, s = -1;
    if (braid_allreduce(&v, &s, 1, BRAID_INT32, BRAID_SUM, c, NULL) !=
            BRAID_SUCCESS ||
        s != n * (n - 1) / 2 + n * it)
      FAIL(2, "allreduce %d: got %d (%s)", it, s, braid_comm_last_error(c));
  }
  if (!bad && c->fast_tried != 0)
    FAIL(3, "BRAID_FAST_PATH=0, yet %llu calls tried the small-call path",
         (unsigned long long)c->fast_tried);
  braid_comm_destroy(c);
  return bad;
}

Test(fast, off) {
  setenv("BRAID_FAST_PATH", "0", 1); /* read by each rank at its init */
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  int failed = run_ranks(2, &id, rank_off, NULL, 60000, p);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
  cr_assert_eq(failed, 0);
}
