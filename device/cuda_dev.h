/*
 * The device layer: what braid needs of CUDA, behind plain C calls, so that
 * the executor, the streams and the transports need no CUDA headers.
 *
 * Built with CUDA (CMake option BRAID_CUDA=AUTO|ON|OFF, AUTO by default), the
 * calls go to the CUDA runtime (linked statically, so libbraid needs no CUDA
 * library at run time and works on machines without a driver or a GPU: then
 * cudev_count() is 0). Built without CUDA, every call reports that.
 *
 * Streams and events are opaque (cudaStream_t / cudaEvent_t as void *).
 * Calls that fail return an error and leave a message for cudev_error(),
 * naming the CUDA call and its error string.
 */
#ifndef BRAID_TRANSPORTS_CUDA_DEV_H
#define BRAID_TRANSPORTS_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

/* "Not yet, ask again": the value the transports call TP_AGAIN
 * (transports/transport.h checks that they agree). */
#define CUDEV_AGAIN (-1)

int cudev_built(void); /* 1 when the library was built with CUDA */
int cudev_count(void); /* visible devices; 0 without CUDA, driver or GPU */
/* The message of the last failed call on this thread. */
const char *cudev_error(void);

/* 1: device (or managed) memory, with *device set; 0: host memory (pageable
 * or pinned); -1: error. Never fails for host pointers in a build without
 * CUDA or without a driver (it answers 0). */
int cudev_is_device(const void *p, int *device);
/* How many of the want bytes from device pointer p on are device memory,
 * following allocations that lie end to end (a VMM range mapped in pieces
 * is one buffer): want when all are, fewer when [p, p + want) runs into
 * memory that no allocation maps (where the GPU would fault), SIZE_MAX
 * when the driver cannot tell. Overruns into a neighbouring allocation are
 * not seen. */
size_t cudev_room(const void *p, size_t want);
braid_result cudev_set_device(int device);
/* This thread's current device; -1 when there is none (or no CUDA). */
int cudev_get_device(void);
/* PCI bus id "0000:07:00.0" of a device. */
braid_result cudev_busid(int device, char *busid, size_t len);

/* Loads braid's kernels on the current device (once per device): a kernel
 * loaded lazily at its first launch may wait for every stream of the
 * device, a stream held at a gate too. */
braid_result cudev_preload(void);

/* Internal streams and events. */
braid_result cudev_stream_create(void **stream); /* non-blocking */
void cudev_stream_destroy(void *stream);
braid_result cudev_stream_sync(void *stream);
/* 1 while `stream` (a user's, NULL: the default stream) is being captured
 * into a CUDA graph, 0 when not, -1 on error. */
int cudev_stream_capturing(void *stream);
braid_result cudev_event_create(void **event);
braid_result cudev_event_record(void *event, void *stream);
/* BRAID_SUCCESS when done, CUDEV_AGAIN while pending, else an error. */
int cudev_event_query(void *event);
void cudev_event_destroy(void *event);

/* Memory. */
braid_result cudev_malloc(void **p, size_t n);
void cudev_free(void *p);
braid_result cudev_host_alloc(void **p, size_t n); /* pinned, mapped */
/* The device's address of cudev_host_alloc'd memory. */
braid_result cudev_host_dptr(void *host, void **dev);
void cudev_host_free(void *p);
/* Asynchronous copy in any direction (cudaMemcpyDefault) on `stream`. */
braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream);

/* Reduction kernels on `stream`, every dtype x op (BRAID_AVG reduces as a
 * sum; cudev_div divides once at the end), with the CPU kernels' results
 * (src/reduce.h: NaN and rounding rules). dst may equal a or b. */
braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream);
/* Reduce and forward in one pass: dst = fwd = a (+) b (fwd: a peer's
 * buffer mapped through IPC, or pinned host memory). */
braid_result cudev_reduce_fwd(void *dst, void *fwd, const void *a,
                              const void *b, size_t n, braid_dtype dt,
                              braid_op op, void *stream);
braid_result cudev_div(void *buf, size_t n, braid_dtype dt, int divisor,
                       void *stream);
/* The pre-multiplied sum's local step on `stream`: dst[i] = src[i] x
 * scalar, one element of dt rounded once as src/reduce.c's red_premul
 * rounds it (dst may equal src). scalar_on_device 0: host memory, read
 * now; 1: device memory, read on the GPU when the kernel runs. The dtypes
 * of cudev_reduce. */
