/*
 * The device layer (device/cuda_dev.h) in a build with CUDA.
 * Without a GPU (or driver): no devices, host pointers are host memory, and
 * calls fail with a message naming the CUDA call. With one: the reduction
 * kernels against the CPU kernels for every dtype x op, size, alignment and
 * aliasing; the division of BRAID_AVG; pointer classification; stream gates
 * (stream memory operations and the kernel fallback). The GPU tests skip
 * loudly on a machine without one.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_dev.h"
#include "device/dev_int.h"
#include "src/reduce.h"

#define NO_GPU_SKIP()                                                          \
  do {                                                                         \
    if (cudev_count() == 0)                                                    \
      cr_skip_test("no CUDA device: cudev_count() is 0 (no driver or no GPU "  \
                   "on this machine); the kernels are checked on the host "    \
                   "by test_reduce_ops");                                      \
    cr_assert_eq(cudev_set_device(0), BRAID_SUCCESS, "%s", cudev_error());     \
  } while (0)

/* The device's kernels take the dtypes but int16 and bool, and five ops;
 * int16, bool and the bitwise ops are BRAID_ERR_UNSUPPORTED there
 * (docs/CUDA.md, cudev_has_kernel). The loops below skip int16 and bool. */
#define DEV_DTYPES BRAID_NUM_DTYPES
#define DEV_OPS (BRAID_AVG + 1)
static const size_t esz[DEV_DTYPES] = {1, 1, 4, 4, 8, 8, 2,
                                       2, 4, 8, 2, 1, 1, 1};
#define NO_KERNEL(dt) (!cudev_has_kernel((braid_dtype)(dt), BRAID_SUM))

Test(cudev, built_with_cuda) { cr_assert_eq(cudev_built(), 1); }

Test(cudev, without_gpu_nothing_is_device_and_calls_name_themselves) {
  if (cudev_count() > 0)
    cr_skip_test("a CUDA device is present: this test is for machines "
                 "without one");
  int x = 0, dev = -7;
  void *heap = malloc(64), *p = NULL;
  cr_assert_eq(cudev_is_device(&x, &dev), 0);
  cr_assert_eq(cudev_is_device(heap, &dev), 0);
  cr_assert_eq(dev, -7, "device must not be set for host memory");
  free(heap);
  cr_assert_neq(cudev_malloc(&p, 1024), BRAID_SUCCESS);
  cr_assert(strstr(cudev_error(), "cudaMalloc") != NULL, "message: %s",
            cudev_error());
  void *s = NULL;
  cr_assert_neq(cudev_stream_create(&s), BRAID_SUCCESS);
  cr_assert(strstr(cudev_error(), "cudaStreamCreate") != NULL, "message: %s",
            cudev_error());
  cr_assert_neq(cudev_host_alloc(&p, 64), BRAID_SUCCESS);
  cr_assert(strstr(cudev_error(), "cudaHostAlloc") != NULL, "message: %s",
            cudev_error());
  /* the count stays 0 and stays cheap */
  cr_assert_eq(cudev_count(), 0);
}

Test(cudev, bad_dtype_or_op_is_invalid_arg) {
  char buf[16] = {0};
  cr_assert_eq(
      cudev_reduce(buf, buf, buf, 1, BRAID_NUM_DTYPES, BRAID_SUM, NULL),
      BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(cudev_error(), "cudev_reduce") != NULL, "%s", cudev_error());
  cr_assert_eq(cudev_reduce(buf, buf, buf, 1, BRAID_INT8, BRAID_NUM_OPS, NULL),
               BRAID_ERR_INVALID_ARG);
  cr_assert_eq(cudev_div(buf, 1, (braid_dtype)-1, 2, NULL),
               BRAID_ERR_INVALID_ARG);
  cr_assert_eq(cudev_reduce(buf, buf, buf, 1, BRAID_INT16, BRAID_SUM, NULL),
               BRAID_ERR_UNSUPPORTED);
  cr_assert(strstr(cudev_error(), "int16") != NULL, "%s", cudev_error());
  cr_assert_eq(cudev_reduce(buf, buf, buf, 1, BRAID_INT32, BRAID_BAND, NULL),
               BRAID_ERR_UNSUPPORTED);
  cr_assert(strstr(cudev_error(), "band") != NULL, "%s", cudev_error());
  cr_assert_eq(cudev_div(buf, 1, BRAID_BOOL, 2, NULL), BRAID_ERR_UNSUPPORTED);
  cr_assert_eq(cudev_scale(buf, buf, 1, BRAID_INT16, buf, 0, NULL),
               BRAID_ERR_UNSUPPORTED);
  cr_assert(strstr(cudev_error(), "cudev_scale") != NULL, "%s", cudev_error());
  cr_assert_eq(cudev_scale(buf, buf, 1, BRAID_FLOAT32, NULL, 0, NULL),
               BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(cudev_error(), "scalar is NULL") != NULL, "%s",
            cudev_error());
  char small[4];
  cr_assert_eq(cudev_busid(0, small, sizeof small), BRAID_ERR_INVALID_ARG);
}

