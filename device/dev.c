/*
 * The device layer (cuda_dev.h) on the CUDA runtime, linked statically: the
 * driver (libcuda) is loaded by the runtime when it is there, so this file
 * links and runs on machines without one (cudev_count() is then 0).
 *
 * Errors leave a thread-local message "<CUDA call>: <cudaGetErrorString>"
 * for cudev_error(), and clear CUDA's last-error state so that a later
 * launch check does not see them again.
 *
 * Stream gates. A call on a user's CUDA stream must run after everything
 * queued before it and hold back everything queued after it, with no CPU
 * thread blocked. Each gate owns two 32-bit words in pinned host memory that
 * is mapped into the device (cudaHostAlloc(cudaHostAllocMapped)): "reached"
 * and "released". Gate `seq` enqueues on the user's stream
 *   1. a write of seq to "reached" (after all earlier work of the stream),
 *   2. a wait until "released" >= seq (cyclic 32-bit comparison),
 * and braid's progress engine polls "reached", runs the collective on its
 * own streams, and writes "released" when the result is in place.
 * Preferred: the driver's stream memory operations cuStreamWriteValue32 and
 * cuStreamWaitValue32 (CU_STREAM_WAIT_VALUE_GEQ), which the front end of the
 * GPU executes without occupying an SM. They are taken from the driver with
 * cudaGetDriverEntryPointByVersion, so libbraid does not link libcuda. Only
 * the 32-bit operations with GEQ are used: CUDA 12 made them part of the
 * core API (no device attribute to query; WAIT_VALUE_NOR, which has one, is
 * not needed). When the entry points are missing or a call answers
 * CUDA_ERROR_NOT_SUPPORTED, the gate falls back to a one-thread kernel that
 * stores "reached" and spins on "released" with __nanosleep (kernels.cu);
 * it holds one block slot of one SM while the stream waits.
 * Both words start at 0, so gate numbers start at 1; cudev_gate_free
 * releases the last gate first, so a stream never waits on freed memory.
 */
#include "device/cuda_dev.h"

#include <ctype.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev_int.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == CUDEV_IPC_BYTES,
               "CUDA IPC handle size");

static _Thread_local char dev_msg[256];

int cudev_built(void) { return 1; }

const char *cudev_error(void) { return dev_msg[0] ? dev_msg : "no error"; }

static braid_result dev_fail(const char *call, cudaError_t e) {
  snprintf(dev_msg, sizeof dev_msg, "%s: %s", call, cudaGetErrorString(e));
  (void)cudaGetLastError(); /* not sticky: clear it */
  return e == cudaErrorMemoryAllocation ? BRAID_ERR_NOMEM : BRAID_ERR_SYSTEM;
}

static braid_result dev_bad(const char *what) {
  snprintf(dev_msg, sizeof dev_msg, "%s", what);
  return BRAID_ERR_INVALID_ARG;
}

#define DEV_CALL(call, expr)                                                   \
  do {                                                                         \
    cudaError_t e_ = (expr);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return dev_fail(call, e_);                                               \
  } while (0)

/* cudaGetDeviceCount runs once (pthread_once); its answer and, when it
 * failed, its message are kept, and every later cudev_count() that answers
 * 0 for that reason leaves the message for cudev_error() on its own thread
 * (the message is thread-local). */
static pthread_once_t dev_count_once = PTHREAD_ONCE_INIT;
static int dev_count_cached;
static char dev_count_msg[sizeof dev_msg];

static void dev_count_init(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) { /* no driver, no device: a host-only machine */
    snprintf(dev_count_msg, sizeof dev_count_msg, "cudaGetDeviceCount: %s",
             cudaGetErrorString(e));
    (void)cudaGetLastError(); /* not sticky: clear it */
    n = 0;
  }
  dev_count_cached = n;
}

int cudev_count(void) {
  (void)pthread_once(&dev_count_once, dev_count_init);
  if (dev_count_cached == 0 && dev_count_msg[0])
    snprintf(dev_msg, sizeof dev_msg, "%s", dev_count_msg);
  return dev_count_cached;
}

