/*
 * Helpers shared by the generators (collectives/<algo>.c). Internal to
 * collectives/.
 */
#ifndef BRAID_COLLECTIVES_GEN_UTIL_H
#define BRAID_COLLECTIVES_GEN_UTIL_H

#include "generators.h"

/* Symmetric exchanges (both partners send, then receive) are cut into bursts
 * of at most GEN_BURST chunks, so that a runtime buffering at least GEN_BURST
 * messages per connection cannot deadlock on them (BRAID_NSLOTS >= 2). */
#define GEN_BURST 2
/* Upper bounds the generators accept. */
#define GEN_MAX_RANKS 65536
#define GEN_MAX_CHANNELS 64

/* Validates p for `coll_mask` (bits of supported collectives); returns 0 when
 * usable. */
int gen_check(const gen_params *p, uint32_t coll_mask);

/* Chunk range shorthands. */
static inline sched_chunks gen_in(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_IN, i, n);
}
static inline sched_chunks gen_out(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_OUT, i, n);
}
static inline sched_chunks gen_scr(uint32_t i, uint32_t n) {
  return sched_ck(SCHED_BUF_SCRATCH, i, n);
}

/* Pairwise exchange with `peer`: sends `snd` and receives into `rcv`
 * (RECV, or RECV_REDUCE with local operand `rsrc` when rsrc.buf != NONE),
 * interleaved in bursts of GEN_BURST chunks. Either range may have count 0
 * (then buf must be SCHED_BUF_NONE or count 0). Returns 0 or -1. */
int gen_exchange(sched_channel *c, int peer, sched_chunks snd, sched_chunks rcv,
                 sched_chunks rsrc);

#endif
