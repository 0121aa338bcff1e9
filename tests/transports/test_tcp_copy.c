/*
 * tcp isend_copy between real rank processes: the source may be overwritten
 * as soon as the call returns, send_done is immediate, and the copies a
 * connection holds are bounded (nslots messages, nslots * slot_bytes bytes).
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"
#include "src/bootstrap.h"
#include "src/config.h"
#include "src/log.h"
#include "transports/sock_util.h"
#include "transports/transport.h"

#define FAIL(...)                                                              \
  do {                                                                         \
    snprintf(msg, msglen, __VA_ARGS__);                                        \
    return 1;                                                                  \
  } while (0)

#define NSLOTS 4
#define SLOT (64 * 1024)
#define BIG (8u << 20) /* far more than the socket buffers hold */

/* Buffers of the rank processes (each forked child has its own). */
static unsigned char g_buf[SLOT], g_big[BIG], g_in[BIG];

typedef struct job {
  boot *b;
  void *st;
  tp_conn *c; /* channel 0 to the other rank */
} job;

static int job_start(job *j, int rank, const braid_unique_id *id, char *msg,
                     size_t msglen) {
  memset(j, 0, sizeof(*j));
  if (boot_init(id, rank, 2, 20000, &j->b) != BRAID_SUCCESS)
    FAIL("boot_init: %s", err_msg());
  uint8_t peers[2] = {rank != 0, rank != 1};
  tp_setup st;
  memset(&st, 0, sizeof(st));
  st.boot = j->b;
  st.rank = rank;
  st.nranks = 2;
  st.nchannels = 1;
  st.nslots = NSLOTS;
  st.slot_bytes = SLOT;
  st.timeout_ms = 20000;
  cfg_tp_settings(&st.set);
  int r = tp_tcp.setup(&st, peers, &j->st);
  if (r != BRAID_SUCCESS)
    FAIL("tcp setup: %d: %s", r, err_msg());
  j->c = tp_tcp.conn(j->st, 1 - rank, 0);
  if (j->c == NULL)
    FAIL("no connection to rank %d", 1 - rank);
  return 0;
}

static void job_end(job *j) {
  tp_tcp.teardown(j->st);
  boot_close(j->b);
}

static void wait_io(tp_conn *c, short ev) {
  struct pollfd p = {.fd = tp_tcp.pollfd(c), .events = ev};
  (void)poll(&p, 1, 20);
}

static int xrecv(tp_conn *c, void *buf, size_t len) {
  int64_t end = sock_now_ms() + 10000;
  int r;
  while ((r = tp_tcp.recv(c, buf, len)) == TP_AGAIN && sock_now_ms() < end)
    wait_io(c, POLLIN);
  return r;
}

/* Retries isend until it takes the message (10 s). */
static int xisend(tp_conn *c, const void *buf, size_t len, uint64_t *t) {
  int64_t end = sock_now_ms() + 10000;
  int r;
  while ((r = tp_tcp.isend(c, buf, len, t)) == TP_AGAIN && sock_now_ms() < end)
    wait_io(c, POLLOUT);
  return r;
}

/* Calls flush (and send_done of t when t != 0) until both are done. */
static int drain(job *j, uint64_t t) {
  int64_t end = sock_now_ms() + 10000;
  int r;
  while (((r = tp_tcp.flush(j->st)) == TP_AGAIN ||
          (r == BRAID_SUCCESS && t &&
           (r = tp_tcp.send_done(j->c, t)) == TP_AGAIN)) &&
         sock_now_ms() < end)
    wait_io(j->c, POLLOUT);
  return r;
}

static unsigned char pat(size_t m, size_t i) {
  return (unsigned char)(i * 131 + m * 17 + (i >> 9));
}

static void fill(unsigned char *p, size_t m, size_t len) {
  for (size_t i = 0; i < len; i++)
    p[i] = pat(m, i);
}

static int check(const unsigned char *p, size_t m, size_t len, char *msg,
                 size_t msglen) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != pat(m, i))
      FAIL("message %zu byte %zu is %#x, expected %#x (the sender had "
           "overwritten its source with 0xa5)",
           m, i, p[i], pat(m, i));
  return 0;
}

/* Rank 0 sends NMSG slot-sized messages from one buffer that it overwrites
 * right after each isend_copy; rank 1 starts reading late, so the socket
 * fills and the copies queue up. */
