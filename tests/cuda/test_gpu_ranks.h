/*
 * Ranks for the GPU tests: forked processes on one GPU, each with its own
 * communicator. CUDA must not be initialised in a process that forks ranks
 * that use it, so whether a device is visible is asked in a child too.
 */
#ifndef BRAID_TEST_GPU_RANKS_H
#define BRAID_TEST_GPU_RANKS_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "braid.h"
#include "device/cuda_dev.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/stream.h"

typedef int (*gpu_rank_fn)(braid_comm *c, int rank, int n);

/* Visible CUDA devices, asked in a child; *why says why there are none.
 * -1 when the child itself failed (crashed, said nothing): a failure of
 * the test, not a machine without a GPU. */
static int gpu_probe(char *why, size_t len) {
  int p[2];
  cr_assert(pipe(p) == 0);
  pid_t pid = test_fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    char msg[256];
    int n = cudev_count(), rn = 0;
    cudaError_t e = cudaGetDeviceCount(&rn);
    snprintf(msg, sizeof msg, "%d %s", n,
             !cudev_built()     ? "this braid was built without CUDA"
             : e != cudaSuccess ? cudaGetErrorString(e)
                                : "cudaGetDeviceCount found none");
    ssize_t w = write(p[1], msg, strlen(msg) + 1);
    _exit(w > 0 ? 0 : 1);
  }
  close(p[1]);
  char buf[256] = "";
  ssize_t got = read(p[0], buf, sizeof buf - 1);
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  int n = 0, off = 0;
  if (got <= 0 || sscanf(buf, "%d %n", &n, &off) < 1 || !WIFEXITED(st) ||
      WEXITSTATUS(st) != 0) {
    if (WIFSIGNALED(st))
      snprintf(why, len, "the probe process died of signal %d", WTERMSIG(st));
    else
      snprintf(why, len, "the probe process exited %d having said '%.160s'",
               WIFEXITED(st) ? WEXITSTATUS(st) : -1, buf);
    return -1;
  }
  snprintf(why, len, "%s", buf + off);
  return n;
}

#define GPU_REQUIRE()                                                          \
  do {                                                                         \
    char why_[256];                                                            \
    int gpus_ = gpu_probe(why_, sizeof why_);                                  \
    cr_assert(gpus_ >= 0, "asking for CUDA devices failed: %s", why_);         \
    if (gpus_ == 0)                                                            \
      cr_skip_test("no CUDA device: %s", why_);                                \
  } while (0)

static double gpu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* An event one rank sets for another (gpu_while_held), in memory the ranks
 * share; cleared before each run. */
static atomic_int *gpu_held_done;

/* The settings of the ranks' communicators (NULL: the environment's). */
static const braid_config *gpu_rank_cfg;

/* Forks n ranks running fn; status[r]: exit code, 128+signal, -1 killed
 * after timeout_s. */
static void gpu_run_ranks(int n, gpu_rank_fn fn, double timeout_s,
                          int *status) {
  int pipes[8][2];
  pid_t pids[8];
  cr_assert(n <= 8);
  if (gpu_held_done == NULL) {
    void *m = mmap(NULL, sizeof *gpu_held_done, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(m != MAP_FAILED);
    gpu_held_done = m;
  }
  atomic_store(gpu_held_done, 0);
  for (int r = 1; r < n; r++)
    cr_assert(pipe(pipes[r]) == 0);
  for (int r = 0; r < n; r++) {
    pid_t p = test_fork();
    cr_assert(p >= 0);
    if (p == 0) {
      braid_unique_id id;
      if (r == 0) {
        if (braid_get_unique_id(&id) != BRAID_SUCCESS)
          _exit(101);
        for (int q = 1; q < n; q++)
          if (write(pipes[q][1], &id, sizeof id) != (ssize_t)sizeof id)
            _exit(102);
      } else if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
        _exit(103);
      }
      braid_comm *c = NULL;
      braid_result res = braid_comm_init(&c, n, &id, r, gpu_rank_cfg);
      if (res != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: init: %s\n", r, braid_result_string(res));
        _exit(100);
      }
      int rc = fn(c, r, n);
      braid_comm_destroy(c);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = p;
  }
  for (int r = 1; r < n; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  double end = gpu_now_s() + timeout_s;
  for (int r = 0; r < n; r++)
    status[r] = -2;
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; r++) {
      int st;
      if (status[r] != -2 || waitpid(pids[r], &st, WNOHANG) != pids[r])
        continue;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      left--;
    }
    if (left > 0 && gpu_now_s() > end) {
      for (int r = 0; r < n; r++)
        if (status[r] == -2) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          status[r] = -1;
        }
      break;
    }
    usleep(2000);
  }
}

