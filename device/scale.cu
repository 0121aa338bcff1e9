/*
 * The pre-multiplied sum's local step on the GPU (cudev_scale, cuda_dev.h):
 * dst[i] = src[i] x scalar, rounded to the dtype once (integers wrap), the
 * product of reduce_ops.cuh, which is what the CPU's red_premul
 * (src/reduce.c) gives, bit for bit. The scalar is the kernel's argument
 * (a host scalar, read at the launch) or device memory read by every
 * thread as the kernel runs (a device scalar: its value when the call
 * runs, in stream order). A grid-stride loop, one element per thread and
 * step, assembled from bytes where a pointer is not aligned to the element
 * size.
 */
#include <cuda_runtime.h>

#include "device/cuda_dev.h"
#include "device/dev_int.h"
#include "device/kmem.cuh"
#include "device/reduce_ops.cuh"

namespace {

template <int DT>
__global__ void __launch_bounds__(CUK_THREADS)
    k_scale(unsigned char *dst, const unsigned char *src, size_t n,
            const unsigned char *dscalar, uint64_t imm, bool bytes) {
  typedef typename rop_type<DT>::T T;
  const T s =
      dscalar != nullptr
          ? ld<T, true>(dscalar, 0)
          : ld<T, true>(reinterpret_cast<const unsigned char *>(&imm), 0);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    T x = bytes ? ld<T, true>(src, i) : ld<T, false>(src, i);
    T r = rop_type<DT>::template op<ROP_PROD>(x, s);
    if (bytes)
      st<T, true>(dst, i, r);
    else
      st<T, false>(dst, i, r);
  }
}

template <int DT>
int scale_dt(void *dst, const void *src, size_t n, const void *dscalar,
             uint64_t imm, unsigned sms, cudaStream_t s) {
  typedef typename rop_type<DT>::T T;
  int per = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per, k_scale<DT>, CUK_THREADS, 0) != cudaSuccess ||
      per < 1)
    per = 1;
  size_t need = (n + CUK_THREADS - 1) / CUK_THREADS;
  size_t most = (size_t)(sms ? sms : 1u) * (size_t)per;
  unsigned blocks = (unsigned)(need < most ? need : most);
  bool bytes = ((uintptr_t)dst | (uintptr_t)src) % sizeof(T) != 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks ? blocks : 1);
  cfg.blockDim = dim3(CUK_THREADS);
  cfg.stream = s;
  /* this launch's own error (cudaGetLastError would also report one the
   * application left) */
  return cudaLaunchKernelEx(
      &cfg, k_scale<DT>, static_cast<unsigned char *>(dst),
      static_cast<const unsigned char *>(src), n,
      static_cast<const unsigned char *>(dscalar), imm, bytes);
}

template <int DT> cudaError_t preload_scale_dt() {
  cudaFuncAttributes at;
  return cudaFuncGetAttributes(&at, k_scale<DT>);
}

} // namespace

extern "C" int cuk_scale(void *dst, const void *src, size_t n, int dt,
                         const void *dscalar, uint64_t imm, unsigned sms,
                         void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (n == 0)
    return cudaSuccess;
#define CUK_CALL_SCALE(D) return scale_dt<D>(dst, src, n, dscalar, imm, sms, s)
  ROP_DISPATCH(dt, CUK_CALL_SCALE)
#undef CUK_CALL_SCALE
  return cudaErrorInvalidValue;
}

/* Loads the scaling kernels on the current device (see kernels.cu's
 * preload: a kernel loaded at its first launch may wait for a stream that
 * a gate holds). */
extern "C" int cuk_scale_preload(void) {
  cudaError_t e = cudaSuccess;
  for (int dt = 0; e == cudaSuccess && dt < BRAID_NUM_DTYPES; dt++) {
#define CUK_CALL_PRELOAD_SCALE(D)                                              \
  e = preload_scale_dt<D>();                                                   \
  break
    ROP_DISPATCH(dt, CUK_CALL_PRELOAD_SCALE)
#undef CUK_CALL_PRELOAD_SCALE
  }
  return e;
}