#define NMSG 64
static int rank_overwrite(int rank, int nranks, const braid_unique_id *id,
                          void *arg, char *msg, size_t msglen) {
  (void)nranks;
  (void)arg;
  job j;
  if (job_start(&j, rank, id, msg, msglen))
    return 1;
  unsigned char *buf = g_buf;
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  int r;
  char ack = 0;
  if (rank == 0) {
    int again = 0;
    for (size_t m = 0; m < NMSG; m++) {
      fill(buf, m, SLOT);
      uint64_t t = 0;
      int64_t end = sock_now_ms() + 10000;
      while ((r = tp_tcp.isend_copy(j.c, buf, SLOT, &t)) == TP_AGAIN &&
             sock_now_ms() < end) {
        again++;
        wait_io(j.c, POLLOUT);
      }
      if (r != BRAID_SUCCESS)
        FAIL("isend_copy %zu: %d %s", m, r, err_msg());
      if ((r = tp_tcp.send_done(j.c, t)) != BRAID_SUCCESS)
        FAIL("send_done of copy %zu returned %d, not at once", m, r);
      memset(buf, 0xa5, SLOT);
    }
    if (again == 0)
      FAIL("%d messages of %d bytes never filled the socket and the copies",
           NMSG, SLOT);
    if ((r = drain(&j, 0)) != BRAID_SUCCESS)
      FAIL("flush: %d %s", r, err_msg());
    if ((r = xrecv(j.c, &ack, 1)) != BRAID_SUCCESS || ack != 'k')
      FAIL("ack: %d %s", r, err_msg());
    snprintf(msg, msglen, "isend_copy said TP_AGAIN %d times", again);
  } else {
    usleep(300000); /* the sender runs ahead */
    for (size_t m = 0; m < NMSG; m++) {
      if ((r = xrecv(j.c, buf, SLOT)) != BRAID_SUCCESS)
        FAIL("recv %zu: %d %s", m, r, err_msg());
      if (check(buf, m, SLOT, msg, msglen))
        return 1;
    }
    ack = 'k';
    uint64_t t;
    if ((r = xisend(j.c, &ack, 1, &t)) != BRAID_SUCCESS ||
        (r = drain(&j, t)) != BRAID_SUCCESS)
      FAIL("ack: %d %s", r, err_msg());
  }
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp_copy, overwritten_source_arrives_intact, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_overwrite, NULL, 40000, p), 0);
  cr_log_info("rank 0: %s", p[0].msg);
}

/* Copies of len bytes from src until TP_AGAIN (or max); each source is
 * overwritten at once and each send_done must be immediate. *n gets the
 * number taken; returns the last result. */
static int copies(job *j, size_t first, size_t len, int max, int *n, char *msg,
                  size_t msglen) {
  unsigned char *src = malloc(len ? len : 1);
  int r = BRAID_SUCCESS;
  for (*n = 0; *n < max; (*n)++) {
    fill(src, first + (size_t)*n, len);
    uint64_t t;
    r = tp_tcp.isend_copy(j->c, src, len, &t);
    if (r != BRAID_SUCCESS)
      break;
    if (tp_tcp.send_done(j->c, t) != BRAID_SUCCESS) {
      snprintf(msg, msglen, "send_done of copy %zu is not immediate",
               first + (size_t)*n);
      r = BRAID_ERR_INTERNAL;
      break;
    }
    memset(src, 0xa5, len);
  }
  free(src);
  return r;
}

/* Rank 0 fills the socket with a zero-copy message, queues nslots - 1
 * copies behind it while rank 1 sleeps, then tears its transport down at
 * once: teardown must still push everything out before closing. */
static int rank_teardown(int rank, int nranks, const braid_unique_id *id,
                         void *arg, char *msg, size_t msglen) {
  (void)nranks;
  (void)arg;
  job j;
  if (job_start(&j, rank, id, msg, msglen))
    return 1;
  unsigned char *big = g_big, *buf = g_buf;
  fill(big, 1000, BIG);
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  int r, n;
  if (rank == 0) {
    uint64_t t;
    if ((r = xisend(j.c, big, BIG, &t)) != BRAID_SUCCESS)
      FAIL("isend of %u bytes: %d %s", BIG, r, err_msg());
    r = copies(&j, 0, SLOT, NSLOTS - 1, &n, msg, msglen);
    if (r != BRAID_SUCCESS || n != NSLOTS - 1)
      FAIL("%d copies taken: %d %s", n, r, err_msg());
    if ((r = tp_tcp.flush(j.st)) != TP_AGAIN)
      FAIL("flush returned %d with copies queued behind %u bytes", r, BIG);
    int64_t t0 = sock_now_ms();
    tp_tcp.teardown(j.st); /* returns once the copies are out */
    snprintf(msg, msglen, "teardown took %lld ms",
             (long long)(sock_now_ms() - t0));
    boot_close(j.b);
  } else {
    usleep(300000);
    if ((r = xrecv(j.c, g_in, BIG)) != BRAID_SUCCESS ||
        memcmp(g_in, big, BIG) != 0)
      FAIL("the zero-copy message: %d %s", r, err_msg());
    for (size_t m = 0; m < NSLOTS - 1; m++) {
      if ((r = xrecv(j.c, buf, SLOT)) != BRAID_SUCCESS)
        FAIL("recv copy %zu: %d %s", m, r, err_msg());
      if (check(buf, m, SLOT, msg, msglen))
        return 1;
    }
    job_end(&j);
  }
  return 0;
}

Test(tcp_copy, teardown_pushes_queued_copies_out, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_teardown, NULL, 40000, p), 0);
  cr_log_info("rank 0: %s", p[0].msg);
}

