#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double dist_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct braid_ctx {
  braid_comm *comm;
  braid_stream *stream;
  int own_comm;
} braid_ctx;

static braid_result b_allreduce(void *ctx, void *buf, size_t count,
                                braid_dtype dt, braid_op op, int async) {
  braid_ctx *c = ctx;
  return braid_allreduce(buf, buf, count, dt, op, c->comm,
                         async ? c->stream : NULL);
}

static braid_result b_broadcast(void *ctx, void *buf, size_t count,
                                braid_dtype dt, int root) {
  braid_ctx *c = ctx;
  return braid_broadcast(buf, buf, count, dt, root, c->comm, NULL);
}

static braid_result b_wait(void *ctx) {
  braid_ctx *c = ctx;
  return braid_stream_synchronize(c->stream);
}

static const char *b_last_error(void *ctx) {
  braid_ctx *c = ctx;
  const char *e = braid_comm_last_error(c->comm);
  return e && *e ? e : "(no details)";
}

static void b_close(void *ctx) {
  braid_ctx *c = ctx;
  if (c->stream)
    braid_stream_destroy(c->stream);
  if (c->own_comm && c->comm) {
    braid_comm_finalize(c->comm);
    braid_comm_destroy(c->comm);
  }
  free(c);
}

static const dist_ops braid_ops = {b_allreduce, b_broadcast, b_wait,
                                   b_last_error, b_close};

/* With no communicator, the thread's last error says why init failed. */
static const char *init_error(const braid_comm *comm) {
  return braid_comm_last_error(comm);
}

static int setup(dist *d, braid_ctx *c, char *err, size_t errlen) {
  braid_result r = braid_comm_rank(c->comm, &d->rank);
  if (r == BRAID_SUCCESS)
    r = braid_comm_size(c->comm, &d->size);
  if (r == BRAID_SUCCESS)
    r = braid_stream_create(&c->stream);
  if (r != BRAID_SUCCESS) {
    snprintf(err, errlen, "braid setup: %s: %s", braid_result_string(r),
             braid_comm_last_error(c->comm));
    return -1;
  }
  d->ops = &braid_ops;
  d->ctx = c;
  return 0;
}

int dist_open_braid(dist *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  braid_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  c->own_comm = 1;
  const char *launcher = braid_env_launcher();
  braid_result r;
  if (launcher) {
    r = braid_comm_init_env(&c->comm, NULL);
    if (r != BRAID_SUCCESS) {
      snprintf(err, errlen, "braid_comm_init_env (launcher %s): %s: %s",
               launcher, braid_result_string(r), init_error(c->comm));
      free(c);
      return -1;
    }
  } else {
    launcher = "single";
    braid_unique_id id;
    r = braid_get_unique_id(&id);
    if (r == BRAID_SUCCESS)
      r = braid_comm_init(&c->comm, 1, &id, 0, NULL);
    if (r != BRAID_SUCCESS) {
      snprintf(err, errlen, "braid single-rank init: %s: %s",
               braid_result_string(r), init_error(c->comm));
      free(c);
      return -1;
    }
  }
  d->launcher = launcher;
  if (setup(d, c, err, errlen) != 0) {
    b_close(c);
    return -1;
  }
  return 0;
}

int dist_wrap_braid(dist *d, braid_comm *comm, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  braid_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  c->comm = comm;
  d->launcher = "caller";
  if (setup(d, c, err, errlen) != 0) {
    b_close(c);
    return -1;
  }
  return 0;
}

void dist_close(dist *d) {
  if (d->ops && d->ops->close)
    d->ops->close(d->ctx);
  d->ops = NULL;
  d->ctx = NULL;
}

braid_result dist_allreduce(dist *d, void *buf, size_t count, braid_dtype dt,
                            braid_op op) {
  double t0 = dist_now();
  braid_result r = d->ops->allreduce(d->ctx, buf, count, dt, op, 0);
  d->wait_s += dist_now() - t0;
  d->ncalls++;
  return r;
}

braid_result dist_broadcast(dist *d, void *buf, size_t count, braid_dtype dt,
                            int root) {
  double t0 = dist_now();
  braid_result r = d->ops->broadcast(d->ctx, buf, count, dt, root);
  d->wait_s += dist_now() - t0;
  d->ncalls++;
  return r;
}

braid_result dist_iallreduce(dist *d, void *buf, size_t count, braid_dtype dt,
                             braid_op op) {
  d->ncalls++;
  return d->ops->allreduce(d->ctx, buf, count, dt, op, 1);
}

braid_result dist_wait(dist *d) {
  double t0 = dist_now();
  braid_result r = d->ops->wait(d->ctx);
  d->wait_s += dist_now() - t0;
  return r;
}

const char *dist_error(dist *d) {
  return d->ops && d->ops->last_error ? d->ops->last_error(d->ctx)
                                      : "(no details)";
}
