/*
 * An emulated GPU, for running braid's device path on machines without one.
 *
 * One "device" made of host memory implements both the device layer
 * (device/cuda_dev.h) and the part of the CUDA runtime API that the
 * device-buffer tests call (declared by the toolkit's cuda_runtime_api.h).
 * Linked with libbraid's other objects into the test library braid_emu, in
 * place of dev.c, kernels.cu and the CUDA runtime, it lets the executor's
 * device path, the stream gates, the cuda IPC transport and the staging
 * adapter run end to end under the correctness matrix and the stream tests.
 * It is a test double: libbraid never contains it.
 *
 * What it models, after the CUDA runtime's documented behaviour:
 *  - device memory: memfd-backed mappings, told apart from host memory by
 *    address (cudev_is_device, like cudaPointerGetAttributes). Host code
 *    cannot touch it, as on a GPU: its addresses are mapped without access
 *    (a read or write there faults), and the emulated GPU works on a
 *    second mapping of the same memory (emu_view). A kernel (a reduction,
 *    the collective kernel) handed pageable host memory aborts, saying so:
 *    on a GPU it faults. An IPC handle
 *    names the owner's pid and fd; another process maps it through /proc.
 *    Opening a handle twice maps it once (reference counted); opening one's
 *    own handle is an error, as in CUDA. cudaFree of memory that another
 *    process still has open through a handle aborts, saying so: CUDA leaves
 *    it undefined, and on a GPU the other process faults.
 *  - streams: one worker thread each, running its operations in order and
 *    asynchronously to the caller: copies, memsets, reductions, host
 *    functions, event records and waits, gates. The NULL stream is one more
 *    stream (the legacy default stream's implicit synchronisation with
 *    blocking streams is not modelled; braid's and the tests' streams are
 *    non-blocking).
 *    Like a GPU's, the work starts late: one operation in four waits
 *    EMU_LAG_US first, so that a caller that reads a result before its
 *    event or stream says it is done sees the old data.
 *    A stream holds at most EMU_QUEUE_DEPTH operations not yet run, as a
 *    GPU's queue is bounded: a call that adds one more waits for room (a
 *    loop of 2200 calls hung so on an H200 while braid held a lock its
 *    progress thread needed). One that waits EMU_FREE_DEADLINE_S aborts,
 *    saying so. With CUDA_DEVICE_MAX_CONNECTIONS=1 the streams share one
 *    hardware queue (one_queue below): operations run in issue order across
 *    streams, and one that waits holds the rest.
 *  - events: generations, so that a query answers for the latest record.
 *  - cudaFree, cudaFreeHost and their cudev_ forms wait until every stream
 *    is idle, as CUDA's do. One that waits longer than EMU_FREE_DEADLINE_S
 *    would hang a real process (a stream held by a gate that only the
 *    caller can release): it aborts, saying so.
 *  - a copy from the device to pageable host memory returns only once it is
 *    done, as CUDA documents, and meanwhile holds a lock that cudaMalloc
 *    and cudaMallocHost take: so does the driver, as seen on an H200, where
 *    an allocation on braid's progress thread behind a gate waited for such
 *    a copy issued behind the gate. An allocation (or another such copy)
 *    that waits for the lock longer than EMU_FREE_DEADLINE_S aborts,
 *    saying so.
 * CUDA_EMU_BUSID (tests only) sets the devices: a comma-separated list of
 * PCI bus ids, one device each (default: one device, EMU_BUSID). Devices
 * differ only in their bus ids and in the device their memory reports;
 * every one sees every other's memory. CUDA_EMU_DIE_AT_MALLOC=N kills the
 * process at its N-th cudaMalloc.
 * What it does not model: kernels (reductions run src/reduce.c's CPU
 * kernels), several devices, peer access, timing.
 *
 * This file models devices, streams and events; cuda_emu_mem.c memory,
 * copies and IPC handles; cuda_emu_dev.c braid's device layer on top;
 * emu_kernel.c the collective kernel. cuda_emu.h is what they share.
 */
#include "tests/cuda/emu/cuda_emu.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/reduce.h"

#define EMU_BUSID "0000:e1:00.0"
#define EMU_LAG_US 200
#define EMU_QUEUE_DEPTH 1024

_Thread_local char emu_msg[256];
_Thread_local int emu_device;
static _Thread_local cudaError_t emu_last_err; /* cudaGetLastError's */

