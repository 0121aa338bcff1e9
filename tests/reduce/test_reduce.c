/*
 * CPU reduction kernels against an independent scalar reference: every
 * dtype x op on edge sizes and offset pointers, aliasing, integer wrap,
 * exhaustive float16/bfloat16 conversions, and the vector paths against the
 * portable ones bit for bit.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/reduce.h"

static const size_t sizes[] = {0, 1, 7, 15, 16, 17, 1023, 4099};
static const size_t offsets[] = {0, 1, 3};
static const size_t esz[BRAID_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2,
                                             2, 4, 8, 2, 1, 1, 1};

/* Bitwise ops have no kernels on the float types. */
static int valid(int dt, int op) {
  int flt = dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 ||
            dt == BRAID_FLOAT32 || dt == BRAID_FLOAT64 ||
            dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
  return !(flt && op >= BRAID_BAND);
}

/* What this file's reference covers: the 8-bit floats have their own
 * (test_fp8.c). */
static int here(int dt, int op) {
  return valid(dt, op) && dt != BRAID_FLOAT8_E4M3 && dt != BRAID_FLOAT8_E5M2;
}

/* ---- independent reference for the narrow formats ------------------------
 * Decode with ldexp; encode by searching the ordered positive patterns for
 * the nearest value, ties to the even pattern. */

static double ref_half_decode(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f)
    return m ? NAN : s * INFINITY;
  if (e == 0)
    return s * ldexp(m, -24);
  return s * ldexp(1024 + m, e - 25);
}

static double ref_bf16_decode(uint16_t h) {
  int e = (h >> 7) & 0xff, m = h & 0x7f;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0xff)
    return m ? NAN : s * INFINITY;
  if (e == 0)
    return s * ldexp(m, -133);
  return s * ldexp(128 + m, e - 134);
}

/* Nearest of the finite positive patterns 0..maxfin, or infinity (inf). */
static uint16_t ref_encode(double v, double (*dec)(uint16_t), uint16_t maxfin,
                           uint16_t inf) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  double top = dec(maxfin), ulp = top - dec((uint16_t)(maxfin - 1));
  if (a >= top + ulp / 2) /* ties at the top go to infinity (even) */
    return sign | inf;
  uint16_t lo = 0, hi = maxfin; /* largest pattern with value <= a */
  while (lo < hi) {
    uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
    if (dec(mid) <= a)
      lo = mid;
    else
      hi = (uint16_t)(mid - 1);
  }
  if (lo == maxfin)
    return sign | lo;
  double d0 = a - dec(lo), d1 = dec((uint16_t)(lo + 1)) - a;
  if (d1 < d0 || (d1 == d0 && (lo & 1)))
    lo++;
  return sign | lo;
}

static uint16_t ref_half_encode(double v) {
  return ref_encode(v, ref_half_decode, 0x7bff, 0x7c00);
}
static uint16_t ref_bf16_encode(double v) {
  return ref_encode(v, ref_bf16_decode, 0x7f7f, 0x7f80);
}

/* ---- reference element op ------------------------------------------------ */

static double fop(double x, double y, braid_op op) {
  switch (op) {
  case BRAID_PROD:
    return x * y;
  case BRAID_MIN:
    return isnan(x) ? x : (x < y ? x : y);
  case BRAID_MAX:
    return isnan(x) ? x : (x > y ? x : y);
  default:
    return x + y;
  }
}

