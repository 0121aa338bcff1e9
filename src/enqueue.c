/*
 * Issuing work: blocking calls, host streams, groups.
 *
 * Each communicator runs its work in issue order. A blocking call (stream
 * NULL) runs in the caller's thread when nothing is queued, else it queues
 * and waits. Calls on a host stream are queued and run by the communicator's
 * progress thread; the stream counts them and keeps the first error. Calls
 * on one communicator must be issued from one thread at a time (as in NCCL).
 *
 * A CUDA stream (braid_stream_from_cuda) is a host stream plus a gate
 * (cudev_gate) on the user's stream. A call on it enqueues gate number seq
 * on the user's stream and queues the work; the progress thread waits until
 * the user's stream reached the gate (everything issued before the call has
 * run), runs the work on device buffers (synchronously on the internal
 * stream), then releases the gate, so later work on the user's stream sees
 * the result. The call itself returns once both are enqueued, as NCCL's do.
 *
 * Order. A communicator runs its calls in issue order, also across CUDA
 * streams with nothing ordering them: the progress thread runs gated calls
 * one after the other, but a small call's copies and a collective kernel
 * (src/exec_kernel.c) run on the user's stream, not behind a gate. So each
 * call on a CUDA stream records the communicator's order event on its
 * stream after all it put there, and a call on another stream than the
 * last one's first makes its stream wait for that event.
 *
 * A small call on a CUDA stream (BRAID_CUDA_HOST_MAX, src/exec_dev.c) puts
 * more on the user's stream: copies of its inputs into the stream's pinned
 * area before the gate, and of its outputs back after it. The progress
 * thread then runs it as a host call on the pinned copies, between "gate
 * reached" (the inputs are there) and "released" (the copies back may
 * start): no CUDA call of its own. One pinned area per stream suffices:
 * the stream runs one call's copies and gate after the other's.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_dev.h"
#include "src/check.h"
#include "src/comm.h"
#include "src/config.h"
#include "src/enqueue.h"
#include "src/exec_int.h"
#include "src/exec_plan.h"
#include "src/flight.h"
#include "src/log.h"
#include "src/stream.h"
#include "transports/cuda/cuda_tp.h"

/* The gate a queued unit of work waits for. A group over several
 * communicators on one CUDA stream shares one gate: the last of its units to
 * finish releases it (left counts them). */
typedef struct gate_ref {
  braid_stream *s; /* NULL: no gate */
  uint32_t seq;
  atomic_int *left;
} gate_ref;

/* What the queue holds: the work and its gate (w first: the queue links
 * exec_work pointers). */
typedef struct qwork {
  exec_work w;
  gate_ref g;
  exec_stage *st; /* a small call staged on the stream: its layout */
  int nst;
  char *host;
  void *ev;      /* launched as kernels (src/exec_kernel.c): completion */
  uint64_t kseq; /* and the number of its last kernel */
  int deferred;  /* counted in c->kernel_deferred */
  /* On a host stream: runs once the stream has completed `after` calls,
   * the calls issued on it before this one (on any communicator). */
  int ordered;
  uint64_t after;
} qwork;

/* No order taken yet for a group's units (submit's `order`). */
#define ORDER_NONE UINT64_MAX

/* ---- running work ------------------------------------------------------ */

static int is_fatal(braid_result r) {
  return r == BRAID_ERR_REMOTE || r == BRAID_ERR_TIMEOUT ||
         r == BRAID_ERR_ABORTED || r == BRAID_ERR_INTERNAL ||
         r == BRAID_ERR_SYSTEM;
}

typedef braid_result (*ops_fn)(braid_comm *c, exec_op *ops, int nops);

/* Runs fn on ops (c->lock held) unless the communicator is broken, after
 * BRAID_CHECK's comparison of each op not compared yet; breaks the
 * communicator on fatal errors. */
static braid_result checked_locked(braid_comm *c, exec_op *ops, int nops,
                                   ops_fn run);
static braid_result run_ops_locked(braid_comm *c, exec_op *ops, int nops);

