/*
 * Failures on device buffers (emulated GPU): a rank killed in the middle of
 * device collectives makes every survivor's call return BRAID_ERR_REMOTE
 * naming it (not BRAID_ERR_TIMEOUT: the death is noticed, not waited out),
 * for blocking calls and for calls on
 * a CUDA stream; a stream call's error comes back from
 * braid_stream_synchronize and the user's CUDA stream is let go (never left
 * held at braid's gate), also when the victim dies before the first call,
 * which sets the device side up. Over cuda IPC and staged over tcp.
 * BRAID_CHECK=1 names mismatched device calls by rank; a CUDA stream that never
 * reaches a call's gate within BRAID_TIMEOUT gives BRAID_ERR_TIMEOUT saying so.
 * Small calls through pinned host memory on a CUDA stream
 * (BRAID_CUDA_HOST_MAX): a killed rank is named as well, and a call that
 * fails leaves its recvbuf as it was. Allreduce kernels
 * (BRAID_CUDA_KERNEL_MAX): a killed rank is named, a peer that skips a call
 * is named after BRAID_TIMEOUT, calls of different counts fail with
 * MISMATCH on both ranks, and a stream that never reaches the kernel times
 * out; the user's stream is let go.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/exec_int.h"
#include "src/stream.h"
#include "test_gpu_ranks.h"

#define VICTIM 1
#define COUNT ((size_t)1 << 18)

static void *killer(void *arg) {
  usleep((useconds_t)(intptr_t)arg * 1000);
  kill(getpid(), SIGKILL);
  return NULL;
}

/* Checks the first failure: REMOTE, naming the victim. */
static int judge(braid_comm *c, int rank, braid_result r, double t0) {
  char want[32];
  snprintf(want, sizeof want, "rank %d", VICTIM);
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d after %.2f s: %s: %s\n", rank, gpu_now_s() - t0,
          braid_result_string(r), msg);
  if (r != BRAID_ERR_REMOTE)
    return 10;
  if (strstr(msg, want) == NULL)
    return 11;
  return 0;
}

/* The victim dies kill_ms into the loop of calls; kill_ms < 0: in the
 * middle of the first call's device setup, so that the others' setup
 * fails after it allocated device memory. warm: a blocking call sets the
 * device side up first, so that the victim dies among the loop's calls
 * however long the setup takes. */
static int dead_peer(braid_comm *c, int rank, int n, int on_stream, int kill_ms,
                     int warm) {
  (void)n;
  float *d = NULL;
  if (cudaMalloc((void **)&d, COUNT * sizeof(float)) != cudaSuccess ||
      cudaMemset(d, 0, COUNT * sizeof(float)) != cudaSuccess)
    return 50;
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  if (on_stream &&
      (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
       braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS))
    return 51;
  /* the victim's next cudaMalloc is the one of its first call's setup
   * (tp_cuda's slots): it dies after the capability exchange, when the
   * others have allocated theirs */
  if (warm && braid_allreduce(d, d, COUNT, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
                  BRAID_SUCCESS)
    return 52;
  if (rank == VICTIM && kill_ms < 0) {
    setenv("CUDA_EMU_DIE_AT_MALLOC", "2", 1);
  } else if (rank == VICTIM) {
    pthread_t t;
    pthread_create(&t, NULL, killer, (void *)(intptr_t)kill_ms);
  }
  double t0 = gpu_now_s();
  int rc = 13;    /* never noticed */
  int issued = 0; /* calls issued (on a stream: enqueued) */
  for (int it = 0; it < 100000; it++) {
    braid_result r =
        braid_allreduce(d, d, COUNT, BRAID_FLOAT32, BRAID_SUM, c, bs);
    issued += r == BRAID_SUCCESS;
    if (r == BRAID_SUCCESS && on_stream && it % 4 == 3)
      r = braid_stream_synchronize(bs);
    if (r != BRAID_SUCCESS) {
      rc = judge(c, rank, r, t0);
      break;
    }
  }
  if (on_stream) {
    /* the held stream must be released: this returns */
    if (cudaStreamSynchronize(s) != cudaSuccess && rc == 0)
      rc = 14;
    /* with BRAID_CUDA_HOST_MAX the calls went through the stream's copies
     * (on a loaded machine the victim may die in the first call's setup,
     * before any call is issued) */
    if (rc == 0 && rank != VICTIM &&
        (env_on("BRAID_CUDA_HOST_MAX") && issued > 0) !=
            (enq_stream_host_calls(bs) > 0))
      rc = 15;
    if (rc == 0 && rank != VICTIM &&
        (env_on("BRAID_CUDA_KERNEL_MAX") && issued > 0) !=
            (enq_stream_kernel_calls(bs) > 0))
      rc = 16;
    braid_stream_destroy(bs);
    cudaStreamDestroy(s);
  }
  cudaFree(d);
  return rc; /* the harness destroys the broken communicator */
}

/* Both set the device side up before the victim's timer starts: on a
 * loaded machine (the ASan run) a first call's setup can outlast the timer,
 * and a death in the setup is killed_rank_in_setup_of_first_stream_call's
 * case, not these. */
static int dead_blocking(braid_comm *c, int rank, int n) {
  return dead_peer(c, rank, n, 0, 300, 1);
}

static int dead_stream(braid_comm *c, int rank, int n) {
  return dead_peer(c, rank, n, 1, 300, 1);
}

static int dead_stream_at_setup(braid_comm *c, int rank, int n) {
  return dead_peer(c, rank, n, 1, -1, 0);
}

/* Rank 1 broadcasts while the others allreduce, on device buffers. */
static int mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL;
  if (cudaMalloc((void **)&d, 64 * sizeof(float)) != cudaSuccess ||
      cudaMemset(d, 0, 64 * sizeof(float)) != cudaSuccess)
    return 50;
  braid_result r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS)
    return 20;
  if (rank == 1)
    r = braid_broadcast(d, d, 64, BRAID_FLOAT32, 0, c, NULL);
  else
    r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
  int rc = r != BRAID_ERR_MISMATCH ? 21
           : strstr(msg, "rank 1") == NULL || strstr(msg, "broadcast") == NULL
               ? 22
               : 0;
  cudaFree(d);
  return rc;
}

