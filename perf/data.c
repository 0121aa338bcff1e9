/*
 * braid-perf sizes, bandwidth formulas and data patterns.
 *
 * Sizes and bandwidths follow nccl-tests: the "size" column is the larger of
 * the send and receive buffers; algbw is the bytes one rank's call moves
 * through its API divided by the time; busbw scales algbw by the factor that
 * makes it comparable with the link bandwidth (2(n-1)/n for allreduce,
 * (n-1)/n for allgather, reduce-scatter, alltoall, gather and scatter, 1
 * otherwise).
 *
 * Inputs are small integers chosen per (collective, op) so that the result is
 * exact in every datatype, including float16, bfloat16 and the 8-bit floats
 * (integers exact up to 16 in e4m3, 8 in e5m2): sums stay below
 * the largest integer the type holds exactly, products are powers of two
 * that cannot overflow, and averages have exactly one non-zero contribution
 * that is a multiple of the rank count. Pre-multiplied sums take the sum's
 * values for twice the ranks (each rank's scalar is 1 or 2), so that the
 * sum of the products stays exact.
 */
#include <string.h>

#include "perf.h"

size_t perf_dtype_size(braid_dtype dt) {
  switch (dt) {
  case BRAID_INT8:
  case BRAID_UINT8:
  case BRAID_BOOL:
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    return 1;
  case BRAID_FLOAT16:
  case BRAID_BFLOAT16:
  case BRAID_INT16:
    return 2;
  case BRAID_INT32:
  case BRAID_UINT32:
  case BRAID_FLOAT32:
    return 4;
  case BRAID_INT64:
  case BRAID_UINT64:
  case BRAID_FLOAT64:
    return 8;
  default:
    return 0;
  }
}

const char *perf_pair_refusal(braid_dtype dt, braid_op op) {
  int flt = dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 ||
            dt == BRAID_FLOAT32 || dt == BRAID_FLOAT64 ||
            dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
  if (flt && (op == BRAID_BAND || op == BRAID_BOR || op == BRAID_BXOR))
    return "bitwise ops take integer dtypes and bool";
  if (dt == BRAID_BOOL && op == BRAID_AVG)
    return "avg is not defined on bool";
  if (dt == BRAID_BOOL && op == PERF_OP_PREMULSUM)
    return "a pre-multiplied sum is not defined on bool";
  return NULL;
}

int perf_pair_valid(braid_dtype dt, braid_op op) {
  return perf_pair_refusal(dt, op) == NULL;
}

int perf_dev_valid(perf_coll c, braid_dtype dt, braid_op op) {
  if (c == COLL_ALLTOALLV)
    return 0;
  if (c != COLL_ALL_REDUCE && c != COLL_REDUCE && c != COLL_REDUCE_SCATTER)
    return 1;
  return dt != BRAID_INT16 && dt != BRAID_BOOL && op != BRAID_BAND &&
         op != BRAID_BOR && op != BRAID_BXOR;
}

void perf_get_counts(perf_coll c, size_t count, int nranks, perf_counts *pc) {
  size_t n = (size_t)(nranks > 0 ? nranks : 1);
  size_t base = count / n;
  memset(pc, 0, sizeof *pc);
  switch (c) {
  case COLL_ALL_GATHER:
  case COLL_GATHER:
    pc->param = base;
    pc->send = base;
    pc->recv = base * n;
    pc->send_inplace_off = base;
    break;
  case COLL_REDUCE_SCATTER:
  case COLL_SCATTER:
    pc->param = base;
    pc->send = base * n;
    pc->recv = base;
    pc->recv_inplace_off = base;
    break;
  case COLL_ALLTOALL:
  case COLL_ALLTOALLV:
    pc->param = base;
    pc->send = pc->recv = base * n;
    break;
  default:
    pc->param = pc->send = pc->recv = count;
    break;
  }
}

