/*
 * Stream order on device buffers (forked ranks on one GPU): work issued on
 * the CUDA stream before a collective is seen by it, work issued after it
 * sees its result, calls return once enqueued, an event orders two streams,
 * and a call that mixes host and device buffers is an invalid argument that
 * leaves the communicator usable. Skips without a GPU. Run again with
 * BRAID_CUDA_HOST_MAX above the calls' size (gpu.cmake), the same holds of
 * calls staged through pinned host memory on the stream, and one_stream
 * checks that its two calls went that way (and none without it). Run
 * with BRAID_CUDA_KERNEL_MAX (gpu.cmake), the small calls run as collective
 * kernels (src/exec_kernel.c): many_calls, alternating and every_collective
 * check that they did, and one_stream that its calls, larger, did not.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/config.h"
#include "src/exec_int.h"
#include "src/stream.h"
#include "test_gpu_ranks.h"

#define N ((size_t)1 << 20)
/* How long a timed hold holds the stream (work after it runs late). */
#define SLEEP_MS 300
/* The longest an untimed hold waits for its release. */
#define HOLD_MAX_MS 30000

/* Set by the test once its call has returned: ends an untimed hold. Set by
 * an untimed hold that was never released: the call waited for the stream
 * (the hold ahead of it) instead of returning once enqueued. */
static atomic_int hold_released, hold_gave_up;

/* Holds the stream up: anything after it on the stream runs late. With arg
 * NULL until the test releases it (hold_released), HOLD_MAX_MS at most;
 * with &timed_hold for SLEEP_MS. */
static char timed_hold;
static void CUDART_CB hold_stream(void *arg) {
  if (arg != NULL) {
    usleep(SLEEP_MS * 1000);
    return;
  }
  for (int ms = 0; !atomic_load(&hold_released); ms++) {
    if (ms == HOLD_MAX_MS) {
      atomic_store(&hold_gave_up, 1);
      return;
    }
    usleep(1000);
  }
}

/* Holds the stream up for 50 ms: long enough for calls issued meanwhile
 * on other streams to run first, were they not ordered after it. */
static void CUDART_CB hold_briefly(void *arg) {
  (void)arg;
  usleep(50 * 1000);
}

/* Rank r's input element i (small integers, exact in float). */
static float val(int r, size_t i) { return (float)((r + (int)(i % 7)) % 5); }

static float sum_over(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; r++)
    s += val(r, i);
  return s;
}

typedef struct bufs {
  float *hin, *hout; /* pinned */
  float *din, *dout, *dout2;
} bufs;

static int bufs_alloc(bufs *b, int rank) {
  CK(cudaMallocHost((void **)&b->hin, N * sizeof(float)));
  CK(cudaMallocHost((void **)&b->hout, N * sizeof(float)));
  CK(cudaMalloc((void **)&b->din, N * sizeof(float)));
  CK(cudaMalloc((void **)&b->dout, N * sizeof(float)));
  CK(cudaMalloc((void **)&b->dout2, N * sizeof(float)));
  CK(cudaMemset(b->din, 0xff, N * sizeof(float))); /* NaN until written */
  CK(cudaMemset(b->dout, 0xff, N * sizeof(float)));
  /* cudaMemset runs on the legacy default stream, which the tests'
   * non-blocking streams and braid's do not wait for */
  CK(cudaDeviceSynchronize());
  for (size_t i = 0; i < N; i++)
    b->hin[i] = val(rank, i);
  return 0;
}

static void bufs_free(bufs *b) {
  cudaFreeHost(b->hin);
  cudaFreeHost(b->hout);
  cudaFree(b->din);
  cudaFree(b->dout);
  cudaFree(b->dout2);
}

static int check(const bufs *b, int rank, int n, float factor,
                 const char *what) {
  for (size_t i = 0; i < N; i++) {
    float want = factor * sum_over(n, i);
    if (b->hout[i] != want) {
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank,
              what, i, (double)b->hout[i], (double)want);
      return 20;
    }
  }
  return 0;
}

