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

/* ---- the loop shared by the trainers (CPU in train_run, CUDA) ---- */

/* A trainer's model behind the shared loop. Each callback returns 0, or -1
 * with a message in err. */
typedef struct train_loop_ops {
  /* One SGD step on this rank's b images of a global batch (gradients
   * scaled by scale, averaged over the ranks, applied); loss: sum of the
   * b losses, correct: how many were right. */
  int (*step)(void *ctx, int b, const float *x, const uint8_t *y, float scale,
              double *loss, long *correct, char *err, size_t errlen);
  /* After an epoch's last step, before its counts are summed (may be
   * NULL): e.g. waits for queued device work. */
  int (*epoch_end)(void *ctx, char *err, size_t errlen);
  /* Loss sum and correct count on b test images. */
  int (*eval)(void *ctx, int b, const float *x, const uint8_t *y, double *loss,
              long *correct, char *err, size_t errlen);
  /* Seconds waited on collectives outside d so far (may be NULL: 0). */
  double (*extra_wait_s)(void *ctx);
} train_loop_ops;

/* The epochs of train_run on any model: shuffles, shards and gathers each
 * global batch into chunks of at most maxb images (maxb >= the per-rank
 * batch), calls ops, sums the counts over d, evaluates on test (may be
 * NULL), logs, and fills res except hash, replicas_identical and nbuckets.
 * The caller has set up the same initial parameters on every rank. */
int train_loop(const train_opts *o, dist *d, int maxb, const dataset *train,
               const dataset *test, const train_loop_ops *ops, void *ctx,
               train_result *res, char *err, size_t errlen);

/* After train_loop: hashes host's parameters on every rank, checks they are
 * the same (res->hash, res->replicas_identical) and, when o->save_params is
 * set, rank 0 writes them there. */
int train_finish(const train_opts *o, dist *d, const lenet *host,
                 train_result *res, char *err, size_t errlen);

/* err = "rank R: WHAT: RESULT: DETAILS" from d; returns -1. */
int train_fail(dist *d, const char *what, braid_result r, char *err,
               size_t errlen);

/* snprintf into err. */
__attribute__((format(printf, 3, 4))) void
train_seterr(char *err, size_t errlen, const char *fmt, ...);

/* The command line of both trainers into o and data; -1 after a message on
 * stderr; --help prints the usage and exits 0. */
#define TRAIN_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
int train_parse_args(int argc, char **argv, train_opts *o, const char **data);

/* "86 per rank", or "85 to 86 per rank" where the global batch does not
 * split evenly. */
const char *train_share_text(int batch, int size, char *buf, size_t len);

/* Before training, on every rank: loads the data (test only with o->eval)
 * and, on rank 0 with o->save_params, checks that the file can be written
 * there; then the ranks agree, so that a missing file or a path that cannot
 * be written stops every rank with the reason before any training instead
 * of a timeout, or a run whose result is lost at the end. 0, or -1 after a
 * message on stderr (prog: rank R: ...). */
int train_setup(dist *d, const char *prog, const char *data,
                const train_opts *o, dataset *train, dataset *test);

/* Whether path can take the parameters: not a directory, and a new file can
 * be made beside it. */
int train_check_params_path(const char *path, char *err, size_t errlen);

/* Writes the flat parameters (little-endian float32, nparams values) to a
 * file beside path, then renames it over path: a failed write leaves an
 * earlier file there as it was. */
int train_save_params(const lenet *m, const char *path, char *err,
                      size_t errlen);

#endif