#define IREF(T, U)                                                             \
  do {                                                                         \
    T x, y, r;                                                                 \
    memcpy(&x, a, sizeof x);                                                   \
    memcpy(&y, b, sizeof y);                                                   \
    switch (op) {                                                              \
    case BRAID_PROD:                                                           \
      r = (T)((U)x * (U)y);                                                    \
      break;                                                                   \
    case BRAID_MIN:                                                            \
      r = x < y ? x : y;                                                       \
      break;                                                                   \
    case BRAID_MAX:                                                            \
      r = x > y ? x : y;                                                       \
      break;                                                                   \
    case BRAID_BAND:                                                           \
      r = (T)((U)x & (U)y);                                                    \
      break;                                                                   \
    case BRAID_BOR:                                                            \
      r = (T)((U)x | (U)y);                                                    \
      break;                                                                   \
    case BRAID_BXOR:                                                           \
      r = (T)((U)x ^ (U)y);                                                    \
      break;                                                                   \
    default:                                                                   \
      r = (T)((U)x + (U)y);                                                    \
    }                                                                          \
    memcpy(out, &r, sizeof r);                                                 \
  } while (0)

static void ref_op(braid_dtype dt, braid_op op, const void *a, const void *b,
                   void *out) {
  uint16_t h1, h2, hr;
  switch (dt) {
  case BRAID_INT8:
    IREF(int8_t, uint8_t);
    break;
  case BRAID_UINT8:
    IREF(uint8_t, uint8_t);
    break;
  case BRAID_INT32:
    IREF(int32_t, uint32_t);
    break;
  case BRAID_UINT32:
    IREF(uint32_t, uint32_t);
    break;
  case BRAID_INT64:
    IREF(int64_t, uint64_t);
    break;
  case BRAID_UINT64:
    IREF(uint64_t, uint64_t);
    break;
  case BRAID_INT16:
    IREF(int16_t, uint16_t);
    break;
  case BRAID_BOOL: {
    uint8_t x = *(const uint8_t *)a != 0, y = *(const uint8_t *)b != 0, r;
    switch (op) {
    case BRAID_PROD:
    case BRAID_MIN:
    case BRAID_BAND:
      r = x && y;
      break;
    case BRAID_BXOR:
      r = x != y;
      break;
    default: /* sum, max, bor (and avg's sum) */
      r = x || y;
    }
    memcpy(out, &r, 1);
    break;
  }
  case BRAID_FLOAT16:
  case BRAID_BFLOAT16: {
    int half = dt == BRAID_FLOAT16;
    memcpy(&h1, a, 2);
    memcpy(&h2, b, 2);
    double x = half ? ref_half_decode(h1) : ref_bf16_decode(h1);
    double y = half ? ref_half_decode(h2) : ref_bf16_decode(h2);
    if (isnan(x) || isnan(y)) {
      /* the NaN operand, quieted (a's when both are NaN, for min/max) */
      uint16_t q = half ? 0x0200 : 0x0040;
      hr = (uint16_t)((isnan(x) ? h1 : h2) | q);
    } else {
      double r = fop(x, y, op); /* exact in double for these formats */
      if (isnan(r))             /* inf - inf, 0 * inf: some NaN (see same()) */
        hr = half ? 0x7e00 : 0x7fc0;
      else if (op == BRAID_MIN || op == BRAID_MAX)
        hr = (r == x && !(x == y)) ? h1 : h2;
      else
        hr = half ? ref_half_encode(r) : ref_bf16_encode(r);
    }
    memcpy(out, &hr, 2);
    break;
  }
  case BRAID_FLOAT32: {
    float x, y, r;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    r = op == BRAID_PROD  ? x * y
        : op == BRAID_MIN ? (isnan(x) ? x : (x < y ? x : y))
        : op == BRAID_MAX ? (isnan(x) ? x : (x > y ? x : y))
                          : x + y;
    memcpy(out, &r, 4);
    break;
  }
  case BRAID_FLOAT64: {
    double x, y, r;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    r = fop(x, y, op);
    memcpy(out, &r, 8);
    break;
  }
  default:
    cr_assert_fail("bad dtype");
  }
}

static int is_nan_bits(braid_dtype dt, const void *p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
  case BRAID_FLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
  case BRAID_BFLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
  case BRAID_FLOAT32:
    memcpy(&f, p, 4);
    return isnan(f);
  case BRAID_FLOAT64:
    memcpy(&d, p, 8);
    return isnan(d);
  default:
    return 0;
  }
}