int cudev_is_device(const void *p, int *device) {
  /* asked twice in every call (src/api.c classify): on a machine without a
   * device, the answer without cudev_count's message */
  (void)pthread_once(&dev_count_once, dev_count_init);
  if (p == NULL || dev_count_cached == 0)
    return 0;
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e == cudaErrorInvalidValue) { /* drivers before CUDA 11: unregistered */
    (void)cudaGetLastError();
    return 0;
  }
  if (e != cudaSuccess) {
    dev_fail("cudaPointerGetAttributes", e);
    return -1;
  }
  if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) {
    if (device)
      *device = at.device;
    return 1;
  }
  return 0; /* cudaMemoryTypeHost (pinned) or cudaMemoryTypeUnregistered */
}

braid_result cudev_set_device(int device) {
  DEV_CALL("cudaSetDevice", cudaSetDevice(device));
  return BRAID_SUCCESS;
}

int cudev_get_device(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

braid_result cudev_busid(int device, char *busid, size_t len) {
  if (busid == NULL || len < 13)
    return dev_bad("cudev_busid: the buffer needs 13 bytes or more");
  DEV_CALL("cudaDeviceGetPCIBusId",
           cudaDeviceGetPCIBusId(busid, (int)(len > 64 ? 64 : len), device));
  for (char *c = busid; *c; c++) /* hwloc and NCCL's files use lower case */
    *c = (char)tolower((unsigned char)*c);
  return BRAID_SUCCESS;
}

/* ---- streams and events ------------------------------------------------ */

braid_result cudev_stream_create(void **stream) {
  cudaStream_t s;
  DEV_CALL("cudaStreamCreateWithFlags",
           cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = s;
  return BRAID_SUCCESS;
}

void cudev_stream_destroy(void *stream) {
  if (stream && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess)
    (void)cudaGetLastError();
}

braid_result cudev_stream_sync(void *stream) {
  DEV_CALL("cudaStreamSynchronize", cudaStreamSynchronize(stream));
  return BRAID_SUCCESS;
}

int cudev_stream_capturing(void *stream) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &st);
  if (e != cudaSuccess) {
    dev_fail("cudaStreamIsCapturing", e);
    return -1;
  }
  return st != cudaStreamCaptureStatusNone;
}

braid_result cudev_event_create(void **event) {
  cudaEvent_t ev;
  DEV_CALL("cudaEventCreateWithFlags",
           cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  *event = ev;
  return BRAID_SUCCESS;
}

braid_result cudev_event_record(void *event, void *stream) {
  DEV_CALL("cudaEventRecord", cudaEventRecord(event, stream));
  return BRAID_SUCCESS;
}

int cudev_event_query(void *event) {
  cudaError_t e = cudaEventQuery(event);
  if (e == cudaSuccess)
    return BRAID_SUCCESS;
  if (e == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady)
      (void)cudaGetLastError();
    return CUDEV_AGAIN;
  }
  return dev_fail("cudaEventQuery", e);
}

void cudev_event_destroy(void *event) {
  if (event && cudaEventDestroy(event) != cudaSuccess)
    (void)cudaGetLastError();
}

/* ---- memory ------------------------------------------------------------ */

braid_result cudev_malloc(void **p, size_t n) {
  cudaError_t e = cudaMalloc(p, n);
  if (e != cudaSuccess) {
    braid_result r = dev_fail("cudaMalloc", e);
    size_t l = strlen(dev_msg);
    snprintf(dev_msg + l, sizeof dev_msg - l, " (%zu bytes)", n);
    return r;
  }
  return BRAID_SUCCESS;
}

void cudev_free(void *p) {
  if (p && cudaFree(p) != cudaSuccess)
    (void)cudaGetLastError();
}

braid_result cudev_host_alloc(void **p, size_t n) {
  DEV_CALL("cudaHostAlloc",
           cudaHostAlloc(p, n, cudaHostAllocMapped | cudaHostAllocPortable));
  return BRAID_SUCCESS;
}