/* The collective kernel's parts (cudev_ka_part, used by kernels.cu and the
 * emulated kernel): every chunk's parts tile it, start 16-byte aligned, and
 * what block b writes into a slot was read two chunks before by block b
 * alone (a block rewrites a slot after the same block of every rank, not
 * the others, is done with it). Calls of one chunk, of whole chunks, and of
 * a last chunk shorter than the rest by one vector or by nearly all. */
Test(cudev, kernel_parts_of_a_reused_slot_stay_with_their_block) {
  const size_t ces[] = {256, 4096, 1 << 20}, blocks[] = {1, 3, 7, 32},
               vs[] = {1, 2, 4, 8, 16};
  int calls = 0;
  for (size_t ci = 0; ci < sizeof ces / sizeof ces[0]; ci++)
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
      size_t ce = ces[ci], v = vs[vi];
      const size_t nins[] = {1,          v + 1,          ce - 1,
                             ce,         2 * ce + v,     3 * ce - v,
                             4 * ce + 1, 5 * ce - ce / 2};
      for (size_t ni = 0; ni < sizeof nins / sizeof nins[0]; ni++)
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
          size_t nin = nins[ni], nb = blocks[bi], nch = (nin + ce - 1) / ce;
          size_t lo[8][32], hi[8][32];
          calls++;
          for (size_t j = 0; j < nch; j++) {
            size_t cn = nin - j * ce < ce ? nin - j * ce : ce, covered = 0;
            for (size_t b = 0; b < nb; b++) {
              cudev_ka_part(nin, ce, nb, v, j, b, &lo[j][b], &hi[j][b]);
              cr_assert(lo[j][b] <= hi[j][b] && hi[j][b] <= cn);
              cr_assert(lo[j][b] == hi[j][b] || lo[j][b] % v == 0);
              cr_assert_eq(lo[j][b], covered,
                           "nin %zu ce %zu nb %zu v %zu: chunk %zu block %zu "
                           "starts at %zu, not where the last part ended",
                           nin, ce, nb, v, j, b, lo[j][b]);
              covered = hi[j][b];
            }
            cr_assert_eq(covered, cn, "chunk %zu of %zu elements: %zu covered",
                         j, cn, covered);
            for (size_t b = 0; j >= 2 && b < nb; b++)
              for (size_t o = 0; o < nb; o++)
                cr_assert(o == b || lo[j][b] >= hi[j][b] ||
                              lo[j - 2][o] >= hi[j - 2][o] ||
                              hi[j][b] <= lo[j - 2][o] ||
                              lo[j][b] >= hi[j - 2][o],
                          "nin %zu ce %zu nb %zu v %zu: block %zu writes "
                          "[%zu, %zu) of the slot in chunk %zu, where block "
                          "%zu read [%zu, %zu) in chunk %zu",
                          nin, ce, nb, v, b, lo[j][b], hi[j][b], j, o,
                          lo[j - 2][o], hi[j - 2][o], j - 2);
          }
        }
    }
  cr_assert_gt(calls, 100);
}

/* ---- GPU tests --------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Random bits (every class of value for the narrow formats), with NaN, inf,
 * -0, subnormals and small numbers sprinkled in for the wide ones. */
