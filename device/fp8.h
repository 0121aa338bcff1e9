/*
 * The 8-bit floats BRAID_FLOAT8_E4M3 and BRAID_FLOAT8_E5M2: conversions to
 * and from float and the reductions' element operations, written once for
 * the CPU kernels (src/reduce.c) and the CUDA kernels
 * (device/reduce_ops.cuh), so that both give the same bits.
 *
 *  - e4m3 ("fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no
 *    infinities; S.1111.111 is NaN; largest finite 448; subnormals down to
 *    2^-9.
 *  - e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
 *    infinities (S.11111.00) and NaNs; largest finite 57344; subnormals
 *    down to 2^-16.
 *
 * float to fp8 rounds to nearest, ties to even, and saturates: a finite
 * value or an infinity beyond the largest finite gives the largest finite
 * of its sign (CUDA's __NV_SATFINITE, which NCCL's fp8 reductions use); a
 * NaN stays NaN with its sign (e4m3 S.1111.111; e5m2 quiet, the payload
 * truncated to its one remaining bit); zero keeps its sign.
 *
 * An operation widens both operands to float (exact), applies the op and
 * rounds the result back once. float holds every sum and product of two
 * fp8 values exactly, so this is the correctly rounded result, the same as
 * NCCL's (which goes through half, whose double rounding is harmless at
 * these widths; tests/reduce checks that for every pair). min/max: a NaN
 * operand a gives a, else a NaN b gives b, operands that compare equal give
 * b; sum/prod: a NaN operand a gives a, else a NaN b gives b (quieted); a
 * NaN made by the operation itself (inf - inf, 0 * inf) is the positive
 * canonical NaN (e5m2 0x7e), so that CPUs and GPUs agree.
 */
#ifndef BRAID_DEVICE_FP8_H
#define BRAID_DEVICE_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FP8_HD static __host__ __device__ __forceinline__
#else
#define FP8_HD static inline
#endif

/* e5m2 != 0: E5M2, else E4M3. Operations: 0 sum, 1 prod, 2 min, 3 max. */
enum { FP8_SUM = 0, FP8_PROD = 1, FP8_MIN = 2, FP8_MAX = 3 };
enum { FP8_E4M3_MAX = 0x7e, FP8_E5M2_MAX = 0x7b, FP8_NAN = 0x7f };

FP8_HD uint32_t fp8_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

FP8_HD float fp8_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Exact: every fp8 value is a float. */
FP8_HD float fp8_to_float(uint8_t x, int e5m2) {
  const uint32_t mb = e5m2 ? 2u : 3u, bias = e5m2 ? 15u : 7u;
  uint32_t sign = (uint32_t)(x & 0x80u) << 24;
  uint32_t e = (uint32_t)(x & 0x7fu) >> mb;
  uint32_t m = x & ((1u << mb) - 1u);
  if (e5m2 && e == 31u) /* infinity, or NaN made quiet */
    return fp8_float(sign | 0x7f800000u | (m ? 0x400000u | (m << 21) : 0u));
  if (!e5m2 && e == 15u && m == 7u)
    return fp8_float(sign | 0x7fc00000u);
  if (e == 0u) /* m units of the smallest subnormal, 2^-9 or 2^-16 */
    return fp8_float(sign |
                     fp8_bits((float)m * (e5m2 ? 1.0f / 65536 : 1.0f / 512)));
  return fp8_float(sign | ((e - bias + 127u) << 23) | (m << (23u - mb)));
}

FP8_HD uint8_t fp8_from_float(float f, int e5m2) {
  const uint32_t mb = e5m2 ? 2u : 3u, bias = e5m2 ? 15u : 7u;
  /* the largest finite (448, 57344) and the smallest normal (2^-6, 2^-14) */
  const uint32_t maxf = e5m2 ? 0x47600000u : 0x43e00000u;
  const uint32_t minn = e5m2 ? 0x38800000u : 0x3c800000u;
  uint32_t x = fp8_bits(f), ax = x & 0x7fffffffu;
  uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
  if (ax > 0x7f800000u) /* NaN */
    return (uint8_t)(sign | (e5m2 ? 0x7eu | ((ax >> 21) & 1u) : 0x7fu));
  if (ax > maxf) /* saturate, infinities included */
    return (uint8_t)(sign | (e5m2 ? FP8_E5M2_MAX : FP8_E4M3_MAX));
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t q, rem, half;
  if (ax < minn) {
    /* subnormal (or zero): m >> shift units of the smallest subnormal */
    uint32_t shift = 151u - bias - mb - e;
    if (e == 0u || shift > 24u)
      return sign; /* below half the smallest subnormal */
    q = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else {
    q = ((e - 127u + bias) << mb) | ((ax & 0x7fffffu) >> (23u - mb));
    rem = ax & ((1u << (23u - mb)) - 1u);
    half = 1u << (22u - mb);
  }
  if (rem > half || (rem == half && (q & 1u)))
    q++; /* a carry into the exponent is the next binade, as it should be */
  return (uint8_t)(sign | q);
}

/* The float result of op on two widened operands, with the NaN rules
 * above; fp8_from_float rounds it. */
FP8_HD float fp8_float_op(int op, float u, float v) {
  if (op == FP8_MIN)
    return u != u ? u : (u < v ? u : v);
  if (op == FP8_MAX)
    return u != u ? u : (u > v ? u : v);
  if (u != u)
    return u;
  if (v != v)
    return v;
  float r = op == FP8_PROD ? u * v : u + v;
  return r != r ? fp8_float(0x7fc00000u) : r;
}

FP8_HD uint8_t fp8_op(int op, uint8_t a, uint8_t b, int e5m2) {
  return fp8_from_float(
      fp8_float_op(op, fp8_to_float(a, e5m2), fp8_to_float(b, e5m2)), e5m2);
}

/* a / divisor, rounded once (BRAID_AVG). */
FP8_HD uint8_t fp8_div(uint8_t a, int divisor, int e5m2) {
  float u = fp8_to_float(a, e5m2);
  return fp8_from_float(u != u ? u : u / (float)divisor, e5m2);
}

/* a * scalar, rounded once (the pre-multiplied sum). */
FP8_HD uint8_t fp8_mul(uint8_t a, uint8_t scalar, int e5m2) {
  return fp8_op(FP8_PROD, a, scalar, e5m2);
}

#endif
