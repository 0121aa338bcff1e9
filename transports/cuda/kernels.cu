/*
 * CUDA kernels of the device layer: reduction (and reduce-and-forward) for
 * every dtype x op, the division of BRAID_AVG, the fallback stream gate, and
 * allreduce in one kernel for small calls of one host's ranks.
 *
 * Element semantics come from reduce_ops.cuh (the CPU kernels' results, bit
 * for bit). Three shapes of the same loop:
 *  - vec: every pointer has the same address modulo 16 and that offset is a
 *    multiple of the element size. A head of at most 15 bytes' worth of
 *    elements brings the pointers to 16 bytes; the body moves 16 bytes per
 *    load and store (uint4); the head and the tail go element by element.
 *  - elem: the pointers are aligned to the element size but not alike modulo
 *    16: one element per load.
 *  - bytes: a pointer is not aligned to the element size (a byte offset into
 *    a buffer): elements are assembled from bytes, so no access is
 *    misaligned.
 * Each is a grid-stride loop over a grid the caller sizes to the device (SM
 * count x resident blocks per SM), so large buffers take one launch that
 * fills the GPU and small ones take few blocks. When fwd is given, each
 * result is stored to dst and fwd from the same registers: the data is read
 * once and written twice (recv-reduce-send in one pass).
 */
#include <cuda_runtime.h>

#include "cuda_dev.h"
#include "dev_int.h"
#include "reduce_ops.cuh"

namespace {

template <int DT, int OP> struct red_f {
  typedef typename rop_type<DT>::T T;
  __device__ __forceinline__ T operator()(T u, T v) const {
    return rop_type<DT>::template op<OP>(u, v);
  }
};

template <int DT> struct div_f {
  typedef typename rop_type<DT>::T T;
  int d;
  __device__ __forceinline__ T operator()(T u, T) const {
    return rop_type<DT>::div(u, d);
  }
};

template <typename T> union vec16 {
  uint4 v;
  T e[16 / sizeof(T)];
};

/* UNARY: b is not read (division: dst = f(a)). */
template <typename F, bool UNARY>
__global__ void __launch_bounds__(CUK_THREADS)
    k_vec(typename F::T *dst, typename F::T *fwd, const typename F::T *a,
          const typename F::T *b, size_t n, size_t head, F f) {
  typedef typename F::T T;
  const int V = 16 / sizeof(T);
  size_t nv = (n - head) / V;
  size_t tail0 = head + nv * V;
  size_t extra = head + (n - tail0);
  size_t gid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  const uint4 *av = reinterpret_cast<const uint4 *>(a + head);
  const uint4 *bv = reinterpret_cast<const uint4 *>(b + head);
  uint4 *dv = reinterpret_cast<uint4 *>(dst + head);
  uint4 *fv = fwd ? reinterpret_cast<uint4 *>(fwd + head) : nullptr;
  for (size_t i = gid; i < nv; i += stride) {
    vec16<T> x, y, r;
    x.v = av[i];
    if (!UNARY)
      y.v = bv[i];
#pragma unroll
    for (int j = 0; j < V; j++)
      r.e[j] = f(x.e[j], UNARY ? x.e[j] : y.e[j]);
    dv[i] = r.v;
    if (fwd)
      fv[i] = r.v;
  }
  if (gid < extra) {
    size_t k = gid < head ? gid : tail0 + (gid - head);
    T u = a[k];
    T r = f(u, UNARY ? u : b[k]);
    dst[k] = r;
    if (fwd)
      fwd[k] = r;
  }
}

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

template <typename F, bool UNARY, bool BYTES>
__global__ void __launch_bounds__(CUK_THREADS)
    k_elem(unsigned char *dst, unsigned char *fwd, const unsigned char *a,
           const unsigned char *b, size_t n, F f) {
  typedef typename F::T T;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += stride) {
    T u = ld<T, BYTES>(a, i);
    T r = f(u, UNARY ? u : ld<T, BYTES>(b, i));
    st<T, BYTES>(dst, i, r);
    if (fwd)
      st<T, BYTES>(fwd, i, r);
  }
}

unsigned blocks_for(size_t work, unsigned grid) {
  size_t need = (work + CUK_THREADS - 1) / CUK_THREADS;
  if (need == 0)
    need = 1;
  return need < grid ? (unsigned)need : (grid ? grid : 1u);
}

