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

/* Working memory that verify_sched_ws keeps from call to call: a caller that
 * verifies many schedules (a schedule file, a sweep of rank counts) saves
 * each call's allocations and the faulting-in of their pages, which took
 * about half of the time of checking a small schedule. NULL when out of
 * memory; verify_ws_free(NULL) does nothing. */
typedef struct verify_ws verify_ws;
verify_ws *verify_ws_new(void);
void verify_ws_free(verify_ws *w);
/* verify_sched with working memory from w (w == NULL: its own). */
int verify_sched_ws(const sched *s, int inplace, int slots, verify_ws *w,
                    char *err, size_t errlen);

/* Does every reduction of s give the serial fold x0 op x1 op .. op x(n-1)
 * of the ranks' inputs, left to right in rank order, in every chunk the
 * collective promises (allreduce: every rank's output; reduce: the root's;
 * reduce_scatter: each rank's block)? Then the results are the same bits
 * whatever the channels and slicing, and those of a one-process loop
 * (BRAID_DETERMINISTIC, GEN_RANK_ORDER). An operand order counts: a op b
 * must extend the fold of ranks 0..k-1 (a) with rank k's input (b). Run
 * verify_sched first: this checks the order only. 0 for collectives that
 * do not reduce; else 0, or -1 with a message naming the rank, channel and
 * chunk, and the first step that folds out of order. At most 512 ranks. */
int verify_rank_order(const sched *s, int inplace, char *err, size_t errlen);

#endif
