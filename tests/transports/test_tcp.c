/*
 * tcp transport tests between real rank processes, plus the self transport.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static size_t g_slot = SLOT; /* slot_bytes of the next job_start */

typedef struct job {
  boot *b;
  void *st;
  int rank, nranks;
} job;

/* boot_init, then tcp setup with the given peers (NULL: everyone else). */
static int job_boot(job *j, int rank, int nranks, const braid_unique_id *id,
                    char *msg, size_t msglen) {
  memset(j, 0, sizeof(*j));
  j->rank = rank;
  j->nranks = nranks;
  if (boot_init(id, rank, nranks, 20000, &j->b) != BRAID_SUCCESS)
    FAIL("boot_init: %s", err_msg());
  return 0;
}

static int job_tcp(job *j, int nchannels, const uint8_t *peers, char *msg,
                   size_t msglen) {
  uint8_t all[64];
  for (int p = 0; p < j->nranks; p++)
    all[p] = p != j->rank;
  tp_setup st;
  memset(&st, 0, sizeof(st));
  st.boot = j->b;
  st.rank = j->rank;
  st.nranks = j->nranks;
  st.nchannels = nchannels;
  st.nslots = NSLOTS;
  st.slot_bytes = g_slot;
  st.timeout_ms = 20000;
  cfg_tp_settings(&st.set);
  int r = tp_tcp.setup(&st, peers ? peers : all, &j->st);
  if (r != BRAID_SUCCESS)
    FAIL("tcp setup: %d: %s", r, err_msg());
  return 0;
}

static int job_start(job *j, int rank, int nranks, const braid_unique_id *id,
                     int nchannels, const uint8_t *peers, char *msg,
                     size_t msglen) {
  if (job_boot(j, rank, nranks, id, msg, msglen))
    return 1;
  return job_tcp(j, nchannels, peers, msg, msglen);
}

static void job_end(job *j) {
  tp_tcp.teardown(j->st);
  boot_close(j->b);
}

/* Retries op until it stops saying TP_AGAIN, polling the socket; 10 s. */
static int wait_io(tp_conn *c, short ev, int r) {
  struct pollfd p = {.fd = tp_tcp.pollfd(c), .events = ev};
  (void)poll(&p, 1, 50);
  return r;
}

static int xsend(tp_conn *c, const void *buf, size_t len) {
  uint64_t t = 0;
  int64_t end = sock_now_ms() + 10000;
  int r;
  while ((r = tp_tcp.isend(c, buf, len, &t)) == TP_AGAIN && sock_now_ms() < end)
    wait_io(c, POLLOUT, r);
  if (r != BRAID_SUCCESS)
    return r;
  while ((r = tp_tcp.send_done(c, t)) == TP_AGAIN && sock_now_ms() < end)
    wait_io(c, POLLOUT, r);
  return r;
}

static int xrecv(tp_conn *c, void *buf, size_t len) {
  int64_t end = sock_now_ms() + 10000;
  int r;
  while ((r = tp_tcp.recv(c, buf, len)) == TP_AGAIN && sock_now_ms() < end)
    wait_io(c, POLLIN, r);
  return r;
}

static unsigned char pat(size_t msg, size_t i) {
  return (unsigned char)(i * 131 + msg * 17 + (i >> 11));
}

