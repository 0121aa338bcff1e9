/*
 * More scenarios over real ranks: alltoallv on streams and in groups, with
 * mismatched counts and a missing peer; many small calls by 8 ranks on 2
 * cores; a debug file per process.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "braid.h"
#include "scenario_ranks.h"

/* ---- alltoallv: streams, groups, mismatched counts ----------------------- */

/* Rank i sends rank j (i + 2j) % 4 int16 elements (zeros among them),
 * valued i * 100 + j * 10 + k. */
static size_t a2av_n(int i, int j) { return (size_t)((i + 2 * j) % 4); }

static int a2av_check(const int16_t *out, const size_t *rd, int rank, int n) {
  for (int j = 0; j < n; j++)
    for (size_t k = 0; k < a2av_n(j, rank); k++)
      if (out[rd[j] + k] != (int16_t)(j * 100 + rank * 10 + (int)k)) {
        fprintf(stderr, "rank %d: element %zu from rank %d is %d\n", rank, k, j,
                out[rd[j] + k]);
        return 1;
      }
  return 0;
}

static int a2av_streams(braid_comm *c, int rank, int n) {
  size_t sc[8], sd[8], rc[8], rd[8];
  int16_t in[64], out[2][64];
  for (int j = 0, so = 0, ro = 0; j < n; j++) {
    sc[j] = a2av_n(rank, j);
    sd[j] = (size_t)so;
    so += 4;
    rc[j] = a2av_n(j, rank);
    rd[j] = (size_t)ro;
    ro += 5;
    for (size_t k = 0; k < sc[j]; k++)
      in[sd[j] + k] = (int16_t)(rank * 100 + j * 10 + (int)k);
  }
  /* on a host stream, twice (queued behind each other) */
  braid_stream *s = NULL;
  if (braid_stream_create(&s) != BRAID_SUCCESS)
    return 70;
  for (int t = 0; t < 2; t++)
    if (braid_alltoallv(in, sc, sd, out[t], rc, rd, BRAID_INT16, c, s) !=
        BRAID_SUCCESS)
      return 71;
  if (braid_stream_synchronize(s) != BRAID_SUCCESS ||
      a2av_check(out[0], rd, rank, n) || a2av_check(out[1], rd, rank, n))
    return 72;
  braid_stream_destroy(s);
  /* in a group, beside an allreduce of bool */
  uint8_t x = rank == 1 ? 0x40 : 0, any = 9;
  memset(out, 0, sizeof out);
  braid_group_start();
  braid_result r1 =
      braid_alltoallv(in, sc, sd, out[0], rc, rd, BRAID_INT16, c, NULL);
  braid_result r2 =
      braid_allreduce(&x, &any, 1, BRAID_BOOL, BRAID_MAX, c, NULL);
  if (braid_group_end() != BRAID_SUCCESS || r1 != BRAID_SUCCESS ||
      r2 != BRAID_SUCCESS || any != 1 || a2av_check(out[0], rd, rank, n))
    return 73;
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return 0;
}

Test(scenarios, alltoallv_streams_and_groups, .timeout = 60) {
  int st[3];
  run_ranks(3, a2av_streams, 50, st);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}

/* Rank 0 expects from rank 1 a count other than the one rank 1 sends:
 * g_a2av_want, against g_a2av_send (both nonzero, or one of them 0: a
 * block one side does not send or expect). Rank 0 fails with
 * BRAID_ERR_MISMATCH naming both counts and tells every rank: rank 1's
 * alltoallv, or else its barrier after it, fails with the same
 * mismatch, found by rank 0, well before the 10 s timeout. With
 * g_a2av_stay rank 0 stays a while after its failure (rank 1 learns it
 * from the telling alone); else it leaves at once, so that rank 1 also
 * sees its connections close, and must still name the mismatch. */
static size_t g_a2av_want, g_a2av_send;
static int g_a2av_stay;

static int a2av_mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  float in[16] = {0}, out[16];
  size_t sc[2] = {0, 0}, rc[2] = {0, 0}, d[2] = {0, 8};
  if (rank == 1)
    sc[0] = g_a2av_send;
  else
    rc[1] = g_a2av_want;
  double t0 = now_s();
  braid_result r =
      braid_alltoallv(in, sc, d, out, rc, d, BRAID_FLOAT32, c, NULL);
  if (rank == 1 && r == BRAID_SUCCESS) /* its own blocks all matched */
    r = braid_barrier(c, NULL);
  double dt = now_s() - t0;
  const char *msg = braid_comm_last_error(c);
  char want[96];
  snprintf(want, sizeof want,
           "rank 1 sends %zu elements to rank 0, which "
           "expects %zu",
           g_a2av_send, g_a2av_want);
  if (r != BRAID_ERR_MISMATCH || strstr(msg, want) == NULL ||
      (rank == 1 && strstr(msg, "found by rank 0") == NULL) || dt > 5.0) {
    fprintf(stderr, "rank %d after %.2f s: %s: %s\n", rank, dt,
            braid_result_string(r), msg);
    return 80;
  }
  if (rank == 0 && g_a2av_stay)
    sleep(3);
  braid_comm_abort(c);
  return 0;
}