static braid_result run_ops(braid_comm *c, exec_op *ops, int nops) {
  pthread_mutex_lock(&c->lock);
  braid_result r = run_ops_locked(c, ops, nops);
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* c->broken, with the message when set. */
static braid_result broken(braid_comm *c) {
  braid_result r = __atomic_load_n(&c->broken, __ATOMIC_ACQUIRE);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r,
                     "the communicator is broken since an earlier error (%s);"
                     " destroy it",
                     comm_broken_why(c));
  return r;
}

static braid_result checked_locked(braid_comm *c, exec_op *ops, int nops,
                                   ops_fn run) {
  braid_result r = broken(c);
  for (int i = 0; r == BRAID_SUCCESS && c->check && i < nops; i++)
    if ((ops[i].a2av_call ||
         (ops[i].coll != SCHED_SEND && ops[i].coll != SCHED_RECV)) &&
        !ops[i].checked) {
      r = check_fingerprint(c, &ops[i]);
      ops[i].checked = 1;
    }
  if (r == BRAID_SUCCESS)
    r = run(c, ops, nops);
  if (is_fatal(r) || r == BRAID_ERR_MISMATCH)
    comm_break(c, r);
  return r;
}

static braid_result run_ops_locked(braid_comm *c, exec_op *ops, int nops) {
  return checked_locked(c, ops, nops, exec_run);
}

/* The first device collective of a communicator on a CUDA stream sets the
 * device side up here, in the issuing thread, before its gate goes on the
 * user's stream. Set up behind the gate, a setup that fails (a rank died
 * meanwhile) would free what it made with cudaFree, which waits for every
 * stream, the one held at the gate too: it would never return. Queued work
 * runs first, so that every rank's bootstrap exchanges come in call order;
 * with BRAID_CHECK the call's fingerprint is compared first, as always.
 * Every call on a CUDA stream also grows here, when it must, the scratch
 * and staging it will take (exec_dev_reserve): grown behind the gate, they
 * could wait for a user thread that waits for the stream. */
static braid_result setup_before_gate(braid_comm *c, exec_op *ops, int nops) {
  int setup = exec_dev_needs_setup(c, ops, nops);
  if (!setup && exec_dev_reserved(c, ops, nops))
    return BRAID_SUCCESS;
  if (setup)
    enq_drain(c);
  pthread_mutex_lock(&c->lock);
  braid_result r =
      setup ? checked_locked(c, ops, nops, exec_dev_prepare) : BRAID_SUCCESS;
  if (r == BRAID_SUCCESS)
    r = exec_dev_reserve(c, ops, nops);
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* Waits until the user's stream reached a call: its gate g, or (g NULL) the
 * event ev recorded on it; spin, yield, then short sleeps, bounded by the
 * communicator's timeout. */
static braid_result reach_wait(braid_comm *c, const exec_op *op,
                               const gate_ref *g, void *ev) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long polls = 0;; polls++) {
    int q = g != NULL ? (cudev_gate_reached(g->s->gate, g->seq) ? BRAID_SUCCESS
                                                                : CUDEV_AGAIN)
                      : cudev_event_query(ev);
    if (q == BRAID_SUCCESS)
      return BRAID_SUCCESS;
    if (q != CUDEV_AGAIN)
      return comm_fail(c, (braid_result)q,
                       "%s #%llu on rank %d: waiting for the CUDA stream to "
                       "reach the call: %s; the call did not run",
                       op->name, (unsigned long long)op->seq, c->rank,
                       cudev_error());
    if (atomic_load(&c->aborted))
      return BRAID_ERR_ABORTED;
    if (polls < 2000)
      continue;
    if (polls < 4000) {
      sched_yield();
      continue;
    }
    if (exec_ms_since(&t0) > c->timeout_ms) {
      braid_result r = comm_fail(
          c, BRAID_ERR_TIMEOUT,
          "%s #%llu on rank %d: the CUDA stream did not reach the "
          "call within %d ms (BRAID_TIMEOUT): work issued on the "
          "stream before it is still running or waits for "
          "something that never comes; the call did not run",
          op->name, (unsigned long long)op->seq, c->rank, c->timeout_ms);
      /* the other ranks ran (or wait in) this call: it cannot be skipped */
      pthread_mutex_lock(&c->lock);
      comm_break(c, r);
      pthread_mutex_unlock(&c->lock);
      return r;
    }
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
}

