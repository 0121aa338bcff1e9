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

  /* Every rank loads the data and rank 0 checks where the parameters go;
   * all agree before training. */
  dataset train = {0}, test = {0};
  if (train_setup(&d, "braid-trainer", data, &o, &train, &test) != 0) {
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
    char share[64];
    printf("braid-trainer: %d rank%s (%s), global batch %d (%s), "
           "lr %g, %d epoch%s, %zu parameters, bucket cap %g MiB, overlap "
           "%s, BLAS threads %d\n",
           d.size, d.size == 1 ? "" : "s", d.launcher, o.batch,
           train_share_text(o.batch, d.size, share, sizeof share), (double)o.lr,
           o.epochs, o.epochs == 1 ? "" : "s", m.nparams, o.bucket_mb,
           o.overlap ? "on" : "off", blas_threads);
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
