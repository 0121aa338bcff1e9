#include "lenet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

/* Fixed geometry. */
enum {
  C1 = 20,
  K1 = 3,
  H1 = LENET_IN - K1 + 1, /* 26 */
  P1 = H1 / 2,            /* 13 */
  C2 = 50,
  K2 = 5,
  H2 = P1 - K2 + 1,    /* 9 */
  P2 = H2 / 2,         /* 4 */
  FLAT = P2 * P2 * C2, /* 800 */
  HID = 128
};

static conv_shape conv1_shape(int b) {
  conv_shape s = {b, LENET_IN, LENET_IN, 1, K1, C1};
  return s;
}
static conv_shape conv2_shape(int b) {
  conv_shape s = {b, P1, P1, C1, K2, C2};
  return s;
}

int lenet_create(lenet *m, int maxb) {
  memset(m, 0, sizeof *m);
  static const struct {
    const char *name;
    size_t count;
    int fan_in, is_bias;
  } spec[LENET_NTENSORS] = {
      [LENET_FC2_W] = {"fc2.weight", (size_t)LENET_CLASSES * HID, HID, 0},
      [LENET_FC2_B] = {"fc2.bias", LENET_CLASSES, HID, 1},
      [LENET_FC1_W] = {"fc1.weight", (size_t)HID * FLAT, FLAT, 0},
      [LENET_FC1_B] = {"fc1.bias", HID, FLAT, 1},
      [LENET_CONV2_W] = {"conv2.weight", (size_t)C2 * K2 * K2 * C1,
                         K2 * K2 * C1, 0},
      [LENET_CONV2_B] = {"conv2.bias", C2, K2 * K2 * C1, 1},
      [LENET_CONV1_W] = {"conv1.weight", (size_t)C1 * K1 * K1, K1 * K1, 0},
      [LENET_CONV1_B] = {"conv1.bias", C1, K1 * K1, 1},
  };
  size_t off = 0;
  for (int i = 0; i < LENET_NTENSORS; i++) {
    m->t[i].name = spec[i].name;
    m->t[i].off = off;
    m->t[i].count = spec[i].count;
    m->t[i].fan_in = spec[i].fan_in;
    m->t[i].is_bias = spec[i].is_bias;
    off += spec[i].count;
  }
  m->nparams = off;
  m->maxb = maxb;
  const size_t b = maxb > 0 ? (size_t)maxb : 1;
  m->params = calloc(off, sizeof(float));
  m->grads = calloc(off, sizeof(float));
  conv_shape s1 = conv1_shape((int)b), s2 = conv2_shape((int)b);
  size_t sc = conv_scratch(&s1) > conv_scratch(&s2) ? conv_scratch(&s1)
                                                    : conv_scratch(&s2);
  m->scratch = malloc(sc * sizeof(float));
  m->a1 = malloc(b * H1 * H1 * C1 * sizeof(float));
  m->p1 = malloc(b * P1 * P1 * C1 * sizeof(float));
  m->a2 = malloc(b * H2 * H2 * C2 * sizeof(float));
  m->p2 = malloc(b * FLAT * sizeof(float));
  m->h = malloc(b * HID * sizeof(float));
  m->logits = malloc(b * LENET_CLASSES * sizeof(float));
  m->dlogits = malloc(b * LENET_CLASSES * sizeof(float));
  m->dh = malloc(b * HID * sizeof(float));
  m->dp2 = malloc(b * FLAT * sizeof(float));
  m->da2 = malloc(b * H2 * H2 * C2 * sizeof(float));
  m->dp1 = malloc(b * P1 * P1 * C1 * sizeof(float));
  m->da1 = malloc(b * H1 * H1 * C1 * sizeof(float));
  if (!m->params || !m->grads || !m->scratch || !m->a1 || !m->p1 || !m->a2 ||
      !m->p2 || !m->h || !m->logits || !m->dlogits || !m->dh || !m->dp2 ||
      !m->da2 || !m->dp1 || !m->da1) {
    lenet_destroy(m);
    return -1;
  }
  return 0;
}

void lenet_destroy(lenet *m) {
  float *bufs[] = {m->params, m->grads, m->scratch, m->a1,     m->p1,
                   m->a2,     m->p2,    m->h,       m->logits, m->dlogits,
                   m->dh,     m->dp2,   m->da2,     m->dp1,    m->da1};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    free(bufs[i]);
  memset(m, 0, sizeof *m);
}

