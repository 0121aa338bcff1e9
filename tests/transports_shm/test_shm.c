/*
 * Shared-memory transport (transports/shm.c) between real rank processes
 * (shm_world.h): messages of every size, single copy, recv_reduce,
 * channels, many ranks, the doorbell, dead peers and errors.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "src/bootstrap.h"
#include "src/config.h"
#include "src/log.h"
#include "tests/transports_shm/shm_world.h"
#include "transports/shm.h"

/* ---- ordered messages of every size ------------------------------------ */

static const size_t sizes[] = {0, 1, 7, 4096, 65536, (1u << 20) + 3};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
static int want_cma; /* 1: expect single-copy, 0: expect copies */

static int send_sizes(world *w, void *st, int to) {
  tp_conn *c = tp_shm.conn(st, to, 0);
  CHK(c != NULL, "no connection to rank %d", to);
  uint8_t *bufs[NSIZES];
  uint64_t t = 0;
  for (size_t i = 0; i < NSIZES; i++) {
    bufs[i] = malloc(sizes[i] + 1);
    fill(bufs[i], sizes[i], (unsigned)(i + 10 * w->rank));
    int r = WAIT(st, tp_shm.isend(c, bufs[i], sizes[i], &t));
    CHK(r == BRAID_SUCCESS, "isend %zu bytes: %d (%s)", sizes[i], r, err_msg());
  }
  int r = WAIT(st, tp_shm.send_done(c, t));
  CHK(r == BRAID_SUCCESS, "send_done: %d", r);
  for (size_t i = 0; i < NSIZES; i++)
    free(bufs[i]);
  uint64_t ncma = shm_conn_cma_sent(c);
  CHK(ncma == (want_cma ? 2u : 0u), "%llu single-copy sends, expected %d",
      (unsigned long long)ncma, want_cma ? 2 : 0);
  return 0;
}

/* Receives the next message (n bytes) and checks it against want, and
 * that nothing was written past its end. */
static int recv_check(world *w, void *st, tp_conn *c, const uint8_t *want,
                      size_t n) {
  uint8_t *got = malloc(n + 64);
  CHK(got != NULL, "no memory");
  memset(got, 0xEE, n + 64);
  int r = WAIT(st, tp_shm.recv(c, got, n));
  int bad = r != BRAID_SUCCESS || memcmp(got, want, n) != 0;
  for (size_t k = n; k < n + 64 && !bad; k++)
    bad = got[k] != 0xEE;
  free(got);
  CHK(r == BRAID_SUCCESS, "recv %zu bytes: %d (%s)", n, r, err_msg());
  CHK(!bad, "the %zu-byte message differs, or its receive wrote past the end",
      n);
  return 0;
}

static int recv_sizes(world *w, void *st, int from) {
  tp_conn *c = tp_shm.conn(st, from, 0);
  CHK(c != NULL, "no connection from rank %d", from);
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    uint8_t *want = malloc(n + 1);
    fill(want, n, (unsigned)(i + 10 * from));
    int bad = recv_check(w, st, c, want, n);
    free(want);
    if (bad)
      return bad;
  }
  uint64_t ncma = shm_conn_cma_recvd(c);
  CHK(ncma == (want_cma ? 2u : 0u), "%llu single-copy receives, expected %d",
      (unsigned long long)ncma, want_cma ? 2 : 0);
  return 0;
}

static int sizes_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 4, 64 << 10, NULL) != BRAID_SUCCESS)
    return 1;
  int peer = 1 - w->rank;
  if (want_cma && !shm_peer_cma(st, peer)) {
    fprintf(stderr, "SKIP: process_vm_readv between ranks is not permitted "
                    "here (ptrace restrictions); single-copy not tested\n");
    tp_shm.teardown(st);
    return SKIP_CODE;
  }
  CHK(want_cma || !shm_peer_cma(st, peer), "single-copy on though disabled");
  int rc = 0;
  for (int dir = 0; dir < 2 && !rc; dir++)
    rc = w->rank == dir ? send_sizes(w, st, peer) : recv_sizes(w, st, peer);
  if (!rc)
    rc = boot_barrier(w->b) == BRAID_SUCCESS ? 0 : 1;
  tp_shm.teardown(st);
  return rc;
}

