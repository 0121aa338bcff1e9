/*
 * The emulated GPU's memory (see cuda_emu.c): device memory as memfd
 * mappings, pinned host memory, copies and memsets, IPC handles.
 */
#include "tests/cuda/emu/cuda_emu.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct emu_region {
  char *base; /* the device address: mapped, but no access from the host */
  char *view; /* the same memory where the emulated GPU touches it */
  int device; /* the current device of the allocating thread */
  size_t size;
  int fd;
  int owner;     /* 1: allocated here; 0: an opened IPC handle */
  pid_t src_pid; /* opened handles: the owner's pid and fd */
  int src_fd;
  int refs;
} emu_region;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_region *regs;
static size_t nregs, capregs;

static emu_region *reg_find(const void *p) { /* reg_mu held */
  const char *c = p;
  for (size_t i = 0; i < nregs; i++)
    if (c >= regs[i].base && c < regs[i].base + regs[i].size)
      return &regs[i];
  return NULL;
}

static int reg_add(emu_region r) { /* reg_mu held */
  if (nregs == capregs) {
    size_t cap = capregs ? capregs * 2 : 64;
    emu_region *n = realloc(regs, cap * sizeof *n);
    if (n == NULL)
      return -1;
    regs = n;
    capregs = cap;
  }
  regs[nregs++] = r;
  return 0;
}

static void reg_drop(emu_region *r) { /* reg_mu held */
  munmap(r->base, r->size);
  munmap(r->view, r->size);
  close(r->fd);
  *r = regs[--nregs];
}

typedef struct emu_ipc {
  uint32_t magic;
  int32_t pid, fd;
  uint64_t size;
} emu_ipc;
#define EMU_IPC_MAGIC 0x62656d75u

_Static_assert(sizeof(emu_ipc) <= sizeof(cudaIpcMemHandle_t), "IPC handle");
_Static_assert(sizeof(cudaIpcMemHandle_t) == CUDEV_IPC_BYTES, "IPC size");

void *emu_view(const void *p) {
  if (p == NULL)
    return NULL;
  pthread_mutex_lock(&reg_mu);
  emu_region *r = reg_find(p);
  void *v = r != NULL ? r->view + ((const char *)p - r->base) : (void *)p;
  pthread_mutex_unlock(&reg_mu);
  return v;
}

/* fd's memory mapped twice: *base with no access (device addresses, which
 * host code must not touch: on a GPU they fault), *view to read and write;
 * 0, or -1 with neither mapped. */
static int map_twice(int fd, size_t size, char **base, char **view) {
  void *b = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
  void *v = b == MAP_FAILED
                ? MAP_FAILED
                : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (v == MAP_FAILED) {
    if (b != MAP_FAILED)
      munmap(b, size);
    return -1;
  }
  *base = b;
  *view = v;
  return 0;
}

int emu_region_device(const void *p) {
  if (p == NULL)
    return -1;
  pthread_mutex_lock(&reg_mu);
  const emu_region *r = reg_find(p);
  int dev = r ? r->device : -1;
  pthread_mutex_unlock(&reg_mu);
  return dev;
}

/* As dev.c's cudev_room: regions that lie end to end count as one. */
size_t emu_region_room(const void *p, size_t want) {
  uintptr_t at = (uintptr_t)p, end = at + want;
  if (end < at)
    return SIZE_MAX;
  pthread_mutex_lock(&reg_mu);
  for (int first = 1; at < end; first = 0) {
    const emu_region *r = reg_find((const void *)at);
    if (r == NULL) {
      if (first) {
        pthread_mutex_unlock(&reg_mu);
        return SIZE_MAX;
      }
      break;
    }
    at = (uintptr_t)r->base + r->size;
  }
  pthread_mutex_unlock(&reg_mu);
  return at >= end ? want : (size_t)(at - (uintptr_t)p);
}

/* CUDA_EMU_DIE_AT_MALLOC=N: the process kills itself at its N-th
 * cudaMalloc, so that a test can lose a rank at a chosen point of a
 * collective setup. */
static void emu_die_at_malloc(void) {
  static atomic_int calls;
  int k = atomic_fetch_add(&calls, 1) + 1;
  const char *e = getenv("CUDA_EMU_DIE_AT_MALLOC");
  if (e != NULL && atoi(e) == k)
    kill(getpid(), SIGKILL);
}

/* ---- pageable copies and allocations ------------------------------------ */

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;

static void alloc_lock(const char *call) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)EMU_FREE_DEADLINE_S;
  if (pthread_mutex_timedlock(&alloc_mu, &ts) != 0) {
    fprintf(stderr,
            "cuda_emu: %s waited %.0f s for the allocation lock, held by a "
            "copy to pageable memory that waits for its stream (held by a "
            "gate?): the real call would hang here\n",
            call, EMU_FREE_DEADLINE_S);
    abort();
  }
}

