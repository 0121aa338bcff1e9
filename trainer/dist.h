/*
 * The trainer's view of communication: a handful of calls behind a small
 * table of functions, so the training loop runs over braid in production and
 * over a recording fake in tests.
 */
#ifndef BRAID_TRAINER_DIST_H
#define BRAID_TRAINER_DIST_H

#include <stddef.h>

#include "braid.h"

typedef struct dist_ops {
  /* In place on buf. async != 0: queue it and return; dist_wait completes. */
  braid_result (*allreduce)(void *ctx, void *buf, size_t count, braid_dtype dt,
                            braid_op op, int async);
  braid_result (*broadcast)(void *ctx, void *buf, size_t count, braid_dtype dt,
                            int root);
  /* Waits for every queued call. */
  braid_result (*wait)(void *ctx);
  const char *(*last_error)(void *ctx);
  void (*close)(void *ctx);
} dist_ops;

typedef struct dist {
  const dist_ops *ops;
  void *ctx;
  int rank, size;
  const char *launcher; /* "single", "braidrun", "openmpi", ... */
  double wait_s;        /* seconds spent blocked on communication */
  long ncalls;          /* allreduce and broadcast calls issued */
} dist;

/* Joins the job the launcher started (braid_comm_init_env); with no launcher
 * in the environment, a one-rank communicator of this process alone. On
 * failure returns -1 with a message in err. */
int dist_open_braid(dist *d, char *err, size_t errlen);
/* Wraps an existing communicator (not owned: dist_close leaves it). */
int dist_wrap_braid(dist *d, braid_comm *comm, char *err, size_t errlen);
void dist_close(dist *d);

/* Blocking calls, timed into d->wait_s. */
braid_result dist_allreduce(dist *d, void *buf, size_t count, braid_dtype dt,
                            braid_op op);
braid_result dist_broadcast(dist *d, void *buf, size_t count, braid_dtype dt,
                            int root);
/* Nonblocking allreduce, completed by dist_wait (timed). */
braid_result dist_iallreduce(dist *d, void *buf, size_t count, braid_dtype dt,
                             braid_op op);
braid_result dist_wait(dist *d);
const char *dist_error(dist *d);

double dist_now(void); /* monotonic seconds */

#endif