static const size_t sizes[] = {0, 1, 7, 4096, (1u << 20) + 3};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* rank 0 queues every size at once, rank 1 checks and echoes them back. */
static int rank_sizes(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  (void)arg;
  job j;
  if (job_start(&j, rank, nranks, id, 1, NULL, msg, msglen))
    return 1;
  tp_conn *c = tp_tcp.conn(j.st, 1 - rank, 0);
  if (c == NULL)
    FAIL("no connection to rank %d", 1 - rank);
  unsigned char *buf[NSIZES];
  for (size_t m = 0; m < NSIZES; m++) {
    buf[m] = malloc(sizes[m] + 1);
    for (size_t i = 0; i < sizes[m]; i++)
      buf[m][i] = pat(m, i);
  }
  unsigned char *in = malloc(sizes[NSIZES - 1] + 1);
  int r;
  if (rank == 0) {
    uint64_t t[NSIZES];
    for (size_t m = 0; m < NSIZES; m++) {
      int64_t end = sock_now_ms() + 10000;
      while ((r = tp_tcp.isend(c, buf[m], sizes[m], &t[m])) == TP_AGAIN &&
             sock_now_ms() < end)
        wait_io(c, POLLOUT, r);
      if (r != BRAID_SUCCESS)
        FAIL("isend %zu bytes: %d %s", sizes[m], r, err_msg());
    }
    int64_t end = sock_now_ms() + 10000;
    while ((r = tp_tcp.send_done(c, t[NSIZES - 1])) == TP_AGAIN &&
           sock_now_ms() < end)
      wait_io(c, POLLOUT, r);
    for (size_t m = 0; m < NSIZES; m++)
      if (tp_tcp.send_done(c, t[m]) != BRAID_SUCCESS)
        FAIL("send_done of message %zu: %d", m, r);
    for (size_t m = 0; m < NSIZES; m++) {
      memset(in, 0xee, sizes[m] + 1);
      if ((r = xrecv(c, in, sizes[m])) != BRAID_SUCCESS)
        FAIL("echo recv %zu: %d %s", sizes[m], r, err_msg());
      if (memcmp(in, buf[m], sizes[m]) != 0 || in[sizes[m]] != 0xee)
        FAIL("echo of %zu bytes differs", sizes[m]);
    }
  } else {
    for (size_t m = 0; m < NSIZES; m++) {
      memset(in, 0xee, sizes[m] + 1);
      if ((r = xrecv(c, in, sizes[m])) != BRAID_SUCCESS)
        FAIL("recv %zu: %d %s", sizes[m], r, err_msg());
      if (memcmp(in, buf[m], sizes[m]) != 0 || in[sizes[m]] != 0xee)
        FAIL("message of %zu bytes differs (or overran)", sizes[m]);
    }
    for (size_t m = 0; m < NSIZES; m++)
      if ((r = xsend(c, buf[m], sizes[m])) != BRAID_SUCCESS)
        FAIL("echo send %zu: %d %s", sizes[m], r, err_msg());
  }
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp, ordered_sizes, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(2, &id, rank_sizes, NULL, 40000, NULL), 0);
}

/* More than nslots messages before the receiver starts reading. */
#define INFLIGHT (6 * NSLOTS)
static int rank_inflight(int rank, int nranks, const braid_unique_id *id,
                         void *arg, char *msg, size_t msglen) {
  (void)arg;
  job j;
  if (job_start(&j, rank, nranks, id, 1, NULL, msg, msglen))
    return 1;
  tp_conn *c = tp_tcp.conn(j.st, 1 - rank, 0);
  size_t len = SLOT / 2;
  unsigned char *buf = malloc(len * INFLIGHT);
  int r;
  if (rank == 0) {
    for (size_t m = 0; m < INFLIGHT; m++)
      for (size_t i = 0; i < len; i++)
        buf[m * len + i] = pat(m, i);
    if (boot_barrier(j.b) != BRAID_SUCCESS)
      FAIL("barrier: %s", err_msg());
    uint64_t t[INFLIGHT];
    int before = 0, again = 0;
    for (size_t m = 0; m < INFLIGHT; m++) {
      int64_t end = sock_now_ms() + 10000;
      while ((r = tp_tcp.isend(c, buf + m * len, len, &t[m])) == TP_AGAIN &&
             sock_now_ms() < end) {
        again = 1;
        wait_io(c, POLLOUT, r);
      }
      if (r != BRAID_SUCCESS)
        FAIL("isend %zu: %d %s", m, r, err_msg());
      if (!again)
        before++;
    }
    if (before < NSLOTS)
      FAIL("only %d messages accepted before the receiver read (nslots %d)",
           before, NSLOTS);
    int64_t end = sock_now_ms() + 10000;
    while ((r = tp_tcp.send_done(c, t[INFLIGHT - 1])) == TP_AGAIN &&
           sock_now_ms() < end)
      wait_io(c, POLLOUT, r);
    if (r != BRAID_SUCCESS)
      FAIL("send_done: %d", r);
    for (size_t m = 0; m < INFLIGHT; m++)
      if (tp_tcp.send_done(c, t[m]) != BRAID_SUCCESS)
        FAIL("earlier ticket %zu not done", m);
  } else {
    if (boot_barrier(j.b) != BRAID_SUCCESS)
      FAIL("barrier: %s", err_msg());
    usleep(300000); /* the sender runs ahead */
    for (size_t m = 0; m < INFLIGHT; m++) {
      if ((r = xrecv(c, buf, len)) != BRAID_SUCCESS)
        FAIL("recv %zu: %d %s", m, r, err_msg());
      for (size_t i = 0; i < len; i++)
        if (buf[i] != pat(m, i))
          FAIL("message %zu byte %zu wrong (out of order?)", m, i);
    }
  }
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  free(buf);
  job_end(&j);
  return 0;
}

