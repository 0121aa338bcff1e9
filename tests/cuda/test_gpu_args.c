/*
 * Device-buffer calls that braid refuses, each with a message naming what
 * was wrong, leaving the communicator usable: a buffer that runs past the
 * device memory mapped there (the GPU would fault, and a fault ends the
 * process's CUDA context), and a call on a stream being captured into a
 * CUDA graph. Forked ranks on one GPU; skips without one. (Buffers mixing
 * host and device memory: test_gpu_stream.c, mixing.)
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

Test(gpu_args, buffers_past_their_allocation_are_invalid, .timeout = 120) {
  gpu_run(past_the_end, 2, "past the end");
  gpu_run(past_the_end, 3, "past the end");
}

Test(gpu_args, calls_on_a_capturing_stream_are_unsupported, .timeout = 120) {
  gpu_run(captured, 2, "capture");
}