Test(shm, sizes_single_copy) {
  want_cma = 1;
  shm_force_cma(1);
  if (run_ranks(2, sizes_rank, -1))
    cr_skip_test("process_vm_readv not permitted between processes here");
}

Test(shm, sizes_copy) {
  want_cma = 0;
  shm_force_cma(0);
  run_ranks(2, sizes_rank, -1);
}

Test(shm, sizes_cma_off_by_env) {
  /* cfg_get reads the environment once, on first use in this process */
  setenv("BRAID_SHM_CMA", "0", 1);
  shm_force_cma(-1);
  want_cma = 0;
  run_ranks(2, sizes_rank, -1);
}

/* The default threshold follows the CPUs: 16 KiB while each of the host's
 * ranks has a CPU of its own, 64 KiB once they share. */
Test(shm, cma_default_by_cpus) {
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int n = CPU_COUNT(&set);
  cr_assert_gt(n, 0);
  cr_expect_eq(shm_cma_default(1), (size_t)SHM_CMA_THRESHOLD_OWN_CPU);
  cr_expect_eq(shm_cma_default(n), (size_t)SHM_CMA_THRESHOLD_OWN_CPU);
  cr_expect_eq(shm_cma_default(n + 1), (size_t)SHM_DEFAULT_CMA_THRESHOLD);
  /* this test's own process: narrowed to one CPU, two ranks share it */
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) {
      CPU_SET(c, &one);
      break;
    }
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
  cr_expect_eq(shm_cma_default(1), (size_t)SHM_CMA_THRESHOLD_OWN_CPU);
  cr_expect_eq(shm_cma_default(2), (size_t)SHM_DEFAULT_CMA_THRESHOLD);
}

/* ---- single copy, shared -------------------------------------------------
 * isend_shared: the receiver and the waiting sender copy the pieces of a
 * large single-copy message between them (transports/shm.c). Sizes that do
 * not divide into pieces, a message too small to share, and, with
 * shm_force_share_wait, a receiver that takes no piece, so that the sender
 * must write every one into the receiver's memory. */

static const size_t share_sizes[] = {(1u << 20) + 4097, SHM_SHARE_FROM,
                                     (4u << 20) + 3, SHM_SHARE_FROM - 1};
#define NSHARE (sizeof(share_sizes) / sizeof(share_sizes[0]))
static int share_wait; /* the receiver takes no piece */

