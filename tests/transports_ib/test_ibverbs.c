/*
 * ibverbs transport between two forked ranks: the full exchange (sizes,
 * order, recv_reduce) when an RDMA device is present; otherwise setup must
 * fail on every rank with BRAID_ERR_UNSUPPORTED and a clear message, quickly,
 * and the exchange is skipped saying why.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_fork.h"
#include "src/bootstrap.h"
#include "src/config.h"
#include "src/log.h"
#include "transports/ibverbs/ibverbs.h"
#include "xchg.h"

typedef struct shared {
  int code[2];
  char msg[2][512];
} shared;

static xchg_idbox *g_box;

static int rank_main(shared *sh, int rank) {
  char *err = sh->msg[rank];
  boot *b = NULL;
  braid_unique_id id;
  if (xchg_get_id(g_box, rank, &id, 20000, err, 512) != 0)
    return 2;
  if (boot_init(&id, rank, 2, 20000, &b) != BRAID_SUCCESS) {
    snprintf(err, 512, "boot_init: %s", err_msg());
    return 2;
  }
  void *st = NULL;
  int r =
      xchg_setup(&tp_ibverbs, b, 2, 4, (1u << 20) + 4, 20000, &st, err, 512);
  if (r != BRAID_SUCCESS) {
    boot_close(b);
    return r == BRAID_ERR_UNSUPPORTED ? XCHG_SKIP : 3;
  }
  static const size_t sizes[] = {0, 4, 4096, (1u << 20) + 4};
  int rc = xchg_run(&tp_ibverbs, st, rank, 1 - rank, 2, sizes, 4, 20, 3, 0,
                    15000, err, 512);
  if (rc == 0)
    rc = xchg_run(&tp_ibverbs, st, rank, 1 - rank, 2, sizes, 4, 8, 2, 1, 15000,
                  err, 512);
  if (rc == 0 && boot_barrier(b) != BRAID_SUCCESS)
    rc = 4;
  tp_ibverbs.teardown(st);
  boot_close(b);
  return rc == 0 ? 0 : 5;
}

Test(transports_ib, exchange_or_unsupported) {
  g_box = xchg_idbox_new();
  cr_assert_not_null(g_box, "mmap failed");
  shared *sh = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  pid_t pid[2];
  fflush(NULL);
  for (int r = 0; r < 2; r++) {
    pid[r] = test_fork();
    if (pid[r] == 0)
      _exit(rank_main(sh, r));
  }
  int64_t deadline = xchg_now_ms() + 60000;
  for (int r = 0; r < 2; r++) {
    int st = 0;
    sh->code[r] = -1000;
    for (;;) {
      if (waitpid(pid[r], &st, WNOHANG) == pid[r]) {
        sh->code[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
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
  if (sh->code[0] == XCHG_SKIP || sh->code[1] == XCHG_SKIP) {
    cr_expect_eq(sh->code[0], sh->code[1],
                 "both ranks must agree that ibverbs is unavailable (%d/%d)",
                 sh->code[0], sh->code[1]);
    cr_expect_neq(strstr(sh->msg[0], "ibverbs"), NULL,
                  "message should name the transport: %s", sh->msg[0]);
    cr_expect_lt(xchg_now_ms() - (deadline - 60000), 15000,
                 "failing setup must not wait out the timeout");
    cr_skip_test("no RDMA device here: %s", sh->msg[0]);
  }
  for (int r = 0; r < 2; r++)
    cr_expect_eq(sh->code[r], 0, "rank %d exited %d: %s", r, sh->code[r],
                 sh->msg[r]);
}

/* A malformed BRAID_IB_HCA is a bad argument on every rank, named in the
 * message, whether or not a device exists. */
static int rank_bad_hca(shared *sh, int rank) {
  char *err = sh->msg[rank];
  boot *b = NULL;
  braid_unique_id id;
  if (xchg_get_id(g_box, rank, &id, 20000, err, 512) != 0)
    return 2;
  if (boot_init(&id, rank, 2, 20000, &b) != BRAID_SUCCESS) {
    snprintf(err, 512, "boot_init: %s", err_msg());
    return 2;
  }
  void *st = NULL;
  int r = xchg_setup(&tp_ibverbs, b, 1, 4, 4096, 20000, &st, err, 512);
  boot_close(b);
  if (r == BRAID_SUCCESS)
    return 3;
  return r == BRAID_ERR_INVALID_ARG && strstr(err, "BRAID_IB_HCA") ? 0 : 4;
}

Test(transports_ib, bad_hca_filter_is_invalid_arg) {
  setenv("BRAID_IB_HCA", "mlx5_0:x", 1); /* before the config is cached */
  g_box = xchg_idbox_new();
  cr_assert_not_null(g_box, "mmap failed");
  shared *sh = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  fflush(NULL);
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = test_fork();
    if (pid[r] == 0)
      _exit(rank_bad_hca(sh, r));
  }
  for (int r = 0; r < 2; r++) {
    int st = 0;
    int64_t deadline = xchg_now_ms() + 30000;
    while (waitpid(pid[r], &st, WNOHANG) != pid[r]) {
      if (xchg_now_ms() > deadline) {
        kill(pid[r], SIGKILL);
        waitpid(pid[r], &st, 0);
        break;
      }
      usleep(2000);
    }
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status 0x%x: %s",
              r, st, sh->msg[r]);
  }
}

Test(transports_ib, probe_agrees_with_setup) {
  char name[64] = "x";
  tp_settings set;
  cfg_tp_settings(&set);
  int have = ib_probe_device(&set, name, sizeof(name));
  if (!have) {
    cr_expect_str_eq(name, "", "no device: empty name");
    fprintf(stderr, "transports_ib: probe found no RDMA device\n");
  } else {
    cr_expect_neq(strchr(name, ':'), NULL, "name is device:port: %s", name);
  }
}
