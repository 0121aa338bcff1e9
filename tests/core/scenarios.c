/*
 * Scenarios over real ranks (forked processes): argument errors, a rank
 * killed mid-collective, BRAID_CHECK mismatches, timeouts, split
 * communicators, interleaved communicators, host streams and groups.
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

/* ---- argument errors ----------------------------------------------------- */

static int expect_invalid(braid_comm *c, braid_result r, const char *word) {
  if (r != BRAID_ERR_INVALID_ARG) {
    fprintf(stderr, "expected invalid argument for '%s', got %s\n", word,
            braid_result_string(r));
    return 1;
  }
  if (strstr(braid_comm_last_error(c), word) == NULL) {
    fprintf(stderr, "error '%s' does not name '%s'\n", braid_comm_last_error(c),
            word);
    return 1;
  }
  return 0;
}

static int bad_args(braid_comm *c, int rank, int n) {
  float a[64] = {0}, b[64] = {0};
  int e = 0;
  e |= expect_invalid(c, braid_comm_rank(c, NULL), "rank is NULL");
  e |= expect_invalid(c, braid_comm_size(c, NULL), "size is NULL");
  e |= expect_invalid(
      c, braid_allreduce(NULL, b, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      "sendbuf");
  e |= expect_invalid(
      c, braid_allreduce(a, NULL, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      "recvbuf");
  e |= expect_invalid(
      c, braid_allreduce(a, b, 4, (braid_dtype)42, BRAID_SUM, c, NULL),
      "dtype");
  e |= expect_invalid(
      c, braid_allreduce(a, b, 4, BRAID_FLOAT32, (braid_op)9, c, NULL), "op");
  e |= expect_invalid(c, braid_broadcast(a, b, 4, BRAID_FLOAT32, n, c, NULL),
                      "root");
  e |= expect_invalid(
      c, braid_reduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, -1, c, NULL), "root");
  e |= expect_invalid(c, braid_send(a, 4, BRAID_FLOAT32, n + 3, c, NULL),
                      "peer");
  e |= expect_invalid(
      c, braid_allreduce(a, b, SIZE_MAX / 2, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      "count");
  e |= expect_invalid(
      c, braid_allreduce(a, a + 1, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      "overlap");
  e |= expect_invalid(
      c,
      braid_allreduce((char *)a + 1, b, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL),
      "aligned");
  /* bitwise ops on float types, avg on bool: refused, naming both */
  static const braid_dtype flts[] = {BRAID_FLOAT16, BRAID_BFLOAT16,
                                     BRAID_FLOAT32, BRAID_FLOAT64};
  for (int f = 0; f < 4; f++)
    for (int op = BRAID_BAND; op <= BRAID_BXOR; op++) {
      char want[80];
      snprintf(want, sizeof want, "op %s is not defined on dtype %s",
               braid_op_name((braid_op)op), braid_dtype_name(flts[f]));
      e |= expect_invalid(
          c, braid_allreduce(a, b, 4, flts[f], (braid_op)op, c, NULL), want);
    }
  e |= expect_invalid(
      c, braid_reduce_scatter(a, b, 2, BRAID_FLOAT32, BRAID_BXOR, c, NULL),
      "op bxor is not defined on dtype float32");
  e |= expect_invalid(c,
                      braid_reduce(a, b, 4, BRAID_BOOL, BRAID_AVG, 0, c, NULL),
                      "op avg is not defined on dtype bool");
  /* alltoallv's arguments */
  size_t cnt[16], dsp[16], dsp2[16];
  for (int j = 0; j < n; j++) {
    cnt[j] = 2;
    dsp[j] = (size_t)j * 2;
    dsp2[j] = (size_t)j; /* blocks of 2 a step of 1 apart: overlapping */
  }
  e |= expect_invalid(
      c, braid_alltoallv(a, NULL, dsp, b, cnt, dsp, BRAID_FLOAT32, c, NULL),
      "sendcounts is NULL");
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, b, cnt, NULL, BRAID_FLOAT32, c, NULL),
      "rdispls is NULL");
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, NULL, cnt, dsp, BRAID_FLOAT32, c, NULL),
      "recvbuf is NULL");
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, b, cnt, dsp2, BRAID_FLOAT32, c, NULL),
      "receive blocks overlap");
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, a, cnt, dsp, BRAID_FLOAT32, c, NULL),
      "no in-place form");
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, b, cnt, dsp, (braid_dtype)42, c, NULL),
      "dtype");
  size_t cnt3[16];
  memcpy(cnt3, cnt, sizeof cnt3);
  cnt3[rank] = 3; /* its own block: sends 3, receives 2 */
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt3, dsp, b, cnt, dsp, BRAID_FLOAT32, c, NULL),
      "sends itself");
  dsp[n - 1] = SIZE_MAX / 2;
  e |= expect_invalid(
      c, braid_alltoallv(a, cnt, dsp, b, cnt, dsp2, BRAID_FLOAT32, c, NULL),
      "sdispls");
  /* a group's calls on two streams */
  braid_stream *s1 = NULL, *s2 = NULL;
  if (braid_stream_create(&s1) != BRAID_SUCCESS ||
      braid_stream_create(&s2) != BRAID_SUCCESS)
    return 1;
  braid_group_start();
  braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, c, s1);
  braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, c, s2);
  e |= expect_invalid(c, braid_group_end(), "another stream");
  if (braid_stream_synchronize(s1) != BRAID_SUCCESS ||
      braid_stream_destroy(s1) != BRAID_SUCCESS ||
      braid_stream_destroy(s2) != BRAID_SUCCESS)
    e = 1;
  /* the communicator is still usable */
  for (int i = 0; i < 4; i++)
    a[i] = (float)(rank + 1);
  braid_result r = braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS || b[0] != (float)(n * (n + 1) / 2)) {
    fprintf(stderr, "allreduce after bad arguments: %s, b[0]=%g\n",
            braid_result_string(r), b[0]);
    e = 1;
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return e;
}

