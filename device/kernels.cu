/*
 * CUDA kernels of the device layer: reduction (and reduce-and-forward) for
 * every dtype x op, the division of BRAID_AVG, the fallback stream gate, and
 * collectives in one kernel for the calls of one host's ranks.
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
 * Each is a grid-stride loop over a grid sized to the device: SM count x
 * the blocks of that kernel that stay resident on an SM (blocks_for), so
 * large buffers take one launch that fills the GPU in one wave and small
 * ones take few blocks. When fwd is given, each
 * result is stored to dst and fwd from the same registers: the data is read
 * once and written twice (recv-reduce-send in one pass).
 */
#include <cuda_runtime.h>

#include "device/cuda_dev.h"
#include "device/dev_int.h"
#include "device/kcoll_chunk.h"
#include "device/kmem.cuh"
#include "device/reduce_ops.cuh"

namespace {

template <typename T> union vec16 {
  uint4 v;
  T e[16 / sizeof(T)];
};

/* An operation on elements (operator()) and on the 16 bytes of a uint4
 * (vec: the same results, SIMD where reduce_ops.cuh's rop_vec has it). */
template <int DT, int OP> struct red_f {
  typedef typename rop_type<DT>::T T;
  __device__ __forceinline__ T operator()(T u, T v) const {
    return rop_type<DT>::template op<OP>(u, v);
  }
  __device__ __forceinline__ uint4 vec(uint4 u, uint4 v) const {
    rop_v16 x = {{u.x, u.y, u.z, u.w}}, y = {{v.x, v.y, v.z, v.w}};
    x = rop_vec<DT, OP>(x, y);
    return make_uint4(x.w[0], x.w[1], x.w[2], x.w[3]);
  }
};

template <int DT> struct div_f {
  typedef typename rop_type<DT>::T T;
  int d;
  __device__ __forceinline__ T operator()(T u, T) const {
    return rop_type<DT>::div(u, d);
  }
  __device__ __forceinline__ uint4 vec(uint4 u, uint4) const {
    vec16<T> x;
    x.v = u;
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); j++)
      x.e[j] = rop_type<DT>::div(x.e[j], d);
    return x.v;
  }
};

/* 16-byte vectors each thread of k_vec loads before it reduces and stores
 * them: more loads in flight per thread, so that the element work of one
 * vector does not leave memory idle. 2 takes about 40 registers (sm_90,
 * 48 for float16), so five or six 256-thread blocks stay resident per SM:
 * 80-96 KiB of loads in flight per SM against 64 KiB with one vector per
 * thread at full occupancy; 4 takes 56-70 and leaves four. */
#define CUK_UNROLL 2

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
  for (size_t i = gid; i < nv; i += CUK_UNROLL * stride) {
    uint4 x[CUK_UNROLL], y[CUK_UNROLL];
#pragma unroll
    for (int u = 0; u < CUK_UNROLL; u++) {
      size_t k = i + u * stride;
      x[u] = k < nv ? av[k] : make_uint4(0, 0, 0, 0);
      y[u] = !UNARY && k < nv ? bv[k] : x[u];
    }
#pragma unroll
    for (int u = 0; u < CUK_UNROLL; u++) {
      size_t k = i + u * stride;
      if (k < nv) {
        uint4 r = f.vec(x[u], y[u]);
        dv[k] = r;
        if (fv)
          fv[k] = r;
      }
    }
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

/* Blocks of kernel K, of THREADS threads, that stay resident on one SM (its
 * registers and the SM's limits decide), per device, computed once:
 * cuk_preload does it for every reduction kernel before any launch. 1 if
 * the runtime cannot say. */
#define CUK_DEVICES 64
template <auto K, int THREADS = CUK_THREADS> unsigned resident() {
  static unsigned cache[CUK_DEVICES];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CUK_DEVICES)
    dev = 0;
  unsigned r = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);
  if (r)
    return r;
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, K, THREADS, 0) !=
          cudaSuccess ||
      nb < 1)
    nb = 1;
  __atomic_store_n(&cache[dev], (unsigned)nb, __ATOMIC_RELAXED);
  return (unsigned)nb;
}

/* Blocks for `work` items of one thread each, at most as many as kernel K
 * has resident on the device's sms SMs at once: one wave, each block's
 * grid-stride share the same. */
