/*
 * Gradient buckets (tensor fusion) with overlap. Tensors are taken in the
 * order backward finishes them and packed greedily: a bucket closes once it
 * holds at least cap bytes (cap 0: one bucket per tensor). The tensors of a
 * bucket are adjacent in the flat gradient array, so its allreduce runs in
 * place on one slice. With overlap on, a bucket's nonblocking allreduce is
 * issued the moment its last tensor is ready, while backward goes on with the
 * layers below; bucketer_finish issues whatever is left and waits once.
 */
#ifndef BRAID_TRAINER_BUCKET_H
#define BRAID_TRAINER_BUCKET_H

#include <stddef.h>

#include "braid.h"
#include "dist.h"

#define BUCKET_MAX_TENSORS 64

typedef struct bucket {
  size_t off, count; /* slice of the flat gradient array, in elements */
  int first, last;   /* tensor range [first, last] */
  int pending;       /* tensors not yet ready in this step */
  int issued;
} bucket;

typedef struct bucketer {
  dist *d;
  float *grads;
  int overlap;
  braid_op op;
  int ntensors, nbuckets;
  int bucket_of[BUCKET_MAX_TENSORS];
  bucket b[BUCKET_MAX_TENSORS];
  long issued_total;
} bucketer;

/* Plans buckets for ntensors tensors at offs[i] with counts[i] floats, which
 * must be adjacent (offs[i + 1] == offs[i] + counts[i]). 0, or -1 on a bad
 * layout. */
int bucketer_plan(bucketer *bk, int ntensors, const size_t *offs,
                  const size_t *counts, size_t cap_bytes, dist *d, float *grads,
                  int overlap, braid_op op);
/* Starts a step: every tensor becomes not ready. */
void bucketer_begin(bucketer *bk);
/* Marks tensor t ready; issues its bucket when complete and overlap is on.
 * Returns 0 or the braid error (as an int, for lenet_ready_fn). */
int bucketer_ready(void *bk, int t);
/* Issues the buckets not yet issued and waits for all of them. */
braid_result bucketer_finish(bucketer *bk);

#endif