static void fill(braid_dtype dt, unsigned char *p, size_t n) {
  static const uint32_t f32[] = {0x7fc00000u, 0xff800000u, 0x80000000u,
                                 0x00000001u, 0x7f800001u, 0x3f800000u};
  static const uint64_t f64[] = {0x7ff8000000000000ull, 0x7ff0000000000000ull,
                                 0x8000000000000000ull, 0x0000000000000001ull,
                                 0x7ff0000000000001ull, 0x3ff0000000000000ull};
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    if (dt == BRAID_FLOAT32 && r % 5 == 0)
      memcpy(p + i * 4, &f32[(r >> 8) % 6], 4);
    else if (dt == BRAID_FLOAT64 && r % 5 == 0)
      memcpy(p + i * 8, &f64[(r >> 8) % 6], 8);
    else
      memcpy(p + i * esz[dt], &r, esz[dt]);
  }
}

static int is_nan(braid_dtype dt, const unsigned char *p) {
  uint16_t h;
  uint32_t u;
  uint64_t d;
  switch (dt) {
  case BRAID_FLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
  case BRAID_BFLOAT16:
    memcpy(&h, p, 2);
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
  case BRAID_FLOAT32:
    memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  case BRAID_FLOAT64:
    memcpy(&d, p, 8);
    return (d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  case BRAID_FLOAT8_E4M3:
    return (p[0] & 0x7f) == 0x7f;
  case BRAID_FLOAT8_E5M2:
    return (p[0] & 0x7f) > 0x7c;
  default:
    return 0;
  }
}

/* As tests/reduce: bit for bit, but any NaN when both operands of a sum or
 * product are NaN, or when the NaN is made from numbers (inf - inf: the
 * hardware's choice). */
static int same(braid_dtype dt, braid_op op, const unsigned char *a,
                const unsigned char *b, const unsigned char *got,
                const unsigned char *want) {
  if (op != BRAID_MIN && op != BRAID_MAX && is_nan(dt, a) && is_nan(dt, b))
    return is_nan(dt, got) && is_nan(dt, want);
  if (is_nan(dt, want) && !is_nan(dt, a) && !is_nan(dt, b))
    return is_nan(dt, got);
  return memcmp(got, want, esz[dt]) == 0;
}

static void *dmalloc(size_t n) {
  void *p = NULL;
  cr_assert_eq(cudev_malloc(&p, n), BRAID_SUCCESS, "%s", cudev_error());
  return p;
}

static void h2d(void *d, const void *h, size_t n, void *s) {
  cr_assert_eq(cudev_memcpy(d, h, n, s), BRAID_SUCCESS, "%s", cudev_error());
}

static void sync_s(void *s) {
  cr_assert_eq(cudev_stream_sync(s), BRAID_SUCCESS, "%s", cudev_error());
}

/* Layouts: byte offsets of (a, b, dst/fwd) in their buffers. */
struct layout {
  const char *name;
  int a, b, d; /* in elements, or in bytes when bytes is set */
  int bytes;
};
static const struct layout layouts[] = {
    {"aligned", 0, 0, 0, 0},
    {"all one element off (16-byte head)", 1, 1, 1, 0},
    {"a one element off (element loads)", 1, 0, 0, 0},
    {"one byte off (byte loads)", 1, 1, 3, 1},
};
enum { MODE_OUT, MODE_INPLACE, MODE_FWD };
static const char *mode_name[] = {"out of place", "dst == a", "fwd"};

static void check_result(braid_dtype dt, braid_op op, size_t n,
                         const unsigned char *a, const unsigned char *b,
                         const unsigned char *got, const unsigned char *want,
                         const char *what, const char *lay, const char *mode) {
  size_t es = esz[dt];
  for (size_t i = 0; i < n; i++)
    if (!same(dt, op, a + i * es, b + i * es, got + i * es, want + i * es)) {
      uint64_t x = 0, y = 0, g = 0, w = 0;
      memcpy(&x, a + i * es, es);
      memcpy(&y, b + i * es, es);
      memcpy(&g, got + i * es, es);
      memcpy(&w, want + i * es, es);
      cr_assert_fail("dtype %d op %d n %zu (%s, %s, %s) element %zu: %llx op "
                     "%llx gave %llx, CPU %llx",
                     (int)dt, (int)op, n, lay, mode, what, i,
                     (unsigned long long)x, (unsigned long long)y,
                     (unsigned long long)g, (unsigned long long)w);
    }
}

/* The reduction tests' buffers: inputs, expected and actual results on the
 * host; inputs, destination and fwd on the device (pad bytes more, for
 * offsets); a stream. */
struct rbufs {
  unsigned char *a, *b, *want, *got, *got2, *da, *db, *dd, *df;
  void *s;
};

static struct rbufs rbufs_make(size_t bytes, size_t pad) {
  struct rbufs r;
  r.a = malloc(bytes);
  r.b = malloc(bytes);
  r.want = malloc(bytes);
  r.got = malloc(bytes);
  r.got2 = malloc(bytes);
  cr_assert(r.a && r.b && r.want && r.got && r.got2);
  r.da = dmalloc(bytes + pad);
  r.db = dmalloc(bytes + pad);
  r.dd = dmalloc(bytes + pad);
  r.df = dmalloc(bytes + pad);
  r.s = NULL;
  cr_assert_eq(cudev_stream_create(&r.s), BRAID_SUCCESS, "%s", cudev_error());
  return r;
}

static void rbufs_free(struct rbufs *r) {
  cudev_stream_destroy(r->s);
  cudev_free(r->da);
  cudev_free(r->db);
  cudev_free(r->dd);
  cudev_free(r->df);
  free(r->a);
  free(r->b);
  free(r->want);
  free(r->got);
  free(r->got2);
}

Test(cudev, gpu_reduce_every_dtype_op_against_cpu, .timeout = 300) {
  NO_GPU_SKIP();
  static const size_t counts[] = {1, 7, 1023, 1048579};
  const size_t maxn = 1048579;
  struct rbufs R = rbufs_make(maxn * 8, 64);
  unsigned char *a = R.a, *b = R.b, *want = R.want, *got = R.got;
  unsigned char *got2 = R.got2, *da = R.da, *db = R.db, *dd = R.dd, *df = R.df;
  void *s = R.s;
  for (int dt = 0; dt < DEV_DTYPES; dt++) {
    size_t es = esz[dt];
    if (NO_KERNEL(dt))
      continue;
    for (int op = 0; op < DEV_OPS; op++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t n = counts[c];
        fill((braid_dtype)dt, a, n);
        fill((braid_dtype)dt, b, n);
        red_get_scalar((braid_dtype)dt, (braid_op)op)(want, a, b, n);
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
          for (int mode = MODE_OUT; mode <= MODE_FWD; mode++) {
            const struct layout *L = &layouts[l];
            size_t u = L->bytes ? 1 : es;
            unsigned char *pa = da + L->a * u, *pb = db + L->b * u;
            unsigned char *pd = mode == MODE_INPLACE ? pa : dd + L->d * u;
            unsigned char *pf = df + L->d * u;
            h2d(pa, a, n * es, s);
            h2d(pb, b, n * es, s);
            braid_result r =
                mode == MODE_FWD
                    ? cudev_reduce_fwd(pd, pf, pa, pb, n, (braid_dtype)dt,
                                       (braid_op)op, s)
                    : cudev_reduce(pd, pa, pb, n, (braid_dtype)dt, (braid_op)op,
                                   s);
            cr_assert_eq(r, BRAID_SUCCESS, "%s", cudev_error());
            h2d(got, pd, n * es, s);
            if (mode == MODE_FWD)
              h2d(got2, pf, n * es, s);
            sync_s(s);
            check_result((braid_dtype)dt, (braid_op)op, n, a, b, got, want,
                         "dst", L->name, mode_name[mode]);
            if (mode == MODE_FWD)
              check_result((braid_dtype)dt, (braid_op)op, n, a, b, got2, want,
                           "fwd", L->name, mode_name[mode]);
          }
      }
  }
  rbufs_free(&R);
}

/* Buffers of 32 MiB: about eight 16-byte vectors per thread of the grid on
 * an H200 (132 SMs x 2048 threads), so every thread of the kernels' loop
 * loads, reduces and stores CUK_UNROLL vectors per pass, over several
 * passes (the sizes above take one vector per thread at most). Aligned
 * buffers; out of place, in place and with fwd. */
Test(cudev, gpu_reduce_large_buffers_every_dtype_op, .timeout = 300) {
  NO_GPU_SKIP();
  const size_t bytes = (32u << 20) + 24; /* a tail after the vectors */
  struct rbufs R = rbufs_make(bytes, 0);
  unsigned char *a = R.a, *b = R.b, *want = R.want, *got = R.got;
  unsigned char *got2 = R.got2, *da = R.da, *db = R.db, *dd = R.dd, *df = R.df;
  void *s = R.s;
  for (int dt = 0; dt < DEV_DTYPES; dt++) {
    if (NO_KERNEL(dt))
      continue;
    size_t n = bytes / esz[dt];
    fill((braid_dtype)dt, a, n);
    fill((braid_dtype)dt, b, n);
    for (int op = 0; op < DEV_OPS; op++) {
      red_get_scalar((braid_dtype)dt, (braid_op)op)(want, a, b, n);
      for (int mode = MODE_OUT; mode <= MODE_FWD; mode++) {
        unsigned char *pd = mode == MODE_INPLACE ? da : dd;
        h2d(da, a, n * esz[dt], s);
        h2d(db, b, n * esz[dt], s);
        braid_result r =
            mode == MODE_FWD
                ? cudev_reduce_fwd(pd, df, da, db, n, (braid_dtype)dt,
                                   (braid_op)op, s)
                : cudev_reduce(pd, da, db, n, (braid_dtype)dt, (braid_op)op, s);
        cr_assert_eq(r, BRAID_SUCCESS, "%s", cudev_error());
        h2d(got, pd, n * esz[dt], s);
        if (mode == MODE_FWD)
          h2d(got2, df, n * esz[dt], s);
        sync_s(s);
        /* element by element only where the bits differ (NaN cases) */
        if (memcmp(got, want, n * esz[dt]) != 0)
          check_result((braid_dtype)dt, (braid_op)op, n, a, b, got, want, "dst",
                       "aligned, 32 MiB", mode_name[mode]);
        if (mode == MODE_FWD && memcmp(got2, want, n * esz[dt]) != 0)
          check_result((braid_dtype)dt, (braid_op)op, n, a, b, got2, want,
                       "fwd", "aligned, 32 MiB", mode_name[mode]);
      }
    }
  }
  rbufs_free(&R);
}

Test(cudev, gpu_reduce_fwd_to_pinned_host) {
  NO_GPU_SKIP();
  const size_t n = 100003;
  float *a = malloc(n * 4), *b = malloc(n * 4), *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(i % 1000);
    b[i] = (float)(i % 7) - 3.0f;
  }
  red_get_scalar(BRAID_FLOAT32, BRAID_SUM)(want, a, b, n);
  float *da = dmalloc(n * 4), *db = dmalloc(n * 4), *dd = dmalloc(n * 4);
  float *host = NULL;
  cr_assert_eq(cudev_host_alloc((void **)&host, n * 4), BRAID_SUCCESS, "%s",
               cudev_error());
  void *s = NULL;
  cr_assert_eq(cudev_stream_create(&s), BRAID_SUCCESS, "%s", cudev_error());
  h2d(da, a, n * 4, s);
  h2d(db, b, n * 4, s);
  cr_assert_eq(
      cudev_reduce_fwd(dd, host, da, db, n, BRAID_FLOAT32, BRAID_SUM, s),
      BRAID_SUCCESS, "%s", cudev_error());
  sync_s(s);
  for (size_t i = 0; i < n; i++) /* small integers: exact */
    cr_assert(host[i] == want[i], "fwd into pinned host memory: element %zu",
              i);
  cudev_stream_destroy(s);
  cudev_host_free(host);
  cudev_free(da);
  cudev_free(db);
  cudev_free(dd);
  free(a);
  free(b);
  free(want);
}