/* Pinned host memory (cudaMallocHost), to tell pageable memory apart. */
static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char *base;
  size_t size;
} * pins;
static size_t npins, cappins;

static int pin_add(void *p, size_t size) {
  pthread_mutex_lock(&pin_mu);
  int bad = 0;
  if (npins == cappins) {
    size_t cap = cappins ? cappins * 2 : 64;
    void *n = realloc(pins, cap * sizeof *pins);
    if (n == NULL)
      bad = 1;
    else {
      pins = n;
      cappins = cap;
    }
  }
  if (!bad) {
    pins[npins].base = p;
    pins[npins++].size = size;
  }
  pthread_mutex_unlock(&pin_mu);
  return bad ? -1 : 0;
}

static void pin_drop(void *p) {
  pthread_mutex_lock(&pin_mu);
  for (size_t i = 0; i < npins; i++)
    if (pins[i].base == p) {
      pins[i] = pins[--npins];
      break;
    }
  pthread_mutex_unlock(&pin_mu);
}

static int is_pinned(const void *p) {
  const char *c = p;
  pthread_mutex_lock(&pin_mu);
  int in = 0;
  for (size_t i = 0; i < npins && !in; i++)
    in = c >= pins[i].base && c < pins[i].base + pins[i].size;
  pthread_mutex_unlock(&pin_mu);
  return in;
}

static cudaError_t malloc_locked(void **p, size_t size);

void emu_kernel_reaches(const char *kernel, const char *what, const void *p) {
  if (p == NULL || emu_region_device(p) >= 0 || is_pinned(p))
    return;
  fprintf(stderr,
          "cuda_emu: %s: %s %p is neither device memory nor pinned host "
          "memory: a kernel on a GPU faults there\n",
          kernel, what, p);
  abort();
}

cudaError_t cudaMalloc(void **p, size_t size) {
  alloc_lock("cudaMalloc");
  cudaError_t e = malloc_locked(p, size);
  pthread_mutex_unlock(&alloc_mu);
  return e;
}

static cudaError_t malloc_locked(void **p, size_t size) {
  *p = NULL;
  emu_die_at_malloc();
  if (size == 0)
    return cudaSuccess;
  int fd = memfd_create("braid-cuda-emu", MFD_CLOEXEC);
  if (fd < 0)
    return emu_err(cudaErrorMemoryAllocation, "%s: memfd_create failed",
                   "cudaMalloc");
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return emu_err(cudaErrorMemoryAllocation, "%s: ftruncate failed",
                   "cudaMalloc");
  }
  char *m = NULL, *v = NULL;
  if (map_twice(fd, size, &m, &v) != 0) {
    close(fd);
    return emu_err(cudaErrorMemoryAllocation, "%s: mmap failed", "cudaMalloc");
  }
  memset(v, 0xcd, size); /* cudaMalloc's memory is not zeroed */
  pthread_mutex_lock(&reg_mu);
  int bad = reg_add((emu_region){m, v, emu_device, size, fd, 1, 0, -1, 1});
  pthread_mutex_unlock(&reg_mu);
  if (bad) {
    munmap(m, size);
    munmap(v, size);
    close(fd);
    return emu_err(cudaErrorMemoryAllocation, "%s: out of memory",
                   "cudaMalloc");
  }
  *p = m;
  return cudaSuccess;
}

/* Whether another process has this memory open through an IPC handle:
 * each one that opens it holds a shared lock on its first byte (OFD locks,
 * released when that process closes the handle or exits). */
static int mapped_elsewhere(int fd) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1};
  return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

cudaError_t cudaFree(void *p) {
  if (p == NULL)
    return cudaSuccess;
  emu_device_idle("cudaFree");
  pthread_mutex_lock(&reg_mu);
  emu_region *r = reg_find(p);
  cudaError_t e = cudaSuccess;
  if (r == NULL || r->base != p || !r->owner)
    e = emu_err(cudaErrorInvalidValue, "%s: not the base of a cudaMalloc",
                "cudaFree");
  else if (mapped_elsewhere(r->fd)) {
    fprintf(stderr,
            "cuda_emu: cudaFree(%p): another process still maps this memory "
            "through an IPC handle: CUDA leaves that undefined (on a GPU the "
            "other process faults when it next touches it)\n",
            p);
    abort();
  } else
    reg_drop(r);
  pthread_mutex_unlock(&reg_mu);
  return e;
}

cudaError_t cudaMallocHost(void **p, size_t size) {
  alloc_lock("cudaMallocHost");
  *p = malloc(size ? size : 1);
  if (*p != NULL && pin_add(*p, size ? size : 1) != 0) {
    free(*p);
    *p = NULL;
  }
  pthread_mutex_unlock(&alloc_mu);
  return *p ? cudaSuccess
            : emu_err(cudaErrorMemoryAllocation, "%s: out of memory",
                      "cudaMallocHost");
}