/* Equal bit for bit; when both operands were NaN for sum/prod, which NaN
 * comes out is not specified (the compiler may commute the operation). */
static int same(braid_dtype dt, braid_op op, const void *a, const void *b,
                const void *got, const void *want) {
  if (op != BRAID_MIN && op != BRAID_MAX && is_nan_bits(dt, a) &&
      is_nan_bits(dt, b))
    return is_nan_bits(dt, got) && is_nan_bits(dt, want);
  /* a NaN made from numbers (inf - inf): its sign and payload are the
   * hardware's choice */
  if (is_nan_bits(dt, want) && !is_nan_bits(dt, a) && !is_nan_bits(dt, b))
    return is_nan_bits(dt, got);
  return memcmp(got, want, esz[dt]) == 0;
}

/* ---- data ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void fill(braid_dtype dt, void *buf, size_t n) {
  unsigned char *p = buf;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    switch (dt) {
    case BRAID_FLOAT32: {
      float f = (float)((int64_t)(r % 2001) - 1000) / 8.0f;
      if (r % 97 == 0)
        f = NAN;
      else if (r % 89 == 0)
        f = -INFINITY;
      else if (r % 83 == 0)
        f = -0.0f;
      memcpy(p + i * 4, &f, 4);
      break;
    }
    case BRAID_FLOAT64: {
      double d = (double)((int64_t)(r % 20001) - 10000) / 16.0;
      if (r % 97 == 0)
        d = NAN;
      else if (r % 89 == 0)
        d = INFINITY;
      else if (r % 83 == 0)
        d = -0.0;
      memcpy(p + i * 8, &d, 8);
      break;
    }
    default: /* integers and narrow floats: any bit pattern */
      memcpy(p + i * esz[dt], &r, esz[dt]);
    }
  }
}

/* ---- tests --------------------------------------------------------------- */

static void check_one(braid_dtype dt, braid_op op, size_t n, size_t off,
                      int alias, int path) {
  size_t es = esz[dt], pad = 8;
  size_t bytes = (n + off + pad) * es;
  unsigned char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
  unsigned char *want = malloc((n + 1) * es);
  cr_assert(a && b && d && want);
  fill(dt, a, n + off + pad);
  fill(dt, b, n + off + pad);
  memset(d, 0xa5, bytes);
  unsigned char *pa = a + off * es, *pb = b + off * es, *pd = d + off * es;
  for (size_t i = 0; i < n; i++)
    ref_op(dt, op, pa + i * es, alias == 3 ? pa + i * es : pb + i * es,
           want + i * es);
  unsigned char *sa = malloc(bytes), *sb = malloc(bytes);
  memcpy(sa, a, bytes);
  memcpy(sb, b, bytes);
  red_fn f = red_get_path(dt, op, path);
  cr_assert_not_null(f);
  switch (alias) {
  case 1: /* dst == a */
    f(pa, pa, pb, n);
    pd = pa;
    break;
  case 2: /* dst == b */
    f(pb, pa, pb, n);
    pd = pb;
    break;
  case 3: /* dst == a == b */
    f(pa, pa, pa, n);
    pd = pa;
    break;
  default:
    f(pd, pa, pb, n);
  }
  for (size_t i = 0; i < n; i++) {
    const unsigned char *x = sa + (off + i) * es;
    const unsigned char *y = alias == 3 ? x : sb + (off + i) * es;
    cr_assert(same(dt, op, x, y, pd + i * es, want + i * es),
              "%s %s n=%zu off=%zu alias=%d path=%d: element %zu differs",
              braid_dtype_name(dt), braid_op_name(op), n, off, alias, path, i);
  }
  /* nothing outside [0, n) changed */
  unsigned char *base = alias == 0 ? d : alias == 2 ? b : a;
  unsigned char *orig = alias == 2 ? sb : alias == 0 ? NULL : sa;
  for (size_t i = 0; i < off + n + pad; i++) {
    if (i >= off && i < off + n)
      continue;
    for (size_t k = 0; k < es; k++) {
      unsigned char exp = orig ? orig[i * es + k] : 0xa5;
      cr_assert_eq(base[i * es + k], exp, "%s %s n=%zu: wrote outside",
                   braid_dtype_name(dt), braid_op_name(op), n);
    }
  }
  free(a);
  free(b);
  free(d);
  free(sa);
  free(sb);
  free(want);
}