void cudev_host_free(void *p) {
  if (p && cudaFreeHost(p) != cudaSuccess)
    (void)cudaGetLastError();
}

braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream) {
  if (n == 0)
    return BRAID_SUCCESS;
  DEV_CALL("cudaMemcpyAsync",
           cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
  return BRAID_SUCCESS;
}

/* ---- kernels ----------------------------------------------------------- */

#define DEV_MAX 64
static unsigned dev_sms_cached[DEV_MAX];

/* The current device's multiprocessor count. */
static braid_result dev_sms(unsigned *sms) {
  int dev, n = 0;
  DEV_CALL("cudaGetDevice", cudaGetDevice(&dev));
  if (dev >= 0 && dev < DEV_MAX) {
    *sms = __atomic_load_n(&dev_sms_cached[dev], __ATOMIC_RELAXED);
    if (*sms)
      return BRAID_SUCCESS;
  }
  DEV_CALL("cudaDeviceGetAttribute",
           cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  *sms = n > 0 ? (unsigned)n : 1u;
  if (dev >= 0 && dev < DEV_MAX)
    __atomic_store_n(&dev_sms_cached[dev], *sms, __ATOMIC_RELAXED);
  return BRAID_SUCCESS;
}

static braid_result dev_check(const char *fn, braid_dtype dt, braid_op op) {
  if ((unsigned)dt >= BRAID_NUM_DTYPES || (unsigned)op >= BRAID_NUM_OPS) {
    snprintf(dev_msg, sizeof dev_msg, "%s: bad dtype %d or op %d", fn, (int)dt,
             (int)op);
    return BRAID_ERR_INVALID_ARG;
  }
  if (!cudev_has_kernel(dt, op)) {
    snprintf(dev_msg, sizeof dev_msg,
             "%s: dtype %s with op %s is not supported on device buffers", fn,
             braid_dtype_name(dt), braid_op_name(op));
    return BRAID_ERR_UNSUPPORTED;
  }
  return BRAID_SUCCESS;
}

braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream) {
  return cudev_reduce_fwd(dst, NULL, a, b, n, dt, op, stream);
}

braid_result cudev_reduce_fwd(void *dst, void *fwd, const void *a,
                              const void *b, size_t n, braid_dtype dt,
                              braid_op op, void *stream) {
  unsigned sms;
  braid_result r = dev_check("cudev_reduce", dt, op);
  if (r != BRAID_SUCCESS || n == 0)
    return r;
  if ((r = dev_sms(&sms)) != BRAID_SUCCESS)
    return r;
  DEV_CALL("reduction kernel launch",
           (cudaError_t)cuk_reduce(dst, fwd, a, b, n, (int)dt, (int)op, sms,
                                   stream));
  return BRAID_SUCCESS;
}

braid_result cudev_div(void *buf, size_t n, braid_dtype dt, int divisor,
                       void *stream) {
  unsigned sms;
  braid_result r = dev_check("cudev_div", dt, BRAID_SUM);
  if (r != BRAID_SUCCESS || n == 0 || divisor <= 1)
    return r;
  if ((r = dev_sms(&sms)) != BRAID_SUCCESS)
    return r;
  DEV_CALL("division kernel launch",
           (cudaError_t)cuk_div(buf, n, (int)dt, divisor, sms, stream));
  return BRAID_SUCCESS;
}

braid_result cudev_scale(void *dst, const void *src, size_t n, braid_dtype dt,
                         const void *scalar, int scalar_on_device,
                         void *stream) {
  unsigned sms;
  braid_result r = dev_check("cudev_scale", dt, BRAID_PROD);
  if (r == BRAID_SUCCESS && scalar == NULL) {
    snprintf(dev_msg, sizeof dev_msg, "cudev_scale: scalar is NULL");
    r = BRAID_ERR_INVALID_ARG;
  }
  if (r != BRAID_SUCCESS || n == 0)
    return r;
  if ((r = cudev_preload()) != BRAID_SUCCESS ||
      (r = dev_sms(&sms)) != BRAID_SUCCESS)
    return r;
  uint64_t imm = 0;
  if (!scalar_on_device)
    memcpy(&imm, scalar, braid_dtype_size(dt));
  DEV_CALL("scaling kernel launch",
           (cudaError_t)cuk_scale(dst, src, n, (int)dt,
                                  scalar_on_device ? scalar : NULL, imm, sms,
                                  stream));
  return BRAID_SUCCESS;
}

braid_result cudev_kernel_coll_room(int *blocks, int *sms_out) {
  unsigned sms;
  int per = 0;
  braid_result r = cudev_preload();
  if (r == BRAID_SUCCESS)
    r = dev_sms(&sms);
  if (r != BRAID_SUCCESS)
    return r;
  DEV_CALL("cudaOccupancyMaxActiveBlocksPerMultiprocessor (collective kernel)",
           (cudaError_t)cuk_coll_resident(&per));
  *blocks = (int)sms * per;
  *sms_out = (int)sms;
  return BRAID_SUCCESS;
}

braid_result cudev_kernel_coll(const cudev_ka *k, uint64_t seq,
                               const cudev_kcall *call, void *stream) {
  if (!cudev_kc_valid(k, call)) {
    snprintf(dev_msg, sizeof dev_msg,
             "cudev_kernel_coll: collective %d, root %d, dtype %d, op %d, "
             "rank %d of %d, slots of %zu bytes",
             call->coll, call->root, (int)call->dt, (int)call->op, k->rank,
             k->nranks, k->slot);
    return BRAID_ERR_INVALID_ARG;
  }
  braid_result r =
      dev_check("cudev_kernel_coll", call->dt,
                cudev_kc_reduces(call->coll) ? call->op : BRAID_SUM);
  if (r != BRAID_SUCCESS)
    return r;
  r = cudev_preload(); /* loads kernels before a gate holds one */
  if (r != BRAID_SUCCESS)
    return r;
  DEV_CALL("collective kernel launch",
           (cudaError_t)cuk_coll(k, seq, call, stream));
  return BRAID_SUCCESS;
}

braid_result cudev_host_dptr(void *host, void **dev) {
  DEV_CALL("cudaHostGetDevicePointer", cudaHostGetDevicePointer(dev, host, 0));
  return BRAID_SUCCESS;
}

braid_result cudev_stream_wait(void *stream, void *event) {
  DEV_CALL("cudaStreamWaitEvent",
           cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
  return BRAID_SUCCESS;
}

/* ---- IPC --------------------------------------------------------------- */

braid_result cudev_ipc_get(void *base, void *handle) {
  cudaIpcMemHandle_t h;
  DEV_CALL("cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, base));
  memcpy(handle, &h, sizeof h);
  return BRAID_SUCCESS;
}

braid_result cudev_ipc_open(const void *handle, void **base) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  DEV_CALL("cudaIpcOpenMemHandle",
           cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess));
  return BRAID_SUCCESS;
}

void cudev_ipc_close(void *base) {
  if (base && cudaIpcCloseMemHandle(base) != cudaSuccess)
    (void)cudaGetLastError();
}

/* ---- gates ------------------------------------------------------------- */

typedef CUresult (*pfn_value32)(CUstream, CUdeviceptr, cuuint32_t,
                                unsigned int);
typedef CUresult (*pfn_errstr)(CUresult, const char **);

static pthread_once_t memops_once = PTHREAD_ONCE_INIT;
static pfn_value32 memops_write, memops_wait;
static pfn_errstr drv_errstr;
static int gate_kernel_forced;

static void *dev_entry(const char *sym) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t e =
      cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q);
