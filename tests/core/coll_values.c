/*
 * The correctness matrix's values: see coll_values.h.
 */
#include "coll_values.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int g_rank, g_n;
long g_pass, g_fail;

/* ---- values -------------------------------------------------------------- */

uint16_t f2h(float f) {
  /* exact for the small integers used here */
  union {
    float f;
    uint32_t u;
  } v = {f};
  uint32_t sign = (v.u >> 16) & 0x8000u;
  int exp = (int)((v.u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = v.u & 0x7fffffu;
  if (f == 0.0f)
    return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | (mant >> 13));
}

float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  union {
    uint32_t u;
    float f;
  } v;
  if (exp == 0 && mant == 0)
    v.u = sign;
  else if (exp == 0x1f)
    v.u = sign | 0x7f800000u | (mant << 13);
  else if (exp == 0) { /* subnormal: not produced here */
    float m = (float)mant / 1024.0f * (1.0f / 16384.0f);
    return sign ? -m : m;
  } else
    v.u = sign | ((uint32_t)(exp - 15 + 127) << 23) | (mant << 13);
  return v.f;
}

/* 8-bit floats: the nearest value (ties to even; the data patterns' larger
 * integers round, the reductions' values are exact), and back. */
double f82d(uint8_t x, int e5m2) {
  int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  int e = (x & 0x7f) >> mb, m = x & ((1 << mb) - 1);
  double v = e ? ldexp((1 << mb) + m, e - bias - mb) : ldexp(m, 1 - bias - mb);
  return (x & 0x80) ? -v : v;
}

uint8_t f2f8(double v, int e5m2) {
  uint8_t best = 0, top = e5m2 ? 0x7b : 0x7e;
  for (uint8_t p = 1; p <= top; p++) {
    double d = fabs(f82d(p, e5m2) - fabs(v)),
           db = fabs(f82d(best, e5m2) - fabs(v));
    if (d < db || (d == db && !(p & 1)))
      best = p;
  }
  return (uint8_t)(best | (v < 0 ? 0x80 : 0));
}

void put(void *buf, size_t i, braid_dtype dt, int64_t x) {
  switch (dt) {
  case BRAID_INT8:
  case BRAID_UINT8:
  case BRAID_BOOL: /* raw bytes: any nonzero byte is true */
    ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)x;
    break;
  case BRAID_INT16:
    ((uint16_t *)buf)[i] = (uint16_t)(uint64_t)x;
    break;
  case BRAID_INT32:
  case BRAID_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)(uint64_t)x;
    break;
  case BRAID_INT64:
  case BRAID_UINT64:
    ((uint64_t *)buf)[i] = (uint64_t)x;
    break;
  case BRAID_FLOAT16:
    ((uint16_t *)buf)[i] = f2h((float)x);
    break;
  case BRAID_BFLOAT16: {
    union {
      float f;
      uint32_t u;
    } v = {(float)x};
    ((uint16_t *)buf)[i] = (uint16_t)(v.u >> 16);
    break;
  }
  case BRAID_FLOAT32:
    ((float *)buf)[i] = (float)x;
    break;
  case BRAID_FLOAT64:
    ((double *)buf)[i] = (double)x;
    break;
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    ((uint8_t *)buf)[i] = f2f8((double)x, dt == BRAID_FLOAT8_E5M2);
    break;
  default:
    break;
  }
}

/* Element i as a double, exactly, interpreting integers with their sign. */
double get(const void *buf, size_t i, braid_dtype dt) {
  switch (dt) {
  case BRAID_INT8:
    return ((const int8_t *)buf)[i];
  case BRAID_UINT8:
  case BRAID_BOOL:
    return ((const uint8_t *)buf)[i];
  case BRAID_INT16:
    return ((const int16_t *)buf)[i];
  case BRAID_INT32:
    return ((const int32_t *)buf)[i];
  case BRAID_UINT32:
    return ((const uint32_t *)buf)[i];
  case BRAID_INT64:
    return (double)((const int64_t *)buf)[i];
  case BRAID_UINT64:
    return (double)((const uint64_t *)buf)[i];
  case BRAID_FLOAT16:
    return h2f(((const uint16_t *)buf)[i]);
  case BRAID_BFLOAT16: {
    union {
      uint32_t u;
      float f;
    } v = {(uint32_t)((const uint16_t *)buf)[i] << 16};
    return v.f;
  }
  case BRAID_FLOAT32:
    return ((const float *)buf)[i];
  case BRAID_FLOAT64:
    return ((const double *)buf)[i];
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    return f82d(((const uint8_t *)buf)[i], dt == BRAID_FLOAT8_E5M2);
  default:
    return NAN;
  }
}

/* The value the dtype holds for the exact integer x (wrapping integers). */
double as_dtype(int64_t x, braid_dtype dt) {
  uint8_t tmp[8];
  put(tmp, 0, dt, x);
  return get(tmp, 0, dt);
}