/* The work behind a gate finished (or failed): let the user's stream go on.
 * It is released on errors too, so the stream never hangs on braid. */
static void gate_done(const gate_ref *g) {
  if (g->left != NULL && atomic_fetch_sub(g->left, 1) != 1)
    return;
  stream_gate_end(g->s, g->seq);
  free(g->left);
}

/* ---- calls launched as kernels (src/exec_kernel.c) ---------------------- */

/* Whether a queued call may launch kernels when it runs: a superset of
 * exec_plan_kernels that needs no device side yet (a call that sets it
 * up). */
static int may_launch(const exec_op *ops, int nops) {
  for (int k = 0; k < nops; k++)
    if (ops[k].dev < 0 || ops[k].is_barrier || !exk_coll(ops[k].coll))
      return 0;
  return nops > 0;
}

/* The progress thread: a call launched on a CUDA stream is done. */
static braid_result kernel_done(braid_comm *c, qwork *q) {
  braid_result r = exk_finish(c, q->w.ops, q->ev, q->kseq, 0);
  cuda_held(-1);
  for (int k = 0; k < q->w.nops; k++)
    flight_done(c, &q->w.ops[k], r);
  if (is_fatal(r) || r == BRAID_ERR_MISMATCH) {
    pthread_mutex_lock(&c->lock);
    comm_break(c, r);
    pthread_mutex_unlock(&c->lock);
  }
  return r;
}

/* A host stream runs its calls in issue order also where they are on
 * different communicators, each with its own progress thread: a call waits
 * until the stream has completed the `after` calls issued on it before
 * (those of one communicator have, as its queue runs in order). Calls are
 * numbered on the stream and pushed on their communicator's queue in one
 * step (submit_in, under the stream's lock), so no two calls can wait for
 * each other. An abort of this communicator ends the wait. */
