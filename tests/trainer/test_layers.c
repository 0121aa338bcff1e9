/*
 * Gradient checks: every layer's backward (float, im2col + sgemm) against
 * central finite differences of a naive double-precision forward written
 * straight from the definitions, and the whole LeNet the same way.
 */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "lenet.h"

static double urand(rng *r, double lo, double hi) {
  return lo + (hi - lo) * rng_uniform(r);
}

static void fill(rng *r, float *f, double *d, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) {
    float v = (float)urand(r, lo, hi);
    if (f)
      f[i] = v;
    if (d)
      d[i] = v;
  }
}

/* |a - n| <= atol + rtol * |n| */
static void expect_close(const char *what, size_t i, double a, double n,
                         double atol, double rtol) {
  cr_expect(fabs(a - n) <= atol + rtol * fabs(n),
            "%s[%zu]: backward %.8g, finite differences %.8g", what, i, a, n);
}

/* ---- naive double references ------------------------------------------ */

static void conv_ref(const conv_shape *s, const double *in, const double *w,
                     const double *b, double *out) {
  int oh = conv_oh(s), ow = conv_ow(s);
  for (int n = 0; n < s->b; n++)
    for (int y = 0; y < oh; y++)
      for (int x = 0; x < ow; x++)
        for (int o = 0; o < s->cout; o++) {
          double acc = b[o];
          for (int ky = 0; ky < s->k; ky++)
            for (int kx = 0; kx < s->k; kx++)
              for (int c = 0; c < s->c; c++)
                acc += in[(((size_t)n * s->h + y + ky) * s->w + x + kx) * s->c +
                          c] *
                       w[(((size_t)o * s->k + ky) * s->k + kx) * s->c + c];
          out[(((size_t)n * oh + y) * ow + x) * s->cout + o] = acc;
        }
}

static void dense_ref(int b, int nin, int nout, const double *in,
                      const double *w, const double *bias, double *out) {
  for (int n = 0; n < b; n++)
    for (int o = 0; o < nout; o++) {
      double acc = bias[o];
      for (int i = 0; i < nin; i++)
        acc += in[(size_t)n * nin + i] * w[(size_t)o * nin + i];
      out[(size_t)n * nout + o] = acc;
    }
}

static void pool_ref(int b, int h, int w, int c, const double *in,
                     double *out) {
  int ph = h / 2, pw = w / 2;
  for (int n = 0; n < b; n++)
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++)
        for (int j = 0; j < c; j++) {
          double s = 0;
          for (int dy = 0; dy < 2; dy++)
            for (int dx = 0; dx < 2; dx++)
              s += in[(((size_t)n * h + 2 * y + dy) * w + 2 * x + dx) * c + j];
          out[(((size_t)n * ph + y) * pw + x) * c + j] = s / 4;
        }
}

static double xent_ref(int b, int n, const double *z, const uint8_t *y) {
  double loss = 0;
  for (int i = 0; i < b; i++) {
    double mx = z[(size_t)i * n];
    for (int j = 1; j < n; j++)
      mx = fmax(mx, z[(size_t)i * n + j]);
    double s = 0;
    for (int j = 0; j < n; j++)
      s += exp(z[(size_t)i * n + j] - mx);
    loss += log(s) + mx - z[(size_t)i * n + y[i]];
  }
  return loss;
}

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

#define H 1e-6

/* ---- convolution ------------------------------------------------------- */

