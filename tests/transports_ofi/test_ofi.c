/*
 * libfabric transport (transports/ofi/ofi.c) between real rank processes on
 * this host: the test process makes a unique id (its root service answers
 * the rendezvous), forks the ranks and waits for them with a deadline,
 * killing stragglers. Providers: tcp;ofi_rxm (the default here), shm and
 * udp;ofi_rxd when named. A rank exits XCHG_SKIP when the provider is absent;
 * the test then skips, saying so.
 */
#define _GNU_SOURCE /* dladdr */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_fork.h"
#include "src/bootstrap.h"
#include "src/config.h"
#include "src/log.h"
#include "transports/ofi/ofi.h"
#include "xchg.h"

#define MAXR 4
#define RANK_MS 20000

typedef struct job {
  int n;
  int nchannels, nslots;
  size_t slot_bytes;
  int (*body)(boot *b, void *st, int rank, int n, char *err, size_t len);
  int star; /* 1: ofi peers are rank 0 <-> every other rank only */
} job;

static xchg_idbox *g_box;

static int rank_main(const job *j, int rank) {
  char err[512] = "";
  boot *b = NULL;
  braid_unique_id id;
  if (xchg_get_id(g_box, rank, &id, RANK_MS, err, sizeof(err)) != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 2;
  }
  braid_result r = boot_init(&id, rank, j->n, RANK_MS, &b);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: boot_init: %s\n", rank, err_msg());
    return 2;
  }
  void *st = NULL;
  if (j->star) {
    uint8_t peers[MAXR] = {0};
    for (int p = 0; p < j->n; p++)
      peers[p] = p != rank && (rank == 0 || p == 0);
    tp_setup ts;
    memset(&ts, 0, sizeof(ts));
    ts.boot = b;
    ts.rank = rank;
    ts.nranks = j->n;
    ts.nchannels = j->nchannels;
    ts.nslots = j->nslots;
    ts.slot_bytes = j->slot_bytes;
    ts.timeout_ms = RANK_MS;
    cfg_tp_settings(&ts.set);
    r = tp_ofi.setup(&ts, peers, &st);
    snprintf(err, sizeof(err), "%s", err_msg());
  } else {
    r = xchg_setup(&tp_ofi, b, j->nchannels, j->nslots, j->slot_bytes, RANK_MS,
                   &st, err, sizeof(err));
  }
  if (r == BRAID_ERR_UNSUPPORTED) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    boot_close(b);
    return XCHG_SKIP;
  }
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    boot_close(b);
    return 3;
  }
  err[0] = '\0';
  int rc = j->body(b, st, rank, j->n, err, sizeof(err));
  if (rc != 0)
    fprintf(stderr, "rank %d: %s\n", rank, err);
  if (rc == 0 && boot_barrier(b) != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: final barrier: %s\n", rank, err_msg());
    rc = 4;
  }
  tp_ofi.teardown(st);
  boot_close(b);
  return rc;
}

/* Forks j->n ranks; returns their exit codes in codes[]. */
static void run_job(const job *j, int *codes, int timeout_ms) {
  g_box = xchg_idbox_new();
  cr_assert_not_null(g_box, "mmap failed");
  pid_t pid[MAXR];
  fflush(NULL);
  for (int r = 0; r < j->n; r++) {
    pid[r] = test_fork();
    if (pid[r] == 0)
      _exit(rank_main(j, r));
    cr_assert_gt(pid[r], 0, "fork failed");
  }
  int64_t deadline = xchg_now_ms() + timeout_ms;
  for (int r = 0; r < j->n; r++) {
    int st = 0;
    codes[r] = -1000;
    for (;;) {
      pid_t w = waitpid(pid[r], &st, WNOHANG);
      if (w == pid[r]) {
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        break;
      }
      if (xchg_now_ms() > deadline) {
        kill(pid[r], SIGKILL);
        waitpid(pid[r], &st, 0);
        break;
      }
      usleep(2000);
    }
  }
}

static void expect_ok(const job *j, int timeout_ms) {
  int codes[MAXR];
  run_job(j, codes, timeout_ms);
  for (int r = 0; r < j->n; r++)
    if (codes[r] == XCHG_SKIP)
      cr_skip_test("the libfabric provider %s is not available here",
                   getenv("BRAID_OFI_PROVIDER") ? getenv("BRAID_OFI_PROVIDER")
                                                : "(default)");
  for (int r = 0; r < j->n; r++)
    cr_expect_eq(codes[r], 0,
                 "rank %d exited with %d (-1000: killed at the "
                 "deadline)",
                 r, codes[r]);
}