/* n ranks run fn; each must exit 0 (the test skips without a GPU). */
static inline void gpu_run(gpu_rank_fn fn, int n, const char *name) {
  GPU_REQUIRE();
  int st[8];
  gpu_run_ranks(n, fn, 100, st);
  for (int r = 0; r < n; r++)
    cr_expect_eq(st[r], 0,
                 "%s, %d ranks: rank %d exit %d (see stderr; -1: hung)", name,
                 n, r, st[r]);
}

/* In a rank function (int rank in scope): a CUDA call that fails says
 * which and makes the rank exit 50. */
#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call,                        \
              cudaGetErrorString(e_));                                         \
      return 50;                                                               \
    }                                                                          \
  } while (0)

/* Copies host to the device (and waits: from pageable memory cudaMemcpy
 * may return before the data is there), then makes a non-blocking stream
 * and wraps it. */
static inline int gpu_filled_and_wrapped(int rank, void *dev, const void *host,
                                         size_t bytes, cudaStream_t *s,
                                         braid_stream **bs) {
  CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  CK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  return braid_stream_from_cuda((void *)*s, bs) == BRAID_SUCCESS ? 0 : 10;
}

/* The same with the device buffer made first (*d: cudaMalloc'd). */
static inline int gpu_made_and_wrapped(int rank, float **d, const float *h,
                                       size_t bytes, cudaStream_t *s,
                                       braid_stream **bs) {
  CK(cudaMalloc((void **)d, bytes));
  return gpu_filled_and_wrapped(rank, *d, h, bytes, s, bs);
}

/* Two device buffers of k ones, each with a wrapped stream of its own. */
static inline int gpu_ones_on_two_streams(int rank, size_t k, float *d[2],
                                          cudaStream_t s[2],
                                          braid_stream *bs[2]) {
  float *h = malloc(k * sizeof *h);
  if (h == NULL)
    return 3;
  for (size_t i = 0; i < k; i++)
    h[i] = 1.0f;
  int rc = 0;
  for (int j = 0; j < 2 && rc == 0; j++)
    rc = gpu_made_and_wrapped(rank, &d[j], h, k * sizeof *h, &s[j], &bs[j]);
  free(h);
  return rc;
}

/* braid_stream_synchronize, then cudaStreamSynchronize, on each of the n
 * streams: 0; 13 when a braid stream reports an error (said); 50 when CUDA
 * fails (said). */
static inline int gpu_sync_streams(braid_comm *c, int rank, braid_stream **bs,
                                   cudaStream_t *s, int n) {
  int rc = 0;
  for (int k = 0; k < n; k++) {
    braid_result r = braid_stream_synchronize(bs[k]);
    if (r != BRAID_SUCCESS && rc == 0) {
      fprintf(stderr, "rank %d: stream %d: %s (%s)\n", rank, k,
              braid_result_string(r), braid_comm_last_error(c));
      rc = 13;
    }
    CK(cudaStreamSynchronize(s[k]));
  }
  return rc;
}

/* Undoes gpu_ones_on_two_streams (braid streams already destroyed: NULL). */
static inline void gpu_ones_free(float *d[2], cudaStream_t s[2],
                                 braid_stream *bs[2]) {
  for (int j = 0; j < 2; j++) {
    if (bs[j] != NULL)
      braid_stream_destroy(bs[j]);
    cudaStreamDestroy(s[j]);
    cudaFree(d[j]);
  }
}

/* Whether the size variable name (BRAID_CUDA_HOST_MAX, BRAID_CUDA_KERNEL_MAX)
 * sends the tests' small calls its way: set to other than 0, or, for
 * BRAID_CUDA_KERNEL_MAX, unset (braid's default: no limit, src/config.c).
 * A test of another path than the default sets these variables in its
 * ctest environment (gpu.cmake); BRAID_CUDA_HOST_MAX unset (32K by default)
 * is off here: its tests' calls are larger or run as kernels. */
