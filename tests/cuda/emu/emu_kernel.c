/*
 * The emulated GPU's collective kernel (cudev_kernel_coll, cuda_dev.h):
 * kernels.cu's k_coll run by the stream's worker thread, as a host function
 * on the stream, over the areas' host memory (memfd mappings shared between
 * the ranks' processes, see cuda_emu.c). What a block does of each chunk
 * (its chunk, slot and part, the flags it raises and waits for, its jobs and
 * how the ranks' elements fold) comes from device/kcoll_chunk.h, the source
 * k_coll compiles too; this file has the rest: the blocks one after the
 * other, each trailing the one before by two chunks (every rank goes
 * through them in the same order, so their waits pair up), flags as C11
 * atomics with release / acquire order where the kernel has its system-wide
 * fences, polling with naps, and the fold steps of src/reduce.h's CPU
 * kernels, whose results the GPU kernels match bit for bit. It checks
 * braid's side of the kernel path (setup, chunk numbers, slots, ordering,
 * errors, teardown) and the per-chunk logic, not the kernel's memory
 * ordering on a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_dev.h"
#include "device/kcoll_chunk.h"
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
  _Atomic uint64_t *f = flag(k, k->rank, kc_ready_at(b, q));
  _Atomic uint64_t *status = (_Atomic uint64_t *)k->status;
  uint64_t t0 = now_ns(), w;
  for (unsigned polls = 0;
       !kc_ready_reached(w = atomic_load_explicit(f, memory_order_acquire), s);
       polls++) {
    int why = atomic_load((_Atomic uint32_t *)k->abort) || atomic_load(status)
                  ? CUDEV_KA_ABORTED
              : now_ns() - t0 > k->timeout_ns ? CUDEV_KA_TIMEOUT
                                              : 0;
    if (why)
      return CUDEV_KA_STATUS(why, q, s);
    struct timespec nap = {0, polls < 100 ? 1000 : 50000};
    nanosleep(&nap, NULL);
  }
  return kc_ready_other(w, s, fp) ? CUDEV_KA_STATUS(CUDEV_KA_MISMATCH, q, s)
                                  : 0;
}

static void raise_all(const cudev_ka *k, size_t off, uint64_t v) {
  for (int q = 0; q < k->nranks; q++)
    if (q != k->rank)
      atomic_store_explicit(flag(k, q, off), v, memory_order_release);
}

static uint32_t load_bits(const char *p, size_t es) {
  uint16_t h;
  if (es == 1)
    return (uint8_t)*p;
  memcpy(&h, p, sizeof h);
  return h;
}

static void store_bits(char *p, size_t es, uint32_t x) {
  uint16_t h = (uint16_t)x;
  if (es == 1)
    *p = (char)(uint8_t)x;
  else
    memcpy(p, &h, sizeof h);
}

/* Job jb of the chunk at slot offset off (kcoll_chunk.h): a wide fold
 * element by element in float, else the CPU kernels' steps over the
 * range; acc: room for a slot. */
static void emit(const ka_call *a, size_t off, const kc_job *jb, char *acc) {
  const cudev_ka *k = &a->k;
  const cudev_kcall *c = &a->c;
  size_t lo = jb->a, hi = jb->e;
  if (lo >= hi)
    return;
  int q0, q1;
  kc_job_ranks(jb, k->nranks, &q0, &q1);
  size_t es = braid_dtype_size(c->dt), len = (hi - lo) * es;
  if (jb->wide) {
    int op = c->op == BRAID_PROD ? BRAID_PROD : BRAID_SUM;
    for (size_t i = lo; i < hi; i++) {
      float f = 0.0f;
      for (int q = q0; q < q1; q++) {
        float w = kc_widen((int)c->dt,
                           load_bits((char *)k->area[q] + off + i * es, es));
        f = q == q0 ? w : kc_wide_op((int)c->dt, op, f, w);
      }
      store_bits(acc + (i - lo) * es, es,
                 kc_wide_end((int)c->dt, jb->avg, k->nranks, f));
    }
  } else {
    memcpy(acc, (char *)k->area[q0] + off + lo * es, len); /* out may be in */
    if (q1 - q0 > 1) {
      red_fn f = red_get(c->dt, c->op);
      for (int q = q0 + 1; q < q1; q++)
        f(acc, acc, (char *)k->area[q] + off + lo * es, hi - lo);
    }
    if (jb->avg)
      red_div(acc, hi - lo, c->dt, k->nranks);
  }
  memcpy((char *)c->out + ((ptrdiff_t)lo + jb->d0) * (ptrdiff_t)es, acc, len);
}

/* Block b's part of chunk ch; 0 or a status. */
static uint64_t part(const ka_call *a, int b, const kc_chunk *ch, char *acc) {
  const cudev_ka *k = &a->k;
  const cudev_kcall *c = &a->c;
  int me = k->rank;
  size_t es = braid_dtype_size(c->dt), len = (ch->hi - ch->lo) * es;
  if (kc_copies(c, me))
    memcpy((char *)k->area[me] + ch->off + ch->lo * es,
           (const char *)c->in + (ch->c0 + ch->lo) * es, len);
  uint64_t fp = cudev_kc_fp(c);
  raise_all(k, kc_ready_at(b, me), kc_ready_value(ch->s, fp));
  for (int q = 0; q < k->nranks; q++) {
    uint64_t st = q != me ? wait_peer(k, b, q, ch->s, fp) : 0;
    if (st != 0)
      return st;
  }
  int ag_inplace = kc_ag_inplace(c, me, es);
  for (int q = 0; q < kc_jobs(c, me, k->nranks); q++) {
    kc_job jb;
    if (kc_job_at(c, me, k->nranks, ag_inplace, q, ch, &jb))
      emit(a, ch->off, &jb, acc);
  }
  raise_all(k, kc_done_at(b, me), kc_done_value(ch->s));
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
  size_t nch = kc_chunks(nin, ce), lag = 2;
  for (size_t t = 0; st == 0 && t < nch + lag * (size_t)(nb - 1); t++)
    for (int b = 0; st == 0 && b < nb; b++) {
      size_t behind = lag * (size_t)(a->seq % 2 ? nb - 1 - b : b);
      size_t j = t - behind;
      if (t < behind || j >= nch)
        continue;
      kc_chunk ch =
          kc_chunk_at(k, a->seq, nin, ce, (size_t)nb, 16 / es, j, (size_t)b);
      st = part(a, b, &ch, acc);
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
  braid_op op = cudev_kc_reduces(call->coll) ? call->op : BRAID_SUM;
  if (!cudev_has_kernel(call->dt, op)) { /* as device/dev.c's dev_check */
    snprintf(emu_msg, sizeof emu_msg,
             "cudev_kernel_coll: dtype %s with op %s is not supported on "
             "device buffers",
             braid_dtype_name(call->dt), braid_op_name(op));
    return BRAID_ERR_UNSUPPORTED;
  }
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