#else
  cudaError_t e = cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault, &q);
#endif
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

/* ---- buffer bounds ----------------------------------------------------- */

typedef CUresult (*pfn_range)(CUdeviceptr *, size_t *, CUdeviceptr);
static pthread_once_t range_once = PTHREAD_ONCE_INIT;
static pfn_range mem_range; /* cuMemGetAddressRange */

static void range_init(void) {
  mem_range = (pfn_range)dev_entry("cuMemGetAddressRange");
}

/* Walks the allocations from p on, at most DEV_RANGE_WALK of them (a VMM
 * range mapped in 2 MiB pieces: 2 GiB), beyond which it cannot tell. */
#define DEV_RANGE_WALK 1024
size_t cudev_room(const void *p, size_t want) {
  pthread_once(&range_once, range_init);
  if (mem_range == NULL || p == NULL)
    return SIZE_MAX;
  uintptr_t at = (uintptr_t)p, end = at + want;
  if (end < at)
    return SIZE_MAX;
  for (int i = 0; at < end; i++) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (i == DEV_RANGE_WALK)
      return SIZE_MAX;
    if (mem_range(&base, &size, (CUdeviceptr)at) != CUDA_SUCCESS ||
        (uintptr_t)base > at || at - (uintptr_t)base >= size) {
      if (i == 0) /* p itself: not an allocation the driver knows */
        return SIZE_MAX;
      break; /* nothing mapped at `at` */
    }
    at = (uintptr_t)base + size;
  }
  return at >= end ? want : (size_t)(at - (uintptr_t)p);
}

