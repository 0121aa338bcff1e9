/*
 * The device layer in a build without CUDA (BRAID_CUDA=OFF, or no toolkit
 * found): no devices, every pointer is host memory, and every other call
 * fails with BRAID_ERR_UNSUPPORTED and a message that says why.
 */
#include <stdio.h>

#include "device/cuda_dev.h"

#include <stdint.h>

static _Thread_local char none_msg[160];

static braid_result none(const char *call) {
  snprintf(none_msg, sizeof none_msg,
           "%s: braid was built without CUDA (BRAID_CUDA=OFF or no CUDA "
           "toolkit at build time)",
           call);
  return BRAID_ERR_UNSUPPORTED;
}

int cudev_built(void) { return 0; }
int cudev_count(void) { return 0; }
const char *cudev_error(void) { return none_msg[0] ? none_msg : "no error"; }

int cudev_is_device(const void *p, int *device) {
  (void)p;
  (void)device;
  return 0;
}

size_t cudev_room(const void *p, size_t want) {
  (void)p;
  (void)want;
  return SIZE_MAX;
}

braid_result cudev_set_device(int device) {
  (void)device;
  return none("cudaSetDevice");
}

int cudev_get_device(void) { return -1; }

braid_result cudev_busid(int device, char *busid, size_t len) {
  (void)device;
  (void)busid;
  (void)len;
  return none("cudaDeviceGetPCIBusId");
}

braid_result cudev_stream_create(void **stream) {
  (void)stream;
  return none("cudaStreamCreateWithFlags");
}
void cudev_stream_destroy(void *stream) { (void)stream; }
braid_result cudev_stream_sync(void *stream) {
  (void)stream;
  return none("cudaStreamSynchronize");
}
braid_result cudev_preload(void) { return none("loading the kernels"); }
int cudev_stream_capturing(void *stream) {
  (void)stream;
  return 0;
}
braid_result cudev_event_create(void **event) {
  (void)event;
  return none("cudaEventCreateWithFlags");
}
braid_result cudev_event_record(void *event, void *stream) {
  (void)event;
  (void)stream;
  return none("cudaEventRecord");
}
int cudev_event_query(void *event) {
  (void)event;
  return none("cudaEventQuery");
}
void cudev_event_destroy(void *event) { (void)event; }

braid_result cudev_malloc(void **p, size_t n) {
  (void)p;
  (void)n;
  return none("cudaMalloc");
}
void cudev_free(void *p) { (void)p; }
braid_result cudev_host_alloc(void **p, size_t n) {
  (void)p;
  (void)n;
  return none("cudaHostAlloc");
}
void cudev_host_free(void *p) { (void)p; }
braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream) {
  (void)dst;
  (void)src;
  (void)n;
  (void)stream;
  return none("cudaMemcpyAsync");
}

braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream) {
  return cudev_reduce_fwd(dst, NULL, a, b, n, dt, op, stream);
}
braid_result cudev_reduce_fwd(void *dst, void *fwd, const void *a,
                              const void *b, size_t n, braid_dtype dt,
                              braid_op op, void *stream) {
  (void)dst;
  (void)fwd;
  (void)a;
  (void)b;
  (void)n;
  (void)dt;
  (void)op;
  (void)stream;
  return none("cudev_reduce");
}
braid_result cudev_div(void *buf, size_t n, braid_dtype dt, int divisor,
                       void *stream) {
  (void)buf;
  (void)n;
  (void)dt;
  (void)divisor;
  (void)stream;
  return none("cudev_div");
}

braid_result cudev_scale(void *dst, const void *src, size_t n, braid_dtype dt,
                         const void *scalar, int scalar_on_device,
                         void *stream) {
  (void)dst;
  (void)src;
  (void)n;
  (void)dt;
  (void)scalar;
  (void)scalar_on_device;
  (void)stream;
  return none("cudev_scale");
}

braid_result cudev_kernel_coll_room(int *blocks, int *sms) {
  *blocks = 0;
  *sms = 0;
  return none("cudev_kernel_coll_room");
}

braid_result cudev_kernel_coll(const cudev_ka *k, uint64_t seq,
                               const cudev_kcall *call, void *stream) {
  (void)k;
  (void)seq;
  (void)call;
  (void)stream;
  return none("cudev_kernel_coll");
}
braid_result cudev_host_dptr(void *host, void **dev) {
  (void)host;
  (void)dev;
  return none("cudaHostGetDevicePointer");
}
braid_result cudev_stream_wait(void *stream, void *event) {
  (void)stream;
  (void)event;
  return none("cudaStreamWaitEvent");
}

braid_result cudev_ipc_get(void *base, void *handle) {
  (void)base;
  (void)handle;
  return none("cudaIpcGetMemHandle");
}
braid_result cudev_ipc_open(const void *handle, void **base) {
  (void)handle;
  (void)base;
  return none("cudaIpcOpenMemHandle");
}
void cudev_ipc_close(void *base) { (void)base; }

braid_result cudev_gate_new(void *user_stream, cudev_gate **g) {
  (void)user_stream;
  (void)g;
  return none("cudev_gate_new");
}
int cudev_gate_free(cudev_gate *g) {
  (void)g;
  return 1;
}
braid_result cudev_gate_enqueue(cudev_gate *g, uint32_t seq) {
  (void)g;
  (void)seq;
  return none("cudev_gate_enqueue");
}
int cudev_gate_reached(cudev_gate *g, uint32_t seq) {
  (void)g;
  (void)seq;
  return 0;
}
void cudev_gate_release(cudev_gate *g, uint32_t seq) {
  (void)g;
  (void)seq;
}