/* Rank 1 does not read until told (bootstrap barrier). Rank 0 first queues a
 * message far larger than the socket buffers with the zero-copy isend, so
 * the socket stays full, then:
 *  phase 1: 100-byte copies: nslots - 1 are taken (the queue holds nslots
 *           messages), then TP_AGAIN;
 *  phase 2: copies of 2 slots: two are taken (nslots * slot_bytes bytes of
 *           copies), then even a 1-byte copy gets TP_AGAIN with a queue slot
 *           free, and a copy larger than the bound is refused.
 * Rank 1 checks that exactly the messages taken arrive, in order, followed
 * by an end marker: nothing of a refused call reached the stream. */
#define SMALL 100
#define TWO (2 * SLOT)
static int rank_bound(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  (void)nranks;
  (void)arg;
  job j;
  if (job_start(&j, rank, id, msg, msglen))
    return 1;
  unsigned char *big = g_big;
  fill(big, 1000, BIG);
  int r, n;
  uint32_t endmark = 0x454e4421u;
  for (int phase = 1; phase <= 2; phase++) {
    size_t len = phase == 1 ? SMALL : TWO;
    size_t first = phase == 1 ? 0 : 100;
    int expect = phase == 1 ? NSLOTS - 1 : 2;
    if (rank == 0) {
      uint64_t tbig;
      if ((r = xisend(j.c, big, BIG, &tbig)) != BRAID_SUCCESS)
        FAIL("phase %d: isend of %u bytes: %d %s", phase, BIG, r, err_msg());
      if (tp_tcp.send_done(j.c, tbig) != TP_AGAIN)
        FAIL("phase %d: a %u-byte message fit the socket: cannot test", phase,
             BIG);
      r = copies(&j, first, len, NSLOTS + 2, &n, msg, msglen);
      if (r == BRAID_ERR_INTERNAL)
        return 1;
      if (r != TP_AGAIN || n != expect)
        FAIL("phase %d: %d copies of %zu bytes taken before %d (expected "
             "%d, then TP_AGAIN)",
             phase, n, len, r, expect);
      if (phase == 2) {
        unsigned char one = 1;
        uint64_t t;
        if ((r = tp_tcp.isend_copy(j.c, &one, 1, &t)) != TP_AGAIN)
          FAIL("a 1-byte copy past the byte bound returned %d", r);
        size_t huge = (size_t)NSLOTS * SLOT + 1;
        unsigned char *h = calloc(1, huge);
        r = tp_tcp.isend_copy(j.c, h, huge, &t);
        free(h);
        if (r != BRAID_ERR_INVALID_ARG || !strstr(err_msg(), "isend_copy"))
          FAIL("a copy larger than the bound returned %d: %s", r, err_msg());
      }
      if ((r = tp_tcp.flush(j.st)) != TP_AGAIN)
        FAIL("phase %d: flush returned %d with copies queued", phase, r);
      if (boot_barrier(j.b) != BRAID_SUCCESS) /* rank 1 reads now */
        FAIL("barrier: %s", err_msg());
      uint64_t t;
      if ((r = drain(&j, tbig)) != BRAID_SUCCESS ||
          (r = xisend(j.c, &endmark, sizeof(endmark), &t)) != BRAID_SUCCESS ||
          (r = drain(&j, t)) != BRAID_SUCCESS)
        FAIL("phase %d: drain: %d %s", phase, r, err_msg());
    } else {
      if (boot_barrier(j.b) != BRAID_SUCCESS)
        FAIL("barrier: %s", err_msg());
      unsigned char *in = g_in;
      if ((r = xrecv(j.c, in, BIG)) != BRAID_SUCCESS)
        FAIL("phase %d: recv big: %d %s", phase, r, err_msg());
      if (memcmp(in, big, BIG) != 0)
        FAIL("phase %d: the zero-copy message differs", phase);
      for (int m = 0; m < expect; m++) {
        if ((r = xrecv(j.c, in, len)) != BRAID_SUCCESS)
          FAIL("phase %d: recv copy %d: %d %s", phase, m, r, err_msg());
        if (check(in, first + (size_t)m, len, msg, msglen))
          return 1;
      }
      uint32_t e = 0;
      if ((r = xrecv(j.c, &e, sizeof(e))) != BRAID_SUCCESS || e != endmark)
        FAIL("phase %d: after the copies: %d (%s), not the end marker", phase,
             r, err_msg());
    }
    if (boot_barrier(j.b) != BRAID_SUCCESS)
      FAIL("barrier: %s", err_msg());
  }
  if (rank == 0 && (r = tp_tcp.flush(j.st)) != BRAID_SUCCESS)
    FAIL("flush with nothing queued: %d", r);
  job_end(&j);
  return 0;
}

Test(tcp_copy, queue_and_byte_bounds, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(2, &id, rank_bound, NULL, 40000, NULL), 0);
}

/* self copies at isend already: the executor's fallback covers it. */
Test(tcp_copy, self_needs_no_copy_entry) {
  cr_assert(tp_self.isend_copy == NULL,
            "tp_self has an isend_copy: this test assumed isend copies");
  cr_assert(tp_tcp.isend_copy != NULL && tp_tcp.flush != NULL);
}