static int share_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 4, 64 << 10, NULL) != BRAID_SUCCESS)
    return 1;
  int peer = 1 - w->rank;
  tp_conn *c = tp_shm.conn(st, peer, 0);
  if (!shm_peer_cma(st, peer)) {
    fprintf(stderr, "SKIP: process_vm_readv not permitted here\n");
    tp_shm.teardown(st);
    return SKIP_CODE;
  }
  shm_force_share_wait(share_wait);
  uint64_t want = 0;
  for (size_t i = 0; i < NSHARE; i++) {
    size_t n = share_sizes[i];
    uint64_t piece;
    uint32_t np = shm_share_pieces(n, &piece);
    CHK((np > 1) == (n >= SHM_SHARE_FROM), "%zu bytes in %u pieces", n, np);
    want += np > 1 ? np : 0;
    uint8_t *buf = malloc(n), *ref = malloc(n);
    CHK(buf && ref, "no memory");
    fill(ref, n, (unsigned)(i + 7));
    if (w->rank == 0) {
      memcpy(buf, ref, n);
      uint64_t t = 0;
      CHK(WAIT(st, tp_shm.isend_shared(c, buf, n, &t)) == BRAID_SUCCESS,
          "isend_shared %zu bytes: %s", n, err_msg());
      CHK(WAIT(st, tp_shm.send_done(c, t)) == BRAID_SUCCESS, "send_done: %s",
          err_msg());
    } else if (recv_check(w, st, c, ref, n)) {
      return 1;
    }
    free(buf);
    free(ref);
  }
  if (w->rank == 0) {
    uint64_t wrote = shm_conn_share_wrote(c);
    if (share_wait)
      CHK(wrote == want, "the sender wrote %llu pieces, expected all %llu",
          (unsigned long long)wrote, (unsigned long long)want);
    else
      CHK(wrote <= want, "the sender wrote %llu pieces of %llu",
          (unsigned long long)wrote, (unsigned long long)want);
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

static void share_on(int wait) {
  if (!shm_ranks_fit(2))
    cr_skip_test("2 ranks do not have a CPU each here: the sender never "
                 "shares a copy then");
  share_wait = wait;
  shm_force_cma(1);
  if (run_ranks(2, share_rank, -1))
    cr_skip_test("process_vm_readv not permitted between processes here");
}

Test(shm, shared_copy_taking_turns) { share_on(0); }
Test(shm, shared_copy_written_by_sender) { share_on(1); }

/* ---- more in flight than slots ------------------------------------------ */

#define RUN_MSGS 64
static int run_ahead_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 4, 4096, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  static uint32_t msgs[RUN_MSGS][25];
  uint64_t t = 0;
  if (w->rank == 0) {
    int sent = 0, r;
    for (int i = 0; i < RUN_MSGS; i++)
      for (int k = 0; k < 25; k++)
        msgs[i][k] = (uint32_t)(i * 1000 + k);
    while ((r = tp_shm.isend(c, msgs[sent], 100, &t)) == BRAID_SUCCESS)
      sent++;
    CHK(r == TP_AGAIN, "isend on a full ring gave %d", r);
    CHK(sent == 4, "%d messages accepted into 4 slots", sent);
    CHK(tp_shm.send_done(c, t + 1) == BRAID_ERR_INVALID_ARG,
        "send_done accepted a ticket never issued");
    CHK(strstr(err_msg(), "never issued"), "last_error: %s", err_msg());
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    for (; sent < RUN_MSGS; sent++) {
      r = WAIT(st, tp_shm.isend(c, msgs[sent], 100, &t));
      CHK(r == BRAID_SUCCESS, "isend #%d: %d", sent, r);
    }
    CHK(WAIT(st, tp_shm.send_done(c, t)) == BRAID_SUCCESS, "send_done");
  } else {
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    for (int i = 0; i < RUN_MSGS; i++) {
      uint32_t got[25];
      int r = WAIT(st, tp_shm.recv(c, got, 100));
      CHK(r == BRAID_SUCCESS, "recv #%d: %d", i, r);
      for (int k = 0; k < 25; k++)
        CHK(got[k] == (uint32_t)(i * 1000 + k), "message %d out of order", i);
    }
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, sender_runs_ahead_then_drains) { run_ranks(2, run_ahead_rank, -1); }

/* ---- recv_reduce ----------------------------------------------------------
 */

static void fsum(void *dst, const void *a, const void *b, size_t n) {
  float *d = dst;
  const float *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] + y[i];
}

static int reduce_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 4, 64 << 10, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  if (want_cma && !shm_peer_cma(st, 1 - w->rank)) {
    fprintf(stderr, "SKIP: process_vm_readv not permitted here\n");
    tp_shm.teardown(st);
    return SKIP_CODE;
  }
  static const size_t counts[] = {1, 4096, 300001};
  tp_reducer red = {fsum, sizeof(float)};
  for (size_t k = 0; k < 3; k++) {
    size_t n = counts[k];
    static float a[300001], b[300001], d[300001];
    for (size_t i = 0; i < n; i++) {
      a[i] = (float)i;
      b[i] = (float)(2 * i + 1);
    }
    if (w->rank == 0) {
      uint64_t t;
      CHK(WAIT(st, tp_shm.isend(c, a, n * sizeof(float), &t)) == 0, "isend");
      CHK(WAIT(st, tp_shm.send_done(c, t)) == 0, "send_done");
      CHK(WAIT(st, tp_shm.isend(c, a, n * sizeof(float), &t)) == 0, "isend");
      CHK(WAIT(st, tp_shm.send_done(c, t)) == 0, "send_done");
    } else {
      int r = WAIT(st, tp_shm.recv_reduce(c, b, d, n * sizeof(float), &red));
      CHK(r == BRAID_SUCCESS, "recv_reduce %zu floats: %d", n, r);
      for (size_t i = 0; i < n; i++)
        CHK(d[i] == (float)(3 * i + 1), "d[%zu] = %g", i, (double)d[i]);
      /* in place: dst == src */
      r = WAIT(st, tp_shm.recv_reduce(c, b, b, n * sizeof(float), &red));
      CHK(r == BRAID_SUCCESS, "in-place recv_reduce: %d", r);
      for (size_t i = 0; i < n; i++)
        CHK(b[i] == (float)(3 * i + 1), "in place b[%zu] = %g", i,
            (double)b[i]);
    }
  }
  if (w->rank == 1) {
    /* the sizes at least the threshold (its default depends on the CPUs),
     * two receives each */
    size_t thr = cfg_get()->cma_threshold ? cfg_get()->cma_threshold
                                          : shm_cma_default(2);
    uint64_t want = 0;
    for (size_t k = 0; want_cma && k < 3; k++)
      want += counts[k] * sizeof(float) >= thr ? 2u : 0u;
    uint64_t ncma = shm_conn_cma_recvd(c);
    CHK(ncma == want, "%llu single-copy reduces, expected %llu",
        (unsigned long long)ncma, (unsigned long long)want);
    float x = 0;
    CHK(tp_shm.recv_reduce(c, &x, &x, 6, &red) == BRAID_ERR_INVALID_ARG,
        "a length that is not a multiple of the element size was accepted");
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, recv_reduce_copy) {
  want_cma = 0;
  shm_force_cma(0);
  run_ranks(2, reduce_rank, -1);
}

