/*
 * The collective kernel (cudev_kernel_coll) in one process: nr "ranks", each
 * an area, a stream and buffers of its own on one device, their kernels
 * launched side by side, every result compared byte for byte with a
 * reference computed here on the host from the same inputs. Built twice
 * (gpu.cmake): gpu_kcoll runs device/kernels.cu on a GPU (skipped, saying
 * so, without one), emu_kcoll the emulated GPU's kernel
 * (tests/cuda/emu/emu_kernel.c); both cut, number and fold through
 * device/kcoll_chunk.h, so the same expected bytes check both.
 *
 * The reference does not use kcoll_chunk.h: each output element is the
 * ranks' elements folded in rank order, step by step with the CPU kernels
 * (src/reduce.h), or, for a wide fold (float16, bfloat16, fp8 sum, avg and
 * prod outside BRAID_DETERMINISTIC), widened to float, folded there and
 * rounded once with src/reduce.h's and device/fp8.h's conversions. The float
 * inputs are finite multiples of 1/64 in [-15.6, 15.6] (as the dtype rounds
 * them), whose sums and products stay finite, so that fold needs no NaN
 * rules.
 * wide_fold_exact_values checks the wide fold against values written out.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_dev.h"
#include "device/fp8.h"
#include "src/reduce.h"

#define SKIP_NO_GPU()                                                          \
  do {                                                                         \
    if (cudev_count() == 0)                                                    \
      cr_skip_test("no CUDA device: cudev_count() is 0 (no driver or no GPU "  \
                   "on this machine); emu_kcoll runs this on the emulated "    \
                   "GPU");                                                     \
    cr_assert_eq(cudev_set_device(0), BRAID_SUCCESS, "%s", cudev_error());     \
  } while (0)

enum { MAXR = 4 };

/* nr ranks' kernel state: areas, status and abort words, streams. */
struct kc_ranks {
  int nr;
  cudev_ka k[MAXR];
  void *stream[MAXR], *status_h[MAXR], *abort_h[MAXR];
  uint64_t seq;
};

static void ranks_make(struct kc_ranks *R, int nr, size_t slot, int blocks) {
  memset(R, 0, sizeof *R);
  R->nr = nr;
  R->seq = 1;
  void *area[MAXR];
  size_t bytes = CUDEV_KA_AREA(slot);
  void *zero = calloc(1, bytes);
  cr_assert(zero != NULL);
  for (int q = 0; q < nr; q++) {
    cr_assert_eq(cudev_stream_create(&R->stream[q]), BRAID_SUCCESS, "%s",
                 cudev_error());
    cr_assert_eq(cudev_malloc(&area[q], bytes), BRAID_SUCCESS, "%s",
                 cudev_error());
    cr_assert_eq(cudev_memcpy(area[q], zero, bytes, R->stream[q]),
                 BRAID_SUCCESS, "%s", cudev_error());
    cr_assert_eq(cudev_stream_sync(R->stream[q]), BRAID_SUCCESS);
    cr_assert_eq(cudev_host_alloc(&R->status_h[q], 64), BRAID_SUCCESS);
    cr_assert_eq(cudev_host_alloc(&R->abort_h[q], 64), BRAID_SUCCESS);
    memset(R->status_h[q], 0, 64);
    memset(R->abort_h[q], 0, 64);
  }
  free(zero);
  for (int r = 0; r < nr; r++) {
    cudev_ka *k = &R->k[r];
    k->rank = r;
    k->nranks = nr;
    for (int q = 0; q < nr; q++)
      k->area[q] = area[q];
    k->slot = slot;
    k->blocks = blocks;
    void *st = NULL, *ab = NULL;
    cr_assert_eq(cudev_host_dptr(R->status_h[r], &st), BRAID_SUCCESS);
    cr_assert_eq(cudev_host_dptr(R->abort_h[r], &ab), BRAID_SUCCESS);
    k->status = st;
    k->abort = ab;
    k->timeout_ns = 20000000000ull;
  }
}