braid_result cudev_scale(void *dst, const void *src, size_t n, braid_dtype dt,
                         const void *scalar, int scalar_on_device,
                         void *stream);

/* Collectives in one kernel (src/exec_kernel.c): allreduce, reduce,
 * broadcast, allgather and reduce_scatter of up to CUDEV_KA_RANKS ranks of
 * one host, whose areas (made with cudev_malloc, CUDEV_KA_AREA(slot) bytes,
 * zeroed, mapped into every rank through CUDA IPC) hold each rank's flags
 * and two input slots.
 *
 * Every rank's input is `cudev_kc_elems` elements (reduce_scatter: nranks x
 * count; the others: count) and goes through the slots in chunks of `slot`
 * bytes (CUDEV_KA_CHUNKS), chunk j numbered seq + j (numbers increase from 1
 * in issue order, the same on every rank). Each chunk is cut into one part
 * per block (cudev_ka_part; cudev_ka_grid blocks, the same on every rank),
 * and block b of rank r, for each chunk s in turn: copies its part of the
 * input into slot s % 2 of r's area (broadcast: the root only), raises its
 * "ready" flag (b, r) in every peer's area to s (CUDEV_KA_FLAG), waits until
 * every peer's ready flag (b, q) in r's area is at least s (and, at s, of
 * the same call), makes its part of the output from the ranks' parts, and
 * raises its "done" flag (b, r) in every peer's area to s. The output:
 *  - allreduce: the ranks' parts folded in rank order (the same order on
 *    every rank, so the results are bitwise identical; BRAID_AVG divides
 *    once at the end); reduce: the same, at the root only;
 *  - reduce_scatter: the same for the elements of r's range of the input,
 *    [r x count, (r + 1) x count), into out from its start;
 *  - broadcast: the root's part; allgather: every rank q's part, at
 *    q x count in out.
 * A block rewrites its part of a slot two chunks later, after every peer's
 * block b raised its ready flag for the chunk between, which it does only
 * once done with the part; so block b's part must be where it was two chunks
 * before, and every chunk of a call is cut at the same points
 * (cudev_ka_part). An area's owner frees it once the done flags show its
 * last chunk.
 *
 * A wait that sees *abort nonzero, or *status set by another block, or
 * lasts timeout_ns, ends the call and stores in *status (if it is 0) which
 * chunk, why and for which peer (CUDEV_KA_STATUS); every later call then
 * ends at once. Chunks before the failed one have written their part of
 * out. */
#define CUDEV_KA_RANKS 8
/* the most blocks a call may take (the flags' layout); a communicator's
 * calls take at most BRAID_CUDA_KERNEL_BLOCKS of them */
#define CUDEV_KA_BLOCKS 128
#define CUDEV_KA_THREADS 512
/* flags: uint64_t, 16 bytes apart, ready then done */
#define CUDEV_KA_FLAGS (2 * 16 * CUDEV_KA_BLOCKS * CUDEV_KA_RANKS)
#define CUDEV_KA_READY(b, q) (16 * ((size_t)(b)*CUDEV_KA_RANKS + (size_t)(q)))
#define CUDEV_KA_DONE(b, q) (CUDEV_KA_FLAGS / 2 + CUDEV_KA_READY(b, q))
#define CUDEV_KA_AREA(slot) (CUDEV_KA_FLAGS + 2 * (size_t)(slot))
/* chunks of a call of `bytes`; elements of each block's part of a chunk
 * of cn elements, a multiple of v (the elements in 16 bytes) so that parts
 * start 16-byte aligned */
#define CUDEV_KA_CHUNKS(bytes, slot) (((bytes) + (slot)-1) / (slot))
#define CUDEV_KA_PART(cn, nb, v) (((cn) + (nb)-1) / (nb) + (v)-1) / (v) * (v)
#ifdef __CUDACC__
#define CUDEV_HD __host__ __device__
#else
#define CUDEV_HD
#endif
/* Block b's part [*lo, *hi) (elements) of chunk j of a call whose input is
 * nin elements, in chunks of ce, over nb blocks, parts a multiple of v: the
 * first chunk's cuts, clipped to the chunk. Not each chunk's own cuts: a
 * last, shorter chunk would then give block b elements that another block
 * of a slower rank may still be reading two chunks before. */
