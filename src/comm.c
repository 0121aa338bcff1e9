/*
 * Communicators: creation over the bootstrap, transport choice per peer,
 * split, finalize, destroy, abort, errors.
 */
#include "src/comm.h"
#include "src/check.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/plan.h"
#include "collectives/select.h"
#include "device/cuda_dev.h"
#include "src/comm_dev.h"
#include "src/config.h"
#include "src/doctor.h"
#include "src/enqueue.h"
#include "src/exec_int.h"
#include "src/flight.h"
#include "src/launch_env.h"
#include "src/log.h"
#include "src/premul.h"
#include "transports/ibverbs/ibverbs.h"
#include "transports/ofi/ofi.h"

static void comm_keep_error(braid_comm *c, const char *msg) {
  pthread_mutex_lock(&c->err_lock);
  snprintf(c->last_error, sizeof c->last_error, "%s", msg);
  pthread_mutex_unlock(&c->err_lock);
  INFO(LOG_COLL, "%s", msg);
}

braid_result comm_fail_msg(braid_comm *c, braid_result r, const char *fmt,
                           ...) {
  char buf[sizeof c->last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  (void)ERR(r, "%s", buf);
  comm_keep_error(c, buf);
  return r;
}

braid_result comm_arg_bad(braid_comm *c, const char *fmt, ...) {
  (void)cfg_get(); /* BRAID_DEBUG_FILE and the level, before the first log */
  char buf[sizeof c->last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  (void)ERR(BRAID_ERR_INVALID_ARG, "%s", buf); /* the thread's too */
  if (c != NULL)
    comm_keep_error(c, buf);
  WARN(c != NULL ? LOG_COLL : LOG_INIT, "%s", buf);
  return BRAID_ERR_INVALID_ARG;
}

void comm_break_dead(braid_comm *c, braid_result r) {
  if (r == BRAID_ERR_REMOTE || r == BRAID_ERR_TIMEOUT)
    comm_break(c, r);
}

void comm_break(braid_comm *c, braid_result r) {
  if (r == BRAID_SUCCESS || c->broken != BRAID_SUCCESS)
    return;
  pthread_mutex_lock(&c->err_lock);
  memcpy(c->broken_why, c->last_error, sizeof c->broken_why);
  pthread_mutex_unlock(&c->err_lock);
  c->broken = r;
  if (r == BRAID_ERR_MISMATCH)
    check_broke(c);
  (void)flight_dump(c,
                    r == BRAID_ERR_TIMEOUT    ? "timeout"
                    : r == BRAID_ERR_REMOTE   ? "remote"
                    : r == BRAID_ERR_MISMATCH ? "mismatch"
                                              : "error",
                    NULL);
}

const char *comm_broken_why(const braid_comm *c) {
  return c->broken_why[0] ? c->broken_why : braid_result_string(c->broken);
}

const char *braid_comm_last_error(const braid_comm *c) {
  if (c == NULL) { /* the thread's: why a creation failed, say */
    const char *m = err_msg();
    return m[0] ? m : "no error";
  }
  return c->last_error[0] ? c->last_error : "no error";
}

tp_conn *comm_conn(braid_comm *c, int peer, int channel) {
  size_t i = (size_t)peer * (size_t)(c->nchannels + 1) + (size_t)channel;
  if (c->conns[i] == NULL) {
    int t = c->peer_tp[peer];
    c->conns[i] = c->tp[t]->conn(c->tp_state[t], peer, channel);
  }
  return c->conns[i];
}

const tp_ops *comm_tp_by_name(const char *name) {
  if (strcmp(name, "shm") == 0)
    return &tp_shm;
  if (strcmp(name, "tcp") == 0)
    return &tp_tcp;
  if (strcmp(name, "ofi") == 0)
    return &tp_ofi;
  if (strcmp(name, "ibverbs") == 0 || strcmp(name, "ib") == 0)
    return &tp_ibverbs;
  return NULL;
}

/* What this rank could use between hosts, as bits; ranks use what all have,
 * so every rank sets up the same transports (setup is collective). */
enum { CAP_IB = 1, CAP_OFI_FAST = 2 };

static braid_result remote_choice(braid_comm *c, const tp_ops **out) {
  int remote = 0;
  for (int p = 0; p < c->nranks; p++)
    remote |= !boot_same_host(c->boot, c->rank, p);
  uint32_t mine = 0, *all = NULL;
  if (remote) {
    char name[64];
    tp_settings set;
    cfg_tp_settings(&set);
    if (ib_probe_device(&set, name, sizeof name))
      mine |= CAP_IB;
    if (ofi_probe_fast(&set, name, sizeof name))
      mine |= CAP_OFI_FAST;
  }
  all = calloc((size_t)c->nranks, sizeof *all);
  if (all == NULL)
    return BRAID_ERR_NOMEM;
  braid_result r = boot_allgather(c->boot, &mine, all, sizeof mine);
  uint32_t common = CAP_IB | CAP_OFI_FAST;
  for (int p = 0; p < c->nranks; p++)
    common &= all[p];
  free(all);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r, "transport choice: %s", err_msg());
  *out = (common & CAP_IB)         ? &tp_ibverbs
         : (common & CAP_OFI_FAST) ? &tp_ofi
                                   : &tp_tcp;
  return BRAID_SUCCESS;
}

/* Choose a transport per peer and set each one up (collective). */
static braid_result setup_transports(braid_comm *c) {
  const char *forced = c->transport_forced[0] ? c->transport_forced : NULL;
  const tp_ops *want_local = &tp_shm, *want_remote = NULL;
  if (forced != NULL) {
    const tp_ops *t = comm_tp_by_name(forced);
    if (t == NULL)
      return comm_fail(c, BRAID_ERR_INVALID_ARG,
                       "BRAID_TRANSPORT=%s is not a transport (shm, tcp, ofi, "
                       "ibverbs)",
                       forced);
    want_local = t;
    if (t == &tp_shm) {
      for (int p = 0; p < c->nranks; p++)
        if (!boot_same_host(c->boot, c->rank, p))
          return comm_fail(c, BRAID_ERR_INVALID_ARG,
                           "BRAID_TRANSPORT=shm but rank %d is on another "
                           "host (%s)",
                           p, boot_peer_info(c->boot, p)->host);
      want_remote = &tp_tcp; /* unused */
    } else {
      want_remote = t;
    }
  } else {
    CHECKR(remote_choice(c, &want_remote));
  }
  c->peer_tp = calloc((size_t)c->nranks, sizeof *c->peer_tp);
  c->conns =
      calloc((size_t)c->nranks * (size_t)(c->nchannels + 1), sizeof(tp_conn *));
  if (c->peer_tp == NULL || c->conns == NULL)
    return BRAID_ERR_NOMEM;
  /* Every rank runs the same transports in the same order (setup is
   * collective), even where it has no peer on one of them. */
  const tp_ops *order[] = {&tp_self, &tp_shm, &tp_tcp, &tp_ofi, &tp_ibverbs};
  int nused = 0;
  for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
    const tp_ops *t = order[k];
    if (t != &tp_self && t != want_local && t != want_remote)
      continue;
    uint8_t *peers = calloc((size_t)c->nranks, 1);
    if (peers == NULL)
      return BRAID_ERR_NOMEM;
    for (int p = 0; p < c->nranks; p++) {
      const tp_ops *pick = p == c->rank                          ? &tp_self
                           : boot_same_host(c->boot, c->rank, p) ? want_local
                                                                 : want_remote;
      if (pick == t) {
        peers[p] = 1;
        c->peer_tp[p] = nused;
      }
    }
    tp_setup st;
    memset(&st, 0, sizeof st);
    st.boot = c->boot;
    st.rank = c->rank;
    st.nranks = c->nranks;
    st.nchannels = c->nchannels + 1;
    st.nslots = c->nslots;
    st.slot_bytes = c->slot_bytes;
    st.timeout_ms = c->timeout_ms;
    cfg_tp_settings(&st.set);
    void *state = NULL;
    err_clear(); /* what setup records is its own */
    int r = t->setup(&st, peers, &state);
    free(peers);
    if (r != BRAID_SUCCESS)
      return comm_fail(c, (braid_result)r,
                       "transport %s setup failed on rank %d: %s", t->name,
                       c->rank, err_msg()[0] ? err_msg() : "no detail");
    c->tp[nused] = t;
    c->tp_state[nused] = state;
    c->ntp = ++nused;
  }
  return BRAID_SUCCESS;
}

