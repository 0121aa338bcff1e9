/*
 * The cuda transport's protocol without a GPU (transports/cuda/cuda_fifo.c):
 * slots, credits, publications, wraparound, fragments, length mismatches,
 * copy failures, segments and dead peers, over a fake copy engine whose
 * "GPU" runs only when the test says so.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "cuda_fake.h"
#include "src/log.h"
#include "transports/common.h"
#include "transports/cuda/cuda_fifo.h"

/* One connection, sender rank 0 -> receiver rank 1, in this process: the
 * receiver's segment, its "device" slots in host memory. */
typedef struct pair {
  cuf_seg seg;
  char *data;
  cuf_tx tx;
  cuf_rx rx;
  char why[TP_WHY]; /* the connection's sticky message */
  uint64_t cap;
} pair;

static void pair_open(pair *p, int nslots, uint64_t cap) {
  memset(p, 0, sizeof(*p));
  fake_reset();
  int32_t senders[1] = {0};
  cr_assert_eq(cuf_seg_create(&p->seg, 1, 1, senders, 1, nslots, cap, 42),
               BRAID_SUCCESS, "%s", err_msg());
  cuf_seg_unlink(&p->seg); /* mapped here only: nothing stays behind */
  int idx = -1;
  cuf_ring *ring = cuf_ring_of(p->seg.hdr, 0, 0, &idx);
  cr_assert_not_null(ring);
  cr_assert_eq(idx, 0);
  cr_assert_null(cuf_ring_of(p->seg.hdr, 2, 0, NULL), "rank 2 has no ring");
  p->cap = cap;
  p->data = calloc((size_t)nslots, cap);
  cr_assert_not_null(p->data);
  p->tx.peer = 1;
  p->rx.peer = 0;
  p->tx.why = p->rx.why = p->why;
  cr_assert_eq(cuf_tx_init(&p->tx, &fake_engine, NULL, ring, p->seg.hdr,
                           p->data, (uint64_t)nslots, cap),
               BRAID_SUCCESS);
  cr_assert_eq(cuf_rx_init(&p->rx, &fake_engine, NULL, ring, p->seg.hdr,
                           p->data, (uint64_t)nslots, cap),
               BRAID_SUCCESS);
}

static void pair_close(pair *p) {
  fake_run(-1);
  cuf_tx_fini(&p->tx);
  cuf_rx_fini(&p->rx);
  cuf_seg_unmap(&p->seg);
  free(p->data);
}

static uint64_t head(pair *p) { return atomic_load(&p->tx.ring->head); }
static uint64_t tail(pair *p) { return atomic_load(&p->tx.ring->tail); }

static void fill(char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    b[i] = (char)(seed * 131u + i * 7u + 1u);
}

/* Receives one message of len bytes, running the GPU as needed. */
static int recv_all(pair *p, void *dst, size_t len) {
  for (int i = 0; i < 10000; i++) {
    int rc = cuf_rx_recv(&p->rx, NULL, dst, len, NULL, NULL);
    if (rc != TP_AGAIN)
      return rc;
    (void)cuf_tx_progress(&p->tx);
    fake_run(-1);
  }
  return TP_AGAIN;
}

Test(cuda_fifo, publishes_only_after_the_copy_completes) {
  pair p;
  pair_open(&p, 2, 256);
  char src[100], dst[100];
  fill(src, sizeof(src), 1);
  uint64_t t = 0;
  cr_assert_eq(cuf_tx_isend(&p.tx, src, sizeof(src), 0, &t), BRAID_SUCCESS);
  cr_assert_eq(t, 1);
  cr_assert_eq(head(&p), 0, "nothing published while the copy is queued");
  cr_assert_eq(cuf_tx_send_done(&p.tx, 1), TP_AGAIN);
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, dst, sizeof(dst), NULL, NULL), TP_AGAIN,
               "the receiver sees nothing yet");
  fake_run(1); /* the copy ran, its event not yet */
  cr_assert_eq(cuf_tx_send_done(&p.tx, 1), TP_AGAIN);
  cr_assert_eq(head(&p), 0);
  fake_run(1); /* the event */
  cr_assert_eq(cuf_tx_send_done(&p.tx, 1), BRAID_SUCCESS);
  cr_assert_eq(head(&p), 1);
  cr_assert(cuf_tx_idle(&p.tx));
  cr_assert(cuf_rx_waiting(&p.rx));
  /* the receive copies out, and credits only once that copy is done */
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, dst, sizeof(dst), NULL, NULL),
               TP_AGAIN);
  cr_assert_eq(tail(&p), 0, "no credit before the copy out completes");
  cr_assert(cuf_rx_busy(&p.rx));
  fake_run(-1);
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, dst, sizeof(dst), NULL, NULL),
               BRAID_SUCCESS);
  cr_assert_eq(tail(&p), 1);
  cr_assert_arr_eq(dst, src, sizeof(src));
  cr_assert_eq(cuf_tx_send_done(&p.tx, 2), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "ticket 2 never issued") != NULL, "%s",
            err_msg());
  pair_close(&p);
}

