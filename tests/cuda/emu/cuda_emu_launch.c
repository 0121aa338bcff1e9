/*
 * Kernel registration and launch on the emulated GPU, for programs that
 * hold CUDA kernels of their own (the trainer's LeNet: trainer/cuda/
 * lenet_cuda.cu). nvcc's host code registers a program's kernels when it
 * loads, which succeeds here; launching one fails with
 * cudaErrorNotSupported, also what cudaGetLastError says next: the
 * emulated GPU runs no CUDA code, only braid's own device work (copies,
 * reductions, the collective kernel: cuda_emu.c, emu_kernel.c). These are
 * the entry points nvcc's generated code calls (crt/host_runtime.h,
 * crt/device_functions.h); their arguments are not used.
 */
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>

#include "cuda_emu.h"

static void *emu_fatbin_handle;

void **__cudaRegisterFatBinary(void *fatbin) {
  (void)fatbin;
  return &emu_fatbin_handle;
}

void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

/* managed memory's module set-up (unoptimised builds call it) */
char __cudaInitModule(void **handle) {
  (void)handle;
  return 1;
}

void __cudaRegisterFunction(void **handle, const char *host_fun,
                            char *device_fun, const char *device_name,
                            int thread_limit, void *tid, void *bid,
                            void *block_dim, void *grid_dim, int *wsize) {
  (void)handle, (void)host_fun, (void)device_fun, (void)device_name;
  (void)thread_limit, (void)tid, (void)bid, (void)block_dim, (void)grid_dim;
  (void)wsize;
}

/* <<<grid, block, shared, stream>>>: kept by nothing. Its dim3 arguments
 * come by value; only the return value is read. */
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared,
                                     void *stream) {
  (void)grid, (void)block, (void)shared, (void)stream;
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared,
                                       void *stream) {
  (void)shared, (void)stream;
  *grid = (dim3){1, 1, 1};
  *block = (dim3){1, 1, 1};
  return cudaSuccess;
}

static cudaError_t no_kernels(void) {
  snprintf(emu_msg, sizeof emu_msg,
           "the emulated GPU runs no CUDA kernels (only braid's own device "
           "work)");
  emu_set_last_error(cudaErrorNotSupported);
  return cudaErrorNotSupported;
}

cudaError_t __cudaGetKernel(void **kernel, const void *fun) {
  (void)fun;
  *kernel = NULL;
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args,
                               size_t shared, void *stream) {
  (void)kernel, (void)grid, (void)block, (void)args, (void)shared;
  (void)stream;
  return no_kernels();
}
