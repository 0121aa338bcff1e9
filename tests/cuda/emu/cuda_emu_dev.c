/*
 * braid's device layer (device/cuda_dev.h) on the emulated GPU
 * (see cuda_emu.c): the same calls as dev.c, made to the emulated CUDA
 * runtime. The collective kernel is in emu_kernel.c.
 */
#include "tests/cuda/emu/cuda_emu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transports/transport.h"

braid_result cudev_preload(void) { return BRAID_SUCCESS; } /* no modules */

int cudev_stream_capturing(void *stream) {
  enum cudaStreamCaptureStatus st;
  cudaStreamIsCapturing(stream, &st);
  return st != cudaStreamCaptureStatusNone;
}

static braid_result dev_result(cudaError_t e, const char *call) {
  if (e == cudaSuccess)
    return BRAID_SUCCESS;
  if (emu_msg[0] == 0)
    snprintf(emu_msg, sizeof emu_msg, "%s: %s", call, cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? BRAID_ERR_NOMEM : BRAID_ERR_SYSTEM;
}

#define DEV(call, expr)                                                        \
  do {                                                                         \
    emu_msg[0] = 0;                                                            \
    braid_result r_ = dev_result((expr), call);                                \
    if (r_ != BRAID_SUCCESS)                                                   \
      return r_;                                                               \
  } while (0)

int cudev_built(void) { return 1; }
int cudev_count(void) { return emu_count(); }
const char *cudev_error(void) { return emu_msg[0] ? emu_msg : "no error"; }

int cudev_is_device(const void *p, int *device) {
  int dev = emu_region_device(p);
  if (dev >= 0 && device)
    *device = dev;
  return dev >= 0;
}

size_t cudev_room(const void *p, size_t want) {
  return emu_region_room(p, want);
}

braid_result cudev_set_device(int device) {
  DEV("cudaSetDevice", cudaSetDevice(device));
  return BRAID_SUCCESS;
}

int cudev_get_device(void) { return emu_device; }

/* Bus ids come from CUDA_EMU_BUSID (tests place the emulated GPUs in a
 * machine's topology). */
braid_result cudev_busid(int device, char *busid, size_t len) {
  if (busid == NULL || emu_busid(device, busid, len) != 0) {
    snprintf(emu_msg, sizeof emu_msg,
             "cudev_busid: no device %d or a buffer too short", device);
    return BRAID_ERR_INVALID_ARG;
  }
  return BRAID_SUCCESS;
}

braid_result cudev_stream_create(void **stream) {
  cudaStream_t s;
  DEV("cudaStreamCreateWithFlags",
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = s;
  return BRAID_SUCCESS;
}

void cudev_stream_destroy(void *stream) {
  if (stream)
    cudaStreamDestroy(stream);
}

braid_result cudev_stream_sync(void *stream) {
  DEV("cudaStreamSynchronize", cudaStreamSynchronize(stream));
  return BRAID_SUCCESS;
}

braid_result cudev_event_create(void **event) {
  cudaEvent_t e;
  DEV("cudaEventCreateWithFlags",
      cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *event = e;
  return BRAID_SUCCESS;
}

braid_result cudev_event_record(void *event, void *stream) {
  DEV("cudaEventRecord", cudaEventRecord(event, stream));
  return BRAID_SUCCESS;
}

int cudev_event_query(void *event) {
  return cudaEventQuery(event) == cudaSuccess ? BRAID_SUCCESS : CUDEV_AGAIN;
}

void cudev_event_destroy(void *event) {
  if (event)
    cudaEventDestroy(event);
}

braid_result cudev_malloc(void **p, size_t n) {
  DEV("cudaMalloc", cudaMalloc(p, n));
  return BRAID_SUCCESS;
}

void cudev_free(void *p) { cudaFree(p); }

braid_result cudev_host_alloc(void **p, size_t n) {
  DEV("cudaHostAlloc", cudaMallocHost(p, n));
  return BRAID_SUCCESS;
}

void cudev_host_free(void *p) { cudaFreeHost(p); }

braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream) {
  DEV("cudaMemcpyAsync",
      cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
  return BRAID_SUCCESS;
}

static braid_result dev_check(const char *fn, braid_dtype dt, braid_op op) {
  if ((unsigned)dt >= BRAID_NUM_DTYPES || (unsigned)op >= BRAID_NUM_OPS) {
    snprintf(emu_msg, sizeof emu_msg, "%s: bad dtype %d or op %d", fn, (int)dt,
             (int)op);
    return BRAID_ERR_INVALID_ARG;
  }
  if (!cudev_has_kernel(dt, op)) {
    snprintf(emu_msg, sizeof emu_msg,
             "%s: dtype %s with op %s is not supported on device buffers", fn,
             braid_dtype_name(dt), braid_op_name(op));
    return BRAID_ERR_UNSUPPORTED;
  }
  return BRAID_SUCCESS;
}

braid_result cudev_reduce_fwd(void *dst, void *fwd, const void *a,
                              const void *b, size_t n, braid_dtype dt,
                              braid_op op, void *stream) {
  braid_result r = dev_check("cudev_reduce", dt, op);
  if (r != BRAID_SUCCESS || n == 0)
    return r;
  emu_kernel_reaches("cudev_reduce", "dst", dst);
  emu_kernel_reaches("cudev_reduce", "fwd", fwd);
  emu_kernel_reaches("cudev_reduce", "a", a);
  emu_kernel_reaches("cudev_reduce", "b", b);
  emu_op o = {.kind = OP_REDUCE,
              .dst = dst,
              .fwd = fwd,
              .a = a,
              .b = b,
              .n = n,
              .dt = dt,
              .op = op};
  DEV("reduction kernel launch", emu_stream_push(stream, &o));
  return BRAID_SUCCESS;
}

braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream) {
  return cudev_reduce_fwd(dst, NULL, a, b, n, dt, op, stream);
}

braid_result cudev_div(void *buf, size_t n, braid_dtype dt, int divisor,
                       void *stream) {
  braid_result r = dev_check("cudev_div", dt, BRAID_SUM);
  if (r != BRAID_SUCCESS || n == 0 || divisor <= 1)
    return r;
  emu_kernel_reaches("cudev_div", "buf", buf);
  emu_op o = {.kind = OP_DIV, .dst = buf, .n = n, .dt = dt, .value = divisor};
  DEV("division kernel launch", emu_stream_push(stream, &o));
  return BRAID_SUCCESS;
}

braid_result cudev_scale(void *dst, const void *src, size_t n, braid_dtype dt,
                         const void *scalar, int scalar_on_device,
                         void *stream) {
  braid_result r = dev_check("cudev_scale", dt, BRAID_PROD);
  if (r == BRAID_SUCCESS && scalar == NULL) {
    snprintf(emu_msg, sizeof emu_msg, "cudev_scale: scalar is NULL");
    r = BRAID_ERR_INVALID_ARG;
  }
  if (r != BRAID_SUCCESS || n == 0)
    return r;
  emu_kernel_reaches("cudev_scale", "dst", dst);
  emu_kernel_reaches("cudev_scale", "src", src);
  emu_op o = {.kind = OP_SCALE, .dst = dst, .a = src, .n = n, .dt = dt};
  if (scalar_on_device) {
    emu_kernel_reaches("cudev_scale", "scalar", scalar);
    o.b = scalar;
  } else {
    memcpy(o.imm, scalar, braid_dtype_size(dt));
  }
  DEV("scaling kernel launch", emu_stream_push(stream, &o));
  return BRAID_SUCCESS;
}

braid_result cudev_ipc_get(void *base, void *handle) {
  cudaIpcMemHandle_t h;
  DEV("cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, base));
  memcpy(handle, &h, sizeof h);
  return BRAID_SUCCESS;
}

braid_result cudev_ipc_open(const void *handle, void **base) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  DEV("cudaIpcOpenMemHandle",
      cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess));
  return BRAID_SUCCESS;
}

void cudev_ipc_close(void *base) {
  if (base)
    cudaIpcCloseMemHandle(base);
}

/* Gates: the operation stores seq to "reached", then holds its stream until
 * "released" reaches seq (the stream memory operations' behaviour). Their
 * words come from a pool and go back to it as dev.c's do: never freed, so
 * that destroying a stream waits for no other. */
static pthread_mutex_t words_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  emu_gate_words *w;
  uint32_t base;
} words_pool[256];
static int nwords;

