/*
 * The CUDA kernels' element functions (device/reduce_ops.cuh), run
 * on the host, against the CPU kernels (src/reduce.h) bit for bit: every
 * dtype x op on thousands of random operands mixed with the values that
 * break reductions (NaN with payloads, signalling NaN, +-0, +-inf,
 * subnormals, integer extremes, equal operands), the division of BRAID_AVG,
 * and the float16/bfloat16 conversions; for float8_e4m3 and float8_e5m2
 * every pair of 8-bit values for each op (element and vector functions,
 * against device/fp8.h and the CPU kernels), every division and every
 * product with a scalar (the pre-multiplied sum). Needs no GPU.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "src/reduce.h"
}
#include "device/reduce_ops.cuh"

/* The device's kernels take the first ten dtypes and five ops; int16, bool
 * and the bitwise ops are refused on device buffers (docs/CUDA.md). */
#define DEV_DTYPES (BRAID_FLOAT64 + 1)
#define DEV_OPS (BRAID_AVG + 1)
static const size_t esz[DEV_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *dname[DEV_DTYPES] = {
    "int8",   "uint8",   "int32",    "uint32",  "int64",
    "uint64", "float16", "bfloat16", "float32", "float64"};
static const char *oname[DEV_OPS] = {"sum", "prod", "min", "max", "avg"};

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Values that break reductions, as bit patterns of each width. */
static const uint16_t sp16h[] = {
    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7d55,
    0xfdff, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff,
    0x3c00, 0xbc00, 0x3c01, 0x3bff, 0x5bff, 0x7800, 0x0200, 0x4000};
static const uint16_t sp16b[] = {
    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fa5,
    0xff81, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x7f7f, 0xff7f,
    0x3f80, 0xbf80, 0x3f81, 0x3f7f, 0x4b00, 0x7f00, 0x0040, 0x4000};
static const uint32_t sp32[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
    0xffc00000u, 0x7f800001u, 0x7fa5a5a5u, 0xff812345u, 0x00000001u,
    0x80000001u, 0x007fffffu, 0x807fffffu, 0x00800000u, 0x7f7fffffu,
    0xff7fffffu, 0x3f800000u, 0xbf800000u, 0x3f800001u, 0x4b800000u,
    0x7fffffffu, 0x33800000u, 0x38800000u, 0x477ff000u};
static const uint64_t sp64[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
    0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000000ull,
    0x7ff0000000000001ull, 0x7ff4a5a5a5a5a5a5ull, 0xfff0000012345678ull,
    0x0000000000000001ull, 0x8000000000000001ull, 0x000fffffffffffffull,
    0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
    0x3ff0000000000000ull, 0xbff0000000000000ull, 0x3ff0000000000001ull,
    0x7fffffffffffffffull, 0xffffffffffffffffull, 0x4330000000000000ull,
    0x0000000000000002ull};

#define NSP(a) (sizeof(a) / sizeof((a)[0]))

/* One random operand of dtype dt: a special value, a small number (equal
 * operands and exact ties are common), or random bits. */
static void gen(braid_dtype dt, void *out) {
  uint64_t r = rnd(), k = r % 8;
  uint64_t bits = rnd();
  int small = (int)((r >> 8) % 9) - 4;
  switch (dt) {
  case BRAID_FLOAT16:
  case BRAID_BFLOAT16: {
    const uint16_t *sp = dt == BRAID_FLOAT16 ? sp16h : sp16b;
    uint16_t h = (uint16_t)bits;
    if (k < 3)
      h = sp[(r >> 16) % NSP(sp16h)];
    else if (k < 5)
      h = dt == BRAID_FLOAT16 ? red_float_to_half((float)small)
                              : red_float_to_bf16((float)small);
    memcpy(out, &h, 2);
    return;
  }
  case BRAID_FLOAT32: {
    uint32_t u = (uint32_t)bits;
    if (k < 3)
      u = sp32[(r >> 16) % NSP(sp32)];
    else if (k < 5) {
      float f = (float)small * 0.75f;
      memcpy(&u, &f, 4);
    }
    memcpy(out, &u, 4);
    return;
  }
  case BRAID_FLOAT64: {
    uint64_t u = bits;
    if (k < 3)
      u = sp64[(r >> 16) % NSP(sp64)];
    else if (k < 5) {
      double d = (double)small * 0.75;
      memcpy(&u, &d, 8);
    }
    memcpy(out, &u, 8);
    return;
  }
  default: { /* integers: extremes, small values, random bits */
    size_t n = esz[dt];
    uint64_t u = bits;
    if (k < 2) {
      static const uint64_t ext[] = {0, 1, ~0ull, 0x7fffffffffffffffull,
                                     0x8000000000000000ull};
      u = ext[(r >> 16) % 5];
      if (n < 8 && (u == 0x7fffffffffffffffull || u == 0x8000000000000000ull))
        u = u >> (64 - 8 * n); /* the narrow type's max / min */
    } else if (k < 4) {
      u = (uint64_t)(int64_t)small;
    }
    memcpy(out, &u, n);
    return;
  }
  }
}

/* 2 for a NaN, 1 for an infinity, else 0. */
static int fclass(braid_dtype dt, const void *p) {
  uint16_t h;
  uint32_t u;
  uint64_t d;
  switch (dt) {
  case BRAID_FLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7c00) != 0x7c00 ? 0 : (h & 0x3ff) ? 2 : 1;
  case BRAID_BFLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7f80) != 0x7f80 ? 0 : (h & 0x7f) ? 2 : 1;
  case BRAID_FLOAT32:
    memcpy(&u, p, 4);
    u &= 0x7fffffffu;
    return u < 0x7f800000u ? 0 : u > 0x7f800000u ? 2 : 1;
  case BRAID_FLOAT64:
    memcpy(&d, p, 8);
    d &= 0x7fffffffffffffffull;
    return d < 0x7ff0000000000000ull ? 0 : d > 0x7ff0000000000000ull ? 2 : 1;
  default:
    return 0;
  }
}

