/*
 * The timing loop shared by the comparison harnesses: argument parsing, the
 * three call patterns (warm, first, gap:G), the spot checks and the output
 * lines, written once so braid, Open MPI and Gloo run the same code between
 * their calls. See harness.h for the conventions.
 */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const h_names[] = {"allreduce", "allgather",
                                      "reduce_scatter", "broadcast", "barrier"};

int h_coll(const char *s) {
  if (!strcmp(s, "allreduce") || !strcmp(s, "all_reduce"))
    return H_ALLREDUCE;
  if (!strcmp(s, "allgather") || !strcmp(s, "all_gather"))
    return H_ALLGATHER;
  if (!strcmp(s, "reduce_scatter") || !strcmp(s, "reducescatter"))
    return H_REDUCE_SCATTER;
  if (!strcmp(s, "broadcast"))
    return H_BROADCAST;
  if (!strcmp(s, "barrier"))
    return H_BARRIER;
  return -1;
}

int h_size(const char *s, size_t *out) {
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

int h_pattern(const char *s, int *pattern, long *gap_us) {
  *gap_us = 0;
  if (!strcmp(s, "warm")) {
    *pattern = H_WARM;
    return 0;
  }
  if (!strcmp(s, "first")) {
    *pattern = H_FIRST;
    return 0;
  }
  if (!strncmp(s, "gap:", 4)) {
    char *end;
    long g = strtol(s + 4, &end, 10);
    if (end == s + 4 || *end || g < 0 || g > 10000000)
      return -1;
    *pattern = H_GAP;
    *gap_us = g;
    return 0;
  }
  return -1;
}

size_t h_param_count(int coll, size_t bytes, int nranks) {
  if (coll == H_BARRIER)
    return 0;
  size_t count = bytes / 4;
  if (coll == H_ALLGATHER || coll == H_REDUCE_SCATTER)
    return count / (size_t)nranks;
  return count;
}

void h_bw(int coll, size_t param, double sec, int nranks, double *alg,
          double *bus) {
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

int h_args(int argc, char **argv, h_opts *o) {
  memset(o, 0, sizeof *o);
  o->pattern = H_WARM;
  if ((argc != 6 && argc != 7) || (o->coll = h_coll(argv[1])) < 0 ||
      h_size(argv[2], &o->minb) || h_size(argv[3], &o->maxb) ||
      (o->iters = atoi(argv[4])) < 1 || (o->warmup = atoi(argv[5])) < 0 ||
      o->minb > o->maxb ||
      (argc == 7 && h_pattern(argv[6], &o->pattern, &o->gap_us))) {
    fprintf(stderr,
            "usage: %s allreduce|allgather|reduce_scatter|broadcast|barrier "
            "<minbytes> <maxbytes> <iters> <warmup> [warm|first|gap:<us>]\n",
            argv[0]);
    return -1;
  }
  return 0;
}

static double h_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The compute of gap:G: a chain of dependent multiply-adds for us
 * microseconds, its result stored where the compiler must keep it. */
static volatile double h_sink;

static void h_compute(long us) {
  if (us <= 0)
    return;
  double end = h_now() + (double)us * 1e-6;
  double x = h_sink + 1.0;
  do {
    for (int i = 0; i < 256; i++)
      x = x * 1.0000001 + 1e-7;
  } while (h_now() < end);
  h_sink = x;
}

/* Sends rank + 1 everywhere; broadcast's root holds 1 in r, the others 0. */
static void h_fill(const h_lib *L, int coll, float *s, float *r, size_t ns,
                   size_t nr) {
  for (size_t i = 0; i < ns; i++)
    s[i] = (float)(L->rank + 1);
  float rv = coll == H_BROADCAST && L->rank == 0 ? 1.0f : 0.0f;
  for (size_t i = 0; i < nr; i++)
    r[i] = rv;
}

/* Spot check of one call on fresh inputs: the harness measures the right
 * thing. Returns the number of wrong elements seen. */
static int h_check(const h_lib *L, int coll, float *s, float *r, size_t cnt) {
  if (cnt == 0)
    return 0;
  int n = L->nranks;
  size_t big = cnt * (size_t)n;
  h_fill(L, coll, s, r, coll == H_REDUCE_SCATTER ? big : cnt,
         coll == H_ALLGATHER ? big : cnt);
  L->call(L->ctx, coll, s, r, cnt);
  float sum = (float)n * (float)(n + 1) / 2.0f;
  const float *out = r;
  if (coll == H_REDUCE_SCATTER && L->rs_in_place)
    out = s;
  int bad = 0;
  switch (coll) {
  case H_ALLREDUCE:
  case H_REDUCE_SCATTER:
    bad += out[0] != sum;
    bad += out[cnt - 1] != sum;
    break;
  case H_ALLGATHER:
    for (int j = 0; j < n; j++)
      bad += out[(size_t)j * cnt] != (float)(j + 1);
    break;
  case H_BROADCAST:
    bad += out[0] != 1.0f || out[cnt - 1] != 1.0f;
    break;
  }
  return bad;
}

static int h_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One size under the pattern: this rank's mean seconds per call, and in
 * *extra for H_FIRST the first call alone, for H_GAP the median call (a
 * mean over a few hundred calls after a gap is at the mercy of the few
 * that met a descheduled peer). */
static double h_measure(const h_lib *L, const h_opts *o, float *s, float *r,
                        size_t cnt, double *extra) {
  int coll = o->coll;
  *extra = 0;
  if (o->pattern == H_FIRST) {
    double t0 = h_now();
    L->call(L->ctx, coll, s, r, cnt);
    double t1 = h_now();
    for (int i = 1; i < o->iters; i++)
      L->call(L->ctx, coll, s, r, cnt);
    *extra = t1 - t0;
    return (h_now() - t0) / o->iters;
  }
  for (int i = 0; i < o->warmup; i++) {
    h_compute(o->gap_us);
    L->call(L->ctx, coll, s, r, cnt);
  }
  L->barrier(L->ctx);
  if (o->pattern == H_WARM) {
    double t0 = h_now();
    for (int i = 0; i < o->iters; i++)
      L->call(L->ctx, coll, s, r, cnt);
    return (h_now() - t0) / o->iters;
  }
  double total = 0;
  double *each = malloc(sizeof(double) * (size_t)o->iters);
  if (each == NULL) {
    fprintf(stderr, "%s bench: rank %d: out of memory\n", L->name, L->rank);
    exit(3);
  }
  for (int i = 0; i < o->iters; i++) {
    h_compute(o->gap_us);
    double t0 = h_now();
    L->call(L->ctx, coll, s, r, cnt);
    each[i] = h_now() - t0;
    total += each[i];
  }
  qsort(each, (size_t)o->iters, sizeof(double), h_cmp_double);
  int m = o->iters / 2;
  *extra = o->iters % 2 ? each[m] : (each[m - 1] + each[m]) / 2;
  free(each);
  return total / o->iters;
}

static void h_header(const h_lib *L, const h_opts *o) {
  printf("# %s %s float32 sum, %d ranks\n", L->name, h_names[o->coll],
         L->nranks);
  if (o->pattern == H_FIRST)
    printf("# pattern first: no warm-up, no barrier, the first %d calls "
           "of each size\n",
           o->iters);
  else if (o->pattern == H_GAP)
    printf("# pattern gap:%ld: %ld us of computation before each call, "
           "only the calls timed\n",
           o->gap_us, o->gap_us);
  else
    printf("# pattern warm: %d calls, a barrier, %d timed calls\n", o->warmup,
           o->iters);
  printf("# size_bytes count time_us algbw_GBps busbw_GBps%s\n",
         o->pattern == H_FIRST ? " first_call_us"
         : o->pattern == H_GAP ? " median_us"
                               : "");
  fflush(stdout);
}

int h_run(const h_lib *L, const h_opts *o) {
  int n = L->nranks, coll = o->coll;
  size_t cap = o->maxb < 64 ? 64 : o->maxb;
  size_t alloc = (cap + 63) / 64 * 64;
  float *s = aligned_alloc(64, alloc);
  float *r = aligned_alloc(64, alloc);
  if (!s || !r) {
    fprintf(stderr, "%s bench: rank %d: out of memory (2 x %zu bytes)\n",
            L->name, L->rank, alloc);
    exit(3);
  }
  /* Every page touched before the first call. */
  h_fill(L, coll, s, r, cap / 4, cap / 4);
  /* The header goes out with the first result, not before the first call:
   * rank 0 writing to its pipe while the others start their first call
   * made them wait for it (40 to 280 us in the first pattern). */
  int bad = 0, header = L->rank == 0;
  for (size_t bytes = o->minb; bytes <= o->maxb;
       bytes = bytes ? bytes * 2 : 1) {
    size_t cnt = h_param_count(coll, bytes, n);
    double extra; /* first: the first call; gap: the median call */
    double t = h_measure(L, o, s, r, cnt, &extra);
    L->sum(L->ctx, &t);
    t /= n;
    if (o->pattern != H_WARM) {
      L->sum(L->ctx, &extra);
      extra /= n;
    }
    bad += h_check(L, coll, s, r, cnt);
    if (header) {
      h_header(L, o);
      header = 0;
    }
    if (L->rank == 0) {
      double alg, bus;
      h_bw(coll, cnt, t, n, &alg, &bus);
      size_t shown = coll == H_ALLGATHER || coll == H_REDUCE_SCATTER
                         ? cnt * (size_t)n * 4
                         : cnt * 4;
      printf("%zu %zu %.3f %.6g %.6g", shown, cnt, t * 1e6, alg, bus);
      if (o->pattern != H_WARM)
        printf(" %.3f", extra * 1e6);
      printf("\n");
      fflush(stdout);
    }
    if (bytes >= o->maxb || coll == H_BARRIER)
      break;
  }
  double nbad = bad;
  L->sum(L->ctx, &nbad);
  if (L->rank == 0 && nbad > 0)
    fprintf(stderr, "%s bench: %.0f wrong elements in the spot checks\n",
            L->name, nbad);
  free(s);
  free(r);
  return nbad > 0 ? 1 : 0;
}