braid_result cudev_gate_new(void *user_stream, cudev_gate **out) {
  cudev_gate *g = calloc(1, sizeof *g);
  if (g != NULL) {
    pthread_mutex_lock(&words_mu);
    if (nwords > 0) {
      nwords--;
      g->w = words_pool[nwords].w;
      g->base = words_pool[nwords].base;
    }
    pthread_mutex_unlock(&words_mu);
    if (g->w == NULL)
      g->w = calloc(1, sizeof *g->w);
  }
  if (g == NULL || g->w == NULL) {
    free(g);
    snprintf(emu_msg, sizeof emu_msg, "cudev_gate_new: out of memory");
    return BRAID_ERR_NOMEM;
  }
  g->stream = user_stream;
  *out = g;
  return BRAID_SUCCESS;
}

int cudev_gate_free(cudev_gate *g) {
  if (g == NULL)
    return 1;
  cudev_gate_release(g, g->last);
  if (!cudev_gate_reached(g, g->last)) /* as dev.c: left allocated */
    return 0;
  pthread_mutex_lock(&words_mu);
  if (nwords < (int)(sizeof words_pool / sizeof words_pool[0])) {
    words_pool[nwords].w = g->w;
    words_pool[nwords++].base = g->base + g->last;
  } /* else the words stay unused, as dev.c's when its pool cannot grow */
  pthread_mutex_unlock(&words_mu);
  free(g);
  return 1;
}

braid_result cudev_gate_enqueue(cudev_gate *g, uint32_t seq) {
  emu_op o = {.kind = OP_GATE, .words = g->w, .seq = g->base + seq};
  DEV("gate", emu_stream_push(g->stream, &o));
  g->last = seq;
  return BRAID_SUCCESS;
}

int cudev_gate_reached(cudev_gate *g, uint32_t seq) {
  return (int32_t)(atomic_load(&g->w->reached) - (g->base + seq)) >= 0;
}

void cudev_gate_release(cudev_gate *g, uint32_t seq) {
  uint32_t v = g->base + seq;
  uint32_t cur = atomic_load(&g->w->released);
  if ((int32_t)(v - cur) > 0)
    atomic_store(&g->w->released, v);
}

void cudev_gate_force_kernel(int on) { (void)on; }
int cudev_gate_uses_memops(const struct cudev_gate *g) { return g != NULL; }