static void ranks_free(struct kc_ranks *R) {
  for (int q = 0; q < R->nr; q++) {
    cudev_stream_destroy(R->stream[q]);
    cudev_free(R->k[0].area[q]);
    cudev_host_free(R->status_h[q]);
    cudev_host_free(R->abort_h[q]);
  }
}

/* One call: in[r] (nin elements each) to out[r] on every rank. */
static void ranks_call(struct kc_ranks *R, int coll, int root, braid_dtype dt,
                       braid_op op, int det, size_t count, void **in,
                       void **out) {
  size_t es = braid_dtype_size(dt);
  for (int r = 0; r < R->nr; r++) {
    cudev_kcall c = {coll, root, out[r], in[r], count, dt, op, det};
    if (coll == CUDEV_KC_BROADCAST && r != root)
      c.in = NULL;
    if (coll == CUDEV_KC_REDUCE && r != root)
      c.out = NULL;
    cr_assert_eq(cudev_kernel_coll(&R->k[r], R->seq, &c, R->stream[r]),
                 BRAID_SUCCESS, "%s", cudev_error());
  }
  cudev_kcall c0 = {coll, root, NULL, NULL, count, dt, op, det};
  R->seq += CUDEV_KA_CHUNKS(cudev_kc_elems(&c0, R->nr) * es, R->k[0].slot);
  for (int r = 0; r < R->nr; r++) {
    cr_assert_eq(cudev_stream_sync(R->stream[r]), BRAID_SUCCESS, "%s",
                 cudev_error());
    uint64_t st;
    memcpy(&st, R->status_h[r], sizeof st);
    cr_assert_eq(st, 0, "rank %d: kernel status %#llx", r,
                 (unsigned long long)st);
  }
}

/* ---- the reference ------------------------------------------------------ */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int narrow(braid_dtype dt) {
  return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 ||
         dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static float widen(braid_dtype dt, const unsigned char *p) {
  uint16_t h = 0;
  if (dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2)
    return fp8_to_float(*p, dt == BRAID_FLOAT8_E5M2);
  memcpy(&h, p, 2);
  return dt == BRAID_FLOAT16 ? red_half_to_float(h) : red_bf16_to_float(h);
}

static void round_to(braid_dtype dt, float f, unsigned char *p) {
  uint16_t h;
  if (dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2) {
    *p = fp8_from_float(f, dt == BRAID_FLOAT8_E5M2);
    return;
  }
  h = dt == BRAID_FLOAT16 ? red_float_to_half(f) : red_float_to_bf16(f);
  memcpy(p, &h, 2);
}

/* Finite values for the floats (k / 64, |k| <= 1000), any bits for the
 * integers. */
static void fill(braid_dtype dt, unsigned char *p, size_t n) {
  size_t es = braid_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    double x = (double)((int)(r % 2001) - 1000) / 64.0;
    float f = (float)x;
    if (narrow(dt))
      round_to(dt, f, p + i * es);
    else if (dt == BRAID_FLOAT32)
      memcpy(p + i * es, &f, 4);
    else if (dt == BRAID_FLOAT64)
      memcpy(p + i * es, &x, 8);
    else
      memcpy(p + i * es, &r, es);
  }
}

/* want = the fold of the ranks' n elements from x[q] + off (elements). */
static void fold(braid_dtype dt, braid_op op, int det, int nr,
                 unsigned char *const *x, size_t off, size_t n,
                 unsigned char *want) {
  size_t es = braid_dtype_size(dt);
  int wide = narrow(dt) && !det && nr > 1 &&
             (op == BRAID_SUM || op == BRAID_AVG || op == BRAID_PROD);
  if (wide) {
    for (size_t i = 0; i < n; i++) {
      float f = widen(dt, x[0] + (off + i) * es);
      for (int q = 1; q < nr; q++) {
        float w = widen(dt, x[q] + (off + i) * es);
        f = op == BRAID_PROD ? f * w : f + w;
      }
      round_to(dt, op == BRAID_AVG ? f / (float)nr : f, want + i * es);
    }
    return;
  }
  memcpy(want, x[0] + off * es, n * es);
  red_fn f = red_get_scalar(dt, op);
  for (int q = 1; q < nr; q++)
    f(want, want, x[q] + off * es, n);
  if (op == BRAID_AVG)
    red_div(want, n, dt, nr);
}