static braid_result stream_turn(braid_comm *c, braid_stream *s,
                                uint64_t after) {
  braid_result r = BRAID_SUCCESS;
  pthread_mutex_lock(&s->lock);
  while (s->completed < after) {
    if (atomic_load(&c->aborted)) {
      r = BRAID_ERR_ABORTED;
      break;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->cond, &s->lock, &until);
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

static void *progress_main(void *arg) {
  braid_comm *c = arg;
  pthread_mutex_lock(&c->qlock);
  for (;;) {
    while (c->qhead == NULL && !c->thread_stop)
      pthread_cond_wait(&c->qcond, &c->qlock);
    if (c->qhead == NULL && c->thread_stop)
      break;
    exec_work *w = c->qhead;
    qwork *q = (qwork *)w;
    gate_ref g = q->g;
    pthread_mutex_unlock(&c->qlock);
    braid_result r = atomic_load(&c->aborted) ? BRAID_ERR_ABORTED
                     : g.s != NULL            ? reach_wait(c, w->ops, &g, NULL)
                     : q->ordered ? stream_turn(c, w->stream, q->after)
                                  : BRAID_SUCCESS;
    int reached = g.s != NULL && r == BRAID_SUCCESS;
    if (q->ev != NULL) /* launched already: it stops on an abort itself */
      r = kernel_done(c, q);
    else if (r == BRAID_SUCCESS)
      r = run_ops(c, w->ops, w->nops);
    if (q->deferred)
      atomic_fetch_sub(&c->kernel_deferred, 1);
    /* a failed small call leaves recvbuf as it was, as the others do */
    if (r != BRAID_SUCCESS && reached && q->nst > 0)
      exec_dev_stream_undo(c, q->st, q->nst, q->host);
    if (g.s != NULL)
      gate_done(&g);
    pthread_mutex_lock(&c->qlock);
    c->qhead = w->next;
    if (c->qhead == NULL)
      c->qtail = NULL;
    c->qlen--;
    w->result = r;
    braid_stream *s = w->stream;
    if (s != NULL) {
      free(w->ops);
      free(q->st);
      free(w);
    } else {
      atomic_store(&w->done, 1); /* a blocking caller owns w */
    }
    pthread_cond_broadcast(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    if (s != NULL)
      stream_complete(s, r);
    pthread_mutex_lock(&c->qlock);
  }
  pthread_mutex_unlock(&c->qlock);
  return NULL;
}

/* Starts the progress thread if it is not running (qlock held). Called
 * before anything of a call goes on a CUDA stream, so that once it has,
 * queueing the call cannot fail. */
static braid_result start_thread_locked(braid_comm *c) {
  if (c->thread_started)
    return BRAID_SUCCESS;
  if (pthread_create(&c->thread, NULL, progress_main, c) != 0)
    return comm_fail(c, BRAID_ERR_SYSTEM,
                     "rank %d: cannot start the progress thread", c->rank);
  c->thread_started = 1;
  return BRAID_SUCCESS;
}

/* Queue work (qlock held, progress thread started). */
static void push_locked(braid_comm *c, exec_work *w) {
  w->next = NULL;
  if (c->qtail != NULL)
    c->qtail->next = w;
  else
    c->qhead = w;
  c->qtail = w;
  c->qlen++;
  pthread_cond_broadcast(&c->qcond);
}

/* Enqueues the gate of a call on a CUDA stream (shared: a group's gate,
 * already enqueued). */
static braid_result gate_enqueue(braid_comm *c, const exec_op *op,
                                 braid_stream *s, const gate_ref *shared,
                                 gate_ref *g) {
  if (shared != NULL) {
    *g = *shared;
    return BRAID_SUCCESS;
  }
  g->s = s;
  g->left = NULL;
  /* the stream's GPU current (the kernel that stands in for the stream
   * memory operations launches on the current device) */
  int mine = -1, dev = comm_dev_of(c, op);
  braid_result r = comm_dev_select_of(c, op->name, dev, &mine);
  if (r != BRAID_SUCCESS)
    return r;
  g->seq = ++s->gate_seq;
  cuda_held(1); /* until stream_gate_end opens it */
  r = cudev_gate_enqueue(s->gate, g->seq);
  comm_dev_restore_of(dev, mine);
  if (r != BRAID_SUCCESS) {
    /* Its number stays used (part of the gate may be on the stream: a
     * later "reached" must not be this one's) and ends here. */
    stream_gate_end(s, g->seq);
    r = comm_fail(c, r,
                  "%s on rank %d: cannot order the call on the CUDA "
                  "stream: %s",
                  op->name, c->rank, cudev_error());
  }
  return r;
}

/* A small call on a CUDA stream (exec_dev_stream_plan): its staging in the
 * stream's pinned area, made on first use; 0 when it goes the usual way
 * (which stages it too, from the progress thread). *st is malloc'd. */
static int small_plan(braid_comm *c, braid_stream *s, const exec_op *ops,
                      int nops, exec_stage **st) {
  *st = NULL;
  size_t cap = s->host != NULL ? s->host_bytes : exec_dev_stream_cap(c);
  exec_stage *p = cap > 0 ? malloc(sizeof *p * (size_t)nops) : NULL;
  int nst = p != NULL ? exec_dev_stream_plan(c, ops, nops, cap, p) : 0;
  if (nst > 0 && s->host == NULL &&
      (s->host = stream_area_take(cap, &s->host_bytes)) == NULL) {
    int mine = cudev_get_device();
    void *h = NULL;
    if (cudev_set_device(c->dev->device) != BRAID_SUCCESS ||
        cudev_host_alloc(&h, cap) != BRAID_SUCCESS) {
      WARN(LOG_COLL,
           "rank %d: no pinned memory for small calls on a CUDA stream (%s);"
           " they are staged by the progress thread",
           c->rank, cudev_error());
      nst = 0;
    } else {
      s->host = h;
      s->host_bytes = cap;
    }
    if (mine >= 0 && mine != c->dev->device)
      (void)cudev_set_device(mine);
  }
  if (nst == 0) {
    free(p);
    return 0;
  }
  *st = p;
  return nst;
}

/* Enqueues a small call on the user's stream: the copies in, the gate, the
 * copies out; makes ops host ops on the pinned copies. */
static braid_result small_enqueue(braid_comm *c, braid_stream *s, exec_op *ops,
                                  const qwork *q, gate_ref *g) {
  int mine = -1;
  braid_result r = comm_dev_select(c, ops[0].name, &mine);
  if (r == BRAID_SUCCESS)
    r = exec_dev_stream_in(c, ops, q->st, q->nst, s->host, s->user);
  if (r == BRAID_SUCCESS)
    r = gate_enqueue(c, ops, s, NULL, g);
  if (r == BRAID_SUCCESS) {
    TRACE(LOG_COLL,
          "%s #%llu: %d operations staged on the CUDA stream through pinned "
          "host memory",
          ops[0].name, (unsigned long long)ops[0].seq, q->nst);
    r = exec_dev_stream_out(c, ops, q->st, q->nst, s->host, s->user);
    if (r != BRAID_SUCCESS) { /* the call will not run: let the stream go */
      gate_done(g);
      g->s = NULL;
    }
  }
  comm_dev_restore(c, mine);
  return r;
}

/* Puts a call that goes as collective kernels (src/exec_kernel.c) on the
 * user's stream: no gate, the kernels are stream-ordered; the progress
 * thread waits for their end (q->ev) and reports errors. */
static braid_result kernel_enqueue(braid_comm *c, braid_stream *s, exec_op *ops,
                                   int nops, qwork *q) {
  int mine = -1;
  braid_result r = broken(c);
  if (r == BRAID_SUCCESS)
    r = comm_dev_select(c, ops[0].name, &mine);
  if (r != BRAID_SUCCESS)
    return r;
  for (int k = 0; k < nops; k++)
    flight_started(c, &ops[k]);
  r = exk_launch(c, ops, nops, s->user, &q->ev, &q->kseq);
  comm_dev_restore(c, mine);
  for (int k = 0; r != BRAID_SUCCESS && k < nops; k++)
    flight_done(c, &ops[k], r);
  if (r == BRAID_SUCCESS)
    cuda_held(1); /* until kernel_done */
  return r;
}

/* BRAID_CUDA_GATE=0: instead of a gate, the calling thread waits until
 * the user's stream has run what was issued on it before the call (an event
 * recorded there, after the last call on another stream); the call then runs
 * as a blocking one, so work issued on the stream after it sees its result.
 * No braid work waits behind a held stream (src/config.h, cuda_gate). */
static braid_result stream_reached(braid_comm *c, const exec_op *op,
                                   braid_stream *s) {
  int mine = -1, dev = comm_dev_of(c, op);
  braid_result r = comm_dev_select_of(c, op->name, dev, &mine);
  if (r != BRAID_SUCCESS)
    return r;
  r = comm_dev_order_after(c, op->name, s->user);
  if (r == BRAID_SUCCESS && s->reach_ev == NULL &&
      cudev_event_create(&s->reach_ev) != BRAID_SUCCESS)
    r = BRAID_ERR_SYSTEM;
  if (r == BRAID_SUCCESS &&
      (r = cudev_event_record(s->reach_ev, s->user)) != BRAID_SUCCESS)
    r = comm_fail(c, r,
                  "%s on rank %d: cannot mark the call on its CUDA "
                  "stream: %s",
                  op->name, c->rank, cudev_error());
  comm_dev_restore_of(dev, mine);
  if (r == BRAID_SUCCESS) {
    TRACE(LOG_COLL,
          "%s #%llu: waiting for the CUDA stream to reach it "
          "(BRAID_CUDA_GATE=0)",
          op->name, (unsigned long long)op->seq);
    r = reach_wait(c, op, NULL, s->reach_ev);
  }
  return r;
}

/* A call on a CUDA stream that can go as collective kernels, issued while
 * queued calls may still launch theirs (kernel_deferred), must not launch
 * before them. Queued behind them it would wait at a gate while the
 * progress thread launched its kernels on braid's stream, and where that
 * stream shares a hardware queue with the user's, held at the gate, they
 * would never start. So the issuing thread waits (up to BRAID_TIMEOUT) for
 * those calls to end and then launches on the user's stream, as usual: 1.
 * 0 when they did not end in time (the call then queues behind them). */
static int deferred_ended(braid_comm *c) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&c->kernel_deferred) > 0 && !atomic_load(&c->aborted) &&
         exec_ms_since(&t0) <= c->timeout_ms) {
    struct timespec nap = {0, 50000};
    nanosleep(&nap, NULL);
  }
  return atomic_load(&c->kernel_deferred) == 0;
}