int emu_busid(int d, char *out, size_t len) {
  const char *ids = getenv("CUDA_EMU_BUSID");
  if (ids == NULL || ids[0] == 0)
    ids = EMU_BUSID;
  int i = 0;
  for (const char *p = ids;; i++) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (i == d) {
      if (n == 0 || n >= len)
        return -1;
      memcpy(out, p, n);
      out[n] = 0;
      return 0;
    }
    if (end == NULL)
      break;
    p = end + 1;
  }
  return d < 0 ? i + 1 : -1;
}

int emu_count(void) { return emu_busid(-1, NULL, 0); }

cudaError_t emu_err(cudaError_t e, const char *fmt, const char *what) {
  snprintf(emu_msg, sizeof emu_msg, fmt, what);
  emu_last_err = e;
  return e;
}

static double emu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps a little longer each round, up to 100 us. */
static void emu_backoff(unsigned *round) {
  if (*round < 64) {
    (*round)++;
    sched_yield();
    return;
  }
  struct timespec ts = {0, *round < 256 ? 10000 : 100000};
  (*round)++;
  nanosleep(&ts, NULL);
}

/* ---- streams ------------------------------------------------------------- */

/* An event: its last record's generation and the last one that ran; the
 * operations that name it hold references, so it may be destroyed while
 * they are queued, as in CUDA. */
struct CUevent_st {
  atomic_uint_fast64_t recorded, done;
  atomic_int refs;
};

static void event_put(struct CUevent_st *ev) {
  if (atomic_fetch_sub(&ev->refs, 1) == 1)
    free(ev);
}

/* CUDA_DEVICE_MAX_CONNECTIONS=1: the streams share one hardware queue,
 * which runs their operations in issue order, so an operation that waits
 * (a gate, an event wait, a host function) holds every stream's work
 * issued after it, as on a GPU. Each operation takes a ticket when issued
 * and runs once every earlier ticket has run. */
static pthread_mutex_t q1_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q1_turn = PTHREAD_COND_INITIALIZER;
static uint64_t q1_issued, q1_ran;

static int one_queue(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    v = e != NULL && atoi(e) == 1;
  }
  return v;
}

struct CUstream_st {
  pthread_mutex_t mu;
  pthread_cond_t work, idle, room;
  emu_op *head, *tail;
  int queued; /* operations not yet started */
  int running;
  unsigned seed; /* lags */
  int capturing; /* between cudaStreamBeginCapture and EndCapture */
  struct CUstream_st *next_all, *prev_all;
};

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *all_streams;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static struct CUstream_st *default_stream;

static void op_run(emu_op *o) {
  unsigned round = 0;
  switch (o->kind) {
  case OP_COPY:
    memmove(emu_view(o->dst), emu_view(o->a), o->n);
    break;
  case OP_SET:
    memset(emu_view(o->dst), o->value, o->n);
    break;
  case OP_REDUCE: {
    void *dst = emu_view(o->dst);
    red_get(o->dt, o->op)(dst, emu_view(o->a), emu_view(o->b), o->n);
    if (o->fwd)
      memcpy(emu_view(o->fwd), dst, o->n * braid_dtype_size(o->dt));
    break;
  }
  case OP_DIV:
    red_div(emu_view(o->dst), o->n, o->dt, o->value);
    break;
  case OP_SCALE:
    red_premul(emu_view(o->dst), emu_view(o->a), o->n, o->dt,
               o->b != NULL ? emu_view(o->b) : o->imm);
    break;
  case OP_HOSTFN:
    o->fn(o->arg);
    break;
  case OP_EVREC: {
    uint_fast64_t d = atomic_load(&o->ev->done);
    while (d < o->gen &&
           !atomic_compare_exchange_weak(&o->ev->done, &d, o->gen))
      ;
    break;
  }
  case OP_EVWAIT:
    while (atomic_load(&o->ev->done) < o->gen)
      emu_backoff(&round);
    break;
  case OP_GATE:
    atomic_store(&o->words->reached, o->seq);
    while ((int32_t)(atomic_load(&o->words->released) - o->seq) < 0)
      emu_backoff(&round);
    break;
  case OP_QUIT:
    break;
  }
}

/* CUDA_EMU_LAG_US: the lag (default EMU_LAG_US; 0: none, to see braid's
 * own overheads). */
static long emu_lag_us(void) {
  static long lag = -1;
  if (lag < 0) {
    const char *e = getenv("CUDA_EMU_LAG_US");
    lag = e && *e ? atol(e) : EMU_LAG_US;
    if (lag > 999999)
      lag = 999999;
  }
  return lag;
}

