/*
 * CPU reduction kernels: dst[i] = a[i] op b[i].
 *
 * Semantics (the same on every code path; tests compare them bit for bit):
 *  - integers: sum and prod wrap modulo 2^bits (computed in the unsigned
 *    type, so signed overflow is never undefined); min/max compare as the
 *    signed or unsigned type; band/bor/bxor are bitwise.
 *  - bool: one byte, nonzero is true, results 0 or 1: sum, max and bor are
 *    or; prod, min and band are and; bxor is xor.
 *  - float types have no bitwise kernels (red_get gives NULL; the API
 *    refuses such calls before anything is sent).
 *  - float32/float64: IEEE arithmetic in the type. min/max propagate NaN: if
 *    a[i] is NaN the result is a[i], else if b[i] is NaN it is b[i]. When the
 *    operands compare equal (+0 and -0) the result is b[i].
 *  - float16/bfloat16: both operands are widened to float (exact), reduced in
 *    float, and rounded back to nearest, ties to even. Because float carries
 *    more than twice the precision of either format, this equals the
 *    correctly rounded result in the narrow format. Overflow gives infinity;
 *    subnormals are kept (never flushed). A NaN result is quiet: sign kept,
 *    payload truncated to the narrow format's width, quiet bit set.
 *
 * Every kernel accepts dst == a and/or dst == b (exactly; partial overlap is
 * not allowed), and buffers at any address (misaligned ones are bounced
 * through an aligned block). The loops are written as fixed-width blocks over
 * restrict pointers so the compiler vectorises them at -O2; one copy is built
 * for the baseline ISA and one for AVX2. float16 and bfloat16 have explicit
 * AVX2 and AVX-512 versions (float16 on the F16C / AVX-512 conversions).
 * AVX512_BF16's conversion instruction is not used: it flushes subnormals to
 * zero, which the portable path does not; the integer rounding used instead is
 * exact and just as fast.
 */
#include "reduce.h"

#include <string.h>

#include "device/fp8.h"
#include "device/half.h"

#if defined(__x86_64__) || defined(__i386__)
#define RED_X86 1
#include <immintrin.h>
#define ATTR_base
#define ATTR_avx2 __attribute__((target("avx2")))
#else
#define RED_X86 0
#define ATTR_base
#endif

/* Block width in bytes: the inner loop has a constant trip count. */
#define RED_BLOCK 128

/* ---- scalar conversions ------------------------------------------------ */

/* float16 and bfloat16: device/half.h, shared with the CUDA kernels. */
float red_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t red_float_to_half(float f) { return half_from_float(f); }
float red_bf16_to_float(uint16_t h) { return bf16_to_float(h); }
uint16_t red_float_to_bf16(float f) { return bf16_from_float(f); }

static inline float bf2f(uint16_t h) { return bf16_to_float(h); }
static inline uint16_t f2bf(float f) { return bf16_from_float(f); }

/* ---- element operations ------------------------------------------------ */

#define OP_ISUM(T, U, u, v) ((T)((U)(u) + (U)(v)))
#define OP_IPROD(T, U, u, v) ((T)((U)(u) * (U)(v)))
#define OP_IMIN(T, U, u, v) ((u) < (v) ? (u) : (v))
#define OP_IMAX(T, U, u, v) ((u) > (v) ? (u) : (v))
#define OP_FSUM(T, U, u, v) ((u) + (v))
#define OP_FPROD(T, U, u, v) ((u) * (v))
#define OP_FMIN(T, U, u, v) ((u) != (u) ? (u) : ((u) < (v) ? (u) : (v)))
#define OP_FMAX(T, U, u, v) ((u) != (u) ? (u) : ((u) > (v) ? (u) : (v)))
#define OP_IBAND(T, U, u, v) ((T)((U)(u) & (U)(v)))
#define OP_IBOR(T, U, u, v) ((T)((U)(u) | (U)(v)))
#define OP_IBXOR(T, U, u, v) ((T)((U)(u) ^ (U)(v)))
/* bool: a nonzero byte is true; results are 0 or 1 */
#define OP_LOR(T, U, u, v) ((T)(((u) != 0) | ((v) != 0)))
#define OP_LAND(T, U, u, v) ((T)(((u) != 0) & ((v) != 0)))
#define OP_LXOR(T, U, u, v) ((T)(((u) != 0) ^ ((v) != 0)))
/* Narrow floats: widen with W, apply the float op, narrow with N. */
#define OP_NARROW(FOP, W, N, u, v) N(FOP(float, float, W(u), W(v)))
#define OP_BSUM(T, U, u, v) OP_NARROW(OP_FSUM, bf2f, f2bf, u, v)
#define OP_BPROD(T, U, u, v) OP_NARROW(OP_FPROD, bf2f, f2bf, u, v)
#define OP_BMIN(T, U, u, v) OP_NARROW(OP_FMIN, bf2f, f2bf, u, v)
#define OP_BMAX(T, U, u, v) OP_NARROW(OP_FMAX, bf2f, f2bf, u, v)
#define OP_HSUM(T, U, u, v)                                                    \
  OP_NARROW(OP_FSUM, red_half_to_float, red_float_to_half, u, v)