Test(scenarios, bad_arguments_keep_comm_usable, .timeout = 60) {
  int st[2];
  run_ranks(2, bad_args, 50, st);
  cr_expect_eq(st[0], 0, "rank 0 exit %d", st[0]);
  cr_expect_eq(st[1], 0, "rank 1 exit %d", st[1]);
}

/* Calls with no communicator to hold a message: refused, named in the log. */

/* Runs f with stderr captured; 1 when the captured text holds every word. */
static int log_names(braid_result (*f)(void), braid_result want,
                     const char *const *words) {
  fflush(stderr);
  char path[] = "/tmp/braid-scen-log-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  int saved = dup(2);
  dup2(fd, 2);
  braid_result r = f();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[4096] = "";
  ssize_t k = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  unlink(path);
  text[k > 0 ? k : 0] = '\0';
  cr_expect_eq(r, want, "got %s, log:\n%s", braid_result_string(r), text);
  for (const char *const *w = words; *w; w++)
    if (strstr(text, *w) == NULL) {
      cr_expect_fail("the log does not name '%s':\n%s", *w, text);
      return 0;
    }
  return 1;
}

static braid_config cfg_bad;
static braid_result init_with_cfg_bad(void) {
  braid_unique_id id;
  braid_comm *c = NULL;
  braid_result r = braid_get_unique_id(&id);
  if (r == BRAID_SUCCESS)
    r = braid_comm_init(&c, 1, &id, 0, &cfg_bad);
  if (c != NULL)
    braid_comm_destroy(c);
  return r;
}

static const char *id_text;
static braid_result id_from_text(void) {
  braid_unique_id id;
  return braid_unique_id_from_string(&id, id_text);
}