/* ---- every call -------------------------------------------------------- */

static const char *coll_name[] = {"allreduce", "reduce", "broadcast",
                                  "allgather", "reduce_scatter"};

/* Every collective x dtype x op on nr ranks of `count`, det off and on
 * for the narrow floats; returns the calls made. */
static int every_call(struct kc_ranks *R, size_t count) {
  int nr = R->nr, calls = 0;
  size_t maxin = count * (size_t)nr * 8, maxout = maxin;
  unsigned char *hin[MAXR], *got = malloc(maxout), *want = malloc(maxout);
  void *din[MAXR], *dout[MAXR];
  cr_assert(got && want);
  for (int q = 0; q < nr; q++) {
    hin[q] = malloc(maxin);
    cr_assert(hin[q] != NULL);
    cr_assert_eq(cudev_malloc(&din[q], maxin), BRAID_SUCCESS);
    cr_assert_eq(cudev_malloc(&dout[q], maxout), BRAID_SUCCESS);
  }
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
    if (!cudev_has_kernel((braid_dtype)dt, BRAID_SUM))
      continue; /* int16, bool: kernels_refuse_what_they_lack */
    size_t es = braid_dtype_size((braid_dtype)dt);
    for (int coll = 0; coll < CUDEV_KC_NUM; coll++) {
      int reduces = cudev_kc_reduces(coll);
      for (int op = 0; op < (reduces ? 5 : 1); op++)
        for (int det = 0; det < (narrow((braid_dtype)dt) && reduces ? 2 : 1);
             det++) {
          int root = (calls + 1) % nr;
          cudev_kcall c0 = {coll,         root,  NULL,
                            NULL,         count, (braid_dtype)dt,
                            (braid_op)op, det};
          size_t nin = cudev_kc_elems(&c0, nr);
          size_t nout = coll == CUDEV_KC_ALLGATHER ? count * (size_t)nr : count;
          for (int q = 0; q < nr; q++) {
            fill((braid_dtype)dt, hin[q], nin);
            cr_assert_eq(cudev_memcpy(din[q], hin[q], nin * es, R->stream[q]),
                         BRAID_SUCCESS);
            cr_assert_eq(cudev_stream_sync(R->stream[q]), BRAID_SUCCESS);
          }
          ranks_call(R, coll, root, (braid_dtype)dt, (braid_op)op, det, count,
                     din, dout);
          calls++;
          for (int r = 0; r < nr; r++) {
            if (coll == CUDEV_KC_REDUCE && r != root)
              continue;
            if (coll == CUDEV_KC_BROADCAST)
              memcpy(want, hin[root], count * es);
            else if (coll == CUDEV_KC_ALLGATHER)
              for (int q = 0; q < nr; q++)
                memcpy(want + (size_t)q * count * es, hin[q], count * es);
            else
              fold((braid_dtype)dt, (braid_op)op, det, nr, hin,
                   coll == CUDEV_KC_REDUCE_SCATTER ? (size_t)r * count : 0,
                   count, want);
            cr_assert_eq(cudev_memcpy(got, dout[r], nout * es, R->stream[r]),
                         BRAID_SUCCESS);
            cr_assert_eq(cudev_stream_sync(R->stream[r]), BRAID_SUCCESS);
            for (size_t i = 0; i < nout * es; i++)
              if (got[i] != want[i])
                cr_assert_fail("%s dtype %d op %d det %d, %d ranks, count "
                               "%zu, rank %d: byte %zu (element %zu) is "
                               "%#x, want %#x",
                               coll_name[coll], dt, op, det, nr, count, r, i,
                               i / es, got[i], want[i]);
          }
        }
    }
  }
  for (int q = 0; q < nr; q++) {
    free(hin[q]);
    cudev_free(din[q]);
    cudev_free(dout[q]);
  }
  free(got);
  free(want);
  return calls;
}

/* Counts of one element, of less than a vector, of several chunks (slot
 * 4 KiB: one block) and, with a slot of 256 KiB, of two chunks over 3
 * blocks for the 4-byte types (one per 64 KiB of the first chunk). */