/* Launches kernel k with the given arguments and returns that launch's own
 * error: cudaGetLastError after a <<<>>> launch would also report (and
 * clear) an error left by the application's earlier calls. */
template <typename... P, typename... A>
cudaError_t go(void (*k)(P...), unsigned blocks, unsigned threads,
               cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  return cudaLaunchKernelEx(&cfg, k, args...);
}

template <typename F, bool UNARY>
int launch(void *dst, void *fwd, const void *a, const void *b, size_t n,
           unsigned grid, cudaStream_t s, F f) {
  typedef typename F::T T;
  if (n == 0)
    return cudaSuccess;
  uintptr_t ua = (uintptr_t)a, ub = UNARY ? ua : (uintptr_t)b;
  uintptr_t ud = (uintptr_t)dst, uf = fwd ? (uintptr_t)fwd : ud;
  uintptr_t any = ua | ub | ud | uf;
  unsigned char *d8 = static_cast<unsigned char *>(dst);
  unsigned char *f8 = static_cast<unsigned char *>(fwd);
  const unsigned char *a8 = static_cast<const unsigned char *>(a);
  const unsigned char *b8 = static_cast<const unsigned char *>(UNARY ? a : b);
  if (any % sizeof(T))
    return go(k_elem<F, UNARY, true>, blocks_for(n, grid), CUK_THREADS, s, d8,
              f8, a8, b8, n, f);
  if ((ua % 16) == (ub % 16) && (ua % 16) == (ud % 16) &&
      (ua % 16) == (uf % 16)) {
    size_t head = ((16 - ua % 16) % 16) / sizeof(T);
    if (head > n)
      head = n;
    const size_t V = 16 / sizeof(T);
    size_t work = (n - head) / V;
    size_t extra = n - work * V; /* head and tail */
    return go(k_vec<F, UNARY>, blocks_for(work > extra ? work : extra, grid),
              CUK_THREADS, s, static_cast<T *>(dst), static_cast<T *>(fwd),
              static_cast<const T *>(a), static_cast<const T *>(UNARY ? a : b),
              n, head, f);
  }
  return go(k_elem<F, UNARY, false>, blocks_for(n, grid), CUK_THREADS, s, d8,
            f8, a8, b8, n, f);
}

template <int DT>
int reduce_dt(void *dst, void *fwd, const void *a, const void *b, size_t n,
              int op, unsigned grid, cudaStream_t s) {
  switch (op) {
  case BRAID_SUM:
  case BRAID_AVG:
    return launch<red_f<DT, ROP_SUM>, false>(dst, fwd, a, b, n, grid, s,
                                             red_f<DT, ROP_SUM>());
  case BRAID_PROD:
    return launch<red_f<DT, ROP_PROD>, false>(dst, fwd, a, b, n, grid, s,
                                              red_f<DT, ROP_PROD>());
  case BRAID_MIN:
    return launch<red_f<DT, ROP_MIN>, false>(dst, fwd, a, b, n, grid, s,
                                             red_f<DT, ROP_MIN>());
  case BRAID_MAX:
    return launch<red_f<DT, ROP_MAX>, false>(dst, fwd, a, b, n, grid, s,
                                             red_f<DT, ROP_MAX>());
  default:
    return cudaErrorInvalidValue;
  }
}

template <int DT>
int div_dt(void *buf, size_t n, int divisor, unsigned grid, cudaStream_t s) {
  div_f<DT> f;
  f.d = divisor;
  return launch<div_f<DT>, true>(buf, NULL, buf, buf, n, grid, s, f);
}

__global__ void k_gate(volatile uint32_t *reached, volatile uint32_t *released,
                       uint32_t seq) {
  /* Everything before on the stream has finished when this runs. */
  __threadfence_system();
  *reached = seq;
  __threadfence_system();
  while ((int32_t)(*released - seq) < 0) {
#if __CUDA_ARCH__ >= 700
    __nanosleep(1000);
#endif
  }
  __threadfence_system();
}

/* ---- allreduce in one kernel (cudev_kernel_allreduce, cuda_dev.h) ------- */

#define KA_THREADS 512