Test(scenarios, bad_configs_and_ids_are_named, .timeout = 60) {
  /* out-of-range config fields: refused before the rendezvous */
  for (int k = 0; k < 5; k++) {
    braid_config_init(&cfg_bad);
    const char *what[2] = {NULL, NULL};
    switch (k) {
    case 0:
      cfg_bad.timeout_ms = -5;
      what[0] = "timeout_ms is -5";
      break;
    case 1:
      cfg_bad.nchannels = -1;
      what[0] = "nchannels is -1";
      break;
    case 2:
      cfg_bad.nchannels = 33;
      what[0] = "nchannels is 33";
      break;
    case 3:
      cfg_bad.check = 7;
      what[0] = "check is 7";
      break;
    default:
      cfg_bad.transport = "tpc";
      what[0] = "transport \"tpc\"";
      break;
    }
    log_names(init_with_cfg_bad, BRAID_ERR_INVALID_ARG, what);
  }
  /* the same config made valid forms a communicator */
  braid_config_init(&cfg_bad);
  cfg_bad.timeout_ms = 5000;
  cfg_bad.nchannels = 4;
  cfg_bad.transport = "shm";
  const char *none[] = {NULL};
  log_names(init_with_cfg_bad, BRAID_SUCCESS, none);

  /* ids: text that is not hex, of the wrong length, or hex that is no id */
  char text[2 * BRAID_UNIQUE_ID_BYTES + 1];
  memset(text, 'a', sizeof text - 1);
  text[sizeof text - 1] = '\0';
  id_text = text;
  const char *no_magic[] = {"not a braid unique id", NULL};
  log_names(id_from_text, BRAID_ERR_INVALID_ARG, no_magic);
  text[7] = 'z';
  const char *not_hex[] = {"character 7 ('z')", NULL};
  log_names(id_from_text, BRAID_ERR_INVALID_ARG, not_hex);
  id_text = "abcd";
  const char *short_text[] = {"4 characters", NULL};
  log_names(id_from_text, BRAID_ERR_INVALID_ARG, short_text);
  /* a real id's text reads back */
  braid_unique_id id, back;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  cr_assert_eq(braid_unique_id_to_string(&id, text, sizeof text),
               BRAID_SUCCESS);
  cr_expect_eq(braid_unique_id_from_string(&back, text), BRAID_SUCCESS);
  cr_expect_eq(memcmp(&id, &back, sizeof id), 0);
}

/* ---- groups of collectives ---------------------------------------------- */

/* Collectives issued as one group run together: each needs its own scratch.
 * Sizes grow and shrink from group to group (the communicator's scratch is
 * reserved anew) and every element is checked. Under AddressSanitizer a
 * part moved by a later op's reservation is a use after free. */
static int grouped_collectives(braid_comm *c, int rank, int n) {
  int e = 0;
  const size_t sizes[] = {1, 7, 300, 5000, 3, 70000, 2, 1023, 65539, 9};
  const int ns = (int)(sizeof sizes / sizeof *sizes);
  for (int it = 0; it < 2 * ns && !e; it++) {
    size_t na = sizes[it % ns], nb = 2 * sizes[(it + 3) % ns] + 1;
    size_t nr = (size_t)n * sizes[(it + 5) % ns];
    int32_t *a = malloc(na * 4), *b = malloc(nb * 4), *rs = malloc(nr * 4),
            *ro = malloc(nr / (size_t)n * 4);
    for (size_t i = 0; i < na; i++)
      a[i] = (int32_t)(i % 1000) + rank;
    for (size_t i = 0; i < nb; i++)
      b[i] = (int32_t)(i % 777) * (rank + 1);
    for (size_t i = 0; i < nr; i++)
      rs[i] = (int32_t)(i % 555) + 2 * rank;
    braid_group_start();
    braid_allreduce(a, a, na, BRAID_INT32, BRAID_SUM, c, NULL);
    braid_allreduce(b, b, nb, BRAID_INT32, BRAID_MAX, c, NULL);
    braid_reduce_scatter(rs, ro, nr / (size_t)n, BRAID_INT32, BRAID_SUM, c,
                         NULL);
    braid_result r = braid_group_end();
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "group %d: %s (%s)\n", it, braid_result_string(r),
              braid_comm_last_error(c));
      e = 1;
    }
    int tri = n * (n - 1) / 2;
    for (size_t i = 0; i < na && !e; i++)
      if (a[i] != n * (int32_t)(i % 1000) + tri) {
        fprintf(stderr, "group %d: allreduce a[%zu] = %d\n", it, i, a[i]);
        e = 1;
      }
    for (size_t i = 0; i < nb && !e; i++)
      if (b[i] != (int32_t)(i % 777) * n) {
        fprintf(stderr, "group %d: allreduce max b[%zu] = %d\n", it, i, b[i]);
        e = 1;
      }
    for (size_t i = 0; i < nr / (size_t)n && !e; i++) {
      size_t g = (size_t)rank * (nr / (size_t)n) + i;
      if (ro[i] != n * (int32_t)(g % 555) + 2 * tri) {
        fprintf(stderr, "group %d: reduce_scatter [%zu] = %d\n", it, i, ro[i]);
        e = 1;
      }
    }
    free(a);
    free(b);
    free(rs);
    free(ro);
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return e;
}