/* Checks `samples` coordinates of each large gradient (all of small ones). */
static void check_conv(conv_shape s, uint64_t seed, size_t samples) {
  rng r = {seed};
  size_t nin = (size_t)s.b * s.h * s.w * s.c,
         nw = (size_t)s.cout * conv_cols(&s);
  size_t nout = conv_rows(&s) * s.cout;
  float *in = malloc(nin * 4), *w = malloc(nw * 4), *b = malloc(s.cout * 4);
  float *out = malloc(nout * 4), *dout = malloc(nout * 4);
  float *scratch = malloc(conv_scratch(&s) * 4);
  float *gw = malloc(nw * 4), *gb = malloc(s.cout * 4), *din = malloc(nin * 4);
  double *din_d = malloc(nin * 8), *w_d = malloc(nw * 8),
         *b_d = malloc(s.cout * 8), *r_d = malloc(nout * 8),
         *o_d = malloc(nout * 8);
  fill(&r, in, din_d, nin, -1, 1);
  fill(&r, w, w_d, nw, -0.5, 0.5);
  fill(&r, b, b_d, s.cout, -0.5, 0.5);
  fill(&r, dout, r_d, nout, -1, 1);

  /* forward agrees with the definition, with and without the ReLU */
  conv_ref(&s, din_d, w_d, b_d, o_d);
  conv_forward(&s, in, w, b, 1, scratch, out);
  for (size_t i = 0; i < nout; i++)
    expect_close("conv+relu forward", i, out[i], fmax(o_d[i], 0), 1e-5, 1e-5);
  conv_forward(&s, in, w, b, 0, scratch, out);
  for (size_t i = 0; i < nout; i++)
    expect_close("conv forward", i, out[i], o_d[i], 1e-5, 1e-5);

  /* L = sum(out * r): dL/dout = r */
  conv_backward_params(&s, dout, in, scratch, gw, gb);
  conv_backward_input(&s, dout, w, scratch, din);
#define FD(arr, i, what, got)                                                  \
  do {                                                                         \
    double keep = arr[i];                                                      \
    arr[i] = keep + H;                                                         \
    conv_ref(&s, din_d, w_d, b_d, o_d);                                        \
    double lp = dot(o_d, r_d, nout);                                           \
    arr[i] = keep - H;                                                         \
    conv_ref(&s, din_d, w_d, b_d, o_d);                                        \
    double lm = dot(o_d, r_d, nout);                                           \
    arr[i] = keep;                                                             \
    expect_close(what, i, got, (lp - lm) / (2 * H), 1e-4, 1e-4);               \
  } while (0)
  /* every coordinate of small arrays, an even spread of big ones */
  size_t step = nw / samples + 1;
  for (size_t i = 0; i < nw; i += step)
    FD(w_d, i, "conv dW", gw[i]);
  for (int i = 0; i < s.cout; i++)
    FD(b_d, (size_t)i, "conv db", gb[i]);
  step = nin / samples + 1;
  for (size_t i = 0; i < nin; i += step)
    FD(din_d, i, "conv dX", din[i]);
#undef FD
  free(in), free(w), free(b), free(out), free(dout), free(scratch);
  free(gw), free(gb), free(din), free(din_d), free(w_d), free(b_d), free(r_d);
  free(o_d);
}

Test(trainer_gradcheck, conv_3x3_one_channel) {
  check_conv((conv_shape){2, 6, 7, 1, 3, 4}, 1, 300);
}

Test(trainer_gradcheck, conv_5x5_many_channels) {
  check_conv((conv_shape){2, 7, 6, 3, 5, 5}, 2, 300);
}

/* Each finite difference runs the whole reference forward; 100 samples keep
 * this under a second on a quiet core (no per-test timeout: the suite runs it
 * beside multi-process tests; ctest's TIMEOUT bounds it). */
Test(trainer_gradcheck, conv_in_several_chunks) {
  conv_shape s = {3, 18, 18, 16, 5, 4};
  cr_assert_eq(conv_chunk(&s), 1, "this shape should take one image a chunk");
  check_conv(s, 9, 100);
}

/* ---- dense ------------------------------------------------------------- */

Test(trainer_gradcheck, dense) {
  rng r = {3};
  enum { B = 3, NI = 7, NO = 5 };
  float in[B * NI], w[NO * NI], b[NO], out[B * NO], dout[B * NO];
  float gw[NO * NI], gb[NO], din[B * NI];
  double in_d[B * NI], w_d[NO * NI], b_d[NO], r_d[B * NO], o_d[B * NO];
  fill(&r, in, in_d, B * NI, -1, 1);
  fill(&r, w, w_d, NO * NI, -1, 1);
  fill(&r, b, b_d, NO, -1, 1);
  fill(&r, dout, r_d, B * NO, -1, 1);
  dense_ref(B, NI, NO, in_d, w_d, b_d, o_d);
  dense_forward(B, NI, NO, in, w, b, 1, out);
  for (size_t i = 0; i < B * NO; i++)
    expect_close("dense+relu forward", i, out[i], fmax(o_d[i], 0), 1e-5, 1e-5);
  dense_forward(B, NI, NO, in, w, b, 0, out);
  for (size_t i = 0; i < B * NO; i++)
    expect_close("dense forward", i, out[i], o_d[i], 1e-5, 1e-5);
  dense_backward_params(B, NI, NO, dout, in, gw, gb);
  dense_backward_input(B, NI, NO, dout, w, din);
#define FD(arr, i, what, got)                                                  \
  do {                                                                         \
    double keep = arr[i];                                                      \
    arr[i] = keep + H;                                                         \
    dense_ref(B, NI, NO, in_d, w_d, b_d, o_d);                                 \
    double lp = dot(o_d, r_d, B * NO);                                         \
    arr[i] = keep - H;                                                         \
    dense_ref(B, NI, NO, in_d, w_d, b_d, o_d);                                 \
    double lm = dot(o_d, r_d, B * NO);                                         \
    arr[i] = keep;                                                             \
    expect_close(what, i, got, (lp - lm) / (2 * H), 1e-4, 1e-4);               \
  } while (0)
  for (size_t i = 0; i < NO * NI; i++)
    FD(w_d, i, "dense dW", gw[i]);
  for (size_t i = 0; i < NO; i++)
    FD(b_d, i, "dense db", gb[i]);
  for (size_t i = 0; i < B * NI; i++)
    FD(in_d, i, "dense dX", din[i]);
#undef FD
}