/* One code path (0 portable, 1 AVX2, 2 AVX2 + F16C, 3 AVX2 + AVX-512) against
 * the reference: every dtype x op x size x offset, then aliasing. */
static void check_path_all(int path) {
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
    for (int op = 0; op < BRAID_NUM_OPS; op++)
      for (size_t s = 0; here(dt, op) && s < sizeof sizes / sizeof *sizes;
           s++) {
        for (size_t o = 0; o < sizeof offsets / sizeof *offsets; o++)
          check_one((braid_dtype)dt, (braid_op)op, sizes[s], offsets[o], 0,
                    path);
        for (int alias = 1; alias <= 3; alias++)
          check_one((braid_dtype)dt, (braid_op)op, sizes[s], 1, alias, path);
      }
}

/* Buffers at odd byte addresses (not aligned to the element size). */
static void check_path_misaligned(int path) {
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
    for (int op = 0; op < BRAID_NUM_OPS; op++)
      for (size_t s = 0; here(dt, op) && s < sizeof sizes / sizeof *sizes;
           s++) {
        size_t n = sizes[s], es = esz[dt];
        unsigned char *buf = malloc(3 * (n + 1) * es + 16);
        unsigned char *want = malloc(n * es + 1);
        cr_assert(buf && want);
        unsigned char *a = buf + 1, *b = a + n * es + 3, *d = b + n * es + 5;
        fill((braid_dtype)dt, a, n);
        fill((braid_dtype)dt, b, n);
        for (size_t i = 0; i < n; i++)
          ref_op((braid_dtype)dt, (braid_op)op, a + i * es, b + i * es,
                 want + i * es);
        red_fn f = red_get_path((braid_dtype)dt, (braid_op)op, path);
        f(d, a, b, n);
        for (size_t i = 0; i < n; i++)
          cr_assert(same((braid_dtype)dt, (braid_op)op, a + i * es, b + i * es,
                         d + i * es, want + i * es),
                    "%s %s n=%zu path %d: element %zu differs",
                    braid_dtype_name((braid_dtype)dt),
                    braid_op_name((braid_op)op), n, path, i);
        f(a, a, b, n); /* in place, misaligned */
        for (size_t i = 0; i < n; i++)
          cr_assert(memcmp(a + i * es, d + i * es, es) == 0 ||
                        is_nan_bits((braid_dtype)dt, d + i * es),
                    "in place: element %zu differs", i);
        free(buf);
        free(want);
      }
}

/* The portable path, which every CPU has. */
Test(reduce, portable_path_every_dtype_op_size_offset_alias) {
  cr_assert_not_null(red_get_path(BRAID_FLOAT32, BRAID_SUM, 0));
  check_path_all(0);
}

Test(reduce, portable_path_misaligned_bytes) { check_path_misaligned(0); }

Test(reduce, dispatch_uses_best_path) {
  red_fn best = NULL;
  for (int path = 0; path < 4; path++)
    if (red_get_path(BRAID_FLOAT16, BRAID_SUM, path))
      best = red_get_path(BRAID_FLOAT16, BRAID_SUM, path);
  cr_assert_eq(red_get(BRAID_FLOAT16, BRAID_SUM), best);
  cr_assert_eq(red_get_scalar(BRAID_FLOAT16, BRAID_MAX),
               red_get_path(BRAID_FLOAT16, BRAID_MAX, 0));
  cr_assert_null(red_get_path(BRAID_FLOAT16, BRAID_SUM, 4));
}