braid_comm *comm_alloc(void) {
  braid_comm *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->qlock, NULL);
  pthread_cond_init(&c->qcond, NULL);
  pthread_mutex_init(&c->err_lock, NULL);
  c->blocking = 1;
  return c;
}

/* Makes a communicator on bootstrap b into `into` (a shell from
 * comm_alloc, which braid_comm_init's non-blocking form has handed out
 * already) or, when NULL, into a new one. *out is set even on failure
 * (the caller frees it). */
static braid_result comm_new(braid_comm **out, boot *b, const braid_config *cfg,
                             const braid_comm *parent, braid_comm *into) {
  const cfg_env *env = cfg_get();
  braid_comm *c = into != NULL ? into : comm_alloc();
  if (c == NULL)
    return BRAID_ERR_NOMEM;
  c->boot = b;
  boot_set_abort(b, &c->aborted);
  c->rank = boot_rank(b);
  c->nranks = boot_nranks(b);
  if (parent != NULL) {
    c->blocking = parent->blocking;
    c->timeout_ms = parent->timeout_ms;
    c->check = parent->check;
    c->deterministic = parent->deterministic;
    c->nchannels = parent->nchannels;
    snprintf(c->algo, sizeof c->algo, "%s", parent->algo);
    snprintf(c->transport_forced, sizeof c->transport_forced, "%s",
             parent->transport_forced);
    snprintf(c->name, sizeof c->name, "%.50s.split", parent->name);
  } else {
    c->blocking = cfg == NULL || cfg->blocking != 0;
    c->timeout_ms =
        cfg && cfg->timeout_ms > 0 ? cfg->timeout_ms : env->timeout_ms;
    c->check = cfg && cfg->check != 0 ? cfg->check > 0 : env->check;
    c->deterministic = cfg && cfg->deterministic != 0 ? cfg->deterministic > 0
                                                      : env->deterministic;
    c->nchannels = cfg && cfg->nchannels > 0 ? cfg->nchannels : env->nchannels;
    const char *algo = cfg && cfg->algo ? cfg->algo : env->algo;
    snprintf(c->algo, sizeof c->algo, "%s", algo ? algo : "");
    const char *tr = cfg && cfg->transport ? cfg->transport : env->transport;
    snprintf(c->transport_forced, sizeof c->transport_forced, "%s",
             tr ? tr : "");
    snprintf(c->name, sizeof c->name, "%s",
             cfg && cfg->name ? cfg->name : "comm");
  }
  if (c->nchannels <= 0)
    c->nchannels = PLAN_DEFAULT_CHANNELS;
  c->nslots = env->nslots;
  cfg_slots(env->buffsize, &c->slot_bytes, &c->slice_bytes);
  c->broken = BRAID_SUCCESS;
  braid_result r = BRAID_SUCCESS;
  if (c->algo[0]) { /* validate the filter once, with a clear error */
    const gen_desc *g = NULL;
    if (select_algo(SCHED_ALLREDUCE, c->nranks, 8, SELECT_TP_SHM, c->algo,
                    &g) != BRAID_SUCCESS)
      r = comm_fail(c, BRAID_ERR_INVALID_ARG, "BRAID_ALGO=%s: %s", c->algo,
                    err_msg());
  }
  /* The CUDA runtime looks for a driver once per process: on a host
   * without one it tries libcuda.so.1 in every library directory, 0.25 to
   * 0.6 ms. Every call asks whether its buffers are on a device
   * (src/api.c), so asked here the search costs init, not the first call;
   * where the answer is none, the calls need not ask at all. */
  c->host_only = cudev_count() == 0;
  if (r == BRAID_SUCCESS)
    r = comm_view_setup(c);
  if (r == BRAID_SUCCESS)
    r = setup_transports(c);
  if (r != BRAID_SUCCESS) {
    WARN(LOG_INIT, "%s", c->last_error);
    *out = c; /* the caller frees it */
    return r;
  }
  char names[128] = "";
  for (int i = 0, len = 0; i < c->ntp && len < (int)sizeof names; i++)
    len += snprintf(names + len, sizeof names - (size_t)len, "%s%s",
                    i ? ", " : "", c->tp[i]->name);
  INFO(LOG_INIT, "comm %s: rank %d of %d, %d channels, transports: %s", c->name,
       c->rank, c->nranks, c->nchannels, names[0] ? names : "none");
  *out = c;
  r = flight_new(c);
  if (r == BRAID_SUCCESS)
    r = exec_wait_settle(c);
  flight_forget(c); /* the settling rounds: a user's calls only */
  if (r != BRAID_SUCCESS)
    WARN(LOG_INIT, "%s", c->last_error);
  return r;
}

