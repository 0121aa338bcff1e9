/*
 * CPU reduction kernels, one per dtype x op, vectorised by the compiler
 * (fp16/bf16 through F16C / AVX-512 conversions where the CPU has them).
 *
 * Results are the same on every CPU and code path:
 *  - integer sum/prod wrap modulo 2^bits (no undefined signed overflow);
 *    band/bor/bxor are bitwise, on the integer types only (NULL on floats);
 *  - bool (a nonzero byte is true, results 0 or 1): sum/max/bor are or,
 *    prod/min/band are and, bxor is xor;
 *  - float min/max propagate NaN: a NaN in a gives a, else a NaN in b gives
 *    b; for operands that compare equal (+0, -0) the result is b;
 *  - float16/bfloat16 are widened to float, reduced, and rounded to nearest
 *    even (subnormals kept, overflow to infinity, NaN made quiet);
 *  - float8 e4m3/e5m2 likewise, saturating at the largest finite
 * (device/fp8.h). dst may equal a and/or b exactly (no partial overlap);
 * buffers need no particular alignment.
 */
#ifndef BRAID_SRC_REDUCE_H
#define BRAID_SRC_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b. BRAID_AVG gives
 * the sum kernel (the division is red_scale's job, once, at the end). */
typedef void (*red_fn)(void *dst, const void *a, const void *b, size_t n);
red_fn red_get(braid_dtype dt, braid_op op);
/* red_get's kernel with its operands the other way round: dst[i] = b[i] op
 * a[i] (a schedule's RECV_REDUCE_REV, where the message is the left
 * operand); NULL where red_get has none. */
red_fn red_get_rev(braid_dtype dt, braid_op op);
/* buf[i] /= divisor (integers: truncated toward zero) — for BRAID_AVG. */
void red_div(void *buf, size_t n, braid_dtype dt, int divisor);
/* dst[i] = src[i] * *scalar (one element of dt), rounded to dt once
 * (integers wrap): the pre-multiplied sum's local step. dst may equal src.
 * 0, or -1 for a dtype without it (bool). */
int red_premul(void *dst, const void *src, size_t n, braid_dtype dt,
               const void *scalar);
/* buf[i] = buf[i] != 0: bool results where no kernel ran. */
void red_bool_norm(void *buf, size_t n);
/* The portable kernel (no ISA-specific code), same results as red_get's;
 * for tests that compare code paths. */
red_fn red_get_scalar(braid_dtype dt, braid_op op);
/* The kernel of one code path: 0 portable, 1 AVX2, 2 AVX2 + F16C, 3 AVX2 +
 * AVX-512 (float16/bfloat16); NULL when this CPU or build lacks it. */
red_fn red_get_path(braid_dtype dt, braid_op op, int path);
/* The code path red_get uses on this CPU, in words ("avx2+f16c", ...). */
const char *red_isa(void);
/* Conversions, exposed for tests and tools. */
float red_half_to_float(uint16_t h);
uint16_t red_float_to_half(float f);
float red_bf16_to_float(uint16_t h);
uint16_t red_float_to_bf16(float f);

#endif
