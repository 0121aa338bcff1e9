/*
 * braid-trainer: data-parallel LeNet on Fashion-MNIST over braid.
 * Run as one process, under braidrun -n N, or under mpirun -n N.
 */
#include <stdio.h>
#include <stdlib.h>

#include "braid.h"
#include "dist.h"
#include "idx.h"
#include "layers.h"
#include "lenet.h"
#include "train.h"

int main(int argc, char **argv) {
  train_opts o;
  train_opts_default(&o);
  const char *data = TRAIN_DEFAULT_DATA;
  if (train_parse_args(argc, argv, &o, &data) != 0)
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
