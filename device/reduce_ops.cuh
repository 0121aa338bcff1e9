/*
 * Element operations of the CUDA reduction kernels, as __host__ __device__
 * inline functions so that host code (tests/cuda/test_reduce_ops.cu) checks
 * them against the CPU kernels bit for bit.
 *
 * The semantics are those of src/reduce.h:
 *  - integers: sum and prod wrap modulo 2^bits (computed in the unsigned
 *    type); min/max compare as the signed or unsigned type;
 *  - float32/float64 min/max: a NaN in a gives a, else a NaN in b gives b;
 *    operands that compare equal (+0, -0) give b;
 *  - float32/float64 sum/prod: a NaN operand comes out quieted (a's first),
 *    as on x86. GPUs return a canonical NaN for any NaN operand, so the
 *    functions test for NaN explicitly; the branch costs nothing next to the
 *    memory traffic;
 *  - float16/bfloat16: widened to float (exact), reduced in float, rounded to
 *    nearest even; subnormals kept, overflow to infinity, a NaN made quiet
 *    with its payload truncated. On the device, float16 uses the hardware
 *    conversions (exact, round to nearest even) for everything but NaN.
 *  - float8 e4m3/e5m2: device/fp8.h's functions, shared with the CPU kernels
 *    (widened to float, reduced, rounded to nearest even, saturating); on
 *    sm_89 on, vectors without NaN or infinity through the hardware's fp8
 *    conversions, which round the same (rop_vec_fp8);
 *  - division (BRAID_AVG): integers truncate toward zero; floats divide in the
 *    type (float16/bfloat16 in float), a NaN stays that NaN, quieted.
 */
#ifndef BRAID_TRANSPORTS_CUDA_REDUCE_OPS_CUH
#define BRAID_TRANSPORTS_CUDA_REDUCE_OPS_CUH

#include <stdint.h>
#include <string.h>

#include "braid.h"
#include "device/fp8.h"
#include "device/half.h"

#ifdef __CUDACC__
#include <cuda_fp8.h>
#define ROP_HD __host__ __device__ __forceinline__
/* out of line: a rare path kept out of the kernels' loops */
#define ROP_COLD __host__ __device__ __noinline__
#else
#define ROP_HD inline
#define ROP_COLD inline
#endif

/* ---- bits -------------------------------------------------------------- */

ROP_HD uint32_t rop_f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ROP_HD float rop_u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

ROP_HD uint64_t rop_d2u(double d) {
#ifdef __CUDA_ARCH__
  return (uint64_t)__double_as_longlong(d);
#else
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
#endif
}

ROP_HD double rop_u2d(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)u);
#else
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
#endif
}

ROP_HD float rop_quiet(float x) { return rop_u2f(rop_f2u(x) | 0x400000u); }
ROP_HD double rop_quiet(double x) {
  return rop_u2d(rop_d2u(x) | 0x8000000000000ull);
}

/* ---- float16 / bfloat16 conversions: device/half.h in software (exact,
 * shared with the CPU kernels), the hardware's for numbers on the device - */

ROP_HD float rop_half_to_float_sw(uint16_t h) { return half_to_float(h); }

ROP_HD uint16_t rop_float_to_half_sw(float f) { return half_from_float(f); }

/* float16 <-> float for numbers (not NaN): the hardware conversions on the
 * device, which are exact and round to nearest even. */
ROP_HD float rop_half_to_float_num(uint16_t h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return rop_half_to_float_sw(h);
#endif
}

ROP_HD uint16_t rop_float_to_half_num(float f) {
#ifdef __CUDA_ARCH__
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return rop_float_to_half_sw(f);
#endif
}

ROP_HD float rop_half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  if ((h & 0x7c00u) != 0x7c00u || !(h & 0x3ffu))
    return rop_half_to_float_num(h);
#endif
  return rop_half_to_float_sw(h);
}

ROP_HD uint16_t rop_float_to_half(float f) {
#ifdef __CUDA_ARCH__
  if (f == f)
    return rop_float_to_half_num(f);
#endif
  return rop_float_to_half_sw(f);
}

ROP_HD float rop_bf16_to_float(uint16_t h) { return bf16_to_float(h); }

ROP_HD uint16_t rop_float_to_bf16(float f) { return bf16_from_float(f); }

/* ---- element operations ------------------------------------------------ */

enum { ROP_SUM = 0, ROP_PROD = 1, ROP_MIN = 2, ROP_MAX = 3 };