/* One stream: [hold] [copy in] [kernel: in += in] allreduce [kernel: out2 =
 * out + out] [copy out]. Right only if the collective waits for the work
 * before it and the work after it waits for the collective. */
static int one_stream(braid_comm *c, int rank, int n) {
  CK(cudaSetDevice(0));
  bufs b;
  int rc = bufs_alloc(&b, rank);
  if (rc)
    return rc;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  braid_stream *bs = NULL;
  braid_result r = braid_stream_from_cuda((void *)s, &bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: braid_stream_from_cuda: %s\n", rank,
            braid_result_string(r));
    return 10;
  }
  /* the device transports' setup is not what the hold below is about */
  r = braid_allreduce(b.dout, b.dout2, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: warm-up allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 18;
  }
  /* With gates the call must return once enqueued, the stream still held
   * until the call has returned; BRAID_CUDA_GATE=0 (also the default under
   * CUDA_DEVICE_MAX_CONNECTIONS=1): the call waits for the stream by
   * design, which a timed hold lets go */
  int gated = cfg_get()->cuda_gate;
  atomic_store(&hold_released, 0);
  atomic_store(&hold_gave_up, 0);
  CK(cudaLaunchHostFunc(s, hold_stream, gated ? NULL : &timed_hold));
  CK(cudaMemcpyAsync(b.din, b.hin, N * sizeof(float), cudaMemcpyHostToDevice,
                     s));
  if (cudev_reduce(b.din, b.din, b.din, N, BRAID_FLOAT32, BRAID_SUM, s) !=
      BRAID_SUCCESS)
    return 11;
  r = braid_allreduce(b.din, b.dout, N, BRAID_FLOAT32, BRAID_SUM, c, bs);
  int waited = atomic_load(&hold_gave_up);
  atomic_store(&hold_released, 1);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 12;
  }
  if (gated && waited) {
    fprintf(stderr,
            "rank %d: the call returned only once the hold ahead of it on "
            "the stream gave up (%d ms): it waited for the stream instead "
            "of returning once enqueued\n",
            rank, HOLD_MAX_MS);
    return 13;
  }
  if (cudev_reduce(b.dout2, b.dout, b.dout, N, BRAID_FLOAT32, BRAID_SUM, s) !=
      BRAID_SUCCESS)
    return 14;
  CK(cudaMemcpyAsync(b.hout, b.dout2, N * sizeof(float), cudaMemcpyDeviceToHost,
                     s));
  CK(cudaStreamSynchronize(s));
  r = braid_stream_synchronize(bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: stream: %s (%s)\n", rank, braid_result_string(r),
            braid_comm_last_error(c));
    return 15;
  }
  rc = check(&b, rank, n, 4.0f, "kernel after allreduce");
  /* in place on the same stream, no host wait in between */
  if (rc == 0) {
    CK(cudaMemcpyAsync(b.dout, b.din, N * sizeof(float),
                       cudaMemcpyDeviceToDevice, s));
    r = braid_allreduce(b.dout, b.dout, N, BRAID_FLOAT32, BRAID_SUM, c, bs);
    if (r != BRAID_SUCCESS)
      return 16;
    CK(cudaMemcpyAsync(b.hout, b.dout, N * sizeof(float),
                       cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    rc = check(&b, rank, n, 2.0f, "in-place allreduce");
  }
  const char *small = getenv("BRAID_CUDA_HOST_MAX");
  uint64_t want = env_on("BRAID_CUDA_HOST_MAX") ? 2 : 0;
  uint64_t got = enq_stream_host_calls(bs);
  if (rc == 0 && enq_stream_kernel_calls(bs) != 0) {
    fprintf(stderr, "rank %d: calls of %zu bytes ran as kernels\n", rank,
            N * sizeof(float));
    rc = 20;
  }
  if (rc == 0 && got != want) {
    fprintf(stderr,
            "rank %d: %llu calls staged on the stream, expected %llu "
            "(BRAID_CUDA_HOST_MAX=%s)\n",
            rank, (unsigned long long)got, (unsigned long long)want,
            small ? small : "unset");
    rc = 19;
  }
  if (braid_stream_destroy(bs) != BRAID_SUCCESS && rc == 0)
    rc = 17;
  cudaStreamDestroy(s); /* the user's stream outlives the wrapper */
  bufs_free(&b);
  return rc;
}

/* Stream A makes the input, an event orders stream B after it; the
 * collective runs on B. */
static int two_streams(braid_comm *c, int rank, int n) {
  CK(cudaSetDevice(0));
  bufs b;
  int rc = bufs_alloc(&b, rank);
  if (rc)
    return rc;
  cudaStream_t sa, sb;
  cudaEvent_t ev;
  CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  braid_stream *bs = NULL;
  if (braid_stream_from_cuda((void *)sb, &bs) != BRAID_SUCCESS)
    return 10;
  CK(cudaLaunchHostFunc(sa, hold_stream, &timed_hold));
  CK(cudaMemcpyAsync(b.din, b.hin, N * sizeof(float), cudaMemcpyHostToDevice,
                     sa));
  CK(cudaEventRecord(ev, sa));
  CK(cudaStreamWaitEvent(sb, ev, 0));
  braid_result r =
      braid_allreduce(b.din, b.dout, N, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 12;
  }
  CK(cudaMemcpyAsync(b.hout, b.dout, N * sizeof(float), cudaMemcpyDeviceToHost,
                     sb));
  CK(cudaStreamSynchronize(sb));
  rc = check(&b, rank, n, 1.0f, "allreduce after an event");
  if (braid_stream_destroy(bs) != BRAID_SUCCESS && rc == 0)
    rc = 17;
  cudaEventDestroy(ev);
  cudaStreamDestroy(sa);
  cudaStreamDestroy(sb);
  bufs_free(&b);
  return rc;
}

/* More calls in flight than a stream's queue holds (the emulated GPU's is
 * 1024 operations): the calls issued once it is full wait in the driver
 * for room, which the progress thread makes by releasing gates; call i
 * reduces element i, so every call's result is checked. */
#define MANY 3000
static int many_calls(braid_comm *c, int rank, int n) {
  CK(cudaSetDevice(0));
  float *h = malloc(MANY * sizeof(float)), *din = NULL, *dout = NULL;
  if (h == NULL)
    return 3;
  for (int i = 0; i < MANY; i++)
    h[i] = val(rank, (size_t)i);
  CK(cudaMalloc((void **)&din, MANY * sizeof(float)));
  CK(cudaMalloc((void **)&dout, MANY * sizeof(float)));
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_filled_and_wrapped(rank, din, h, MANY * sizeof(float), &s, &bs);
  if (rc)
    return rc;
  for (int i = 0; i < MANY && rc == 0; i++) {
    braid_result r =
        braid_allreduce(din + i, dout + i, 1, BRAID_FLOAT32, BRAID_SUM, c, bs);
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "rank %d: allreduce %d: %s (%s)\n", rank, i,
              braid_result_string(r), braid_comm_last_error(c));
      rc = 12;
    }
  }
  if (braid_stream_synchronize(bs) != BRAID_SUCCESS && rc == 0)
    rc = 13;
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, dout, MANY * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < MANY && rc == 0; i++)
    if (h[i] != sum_over(n, (size_t)i)) {
      fprintf(stderr, "rank %d: call %d of %d: %g, want %g\n", rank, i, MANY,
              h[i], sum_over(n, (size_t)i));
      rc = 14;
    }
  if (rc == 0)
    rc = gpu_kernel_calls(rank, &bs, 1, MANY);
  if (braid_stream_destroy(bs) != BRAID_SUCCESS && rc == 0)
    rc = 17;
  cudaStreamDestroy(s);
  cudaFree(din);
  cudaFree(dout);
  free(h);
  return rc;
}