/* ---- bodies ----------------------------------------------------------- */

static const size_t k_sizes[] = {0, 1, 7, 4096, (1u << 20) + 3};

static int body_sizes(boot *b, void *st, int rank, int n, char *err,
                      size_t len) {
  (void)b;
  for (int p = 0; p < n; p++) {
    if (p == rank)
      continue;
    int rc = xchg_run(&tp_ofi, st, rank, p, 2, k_sizes, 5, 15, 3, 0, 15000, err,
                      len);
    if (rc != 0)
      return 10;
  }
  return 0;
}

static int body_many(boot *b, void *st, int rank, int n, char *err,
                     size_t len) {
  (void)b, (void)n;
  static const size_t sz[] = {4096, 64, 12345};
  return xchg_run(&tp_ofi, st, rank, 1 - rank, 2, sz, 3, 600, 8, 0, 15000, err,
                  len) != 0
             ? 11
             : 0;
}

static int body_reduce(boot *b, void *st, int rank, int n, char *err,
                       size_t len) {
  (void)b, (void)n;
  static const size_t sz[] = {0, 4, 4096, (1u << 20) + 4};
  return xchg_run(&tp_ofi, st, rank, 1 - rank, 2, sz, 4, 12, 2, 1, 15000, err,
                  len) != 0
             ? 12
             : 0;
}

/* Rank 1 dies after setup; rank 0 waits on a receive and must learn of the
 * death through check_peers (BRAID_ERR_REMOTE naming rank 1) in time. */
static int body_killed(boot *b, void *st, int rank, int n, char *err,
                       size_t len) {
  (void)b, (void)n;
  if (rank == 1) {
    raise(SIGKILL);
    return 0;
  }
  tp_conn *c = tp_ofi.conn(st, 1, 0);
  char buf[64];
  int64_t t0 = xchg_now_ms();
  for (;;) {
    int r = tp_ofi.recv(c, buf, sizeof(buf));
    if (r != TP_AGAIN && r != BRAID_ERR_REMOTE) {
      snprintf(err, len, "recv from a dead rank returned %d", r);
      return 20;
    }
    int dead = -1;
    int cr = tp_ofi.check_peers(st, &dead);
    if (r == BRAID_ERR_REMOTE || cr == BRAID_ERR_REMOTE) {
      if (cr == BRAID_ERR_REMOTE && dead != 1) {
        snprintf(err, len, "check_peers named rank %d, not 1", dead);
        return 21;
      }
      /* Teardown with a dead peer must not hang; nobody to barrier with. */
      tp_ofi.teardown(st);
      _exit(0);
    }
    if (xchg_now_ms() - t0 > 10000) {
      snprintf(err, len, "dead rank 1 not reported within 10 s");
      return 22;
    }
    usleep(1000);
  }
}

/* Rank 0 sends 100 bytes; rank 1 expects g_want bytes: 64 (too long for
 * the receive: truncated) or 128 (too short). Either is BRAID_ERR_MISMATCH
 * naming the peer; nothing hangs or overruns. (A truncation may also break
 * the provider's connection, so each case is its own job.) */
static size_t g_want;

static int body_mismatch(boot *b, void *st, int rank, int n, char *err,
                         size_t len) {
  (void)n;
  static uint8_t buf[256];
  tp_conn *c = tp_ofi.conn(st, 1 - rank, 0);
  if (rank == 0) {
    uint64_t t;
    int r;
    int64_t dl = xchg_now_ms() + 10000;
    while ((r = tp_ofi.isend(c, buf, 100, &t)) == TP_AGAIN &&
           xchg_now_ms() < dl)
      sched_yield();
    if (r != BRAID_SUCCESS) {
      snprintf(err, len, "isend: %d", r);
      return 30;
    }
    /* A truncated receive may fail the send too; either way it ends. */
    while (tp_ofi.send_done(c, t) == TP_AGAIN && xchg_now_ms() < dl)
      sched_yield();
    return boot_barrier(b) == BRAID_SUCCESS ? 0 : 31;
  }
  int r = xchg_wait_recv(&tp_ofi, c, buf, g_want, 10000);
  if (r != BRAID_ERR_MISMATCH) {
    snprintf(err, len, "100 bytes into a %zu-byte receive gave %d, not %d (%s)",
             g_want, r, BRAID_ERR_MISMATCH, err_msg());
    return 32;
  }
  if (strstr(err_msg(), "rank 0") == NULL) {
    snprintf(err, len, "error text does not name rank 0: %s", err_msg());
    return 33;
  }
  return boot_barrier(b) == BRAID_SUCCESS ? 0 : 34;
}