Test(tcp, many_in_flight, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(2, &id, rank_inflight, NULL, 40000, NULL), 0);
}

static void fsum(void *dst, const void *a, const void *b, size_t n) {
  float *d = dst;
  const float *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] + y[i];
}

#define NF 100003
static int rank_reduce(int rank, int nranks, const braid_unique_id *id,
                       void *arg, char *msg, size_t msglen) {
  g_slot = *(size_t *)arg;
  job j;
  if (job_start(&j, rank, nranks, id, 1, NULL, msg, msglen))
    return 1;
  tp_conn *c = tp_tcp.conn(j.st, 1 - rank, 0);
  float *a = malloc(NF * sizeof(float)), *b = malloc(NF * sizeof(float));
  float *out = malloc(NF * sizeof(float));
  for (int i = 0; i < NF; i++) {
    a[i] = (float)(i % 1000);
    b[i] = (float)(3 * (i % 777));
  }
  tp_reducer red = {fsum, sizeof(float)};
  int r;
  if (rank == 0) {
    if ((r = xsend(c, a, NF * sizeof(float))) != BRAID_SUCCESS ||
        (r = xsend(c, a, NF * sizeof(float))) != BRAID_SUCCESS)
      FAIL("send: %d %s", r, err_msg());
  } else {
    int64_t end = sock_now_ms() + 10000;
    while ((r = tp_tcp.recv_reduce(c, b, out, NF * sizeof(float), &red)) ==
               TP_AGAIN &&
           sock_now_ms() < end)
      wait_io(c, POLLIN, r);
    if (r != BRAID_SUCCESS)
      FAIL("recv_reduce: %d %s", r, err_msg());
    for (int i = 0; i < NF; i++)
      if (out[i] != a[i] + b[i])
        FAIL("element %d: %g, expected %g", i, out[i], a[i] + b[i]);
    /* in place: dst == src */
    while ((r = tp_tcp.recv_reduce(c, b, b, NF * sizeof(float), &red)) ==
               TP_AGAIN &&
           sock_now_ms() < end)
      wait_io(c, POLLIN, r);
    if (r != BRAID_SUCCESS)
      FAIL("in-place recv_reduce: %d %s", r, err_msg());
    if (memcmp(b, out, NF * sizeof(float)) != 0)
      FAIL("in-place recv_reduce differs");
  }
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp, recv_reduce_float_sum, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  size_t slot = SLOT;
  cr_assert_eq(run_ranks(2, &id, rank_reduce, &slot, 40000, NULL), 0);
}

/* A 102-byte staging buffer: the message is reduced in ~4000 pieces, with
 * partial elements carried between reads. */
Test(tcp, recv_reduce_tiny_staging, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  size_t slot = 102;
  cr_assert_eq(run_ranks(2, &id, rank_reduce, &slot, 40000, NULL), 0);
}

/* Two channels are independent streams; then a length mismatch. */
static int rank_channels(int rank, int nranks, const braid_unique_id *id,
                         void *arg, char *msg, size_t msglen) {
  (void)arg;
  job j;
  if (job_start(&j, rank, nranks, id, 2, NULL, msg, msglen))
    return 1;
  tp_conn *c0 = tp_tcp.conn(j.st, 1 - rank, 0);
  tp_conn *c1 = tp_tcp.conn(j.st, 1 - rank, 1);
  if (c0 == NULL || c1 == NULL || c0 == c1)
    FAIL("channels %p %p", (void *)c0, (void *)c1);
  if (tp_tcp.conn(j.st, rank, 0) != NULL || tp_tcp.conn(j.st, 1 - rank, 2))
    FAIL("a connection to itself or to channel 2 exists");
  char in[16] = "";
  int r;
  if (rank == 0) {
    if (xsend(c1, "channel-one", 12) || xsend(c0, "channel-zero", 13))
      FAIL("send: %s", err_msg());
    if (xsend(c0, "sixteen-bytes..", 16))
      FAIL("send: %s", err_msg());
  } else {
    if ((r = xrecv(c0, in, 13)) != BRAID_SUCCESS || strcmp(in, "channel-zero"))
      FAIL("channel 0: %d '%s'", r, in);
    if ((r = xrecv(c1, in, 12)) != BRAID_SUCCESS || strcmp(in, "channel-one"))
      FAIL("channel 1: %d '%s'", r, in);
    char big[24];
    r = xrecv(c0, big, 24);
    const char *e = err_msg();
    if (r != BRAID_ERR_MISMATCH || !strstr(e, "rank 0") ||
        !strstr(e, "16-byte") || !strstr(e, "24 bytes") ||
        !strstr(e, "BRAID_CHECK"))
      FAIL("mismatch not reported: %d: %s", r, e);
  }
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp, two_channels_and_mismatch, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(2, &id, rank_channels, NULL, 40000, NULL), 0);
}