double perf_bus_factor(perf_coll c, int nranks) {
  double n = nranks;
  switch (c) {
  case COLL_ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALLTOALL:
  case COLL_ALLTOALLV:
  case COLL_GATHER:
  case COLL_SCATTER:
    return (n - 1) / n;
  default:
    return 1.0;
  }
}

void perf_get_bw(perf_coll c, size_t param_count, size_t eltsize, double sec,
                 int nranks, double *algbw, double *busbw) {
  double bytes = (double)param_count * (double)eltsize;
  switch (c) {
  case COLL_ALL_GATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALLTOALL:
  case COLL_ALLTOALLV:
  case COLL_GATHER:
  case COLL_SCATTER:
    bytes *= nranks;
    break;
  default:
    break;
  }
  *algbw = sec > 0 ? bytes / 1.0e9 / sec : 0;
  *busbw = *algbw * perf_bus_factor(c, nranks);
}

/* ---- element storage ---- */

static uint16_t half_from_int(int64_t v) {
  uint16_t sign = 0;
  if (v < 0) {
    sign = 0x8000;
    v = -v;
  }
  if (v == 0)
    return sign;
  uint64_t a = (uint64_t)v;
  int e = 63 - __builtin_clzll(a);
  uint32_t mant;
  if (e <= 10)
    mant = (uint32_t)((a << (10 - e)) & 0x3ff);
  else
    mant = (uint32_t)((a >> (e - 10)) & 0x3ff);
  if (e > 15)
    return (uint16_t)(sign | 0x7c00); /* out of range: infinity */
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}

/* An integer as an 8-bit float, to nearest even (exact up to 16 for e4m3
 * and 8 for e5m2; the min/max patterns round larger ones, which keeps
 * their order). */
static uint8_t fp8_from_int(int64_t v, int e5m2) {
  uint64_t a = (uint64_t)(v < 0 ? -v : v);
  uint8_t sign = v < 0 ? 0x80 : 0;
  if (a == 0)
    return sign;
  int mb = e5m2 ? 2 : 3, e = 63 - __builtin_clzll(a);
  uint64_t q = a >> (e > mb ? e - mb : 0), rem = 0, half = 0;
  if (e > mb) {
    rem = a & ((1ull << (e - mb)) - 1);
    half = 1ull << (e - mb - 1);
  } else {
    q = a << (mb - e);
  }
  if (e > mb && (rem > half || (rem == half && (q & 1))))
    q++;
  if (q >> (mb + 1)) { /* rounded up to the next power of two */
    q >>= 1;
    e++;
  }
  int bias = e5m2 ? 15 : 7;
  return (uint8_t)(sign | (e + bias) << mb | (q & ((1u << mb) - 1)));
}