Test(kcoll, every_call_matches_the_reference, .timeout = 600) {
  SKIP_NO_GPU();
  int calls = 0;
  for (int nr = 1; nr <= MAXR; nr++) {
    struct kc_ranks R;
    ranks_make(&R, nr, 4096, 8);
    calls += every_call(&R, 1);
    calls += every_call(&R, 7);
    calls += every_call(&R, 1203);
    ranks_free(&R);
  }
  struct kc_ranks R;
  ranks_make(&R, 3, 256 << 10, 8);
  calls += every_call(&R, 50001);
  ranks_free(&R);
  cr_assert_gt(calls, 1000);
}

/* int16 and bool have no kernels (src/api.c moves their data as bytes and
 * refuses their reductions on device buffers), nor have the bitwise ops: a
 * call of them is refused before any launch, naming the dtype or op, and
 * the ranks' next call runs. */
Test(kcoll, kernels_refuse_what_they_lack, .timeout = 120) {
  SKIP_NO_GPU();
  struct kc_ranks R;
  ranks_make(&R, 2, 4096, 8);
  void *d = NULL;
  cr_assert_eq(cudev_malloc(&d, 64), BRAID_SUCCESS);
  static const struct {
    int coll;
    braid_dtype dt;
    braid_op op;
    const char *name;
  } no[] = {{CUDEV_KC_BROADCAST, BRAID_INT16, BRAID_SUM, "int16"},
            {CUDEV_KC_ALLGATHER, BRAID_BOOL, BRAID_SUM, "bool"},
            {CUDEV_KC_ALLREDUCE, BRAID_INT16, BRAID_MAX, "int16"},
            {CUDEV_KC_ALLREDUCE, BRAID_INT32, BRAID_BXOR, "bxor"},
            {CUDEV_KC_REDUCE_SCATTER, BRAID_UINT8, BRAID_BAND, "band"}};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    cudev_kcall c = {no[i].coll, 0, d, d, 4, no[i].dt, no[i].op, 0};
    cr_assert_eq(cudev_kernel_coll(&R.k[0], R.seq, &c, R.stream[0]),
                 BRAID_ERR_UNSUPPORTED, "case %zu", i);
    cr_assert(strstr(cudev_error(), no[i].name) != NULL, "case %zu: %s", i,
              cudev_error());
  }
  cudev_free(d);
  /* nothing was launched: the ranks' areas still take a call */
  enum { COUNT = 5 };
  void *din[2], *dout[2];
  int32_t h[COUNT], got[COUNT];
  for (int q = 0; q < 2; q++) {
    for (int i = 0; i < COUNT; i++)
      h[i] = q * 10 + i;
    cr_assert_eq(cudev_malloc(&din[q], sizeof h), BRAID_SUCCESS);
    cr_assert_eq(cudev_malloc(&dout[q], sizeof h), BRAID_SUCCESS);
    cr_assert_eq(cudev_memcpy(din[q], h, sizeof h, R.stream[q]), BRAID_SUCCESS);
    cr_assert_eq(cudev_stream_sync(R.stream[q]), BRAID_SUCCESS);
  }
  ranks_call(&R, CUDEV_KC_ALLREDUCE, 0, BRAID_INT32, BRAID_SUM, 0, COUNT, din,
             dout);
  for (int q = 0; q < 2; q++) {
    cr_assert_eq(cudev_memcpy(got, dout[q], sizeof got, R.stream[q]),
                 BRAID_SUCCESS);
    cr_assert_eq(cudev_stream_sync(R.stream[q]), BRAID_SUCCESS);
    for (int i = 0; i < COUNT; i++)
      cr_assert_eq(got[i], 10 + 2 * i, "rank %d element %d", q, i);
    cudev_free(din[q]);
    cudev_free(dout[q]);
  }
  ranks_free(&R);
}

