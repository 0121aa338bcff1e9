/*
 * bench_reduce [SIZE[K]]: throughput of the reduction kernels on large buffers
 * against memcpy on the same machine. Not a test (numbers, no verdict).
 * Bandwidth counts the bytes the kernel moves: two reads and one write.
 * Every code path the CPU has is timed; '*' marks the one red_get picks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/reduce.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  /* SIZE in MiB (default 64), or KiB with a K suffix (in-cache sizes) */
  char *end = NULL;
  size_t size = argc > 1 ? (size_t)strtoul(argv[1], &end, 10) : 64;
  int kib = end != NULL && (*end == 'K' || *end == 'k');
  if (size == 0)
    size = 64, kib = 0;
  size_t bytes = kib ? size << 10 : size << 20;
  char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
  if (!a || !b || !d) {
    fprintf(stderr, "bench_reduce: cannot allocate 3 x %zu bytes\n", bytes);
    return 1;
  }
  memset(a, 0x3c, bytes);
  memset(b, 0x3c, bytes);
  memset(d, 0, bytes);
  /* each timed sample covers at least 64 MiB */
  int inner = bytes >= (64u << 20) ? 1 : (int)((64u << 20) / bytes);
  int reps = 10;
  printf("buffer %zu %s, code path %s, best of %d\n", size, kib ? "KiB" : "MiB",
         red_isa(), reps);
  double best = 1e9;
  for (int r = 0; r < reps; r++) {
    double t = now();
    for (int k = 0; k < inner; k++) {
      memcpy(d, a, bytes);
      __asm__ volatile("" : : "r"(d) : "memory");
    }
    t = (now() - t) / inner;
    if (t < best)
      best = t;
  }
  double copy_gbs = 2.0 * (double)bytes / best / 1e9;
  printf("%-22s %8.2f GB/s (read+write)\n", "memcpy", copy_gbs);
  static const struct {
    braid_dtype dt;
    braid_op op;
  } cases[] = {{BRAID_FLOAT32, BRAID_SUM}, {BRAID_FLOAT32, BRAID_MAX},
               {BRAID_FLOAT64, BRAID_SUM}, {BRAID_INT32, BRAID_SUM},
               {BRAID_INT8, BRAID_MIN},    {BRAID_FLOAT16, BRAID_SUM},
               {BRAID_BFLOAT16, BRAID_SUM}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    braid_dtype dt = cases[c].dt;
    size_t n = bytes / braid_dtype_size(dt);
    static const char *path_name[] = {"portable", "avx2", "avx2+f16c",
                                      "avx512"};
    red_fn best = red_get(dt, cases[c].op), done[4] = {NULL};
    for (int path = 0; path < 4; path++) {
      red_fn g = red_get_path(dt, cases[c].op, path);
      int seen = 0;
      for (int k = 0; k < path; k++)
        seen |= done[k] == g;
      done[path] = g;
      if (g == NULL || seen) /* absent, or the kernel of a narrower path */
        continue;
      double best_t = 1e9;
      for (int r = 0; r < reps; r++) {
        double t = now();
        for (int k = 0; k < inner; k++)
          g(d, a, b, n);
        t = (now() - t) / inner;
        if (t < best_t)
          best_t = t;
      }
      double gbs = 3.0 * (double)bytes / best_t / 1e9;
      char name[64];
      snprintf(name, sizeof name, "%s %s %s%s", braid_dtype_name(dt),
               braid_op_name(cases[c].op), path_name[path],
               g == best ? "*" : "");
      printf("%-28s %8.2f GB/s (2 reads+write) %6.2f Gelem/s, %3.0f%% of "
             "memcpy\n",
             name, gbs, (double)n / best_t / 1e9, 100.0 * gbs / copy_gbs);
    }
  }
  free(a);
  free(b);
  free(d);
  return 0;
}