Test(reduce, bad_arguments) {
  cr_assert_null(red_get((braid_dtype)BRAID_NUM_DTYPES, BRAID_SUM));
  cr_assert_null(red_get(BRAID_FLOAT32, (braid_op)BRAID_NUM_OPS));
  cr_assert_null(red_get((braid_dtype)-1, BRAID_SUM));
  cr_assert_eq(red_get(BRAID_INT32, BRAID_AVG),
               red_get(BRAID_INT32, BRAID_SUM));
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
    for (int op = 0; op < BRAID_NUM_OPS; op++)
      cr_assert_eq(
          red_get((braid_dtype)dt, (braid_op)op) != NULL, valid(dt, op),
          "%s %s: a kernel where none should be, or "
          "none where one should",
          braid_dtype_name((braid_dtype)dt), braid_op_name((braid_op)op));
  cr_log_info("reduction code path: %s", red_isa());
}

/* red_get_rev's kernels take their operands the other way round: for every
 * dtype and op, dst = rev(a, b) holds the bytes of red_get's (b, a), on data
 * with NaNs and signed zeros (float min of +0 and -0 gives its second
 * operand, so the order shows), and dst may alias either operand. */
Test(reduce, reversed_kernels_swap_operands) {
  enum { N = 1031 };
  static unsigned char a[N * 8], b[N * 8], want[N * 8], got[N * 8];
  int checked = 0;
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
    for (int op = 0; op < BRAID_NUM_OPS; op++) {
      red_fn fwd = red_get((braid_dtype)dt, (braid_op)op);
      red_fn rev = red_get_rev((braid_dtype)dt, (braid_op)op);
      cr_assert_eq(rev != NULL, fwd != NULL, "%s %s",
                   braid_dtype_name((braid_dtype)dt),
                   braid_op_name((braid_op)op));
      if (fwd == NULL)
        continue;
      size_t bytes = N * esz[dt];
      fill((braid_dtype)dt, a, N);
      fill((braid_dtype)dt, b, N);
      fwd(want, b, a, N);
      rev(got, a, b, N);
      cr_assert(memcmp(want, got, bytes) == 0, "%s %s: rev(a, b) != (b, a)",
                braid_dtype_name((braid_dtype)dt), braid_op_name((braid_op)op));
      memcpy(got, a, bytes); /* dst aliases a, the local operand */
      rev(got, got, b, N);
      cr_assert(memcmp(want, got, bytes) == 0, "%s %s: in place",
                braid_dtype_name((braid_dtype)dt), braid_op_name((braid_op)op));
      checked++;
    }
  cr_assert_gt(checked, 80);
  float x[2] = {0.0f, 1.0f}, y[2] = {-0.0f, 2.0f}, d[2];
  red_get(BRAID_FLOAT32, BRAID_MIN)(d, x, y, 2);
  cr_assert(signbit(d[0]) && d[1] == 1.0f); /* equal operands give b */
  red_get_rev(BRAID_FLOAT32, BRAID_MIN)(d, x, y, 2);
  cr_assert(!signbit(d[0]) && d[1] == 1.0f); /* here b is x */
  cr_assert_null(red_get_rev(BRAID_FLOAT32, BRAID_BXOR));
  cr_assert_null(red_get_rev((braid_dtype)BRAID_NUM_DTYPES, BRAID_SUM));
}