static void memops_init(void) {
  memops_write = (pfn_value32)dev_entry("cuStreamWriteValue32");
  memops_wait = (pfn_value32)dev_entry("cuStreamWaitValue32");
  drv_errstr = (pfn_errstr)dev_entry("cuGetErrorString");
}

struct cudev_gate {
  void *stream;
  uint32_t *host; /* [0] reached, [1] released: pinned, mapped */
  uint32_t *dev;  /* the same words as the device sees them */
  uint32_t base;  /* gate seq is the words' value base + seq */
  uint32_t last;  /* last seq enqueued */
  int memops;
};

/* Gate words are never freed: cudaFreeHost waits for the whole device, so
 * destroying a stream would wait for every other stream, those held at
 * other gates and long kernels included (and for ever where one of them
 * waits for something only the destroying thread would do). A freed
 * gate's words go back to this pool with the value they reached; a gate
 * made from them numbers on from there, so the words only grow and a wait
 * of the old stream that has not yet seen its release stays satisfied.
 * Only words whose stream reached its last gate come back (cudev_gate_free):
 * a stream that had not would still write "reached", behind the new one. */
typedef struct gate_words {
  uint32_t *host, *dev;
  uint32_t base;
} gate_words;
static pthread_mutex_t words_mu = PTHREAD_MUTEX_INITIALIZER;
static gate_words *words_pool;
static int nwords, capwords;

static int words_take(gate_words *w) {
  pthread_mutex_lock(&words_mu);
  int got = nwords > 0;
  if (got)
    *w = words_pool[--nwords];
  pthread_mutex_unlock(&words_mu);
  return got;
}

/* 0, or -1 when the pool cannot grow (the words then stay unused). */
static int words_give(gate_words w) {
  pthread_mutex_lock(&words_mu);
  if (nwords == capwords) {
    int cap = capwords ? 2 * capwords : 16;
    gate_words *p = realloc(words_pool, (size_t)cap * sizeof *p);
    if (p == NULL) {
      pthread_mutex_unlock(&words_mu);
      return -1;
    }
    words_pool = p;
    capwords = cap;
  }
  words_pool[nwords++] = w;
  pthread_mutex_unlock(&words_mu);
  return 0;
}

void cudev_gate_force_kernel(int on) {
  __atomic_store_n(&gate_kernel_forced, on, __ATOMIC_RELAXED);
}

int cudev_gate_uses_memops(const struct cudev_gate *g) {
  return g ? g->memops : 0;
}

static int dev_preloaded[DEV_MAX];

braid_result cudev_preload(void) {
  int dev;
  DEV_CALL("cudaGetDevice", cudaGetDevice(&dev));
  if (dev >= 0 && dev < DEV_MAX &&
      __atomic_load_n(&dev_preloaded[dev], __ATOMIC_ACQUIRE))
    return BRAID_SUCCESS;
  DEV_CALL("cudaFuncGetAttributes (loading the kernels)",
           (cudaError_t)cuk_preload());
  DEV_CALL("cudaFuncGetAttributes (loading the scaling kernels)",
           (cudaError_t)cuk_scale_preload());
  if (dev >= 0 && dev < DEV_MAX)
    __atomic_store_n(&dev_preloaded[dev], 1, __ATOMIC_RELEASE);
  return BRAID_SUCCESS;
}

