/*
 * The data-parallel training loop: rank 0's initial parameters are
 * broadcast, each global batch is split into one contiguous shard per rank,
 * gradients are averaged in buckets overlapped with backward, and every rank
 * takes the same SGD step.
 */
#ifndef BRAID_TRAINER_TRAIN_H
#define BRAID_TRAINER_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "dist.h"
#include "idx.h"
#include "lenet.h"

typedef struct train_opts {
  int epochs;       /* default 10 */
  int batch;        /* global batch, default 256 */
  float lr;         /* default 0.2 */
  uint64_t seed;    /* default 42 */
  double bucket_mb; /* bucket cap in MiB, default 0.05; 0: one per tensor */
  int overlap;      /* default 1 */
  long steps;       /* stop after this many steps in all (0: no limit) */
  int eval;         /* evaluate on the test set every epoch (default 1) */
  const char *save_params; /* rank 0 writes the final parameters here */
  FILE *log;               /* rank 0's progress lines (NULL: silent) */
} train_opts;

void train_opts_default(train_opts *o);

typedef struct train_result {
  int epochs_run;
  long steps;
  double loss, train_acc, test_acc; /* last epoch */
  double epoch_s;                   /* mean training time per epoch */
  double comm_share;                /* share of training time waiting */
  uint64_t hash;                    /* this rank's parameter hash */
  int replicas_identical;
  int nbuckets;
} train_result;

/* Trains m (created with maxb >= ceil(batch / size) and >= the evaluation
 * chunk) on train, evaluates on test (may be NULL). 0 on success, -1 with a
 * message in err. */
int train_run(const train_opts *o, dist *d, lenet *m, const dataset *train,
              const dataset *test, train_result *res, char *err, size_t errlen);

/* Writes the flat parameters (little-endian float32, nparams values). */
int train_save_params(const lenet *m, const char *path, char *err,
                      size_t errlen);

#endif