void comm_free(braid_comm *c) {
  if (c == NULL)
    return;
  enq_shutdown(c);
  flight_free(c);
  comm_dev_teardown(c); /* before the host transports: staged sends use them */
  comm_dev_loose_free(c);
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->teardown != NULL)
      c->tp[i]->teardown(c->tp_state[i]);
  exec_sched_cache_clear(c);
  free(c->prep);
  if (c->boot != NULL)
    boot_close(c->boot);
  if (c->topo != NULL)
    topo_graph_free(c->topo);
  comm_view_free(c);
  free(c->peer_tp);
  free(c->conns);
  free(c->scratch);
  free(c->xpool);
  premul_free(c);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->qlock);
  pthread_cond_destroy(&c->qcond);
  pthread_mutex_destroy(&c->err_lock);
  free(c);
}

/* A config's fields out of range, named (0 or NULL: the environment's):
 * BRAID_ERR_INVALID_ARG with the field and its value. */
static braid_result config_check(const braid_config *cfg) {
  const braid_result bad = BRAID_ERR_INVALID_ARG;
  if (cfg == NULL)
    return BRAID_SUCCESS;
  select_filter f;
  if (cfg->size != sizeof(braid_config))
    return ERR(bad,
               "cfg->size is %zu, not sizeof(braid_config) = %zu: cfg was not "
               "set up by braid_config_init",
               cfg->size, sizeof(braid_config));
  if (cfg->timeout_ms < 0)
    return ERR(bad, "cfg->timeout_ms is %d (0: BRAID_TIMEOUT, else > 0)",
               cfg->timeout_ms);
  if (cfg->nchannels < 0 || cfg->nchannels > 32)
    return ERR(bad, "cfg->nchannels is %d (0: BRAID_NCHANNELS, else 1 to 32)",
               cfg->nchannels);
  if (cfg->check < -1 || cfg->check > 1)
    return ERR(bad, "cfg->check is %d (1: on, -1: off, 0: BRAID_CHECK)",
               cfg->check);
  if (cfg->blocking != 0 && cfg->blocking != 1)
    return ERR(bad, "cfg->blocking is %d (1: blocking, 0: non-blocking)",
               cfg->blocking);
  if (cfg->deterministic < -1 || cfg->deterministic > 1)
    return ERR(bad,
               "cfg->deterministic is %d (1: on, -1: off, 0: "
               "BRAID_DETERMINISTIC)",
               cfg->deterministic);
  if (cfg->transport != NULL && cfg->transport[0] != '\0' &&
      comm_tp_by_name(cfg->transport) == NULL)
    return ERR(bad,
               "cfg->transport \"%.40s\" is not a transport (shm, tcp, ofi, "
               "ibverbs)",
               cfg->transport);
  if (cfg->algo != NULL && select_filter_parse(cfg->algo, &f) != BRAID_SUCCESS)
    return ERR(bad, "cfg->algo is \"%.60s\": %.199s", cfg->algo, err_msg());
  return BRAID_SUCCESS;
}