Test(cudev, gpu_div_every_dtype_against_red_div) {
  NO_GPU_SKIP();
  const size_t n = 65539;
  static const int divisors[] = {2, 3, 7, 200};
  unsigned char *h = malloc(n * 8), *want = malloc(n * 8), *got = malloc(n * 8);
  unsigned char *d = dmalloc(n * 8 + 16);
  void *s = NULL;
  cr_assert_eq(cudev_stream_create(&s), BRAID_SUCCESS, "%s", cudev_error());
  for (int dt = 0; dt < DEV_DTYPES; dt++)
    for (size_t k = 0;
         k < sizeof divisors / sizeof divisors[0] && !NO_KERNEL(dt); k++)
      for (int off = 0; off < 2; off++) {
        size_t es = esz[dt];
        unsigned char *p = d + off * es;
        fill((braid_dtype)dt, h, n);
        memcpy(want, h, n * es);
        red_div(want, n, (braid_dtype)dt, divisors[k]);
        h2d(p, h, n * es, s);
        cr_assert_eq(cudev_div(p, n, (braid_dtype)dt, divisors[k], s),
                     BRAID_SUCCESS, "%s", cudev_error());
        h2d(got, p, n * es, s);
        sync_s(s);
        for (size_t i = 0; i < n; i++)
          cr_assert_eq(memcmp(got + i * es, want + i * es, es), 0,
                       "dtype %d / %d, offset %d: element %zu differs", dt,
                       divisors[k], off, i);
      }
  cudev_stream_destroy(s);
  cudev_free(d);
  free(h);
  free(want);
  free(got);
}