__device__ __forceinline__ uint64_t ka_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* which 0: "from's slot holds call seq", 1: "from is done with owner's
 * slot of call seq" */
__device__ __forceinline__ volatile uint64_t *ka_flag(const cudev_ka &k,
                                                      int owner, int from,
                                                      int which = 0) {
  return reinterpret_cast<volatile uint64_t *>(
      static_cast<char *>(k.area[owner]) +
      (which ? CUDEV_KA_DONE(from) : CUDEV_KA_READY(from)));
}

/* One block: the copy in, the flags and the fold are ordered by
 * __syncthreads. Peers' slots and flags are read with volatile loads (L2,
 * never a stale L1 line of the call two before); flags are raised after a
 * system-wide fence, so a peer that sees one sees the slot. */
template <int DT, int OP>
__global__ void __launch_bounds__(KA_THREADS)
    k_allreduce(cudev_ka k, uint64_t seq, typename rop_type<DT>::T *out,
                const typename rop_type<DT>::T *in, size_t n, int avg) {
  typedef typename rop_type<DT>::T T;
  __shared__ volatile int stop;
  volatile uint64_t *status = k.status;
  const int t = threadIdx.x, me = k.rank, nr = k.nranks;
  const size_t off = CUDEV_KA_FLAGS + (size_t)(seq % 2) * k.slot;
  T *mine = reinterpret_cast<T *>(static_cast<char *>(k.area[me]) + off);
  if (t == 0)
    stop = *status != 0;
  __syncthreads();
  if (stop)
    return;
  /* the user's buffers may be at any byte offset (the slots are aligned) */
  const bool in_al = (uintptr_t)in % sizeof(T) == 0;
  const bool out_al = (uintptr_t)out % sizeof(T) == 0;
  if (in_al)
    for (size_t i = t; i < n; i += blockDim.x)
      mine[i] = in[i];
  else
    for (size_t i = t; i < n; i += blockDim.x)
      mine[i] = ld<T, true>(reinterpret_cast<const unsigned char *>(in), i);
  __syncthreads();
  if (t < nr && t != me) {
    __threadfence_system();
    *ka_flag(k, t, me) = seq;
    volatile uint64_t *f = ka_flag(k, me, t);
    uint64_t t0 = ka_now();
    for (unsigned polls = 1; *f < seq; polls++) {
      if (stop)
        break;
      if (polls % 256)
        continue;
      int why = *reinterpret_cast<volatile uint32_t *>(k.abort)
                    ? CUDEV_KA_ABORTED
                    : ka_now() - t0 > k.timeout_ns ? CUDEV_KA_TIMEOUT
                                                   : 0;
      if (why) {
        if (*status == 0)
          *status = CUDEV_KA_STATUS(why, t, seq);
        __threadfence_system();
        stop = 1;
      }
    }
    __threadfence_system();
  }
  __syncthreads();
  if (stop)
    return;
  for (size_t i = t; i < n; i += blockDim.x) {
    T acc = me == 0 ? mine[i]
                    : reinterpret_cast<const volatile T *>(
                          static_cast<char *>(k.area[0]) + off)[i];
    for (int q = 1; q < nr; q++) {
      T v = q == me ? mine[i]
                    : reinterpret_cast<const volatile T *>(
                          static_cast<char *>(k.area[q]) + off)[i];
      acc = rop_type<DT>::template op<OP>(acc, v);
    }
    if (avg)
      acc = rop_type<DT>::div(acc, nr);
    if (out_al)
      out[i] = acc;
    else
      st<T, true>(reinterpret_cast<unsigned char *>(out), i, acc);
  }
  __syncthreads();
  if (t < nr && t != me) {
    __threadfence_system();
    *ka_flag(k, t, me, 1) = seq;
  }
}

template <int DT>
int allreduce_dt(const cudev_ka *k, uint64_t seq, void *out, const void *in,
                 size_t n, int op, cudaStream_t s) {
  typedef typename rop_type<DT>::T T;
  T *o = static_cast<T *>(out);
  const T *i = static_cast<const T *>(in);
  switch (op) {
  case BRAID_SUM:
  case BRAID_AVG:
    return go(k_allreduce<DT, ROP_SUM>, 1, KA_THREADS, s, *k, seq, o, i, n,
              (int)(op == BRAID_AVG));
  case BRAID_PROD:
    return go(k_allreduce<DT, ROP_PROD>, 1, KA_THREADS, s, *k, seq, o, i, n,
              0);
  case BRAID_MIN:
    return go(k_allreduce<DT, ROP_MIN>, 1, KA_THREADS, s, *k, seq, o, i, n, 0);
  case BRAID_MAX:
    return go(k_allreduce<DT, ROP_MAX>, 1, KA_THREADS, s, *k, seq, o, i, n, 0);
  default:
    return cudaErrorInvalidValue;
  }
}

