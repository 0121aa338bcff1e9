/*
 * The flight recorder: a ring of the last N calls of a communicator, and its
 * dump as JSON Lines (the format is in docs/TRACE.md; `braid-trace analyze`
 * reads it).
 *
 * Recording costs a few stores per call: the issuing thread fills a record
 * (flight_queued), the thread that runs the call updates its state. A
 * record carries its call's index, so a call whose record newer calls have
 * reused (more than N calls behind) leaves it alone. A dump reads the ring
 * without stopping the calls: a record changing while it is written may
 * show a mix of two states, never memory outside the ring.
 *
 * SIGUSR1 dumps every communicator of the process: the handler only writes
 * a byte into a pipe, and a thread (started with the first recorder, when
 * SIGUSR1 was left at its default action) does the writing.
 */
#include "src/flight.h"
#include "src/check.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/schedule.h"
#include "src/config.h"
#include "src/log.h"
#include "src/stream.h"
#include "transports/hmac.h"

typedef enum { FL_QUEUED, FL_STARTED, FL_WAITING, FL_DONE, FL_FAILED } fl_state;

/* A barrier runs as an allreduce, an alltoallv as sends and receives. */
enum { FL_AS_COLL, FL_AS_BARRIER, FL_AS_ALLTOALLV };

static const char *state_name[] = {"queued", "started", "waiting", "done",
                                   "failed"};

static const char *result_name(int32_t r) {
  static const char *names[] = {
      "BRAID_SUCCESS",         "BRAID_ERR_INVALID_ARG", "BRAID_ERR_SYSTEM",
      "BRAID_ERR_REMOTE",      "BRAID_ERR_TIMEOUT",     "BRAID_ERR_MISMATCH",
      "BRAID_ERR_UNSUPPORTED", "BRAID_ERR_NOMEM",       "BRAID_ERR_INTERNAL",
      "BRAID_IN_PROGRESS",     "BRAID_ERR_ABORTED"};
  return r >= 0 && r < (int32_t)(sizeof names / sizeof names[0]) ? names[r]
                                                                 : "unknown";
}

typedef struct flight_rec {
  uint64_t index; /* 1 + the call's position in the communicator's calls */
  uint64_t seq, count, fp;
  int32_t coll, dt, op, root, stream;
  int32_t as; /* FL_AS_*: what the call is, where coll does not say */
  int32_t state, waits_on, channel, step, prim, result;
  int64_t t_queued, t_started, t_done; /* CLOCK_REALTIME, us */
} flight_rec;

struct flight {
  int n;
  /* the communicator's identity in dumps ("comm_id"): the same on each of
   * its ranks, another on any other communicator (flight_comm_id) */
  uint64_t id;
  /* calls recorded so far, and the record the next one takes: written by
   * the thread that makes calls (one at a time), read by a dump */
  uint64_t calls;
  uint32_t next;
  flight_rec *recs;
};

/* The coarse clock (a tick, 1 to 4 ms): three reads per call of the
 * precise one cost 0.08 us of a 0.4 us call, and which call hung when
 * needs no finer. */
static int64_t now_real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the registry of communicators, and SIGUSR1 ----------------------- */

#define FL_MAX_COMMS 256

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static braid_comm *reg[FL_MAX_COMMS];
static int sig_pipe[2] = {-1, -1};
static pid_t sig_pid; /* the process whose thread reads sig_pipe */

static void on_usr1(int sig) {
  int e = errno;
  if (getpid() != sig_pid) {
    /* a child forked after the handler was set, with no thread to read
     * sig_pipe (and the pipe its parent's): the default action, as if
     * braid had never been there */
    signal(sig, SIG_DFL);
    raise(sig);
    errno = e;
    return;
  }
  char b = 1;
  if (sig_pipe[1] >= 0)
    (void)!write(sig_pipe[1], &b, 1);
  errno = e;
}

static void *sig_thread(void *arg) {
  (void)arg;
  char b;
  for (;;) {
    ssize_t n = read(sig_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return NULL;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < FL_MAX_COMMS; i++)
      if (reg[i] != NULL)
        (void)flight_dump(reg[i], "signal", NULL);
    pthread_mutex_unlock(&reg_lock);
  }
}

/* Under reg_lock: the handler and its thread, once per process, when
 * SIGUSR1 still has its default action (a program's own handler stays). */