static int is_nan(braid_dtype dt, const void *p) { return fclass(dt, p) == 2; }

/* Bit for bit, except that when both operands of a sum or product are NaN
 * either NaN may come out (the CPU kernels' compiler may commute the
 * operation), quieted. */
static int same(braid_dtype dt, braid_op op, const void *a, const void *b,
                const void *got, const void *want) {
  /* the quiet bit of each float format */
  static const uint64_t quiet[BRAID_NUM_DTYPES] = {
      0, 0, 0, 0, 0, 0, 0x200, 0x40, 0x400000u, 0x8000000000000ull};
  if (op != BRAID_MIN && op != BRAID_MAX && is_nan(dt, a) && is_nan(dt, b)) {
    uint64_t ua = 0, ub = 0, ug = 0;
    memcpy(&ua, a, esz[dt]);
    memcpy(&ub, b, esz[dt]);
    memcpy(&ug, got, esz[dt]);
    return is_nan(dt, want) &&
           (ug == (ua | quiet[dt]) || ug == (ub | quiet[dt]));
  }
  return memcmp(got, want, esz[dt]) == 0;
}

static void hex(char *s, size_t n, const void *p, size_t es) {
  const unsigned char *c = (const unsigned char *)p;
  size_t o = 0;
  for (size_t i = es; i-- > 0 && o + 3 < n;)
    o += (size_t)snprintf(s + o, n - o, "%02x", c[i]);
}

enum { N = 8192 };

static void check_op(braid_dtype dt, braid_op op, red_fn cpu,
                     const char *path) {
  static unsigned char a[N * 8], b[N * 8], want[N * 8], got[8];
  size_t es = esz[dt];
  for (size_t i = 0; i < N; i++) {
    gen(dt, a + i * es);
    if (rnd() % 16 == 0)
      memcpy(b + i * es, a + i * es, es); /* equal operands */
    else
      gen(dt, b + i * es);
  }
  cpu(want, a, b, N);
  for (size_t i = 0; i < N; i++) {
    const unsigned char *x = a + i * es, *y = b + i * es, *w = want + i * es;
    cr_assert_eq(rop_apply(dt, op, got, x, y), 0);
    if (!same(dt, op, x, y, got, w)) {
      char sx[20], sy[20], sg[20], sw[20];
      hex(sx, sizeof sx, x, es);
      hex(sy, sizeof sy, y, es);
      hex(sg, sizeof sg, got, es);
      hex(sw, sizeof sw, w, es);
      cr_assert_fail("%s %s (%s) element %zu: %s op %s gave %s, CPU %s",
                     dname[dt], oname[op], path, i, sx, sy, sg, sw);
    }
  }
}

