#include "bucket.h"

#include <string.h>

int bucketer_plan(bucketer *bk, int ntensors, const size_t *offs,
                  const size_t *counts, size_t cap_bytes, dist *d, float *grads,
                  int overlap, braid_op op) {
  memset(bk, 0, sizeof *bk);
  if (ntensors < 1 || ntensors > BUCKET_MAX_TENSORS)
    return -1;
  for (int i = 0; i + 1 < ntensors; i++) {
    if (offs[i + 1] != offs[i] + counts[i])
      return -1;
  }
  bk->d = d;
  bk->grads = grads;
  bk->overlap = overlap;
  bk->op = op;
  bk->ntensors = ntensors;
  int nb = 0;
  size_t bytes = 0;
  for (int i = 0; i < ntensors; i++) {
    if (bytes == 0) {
      bk->b[nb].off = offs[i];
      bk->b[nb].first = i;
      bk->b[nb].count = 0;
    }
    bk->b[nb].count += counts[i];
    bk->b[nb].last = i;
    bk->bucket_of[i] = nb;
    bytes += counts[i] * sizeof(float);
    if (bytes >= cap_bytes || i == ntensors - 1) {
      nb++;
      bytes = 0;
    }
  }
  bk->nbuckets = nb;
  bucketer_begin(bk);
  return 0;
}

void bucketer_begin(bucketer *bk) {
  for (int i = 0; i < bk->nbuckets; i++) {
    bk->b[i].pending = bk->b[i].last - bk->b[i].first + 1;
    bk->b[i].issued = 0;
  }
}

static braid_result issue(bucketer *bk, bucket *b) {
  b->issued = 1;
  bk->issued_total++;
  if (b->count == 0)
    return BRAID_SUCCESS;
  return dist_iallreduce(bk->d, bk->grads + b->off, b->count, BRAID_FLOAT32,
                         bk->op);
}

int bucketer_ready(void *arg, int t) {
  bucketer *bk = arg;
  if (t < 0 || t >= bk->ntensors)
    return BRAID_ERR_INVALID_ARG;
  bucket *b = &bk->b[bk->bucket_of[t]];
  if (b->pending <= 0)
    return BRAID_ERR_INTERNAL; /* a tensor reported twice */
  b->pending--;
  if (b->pending == 0 && bk->overlap)
    return (int)issue(bk, b);
  return 0;
}

braid_result bucketer_finish(bucketer *bk) {
  braid_result first = BRAID_SUCCESS;
  for (int i = 0; i < bk->nbuckets; i++) {
    if (!bk->b[i].issued) {
      braid_result r = issue(bk, &bk->b[i]);
      if (r != BRAID_SUCCESS && first == BRAID_SUCCESS)
        first = r;
    }
  }
  braid_result r = dist_wait(bk->d);
  return first != BRAID_SUCCESS ? first : r;
}