static void a2av_mismatch_on(const char *tp, size_t want, size_t send,
                             int stay) {
  setenv("BRAID_TRANSPORT", tp, 1);
  setenv("BRAID_TIMEOUT", "10", 1);
  g_a2av_want = want;
  g_a2av_send = send;
  g_a2av_stay = stay;
  int st[2];
  run_ranks(2, a2av_mismatch, 30, st);
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0, "%s want %zu send %zu%s: rank %d exit %d", tp, want,
                 send, stay ? ", rank 0 staying" : "", r, st[r]);
}

/* A rank that never calls alltoallv: the other's call ends with
 * BRAID_ERR_TIMEOUT after the communicator's timeout, naming the rank. */
static int a2av_lonely(braid_comm *c, int rank, int n) {
  float in[8] = {0}, out[8];
  size_t cnt[2] = {4, 4}, d[2] = {0, 4};
  if (rank == 1) {
    sleep(5); /* past rank 0's timeout, with room for a slow machine */
    braid_comm_abort(c);
    return 0;
  }
  (void)n;
  double t0 = now_s();
  braid_result r =
      braid_alltoallv(in, cnt, d, out, cnt, d, BRAID_FLOAT32, c, NULL);
  double dt = now_s() - t0;
  const char *msg = braid_comm_last_error(c);
  int rc = 0;
  if (r != BRAID_ERR_TIMEOUT || dt > 4.5 || strstr(msg, "rank 1") == NULL) {
    fprintf(stderr, "rank 0 after %.2f s: %s: %s\n", dt, braid_result_string(r),
            msg);
    rc = 90;
  }
  braid_comm_abort(c);
  return rc;
}

Test(scenarios, alltoallv_bounded_by_timeout, .timeout = 60) {
  setenv("BRAID_TIMEOUT", "1", 1);
  int st[2];
  run_ranks(2, a2av_lonely, 30, st);
  unsetenv("BRAID_TIMEOUT");
  cr_expect_eq(st[0], 0, "rank 0 exit %d", st[0]);
  cr_expect_eq(st[1], 0);
}

Test(scenarios, alltoallv_count_mismatch, .timeout = 120) {
  a2av_mismatch_on("shm", 5, 3, 1);
  a2av_mismatch_on("shm", 0, 3, 1);
  a2av_mismatch_on("shm", 4, 0, 0);
  a2av_mismatch_on("tcp", 0, 3, 1);
  a2av_mismatch_on("tcp", 2, 3, 0);
}

/* ---- many in a row, 8 ranks on 2 cores ----------------------------------- */