/* A ring of 4 where each rank connects only to its neighbours. */
static int rank_ring(int rank, int nranks, const braid_unique_id *id, void *arg,
                     char *msg, size_t msglen) {
  (void)arg;
  uint8_t peers[8] = {0};
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  peers[next] = peers[prev] = 1;
  job j;
  if (job_start(&j, rank, nranks, id, 1, peers, msg, msglen))
    return 1;
  for (int p = 0; p < nranks; p++)
    if ((tp_tcp.conn(j.st, p, 0) != NULL) != (peers[p] != 0))
      FAIL("connection to rank %d: %s", p, peers[p] ? "missing" : "extra");
  int out = rank * 100 + 1, in = -1, r;
  if ((r = xsend(tp_tcp.conn(j.st, next, 0), &out, sizeof(out))) != 0 ||
      (r = xrecv(tp_tcp.conn(j.st, prev, 0), &in, sizeof(in))) != 0)
    FAIL("ring: %d %s", r, err_msg());
  if (in != prev * 100 + 1)
    FAIL("got %d from rank %d", in, prev);
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp, ring_with_partial_peers, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(4, &id, rank_ring, NULL, 40000, NULL), 0);
}

/* Rank 1 dies with SIGKILL; rank 0 must see BRAID_ERR_REMOTE naming it. */
static int rank_killed(int rank, int nranks, const braid_unique_id *id,
                       void *arg, char *msg, size_t msglen) {
  (void)arg;
  job j;
  if (job_start(&j, rank, nranks, id, 1, NULL, msg, msglen))
    return 1;
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  if (rank == 1)
    raise(SIGKILL);
  tp_conn *c = tp_tcp.conn(j.st, 1, 0);
  int64_t start = sock_now_ms();
  char buf[64];
  int r;
  while ((r = tp_tcp.recv(c, buf, sizeof(buf))) == TP_AGAIN &&
         sock_now_ms() < start + 5000)
    wait_io(c, POLLIN, r);
  int64_t took = sock_now_ms() - start;
  if (r != BRAID_ERR_REMOTE)
    FAIL("recv returned %d after %lld ms", r, (long long)took);
  if (!strstr(err_msg(), "rank 1"))
    FAIL("error does not name rank 1: %s", err_msg());
  int dead = -1;
  if (tp_tcp.check_peers(j.st, &dead) != BRAID_ERR_REMOTE || dead != 1)
    FAIL("tcp check_peers: dead=%d", dead);
  /* the control socket's end of file may arrive a moment later */
  int64_t end = sock_now_ms() + 3000;
  do {
    dead = -1;
    r = boot_check_peers(j.b, &dead);
  } while (r == BRAID_SUCCESS && sock_now_ms() < end && usleep(1000) == 0);
  if (r != BRAID_ERR_REMOTE || dead != 1 || !strstr(err_msg(), "rank 1"))
    FAIL("boot_check_peers: %d dead=%d: %s", r, dead, err_msg());
  uint64_t t;
  if (tp_tcp.isend(c, buf, 8, &t) != BRAID_ERR_REMOTE)
    FAIL("isend to a dead peer did not fail");
  snprintf(msg, msglen, "%s (after %lld ms)", err_msg(), (long long)took);
  job_end(&j);
  return 0;
}

Test(tcp, killed_peer_is_named, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  for (int r = 0; r < 2; r++)
    spawn_rank(&p[r], r, 2, &id, rank_killed, NULL);
  wait_ranks(p, 2, 30000);
  cr_assert_eq(p[1].status, -SIGKILL, "rank 1: status %d: %s", p[1].status,
               p[1].msg);
  cr_assert_eq(p[0].status, 0, "rank 0: status %d: %s", p[0].status, p[0].msg);
  cr_log_info("rank 0 saw: %s", p[0].msg);
}