/* The pre-multiplied sum's product (cudev_scale) against red_premul: every
 * dtype of the kernels, random inputs and scalars, the scalar in host
 * memory and in device memory (the latter changed between two launches on
 * one stream: each reads its own), aligned, offset by an element and
 * offset by a byte (elements assembled from bytes), in place and not. */
Test(cudev, gpu_scale_every_dtype_against_red_premul) {
  NO_GPU_SKIP();
  const size_t n = 65539;
  static const braid_dtype dts[] = {
      BRAID_INT8,    BRAID_UINT8,   BRAID_INT32,       BRAID_UINT32,
      BRAID_INT64,   BRAID_UINT64,  BRAID_FLOAT16,     BRAID_BFLOAT16,
      BRAID_FLOAT32, BRAID_FLOAT64, BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};
  unsigned char *h = malloc(n * 8), *want = malloc(n * 8), *got = malloc(n * 8);
  unsigned char *d = dmalloc(2 * n * 8 + 64), *ds = dmalloc(16);
  void *s = NULL;
  cr_assert_eq(cudev_stream_create(&s), BRAID_SUCCESS, "%s", cudev_error());
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
    for (int mode = 0; mode < 6; mode++) {
      braid_dtype dt = dts[t];
      size_t es = braid_dtype_size(dt);
      int on_device = mode & 1, off = (mode >> 1) == 2 ? 1 : (int)es;
      if (mode < 2)
        off = 0;
      unsigned char *src = d + off, *dst = mode == 4 ? src : d + n * 8 + off;
      unsigned char sc[8];
      uint64_t r = rnd();
      memcpy(sc, &r, 8);
      if (dt == BRAID_FLOAT32 || dt == BRAID_FLOAT64 || dt == BRAID_FLOAT16 ||
          dt == BRAID_BFLOAT16) /* a scalar of every class now and then */
        fill(dt, sc, 1);
      fill(dt <= BRAID_FLOAT64 ? dt : BRAID_UINT8, h, n);
      unsigned char sc0[8];
      memcpy(sc0, sc, sizeof sc0);
      cr_assert_eq(red_premul(want, h, n, dt, sc), 0);
      h2d(src, h, n * es, s);
      h2d(ds, sc, es, s);
      cr_assert_eq(
          cudev_scale(dst, src, n, dt, on_device ? ds : sc, on_device, s),
          BRAID_SUCCESS, "%s", cudev_error());
      if (on_device) { /* the next launch reads the new value */
        memset(sc, 0, sizeof sc);
        h2d(ds, sc, es, s);
      }
      h2d(got, dst, n * es, s);
      sync_s(s);
      for (size_t i = 0; i < n; i++) {
        int ok = dt <= BRAID_FLOAT64 ? same(dt, BRAID_PROD, h + i * es, sc0,
                                            got + i * es, want + i * es)
                                     : got[i] == want[i];
        cr_assert(ok, "%s, mode %d: element %zu differs", braid_dtype_name(dt),
                  mode, i);
      }
    }
  cudev_stream_destroy(s);
  cudev_free(d);
  cudev_free(ds);
  free(h);
  free(want);
  free(got);
}