Test(cuda_fifo, two_slots_give_two_credits) {
  pair p;
  pair_open(&p, 2, 256);
  char a[64], b[64], c[64], out[64];
  fill(a, 64, 1);
  fill(b, 64, 2);
  fill(c, 64, 3);
  uint64_t t1, t2, t3;
  cr_assert_eq(cuf_tx_isend(&p.tx, a, 64, 0, &t1), BRAID_SUCCESS);
  cr_assert_eq(cuf_tx_isend(&p.tx, b, 64, 0, &t2), BRAID_SUCCESS);
  fake_run(-1);
  cr_assert_eq(cuf_tx_send_done(&p.tx, t2), BRAID_SUCCESS);
  cr_assert_eq(cuf_tx_isend(&p.tx, c, 64, 0, &t3), TP_AGAIN,
               "both slots hold unread messages");
  /* the receiver issues its copy out: still no credit until it completes */
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, out, 64, NULL, NULL), TP_AGAIN);
  cr_assert_eq(cuf_tx_isend(&p.tx, c, 64, 0, &t3), TP_AGAIN);
  fake_run(-1);
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, out, 64, NULL, NULL), BRAID_SUCCESS);
  cr_assert_arr_eq(out, a, 64);
  cr_assert_eq(cuf_tx_isend(&p.tx, c, 64, 0, &t3), BRAID_SUCCESS,
               "one credit came back");
  cr_assert_eq(t3, 3);
  cr_assert_eq(recv_all(&p, out, 64), BRAID_SUCCESS);
  cr_assert_arr_eq(out, b, 64);
  cr_assert_eq(recv_all(&p, out, 64), BRAID_SUCCESS);
  cr_assert_arr_eq(out, c, 64);
  pair_close(&p);
}

Test(cuda_fifo, ordering_and_wraparound_with_fragments) {
  pair p;
  pair_open(&p, 2, 64);
  enum { N = 200 };
  static char src[N][300], dst[300];
  memset(dst, 0x5a, sizeof(dst));
  size_t lens[N];
  uint64_t slots = 0;
  for (int i = 0; i < N; i++) {
    lens[i] = (size_t)((i * 37) % 300); /* 0 .. 299: up to 5 fragments */
    fill(src[i], lens[i], (unsigned)i);
    slots += lens[i] == 0 ? 1 : (lens[i] + 63) / 64;
  }
  int sent = 0, got = 0;
  uint64_t tickets[N];
  for (int iter = 0; iter < 100000 && got < N; iter++) {
    if (sent < N) {
      int rc = cuf_tx_isend(&p.tx, src[sent], lens[sent], 0, &tickets[sent]);
      if (rc == BRAID_SUCCESS)
        sent++;
      else
        cr_assert_eq(rc, TP_AGAIN);
    }
    if (iter % 3 == 0)
      fake_run(2); /* the GPU lags behind */
    if (sent > 0)  /* the sender's calls move its publications */
      cr_assert_neq(cuf_tx_send_done(&p.tx, tickets[sent - 1]),
                    BRAID_ERR_INTERNAL);
    int rc = cuf_rx_recv(&p.rx, NULL, dst, lens[got], NULL, NULL);
    if (rc == BRAID_SUCCESS) {
      cr_assert_arr_eq(dst, src[got], lens[got], "message %d", got);
      memset(dst, 0x5a, sizeof(dst));
      got++;
    } else {
      cr_assert_eq(rc, TP_AGAIN, "%s", err_msg());
    }
    cr_assert_leq(head(&p) - tail(&p), 2, "never more than nslots in flight");
  }
  cr_assert_eq(got, N);
  cr_assert_eq(cuf_tx_send_done(&p.tx, tickets[N - 1]), BRAID_SUCCESS);
  cr_assert_eq(head(&p), slots, "every fragment took one slot");
  cr_assert_eq(tail(&p), slots);
  cr_assert_gt(slots, 2 * N / 2, "the counters wrapped the ring many times");
  pair_close(&p);
}