/* BRAID_CHECK=1, BRAID_CUDA_HOST_MAX set: a small allreduce on a CUDA
 * stream runs through the stream's pinned area (its result, 3, stays
 * there); then rank 1 broadcasts while the others allreduce, out of place,
 * on the stream: the call fails, and recvbuf (7) must come back unchanged,
 * not with the pinned area's stale 3. */
static int small_mismatch(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  float h[K], *din = NULL, *dout = NULL, *dtmp = NULL;
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  for (int i = 0; i < K; i++)
    h[i] = 1.0f;
  if (cudaMalloc((void **)&din, sizeof h) != cudaSuccess ||
      cudaMalloc((void **)&dout, sizeof h) != cudaSuccess ||
      cudaMalloc((void **)&dtmp, sizeof h) != cudaSuccess ||
      cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS)
    return 50;
  for (int i = 0; i < K; i++)
    h[i] = 7.0f;
  if (cudaMemcpy(dout, h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess)
    return 50;
  braid_result r =
      braid_allreduce(din, dtmp, K, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: first call: %s\n", rank, braid_result_string(r));
    return 30;
  }
  if (rank == 1)
    r = braid_broadcast(din, dout, K, BRAID_FLOAT32, 0, c, bs);
  else
    r = braid_allreduce(din, dout, K, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
  int rc = r != BRAID_ERR_MISMATCH ? 31 : 0;
  if (cudaStreamSynchronize(s) != cudaSuccess)
    rc = 14; /* the stream must be let go */
  if (rc == 0 && enq_stream_host_calls(bs) != 2)
    rc = 32; /* both calls went through the stream's pinned area */
  if (rc == 0 &&
      cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess)
    rc = 50;
  for (int i = 0; rc == 0 && i < K; i++)
    if (h[i] != 7.0f) {
      fprintf(stderr,
              "rank %d: recvbuf[%d] = %g after the failed call, "
              "was 7 (%d ranks)\n",
              rank, i, (double)h[i], n);
      rc = 33;
    }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(din);
  cudaFree(dout);
  cudaFree(dtmp);
  return rc;
}

/* Set by the rank once braid_stream_destroy has returned: ends the hold.
 * Set by a hold never released (HOLD_MAX_S): braid_stream_destroy waited
 * for the held stream instead of returning at once. */
#define HOLD_MAX_S 30
/* A call run as a kernel is waited for until the stream reaches it, after
 * its own limit (twice BRAID_TIMEOUT and 1 s: 7 s) has ended it: its hold
 * ends by itself after HOLD_KERNEL_S, 5 s past that limit. */
#define HOLD_KERNEL_S 12
static atomic_int hold_released, hold_gave_up;

/* arg: the seconds after which the hold gives up. */
static void CUDART_CB hold_until_released(void *arg) {
  int max_ms = (int)(intptr_t)arg * 1000;
  for (int ms = 0; !atomic_load(&hold_released); ms++) {
    if (ms == max_ms) {
      atomic_store(&hold_gave_up, 1);
      return;
    }
    usleep(1000);
  }
}

/* Every rank's stream is held by a host function before the call until
 * the rank has destroyed its braid stream; BRAID_TIMEOUT is 3 s (the call
 * gives up after twice that and 1 s). A blocking call first sets the
 * device side up, so that the time a loaded machine takes for that setup
 * (in the issuing thread, before the gate) is not spent with the stream
 * held. */
static int stream_never_arrives(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL;
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  if (cudaMalloc((void **)&d, 64 * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS ||
      cudaMemset(d, 0, 64 * sizeof(float)) != cudaSuccess)
    return 50;
  braid_result w = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (w != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: the first call: %s: %s\n", rank,
            braid_result_string(w), braid_comm_last_error(c));
    return 52;
  }
  int kernel = env_on("BRAID_CUDA_KERNEL_MAX");
  intptr_t hold_s = kernel ? HOLD_KERNEL_S : HOLD_MAX_S;
  if (cudaLaunchHostFunc(s, hold_until_released, (void *)hold_s) != cudaSuccess)
    return 51;
  braid_result r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
  int rc = r != BRAID_ERR_TIMEOUT                          ? 40
           : strstr(msg, "did not reach the call") == NULL ? 41
                                                           : 0;
  if (rc == 0 && kernel && enq_stream_kernel_calls(bs) != 1)
    rc = 42;
  /* destroyed while the stream is still held: returns without waiting for
   * it (the gate's words stay until the stream has passed them). A call
   * run as a kernel was launched on the user's stream, behind the hold:
   * destroy waits for the stream to reach it (it then stops at once), so
   * there the hold is let go first and destroy must return. */
  if (kernel)
    atomic_store(&hold_released, 1);
  braid_stream_destroy(bs);
  atomic_store(&hold_released, 1);
  if (!kernel && atomic_load(&hold_gave_up) && rc == 0) {
    fprintf(stderr,
            "rank %d: braid_stream_destroy returned only once the hold on "
            "the stream gave up (%d s): it waited for the held stream\n",
            rank, HOLD_MAX_S);
    rc = 43;
  }
  if (cudaStreamSynchronize(s) != cudaSuccess && rc == 0)
    rc = 14; /* the stream must be let go */
  /* a later destroy frees the words the first one left */
  braid_stream *other = NULL;
  if (braid_stream_from_cuda((void *)s, &other) != BRAID_SUCCESS ||
      braid_stream_destroy(other) != BRAID_SUCCESS)
    rc = rc ? rc : 44;
  cudaFree(d);
  return rc;
}

/* 64 zeroed floats on the device and a wrapped CUDA stream; 0 or -1. */
static int zeros_on_a_stream(float **d, cudaStream_t *s, braid_stream **bs) {
  return cudaMalloc((void **)d, 64 * sizeof(float)) == cudaSuccess &&
                 cudaMemset(*d, 0, 64 * sizeof(float)) == cudaSuccess &&
                 cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) ==
                     cudaSuccess &&
                 braid_stream_from_cuda((void *)*s, bs) == BRAID_SUCCESS
             ? 0
             : -1;
}

/* A failed call that ran as a kernel on the CUDA stream s: 0 when it
 * failed with want saying text and the stream is let go; 40: another
 * result, 41: not said, 42: not run as a kernel, 14: the stream held. */
static int judge_kernel_call(braid_comm *c, int rank, braid_result r,
                             braid_result want, const char *text,
                             braid_stream *bs, cudaStream_t s) {
  const char *msg = braid_comm_last_error(c);
  fprintf(stderr, "rank %d: %s: %s\n", rank, braid_result_string(r), msg);
  int rc = r != want                          ? 40
           : strstr(msg, text) == NULL        ? 41
           : enq_stream_kernel_calls(bs) != 1 ? 42
                                              : 0;
  if (cudaStreamSynchronize(s) != cudaSuccess && rc == 0)
    rc = 14;
  return rc;
}

/* Rank 1 skips an allreduce that runs as a kernel (BRAID_TIMEOUT 3 s):
 * rank 0's kernel waits for it BRAID_TIMEOUT, then ends the call, which
 * fails saying whom it waited for; the stream is let go. */
static int peer_skips(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL;
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  if (zeros_on_a_stream(&d, &s, &bs) != 0)
    return 50;
  int rc = 0;
  if (braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
      BRAID_SUCCESS)
    rc = 52;
  if (rc == 0 && rank == 1) {
    sleep(6);
  } else if (rc == 0) {
    braid_result r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, bs);
    if (r == BRAID_SUCCESS)
      r = braid_stream_synchronize(bs);
    rc = judge_kernel_call(c, rank, r, BRAID_ERR_TIMEOUT,
                           "rank 1 did not reach kernel chunk", bs, s);
  }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  return rc;
}