static void grouped(int n, const char *transport) {
  setenv("BRAID_TRANSPORT", transport, 1);
  setenv("BRAID_TIMEOUT", "60", 1);
  int st[4];
  run_ranks(n, grouped_collectives, 110, st);
  for (int r = 0; r < n; r++)
    cr_expect_eq(st[r], 0, "%s, %d ranks: rank %d exit %d", transport, n, r,
                 st[r]);
  unsetenv("BRAID_TRANSPORT");
}

Test(scenarios, grouped_collectives_shm, .timeout = 120) { grouped(3, "shm"); }
Test(scenarios, grouped_collectives_tcp, .timeout = 120) { grouped(2, "tcp"); }

/* ---- a rank killed mid-collective --------------------------------------- */

#define VICTIM 2

static void *killer(void *arg) {
  (void)arg;
  usleep(300 * 1000);
  kill(getpid(), SIGKILL);
  return NULL;
}

static int dead_rank(braid_comm *c, int rank, int n) {
  (void)n;
  size_t count = (size_t)4 << 20;
  float *buf = calloc(count, sizeof *buf);
  if (rank == VICTIM) {
    pthread_t t;
    pthread_create(&t, NULL, killer, NULL);
  }
  double t0 = now_s();
  for (int it = 0; it < 100000; it++) {
    braid_result r =
        braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    if (r != BRAID_SUCCESS) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", braid_comm_last_error(c));
      char want[32];
      snprintf(want, sizeof want, "rank %d", VICTIM);
      fprintf(stderr, "rank %d after %.2f s: %s: %s\n", rank, now_s() - t0,
              braid_result_string(r), msg);
      /* later calls fail at once: the communicator is broken */
      braid_result r2 =
          braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
      /* ... and still say why */
      int why = strstr(braid_comm_last_error(c), want) != NULL;
      braid_comm_abort(c);
      if (r != BRAID_ERR_REMOTE)
        return 10;
      if (strstr(msg, want) == NULL)
        return 11;
      /* a death seen by this rank's own check names the host too */
      if (strstr(msg, "died or closed its connections during") != NULL &&
          strstr(msg, " ran on host ") == NULL)
        return 15;
      if (r2 == BRAID_SUCCESS)
        return 12;
      if (!why)
        return 14;
      return 0;
    }
  }
  return 13; /* never noticed */
}