static void sig_setup(void) {
  if (!cfg_get()->flight_signal || sig_pid == getpid())
    return;
  sig_pid = getpid();
  struct sigaction old;
  /* on_usr1 there is a parent's, inherited across fork: this process's
   * now */
  if (sigaction(SIGUSR1, NULL, &old) != 0 ||
      (old.sa_handler != SIG_DFL && old.sa_handler != on_usr1) ||
      (old.sa_flags & SA_SIGINFO))
    return;
  if (sig_pipe[0] >= 0) { /* a parent's, inherited across fork */
    close(sig_pipe[0]);
    close(sig_pipe[1]);
  }
  if (pipe2(sig_pipe, O_CLOEXEC) != 0) {
    sig_pipe[0] = sig_pipe[1] = -1;
    return;
  }
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &was); /* the thread takes no signal */
  int e = pthread_create(&t, &a, sig_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &was, NULL);
  pthread_attr_destroy(&a);
  if (e != 0)
    return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGUSR1, &sa, NULL);
}

/* ---- the communicator's identity ---------------------------------------
 * Dumps of different communicators must not be read as one: two jobs whose
 * communicators have one name and size write theirs into one folder
 * (/tmp/braid-flight.* by default). Each rank derives, with no exchange,
 * an id from what all ranks of a communicator hold alike:
 *   - the bootstrap's secret (from the unique id: one per job, or per
 *     rendezvous), as the HMAC key, so that the id tells nothing of it;
 *   - every member, in rank order, as the rendezvous gave it to all ranks
 *     (a split's and a shrink's ranks hold their parent's copies): host
 *     hash, pid and control listener address, which tell apart two jobs
 *     even where their secrets are derived alike (BRAID_SECRET, torchrun);
 *   - the ordinal of the communicator among those this process made over
 *     the same secret and members, since a split that keeps every rank in
 *     its order has its parent's members: communicators are made
 *     collectively, in one order on all of their ranks, so every rank
 *     counts the same. */

/* Per secret and member list (a hash of them): communicators made so far. */
typedef struct {
  uint64_t key;
  uint32_t made;
} made_count;

static made_count *made_counts; /* under reg_lock */
static int n_made_counts, cap_made_counts;

static void put_u64(hmac_ctx *h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i)); /* little-endian on every host */
  hmac_update(h, b, sizeof b);
}

static uint64_t first_u64(const uint8_t *d) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)d[i] << (8 * i);
  return v;
}

/* Under reg_lock: the ordinal of a communicator over members `key`, and
 * the count moved on; 0 when the table cannot grow (then two such
 * communicators may share an id: their dumps merge, as before ids). */
static uint32_t next_ordinal(uint64_t key) {
  for (int i = 0; i < n_made_counts; i++)
    if (made_counts[i].key == key)
      return made_counts[i].made++;
  if (n_made_counts == cap_made_counts) {
    int cap = cap_made_counts ? 2 * cap_made_counts : 16;
    made_count *v = realloc(made_counts, (size_t)cap * sizeof *v);
    if (v == NULL)
      return 0;
    made_counts = v, cap_made_counts = cap;
  }
  made_counts[n_made_counts++] = (made_count){key, 1};
  return 0;
}

/* Under reg_lock: c's identity (above). */
static uint64_t flight_comm_id(braid_comm *c) {
  static const char domain[] = "braid flight comm_id 1";
  size_t slen = 0;
  const uint8_t *secret = boot_secret(c->boot, &slen);
  uint8_t d[SHA256_BYTES];
  hmac_ctx h;
  hmac_init(&h, secret, slen);
  hmac_update(&h, domain, sizeof domain);
  put_u64(&h, (uint64_t)c->nranks);
  for (int r = 0; r < c->nranks; r++) {
    const boot_peer *p = boot_peer_info(c->boot, r);
    put_u64(&h, p->host_hash);
    put_u64(&h, (uint64_t)(uint32_t)p->pid);
    /* the same bytes on every rank (each holds the rendezvous's copy); a
     * sockaddr_in6's length covers either family's address and port */
    hmac_update(&h, &p->addr, sizeof(struct sockaddr_in6));
  }
  hmac_ctx members = h; /* the key of the ordinal's count */
  hmac_final(&members, d);
  put_u64(&h, next_ordinal(first_u64(d)));
  hmac_final(&h, d);
  return first_u64(d);
}

braid_result flight_new(braid_comm *c) {
  int n = cfg_get()->flight_n;
  if (n <= 0)
    return BRAID_SUCCESS;
  pthread_mutex_lock(&reg_lock);
  uint64_t id = flight_comm_id(c); /* first: counted even when out of memory */
  pthread_mutex_unlock(&reg_lock);
  struct flight *f = calloc(1, sizeof *f);
  /* written now, not left to calloc: fresh pages, each mapped by the call
   * that first writes a record on it, cost the first calls a page fault
   * each (tens of us where a virtual machine backs new memory lazily) */
  flight_rec *recs = malloc((size_t)n * sizeof *recs);
  if (recs != NULL) /* not memset: a compiler may fold malloc+memset into
                     * calloc, which writes nothing */
    explicit_bzero(recs, (size_t)n * sizeof *recs);
  if (f == NULL || recs == NULL) {
    free(f);
    free(recs);
    return comm_fail(c, BRAID_ERR_NOMEM,
                     "flight recorder: no memory for %d calls", n);
  }
  f->n = n;
  f->id = id;
  f->recs = recs;
  c->flight = f;
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < FL_MAX_COMMS; i++)
    if (reg[i] == NULL) {
      reg[i] = c;
      break;
    }
  sig_setup();
  pthread_mutex_unlock(&reg_lock);
  return BRAID_SUCCESS;
}

