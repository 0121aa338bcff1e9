/*
 * The staged adapter (transports/cuda/staged.c) without a GPU: a fake copy
 * engine and a fake host transport ("loop": an in-process queue per
 * connection, zero-copy, whose sends are done only once received) between
 * two adapter states, rank 0 and rank 1, in this process.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_fake.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"

/* ---- the fake host transport -------------------------------------------- */

#define LOOP_DEPTH 2

struct tp_conn {
  int peer; /* as seen by the side that holds this conn */
  struct loopq *q;
};

typedef struct loopq {
  const void *msg[LOOP_DEPTH];
  size_t len[LOOP_DEPTH];
  uint64_t sent, recvd;
} loopq;

static loopq lq;
static tp_conn conn_of[2]; /* [rank]: rank's connection to the other */
static int loop_dead = -1;

static int loop_isend(tp_conn *c, const void *src, size_t len, uint64_t *t) {
  loopq *q = c->q;
  if (q->sent - q->recvd >= LOOP_DEPTH)
    return TP_AGAIN;
  q->msg[q->sent % LOOP_DEPTH] = src;
  q->len[q->sent % LOOP_DEPTH] = len;
  *t = ++q->sent;
  return BRAID_SUCCESS;
}

static int loop_send_done(tp_conn *c, uint64_t t) {
  return c->q->recvd >= t ? BRAID_SUCCESS : TP_AGAIN;
}

static int loop_recv(tp_conn *c, void *dst, size_t len) {
  loopq *q = c->q;
  if (q->recvd == q->sent)
    return TP_AGAIN;
  size_t have = q->len[q->recvd % LOOP_DEPTH];
  if (have != len)
    return ERR(BRAID_ERR_MISMATCH,
               "loop recv from rank %d: message has %zu bytes, the receive "
               "expects %zu",
               c->peer, have, len);
  memcpy(dst, q->msg[q->recvd % LOOP_DEPTH], len);
  q->recvd++;
  return BRAID_SUCCESS;
}

static int loop_check(void *state, int *dead) {
  (void)state;
  if (loop_dead < 0)
    return BRAID_SUCCESS;
  *dead = loop_dead;
  return ERR(BRAID_ERR_REMOTE, "loop: rank %d is gone", loop_dead);
}

static const tp_ops tp_loop = {.name = "loop",
                               .isend = loop_isend,
                               .send_done = loop_send_done,
                               .recv = loop_recv,
                               .check_peers = loop_check};

static tp_conn *inner_conn(void *arg, int peer, int channel) {
  int rank = (int)(intptr_t)arg;
  if (channel != 0 || peer != 1 - rank)
    return NULL;
  return &conn_of[rank];
}

static int mem_alloc(void **p, size_t n) {
  *p = malloc(n);
  return *p ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
}

static const staged_mem host_mem = {.alloc = mem_alloc, .free = free};

/* ---- fixture ------------------------------------------------------------ */

static void *st[2];
static tp_conn *tx, *rx;

static void open_pair(int nslots, size_t slot_bytes) {
  fake_reset();
  memset(&lq, 0, sizeof(lq));
  loop_dead = -1;
  for (int r = 0; r < 2; r++) {
    conn_of[r] = (tp_conn){.peer = 1 - r, .q = &lq};
    staged_cfg g = {.inner = &tp_loop,
                    .inner_conn = inner_conn,
                    .inner_arg = (void *)(intptr_t)r,
                    .eng = &fake_engine,
                    .mem = &host_mem,
                    .rank = r,
                    .nranks = 2,
                    .nchannels = 1,
                    .nslots = nslots,
                    .slot_bytes = slot_bytes};
    cr_assert_eq(staged_new(&g, &st[r]), BRAID_SUCCESS, "%s", err_msg());
  }
  tx = tp_staged.conn(st[0], 1, 0);
  rx = tp_staged.conn(st[1], 0, 0);
  cr_assert_not_null(tx);
  cr_assert_not_null(rx);
  cr_assert_null(tp_staged.conn(st[0], 2, 0));
}

static void close_pair(void) {
  fake_run(-1);
  tp_staged.teardown(st[0]);
  tp_staged.teardown(st[1]);
}

static void fill(char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    b[i] = (char)(seed * 29u + i * 13u + 3u);
}

/* ---- tests -------------------------------------------------------------- */

