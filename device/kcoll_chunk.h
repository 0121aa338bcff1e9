/*
 * The per-chunk logic of the collective kernel (cudev_kernel_coll,
 * cuda_dev.h), written once for the GPU kernel (device/kernels.cu, k_coll
 * and ka_emit) and the emulated GPU's kernel (tests/cuda/emu/emu_kernel.c):
 * which chunk, slot and part a block handles and where its elements are,
 * the flags it raises and the values it waits for, what each of its jobs
 * writes, and how the ranks' elements fold. Both compile these functions
 * (host and device, as device/fp8.h's), so they cut, number and fold alike.
 *
 * The kernel is the device executor of the direct (one-shot) schedule
 * (collectives/direct.c): each rank's slot stands for its sends to every
 * peer, and its jobs make each output block from the same ranks' inputs,
 * folded in the same rank order, as that schedule after the verifier's
 * checks. tests/collectives/test_kcoll_direct.c compares the two for every
 * collective, rank count and root the kernel takes.
 *
 * What stays with each implementation: the loop over a part's elements
 * (threads of a block on the GPU, a plain loop on the CPU), loads and
 * stores (16-byte vectors, L2 loads of peers' slots), the memory ordering
 * around the flags (system-scope fences and volatile words on the GPU,
 * C11 release/acquire atomics on the CPU), waiting (polling) and the
 * element operation of a fold step (device/reduce_ops.cuh on the GPU,
 * src/reduce.c's CPU kernels on the CPU: the same bits, checked by
 * cuda_test_reduce_ops and cuda_test_cudev_gpu), and the float16/bfloat16
 * conversions a wide fold uses (the same pair).
 */
#ifndef BRAID_DEVICE_KCOLL_CHUNK_H
#define BRAID_DEVICE_KCOLL_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "braid.h"
#include "device/cuda_dev.h"
#include "device/fp8.h"

#ifdef __CUDACC__
#include "device/reduce_ops.cuh"
#define KC_HD static __host__ __device__ __forceinline__
#define KC_HALF_TO_FLOAT rop_half_to_float
#define KC_FLOAT_TO_HALF rop_float_to_half
#define KC_FLOAT_TO_BF16 rop_float_to_bf16
#else
#include "device/half.h"
#define KC_HD static inline
#define KC_HALF_TO_FLOAT half_to_float
#define KC_FLOAT_TO_HALF half_from_float
#define KC_FLOAT_TO_BF16 bf16_from_float
#endif

/* ---- chunks, slots and parts ------------------------------------------ */

/* Chunks of a call whose ranks' inputs are nin elements, ce to a chunk
 * (a slot's worth): chunk j is elements [j ce, (j + 1) ce). */
KC_HD size_t kc_chunks(size_t nin, size_t ce) {
  return CUDEV_KA_CHUNKS(nin, ce);
}

/* What block b does of chunk j of a call whose first chunk is number seq. */
typedef struct kc_chunk {
  uint64_t s;    /* the chunk's number, seq + j */
  size_t c0;     /* its first element in a rank's input */
  size_t off;    /* its slot's offset in every rank's area: slot s % 2 */
  size_t lo, hi; /* block b's part: elements [lo, hi) of the chunk */
} kc_chunk;

/* nb blocks; parts a multiple of v elements (16 bytes' worth). */
KC_HD kc_chunk kc_chunk_at(const cudev_ka *k, uint64_t seq, size_t nin,
                           size_t ce, size_t nb, size_t v, size_t j, size_t b) {
  kc_chunk ch;
  ch.s = seq + j;
  ch.c0 = j * ce;
  ch.off = CUDEV_KA_FLAGS + (size_t)(ch.s % 2) * k->slot;
  cudev_ka_part(nin, ce, nb, v, j, b, &ch.lo, &ch.hi);
  return ch;
}

/* Whether rank me copies its input into its slot (a broadcast's root only;
 * every rank for the other collectives). */
KC_HD int kc_copies(const cudev_kcall *c, int me) {
  return c->coll != CUDEV_KC_BROADCAST || me == c->root;
}

/* ---- flags ------------------------------------------------------------ */

/* Block b of rank me raises its ready flag, at kc_ready_at(b, me) in every
 * peer's area, to kc_ready_value(s, fp) once its part of chunk s is in its
 * slot; it then waits, in its own area, for every peer q's flag at
 * kc_ready_at(b, q) to be kc_ready_reached, and stops if it is
 * kc_ready_other (the peer is at chunk s with another call). Once its part
 * of the output is written it raises its done flag, kc_done_at(b, me) in
 * every peer's area, to kc_done_value(s). */
KC_HD size_t kc_ready_at(int b, int q) { return CUDEV_KA_READY(b, q); }
KC_HD uint64_t kc_ready_value(uint64_t s, uint64_t fp) {
  return CUDEV_KA_FLAG(s, fp);
}
KC_HD int kc_ready_reached(uint64_t w, uint64_t s) { return w >> 16 >= s; }
KC_HD int kc_ready_other(uint64_t w, uint64_t s, uint64_t fp) {
  return w >> 16 == s && (w & 0xffff) != fp;
}
KC_HD size_t kc_done_at(int b, int q) { return CUDEV_KA_DONE(b, q); }
KC_HD uint64_t kc_done_value(uint64_t s) { return s; }

/* ---- wide folds -------------------------------------------------------- */

/* Whether a fold of dtype dt with op is wide: float16, bfloat16 and the
 * fp8 types, for sum, avg and prod, widen every rank's element to float,
 * fold them there in rank order and round once at the end (avg: after
 * dividing in float), as NCCL's symmetric-memory kernels do; min and max
 * are exact in any width. Under BRAID_DETERMINISTIC (det) a fold is never
 * wide: each step rounds to dt, as on every other path. Otherwise each
 * step is the element operation of dt (rounded to dt), and avg divides the
 * result once. */