template <auto K> unsigned blocks_for(size_t work, unsigned sms) {
  size_t need = (work + CUK_THREADS - 1) / CUK_THREADS;
  size_t most = (size_t)(sms ? sms : 1u) * resident<K>();
  if (need == 0)
    need = 1;
  return need < most ? (unsigned)need : (unsigned)most;
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
           unsigned sms, cudaStream_t s, F f) {
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
    return go(k_elem<F, UNARY, true>,
              blocks_for<k_elem<F, UNARY, true>>(n, sms), CUK_THREADS, s, d8,
              f8, a8, b8, n, f);
  if ((ua % 16) == (ub % 16) && (ua % 16) == (ud % 16) &&
      (ua % 16) == (uf % 16)) {
    size_t head = ((16 - ua % 16) % 16) / sizeof(T);
    if (head > n)
      head = n;
    const size_t V = 16 / sizeof(T);
    size_t work = (n - head) / V;
    size_t extra = n - work * V; /* head and tail */
    return go(k_vec<F, UNARY>,
              blocks_for<k_vec<F, UNARY>>(work > extra ? work : extra, sms),
              CUK_THREADS, s, static_cast<T *>(dst), static_cast<T *>(fwd),
              static_cast<const T *>(a), static_cast<const T *>(UNARY ? a : b),
              n, head, f);
  }
  return go(k_elem<F, UNARY, false>,
            blocks_for<k_elem<F, UNARY, false>>(n, sms), CUK_THREADS, s, d8, f8,
            a8, b8, n, f);
}

template <int DT>
int reduce_dt(void *dst, void *fwd, const void *a, const void *b, size_t n,
              int op, unsigned sms, cudaStream_t s) {
  switch (op) {
  case BRAID_SUM:
  case BRAID_AVG:
    return launch<red_f<DT, ROP_SUM>, false>(dst, fwd, a, b, n, sms, s,
                                             red_f<DT, ROP_SUM>());
  case BRAID_PROD:
    return launch<red_f<DT, ROP_PROD>, false>(dst, fwd, a, b, n, sms, s,
                                              red_f<DT, ROP_PROD>());
  case BRAID_MIN:
    return launch<red_f<DT, ROP_MIN>, false>(dst, fwd, a, b, n, sms, s,
                                             red_f<DT, ROP_MIN>());
  case BRAID_MAX:
    return launch<red_f<DT, ROP_MAX>, false>(dst, fwd, a, b, n, sms, s,
                                             red_f<DT, ROP_MAX>());
  default:
    return cudaErrorInvalidValue;
  }
}