/* ---- ReLU and pooling ---------------------------------------------------- */

Test(trainer_gradcheck, relu) {
  rng r = {4};
  enum { N = 64 };
  float x[N], d[N];
  double r_d[N];
  for (int i = 0; i < N; i++) {
    /* keep away from the kink at 0, where the derivative is not defined */
    double v = urand(&r, 0.05, 1.0) * (i % 2 ? 1 : -1);
    x[i] = (float)v;
  }
  fill(&r, d, r_d, N, -1, 1);
  float y[N];
  memcpy(y, x, sizeof x);
  relu_forward(N, y);
  relu_backward(N, y, d);
  for (int i = 0; i < N; i++) {
    double fp = fmax(x[i] + H, 0), fm = fmax(x[i] - H, 0);
    expect_close("relu dX", (size_t)i, d[i], r_d[i] * (fp - fm) / (2 * H), 1e-6,
                 1e-6);
    cr_expect_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "relu forward[%d]", i);
  }
}

Test(trainer_gradcheck, avgpool_odd_and_even) {
  static const int shapes[2][4] = {{2, 6, 6, 3}, {1, 9, 7, 2}};
  for (int k = 0; k < 2; k++) {
    int b = shapes[k][0], h = shapes[k][1], w = shapes[k][2], c = shapes[k][3];
    size_t nin = (size_t)b * h * w * c,
           nout = (size_t)b * (h / 2) * (w / 2) * c;
    rng r = {5 + (uint64_t)k};
    float *in = malloc(nin * 4), *out = malloc(nout * 4),
          *dout = malloc(nout * 4), *din = malloc(nin * 4);
    double *in_d = malloc(nin * 8), *o_d = malloc(nout * 8),
           *r_d = malloc(nout * 8);
    fill(&r, in, in_d, nin, -1, 1);
    fill(&r, dout, r_d, nout, -1, 1);
    avgpool2_forward(b, h, w, c, in, out);
    pool_ref(b, h, w, c, in_d, o_d);
    for (size_t i = 0; i < nout; i++)
      expect_close("pool forward", i, out[i], o_d[i], 1e-6, 1e-6);
    /* the fused pool+ReLU backward is the pool backward masked by y > 0 */
    float *y = malloc(nin * 4), *dfused = malloc(nin * 4);
    for (size_t i = 0; i < nin; i++)
      y[i] = i % 3 ? in[i] : 0.0f;
    avgpool2_backward(b, h, w, c, dout, din);
    memset(dfused, 0x7f, nin * 4); /* garbage the fused pass must overwrite */
    avgpool2_relu_backward(b, h, w, c, dout, y, dfused);
    for (size_t i = 0; i < nin; i++)
      cr_expect_eq(dfused[i], y[i] > 0 ? din[i] : 0.0f, "fused[%zu]", i);
    free(y), free(dfused);
    for (size_t i = 0; i < nin; i++) {
      double keep = in_d[i];
      in_d[i] = keep + H;
      pool_ref(b, h, w, c, in_d, o_d);
      double lp = dot(o_d, r_d, nout);
      in_d[i] = keep - H;
      pool_ref(b, h, w, c, in_d, o_d);
      double lm = dot(o_d, r_d, nout);
      in_d[i] = keep;
      expect_close("pool dX", i, din[i], (lp - lm) / (2 * H), 1e-6, 1e-5);
    }
    free(in), free(out), free(dout), free(din), free(in_d), free(o_d);
    free(r_d);
  }
}