Test(shm, recv_reduce_single_copy) {
  want_cma = 1;
  shm_force_cma(1);
  if (run_ranks(2, reduce_rank, -1))
    cr_skip_test("process_vm_readv not permitted between processes here");
}

/* ---- channels and many ranks -------------------------------------------- */

static int channels_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 2, 2, 256, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c0 = tp_shm.conn(st, 1 - w->rank, 0);
  tp_conn *c1 = tp_shm.conn(st, 1 - w->rank, 1);
  CHK(c0 && c1 && c0 != c1, "two distinct connections");
  CHK(tp_shm.conn(st, 1 - w->rank, 2) == NULL, "channel 2 exists");
  CHK(tp_shm.conn(st, w->rank, 0) == NULL, "connection to self exists");
  CHK(tp_shm.pollfd(c0) == -1, "shm has no pollfd");
  char m[2][2][8] = {{"ch0-m0", "ch0-m1"}, {"ch1-m0", "ch1-m1"}};
  if (w->rank == 0) {
    uint64_t t0, t1;
    for (int i = 0; i < 2; i++) {
      CHK(WAIT(st, tp_shm.isend(c0, m[0][i], 8, &t0)) == 0, "isend ch0");
      CHK(WAIT(st, tp_shm.isend(c1, m[1][i], 8, &t1)) == 0, "isend ch1");
    }
    /* both rings are full; channel 1 drains first on the other side */
    CHK(WAIT(st, tp_shm.send_done(c1, t1)) == 0, "send_done ch1");
    CHK(WAIT(st, tp_shm.send_done(c0, t0)) == 0, "send_done ch0");
  } else {
    char got[8];
    for (int ch = 1; ch >= 0; ch--)
      for (int i = 0; i < 2; i++) {
        CHK(WAIT(st, tp_shm.recv(ch ? c1 : c0, got, 8)) == 0, "recv");
        CHK(strcmp(got, m[ch][i]) == 0, "got %s, want %s", got, m[ch][i]);
      }
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, two_channels_are_independent) { run_ranks(2, channels_rank, -1); }

static size_t a2a_len(int from, int to) {
  return 1000u * (size_t)(from + 1) + 13u * (size_t)to +
         (((from + to) & 1) ? 70000u : 0u);
}