Test(cudev, gpu_pointer_classification) {
  NO_GPU_SKIP();
  void *d = dmalloc(256), *pinned = NULL;
  int dev = -1, x = 0;
  cr_assert_eq(cudev_is_device(d, &dev), 1, "%s", cudev_error());
  cr_assert_eq(dev, 0);
  cr_assert_eq(cudev_is_device((char *)d + 100, &dev), 1);
  cr_assert_eq(cudev_host_alloc(&pinned, 256), BRAID_SUCCESS, "%s",
               cudev_error());
  cr_assert_eq(cudev_is_device(pinned, &dev), 0);
  cr_assert_eq(cudev_is_device(&x, &dev), 0);
  char id[32];
  cr_assert_eq(cudev_busid(0, id, sizeof id), BRAID_SUCCESS, "%s",
               cudev_error());
  cr_assert(strlen(id) >= 12 && id[4] == ':', "bus id %s", id);
  /* how much device memory lies from a pointer on: all of a buffer that
   * fits; not a gibibyte more; the driver knows nothing of host memory */
  cr_assert_eq(cudev_room(d, 256), 256);
  cr_assert_eq(cudev_room((char *)d + 100, 156), 156);
  size_t room = cudev_room(d, (size_t)1 << 30);
  cr_assert(room >= 256 && room < ((size_t)1 << 30),
            "cudev_room of a 256-byte buffer for 1 GiB: %zu", room);
  cr_assert_eq(cudev_room(&x, sizeof x), SIZE_MAX);
  cudev_host_free(pinned);
  cudev_free(d);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A copy queued after gate seq must not run before the gate is released. */
static void gate_round(cudev_gate *g, void *s, uint32_t seq, int *dval,
                       volatile int *host) {
  host[0] = -1;
  cr_assert_eq(cudev_gate_enqueue(g, seq), BRAID_SUCCESS, "%s", cudev_error());
  cr_assert_eq(cudev_memcpy((void *)host, dval, sizeof(int), s), BRAID_SUCCESS,
               "%s", cudev_error());
  double t0 = now_s();
  while (!cudev_gate_reached(g, seq))
    cr_assert(now_s() - t0 < 10.0, "gate %u not reached in 10 s", seq);
  cr_assert_eq(cudev_gate_reached(g, seq + 1), 0, "next gate not yet");
  struct timespec ms50 = {0, 50 * 1000 * 1000};
  nanosleep(&ms50, NULL);
  cr_assert_eq(host[0], -1, "work after gate %u ran before the release", seq);
  cudev_gate_release(g, seq);
  sync_s(s);
  cr_assert_eq(host[0], 42, "work after gate %u did not run", seq);
}

/* Returns 0, having run nothing, when the gate of a stream uses the kernel
 * fallback without being forced to (no stream memory operations here). */
static int gate_test(int force_kernel) {
  void *s = NULL;
  cr_assert_eq(cudev_stream_create(&s), BRAID_SUCCESS, "%s", cudev_error());
  int *dval = dmalloc(sizeof(int)), v = 42;
  h2d(dval, &v, sizeof v, s);
  sync_s(s);
  int *host = NULL;
  cr_assert_eq(cudev_host_alloc((void **)&host, 64), BRAID_SUCCESS, "%s",
               cudev_error());
  cudev_gate_force_kernel(force_kernel);
  cudev_gate *g = NULL;
  cr_assert_eq(cudev_gate_new(s, &g), BRAID_SUCCESS, "%s", cudev_error());
  cudev_gate_force_kernel(0);
  int ran = force_kernel || cudev_gate_uses_memops(g);
  if (force_kernel)
    cr_assert_eq(cudev_gate_uses_memops(g), 0);
  for (uint32_t seq = 1; ran && seq <= 3; seq++)
    gate_round(g, s, seq, dval, host);
  cudev_gate_free(g);
  cudev_host_free(host);
  cudev_free(dval);
  cudev_stream_destroy(s);
  return ran;
}

Test(cudev, gpu_gate_holds_stream_memops) {
  NO_GPU_SKIP();
  if (!gate_test(0))
    cr_skip_test("stream memory operations are unavailable on this device: "
                 "its gates use the kernel fallback, which "
                 "gpu_gate_holds_stream_kernel checks");
}

Test(cudev, gpu_gate_holds_stream_kernel) {
  NO_GPU_SKIP();
  cr_assert_eq(gate_test(1), 1);
}