static void *stream_main(void *arg) {
  struct CUstream_st *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL)
      pthread_cond_wait(&s->work, &s->mu);
    emu_op *o = s->head;
    s->head = o->next;
    if (s->head == NULL)
      s->tail = NULL;
    s->queued--;
    pthread_cond_broadcast(&s->room);
    s->running = 1;
    pthread_mutex_unlock(&s->mu);
    if (rand_r(&s->seed) % 4 == 0 && emu_lag_us() > 0) {
      struct timespec lag = {0, emu_lag_us() * 1000L};
      nanosleep(&lag, NULL);
    }
    if (one_queue()) {
      pthread_mutex_lock(&q1_mu);
      while (q1_ran != o->ticket)
        pthread_cond_wait(&q1_turn, &q1_mu);
      pthread_mutex_unlock(&q1_mu);
    }
    op_run(o);
    if (one_queue()) {
      pthread_mutex_lock(&q1_mu);
      q1_ran++;
      pthread_cond_broadcast(&q1_turn);
      pthread_mutex_unlock(&q1_mu);
    }
    enum emu_kind kind = o->kind;
    if (kind == OP_EVREC || kind == OP_EVWAIT)
      event_put(o->ev);
    free(o);
    pthread_mutex_lock(&s->mu);
    s->running = 0;
    if (s->head == NULL)
      pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    if (kind == OP_QUIT)
      break;
  }
  pthread_mutex_lock(&all_mu);
  if (s->prev_all)
    s->prev_all->next_all = s->next_all;
  else
    all_streams = s->next_all;
  if (s->next_all)
    s->next_all->prev_all = s->prev_all;
  pthread_mutex_unlock(&all_mu);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->idle);
  pthread_cond_destroy(&s->room);
  free(s);
  return NULL;
}

static struct CUstream_st *stream_new(void) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  pthread_cond_init(&s->room, NULL);
  s->seed = (unsigned)getpid() * 2654435761u + (unsigned)(uintptr_t)s;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&all_mu);
  pthread_t th;
  if (pthread_create(&th, &at, stream_main, s) != 0) {
    pthread_mutex_unlock(&all_mu);
    pthread_attr_destroy(&at);
    free(s);
    return NULL;
  }
  pthread_attr_destroy(&at);
  s->next_all = all_streams;
  if (all_streams)
    all_streams->prev_all = s;
  all_streams = s;
  pthread_mutex_unlock(&all_mu);
  return s;
}

static void default_init(void) { default_stream = stream_new(); }

/* The stream a handle stands for (NULL, cudaStreamLegacy and
 * cudaStreamPerThread: the default stream). */
static struct CUstream_st *stream_of(cudaStream_t s) {
  if ((uintptr_t)s > 2)
    return s;
  pthread_once(&default_once, default_init);
  return default_stream;
}

cudaError_t emu_stream_push(cudaStream_t h, const emu_op *tmpl) {
  struct CUstream_st *s = stream_of(h);
  emu_op *o = malloc(sizeof *o);
  if (s == NULL || o == NULL) {
    free(o);
    return emu_err(cudaErrorMemoryAllocation, "%s: out of memory",
                   "emulated stream");
  }
  *o = *tmpl;
  o->next = NULL;
  if (o->kind == OP_EVREC || o->kind == OP_EVWAIT)
    atomic_fetch_add(&o->ev->refs, 1);
  pthread_mutex_lock(&s->mu);
  double end = emu_now() + EMU_FREE_DEADLINE_S;
  while (s->queued >= EMU_QUEUE_DEPTH && o->kind != OP_QUIT) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&s->room, &s->mu, &ts);
    if (s->queued >= EMU_QUEUE_DEPTH && emu_now() > end) {
      fprintf(stderr,
              "cuda_emu: a call waited %.0f s for room on a full stream "
              "(%d operations queued; held by a gate?): the real call would "
              "hang here\n",
              EMU_FREE_DEADLINE_S, s->queued);
      abort();
    }
  }
  s->queued++;
  if (one_queue()) {
    pthread_mutex_lock(&q1_mu);
    o->ticket = q1_issued++;
    pthread_mutex_unlock(&q1_mu);
  }
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

/* Waits until stream s has run everything; deadline_s < 0: no deadline.
 * 0 done, -1 past the deadline. */