/* At most nslots (4) sends are outstanding on a connection: with the
 * receiver held at a barrier, 1 MiB sends (rendezvous in tcp;ofi_rxm) cannot
 * complete, so the fifth isend must answer TP_AGAIN. Then everything is
 * delivered in order. */
static int body_window(boot *b, void *st, int rank, int n, char *err,
                       size_t len) {
  (void)n;
  const size_t sz = (size_t)1 << 20;
  static uint8_t bufs[5][1 << 20];
  tp_conn *c = tp_ofi.conn(st, 1 - rank, 0);
  if (rank == 0) {
    uint64_t t[5];
    for (int i = 0; i < 5; i++)
      for (size_t j = 0; j < sz; j++)
        bufs[i][j] = xchg_byte(0, 0, i, j);
    for (int i = 0; i < 4; i++) {
      int r;
      int64_t dl = xchg_now_ms() + 10000;
      while ((r = tp_ofi.isend(c, bufs[i], sz, &t[i])) == TP_AGAIN &&
             xchg_now_ms() < dl)
        sched_yield();
      if (r != BRAID_SUCCESS) {
        snprintf(err, len, "isend %d: %d (%s)", i, r, err_msg());
        return 50;
      }
    }
    int r = tp_ofi.isend(c, bufs[4], sz, &t[4]);
    if (r != TP_AGAIN) {
      snprintf(err, len, "fifth isend with 4 slots gave %d, not TP_AGAIN", r);
      return 51;
    }
    if (boot_barrier(b) != BRAID_SUCCESS)
      return 52;
    int64_t dl = xchg_now_ms() + 10000;
    while ((r = tp_ofi.isend(c, bufs[4], sz, &t[4])) == TP_AGAIN &&
           xchg_now_ms() < dl)
      sched_yield();
    if (r == BRAID_SUCCESS)
      while ((r = tp_ofi.send_done(c, t[4])) == TP_AGAIN && xchg_now_ms() < dl)
        sched_yield();
    if (r != BRAID_SUCCESS) {
      snprintf(err, len, "finishing the sends: %d (%s)", r, err_msg());
      return 53;
    }
    return 0;
  }
  if (boot_barrier(b) != BRAID_SUCCESS)
    return 54;
  for (int i = 0; i < 5; i++) {
    int r = xchg_wait_recv(&tp_ofi, c, bufs[i], sz, 10000);
    if (r != BRAID_SUCCESS) {
      snprintf(err, len, "recv %d: %d (%s)", i, r, err_msg());
      return 55;
    }
    for (size_t j = 0; j < sz; j++)
      if (bufs[i][j] != xchg_byte(0, 0, i, j)) {
        snprintf(err, len, "message %d byte %zu differs", i, j);
        return 56;
      }
  }
  return 0;
}

/* isend_copy frees the source at once: rank 0 reuses one buffer for five
 * 1 MiB messages while the receiver is away; send_done is immediate, flush
 * says TP_AGAIN until the receiver has taken them, and every message arrives
 * intact and in order. */