static void dead_rank_on(const char *transport, int n) {
  setenv("BRAID_TRANSPORT", transport, 1);
  setenv("BRAID_TIMEOUT", "30", 1);
  int st[8];
  double t0 = now_s();
  run_ranks(n, dead_rank, 60, st);
  double dt = now_s() - t0;
  for (int r = 0; r < n; r++) {
    if (r == VICTIM)
      cr_expect_eq(st[r], 128 + SIGKILL, "the victim was not killed: %d",
                   st[r]);
    else
      cr_expect_eq(st[r], 0,
                   "%s: rank %d exit %d (10: not REMOTE, 11: does "
                   "not name the rank, 13: never noticed, 14: a later "
                   "call does not name it, 15: no host, -1: hung)",
                   transport, r, st[r]);
  }
  cr_expect_lt(dt, 30.0, "survivors took %.1f s (timeout 30 s)", dt);
}

Test(scenarios, killed_rank_reported_shm, .timeout = 90) {
  dead_rank_on("shm", 4);
}
Test(scenarios, killed_rank_reported_tcp, .timeout = 90) {
  dead_rank_on("tcp", 4);
}

/* ---- BRAID_CHECK ----------------------------------------------------------
 */

static int mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  float a[16] = {0}, b[16];
  braid_result r;
  /* one good call first */
  r = braid_allreduce(a, b, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS)
    return 20;
  if (rank == 1)
    r = braid_broadcast(a, b, 16, BRAID_FLOAT32, 0, c, NULL);
  else
    r = braid_allreduce(a, b, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
  if (r != BRAID_ERR_MISMATCH)
    return 21;
  if (strstr(msg, "rank 1") == NULL || strstr(msg, "broadcast") == NULL ||
      strstr(msg, "allreduce") == NULL)
    return 22;
  braid_comm_abort(c);
  return 0;
}

Test(scenarios, check_reports_mismatch, .timeout = 60) {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "20", 1);
  int st[3];
  run_ranks(3, mismatch, 50, st);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}

static int count_mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  float a[16] = {0}, b[16];
  braid_result r = braid_allreduce(a, b, rank == 0 ? 16 : 8, BRAID_FLOAT32,
                                   BRAID_SUM, c, NULL);
  const char *msg = braid_comm_last_error(c);
  if (r != BRAID_ERR_MISMATCH || strstr(msg, "count 8") == NULL ||
      strstr(msg, "count 16") == NULL) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
    return 23;
  }
  braid_comm_abort(c);
  return 0;
}

Test(scenarios, check_reports_count_mismatch, .timeout = 60) {
  setenv("BRAID_CHECK", "1", 1);
  int st[2];
  run_ranks(2, count_mismatch, 50, st);
  cr_expect_eq(st[0], 0);
  cr_expect_eq(st[1], 0);
}

/* An alltoallv runs as sends and receives, which BRAID_CHECK does not
 * compare; the call itself is compared (kind, dtype, call number): a rank
 * in a barrier where its peer is in an alltoallv is named at once, the
 * barrier as what its caller called (it runs as a one-byte allreduce). */
static int a2av_vs_barrier(braid_comm *c, int rank, int n) {
  (void)n;
  float a[4] = {1, 2, 3, 4}, b[4];
  size_t cnt[2] = {2, 2}, at[2] = {0, 2};
  braid_result r = braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS)
    return 24;
  r = rank == 0
          ? braid_alltoallv(a, cnt, at, b, cnt, at, BRAID_FLOAT32, c, NULL)
          : braid_barrier(c, NULL);
  const char *msg = braid_comm_last_error(c);
  if (r != BRAID_ERR_MISMATCH ||
      strstr(msg, "alltoallv #2 (float32)") == NULL ||
      strstr(msg, "barrier #2") == NULL) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
    return 25;
  }
  braid_comm_abort(c);
  return 0;
}

Test(scenarios, check_reports_alltoallv_mismatch, .timeout = 60) {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "20", 1);
  int st[2];
  run_ranks(2, a2av_vs_barrier, 50, st);
  cr_expect_eq(st[0], 0);
  cr_expect_eq(st[1], 0);
}

/* The commonest mismatch: a rank skips a collective and goes on to
 * finalize. Every rank fails with BRAID_ERR_MISMATCH at once, the others
 * naming the call they made; before, they failed with an invalid argument
 * ("boot_allgather: rank 1 sent a boot_barrier message instead") or, on a
 * rank whose other peer had already left, a remote error. */
