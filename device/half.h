/*
 * float16 and bfloat16 to and from float in software, exact and rounding to
 * nearest even: written once for the CPU kernels (src/reduce.c) and the
 * CUDA kernels (device/reduce_ops.cuh, which uses the hardware conversions
 * for numbers on the device and these for NaNs and on the host), so that
 * both give the same bits.
 *
 *  - float16 to float: exact; a NaN stays NaN with its payload, made quiet.
 *  - float to float16: round to nearest, ties to even; 65520 and above
 *    (in magnitude) become infinity; a NaN stays NaN, quiet, its payload
 *    truncated to float16's 10 bits.
 *  - bfloat16 to float: exact (the top 16 bits of a float).
 *  - float to bfloat16: round to nearest, ties to even; a NaN stays NaN,
 *    made quiet.
 */
#ifndef BRAID_DEVICE_HALF_H
#define BRAID_DEVICE_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HALF_HD static __host__ __device__ __forceinline__
#else
#define HALF_HD static inline
#endif

HALF_HD uint32_t half_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

HALF_HD float half_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

HALF_HD float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) /* Inf, or NaN made quiet */
    return half_float(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0));
  if (e == 0) {
    if (m == 0)
      return half_float(sign);
    uint32_t fe = 113; /* exponent of 2^-14 in float's bias */
    while (!(m & 0x400u)) {
      m <<= 1;
      fe--;
    }
    return half_float(sign | (fe << 23) | ((m & 0x3ffu) << 13));
  }
  return half_float(sign | ((e + 112u) << 23) | (m << 13));
}

HALF_HD uint16_t half_from_float(float f) {
  uint32_t x = half_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, payload truncated */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) {  /* below 2^-14: subnormal half (or zero) */
    if (ax <= 0x33000000u) /* <= 2^-25: ties to even give zero */
      return sign;
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* value in units of 2^-24 is m >> shift */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
      q++;
    return (uint16_t)(sign | q);
  }
  uint32_t hb = (ax >> 13) - (112u << 10);
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (hb & 1u)))
    hb++;
  return (uint16_t)(sign | hb);
}

HALF_HD float bf16_to_float(uint16_t h) {
  return half_float((uint32_t)h << 16);
}

/* The rounding of float's bits x to bfloat16. */
HALF_HD uint16_t bf16_round_bits(uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

HALF_HD uint16_t bf16_from_float(float f) {
  return bf16_round_bits(half_bits(f));
}

#endif