static inline CUDEV_HD void cudev_ka_part(size_t nin, size_t ce, size_t nb,
                                          size_t v, size_t j, size_t b,
                                          size_t *lo, size_t *hi) {
  size_t c0 = j * ce, cn = nin - c0 < ce ? nin - c0 : ce;
  size_t pe = CUDEV_KA_PART(nin < ce ? nin : ce, nb, v);
  *lo = b * pe < cn ? b * pe : cn;
  *hi = *lo + pe < cn ? *lo + pe : cn;
}
#define CUDEV_KA_TIMEOUT 1  /* a peer did not raise its flag in time */
#define CUDEV_KA_ABORTED 2  /* *abort was set, or another block failed */
#define CUDEV_KA_MISMATCH 3 /* a peer's call differs (collective, count...) */
/* A ready flag: the chunk's number and a fingerprint of the call (its
 * collective, root, count, dtype and op), so that a rank whose peer runs
 * another call (a user's mismatch, or calls taken in another order) stops
 * instead of using the wrong data. Done flags hold the chunk's number
 * alone. */
#define CUDEV_KA_FP(n, dt, op, coll, root)                                     \
  ((((uint64_t)(n) ^ ((uint64_t)(n) >> 16) ^ ((uint64_t)(n) >> 32)) *          \
        0x9e37u +                                                              \
    (uint64_t)(dt)*0x3bu + (uint64_t)(op) + (uint64_t)(coll)*0x1f1u +          \
    (uint64_t)(root)*0x2c9u) &                                                 \
   0xffffu)
#define CUDEV_KA_FLAG(seq, fp) ((uint64_t)(seq) << 16 | (uint64_t)(fp))
/* status = why << 56 | peer << 48 | low 48 bits of the chunk's number */
#define CUDEV_KA_STATUS(why, peer, seq)                                        \
  ((uint64_t)(why) << 56 | (uint64_t)(peer) << 48 |                            \
   ((uint64_t)(seq)&0xffffffffffffull))
/* blocks of a call of `bytes`: one per 64 KiB of its first chunk, at most
 * `most` (cudev_ka.blocks) */
static inline int cudev_ka_grid(size_t bytes, size_t slot, int most) {
  size_t first = bytes < slot ? bytes : slot, nb = (first + 65535) / 65536;
  if (most < 1 || most > CUDEV_KA_BLOCKS)
    most = CUDEV_KA_BLOCKS;
  return nb < 1 ? 1 : nb > (size_t)most ? most : (int)nb;
}
typedef struct cudev_ka {
  int rank, nranks;
  void *area[CUDEV_KA_RANKS]; /* every rank's area as mapped here */
  size_t slot;                /* bytes of a slot, a multiple of 256 */
  /* the most blocks of a call, the same on every rank: every rank's blocks
   * must be resident at once on the GPUs they share (block b of one rank
   * waits for block b of the others), so exk_setup keeps them together to
   * at most half of what a GPU holds (cudev_kernel_coll_room) */
  int blocks;
  uint64_t *status; /* mapped pinned host memory (cudev_host_dptr) */
  uint32_t *abort;  /* the same */
  uint64_t timeout_ns;
} cudev_ka;
/* The collectives (CUDEV_KC_*) and one call of one of them. */
enum {
  CUDEV_KC_ALLREDUCE,
  CUDEV_KC_REDUCE,
  CUDEV_KC_BROADCAST,
  CUDEV_KC_ALLGATHER,
  CUDEV_KC_REDUCE_SCATTER,
  CUDEV_KC_NUM
};
typedef struct cudev_kcall {
  int coll, root; /* root: reduce and broadcast */
  void *out;      /* unused: reduce off the root */
  const void *in; /* unused: broadcast off the root */
  size_t count;   /* the collective's count (allgather: a rank's input;
                     reduce_scatter: a rank's output) */
  braid_dtype dt;
  braid_op op; /* reductions */
  /* BRAID_DETERMINISTIC: every fold step rounds to dt, as on the other
   * paths (else float16, bfloat16 and fp8 sums fold in float and round
   * once: device/kcoll_chunk.h, kc_wide) */
  int det;
} cudev_kcall;
/* Whether a collective folds the ranks' inputs with its op; whether it has
 * a root. */