/* In-place allreduces of one buffer alternate between two CUDA streams
 * with nothing ordering the streams: a communicator runs its calls in
 * issue order, so each call sees the one before (n^calls at the end). The
 * first stream is held up before the first call, so a call on the second
 * that did not wait for it would read the old buffer. dflt: the first
 * stream is the legacy default stream (NULL), which nothing orders with the
 * second (non-blocking) either. */
static int alternate(braid_comm *c, int rank, int n, int dflt) {
  enum { K = 64, CALLS = 12 };
  CK(cudaSetDevice(0));
  float h[K], *d = NULL;
  for (int i = 0; i < K; i++)
    h[i] = 1.0f;
  CK(cudaMalloc((void **)&d, sizeof h));
  cudaStream_t s[2] = {NULL, NULL};
  braid_stream *bs[2] = {NULL, NULL};
  int rc = 0;
  if (dflt) {
    CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    rc = braid_stream_from_cuda(NULL, &bs[0]) == BRAID_SUCCESS ? 0 : 10;
  } else {
    rc = gpu_filled_and_wrapped(rank, d, h, sizeof h, &s[0], &bs[0]);
  }
  if (rc)
    return rc;
  CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
  if (braid_stream_from_cuda((void *)s[1], &bs[1]) != BRAID_SUCCESS)
    return 10;
  CK(cudaLaunchHostFunc(s[0], hold_briefly, NULL));
  for (int k = 0; k < CALLS && rc == 0; k++)
    if (braid_allreduce(d, d, K, BRAID_FLOAT32, BRAID_SUM, c, bs[k % 2]) !=
        BRAID_SUCCESS)
      rc = 12;
  int synced = gpu_sync_streams(c, rank, bs, s, 2);
  if (synced == 50)
    return 50;
  rc = rc ? rc : synced;
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  float want = 1.0f;
  for (int k = 0; k < CALLS; k++)
    want *= (float)n;
  for (int i = 0; i < K && rc == 0; i++)
    if (h[i] != want) {
      fprintf(stderr, "rank %d: element %d is %g after %d calls, want %g\n",
              rank, i, (double)h[i], CALLS, (double)want);
      rc = 14;
    }
  if (rc == 0)
    rc = gpu_kernel_calls(rank, bs, 2, CALLS);
  for (int j = 0; j < 2; j++) {
    braid_stream_destroy(bs[j]);
    if (s[j] != NULL)
      cudaStreamDestroy(s[j]);
  }
  cudaFree(d);
  return rc;
}

