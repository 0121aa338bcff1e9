/*
 * The LeNet variant of the reference trainer:
 *   conv 3x3 (1->20) -> ReLU -> avg-pool 2 -> conv 5x5 (20->50) -> ReLU ->
 *   avg-pool 2 -> flatten (4x4x50 = 800) -> dense 800->128 -> ReLU ->
 *   dense 128->10 -> softmax cross-entropy.
 * All parameters live in one flat array, and their gradients in another with
 * the same layout, ordered the way backward produces them (last layer first,
 * bias before weight):
 * a run of consecutive tensors is a contiguous slice, so a gradient bucket is
 * reduced in place without copies.
 */
#ifndef BRAID_TRAINER_LENET_H
#define BRAID_TRAINER_LENET_H

#include <stddef.h>
#include <stdint.h>

enum {
  LENET_FC2_B,
  LENET_FC2_W,
  LENET_FC1_B,
  LENET_FC1_W,
  LENET_CONV2_B,
  LENET_CONV2_W,
  LENET_CONV1_B,
  LENET_CONV1_W,
  LENET_NTENSORS
};

#define LENET_IN 28
#define LENET_CLASSES 10

typedef struct lenet_tensor {
  const char *name;
  size_t off, count;
  int fan_in;  /* inputs feeding one output, for initialisation */
  int is_bias; /* initialised to zero */
} lenet_tensor;

/* Called by backward as soon as tensor `t`'s gradient is final. */
typedef int (*lenet_ready_fn)(void *ctx, int t);

typedef struct lenet {
  lenet_tensor t[LENET_NTENSORS];
  size_t nparams;
  float *params, *grads;
  int maxb;       /* largest batch the workspaces hold */
  float *scratch; /* im2col of one chunk of images */
  float *a1, *p1, *a2, *p2, *h, *logits;
  float *dlogits, *dh, *dp2, *da2, *dp1, *da1;
} lenet;

/* Allocates parameters and workspaces for batches up to maxb; 0 or -1. */
int lenet_create(lenet *m, int maxb);
void lenet_destroy(lenet *m);
static inline float *lenet_param(const lenet *m, int t) {
  return m->params + m->t[t].off;
}
static inline float *lenet_grad(const lenet *m, int t) {
  return m->grads + m->t[t].off;
}

/* He-normal weights (std sqrt(2 / fan_in)) from a seeded generator, zero
 * biases. The same seed gives the same parameters on every machine. */
void lenet_init_params(lenet *m, uint64_t seed);

/* Forward pass on b <= maxb images x (b x 28 x 28, values in [0, 1]);
 * leaves the logits in m->logits. */
void lenet_forward(lenet *m, int b, const float *x);

/* Forward, loss and backward. Gradients are of scale * (sum of the per-image
 * losses). ready (may be NULL) is called for each tensor, in layout order, as
 * soon as its gradient is final; a nonzero return from it stops backward and
 * is returned. With b == 0 the gradients are zero (and ready still fires).
 * *loss_sum and *correct get the summed loss and the number of right
 * predictions. */
int lenet_train_step(lenet *m, int b, const float *x, const uint8_t *labels,
                     float scale, double *loss_sum, long *correct,
                     lenet_ready_fn ready, void *ctx);

/* Forward only: summed loss and right predictions. */
void lenet_evaluate(lenet *m, int b, const float *x, const uint8_t *labels,
                    double *loss_sum, long *correct);

/* p -= lr * g over the flat arrays. */
void lenet_sgd(lenet *m, float lr);

/* FNV-1a hash of the parameter bytes (replica comparison). */
uint64_t lenet_param_hash(const lenet *m);

/* Deterministic generator used for initialisation and shuffling. */
typedef struct rng {
  uint64_t s;
} rng;
uint64_t rng_next(rng *r);
double rng_uniform(rng *r); /* [0, 1) */
double rng_normal(rng *r);

#endif
