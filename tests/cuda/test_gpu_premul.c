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
 * once its stream is synchronised. The suite gpu_wide (below) checks how
 * the same narrow floats' sums and averages round through the API: once
 * in the collective kernel, at each step under BRAID_DETERMINISTIC and on
 * every other path.
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

/* ---- wide folds through the API ----------------------------------------
 * float16, bfloat16 and float8_e4m3 sums and averages of WK elements on 3
 * and 4 ranks, rank 0 holding wide_big(dt) (negated at odd elements) and the
 * others 1, so that the ranks' elements folded in float and rounded once
 * differ from the fold rounded at each step in rank order (big + 1 rounds
 * back to big). With braid's defaults allreduce, reduce and reduce_scatter
 * run as collective kernels (counted on the stream) and give the value
 * rounded once; with braid_config.deterministic = 1, or on any other path
 * (BRAID_CUDA_KERNEL_MAX=0: the ctests of the pre-multiplied sums above),
 * the per-step fold, bit for bit. */
enum { WK = 1001 };

static const braid_dtype wide_dts[] = {BRAID_FLOAT16, BRAID_BFLOAT16,
                                       BRAID_FLOAT8_E4M3};
static const braid_op wide_ops[] = {BRAID_SUM, BRAID_AVG};
static const int wide_colls[] = {0, 2, 3}; /* coll_name's numbering */

/* Whether the ranks' communicators are deterministic (gpu_rank_cfg). */
static int wide_det;

/* 2^p for a significand of p bits (11, 8, 4): the spacing there is 2, so
 * big + 1 is a tie that rounds back to big (even). */
static float wide_big(braid_dtype dt) {
  return dt == BRAID_FLOAT16 ? 2048.0f : dt == BRAID_BFLOAT16 ? 256.0f : 16.0f;
}

static float wide_x(braid_dtype dt, int r, size_t i) {
  float v = r == 0 ? wide_big(dt) : 1.0f;
  return i % 2 ? -v : v;
}

static uint32_t narrow_bits(braid_dtype dt, float f) {
  return dt == BRAID_FLOAT16    ? red_float_to_half(f)
         : dt == BRAID_BFLOAT16 ? red_float_to_bf16(f)
                                : fp8_from_float(f, 0);
}

static float widen_bits(braid_dtype dt, uint32_t x) {
  return dt == BRAID_FLOAT16    ? red_half_to_float((uint16_t)x)
         : dt == BRAID_BFLOAT16 ? red_bf16_to_float((uint16_t)x)
                                : fp8_to_float((uint8_t)x, 0);
}

static void put_bits(braid_dtype dt, void *buf, size_t i, uint32_t x) {
  if (braid_dtype_size(dt) == 2)
    ((uint16_t *)buf)[i] = (uint16_t)x;
  else
    ((uint8_t *)buf)[i] = (uint8_t)x;
}

static uint32_t get_bits(braid_dtype dt, const void *buf, size_t i) {
  return braid_dtype_size(dt) == 2 ? ((const uint16_t *)buf)[i]
                                   : ((const uint8_t *)buf)[i];
}

/* Element i of n ranks' op: want[0] folded in float in rank order and
 * rounded once (avg: divided in float first), want[1] the serial fold of
 * src/reduce.c's kernels, rounded at each step (avg: then divided). */
static void wide_want(braid_dtype dt, braid_op op, int n, size_t i,
                      uint32_t want[2]) {
  float f = 0.0f;
  unsigned char acc[4], x[4];
  for (int q = 0; q < n; q++) {
    uint32_t b = narrow_bits(dt, wide_x(dt, q, i));
    f += widen_bits(dt, b);
    put_bits(dt, q == 0 ? acc : x, 0, b);
    if (q > 0)
      red_get(dt, BRAID_SUM)(acc, acc, x, 1);
  }
  if (op == BRAID_AVG) {
    f /= (float)n;
    red_div(acc, 1, dt, n);
  }
  want[0] = narrow_bits(dt, f);
  want[1] = get_bits(dt, acc, 0);
}

/* One call of coll with dt and op on the stream; the rank's output
 * against want[wide]. */