Test(cuda_fifo, whole_isend_waits_for_every_fragment_slot) {
  pair p;
  pair_open(&p, 4, 64);
  char a[64], big[256], out[256];
  fill(a, 64, 9);
  fill(big, 256, 10);
  uint64_t t;
  cr_assert_eq(cuf_tx_isend(&p.tx, a, 64, 1, &t), BRAID_SUCCESS);
  int before = fake_copies();
  cr_assert_eq(cuf_tx_isend(&p.tx, big, 256, 1, &t), TP_AGAIN,
               "4 fragments need 4 free slots; 3 are");
  cr_assert_eq(fake_copies(), before, "no fragment was copied");
  cr_assert_eq(recv_all(&p, out, 64), BRAID_SUCCESS);
  before = fake_copies();
  cr_assert_eq(cuf_tx_isend(&p.tx, big, 256, 1, &t), BRAID_SUCCESS);
  cr_assert_eq(fake_copies(), before + 4, "every copy of src is issued");
  cr_assert_eq(recv_all(&p, out, 256), BRAID_SUCCESS);
  cr_assert_arr_eq(out, big, 256);
  pair_close(&p);
}

static void sum_i32(void *dst, const void *a, const void *b, size_t n) {
  int32_t *d = dst;
  const int32_t *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] + y[i];
}

Test(cuda_fifo, recv_reduce_over_fragments) {
  pair p;
  pair_open(&p, 2, 64);
  enum { N = 100 }; /* 400 bytes: 7 fragments through 2 slots */
  int32_t msg[N], mine[N], out[N];
  for (int i = 0; i < N; i++) {
    msg[i] = i * 3;
    mine[i] = 1000 - i;
  }
  tp_dev_reducer r = {
      .base = {sum_i32, sizeof(int32_t)}, .dt = BRAID_INT32, .op = BRAID_SUM};
  uint64_t t;
  int sent = 0, rc = TP_AGAIN;
  for (int i = 0; i < 1000 && rc == TP_AGAIN; i++) {
    if (!sent)
      sent = cuf_tx_isend(&p.tx, msg, sizeof(msg), 0, &t) == BRAID_SUCCESS;
    (void)cuf_tx_progress(&p.tx);
    rc = cuf_rx_recv(&p.rx, mine, out, sizeof(out), &r.base, NULL);
    fake_run(-1);
  }
  cr_assert_eq(rc, BRAID_SUCCESS, "%s", err_msg());
  for (int i = 0; i < N; i++)
    cr_assert_eq(out[i], 1000 + 2 * i, "element %d", i);
  cr_assert_eq(head(&p), 7);
  pair_close(&p);
}

Test(cuda_fifo, length_mismatch_names_the_peer) {
  pair p;
  pair_open(&p, 2, 256);
  char src[100], dst[100];
  fill(src, 100, 4);
  uint64_t t;
  cr_assert_eq(cuf_tx_isend(&p.tx, src, 100, 0, &t), BRAID_SUCCESS);
  fake_run(-1);
  cr_assert_eq(cuf_tx_send_done(&p.tx, t), BRAID_SUCCESS);
  int rc = cuf_rx_recv(&p.rx, NULL, dst, 64, NULL, NULL);
  cr_assert_eq(rc, BRAID_ERR_MISMATCH);
  cr_assert(strstr(err_msg(), "rank 0") && strstr(err_msg(), "100 bytes") &&
                strstr(err_msg(), "expects 64"),
            "%s", err_msg());
  cr_assert_eq(cuf_rx_recv(&p.rx, NULL, dst, 100, NULL, NULL),
               BRAID_ERR_MISMATCH, "the error sticks");
  pair_close(&p);
}

Test(cuda_fifo, copy_failure_is_reported_and_sticks) {
  pair p;
  pair_open(&p, 2, 256);
  char src[32];
  fill(src, 32, 5);
  uint64_t t;
  fake_fail_next(BRAID_ERR_SYSTEM);
  cr_assert_eq(cuf_tx_isend(&p.tx, src, 32, 0, &t), BRAID_ERR_SYSTEM);
  cr_assert(strstr(err_msg(), "rank 1") &&
                strstr(err_msg(), "fake engine failure"),
            "%s", err_msg());
  cr_assert_eq(cuf_tx_isend(&p.tx, src, 32, 0, &t), BRAID_ERR_SYSTEM);
  pair_close(&p);
}

Test(cuda_fifo, segment_is_unlinked_and_checked) {
  cuf_seg a, b;
  int32_t senders[2] = {3, 5};
  char path[128];
  cr_assert_eq(cuf_seg_create(&a, 4, 2, senders, 2, 3, 512, 7), BRAID_SUCCESS,
               "%s", err_msg());
  snprintf(path, sizeof(path), "/dev/shm%s", a.name);
  cr_assert_eq(access(path, F_OK), 0, "%s exists while peers attach", path);
  cr_assert_eq(cuf_seg_attach(&b, a.name, a.size, 4, 2), BRAID_SUCCESS, "%s",
               err_msg());
  int idx = -1;
  cr_assert_not_null(cuf_ring_of(b.hdr, 5, 1, &idx));
  cr_assert_eq(idx, 3, "rank 5 channel 1 is the fourth ring");
  cr_assert_null(cuf_ring_of(b.hdr, 5, 2, NULL), "no channel 2");
  cuf_seg_unmap(&b);
  cr_assert_neq(cuf_seg_attach(&b, a.name, a.size, 6, 2), BRAID_SUCCESS);
  cr_assert(strstr(err_msg(), "rank 6") != NULL, "%s", err_msg());
  cuf_seg_unlink(&a);
  cr_assert_neq(access(path, F_OK), 0, "%s is gone after unlink", path);
  cr_assert_neq(cuf_seg_attach(&b, a.name, a.size, 4, 2), BRAID_SUCCESS);
  cuf_seg_unmap(&a);
}

