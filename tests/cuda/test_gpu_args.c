/*
 * Device-buffer calls that braid refuses, each with a message naming what
 * was wrong, leaving the communicator usable: a buffer that runs past the
 * device memory mapped there (the GPU would fault, and a fault ends the
 * process's CUDA context), and a call on a stream being captured into a
 * CUDA graph; reductions with int16, bool or a bitwise op, and alltoallv,
 * on device buffers. Forked ranks on one GPU; skips without one. (Buffers
 * mixing host and device memory: test_gpu_stream.c, mixing.)
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_gpu_ranks.h"

/* 0 when the call failed with BRAID_ERR_INVALID_ARG and a message that
 * names buf and says it runs past its memory, else code. */
static int refused(braid_comm *c, int rank, braid_result r, const char *buf,
                   const char *what, int code) {
  const char *msg = braid_comm_last_error(c);
  if (r == BRAID_ERR_INVALID_ARG && strstr(msg, buf) != NULL &&
      strstr(msg, "runs past the device memory") != NULL)
    return 0;
  fprintf(stderr, "rank %d: %s: %s (%s), wanted %s named as running past\n",
          rank, what, braid_result_string(r), msg, buf);
  return code;
}

/* Whether the device can tell that [p, p + bytes) runs past its memory:
 * always on the emulated GPU, whose allocations end where asked (here not
 * at a page's end, so the next one cannot lie right after); on a GPU only
 * where the driver's allocation ends there and nothing is mapped after it
 * (nothing can tell an overrun into the next allocation from a buffer
 * mapped in two pieces). A call the device cannot tell about would write
 * past the buffer: it is not made. */
static int tells(const void *p, size_t bytes) {
  return cudev_room(p, bytes) < bytes;
}

/* Two buffers of K floats each (2 MiB less one float). A call that ends
 * exactly at the buffers' end runs and is exact. One that needs 1 GiB more
 * is refused, blocking and on a CUDA stream, naming the buffer (in place:
 * buffers that overlap otherwise are refused first, for that). One float
 * short, and allgather's recvbuf one block short (its sendbuf fits), are
 * refused where the device can tell (tells). */
static int past_the_end(braid_comm *c, int rank, int n) {
  enum { K = (1 << 19) - 1 };
  const size_t bytes = K * sizeof(float);
  CK(cudaSetDevice(0));
  float *h = malloc(bytes), *d = NULL, *o = NULL;
  if (h == NULL)
    return 3;
  for (int i = 0; i < K; i++)
    h[i] = (float)(rank + 1);
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_made_and_wrapped(rank, &d, h, bytes, &s, &bs);
  if (rc)
    return rc;
  CK(cudaMalloc((void **)&o, bytes));
  braid_result r = braid_allreduce(d + K / 2, o + K / 2, K - K / 2,
                                   BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce ending at the buffers' end: %s (%s)\n",
            rank, braid_result_string(r), braid_comm_last_error(c));
    rc = 12;
  }
  const size_t gib = ((size_t)1 << 30) / sizeof(float);
  if (rc == 0)
    rc = refused(
        c, rank,
        braid_allreduce(d, d, K + gib, BRAID_FLOAT32, BRAID_SUM, c, NULL),
        "sendbuf", "in-place allreduce 1 GiB past the end", 20);
  if (rc == 0)
    rc = refused(c, rank,
                 braid_broadcast(d, d, K + gib, BRAID_FLOAT32, 0, c, bs),
                 rank == 0 ? "sendbuf" : "recvbuf",
                 "in-place broadcast 1 GiB past the end", 21);
  if (rc == 0 && tells(d + 1, bytes))
    rc = refused(
        c, rank,
        braid_allreduce(d + 1, d + 1, K, BRAID_FLOAT32, BRAID_SUM, c, bs),
        "sendbuf", "in-place allreduce one float past the end", 22);
  size_t block = K / (size_t)n + 1;
  if (rc == 0 && tells(o, n * block * sizeof(float)))
    rc = refused(c, rank, braid_allgather(d, o, block, BRAID_FLOAT32, c, bs),
                 "recvbuf", "allgather into a recvbuf one block short", 23);
  /* still usable */
  if (rc == 0 && (braid_stream_synchronize(bs) != BRAID_SUCCESS ||
                  braid_allreduce(d, o, K, BRAID_FLOAT32, BRAID_SUM, c, bs) !=
                      BRAID_SUCCESS ||
                  braid_stream_synchronize(bs) != BRAID_SUCCESS)) {
    fprintf(stderr, "rank %d: allreduce after the refusals: %s\n", rank,
            braid_comm_last_error(c));
    rc = 13;
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, o, bytes, cudaMemcpyDeviceToHost));
  float want = (float)(n * (n + 1) / 2);
  for (int i = 0; i < K && rc == 0; i++)
    if (h[i] != want) {
      fprintf(stderr, "rank %d: element %d is %g, want %g\n", rank, i,
              (double)h[i], (double)want);
      rc = 14;
    }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  cudaFree(o);
  free(h);
  return rc;
}

/* A call on a stream being captured into a CUDA graph is refused with
 * BRAID_ERR_UNSUPPORTED and a message naming the capture; the stream and
 * the communicator stay usable once the capture ends. */
