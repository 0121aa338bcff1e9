/*
 * Gradient buckets: the plan partitions the flat gradient array, overlap
 * issues a bucket during backward as soon as its tensors are final, and
 * every cap (one allreduce per tensor up to one for the whole model) gives
 * bit-for-bit the gradients of one allreduce per tensor.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "dist.h"
#include "lenet.h"

/* A fake communicator: "averages" with a virtual second rank whose gradient
 * at flat position i is other(i), at the moment the call is issued, and
 * counts how often each element was reduced and when calls were issued. */
typedef struct fake {
  float *base;
  size_t n;
  int *times_reduced;
  int events[256]; /* >= 0: tensor ready; < 0: -(1 + first element / 1) */
  int nevents;
  int issued, waited;
} fake;

static fake F;

static float other(size_t i) { return (float)((i * 7919) % 1000) * 1e-3f; }

static braid_result f_allreduce(void *ctx, void *buf, size_t count,
                                braid_dtype dt, braid_op op, int async) {
  fake *f = ctx;
  cr_assert_eq(dt, BRAID_FLOAT32);
  cr_assert_eq(op, BRAID_AVG);
  cr_assert(async, "gradient buckets go out nonblocking");
  float *p = buf;
  cr_assert(p >= f->base && p + count <= f->base + f->n,
            "allreduce outside the gradient array");
  size_t off = (size_t)(p - f->base);
  for (size_t i = 0; i < count; i++) {
    p[i] = (p[i] + other(off + i)) * 0.5f;
    f->times_reduced[off + i]++;
  }
  f->events[f->nevents++] = -1;
  f->issued++;
  return BRAID_SUCCESS;
}

static braid_result f_broadcast(void *ctx, void *buf, size_t count,
                                braid_dtype dt, int root) {
  (void)ctx, (void)buf, (void)count, (void)dt, (void)root;
  return BRAID_SUCCESS;
}

static braid_result f_wait(void *ctx) {
  ((fake *)ctx)->waited++;
  return BRAID_SUCCESS;
}

static const char *f_err(void *ctx) {
  (void)ctx;
  return "fake";
}

static const dist_ops fake_ops = {f_allreduce, f_broadcast, f_wait, f_err,
                                  NULL};

static dist fake_dist(lenet *m) {
  free(F.times_reduced);
  memset(&F, 0, sizeof F);
  F.base = m->grads;
  F.n = m->nparams;
  F.times_reduced = calloc(m->nparams, sizeof(int));
  dist d = {0};
  d.ops = &fake_ops;
  d.ctx = &F;
  d.rank = 0;
  d.size = 2;
  return d;
}

static int ready_and_log(void *bk, int t) {
  F.events[F.nevents++] = t;
  return bucketer_ready(bk, t);
}

static void plan(bucketer *bk, lenet *m, dist *d, size_t cap, int overlap) {
  size_t offs[LENET_NTENSORS], counts[LENET_NTENSORS];
  for (int i = 0; i < LENET_NTENSORS; i++) {
    offs[i] = m->t[i].off;
    counts[i] = m->t[i].count;
  }
  cr_assert_eq(bucketer_plan(bk, LENET_NTENSORS, offs, counts, cap, d, m->grads,
                             overlap, BRAID_AVG),
               0);
}

Test(trainer_bucket, plan_partitions_the_gradients) {
  lenet m;
  cr_assert_eq(lenet_create(&m, 1), 0);
  dist d = fake_dist(&m);
  static const size_t caps[] = {0, 1, 4096, 52429, 104858, 400000, 1 << 30};
  static const int want[] = {8, 8, 0, 3, 2, 0, 1}; /* 0: not pinned */
  for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
    bucketer bk;
    plan(&bk, &m, &d, caps[k], 1);
    if (want[k])
      cr_expect_eq(bk.nbuckets, want[k], "cap %zu: %d buckets", caps[k],
                   bk.nbuckets);
    size_t next = 0;
    int tnext = 0;
    for (int i = 0; i < bk.nbuckets; i++) {
      const bucket *b = &bk.b[i];
      cr_expect_eq(b->off, next, "buckets are adjacent");
      cr_expect_eq(b->first, tnext);
      size_t bytes = 0;
      for (int t = b->first; t <= b->last; t++) {
        cr_expect_eq(bk.bucket_of[t], i);
        bytes += m.t[t].count * sizeof(float);
      }
      cr_expect_eq(bytes, b->count * sizeof(float));
      /* only the last bucket may stay under the cap; a bucket without its
       * last tensor would be under the cap */
      if (i + 1 < bk.nbuckets) {
        cr_expect(bytes >= caps[k], "bucket %d under the cap", i);
        cr_expect(bytes - m.t[b->last].count * sizeof(float) < caps[k] ||
                      b->first == b->last,
                  "bucket %d should have closed earlier", i);
      }
      next = b->off + b->count;
      tnext = b->last + 1;
    }
    cr_expect_eq(next, m.nparams, "buckets cover every gradient");
    cr_expect_eq(tnext, LENET_NTENSORS);
  }
  /* tensors that are not adjacent cannot be bucketed in place */
  size_t offs[2] = {0, 10}, counts[2] = {5, 5};
  bucketer bk;
  cr_expect_eq(
      bucketer_plan(&bk, 2, offs, counts, 0, &d, m.grads, 1, BRAID_AVG), -1);
  lenet_destroy(&m);
}