/* Float and double: OP is ROP_SUM..ROP_MAX. */
template <int OP, typename F> ROP_HD F rop_float_op(F u, F v) {
  if (OP == ROP_MIN)
    return u != u ? u : (u < v ? u : v);
  if (OP == ROP_MAX)
    return u != u ? u : (u > v ? u : v);
  if (u != u)
    return rop_quiet(u);
  if (v != v)
    return rop_quiet(v);
  return OP == ROP_PROD ? u * v : u + v;
}

template <typename F> ROP_HD F rop_float_div(F u, int d) {
  return u != u ? rop_quiet(u) : u / (F)d;
}

/* One dtype: its storage type T, op<OP>(u, v) and div(u, divisor). */
template <int DT> struct rop_type;

/* DD: the type C's division of red_div works in (int for int8, ...). */
#define ROP_INT(DT, TT, UU, DD)                                                \
  template <> struct rop_type<DT> {                                            \
    typedef TT T;                                                              \
    typedef UU U;                                                              \
    template <int OP> static ROP_HD T op(T u, T v) {                           \
      if (OP == ROP_SUM)                                                       \
        return (T)(U)((U)u + (U)v);                                            \
      if (OP == ROP_PROD)                                                      \
        return (T)(U)((U)u * (U)v);                                            \
      if (OP == ROP_MIN)                                                       \
        return u < v ? u : v;                                                  \
      return u > v ? u : v;                                                    \
    }                                                                          \
    static ROP_HD T div(T u, int d) { return (T)((DD)u / (DD)d); }             \
  };

ROP_INT(BRAID_INT8, int8_t, uint8_t, int)
ROP_INT(BRAID_UINT8, uint8_t, uint8_t, unsigned)
ROP_INT(BRAID_INT32, int32_t, uint32_t, int32_t)
ROP_INT(BRAID_UINT32, uint32_t, uint32_t, uint32_t)
ROP_INT(BRAID_INT64, int64_t, uint64_t, int64_t)
ROP_INT(BRAID_UINT64, uint64_t, uint64_t, uint64_t)
#undef ROP_INT

#define ROP_FLT(DT, TT)                                                        \
  template <> struct rop_type<DT> {                                            \
    typedef TT T;                                                              \
    template <int OP> static ROP_HD T op(T u, T v) {                           \
      return rop_float_op<OP>(u, v);                                           \
    }                                                                          \
    static ROP_HD T div(T u, int d) { return rop_float_div(u, d); }            \
  };

ROP_FLT(BRAID_FLOAT32, float)
ROP_FLT(BRAID_FLOAT64, double)
#undef ROP_FLT

#define ROP_NARROW(DT, WIDEN, NARROW)                                          \
  template <> struct rop_type<DT> {                                            \
    typedef uint16_t T;                                                        \
    template <int OP> static ROP_HD T op(T u, T v) {                           \
      return NARROW(rop_float_op<OP>(WIDEN(u), WIDEN(v)));                     \
    }                                                                          \
    static ROP_HD T div(T u, int d) {                                          \
      return NARROW(rop_float_div(WIDEN(u), d));                               \
    }                                                                          \
  };

ROP_NARROW(BRAID_FLOAT16, rop_half_to_float, rop_float_to_half)
ROP_NARROW(BRAID_BFLOAT16, rop_bf16_to_float, rop_float_to_bf16)
#undef ROP_NARROW

/* ROP_SUM..ROP_MAX are FP8_SUM..FP8_MAX */
#define ROP_FP8(DT, E5)                                                        \
  template <> struct rop_type<DT> {                                            \
    typedef uint8_t T;                                                         \
    template <int OP> static ROP_HD T op(T u, T v) {                           \
      return fp8_op(OP, u, v, E5);                                             \
    }                                                                          \
    static ROP_HD T div(T u, int d) { return fp8_div(u, d, E5); }              \
  };

ROP_FP8(BRAID_FLOAT8_E4M3, 0)
ROP_FP8(BRAID_FLOAT8_E5M2, 1)
#undef ROP_FP8

/* ---- sixteen bytes at a time ------------------------------------------ */

/* Sixteen bytes of elements as four 32-bit words: a uint4's layout, what the
 * kernels load and store at once. */
struct rop_v16 {
  uint32_t w[4];
};

