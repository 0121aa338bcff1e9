/*
 * Shared conventions of the comparison harnesses (C and C++).
 *
 * Every harness takes the same arguments:
 *   <collective> <minbytes> <maxbytes> <iters> <warmup>
 * with collective one of allreduce, allgather, reduce_scatter, broadcast,
 * sizes doubling from minbytes to maxbytes (K/M/G suffixes), float32 and
 * sum, and prints one line per size:
 *   size_bytes count time_us algbw_GBps busbw_GBps
 * with nccl-tests' size conventions (size = the larger buffer) and busbw
 * formulas, the time being the mean over ranks of the mean per call.
 */
#ifndef BRAID_PERF_HARNESS_H
#define BRAID_PERF_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H_ALLREDUCE, H_ALLGATHER, H_REDUCE_SCATTER, H_BROADCAST };

static inline int h_coll(const char *s) {
  if (!strcmp(s, "allreduce") || !strcmp(s, "all_reduce"))
    return H_ALLREDUCE;
  if (!strcmp(s, "allgather") || !strcmp(s, "all_gather"))
    return H_ALLGATHER;
  if (!strcmp(s, "reduce_scatter") || !strcmp(s, "reducescatter"))
    return H_REDUCE_SCATTER;
  if (!strcmp(s, "broadcast"))
    return H_BROADCAST;
  return -1;
}

static inline int h_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0)
    return -1;
  double m = 1;
  if (*end == 'K' || *end == 'k')
    m = 1024.0, end++;
  else if (*end == 'M' || *end == 'm')
    m = 1048576.0, end++;
  else if (*end == 'G' || *end == 'g')
    m = 1073741824.0, end++;
  if (*end)
    return -1;
  *out = (size_t)(v * m);
  return 0;
}

/* Elements per call (the count argument) for a size in bytes of float32. */
static inline size_t h_param_count(int coll, size_t bytes, int nranks) {
  size_t count = bytes / 4;
  if (coll == H_ALLGATHER || coll == H_REDUCE_SCATTER)
    return count / (size_t)nranks;
  return count;
}

static inline void h_bw(int coll, size_t param, double sec, int nranks,
                        double *alg, double *bus) {
  double bytes = (double)param * 4.0;
  double n = nranks;
  if (coll == H_ALLGATHER || coll == H_REDUCE_SCATTER)
    bytes *= n;
  *alg = sec > 0 ? bytes / 1e9 / sec : 0;
  double f = 1.0;
  if (coll == H_ALLREDUCE)
    f = 2.0 * (n - 1) / n;
  else if (coll == H_ALLGATHER || coll == H_REDUCE_SCATTER)
    f = (n - 1) / n;
  *bus = *alg * f;
}

static inline int h_args(int argc, char **argv, int *coll, size_t *minb,
                         size_t *maxb, int *iters, int *warmup) {
  if (argc != 6 || (*coll = h_coll(argv[1])) < 0 || h_size(argv[2], minb) ||
      h_size(argv[3], maxb) || (*iters = atoi(argv[4])) < 1 ||
      (*warmup = atoi(argv[5])) < 0 || *minb > *maxb) {
    fprintf(stderr,
            "usage: %s allreduce|allgather|reduce_scatter|broadcast "
            "<minbytes> <maxbytes> <iters> <warmup>\n",
            argv[0]);
    return -1;
  }
  return 0;
}

static inline void h_header(FILE *f, const char *lib, int coll, int nranks) {
  static const char *names[] = {"allreduce", "allgather", "reduce_scatter",
                                "broadcast"};
  fprintf(f, "# %s %s float32 sum, %d ranks\n", lib, names[coll], nranks);
  fprintf(f, "# size_bytes count time_us algbw_GBps busbw_GBps\n");
  fflush(f);
}

#endif
