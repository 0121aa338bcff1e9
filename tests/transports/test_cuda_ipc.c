/*
 * tp_cuda and comm_dev between forked rank processes on one GPU. Without a
 * GPU (or in a build without CUDA) the exchanges skip saying so, and
 * comm_dev_setup must refuse with BRAID_ERR_UNSUPPORTED naming why.
 *
 * CUDA must not be initialised in a process that forks ranks: the parent
 * asks a probe child how many GPUs there are.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_fork.h"
#include "device/cuda_dev.h"
#include "ranks.h"
#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/comm_dev.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"
#include "transports/transport.h"

#define FAIL(...)                                                              \
  do {                                                                         \
    snprintf(msg, msglen, __VA_ARGS__);                                        \
    return 1;                                                                  \
  } while (0)

#define MIB (1u << 20)

/* GPUs visible, asked in a child so that this process never starts CUDA. */
static int gpu_count(void) {
  fflush(NULL);
  pid_t pid = test_fork();
  if (pid == 0)
    _exit(cudev_count() > 0 ? (cudev_count() > 100 ? 100 : cudev_count()) : 0);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return 0;
  return WEXITSTATUS(st);
}

static void need_gpu(void) {
  if (!cudev_built())
    cr_skip_test("libbraid was built without CUDA (BRAID_CUDA=OFF or "
                 "no nvcc): tp_cuda cannot run");
  if (gpu_count() == 0)
    cr_skip_test("no CUDA device on this machine: tp_cuda exchanges "
                 "need a GPU (perf/cuda/device_kit.sh runs them on one)");
}

/* Runs send/recv on both connections of a rank until both are done. */
static int exchange(const tp_ops *ops, tp_conn *c, const void *src, void *dst,
                    size_t len, const tp_reducer *red, const void *mine,
                    char *msg, size_t msglen, void *state) {
  (void)state;
  uint64_t t = 0;
  int sent = 0, sdone = 0, rdone = 0;
  for (long i = 0; i < 20000000 && !(sdone && rdone); i++) {
    int rc;
    if (!sent) {
      rc = ops->isend(c, src, len, &t);
      if (rc == BRAID_SUCCESS)
        sent = 1;
      else if (rc != TP_AGAIN)
        FAIL("isend: %d %s", rc, err_msg());
    }
    if (sent && !sdone) {
      rc = ops->send_done(c, t);
      if (rc == BRAID_SUCCESS)
        sdone = 1;
      else if (rc != TP_AGAIN)
        FAIL("send_done: %d %s", rc, err_msg());
    }
    if (!rdone) {
      rc = red ? ops->recv_reduce(c, mine, dst, len, red)
               : ops->recv(c, dst, len);
      if (rc == BRAID_SUCCESS)
        rdone = 1;
      else if (rc != TP_AGAIN)
        FAIL("recv: %d %s", rc, err_msg());
    }
  }
  if (!(sdone && rdone))
    FAIL("exchange did not finish (sent %d, done %d, received %d)", sent, sdone,
         rdone);
  return 0;
}

typedef struct xargs {
  int die; /* rank 1 exits right after setup */
} xargs;

/* Two ranks on GPU 0: 1 MiB each way over tp_cuda (4 fragments of 256 KiB
 * through 2 slots), then a float sum with recv_reduce. */
static int rank_ipc(int rank, int nranks, const braid_unique_id *id, void *arg,
                    char *msg, size_t msglen) {
  xargs *xa = arg;
  boot *b = NULL;
  if (boot_init(id, rank, nranks, 30000, &b))
    FAIL("boot_init: %s", err_msg());
  if (cudev_set_device(0))
    FAIL("set_device: %s", cudev_error());
  tp_setup su;
  memset(&su, 0, sizeof(su));
  su.boot = b;
  su.rank = rank;
  su.nranks = nranks;
  su.nchannels = 2;
  su.nslots = 2;
  su.slot_bytes = 256 * 1024;
  su.timeout_ms = 30000;
  uint8_t peers[2] = {rank != 0, rank != 1};
  void *state = NULL;
  if (tp_cuda.setup(&su, peers, &state))
    FAIL("setup: %s", err_msg());
  if (xa && xa->die && rank == 1)
    _exit(0);
  tp_conn *c = tp_cuda.conn(state, 1 - rank, 1);
  if (!c || tp_cuda.conn(state, rank, 0))
    FAIL("conn: peer %p, self %p", (void *)c,
         (void *)tp_cuda.conn(state, rank, 0));
  if (xa && xa->die) {
    for (int i = 0; i < 5000; i++) {
      int dead = -1;
      int rc = tp_cuda.check_peers(state, &dead);
      if (rc == BRAID_ERR_REMOTE) {
        if (dead != 1 || !strstr(err_msg(), "rank 1"))
          FAIL("dead rank %d: %s", dead, err_msg());
        tp_cuda.teardown(state);
        boot_close(b);
        return 0;
      }
      usleep(1000);
    }
    FAIL("rank 1's exit was never noticed");
  }
  size_t n = MIB / sizeof(float);
  static float h[MIB / sizeof(float)], hin[MIB / sizeof(float)];
  void *src = NULL, *dst = NULL;
  if (cudev_malloc(&src, MIB) || cudev_malloc(&dst, MIB))
    FAIL("memory: %s", cudev_error());
  for (size_t i = 0; i < n; i++)
    h[i] = (float)((i * 7 + (size_t)rank * 1000) % 4096);
  void *s = NULL;
  if (cudev_stream_create(&s) || cudev_memcpy(src, h, MIB, s) ||
      cudev_stream_sync(s))
    FAIL("upload: %s", cudev_error());
  if (exchange(&tp_cuda, c, src, dst, MIB, NULL, NULL, msg, msglen, state))
    return 1;
  if (cudev_memcpy(hin, dst, MIB, s) || cudev_stream_sync(s))
    FAIL("download: %s", cudev_error());
  for (size_t i = 0; i < n; i++) {
    float want = (float)((i * 7 + (size_t)(1 - rank) * 1000) % 4096);
    if (hin[i] != want)
      FAIL("rank %d element %zu: %g, want %g", rank, i, (double)hin[i],
           (double)want);
  }
  /* dst = src + peer's src */
  tp_dev_reducer r = {.base = {NULL, sizeof(float)},
                      .dt = BRAID_FLOAT32,
                      .op = BRAID_SUM,
                      .dev_stream = s};
  if (exchange(&tp_cuda, c, src, dst, MIB, &r.base, src, msg, msglen, state))
    return 1;
  if (cudev_memcpy(hin, dst, MIB, s) || cudev_stream_sync(s))
    FAIL("download: %s", cudev_error());
  for (size_t i = 0; i < n; i++) {
    float want = (float)((i * 7) % 4096) + (float)((i * 7 + 1000) % 4096);
    if (hin[i] != want)
      FAIL("sum, rank %d element %zu: %g, want %g", rank, i, (double)hin[i],
           (double)want);
  }
  /* a length mismatch is caught and names the peer: rank 1 expects 8192
   * bytes where rank 0 sends 4096 */
  if (rank == 0) {
    if (exchange(&tp_cuda, c, src, dst, 4096, NULL, NULL, msg, msglen, state))
      return 1;
  } else {
    uint64_t t;
    int rc = TP_AGAIN;
    while (tp_cuda.isend(c, src, 4096, &t) == TP_AGAIN)
      ;
    for (long i = 0; i < 20000000 && rc == TP_AGAIN; i++)
      rc = tp_cuda.recv(c, dst, 8192);
    if (rc != BRAID_ERR_MISMATCH || !strstr(err_msg(), "rank 0"))
      FAIL("mismatch: %d %s", rc, err_msg());
    while (tp_cuda.send_done(c, t) == TP_AGAIN)
      ;
  }
  cudev_free(src);
  cudev_free(dst);
  cudev_stream_destroy(s);
  boot_barrier(b);
  tp_cuda.teardown(state);
  boot_close(b);
  return 0;
}