Test(reduce, integer_wrap) {
  int32_t a32[2] = {INT32_MAX, INT32_MIN}, b32[2] = {1, -1}, d32[2];
  red_get(BRAID_INT32, BRAID_SUM)(d32, a32, b32, 2);
  cr_assert_eq(d32[0], INT32_MIN);
  cr_assert_eq(d32[1], INT32_MAX);
  int8_t a8[3] = {127, -128, 100}, b8[3] = {2, -1, 100}, d8[3];
  red_get(BRAID_INT8, BRAID_PROD)(d8, a8, b8, 3);
  cr_assert_eq(d8[0], -2);
  cr_assert_eq(d8[1], -128);
  cr_assert_eq(d8[2], (int8_t)16); /* 10000 mod 256 = 16 */
  uint64_t au[1] = {UINT64_MAX}, bu[1] = {2}, du[1];
  red_get(BRAID_UINT64, BRAID_SUM)(du, au, bu, 1);
  cr_assert_eq(du[0], 1u);
  int64_t a64[1] = {INT64_MIN}, b64[1] = {-1}, d64[1];
  red_get(BRAID_INT64, BRAID_PROD)(d64, a64, b64, 1);
  cr_assert_eq(d64[0], INT64_MIN);
  uint8_t x8[1] = {200}, y8[1] = {100}, z8[1];
  red_get(BRAID_UINT8, BRAID_SUM)(z8, x8, y8, 1);
  cr_assert_eq(z8[0], 44);
  red_get(BRAID_UINT8, BRAID_MIN)(z8, x8, y8, 1);
  cr_assert_eq(z8[0], 100); /* unsigned compare */
  red_get(BRAID_INT8, BRAID_MIN)(d8, a8, b8, 3);
  cr_assert_eq(d8[0], 2);
  cr_assert_eq(d8[1], -128);
}

Test(reduce, float_nan_and_zero) {
  float a[4] = {NAN, 1.0f, -0.0f, 0.0f}, b[4] = {2.0f, NAN, 0.0f, -0.0f};
  float d[4];
  red_get(BRAID_FLOAT32, BRAID_MIN)(d, a, b, 4);
  cr_assert(isnan(d[0]) && isnan(d[1]));
  cr_assert(!signbit(d[2]) && signbit(d[3])); /* equal operands give b */
  red_get(BRAID_FLOAT32, BRAID_MAX)(d, a, b, 4);
  cr_assert(isnan(d[0]) && isnan(d[1]));
  double x[2] = {INFINITY, -INFINITY}, y[2] = {NAN, 5}, z[2];
  red_get(BRAID_FLOAT64, BRAID_MAX)(z, x, y, 2);
  cr_assert(isnan(z[0]));
  cr_assert_eq(z[1], 5.0);
}

Test(reduce, half_conversion_exhaustive) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = red_half_to_float((uint16_t)h);
    double want = ref_half_decode((uint16_t)h);
    uint32_t fb;
    memcpy(&fb, &f, 4);
    if (isnan(want)) {
      cr_assert(isnan(f), "half %04x should be NaN", h);
      cr_assert(fb & 0x400000u, "half %04x: NaN should be quiet", h);
      cr_assert_eq(!!(fb >> 31), !!(h & 0x8000), "half %04x: NaN sign", h);
      cr_assert_eq(red_float_to_half(f), h | 0x200, "NaN %04x round trip", h);
    } else {
      cr_assert_eq((double)f, want, "half %04x decodes to %a", h, (double)f);
      cr_assert_eq(!!signbit(f), !!(h & 0x8000), "half %04x sign", h);
      cr_assert_eq(red_float_to_half(f), h, "half %04x round trip", h);
    }
  }
  /* Every rounding boundary: the midpoint between neighbours (ties to even)
   * and one float ulp either side. */
  for (uint16_t h = 0; h < 0x7c00; h++) {
    double lo = ref_half_decode(h);
    double hi = h == 0x7bff ? 65536.0 : ref_half_decode((uint16_t)(h + 1));
    float mid = (float)((lo + hi) / 2);
    cr_assert_eq((double)mid, (lo + hi) / 2);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
    cr_assert_eq(red_float_to_half(mid), even, "tie above %04x", h);
    cr_assert_eq(red_float_to_half(-mid), even | 0x8000, "tie %04x neg", h);
    cr_assert_eq(red_float_to_half(nextafterf(mid, 0)), h, "below tie %04x", h);
    cr_assert_eq(red_float_to_half(nextafterf(mid, INFINITY)), h + 1,
                 "above tie %04x", h);
  }
  cr_assert_eq(red_float_to_half(1e-30f), 0);
  cr_assert_eq(red_float_to_half(-1e-30f), 0x8000);
  cr_assert_eq(red_float_to_half(1e30f), 0x7c00);
  cr_assert_eq(red_float_to_half(-INFINITY), 0xfc00);
  cr_assert_eq(red_float_to_half(65519.0f), 0x7bff);
  cr_assert_eq(red_float_to_half(65520.0f), 0x7c00);
  cr_assert_eq(red_float_to_half(ldexpf(1, -24)), 0x0001);
  cr_assert_eq(red_float_to_half(ldexpf(3, -26)), 0x0001); /* 0.75 unit */
}

