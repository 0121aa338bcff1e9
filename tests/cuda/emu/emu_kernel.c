/*
 * The emulated GPU's collective kernel (cudev_kernel_coll, cuda_dev.h):
 * the protocol of kernels.cu's k_coll run by the stream's worker
 * thread, as a host function on the stream, over the areas' host memory
 * (memfd mappings shared between the ranks' processes, see cuda_emu.c):
 * the same chunks, the same parts per block and the same flags, the blocks
 * one after the other, each trailing the one before by two chunks (every
 * rank goes through them in the same order, so their waits pair up). Flags are
 * C11 atomics with release / acquire order where the kernel has its system-wide
 * fences; the fold uses the CPU kernels (src/reduce.h), whose results the GPU
 * kernels match bit for bit. It checks braid's side of the kernel path (setup,
 * chunk numbers, slots, ordering, errors, teardown), not the kernel's memory
 * ordering on a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_dev.h"
#include "src/reduce.h"
#include "tests/cuda/emu/cuda_emu.h"

typedef struct ka_call {
  cudev_ka k;
  uint64_t seq;
  cudev_kcall c;
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

/* out[i + d0] for the elements i in [lo, hi) of the chunk at slot offset
 * off: the ranks' elements folded in rank order (src < 0) or rank src's. */
static void emit(const ka_call *a, size_t off, int src, char *acc, ptrdiff_t d0,
                 size_t lo, size_t hi) {
  const cudev_ka *k = &a->k;
  if (lo >= hi)
    return;
  size_t es = braid_dtype_size(a->c.dt), len = (hi - lo) * es;
  const char *first = (char *)k->area[src < 0 ? 0 : src] + off + lo * es;
  memcpy(acc, first, len); /* out may be in */
  if (src < 0) {
    red_fn f = red_get(a->c.dt, a->c.op);
    for (int q = 1; q < k->nranks; q++)
      f(acc, acc, (char *)k->area[q] + off + lo * es, hi - lo);
    if (a->c.op == BRAID_AVG)
      red_div(acc, hi - lo, a->c.dt, k->nranks);
  }
  memcpy((char *)a->c.out + ((ptrdiff_t)lo + d0) * (ptrdiff_t)es, acc, len);
}

/* Block b's part [lo, hi) of chunk s (elements from c0); 0 or a status. */
static uint64_t part(const ka_call *a, int b, uint64_t s, size_t c0, size_t lo,
                     size_t hi, char *acc) {
  const cudev_ka *k = &a->k;
  const cudev_kcall *c = &a->c;
  int me = k->rank;
  size_t es = braid_dtype_size(c->dt), len = (hi - lo) * es;
  size_t off = CUDEV_KA_FLAGS + (size_t)(s % 2) * k->slot;
  if (c->coll != CUDEV_KC_BROADCAST || me == c->root)
    memcpy((char *)k->area[me] + off + lo * es,
           (const char *)c->in + (c0 + lo) * es, len);
  uint64_t fp = cudev_kc_fp(c);
  raise_all(k, CUDEV_KA_READY(b, me), CUDEV_KA_FLAG(s, fp));
  for (int q = 0; q < k->nranks; q++) {
    uint64_t st = q != me ? wait_peer(k, b, q, s, fp) : 0;
    if (st != 0)
      return st;
  }
  ptrdiff_t pc0 = (ptrdiff_t)c0;
  size_t r0 = (size_t)me * c->count, r1 = r0 + c->count;
  switch (c->coll) {
  case CUDEV_KC_ALLREDUCE:
    emit(a, off, -1, acc, pc0, lo, hi);
    break;
  case CUDEV_KC_REDUCE:
    if (me == c->root)
      emit(a, off, -1, acc, pc0, lo, hi);
    break;
  case CUDEV_KC_REDUCE_SCATTER:
    emit(a, off, -1, acc, pc0 - (ptrdiff_t)r0, r0 > c0 + lo ? r0 - c0 : lo,
         r1 < c0 + hi ? (r1 > c0 ? r1 - c0 : 0) : hi);
    break;
  case CUDEV_KC_BROADCAST:
    emit(a, off, c->root, acc, pc0, lo, hi);
    break;
  default: /* allgather */
    for (int q = 0; q < k->nranks; q++)
      emit(a, off, q, acc, (ptrdiff_t)((size_t)q * c->count) + pc0, lo, hi);
    break;
  }
  raise_all(k, CUDEV_KA_DONE(b, me), s);
  return 0;
}