static int waiting_flag;
static int waiting_fn(void *arg, int i) {
  (void)arg;
  (void)i;
  return waiting_flag;
}

Test(cuda_fifo, dead_peer_is_named) {
  cuf_seg seg;
  int32_t senders[1] = {0};
  cr_assert_eq(cuf_seg_create(&seg, 3, 1, senders, 1, 2, 256, 1),
               BRAID_SUCCESS);
  cuf_seg_unlink(&seg);
  pid_t child = test_fork();
  if (child == 0)
    _exit(0);
  cr_assert_gt(child, 0);
  cuf_peer peer = {
      .rank = 3, .pid = child, .pidfd = -1, .pid_ok = 1, .hdr = seg.hdr};
  cuf_peer alive = {.rank = 1, .pid = getpid(), .pidfd = -1, .pid_ok = 1};
  cuf_peer both[2] = {alive, peer};
  int dead = -1, rc = BRAID_SUCCESS;
  waiting_flag = 1;
  for (int i = 0; i < 500 && !both[1].dead; i++) {
    rc = cuf_peers_check(both, 2, 0, waiting_fn, NULL, &dead);
    if (!both[1].dead)
      usleep(2000);
  }
  cr_assert(both[1].dead, "the exited child is seen as dead");
  cr_assert_eq(rc, BRAID_SUCCESS, "not reported while its data waits");
  waiting_flag = 0;
  rc = cuf_peers_check(both, 2, 0, waiting_fn, NULL, &dead);
  cr_assert_eq(rc, BRAID_ERR_REMOTE);
  cr_assert_eq(dead, 3);
  cr_assert(strstr(err_msg(), "rank 3") != NULL, "%s", err_msg());
  /* a peer that left because rank 7 died names rank 7 */
  atomic_store(&seg.hdr->cause, 7);
  rc = cuf_peers_check(both, 2, 0, NULL, NULL, &dead);
  cr_assert_eq(rc, BRAID_ERR_REMOTE);
  cr_assert_eq(dead, 7);
  cr_assert(strstr(err_msg(), "rank 7 died") && strstr(err_msg(), "rank 3"),
            "%s", err_msg());
  /* not reaped yet: a zombie that exited normally, its pidfd readable */
  cr_assert_eq(tp_pid_state(child), TP_PID_EXITED);
  int cfd = tp_pidfd_open(child);
  if (cfd >= 0) {
    cr_assert(tp_peer_exited(cfd, child), "the pidfd of an exited child");
    close(cfd);
  }
  waitpid(child, NULL, 0);
  cr_assert(tp_pid_gone(child), "a reaped child is gone");
  cr_assert_eq(tp_pid_state(child), TP_PID_GONE);
  cr_assert(!tp_pid_gone(getpid()));
  cr_assert(tp_peer_exited(-1, child), "without a pidfd: by its pid");
  int self = tp_pidfd_open(getpid());
  if (self >= 0) { /* a kernel with pidfds: a running process is not readable */
    cr_assert(!tp_peer_exited(self, getpid()));
    close(self);
  }
  cuf_seg_unmap(&seg);
}

Test(cuda_fifo, bell_rings_on_publish_and_credit) {
  pair p;
  pair_open(&p, 2, 256);
  char src[16], dst[16];
  fill(src, 16, 8);
  uint32_t b0 = atomic_load(&p.seg.hdr->bell);
  uint64_t t;
  cr_assert_eq(cuf_tx_isend(&p.tx, src, 16, 0, &t), BRAID_SUCCESS);
  fake_run(-1);
  cr_assert_eq(cuf_tx_progress(&p.tx), BRAID_SUCCESS);
  uint32_t b1 = atomic_load(&p.seg.hdr->bell);
  cr_assert_neq(b1, b0, "publishing rang the receiver's bell");
  cr_assert_eq(recv_all(&p, dst, 16), BRAID_SUCCESS);
  cr_assert_neq(atomic_load(&p.seg.hdr->bell), b1,
                "the credit rang the sender's bell");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cuf_bell_wait(p.seg.hdr, atomic_load(&p.seg.hdr->bell), 20000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
              (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_assert_geq(ms, 10.0, "an unchanged bell waits for the timeout");
  pair_close(&p);
}
