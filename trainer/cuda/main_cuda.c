/*
 * braid-trainer-cuda: braid-trainer's data-parallel LeNet with the model on
 * a CUDA device. Same command line and output as braid-trainer; batches are
 * copied to the GPU, forward/backward/SGD run as CUDA kernels, and the
 * gradient buckets are averaged with braid_allreduce(BRAID_AVG) on device
 * buffers, stream-ordered on the model's CUDA stream.
 *
 * The command line, the epoch loop (shuffling, sharding, gathering, counts,
 * logging) and the replica check are the CPU trainer's (train.h); this file
 * supplies the model's step and evaluation on the device.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "braid.h"
#include "bucket.h"
#include "dist.h"
#include "idx.h"
#include "lenet.h"
#include "lenet_cuda.h"
#include "train.h"

#define PROG "braid-trainer-cuda"

/* ---- the device communicator behind the bucketer's dist interface ---- */

typedef struct dev_ctx {
  braid_comm *comm;     /* device collectives */
  braid_stream *stream; /* braid_stream_from_cuda(model's stream) */
} dev_ctx;

static braid_result dev_allreduce(void *ctx, void *buf, size_t count,
                                  braid_dtype dt, braid_op op, int async) {
  dev_ctx *c = ctx;
  braid_result r = braid_allreduce(buf, buf, count, dt, op, c->comm, c->stream);
  if (r == BRAID_SUCCESS && !async)
    r = braid_stream_synchronize(c->stream);
  return r;
}

static braid_result dev_broadcast(void *ctx, void *buf, size_t count,
                                  braid_dtype dt, int root) {
  dev_ctx *c = ctx;
  braid_result r =
      braid_broadcast(buf, buf, count, dt, root, c->comm, c->stream);
  return r == BRAID_SUCCESS ? braid_stream_synchronize(c->stream) : r;
}

static braid_result dev_wait(void *ctx) {
  dev_ctx *c = ctx;
  return braid_stream_synchronize(c->stream);
}

static const char *dev_last_error(void *ctx) {
  dev_ctx *c = ctx;
  const char *e = braid_comm_last_error(c->comm);
  return e && *e ? e : "(no details)";
}

static void dev_close(void *ctx) { (void)ctx; }

static const dist_ops dev_ops = {dev_allreduce, dev_broadcast, dev_wait,
                                 dev_last_error, dev_close};

/* ---- device selection ---------------------------------------------------- */

/* This rank's index among the ranks on its host (ranks with the same host
 * name), from one allreduce of everyone's host-name hash. */
static int local_rank(dist *d, int *out, char *err, size_t errlen) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "unknown");
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *p = host; *p; p++)
    h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  uint64_t *all = calloc((size_t)d->size, sizeof *all);
  if (!all) {
    train_seterr(err, errlen, "out of memory");
    return -1;
  }
  all[d->rank] = h;
  braid_result r =
      dist_allreduce(d, all, (size_t)d->size, BRAID_UINT64, BRAID_SUM);
  if (r != BRAID_SUCCESS) {
    free(all);
    return train_fail(d, "allreduce of host names", r, err, errlen);
  }
  int n = 0;
  for (int i = 0; i < d->rank; i++)
    n += all[i] == h;
  free(all);
  *out = n;
  return 0;
}

/* A second communicator for the device collectives, bootstrapped through
 * the host one (rank 0's unique id is broadcast), once every rank reports
 * local_ok. */
static int open_device_comm(dist *d, int local_ok, braid_comm **comm, char *err,
                            size_t errlen) {
  braid_unique_id id;
  memset(&id, 0, sizeof id);
  braid_result r = BRAID_SUCCESS;
  if (d->rank == 0)
    r = braid_get_unique_id(&id);
  int32_t all_ok = local_ok && r == BRAID_SUCCESS;
  braid_result r2 = dist_allreduce(d, &all_ok, 1, BRAID_INT32, BRAID_MIN);
  if (r2 != BRAID_SUCCESS)
    return train_fail(d, "allreduce before the device communicator", r2, err,
                      errlen);
  if (!all_ok) {
    if (r != BRAID_SUCCESS)
      train_seterr(err, errlen, "rank %d: braid_get_unique_id: %s", d->rank,
                   braid_result_string(r));
    else if (!local_ok)
      train_seterr(err, errlen, "rank %d: no model on the device (see above)",
                   d->rank);
    else
      train_seterr(err, errlen,
                   "rank %d: another rank failed to set up its device",
                   d->rank);
    return -1;
  }
  r = dist_broadcast(d, &id, sizeof id, BRAID_UINT8, 0);
  if (r != BRAID_SUCCESS)
    return train_fail(d, "broadcast of the device communicator's id", r, err,
                      errlen);
  r = braid_comm_init(comm, d->size, &id, d->rank, NULL);
  if (r != BRAID_SUCCESS) {
    train_seterr(err, errlen,
                 "rank %d: device communicator: braid_comm_init: %s", d->rank,
                 braid_result_string(r));
    return -1;
  }
  return 0;
}

