/*
 * The 8-bit floats (device/fp8.h, the CPU kernels of src/reduce.c): every
 * e4m3 and e5m2 value decoded against a decoder written here from the
 * formats' definitions, encoding against a nearest-value search (ties to
 * the even pattern, saturation at the largest finite), rounding and
 * saturation cases by hand, every pair of operands through every kernel
 * against the exact result rounded once, the same through half as NCCL
 * computes, the vector paths against the portable one, division and the
 * pre-multiplied sum's local step.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "device/fp8.h"
#include "src/reduce.h"

/* ---- independent reference ---------------------------------------------- */

typedef struct fmt {
  int e5m2, mbits, bias;
  uint8_t maxfin;
  braid_dtype dt;
} fmt;

static const fmt E4 = {0, 3, 7, 0x7e, BRAID_FLOAT8_E4M3};
static const fmt E5 = {1, 2, 15, 0x7b, BRAID_FLOAT8_E5M2};

static int ref_isnan(const fmt *f, uint8_t x) {
  int e = (x & 0x7f) >> f->mbits, m = x & ((1 << f->mbits) - 1);
  int emax = f->e5m2 ? 31 : 15;
  return f->e5m2 ? (e == emax && m != 0) : (e == emax && m == 7);
}

static double ref_decode(const fmt *f, uint8_t x) {
  int e = (x & 0x7f) >> f->mbits, m = x & ((1 << f->mbits) - 1);
  double s = (x & 0x80) ? -1.0 : 1.0;
  if (ref_isnan(f, x))
    return NAN;
  if (f->e5m2 && e == 31)
    return s * INFINITY;
  if (e == 0)
    return s * ldexp(m, 1 - f->bias - f->mbits);
  return s * ldexp((1 << f->mbits) + m, e - f->bias - f->mbits);
}

/* The nearest finite pattern, ties to the even one; beyond the largest
 * finite (infinities too): the largest finite of the sign. */
static uint8_t ref_encode(const fmt *f, double v) {
  uint8_t sign = signbit(v) ? 0x80 : 0;
  double a = fabs(v);
  if (isnan(v))
    return 0; /* not used for NaN */
  if (a >= ref_decode(f, f->maxfin))
    return sign | f->maxfin;
  uint8_t best = 0;
  for (uint8_t p = 1; p <= f->maxfin; p++) {
    double d = fabs(ref_decode(f, p) - a), db = fabs(ref_decode(f, best) - a);
    if (d < db || (d == db && !(p & 1)))
      best = p;
  }
  return sign | best;
}

/* float result of op with the documented NaN rules, then rounded once */
static uint8_t ref_op(const fmt *f, int op, uint8_t a, uint8_t b) {
  double u = ref_decode(f, a), v = ref_decode(f, b);
  uint8_t nan_a = (uint8_t)((a & 0x80) | (f->e5m2 ? 0x7e | (a & 1) : 0x7f));
  uint8_t nan_b = (uint8_t)((b & 0x80) | (f->e5m2 ? 0x7e | (b & 1) : 0x7f));
  if (isnan(u))
    return nan_a;
  if (op != FP8_MIN && op != FP8_MAX && isnan(v))
    return nan_b;
  double r;
  switch (op) {
  case FP8_SUM:
    r = u + v;
    break;
  case FP8_PROD:
    r = u * v;
    break;
  case FP8_MIN:
    if (isnan(v))
      return nan_b;
    r = u < v ? u : v;
    if (u == v) /* +0 and -0: b */
      r = v;
    break;
  default:
    if (isnan(v))
      return nan_b;
    r = u > v ? u : v;
    if (u == v)
      r = v;
    break;
  }
  if (isnan(r)) /* inf - inf, 0 * inf */
    return f->e5m2 ? 0x7e : 0x7f;
  return ref_encode(f, r);
}

static const fmt *fmts[2] = {&E4, &E5};

/* ---- conversions -------------------------------------------------------- */

