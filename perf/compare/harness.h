/*
 * Shared conventions and the one timing loop of the comparison harnesses
 * (braid, Open MPI, Gloo). Each harness supplies its init, one blocking
 * call, a barrier and a sum over ranks (h_lib); harness.c runs the same
 * loop, checks and output for all of them.
 *
 * Every harness takes the same arguments:
 *   <collective> <minbytes> <maxbytes> <iters> <warmup> [pattern]
 * with collective one of allreduce, allgather, reduce_scatter, broadcast,
 * barrier, sizes doubling from minbytes to maxbytes (K/M/G suffixes),
 * float32 and sum, and prints one line per size (barrier: one line, of
 * size 0, whatever the sizes):
 *   size_bytes count time_us algbw_GBps busbw_GBps
 * with nccl-tests' size conventions (size = the larger buffer) and busbw
 * formulas, the time being the mean over ranks of the mean per call.
 *
 * The pattern (default warm) says how the calls are issued:
 *   warm    <warmup> calls, a barrier, then <iters> timed calls in a row;
 *   first   no warm-up and no barrier: each rank times its first <iters>
 *           calls at each size as they come (right after init for the
 *           first size); the line gets a 6th column, first_call_us, the
 *           mean over ranks of the first call alone (<warmup> is ignored);
 *   gap:G   as warm, but every call, warm-up and timed, follows G
 *           microseconds of computation on the CPU (a training step's
 *           compute); only the calls are timed, and summed; the line gets
 *           a 6th column, median_us, the mean over ranks of each rank's
 *           median call.
 * After the timed calls of each size, one more call on fresh inputs is
 * spot-checked (first and last element, or each block's first); the exit
 * status is 1 if any was wrong, 2 for a bad command line.
 */
#ifndef BRAID_PERF_HARNESS_H
#define BRAID_PERF_HARNESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { H_ALLREDUCE, H_ALLGATHER, H_REDUCE_SCATTER, H_BROADCAST, H_BARRIER };
enum { H_WARM, H_FIRST, H_GAP };

typedef struct h_opts {
  int coll;
  size_t minb, maxb;
  int iters, warmup;
  int pattern; /* H_WARM, H_FIRST, H_GAP */
  long gap_us; /* H_GAP: microseconds of computation before each call */
} h_opts;

/* What a library supplies. Every function is blocking and collective
 * (but call is collective only with the same coll and cnt); a failure
 * prints why and exits the process (nonzero). */
typedef struct h_lib {
  const char *name; /* in the header line: "braid", "openmpi", "gloo" */
  int rank, nranks;
  /* reduce_scatter leaves this rank's block at the start of sendbuf
   * (Gloo's in-place algorithm) instead of in recvbuf. */
  int rs_in_place;
  void *ctx;
  /* coll on float32 with sum; broadcast from rank 0, in place in r;
   * H_BARRIER: the library's barrier (cnt 0). */
  void (*call)(void *ctx, int coll, float *s, float *r, size_t cnt);
  void (*barrier)(void *ctx);
  /* *v becomes the sum of *v over the ranks. */
  void (*sum)(void *ctx, double *v);
} h_lib;

/* -1 for an unknown name. */
int h_coll(const char *s);
/* Bytes with an optional K/M/G suffix; -1 if not a size. */
int h_size(const char *s, size_t *out);
/* "warm", "first" or "gap:<us>"; -1 if none of them. */
int h_pattern(const char *s, int *pattern, long *gap_us);
/* Elements per call (the count argument) for a size in bytes of float32. */
size_t h_param_count(int coll, size_t bytes, int nranks);
void h_bw(int coll, size_t param, double sec, int nranks, double *alg,
          double *bus);
/* Parses argv; prints the usage and returns -1 on a bad command line. */
int h_args(int argc, char **argv, h_opts *o);
/* Allocates the buffers, runs the sweep, prints the table on rank 0 and
 * returns the exit status (0, or 1 when a spot check failed). */
int h_run(const h_lib *lib, const h_opts *o);

#ifdef __cplusplus
}
#endif

#endif