KC_HD int kc_narrow_dt(int dt) {
  return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 ||
         dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}
KC_HD int kc_wide(int dt, int op, int det) {
  return kc_narrow_dt(dt) && !det &&
         (op == BRAID_SUM || op == BRAID_AVG || op == BRAID_PROD);
}

/* ---- what a block writes ---------------------------------------------- */

/* Jobs of rank me for each chunk: an allgather has one per rank, a reduce
 * off the root none, the others one. */
KC_HD int kc_jobs(const cudev_kcall *c, int me, int nr) {
  return c->coll == CUDEV_KC_ALLGATHER                 ? nr
         : c->coll == CUDEV_KC_REDUCE && me != c->root ? 0
                                                       : 1;
}

/* Whether an allgather is in place on rank me: its input is its block of
 * out (es: the element's size). */
KC_HD int kc_ag_inplace(const cudev_kcall *c, int me, size_t es) {
  return c->coll == CUDEV_KC_ALLGATHER &&
         (const char *)c->in ==
             (const char *)c->out + (size_t)me * c->count * es;
}

/* Job q of a chunk: rank src's elements (src < 0: every rank's, folded in
 * rank order; avg: then divided by their number; wide: in float, see
 * kc_wide) [a, e) of the chunk into out[i + d0]. */
typedef struct kc_job {
  int src, avg, wide;
  size_t a, e;
  ptrdiff_t d0;
} kc_job;

/* Job q of chunk ch for rank me of nr: 0 when it writes nothing (an
 * allgather in place: the rank's own block). A reduce_scatter keeps the
 * elements of the rank's range [me count, (me + 1) count) of the input,
 * within the part. A fold of more than one rank is wide where kc_wide
 * says; a copy (src >= 0) never is. */
KC_HD int kc_job_at(const cudev_kcall *c, int me, int nr, int ag_inplace, int q,
                    const kc_chunk *ch, kc_job *jb) {
  const int ag = c->coll == CUDEV_KC_ALLGATHER;
  const int rs = c->coll == CUDEV_KC_REDUCE_SCATTER;
  const size_t r0 = (size_t)me * c->count, r1 = r0 + c->count;
  const size_t c0 = ch->c0, lo = ch->lo, hi = ch->hi;
  if (ag && q == me && ag_inplace)
    return 0;
  jb->src = ag ? q : c->coll == CUDEV_KC_BROADCAST ? c->root : -1;
  jb->avg = jb->src < 0 && c->op == BRAID_AVG;
  jb->wide = jb->src < 0 && nr > 1 && kc_wide((int)c->dt, (int)c->op, c->det);
  jb->a = rs && r0 > c0 + lo ? r0 - c0 : lo;
  jb->e = !rs || r1 >= c0 + hi ? hi : r1 > c0 ? r1 - c0 : 0;
  jb->d0 = (ptrdiff_t)c0 + (ag   ? (ptrdiff_t)((size_t)q * c->count)
                            : rs ? -(ptrdiff_t)r0
                                 : 0);
  return 1;
}

/* The ranks a job reads, [*q0, *q1): all nr for a fold, else src alone.
 * A fold starts from rank q0's element and takes the next ranks' in
 * rank order, each as the second operand. */
KC_HD void kc_job_ranks(const kc_job *jb, int nr, int *q0, int *q1) {
  *q0 = jb->src < 0 ? 0 : jb->src;
  *q1 = jb->src < 0 ? nr : jb->src + 1;
}

/* ---- how the ranks' elements fold ------------------------------------- */

KC_HD float kc_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

KC_HD uint32_t kc_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* A narrow element (its bits) widened to float: exact. */
KC_HD float kc_widen(int dt, uint32_t x) {
  switch (dt) {
  case BRAID_FLOAT16:
    return KC_HALF_TO_FLOAT((uint16_t)x);
  case BRAID_BFLOAT16:
    return kc_bits_float(x << 16);
  case BRAID_FLOAT8_E4M3:
    return fp8_to_float((uint8_t)x, 0);
  default:
    return fp8_to_float((uint8_t)x, 1);
  }
}

/* One step of a wide fold: acc op x (op: BRAID_PROD, else a sum), with the
 * NaN rules of dt's element operation: a NaN operand comes out (acc's
 * first), quieted for float16/bfloat16; fp8: device/fp8.h's fp8_float_op. */
KC_HD float kc_wide_op(int dt, int op, float acc, float x) {
  if (dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2)
    return fp8_float_op(op == BRAID_PROD ? FP8_PROD : FP8_SUM, acc, x);
  if (acc != acc)
    return kc_bits_float(kc_float_bits(acc) | 0x400000u);
  if (x != x)
    return kc_bits_float(kc_float_bits(x) | 0x400000u);
  return op == BRAID_PROD ? acc * x : acc + x;
}

/* The end of a wide fold of nr ranks: avg divides in float (a NaN stays
 * as it is), then the result is rounded to dt once; its bits. */
KC_HD uint32_t kc_wide_end(int dt, int avg, int nr, float acc) {
  if (avg && acc == acc)
    acc = acc / (float)nr;
  switch (dt) {
  case BRAID_FLOAT16:
    return KC_FLOAT_TO_HALF(acc);
  case BRAID_BFLOAT16:
    return KC_FLOAT_TO_BF16(acc);
  case BRAID_FLOAT8_E4M3:
    return fp8_from_float(acc, 0);
  default:
    return fp8_from_float(acc, 1);
  }
}

#endif