/* ---- training --------------------------------------------------------------
 */

typedef struct gpu_job {
  dist *d;  /* host collectives: counts, hash, initial parameters */
  dist dev; /* device collectives: gradient buckets */
  dev_ctx dc;
  lenet_cuda *m;
  lenet host;   /* layout and a host copy of the parameters */
  bucketer *bk; /* gradient buckets over dev */
  float lr;
} gpu_job;

static int cuda_fail(gpu_job *j, char *err, size_t errlen) {
  train_seterr(err, errlen, "rank %d: %s", j->d->rank, lenet_cuda_error());
  return -1;
}

/* One step: forward/backward on the device, the buckets allreduced on the
 * model's stream, SGD queued behind them. */
static int step_gpu(void *ctx, int b, const float *x, const uint8_t *y,
                    float scale, double *l, long *c, char *err, size_t errlen) {
  gpu_job *j = ctx;
  bucketer_begin(j->bk);
  if (lenet_cuda_train_step(j->m, b, x, y, scale, l, c) != 0)
    return cuda_fail(j, err, errlen);
  /* Backward is complete on the stream: every tensor is ready, in layout
   * order, and each full bucket is issued at once. */
  for (int t = 0; t < LENET_NTENSORS; t++) {
    int e = bucketer_ready(j->bk, t);
    if (e != 0) {
      dist_wait(&j->dev);
      return train_fail(&j->dev, "gradient allreduce", (braid_result)e, err,
                        errlen);
    }
  }
  braid_result r = bucketer_finish(j->bk);
  if (r != BRAID_SUCCESS)
    return train_fail(&j->dev, "gradient allreduce", r, err, errlen);
  if (lenet_cuda_sgd(j->m, j->lr) != 0)
    return cuda_fail(j, err, errlen);
  return 0;
}

static int sync_gpu(void *ctx, char *err, size_t errlen) {
  gpu_job *j = ctx;
  return lenet_cuda_sync(j->m) != 0 ? cuda_fail(j, err, errlen) : 0;
}

static int eval_gpu(void *ctx, int b, const float *x, const uint8_t *y,
                    double *l, long *c, char *err, size_t errlen) {
  gpu_job *j = ctx;
  return lenet_cuda_evaluate(j->m, b, x, y, l, c) != 0
             ? cuda_fail(j, err, errlen)
             : 0;
}

static double dev_wait_s(void *ctx) {
  const gpu_job *j = ctx;
  return j->dev.wait_s;
}

static int train_gpu(const train_opts *o, gpu_job *j, int maxb,
                     const dataset *train, const dataset *test,
                     train_result *res, char *err, size_t errlen) {
  dist *d = j->d;
  memset(res, 0, sizeof *res);
  size_t offs[LENET_NTENSORS], counts[LENET_NTENSORS];
  for (int i = 0; i < LENET_NTENSORS; i++) {
    offs[i] = j->host.t[i].off;
    counts[i] = j->host.t[i].count;
  }
  bucketer bk;
  size_t cap = (size_t)(o->bucket_mb * 1024.0 * 1024.0);
  if (bucketer_plan(&bk, LENET_NTENSORS, offs, counts, cap, &j->dev,
                    lenet_cuda_grads(j->m), o->overlap, BRAID_AVG) != 0) {
    train_seterr(err, errlen, "cannot plan gradient buckets");
    return -1;
  }
  res->nbuckets = bk.nbuckets;
  j->bk = &bk;
  j->lr = o->lr;

  /* Everyone starts from rank 0's parameters. */
  lenet_init_params(&j->host, o->seed);
  braid_result r =
      dist_broadcast(d, j->host.params, j->host.nparams, BRAID_FLOAT32, 0);
  if (r != BRAID_SUCCESS)
    return train_fail(d, "broadcast of the initial parameters", r, err, errlen);
  if (lenet_cuda_set_params(j->m, j->host.params) != 0)
    return cuda_fail(j, err, errlen);

  static const train_loop_ops gpu_ops = {step_gpu, sync_gpu, eval_gpu,
                                         dev_wait_s};
  if (train_loop(o, d, maxb, train, test, &gpu_ops, j, res, err, errlen) != 0)
    return -1;
  /* Replica check on the host copy of the parameters. */
  if (lenet_cuda_get_params(j->m, j->host.params) != 0)
    return cuda_fail(j, err, errlen);
  return train_finish(o, d, &j->host, res, err, errlen);
}

/* ---- the program ----------------------------------------------------------
 */

