/*
 * Pre-multiplied sums (braid_op_create_premul_sum) on device buffers: each
 * rank's input is multiplied by its scalar on the GPU (cudev_scale), then
 * summed. Forked ranks on one GPU (skips without one), 2 and 3 of them,
 * rank r's scalar r + 1: allreduce (also in place), reduce at the last
 * rank, reduce_scatter; float32, bfloat16, float16, float8_e4m3 and int32;
 * a host scalar and a device scalar; blocking and on a CUDA stream. The
 * values are small integers, so every product and sum is exact and the
 * result is compared bit for bit with the sum computed here. A device
 * scalar is read when the call runs: changed between two calls, the second
 * uses the new value. The op stays usable after the calls and is destroyed
 * once its stream is synchronised.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/fp8.h"
#include "src/reduce.h"
#include "test_gpu_ranks.h"

enum { K = 1000 }; /* elements per block */

/* v (a small integer) as one element of dt. */
static void put(braid_dtype dt, void *buf, size_t i, int v) {
  float f = (float)v;
  uint32_t bits;
  switch (dt) {
  case BRAID_FLOAT32:
    ((float *)buf)[i] = f;
    break;
  case BRAID_BFLOAT16:
    memcpy(&bits, &f, sizeof bits);
    ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
    break;
  case BRAID_FLOAT16:
    ((uint16_t *)buf)[i] = red_float_to_half(f);
    break;
  case BRAID_FLOAT8_E4M3:
    ((uint8_t *)buf)[i] = fp8_from_float(f, 0);
    break;
  default:
    ((int32_t *)buf)[i] = v;
    break;
  }
}

/* Rank r's input at element i (of the whole input), at most 2: with
 * scalars up to 3 and 3 ranks a sum is at most 12, exact in e4m3. */
static int x_of(int r, size_t i) { return (int)((i * 7 + (size_t)r * 5) % 3); }

typedef struct pcase {
  braid_dtype dt;
  int coll; /* 0 allreduce, 1 in-place allreduce, 2 reduce, 3 reduce_scatter */
  int on_device, stream;
} pcase;

static const char *coll_name(int coll) {
  static const char *const names[] = {"allreduce", "in-place allreduce",
                                      "reduce", "reduce_scatter"};
  return names[coll];
}

/* Runs one call of case p with op (made with scalars scale(r)), checks
 * the result against sum over r of scale(r) * x_of(r, i). */
static int run_case(braid_comm *c, int rank, int n, const pcase *p, braid_op op,
                    int scale_of_rank1, braid_stream *bs, cudaStream_t s,
                    void *din, void *dout, unsigned char *h) {
  size_t es = braid_dtype_size(p->dt);
  int rs = p->coll == 3;
  size_t nin = rs ? K * (size_t)n : K, nout = K;
  int root = n - 1;
  for (size_t i = 0; i < nin; i++)
    put(p->dt, h, i, x_of(rank, i));
  CK(cudaMemcpy(din, h, nin * es, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0x5a, nout * es));
  CK(cudaDeviceSynchronize());
  braid_stream *st = p->stream ? bs : NULL;
  braid_result r;
  void *out = p->coll == 1 ? din : dout;
  switch (p->coll) {
  case 0:
  case 1:
    r = braid_allreduce(din, out, K, p->dt, op, c, st);
    break;
  case 2:
    r = braid_reduce(din, dout, K, p->dt, op, root, c, st);
    break;
  default:
    r = braid_reduce_scatter(din, dout, K, p->dt, op, c, st);
    break;
  }
  if (r == BRAID_SUCCESS && st != NULL)
    r = braid_stream_synchronize(st);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: %s %s: %s (%s)\n", rank, coll_name(p->coll),
            braid_dtype_name(p->dt), braid_result_string(r),
            braid_comm_last_error(c));
    return 20;
  }
  CK(cudaStreamSynchronize(s));
  if (p->coll == 2 && rank != root)
    return 0;
  unsigned char *got = h + nin * es, want[8];
  CK(cudaMemcpy(got, out, nout * es, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nout; i++) {
    size_t at = rs ? (size_t)rank * K + i : i;
    int sum = 0;
    for (int q = 0; q < n; q++)
      sum += (q == 1 ? scale_of_rank1 : q + 1) * x_of(q, at);
    put(p->dt, want, 0, sum);
    if (memcmp(got + i * es, want, es) != 0) {
      fprintf(stderr,
              "rank %d of %d: %s %s, %s scalar, %s: element %zu differs "
              "from %d\n",
              rank, n, coll_name(p->coll), braid_dtype_name(p->dt),
              p->on_device ? "device" : "host",
              p->stream ? "CUDA stream" : "blocking", i, sum);
      return 21;
    }
  }
  return 0;
}