/* Submit ops (copied) as one unit of work, blocking or on a stream. */
static braid_result submit_in(braid_comm *c, exec_op *ops, int nops,
                              braid_stream *s, const gate_ref *shared,
                              uint64_t *order);

/* Every call that runs or queues work goes through here: braid_comm_abort
 * waits until none is inside before it frees the communicator. */
/* order: NULL for a call of its own; a group's units on several
 * communicators share one (ORDER_NONE before the first), so that they wait
 * for the calls before the group but not for each other (they may depend on
 * each other across ranks). */
static braid_result submit(braid_comm *c, exec_op *ops, int nops,
                           braid_stream *s, const gate_ref *shared,
                           uint64_t *order) {
  braid_result r = comm_ready(c);
  if (r != BRAID_SUCCESS)
    return r;
  CHECKR(comm_enter(c, ops[0].name));
  r = submit_in(c, ops, nops, s, shared, order);
  comm_leave(c);
  return r;
}

static braid_result submit_in(braid_comm *c, exec_op *ops, int nops,
                              braid_stream *s, const gate_ref *shared,
                              uint64_t *order) {
  /* No progress thread yet means nothing queued and nobody else running
   * work (calls on a comm come from one thread at a time): run here without
   * the locks. Only this thread starts the progress thread. */
  if (s == NULL && !c->thread_started)
    return run_ops_locked(c, ops, nops);
  exec_stage *st = NULL;
  int nst = 0, kernel = 0;
  if (s != NULL && s->cuda != NULL && shared == NULL) {
    braid_result r = setup_before_gate(c, ops, nops);
    if (r != BRAID_SUCCESS)
      return r;
    /* as kernels, launched now, once queued calls that may launch theirs
     * have ended */
    kernel = exec_plan_kernels(c, ops, nops) && deferred_ended(c);
    if (!kernel)
      nst = small_plan(c, s, ops, nops, &st);
    if (!kernel && nst == 0 && !cfg_get()->cuda_gate) {
      braid_result r = stream_reached(c, ops, s);
      if (r == BRAID_SUCCESS)
        r = submit(c, ops, nops, NULL, NULL, NULL);
      pthread_mutex_lock(&s->lock);
      s->submitted++;
      pthread_mutex_unlock(&s->lock);
      stream_complete(s, r);
      return r;
    }
  }
  pthread_mutex_lock(&c->qlock);
  if (s == NULL && c->qlen == 0) {
    pthread_mutex_unlock(&c->qlock);
    return run_ops(c, ops, nops); /* the fast path */
  }
  braid_result r = start_thread_locked(c);
  /* Nothing below holds qlock while it calls CUDA: a call that goes on a
   * stream whose queue is full waits in the driver until the stream moves,
   * and the stream moves when the progress thread, which takes qlock after
   * each unit of work, releases its gates. The issuing thread alone pushes
   * (calls on a comm come from one thread at a time), so the queue still
   * gets the units in the order their gates went on the stream. */
  pthread_mutex_unlock(&c->qlock);
  qwork *q = r == BRAID_SUCCESS ? calloc(1, sizeof *q) : NULL;
  exec_op *copy = q != NULL ? malloc(sizeof *copy * (size_t)nops) : NULL;
  if (copy == NULL) {
    free(q);
    free(st);
    if (shared != NULL)
      gate_done(shared);
    return r != BRAID_SUCCESS ? r : BRAID_ERR_NOMEM;
  }
  exec_work *w = &q->w;
  memcpy(copy, ops, sizeof *copy * (size_t)nops);
  w->ops = copy;
  w->nops = nops;
  w->stream = s;
  q->st = st;
  q->nst = nst;
  q->host = s != NULL ? s->host : NULL;
  q->deferred = !kernel && may_launch(ops, nops);
  int ordered = s != NULL && s->cuda != NULL && shared == NULL;
  if (ordered)
    r = comm_dev_order_after(c, ops[0].name, s->user);
  if (r == BRAID_SUCCESS && kernel)
    r = kernel_enqueue(c, s, copy, nops, q);
  else if (r == BRAID_SUCCESS && nst > 0)
    r = small_enqueue(c, s, copy, q, &q->g);
  else if (r == BRAID_SUCCESS && s != NULL && s->cuda != NULL)
    r = gate_enqueue(c, ops, s, shared, &q->g);
  if (r == BRAID_SUCCESS && ordered)
    comm_dev_order_mark(c, s->user);
  if (r != BRAID_SUCCESS) {
    free(copy);
    free(st);
    free(q);
    return r;
  }
  if (q->deferred)
    atomic_fetch_add(&c->kernel_deferred, 1);
  if (s != NULL) { /* numbered and pushed in one step (stream_turn) */
    pthread_mutex_lock(&s->lock);
    if (s->cuda == NULL) {
      q->ordered = 1;
      if (order != NULL && *order == ORDER_NONE)
        *order = s->submitted;
      q->after = order != NULL ? *order : s->submitted;
    }
    s->submitted++;
    s->host_calls += nst > 0;
    s->kernel_calls += kernel;
    pthread_mutex_lock(&c->qlock);
    push_locked(c, w);
    pthread_mutex_unlock(&c->qlock);
    pthread_mutex_unlock(&s->lock);
    return BRAID_SUCCESS;
  }
  pthread_mutex_lock(&c->qlock);
  push_locked(c, w);
  while (!atomic_load(&w->done))
    pthread_cond_wait(&c->qcond, &c->qlock);
  pthread_mutex_unlock(&c->qlock);
  r = w->result;
  free(copy);
  free(q);
  return r;
}