/* The ids with which this process made a communicator, and as which rank:
 * an id serves one rendezvous, whose root (hosted by rank 0) closes once
 * every rank has joined, so joining again with it would wait the whole
 * timeout for a root that is gone. Remembered after a success only: a
 * creation that failed may be tried again. */
#define USED_IDS 64
static struct {
  braid_unique_id id;
  int rank;
} g_used[USED_IDS];
static int g_nused;
static pthread_mutex_t g_used_lock = PTHREAD_MUTEX_INITIALIZER;

static int id_used(const braid_unique_id *id, int rank, int remember) {
  int found = 0;
  pthread_mutex_lock(&g_used_lock);
  for (int i = 0; i < g_nused && i < USED_IDS && !found; i++)
    found =
        g_used[i].rank == rank && memcmp(&g_used[i].id, id, sizeof *id) == 0;
  if (!found && remember) {
    g_used[g_nused % USED_IDS].id = *id;
    g_used[g_nused % USED_IDS].rank = rank;
    g_nused++;
  }
  pthread_mutex_unlock(&g_used_lock);
  return found;
}

void comm_id_reusable(const braid_unique_id *id) {
  pthread_mutex_lock(&g_used_lock);
  for (int i = 0; i < g_nused && i < USED_IDS; i++)
    if (memcmp(&g_used[i].id, id, sizeof *id) == 0)
      g_used[i].rank = -1; /* matches no rank */
  pthread_mutex_unlock(&g_used_lock);
}