/* Rank 2 dies; rank 1 sees it and closes its connections but keeps
 * running. Rank 0 then loses rank 1's connection and must name rank 2, the
 * rank that died, not rank 1 (the message starts with "tcp: rank 2 "). */
static int rank_cascade(int rank, int nranks, const braid_unique_id *id,
                        void *arg, char *msg, size_t msglen) {
  int raw = *(int *)arg; /* rank 1 drops its sockets without a goodbye */
  job j;
  if (job_start(&j, rank, nranks, id, 1, NULL, msg, msglen))
    return 1;
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  if (rank == 2)
    raise(SIGKILL);
  char buf[8];
  int r;
  if (rank == 1) {
    if ((r = xrecv(tp_tcp.conn(j.st, 2, 0), buf, sizeof(buf))) !=
        BRAID_ERR_REMOTE)
      FAIL("rank 1: recv from the dead rank returned %d", r);
    if (raw)
      for (int fd = 3; fd < 1024; fd++)
        close(fd);
    else
      job_end(&j);
    usleep(1500000); /* still running while rank 0 looks */
    return 0;
  }
  r = xrecv(tp_tcp.conn(j.st, 1, 0), buf, sizeof(buf));
  char e[512];
  snprintf(e, sizeof e, "%s", err_msg());
  if (r != BRAID_ERR_REMOTE || strncmp(e, "tcp: rank 2 ", 12) != 0)
    FAIL("rank 0: %d: %s", r, e);
  int dead = -1;
  if (tp_tcp.check_peers(j.st, &dead) != BRAID_ERR_REMOTE || dead != 2)
    FAIL("check_peers names rank %d", dead);
  snprintf(msg, msglen, "%s", e);
  job_end(&j);
  return 0;
}

static void run_cascade(int raw) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  for (int r = 0; r < 3; r++)
    spawn_rank(&p[r], r, 3, &id, rank_cascade, &raw);
  wait_ranks(p, 3, 30000);
  cr_assert_eq(p[2].status, -SIGKILL, "rank 2: %d: %s", p[2].status, p[2].msg);
  cr_assert_eq(p[1].status, 0, "rank 1: %d: %s", p[1].status, p[1].msg);
  cr_assert_eq(p[0].status, 0, "rank 0: %d: %s", p[0].status, p[0].msg);
  cr_log_info("rank 0 saw: %s", p[0].msg);
}

/* rank 1 tears its transport down: its goodbye names rank 2 */
Test(tcp, cascade_goodbye_names_the_dead_rank, .timeout = 60) {
  run_cascade(0);
}

/* rank 1 just drops its sockets: rank 0 sees rank 1 still running and finds
 * rank 2's process killed or gone */
Test(tcp, cascade_process_state_names_the_dead_rank, .timeout = 60) {
  run_cascade(1);
}

/* A connection with a wrong secret to rank 1's tcp listener, made while
 * rank 1 waits for rank 0, is dropped and setup completes. */
typedef struct gate_pipes {
  int ready_w; /* rank 1 -> test: the tcp listener is about to exist */
  int go_r;    /* test -> rank 0: go on with tcp setup */
} gate_pipes;

