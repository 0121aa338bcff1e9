/* The trainers' command line (braid-trainer, braid-trainer-cuda). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: braid-trainer [options]\n"
      "  --data DIR        Fashion-MNIST IDX files (default " TRAIN_DEFAULT_DATA
      ")\n"
      "  --epochs N        epochs (default 10)\n"
      "  --batch N         global batch, split over the ranks (default "
      "256)\n"
      "  --lr X            SGD learning rate (default 0.2)\n"
      "  --seed N          seed for initialisation and shuffling "
      "(default 42)\n"
      "  --bucket-mb X     gradient bucket cap in MiB; 0: one allreduce "
      "per tensor (default 0.05)\n"
      "  --no-overlap      allreduce all buckets after backward\n"
      "  --steps N         stop after N steps in all (short runs)\n"
      "  --no-eval         skip the test set\n"
      "  --save-params F   rank 0 writes the final parameters (float32) "
      "to F\n"
      "  --help\n");
}

static int parse_long(const char *flag, const char *v, long lo, long hi,
                      long *out) {
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr,
            "braid-trainer: %s needs an integer in [%ld, %ld], got %s\n", flag,
            lo, hi, v ? v : "nothing");
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_double(const char *flag, const char *v, double lo, double hi,
                        double *out) {
  char *end;
  errno = 0;
  double x = v ? strtod(v, &end) : 0;
  if (!v || errno || end == v || *end || !(x >= lo && x <= hi)) {
    fprintf(stderr, "braid-trainer: %s needs a number in [%g, %g], got %s\n",
            flag, lo, hi, v ? v : "nothing");
    return -1;
  }
  *out = x;
  return 0;
}

int train_parse_args(int argc, char **argv, train_opts *o, const char **data) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n;
    double x;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--data")) {
      if (!v) {
        fprintf(stderr, "braid-trainer: --data needs a directory\n");
        return -1;
      }
      *data = v;
      i++;
    } else if (!strcmp(a, "--epochs")) {
      if (parse_long(a, v, 1, 100000, &n))
        return -1;
      o->epochs = (int)n;
      i++;
    } else if (!strcmp(a, "--batch")) {
      if (parse_long(a, v, 1, 1 << 20, &n))
        return -1;
      o->batch = (int)n;
      i++;
    } else if (!strcmp(a, "--lr")) {
      if (parse_double(a, v, 1e-9, 1e3, &x))
        return -1;
      o->lr = (float)x;
      i++;
    } else if (!strcmp(a, "--seed")) {
      if (parse_long(a, v, 0, LONG_MAX, &n))
        return -1;
      o->seed = (uint64_t)n;
      i++;
    } else if (!strcmp(a, "--bucket-mb")) {
      if (parse_double(a, v, 0, 1e6, &x))
        return -1;
      o->bucket_mb = x;
      i++;
    } else if (!strcmp(a, "--steps")) {
      if (parse_long(a, v, 1, LONG_MAX, &n))
        return -1;
      o->steps = n;
      i++;
    } else if (!strcmp(a, "--save-params")) {
      if (!v) {
        fprintf(stderr, "braid-trainer: --save-params needs a file name\n");
        return -1;
      }
      o->save_params = v;
      i++;
    } else if (!strcmp(a, "--no-overlap")) {
      o->overlap = 0;
    } else if (!strcmp(a, "--no-eval")) {
      o->eval = 0;
    } else {
      fprintf(stderr, "braid-trainer: unknown option %s\n", a);
      usage(stderr);
      return -1;
    }
  }
  return 0;
}