braid_result comm_init_into(braid_comm *shell, int nranks,
                            const braid_unique_id *id, int rank,
                            const braid_config *cfg) {
  const cfg_env *env = cfg_get();
  int timeout = cfg && cfg->timeout_ms > 0 ? cfg->timeout_ms : env->timeout_ms;
  char err[256] = "";
  boot *b = NULL;
  if (id_used(id, rank, 0))
    return comm_fail(
        shell, BRAID_ERR_INVALID_ARG,
        "braid_comm_init (rank %d of %d): this process made a communicator "
        "with this unique id as rank %d already, and an id serves one "
        "rendezvous: get a new one (braid_get_unique_id) for every "
        "communicator, or make more from the first with braid_comm_split "
        "(braidrun's BRAID_UNIQUE_ID is one id per job)",
        rank, nranks, rank);
  braid_result r = boot_init(id, rank, nranks, timeout, &b);
  if (r != BRAID_SUCCESS) {
    snprintf(err, sizeof err, "%s", err_msg());
    WARN(LOG_INIT, "braid_comm_init (rank %d of %d): %s", rank, nranks, err);
    doc_init_failed(rank, nranks, NULL, err);
    return comm_fail(shell, r, "braid_comm_init (rank %d of %d): %s", rank,
                     nranks, err);
  }
  braid_comm *c = NULL;
  r = comm_new(&c, b, cfg, NULL, shell);
  if (r == BRAID_SUCCESS &&
      (env->topo_file != NULL || env->topo_dump_file != NULL)) {
    r = comm_topo_load(&c->topo);
    if (r != BRAID_SUCCESS) {
      (void)comm_fail(c, r, "topology: %s", err_msg());
      WARN(LOG_TOPO, "braid_comm_init (rank %d): %s", rank, err_msg());
    }
  }
  if (r != BRAID_SUCCESS)
    doc_init_failed(rank, nranks, c->boot, c->last_error);
  else
    (void)id_used(id, rank, 1);
  return r;
}