static int stream_wait(struct CUstream_st *s, double deadline_s) {
  double end = emu_now() + deadline_s;
  pthread_mutex_lock(&s->mu);
  while (s->head != NULL || s->running) {
    if (deadline_s < 0) {
      pthread_cond_wait(&s->idle, &s->mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->idle, &s->mu, &ts);
    if (emu_now() > end) {
      pthread_mutex_unlock(&s->mu);
      return -1;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* all_mu is held throughout, so no stream frees itself meanwhile (a
 * finishing worker waits for it before unlinking). */
void emu_device_idle(const char *call) {
  pthread_mutex_lock(&all_mu);
  for (struct CUstream_st *s = all_streams; s; s = s->next_all)
    if (stream_wait(s, EMU_FREE_DEADLINE_S) != 0) {
      fprintf(stderr,
              "cuda_emu: %s waited %.0f s for a stream that does not "
              "finish (held by a gate?): the real call would hang here\n",
              call, EMU_FREE_DEADLINE_S);
      abort();
    }
  pthread_mutex_unlock(&all_mu);
}

/* ---- the CUDA runtime API the tests use ---------------------------------- */

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error (emulated device)";
  case cudaErrorInvalidValue:
    return "invalid argument (emulated device)";
  case cudaErrorMemoryAllocation:
    return "out of memory (emulated device)";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal (emulated device)";
  case cudaErrorNotReady:
    return "device not ready (emulated device)";
  case cudaErrorMapBufferObjectFailed:
    return "mapping of buffer object failed (emulated device)";
  default:
    return "unknown error (emulated device)";
  }
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = emu_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emu_count())
    return emu_err(cudaErrorInvalidDevice, "%s: no such device",
                   "cudaSetDevice");
  emu_device = device;
  return cudaSuccess;
}

void emu_set_last_error(cudaError_t e) { emu_last_err = e; }

cudaError_t cudaGetLastError(void) {
  cudaError_t e = emu_last_err;
  emu_last_err = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return emu_last_err; }

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (pciBusId == NULL || len <= 0 ||
      emu_busid(device, pciBusId, (size_t)len) != 0)
    return emu_err(cudaErrorInvalidValue, "%s: bad device or length",
                   "cudaDeviceGetPCIBusId");
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (prop == NULL || device < 0 || device >= emu_count())
    return emu_err(cudaErrorInvalidDevice, "%s: no such device",
                   "cudaGetDeviceProperties");
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "braid emulated GPU");
  prop->major = 9;
  prop->multiProcessorCount = 2;
  prop->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = emu_device;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  struct CUstream_st *s = stream_of(stream);
  if (s == NULL)
    return cudaErrorMemoryAllocation;
  stream_wait(s, -1);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  (void)flags;
  *stream = stream_new();
  return *stream ? cudaSuccess
                 : emu_err(cudaErrorMemoryAllocation, "%s: out of memory",
                           "cudaStreamCreate");
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

/* Stream capture: only whether a stream is capturing (no graph is made;
 * the tests check that braid refuses calls on such a stream). */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                   enum cudaStreamCaptureMode mode) {
  (void)mode;
  if ((uintptr_t)stream <= 2)
    return emu_err(cudaErrorStreamCaptureUnsupported,
                   "%s: the legacy default stream", "cudaStreamBeginCapture");
  stream->capturing = 1;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  if ((uintptr_t)stream <= 2 || !stream->capturing)
    return emu_err(cudaErrorIllegalState, "%s: the stream is not capturing",
                   "cudaStreamEndCapture");
  stream->capturing = 0;
  *graph = NULL;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  (void)graph;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus *status) {
  *status = (uintptr_t)stream > 2 && stream->capturing
                ? cudaStreamCaptureStatusActive
                : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

/* As CUDA's: returns at once; the stream goes once its work has run. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if ((uintptr_t)stream <= 2)
    return emu_err(cudaErrorInvalidValue, "%s: the default stream",
                   "cudaStreamDestroy");
  emu_op o = {.kind = OP_QUIT};
  return emu_stream_push(stream, &o);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
  (void)flags;
  *event = calloc(1, sizeof **event);
  if (*event == NULL)
    return emu_err(cudaErrorMemoryAllocation, "%s: out of memory",
                   "cudaEventCreate");
  atomic_init(&(*event)->refs, 1);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  emu_op o = {.kind = OP_EVREC, .ev = event};
  o.gen = atomic_fetch_add(&event->recorded, 1) + 1;
  return emu_stream_push(stream, &o);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return atomic_load(&event->done) >= atomic_load(&event->recorded)
             ? cudaSuccess
             : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  unsigned round = 0;
  while (cudaEventQuery(event) != cudaSuccess)
    emu_backoff(&round);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event)
    event_put(event);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) {
  (void)flags;
  emu_op o = {.kind = OP_EVWAIT, .ev = event};
  o.gen = atomic_load(&event->recorded);
  return emu_stream_push(stream, &o);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                               void *userData) {
  emu_op o = {.kind = OP_HOSTFN, .fn = fn, .arg = userData};
  return emu_stream_push(stream, &o);
}

cudaError_t cudaDeviceSynchronize(void) {
  emu_device_idle("cudaDeviceSynchronize");
  return cudaSuccess;
}
