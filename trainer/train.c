#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bucket.h"

void train_opts_default(train_opts *o) {
  memset(o, 0, sizeof *o);
  o->epochs = 10;
  o->batch = 256;
  o->lr = 0.2f;
  o->seed = 42;
  o->bucket_mb = 0.05;
  o->overlap = 1;
  o->eval = 1;
}

void train_seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  /* the analyzer misreads va_start in variadic functions */
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#define PIXELS (LENET_IN * LENET_IN)

static void gather(const dataset *ds, const uint32_t *idx, int n, float *x,
                   uint8_t *y) {
  for (int i = 0; i < n; i++) {
    const uint8_t *src = ds->images + (size_t)idx[i] * PIXELS;
    float *dst = x + (size_t)i * PIXELS;
    for (int j = 0; j < PIXELS; j++)
      dst[j] = (float)src[j] * (1.0f / 255.0f);
    y[i] = ds->labels[idx[i]];
  }
}

static void shuffle(uint32_t *perm, size_t n, uint64_t seed, int epoch) {
  for (size_t i = 0; i < n; i++)
    perm[i] = (uint32_t)i;
  rng r = {seed * 0x100000001b3ull + (uint64_t)epoch + 1};
  for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
    size_t j = (size_t)(rng_next(&r) % i);
    uint32_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

/* Shard [lo, hi) of a range of n items for rank r of size. */
static void shard(size_t n, int r, int size, size_t *lo, size_t *hi) {
  if (size < 1) {
    *lo = *hi = 0;
    return;
  }
  *lo = n * (size_t)r / (size_t)size;
  *hi = n * (size_t)(r + 1) / (size_t)size;
}

int train_fail(dist *d, const char *what, braid_result r, char *err,
               size_t errlen) {
  train_seterr(err, errlen, "rank %d: %s: %s: %s", d->rank, what,
               braid_result_string(r), dist_error(d));
  return -1;
}

/* Test accuracy and loss, each rank a shard, counts summed. */
static int evaluate(dist *d, const train_loop_ops *ops, void *ctx, int maxb,
                    const dataset *ds, float *x, uint8_t *y, uint32_t *idx,
                    double *acc, double *loss, char *err, size_t errlen) {
  size_t lo, hi;
  shard(ds->n, d->rank, d->size, &lo, &hi);
  double tot[3] = {0, 0, 0}; /* loss, correct, count */
  for (size_t s = lo; s < hi; s += (size_t)maxb) {
    int b = (int)(hi - s < (size_t)maxb ? hi - s : (size_t)maxb);
    for (int i = 0; i < b; i++)
      idx[i] = (uint32_t)(s + (size_t)i);
    gather(ds, idx, b, x, y);
    double l;
    long c;
    if (ops->eval(ctx, b, x, y, &l, &c, err, errlen) != 0)
      return -1;
    tot[0] += l;
    tot[1] += (double)c;
    tot[2] += b;
  }
  braid_result r = dist_allreduce(d, tot, 3, BRAID_FLOAT64, BRAID_SUM);
  if (r != BRAID_SUCCESS)
    return train_fail(d, "allreduce of test counts", r, err, errlen);
  *acc = tot[2] > 0 ? tot[1] / tot[2] : 0.0;
  *loss = tot[2] > 0 ? tot[0] / tot[2] : 0.0;
  return 0;
}

static double extra_wait(const train_loop_ops *ops, void *ctx) {
  return ops->extra_wait_s ? ops->extra_wait_s(ctx) : 0.0;
}

int train_loop(const train_opts *o, dist *d, int maxb, const dataset *train,
               const dataset *test, const train_loop_ops *ops, void *ctx,
               train_result *res, char *err, size_t errlen) {
  float *x = malloc((size_t)maxb * PIXELS * sizeof(float));
  uint8_t *y = malloc((size_t)maxb);
  uint32_t *perm = malloc(train->n * sizeof(uint32_t));
  uint32_t *idx = malloc((size_t)maxb * sizeof(uint32_t));
  int rc = -1;
  if (!x || !y || !perm || !idx) {
    train_seterr(err, errlen, "out of memory");
    goto out;
  }

  const size_t nsteps_epoch = (train->n + (size_t)o->batch - 1) / o->batch;
  double train_time = 0.0, train_wait = 0.0;
  long step = 0;
  int stop = 0;
  for (int ep = 0; ep < o->epochs && !stop; ep++) {
    if (o->steps > 0 && step >= o->steps)
      break;
    shuffle(perm, train->n, o->seed, ep);
    double t0 = dist_now(), w0 = d->wait_s + extra_wait(ops, ctx);
    double tot[3] = {0, 0, 0}; /* loss, correct, count */
    for (size_t s = 0; s < nsteps_epoch; s++) {
      if (o->steps > 0 && step >= o->steps) {
        stop = 1;
        break;
      }
      const size_t start = s * (size_t)o->batch;
      const size_t g = train->n - start < (size_t)o->batch ? train->n - start
                                                           : (size_t)o->batch;
      size_t lo, hi;
      shard(g, d->rank, d->size, &lo, &hi);
      const int b = (int)(hi - lo);
      gather(train, perm + start + lo, b, x, y);
      /* Local gradients of (size / g) * sum of losses: their average over
       * the ranks is the gradient of the global batch's mean loss. */
      const float scale = (float)d->size / (float)g;
      double l;
      long c;
      if (ops->step(ctx, b, x, y, scale, &l, &c, err, errlen) != 0)
        goto out;
      tot[0] += l;
      tot[1] += (double)c;
      tot[2] += b;
      step++;
    }
    if (ops->epoch_end && ops->epoch_end(ctx, err, errlen) != 0)
      goto out;
    braid_result r = dist_allreduce(d, tot, 3, BRAID_FLOAT64, BRAID_SUM);
    if (r != BRAID_SUCCESS) {
      train_fail(d, "allreduce of training counts", r, err, errlen);
      goto out;
    }
    const double et = dist_now() - t0;
    const double ew = d->wait_s + extra_wait(ops, ctx) - w0;
    train_time += et;
    train_wait += ew;
    res->epochs_run = ep + 1;
    res->loss = tot[2] > 0 ? tot[0] / tot[2] : 0.0;
    res->train_acc = tot[2] > 0 ? tot[1] / tot[2] : 0.0;
    double te0 = dist_now(), tloss = 0.0;
    if (test && o->eval) {
      if (evaluate(d, ops, ctx, maxb, test, x, y, idx, &res->test_acc, &tloss,
                   err, errlen) != 0)
        goto out;
    }
    const double evt = dist_now() - te0;
    if (o->log && d->rank == 0) {
      char tacc[32] = "-";
      if (test && o->eval)
        snprintf(tacc, sizeof tacc, "%.4f", res->test_acc);
      fprintf(o->log,
              "epoch %2d/%d  loss %.4f  train acc %.4f  test acc %s  "
              "time %.2f s (+%.2f s eval)  comm wait %.1f%%%s\n",
              ep + 1, o->epochs, res->loss, res->train_acc, tacc, et, evt,
              et > 0 ? 100.0 * ew / et : 0.0,
              stop ? "  (stopped by --steps)" : "");
      fflush(o->log);
    }
  }
  res->steps = step;
  res->epoch_s = res->epochs_run ? train_time / res->epochs_run : 0.0;
  res->comm_share = train_time > 0 ? train_wait / train_time : 0.0;
  rc = 0;
out:
  free(x);
  free(y);
  free(perm);
  free(idx);
  return rc;
}

int train_finish(const train_opts *o, dist *d, const lenet *host,
                 train_result *res, char *err, size_t errlen) {
  /* Replica check: identical parameters give one hash, so min == max. */
  res->hash = lenet_param_hash(host);
  uint64_t hmin = res->hash, hmax = res->hash;
  braid_result r = dist_allreduce(d, &hmin, 1, BRAID_UINT64, BRAID_MIN);
  if (r == BRAID_SUCCESS)
    r = dist_allreduce(d, &hmax, 1, BRAID_UINT64, BRAID_MAX);
  if (r != BRAID_SUCCESS)
    return train_fail(d, "allreduce of the parameter hash", r, err, errlen);
  res->replicas_identical = hmin == hmax && hmin == res->hash;
  if (o->save_params && d->rank == 0 &&
      train_save_params(host, o->save_params, err, errlen) != 0)
    return -1;
  return 0;
}

/* ---- the CPU model ---- */

typedef struct cpu_ctx {
  dist *d;
  lenet *m;
  bucketer *bk;
  float lr;
} cpu_ctx;

static int cpu_step(void *ctx, int b, const float *x, const uint8_t *y,
                    float scale, double *loss, long *correct, char *err,
                    size_t errlen) {
  cpu_ctx *c = ctx;
  bucketer_begin(c->bk);
  int e = lenet_train_step(c->m, b, x, y, scale, loss, correct, bucketer_ready,
                           c->bk);
  if (e != 0) {
    dist_wait(c->d);
    return train_fail(c->d, "gradient allreduce", (braid_result)e, err, errlen);
  }
  braid_result r = bucketer_finish(c->bk);
  if (r != BRAID_SUCCESS)
    return train_fail(c->d, "gradient allreduce", r, err, errlen);
  lenet_sgd(c->m, c->lr);
  return 0;
}

static int cpu_eval(void *ctx, int b, const float *x, const uint8_t *y,
                    double *loss, long *correct, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  cpu_ctx *c = ctx;
  lenet_evaluate(c->m, b, x, y, loss, correct);
  return 0;
}

int train_run(const train_opts *o, dist *d, lenet *m, const dataset *train,
              const dataset *test, train_result *res, char *err,
              size_t errlen) {
  memset(res, 0, sizeof *res);
  if (d->size < 1 || d->rank < 0 || d->rank >= d->size) {
    train_seterr(err, errlen, "bad communicator: rank %d of %d", d->rank,
                 d->size);
    return -1;
  }
  if (o->batch < 1 || o->epochs < 1 || !(o->lr > 0.0f) || o->bucket_mb < 0) {
    train_seterr(err, errlen,
                 "bad options: batch %d, epochs %d, lr %g, bucket %g", o->batch,
                 o->epochs, (double)o->lr, o->bucket_mb);
    return -1;
  }
  const int per_rank = (o->batch + d->size - 1) / d->size;
  if (m->maxb < per_rank || m->maxb < 1) {
    train_seterr(err, errlen,
                 "model workspace holds %d images, a shard needs %d", m->maxb,
                 per_rank);
    return -1;
  }
  if (train->n == 0 || train->n > UINT32_MAX) {
    train_seterr(err, errlen, "training set has %zu images", train->n);
    return -1;
  }

  size_t offs[LENET_NTENSORS], counts[LENET_NTENSORS];
  for (int i = 0; i < LENET_NTENSORS; i++) {
    offs[i] = m->t[i].off;
    counts[i] = m->t[i].count;
  }
  bucketer bk;
  size_t cap = (size_t)(o->bucket_mb * 1024.0 * 1024.0);
  if (bucketer_plan(&bk, LENET_NTENSORS, offs, counts, cap, d, m->grads,
                    o->overlap, BRAID_AVG) != 0) {
    train_seterr(err, errlen, "cannot plan gradient buckets");
    return -1;
  }
  res->nbuckets = bk.nbuckets;

  /* Everyone starts from rank 0's parameters. */
  lenet_init_params(m, o->seed);
  braid_result r = dist_broadcast(d, m->params, m->nparams, BRAID_FLOAT32, 0);
  if (r != BRAID_SUCCESS)
    return train_fail(d, "broadcast of the initial parameters", r, err, errlen);

  static const train_loop_ops cpu_ops = {cpu_step, NULL, cpu_eval, NULL};
  cpu_ctx c = {d, m, &bk, o->lr};
  if (train_loop(o, d, m->maxb, train, test, &cpu_ops, &c, res, err, errlen) !=
      0)
    return -1;
  return train_finish(o, d, m, res, err, errlen);
}

/* A new file beside path (path.tmp.PID), open for writing; NULL after
 * err. */
static FILE *params_tmp(const char *path, char *tmp, size_t tmplen, char *err,
                        size_t errlen) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    train_seterr(err, errlen, "--save-params %s: is a directory", path);
    return NULL;
  }
  int n = snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
  if (n < 0 || (size_t)n >= tmplen) {
    train_seterr(err, errlen, "--save-params %s: path too long", path);
    return NULL;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
  if (f == NULL) {
    train_seterr(err, errlen,
                 "--save-params %s: cannot create a file there: %s", path,
                 strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(tmp);
    }
  }
  return f;
}