braid_result braid_comm_init(braid_comm **comm, int nranks,
                             const braid_unique_id *id, int rank,
                             const braid_config *cfg) {
  if (comm == NULL)
    return comm_arg_bad(NULL, "braid_comm_init: comm is NULL");
  *comm = NULL;
  if (nranks < 1)
    return comm_arg_bad(NULL, "braid_comm_init: nranks is %d (at least 1)",
                        nranks);
  if (rank < 0 || rank >= nranks)
    return comm_arg_bad(NULL,
                        "braid_comm_init: rank is %d, nranks is %d (a rank is "
                        "0..%d)",
                        rank, nranks, nranks - 1);
  if (id == NULL)
    return comm_arg_bad(NULL, "braid_comm_init: id is NULL");
  if (boot_id_check(id) != BRAID_SUCCESS)
    return comm_arg_bad(NULL, "braid_comm_init: id %s", err_msg());
  if (config_check(cfg) != BRAID_SUCCESS)
    return comm_arg_bad(NULL, "braid_comm_init: %s", err_msg());
  if (cfg != NULL && cfg->blocking == 0)
    return comm_start(
        comm,
        &(comm_job){.nranks = nranks, .rank = rank, .id = *id, .cfg = cfg});
  braid_comm *c = comm_alloc();
  if (c == NULL)
    return BRAID_ERR_NOMEM;
  braid_result r = comm_init_into(c, nranks, id, rank, cfg);
  if (r != BRAID_SUCCESS) {
    comm_free(c);
    return r;
  }
  *comm = c;
  return BRAID_SUCCESS;
}

const char *braid_env_launcher(void) { return launch_name(); }

braid_result braid_comm_init_env(braid_comm **comm, const braid_config *cfg) {
  if (comm == NULL)
    return comm_arg_bad(NULL, "braid_comm_init_env: comm is NULL");
  *comm = NULL;
  if (config_check(cfg) != BRAID_SUCCESS)
    return comm_arg_bad(NULL, "braid_comm_init_env: %s", err_msg());
  if (cfg != NULL && cfg->blocking == 0)
    return comm_start(comm, &(comm_job){.env = 1, .cfg = cfg});
  braid_comm *c = comm_alloc();
  if (c == NULL)
    return BRAID_ERR_NOMEM;
  braid_result r = comm_init_env_into(c, cfg);
  if (r != BRAID_SUCCESS) {
    comm_free(c);
    return r;
  }
  *comm = c;
  return BRAID_SUCCESS;
}

braid_result comm_init_env_into(braid_comm *shell, const braid_config *cfg) {
  const cfg_env *env = cfg_get();
  launch_info li;
  braid_unique_id id;
  char err[256] = "";
  int timeout = cfg && cfg->timeout_ms > 0 ? cfg->timeout_ms : env->timeout_ms;
  braid_result r = launch_detect(&li, &id, timeout);
  if (r != BRAID_SUCCESS) {
    snprintf(err, sizeof err, "%s", err_msg());
    WARN(LOG_INIT, "braid_comm_init_env: %s", err);
    /* the rank is known once the launcher's variables were read */
    doc_init_failed(li.source != NULL ? li.rank : -1, 0, NULL, err);
    return comm_fail(shell, r, "braid_comm_init_env: %s", err);
  }
  INFO(LOG_INIT, "launcher %s: rank %d of %d", li.source, li.rank, li.size);
  shell->rank = li.rank;
  shell->nranks = li.size;
  r = comm_init_into(shell, li.size, &id, li.rank, cfg);
  launch_cleanup();
  return r;
}

braid_result comm_sub(braid_comm *c, const int *ranks, int n, int me,
                      const char *fn, braid_comm *into, braid_comm **out) {
  boot *b = NULL;
  pthread_mutex_lock(&c->lock);
  braid_result r = boot_split(c->boot, ranks, n, me, &b);
  pthread_mutex_unlock(&c->lock);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r, "%s: %s", fn, err_msg());
  braid_comm *nc = NULL;
  r = comm_new(&nc, b, NULL, c, into);
  if (r != BRAID_SUCCESS) {
    (void)comm_fail(c, r, "%s: %s", fn, nc ? nc->last_error : "");
    if (into == NULL)
      comm_free(nc);
    return r;
  }
  *out = nc;
  return BRAID_SUCCESS;
}