static void run(gpu_rank_fn fn, const char *transport, const char *what) {
  GPU_REQUIRE();
  if (transport)
    setenv("BRAID_TRANSPORT", transport, 1);
  else
    unsetenv("BRAID_TRANSPORT");
  setenv("BRAID_TIMEOUT", "30", 1);
  int st[3];
  gpu_run_ranks(3, fn, 60, st);
  for (int r = 0; r < 3; r++) {
    if (r == VICTIM)
      cr_expect_eq(st[r], 128 + SIGKILL, "%s: the victim exited %d", what,
                   st[r]);
    else
      cr_expect_eq(
          st[r], 0,
          "%s: rank %d exit %d (10: not REMOTE, 11: the victim "
          "not named, 13: never noticed, 14: stream held, -1: "
          "hung, 15: small calls not (or wrongly) staged on the stream, 16: "
          "not (or wrongly) run as kernels, 52: the warm-up call failed)",
          what, r, st[r]);
  }
}

Test(emu_faults, killed_rank_blocking_cuda_ipc, .timeout = 120) {
  run(dead_blocking, NULL, "blocking, cuda IPC");
}

Test(emu_faults, killed_rank_stream_cuda_ipc, .timeout = 120) {
  run(dead_stream, NULL, "CUDA stream, cuda IPC");
}