Test(fp8, every_value_decodes_as_the_format_says) {
  for (int k = 0; k < 2; k++) {
    const fmt *f = fmts[k];
    for (int x = 0; x < 256; x++) {
      float got = fp8_to_float((uint8_t)x, f->e5m2);
      double want = ref_decode(f, (uint8_t)x);
      if (isnan(want)) {
        cr_assert(isnan(got), "%s %#04x: want NaN, got %g",
                  braid_dtype_name(f->dt), x, got);
        cr_assert_eq(signbit(got) != 0, (x & 0x80) != 0, "NaN sign");
        continue;
      }
      cr_assert(
          (double)got == want && (signbit(got) != 0) == (signbit(want) != 0),
          "%s %#04x: want %g, got %g", braid_dtype_name(f->dt), x, want, got);
    }
  }
}

Test(fp8, every_value_encodes_back_to_itself) {
  for (int k = 0; k < 2; k++) {
    const fmt *f = fmts[k];
    for (int x = 0; x < 256; x++) {
      uint8_t back = fp8_from_float(fp8_to_float((uint8_t)x, f->e5m2), f->e5m2);
      uint8_t want = (uint8_t)x;
      if (ref_isnan(f, (uint8_t)x)) /* quieted */
        want = (uint8_t)((x & 0x80) | (f->e5m2 ? 0x7e | (x & 1) : 0x7f));
      else if (f->e5m2 && (x & 0x7f) == 0x7c) /* infinity saturates */
        want = (uint8_t)((x & 0x80) | 0x7b);
      cr_assert_eq(back, want, "%s %#04x: back as %#04x, want %#04x",
                   braid_dtype_name(f->dt), x, back, want);
    }
  }
}

/* Around every finite value: the midpoints with the next one, and a float
 * ulp either side of them, encoded against the nearest-value search. */