Test(reduce, bf16_conversion_exhaustive) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = red_bf16_to_float((uint16_t)h);
    double want = ref_bf16_decode((uint16_t)h);
    if (isnan(want)) {
      cr_assert(isnan(f), "bf16 %04x should be NaN", h);
      cr_assert_eq(red_float_to_bf16(f), h | 0x40, "NaN %04x round trip", h);
    } else {
      cr_assert_eq((double)f, want, "bf16 %04x decodes to %a", h, (double)f);
      cr_assert_eq(red_float_to_bf16(f), h, "bf16 %04x round trip", h);
    }
  }
  for (uint16_t h = 0; h < 0x7f80; h++) {
    double lo = ref_bf16_decode(h);
    double hi =
        h == 0x7f7f ? ldexp(1, 128) : ref_bf16_decode((uint16_t)(h + 1));
    double m = (lo + hi) / 2;
    if (h == 0x7f7f) { /* the tie is above FLT_MAX: check just below it */
      cr_assert_eq(red_float_to_bf16(FLT_MAX), 0x7f80);
      cr_assert_eq(red_float_to_bf16(nextafterf((float)lo, INFINITY)), h);
      continue;
    }
    float mid = (float)m;
    cr_assert_eq((double)mid, m);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
    cr_assert_eq(red_float_to_bf16(mid), even, "tie above %04x", h);
    cr_assert_eq(red_float_to_bf16(nextafterf(mid, 0)), h, "below %04x", h);
    cr_assert_eq(red_float_to_bf16(nextafterf(mid, INFINITY)), h + 1,
                 "above %04x", h);
  }
}

/* All 65536 patterns of a against a set of b values through every op: a
 * vector path's kernel equals the portable one, and a sample equals the
 * reference. */
static void narrow_path(braid_dtype dt, int path) {
  static const uint16_t half_b[] = {
      0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01,
      0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe55, 0x1234, 0x5555};
  static const uint16_t bf_b[] = {
      0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x3f81,
      0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffaa, 0x1234, 0x4049};
  const uint16_t *bs = dt == BRAID_FLOAT16 ? half_b : bf_b;
  size_t nb = sizeof half_b / sizeof *half_b;
  size_t n = 65536;
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
  uint16_t *d1 = malloc(n * 2), *d2 = malloc(n * 2);
  cr_assert(a && b && d1 && d2);
  for (size_t i = 0; i < n; i++)
    a[i] = (uint16_t)i;
  for (int op = 0; op < 4; op++) {
    red_fn fast = red_get_path(dt, (braid_op)op, path);
    red_fn slow = red_get_scalar(dt, (braid_op)op);
    for (size_t k = 0; k < nb; k++) {
      for (size_t i = 0; i < n; i++)
        b[i] = bs[k];
      fast(d1, a, b, n);
      slow(d2, a, b, n);
      for (size_t i = 0; i < n; i++) {
        cr_assert(same(dt, (braid_op)op, &a[i], &b[i], &d1[i], &d2[i]),
                  "%s %s: %04x op %04x: vector %04x, portable %04x",
                  braid_dtype_name(dt), braid_op_name((braid_op)op), a[i], b[i],
                  d1[i], d2[i]);
        if (i % 7 == 0) {
          uint16_t want;
          ref_op(dt, (braid_op)op, &a[i], &b[i], &want);
          cr_assert(same(dt, (braid_op)op, &a[i], &b[i], &d1[i], &want),
                    "%s %s: %04x op %04x = %04x, want %04x",
                    braid_dtype_name(dt), braid_op_name((braid_op)op), a[i],
                    b[i], d1[i], want);
        }
      }
    }
  }
  free(a);
  free(b);
  free(d1);
  free(d2);
}

