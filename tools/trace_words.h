/*
 * How braid-trace says things: rank lists, calls, times and states in the
 * words its reports use (docs/TRACE.md).
 */
#ifndef BRAID_TRACE_WORDS_H
#define BRAID_TRACE_WORDS_H

#include <stddef.h>

#include "trace_dump.h"

/* "rank 2", "ranks 0, 2", "ranks 0-7, 9" (n >= 1, ranks ascending). */
void words_ranks(const int *ranks, int n, char *buf, size_t len);
/* "allreduce #5", "send to rank 1", "recv from rank 0". */
void words_call(const trace_call *c, char *buf, size_t len);
/* "allreduce(16 x float32, sum)", "broadcast(4 x int8, root 1)". */
void words_sig(const trace_call *c, int with_fp, char *buf, size_t len);
/* "12:00:01.234 UTC" (with_date: "2026-11-27 12:00:01.234 UTC"). */
void words_time(long long us, int with_date, char *buf, size_t len);
/* "waiting for rank 2 since 12:00:01.234 UTC", "done at ...". */
void words_state(const trace_call *c, char *buf, size_t len);
/* s with control characters as spaces, at most len - 1 bytes. */
void words_clean(const char *s, char *buf, size_t len);

#endif