static int wide_case(braid_comm *c, int rank, int n, braid_dtype dt,
                     braid_op op, int coll, int wide, braid_stream *bs,
                     cudaStream_t s, void *din, void *dout, unsigned char *h) {
  size_t es = braid_dtype_size(dt);
  int rs = coll == 3, root = n - 1;
  size_t nin = rs ? WK * (size_t)n : WK;
  for (size_t i = 0; i < nin; i++)
    put_bits(dt, h, i, narrow_bits(dt, wide_x(dt, rank, i)));
  CK(cudaMemcpy(din, h, nin * es, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0x5a, WK * es));
  CK(cudaDeviceSynchronize());
  braid_result r = coll == 0 ? braid_allreduce(din, dout, WK, dt, op, c, bs)
                   : coll == 2
                       ? braid_reduce(din, dout, WK, dt, op, root, c, bs)
                       : braid_reduce_scatter(din, dout, WK, dt, op, c, bs);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: %s %s: %s (%s)\n", rank, coll_name(coll),
            braid_dtype_name(dt), braid_result_string(r),
            braid_comm_last_error(c));
    return 30;
  }
  CK(cudaStreamSynchronize(s));
  if (coll == 2 && rank != root)
    return 0;
  CK(cudaMemcpy(h, dout, WK * es, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < WK; i++) {
    uint32_t want[2], got = get_bits(dt, h, i);
    wide_want(dt, op, n, rs ? (size_t)rank * WK + i : i, want);
    if (got != want[!wide]) {
      fprintf(stderr,
              "rank %d of %d: %s %s %s: element %zu is %g (0x%x), want %g "
              "(%s; %g rounded %s)\n",
              rank, n, coll_name(coll), braid_dtype_name(dt),
              op == BRAID_SUM ? "sum" : "avg", i, (double)widen_bits(dt, got),
              (unsigned)got, (double)widen_bits(dt, want[!wide]),
              wide ? "rounded once" : "rounded at each step",
              (double)widen_bits(dt, want[wide]),
              wide ? "at each step" : "once");
      return 31;
    }
  }
  return 0;
}

static int wide_cases(braid_comm *c, int rank, int n) {
  CK(cudaSetDevice(0));
  size_t bytes = (size_t)WK * 4 * 2; /* n <= 4 blocks, elements <= 2 bytes */
  unsigned char *h = malloc(bytes);
  void *din = NULL, *dout = NULL;
  if (h == NULL)
    return 3;
  CK(cudaMalloc(&din, bytes));
  CK(cudaMalloc(&dout, bytes));
  cudaStream_t s;
  braid_stream *bs = NULL;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS)
    return 10;
  /* rounded once only by the collective kernel, and not under
   * BRAID_DETERMINISTIC */
  int det = wide_det || cfg_get()->deterministic;
  int wide = env_on("BRAID_CUDA_KERNEL_MAX") && !det, rc = 0;
  uint64_t calls = 0;
  for (size_t d = 0; d < sizeof wide_dts / sizeof wide_dts[0]; d++)
    for (size_t o = 0; o < sizeof wide_ops / sizeof wide_ops[0]; o++)
      for (size_t k = 0; k < sizeof wide_colls / sizeof wide_colls[0]; k++) {
        if (rc == 0)
          rc = wide_case(c, rank, n, wide_dts[d], wide_ops[o], wide_colls[k],
                         wide, bs, s, din, dout, h);
        calls++;
      }
  if (rc == 0)
    rc = gpu_kernel_calls(rank, &bs, 1, calls);
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(din);
  cudaFree(dout);
  free(h);
  return rc;
}

/* The inputs tell the two folds apart at every element, for n ranks. */
static void wide_inputs_tell(int n) {
  for (size_t d = 0; d < sizeof wide_dts / sizeof wide_dts[0]; d++)
    for (size_t o = 0; o < sizeof wide_ops / sizeof wide_ops[0]; o++)
      for (size_t i = 0; i < 2; i++) {
        uint32_t want[2];
        wide_want(wide_dts[d], wide_ops[o], n, i, want);
        cr_assert_neq(want[0], want[1],
                      "%s %s on %d ranks: rounded once and at each step agree",
                      braid_dtype_name(wide_dts[d]),
                      wide_ops[o] == BRAID_SUM ? "sum" : "avg", n);
      }
}

static void wide_run(int n, int det) {
  wide_inputs_tell(n);
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.deterministic = det ? 1 : 0;
  gpu_rank_cfg = &cfg;
  wide_det = det;
  gpu_run(wide_cases, n, det ? "wide folds, deterministic" : "wide folds");
}

Test(gpu_wide, narrow_sums_3_ranks, .timeout = 200) { wide_run(3, 0); }
Test(gpu_wide, narrow_sums_4_ranks, .timeout = 200) { wide_run(4, 0); }
Test(gpu_wide, narrow_sums_deterministic_3_ranks, .timeout = 200) {
  wide_run(3, 1);
}
Test(gpu_wide, narrow_sums_deterministic_4_ranks, .timeout = 200) {
  wide_run(4, 1);
}