/* Inputs where a float fold rounded once and a fold rounded at each step
 * differ: rank 0 holds big, the others 1, in every element; one step
 * (big + 1) is a tie that rounds back to big, the sum of all is not. The
 * expected values: the sum in double rounded once (src/reduce.h's and
 * device/fp8.h's conversions), avg that sum divided by the ranks before the
 * rounding; under det the CPU kernels' fold in rank order. Allreduce and
 * reduce_scatter, 37 elements a rank (vectors and single elements). */
Test(kcoll, wide_fold_exact_values, .timeout = 120) {
  SKIP_NO_GPU();
  static const struct {
    braid_dtype dt;
    double big;
  } cases[] = {{BRAID_FLOAT16, 2048},
               {BRAID_BFLOAT16, 256},
               {BRAID_FLOAT8_E4M3, 16},
               {BRAID_FLOAT8_E5M2, 8}};
  enum { NR = 4, COUNT = 37 };
  struct kc_ranks R;
  ranks_make(&R, NR, 4096, 8);
  void *din[NR], *dout[NR];
  unsigned char *hin[NR];
  for (int q = 0; q < NR; q++) {
    hin[q] = malloc(COUNT * NR * 2);
    cr_assert(hin[q] != NULL);
    cr_assert_eq(cudev_malloc(&din[q], COUNT * NR * 2), BRAID_SUCCESS);
    cr_assert_eq(cudev_malloc(&dout[q], COUNT * NR * 2), BRAID_SUCCESS);
  }
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int coll = CUDEV_KC_ALLREDUCE; coll <= CUDEV_KC_REDUCE_SCATTER;
         coll += CUDEV_KC_REDUCE_SCATTER)
      for (int op = BRAID_SUM; op <= BRAID_AVG; op += BRAID_AVG)
        for (int det = 0; det < 2; det++) {
          braid_dtype dt = cases[ci].dt;
          size_t es = braid_dtype_size(dt);
          size_t nin = coll == CUDEV_KC_REDUCE_SCATTER ? COUNT * NR : COUNT;
          for (int q = 0; q < NR; q++) {
            for (size_t i = 0; i < nin; i++)
              round_to(dt, q == 0 ? (float)cases[ci].big : 1.0f,
                       hin[q] + i * es);
            cr_assert_eq(cudev_memcpy(din[q], hin[q], nin * es, R.stream[q]),
                         BRAID_SUCCESS);
            cr_assert_eq(cudev_stream_sync(R.stream[q]), BRAID_SUCCESS);
          }
          ranks_call(&R, coll, 0, dt, (braid_op)op, det, COUNT, din, dout);
          /* expected: once-rounded, and step by step */
          double sum = cases[ci].big + (NR - 1);
          unsigned char once[2], step[2], want[2], got[COUNT * 2];
          round_to(dt, (float)(op == BRAID_AVG ? sum / NR : sum), once);
          memcpy(step, hin[0], es);
          for (int q = 1; q < NR; q++)
            red_get_scalar(dt, BRAID_SUM)(step, step, hin[q], 1);
          if (op == BRAID_AVG)
            red_div(step, 1, dt, NR);
          cr_assert_neq(memcmp(once, step, es), 0,
                        "dtype %d: the inputs do not tell the folds apart",
                        (int)dt);
          memcpy(want, det ? step : once, es);
          for (int r = 0; r < NR; r++) {
            cr_assert_eq(cudev_memcpy(got, dout[r], COUNT * es, R.stream[r]),
                         BRAID_SUCCESS);
            cr_assert_eq(cudev_stream_sync(R.stream[r]), BRAID_SUCCESS);
            for (size_t i = 0; i < COUNT; i++)
              cr_assert(memcmp(got + i * es, want, es) == 0,
                        "dtype %d %s op %d det %d rank %d element %zu: %#x, "
                        "want %#x (%s)",
                        (int)dt, coll_name[coll], op, det, r, i,
                        got[i * es] | (es > 1 ? got[i * es + 1] << 8 : 0),
                        want[0] | (es > 1 ? want[1] << 8 : 0),
                        det ? "rounded at each step" : "rounded once");
          }
        }
  for (int q = 0; q < NR; q++) {
    free(hin[q]);
    cudev_free(din[q]);
    cudev_free(dout[q]);
  }
  ranks_free(&R);
}
