/*
 * braid-perf's device buffers on the CUDA runtime (see perf_dev.h).
 */
#include "perf_dev.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

static int fail(char *msg, const char *call, cudaError_t e) {
  snprintf(msg, PERF_DEV_MSG, "%s: %s", call, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return -1;
}

#define CK(call, expr)                                                         \
  do {                                                                         \
    cudaError_t e_ = (expr);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return fail(msg, call, e_);                                              \
  } while (0)

int perf_dev_built(void) { return 1; }

int perf_dev_count(char *msg) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return fail(msg, "cudaGetDeviceCount", e);
  if (n < 1) {
    snprintf(msg, PERF_DEV_MSG, "cudaGetDeviceCount: 0 devices");
    return -1;
  }
  return n;
}

int perf_dev_select(int device, char *desc, size_t len, char *msg) {
  CK("cudaSetDevice", cudaSetDevice(device));
  struct cudaDeviceProp p;
  CK("cudaGetDeviceProperties", cudaGetDeviceProperties(&p, device));
  char bus[32] = "?";
  (void)cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device);
  (void)cudaGetLastError();
  snprintf(desc, len, "device %d %s %s", device, p.name, bus);
  /* Creates the context now, outside the timed loops. */
  CK("cudaFree(NULL)", cudaFree(NULL));
  return 0;
}

int perf_dev_alloc(void **p, size_t n, char *msg) {
  *p = NULL;
  CK("cudaMalloc", cudaMalloc(p, n));
  return 0;
}

void perf_dev_free(void *p) {
  if (p)
    (void)cudaFree(p);
}

int perf_dev_to_host(void *dst, const void *src, size_t n, char *msg) {
  CK("cudaMemcpy(device to host)",
     cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  return 0;
}

/* cudaMemcpy from pageable memory to the device may return once the data
 * is in the driver's staging memory, before it reached the device (CUDA
 * runtime API, "API synchronization behavior"), and the call measured next
 * runs on a non-blocking stream, which does not wait for the legacy default
 * stream: without the synchronisation it could read the old contents. */
int perf_dev_from_host(void *dst, const void *src, size_t n, char *msg) {
  CK("cudaMemcpy(host to device)",
     cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  CK("cudaDeviceSynchronize", cudaDeviceSynchronize());
  return 0;
}

int perf_dev_fill(void *p, int byte, size_t n, char *msg) {
  CK("cudaMemset", cudaMemset(p, byte, n));
  CK("cudaDeviceSynchronize", cudaDeviceSynchronize());
  return 0;
}

int perf_dev_stream_create(void **stream, char *msg) {
  cudaStream_t s = NULL;
  CK("cudaStreamCreateWithFlags",
     cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = s;
  return 0;
}

int perf_dev_stream_sync(void *stream, char *msg) {
  CK("cudaStreamSynchronize", cudaStreamSynchronize((cudaStream_t)stream));
  return 0;
}

void perf_dev_stream_destroy(void *stream) {
  if (stream)
    (void)cudaStreamDestroy((cudaStream_t)stream);
}

int perf_dev_sync(char *msg) {
  CK("cudaDeviceSynchronize", cudaDeviceSynchronize());
  return 0;
}