/* ---- softmax cross-entropy ------------------------------------------------
 */

Test(trainer_gradcheck, softmax_xent) {
  rng r = {6};
  enum { B = 4, N = 10 };
  float z[B * N], dz[B * N];
  double z_d[B * N];
  uint8_t y[B] = {0, 3, 9, 5};
  fill(&r, z, z_d, B * N, -4, 4);
  z[3] = 40.0f; /* a large logit must not overflow */
  z_d[3] = 40.0;
  const float scale = 0.25f;
  long correct;
  double loss = softmax_xent(B, N, z, y, scale, dz, &correct);
  expect_close("xent loss", 0, loss, xent_ref(B, N, z_d, y), 1e-6, 1e-6);
  long want = 0;
  for (int i = 0; i < B; i++) {
    int arg = 0;
    for (int j = 1; j < N; j++)
      if (z[i * N + j] > z[i * N + arg])
        arg = j;
    want += arg == y[i];
  }
  cr_expect_eq(correct, want);
  for (size_t i = 0; i < B * N; i++) {
    double keep = z_d[i];
    z_d[i] = keep + H;
    double lp = xent_ref(B, N, z_d, y);
    z_d[i] = keep - H;
    double lm = xent_ref(B, N, z_d, y);
    z_d[i] = keep;
    expect_close("xent dZ", i, dz[i], scale * (lp - lm) / (2 * H), 1e-6, 1e-4);
  }
}

/* ---- the whole network -----------------------------------------------------
 */

/* The LeNet forward in double from the reference layers. */
static double lenet_ref_loss(const lenet *m, const double *p, int b,
                             const double *x, const uint8_t *y) {
  conv_shape s1 = {b, 28, 28, 1, 3, 20}, s2 = {b, 13, 13, 20, 5, 50};
  double *a1 = malloc((size_t)b * 26 * 26 * 20 * 8);
  double *p1 = malloc((size_t)b * 13 * 13 * 20 * 8);
  double *a2 = malloc((size_t)b * 9 * 9 * 50 * 8);
  double *p2 = malloc((size_t)b * 800 * 8);
  double h[8 * 128], z[8 * 10];
  cr_assert(b <= 8);
#define P(k) (p + m->t[k].off)
  conv_ref(&s1, x, P(LENET_CONV1_W), P(LENET_CONV1_B), a1);
  for (size_t i = 0; i < (size_t)b * 26 * 26 * 20; i++)
    a1[i] = fmax(a1[i], 0);
  pool_ref(b, 26, 26, 20, a1, p1);
  conv_ref(&s2, p1, P(LENET_CONV2_W), P(LENET_CONV2_B), a2);
  for (size_t i = 0; i < (size_t)b * 9 * 9 * 50; i++)
    a2[i] = fmax(a2[i], 0);
  pool_ref(b, 9, 9, 50, a2, p2);
  dense_ref(b, 800, 128, p2, P(LENET_FC1_W), P(LENET_FC1_B), h);
  for (int i = 0; i < b * 128; i++)
    h[i] = fmax(h[i], 0);
  dense_ref(b, 128, 10, h, P(LENET_FC2_W), P(LENET_FC2_B), z);
#undef P
  double loss = xent_ref(b, 10, z, y);
  free(a1), free(p1), free(a2), free(p2);
  return loss;
}

static int ready_order[LENET_NTENSORS], nready;
static int record_ready(void *ctx, int t) {
  (void)ctx;
  ready_order[nready++] = t;
  return 0;
}