braid_result braid_comm_split(braid_comm *c, int color, int key,
                              braid_comm **out) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_split: comm is NULL");
  if (out == NULL)
    return comm_arg_bad(c, "braid_comm_split: out is NULL");
  *out = NULL;
  if (color < BRAID_SPLIT_NOCOLOR)
    return comm_arg_bad(c,
                        "braid_comm_split: color is %d (a color is 0 or more, "
                        "or BRAID_SPLIT_NOCOLOR = -1)",
                        color);
  CHECKR(comm_ready(c));
  if (!c->blocking)
    return comm_start(out,
                      &(comm_job){.parent = c, .color = color, .key = key});
  CHECKR(comm_enter(c, "braid_comm_split"));
  braid_result r = comm_split_into(c, color, key, NULL, out);
  comm_leave(c);
  return r;
}

braid_result comm_split_into(braid_comm *c, int color, int key,
                             braid_comm *into, braid_comm **out) {
  CHECKR(enq_drain(c));
  int32_t mine[2] = {color, key};
  int32_t *all = malloc(sizeof mine * (size_t)c->nranks);
  int *ranks = malloc(sizeof(int) * (size_t)c->nranks);
  if (all == NULL || ranks == NULL) {
    free(all);
    free(ranks);
    return BRAID_ERR_NOMEM;
  }
  pthread_mutex_lock(&c->lock);
  braid_result r = boot_allgather(c->boot, mine, all, sizeof mine);
  pthread_mutex_unlock(&c->lock);
  if (r != BRAID_SUCCESS) {
    r = comm_fail(c, r, "braid_comm_split: %s", err_msg());
    if (r != BRAID_ERR_ABORTED)
      comm_break_dead(c, r);
    goto done;
  }
  if (color == BRAID_SPLIT_NOCOLOR)
    goto done;
  /* members ordered by key, then by old rank */
  int n = 0, me = -1;
  for (int p = 0; p < c->nranks; p++)
    if (all[2 * p] == color)
      ranks[n++] = p;
  for (int i = 1; i < n; i++) {
    int v = ranks[i], j = i - 1;
    while (j >= 0 &&
           (all[2 * ranks[j] + 1] > all[2 * v + 1] ||
            (all[2 * ranks[j] + 1] == all[2 * v + 1] && ranks[j] > v))) {
      ranks[j + 1] = ranks[j];
      j--;
    }
    ranks[j + 1] = v;
  }
  for (int i = 0; i < n; i++)
    if (ranks[i] == c->rank)
      me = i;
  r = comm_sub(c, ranks, n, me, "braid_comm_split", into, out);
done:
  free(all);
  free(ranks);
  return r;
}

braid_result comm_enter(braid_comm *c, const char *fn) {
  atomic_fetch_add(&c->inflight, 1);
  if (atomic_load(&c->aborted)) {
    atomic_fetch_sub(&c->inflight, 1);
    return ERR(BRAID_ERR_ABORTED, "%s: the communicator was aborted", fn);
  }
  return BRAID_SUCCESS;
}

void comm_leave(braid_comm *c) { atomic_fetch_sub(&c->inflight, 1); }

static braid_result finalize_in(braid_comm *c) {
  CHECKR(enq_drain(c));
  if (c->broken != BRAID_SUCCESS)
    return c->broken;
  pthread_mutex_lock(&c->lock);
  braid_result r = boot_barrier(c->boot);
  pthread_mutex_unlock(&c->lock);
  if (r == BRAID_ERR_ABORTED)
    return comm_fail(c, r, "braid_comm_finalize: %s", err_msg());
  if (r == BRAID_ERR_MISMATCH) { /* a rank is in another call */
    r = comm_fail(c, r,
                  "braid_comm_finalize: a rank is in another call (it "
                  "made one more call than this rank, or this rank skipped "
                  "one): %s",
                  err_msg());
    comm_break(c, r);
    return r;
  }
  if (r != BRAID_SUCCESS) {
    r = comm_fail(c, r, "braid_comm_finalize: %s", err_msg());
    comm_break_dead(c, r);
  }
  return r;
}