static int alltoall_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 3, 8192, NULL) != BRAID_SUCCESS)
    return 1;
  int n = w->n;
  static uint8_t out[MAXR][80000], in[MAXR][80000];
  int sent[MAXR] = {0}, got[MAXR] = {0}, left = 2 * (n - 1);
  uint64_t t[MAXR];
  for (int p = 0; p < n; p++) {
    fill(out[p], a2a_len(w->rank, p), (unsigned)(w->rank * 16 + p));
  }
  int64_t deadline = now_ms() + 10000;
  while (left > 0) {
    uint32_t seen = tp_shm.bell_read(st);
    int moved = 0;
    for (int p = 0; p < n; p++) {
      if (p == w->rank)
        continue;
      tp_conn *c = tp_shm.conn(st, p, 0);
      int r;
      if (sent[p] == 0) {
        r = tp_shm.isend(c, out[p], a2a_len(w->rank, p), &t[p]);
        CHK(r == 0 || r == TP_AGAIN, "isend to %d: %d", p, r);
        sent[p] = r == 0;
      }
      if (sent[p] == 1) {
        r = tp_shm.send_done(c, t[p]);
        CHK(r == 0 || r == TP_AGAIN, "send_done to %d: %d", p, r);
        if (r == 0)
          sent[p] = 2, left--, moved = 1;
      }
      if (!got[p]) {
        r = tp_shm.recv(c, in[p], a2a_len(p, w->rank));
        CHK(r == 0 || r == TP_AGAIN, "recv from %d: %d (%s)", p, r, err_msg());
        if (r == 0)
          got[p] = 1, left--, moved = 1;
      }
    }
    CHK(now_ms() < deadline, "all-to-all did not finish in 10 s");
    int dead;
    CHK(tp_shm.check_peers(st, &dead) == 0, "rank %d died", dead);
    if (!moved)
      tp_shm.bell_wait(st, seen, 20000);
  }
  for (int p = 0; p < n; p++) {
    if (p != w->rank) {
      size_t len = a2a_len(p, w->rank);
      static uint8_t want[80000];
      fill(want, len, (unsigned)(p * 16 + w->rank));
      CHK(memcmp(want, in[p], len) == 0, "data from rank %d differ", p);
    }
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, four_ranks_all_to_all) {
  shm_force_cma(-1);
  run_ranks(4, alltoall_rank, -1);
}

/* ---- both directions at once, tiny slots, wrapping rings ---------------- */

#define STREAM_MSGS 3000
static size_t stream_len(int i) { return (size_t)((i * 7919) % 301); }

static int stream_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 2, 64, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  static uint8_t out[STREAM_MSGS * 301];
  uint8_t want[301], in[301];
  int ns = 0, nr = 0, nd = 0;
  uint64_t tickets[STREAM_MSGS];
  for (int i = 0; i < STREAM_MSGS; i++)
    fill(out + (size_t)i * 301, stream_len(i), (unsigned)(i + w->rank));
  int64_t deadline = now_ms() + 20000;
  while (nr < STREAM_MSGS || nd < STREAM_MSGS) {
    uint32_t seen = tp_shm.bell_read(st);
    int moved = 0, r;
    if (ns < STREAM_MSGS) {
      r = tp_shm.isend(c, out + (size_t)ns * 301, stream_len(ns), &tickets[ns]);
      CHK(r == 0 || r == TP_AGAIN, "isend #%d: %d", ns, r);
      if (r == 0)
        ns++, moved = 1;
    }
    if (nd < ns) {
      r = tp_shm.send_done(c, tickets[nd]);
      CHK(r == 0 || r == TP_AGAIN, "send_done #%d: %d", nd, r);
      if (r == 0)
        nd++, moved = 1;
    }
    if (nr < STREAM_MSGS) {
      size_t len = stream_len(nr);
      r = tp_shm.recv(c, in, len);
      CHK(r == 0 || r == TP_AGAIN, "recv #%d: %d (%s)", nr, r, err_msg());
      if (r == 0) {
        fill(want, len, (unsigned)(nr + 1 - w->rank));
        CHK(memcmp(in, want, len) == 0, "message %d differs", nr);
        nr++, moved = 1;
      }
    }
    CHK(now_ms() < deadline, "stream stuck at sent %d done %d recv %d", ns, nd,
        nr);
    if (!moved)
      tp_shm.bell_wait(st, seen, 20000);
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, both_directions_wrap_small_slots) {
  shm_force_cma(0);
  run_ranks(2, stream_rank, -1);
}

/* ---- ranks without shm peers, one-sided peer lists ---------------------- */