#define OP_HPROD(T, U, u, v)                                                   \
  OP_NARROW(OP_FPROD, red_half_to_float, red_float_to_half, u, v)
#define OP_HMIN(T, U, u, v)                                                    \
  OP_NARROW(OP_FMIN, red_half_to_float, red_float_to_half, u, v)
#define OP_HMAX(T, U, u, v)                                                    \
  OP_NARROW(OP_FMAX, red_half_to_float, red_float_to_half, u, v)

/* 8-bit floats (device/fp8.h): widened to float, reduced, rounded back. */
#define OP_E4SUM(T, U, u, v) (T) fp8_op(FP8_SUM, u, v, 0)
#define OP_E4PROD(T, U, u, v) (T) fp8_op(FP8_PROD, u, v, 0)
#define OP_E4MIN(T, U, u, v) (T) fp8_op(FP8_MIN, u, v, 0)
#define OP_E4MAX(T, U, u, v) (T) fp8_op(FP8_MAX, u, v, 0)
#define OP_E5SUM(T, U, u, v) (T) fp8_op(FP8_SUM, u, v, 1)
#define OP_E5PROD(T, U, u, v) (T) fp8_op(FP8_PROD, u, v, 1)
#define OP_E5MIN(T, U, u, v) (T) fp8_op(FP8_MIN, u, v, 1)
#define OP_E5MAX(T, U, u, v) (T) fp8_op(FP8_MAX, u, v, 1)

/* Buffers not aligned to their element size (a packed struct, a byte offset)
 * go through an aligned bounce buffer in blocks, so that no element is
 * accessed at a misaligned address. Blocks are read before they are
 * written, so dst == a or dst == b still holds. */
static void red_misaligned(red_fn aligned, size_t es, void *dst, const void *a,
                           const void *b, size_t n) {
  _Alignas(64) unsigned char ta[2048], tb[2048];
  size_t per = sizeof ta / es;
  unsigned char *d = dst;
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i += per) {
    size_t k = n - i < per ? n - i : per;
    memcpy(ta, x + i * es, k * es);
    memcpy(tb, y + i * es, k * es);
    aligned(ta, ta, tb, k);
    memcpy(d + i * es, ta, k * es);
  }
}

/* One kernel: four restrict-qualified loops for the four aliasing cases
 * (distinct, dst == a, dst == b, all three equal), each a run of fixed-width
 * blocks (vectorised) and a scalar tail. */
#define RED_LOOP(T, U, OP, D, X, Y)                                            \
  do {                                                                         \
    enum { W = RED_BLOCK / sizeof(T) };                                        \
    size_t i = 0;                                                              \
    for (; i + W <= n; i += W)                                                 \
      for (size_t j = 0; j < W; j++) {                                         \
        T u = X[i + j], v = Y[i + j];                                          \
        D[i + j] = OP(T, U, u, v);                                             \
      }                                                                        \
    for (; i < n; i++) {                                                       \
      T u = X[i], v = Y[i];                                                    \
      D[i] = OP(T, U, u, v);                                                   \
    }                                                                          \
  } while (0)