static int captured(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  CK(cudaSetDevice(0));
  float h[K], *d = NULL;
  for (int i = 0; i < K; i++)
    h[i] = 1.0f;
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_made_and_wrapped(rank, &d, h, sizeof h, &s, &bs);
  if (rc)
    return rc;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  braid_result r = braid_allreduce(d, d, K, BRAID_FLOAT32, BRAID_SUM, c, bs);
  cudaGraph_t graph = NULL;
  CK(cudaStreamEndCapture(s, &graph));
  if (graph != NULL)
    cudaGraphDestroy(graph);
  if (r != BRAID_ERR_UNSUPPORTED ||
      strstr(braid_comm_last_error(c), "captured") == NULL) {
    fprintf(stderr, "rank %d: allreduce while capturing: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    rc = 12;
  }
  if (rc == 0 && (braid_allreduce(d, d, K, BRAID_FLOAT32, BRAID_SUM, c, bs) !=
                      BRAID_SUCCESS ||
                  braid_stream_synchronize(bs) != BRAID_SUCCESS))
    rc = 13;
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < K && rc == 0; i++)
    if (h[i] != (float)n) {
      fprintf(stderr, "rank %d: element %d is %g after the capture, want %d\n",
              rank, i, (double)h[i], n);
      rc = 14;
    }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  return rc;
}

/* int16, bool and the bitwise ops on device buffers: reductions refused
 * with BRAID_ERR_UNSUPPORTED naming op and dtype (the device kernels lack
 * them), alltoallv refused; data movement of int16 and bool runs (as
 * bytes) and is exact, blocking and on a CUDA stream. */
static int unsupported(braid_result r, braid_comm *c, int rank,
                       const char *word, int code) {
  const char *msg = braid_comm_last_error(c);
  if (r == BRAID_ERR_UNSUPPORTED && strstr(msg, word) != NULL &&
      strstr(msg, "device buffers") != NULL)
    return 0;
  fprintf(stderr, "rank %d: %s (%s), wanted unsupported naming '%s'\n", rank,
          braid_result_string(r), msg, word);
  return code;
}

static int new_dtypes(braid_comm *c, int rank, int n) {
  enum { K = 1000 };
  CK(cudaSetDevice(0));
  float hf[K];
  for (int i = 0; i < K; i++)
    hf[i] = 0.0f;
  float *d = NULL;
  cudaStream_t s;
  braid_stream *bs = NULL;
  int rc = gpu_made_and_wrapped(rank, &d, hf, sizeof hf, &s, &bs);
  if (rc)
    return rc;
  int16_t *d16 = (int16_t *)d;
  uint8_t *db = (uint8_t *)d + K * 2;
  rc =
      unsupported(braid_allreduce(d16, d16, 8, BRAID_INT16, BRAID_SUM, c, NULL),
                  c, rank, "op sum on dtype int16", 30);
  if (rc == 0)
    rc = unsupported(braid_allreduce(d, d, 8, BRAID_INT32, BRAID_BXOR, c, bs),
                     c, rank, "op bxor on dtype int32", 31);
  if (rc == 0)
    rc = unsupported(braid_reduce(db, db, 8, BRAID_BOOL, BRAID_MAX, 0, c, NULL),
                     c, rank, "op max on dtype bool", 32);
  size_t cnt[8], dsp[8];
  for (int j = 0; j < n; j++) {
    cnt[j] = 2;
    dsp[j] = (size_t)j * 2;
  }
  if (rc == 0)
    rc = unsupported(braid_alltoallv(d16, cnt, dsp, d16 + 64, cnt, dsp,
                                     BRAID_INT16, c, NULL),
                     c, rank, "alltoallv", 33);
  /* movement: root 0 broadcasts int16 values, then bool bytes */
  int16_t h16[K];
  uint8_t hb[K];
  for (int i = 0; i < K; i++) {
    h16[i] = rank == 0 ? (int16_t)(i * 37 - 9000) : 0;
    hb[i] = rank == 0 ? (uint8_t)(i % 3 == 0 ? 0 : i % 251) : 0x5a;
  }
  CK(cudaMemcpy(d16, h16, sizeof h16, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
  if (rc == 0 &&
      (braid_broadcast(d16, d16, K, BRAID_INT16, 0, c, NULL) != BRAID_SUCCESS ||
       braid_broadcast(db, db, K, BRAID_BOOL, 0, c, bs) != BRAID_SUCCESS ||
       braid_stream_synchronize(bs) != BRAID_SUCCESS)) {
    fprintf(stderr, "rank %d: broadcast of int16/bool: %s\n", rank,
            braid_comm_last_error(c));
    rc = 34;
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h16, d16, sizeof h16, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb, db, sizeof hb, cudaMemcpyDeviceToHost));
  for (int i = 0; i < K && rc == 0; i++)
    if (h16[i] != (int16_t)(i * 37 - 9000) ||
        hb[i] != (uint8_t)(i % 3 == 0 ? 0 : i % 251)) {
      fprintf(stderr, "rank %d: element %d is %d / %d after broadcast\n", rank,
              i, h16[i], hb[i]);
      rc = 35;
    }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  return rc;
}

Test(gpu_args, new_dtypes_and_ops_on_device_buffers, .timeout = 120) {
  gpu_run(new_dtypes, 2, "int16/bool on device");
}

Test(gpu_args, buffers_past_their_allocation_are_invalid, .timeout = 120) {
  gpu_run(past_the_end, 2, "past the end");
  gpu_run(past_the_end, 3, "past the end");
}

Test(gpu_args, calls_on_a_capturing_stream_are_unsupported, .timeout = 120) {
  gpu_run(captured, 2, "capture");
}