static int skipped(braid_comm *c, int rank, int n) {
  (void)n;
  float a[16] = {0}, b[16];
  if (braid_allreduce(a, b, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
      BRAID_SUCCESS)
    return 26;
  double t0 = now_s();
  braid_result r =
      rank == 1 ? braid_comm_finalize(c)
                : braid_allreduce(a, b, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  double took = now_s() - t0;
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank,
          braid_result_string(r), took, msg);
  if (r != BRAID_ERR_MISMATCH || took > 10)
    return 27;
  if (rank == 1 ? strstr(msg, "braid_comm_finalize: a rank is in another "
                              "call") == NULL
                : strstr(msg, "allreduce #2 (count 16") == NULL)
    return 28;
  return 0; /* exits: its peers must still name the mismatch */
}

Test(scenarios, check_reports_a_skipped_call, .timeout = 60) {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "20", 1);
  for (int round = 0; round < 3; round++) {
    int st[3];
    run_ranks(3, skipped, 50, st);
    for (int r = 0; r < 3; r++)
      cr_expect_eq(st[r], 0, "round %d: rank %d exit %d", round, r, st[r]);
  }
}

/* ---- timeout --------------------------------------------------------------
 */

static int lonely(braid_comm *c, int rank, int n) {
  (void)n;
  float a[4] = {0}, b[4];
  if (rank == 1) {
    sleep(6); /* never joins the collective */
    braid_comm_abort(c);
    return 0;
  }
  double t0 = now_s();
  braid_result r = braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  double dt = now_s() - t0;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", braid_comm_last_error(c));
  fprintf(stderr, "rank 0 after %.2f s: %s: %s\n", dt, braid_result_string(r),
          msg);
  braid_comm_abort(c);
  if (r != BRAID_ERR_TIMEOUT)
    return 30;
  if (dt < 1.5 || dt > 5.0)
    return 31;
  if (strstr(msg, "timed out") == NULL || strstr(msg, "rank 1") == NULL)
    return 32;
  return 0;
}

Test(scenarios, wait_bounded_by_timeout, .timeout = 60) {
  setenv("BRAID_TIMEOUT", "2", 1);
  int st[2];
  run_ranks(2, lonely, 30, st);
  cr_expect_eq(st[0], 0, "rank 0 exit %d (30: not a timeout, 31: wrong time)",
               st[0]);
  cr_expect_eq(st[1], 0);
}

/* ---- split and interleaving ---------------------------------------------- */

static int split(braid_comm *c, int rank, int n) {
  braid_comm *sub = NULL, *none = (braid_comm *)1;
  /* even/odd, reversed order by key */
  if (braid_comm_split(c, rank % 2, -rank, &sub) != BRAID_SUCCESS)
    return 40;
  int sr, sn;
  braid_comm_rank(sub, &sr);
  braid_comm_size(sub, &sn);
  int want_n = (n + 1 - rank % 2) / 2;
  if (sn != want_n)
    return 41;
  /* the highest old rank of the colour is new rank 0 */
  int64_t mine = rank, got[16];
  if (braid_allgather(&mine, got, 1, BRAID_INT64, sub, NULL) != BRAID_SUCCESS)
    return 42;
  for (int i = 0; i + 1 < sn; i++)
    if (got[i] <= got[i + 1] || got[i] % 2 != rank % 2)
      return 43;
  if (got[sr] != rank)
    return 44;
  /* interleave collectives on both communicators */
  for (int it = 0; it < 200; it++) {
    int64_t x = rank + it, s1, s2;
    if (braid_allreduce(&x, &s1, 1, BRAID_INT64, BRAID_SUM, c, NULL) ||
        braid_allreduce(&x, &s2, 1, BRAID_INT64, BRAID_SUM, sub, NULL))
      return 45;
    int64_t e1 = (int64_t)n * (n - 1) / 2 + (int64_t)n * it, e2 = 0;
    for (int q = rank % 2; q < n; q += 2)
      e2 += q + it;
    if (s1 != e1 || s2 != e2)
      return 46;
  }
  if (braid_comm_split(c, rank == 0 ? BRAID_SPLIT_NOCOLOR : 1, 0, &none) !=
      BRAID_SUCCESS)
    return 47;
  if (rank == 0 && none != NULL)
    return 48;
  if (rank != 0) {
    int nn;
    braid_comm_size(none, &nn);
    if (nn != n - 1)
      return 49;
    braid_comm_destroy(none);
  }
  braid_comm_finalize(sub);
  braid_comm_destroy(sub);
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return 0;
}