static int partial_rank(world *w) {
  /* ranks 0 and 1 share memory; rank 2 takes part in setup with no peers */
  uint8_t peers[3] = {w->rank == 1, w->rank == 0, 0};
  void *st = NULL;
  if (shm_up(w, &st, 1, 2, 128, peers) != BRAID_SUCCESS)
    return 1;
  int dead = -1;
  CHK(tp_shm.check_peers(st, &dead) == BRAID_SUCCESS, "check_peers");
  if (w->rank == 2) {
    CHK(tp_shm.conn(st, 0, 0) == NULL, "rank 2 has a connection to 0");
    uint32_t seen = tp_shm.bell_read(st);
    tp_shm.bell_wait(st, seen, 1000);
  } else {
    CHK(tp_shm.conn(st, 2, 0) == NULL, "connection to rank 2 exists");
    tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
    uint64_t t;
    int v = 100 + w->rank, got = 0;
    CHK(WAIT(st, tp_shm.isend(c, &v, sizeof(v), &t)) == 0, "isend");
    CHK(WAIT(st, tp_shm.recv(c, &got, sizeof(got))) == 0, "recv");
    CHK(got == 101 - w->rank, "got %d", got);
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  /* one-sided lists: rank 0 lists rank 1, which lists nobody; every rank
   * fails setup, and none hangs */
  uint8_t one_sided[3] = {0, w->rank == 0, 0};
  tp_setup su;
  memset(&su, 0, sizeof(su));
  su = (tp_setup){.boot = w->b,
                  .rank = w->rank,
                  .nranks = 3,
                  .nchannels = 1,
                  .nslots = 2,
                  .slot_bytes = 64};
  cfg_tp_settings(&su.set);
  st = NULL;
  int r = tp_shm.setup(&su, one_sided, &st);
  CHK(r != BRAID_SUCCESS && st == NULL, "one-sided peers: setup gave %d", r);
  if (w->rank == 0)
    CHK(strstr(err_msg(), "rank 1 has no shm peers"), "errbuf: %s", err_msg());
  else
    CHK(strstr(err_msg(), "rank 0 could not attach"), "errbuf: %s", err_msg());
  return 0;
}

Test(shm, ranks_without_peers_and_one_sided_lists) {
  run_ranks(3, partial_rank, -1);
}

/* ---- doorbell, dead peers, errors ---------------------------------------- */

static int doorbell_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 2, 1024, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  if (w->rank == 1) {
    /* nothing arrives: the wait lasts its timeout */
    uint32_t seen = tp_shm.bell_read(st);
    int64_t t0 = now_ms();
    tp_shm.bell_wait(st, seen, 150000);
    int64_t dt = now_ms() - t0;
    CHK(dt >= 100 && dt < 1500, "idle bell_wait(150 ms) took %lld ms",
        (long long)dt);
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    seen = tp_shm.bell_read(st);
    t0 = now_ms();
    tp_shm.bell_wait(st, seen, 5000000);
    dt = now_ms() - t0;
    CHK(tp_shm.bell_read(st) != seen, "woke up without a ring");
    CHK(dt < 2000, "a send woke the sleeper after %lld ms of a 5 s wait",
        (long long)dt);
    char got[4];
    CHK(tp_shm.recv(c, got, 4) == BRAID_SUCCESS, "message not there on wake");
    CHK(memcmp(got, "ding", 4) == 0, "wrong message");
  } else {
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    usleep(200000);
    uint64_t t;
    CHK(tp_shm.isend(c, "ding", 4, &t) == BRAID_SUCCESS, "isend");
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, doorbell_wakes_sleeper) { run_ranks(2, doorbell_rank, -1); }

static int dead_peer_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 2, 1024, NULL) != BRAID_SUCCESS)
    return 1;
  int dead = -1;
  CHK(tp_shm.check_peers(st, &dead) == BRAID_SUCCESS, "peer dead at start");
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
  if (w->rank == 1)
    raise(SIGKILL);
  int64_t t0 = now_ms();
  int r;
  while ((r = tp_shm.check_peers(st, &dead)) == BRAID_SUCCESS &&
         now_ms() - t0 < 3000)
    usleep(2000);
  int64_t dt = now_ms() - t0;
  CHK(r == BRAID_ERR_REMOTE && dead == 1, "check_peers: %d, dead rank %d", r,
      dead);
  CHK(dt < 1000, "the death was seen after %lld ms", (long long)dt);
  CHK(strstr(err_msg(), "rank 1") != NULL, "last_error: %s", err_msg());
  char got[8];
  r = tp_shm.recv(tp_shm.conn(st, 1, 0), got, 8);
  CHK(r == TP_AGAIN, "recv from a dead peer: %d", r);
  tp_shm.teardown(st);
  return 0;
}