#define DEF_KERNEL(NAME, VAR, T, U, OP)                                        \
  ATTR_##VAR static void NAME##_3_##VAR(T *restrict d, const T *restrict x,    \
                                        const T *restrict y, size_t n) {       \
    RED_LOOP(T, U, OP, d, x, y);                                               \
  }                                                                            \
  ATTR_##VAR static void NAME##_da_##VAR(T *restrict d, const T *restrict y,   \
                                         size_t n) {                           \
    RED_LOOP(T, U, OP, d, d, y);                                               \
  }                                                                            \
  ATTR_##VAR static void NAME##_db_##VAR(T *restrict d, const T *restrict x,   \
                                         size_t n) {                           \
    RED_LOOP(T, U, OP, d, x, d);                                               \
  }                                                                            \
  ATTR_##VAR static void NAME##_1_##VAR(T *restrict d, size_t n) {             \
    RED_LOOP(T, U, OP, d, d, d);                                               \
  }                                                                            \
  ATTR_##VAR static void NAME##_##VAR(void *dst, const void *a, const void *b, \
                                      size_t n) {                              \
    if (((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) % sizeof(T)) {          \
      red_misaligned(NAME##_##VAR, sizeof(T), dst, a, b, n);                   \
      return;                                                                  \
    }                                                                          \
    T *d = dst;                                                                \
    const T *x = a, *y = b;                                                    \
    if (d == x && d == y)                                                      \
      NAME##_1_##VAR(d, n);                                                    \
    else if (d == x)                                                           \
      NAME##_da_##VAR(d, y, n);                                                \
    else if (d == y)                                                           \
      NAME##_db_##VAR(d, x, n);                                                \
    else                                                                       \
      NAME##_3_##VAR(d, x, y, n);                                              \
  }

#define DEF_INT(NAME, VAR, T, U)                                               \
  DEF_KERNEL(NAME##_sum, VAR, T, U, OP_ISUM)                                   \
  DEF_KERNEL(NAME##_prod, VAR, T, U, OP_IPROD)                                 \
  DEF_KERNEL(NAME##_min, VAR, T, U, OP_IMIN)                                   \
  DEF_KERNEL(NAME##_max, VAR, T, U, OP_IMAX)                                   \
  DEF_KERNEL(NAME##_band, VAR, T, U, OP_IBAND)                                 \
  DEF_KERNEL(NAME##_bor, VAR, T, U, OP_IBOR)                                   \
  DEF_KERNEL(NAME##_bxor, VAR, T, U, OP_IBXOR)
/* bool: sum and max are or, prod and min are and (as NCCL's and gloo's
 * results for torch.bool) */
#define DEF_BOOL(NAME, VAR)                                                    \
  DEF_KERNEL(NAME##_sum, VAR, uint8_t, uint8_t, OP_LOR)                        \
  DEF_KERNEL(NAME##_prod, VAR, uint8_t, uint8_t, OP_LAND)                      \
  DEF_KERNEL(NAME##_bxor, VAR, uint8_t, uint8_t, OP_LXOR)
#define DEF_FLT(NAME, VAR, T)                                                  \
  DEF_KERNEL(NAME##_sum, VAR, T, T, OP_FSUM)                                   \
  DEF_KERNEL(NAME##_prod, VAR, T, T, OP_FPROD)                                 \
  DEF_KERNEL(NAME##_min, VAR, T, T, OP_FMIN)                                   \
  DEF_KERNEL(NAME##_max, VAR, T, T, OP_FMAX)
#define DEF_NARROW(NAME, VAR, P)                                               \
  DEF_KERNEL(NAME##_sum, VAR, uint16_t, uint16_t, OP_##P##SUM)                 \
  DEF_KERNEL(NAME##_prod, VAR, uint16_t, uint16_t, OP_##P##PROD)               \
  DEF_KERNEL(NAME##_min, VAR, uint16_t, uint16_t, OP_##P##MIN)                 \
  DEF_KERNEL(NAME##_max, VAR, uint16_t, uint16_t, OP_##P##MAX)
#define DEF_FP8(NAME, VAR, P)                                                  \
  DEF_KERNEL(NAME##_sum, VAR, uint8_t, uint8_t, OP_##P##SUM)                   \
  DEF_KERNEL(NAME##_prod, VAR, uint8_t, uint8_t, OP_##P##PROD)                 \
  DEF_KERNEL(NAME##_min, VAR, uint8_t, uint8_t, OP_##P##MIN)                   \
  DEF_KERNEL(NAME##_max, VAR, uint8_t, uint8_t, OP_##P##MAX)

#define DEF_ALL(VAR)                                                           \
  DEF_INT(i8, VAR, int8_t, uint8_t)                                            \
  DEF_INT(u8, VAR, uint8_t, uint8_t)                                           \
  DEF_INT(i32, VAR, int32_t, uint32_t)                                         \
  DEF_INT(u32, VAR, uint32_t, uint32_t)                                        \
  DEF_INT(i64, VAR, int64_t, uint64_t)                                         \
  DEF_INT(u64, VAR, uint64_t, uint64_t)                                        \
  DEF_NARROW(bf16, VAR, B)                                                     \
  DEF_FLT(f32, VAR, float)                                                     \
  DEF_FLT(f64, VAR, double)                                                    \
  DEF_INT(i16, VAR, int16_t, uint16_t)                                         \
  DEF_BOOL(bool, VAR)                                                          \
  DEF_FP8(e4m3, VAR, E4)                                                       \
  DEF_FP8(e5m2, VAR, E5)

DEF_ALL(base)
DEF_NARROW(f16, base, H)

/* Columns: sum, prod, min, max, band, bor, bxor (red_col); floats have no
 * bitwise kernels (NULL: the calls are refused before they get here). */
#define RED_COLS 7
#define ROW(NAME, VAR)                                                         \
  {                                                                            \
    NAME##_sum_##VAR, NAME##_prod_##VAR, NAME##_min_##VAR, NAME##_max_##VAR,   \
        NAME##_band_##VAR, NAME##_bor_##VAR, NAME##_bxor_##VAR                 \
  }
#define ROWF(NAME, VAR)                                                        \
  {                                                                            \
    NAME##_sum_##VAR, NAME##_prod_##VAR, NAME##_min_##VAR, NAME##_max_##VAR,   \
        NULL, NULL, NULL                                                       \
  }
#define ROWB(VAR)                                                              \
  {                                                                            \
    bool_sum_##VAR, bool_prod_##VAR, bool_prod_##VAR, bool_sum_##VAR,          \
        bool_prod_##VAR, bool_sum_##VAR, bool_bxor_##VAR                       \
  }

#define TABLE(VAR, F16VAR, BF16VAR)                                            \
  {                                                                            \
    ROW(i8, VAR), ROW(u8, VAR), ROW(i32, VAR), ROW(u32, VAR), ROW(i64, VAR),   \
        ROW(u64, VAR), ROWF(f16, F16VAR), ROWF(bf16, BF16VAR), ROWF(f32, VAR), \
        ROWF(f64, VAR), ROW(i16, VAR), ROWB(VAR), ROWF(e4m3, VAR),             \
        ROWF(e5m2, VAR)                                                        \
  }

static const red_fn tab_base[BRAID_NUM_DTYPES][RED_COLS] =
    TABLE(base, base, base);

#if RED_X86
DEF_ALL(avx2)

/* float16 and bfloat16 with explicit vectors: VL elements per iteration
 * are widened to float (F16C / AVX-512 conversions for float16, a shift for
 * bfloat16), reduced, and rounded back (the hardware's round-to-nearest-even
 * for float16, the integer rounding of bf16_round_bits (device/half.h) for
 * bfloat16). The tail goes through a zero-padded block so it uses the very same
 * instructions. */
#define DEF_HW(PFX, OP, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)                 \
  ATTR_##VAR static void PFX##_##OP##_##VAR(void *dst, const void *a,          \
                                            const void *b, size_t n) {         \
    uint16_t *d = dst;                                                         \
    const uint16_t *x = a, *y = b;                                             \
    size_t i = 0;                                                              \
    for (; i + VL <= n; i += VL) {                                             \
      V fx = TOF(LOAD((const HV *)(x + i)));                                   \
      V fy = TOF(LOAD((const HV *)(y + i)));                                   \
      STORE((HV *)(d + i), TOH(vop_##OP##_##VAR(fx, fy)));                     \
    }                                                                          \
    if (i < n) {                                                               \
      uint16_t tx[VL] = {0}, ty[VL] = {0}, td[VL];                             \
      memcpy(tx, x + i, (n - i) * 2);                                          \
      memcpy(ty, y + i, (n - i) * 2);                                          \
      V fx = TOF(LOAD((const HV *)tx)), fy = TOF(LOAD((const HV *)ty));        \
      STORE((HV *)td, TOH(vop_##OP##_##VAR(fx, fy)));                          \
      memcpy(d + i, td, (n - i) * 2);                                          \
    }                                                                          \
  }
#define DEF_HW4(PFX, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)                    \
  DEF_HW(PFX, sum, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)                      \
  DEF_HW(PFX, prod, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)                     \
  DEF_HW(PFX, min, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)                      \
  DEF_HW(PFX, max, VAR, VL, V, HV, LOAD, STORE, TOF, TOH)

#define ATTR_f16c __attribute__((target("avx2,f16c")))
#define ATTR_avx512 __attribute__((target("avx512f")))

/* 8 floats (AVX2) */
ATTR_f16c static inline __m256 unord8(__m256 x) {
  return _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
}
ATTR_f16c static inline __m256 vop_sum_f16c(__m256 x, __m256 y) {
  return _mm256_add_ps(x, y);
}
ATTR_f16c static inline __m256 vop_prod_f16c(__m256 x, __m256 y) {
  return _mm256_mul_ps(x, y);
}
/* minps(x, y) gives y when either is NaN or they are equal; keep x when it
 * is NaN to match the scalar definition. */
ATTR_f16c static inline __m256 vop_min_f16c(__m256 x, __m256 y) {
  return _mm256_blendv_ps(_mm256_min_ps(x, y), x, unord8(x));
}
ATTR_f16c static inline __m256 vop_max_f16c(__m256 x, __m256 y) {
  return _mm256_blendv_ps(_mm256_max_ps(x, y), x, unord8(x));
}
ATTR_f16c static inline __m256 bf8_widen(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
ATTR_f16c static inline __m128i bf8_round(__m256 f) {
  __m256i x = _mm256_castps_si256(f);
  __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  __m256i hi = _mm256_srli_epi32(x, 16);
  __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(x, _mm256_set1_epi32(0x7fff));
  r = _mm256_srli_epi32(_mm256_add_epi32(r, lsb), 16);
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  /* 16-bit values in 32-bit lanes: pack (no saturation), fix lane order */
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(p);
}
#define TOH8(v)                                                                \
  _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
DEF_HW4(f16, f16c, 8, __m256, __m128i, _mm_loadu_si128, _mm_storeu_si128,
        _mm256_cvtph_ps, TOH8)
DEF_HW4(bf16, f16c, 8, __m256, __m128i, _mm_loadu_si128, _mm_storeu_si128,
        bf8_widen, bf8_round)

/* 16 floats (AVX-512F) */
ATTR_avx512 static inline __m512 vop_sum_avx512(__m512 x, __m512 y) {
  return _mm512_add_ps(x, y);
}
ATTR_avx512 static inline __m512 vop_prod_avx512(__m512 x, __m512 y) {
  return _mm512_mul_ps(x, y);
}
ATTR_avx512 static inline __m512 vop_min_avx512(__m512 x, __m512 y) {
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_min_ps(x, y), nan, x);
}
ATTR_avx512 static inline __m512 vop_max_avx512(__m512 x, __m512 y) {
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_max_ps(x, y), nan, x);
}
ATTR_avx512 static inline __m512 bf16_widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
ATTR_avx512 static inline __m256i bf16_round16(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  __m512i hi = _mm512_srli_epi32(x, 16);
  __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_set1_epi32(0x7fff));
  r = _mm512_srli_epi32(_mm512_add_epi32(r, lsb), 16);
  r = _mm512_mask_mov_epi32(r, nan,
                            _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}
#define TOH16(v)                                                               \
  _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define LOAD256(p) _mm256_loadu_si256(p)
#define STORE256(p, v) _mm256_storeu_si256(p, v)
DEF_HW4(f16, avx512, 16, __m512, __m256i, LOAD256, STORE256, _mm512_cvtph_ps,
        TOH16)
DEF_HW4(bf16, avx512, 16, __m512, __m256i, LOAD256, STORE256, bf16_widen,
        bf16_round16)

static const red_fn tab_avx2_base[BRAID_NUM_DTYPES][RED_COLS] =
    TABLE(avx2, base, avx2);
static const red_fn tab_avx2[BRAID_NUM_DTYPES][RED_COLS] =
    TABLE(avx2, f16c, f16c);
static const red_fn tab_avx512[BRAID_NUM_DTYPES][RED_COLS] =
    TABLE(avx2, avx512, avx512);
#endif

/* ---- dispatch ---------------------------------------------------------- */

enum { ISA_UNSET = 0, ISA_BASE, ISA_AVX2, ISA_F16C, ISA_AVX512 };
static int red_isa_cached;

static int red_isa_level(void) {
  int isa = __atomic_load_n(&red_isa_cached, __ATOMIC_RELAXED);
  if (isa != ISA_UNSET)
    return isa;
  isa = ISA_BASE;
#if RED_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    isa = ISA_AVX2;
    /* F16C has no __builtin_cpu_supports name in every compiler; read
     * CPUID leaf 1, ECX bit 29. */
    unsigned int a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (c & (1u << 29))
      isa = ISA_F16C;
    if (isa == ISA_F16C && __builtin_cpu_supports("avx512f"))
      isa = ISA_AVX512;
  }
#endif
  __atomic_store_n(&red_isa_cached, isa, __ATOMIC_RELAXED);
  return isa;
}

static const red_fn (*red_table(void))[RED_COLS] {
#if RED_X86
  switch (red_isa_level()) {
  case ISA_AVX512:
    return tab_avx512;
  case ISA_F16C:
    return tab_avx2;
  case ISA_AVX2:
    return tab_avx2_base;
  default:
    break;
  }
#endif
  return tab_base;
}

static int red_col(braid_op op) {
  return op == BRAID_AVG ? 0 : op > BRAID_AVG ? (int)op - 1 : (int)op;
}

red_fn red_get(braid_dtype dt, braid_op op) {
  if ((unsigned)dt >= BRAID_NUM_DTYPES || (unsigned)op >= BRAID_NUM_OPS)
    return NULL;
  return red_table()[dt][red_col(op)];
}

/* The kernels with their operands the other way round, dst = b op a: a
 * wrapper per table cell that calls red_get's kernel with a and b swapped,
 * so that every code path gives the bits of that kernel. */
#define REV_FN(D, K)                                                           \
  static void rev_##D##_##K(void *dst, const void *a, const void *b,           \
                            size_t n) {                                        \
    red_fn f = red_table()[D][K]; /* NULL cells: never handed out */           \
    if (f != NULL)                                                             \
      f(dst, b, a, n);                                                         \
  }
#define REV_ROW(D)                                                             \
  REV_FN(D, 0)                                                                 \
  REV_FN(D, 1)                                                                 \
  REV_FN(D, 2) REV_FN(D, 3) REV_FN(D, 4) REV_FN(D, 5) REV_FN(D, 6)
#define REV_CELLS(D)                                                           \
  {                                                                            \
    rev_##D##_0, rev_##D##_1, rev_##D##_2, rev_##D##_3, rev_##D##_4,           \
        rev_##D##_5, rev_##D##_6                                               \
  }
REV_ROW(0)
REV_ROW(1)
REV_ROW(2)
REV_ROW(3)
REV_ROW(4)
REV_ROW(5)
REV_ROW(6)
REV_ROW(7)
REV_ROW(8)
REV_ROW(9)
REV_ROW(10)
REV_ROW(11)
REV_ROW(12)
REV_ROW(13)
_Static_assert(BRAID_NUM_DTYPES == 14 && RED_COLS == 7,
               "one reversed row per dtype, one cell per column");
static const red_fn tab_rev[BRAID_NUM_DTYPES][RED_COLS] = {
    REV_CELLS(0),  REV_CELLS(1),  REV_CELLS(2),  REV_CELLS(3), REV_CELLS(4),
    REV_CELLS(5),  REV_CELLS(6),  REV_CELLS(7),  REV_CELLS(8), REV_CELLS(9),
    REV_CELLS(10), REV_CELLS(11), REV_CELLS(12), REV_CELLS(13)};

red_fn red_get_rev(braid_dtype dt, braid_op op) {
  if (red_get(dt, op) == NULL)
    return NULL;
  return tab_rev[dt][red_col(op)];
}

red_fn red_get_scalar(braid_dtype dt, braid_op op) {
  return red_get_path(dt, op, 0);
}

red_fn red_get_path(braid_dtype dt, braid_op op, int path) {
  if ((unsigned)dt >= BRAID_NUM_DTYPES || (unsigned)op >= BRAID_NUM_OPS ||
      path < 0 || path > 3)
    return NULL;
  if (path == 0)
    return tab_base[dt][red_col(op)];
#if RED_X86
  if (red_isa_level() >= ISA_AVX2 + path - 1) {
    const red_fn(*t)[RED_COLS] = path == 1   ? tab_avx2_base
                                 : path == 2 ? tab_avx2
                                             : tab_avx512;
    return t[dt][red_col(op)];
  }
#endif
  return NULL;
}

const char *red_isa(void) {
  switch (red_isa_level()) {
  case ISA_AVX512:
    return "avx2+avx512f";
  case ISA_F16C:
    return "avx2+f16c";
  case ISA_AVX2:
    return "avx2";
  default:
    return "baseline";
  }
}

/* ---- averaging --------------------------------------------------------- */

#define DIV_LOOP(T, EXPR)                                                      \
  do {                                                                         \
    T *p = buf;                                                                \
    for (size_t i = 0; i < n; i++) {                                           \
      T u = p[i];                                                              \
      p[i] = EXPR;                                                             \
    }                                                                          \
  } while (0)

void red_bool_norm(void *buf, size_t n) {
  uint8_t *p = buf;
  for (size_t i = 0; p != NULL && i < n; i++)
    p[i] = p[i] != 0;
}

void red_div(void *buf, size_t n, braid_dtype dt, int divisor) {
  if (divisor <= 1 || buf == NULL)
    return; /* a rank count is >= 1; dividing by 1 changes nothing */
  switch (dt) {
  case BRAID_INT8:
    DIV_LOOP(int8_t, (int8_t)(u / divisor));
    break;
  case BRAID_UINT8:
    DIV_LOOP(uint8_t, (uint8_t)(u / (unsigned)divisor));
    break;
  case BRAID_INT32:
    DIV_LOOP(int32_t, u / divisor);
    break;
  case BRAID_UINT32:
    DIV_LOOP(uint32_t, u / (uint32_t)divisor);
    break;
  case BRAID_INT64:
    DIV_LOOP(int64_t, u / (int64_t)divisor);
    break;
  case BRAID_UINT64:
    DIV_LOOP(uint64_t, u / (uint64_t)divisor);
    break;
  case BRAID_FLOAT16:
    DIV_LOOP(uint16_t,
             red_float_to_half(red_half_to_float(u) / (float)divisor));
    break;
  case BRAID_BFLOAT16:
    DIV_LOOP(uint16_t, f2bf(bf2f(u) / (float)divisor));
    break;
  case BRAID_FLOAT32:
    DIV_LOOP(float, u / (float)divisor);
    break;
  case BRAID_FLOAT64:
    DIV_LOOP(double, u / (double)divisor);
    break;
  case BRAID_INT16:
    DIV_LOOP(int16_t, (int16_t)(u / divisor));
    break;
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    DIV_LOOP(uint8_t, fp8_div(u, divisor, dt == BRAID_FLOAT8_E5M2));
    break;
  default:
    break;
  }
}

/* ---- pre-multiplied sum ------------------------------------------------ */

#define MUL_LOOP(T, EXPR)                                                      \
  do {                                                                         \
    T *d = dst, s;                                                             \
    const T *x = src;                                                          \
    memcpy(&s, scalar, sizeof s);                                              \
    for (size_t i = 0; i < n; i++) {                                           \
      T u = x[i];                                                              \
      d[i] = EXPR;                                                             \
    }                                                                          \
  } while (0)

int red_premul(void *dst, const void *src, size_t n, braid_dtype dt,
               const void *scalar) {
  switch (dt) {
  case BRAID_INT8:
  case BRAID_UINT8:
    MUL_LOOP(uint8_t, (uint8_t)(u * s));
    return 0;
  case BRAID_INT16:
    MUL_LOOP(uint16_t, (uint16_t)((uint32_t)u * s));
    return 0;
  case BRAID_INT32:
  case BRAID_UINT32:
    MUL_LOOP(uint32_t, u * s);
    return 0;
  case BRAID_INT64:
  case BRAID_UINT64:
    MUL_LOOP(uint64_t, u * s);
    return 0;
  case BRAID_FLOAT16:
    MUL_LOOP(uint16_t, OP_HPROD(T, U, u, s));
    return 0;
  case BRAID_BFLOAT16:
    MUL_LOOP(uint16_t, OP_BPROD(T, U, u, s));
    return 0;
  case BRAID_FLOAT32:
    MUL_LOOP(float, u *s);
    return 0;
  case BRAID_FLOAT64:
    MUL_LOOP(double, u *s);
    return 0;
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    MUL_LOOP(uint8_t, fp8_mul(u, s, dt == BRAID_FLOAT8_E5M2));
    return 0;
  default:
    return -1;
  }
}
