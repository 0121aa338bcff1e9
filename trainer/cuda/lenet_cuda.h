/*
 * The reference trainer's LeNet (lenet.h) on a CUDA device: the same
 * layers, layout and gradients, with simple kernels (im2col plus a tiled
 * matrix product, pooling, ReLU, softmax cross-entropy, SGD). Parameters and
 * gradients are device buffers in lenet.h's flat layout, so one
 * braid_allreduce on device memory, ordered on the model's CUDA stream
 * (braid_stream_from_cuda), averages all gradients.
 *
 * Plain C interface: no CUDA header needed. Functions return 0, or -1 with
 * a message for lenet_cuda_error().
 */
#ifndef BRAID_TRAINER_LENET_CUDA_H
#define BRAID_TRAINER_LENET_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"
#include "lenet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lenet_cuda lenet_cuda;

/* The number of CUDA devices (0 without a driver or GPU). */
int lenet_cuda_devices(void);
/* A model for batches up to maxb on the current device, with its own
 * stream; parameters zero. */
int lenet_cuda_create(lenet_cuda **m, int maxb);
void lenet_cuda_destroy(lenet_cuda *m);
const char *lenet_cuda_error(void);

size_t lenet_cuda_nparams(const lenet_cuda *m);
/* Device buffers (flat, lenet.h's layout) and the model's stream
 * (cudaStream_t). */
float *lenet_cuda_params(lenet_cuda *m);
float *lenet_cuda_grads(lenet_cuda *m);
void *lenet_cuda_stream(lenet_cuda *m);

/* Host <-> device copies of the parameters / gradients (synchronous). */
int lenet_cuda_set_params(lenet_cuda *m, const float *host);
int lenet_cuda_get_params(lenet_cuda *m, float *host);
int lenet_cuda_get_grads(lenet_cuda *m, float *host);

/* As lenet_train_step: host images (b x 28 x 28) and labels; gradients of
 * scale * (summed loss) are left in the device gradients. Waits for the
 * loss (the gradients are complete on the stream when it returns). */
int lenet_cuda_train_step(lenet_cuda *m, int b, const float *x,
                          const uint8_t *labels, float scale, double *loss_sum,
                          long *correct);
/* As lenet_evaluate. */
int lenet_cuda_evaluate(lenet_cuda *m, int b, const float *x,
                        const uint8_t *labels, double *loss_sum, long *correct);
/* Averages the device gradients over the communicator's ranks:
 * braid_allreduce(BRAID_AVG) in place on the device buffer, on `s`, a
 * braid_stream_from_cuda of the model's stream (stream-ordered: a later
 * lenet_cuda_sgd sees the result). */
int lenet_cuda_allreduce_grads(lenet_cuda *m, braid_comm *c, braid_stream *s);
/* p -= lr * g, on the model's stream. */
int lenet_cuda_sgd(lenet_cuda *m, float lr);
/* Waits for the model's stream. */
int lenet_cuda_sync(lenet_cuda *m);

#ifdef __cplusplus
}
#endif

#endif