static void run(void *arg) {
  ka_call *a = arg;
  /* device addresses, as the emulated GPU reaches them */
  for (int q = 0; q < a->k.nranks; q++)
    a->k.area[q] = emu_view(a->k.area[q]);
  a->c.in = emu_view(a->c.in);
  a->c.out = emu_view(a->c.out);
  const cudev_ka *k = &a->k;
  _Atomic uint64_t *status = (_Atomic uint64_t *)k->status;
  size_t es = braid_dtype_size(a->c.dt), ce = k->slot / es;
  size_t nin = cudev_kc_elems(&a->c, k->nranks);
  int nb = cudev_ka_grid(nin * es, k->slot, k->blocks);
  char *acc = malloc(k->slot);
  if (acc == NULL)
    abort();
  uint64_t st = atomic_load(status);
  /* Block b does chunk j in step j + 2b (odd first chunk numbers: j + 2(nb
   * - 1 - b)): each block trails its neighbour by two chunks, as blocks of
   * a GPU may (a block waits only for the same block of the peers), so a
   * block that rewrote a slot where another block still reads would show
   * here as wrong results. The same order on every rank. */
  size_t nch = CUDEV_KA_CHUNKS(nin, ce), lag = 2;
  for (size_t t = 0; st == 0 && t < nch + lag * (size_t)(nb - 1); t++)
    for (int b = 0; st == 0 && b < nb; b++) {
      size_t behind = lag * (size_t)(a->seq % 2 ? nb - 1 - b : b);
      size_t j = t - behind, lo, hi;
      if (t < behind || j >= nch)
        continue;
      cudev_ka_part(nin, ce, (size_t)nb, 16 / es, j, (size_t)b, &lo, &hi);
      st = part(a, b, a->seq + j, j * ce, lo, hi, acc);
    }
  if (st != 0) {
    uint64_t zero = 0;
    atomic_compare_exchange_strong(status, &zero, st);
  }
  free(acc);
  free(a);
}

/* The emulated GPU holds the blocks of an H100 running the kernel at 64
 * registers a thread: 132 SMs x 2 (CUDA_EMU_KERNEL_ROOM overrides). */
braid_result cudev_kernel_coll_room(int *blocks, int *sms) {
  const char *e = getenv("CUDA_EMU_KERNEL_ROOM");
  *blocks = e != NULL ? atoi(e) : 264;
  *sms = 132;
  return BRAID_SUCCESS;
}

braid_result cudev_kernel_coll(const cudev_ka *k, uint64_t seq,
                               const cudev_kcall *call, void *stream) {
  if (!cudev_kc_valid(k, call))
    return BRAID_ERR_INVALID_ARG;
  int root = k->rank == call->root;
  for (int q = 0; q < k->nranks; q++)
    emu_kernel_reaches("cudev_kernel_coll", "a kernel area", k->area[q]);
  emu_kernel_reaches("cudev_kernel_coll", "the status word", k->status);
  if (call->coll != CUDEV_KC_BROADCAST || root)
    emu_kernel_reaches("cudev_kernel_coll", "the input", call->in);
  if (call->coll != CUDEV_KC_REDUCE || root)
    emu_kernel_reaches("cudev_kernel_coll", "the output", call->out);
  ka_call *a = malloc(sizeof *a);
  if (a == NULL)
    return BRAID_ERR_NOMEM;
  *a = (ka_call){*k, seq, *call};
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
