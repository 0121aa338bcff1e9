/*
 * Call fingerprints.
 *
 * Always: every collective's messages carry a compact fingerprint of the
 * call (check_call_fp), which the receiving transport compares with its own
 * call's (shm, tcp): a rank in another call, or in the same call with
 * another op, dtype, root or count, is found at the first message instead
 * of returning wrong data.
 *
 * A rank that breaks on such a mismatch tells every other rank at once
 * (tp_ops.tell_mismatch: a word in each shm peer's segment, a frame on each
 * tcp peer's control connection), so that their pending and later calls
 * fail with BRAID_ERR_MISMATCH naming both calls and the rank that found
 * it, instead of waiting for the timeout.
 *
 * BRAID_CHECK=1: before each collective, ranks compare its full fingerprint
 * (kind, count, dtype, op, root, sequence number) over the bootstrap and
 * report a mismatch by rank instead of hanging or corrupting data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/comm.h"
#include "src/log.h"
#include "transports/call_fp.h"

typedef struct fingerprint {
  int32_t coll, dt, op, root;
  uint64_t count, seq;
} fingerprint;

/* The kind an alltoallv's fingerprint gives (its sends and receives are no
 * sched_coll of their own); its count is each rank's own, so left out. */
#define FP_ALLTOALLV ((int32_t)SCHED_NUM_COLLS)
/* A barrier's (made as a one-byte allreduce, but called as a barrier). */
#define FP_BARRIER ((int32_t)SCHED_NUM_COLLS + 1)

static void describe(const fingerprint *f, char *buf, size_t len) {
  if (f->coll == FP_ALLTOALLV) {
    snprintf(buf, len, "alltoallv #%llu (%s)", (unsigned long long)f->seq,
             braid_dtype_name((braid_dtype)f->dt));
    return;
  }
  if (f->coll == FP_BARRIER) {
    snprintf(buf, len, "barrier #%llu", (unsigned long long)f->seq);
    return;
  }
  int reduces = sched_reduces((sched_coll)f->coll);
  int rooted = f->coll == SCHED_BROADCAST || f->coll == SCHED_REDUCE ||
               f->coll == SCHED_GATHER || f->coll == SCHED_SCATTER;
  int n = snprintf(buf, len, "%s #%llu (count %llu, %s",
                   sched_coll_name((sched_coll)f->coll),
                   (unsigned long long)f->seq, (unsigned long long)f->count,
                   braid_dtype_name((braid_dtype)f->dt));
  if (n > 0 && (size_t)n < len && reduces)
    n += snprintf(buf + n, len - (size_t)n, ", %s",
                  braid_op_name((braid_op)f->op));
  if (n > 0 && (size_t)n < len && rooted)
    n += snprintf(buf + n, len - (size_t)n, ", root %d", f->root);
  if (n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ")");
}

/* ---- the compact fingerprint (transports/call_fp.h) ------------------- */

_Static_assert(TP_FP_ALLREDUCE == (int)SCHED_ALLREDUCE &&
                   TP_FP_BROADCAST == (int)SCHED_BROADCAST &&
                   TP_FP_REDUCE == (int)SCHED_REDUCE &&
                   TP_FP_ALLGATHER == (int)SCHED_ALLGATHER &&
                   TP_FP_REDUCE_SCATTER == (int)SCHED_REDUCE_SCATTER &&
                   TP_FP_GATHER == (int)SCHED_GATHER &&
                   TP_FP_SCATTER == (int)SCHED_SCATTER &&
                   TP_FP_ALLTOALL == (int)SCHED_ALLTOALL,
               "a fingerprint's kind is the call's sched_coll");

static int rooted(sched_coll k) {
  return k == SCHED_BROADCAST || k == SCHED_REDUCE || k == SCHED_GATHER ||
         k == SCHED_SCATTER;
}

uint64_t check_call_fp(const exec_op *op) {
  if (op->coll == SCHED_SEND || op->coll == SCHED_RECV)
    return 0;
  unsigned o = op->is_barrier            ? TP_FP_BARRIER
               : sched_reduces(op->coll) ? (unsigned)op->op & 0xfu
                                         : TP_FP_NOOP;
  unsigned root = rooted(op->coll) ? (unsigned)op->root & 0xfffu : TP_FP_NOROOT;
  return tp_fp_make((unsigned)op->coll, (unsigned)op->dt, o, root, op->count,
                    op->seq);
}

void check_tell_mismatch(braid_comm *c, const tp_mismatch *m) {
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->tell_mismatch != NULL)
      c->tp[i]->tell_mismatch(c->tp_state[i], m);
  INFO(LOG_COLL, "rank %d told every rank of the mismatch with rank %d",
       c->rank, (int)m->peer);
}

void check_broke(braid_comm *c) {
  for (int i = 0; i < c->ntp; i++) {
    tp_mismatch m;
    if (c->tp[i]->mismatch != NULL && c->tp[i]->mismatch(c->tp_state[i], &m) &&
        m.by == c->rank) {
      check_tell_mismatch(c, &m);
      return;
    }
  }
}

braid_result check_fingerprint(braid_comm *c, const exec_op *op) {
  fingerprint mine;
  memset(&mine, 0, sizeof mine);
  mine.coll = (int32_t)op->coll;
  mine.dt = (int32_t)op->dt;
  mine.op = sched_reduces(op->coll) ? (int32_t)op->op : -1;
  mine.root = (op->coll == SCHED_BROADCAST || op->coll == SCHED_REDUCE ||
               op->coll == SCHED_GATHER || op->coll == SCHED_SCATTER)
                  ? op->root
                  : -1;
  mine.count = op->count;
  mine.seq = op->seq;
  if (op->a2av_call) {
    mine.coll = FP_ALLTOALLV;
    mine.op = mine.root = -1;
    mine.count = 0;
  } else if (op->is_barrier) {
    mine.coll = FP_BARRIER;
    mine.dt = mine.op = mine.root = -1;
    mine.count = 0;
  }
  fingerprint *all = calloc((size_t)c->nranks, sizeof *all);
  if (all == NULL)
    return BRAID_ERR_NOMEM;
  braid_result r = boot_allgather(c->boot, &mine, all, sizeof mine);
  if (r == BRAID_ERR_MISMATCH) { /* a rank is in another exchange */
    char a[160];
    describe(&mine, a, sizeof a);
    free(all);
    r = comm_fail(c, r,
                  "BRAID_CHECK: collective mismatch: rank %d called %s, and "
                  "a rank is in another call (one that is no collective, or "
                  "it skipped this one): %s",
                  c->rank, a, err_msg());
    WARN(LOG_COLL, "%s", err_msg());
    return r;
  }
  if (r != BRAID_SUCCESS) {
    free(all);
    return comm_fail(c, r,
                     "BRAID_CHECK: exchanging fingerprints of %s #%llu: %s",
                     op->name, (unsigned long long)op->seq, err_msg());
  }
  for (int p = 0; p < c->nranks; p++) {
    if (memcmp(&all[p], &all[0], sizeof mine) != 0) {
      char a[160], b[160];
      describe(&all[0], a, sizeof a);
      describe(&all[p], b, sizeof b);
      free(all);
      braid_result m = comm_fail(c, BRAID_ERR_MISMATCH,
                                 "BRAID_CHECK: collective mismatch: rank 0 "
                                 "called %s, rank %d called %s",
                                 a, p, b);
      WARN(LOG_COLL, "%s", err_msg());
      return m;
    }
  }
  free(all);
  return BRAID_SUCCESS;
}