Test(cuda_staged, copy_of_the_next_message_overlaps_the_send) {
  open_pair(2, 64);
  char a[64], b[64], out[64];
  fill(a, 64, 1);
  fill(b, 64, 2);
  uint64_t t1, t2;
  cr_assert_eq(tp_staged.isend(tx, a, 64, &t1), BRAID_SUCCESS);
  cr_assert_eq(lq.sent, 0, "not on the wire before its copy completes");
  cr_assert_eq(tp_staged.send_done(tx, t1), TP_AGAIN,
               "the source is read until its copy completes");
  fake_run(-1);
  cr_assert_eq(tp_staged.send_done(tx, t1), BRAID_SUCCESS,
               "the source is no longer read once its copy completed");
  cr_assert_eq(lq.sent, 1, "the completed copy went to the host transport");
  cr_assert_eq(tp_staged.isend(tx, b, 64, &t2), BRAID_SUCCESS);
  cr_assert_gt(fake_pending(), 0, "message 2 is being copied...");
  cr_assert_eq(lq.sent - lq.recvd, 1, "...while message 1 is on the wire");
  cr_assert_eq(tp_staged.flush(st[0]), TP_AGAIN,
               "the adapter holds message 1 until the host transport is done");
  int rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    rc = tp_staged.recv(rx, out, 64);
    fake_run(-1);
  }
  cr_assert_eq(rc, BRAID_SUCCESS, "%s", err_msg());
  cr_assert_arr_eq(out, a, 64);
  cr_assert_eq(tp_staged.send_done(tx, t1), BRAID_SUCCESS);
  cr_assert_eq(tp_staged.flush(st[0]), TP_AGAIN, "message 2 is not done");
  rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    (void)tp_staged.send_done(tx, t2);
    rc = tp_staged.recv(rx, out, 64);
    fake_run(-1);
  }
  cr_assert_eq(rc, BRAID_SUCCESS);
  cr_assert_arr_eq(out, b, 64);
  cr_assert_eq(tp_staged.send_done(tx, t2), BRAID_SUCCESS);
  cr_assert_eq(tp_staged.flush(st[0]), BRAID_SUCCESS);
  close_pair();
}

/* The inner transport's sends complete only once received (like shm's
 * single-copy reads): send_done must not wait for that, or two ranks that
 * each wait for their send before receiving would wait for each other. */
Test(cuda_staged, send_done_does_not_wait_for_the_receiver) {
  open_pair(2, 64);
  char a[200], out[200];
  fill(a, 200, 5);
  uint64_t t;
  cr_assert_eq(tp_staged.isend(tx, a, 200, &t), BRAID_SUCCESS);
  int rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    fake_run(-1);
    rc = tp_staged.send_done(tx, t);
    if (rc == TP_AGAIN && lq.sent - lq.recvd == LOOP_DEPTH)
      break; /* no room on the wire: the rest waits for the receiver */
  }
  /* four fragments, two slots: the last two are copied only after the
   * receiver frees the first two, so send_done waits; the receiver then
   * takes them without the sender doing anything but progress */
  cr_assert_eq(rc, TP_AGAIN, "fragments 3-4 still wait for slots");
  cr_assert_eq(lq.recvd, 0);
  rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    rc = tp_staged.recv(rx, out, 200);
    fake_run(-1);
    if (rc == TP_AGAIN)
      (void)tp_staged.send_done(tx, t);
  }
  cr_assert_eq(rc, BRAID_SUCCESS, "%s", err_msg());
  cr_assert_arr_eq(out, a, 200);
  cr_assert_eq(tp_staged.send_done(tx, t), BRAID_SUCCESS);
  cr_assert_eq(tp_staged.flush(st[0]), BRAID_SUCCESS);
  /* a message that fits in the slots: done as soon as it is copied, while
   * the receiver has not touched it */
  uint64_t t2;
  cr_assert_eq(tp_staged.isend(tx, a, 100, &t2), BRAID_SUCCESS);
  fake_run(-1);
  cr_assert_eq(tp_staged.send_done(tx, t2), BRAID_SUCCESS);
  cr_assert_eq(lq.sent - lq.recvd, 2, "both fragments on the wire, unread");
  cr_assert_eq(tp_staged.flush(st[0]), TP_AGAIN);
  rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    rc = tp_staged.recv(rx, out, 100);
    fake_run(-1);
  }
  cr_assert_eq(rc, BRAID_SUCCESS);
  cr_assert_arr_eq(out, a, 100);
  cr_assert_eq(tp_staged.flush(st[0]), BRAID_SUCCESS);
  close_pair();
}

