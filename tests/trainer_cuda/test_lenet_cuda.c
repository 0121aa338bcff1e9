/*
 * The CUDA LeNet (trainer/cuda/lenet_cuda.h) against the CPU trainer's
 * (trainer/lenet.h): one step's loss, right predictions and every gradient;
 * then the gradients averaged with braid_allreduce on device memory, ordered
 * on the model's CUDA stream, and an SGD step on the device, against the CPU
 * update (at one rank; the allreduce at two ranks: test_lenet_cuda_emu.c,
 * on the emulated GPU). Without a GPU: creating a model fails with the CUDA
 * call named, and the GPU tests skip loudly.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "lenet.h"
#include "lenet_cuda.h"

#define NEED_GPU()                                                             \
  do {                                                                         \
    if (lenet_cuda_devices() == 0)                                             \
      cr_skip_test("no CUDA device: cudaGetDeviceCount finds none on this "    \
                   "machine; the CUDA LeNet is compared with the CPU one "     \
                   "only on a GPU");                                           \
  } while (0)

enum { B = 12, MAXB = 16 };

static void batch(float *x, uint8_t *labels, int b, uint64_t seed) {
  rng r = {seed};
  for (int i = 0; i < b * LENET_IN * LENET_IN; i++)
    x[i] = (float)rng_uniform(&r);
  for (int i = 0; i < b; i++)
    labels[i] = (uint8_t)(rng_next(&r) % LENET_CLASSES);
}

/* Every element within 1e-3 of the tensor's largest magnitude (the two
 * differ only in summation order). */
static void close_tensors(const lenet *cpu, const float *got, const float *want,
                          const char *what) {
  for (int t = 0; t < LENET_NTENSORS; t++) {
    const float *g = got + cpu->t[t].off, *w = want + cpu->t[t].off;
    double mx = 0.0;
    for (size_t i = 0; i < cpu->t[t].count; i++)
      mx = fmax(mx, fabs((double)w[i]));
    cr_assert(mx > 0.0, "%s %s: all zero", what, cpu->t[t].name);
    for (size_t i = 0; i < cpu->t[t].count; i++)
      cr_assert(fabs((double)g[i] - w[i]) <= 1e-3 * mx + 1e-7,
                "%s %s[%zu]: GPU %g, CPU %g (largest %g)", what, cpu->t[t].name,
                i, g[i], w[i], mx);
  }
}

Test(trainer_cuda, without_gpu_create_names_the_cuda_call) {
  if (lenet_cuda_devices() > 0)
    cr_skip_test("a CUDA device is present: this test is for machines "
                 "without one");
  lenet_cuda *m = NULL;
  cr_assert_eq(lenet_cuda_create(&m, MAXB), -1);
  cr_assert_null(m);
  cr_assert(strstr(lenet_cuda_error(), "cuda") != NULL, "message: %s",
            lenet_cuda_error());
}

/* One CPU step and one GPU step from the same parameters and batch. */
static void both_steps(lenet *cpu, lenet_cuda *gpu, float *x, uint8_t *labels) {
  cr_assert_eq(lenet_create(cpu, MAXB), 0);
  lenet_init_params(cpu, 7);
  batch(x, labels, B, 99);
  double lc, lg;
  long cc, cg;
  cr_assert_eq(
      lenet_train_step(cpu, B, x, labels, 1.0f / B, &lc, &cc, NULL, NULL), 0);
  cr_assert_eq(lenet_cuda_set_params(gpu, cpu->params), 0, "%s",
               lenet_cuda_error());
  cr_assert_eq(lenet_cuda_train_step(gpu, B, x, labels, 1.0f / B, &lg, &cg), 0,
               "%s", lenet_cuda_error());
  cr_assert(fabs(lg - lc) <= 1e-4 * fabs(lc), "loss GPU %g CPU %g", lg, lc);
  /* fused multiply-adds and another summation order may flip a near tie */
  cr_assert(labs(cg - cc) <= 1, "right predictions GPU %ld CPU %ld", cg, cc);
}

Test(trainer_cuda, one_step_gradients_match_cpu) {
  NEED_GPU();
  lenet cpu;
  lenet_cuda *gpu = NULL;
  cr_assert_eq(lenet_cuda_create(&gpu, MAXB), 0, "%s", lenet_cuda_error());
  float *x = malloc(sizeof(float) * MAXB * LENET_IN * LENET_IN);
  uint8_t labels[MAXB];
  both_steps(&cpu, gpu, x, labels);
  float *g = malloc(cpu.nparams * sizeof(float));
  cr_assert_eq(lenet_cuda_get_grads(gpu, g), 0, "%s", lenet_cuda_error());
  close_tensors(&cpu, g, cpu.grads, "gradient");
  /* evaluation agrees too */
  double le, lce;
  long ce, cce;
  cr_assert_eq(lenet_cuda_evaluate(gpu, B, x, labels, &le, &ce), 0, "%s",
               lenet_cuda_error());
  lenet_evaluate(&cpu, B, x, labels, &lce, &cce);
  cr_assert(fabs(le - lce) <= 1e-4 * fabs(lce));
  cr_assert_eq(ce, cce);
  free(g);
  free(x);
  lenet_destroy(&cpu);
  lenet_cuda_destroy(gpu);
}

Test(trainer_cuda, device_allreduce_and_sgd_match_cpu) {
  NEED_GPU();
  braid_unique_id id;
  braid_comm *c = NULL;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  cr_assert_eq(braid_comm_init(&c, 1, &id, 0, NULL), BRAID_SUCCESS);
  lenet cpu;
  lenet_cuda *gpu = NULL;
  cr_assert_eq(lenet_cuda_create(&gpu, MAXB), 0, "%s", lenet_cuda_error());
  braid_stream *s = NULL;
  cr_assert_eq(braid_stream_from_cuda(lenet_cuda_stream(gpu), &s),
               BRAID_SUCCESS, "%s", braid_comm_last_error(c));
  float *x = malloc(sizeof(float) * MAXB * LENET_IN * LENET_IN);
  uint8_t labels[MAXB];
  both_steps(&cpu, gpu, x, labels);
  float *before = malloc(cpu.nparams * sizeof(float));
  float *after = malloc(cpu.nparams * sizeof(float));
  cr_assert_eq(lenet_cuda_get_grads(gpu, before), 0, "%s", lenet_cuda_error());
  /* averaging over one rank changes nothing; the update must see it */
  cr_assert_eq(lenet_cuda_allreduce_grads(gpu, c, s), 0, "%s",
               lenet_cuda_error());
  cr_assert_eq(lenet_cuda_sgd(gpu, 0.1f), 0, "%s", lenet_cuda_error());
  cr_assert_eq(lenet_cuda_sync(gpu), 0, "%s", lenet_cuda_error());
  cr_assert_eq(lenet_cuda_get_grads(gpu, after), 0, "%s", lenet_cuda_error());
  cr_assert_eq(memcmp(before, after, cpu.nparams * sizeof(float)), 0,
               "BRAID_AVG over one rank changed the gradients");
  lenet_sgd(&cpu, 0.1f);
  cr_assert_eq(lenet_cuda_get_params(gpu, after), 0, "%s", lenet_cuda_error());
  close_tensors(&cpu, after, cpu.params, "parameter after SGD");
  cr_assert_eq(braid_stream_destroy(s), BRAID_SUCCESS);
  free(before);
  free(after);
  free(x);
  lenet_destroy(&cpu);
  lenet_cuda_destroy(gpu);
  cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}