static int rank_tcp_rogue(int rank, int nranks, const braid_unique_id *id,
                          void *arg, char *msg, size_t msglen) {
  gate_pipes *gp = arg;
  job j;
  if (job_boot(&j, rank, nranks, id, msg, msglen))
    return 1;
  if (rank == 1) {
    if (write(gp->ready_w, "r", 1) != 1)
      FAIL("pipe write");
  } else {
    struct pollfd p = {.fd = gp->go_r, .events = POLLIN};
    char c;
    if (poll(&p, 1, 15000) != 1 || read(gp->go_r, &c, 1) != 1)
      FAIL("no go from the test");
  }
  if (job_tcp(&j, 2, NULL, msg, msglen))
    return 1;
  int v = rank + 40, in = -1, r;
  tp_conn *c = tp_tcp.conn(j.st, 1 - rank, 1);
  if ((r = xsend(c, &v, sizeof(v))) || (r = xrecv(c, &in, sizeof(in))))
    FAIL("exchange: %d %s", r, err_msg());
  if (in != 41 - rank)
    FAIL("got %d", in);
  if (boot_barrier(j.b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  job_end(&j);
  return 0;
}

Test(tcp, rogue_to_listener_is_rejected, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  int ready[2], go[2];
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(go), 0);
  gate_pipes gp = {ready[1], go[0]};
  rank_proc p[2];
  for (int r = 0; r < 2; r++)
    spawn_rank(&p[r], r, 2, &id, rank_tcp_rogue, &gp);
  struct pollfd pf = {.fd = ready[0], .events = POLLIN};
  char c;
  cr_assert(poll(&pf, 1, 15000) == 1 && read(ready[0], &c, 1) == 1,
            "rank 1 never reached tcp setup");
  struct sockaddr_storage l;
  int found = -1;
  for (int i = 0; i < 500 && found != 0; i++) {
    found = find_listener(p[1].pid, &l);
    if (found != 0)
      usleep(10000);
  }
  int wrong = -1;
  if (found == 0)
    wrong = rogue_connect(&l, 0x42524454u, "0123456789abcdef");
  cr_assert_eq(write(go[1], "g", 1), 1);
  wait_ranks(p, 2, 30000);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
  if (found != 0)
    cr_skip_test("cannot see rank 1's tcp listener in /proc (IPv6-only "
                 "interface or no procfs)");
  cr_assert_geq(wrong, 0, "cannot connect to rank 1's tcp listener");
  cr_assert(closed_by_peer(wrong, 3000),
            "rank 1 kept a connection with a wrong secret open");
  close(wrong);
}

/* ---- self ---------------------------------------------------------------- */

Test(self, ordered_bounded_queue) {
  tp_setup st;
  memset(&st, 0, sizeof(st));
  st.rank = 2;
  st.nranks = 4;
  st.nchannels = 2;
  st.nslots = 2;
  st.slot_bytes = 1024;
  uint8_t peers[4] = {0, 0, 1, 0};
  void *s = NULL;
  cr_assert_eq(tp_self.setup(&st, peers, &s), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_null(tp_self.conn(s, 1, 0));
  cr_assert_null(tp_self.conn(s, 2, 2));
  tp_conn *c = tp_self.conn(s, 2, 1);
  cr_assert_not_null(c);
  cr_assert_eq(tp_self.pollfd(c), -1);
  char big[5000];
  for (size_t i = 0; i < sizeof(big); i++)
    big[i] = (char)(i * 13);
  uint64_t t1, t2, t3;
  char scratch[5000];
  cr_assert_eq(tp_self.recv(c, scratch, 0), TP_AGAIN);
  cr_assert_eq(tp_self.isend(c, NULL, 0, &t1), BRAID_SUCCESS);
  cr_assert_eq(tp_self.isend(c, big, sizeof(big), &t2), BRAID_SUCCESS);
  cr_assert_eq(tp_self.isend(c, "x", 1, &t3), TP_AGAIN, "queue not bounded");
  cr_assert_eq(tp_self.send_done(c, t2), BRAID_SUCCESS);
  big[0] ^= 1; /* the queue holds a copy */
  cr_assert_eq(tp_self.recv(c, scratch, 0), BRAID_SUCCESS);
  cr_assert_eq(tp_self.isend(c, "abc", 4, &t3), BRAID_SUCCESS);
  cr_assert_eq(tp_self.recv(c, scratch, 10), BRAID_ERR_MISMATCH);
  cr_assert(strstr(err_msg(), "5000") != NULL, "%s", err_msg());
  cr_assert_eq(tp_self.recv(c, scratch, sizeof(big)), BRAID_SUCCESS);
  big[0] ^= 1;
  cr_assert_eq(memcmp(scratch, big, sizeof(big)), 0);
  cr_assert_eq(tp_self.recv(c, scratch, 4), BRAID_SUCCESS);
  cr_assert_str_eq(scratch, "abc");
  /* channel 0 is independent; reduce */
  tp_conn *c0 = tp_self.conn(s, 2, 0);
  float x[3] = {1, 2, 3}, y[3] = {10, 20, 30}, z[3];
  tp_reducer red = {fsum, sizeof(float)};
  cr_assert_eq(tp_self.isend(c0, x, sizeof(x), &t1), BRAID_SUCCESS);
  cr_assert_eq(tp_self.recv(c, scratch, 4), TP_AGAIN);
  cr_assert_eq(tp_self.recv_reduce(c0, y, z, sizeof(z), &red), BRAID_SUCCESS);
  cr_assert(z[0] == 11 && z[1] == 22 && z[2] == 33);
  int dead = -1;
  cr_assert_eq(tp_self.check_peers(s, &dead), BRAID_SUCCESS);
  tp_self.teardown(s);
}