void flight_forget(braid_comm *c) {
  struct flight *f = c->flight;
  if (f == NULL)
    return;
  f->calls = 0;
  f->next = 0;
  memset(f->recs, 0, (size_t)f->n * sizeof *f->recs);
}

void flight_free(braid_comm *c) {
  if (c->flight == NULL)
    return;
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < FL_MAX_COMMS; i++)
    if (reg[i] == c)
      reg[i] = NULL;
  pthread_mutex_unlock(&reg_lock);
  free(c->flight->recs);
  free(c->flight);
  c->flight = NULL;
}

/* ---- recording --------------------------------------------------------- */

/* The record of op, or NULL (no recorder, or reused by newer calls). */
static flight_rec *rec_of(braid_comm *c, const exec_op *op) {
  struct flight *f = c->flight;
  if (f == NULL || op->flight == 0)
    return NULL;
  flight_rec *r = &f->recs[op->flight_slot];
  return r->index == op->flight ? r : NULL;
}

void flight_queued(braid_comm *c, exec_op *op) {
  struct flight *f = c->flight;
  if (f == NULL)
    return;
  /* Per call, so kept cheap (a 0.15 us call spent 0.016 us here): no
   * locked add (calls come from one thread at a time), no division, and
   * each field stored once rather than the record zeroed first. */
  uint64_t index = __atomic_load_n(&f->calls, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(&f->calls, index, __ATOMIC_RELAXED);
  uint32_t slot = f->next;
  f->next = slot + 1 == (uint32_t)f->n ? 0 : slot + 1;
  flight_rec *r = &f->recs[slot];
  r->index = index;
  r->seq = op->seq;
  r->count = op->count;
  r->fp = op->fp = check_call_fp(op);
  r->coll = (int32_t)op->coll;
  r->dt = (int32_t)op->dt;
  r->op = (int32_t)op->op;
  r->root = op->root;
  r->as = op->is_barrier ? FL_AS_BARRIER : FL_AS_COLL;
  r->stream = op->stream == NULL ? 0 : op->stream->cuda == NULL ? 1 : 2;
  r->state = FL_QUEUED;
  r->waits_on = r->channel = r->step = r->prim = -1;
  r->result = 0;
  r->t_queued = now_real_us();
  r->t_started = r->t_done = 0;
  op->flight = index;
  op->flight_slot = slot;
}

void flight_queued_alltoallv(braid_comm *c, exec_op *ops, int nops,
                             uint64_t sent, braid_dtype dt) {
  if (c->flight == NULL || nops <= 0)
    return;
  exec_op call = ops[0]; /* the first send or receive stands for the call */
  call.count = sent;
  call.dt = dt;
  call.root = -1;
  flight_queued(c, &call);
  flight_rec *r = &c->flight->recs[call.flight_slot];
  r->as = FL_AS_ALLTOALLV;
  r->fp = 0;
  for (int k = 0; k < nops; k++) { /* run as one group: one record */
    ops[k].flight = call.flight;
    ops[k].flight_slot = call.flight_slot;
  }
}

void flight_started(braid_comm *c, const exec_op *op) {
  flight_rec *r = rec_of(c, op);
  if (r != NULL && r->state == FL_QUEUED) {
    r->state = FL_STARTED;
    r->t_started = now_real_us();
  }
}

void flight_waiting(braid_comm *c, const exec_op *op, int on, int channel,
                    int step, int prim) {
  flight_rec *r = rec_of(c, op);
  if (r == NULL || r->state >= FL_DONE)
    return;
  r->waits_on = on;
  r->channel = channel;
  r->step = step;
  r->prim = prim;
  r->state = on >= 0 ? FL_WAITING : FL_STARTED;
}

void flight_done(braid_comm *c, const exec_op *op, braid_result res) {
  flight_rec *r = rec_of(c, op);
  if (r == NULL || r->state >= FL_DONE)
    return;
  if (r->t_started == 0)
    r->t_started = now_real_us();
  r->t_done = now_real_us();
  r->result = (int32_t)res;
  r->waits_on = res == BRAID_SUCCESS ? -1 : r->waits_on;
  r->state = res == BRAID_SUCCESS ? FL_DONE : FL_FAILED;
}

void flight_fast(braid_comm *c, const exec_op *op) {
  flight_rec *r = rec_of(c, op);
  if (r == NULL || r->state >= FL_DONE)
    return;
  r->t_started = r->t_done = r->t_queued;
  r->result = 0;
  r->waits_on = -1;
  r->state = FL_DONE;
}

int flight_unfinished(const braid_comm *c) {
  const struct flight *f = c->flight;
  if (f == NULL)
    return 0;
  for (int i = 0; i < f->n; i++)
    if (f->recs[i].index != 0 && f->recs[i].state < FL_DONE)
      return 1;
  return 0;
}

/* ---- the dump ---------------------------------------------------------- */

/* s as a JSON string body (quotes, backslashes and control bytes escaped). */
static void put_str(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

static void put_rec(FILE *out, const flight_rec *r) {
  sched_coll k = (sched_coll)r->coll;
  const char *kind = r->as == FL_AS_BARRIER     ? "barrier"
                     : r->as == FL_AS_ALLTOALLV ? "alltoallv"
                                                : sched_coll_name(k);
  int rooted =
      r->as == FL_AS_COLL &&
      (k == SCHED_BROADCAST || k == SCHED_REDUCE || k == SCHED_GATHER ||
       k == SCHED_SCATTER || k == SCHED_SEND || k == SCHED_RECV);
  fprintf(
      out,
      "{\"seq\":%llu,\"kind\":\"%s\",\"count\":%llu,\"dtype\":\"%s\","
      "\"op\":\"%s\",\"root\":%d,\"stream\":\"%s\",\"state\":\"%s\","
      "\"channel\":%d,\"step\":%d,\"prim\":\"%s\",\"waits_on\":%d,"
      "\"fp\":\"0x%016llx\",\"t_queued_us\":%lld,\"t_started_us\":%lld,"
      "\"t_done_us\":%lld,\"result\":\"%s\"}\n",
      (unsigned long long)r->seq, kind, (unsigned long long)r->count,
      braid_dtype_name((braid_dtype)r->dt),
      sched_reduces(k) && r->as == FL_AS_COLL ? braid_op_name((braid_op)r->op)
                                              : "",
      rooted ? r->root : -1,
      r->stream == 0   ? "none"
      : r->stream == 1 ? "host"
                       : "cuda",
      state_name[r->state], r->channel, r->step,
      r->prim >= 0 ? sched_prim_name((sched_prim)r->prim) : "", r->waits_on,
      (unsigned long long)r->fp, (long long)r->t_queued,
      (long long)r->t_started, (long long)r->t_done, result_name(r->result));
}

braid_result flight_dump(braid_comm *c, const char *reason, const char *path) {
  const struct flight *f = c->flight;
  if (f == NULL) { /* off, or a communicator that broke while being made */
    if (strcmp(reason, "api") == 0)
      return comm_fail(c, BRAID_ERR_UNSUPPORTED,
                       "flight recorder: off (BRAID_FLIGHT_RECORDER=0)");
    return BRAID_ERR_UNSUPPORTED;
  }
  char file[512];
  log_path(path != NULL ? path : cfg_get()->flight_file, c->rank, c->name, file,
           sizeof file);
  FILE *out = fopen(file, "we");
  if (out == NULL) {
    braid_result r =
        comm_fail(c, BRAID_ERR_SYSTEM, "flight recorder: cannot write %s: %s",
                  file, strerror(errno));
    WARN(LOG_COLL, "%s", err_msg());
    return r;
  }
  uint64_t calls = __atomic_load_n(&f->calls, __ATOMIC_RELAXED);
  uint64_t first = calls > (uint64_t)f->n ? calls - (uint64_t)f->n : 0;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  fprintf(out, "{\"braid_flight\":1,\"comm\":");
  put_str(out, c->name);
  fprintf(out, ",\"comm_id\":\"%016llx\"", (unsigned long long)f->id);
  fprintf(out, ",\"rank\":%d,\"nranks\":%d,\"host\":", c->rank, c->nranks);
  put_str(out, host);
  fprintf(out, ",\"pid\":%d,\"reason\":\"%s\",\"time_us\":%lld,\"error\":",
          (int)getpid(), reason, (long long)now_real_us());
  put_str(out, c->broken != BRAID_SUCCESS ? c->broken_why : "");
  fprintf(out, ",\"ncalls\":%llu}\n", (unsigned long long)(calls - first));
  for (uint64_t i = first; i < calls; i++)
    put_rec(out, &f->recs[i % (uint64_t)f->n]);
  int bad = ferror(out);
  bad |= fclose(out) != 0;
  if (bad)
    return comm_fail(c, BRAID_ERR_SYSTEM, "flight recorder: writing %s failed",
                     file);
  WARN(LOG_COLL, "flight recorder (%s): the last %llu calls of rank %d in %s",
       reason, (unsigned long long)(calls - first), c->rank, file);
  return BRAID_SUCCESS;
}