uint64_t rng_next(rng *r) {
  /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

double rng_normal(rng *r) {
  double u1 = rng_uniform(r), u2 = rng_uniform(r);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void lenet_init_params(lenet *m, uint64_t seed) {
  rng r = {seed ^ 0x6c656e6574ull};
  for (int i = 0; i < LENET_NTENSORS; i++) {
    float *p = lenet_param(m, i);
    const int is_bias = m->t[i].is_bias;
    const double sd = sqrt(2.0 / m->t[i].fan_in);
    for (size_t j = 0; j < m->t[i].count; j++)
      p[j] = is_bias ? 0.0f : (float)(sd * rng_normal(&r));
  }
}

void lenet_forward(lenet *m, int b, const float *x) {
  if (b <= 0)
    return;
  conv_shape s1 = conv1_shape(b), s2 = conv2_shape(b);
  conv_forward(&s1, x, lenet_param(m, LENET_CONV1_W),
               lenet_param(m, LENET_CONV1_B), 1, m->scratch, m->a1);
  avgpool2_forward(b, H1, H1, C1, m->a1, m->p1);
  conv_forward(&s2, m->p1, lenet_param(m, LENET_CONV2_W),
               lenet_param(m, LENET_CONV2_B), 1, m->scratch, m->a2);
  avgpool2_forward(b, H2, H2, C2, m->a2, m->p2);
  dense_forward(b, FLAT, HID, m->p2, lenet_param(m, LENET_FC1_W),
                lenet_param(m, LENET_FC1_B), 1, m->h);
  dense_forward(b, HID, LENET_CLASSES, m->h, lenet_param(m, LENET_FC2_W),
                lenet_param(m, LENET_FC2_B), 0, m->logits);
}

static int fire(lenet_ready_fn ready, void *ctx, int t0, int t1) {
  if (!ready)
    return 0;
  int rc = ready(ctx, t0);
  if (rc == 0)
    rc = ready(ctx, t1);
  return rc;
}

int lenet_train_step(lenet *m, int b, const float *x, const uint8_t *labels,
                     float scale, double *loss_sum, long *correct,
                     lenet_ready_fn ready, void *ctx) {
  *loss_sum = 0.0;
  *correct = 0;
  if (b <= 0) {
    memset(m->grads, 0, m->nparams * sizeof(float));
    for (int t = 0; t < LENET_NTENSORS; t++) {
      int rc = ready ? ready(ctx, t) : 0;
      if (rc)
        return rc;
    }
    return 0;
  }
  lenet_forward(m, b, x);
  *loss_sum = softmax_xent(b, LENET_CLASSES, m->logits, labels, scale,
                           m->dlogits, correct);
  conv_shape s1 = conv1_shape(b), s2 = conv2_shape(b);
  int rc;

  /* fc2 */
  dense_backward_params(b, HID, LENET_CLASSES, m->dlogits, m->h,
                        lenet_grad(m, LENET_FC2_W), lenet_grad(m, LENET_FC2_B));
  if ((rc = fire(ready, ctx, LENET_FC2_B, LENET_FC2_W)))
    return rc;
  dense_backward_input(b, HID, LENET_CLASSES, m->dlogits,
                       lenet_param(m, LENET_FC2_W), m->dh);
  relu_backward((size_t)b * HID, m->h, m->dh);

  /* fc1 */
  dense_backward_params(b, FLAT, HID, m->dh, m->p2, lenet_grad(m, LENET_FC1_W),
                        lenet_grad(m, LENET_FC1_B));
  if ((rc = fire(ready, ctx, LENET_FC1_B, LENET_FC1_W)))
    return rc;
  dense_backward_input(b, FLAT, HID, m->dh, lenet_param(m, LENET_FC1_W),
                       m->dp2);

  /* pool2, relu, conv2 */
  avgpool2_relu_backward(b, H2, H2, C2, m->dp2, m->a2, m->da2);
  conv_backward_params(&s2, m->da2, m->p1, m->scratch,
                       lenet_grad(m, LENET_CONV2_W),
                       lenet_grad(m, LENET_CONV2_B));
  if ((rc = fire(ready, ctx, LENET_CONV2_B, LENET_CONV2_W)))
    return rc;
  conv_backward_input(&s2, m->da2, lenet_param(m, LENET_CONV2_W), m->scratch,
                      m->dp1);

  /* pool1, relu, conv1 (no input gradient needed) */
  avgpool2_relu_backward(b, H1, H1, C1, m->dp1, m->a1, m->da1);
  conv_backward_params(&s1, m->da1, x, m->scratch, lenet_grad(m, LENET_CONV1_W),
                       lenet_grad(m, LENET_CONV1_B));
  return fire(ready, ctx, LENET_CONV1_B, LENET_CONV1_W);
}

void lenet_evaluate(lenet *m, int b, const float *x, const uint8_t *labels,
                    double *loss_sum, long *correct) {
  *loss_sum = 0.0;
  *correct = 0;
  if (b <= 0)
    return;
  lenet_forward(m, b, x);
  *loss_sum =
      softmax_xent(b, LENET_CLASSES, m->logits, labels, 1.0f, NULL, correct);
}

void lenet_sgd(lenet *m, float lr) {
  float *p = m->params;
  const float *g = m->grads;
  for (size_t i = 0; i < m->nparams; i++)
    p[i] -= lr * g[i];
}

uint64_t lenet_param_hash(const lenet *m) {
  const unsigned char *p = (const unsigned char *)m->params;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < m->nparams * sizeof(float); i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