static int alternating(braid_comm *c, int rank, int n) {
  return alternate(c, rank, n, 0);
}

static int alternating_default(braid_comm *c, int rank, int n) {
  return alternate(c, rank, n, 1);
}

/* Calls on a host stream and on a CUDA stream interleaved, on device
 * buffers of their own: the host stream's run on the progress thread, and
 * a call on the CUDA stream issued while one of them waits in the queue
 * (on ranks other than 0) must still take its turn after it, as on rank 0 (with
 * BRAID_CUDA_KERNEL_MAX such a call waits for it before launching:
 * src/exec_kernel.c, "Order"); a call paired with
 * another's data would show in the sums. With collective kernels every
 * call must have run as one. */
static int host_and_cuda_streams(braid_comm *c, int rank, int n) {
  enum { K = 256, ROUNDS = 8 };
  CK(cudaSetDevice(0));
  float ha[K], hb[K], *da = NULL, *db = NULL;
  for (int i = 0; i < K; i++) {
    ha[i] = val(rank, (size_t)i);
    hb[i] = ha[i] + 100.0f;
  }
  CK(cudaMalloc((void **)&da, sizeof ha));
  CK(cudaMalloc((void **)&db, sizeof hb));
  CK(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
  cudaStream_t s;
  braid_stream *bs = NULL, *hs = NULL;
  int rc = gpu_filled_and_wrapped(rank, da, ha, sizeof ha, &s, &bs);
  if (rc)
    return rc;
  if (braid_stream_create(&hs) != BRAID_SUCCESS)
    return 10;
  uint64_t before = exk_calls(c);
  /* rank 0 lets each host-stream call finish before its CUDA-stream one;
   * the others issue theirs while the host-stream call is still queued.
   * The host-stream calls are allreduces and broadcasts (of the allreduced
   * da, which they leave as it is) in turn: both may launch kernels. */
  for (int r = 0; r < ROUNDS && rc == 0; r++)
    if ((r % 2 == 0
             ? braid_allreduce(da, da, K, BRAID_FLOAT32, BRAID_SUM, c, hs)
             : braid_broadcast(da, da, K, BRAID_FLOAT32, 0, c, hs)) !=
            BRAID_SUCCESS ||
        (rank == 0 && braid_stream_synchronize(hs) != BRAID_SUCCESS) ||
        braid_allreduce(db, db, K, BRAID_FLOAT32, BRAID_SUM, c, bs) !=
            BRAID_SUCCESS)
      rc = 12;
  if (braid_stream_synchronize(hs) != BRAID_SUCCESS ||
      braid_stream_synchronize(bs) != BRAID_SUCCESS)
    rc = rc ? rc : 13;
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(ha, da, sizeof ha, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb, db, sizeof hb, cudaMemcpyDeviceToHost));
  float scale = 1.0f, scale_a = 1.0f;
  for (int r = 1; r < ROUNDS; r++) {
    scale *= (float)n;
    scale_a *= r % 2 == 0 ? (float)n : 1.0f;
  }
  for (int i = 0; i < K && rc == 0; i++) {
    float wa = scale_a * sum_over(n, (size_t)i);
    float wb = scale * (sum_over(n, (size_t)i) + 100.0f * (float)n);
    if (ha[i] != wa || hb[i] != wb) {
      fprintf(stderr, "rank %d: element %d: %g and %g, want %g and %g\n", rank,
              i, (double)ha[i], (double)hb[i], (double)wa, (double)wb);
      rc = 14;
    }
  }
  uint64_t want = env_on("BRAID_CUDA_KERNEL_MAX") ? 2 * ROUNDS : 0;
  if (rc == 0 && exk_calls(c) - before != want) {
    fprintf(stderr, "rank %d: %llu collective kernels, expected %llu\n", rank,
            (unsigned long long)(exk_calls(c) - before),
            (unsigned long long)want);
    rc = 19;
  }
  braid_stream_destroy(hs);
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(da);
  cudaFree(db);
  return rc;
}