static int many(braid_comm *c, int rank, int n) {
  for (int it = 0; it < 500; it++) {
    int64_t x = rank * it, s;
    if (braid_allreduce(&x, &s, 1, BRAID_INT64, BRAID_SUM, c, NULL) !=
        BRAID_SUCCESS)
      return 70;
    if (s != (int64_t)it * n * (n - 1) / 2)
      return 71;
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return 0;
}

Test(scenarios, eight_ranks_many_small, .timeout = 120) {
  int st[8];
  double t0 = now_s();
  run_ranks(8, many, 110, st);
  for (int r = 0; r < 8; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
  cr_log_info("500 allreduces on 8 ranks: %.2f s", now_s() - t0);
}

/* ---- logging --------------------------------------------------------------
 */

static int logged(braid_comm *c, int rank, int n) {
  (void)n;
  int32_t x = rank, s = 0;
  int e = braid_allreduce(&x, &s, 1, BRAID_INT32, BRAID_SUM, c, NULL) != 0;
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return e;
}

Test(scenarios, debug_file_per_process, .timeout = 60) {
  char dir[] = "/tmp/braid-log-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s/%%h-%%p.log", dir);
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_SUBSYS", "INIT", 1);
  setenv("BRAID_DEBUG_FILE", pattern, 1);
  int st[2];
  run_ranks(2, logged, 50, st);
  cr_expect_eq(st[0], 0);
  cr_expect_eq(st[1], 0);
  /* one file per rank process, named by host and pid, with INIT lines and
   * nothing from the excluded subsystems (the COLL/SCHED lines) */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ls %s/*.log | wc -l", dir);
  FILE *p = popen(cmd, "r");
  int files = 0;
  cr_assert(fscanf(p, "%d", &files) == 1);
  pclose(p);
  cr_expect_geq(files, 2, "%d log files in %s", files, dir);
  snprintf(cmd, sizeof cmd, "cat %s/*.log | grep -c 'braid INFO comm '", dir);
  p = popen(cmd, "r");
  int lines = 0;
  cr_assert(fscanf(p, "%d", &lines) == 1);
  pclose(p);
  cr_expect_geq(lines, 2, "INIT lines in the logs: %d", lines);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

/* ---- a call of more than 2^31 slices --------------------------------------
 */

/* A send of 2^52 float32 (16 PiB, 2^31 and more slices of the default
 * 512 KiB) that nobody receives ends at the timeout: the slice count once
 * wrapped to a negative int, and the send returned BRAID_SUCCESS at once
 * without sending anything. Over shm a message this size goes single-copy,
 * so the sender never reads its (small) buffer: only the receiver would. */
static int huge_send(braid_comm *c, int rank, int n) {
  (void)n;
  float a[64] = {0};
  if (rank == 0) {
    sleep(3);
    braid_comm_abort(c);
    return 0;
  }
  braid_result r = braid_send(a, (size_t)1 << 52, BRAID_FLOAT32, 0, c, NULL);
  if (r == BRAID_SUCCESS) {
    fprintf(stderr, "rank 1: a send of 2^52 elements nobody received "
                    "succeeded\n");
    return 81;
  }
  braid_comm_abort(c);
  return 0;
}

Test(scenarios, more_slices_than_an_int, .timeout = 60) {
  setenv("BRAID_TRANSPORT", "shm", 1);
  setenv("BRAID_TIMEOUT", "1", 1);
  int st[2];
  run_ranks(2, huge_send, 30, st);
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}

/* A host stream runs its calls in issue order also across communicators
 * (each has its own progress thread): an allreduce on the world writes x,
 * the next call on the stream, on a split, reads it. Before, the second
 * call could read x before the first had written it (y = n where n * n was
 * due, in about one run of three). Then a group over both communicators on
 * the stream whose units wait on each other across ranks (rank 0 sends on
 * the world and receives on the split, rank 1 the other way round, 4 MiB
 * each): its units must not be ordered after one another, or neither rank
 * gets past its first. */
static int stream_across_comms(braid_comm *a, int rank, int n) {
  braid_comm *b = NULL;
  braid_stream *s = NULL;
  if (braid_comm_split(a, 0, rank, &b) != BRAID_SUCCESS ||
      braid_stream_create(&s) != BRAID_SUCCESS)
    return 1;
  const size_t cnt = 65536;
  float *x = malloc(cnt * sizeof *x), *y = malloc(cnt * sizeof *y);
  int e = x == NULL || y == NULL;
  for (int it = 0; it < 20 && !e; it++) {
    for (size_t k = 0; k < cnt; k++) {
      x[k] = 1.0f;
      y[k] = 0.0f;
    }
    if (braid_allreduce(x, x, cnt, BRAID_FLOAT32, BRAID_SUM, a, s) !=
            BRAID_SUCCESS ||
        braid_allreduce(x, y, cnt, BRAID_FLOAT32, BRAID_SUM, b, s) !=
            BRAID_SUCCESS ||
        braid_stream_synchronize(s) != BRAID_SUCCESS)
      e = 2;
    for (size_t k = 0; k < cnt && !e; k++)
      if (y[k] != (float)(n * n)) {
        fprintf(stderr, "rank %d round %d: y[%zu] = %g, not %d\n", rank, it, k,
                y[k], n * n);
        e = 3;
      }
  }
  const size_t big = (size_t)1 << 20; /* floats: 4 MiB */
  float *out = malloc(big * sizeof *out), *in = malloc(big * sizeof *in);
  if (!e && (out == NULL || in == NULL))
    e = 1;
  for (size_t k = 0; !e && k < big; k++)
    out[k] = (float)(rank + 1);
  const int peer = 1 - rank;
  if (!e) {
    braid_group_start();
    if (rank == 0) {
      braid_send(out, big, BRAID_FLOAT32, peer, a, s);
      braid_recv(in, big, BRAID_FLOAT32, peer, b, s);
    } else {
      braid_send(out, big, BRAID_FLOAT32, peer, b, s);
      braid_recv(in, big, BRAID_FLOAT32, peer, a, s);
    }
    if (braid_group_end() != BRAID_SUCCESS ||
        braid_stream_synchronize(s) != BRAID_SUCCESS)
      e = 4;
    else if (in[0] != (float)(peer + 1) || in[big - 1] != (float)(peer + 1))
      e = 5;
  }
  free(out);
  free(in);
  free(x);
  free(y);
  braid_stream_destroy(s);
  braid_comm_destroy(b);
  braid_comm_finalize(a);
  braid_comm_destroy(a);
  return e;
}

Test(scenarios, host_stream_order_across_communicators, .timeout = 90) {
  setenv("BRAID_TIMEOUT", "20", 1);
  int st[2];
  run_ranks(2, stream_across_comms, 80, st);
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}