template <int DT>
int div_dt(void *buf, size_t n, int divisor, unsigned sms, cudaStream_t s) {
  div_f<DT> f;
  f.d = divisor;
  return launch<div_f<DT>, true>(buf, NULL, buf, buf, n, sms, s, f);
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

/* ---- collectives in one kernel (cudev_kernel_coll, cuda_dev.h) --------- */

__device__ __forceinline__ uint64_t ka_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* The areas' addresses are copied to shared memory first: indexed by a
 * variable, the kernel parameter would be copied to local memory. */
__device__ __forceinline__ volatile uint64_t *ka_word(char *const *area,
                                                      int owner, size_t off) {
  return reinterpret_cast<volatile uint64_t *>(area[owner] + off);
}

/* Raises flag `off(q)` = s in every peer q's area: thread q does q's, after
 * a system-wide fence (everything the block wrote before the last
 * __syncthreads is then seen before the flag). */
__device__ __forceinline__ void ka_raise(const cudev_ka &k, char *const *area,
                                         size_t off, uint64_t s) {
  int t = threadIdx.x;
  if (t < k.nranks && t != k.rank) {
    __threadfence_system();
    *ka_word(area, t, off) = s;
  }
}

/* Stores why the call ends in *status unless another block of this kernel
 * did first (two may fail at once: the first failure is the one told).
 * Only this GPU writes the word and the host only reads it, so a device
 * atomic suffices on the mapped pinned memory. */
__device__ __forceinline__ void ka_fail(const cudev_ka &k, uint64_t st) {
  atomicCAS(reinterpret_cast<unsigned long long *>(k.status), 0ull,
            static_cast<unsigned long long>(st));
}

/* Thread q waits until peer q's ready flag (b, q) here is at least chunk
 * s, and at s of the call with fingerprint fp; stop set (and *status) when
 * it cannot. */
__device__ __forceinline__ void ka_wait(const cudev_ka &k, char *const *area,
                                        int b, uint64_t s, uint64_t fp,
                                        volatile int *stop) {
  int t = threadIdx.x;
  if (t < k.nranks && t != k.rank) {
    volatile uint64_t *f = ka_word(area, k.rank, kc_ready_at(b, t));
    volatile uint64_t *status = k.status;
    uint64_t t0 = ka_now(), w;
    for (unsigned polls = 1; !kc_ready_reached(w = *f, s); polls++) {
      if (*stop)
        break;
#if __CUDA_ARCH__ >= 700
      /* a peer that is late: poll less, leaving the SMs' issue slots and
       * L2 to the blocks that work (ranks sharing the GPU under MPS) */
      if (polls > 4096)
        __nanosleep(128);
#endif
      if (polls % 256)
        continue;
      int why = *reinterpret_cast<volatile uint32_t *>(k.abort) || *status
                    ? CUDEV_KA_ABORTED
                : ka_now() - t0 > k.timeout_ns ? CUDEV_KA_TIMEOUT
                                               : 0;
      if (why) {
        ka_fail(k, CUDEV_KA_STATUS(why, t, s));
        __threadfence_system();
        *stop = 1;
      }
    }
    if (!*stop && kc_ready_other(w, s, fp)) {
      ka_fail(k, CUDEV_KA_STATUS(CUDEV_KA_MISMATCH, t, s));
      __threadfence_system();
      *stop = 1;
    }
    __threadfence_system();
  }
  __syncthreads();
}

/* Writes job jb of the chunk in slot offset `off` (kcoll_chunk.h: out[i +
 * d0] for the elements i in [a, e) of the chunk, the ranks' elements folded
 * in rank order or rank src's). A wide fold (kc_wide) widens every rank's
 * element to float and rounds once (kc_widen, kc_wide_op, kc_wide_end);
 * else each step is the dtype's operation. Peers' slots are read through
 * L2 (ld.global.cg, volatile for single elements): never a stale L1 line
 * of the chunk two before. 16-byte loads (the slots are 256-byte aligned);
 * 16-byte stores where out + d0 is 16-byte aligned, else element by
 * element (bytes where not even element-aligned). d0 may be negative
 * (reduce_scatter): only out[i + d0] for i in [a, e) is touched. */
template <int DT, int OP>
__device__ __forceinline__ void ka_emit(char *const *area, size_t off, int nr,
                                        int me, const kc_job &jb, void *out) {
  typedef typename rop_type<DT>::T T;
  const int V = 16 / sizeof(T);
  const size_t a = jb.a, b = jb.e;
  const int avg = jb.avg, wop = OP == ROP_PROD ? BRAID_PROD : BRAID_SUM;
  if (a >= b)
    return;
  const uintptr_t ob =
      (uintptr_t)out + (uintptr_t)(jb.d0 * (ptrdiff_t)sizeof(T));
  unsigned char *o8 = reinterpret_cast<unsigned char *>(ob);
  const bool o16 = ob % 16 == 0, oel = ob % sizeof(T) == 0;
  int q0, q1;
  kc_job_ranks(&jb, nr, &q0, &q1);
  const size_t va = (a + V - 1) / V, vb = b / V;
  /* elements one by one: [a, h1) and [t0, b), vectors between */
  const size_t h1 = va < vb ? va * V : b, t0 = va < vb ? vb * V : b;
  for (size_t v = va + threadIdx.x; v < vb; v += blockDim.x) {
    vec16<T> acc;
    if (kc_narrow_dt(DT) && jb.wide) {
      float f[V];
      for (int q = q0; q < q1; q++) {
        const uint4 *p = reinterpret_cast<const uint4 *>(area[q] + off);
        vec16<T> x;
        x.v = q == me ? p[v] : __ldcg(p + v);
#pragma unroll
        for (int e = 0; e < V; e++) {
          float w = kc_widen(DT, (uint32_t)x.e[e]);
          f[e] = q == q0 ? w : kc_wide_op(DT, wop, f[e], w);
        }
      }
#pragma unroll
      for (int e = 0; e < V; e++)
        acc.e[e] = (T)kc_wide_end(DT, avg, nr, f[e]);
    } else {
      for (int q = q0; q < q1; q++) {
        const uint4 *p = reinterpret_cast<const uint4 *>(area[q] + off);
        uint4 x = q == me ? p[v] : __ldcg(p + v);
        acc.v = q == q0 ? x : red_f<DT, OP>().vec(acc.v, x);
      }
      if (avg)
        acc.v = div_f<DT>{nr}.vec(acc.v, acc.v);
    }
    if (o16) {
      reinterpret_cast<uint4 *>(ob)[v] = acc.v;
    } else {
#pragma unroll
      for (int e = 0; e < V; e++)
        st<T, true>(o8, v * V + e, acc.e[e]);
    }
  }
  for (int part = 0; part < 2; part++) {
    const size_t e0 = part ? t0 : a, e1 = part ? b : h1;
    for (size_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) {
      T acc = T();
      if (kc_narrow_dt(DT) && jb.wide) {
        float f = 0.0f;
        for (int q = q0; q < q1; q++) {
          T x = reinterpret_cast<const volatile T *>(area[q] + off)[i];
          float w = kc_widen(DT, (uint32_t)x);
          f = q == q0 ? w : kc_wide_op(DT, wop, f, w);
        }
        acc = (T)kc_wide_end(DT, avg, nr, f);
      } else {
        for (int q = q0; q < q1; q++) {
          T x = reinterpret_cast<const volatile T *>(area[q] + off)[i];
          acc = q == q0 ? x : rop_type<DT>::template op<OP>(acc, x);
        }
        if (avg)
          acc = rop_type<DT>::div(acc, nr);
      }
      if (oel)
        reinterpret_cast<T *>(ob)[i] = acc;
      else
        st<T, true>(o8, i, acc);
    }
  }
}

/* Block b's part of each chunk (see cuda_dev.h; what it handles, the flags
 * and the jobs: kcoll_chunk.h): copies its part of the input into this
 * rank's slot (16-byte loads and stores where the input is 16-byte
 * aligned, else element by element), raises and waits for the ready flags,
 * then makes its part of the output with ka_emit. nin: the elements of a
 * rank's input (cudev_kc_elems). */
template <int DT, int OP>
__global__ void __launch_bounds__(CUDEV_KA_THREADS)
    k_coll(cudev_ka k, uint64_t seq, uint64_t fp, cudev_kcall c, size_t nin) {
  typedef typename rop_type<DT>::T T;
  const int V = 16 / sizeof(T);
  __shared__ volatile int stop;
  __shared__ char *area[CUDEV_KA_RANKS];
  const int t = threadIdx.x, me = k.rank, nr = k.nranks, b = blockIdx.x;
  const size_t ce = k.slot / sizeof(T); /* elements of a chunk */
  const T *in = static_cast<const T *>(c.in);
  const bool copies = kc_copies(&c, me);
  const bool in16 = (uintptr_t)in % 16 == 0;
  const bool in_el = (uintptr_t)in % sizeof(T) == 0;
  const int ag_inplace = kc_ag_inplace(&c, me, sizeof(T));
  if (t == 0)
    stop = *reinterpret_cast<volatile uint64_t *>(k.status) != 0;
#pragma unroll
  for (int q = 0; q < CUDEV_KA_RANKS; q++)
    if (t == q)
      area[q] = static_cast<char *>(k.area[q]);
  __syncthreads();
  for (size_t j = 0; !stop && j < kc_chunks(nin, ce); j++) {
    const kc_chunk ch = kc_chunk_at(&k, seq, nin, ce, gridDim.x, V, j, b);
    const size_t lo = ch.lo, hi = ch.hi;
    T *mine = reinterpret_cast<T *>(area[me] + ch.off);
    const T *src = in + ch.c0;
    /* copy in: 16-byte vectors [vlo, vhi), then elements [tail, hi); lo
     * is a multiple of V unless the part is empty (lo == hi: the chunk's
     * end) */
    const size_t vlo = lo / V, vhi = hi / V;
    const size_t tail = vhi * V > lo ? vhi * V : lo;
    if (copies && in16) {
      for (size_t v = vlo + t; v < vhi; v += blockDim.x)
        reinterpret_cast<uint4 *>(mine)[v] =
            reinterpret_cast<const uint4 *>(src)[v];
      for (size_t i = tail + t; i < hi; i += blockDim.x)
        mine[i] = src[i];
    } else if (copies) {
      for (size_t i = lo + t; i < hi; i += blockDim.x)
        mine[i] =
            in_el
                ? src[i]
                : ld<T, true>(reinterpret_cast<const unsigned char *>(src), i);
    }
    __syncthreads();
    ka_raise(k, area, kc_ready_at(b, me), kc_ready_value(ch.s, fp));
    ka_wait(k, area, b, ch.s, fp, &stop);
    if (stop)
      break;
    /* what this rank makes of the chunk (one ka_emit call site: each is
     * a large inlined loop) */
    const int nj = kc_jobs(&c, me, nr);
    for (int q = 0; q < nj; q++) {
      kc_job jb;
      if (kc_job_at(&c, me, nr, ag_inplace, q, &ch, &jb))
        ka_emit<DT, OP>(area, ch.off, nr, me, jb, c.out);
    }
    __syncthreads();
    ka_raise(k, area, kc_done_at(b, me), kc_done_value(ch.s));
  }
}

template <int DT>
int coll_dt(const cudev_ka *k, uint64_t seq, const cudev_kcall *c,
            cudaStream_t s) {
  typedef typename rop_type<DT>::T T;
  size_t nin = cudev_kc_elems(c, k->nranks);
  unsigned nb = (unsigned)cudev_ka_grid(nin * sizeof(T), k->slot, k->blocks);
  uint64_t fp = cudev_kc_fp(c);
  switch (cudev_kc_reduces(c->coll) ? (int)c->op : (int)BRAID_SUM) {
  case BRAID_SUM:
  case BRAID_AVG:
    return go(k_coll<DT, ROP_SUM>, nb, CUDEV_KA_THREADS, s, *k, seq, fp, *c,
              nin);
  case BRAID_PROD:
    return go(k_coll<DT, ROP_PROD>, nb, CUDEV_KA_THREADS, s, *k, seq, fp, *c,
              nin);
  case BRAID_MIN:
    return go(k_coll<DT, ROP_MIN>, nb, CUDEV_KA_THREADS, s, *k, seq, fp, *c,
              nin);
  case BRAID_MAX:
    return go(k_coll<DT, ROP_MAX>, nb, CUDEV_KA_THREADS, s, *k, seq, fp, *c,
              nin);
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
  if (e == cudaSuccess) {
    resident<k_vec<F, UNARY>>();
    resident<k_elem<F, UNARY, true>>();
    resident<k_elem<F, UNARY, false>>();
  }
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
    e = cudaFuncGetAttributes(&at, k_coll<DT, ROP_SUM>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_coll<DT, ROP_PROD>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_coll<DT, ROP_MIN>);
  if (e == cudaSuccess)
    e = cudaFuncGetAttributes(&at, k_coll<DT, ROP_MAX>);
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
                          size_t n, int dt, int op, unsigned sms,
                          void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
#define CUK_CALL_REDUCE(D) return reduce_dt<D>(dst, fwd, a, b, n, op, sms, s)
  ROP_DISPATCH(dt, CUK_CALL_REDUCE)
#undef CUK_CALL_REDUCE
  return cudaErrorInvalidValue;
}

extern "C" int cuk_div(void *buf, size_t n, int dt, int divisor, unsigned sms,
                       void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (divisor <= 1 || n == 0)
    return cudaSuccess; /* as red_div: dividing by 1 changes nothing */
#define CUK_CALL_DIV(D) return div_dt<D>(buf, n, divisor, sms, s)
  ROP_DISPATCH(dt, CUK_CALL_DIV)
#undef CUK_CALL_DIV
  return cudaErrorInvalidValue;
}

extern "C" int cuk_gate(uint32_t *reached, uint32_t *released, uint32_t seq,
                        void *stream) {
  return go(k_gate, 1, 1, static_cast<cudaStream_t>(stream), reached, released,
            seq);
}

template <int DT> unsigned coll_resident_dt() {
  unsigned a = resident<k_coll<DT, ROP_SUM>, CUDEV_KA_THREADS>();
  unsigned b = resident<k_coll<DT, ROP_PROD>, CUDEV_KA_THREADS>();
  unsigned c = resident<k_coll<DT, ROP_MIN>, CUDEV_KA_THREADS>();
  unsigned d = resident<k_coll<DT, ROP_MAX>, CUDEV_KA_THREADS>();
  a = b < a ? b : a;
  c = d < c ? d : c;
  return c < a ? c : a;
}

extern "C" int cuk_coll_resident(int *per_sm) {
  unsigned most = ~0u, r = 0;
  for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
#define CUK_CALL_RESIDENT(D)                                                   \
  r = coll_resident_dt<D>();                                                   \
  break
    ROP_DISPATCH(dt, CUK_CALL_RESIDENT)
#undef CUK_CALL_RESIDENT
    most = r < most ? r : most;
  }
  *per_sm = (int)most;
  return cudaSuccess;
}

extern "C" int cuk_coll(const cudev_ka *k, uint64_t seq, const cudev_kcall *c,
                        void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
#define CUK_CALL_COLL(D) return coll_dt<D>(k, seq, c, s)
  ROP_DISPATCH(c->dt, CUK_CALL_COLL)
#undef CUK_CALL_COLL
  return cudaErrorInvalidValue;
}