Test(cuda_ipc, two_ranks_one_gpu_exchange_1mib) {
  need_gpu();
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  xargs xa = {0};
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_ipc, &xa, 60000, p), 0, "%s | %s",
               p[0].msg, p[1].msg);
}

Test(cuda_ipc, dead_peer_on_one_gpu_is_named) {
  need_gpu();
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  xargs xa = {.die = 1};
  rank_proc p[2];
  run_ranks(2, &id, rank_ipc, &xa, 60000, p);
  cr_assert_eq(p[0].status, 0, "rank 0: %s", p[0].msg);
}

/* comm_dev_setup on a real communicator: without CUDA or a GPU every rank
 * refuses with a reason; with one, same-host peers get tp_cuda. */
static int rank_setup(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  int gpus = *(int *)arg;
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, nranks, id, rank, NULL);
  if (r)
    FAIL("init: %s", braid_result_string(r));
  r = comm_dev_setup(c, 0);
  if (gpus == 0) {
    const char *e = braid_comm_last_error(c);
    if (r != BRAID_ERR_UNSUPPORTED || c->dev != NULL ||
        !(strstr(e, "without CUDA") || strstr(e, "no CUDA device")))
      FAIL("no GPU: setup gave %s, dev %p, error '%s'", braid_result_string(r),
           (void *)c->dev, e);
  } else {
    if (r != BRAID_SUCCESS)
      FAIL("setup: %s", braid_comm_last_error(c));
    const int any = SCHED_ROUTE_ANY, host = SCHED_ROUTE_HOST;
    if (comm_dev_ops(c, 1 - rank, any) != &tp_cuda ||
        comm_dev_ops(c, rank, any) ||
        !comm_dev_conn(c, 1 - rank, c->nchannels, any) ||
        comm_dev_conn(c, 1 - rank, c->nchannels + 1, any))
      FAIL("peer ops %p conn %p", (const void *)comm_dev_ops(c, 1 - rank, any),
           (void *)comm_dev_conn(c, 1 - rank, 0, any));
    /* host-routed channels: pinned staging over the host transport */
    if (comm_dev_ops(c, 1 - rank, host) != &tp_staged ||
        comm_dev_host_routed(c, 1 - rank) ||
        !comm_dev_conn(c, 1 - rank, 0, host) ||
        !comm_dev_host_routed(c, 1 - rank))
      FAIL("host route: ops %p, used %d",
           (const void *)comm_dev_ops(c, 1 - rank, host),
           comm_dev_host_routed(c, 1 - rank));
    void *a = NULL, *b = NULL;
    if (comm_dev_scratch(c, 4096, &a) || comm_dev_scratch(c, 1024, &b) ||
        a != b || comm_dev_stage(c, 4096, &a) || !a)
      FAIL("scratch/stage: %s", braid_comm_last_error(c));
    comm_dev_teardown(c);
    if (c->dev)
      FAIL("teardown left c->dev");
  }
  braid_comm_destroy(c);
  return 0;
}

Test(cuda_ipc, comm_dev_setup_agrees_or_refuses) {
  int gpus = cudev_built() ? gpu_count() : 0;
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_setup, &gpus, 60000, p), 0, "%s | %s",
               p[0].msg, p[1].msg);
  if (gpus == 0)
    cr_log_info("comm_dev_setup checked only for its refusal: no GPU here");
}