static int premul_cases(braid_comm *c, int rank, int n) {
  static const braid_dtype dts[] = {BRAID_FLOAT32, BRAID_BFLOAT16,
                                    BRAID_FLOAT16, BRAID_FLOAT8_E4M3,
                                    BRAID_INT32};
  CK(cudaSetDevice(0));
  size_t bytes = (size_t)K * 3 * 4; /* n <= 3 blocks of 4-byte elements */
  unsigned char *h = malloc(2 * bytes);
  void *din = NULL, *dout = NULL, *dscalar = NULL;
  if (h == NULL)
    return 3;
  CK(cudaMalloc(&din, bytes));
  CK(cudaMalloc(&dout, bytes));
  CK(cudaMalloc(&dscalar, 8));
  cudaStream_t s;
  braid_stream *bs = NULL;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS)
    return 10;
  int rc = 0;
  for (size_t d = 0; d < sizeof dts / sizeof dts[0] && rc == 0; d++) {
    braid_dtype dt = dts[d];
    unsigned char scalar[8] = {0};
    put(dt, scalar, 0, rank + 1);
    for (int on_device = 0; on_device < 2 && rc == 0; on_device++) {
      CK(cudaMemcpy(dscalar, scalar, 8, cudaMemcpyHostToDevice));
      braid_op op;
      braid_result r = braid_op_create_premul_sum(
          &op, on_device ? dscalar : (void *)scalar, dt, on_device, c);
      if (r != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: create %s: %s (%s)\n", rank,
                braid_dtype_name(dt), braid_result_string(r),
                braid_comm_last_error(c));
        rc = 11;
        break;
      }
      for (int coll = 0; coll < 4 && rc == 0; coll++)
        for (int stream = 0; stream < 2 && rc == 0; stream++) {
          pcase p = {dt, coll, on_device, stream};
          rc = run_case(c, rank, n, &p, op, 2, bs, s, din, dout, h);
        }
      if (rc == 0 && on_device) {
        /* the device scalar changed: rank 1's becomes 3 (read as the call
         * runs, blocking and on the stream) */
        unsigned char s3[8] = {0};
        put(dt, s3, 0, 3);
        if (rank == 1)
          CK(cudaMemcpy(dscalar, s3, 8, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize());
        for (int stream = 0; stream < 2 && rc == 0; stream++) {
          pcase p = {dt, 0, 1, stream};
          rc = run_case(c, rank, n, &p, op, n > 1 ? 3 : 2, bs, s, din, dout, h);
        }
      }
      if (braid_op_destroy(op, c) != BRAID_SUCCESS && rc == 0) {
        fprintf(stderr, "rank %d: op_destroy: %s\n", rank,
                braid_comm_last_error(c));
        rc = 12;
      }
    }
  }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(din);
  cudaFree(dout);
  cudaFree(dscalar);
  free(h);
  return rc;
}

Test(gpu_premul, device_buffers_2_ranks, .timeout = 200) {
  gpu_run(premul_cases, 2, "premul on device buffers");
}

Test(gpu_premul, device_buffers_3_ranks, .timeout = 200) {
  gpu_run(premul_cases, 3, "premul on device buffers");
}