int train_check_params_path(const char *path, char *err, size_t errlen) {
  char tmp[4096];
  FILE *f = params_tmp(path, tmp, sizeof tmp, err, errlen);
  if (f == NULL)
    return -1;
  fclose(f);
  unlink(tmp);
  return 0;
}

int train_save_params(const lenet *m, const char *path, char *err,
                      size_t errlen) {
  char tmp[4096];
  FILE *f = params_tmp(path, tmp, sizeof tmp, err, errlen);
  if (f == NULL)
    return -1;
  size_t w = fwrite(m->params, sizeof(float), m->nparams, f);
  int e = w == m->nparams ? 0 : (errno ? errno : EIO);
  if (e == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
    e = errno;
  if (fclose(f) != 0 && e == 0)
    e = errno;
  if (e == 0 && rename(tmp, path) != 0)
    e = errno;
  if (e != 0) {
    unlink(tmp);
    train_seterr(err, errlen, "--save-params %s: write failed: %s", path,
                 strerror(e));
    return -1;
  }
  return 0;
}

const char *train_share_text(int batch, int size, char *buf, size_t len) {
  const int lo = batch / size, hi = (batch + size - 1) / size;
  if (lo == hi)
    snprintf(buf, len, "%d per rank", hi);
  else
    snprintf(buf, len, "%d to %d per rank", lo, hi);
  return buf;
}

int train_setup(dist *d, const char *prog, const char *data,
                const train_opts *o, dataset *train, dataset *test) {
  char err[1024];
  int ok = dataset_load_fmnist(data, "train", train, err, sizeof err) == 0 &&
           (!o->eval ||
            dataset_load_fmnist(data, "t10k", test, err, sizeof err) == 0) &&
           (d->rank != 0 || !o->save_params ||
            train_check_params_path(o->save_params, err, sizeof err) == 0);
  if (!ok)
    fprintf(stderr, "%s: rank %d: %s\n", prog, d->rank, err);
  int32_t all_ok = ok;
  braid_result r = dist_allreduce(d, &all_ok, 1, BRAID_INT32, BRAID_MIN);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "%s: rank %d: allreduce: %s: %s\n", prog, d->rank,
            braid_result_string(r), dist_error(d));
    return -1;
  }
  if (!all_ok) {
    if (ok)
      fprintf(stderr,
              "%s: rank %d: another rank cannot start (its message says "
              "why)\n",
              prog, d->rank);
    return -1;
  }
  return 0;
}