static inline int cudev_kc_reduces(int coll) {
  return coll == CUDEV_KC_ALLREDUCE || coll == CUDEV_KC_REDUCE ||
         coll == CUDEV_KC_REDUCE_SCATTER;
}
static inline int cudev_kc_rooted(int coll) {
  return coll == CUDEV_KC_REDUCE || coll == CUDEV_KC_BROADCAST;
}
/* Elements of a rank's input: what goes through the slots. */
static inline size_t cudev_kc_elems(const cudev_kcall *c, int nranks) {
  return c->coll == CUDEV_KC_REDUCE_SCATTER ? c->count * (size_t)nranks
                                            : c->count;
}
/* Whether the device's kernels take dtype dt with op (BRAID_SUM for a call
 * that only moves data): the dtypes up to float64 and the 8-bit floats,
 * the ops up to avg. int16, bool and the bitwise ops have none
 * (docs/CUDA.md); src/api.c refuses their reductions on device buffers and
 * moves their data as bytes. dt and op must be in range. */
static inline int cudev_has_kernel(braid_dtype dt, braid_op op) {
  int fp8 = dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
  return (dt <= BRAID_FLOAT64 || fp8) && op <= BRAID_AVG;
}
/* 1 when k and c make a call the kernel can run (a known collective,
 * dtype, op where it reduces, root, and ranks and slots in range). */
static inline int cudev_kc_valid(const cudev_ka *k, const cudev_kcall *c) {
  return k->nranks >= 1 && k->nranks <= CUDEV_KA_RANKS && k->rank >= 0 &&
         k->rank < k->nranks && k->slot > 0 && k->slot % 256 == 0 &&
         c->coll >= 0 && c->coll < CUDEV_KC_NUM &&
         (unsigned)c->dt < BRAID_NUM_DTYPES &&
         (!cudev_kc_reduces(c->coll) || (unsigned)c->op < BRAID_NUM_OPS) &&
         (!cudev_kc_rooted(c->coll) || (c->root >= 0 && c->root < k->nranks));
}
/* The fingerprint of a call's ready flags: its op only where it reduces,
 * its root only where it has one. */
static inline uint64_t cudev_kc_fp(const cudev_kcall *c) {
  return CUDEV_KA_FP(c->count, c->dt, cudev_kc_reduces(c->coll) ? c->op : 0,
                     c->coll, cudev_kc_rooted(c->coll) ? c->root : 0);
}
/* How many blocks of the collective kernel the current device holds at
 * once (SMs x the fewest resident per SM of any of its dtypes and ops),
 * and its SMs. */
braid_result cudev_kernel_coll_room(int *blocks, int *sms);
/* The call's first chunk is number seq. */
braid_result cudev_kernel_coll(const cudev_ka *k, uint64_t seq,
                               const cudev_kcall *call, void *stream);
/* Makes `stream` wait for `event` (recorded on another stream). */
braid_result cudev_stream_wait(void *stream, void *event);

/* CUDA IPC: a handle (64 bytes) for a cudaMalloc'd base pointer, and its
 * mapping in another process (same or other GPU of the host). */
#define CUDEV_IPC_BYTES 64
braid_result cudev_ipc_get(void *base, void *handle);
braid_result cudev_ipc_open(const void *handle, void **base);
void cudev_ipc_close(void *base);

/* Stream gates: how a call on a CUDA stream is stream-ordered. The gate
 * enqueues on the user's stream a marker that says "everything before has
 * run" and then holds the stream until braid releases it, without holding a
 * CPU thread. */
typedef struct cudev_gate cudev_gate;
braid_result cudev_gate_new(void *user_stream, cudev_gate **g);
/* Releases the last gate and frees g, its words going back to a pool
 * (never to cudaFreeHost, which would wait for the whole device): 1; or 0
 * when the stream has not reached its last gate yet (work issued before it
 * still runs, or never ends): the stream will still write the gate's words,
 * so g stays as it is, to be freed again later. Waits for nothing. */
int cudev_gate_free(cudev_gate *g);
/* Enqueues gate number `seq` (increasing) on the user stream. */
braid_result cudev_gate_enqueue(cudev_gate *g, uint32_t seq);
/* 1 when the user stream reached gate seq, 0 not yet. */
int cudev_gate_reached(cudev_gate *g, uint32_t seq);
/* Lets the user stream pass gate seq. */
void cudev_gate_release(cudev_gate *g, uint32_t seq);

#endif