static uint16_t bf16_from_int(int64_t v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

void perf_store(braid_dtype dt, void *buf, size_t i, int64_t v) {
  switch (dt) {
  case BRAID_INT8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case BRAID_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case BRAID_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case BRAID_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  case BRAID_INT64:
    ((int64_t *)buf)[i] = v;
    break;
  case BRAID_UINT64:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  case BRAID_FLOAT16:
    ((uint16_t *)buf)[i] = half_from_int(v);
    break;
  case BRAID_BFLOAT16:
    ((uint16_t *)buf)[i] = bf16_from_int(v);
    break;
  case BRAID_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case BRAID_FLOAT64:
    ((double *)buf)[i] = (double)v;
    break;
  case BRAID_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case BRAID_BOOL:
    ((uint8_t *)buf)[i] = v != 0;
    break;
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2:
    ((uint8_t *)buf)[i] = fp8_from_int(v, dt == BRAID_FLOAT8_E5M2);
    break;
  default:
    break;
  }
}

/* Largest integer magnitude every value of the type holds exactly. */
static int64_t exact_limit(braid_dtype dt) {
  switch (dt) {
  case BRAID_INT8:
    return 127;
  case BRAID_UINT8:
    return 255;
  case BRAID_FLOAT16:
    return 2048;
  case BRAID_BFLOAT16:
    return 256;
  case BRAID_INT16:
    return 32767;
  case BRAID_FLOAT8_E4M3:
    return 16;
  case BRAID_FLOAT8_E5M2:
    return 8;
  default:
    return (int64_t)1 << 24;
  }
}

static int fp8(braid_dtype dt) {
  return dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static int is_signed(braid_dtype dt) {
  return dt != BRAID_UINT8 && dt != BRAID_UINT32 && dt != BRAID_UINT64;
}

/* Values of a sum are in [0, sum_mod - 1]. */
static int64_t sum_mod(braid_dtype dt, int nranks) {
  int64_t m = exact_limit(dt) / (nranks > 0 ? nranks : 1) + 1;
  if (m > 5)
    m = 5;
  if (m < 2)
    m = 2;
  return m;
}

int64_t perf_premul_scalar(int rank) { return 1 + rank % 2; }

int perf_exact_max_ranks(braid_dtype dt, braid_op op) {
  int64_t l = exact_limit(dt);
  int64_t r;
  switch (op) {
  case BRAID_SUM:
    r = l; /* values 0/1 at worst */
    break;
  case PERF_OP_PREMULSUM:
    r = l / 2; /* values 0/1 times 1 or 2 at worst */
    break;
  case BRAID_AVG:
    r = fp8(dt) ? 8 : l / 3;
    break;
  default:
    r = 1 << 30;
    break;
  }
  return r > (1 << 30) ? (1 << 30) : (int)r;
}

/* Plain data for collectives that move without reducing. */
static int64_t plain_value(int rank, size_t idx, uint64_t seed) {
  return (int64_t)((idx * 7 + (size_t)rank * 13 + seed * 3) % 101);
}

/* An element of the data the movement collectives send: plain_value, and
 * for bool, where every plain value but one in 101 would be true, one bit
 * of a hash of the rank, the index and the seed, so that about half the
 * elements are true and blocks of different ranks or places differ. */
static int64_t plain_elem(braid_dtype dt, int rank, size_t idx, uint64_t seed) {
  if (dt != BRAID_BOOL)
    return plain_value(rank, idx, seed);
  uint64_t z = (uint64_t)idx * 0x9e3779b97f4a7c15ull ^
               ((uint64_t)rank + 1) * 0xc2b2ae3d27d4eb4full ^
               (seed + 1) * 0x165667b19e3779f9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (int64_t)((z ^ (z >> 31)) & 1);
}

static int64_t red_value(braid_dtype dt, braid_op op, int rank, int nranks,
                         size_t idx, uint64_t seed) {
  if (dt == BRAID_BOOL) /* true three times in four: and, or and xor vary */
    return (idx * 7 + (size_t)rank * 3 + seed) % 4 != 0;
  switch (op) {
  case BRAID_SUM:
    return (int64_t)((idx * 7 + (size_t)rank * 3 + seed) %
                     (uint64_t)sum_mod(dt, nranks));
  case PERF_OP_PREMULSUM:
    return (int64_t)((idx * 7 + (size_t)rank * 3 + seed) %
                     (uint64_t)sum_mod(dt, 2 * nranks));
  case BRAID_PROD:
    return (rank < 3 && (idx + (size_t)rank + seed) % 2 == 0) ? 2 : 1;
  case BRAID_MIN:
  case BRAID_MAX: {
    int64_t v = plain_value(rank, idx, seed);
    return is_signed(dt) ? v - 50 : v;
  }
  case BRAID_AVG: /* 8-bit floats: n or 2n, exact up to 8 ranks */
    return ((idx + (size_t)rank + seed) % (size_t)nranks == 0)
               ? (int64_t)nranks * (int64_t)(1 + idx % (fp8(dt) ? 2 : 3))
               : 0;
  case BRAID_BAND: /* mostly set bits, so that the and is not always 0 */
    return 0x7f & ~(int64_t)(1 << ((idx + (size_t)rank + seed) % 7));
  case BRAID_BOR:
  case BRAID_BXOR:
    return plain_value(rank, idx, seed);
  default:
    return 0;
  }
}

/* bool: sum and max are or, prod and min are and */
static int64_t bool_combine(braid_op op, int64_t acc, int64_t v) {
  switch (op) {
  case BRAID_PROD:
  case BRAID_MIN:
  case BRAID_BAND:
    return acc && v;
  case BRAID_BXOR:
    return (acc != 0) != (v != 0);
  default:
    return acc || v;
  }
}

static int64_t red_expected(braid_dtype dt, braid_op op, int nranks, size_t idx,
                            uint64_t seed) {
  int64_t acc = red_value(dt, op, 0, nranks, idx, seed);
  if (op == PERF_OP_PREMULSUM)
    acc *= perf_premul_scalar(0);
  for (int r = 1; r < nranks; r++) {
    int64_t v = red_value(dt, op, r, nranks, idx, seed);
    if (op == PERF_OP_PREMULSUM)
      v *= perf_premul_scalar(r);
    if (dt == BRAID_BOOL) {
      acc = bool_combine(op, acc, v);
      continue;
    }
    switch (op) {
    case BRAID_SUM:
    case BRAID_AVG:
    case PERF_OP_PREMULSUM:
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
    case BRAID_BAND:
      acc &= v;
      break;
    case BRAID_BOR:
      acc |= v;
      break;
    case BRAID_BXOR:
      acc ^= v;
      break;
    default:
      break;
    }
  }
  if (op == BRAID_AVG)
    acc /= nranks;
  return acc;
}

static int is_reduction(perf_coll c) {
  return c == COLL_ALL_REDUCE || c == COLL_REDUCE || c == COLL_REDUCE_SCATTER;
}

void perf_fill_input(perf_coll c, braid_dtype dt, braid_op op, int rank,
                     int nranks, int root, uint64_t seed, void *buf,
                     size_t first, size_t n) {
  (void)root;
  if (is_reduction(c)) {
    for (size_t k = 0; k < n; k++)
      perf_store(dt, buf, k, red_value(dt, op, rank, nranks, first + k, seed));
  } else {
    for (size_t k = 0; k < n; k++)
      perf_store(dt, buf, k, plain_elem(dt, rank, first + k, seed));
  }
}

int64_t perf_check_output(perf_coll c, braid_dtype dt, braid_op op, int rank,
                          int nranks, int root, uint64_t seed,
                          const perf_counts *pc, const void *got) {
  size_t es = perf_dtype_size(dt);
  size_t pcount = pc->param;
  const unsigned char *g = got;
  unsigned char want[8] = {0}; /* perf_store writes es of them */
  int64_t wrong = 0;
  if ((c == COLL_REDUCE || c == COLL_GATHER) && rank != root)
    return 0;
  for (size_t i = 0; i < pc->recv; i++) {
    int64_t v = 0;
    switch (c) {
    case COLL_ALL_REDUCE:
    case COLL_REDUCE:
      v = red_expected(dt, op, nranks, i, seed);
      break;
    case COLL_REDUCE_SCATTER:
      v = red_expected(dt, op, nranks, (size_t)rank * pcount + i, seed);
      break;
    case COLL_BROADCAST:
      v = plain_elem(dt, root, i, seed);
      break;
    case COLL_ALL_GATHER:
    case COLL_GATHER:
      v = plain_elem(dt, (int)(i / pcount), i % pcount, seed);
      break;
    case COLL_SCATTER:
      v = plain_elem(dt, root, (size_t)rank * pcount + i, seed);
      break;
    case COLL_ALLTOALL:
    case COLL_ALLTOALLV:
      v = plain_elem(dt, (int)(i / pcount), (size_t)rank * pcount + i % pcount,
                     seed);
      break;
    case COLL_SENDRECV:
      v = plain_elem(dt, (rank + nranks - 1) % nranks, i, seed);
      break;
    default:
      break;
    }
    perf_store(dt, want, 0, v);
    if (memcmp(want, g + i * es, es) != 0)
      wrong++;
  }
  return wrong;
}