braid_result cudev_gate_new(void *user_stream, cudev_gate **out) {
  braid_result pr = cudev_preload();
  if (pr != BRAID_SUCCESS)
    return pr;
  cudev_gate *g = calloc(1, sizeof *g);
  if (g == NULL) {
    snprintf(dev_msg, sizeof dev_msg, "cudev_gate_new: out of memory");
    return BRAID_ERR_NOMEM;
  }
  gate_words w = {NULL, NULL, 0};
  if (!words_take(&w)) {
    void *host = NULL, *dev = NULL;
    cudaError_t e =
        cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      free(g);
      return dev_fail("cudaHostAlloc", e);
    }
    memset(host, 0, 64);
    e = cudaHostGetDevicePointer(&dev, host, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(host);
      free(g);
      return dev_fail("cudaHostGetDevicePointer", e);
    }
    w = (gate_words){host, dev, 0};
  }
  pthread_once(&memops_once, memops_init);
  g->stream = user_stream;
  g->host = w.host;
  g->dev = w.dev;
  g->base = w.base;
  g->memops = memops_write && memops_wait &&
              !__atomic_load_n(&gate_kernel_forced, __ATOMIC_RELAXED);
  *out = g;
  return BRAID_SUCCESS;
}

int cudev_gate_free(cudev_gate *g) {
  if (g == NULL)
    return 1;
  /* Never leave the stream waiting on memory that is about to go. */
  cudev_gate_release(g, g->last);
  /* A stream that has not reached the last gate will still write
   * "reached": its words cannot serve another gate yet. */
  if (!cudev_gate_reached(g, g->last))
    return 0;
  (void)words_give((gate_words){g->host, g->dev, g->base + g->last});
  free(g);
  return 1;
}

static braid_result drv_fail(const char *call, CUresult r) {
  const char *s = NULL;
  if (drv_errstr == NULL || drv_errstr(r, &s) != CUDA_SUCCESS || s == NULL)
    s = "unknown driver error";
  snprintf(dev_msg, sizeof dev_msg, "%s: %s (CUresult %d)", call, s, (int)r);
  return BRAID_ERR_SYSTEM;
}

braid_result cudev_gate_enqueue(cudev_gate *g, uint32_t seq) {
  CUstream s = (CUstream)g->stream;
  uint32_t v = g->base + seq;
  if (g->memops) {
    CUresult r = memops_write(s, (CUdeviceptr)(uintptr_t)&g->dev[0], v, 0);
    if (r == CUDA_SUCCESS)
      r = memops_wait(s, (CUdeviceptr)(uintptr_t)&g->dev[1], v,
                      CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) {
      g->last = seq;
      return BRAID_SUCCESS;
    }
    if (r != CUDA_ERROR_NOT_SUPPORTED)
      return drv_fail("cuStreamWaitValue32/cuStreamWriteValue32", r);
    g->memops = 0; /* this device or platform lacks them: the kernel */
  }
  DEV_CALL("gate kernel launch",
           (cudaError_t)cuk_gate(&g->dev[0], &g->dev[1], v, g->stream));
  g->last = seq;
  return BRAID_SUCCESS;
}

int cudev_gate_reached(cudev_gate *g, uint32_t seq) {
  uint32_t v = __atomic_load_n(&g->host[0], __ATOMIC_ACQUIRE);
  return (int32_t)(v - (g->base + seq)) >= 0;
}

void cudev_gate_release(cudev_gate *g, uint32_t seq) {
  uint32_t v = g->base + seq;
  uint32_t cur = __atomic_load_n(&g->host[1], __ATOMIC_RELAXED);
  if ((int32_t)(v - cur) > 0)
    __atomic_store_n(&g->host[1], v, __ATOMIC_RELEASE);
}
