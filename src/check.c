/*
 * BRAID_CHECK=1: before each collective, ranks compare its fingerprint
 * (kind, count, dtype, op, root, sequence number) over the bootstrap and
 * report a mismatch by rank instead of hanging or corrupting data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    comm_set_error(c, "BRAID_CHECK: exchanging fingerprints of %s #%llu: %s",
                   op->name, (unsigned long long)op->seq,
                   boot_last_error(c->boot));
    free(all);
    return r;
  }
  for (int p = 0; p < c->nranks; p++) {
    if (memcmp(&all[p], &all[0], sizeof mine) != 0) {
      char a[160], b[160];
      describe(&all[0], a, sizeof a);
      describe(&all[p], b, sizeof b);
      comm_set_error(c,
                     "BRAID_CHECK: collective mismatch: rank 0 called %s, "
                     "rank %d called %s",
                     a, p, b);
      WARN(LOG_COLL, "%s", c->last_error);
      free(all);
      return BRAID_ERR_MISMATCH;
    }
  }
  free(all);
  return BRAID_SUCCESS;
}