/* Destroying a stream waits for no other: rank 0 destroys stream B (its
 * call long done) while its stream A waits for a call that rank 1 issues
 * 2 s later. Freeing B's gate words with cudaFreeHost waited for the whole
 * device, A's held gate (or kernel) included, and for ever where what A
 * waited for came only after the destroy. So did freeing the pinned area
 * of small calls (BRAID_CUDA_HOST_MAX), which now goes to a pool. */
static int stream_destroy(void *bs) {
  return braid_stream_destroy(bs) != BRAID_SUCCESS;
}

static int destroy_while_held(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  CK(cudaSetDevice(0));
  float *d[2] = {NULL, NULL};
  cudaStream_t s[2];
  braid_stream *bs[2];
  int rc = gpu_ones_on_two_streams(rank, K, d, s, bs);
  if (rc)
    return rc;
  if (braid_allreduce(d[1], d[1], K, BRAID_FLOAT32, BRAID_SUM, c, bs[1]) !=
          BRAID_SUCCESS ||
      braid_stream_synchronize(bs[1]) != BRAID_SUCCESS)
    return 12;
  CK(cudaStreamSynchronize(s[1]));
  rc = gpu_while_held(c, rank, n, d[0], K, bs[0], s[0], stream_destroy, bs[1],
                      "braid_stream_destroy of another stream");
  bs[1] = NULL;
  gpu_ones_free(d, s, bs);
  return rc;
}

/* Streams made and destroyed in turn, each with one call and destroyed
 * without waiting for its CUDA stream, on two communicators and two CUDA
 * streams that nothing orders (a call of one communicator does not wait
 * for the other's). Small calls (BRAID_CUDA_HOST_MAX) go through the
 * braid stream's pinned area, which a destroyed stream leaves to the next
 * one only once its CUDA stream has run the copies out of it (src/
 * stream.c): reused earlier, a later call's copies in would overwrite a
 * result not yet copied out. Round j adds j + rank on every rank. */