/* The first device call on a CUDA stream sets the device side up; a setup
 * that fails frees what it made (cudaFree waits for every stream), so it
 * must not run while the call's gate holds the user's stream. */
Test(emu_faults, killed_rank_in_setup_of_first_stream_call, .timeout = 120) {
  run(dead_stream_at_setup, NULL, "CUDA stream, first call, cuda IPC");
}

/* The calls (1 MiB) small enough to go through pinned host memory, on the
 * CUDA stream's own copies: the survivors learn it from the host transport
 * (shm) and the stream is let go. */
Test(emu_faults, killed_rank_stream_small_calls, .timeout = 120) {
  setenv("BRAID_CUDA_HOST_MAX", "4M", 1);
  run(dead_stream, NULL, "CUDA stream, small calls through host memory");
  setenv("BRAID_CUDA_HOST_MAX", "0", 1);
}

/* The calls (1 MiB) run as allreduce kernels: the survivors' kernels wait
 * for the victim until the progress thread sees it gone and stops them. */
Test(emu_faults, killed_rank_stream_kernel_calls, .timeout = 120) {
  setenv("BRAID_CUDA_KERNEL_MAX", "1M", 1);
  run(dead_stream, NULL, "CUDA stream, allreduce kernels");
  run(dead_blocking, NULL, "blocking, allreduce kernels");
  setenv("BRAID_CUDA_KERNEL_MAX", "0", 1);
}

Test(emu_faults, killed_rank_blocking_staged_tcp, .timeout = 120) {
  run(dead_blocking, "tcp", "blocking, staged over tcp");
}

Test(emu_faults, check_names_mismatched_device_calls, .timeout = 120) {
  GPU_REQUIRE();
  unsetenv("BRAID_TRANSPORT");
  setenv("BRAID_CHECK", "1", 1);
  int st[3];
  gpu_run_ranks(3, mismatch, 60, st);
  unsetenv("BRAID_CHECK");
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0,
                 "rank %d exit %d (21: not MISMATCH, 22: rank 1 or its "
                 "broadcast not named)",
                 r, st[r]);
}