Test(reduce_ops, every_dtype_op_against_cpu_scalar) {
  for (int dt = 0; dt < DEV_DTYPES; dt++)
    for (int op = 0; op < DEV_OPS; op++) {
      red_fn cpu = red_get_scalar((braid_dtype)dt, (braid_op)op);
      cr_assert_not_null(cpu);
      check_op((braid_dtype)dt, (braid_op)op, cpu, "portable");
    }
}

Test(reduce_ops, every_dtype_op_against_cpu_fastest) {
  for (int dt = 0; dt < DEV_DTYPES; dt++)
    for (int op = 0; op < DEV_OPS; op++) {
      red_fn cpu = red_get((braid_dtype)dt, (braid_op)op);
      cr_assert_not_null(cpu);
      check_op((braid_dtype)dt, (braid_op)op, cpu, red_isa());
    }
}

/* 16-byte vectors (rop_vec, what the kernels apply to each uint4) against
 * rop_apply on each of their elements, bit for bit: vectors of operands as
 * gen makes them (the narrow floats' vectors then mostly hold a NaN or an
 * infinity and go element by element) and vectors of finite numbers only
 * (their fast path), every dtype x op. The device's SIMD byte instructions
 * are not what runs here: the kernels' tests on a GPU check those. */
Test(reduce_ops, sixteen_byte_vectors_against_elements) {
  for (int dt = 0; dt < DEV_DTYPES; dt++)
    for (int op = 0; op < DEV_OPS; op++) {
      size_t es = esz[dt], v = 16 / es;
      int fast = 0;
      for (int k = 0; k < 4096; k++) {
        unsigned char a[16] = {0}, b[16] = {0}, got[16], want[16];
        int finite = k % 2;
        for (size_t j = 0; j < v; j++) {
          do
            gen((braid_dtype)dt, a + j * es);
          while (finite && fclass((braid_dtype)dt, a + j * es));
          do
            gen((braid_dtype)dt, b + j * es);
          while (finite && fclass((braid_dtype)dt, b + j * es));
          if (rnd() % 8 == 0)
            memcpy(b + j * es, a + j * es, es);
        }
        fast += finite;
        cr_assert_eq(rop_vec_apply(dt, op, got, a, b), 0);
        for (size_t j = 0; j < v; j++) {
          cr_assert_eq(rop_apply(dt, op, want + j * es, a + j * es, b + j * es),
                       0);
          if (memcmp(got + j * es, want + j * es, es) != 0) {
            char sx[20], sy[20], sg[20], sw[20];
            hex(sx, sizeof sx, a + j * es, es);
            hex(sy, sizeof sy, b + j * es, es);
            hex(sg, sizeof sg, got + j * es, es);
            hex(sw, sizeof sw, want + j * es, es);
            cr_assert_fail("%s %s vector %d lane %zu: %s op %s gave %s, "
                           "element by element %s",
                           dname[dt], oname[op], k, j, sx, sy, sg, sw);
          }
        }
      }
      cr_assert_eq(fast, 2048);
    }
  unsigned char x[16] = {0}, r[16];
  cr_assert_eq(rop_vec_apply(BRAID_NUM_DTYPES, BRAID_SUM, r, x, x), -1);
  cr_assert_eq(rop_vec_apply(BRAID_INT8, BRAID_NUM_OPS, r, x, x), -1);
}

Test(reduce_ops, bad_dtype_or_op) {
  unsigned char x[8] = {0}, r[8];
  cr_assert_eq(rop_apply(BRAID_NUM_DTYPES, BRAID_SUM, r, x, x), -1);
  cr_assert_eq(rop_apply(BRAID_INT32, BRAID_NUM_OPS, r, x, x), -1);
  /* not on the device: refused, never computed wrongly */
  cr_assert_eq(rop_apply(BRAID_INT16, BRAID_SUM, r, x, x), -1);
  cr_assert_eq(rop_apply(BRAID_BOOL, BRAID_SUM, r, x, x), -1);
  cr_assert_eq(rop_apply(BRAID_INT32, BRAID_BXOR, r, x, x), -1);
  cr_assert_eq(rop_div(-1, r, 2), -1);
}