Test(shm, killed_peer_is_reported) { run_ranks(2, dead_peer_rank, 1); }

static int sent_then_exit_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 2, 4, 256, NULL) != BRAID_SUCCESS)
    return 1;
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
  if (w->rank == 0) {
    uint64_t t;
    for (int i = 0; i < 3; i++)
      CHK(tp_shm.isend(tp_shm.conn(st, 1, i % 2), &i, sizeof(i), &t) == 0,
          "isend");
    tp_shm.teardown(st);
    return 0; /* exits at once */
  }
  int pid0 = boot_peer_info(w->b, 0)->pid;
  int fd = (int)syscall(SYS_pidfd_open, pid0, 0); /* ESRCH: already reaped */
  CHK(fd >= 0 || errno == ESRCH, "pidfd_open(%d): %s", pid0, strerror(errno));
  struct pollfd pf = {fd, POLLIN, 0};
  CHK(fd < 0 || poll(&pf, 1, 5000) == 1, "rank 0 did not exit");
  if (fd >= 0)
    close(fd);
  int dead = -1;
  CHK(tp_shm.check_peers(st, &dead) == BRAID_SUCCESS,
      "rank 0 reported dead while its messages wait to be read");
  for (int i = 0; i < 3; i++) {
    int v = -1;
    CHK(tp_shm.recv(tp_shm.conn(st, 0, i % 2), &v, sizeof(v)) == 0, "recv");
    CHK(v == i, "got %d, want %d", v, i);
  }
  CHK(tp_shm.check_peers(st, &dead) == BRAID_ERR_REMOTE && dead == 0,
      "rank 0 not reported once everything was read");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, exited_sender_is_reported_after_its_messages) {
  run_ranks(2, sent_then_exit_rank, -1);
}

static int mismatch_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, 2, 1024, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  if (w->rank == 0) {
    uint64_t t;
    CHK(tp_shm.isend(c, "0123456789", 10, &t) == BRAID_SUCCESS, "isend");
  } else {
    char got[20];
    int r = WAIT(st, tp_shm.recv(c, got, 20));
    CHK(r == BRAID_ERR_MISMATCH, "a 10-byte message into a 20-byte recv: %d",
        r);
    const char *e = err_msg();
    CHK(strstr(e, "rank 0") && strstr(e, "10") && strstr(e, "20"),
        "last_error: %s", e);
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, length_mismatch_is_reported) { run_ranks(2, mismatch_rank, -1); }

static int too_big_rank(world *w) {
  struct statvfs sv;
  CHK(statvfs("/dev/shm", &sv) == 0, "statvfs /dev/shm");
  uint64_t fs = (uint64_t)sv.f_blocks * sv.f_frsize;
  size_t slot = (size_t)1 << 30;
  int nslots = (int)(fs / slot) + 2;
  void *st = NULL;
  tp_setup su;
  memset(&su, 0, sizeof(su));
  uint8_t peers[2] = {w->rank != 0, w->rank != 1};
  su = (tp_setup){.boot = w->b,
                  .rank = w->rank,
                  .nranks = 2,
                  .nchannels = 1,
                  .nslots = nslots,
                  .slot_bytes = slot};
  cfg_tp_settings(&su.set);
  int r = tp_shm.setup(&su, peers, &st);
  CHK(r == BRAID_ERR_NOMEM && st == NULL, "setup of %d GiB gave %d", nslots, r);
  CHK(strstr(err_msg(), "/dev/shm") && strstr(err_msg(), "too small"),
      "errbuf: %s", err_msg());
  /* bad arguments fail on every rank before anything is exchanged */
  su.nslots = 0;
  r = tp_shm.setup(&su, peers, &st);
  CHK(r == BRAID_ERR_INVALID_ARG && strstr(err_msg(), "nslots"),
      "nslots 0: %d %s", r, err_msg());
  /* the transport is usable afterwards */
  CHK(shm_up(w, &st, 1, 2, 64, NULL) == BRAID_SUCCESS, "setup after errors");
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, setup_errors_are_clear) { run_ranks(2, too_big_rank, -1); }