static int body_copy(boot *b, void *st, int rank, int n, char *err,
                     size_t len) {
  (void)n;
  const size_t sz = (size_t)1 << 20;
  static uint8_t buf[1 << 20];
  tp_conn *c = tp_ofi.conn(st, 1 - rank, 0);
  if (rank == 0) {
    uint64_t t = 0;
    int r = 0;
    for (int i = 0; i < 4; i++) {
      for (size_t j = 0; j < sz; j++)
        buf[j] = xchg_byte(0, 0, i, j);
      int64_t dl = xchg_now_ms() + 10000;
      while ((r = tp_ofi.isend_copy(c, buf, sz, &t)) == TP_AGAIN &&
             xchg_now_ms() < dl)
        sched_yield();
      if (r != BRAID_SUCCESS || tp_ofi.send_done(c, t) != BRAID_SUCCESS) {
        snprintf(err, len, "isend_copy %d: %d / send_done not immediate", i, r);
        return 60;
      }
      memset(buf, 0xee, sz); /* the copy must not see this */
    }
    if (tp_ofi.flush(st) != TP_AGAIN) {
      snprintf(err, len, "flush with the receiver away is not TP_AGAIN");
      return 61;
    }
    for (size_t j = 0; j < sz; j++)
      buf[j] = xchg_byte(0, 0, 4, j);
    if (tp_ofi.isend_copy(c, buf, sz, &t) != TP_AGAIN) {
      snprintf(err, len, "a fifth copy with 4 slots was accepted");
      return 62;
    }
    if (boot_barrier(b) != BRAID_SUCCESS)
      return 63;
    int64_t dl = xchg_now_ms() + 10000;
    while ((r = tp_ofi.isend_copy(c, buf, sz, &t)) == TP_AGAIN &&
           xchg_now_ms() < dl)
      sched_yield();
    memset(buf, 0xee, sz);
    if (r == BRAID_SUCCESS)
      while ((r = tp_ofi.flush(st)) == TP_AGAIN && xchg_now_ms() < dl)
        sched_yield();
    if (r != BRAID_SUCCESS) {
      snprintf(err, len, "flush: %d (%s)", r, err_msg());
      return 64;
    }
    return 0;
  }
  if (boot_barrier(b) != BRAID_SUCCESS)
    return 65;
  for (int i = 0; i < 5; i++) {
    int r = xchg_wait_recv(&tp_ofi, c, buf, sz, 10000);
    if (r != BRAID_SUCCESS) {
      snprintf(err, len, "recv %d: %d (%s)", i, r, err_msg());
      return 66;
    }
    for (size_t j = 0; j < sz; j++)
      if (buf[j] != xchg_byte(0, 0, i, j)) {
        snprintf(err, len, "copied message %d byte %zu differs", i, j);
        return 67;
      }
  }
  return 0;
}

/* Star: rank 0 exchanges with every other rank; the others have no ofi
 * connection between them (as when they share a host and use shm). */
static int body_star(boot *b, void *st, int rank, int n, char *err,
                     size_t len) {
  (void)b;
  static const size_t sz[] = {0, 7, 4096, 100000};
  for (int p = 0; p < n; p++) {
    if (p == rank || (rank != 0 && p != 0))
      continue;
    if (xchg_run(&tp_ofi, st, rank, p, 2, sz, 4, 12, 3, 0, 15000, err, len))
      return 14;
  }
  if (rank != 0 && tp_ofi.conn(st, rank == 1 ? 2 : 1, 0) != NULL) {
    snprintf(err, len, "a connection exists to a rank not listed as a peer");
    return 15;
  }
  return 0;
}

/* ---- tests ------------------------------------------------------------ */

Test(transports_ofi, sizes_order_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 2, 4, (1u << 20) + 3, body_sizes, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, three_ranks_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {3, 2, 4, (1u << 20) + 3, body_sizes, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, many_in_flight_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 2, 8, 16384, body_many, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, recv_reduce_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 2, 4, (1u << 20) + 4, body_reduce, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, default_provider) {
  unsetenv("BRAID_OFI_PROVIDER");
  job j = {2, 2, 4, (1u << 20) + 3, body_sizes, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, sizes_order_shm) {
  setenv("BRAID_OFI_PROVIDER", "shm", 1);
  job j = {2, 2, 4, (1u << 20) + 3, body_sizes, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, recv_reduce_shm) {
  setenv("BRAID_OFI_PROVIDER", "shm", 1);
  job j = {2, 2, 4, (1u << 20) + 4, body_reduce, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, killed_peer_is_remote_error) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 1, 4, 4096, body_killed, 0};
  int codes[MAXR];
  run_job(&j, codes, 30000);
  if (codes[0] == XCHG_SKIP)
    cr_skip_test("libfabric tcp provider not available");
  cr_expect_eq(codes[0], 0, "surviving rank exited with %d", codes[0]);
  cr_expect_eq(codes[1], -SIGKILL, "rank 1 should have died by SIGKILL");
}

Test(transports_ofi, longer_message_is_mismatch) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  g_want = 64;
  job j = {2, 1, 4, 4096, body_mismatch, 0};
  expect_ok(&j, 30000);
}

Test(transports_ofi, shorter_message_is_mismatch) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  g_want = 128;
  job j = {2, 1, 4, 4096, body_mismatch, 0};
  expect_ok(&j, 30000);
}

static int body_never(boot *b, void *st, int rank, int n, char *err,
                      size_t len) {
  (void)b, (void)st, (void)rank, (void)n;
  snprintf(err, len, "setup succeeded with an unknown provider");
  return 40;
}