static int run(const train_opts *o, const char *data, dist *d, int ndev) {
  char err[1024];
  dataset train = {0}, test = {0};
  gpu_job j;
  memset(&j, 0, sizeof j);
  j.d = d;
  int rc = 1;
  if (train_setup(d, PROG, data, o, &train, &test) != 0)
    goto out;
  int lr = 0;
  if (local_rank(d, &lr, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    goto out;
  }
  const int dev = lr % ndev;
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  const int per_rank = (o->batch + d->size - 1) / d->size;
  const int maxb = per_rank > 512 ? per_rank : 512; /* also the eval chunk */
  /* Device, model and device communicator: the ranks agree that every one
   * of them has a model before any waits on a peer that has none. */
  int ok = 0;
  cudaError_t ce = cudaSetDevice(dev);
  if (ce != cudaSuccess)
    fprintf(stderr, PROG ": rank %d: cudaSetDevice(%d): %s\n", d->rank, dev,
            cudaGetErrorString(ce));
  else if (lenet_create(&j.host, 0) != 0)
    fprintf(stderr, PROG ": rank %d: out of memory\n", d->rank);
  else if (lenet_cuda_create(&j.m, maxb) != 0)
    fprintf(stderr, PROG ": rank %d: device %d: %s\n", d->rank, dev,
            lenet_cuda_error());
  else
    ok = 1;
  if (ok && cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    snprintf(prop.name, sizeof prop.name, "?");
  if (open_device_comm(d, ok, &j.dc.comm, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    goto out;
  }
  braid_result r = braid_stream_from_cuda(lenet_cuda_stream(j.m), &j.dc.stream);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, PROG ": rank %d: braid_stream_from_cuda: %s\n", d->rank,
            braid_result_string(r));
    goto out;
  }
  j.dev.ops = &dev_ops;
  j.dev.ctx = &j.dc;
  j.dev.rank = d->rank;
  j.dev.size = d->size;
  j.dev.launcher = d->launcher;

  if (d->rank == 0) {
    char share[64];
    printf(PROG ": %d rank%s (%s), global batch %d (%s), lr %g, "
                "%d epoch%s, %zu parameters, bucket cap %g MiB, overlap %s, "
                "CUDA device %d of %d (%s)\n",
           d->size, d->size == 1 ? "" : "s", d->launcher, o->batch,
           train_share_text(o->batch, d->size, share, sizeof share),
           (double)o->lr, o->epochs, o->epochs == 1 ? "" : "s", j.host.nparams,
           o->bucket_mb, o->overlap ? "on" : "off", dev, ndev, prop.name);
    printf(PROG ": data %s: %zu training, %zu test images\n", data, train.n,
           test.n);
    fflush(stdout);
  }
  train_opts oo = *o;
  oo.log = stdout;
  train_result res;
  if (train_gpu(&oo, &j, maxb, &train, o->eval ? &test : NULL, &res, err,
                sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    goto out;
  }
  if (d->rank == 0) {
    printf(PROG ": %ld steps, %d gradient bucket%s per step, %.2f s per "
                "epoch, %.1f%% waiting on communication\n",
           res.steps, res.nbuckets, res.nbuckets == 1 ? "" : "s", res.epoch_s,
           100.0 * res.comm_share);
    printf(PROG ": replicas %s on %d rank%s (parameter hash %016llx)\n",
           res.replicas_identical ? "identical" : "DIFFER", d->size,
           d->size == 1 ? "" : "s", (unsigned long long)res.hash);
    if (o->eval)
      printf(PROG ": final test accuracy %.4f\n", res.test_acc);
  }
  if (!res.replicas_identical) {
    fprintf(stderr, PROG ": rank %d: replicas differ\n", d->rank);
    goto out;
  }
  rc = 0;
out:
  if (j.dc.stream)
    braid_stream_destroy(j.dc.stream);
  if (j.dc.comm) {
    braid_comm_finalize(j.dc.comm);
    braid_comm_destroy(j.dc.comm);
  }
  lenet_cuda_destroy(j.m);
  lenet_destroy(&j.host);
  dataset_free(&train);
  dataset_free(&test);
  return rc;
}

int main(int argc, char **argv) {
  train_opts o;
  train_opts_default(&o);
  const char *data = TRAIN_DEFAULT_DATA;
  if (train_parse_args(argc, argv, &o, &data) != 0)
    return 2;

  /* Before joining the job: every rank of a job without a GPU stops here. */
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev < 1) {
    fprintf(stderr, PROG ": no CUDA device: %s\n",
            ce != cudaSuccess ? cudaGetErrorString(ce)
                              : "cudaGetDeviceCount found none");
    return 2;
  }

  char err[1024];
  dist d;
  if (dist_open_braid(&d, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return 1;
  }
  int rc = run(&o, data, &d, ndev);
  dist_close(&d);
  return rc;
}
