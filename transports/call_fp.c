/* The call fingerprint: its layout and its words (call_fp.h). */
#include "transports/call_fp.h"

#include <stdio.h>

#include "braid.h"

static const char *const kind_names[TP_FP_NUM_KINDS] = {
    "allreduce",      "broadcast", "reduce",  "allgather",
    "reduce_scatter", "gather",    "scatter", "alltoall"};

static uint64_t count_hash(uint64_t n) {
  return ((n + 1) * 0x9e3779b97f4a7c15ULL) >> 52;
}

uint64_t tp_fp_make(unsigned kind, unsigned dt, unsigned op, unsigned root,
                    uint64_t count, uint64_t seq) {
  return 1ULL << 63 | ((uint64_t)kind & 0x7fu) << 56 |
         ((uint64_t)dt & 0xfu) << 52 | ((uint64_t)op & 0xfu) << 48 |
         ((uint64_t)root & 0xfffu) << 36 | count_hash(count) << 24 |
         (seq & 0xffffffu);
}

#define A2AV_COUNT_MASK ((1ULL << 56) - 1)

uint64_t tp_fp_a2av_count(uint64_t count) {
  return 1ULL << 63 | (uint64_t)TP_FP_A2AV_COUNT << 56 |
         (count & A2AV_COUNT_MASK);
}

static int is_a2av(uint64_t fp) {
  return fp >> 63 && ((unsigned)(fp >> 56) & 0x7fu) == TP_FP_A2AV_COUNT;
}

void tp_fp_describe(uint64_t fp, char *buf, size_t len) {
  unsigned k = (unsigned)(fp >> 56) & 0x7fu;
  unsigned o = (unsigned)(fp >> 48) & 0xfu;
  unsigned root = (unsigned)(fp >> 36) & 0xfffu;
  if (fp == 0) {
    snprintf(buf, len, "a send or receive");
    return;
  }
  if (is_a2av(fp)) {
    snprintf(buf, len, "alltoallv (%llu elements between the two)",
             (unsigned long long)(fp & A2AV_COUNT_MASK));
    return;
  }
  if (k >= TP_FP_NUM_KINDS) {
    snprintf(buf, len, "an unknown call (fingerprint %016llx)",
             (unsigned long long)fp);
    return;
  }
  int n = snprintf(buf, len, "%s #%llu (%s",
                   o == TP_FP_BARRIER ? "barrier" : kind_names[k],
                   (unsigned long long)(fp & 0xffffffu),
                   braid_dtype_name((braid_dtype)((fp >> 52) & 0xfu)));
  if (n > 0 && (size_t)n < len && o < TP_FP_BARRIER)
    n += snprintf(buf + n, len - (size_t)n, ", %s", braid_op_name((braid_op)o));
  if (n > 0 && (size_t)n < len && root != TP_FP_NOROOT)
    n += snprintf(buf + n, len - (size_t)n, ", root %u", root);
  if (n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ")");
}

/* 1 if the two calls' counts differ (their hashes do) */
static int other_count(uint64_t a, uint64_t b) {
  return ((a ^ b) >> 24 & 0xfffu) != 0;
}

void tp_fp_mismatch(uint64_t theirs, uint64_t mine, int peer, char *buf,
                    size_t len) {
  char a[96], b[96];
  tp_fp_describe(theirs, a, sizeof a);
  tp_fp_describe(mine, b, sizeof b);
  int counts = other_count(theirs, mine);
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
  if (is_a2av(m->theirs) && is_a2av(m->mine)) {
    snprintf(buf, len,
             "collective mismatch: in alltoallv rank %d sends %llu elements "
             "to rank %d, which expects %llu (found by rank %d, which told "
             "every rank)",
             (int)m->peer, (unsigned long long)(m->theirs & A2AV_COUNT_MASK),
             (int)m->by, (unsigned long long)(m->mine & A2AV_COUNT_MASK),
             (int)m->by);
    return;
  }
  char a[96], b[96];
  tp_fp_describe(m->theirs, a, sizeof a);
  tp_fp_describe(m->mine, b, sizeof b);
  snprintf(buf, len,
           "collective mismatch: rank %d is in %s where rank %d is in %s%s "
           "(found by rank %d, which told every rank; sequence numbers mod "
           "2^24)",
           (int)m->peer, a, (int)m->by, b,
           other_count(m->theirs, m->mine) ? ", with another count" : "",
           (int)m->by);
}
