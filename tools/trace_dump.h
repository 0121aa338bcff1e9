/*
 * braid's flight-recorder dumps as braid-trace reads them (docs/TRACE.md):
 * a header per dump and its calls, oldest first. Loading checks every line
 * and names the file and line of what it refuses.
 */
#ifndef BRAID_TRACE_DUMP_H
#define BRAID_TRACE_DUMP_H

#include <stdio.h>

/* The format version this reader knows ("braid_flight"). */
#define TRACE_FORMAT_VERSION 1
/* Communicators larger than this are refused as malformed. */
#define TRACE_MAX_RANKS (1 << 20)

typedef struct {
  long long seq, count, root, channel, step, waits_on;
  long long t_queued_us, t_started_us, t_done_us;
  char *kind, *dtype, *op, *stream, *state, *prim, *result, *fp_text;
  unsigned long long fp;
  int has_fp;
  int line;
} trace_call;

typedef struct {
  char *path;
  int line;                                              /* of the header */
  long long version, rank, nranks, pid, time_us, ncalls; /* ncalls -1: absent */
  char *comm, *host, *reason, *error;
  /* the communicator's identity ("comm_id"): "" in dumps written before
   * there was one */
  char *comm_id;
  trace_call *calls;
  int ncall, cap;
  char truncated[320]; /* "" or how the dump is cut short */
} trace_dump;

typedef struct {
  trace_dump **dumps;
  int n, cap;
} trace_set;

/* Reads a dump file, or every *.json and *.jsonl in a directory, into set
 * (a directory's files whose first line is no dump are left out, with a
 * warning). Errors ("FILE:LINE: ...") and warnings go to err; returns the
 * number of errors (a file with an error adds nothing to set). */
int trace_load(trace_set *set, const char *path, FILE *err);
void trace_set_free(trace_set *set);

/* 1 when a call is a send or a recv: these take no sequence number. */
int trace_is_p2p(const trace_call *c);

#endif