Test(trainer_gradcheck, whole_lenet) {
  enum { B = 3 };
  lenet m;
  cr_assert_eq(lenet_create(&m, B), 0);
  lenet_init_params(&m, 7);
  rng r = {8};
  /* nonzero biases so every path carries signal */
  for (int t = 0; t < LENET_NTENSORS; t++)
    if (m.t[t].is_bias)
      fill(&r, lenet_param(&m, t), NULL, m.t[t].count, -0.1, 0.1);
  float x[B * 784];
  double x_d[B * 784];
  fill(&r, x, x_d, B * 784, 0, 1);
  uint8_t y[B] = {2, 7, 4};
  double *p_d = malloc(m.nparams * 8);
  for (size_t i = 0; i < m.nparams; i++)
    p_d[i] = m.params[i];

  const float scale = 1.0f / B;
  double loss;
  long correct;
  nready = 0;
  cr_assert_eq(
      lenet_train_step(&m, B, x, y, scale, &loss, &correct, record_ready, NULL),
      0);
  cr_assert_eq(nready, LENET_NTENSORS);
  for (int t = 0; t < LENET_NTENSORS; t++)
    cr_expect_eq(ready_order[t], t, "tensors become ready in layout order");
  expect_close("lenet loss", 0, loss, lenet_ref_loss(&m, p_d, B, x_d, y), 1e-4,
               1e-5);

  /* 12 coordinates of every tensor, spread over it */
  for (int t = 0; t < LENET_NTENSORS; t++) {
    for (int k = 0; k < 12; k++) {
      size_t i = m.t[t].off + (size_t)(rng_next(&r) % m.t[t].count);
      double keep = p_d[i];
      p_d[i] = keep + H;
      double lp = lenet_ref_loss(&m, p_d, B, x_d, y);
      p_d[i] = keep - H;
      double lm = lenet_ref_loss(&m, p_d, B, x_d, y);
      p_d[i] = keep;
      double fd = scale * (lp - lm) / (2 * H);
      cr_expect(fabs(m.grads[i] - fd) <= 1e-4 + 2e-3 * fabs(fd),
                "%s[%zu]: backward %.8g, finite differences %.8g", m.t[t].name,
                i - m.t[t].off, m.grads[i], fd);
    }
  }
  free(p_d);
  lenet_destroy(&m);
}

Test(trainer_gradcheck, empty_shard_gives_zero_gradients) {
  lenet m;
  cr_assert_eq(lenet_create(&m, 4), 0);
  for (size_t i = 0; i < m.nparams; i++)
    m.grads[i] = 1.0f;
  double loss;
  long correct;
  nready = 0;
  cr_assert_eq(lenet_train_step(&m, 0, NULL, NULL, 1.0f, &loss, &correct,
                                record_ready, NULL),
               0);
  cr_expect_eq(nready, LENET_NTENSORS);
  for (size_t i = 0; i < m.nparams; i++)
    cr_assert_eq(m.grads[i], 0.0f);
  lenet_destroy(&m);
}

Test(trainer_model, seeded_init_is_reproducible) {
  lenet a, b;
  cr_assert_eq(lenet_create(&a, 1), 0);
  cr_assert_eq(lenet_create(&b, 1), 0);
  cr_expect_eq(a.nparams, (size_t)(20 * 9 + 20 + 50 * 500 + 50 + 128 * 800 +
                                   128 + 10 * 128 + 10));
  lenet_init_params(&a, 11);
  lenet_init_params(&b, 11);
  cr_expect_eq(lenet_param_hash(&a), lenet_param_hash(&b));
  cr_expect_eq(memcmp(a.params, b.params, a.nparams * 4), 0);
  /* He-normal: the sample std of fc1's weights is near sqrt(2/800) */
  const float *w = lenet_param(&a, LENET_FC1_W);
  double s2 = 0;
  for (size_t i = 0; i < a.t[LENET_FC1_W].count; i++)
    s2 += (double)w[i] * w[i];
  double sd = sqrt(s2 / a.t[LENET_FC1_W].count);
  cr_expect(fabs(sd - sqrt(2.0 / 800)) < 0.02 * sqrt(2.0 / 800), "std %g", sd);
  lenet_init_params(&b, 12);
  cr_expect_neq(lenet_param_hash(&a), lenet_param_hash(&b));
  lenet_destroy(&a);
  lenet_destroy(&b);
}

/* The trainer's BLAS runs on one thread: OpenBLAS says so when asked, before
 * and after a product large enough to use its threads, and the product is
 * right. (Asked, not inferred from CPU time over wall time, which other work
 * on the machine disturbs.) */
Test(trainer_model, blas_runs_one_thread) {
  cr_assert_eq(layers_set_blas_threads(1), 1);
  cr_assert_eq(openblas_get_num_threads(), 1);
  enum { N = 256 };
  float *a = calloc(N * N, 4), *b = calloc(N * N, 4), *c = calloc(N * N, 4);
  for (int i = 0; i < N * N; i++) {
    a[i] = (float)(i % 7);
    b[i] = i % N == i / N ? 1.0f : 0.0f; /* the identity */
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b,
              N, 0.0f, c, N);
  cr_expect_eq(memcmp(a, c, (size_t)N * N * 4), 0, "a times I is not a");
  cr_expect_eq(openblas_get_num_threads(), 1,
               "OpenBLAS runs %d threads after a product",
               openblas_get_num_threads());
  free(a), free(b), free(c);
}