static inline int env_on(const char *name) {
  const char *v = getenv(name);
  if (v == NULL)
    return strcmp(name, "BRAID_CUDA_KERNEL_MAX") == 0;
  return strcmp(v, "0") != 0;
}

/* Waits up to ms milliseconds for gpu_held_done; whether it came. */
static inline int gpu_wait_held(int ms) {
  for (int t = 0; t < ms && !atomic_load(gpu_held_done); t++)
    usleep(1000);
  return atomic_load(gpu_held_done);
}

/* For the tests of what must not wait for a held stream: each rank issues
 * an allreduce of the k floats (ones) at d on bs (wrapping s) and runs
 * what(arg) at once, rank 1 only once rank 0's what has returned
 * (gpu_held_done): on rank 0 what must not wait for the call, which waits
 * for rank 1 (name says what it is). Rank 1 gives up
 * after HELD_MAX_MS, failing (18), and issues its call anyway. The call's
 * result must then be n. 0, or the failure's code (what's failure: 17). */
#define HELD_MAX_MS 30000
static inline int gpu_while_held(braid_comm *c, int rank, int n, float *d,
                                 size_t k, braid_stream *bs, cudaStream_t s,
                                 int (*what)(void *), void *arg,
                                 const char *name) {
  int rc = 0;
  /* a call is held while what runs only where it returns before it has
   * run: as a collective kernel or through host memory (the tests' path:
   * env_on), or with gates (BRAID_CUDA_GATE=1). Without gates a call on
   * the direct path waits in the calling thread until it has run
   * (docs/CUDA.md, "Stream gates and hardware queues"): only the result is
   * checked there */
  int holds = cfg_get()->cuda_gate || env_on("BRAID_CUDA_KERNEL_MAX") ||
              env_on("BRAID_CUDA_HOST_MAX");
  if (!holds && rank == 0)
    fprintf(stderr,
            "NOTE: without gates a call on the direct path returns once it "
            "has run: %s is not run while a call is held\n",
            name);
  if (rank == 1 && holds) {
    if (!gpu_wait_held(HELD_MAX_MS)) {
      fprintf(stderr,
              "rank 1: rank 0's %s had not returned after %d ms, while its "
              "call waited for rank 1: it waits for the call\n",
              name, HELD_MAX_MS);
      rc = 18;
    }
  }
  if (braid_allreduce(d, d, k, BRAID_FLOAT32, BRAID_SUM, c, bs) !=
      BRAID_SUCCESS)
    return 12;
  if (what(arg) != 0 && rc == 0)
    rc = 17;
  if (rank == 0)
    atomic_store(gpu_held_done, 1);
  if (braid_stream_synchronize(bs) != BRAID_SUCCESS && rc == 0)
    rc = 13;
  float *h = malloc(k * sizeof *h);
  if (h == NULL)
    return 3;
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, d, k * sizeof *h, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < k && rc == 0; i++)
    if (h[i] != (float)n) {
      fprintf(stderr, "rank %d: element %zu is %g, want %d\n", rank, i,
              (double)h[i], n);
      rc = 14;
    }
  free(h);
  return rc;
}

/* With BRAID_CUDA_KERNEL_MAX unset or above the calls' size, whether
 * `calls` calls on the streams ran as collective kernels; with 0, none. */
static inline int gpu_kernel_calls(int rank, braid_stream **bs, int nbs,
                                   uint64_t calls) {
  const char *k = getenv("BRAID_CUDA_KERNEL_MAX");
  uint64_t want = env_on("BRAID_CUDA_KERNEL_MAX") ? calls : 0, got = 0;
  for (int i = 0; i < nbs; i++)
    got += enq_stream_kernel_calls(bs[i]);
  if (got == want)
    return 0;
  fprintf(stderr,
          "rank %d: %llu calls ran as collective kernels, expected %llu "
          "(BRAID_CUDA_KERNEL_MAX=%s)\n",
          rank, (unsigned long long)got, (unsigned long long)want,
          k ? k : "unset");
  return 19;
}

#endif