static void batch(float *x, uint8_t *y, int b) {
  rng r = {99};
  for (int i = 0; i < b * 784; i++)
    x[i] = (float)rng_uniform(&r);
  for (int i = 0; i < b; i++)
    y[i] = (uint8_t)(rng_next(&r) % 10);
}

/* One training step's reduced gradients under a given cap and overlap. */
static float *reduced_grads(lenet *m, size_t cap, int overlap, const float *x,
                            const uint8_t *y, int b) {
  dist d = fake_dist(m);
  bucketer bk;
  plan(&bk, m, &d, cap, overlap);
  bucketer_begin(&bk);
  double loss;
  long correct;
  cr_assert_eq(lenet_train_step(m, b, x, y, 1.0f / b, &loss, &correct,
                                ready_and_log, &bk),
               0);
  cr_assert_eq(bucketer_finish(&bk), BRAID_SUCCESS);
  cr_expect_eq(F.waited, 1, "one wait per step");
  cr_expect_eq(F.issued, bk.nbuckets, "one allreduce per bucket");
  for (size_t i = 0; i < m->nparams; i++)
    cr_assert_eq(F.times_reduced[i], 1, "gradient %zu reduced %d times", i,
                 F.times_reduced[i]);
  float *g = malloc(m->nparams * sizeof(float));
  memcpy(g, m->grads, m->nparams * sizeof(float));
  return g;
}

Test(trainer_bucket, same_result_as_one_allreduce_per_tensor) {
  enum { B = 4 };
  lenet m;
  cr_assert_eq(lenet_create(&m, B), 0);
  lenet_init_params(&m, 3);
  float x[B * 784];
  uint8_t y[B];
  batch(x, y, B);
  float *ref = reduced_grads(&m, 0, 0, x, y, B); /* per tensor, after */
  static const size_t caps[] = {0, 52429, 104858, 1 << 30};
  for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
    for (int ov = 0; ov < 2; ov++) {
      float *g = reduced_grads(&m, caps[k], ov, x, y, B);
      cr_expect_eq(memcmp(g, ref, m.nparams * sizeof(float)), 0,
                   "cap %zu overlap %d differs from per-tensor allreduce",
                   caps[k], ov);
      free(g);
    }
  }
  free(ref);
  lenet_destroy(&m);
}

Test(trainer_bucket, overlap_issues_during_backward) {
  enum { B = 2 };
  lenet m;
  cr_assert_eq(lenet_create(&m, B), 0);
  lenet_init_params(&m, 4);
  float x[B * 784];
  uint8_t y[B];
  batch(x, y, B);
  /* cap 0.05 MiB: one bucket per layer group: [fc2 fc1] [conv2] [conv1] */
  free(reduced_grads(&m, 52429, 1, x, y, B));
  int pos_issue0 = -1, pos_conv2w = -1, pos_conv1w = -1, nissued_before = 0;
  for (int i = 0; i < F.nevents; i++) {
    if (F.events[i] < 0 && pos_issue0 < 0)
      pos_issue0 = i;
    if (F.events[i] == LENET_CONV2_W)
      pos_conv2w = i;
    if (F.events[i] == LENET_CONV1_W) {
      pos_conv1w = i;
      for (int j = 0; j < i; j++)
        nissued_before += F.events[j] < 0;
    }
  }
  cr_expect(pos_issue0 >= 0 && pos_issue0 < pos_conv2w,
            "first bucket issued before conv2's gradient exists");
  cr_expect(pos_conv1w >= 0);
  cr_expect_eq(nissued_before, 2, "two buckets in flight before conv1");

  /* without overlap nothing goes out until backward is over */
  free(reduced_grads(&m, 52429, 0, x, y, B));
  int first_issue = -1, last_ready = -1;
  for (int i = 0; i < F.nevents; i++) {
    if (F.events[i] < 0 && first_issue < 0)
      first_issue = i;
    if (F.events[i] >= 0)
      last_ready = i;
  }
  cr_expect(first_issue > last_ready, "no-overlap issued during backward");
  lenet_destroy(&m);
  free(F.times_reduced);
  F.times_reduced = NULL;
}