static int streams_in_turn(braid_comm *c, int rank, int n) {
  enum { K = 256, ROUNDS = 24 };
  CK(cudaSetDevice(0));
  float *d = NULL, *h = malloc(ROUNDS * K * sizeof(float));
  braid_comm *cs[2] = {c, NULL};
  cudaStream_t s[2];
  if (h == NULL || braid_comm_split(c, 0, rank, &cs[1]) != BRAID_SUCCESS) {
    free(h);
    return 3;
  }
  for (int i = 0; i < ROUNDS * K; i++)
    h[i] = (float)(i / K + rank);
  CK(cudaMalloc((void **)&d, ROUNDS * K * sizeof(float)));
  CK(cudaMemcpy(d, h, ROUNDS * K * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  for (int j = 0; j < 2; j++)
    CK(cudaStreamCreateWithFlags(&s[j], cudaStreamNonBlocking));
  int rc = 0;
  for (int j = 0; j < ROUNDS && rc == 0; j++) {
    braid_stream *bs = NULL;
    if (braid_stream_from_cuda((void *)s[j % 2], &bs) != BRAID_SUCCESS)
      return 10;
    if (braid_allreduce(d + j * K, d + j * K, K, BRAID_FLOAT32, BRAID_SUM,
                        cs[j % 2], bs) != BRAID_SUCCESS)
      rc = 12;
    if (braid_stream_destroy(bs) != BRAID_SUCCESS && rc == 0)
      rc = 13;
  }
  for (int j = 0; j < 2; j++)
    CK(cudaStreamSynchronize(s[j]));
  CK(cudaMemcpy(h, d, ROUNDS * K * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < ROUNDS * K && rc == 0; i++) {
    float want = (float)(n * (i / K) + n * (n - 1) / 2);
    if (h[i] != want) {
      fprintf(stderr, "rank %d: round %d, element %d: %g, want %g\n", rank,
              i / K, i % K, (double)h[i], (double)want);
      rc = 14;
    }
  }
  braid_comm_destroy(cs[1]);
  for (int j = 0; j < 2; j++)
    cudaStreamDestroy(s[j]);
  cudaFree(d);
  free(h);
  return rc;
}

/* Every collective that can run as a kernel, on one CUDA stream: allreduce,
 * reduce (recvbuf NULL off the root), broadcast (sendbuf NULL off the
 * root), allgather and reduce_scatter out of place and in place. K is odd,
 * so rank q's block of an allgather's output and a rank's range of a
 * reduce_scatter's input start off 16-byte boundaries. With
 * BRAID_CUDA_KERNEL_MAX every call must have run as a kernel. */
static int every_collective(braid_comm *c, int rank, int n) {
  enum { K = 1001, CALLS = 7 };
  const size_t nk = (size_t)n * K;
  const int root = n - 1, broot = 1 % n;
  CK(cudaSetDevice(0));
  float *h = malloc(nk * sizeof(float)), *got = malloc(nk * sizeof(float));
  float *d[CALLS + 1];
  if (h == NULL || got == NULL)
    return 3;
  for (int k = 0; k <= CALLS; k++)
    CK(cudaMalloc((void **)&d[k], nk * sizeof(float)));
  for (size_t i = 0; i < nk; i++)
    h[i] = val(rank, i);
  /* d[0]: the input (nk elements: reduce_scatter's); d[5], d[6]: the
   * in-place allgather (own block) and reduce_scatter (all) */
  CK(cudaMemcpy(d[5] + (size_t)rank * K, h, K * sizeof(float),
                cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d[6], h, nk * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_filled_and_wrapped(rank, d[0], h, nk * sizeof(float), &s, &bs);
  if (rc)
    return rc;
  braid_result r[CALLS] = {
      braid_allreduce(d[0], d[1], K, BRAID_FLOAT32, BRAID_SUM, c, bs),
      braid_reduce(d[0], rank == root ? d[2] : NULL, K, BRAID_FLOAT32,
                   BRAID_SUM, root, c, bs),
      braid_broadcast(rank == broot ? d[0] : NULL, d[3], K, BRAID_FLOAT32,
                      broot, c, bs),
      braid_allgather(d[0], d[4], K, BRAID_FLOAT32, c, bs),
      braid_allgather(d[5] + (size_t)rank * K, d[5], K, BRAID_FLOAT32, c, bs),
      braid_reduce_scatter(d[0], d[7], K, BRAID_FLOAT32, BRAID_SUM, c, bs),
      braid_reduce_scatter(d[6], d[6] + (size_t)rank * K, K, BRAID_FLOAT32,
                           BRAID_SUM, c, bs)};
  for (int k = 0; k < CALLS && rc == 0; k++)
    if (r[k] != BRAID_SUCCESS) {
      fprintf(stderr, "rank %d: call %d: %s (%s)\n", rank, k,
              braid_result_string(r[k]), braid_comm_last_error(c));
      rc = 12;
    }
  if (braid_stream_synchronize(bs) != BRAID_SUCCESS && rc == 0)
    rc = 13;
  CK(cudaStreamSynchronize(s));
  /* what each output buffer must hold, element i */
  static const char *what[] = {"",
                               "allreduce",
                               "reduce",
                               "broadcast",
                               "allgather",
                               "allgather in place",
                               "reduce_scatter in place",
                               "reduce_scatter"};
  for (int k = 1; k <= CALLS && rc == 0; k++) {
    size_t len = k == 4 || k == 5 ? nk : K;
    float *src = k == 6 ? d[6] + (size_t)rank * K : d[k];
    if (k == 2 && rank != root)
      continue;
    CK(cudaMemcpy(got, src, len * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < len && rc == 0; i++) {
      float want = k == 3             ? val(broot, i)
                   : k == 4 || k == 5 ? val((int)(i / K), i % K)
                   : k == 6 || k == 7 ? sum_over(n, (size_t)rank * K + i)
                                      : sum_over(n, i);
      if (got[i] != want) {
        fprintf(stderr, "rank %d: %s: element %zu is %g, want %g\n", rank,
                what[k], i, (double)got[i], (double)want);
        rc = 14;
      }
    }
  }
  if (rc == 0)
    rc = gpu_kernel_calls(rank, &bs, 1, CALLS);
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  for (int k = 0; k <= CALLS; k++)
    cudaFree(d[k]);
  free(h);
  free(got);
  return rc;
}

/* A send and a receive on a CUDA stream before any device collective (the
 * device side is not set up: they stage on their own), each followed on the
 * stream by a copy back to pageable memory, which waits behind the call's
 * gate inside the driver; the call's staging must not wait for it. */
static int p2p_first(braid_comm *c, int rank, int n) {
  (void)n;
  CK(cudaSetDevice(0));
  float h[64], *d = NULL;
  for (int i = 0; i < 64; i++)
    h[i] = rank == 0 ? (float)(i * 3) : -1.0f;
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_made_and_wrapped(rank, &d, h, sizeof h, &s, &bs);
  if (rc)
    return rc;
  braid_result r = rank == 0 ? braid_send(d, 64, BRAID_FLOAT32, 1, c, bs)
                             : braid_recv(d, 64, BRAID_FLOAT32, 0, c, bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, rank == 0 ? "send" : "recv",
            braid_result_string(r), braid_comm_last_error(c));
    return 12;
  }
  CK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
  rc = braid_stream_synchronize(bs) != BRAID_SUCCESS ? 13 : 0;
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < 64 && rc == 0; i++)
    if (h[i] != (float)(i * 3)) {
      fprintf(stderr, "rank %d: element %d is %g\n", rank, i, (double)h[i]);
      rc = 14;
    }
  if (braid_stream_destroy(bs) != BRAID_SUCCESS && rc == 0)
    rc = 17;
  cudaStreamDestroy(s);
  cudaFree(d);
  return rc;
}

/* Host and device buffers in one call; host buffers on a CUDA stream. */
static int mixing(braid_comm *c, int rank, int n) {
  CK(cudaSetDevice(0));
  int dev = -1;
  CK(cudaGetDevice(&dev));
  bufs b;
  int rc = bufs_alloc(&b, rank);
  if (rc)
    return rc;
  char want[128];
  snprintf(want, sizeof want,
           "sendbuf is device memory (GPU %d) but recvbuf is host memory", dev);
  braid_result r =
      braid_allreduce(b.din, b.hout, N, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_ERR_INVALID_ARG ||
      strstr(braid_comm_last_error(c), want) == NULL) {
    fprintf(stderr, "rank %d: device->host: %s (%s), wanted \"%s\"\n", rank,
            braid_result_string(r), braid_comm_last_error(c), want);
    return 30;
  }
  snprintf(want, sizeof want,
           "recvbuf is device memory (GPU %d) but sendbuf is host memory", dev);
  r = braid_allreduce(b.hin, b.dout, N, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_ERR_INVALID_ARG ||
      strstr(braid_comm_last_error(c), want) == NULL) {
    fprintf(stderr, "rank %d: host->device: %s (%s), wanted \"%s\"\n", rank,
            braid_result_string(r), braid_comm_last_error(c), want);
    return 31;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  braid_stream *bs = NULL;
  if (braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS)
    return 10;
  r = braid_allreduce(b.hin, b.hout, N, BRAID_FLOAT32, BRAID_SUM, c, bs);
  if (r != BRAID_ERR_INVALID_ARG ||
      strstr(braid_comm_last_error(c), "CUDA stream") == NULL) {
    fprintf(stderr, "rank %d: host buffers on a CUDA stream: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 32;
  }
  /* still usable: a blocking call on device buffers, then host buffers.
   * A blocking call does not wait for CUDA streams, and cudaMemcpy from
   * pageable memory may return before the data reached the device. */
  CK(cudaMemcpy(b.din, b.hin, N * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  r = braid_allreduce(b.din, b.dout, N, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce after the errors: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 33;
  }
  CK(cudaMemcpy(b.hout, b.dout, N * sizeof(float), cudaMemcpyDeviceToHost));
  rc = check(&b, rank, n, 1.0f, "blocking allreduce on device buffers");
  if (rc == 0) {
    float *hin2 = malloc(N * sizeof(float));
    if (hin2 == NULL)
      return 3;
    memcpy(hin2, b.hin, N * sizeof(float));
    r = braid_allreduce(hin2, b.hout, N, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    rc = r != BRAID_SUCCESS ? 34 : check(&b, rank, n, 1.0f, "host allreduce");
    free(hin2);
  }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  bufs_free(&b);
  return rc;
}

Test(gpu_stream, kernels_before_and_after_are_ordered, .timeout = 120) {
  gpu_run(one_stream, 1, "one stream");
  gpu_run(one_stream, 2, "one stream");
}

Test(gpu_stream, two_streams_with_an_event, .timeout = 120) {
  gpu_run(two_streams, 2, "two streams");
}

Test(gpu_stream, more_calls_than_the_stream_queue_holds, .timeout = 120) {
  gpu_run(many_calls, 2, "many calls");
}

Test(gpu_stream, calls_alternating_between_streams_keep_issue_order,
     .timeout = 120) {
  gpu_run(alternating, 2, "alternating streams");
  gpu_run(alternating, 3, "alternating streams");
  gpu_run(alternating_default, 2, "the default stream and another alternating");
}

Test(gpu_stream, host_and_cuda_streams_interleaved, .timeout = 120) {
  gpu_run(host_and_cuda_streams, 2, "host and CUDA streams");
  gpu_run(host_and_cuda_streams, 3, "host and CUDA streams");
}

Test(gpu_stream, destroying_a_stream_waits_for_no_other, .timeout = 120) {
  gpu_run(destroy_while_held, 2, "destroy while another stream is held");
}

Test(gpu_stream, streams_made_and_destroyed_reuse_the_pinned_area,
     .timeout = 120) {
  gpu_run(streams_in_turn, 2, "streams in turn");
}

Test(gpu_stream, every_collective_that_runs_as_a_kernel, .timeout = 120) {
  gpu_run(every_collective, 2, "every collective");
  gpu_run(every_collective, 3, "every collective");
}

Test(gpu_stream, send_and_recv_before_any_collective, .timeout = 120) {
  gpu_run(p2p_first, 2, "send and receive first");
}

Test(gpu_stream, mixing_host_and_device_is_invalid, .timeout = 120) {
  gpu_run(mixing, 2, "mixing");
}