cudaError_t cudaFreeHost(void *p) {
  if (p) {
    emu_device_idle("cudaFreeHost");
    pin_drop(p);
  }
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  (void)kind;
  if (count == 0)
    return cudaSuccess;
  if (dst == NULL || src == NULL)
    return emu_err(cudaErrorInvalidValue, "%s: NULL pointer",
                   "cudaMemcpyAsync");
  emu_op o = {.kind = OP_COPY, .dst = dst, .a = src, .n = count};
  if (emu_region_device(src) < 0 || emu_region_device(dst) >= 0 ||
      is_pinned(dst))
    return emu_stream_push(stream, &o);
  /* device to pageable memory: done on return, the lock held meanwhile */
  alloc_lock("cudaMemcpyAsync to pageable memory");
  cudaError_t e = emu_stream_push(stream, &o);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream);
  pthread_mutex_unlock(&alloc_mu);
  return e;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       enum cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, NULL);
  return e != cudaSuccess ? e : cudaStreamSynchronize(NULL);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t count,
                            cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  emu_op o = {.kind = OP_SET, .dst = dst, .value = value, .n = count};
  return emu_stream_push(stream, &o);
}

cudaError_t cudaMemset(void *dst, int value, size_t count) {
  cudaError_t e = cudaMemsetAsync(dst, value, count, NULL);
  return e != cudaSuccess ? e : cudaStreamSynchronize(NULL);
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  pthread_mutex_lock(&reg_mu);
  emu_region *r = reg_find(devPtr);
  emu_ipc h = {0};
  if (r && r->owner && r->base == devPtr)
    h = (emu_ipc){EMU_IPC_MAGIC, (int32_t)getpid(), r->fd, r->size};
  pthread_mutex_unlock(&reg_mu);
  if (h.magic == 0)
    return emu_err(cudaErrorInvalidValue,
                   "%s: not the base of a cudaMalloc of this process",
                   "cudaIpcGetMemHandle");
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                 unsigned int flags) {
  (void)flags;
  emu_ipc h;
  memcpy(&h, &handle, sizeof h);
  *devPtr = NULL;
  if (h.magic != EMU_IPC_MAGIC)
    return emu_err(cudaErrorInvalidValue, "%s: not an IPC handle",
                   "cudaIpcOpenMemHandle");
  if (h.pid == (int32_t)getpid())
    return emu_err(cudaErrorInvalidValue,
                   "%s: a handle of this very process (CUDA refuses it)",
                   "cudaIpcOpenMemHandle");
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < nregs; i++)
    if (!regs[i].owner && regs[i].src_pid == h.pid && regs[i].src_fd == h.fd) {
      regs[i].refs++;
      *devPtr = regs[i].base;
      pthread_mutex_unlock(&reg_mu);
      return cudaSuccess;
    }
  pthread_mutex_unlock(&reg_mu);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return emu_err(cudaErrorMapBufferObjectFailed, "%s: the owner is gone",
                   "cudaIpcOpenMemHandle");
  struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_len = 1};
  if (fcntl(fd, F_OFD_SETLK, &l) != 0) {
    close(fd);
    return emu_err(cudaErrorMapBufferObjectFailed, "%s: fcntl failed",
                   "cudaIpcOpenMemHandle");
  }
  char *m = NULL, *v = NULL;
  if (map_twice(fd, (size_t)h.size, &m, &v) != 0) {
    close(fd);
    return emu_err(cudaErrorMapBufferObjectFailed, "%s: mmap failed",
                   "cudaIpcOpenMemHandle");
  }
  pthread_mutex_lock(&reg_mu);
  int bad = reg_add(
      (emu_region){m, v, emu_device, (size_t)h.size, fd, 0, h.pid, h.fd, 1});
  pthread_mutex_unlock(&reg_mu);
  if (bad) {
    munmap(m, (size_t)h.size);
    munmap(v, (size_t)h.size);
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  *devPtr = m;
  return cudaSuccess;
}

/* Waits for the whole device first, as cudaFree does: some drivers do so
 * (an H100's did, docs/CUDA.md), and braid must not close while another
 * call holds a stream. */
cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  emu_device_idle("cudaIpcCloseMemHandle");
  pthread_mutex_lock(&reg_mu);
  emu_region *r = reg_find(devPtr);
  cudaError_t e = cudaSuccess;
  if (r == NULL || r->owner || r->base != devPtr)
    e = emu_err(cudaErrorInvalidValue, "%s: not an opened handle",
                "cudaIpcCloseMemHandle");
  else if (--r->refs == 0)
    reg_drop(r);
  pthread_mutex_unlock(&reg_mu);
  return e;
}
