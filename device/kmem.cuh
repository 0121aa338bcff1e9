/*
 * Element i of a device buffer of T, loaded and stored by the kernels
 * (kernels.cu, scale.cu): one access of T, or, where BYTES (a pointer not
 * aligned to T's size: a byte offset into a buffer), assembled from bytes,
 * so that no access is misaligned.
 */
#ifndef BRAID_DEVICE_KMEM_CUH
#define BRAID_DEVICE_KMEM_CUH

#include <stddef.h>

template <typename T, bool BYTES>
__device__ __forceinline__ T ld(const unsigned char *p, size_t i) {
  T x;
  if (BYTES) {
    unsigned char *o = reinterpret_cast<unsigned char *>(&x);
#pragma unroll
    for (size_t j = 0; j < sizeof(T); j++)
      o[j] = p[i * sizeof(T) + j];
  } else {
    x = reinterpret_cast<const T *>(p)[i];
  }
  return x;
}

template <typename T, bool BYTES>
__device__ __forceinline__ void st(unsigned char *p, size_t i, T x) {
  if (BYTES) {
    const unsigned char *s = reinterpret_cast<const unsigned char *>(&x);
#pragma unroll
    for (size_t j = 0; j < sizeof(T); j++)
      p[i * sizeof(T) + j] = s[j];
  } else {
    reinterpret_cast<T *>(p)[i] = x;
  }
}

#endif