braid_result enq_drain(braid_comm *c) {
  pthread_mutex_lock(&c->qlock);
  while (c->qlen > 0)
    pthread_cond_wait(&c->qcond, &c->qlock);
  pthread_mutex_unlock(&c->qlock);
  return BRAID_SUCCESS;
}

void enq_shutdown(braid_comm *c) {
  pthread_mutex_lock(&c->qlock);
  int started = c->thread_started;
  c->thread_stop = 1;
  pthread_cond_broadcast(&c->qcond);
  pthread_mutex_unlock(&c->qlock);
  if (started)
    pthread_join(c->thread, NULL);
  c->thread_started = 0;
}

/* ---- groups ------------------------------------------------------------ */

typedef struct group_state {
  int depth;
  exec_op *ops;
  braid_comm **comms;
  int n, cap;
} group_state;

static _Thread_local group_state g_group;

braid_result braid_group_start(void) {
  g_group.depth++;
  return BRAID_SUCCESS;
}

braid_result braid_group_end(void) {
  if (g_group.depth <= 0)
    return comm_arg_bad(NULL, "braid_group_end: no group is open");
  if (--g_group.depth > 0)
    return BRAID_SUCCESS;
  group_state g = g_group;
  memset(&g_group, 0, sizeof g_group);
  braid_result res = BRAID_SUCCESS;
  int blocking = 0;
  for (int i = 0; i < g.n; i++)
    blocking |= g.ops[i].stream == NULL;
  /* one unit of work per communicator, in the order of first use */
  exec_op *tmp = malloc(sizeof *tmp * (size_t)(g.n > 0 ? g.n : 1));
  braid_comm **done = calloc((size_t)(g.n > 0 ? g.n : 1), sizeof(braid_comm *));
  if (tmp == NULL || done == NULL) {
    res = BRAID_ERR_NOMEM;
    goto out;
  }
  /* A group is one unit of work on one stream: calls on another stream
   * would be neither counted nor ordered on theirs. */
  for (int i = 1; i < g.n && !blocking; i++)
    if (g.ops[i].stream != g.ops[0].stream) {
      res = comm_arg_bad(g.comms[i],
                         "braid_group_end: %s (call %d of the group) is on "
                         "another stream than its first call: a group's "
                         "calls must all be on one stream, or be blocking",
                         g.ops[i].name, i + 1);
      goto out;
    }
  int ncomm = 0;
  for (int i = 0; i < g.n; i++) {
    braid_comm *c = g.comms[i];
    int seen = 0;
    for (int k = 0; k < ncomm; k++)
      seen |= done[k] == c;
    if (seen)
      continue;
    done[ncomm++] = c;
  }
  if (ncomm == 1) {
    braid_stream *s = blocking ? NULL : g.ops[0].stream;
    res = submit(done[0], g.ops, g.n, s, NULL, NULL);
    goto out;
  }
  /* several communicators: queue all (they may depend on each other across
   * ranks), then wait for all when blocking; on a CUDA stream without gates
   * (BRAID_CUDA_GATE=0), blocking once the stream has reached the group */
  braid_stream *s0 = g.n > 0 ? g.ops[0].stream : NULL;
  if (!blocking && s0 != NULL && s0->cuda != NULL && !cfg_get()->cuda_gate) {
    res = stream_reached(done[0], &g.ops[0], s0);
    if (res != BRAID_SUCCESS)
      goto out;
    blocking = 1;
  }
  braid_stream *s = NULL;
  if (blocking && braid_stream_create(&s) != BRAID_SUCCESS) {
    res = BRAID_ERR_NOMEM;
    goto out;
  }
  /* on one CUDA stream: one gate for all, released when all are done (the
   * communicators' units may depend on each other across ranks) */
  gate_ref shared = {NULL, 0, NULL};
  braid_stream *cs = blocking || g.n == 0 ? NULL : g.ops[0].stream;
  int one_stream = ncomm > 0 && cs != NULL && cs->cuda != NULL;
  for (int i = 0; i < g.n && one_stream; i++)
    one_stream = g.ops[i].stream == cs;
  /* set up before the shared gate, communicator after communicator (so
   * the ranks' first device call in such a group lists them in one order) */
  for (int k = 0; k < ncomm && one_stream && res == BRAID_SUCCESS; k++) {
    int n = 0;
    for (int i = 0; i < g.n; i++)
      if (g.comms[i] == done[k])
        tmp[n++] = g.ops[i];
    res = setup_before_gate(done[k], tmp, n);
    for (int i = 0, j = 0; i < g.n; i++)
      if (g.comms[i] == done[k])
        g.ops[i].checked = tmp[j++].checked;
  }
  if (res != BRAID_SUCCESS) {
    if (s != NULL)
      braid_stream_destroy(s);
    goto out;
  }
  if (one_stream) {
    atomic_int *left = malloc(sizeof *left);
    res = left == NULL ? BRAID_ERR_NOMEM
                       : gate_enqueue(done[0], &g.ops[0], cs, NULL, &shared);
    if (res != BRAID_SUCCESS) {
      free(left);
      if (s != NULL)
        braid_stream_destroy(s);
      goto out;
    }
    atomic_init(left, ncomm);
    shared.left = left;
  }
  uint64_t order = ORDER_NONE;
  for (int k = 0; k < ncomm; k++) {
    int n = 0;
    for (int i = 0; i < g.n; i++)
      if (g.comms[i] == done[k])
        tmp[n++] = g.ops[i];
    braid_result r = submit(done[k], tmp, n, blocking ? s : tmp[0].stream,
                            one_stream ? &shared : NULL, &order);
    if (r != BRAID_SUCCESS && res == BRAID_SUCCESS)
      res = r;
  }
  if (blocking) {
    braid_result r = braid_stream_destroy(s);
    if (res == BRAID_SUCCESS)
      res = r;
  }
out:
  free(tmp);
  free(done);
  free(g.ops);
  free(g.comms);
  return res;
}

braid_result enq_submit(braid_comm *c, exec_op *op) {
  if (g_group.depth > 0) {
    if (g_group.n == g_group.cap) {
      int cap = g_group.cap ? g_group.cap * 2 : 16;
      exec_op *o = realloc(g_group.ops, sizeof *o * (size_t)cap);
      if (o == NULL)
        return BRAID_ERR_NOMEM;
      g_group.ops = o;
      braid_comm **cs =
          realloc(g_group.comms, sizeof(braid_comm *) * (size_t)cap);
      if (cs == NULL)
        return BRAID_ERR_NOMEM;
      g_group.comms = cs;
      g_group.cap = cap;
    }
    g_group.ops[g_group.n] = *op;
    g_group.comms[g_group.n++] = c;
    return BRAID_SUCCESS;
  }
  return submit(c, op, 1, op->stream, NULL, NULL);
}