/* Lazy loading (the default since CUDA 12.2) loads a kernel at its first
 * launch, and a load may need the context to synchronise: a launch made while
 * a gate holds a stream (memory operation or k_gate) would then wait for that
 * stream, which waits for the launch. Every kernel is loaded up front instead
 * (cudaFuncGetAttributes loads it), as the CUDA Programming Guide's "Lazy
 * Loading: potential hazards" advises. */
template <typename F, bool UNARY> cudaError_t preload_f() {
  cudaFuncAttributes at;
  cudaError_t e = cudaFuncGetAttributes(&at, k_vec<F, UNARY>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_elem<F, UNARY, true>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_elem<F, UNARY, false>);
  return e;
}

template <int DT> cudaError_t preload_dt() {
  cudaFuncAttributes at;
  cudaError_t e = preload_f<red_f<DT, ROP_SUM>, false>();
  if (e == cudaSuccess)
    e = preload_f<red_f<DT, ROP_PROD>, false>();
  if (e == cudaSuccess)
    e = preload_f<red_f<DT, ROP_MIN>, false>();
  if (e == cudaSuccess)
    e = preload_f<red_f<DT, ROP_MAX>, false>();
  if (e == cudaSuccess)
    e = preload_f<div_f<DT>, true>();
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_allreduce<DT, ROP_SUM>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_allreduce<DT, ROP_PROD>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_allreduce<DT, ROP_MIN>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_allreduce<DT, ROP_MAX>);
  return e;
}

} // namespace

/* Loads every kernel of this file on the current device (see preload_f). */
extern "C" int cuk_preload(void) {
  cudaFuncAttributes at;
  cudaError_t e = cudaFuncGetAttributes(&at, k_gate);
  for (int dt = 0; e == cudaSuccess && dt < BRAID_NUM_DTYPES; dt++) {
#define CUK_CALL_PRELOAD(D)                                                    \
  e = preload_dt<D>();                                                         \
  break
    ROP_DISPATCH(dt, CUK_CALL_PRELOAD)
#undef CUK_CALL_PRELOAD
  }
  return e;
}

extern "C" int cuk_reduce(void *dst, void *fwd, const void *a, const void *b,
                          size_t n, int dt, int op, unsigned grid,
                          void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
#define CUK_CALL_REDUCE(D) return reduce_dt<D>(dst, fwd, a, b, n, op, grid, s)
  ROP_DISPATCH(dt, CUK_CALL_REDUCE)
#undef CUK_CALL_REDUCE
  return cudaErrorInvalidValue;
}

extern "C" int cuk_div(void *buf, size_t n, int dt, int divisor, unsigned grid,
                       void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (divisor <= 1 || n == 0)
    return cudaSuccess; /* as red_div: dividing by 1 changes nothing */
#define CUK_CALL_DIV(D) return div_dt<D>(buf, n, divisor, grid, s)
  ROP_DISPATCH(dt, CUK_CALL_DIV)
#undef CUK_CALL_DIV
  return cudaErrorInvalidValue;
}

extern "C" int cuk_gate(uint32_t *reached, uint32_t *released, uint32_t seq,
                        void *stream) {
  return go(k_gate, 1, 1, static_cast<cudaStream_t>(stream), reached, released,
            seq);
}

extern "C" int cuk_allreduce(const cudev_ka *k, uint64_t seq, void *out,
                             const void *in, size_t n, int dt, int op,
                             void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
#define CUK_CALL_ALLREDUCE(D) return allreduce_dt<D>(k, seq, out, in, n, op, s)
  ROP_DISPATCH(dt, CUK_CALL_ALLREDUCE)
#undef CUK_CALL_ALLREDUCE
  return cudaErrorInvalidValue;
}