Test(fp8, rounding_at_every_midpoint) {
  for (int k = 0; k < 2; k++) {
    const fmt *f = fmts[k];
    for (int p = 0; p < f->maxfin; p++) {
      double lo = ref_decode(f, (uint8_t)p),
             hi = ref_decode(f, (uint8_t)(p + 1));
      float mid = (float)((lo + hi) / 2);
      float cand[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
      for (int c = 0; c < 3; c++)
        for (int s = 0; s < 2; s++) {
          float v = s ? -cand[c] : cand[c];
          cr_assert_eq(fp8_from_float(v, f->e5m2), ref_encode(f, v),
                       "%s of %a: %#04x, want %#04x", braid_dtype_name(f->dt),
                       (double)v, fp8_from_float(v, f->e5m2), ref_encode(f, v));
        }
    }
  }
}

Test(fp8, rounding_saturation_and_nan_by_hand) {
  /* e4m3: 1 + 1/16 is a tie between 1 (0x38) and 1.125 (0x39): even */
  cr_assert_eq(fp8_from_float(1.0625f, 0), 0x38);
  cr_assert_eq(fp8_from_float(1.1875f, 0), 0x3a); /* tie up to even 1.25 */
  cr_assert_eq(fp8_from_float(448.0f, 0), 0x7e);
  cr_assert_eq(fp8_from_float(464.0f, 0), 0x7e); /* not the NaN pattern */
  cr_assert_eq(fp8_from_float(1e30f, 0), 0x7e);
  cr_assert_eq(fp8_from_float(INFINITY, 0), 0x7e);
  cr_assert_eq(fp8_from_float(-INFINITY, 0), 0xfe);
  cr_assert_eq(fp8_from_float(NAN, 0), 0x7f);
  cr_assert_eq(fp8_from_float(-NAN, 0), 0xff);
  cr_assert_eq(fp8_from_float(0x1p-9f, 0), 0x01);  /* smallest subnormal */
  cr_assert_eq(fp8_from_float(0x1p-10f, 0), 0x00); /* tie to even: zero */
  cr_assert_eq(fp8_from_float(0x1.8p-10f, 0), 0x01);
  cr_assert_eq(fp8_from_float(-0.0f, 0), 0x80);
  cr_assert_eq(fp8_from_float(0x1.fp-7f, 0), 0x08); /* rounds up to 2^-6 */
  /* e5m2 */
  cr_assert_eq(fp8_from_float(57344.0f, 1), 0x7b);
  cr_assert_eq(fp8_from_float(61440.0f, 1), 0x7b); /* saturates, no inf */
  cr_assert_eq(fp8_from_float(INFINITY, 1), 0x7b);
  cr_assert_eq(fp8_from_float(-INFINITY, 1), 0xfb);
  cr_assert_eq(fp8_from_float(NAN, 1), 0x7e);
  cr_assert_eq(fp8_from_float(0x1p-16f, 1), 0x01);
  cr_assert_eq(fp8_from_float(0x1p-17f, 1), 0x00);
  cr_assert_eq(fp8_from_float(1.125f, 1), 0x3c); /* tie: 1.0 even */
  cr_assert_eq(fp8_from_float(1.375f, 1), 0x3e); /* tie: 1.5 even */
  cr_assert(isinf(fp8_to_float(0x7c, 1)) && fp8_to_float(0xfc, 1) < 0);
  cr_assert_eq(fp8_to_float(0x7e, 0), 448.0f);
  cr_assert_eq(fp8_to_float(0x7b, 1), 57344.0f);
}

/* ---- operations --------------------------------------------------------- */

static void all_pairs(const fmt *f, int path) {
  static uint8_t a[65536], b[65536], d[65536];
  for (int i = 0; i < 65536; i++) {
    a[i] = (uint8_t)(i >> 8);
    b[i] = (uint8_t)i;
  }
  for (int op = 0; op < 4; op++) {
    red_fn fn = red_get_path(f->dt, (braid_op)op, path);
    cr_assert_not_null(fn);
    fn(d, a, b, 65536);
    for (int i = 0; i < 65536; i++) {
      uint8_t want = ref_op(f, op, a[i], b[i]);
      cr_assert_eq(d[i], want,
                   "%s %s %#04x, %#04x: %#04x, want %#04x (path %d)",
                   braid_dtype_name(f->dt), braid_op_name((braid_op)op), a[i],
                   b[i], d[i], want, path);
    }
  }
}

Test(fp8, every_pair_every_op_portable) {
  all_pairs(&E4, 0);
  all_pairs(&E5, 0);
}

Test(fp8, every_pair_every_op_vector_paths) {
  int any = 0;
  for (int path = 1; path < 4; path++) {
    if (red_get_path(BRAID_FLOAT8_E4M3, BRAID_SUM, path) == NULL)
      continue;
    any = 1;
    all_pairs(&E4, path);
    all_pairs(&E5, path);
  }
  if (!any)
    cr_skip_test("no vector path on this CPU");
}

/* NCCL reduces fp8 through half (widen, op in half, round to fp8): at these
 * widths the double rounding never changes a result, so braid's one
 * rounding from float gives NCCL's bits for every finite pair. */
Test(fp8, same_bits_as_through_half) {
  for (int k = 0; k < 2; k++) {
    const fmt *f = fmts[k];
    for (int x = 0; x < 256; x++)
      for (int y = 0; y < 256; y++) {
        if (ref_isnan(f, (uint8_t)x) || ref_isnan(f, (uint8_t)y))
          continue;
        float u = fp8_to_float((uint8_t)x, f->e5m2);
        float v = fp8_to_float((uint8_t)y, f->e5m2);
        float s = u + v, p = u * v;
        if (s != s || p != p)
          continue;
        float hs = red_half_to_float(red_float_to_half(s));
        float hp = red_half_to_float(red_float_to_half(p));
        cr_assert_eq(fp8_from_float(hs, f->e5m2),
                     fp8_op(FP8_SUM, (uint8_t)x, (uint8_t)y, f->e5m2),
                     "%s sum %#04x %#04x", braid_dtype_name(f->dt), x, y);
        cr_assert_eq(fp8_from_float(hp, f->e5m2),
                     fp8_op(FP8_PROD, (uint8_t)x, (uint8_t)y, f->e5m2),
                     "%s prod %#04x %#04x", braid_dtype_name(f->dt), x, y);
      }
  }
}

/* In place and at odd sizes, through the dispatching kernel. */
Test(fp8, in_place_and_odd_sizes) {
  uint8_t a[37], b[37], want[37];
  for (int i = 0; i < 37; i++) {
    a[i] = (uint8_t)(i * 7 + 3);
    b[i] = (uint8_t)(i * 13 + 1);
    want[i] = ref_op(&E4, FP8_SUM, a[i], b[i]);
  }
  red_get(BRAID_FLOAT8_E4M3, BRAID_SUM)(a, a, b, 37);
  cr_assert_arr_eq(a, want, 37);
  cr_assert_null(red_get(BRAID_FLOAT8_E4M3, BRAID_BAND));
  cr_assert_null(red_get(BRAID_FLOAT8_E5M2, BRAID_BXOR));
}

Test(fp8, divide_for_avg) {
  uint8_t e4[3] = {0x48, 0x38, 0x7f}; /* 4, 1, NaN */
  red_div(e4, 3, BRAID_FLOAT8_E4M3, 3);
  cr_assert_eq(e4[0], ref_encode(&E4, 4.0 / 3.0)); /* 1.375: 0x3b */
  cr_assert_eq(e4[0], 0x3b);
  cr_assert_eq(e4[1], ref_encode(&E4, 1.0 / 3.0));
  cr_assert_eq(e4[2], 0x7f);
  uint8_t e5[1] = {0x48}; /* 8 */
  red_div(e5, 1, BRAID_FLOAT8_E5M2, 3);
  cr_assert_eq(e5[0], ref_encode(&E5, 8.0 / 3.0));
}

Test(fp8, premul_local_step) {
  uint8_t x[4] = {0x38, 0x40, 0x7e, 0xb8}, s = 0x40; /* 1, 2, 448, -1; x2 */
  uint8_t d[4];
  cr_assert_eq(red_premul(d, x, 4, BRAID_FLOAT8_E4M3, &s), 0);
  cr_assert_eq(d[0], 0x40);
  cr_assert_eq(d[1], 0x48);
  cr_assert_eq(d[2], 0x7e); /* 896 saturates */
  cr_assert_eq(d[3], 0xc0);
  uint8_t h = 0x34; /* e4m3 0.75 as scalar, against the reference */
  for (int v = 0; v < 256; v++) {
    uint8_t in = (uint8_t)v, out;
    red_premul(&out, &in, 1, BRAID_FLOAT8_E4M3, &h);
    cr_assert_eq(out, ref_op(&E4, FP8_PROD, in, h), "%#04x", v);
  }
  int32_t i32[2] = {3, INT32_MAX}, si = 2;
  red_premul(i32, i32, 2, BRAID_INT32, &si);
  cr_assert_eq(i32[0], 6);
  cr_assert_eq(i32[1], -2); /* wraps */
  float f[1] = {1.5f}, sf = 0.25f;
  red_premul(f, f, 1, BRAID_FLOAT32, &sf);
  cr_assert_eq(f[0], 0.375f);
  uint16_t hv[1] = {0x3e00}, hs = 0x3c00 | 0x0200; /* 1.5 x 1.5 */
  red_premul(hv, hv, 1, BRAID_FLOAT16, &hs);
  cr_assert_eq(hv[0], 0x4080); /* 2.25 */
  uint8_t bl = 1;
  cr_assert_eq(red_premul(&bl, &bl, 1, BRAID_BOOL, &bl), -1);
}
