/*
 * The verifier's internals (collectives/verify.c, verify_check.c): the
 * simulation state and the chunk/contribution helpers both files share.
 */
#ifndef BRAID_COLLECTIVES_VERIFY_INT_H
#define BRAID_COLLECTIVES_VERIFY_INT_H

#include <stdint.h>
#include <stdio.h>

#include "src/log.h"
#include "verify.h"

typedef struct vmsg {
  int j;         /* chunk position within its block */
  uint64_t hash; /* expression hash */
  int from_step; /* sender's step, for messages about leftovers */
  uint32_t from_chunk;
  uint8_t from_buf;
  int next_free;
} vmsg;

typedef struct vstate {
  int pc, k, phase;
  int p2p_count; /* p2p: messages sent to / received from the virtual peer */
} vstate;

typedef struct vctx {
  const sched *s;
  int n, K, nch, slots, inplace;
  int in_n, out_n, scr_n, ncells; /* chunks per rank */
  int ub;                         /* blocks of the contribution universe */
  int W;                          /* 64-bit words per set */
  int c;                          /* channel being simulated */
  /* cells: ncells per rank */
  uint64_t *bits;
  uint64_t *hash;
  uint8_t *written;
  int *wstep;
  /* messages */
  vmsg *msgs;
  uint64_t *mbits;
  int mcap, mfree;
  /* queues: n * n rings of `slots` message ids */
  int *q;
  int *qhead, *qlen;
  int *nsent; /* messages sent per (sender, receiver) on this channel */
  vstate *st;
  braid_result rc; /* the first failure's result */
  uint64_t *tmp;
} vctx;

#define STEPFMT "rank %d channel %d step %d (%s)"

/* Errors and step descriptions (verify.c). verify_fail records what went
 * wrong for the calling thread (ERR, at the caller's line), keeps the result
 * in v->rc and returns -1, so that the checks keep their counts and their
 * "progressed, blocked, failed" answers: the schedule is invalid
 * (BRAID_ERR_INVALID_ARG); verify_fail_r names another result. */
int verify_fail_at(const char *file, int line, vctx *v, braid_result r,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define verify_fail(v, ...)                                                    \
  verify_fail_at(__FILE__, __LINE__, (v), BRAID_ERR_INVALID_ARG, __VA_ARGS__)
#define verify_fail_r(v, r, ...)                                               \
  verify_fail_at(__FILE__, __LINE__, (v), (r), __VA_ARGS__)
void verify_step_str(char *b, size_t n, const sched_step *st, int k);

/* Checks (verify_check.c). */
int verify_check_static(vctx *v, int r);
int verify_report_stuck(vctx *v);
int verify_check_final(vctx *v);

/* ---- geometry ---- */

static inline int buf_chunks(const vctx *v, int buf) {
  switch (buf) {
  case SCHED_BUF_IN:
    return v->in_n;
  case SCHED_BUF_OUT:
    return v->out_n;
  case SCHED_BUF_SCRATCH:
    return v->scr_n;
  default:
    return 0;
  }
}

/* In-place aliasing: the in chunk that out chunk i of `rank` shares storage
 * with, or -1. */
static inline int out_alias(const vctx *v, int rank, int i) {
  if (!v->inplace)
    return -1;
  const sched *s = v->s;
  int K = v->K;
  switch (s->coll) {
  case SCHED_ALLREDUCE:
  case SCHED_BROADCAST:
  case SCHED_REDUCE:
  case SCHED_ALLTOALL:
    return i;
  case SCHED_ALLGATHER:
    return (i / K == rank) ? i % K : -1;
  case SCHED_GATHER:
    return (rank == s->root && i / K == rank) ? i % K : -1;
  case SCHED_REDUCE_SCATTER:
    return rank * K + i;
  case SCHED_SCATTER:
    return rank == s->root ? rank * K + i : -1;
  default:
    return -1;
  }
}

static inline int cell_of(const vctx *v, int rank, int buf, int i) {
  int base = rank * v->ncells;
  switch (buf) {
  case SCHED_BUF_IN:
    return base + i;
  case SCHED_BUF_OUT: {
    int a = out_alias(v, rank, i);
    return base + (a >= 0 ? a : v->in_n + i);
  }
  default:
    return base + v->in_n + v->out_n + i;
  }
}

static inline uint64_t *cbits(vctx *v, int cell) {
  return v->bits + (size_t)cell * (size_t)v->W;
}

static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
  return mix64(lo * 0x100000001b3ull + mix64(hi));
}

/* A chunk at position j of its block only ever holds contributions from
 * input chunks at position j (data moves between equal positions only), so
 * a set needs one bit per (rank, input block); j is the holder's. */
static inline int contrib_bit(const vctx *v, int rank, int chunk) {
  return rank * v->ub + chunk / v->K;
}

static inline uint64_t leaf_hash(const vctx *v, int rank, int chunk) {
  return mix64((uint64_t)rank * (uint64_t)v->ub * (uint64_t)v->K +
               (uint64_t)chunk + 1);
}

/* Names contribution `bit` held by a chunk at position j. */
static inline void contrib_str(const vctx *v, int bit, int j, char *b,
                               size_t n) {
  snprintf(b, n, "(rank %d, chunk %d)", bit / v->ub, (bit % v->ub) * v->K + j);
}

static inline int first_common(const vctx *v, const uint64_t *a,
                               const uint64_t *b) {
  for (int w = 0; w < v->W; w++) {
    uint64_t x = a[w] & b[w];
    if (x)
      return w * 64 + __builtin_ctzll(x);
  }
  return -1;
}

static int qidx(const vctx *v, int from, int to) { return from * v->n + to; }

static void set_bit(uint64_t *b, int bit) { b[bit / 64] |= 1ull << (bit % 64); }

#endif