Test(cuda_staged, many_messages_in_order_with_fragments) {
  open_pair(3, 64);
  enum { N = 60 };
  static char src[N][400], dst[400];
  size_t lens[N];
  for (int i = 0; i < N; i++) {
    lens[i] = (size_t)((i * 53) % 400);
    fill(src[i], lens[i], (unsigned)i);
  }
  int sent = 0, got = 0;
  uint64_t t[N];
  for (int iter = 0; iter < 100000 && got < N; iter++) {
    if (sent < N) {
      int rc = tp_staged.isend(tx, src[sent], lens[sent], &t[sent]);
      cr_assert(rc == BRAID_SUCCESS || rc == TP_AGAIN, "%d", rc);
      sent += rc == BRAID_SUCCESS;
    }
    if (iter % 2)
      fake_run(3);
    if (sent > 0) { /* the sender's calls move its fragments */
      int d = tp_staged.send_done(tx, t[sent - 1]);
      cr_assert(d == BRAID_SUCCESS || d == TP_AGAIN, "%d", d);
    }
    int rc = tp_staged.recv(rx, dst, lens[got]);
    if (rc == BRAID_SUCCESS) {
      cr_assert_arr_eq(dst, src[got], lens[got], "message %d", got);
      got++;
    } else {
      cr_assert_eq(rc, TP_AGAIN, "%s", err_msg());
    }
  }
  cr_assert_eq(got, N);
  cr_assert_eq(tp_staged.send_done(tx, t[N - 1]), BRAID_SUCCESS);
  cr_assert_eq(tp_staged.flush(st[0]), BRAID_SUCCESS);
  close_pair();
}

static void max_i64(void *dst, const void *a, const void *b, size_t n) {
  int64_t *d = dst;
  const int64_t *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] > y[i] ? x[i] : y[i];
}

Test(cuda_staged, recv_reduce) {
  open_pair(2, 128);
  enum { N = 50 }; /* 400 bytes: 4 fragments */
  int64_t msg[N], mine[N], out[N];
  for (int i = 0; i < N; i++) {
    msg[i] = i % 2 ? 100 + i : -i;
    mine[i] = 50;
  }
  tp_dev_reducer r = {
      .base = {max_i64, sizeof(int64_t)}, .dt = BRAID_INT64, .op = BRAID_MAX};
  uint64_t t;
  cr_assert_eq(tp_staged.isend(tx, msg, sizeof(msg), &t), BRAID_SUCCESS);
  int rc = TP_AGAIN;
  for (int i = 0; i < 100 && rc == TP_AGAIN; i++) {
    (void)tp_staged.send_done(tx, t);
    rc = tp_staged.recv_reduce(rx, mine, out, sizeof(out), &r.base);
    fake_run(-1);
  }
  cr_assert_eq(rc, BRAID_SUCCESS, "%s", err_msg());
  for (int i = 0; i < N; i++)
    cr_assert_eq(out[i], i % 2 ? 100 + i : 50, "element %d", i);
  close_pair();
}

Test(cuda_staged, length_mismatch_and_dead_peer_are_named) {
  open_pair(2, 256);
  char src[100], dst[100];
  fill(src, 100, 5);
  uint64_t t;
  cr_assert_eq(tp_staged.isend(tx, src, 100, &t), BRAID_SUCCESS);
  fake_run(-1);
  (void)tp_staged.send_done(tx, t);
  int rc = tp_staged.recv(rx, dst, 64);
  cr_assert_eq(rc, BRAID_ERR_MISMATCH);
  const char *e = err_msg();
  cr_assert(strstr(e, "rank 0") && strstr(e, "loop") && strstr(e, "100"), "%s",
            e);
  cr_assert_eq(tp_staged.recv(rx, dst, 100), BRAID_ERR_MISMATCH, "sticky");
  loop_dead = 1;
  int dead = -1;
  cr_assert_eq(tp_staged.check_peers(st[0], &dead), BRAID_ERR_REMOTE);
  cr_assert_eq(dead, 1);
  cr_assert(strstr(err_msg(), "rank 1") != NULL, "%s", err_msg());
  close_pair();
}

Test(cuda_staged, copy_failure_and_bad_arguments) {
  open_pair(2, 64);
  char src[64];
  fill(src, 64, 6);
  uint64_t t;
  cr_assert_eq(tp_staged.isend(tx, NULL, 64, &t), BRAID_ERR_INVALID_ARG);
  cr_assert_eq(tp_staged.send_done(tx, 9), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "ticket 9") != NULL);
  tp_setup su;
  memset(&su, 0, sizeof(su));
  void *none = NULL;
  cr_assert_eq(tp_staged.setup(&su, NULL, &none), BRAID_ERR_UNSUPPORTED);
  cr_assert(strstr(err_msg(), "staged_new") != NULL, "%s", err_msg());
  fake_fail_next(BRAID_ERR_SYSTEM);
  cr_assert_eq(tp_staged.isend(tx, src, 64, &t), BRAID_ERR_SYSTEM);
  cr_assert(strstr(err_msg(), "rank 1") &&
                strstr(err_msg(), "fake engine failure"),
            "%s", err_msg());
  close_pair();
}