/* The vector paths, each a test of its own (ctest: reduce_vector_paths):
 * one this CPU lacks is reported as a skip naming it, not passed. */
static const char *const path_names[] = {"portable", "AVX2", "AVX2 + F16C",
                                         "AVX2 + AVX-512"};
ParameterizedTestParameters(reduce_path, against_reference) {
  static int paths[] = {1, 2, 3};
  return cr_make_param_array(int, paths, sizeof paths / sizeof *paths);
}

ParameterizedTest(int *path, reduce_path, against_reference) {
  if (red_get_path(BRAID_FLOAT32, BRAID_SUM, *path) == NULL)
    cr_skip_test("reduction code path %d (%s) is not available on this CPU: "
                 "its kernels are not tested here",
                 *path, path_names[*path]);
  check_path_all(*path);
  check_path_misaligned(*path);
  narrow_path(BRAID_FLOAT16, *path);
  narrow_path(BRAID_BFLOAT16, *path);
}

Test(reduce, divide_for_avg) {
  int32_t i32[4] = {-7, 7, INT32_MIN, 5};
  red_div(i32, 4, BRAID_INT32, 2);
  cr_assert_eq(i32[0], -3); /* toward zero */
  cr_assert_eq(i32[1], 3);
  cr_assert_eq(i32[2], INT32_MIN / 2);
  cr_assert_eq(i32[3], 2);
  int8_t i8[2] = {-128, 127};
  red_div(i8, 2, BRAID_INT8, 3);
  cr_assert_eq(i8[0], -42);
  cr_assert_eq(i8[1], 42);
  uint64_t u64[1] = {UINT64_MAX};
  red_div(u64, 1, BRAID_UINT64, 2);
  cr_assert_eq(u64[0], UINT64_MAX / 2);
  uint8_t u8[1] = {255};
  red_div(u8, 1, BRAID_UINT8, 4);
  cr_assert_eq(u8[0], 63);
  float f[2] = {1.0f, -3.0f};
  red_div(f, 2, BRAID_FLOAT32, 4);
  cr_assert_eq(f[0], 0.25f);
  cr_assert_eq(f[1], -0.75f);
  double dd[1] = {1.0};
  red_div(dd, 1, BRAID_FLOAT64, 3);
  cr_assert_eq(dd[0], 1.0 / 3.0);
  uint16_t h[2] = {0x3c00, 0x4200}; /* 1.0, 3.0 */
  red_div(h, 2, BRAID_FLOAT16, 3);
  cr_assert_eq(h[0], ref_half_encode(1.0 / 3.0));
  cr_assert_eq(h[1], 0x3c00);
  uint16_t bf[1] = {0x3f80};
  red_div(bf, 1, BRAID_BFLOAT16, 3);
  cr_assert_eq(bf[0], ref_bf16_encode(1.0 / 3.0));
  int32_t same1[1] = {-9};
  red_div(same1, 1, BRAID_INT32, 1);
  cr_assert_eq(same1[0], -9);
}
