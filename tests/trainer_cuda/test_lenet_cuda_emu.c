/*
 * The CUDA LeNet's device allreduce (trainer/cuda/lenet_cuda.h) at two
 * ranks on the emulated GPU (tests/cuda/emu): each rank puts gradients of
 * its own in the model's device buffer on the model's stream, and
 * lenet_cuda_allreduce_grads must leave their average in both, ordered on
 * that stream. At one rank an allreduce that does nothing would pass. The
 * emulated GPU runs no CUDA kernels of the model's: the forward and
 * backward passes and the SGD step are checked against the CPU trainer on
 * a GPU (trainer_cuda), and here launching one must fail, saying so.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "lenet_cuda.h"
#include "test_gpu_ranks.h"

/* Rank r's gradient element i: small integers, the sum of two even, so
 * that the average is exact in float. */
static float grad(int r, size_t i) {
  return (float)(2 * (int)((i * 7 + (size_t)r * 3) % 11) - 10 + 2 * r);
}

static int average_grads(braid_comm *c, int rank, int n) {
  lenet_cuda *m = NULL;
  if (lenet_cuda_create(&m, 1) != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, lenet_cuda_error());
    return 2;
  }
  size_t np = lenet_cuda_nparams(m);
  float *h = malloc(np * sizeof *h);
  if (h == NULL)
    return 3;
  for (size_t i = 0; i < np; i++)
    h[i] = grad(rank, i);
  cudaStream_t cs = (cudaStream_t)lenet_cuda_stream(m);
  CK(cudaMemcpyAsync(lenet_cuda_grads(m), h, np * sizeof *h,
                     cudaMemcpyHostToDevice, cs));
  CK(cudaStreamSynchronize(cs)); /* h is pageable and rewritten below */
  braid_stream *s = NULL;
  if (braid_stream_from_cuda(lenet_cuda_stream(m), &s) != BRAID_SUCCESS)
    return 4;
  int rc = 0;
  if (lenet_cuda_allreduce_grads(m, c, s) != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, lenet_cuda_error());
    rc = 5;
  }
  /* braid's defaults run the call as a collective kernel; the copy path's
   * test sets BRAID_CUDA_KERNEL_MAX=0 */
  const char *k = getenv("BRAID_CUDA_KERNEL_MAX");
  uint64_t kernels = enq_stream_kernel_calls(s);
  uint64_t want = k != NULL && strcmp(k, "0") == 0 ? 0 : 1;
  if (rc == 0 && kernels != want) {
    fprintf(stderr,
            "rank %d: %llu calls ran as collective kernels, want %llu "
            "(BRAID_CUDA_KERNEL_MAX=%s)\n",
            rank, (unsigned long long)kernels, (unsigned long long)want,
            k ? k : "unset");
    rc = 10;
  }
  memset(h, 0, np * sizeof *h);
  if (rc == 0 && lenet_cuda_get_grads(m, h) != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, lenet_cuda_error());
    rc = 6;
  }
  for (size_t i = 0; i < np && rc == 0; i++) {
    float want = 0.0f;
    for (int r = 0; r < n; r++)
      want += grad(r, i);
    want /= (float)n;
    if (h[i] != want) {
      fprintf(stderr, "rank %d: gradient %zu is %g, want %g\n", rank, i,
              (double)h[i], (double)want);
      rc = 7;
    }
  }
  /* the model's own kernels do not run here, and say so */
  if (rc == 0 && (lenet_cuda_sgd(m, 0.1f) == 0 ||
                  strstr(lenet_cuda_error(), "sgd") == NULL)) {
    fprintf(stderr,
            "rank %d: the SGD kernel launched on the emulated GPU "
            "(or failed without saying which): %s\n",
            rank, lenet_cuda_error());
    rc = 8;
  }
  if (braid_stream_destroy(s) != BRAID_SUCCESS && rc == 0)
    rc = 9;
  free(h);
  lenet_cuda_destroy(m);
  return rc;
}

Test(trainer_cuda_emu, device_allreduce_averages_two_ranks, .timeout = 120) {
  gpu_run(average_grads, 2, "the gradients' device allreduce");
}
