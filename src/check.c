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

typedef struct fingerprint {
  int32_t coll, dt, op, root;
  uint64_t count, seq;
} fingerprint;

static void describe(const fingerprint *f, char *buf, size_t len) {
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

/* ---- the compact fingerprint (64 bits) ----------------------------------
 * bit 63: 1 | kind: 7 | dtype: 4 | op: 4 (15: no reduction, 14: barrier) |
 * root mod 4096: 12 (4095: unrooted) | hash of the count: 12 | sequence
 * number mod 2^24: 24 */

#define FP_NOOP 15u
#define FP_BARRIER 14u
#define FP_NOROOT 4095u

static int rooted(sched_coll k) {
  return k == SCHED_BROADCAST || k == SCHED_REDUCE || k == SCHED_GATHER ||
         k == SCHED_SCATTER;
}

static uint64_t count_hash(uint64_t n) {
  return ((n + 1) * 0x9e3779b97f4a7c15ULL) >> 52;
}

uint64_t check_call_fp(const exec_op *op) {
  if (op->coll == SCHED_SEND || op->coll == SCHED_RECV)
    return 0;
  uint64_t o = op->is_barrier            ? FP_BARRIER
               : sched_reduces(op->coll) ? (uint64_t)op->op & 0xfu
                                         : FP_NOOP;
  uint64_t root =
      rooted(op->coll) ? (uint64_t)op->root & 0xfffu : (uint64_t)FP_NOROOT;
  return 1ULL << 63 | ((uint64_t)op->coll & 0x7fu) << 56 |
         ((uint64_t)op->dt & 0xfu) << 52 | o << 48 | root << 36 |
         count_hash(op->count) << 24 | (op->seq & 0xffffffu);
}

void tp_fp_describe(uint64_t fp, char *buf, size_t len) {
  sched_coll k = (sched_coll)((fp >> 56) & 0x7fu);
  unsigned o = (unsigned)(fp >> 48) & 0xfu;
  unsigned root = (unsigned)(fp >> 36) & 0xfffu;
  if (fp == 0) {
    snprintf(buf, len, "a send or receive");
    return;
  }
  if (k >= SCHED_NUM_COLLS) {
    snprintf(buf, len, "an unknown call (fingerprint %016llx)",
             (unsigned long long)fp);
    return;
  }
  int n = snprintf(buf, len, "%s #%llu (%s",
                   o == FP_BARRIER ? "barrier" : sched_coll_name(k),
                   (unsigned long long)(fp & 0xffffffu),
                   braid_dtype_name((braid_dtype)((fp >> 52) & 0xfu)));
  if (n > 0 && (size_t)n < len && o < FP_BARRIER)
    n += snprintf(buf + n, len - (size_t)n, ", %s", braid_op_name((braid_op)o));
  if (n > 0 && (size_t)n < len && root != FP_NOROOT)
    n += snprintf(buf + n, len - (size_t)n, ", root %u", root);
  if (n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ")");
}

void tp_fp_mismatch(uint64_t theirs, uint64_t mine, int peer, char *buf,
                    size_t len) {
  char a[96], b[96];
  tp_fp_describe(theirs, a, sizeof a);
  tp_fp_describe(mine, b, sizeof b);
  int counts = ((theirs ^ mine) >> 24 & 0xfffu) != 0;
  snprintf(buf, len,
           "collective mismatch: rank %d is in %s where this rank is in "
           "%s%s (sequence numbers mod 2^24)",
           peer, a, b, counts ? ", with another count" : "");
}

void tp_fp_told(const tp_mismatch *m, int me, char *buf, size_t len) {
  if (m->by == me) {
    tp_fp_mismatch(m->theirs, m->mine, m->peer, buf, len);
    return;
  }
  char a[96], b[96];
  tp_fp_describe(m->theirs, a, sizeof a);
  tp_fp_describe(m->mine, b, sizeof b);
  snprintf(buf, len,
           "collective mismatch: rank %d is in %s where rank %d is in %s "
           "(found by rank %d, which told every rank; sequence numbers mod "
           "2^24)",
           (int)m->peer, a, (int)m->by, b, (int)m->by);
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
  fingerprint *all = calloc((size_t)c->nranks, sizeof *all);
  if (all == NULL)
    return BRAID_ERR_NOMEM;
  braid_result r = boot_allgather(c->boot, &mine, all, sizeof mine);
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