/* Element by element: the general case. */
template <int DT, int OP>
ROP_HD rop_v16 rop_vec_elems(const rop_v16 &a, const rop_v16 &b) {
  typedef typename rop_type<DT>::T T;
  union {
    rop_v16 v;
    T e[16 / sizeof(T)];
  } x, y;
  x.v = a;
  y.v = b;
  for (int j = 0; j < (int)(16 / sizeof(T)); j++)
    x.e[j] = rop_type<DT>::template op<OP>(x.e[j], y.e[j]);
  return x.v;
}

/* Four int8 or uint8 lanes of a word: sum (wrapping), min or max, as one
 * SIMD instruction on the device. */
template <int OP, bool SIGNED>
ROP_HD uint32_t rop_bytes4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  if (OP == ROP_SUM)
    return __vadd4(a, b);
  if (OP == ROP_MIN)
    return SIGNED ? __vmins4(a, b) : __vminu4(a, b);
  if (OP == ROP_MAX)
    return SIGNED ? __vmaxs4(a, b) : __vmaxu4(a, b);
#endif
  typedef rop_type<SIGNED ? BRAID_INT8 : BRAID_UINT8> R;
  uint32_t r = 0;
  for (int i = 0; i < 32; i += 8) {
    typename R::T x = (typename R::T)(uint8_t)(a >> i);
    typename R::T y = (typename R::T)(uint8_t)(b >> i);
    r |= (uint32_t)(uint8_t)R::template op<OP>(x, y) << i;
  }
  return r;
}

/* One float16/bfloat16 lane (in the low 16 bits of u and v), neither NaN
 * nor infinite: rop_type<DT>::op<OP> without its NaN cases. A sum of such
 * numbers is never NaN; min and max return one of the operands' bits. */
template <int DT, int OP>
ROP_HD uint32_t rop_narrow_num(uint32_t u, uint32_t v) {
  const bool h = DT == BRAID_FLOAT16;
  float x = h ? rop_half_to_float_num((uint16_t)u) : rop_u2f(u << 16);
  float y = h ? rop_half_to_float_num((uint16_t)v) : rop_u2f(v << 16);
  if (OP == ROP_MAX)
    return x > y ? u : v;
  if (OP == ROP_MIN)
    return x < y ? u : v;
  float r = OP == ROP_PROD ? x * y : x + y;
  if (h)
    return rop_float_to_half_num(r);
  uint32_t b = rop_f2u(r); /* round to nearest even (never NaN here) */
  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

/* float16/bfloat16/float8 vectors that hold a NaN or an infinity: element
 * by element, out of line (the element functions' NaN cases are long). The
 * vectors go by value: an address of the caller's would make the caller
 * keep them in local memory, stored there for every vector, special or not
 * (a 32-byte stack frame and a quarter of the memory rate on an H100). */
template <int DT, int OP>
ROP_COLD rop_v16 rop_vec_special(rop_v16 a, rop_v16 b) {
  return rop_vec_elems<DT, OP>(a, b);
}

/* Whether a lane of a or b has all the bits of mask e set (a NaN's or an
 * infinity's exponent bits), on whole words: adding the lowest bit of each
 * lane's mask (one) to its masked bits carries into the lane's top bit
 * (top) exactly then. */
ROP_HD bool rop_any_lane_set(const rop_v16 &a, const rop_v16 &b, uint32_t e,
                             uint32_t one, uint32_t top) {
  uint32_t special = 0;
  for (int i = 0; i < 4; i++)
    special |= ((a.w[i] & e) + one) | ((b.w[i] & e) + one);
  return (special & top) != 0;
}

/* float16/bfloat16: when no lane of a or b is NaN or infinite (checked on
 * whole words: a lane's exponent bits are all set exactly when adding the
 * lowest exponent bit to them carries into the sign bit), lane by lane
 * without the NaN cases; else element by element. */
template <int DT, int OP>
ROP_HD rop_v16 rop_vec_narrow(const rop_v16 &a, const rop_v16 &b) {
  const bool h = DT == BRAID_FLOAT16;
  const uint32_t e = h ? 0x7c007c00u : 0x7f807f80u;
  const uint32_t one = h ? 0x04000400u : 0x00800080u;
  if (rop_any_lane_set(a, b, e, one, 0x80008000u))
    return rop_vec_special<DT, OP>(a, b);
  rop_v16 r;
  for (int i = 0; i < 4; i++)
    r.w[i] = rop_narrow_num<DT, OP>(a.w[i] & 0xffffu, b.w[i] & 0xffffu) |
             rop_narrow_num<DT, OP>(a.w[i] >> 16, b.w[i] >> 16) << 16;
  return r;
}

/* float8 e4m3/e5m2 on a GPU with the fp8 conversion instructions (sm_89
 * on), when no lane of a or b is NaN or infinite (e4m3 x.1111.111, e5m2
 * x.11111.xx: rop_any_lane_set): two lanes at a
 * time widened exactly (fp8 -> half -> float), reduced in float and rounded
 * back once to nearest even, saturating (cvt.rn.satfinite: fp8_from_float's
 * bits for every finite float, and a sum or product of two finite fp8
 * values is a finite float); min and max give an operand's bits, with
 * fp8_float_op's comparisons. Else, and on the host, element by element
 * (device/fp8.h). */
template <int DT, int OP>
ROP_HD rop_v16 rop_vec_fp8(const rop_v16 &a, const rop_v16 &b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const bool e5 = DT == BRAID_FLOAT8_E5M2;
  const uint32_t e = e5 ? 0x7c7c7c7cu : 0x7f7f7f7fu;
  const uint32_t one = e5 ? 0x04040404u : 0x01010101u;
  if (rop_any_lane_set(a, b, e, one, 0x80808080u))
    return rop_vec_special<DT, OP>(a, b);
  const __nv_fp8_interpretation_t k = e5 ? __NV_E5M2 : __NV_E4M3;
  rop_v16 r;
  for (int i = 0; i < 4; i++) {
    uint32_t w = 0;
    for (int sh = 0; sh < 32; sh += 16) {
      __nv_fp8x2_storage_t pa = (__nv_fp8x2_storage_t)(a.w[i] >> sh);
      __nv_fp8x2_storage_t pb = (__nv_fp8x2_storage_t)(b.w[i] >> sh);
      float2 x = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pa, k)));
      float2 y = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pb, k)));
      uint32_t o;
      if (OP == ROP_MAX || OP == ROP_MIN) {
        bool lo = OP == ROP_MAX ? x.x > y.x : x.x < y.x;
        bool hi = OP == ROP_MAX ? x.y > y.y : x.y < y.y;
        o = ((lo ? pa : pb) & 0xffu) | ((hi ? pa : pb) & 0xff00u);
      } else {
        float2 z = OP == ROP_PROD ? make_float2(x.x * y.x, x.y * y.y)
                                  : make_float2(x.x + y.x, x.y + y.y);
        o = __nv_cvt_float2_to_fp8x2(z, __NV_SATFINITE, k);
      }
      w |= o << sh;
    }
    r.w[i] = w;
  }
  return r;