Test(emu_faults, failed_small_stream_call_keeps_recvbuf, .timeout = 120) {
  GPU_REQUIRE();
  unsetenv("BRAID_TRANSPORT");
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_CUDA_HOST_MAX", "64K", 1);
  int st[3];
  gpu_run_ranks(3, small_mismatch, 60, st);
  unsetenv("BRAID_CHECK");
  setenv("BRAID_CUDA_HOST_MAX", "0", 1);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0,
                 "rank %d exit %d (30: the first call failed, 31: not "
                 "MISMATCH, 14: stream held, 32: not staged on the stream, "
                 "33: recvbuf changed)",
                 r, st[r]);
}

/* Calls that differ between the two ranks, as kernels (BRAID_CHECK off):
 * rank 1 allreduces 64 elements where rank 0 allreduces 32, or (by_coll)
 * rank 0 broadcasts the 32 that rank 1 allreduces. Both calls fail with
 * MISMATCH naming the other rank (the flags' fingerprint holds the count
 * and the collective), instead of using data of another call; the stream
 * is let go. */
static int kernel_calls_differ(braid_comm *c, int rank, int by_coll) {
  float *d = NULL;
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  if (zeros_on_a_stream(&d, &s, &bs) != 0)
    return 50;
  size_t count = rank == 1 && !by_coll ? 64 : 32;
  braid_result r =
      rank == 0 && by_coll
          ? braid_broadcast(d, d, count, BRAID_FLOAT32, 0, c, bs)
          : braid_allreduce(d, d, count, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  char want[32];
  snprintf(want, sizeof want, "rank %d ran", 1 - rank);
  int rc = judge_kernel_call(c, rank, r, BRAID_ERR_MISMATCH, want, bs, s);
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  return rc;
}

static int kernel_mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  return kernel_calls_differ(c, rank, 0);
}

static int kernel_coll_mismatch(braid_comm *c, int rank, int n) {
  (void)n;
  return kernel_calls_differ(c, rank, 1);
}

/* Two ranks run fn with BRAID_TIMEOUT=3 (and BRAID_CUDA_KERNEL_MAX=kmax
 * unless NULL); legend: what fn's exit codes mean. */
static void run_two(gpu_rank_fn fn, const char *kmax, const char *legend) {
  GPU_REQUIRE();
  unsetenv("BRAID_TRANSPORT");
  setenv("BRAID_TIMEOUT", "3", 1);
  if (kmax != NULL)
    setenv("BRAID_CUDA_KERNEL_MAX", kmax, 1);
  int st[2];
  gpu_run_ranks(2, fn, 60, st);
  setenv("BRAID_CUDA_KERNEL_MAX", "0", 1);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d (%s)", r, st[r], legend);
}

Test(emu_faults, stream_that_never_arrives_times_out, .timeout = 120) {
  run_two(stream_never_arrives, NULL,
          "40: not TIMEOUT, 41: not said why, 14: stream held, 43: "
          "braid_stream_destroy waited for the held stream, 44: a later "
          "stream failed");
}

/* The same for a call that runs as an allreduce kernel: no gate, the
 * progress thread's own limit (twice BRAID_TIMEOUT) ends it, and the
 * kernel, once the stream reaches it (the hold gives up after
 * HOLD_KERNEL_S), stops at once. */
Test(emu_faults, stream_that_never_reaches_a_kernel_times_out, .timeout = 120) {
  run_two(stream_never_arrives, "4K",
          "40: not TIMEOUT, 41: not said why, 42: not run as a kernel, 14: "
          "stream held");
}

Test(emu_faults, kernel_waits_for_a_skipping_peer_until_the_timeout,
     .timeout = 120) {
  run_two(peer_skips, "4K",
          "40: not TIMEOUT, 41: the peer not named, 42: not run as a kernel, "
          "14: stream held, 52: the warm-up call failed");
}

Test(emu_faults, kernel_calls_that_differ_between_ranks_fail, .timeout = 120) {
  run_two(kernel_mismatch, "4K",
          "40: not MISMATCH, 41: the other rank not named, 42: not run as a "
          "kernel, 14: stream held");
}

Test(emu_faults, kernel_calls_of_different_collectives_fail, .timeout = 120) {
  run_two(kernel_coll_mismatch, "4K",
          "40: not MISMATCH, 41: the other rank not named, 42: not run as a "
          "kernel, 14: stream held");
}
