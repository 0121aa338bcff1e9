/*
 * braid-trainer: data-parallel LeNet on Fashion-MNIST over braid.
 * Run as one process, under braidrun -n N, or under mpirun -n N.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "dist.h"
#include "idx.h"
#include "layers.h"
#include "lenet.h"
#include "train.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

static void usage(FILE *f) {
  fprintf(f,
          "usage: braid-trainer [options]\n"
          "  --data DIR        Fashion-MNIST IDX files (default " DEFAULT_DATA
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

static int parse_args(int argc, char **argv, train_opts *o, const char **data) {
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

int main(int argc, char **argv) {
  train_opts o;
  train_opts_default(&o);
  const char *data = DEFAULT_DATA;
  if (parse_args(argc, argv, &o, &data) != 0)
    return 2;

  /* One BLAS thread per rank: the ranks already fill the cores. */
  const int blas_threads = layers_set_blas_threads(1);

  char err[1024];
  dist d;
  if (dist_open_braid(&d, err, sizeof err) != 0) {
    fprintf(stderr, "braid-trainer: %s\n", err);
    return 1;
  }

  /* Every rank loads the data; all agree before the first collective so a
   * missing file stops every rank with the reason instead of a timeout. */
  dataset train = {0}, test = {0};
  int ok = dataset_load_fmnist(data, "train", &train, err, sizeof err) == 0 &&
           (!o.eval ||
            dataset_load_fmnist(data, "t10k", &test, err, sizeof err) == 0);
  if (!ok)
    fprintf(stderr, "braid-trainer: rank %d: %s\n", d.rank, err);
  int32_t all_ok = ok;
  braid_result r = dist_allreduce(&d, &all_ok, 1, BRAID_INT32, BRAID_MIN);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "braid-trainer: rank %d: allreduce: %s: %s\n", d.rank,
            braid_result_string(r), dist_error(&d));
    dist_close(&d);
    return 1;
  }
  if (!all_ok) {
    if (ok)
      fprintf(stderr,
              "braid-trainer: rank %d: another rank failed to load "
              "the data\n",
              d.rank);
    dataset_free(&train);
    dataset_free(&test);
    dist_close(&d);
    return 1;
  }

  const int per_rank = (o.batch + d.size - 1) / d.size;
  lenet m;
  if (lenet_create(&m, per_rank > 0 ? per_rank : 1) != 0) {
    fprintf(stderr, "braid-trainer: out of memory for batch %d\n", per_rank);
    return 1;
  }
  o.log = stdout;
  if (d.rank == 0) {
    printf("braid-trainer: %d rank%s (%s), global batch %d (%d per rank), "
           "lr %g, %d epoch%s, %zu parameters, bucket cap %g MiB, overlap "
           "%s, BLAS threads %d\n",
           d.size, d.size == 1 ? "" : "s", d.launcher, o.batch, per_rank,
           (double)o.lr, o.epochs, o.epochs == 1 ? "" : "s", m.nparams,
           o.bucket_mb, o.overlap ? "on" : "off", blas_threads);
    printf("braid-trainer: data %s: %zu training, %zu test images\n", data,
           train.n, test.n);
    fflush(stdout);
  }

  train_result res;
  int rc = train_run(&o, &d, &m, &train, o.eval ? &test : NULL, &res, err,
                     sizeof err);
  if (rc != 0) {
    fprintf(stderr, "braid-trainer: %s\n", err);
  } else if (d.rank == 0) {
    printf("braid-trainer: %ld steps, %d gradient bucket%s per step, "
           "%.2f s per epoch, %.1f%% waiting on communication\n",
           res.steps, res.nbuckets, res.nbuckets == 1 ? "" : "s", res.epoch_s,
           100.0 * res.comm_share);
    printf("braid-trainer: replicas %s on %d rank%s (parameter hash "
           "%016llx)\n",
           res.replicas_identical ? "identical" : "DIFFER", d.size,
           d.size == 1 ? "" : "s", (unsigned long long)res.hash);
    if (o.eval)
      printf("braid-trainer: final test accuracy %.4f\n", res.test_acc);
  }
  if (rc == 0 && !res.replicas_identical) {
    fprintf(stderr, "braid-trainer: rank %d: replicas differ\n", d.rank);
    rc = -1;
  }
  lenet_destroy(&m);
  dataset_free(&train);
  dataset_free(&test);
  dist_close(&d);
  return rc == 0 ? 0 : 1;
}