#else
  return rop_vec_elems<DT, OP>(a, b);
#endif
}

/* a op b on sixteen bytes of dtype DT, with rop_type<DT>::op<OP>'s results
 * bit for bit: 8-bit integers four lanes per instruction (but products),
 * float16/bfloat16 without the per-element NaN tests when there is no NaN
 * or infinity, float8 likewise through the conversion instructions where
 * the GPU has them, the other types element by element. */
template <int DT, int OP>
ROP_HD rop_v16 rop_vec(const rop_v16 &a, const rop_v16 &b) {
  if ((DT == BRAID_INT8 || DT == BRAID_UINT8) && OP != ROP_PROD) {
    rop_v16 r;
    for (int i = 0; i < 4; i++)
      r.w[i] = rop_bytes4<OP, DT == BRAID_INT8>(a.w[i], b.w[i]);
    return r;
  }
  if (DT == BRAID_FLOAT16 || DT == BRAID_BFLOAT16)
    return rop_vec_narrow<DT, OP>(a, b);
  if (DT == BRAID_FLOAT8_E4M3 || DT == BRAID_FLOAT8_E5M2)
    return rop_vec_fp8<DT, OP>(a, b);
  return rop_vec_elems<DT, OP>(a, b);
}

/* Applies op to elements in memory (any alignment): for host tests and for
 * code that dispatches on (dtype, op) at run time. 0 on success, -1 for an
 * unknown dtype or op. BRAID_AVG reduces as a sum. */