braid_result braid_comm_finalize(braid_comm *c) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_finalize: comm is NULL");
  CHECKR(comm_ready(c));
  CHECKR(comm_enter(c, "braid_comm_finalize"));
  braid_result r = finalize_in(c);
  comm_leave(c);
  return r;
}

/* Until no thread is inside a call of c, or makes a communicator from it
 * (a non-blocking split). */
static void comm_quiesce(braid_comm *c) {
  for (int64_t ms = 0; atomic_load(&c->inflight) > 0; ms++) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
    if (ms > 0 && ms % 5000 == 0)
      WARN(LOG_COLL,
           "rank %d: %d calls of its communicator still inside after %lld s",
           c->rank, atomic_load(&c->inflight), (long long)(ms / 1000));
  }
}

braid_result braid_comm_destroy(braid_comm *c) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_destroy: comm is NULL");
  if (comm_orphan(c)) /* still being made: its maker frees it */
    return BRAID_SUCCESS;
  comm_quiesce(c);
  comm_free(c);
  return BRAID_SUCCESS;
}

braid_result braid_comm_abort(braid_comm *c) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_abort: comm is NULL");
  if (comm_orphan(c)) /* still being made: its maker frees it */
    return BRAID_SUCCESS;
  if (c->broken == BRAID_SUCCESS && flight_unfinished(c))
    (void)flight_dump(c, "abort", NULL); /* a broken one was dumped then */
  atomic_store(&c->aborted, 1);
  /* a call in another thread sees the flag at its next pass through the
   * wait (its naps are at most ~12 ms) and returns BRAID_ERR_ABORTED; the
   * communicator is freed once no thread is inside a call */
  comm_quiesce(c);
  comm_free(c);
  return BRAID_SUCCESS;
}

/* A NULL out-pointer of a query: named in the communicator's last error
 * (a record of what went wrong, not of its state: set on a const one). */
static braid_result null_out(const braid_comm *c, const char *fn,
                             const char *arg) {
  if (c == NULL)
    return comm_arg_bad(NULL, "%s: comm is NULL", fn);
  return comm_arg_bad((braid_comm *)c, "%s: %s is NULL", fn, arg);
}

braid_result braid_comm_flight_dump(braid_comm *c, const char *path) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_flight_dump: comm is NULL");
  if (path != NULL && path[0] == '\0')
    return comm_arg_bad(c, "braid_comm_flight_dump: path is \"\" (a file name, "
                           "or NULL for BRAID_FLIGHT_RECORDER_FILE)");
  CHECKR(comm_ready(c));
  CHECKR(comm_enter(c, "braid_comm_flight_dump"));
  braid_result r = flight_dump(c, "api", path);
  comm_leave(c);
  return r;
}

braid_result braid_comm_rank(const braid_comm *c, int *rank) {
  if (c == NULL || rank == NULL)
    return null_out(c, "braid_comm_rank", "rank");
  if (c->rank < 0) /* braid_comm_init_env's non-blocking form: not known yet */
    return comm_ready((braid_comm *)c);
  *rank = c->rank;
  return BRAID_SUCCESS;
}

braid_result braid_comm_size(const braid_comm *c, int *size) {
  if (c == NULL || size == NULL)
    return null_out(c, "braid_comm_size", "size");
  if (c->nranks <= 0)
    return comm_ready((braid_comm *)c);
  *size = c->nranks;
  return BRAID_SUCCESS;
}

braid_result braid_get_unique_id(braid_unique_id *id) {
  (void)cfg_get();
  if (id == NULL)
    return comm_arg_bad(NULL, "braid_get_unique_id: id is NULL");
  braid_result r = boot_unique_id(id);
  if (r != BRAID_SUCCESS)
    WARN(LOG_BOOT, "braid_get_unique_id: %s", err_msg());
  return r;
}