Test(reduce_ops, avg_division_against_red_div) {
  static const int divisors[] = {2, 3, 4, 7, 8, 100, 127, 128, 200, 1000};
  static unsigned char buf[N * 8], want[N * 8];
  for (int dt = 0; dt < DEV_DTYPES; dt++) {
    size_t es = esz[dt];
    for (size_t k = 0; k < sizeof divisors / sizeof divisors[0]; k++) {
      int d = divisors[k];
      for (size_t i = 0; i < N; i++)
        gen((braid_dtype)dt, buf + i * es);
      memcpy(want, buf, N * es);
      red_div(want, N, (braid_dtype)dt, d);
      for (size_t i = 0; i < N; i++) {
        unsigned char x[8], in[8];
        memcpy(x, buf + i * es, es);
        memcpy(in, x, es);
        cr_assert_eq(rop_div(dt, x, d), 0);
        if (memcmp(x, want + i * es, es) != 0) {
          char si[20], sg[20], sw[20];
          hex(si, sizeof si, in, es);
          hex(sg, sizeof sg, x, es);
          hex(sw, sizeof sw, want + i * es, es);
          cr_assert_fail("%s: %s / %d gave %s, red_div %s", dname[dt], si, d,
                         sg, sw);
        }
      }
    }
  }
}

Test(reduce_ops, half_and_bf16_conversions) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float a = rop_half_to_float((uint16_t)h),
          b = red_half_to_float((uint16_t)h);
    cr_assert_eq(memcmp(&a, &b, 4), 0, "half %04x widens differently", h);
    a = rop_bf16_to_float((uint16_t)h);
    b = red_bf16_to_float((uint16_t)h);
    cr_assert_eq(memcmp(&a, &b, 4), 0, "bf16 %04x widens differently", h);
  }
  /* every float near the rounding boundaries of both formats, and random
   * bit patterns */
  for (int i = 0; i < 1 << 20; i++) {
    uint32_t u = (uint32_t)rnd();
    if (i & 1) { /* low bits at or next to a tie of either format */
      uint32_t tie = (i & 2) ? 0x8000u : 0x1000u;
      u = (u & 0xffff0000u) | (tie + (((uint32_t)i >> 2) & 3u) - 1u);
    }
    float f;
    memcpy(&f, &u, 4);
    cr_assert_eq(rop_float_to_half(f), red_float_to_half(f),
                 "float %08x narrows to half differently", u);
    cr_assert_eq(rop_float_to_bf16(f), red_float_to_bf16(f),
                 "float %08x narrows to bf16 differently", u);
  }
  for (size_t i = 0; i < NSP(sp32); i++) {
    float f;
    memcpy(&f, &sp32[i], 4);
    cr_assert_eq(rop_float_to_half(f), red_float_to_half(f), "float %08x",
                 sp32[i]);
    cr_assert_eq(rop_float_to_bf16(f), red_float_to_bf16(f), "float %08x",
                 sp32[i]);
  }
}

/* ---- the 8-bit floats -------------------------------------------------- */

/* Every pair of 8-bit values (a = i >> 8, b = i & 0xff) of an fp8 dtype. */
enum { PAIRS = 1 << 16 };
static void fp8_pairs(uint8_t *a, uint8_t *b) {
  for (int i = 0; i < PAIRS; i++) {
    a[i] = (uint8_t)(i >> 8);
    b[i] = (uint8_t)i;
  }
}

/* Every pair through the host branch of reduce_ops.cuh's element function,
 * bit for bit against device/fp8.h's reference (fp8_op; avg reduces as a sum)
 * and the CPU kernels (red_get's and the portable ones, src/reduce.c). */