template <int DT>
ROP_HD int rop_apply_dt(int op, void *dst, const void *a, const void *b) {
  typedef typename rop_type<DT>::T T;
  T u, v, r;
  memcpy(&u, a, sizeof u);
  memcpy(&v, b, sizeof v);
  switch (op) {
  case BRAID_SUM:
  case BRAID_AVG:
    r = rop_type<DT>::template op<ROP_SUM>(u, v);
    break;
  case BRAID_PROD:
    r = rop_type<DT>::template op<ROP_PROD>(u, v);
    break;
  case BRAID_MIN:
    r = rop_type<DT>::template op<ROP_MIN>(u, v);
    break;
  case BRAID_MAX:
    r = rop_type<DT>::template op<ROP_MAX>(u, v);
    break;
  default:
    return -1;
  }
  memcpy(dst, &r, sizeof r);
  return 0;
}

template <int DT> ROP_HD void rop_div_dt(void *p, int d) {
  typedef typename rop_type<DT>::T T;
  T u;
  memcpy(&u, p, sizeof u);
  u = rop_type<DT>::div(u, d);
  memcpy(p, &u, sizeof u);
}

#define ROP_DISPATCH(DT, CALL)                                                 \
  switch (DT) {                                                                \
  case BRAID_INT8:                                                             \
    CALL(BRAID_INT8);                                                          \
  case BRAID_UINT8:                                                            \
    CALL(BRAID_UINT8);                                                         \
  case BRAID_INT32:                                                            \
    CALL(BRAID_INT32);                                                         \
  case BRAID_UINT32:                                                           \
    CALL(BRAID_UINT32);                                                        \
  case BRAID_INT64:                                                            \
    CALL(BRAID_INT64);                                                         \
  case BRAID_UINT64:                                                           \
    CALL(BRAID_UINT64);                                                        \
  case BRAID_FLOAT16:                                                          \
    CALL(BRAID_FLOAT16);                                                       \
  case BRAID_BFLOAT16:                                                         \
    CALL(BRAID_BFLOAT16);                                                      \
  case BRAID_FLOAT32:                                                          \
    CALL(BRAID_FLOAT32);                                                       \
  case BRAID_FLOAT64:                                                          \
    CALL(BRAID_FLOAT64);                                                       \
  case BRAID_FLOAT8_E4M3:                                                      \
    CALL(BRAID_FLOAT8_E4M3);                                                   \
  case BRAID_FLOAT8_E5M2:                                                      \
    CALL(BRAID_FLOAT8_E5M2);                                                   \
  default:                                                                     \
    break;                                                                     \
  }

/* dst = a op b for one element of dtype dt: 0, or -1 for a bad dtype/op. */
ROP_HD int rop_apply(int dt, int op, void *dst, const void *a, const void *b) {
#define ROP_CALL_APPLY(D) return rop_apply_dt<D>(op, dst, a, b)
  ROP_DISPATCH(dt, ROP_CALL_APPLY)
#undef ROP_CALL_APPLY
  return -1;
}

/* rop_vec on sixteen bytes in memory: for host tests. 0, or -1 for a bad
 * dtype/op (BRAID_AVG reduces as a sum). */
template <int DT>
ROP_HD int rop_vec_apply_dt(int op, void *dst, const void *a, const void *b) {
  rop_v16 x, y;
  memcpy(&x, a, sizeof x);
  memcpy(&y, b, sizeof y);
  switch (op) {
  case BRAID_SUM:
  case BRAID_AVG:
    x = rop_vec<DT, ROP_SUM>(x, y);
    break;
  case BRAID_PROD:
    x = rop_vec<DT, ROP_PROD>(x, y);
    break;
  case BRAID_MIN:
    x = rop_vec<DT, ROP_MIN>(x, y);
    break;
  case BRAID_MAX:
    x = rop_vec<DT, ROP_MAX>(x, y);
    break;
  default:
    return -1;
  }
  memcpy(dst, &x, sizeof x);
  return 0;
}

ROP_HD int rop_vec_apply(int dt, int op, void *dst, const void *a,
                         const void *b) {
#define ROP_CALL_VEC(D) return rop_vec_apply_dt<D>(op, dst, a, b)
  ROP_DISPATCH(dt, ROP_CALL_VEC)
#undef ROP_CALL_VEC
  return -1;
}

/* *p /= d for one element of dtype dt: 0, or -1 for a bad dtype. */
ROP_HD int rop_div(int dt, void *p, int d) {
#define ROP_CALL_DIV(D)                                                        \
  rop_div_dt<D>(p, d);                                                         \
  return 0
  ROP_DISPATCH(dt, ROP_CALL_DIV)
#undef ROP_CALL_DIV
  return -1;
}

#endif
