/*
 * The verifier: executes a schedule symbolically. Every chunk carries the set
 * of (rank, input chunk) contributions it holds; at the end every rank must
 * hold exactly what the collective promises. Also checks that every message
 * is matched (same peer, same chunk size, same order on each channel) and that
 * the schedule cannot deadlock when each connection buffers `slots` messages.
 */
#ifndef BRAID_COLLECTIVES_VERIFY_H
#define BRAID_COLLECTIVES_VERIFY_H

#include <stddef.h>

#include "schedule.h"

/* Returns 0 when the schedule is correct, else -1 with a message in err that
 * names the rank, channel, step and chunk that go wrong. `inplace` checks the
 * collective's in-place aliasing (NCCL conventions) as well. */
int verify_sched(const sched *s, int inplace, int slots, char *err,
                 size_t errlen);

#endif