Test(transports_ofi, unknown_provider_fails_cleanly) {
  setenv("BRAID_OFI_PROVIDER", "no-such-provider", 1);
  job j = {2, 1, 4, 4096, body_never, 0};
  int codes[MAXR];
  int64_t t0 = xchg_now_ms();
  run_job(&j, codes, 30000);
  cr_expect_eq(codes[0], XCHG_SKIP, "rank 0: %d, expected UNSUPPORTED",
               codes[0]);
  cr_expect_eq(codes[1], XCHG_SKIP, "rank 1: %d, expected UNSUPPORTED",
               codes[1]);
  cr_expect_lt(xchg_now_ms() - t0, 10000, "failing setup took too long");
}

Test(transports_ofi, bad_setup_arguments) {
  tp_setup ts;
  memset(&ts, 0, sizeof(ts));
  void *st = (void *)1;
  ts.nranks = 2;
  ts.rank = 5;
  ts.nchannels = 1;
  ts.nslots = 4;
  cfg_tp_settings(&ts.set);
  int r = tp_ofi.setup(&ts, NULL, &st);
  cr_expect(r == BRAID_ERR_INVALID_ARG || r == BRAID_ERR_UNSUPPORTED,
            "bad setup gave %d", r);
  cr_expect_null(st);
  cr_expect_neq(err_msg()[0], '\0', "no error text");
}

Test(transports_ofi, probe_names_the_default_provider) {
  unsetenv("BRAID_OFI_PROVIDER");
  char name[64] = "x";
  tp_settings set;
  cfg_tp_settings(&set);
  int fast = ofi_probe_fast(&set, name, sizeof(name));
  /* This machine has only socket providers: tcp is chosen, not "fast". */
  cr_expect_neq(name[0], '\0', "a provider should be found here");
  if (strncmp(name, "tcp", 3) == 0 || strncmp(name, "net", 3) == 0)
    cr_expect_eq(fast, 0, "%s is a socket provider", name);
  setenv("BRAID_OFI_PROVIDER", "shm", 1);
}

Test(transports_ofi, send_window_is_bounded_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 1, 4, 1 << 20, body_window, 0};
  expect_ok(&j, 60000);
}

Test(transports_ofi, star_partial_peers_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {3, 2, 4, 100000, body_star, 1};
  expect_ok(&j, 60000);
}

Test(transports_ofi, isend_copy_and_flush_tcp) {
  setenv("BRAID_OFI_PROVIDER", "tcp", 1);
  job j = {2, 1, 4, 1 << 20, body_copy, 0};
  expect_ok(&j, 60000);
}

/* libfabric is not loaded with braid (its PSM providers' constructors cost
 * every process 0.2 s at start), only once the ofi transport looks for a
 * provider; loading it then leaves no signal handler of libinfinipath's in
 * the process (it would write a backtrace file and exit() inside the
 * handler), and a handler of the program's own stays (transports/ofi/
 * ofi_lib.c). Each test runs in a process of its own. */
static void own_handler(int sig) { (void)sig; }

static int fabric_loaded(void) {
  void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h != NULL)
    dlclose(h);
  return h != NULL;
}

Test(transports_ofi, loaded_on_first_use_without_provider_signals) {
  cr_assert_not(fabric_loaded(), "libfabric was loaded before any ofi use");
  struct sigaction mine;
  memset(&mine, 0, sizeof mine);
  mine.sa_handler = own_handler;
  sigemptyset(&mine.sa_mask);
  cr_assert_eq(sigaction(SIGTERM, &mine, NULL), 0);
  tp_settings set;
  cfg_tp_settings(&set);
  char name[64];
  (void)ofi_probe_fast(&set, name, sizeof name);
  cr_assert(fabric_loaded(), "the ofi probe did not load libfabric");
  static const int sigs[] = {SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV, SIGTERM};
  int checked = 0;
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    struct sigaction sa;
    cr_assert_eq(sigaction(sigs[i], NULL, &sa), 0);
    void *fn = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction
                                          : (void *)sa.sa_handler;
    Dl_info di;
    if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
        dladdr(fn, &di) != 0 && di.dli_fname != NULL)
      cr_expect_null(strstr(di.dli_fname, "libinfinipath"),
                     "signal %d is handled by %s", sigs[i], di.dli_fname);
    checked++;
  }
  cr_expect_eq(checked, 6);
  struct sigaction term;
  cr_assert_eq(sigaction(SIGTERM, NULL, &term), 0);
  cr_expect(term.sa_handler == own_handler,
            "the program's own SIGTERM handler was replaced");
}
