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
#include "src/log.h" /* braid_result; err_msg() reads the message */

/* BRAID_SUCCESS when the schedule is correct, else BRAID_ERR_INVALID_ARG
 * (BRAID_ERR_NOMEM when out of memory) with a message (ERR) that names the
 * first rank, channel, step and chunk that go wrong. `inplace` checks the
 * collective's in-place aliasing (NCCL conventions) as well. */
braid_result verify_sched(const sched *s, int inplace, int slots);

/* The chunk cells both checks model per rank: the input's, the output's and
 * the scratch's chunks (blocks times chunks_per_block), and their sum.
 * BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG with a message (ERR) when the
 * cells of all ranks are more than an int counts (a file's largest
 * chunks_per_block and scratch_blocks together are). */
braid_result verify_cells(const sched *s, int *in_n, int *out_n, int *scr_n,
                          int *ncells);

/* Working memory that verify_sched_ws keeps from call to call: a caller that
 * verifies many schedules (a schedule file, a sweep of rank counts) saves
 * each call's allocations and the faulting-in of their pages, which took
 * about half of the time of checking a small schedule. NULL when out of
 * memory; verify_ws_free(NULL) does nothing. */
typedef struct verify_ws verify_ws;
verify_ws *verify_ws_new(void);
void verify_ws_free(verify_ws *w);
/* verify_sched with working memory from w (w == NULL: its own). */
braid_result verify_sched_ws(const sched *s, int inplace, int slots,
                             verify_ws *w);

/* Does every reduction of s give the serial fold x0 op x1 op .. op x(n-1)
 * of the ranks' inputs, left to right in rank order, in every chunk the
 * collective promises (allreduce: every rank's output; reduce: the root's;
 * reduce_scatter: each rank's block)? Then the results are the same bits
 * whatever the channels and slicing, and those of a one-process loop
 * (BRAID_DETERMINISTIC, GEN_RANK_ORDER). An operand order counts: a op b
 * must extend the fold of ranks 0..k-1 (a) with rank k's input (b). Run
 * verify_sched first: this checks the order only. BRAID_SUCCESS for
 * collectives that do not reduce; else BRAID_SUCCESS, or an error whose
 * message names the rank, channel and chunk, and the first step that folds
 * out of order. At most 512 ranks (more: BRAID_ERR_UNSUPPORTED). */
braid_result verify_rank_order(const sched *s, int inplace);

#endif
