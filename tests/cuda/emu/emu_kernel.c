/*
 * The emulated GPU's allreduce kernel (cudev_kernel_allreduce, cuda_dev.h):
 * the protocol of kernels.cu's k_allreduce run by the stream's worker
 * thread, as a host function on the stream, over the areas' host memory
 * (memfd mappings shared between the ranks' processes, see cuda_emu.c):
 * the same chunks, the same parts per block and the same flags, the blocks
 * one after the other (every rank goes through them in the same order, so
 * their waits pair up). Flags are C11 atomics with release / acquire order
 * where the kernel has its system-wide fences; the fold uses the CPU
 * kernels (src/reduce.h), whose results the GPU kernels match bit for bit.
 * It checks braid's side of the kernel path (setup, chunk numbers, slots,
 * ordering, errors, teardown), not the kernel's memory ordering on a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/reduce.h"
#include "transports/cuda/cuda_dev.h"

typedef struct ka_call {
  cudev_ka k;
  uint64_t seq;
  void *out;
  const void *in;
  size_t n;
  braid_dtype dt;
  braid_op op;
} ka_call;

static _Atomic uint64_t *flag(const cudev_ka *k, int owner, size_t off) {
  return (_Atomic uint64_t *)((char *)k->area[owner] + off);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 0, or the status the kernel stores */
static uint64_t wait_peer(const cudev_ka *k, int b, int q, uint64_t s,
                          uint64_t fp) {
  _Atomic uint64_t *f = flag(k, k->rank, CUDEV_KA_READY(b, q));
  _Atomic uint64_t *status = (_Atomic uint64_t *)k->status;
  uint64_t t0 = now_ns(), w;
  for (unsigned polls = 0;
       (w = atomic_load_explicit(f, memory_order_acquire)) >> 16 < s; polls++) {
    int why = atomic_load((_Atomic uint32_t *)k->abort) || atomic_load(status)
                  ? CUDEV_KA_ABORTED
              : now_ns() - t0 > k->timeout_ns ? CUDEV_KA_TIMEOUT
                                              : 0;
    if (why)
      return CUDEV_KA_STATUS(why, q, s);
    struct timespec nap = {0, polls < 100 ? 1000 : 50000};
    nanosleep(&nap, NULL);
  }
  return w >> 16 == s && (w & 0xffff) != fp
             ? CUDEV_KA_STATUS(CUDEV_KA_MISMATCH, q, s)
             : 0;
}

static void raise_all(const cudev_ka *k, size_t off, uint64_t s) {
  for (int q = 0; q < k->nranks; q++)
    if (q != k->rank)
      atomic_store_explicit(flag(k, q, off), s, memory_order_release);
}

/* Block b's part [lo, hi) of chunk s (elements from c0); 0 or a status. */
static uint64_t part(const ka_call *a, int b, uint64_t s, size_t c0, size_t lo,
                     size_t hi, char *acc) {
  const cudev_ka *k = &a->k;
  size_t es = braid_dtype_size(a->dt), len = (hi - lo) * es;
  size_t off = CUDEV_KA_FLAGS + (size_t)(s % 2) * k->slot + lo * es;
  memcpy((char *)k->area[k->rank] + off, (const char *)a->in + (c0 + lo) * es,
         len);
  uint64_t fp = CUDEV_KA_FP(a->n, a->dt, a->op);
  raise_all(k, CUDEV_KA_READY(b, k->rank), CUDEV_KA_FLAG(s, fp));
  for (int q = 0; q < k->nranks; q++) {
    uint64_t st = q != k->rank ? wait_peer(k, b, q, s, fp) : 0;
    if (st != 0)
      return st;
  }
  /* fold in rank order into acc: out may be in */
  memcpy(acc, (char *)k->area[0] + off, len);
  red_fn f = red_get(a->dt, a->op);
  for (int q = 1; q < k->nranks; q++)
    f(acc, acc, (char *)k->area[q] + off, hi - lo);
  if (a->op == BRAID_AVG)
    red_div(acc, hi - lo, a->dt, k->nranks);
  memcpy((char *)a->out + (c0 + lo) * es, acc, len);
  raise_all(k, CUDEV_KA_DONE(b, k->rank), s);
  return 0;
}

static void run(void *arg) {
  ka_call *a = arg;
  const cudev_ka *k = &a->k;
  _Atomic uint64_t *status = (_Atomic uint64_t *)k->status;
  size_t es = braid_dtype_size(a->dt), ce = k->slot / es;
  int nb = cudev_ka_grid(a->n * es, k->slot);
  char *acc = malloc(k->slot);
  if (acc == NULL)
    abort();
  uint64_t st = atomic_load(status);
  for (size_t j = 0; st == 0 && j * ce < a->n; j++) {
    size_t c0 = j * ce, cn = a->n - c0 < ce ? a->n - c0 : ce;
    size_t pe = CUDEV_KA_PART(cn, (size_t)nb, 16 / es);
    for (int b = 0; st == 0 && b < nb; b++) {
      size_t lo = (size_t)b * pe < cn ? (size_t)b * pe : cn;
      size_t hi = lo + pe < cn ? lo + pe : cn;
      st = part(a, b, a->seq + j, c0, lo, hi, acc);
    }
  }
  if (st != 0) {
    uint64_t zero = 0;
    atomic_compare_exchange_strong(status, &zero, st);
  }
  free(acc);
  free(a);
}

braid_result cudev_kernel_allreduce(const cudev_ka *k, uint64_t seq, void *out,
                                    const void *in, size_t n, braid_dtype dt,
                                    braid_op op, void *stream) {
  if ((unsigned)dt >= BRAID_NUM_DTYPES || (unsigned)op >= BRAID_NUM_OPS ||
      k->nranks < 1 || k->nranks > CUDEV_KA_RANKS || k->slot == 0 ||
      k->slot % 256 != 0)
    return BRAID_ERR_INVALID_ARG;
  ka_call *a = malloc(sizeof *a);
  if (a == NULL)
    return BRAID_ERR_NOMEM;
  *a = (ka_call){*k, seq, out, in, n, dt, op};
  if (cudaLaunchHostFunc(stream, run, a) != cudaSuccess) {
    free(a);
    return BRAID_ERR_INTERNAL;
  }
  return BRAID_SUCCESS;
}

braid_result cudev_host_dptr(void *host, void **dev) {
  *dev = host; /* one address space */
  return BRAID_SUCCESS;
}

braid_result cudev_stream_wait(void *stream, void *event) {
  return cudaStreamWaitEvent(stream, event, 0) == cudaSuccess
             ? BRAID_SUCCESS
             : BRAID_ERR_INTERNAL;
}
