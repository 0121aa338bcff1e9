/*
 * Non-blocking initialisation (braid_config.blocking = 0, as NCCL's
 * non-blocking communicators): braid_comm_init, braid_comm_init_env and
 * braid_comm_split hand out the communicator at once with
 * BRAID_IN_PROGRESS, and a thread makes it (the rendezvous, the
 * transports). braid_comm_get_async_error says how that goes, and later
 * the first error the communicator met, without issuing a call. Calls on a
 * communicator still being made return BRAID_IN_PROGRESS; destroying or
 * aborting one leaves it to its maker, which frees it when its own wait
 * ends (a rank that never joins: the communicator's timeout).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm.h"
#include "src/log.h"

typedef struct maker {
  comm_job job;
  braid_config cfg; /* the job's, with its strings copied */
  char transport[16], algo[128], name[64];
  braid_comm *shell; /* what the caller holds (internal for NOCOLOR) */
} maker;

static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;

static void *maker_main(void *arg) {
  maker *m = arg;
  braid_comm *c = m->shell;
  c->maker = pthread_self(); /* its own calls (settling) go through */
  atomic_store(&c->maker_set, 1);
  const braid_config *cfg = m->job.cfg != NULL ? &m->cfg : NULL;
  braid_result r;
  if (m->job.parent != NULL) {
    braid_comm *out = NULL;
    r = comm_split_into(m->job.parent, m->job.color, m->job.key, c, &out);
    if (r != BRAID_SUCCESS) /* this thread's message: the parent's error */
      (void)comm_fail(c, r, "%s", err_why(r)); /* names braid_comm_split */
    atomic_fetch_sub(&m->job.parent->inflight, 1);
  } else if (m->job.env) {
    r = comm_init_env_into(c, cfg);
  } else {
    r = comm_init_into(c, m->job.nranks, &m->job.id, m->job.rank, cfg);
  }
  pthread_mutex_lock(&made_lock);
  int orphaned = c->orphaned || m->job.color == BRAID_SPLIT_NOCOLOR;
  if (r != BRAID_SUCCESS && c->broken == BRAID_SUCCESS) {
    pthread_mutex_lock(&c->err_lock);
    memcpy(c->broken_why, c->last_error, sizeof c->broken_why);
    pthread_mutex_unlock(&c->err_lock);
    c->broken = r;
  }
  atomic_store(&c->made, (int)r);
  pthread_mutex_unlock(&made_lock);
  if (orphaned)
    comm_free(c);
  free(m);
  return NULL;
}

braid_result comm_start(braid_comm **out, const comm_job *job) {
  maker *m = calloc(1, sizeof *m);
  braid_comm *c = comm_alloc();
  if (m == NULL || c == NULL) {
    free(m);
    comm_free(c);
    return BRAID_ERR_NOMEM;
  }
  m->job = *job;
  if (job->cfg != NULL) {
    m->cfg = *job->cfg;
    const char *s[3] = {job->cfg->transport, job->cfg->algo, job->cfg->name};
    char *d[3] = {m->transport, m->algo, m->name};
    size_t n[3] = {sizeof m->transport, sizeof m->algo, sizeof m->name};
    for (int i = 0; i < 3; i++)
      if (s[i] != NULL)
        snprintf(d[i], n[i], "%s", s[i]);
    m->cfg.transport = job->cfg->transport ? m->transport : NULL;
    m->cfg.algo = job->cfg->algo ? m->algo : NULL;
    m->cfg.name = job->cfg->name ? m->name : NULL;
  }
  m->shell = c;
  c->blocking = 0;
  c->rank = job->env || job->parent ? -1 : job->rank;
  c->nranks = job->env || job->parent ? 0 : job->nranks;
  atomic_store(&c->made, (int)BRAID_IN_PROGRESS);
  (void)comm_fail(c, BRAID_IN_PROGRESS,
                  "the communicator is still being made (non-blocking "
                  "init): poll braid_comm_get_async_error");
  if (job->parent != NULL)
    atomic_fetch_add(&job->parent->inflight, 1); /* its destroy waits */
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&t, &a, maker_main, m);
  pthread_attr_destroy(&a);
  if (e != 0) {
    if (job->parent != NULL)
      atomic_fetch_sub(&job->parent->inflight, 1);
    WARN(LOG_INIT, "non-blocking init: cannot start a thread: %s", strerror(e));
    free(m);
    comm_free(c);
    return BRAID_ERR_SYSTEM;
  }
  *out = job->color == BRAID_SPLIT_NOCOLOR && job->parent != NULL ? NULL : c;
  return BRAID_IN_PROGRESS;
}

braid_result comm_ready(braid_comm *c) {
  if (c->blocking)
    return BRAID_SUCCESS;
  braid_result r = (braid_result)atomic_load(&c->made);
  if (r == BRAID_IN_PROGRESS && atomic_load(&c->maker_set) &&
      pthread_equal(pthread_self(), c->maker))
    return BRAID_SUCCESS;
  if (r == BRAID_IN_PROGRESS)
    return comm_fail(c, r,
                     "the communicator is still being made (non-blocking "
                     "init): poll braid_comm_get_async_error");
  return r;
}

int comm_orphan(braid_comm *c) {
  if (c->blocking)
    return 0;
  pthread_mutex_lock(&made_lock);
  int making = atomic_load(&c->made) == BRAID_IN_PROGRESS;
  if (making)
    c->orphaned = 1;
  pthread_mutex_unlock(&made_lock);
  return making;
}

braid_result braid_comm_get_async_error(braid_comm *c,
                                        braid_result *async_error) {
  if (c == NULL || async_error == NULL)
    return comm_arg_bad(c, "braid_comm_get_async_error: %s is NULL",
                        c == NULL ? "comm" : "async_error");
  braid_result r = comm_ready(c);
  if (r == BRAID_SUCCESS)
    r = __atomic_load_n(&c->broken, __ATOMIC_ACQUIRE);
  *async_error = r;
  return BRAID_SUCCESS;
}
