/*
 * The call fingerprint every collective's messages carry (64 bits): what
 * the transports compare on each message, and the words that name a call
 * in a mismatch. src/check.c makes a call's fingerprint from its exec_op
 * (check_call_fp); the transports carry it (shm: in the slot header; tcp:
 * the header's second word; ofi: remote CQ data; ibverbs: a word in each
 * slot), compare it, and describe a mismatch with these functions.
 *
 * Layout: bit 63: 1 | kind: 7 | dtype: 4 | op: 4 (TP_FP_NOOP: no reduction,
 * TP_FP_BARRIER: a barrier) | root mod 4096: 12 (TP_FP_NOROOT: unrooted) |
 * hash of the count: 12 | sequence number mod 2^24: 24. 0: no fingerprint
 * (send/recv).
 */
#ifndef BRAID_TRANSPORTS_CALL_FP_H
#define BRAID_TRANSPORTS_CALL_FP_H

#include <stddef.h>
#include <stdint.h>

#include "transports/transport.h"

/* The collectives a fingerprint names, in the order of collectives/
 * schedule.h's sched_coll (src/check.c asserts that they agree). */
enum tp_fp_kind {
  TP_FP_ALLREDUCE = 0,
  TP_FP_BROADCAST,
  TP_FP_REDUCE,
  TP_FP_ALLGATHER,
  TP_FP_REDUCE_SCATTER,
  TP_FP_GATHER,
  TP_FP_SCATTER,
  TP_FP_ALLTOALL,
  TP_FP_NUM_KINDS
};
/* Not a collective's fingerprint: an alltoallv's count message that
 * differs from what its receiver expects (src/executor.c), told to every
 * rank as a mismatch whose `theirs` and `mine` carry the two counts. */
#define TP_FP_A2AV_COUNT 0x7eu
#define TP_FP_NOOP 15u
#define TP_FP_BARRIER 14u
#define TP_FP_NOROOT 4095u

/* The fingerprint of call number seq of `kind` (a tp_fp_kind) with dtype
 * dt, op (or TP_FP_NOOP, TP_FP_BARRIER), root (or TP_FP_NOROOT) and count
 * elements. */
uint64_t tp_fp_make(unsigned kind, unsigned dt, unsigned op, unsigned root,
                    uint64_t count, uint64_t seq);
/* The stand-in fingerprint of an alltoallv count (mod 2^56). */
uint64_t tp_fp_a2av_count(uint64_t count);
/* The call of fingerprint fp in words: "reduce #2 (float32, sum, root 1)". */
void tp_fp_describe(uint64_t fp, char *buf, size_t len);
/* The error text of a message of call `theirs` from `peer` met by this
 * rank's call `mine`. */
void tp_fp_mismatch(uint64_t theirs, uint64_t mine, int peer, char *buf,
                    size_t len);
/* A mismatch that rank m->by found, in words for rank `me` (which found it,
 * or was told). */
void tp_fp_told(const tp_mismatch *m, int me, char *buf, size_t len);

#endif