Test(reduce_ops, fp8_every_pair_against_fp8_h_and_cpu) {
  static uint8_t a[PAIRS], b[PAIRS], cpu[PAIRS], port[PAIRS];
  static const braid_dtype dts[2] = {BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};
  fp8_pairs(a, b);
  for (int k = 0; k < 2; k++) {
    braid_dtype dt = dts[k];
    for (int op = 0; op < DEV_OPS; op++) {
      int fop = op == BRAID_AVG ? FP8_SUM : op; /* FP8_* are BRAID_* */
      red_get(dt, (braid_op)op)(cpu, a, b, PAIRS);
      red_get_scalar(dt, (braid_op)op)(port, a, b, PAIRS);
      int differ = 0;
      for (int i = 0; i < PAIRS && differ < 5; i++) {
        /* 8-byte operands: rop_apply's dispatch reaches every width */
        uint8_t g8[8] = {0xa5}, x8[8] = {a[i]}, y8[8] = {b[i]};
        uint8_t ref = fp8_op(fop, a[i], b[i], k);
        cr_assert_eq(rop_apply(dt, op, g8, x8, y8), 0);
        uint8_t got = g8[0];
        if (got != ref || got != cpu[i] || got != port[i]) {
          differ++;
          cr_expect_fail("%s %s: %02x op %02x: reduce_ops.cuh %02x, fp8_op "
                         "%02x, red_get %02x, portable %02x",
                         k ? "e5m2" : "e4m3", oname[op], a[i], b[i], got, ref,
                         cpu[i], port[i]);
        }
      }
    }
  }
}

/* Sixteen pairs at a time through rop_vec (what the kernels' vector loop
 * runs), against the element function: every pair, each in every lane. */
Test(reduce_ops, fp8_vectors_against_elements) {
  static uint8_t a[PAIRS], b[PAIRS];
  static const braid_dtype dts[2] = {BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};
  fp8_pairs(a, b);
  for (int k = 0; k < 2; k++)
    for (int op = 0; op < DEV_OPS; op++)
      for (int rot = 0; rot < 16; rot += 5) /* a pair in several lanes */
        for (int v = 0; v < PAIRS / 16; v++) {
          uint8_t x[16], y[16], got[16], want[16];
          for (int j = 0; j < 16; j++) {
            int i = v * 16 + (j + rot) % 16;
            uint8_t g8[8] = {0}, x8[8] = {a[i]}, y8[8] = {b[i]};
            x[j] = a[i];
            y[j] = b[i];
            cr_assert_eq(rop_apply(dts[k], op, g8, x8, y8), 0);
            want[j] = g8[0];
          }
          cr_assert_eq(rop_vec_apply(dts[k], op, got, x, y), 0);
          if (memcmp(got, want, 16) != 0)
            for (int j = 0; j < 16; j++)
              cr_assert_eq(got[j], want[j],
                           "%s %s lane %d: %02x op %02x: vector %02x, "
                           "element %02x",
                           k ? "e5m2" : "e4m3", oname[op], j, x[j], y[j],
                           got[j], want[j]);
        }
}

/* avg's division and the pre-multiplied sum's product: every value (and
 * every scalar) against red_div and red_premul, bit for bit. */
Test(reduce_ops, fp8_division_and_scaling_against_cpu) {
  static const int divisors[] = {2, 3, 4, 7, 8, 100, 127, 128, 200, 1000};
  static const braid_dtype dts[2] = {BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};
  for (int k = 0; k < 2; k++) {
    braid_dtype dt = dts[k];
    uint8_t all[256], want[256];
    for (int v = 0; v < 256; v++)
      all[v] = (uint8_t)v;
    for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++) {
      memcpy(want, all, 256);
      red_div(want, 256, dt, divisors[d]);
      for (int v = 0; v < 256; v++) {
        uint8_t x8[8] = {(uint8_t)v};
        cr_assert_eq(rop_div(dt, x8, divisors[d]), 0);
        uint8_t x = x8[0];
        cr_expect_eq(x, want[v],
                     "%s: %02x / %d: reduce_ops.cuh %02x, "
                     "red_div %02x",
                     k ? "e5m2" : "e4m3", v, divisors[d], x, want[v]);
      }
    }
    for (int s = 0; s < 256; s++) {
      uint8_t sc = (uint8_t)s;
      cr_assert_eq(red_premul(want, all, 256, dt, &sc), 0);
      for (int v = 0; v < 256; v++) {
        uint8_t g8[8] = {0xa5}, x8[8] = {(uint8_t)v}, s8[8] = {sc};
        cr_assert_eq(rop_apply(dt, BRAID_PROD, g8, x8, s8), 0);
        uint8_t got = g8[0];
        if (got != want[v])
          cr_assert_fail("%s: %02x x scalar %02x: reduce_ops.cuh %02x, "
                         "red_premul %02x",
                         k ? "e5m2" : "e4m3", v, s, got, want[v]);
      }
    }
  }
}