Test(scenarios, split_and_interleave, .timeout = 120) {
  int st[5];
  run_ranks(5, split, 110, st);
  for (int r = 0; r < 5; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}

/* ---- streams and groups ---------------------------------------------------
 */

static int streams(braid_comm *c, int rank, int n) {
  braid_stream *s = NULL;
  if (braid_stream_create(&s) != BRAID_SUCCESS)
    return 50;
  enum { K = 12, N = 100000 };
  float *bufs[K];
  for (int k = 0; k < K; k++) {
    bufs[k] = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
      bufs[k][i] = (float)(rank + k);
    if (braid_allreduce(bufs[k], bufs[k], N, BRAID_FLOAT32, BRAID_SUM, c, s) !=
        BRAID_SUCCESS)
      return 51;
  }
  braid_result q = braid_stream_query(s);
  if (q != BRAID_SUCCESS && q != BRAID_IN_PROGRESS)
    return 52;
  /* a blocking call after queued ones runs after them */
  int32_t one = 1, tot = 0;
  if (braid_allreduce(&one, &tot, 1, BRAID_INT32, BRAID_SUM, c, NULL) !=
          BRAID_SUCCESS ||
      tot != n)
    return 53;
  if (braid_stream_synchronize(s) != BRAID_SUCCESS)
    return 54;
  if (braid_stream_query(s) != BRAID_SUCCESS)
    return 55;
  for (int k = 0; k < K; k++) {
    float want = (float)(n * (n - 1) / 2 + n * k);
    for (int i = 0; i < N; i += 997)
      if (bufs[k][i] != want)
        return 56;
    free(bufs[k]);
  }
  braid_stream_destroy(s);
  /* groups: several sends to one peer keep their order */
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  int32_t out[3] = {rank * 10, rank * 10 + 1, rank * 10 + 2}, in[3] = {0};
  braid_group_start();
  for (int i = 0; i < 3; i++)
    braid_send(&out[i], 1, BRAID_INT32, to, c, NULL);
  for (int i = 0; i < 3; i++)
    braid_recv(&in[i], 1, BRAID_INT32, from, c, NULL);
  if (braid_group_end() != BRAID_SUCCESS)
    return 57;
  for (int i = 0; i < 3; i++)
    if (in[i] != from * 10 + i)
      return 58;
  /* collectives inside a group */
  int32_t x = rank, s1 = 0, s2 = 0;
  braid_group_start();
  braid_allreduce(&x, &s1, 1, BRAID_INT32, BRAID_SUM, c, NULL);
  braid_allreduce(&x, &s2, 1, BRAID_INT32, BRAID_MAX, c, NULL);
  if (braid_group_end() != BRAID_SUCCESS || s1 != n * (n - 1) / 2 ||
      s2 != n - 1)
    return 59;
  if (braid_barrier(c, NULL) != BRAID_SUCCESS)
    return 60;
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  return 0;
}

Test(scenarios, streams_and_groups, .timeout = 120) {
  int st[3];
  run_ranks(3, streams, 110, st);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}

Test(scenarios, streams_and_groups_tcp, .timeout = 120) {
  setenv("BRAID_TRANSPORT", "tcp", 1);
  int st[3];
  run_ranks(3, streams, 110, st);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
}