/* Value ops: the reduction ops, then bool's three (logical or, and, xor),
 * whose inputs hold zeros and nonzero bytes other than 1. */
enum { VOP_LOR = BRAID_NUM_OPS, VOP_LAND, VOP_LXOR, VOP_FSUM, VOP_FAVG, NVOP };
#define MAXPERIOD 256

int is_fp8(braid_dtype dt) {
  return dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

int vop_of(braid_dtype dt, int op) {
  /* 8-bit floats hold few integers: a sum has one nonzero input */
  if (is_fp8(dt) && (op == BRAID_SUM || op == BRAID_AVG))
    return op == BRAID_SUM ? VOP_FSUM : VOP_FAVG;
  if (dt != BRAID_BOOL || op < 0)
    return op;
  switch (op) {
  case BRAID_PROD:
  case BRAID_MIN:
  case BRAID_BAND:
    return VOP_LAND;
  case BRAID_BXOR:
    return VOP_LXOR;
  default:
    return VOP_LOR;
  }
}

/* bool inputs: rank r's element i is true when bit r of i is set, so one
 * period (2^ranks) holds every combination. */
size_t bool_period(void) { return (size_t)1 << (g_n < 8 ? g_n : 8); }

/* Input of rank r, element i, for a value op (vop_of) or -1 for data
 * movement. */
int64_t val(int r, size_t i, int op) {
  switch (op) {
  case VOP_LOR:
  case VOP_LAND:
  case VOP_LXOR:
    return ((i >> (r % 8)) & 1) ? (r % 2 ? 0x80 : 2 + r) : 0;
  case VOP_FSUM: /* rank i % n gives 1 to 4, the others 0: exact anyhow */
    return (size_t)r == i % (size_t)g_n ? (int64_t)(i % 4) + 1 : 0;
  case VOP_FAVG: /* n or 2n from rank i % n: n to 16, even above 8 */
    return (size_t)r == i % (size_t)g_n ? (int64_t)g_n * (int64_t)(1 + i % 2)
                                        : 0;
  case BRAID_BAND: /* mostly set bits */
    return 0x7f & ~((int64_t)1 << ((size_t)r + i) % 7);
  case BRAID_BOR:
    return (int64_t)1 << ((size_t)r * 3 + i) % 7;
  case BRAID_BXOR:
    return (int64_t)(((size_t)r * 5 + i) % 7) * 9 + 1;
  case BRAID_SUM:
    return (int64_t)((r + i) % 4) + 1;
  case BRAID_PROD:
    return ((r + i) % 3 == 0) ? 2 : 1;
  case BRAID_MIN:
  case BRAID_MAX:
    return (int64_t)((r * 5 + i) % 7) + 1;
  case BRAID_AVG: { /* offsets sum to zero over ranks: the average is exact */
    int64_t d = (g_n % 2 == 1 && r == g_n - 1) ? 0 : (r % 2 == 0 ? 1 : -1);
    return (int64_t)(i % 5) + 3 + d;
  }
  default:
    return (int64_t)((r * 13 + i * 7) % 100);
  }
}

int64_t reduce_expect_slow(size_t i, int op) {
  int64_t acc = val(0, i, op);
  if (op >= VOP_LOR && op <= VOP_LXOR)
    acc = acc != 0;
  for (int r = 1; r < g_n; r++) {
    int64_t v = val(r, i, op);
    switch (op) {
    case VOP_LOR:
      acc = acc || v;
      break;
    case VOP_LAND:
      acc = acc && v;
      break;
    case VOP_LXOR:
      acc = acc != (v != 0);
      break;
    case BRAID_BAND:
      acc &= v;
      break;
    case BRAID_BOR:
      acc |= v;
      break;
    case BRAID_BXOR:
      acc ^= v;
      break;
    case BRAID_SUM:
    case BRAID_AVG:
    case VOP_FSUM:
    case VOP_FAVG:
      acc += v;
      break;
    case BRAID_PROD:
      acc *= v;
      break;
    case BRAID_MIN:
      acc = v < acc ? v : acc;
      break;
    case BRAID_MAX:
      acc = v > acc ? v : acc;
      break;
    }
  }
  if (op == BRAID_AVG || op == VOP_FAVG)
    acc /= g_n;
  return acc;
}

size_t period_of(int op);

/* The inputs are periodic in i (periods 4, 3, 7, 7, 5, 7, 7, 7, and
 * bool_period()): one period of expected values per value op, computed
 * once. op is a value op: the callers pass -1 (no op) only with a rank's
 * own data, which a Release build's gcc cannot see through fill(). */
int64_t reduce_expect(size_t i, int op) {
  static int64_t table[NVOP][MAXPERIOD];
  static int ready[NVOP];
  if (op < 0 || op >= NVOP) {
    fprintf(stderr, "rank %d: no expected value without an op\n", g_rank);
    exit(3);
  }
  size_t p = period_of(op);
  if (!ready[op]) {
    for (size_t k = 0; k < p; k++)
      table[op][k] = reduce_expect_slow(k, op);
    ready[op] = 1;
  }
  return table[op][i % p];
}

/* Expected values already converted to the dtype, one period at a time. */
double want_reduce(size_t i, int op, braid_dtype dt) {
  static double table[BRAID_NUM_DTYPES][BRAID_NUM_OPS][MAXPERIOD];
  static int ready[BRAID_NUM_DTYPES][BRAID_NUM_OPS];
  int v = vop_of(dt, op);
  size_t p = period_of(v);
  if (!ready[dt][op]) {
    for (size_t k = 0; k < p; k++)
      table[dt][op][k] = as_dtype(reduce_expect(k, v), dt);
    ready[dt][op] = 1;
  }
  return table[dt][op][i % p];
}

/* val(r, i, -1) in the dtype: period 100 in i. */
double want_data(int r, size_t i, braid_dtype dt) {
  static double table[BRAID_NUM_DTYPES][100];
  static int ready_rank[BRAID_NUM_DTYPES];
  static int ready[BRAID_NUM_DTYPES];
  if (!ready[dt] || ready_rank[dt] != r) {
    for (int k = 0; k < 100; k++)
      table[dt][k] = as_dtype(val(r, (size_t)k, -1), dt);
    ready[dt] = 1;
    ready_rank[dt] = r;
  }
  return table[dt][i % 100];
}

/* ---- fast fill and compare ---------------------------------------------- */

/* Every input and expected value is periodic in the element index, so a
 * buffer is written as one period of put()s and doubling copies, and a
 * result is first compared byte for byte with such a buffer; only a
 * mismatch walks the elements (get() and the tolerances above) to report
 * the first wrong one. The values are small integers, never -0 or NaN, so
 * their encodings are unique and the byte comparison agrees with get(). */

size_t period_of(int op) {
  static const size_t period[BRAID_NUM_OPS] = {4, 3, 7, 7, 5, 7, 7, 7};
  if (op == VOP_FSUM)
    return (size_t)g_n * 4; /* a multiple of lcm(n, 4) */
  if (op == VOP_FAVG)
    return (size_t)g_n * 2;
  if (op >= VOP_LOR)
    return bool_period();
  return op >= 0 ? period[op] : 100;
}

/* buf[k] = val(r, i0 + k, op), or reduce_expect(i0 + k, op) for r ==
 * EXPECT, for k in [0, n). */
void fill(void *buf, size_t n, braid_dtype dt, int r, int op, size_t i0) {
  op = vop_of(dt, op);
  size_t es = braid_dtype_size(dt), p = period_of(op);
  size_t first = n < p ? n : p;
  for (size_t k = 0; k < first; k++)
    put(buf, k, dt,
        r == EXPECT ? reduce_expect(i0 + k, op) : val(r, i0 + k, op));
  for (size_t done = first; done < n;) { /* done: a multiple of p */
    size_t len = done < n - done ? done : n - done;
    memcpy((char *)buf + done * es, buf, len * es);
    done += len;
  }
}

/* 1 when buf holds exactly what fill(.., n, dt, r, op, i0) writes. */
int matches(const void *buf, size_t n, braid_dtype dt, int r, int op,
            size_t i0) {
  static char *want;
  static size_t cap;
  size_t len = n * braid_dtype_size(dt);
  if (len > cap) {
    free(want);
    want = malloc(len);
    cap = want ? len : 0;
    if (want == NULL) {
      fprintf(stderr, "rank %d: out of memory\n", g_rank);
      exit(3);
    }
  }
  fill(want, n, dt, r, op, i0);
  return len == 0 || memcmp(buf, want, len) == 0;
}

/* nb blocks of n elements, block b holding rank b's data from its element
 * 0 (same_start) or from element g_rank * n (alltoall). */
int blocks_match(const void *buf, size_t n, braid_dtype dt, int nb,
                 int same_start) {
  size_t es = braid_dtype_size(dt);
  for (int b = 0; b < nb; b++)
    if (!matches((const char *)buf + (size_t)b * n * es, n, dt, b, -1,
                 same_start ? 0 : (size_t)g_rank * n))
      return 0;
  return 1;
}

/* ---- checking ------------------------------------------------------------ */

int report(const char *what, braid_dtype dt, int op, size_t count, int inplace,
           size_t i, double got, double want) {
  if (g_fail < 20)
    fprintf(stderr,
            "rank %d: %s %s %s count %zu %s: element %zu is %g, expected %g\n",
            g_rank, what, braid_dtype_name(dt),
            op >= 0 ? braid_op_name((braid_op)op) : "-", count,
            inplace ? "in-place" : "out-of-place", i, got, want);
  return 1;
}
