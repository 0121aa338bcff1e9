/*
 * The executor's internal state (src/executor.c runs channels,
 * src/exec_wait.c waits and checks health, src/exec_dev.c adds device
 * buffers).
 */
#ifndef BRAID_SRC_EXEC_INT_H
#define BRAID_SRC_EXEC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "src/comm.h"
#include "src/comm_dev.h"

#define XPEND 64

/* One pause of a spinning wait (x86 PAUSE, arm64 YIELD). */
static inline void exec_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Milliseconds since *t0 (CLOCK_MONOTONIC). */
static inline long exec_ms_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long)(t.tv_sec - t0->tv_sec) * 1000 +
         (t.tv_nsec - t0->tv_nsec) / 1000000;
}

typedef struct pend {
  tp_conn *conn;
  const tp_ops *ops;
  int peer;
  uint64_t ticket;
  const char *p;
  size_t len;
} pend;

typedef struct xchan {
  const sched_channel *sc;
  int ch;    /* schedule channel index */
  int tch;   /* transport channel used for its connections */
  int route; /* the schedule's route hint (sched_route) for device buffers */
  int64_t nslices, slice; /* a call of 2^31 slices is possible (slice >= 1 B) */
  int step;
  uint32_t sub;
  int phase;
  int forwarded; /* phase 0 sent the step's forward as well (recv_reduce_fwd) */
  int done;
  double w_lo, w_hi;
  int whole;           /* one slice of the whole range: cptr's short way */
  const uint8_t *smap; /* per step: EXEC_SEND_* bits (exec_send_map) */
  int npend;
  /* what the channel waits for, for sleeping and for error messages */
  tp_conn *wait_conn;
  short wait_events;
  int wait_peer;
  pend pend[XPEND]; /* last: not cleared between calls */
} xchan;

typedef struct xop {
  exec_op *op;
  const sched *s;
  sched_channel p2p; /* send/recv: one local step */
  sched_step p2p_step;
  int me;
  char *bufs[4];
  size_t E, esize;
  int K;
  tp_dev_reducer red;
  tp_dev_reducer red_rev; /* RECV_REDUCE_REV's: the operands swapped */
  xchan *chans;
  int nch;
  int done;
  int is_p2p;
  int dev;     /* -1: host buffers; else device buffers, moved directly */
  int fp_set;  /* the transports carry its fingerprint (tp_ops.set_fp) */
  uint64_t fp; /* that fingerprint (check_call_fp), once fp_set */
  int large;   /* blocks of at least BRAID_SHM_CMA_MAX: EXEC_SEND_STAGE holds */
} xop;

int64_t exec_now_us(void);
/* 1 when a prepared small call is kept (src/executor.c) and was kept after
 * the last schedule left the cache (tests). */
int exec_prep_fresh(const braid_comm *c);

/* The transport, connection and transport state that carry channel h of x
 * to `peer`: for device buffers, the device transport of c->dev that the
 * channel's route hint asks for. */
static inline const tp_ops *x_ops(braid_comm *c, const xop *x, const xchan *h,
                                  int peer) {
  return x->dev >= 0 ? comm_dev_ops(c, peer, h->route)
                     : c->tp[c->peer_tp[peer]];
}
static inline tp_conn *x_conn(braid_comm *c, const xop *x, const xchan *h,
                              int peer) {
  return x->dev >= 0 ? comm_dev_conn(c, peer, h->tch, h->route)
                     : comm_conn(c, peer, h->tch);
}
static inline void *x_state(braid_comm *c, const xop *x, const xchan *h,
                            int peer) {
  return x->dev >= 0 ? comm_dev_state(c, peer, h->route)
                     : c->tp_state[c->peer_tp[peer]];
}

/* Gives every host transport the fingerprint of the call that runs now
 * (tp_ops.set_fp): its messages carry it and expect it. */
static inline void exec_set_fp(braid_comm *c, uint64_t fp) {
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->set_fp != NULL)
      c->tp[i]->set_fp(c->tp_state[i], fp);
}

/* src/executor.c: runs ops whose buffers the executor can address (host
 * buffers, or device buffers with a device transport to every peer). */
braid_result exec_loop(braid_comm *c, exec_op *ops, int nops);

/* src/exec_wait.c */
/* 1 when a short spin for a message from `peer` may help: the host has a
 * CPU for each of its ranks and `peer` did not last note this rank's CPU
 * (noted here when it changed). */
int exec_wait_may_spin(braid_comm *c, int peer);
/* One wait of exec_loop: from the first pass in which nothing moved to the
 * next that moves. */
typedef struct exec_waiter {
  int64_t idle_since; /* 0: not waiting */
  int64_t last_check;
  int64_t dead_seen; /* when a peer check first found a peer gone, or 0 */
  int spin_us;       /* this wait's spinning budget (exec_wait_pass) */
  int sleeps;
  /* the clock as last read, and the passes since: a spinning pass reads it
   * one time in EXEC_SPIN_CLOCK_EVERY (a read costs as much as a poll) */
  int64_t t_last;
  unsigned polls;
  /* a wait that lasted is noted where peers see it (tp_ops.note_wait):
   * the transport it was noted on (-1: none), and for whom */
  int noted_tp, noted_on;
  /* a peer seen waiting for this rank in another call, nothing in flight:
   * which, and its note's epoch (confirmed at the next check) */
  int cycle_peer;
  uint32_t cycle_epoch;
  int64_t cycle_since;
  int warned; /* a stopped rank was named in a warning */
  /* a peer that left a heartbeat unanswered (tp_ops.heartbeat) for hb_ms
   * (0: none seen), and whether a warning named it */
  int hb_peer, hb_ms, hb_warned;
} exec_waiter;
/* A wait is over (something moved): what it took tells whether spinning
 * helps (src/exec_wait.c). */
void exec_wait_end(braid_comm *c, const exec_waiter *w);
/* Takes back a wait's note (exec_waiter.noted_tp) once the wait is over. */
void exec_wait_done(braid_comm *c, exec_waiter *w);
/* A pass in which nothing moved: checks the peers and the timeout now and
 * then, and spins, yields or sleeps (the policy is at the top of
 * src/exec_wait.c). BRAID_SUCCESS, or the error that ends the call. */
/* Notes the CPU this rank runs on where its peers can read it (shm), at the
 * start of a call and of every wait, so a peer can tell it shares that CPU. */
void exec_wait_note_cpu(braid_comm *c);
/* The end of making a communicator some host of which holds several of its
 * ranks (collective): barrier rounds, in which ranks the kernel put on one
 * CPU move apart. */
braid_result exec_wait_settle(braid_comm *c);
braid_result exec_wait_pass(braid_comm *c, xop *xs, int nops, exec_waiter *w,
                            const uint32_t *seen);
/* The one door from a transport's int code to a result (transports/
 * transport.h, "Errors"): r is what a call of a transport's vtable returned,
 * a failure (not TP_AGAIN), its message the one the transport recorded on
 * this thread. exec_tp_why gives that message (r's name when the transport
 * said nothing); exec_tp_fail sets c's last error to fmt's text, ": " and
 * that message, and returns r as a braid_result. */
const char *exec_tp_why(int r);
braid_result exec_tp_fail(braid_comm *c, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
braid_result exec_check_health(braid_comm *c, xop *xs, int nops);
braid_result exec_remote_cause(braid_comm *c, xop *xs, int nops,
                               braid_result r);
void exec_describe_wait(xop *xs, int nops, char *buf, size_t len);
void exec_sleep_once(braid_comm *c, xop *xs, int nops, const uint32_t *seen,
                     int timeout_us);
/* Flushes every transport the ops used: BRAID_SUCCESS, TP_AGAIN, or an
 * error with the message set. */
int exec_flush(braid_comm *c, const xop *xs, int nops);

/* src/exec_dev.c: device buffers. exec_dev_run sets the device up, moves
 * what it can directly and stages the rest through host memory. Both leave
 * the calling thread's current device as they found it. */
braid_result exec_dev_run(braid_comm *c, exec_op *ops, int nops);
/* Sets the communicator's device side up when a collective among the ops
 * needs it (exec_dev_needs_setup). */
braid_result exec_dev_prepare(braid_comm *c, exec_op *ops, int nops);
int exec_dev_needs_setup(braid_comm *c, const exec_op *ops, int nops);
/* Device scratch and pinned staging that the ops take when they run are
 * grown beforehand, in the issuing thread, for calls on a CUDA stream (see
 * src/exec_dev.c): exec_dev_reserved answers, without c->lock, whether
 * they are already there; exec_dev_reserve grows them (c->lock held). */
int exec_dev_reserved(braid_comm *c, const exec_op *ops, int nops);
braid_result exec_dev_reserve(braid_comm *c, exec_op *ops, int nops);
/* src/exec_sched.c: an op's schedule (from BRAID_SCHEDULE_FILE or the
 * planner, cached in c->cache), its send map (per step, the EXEC_SEND_*
 * bits below), and scratch. All with c->lock held. */
/* A later step overwrites what the step sends: the transport must not read
 * it after the send returns (tp_ops.isend_copy). */
#define EXEC_SEND_VOLATILE 1u
/* In a large call (BRAID_SHM_CMA_MAX), the step's data goes through the
 * transport's buffers, copied by the sender, not read by the receiver
 * (tp_ops.isend_staged): the sending rank copies nothing else in its
 * channel, so single copy would leave its core idle while the receiver's
 * does all the work, or the receiver reduces what it gets, which single
 * copy does in two passes (read, then reduce) on the receiver's core, or
 * the step forwards what it has just reduced (RECV_REDUCE_SEND), still in
 * the sender's cache (docs/PERFORMANCE.md, "A reduced chunk forwarded
 * through the slots"). */
#define EXEC_SEND_STAGE 2u
/* The sending rank copies nothing else in its channel and the receiver
 * does not reduce what it gets: the transport may have the sender take a
 * share of the copy while it waits for the send (tp_ops.isend_shared).
 * In a large call EXEC_SEND_STAGE comes first. */
#define EXEC_SEND_SHARE 4u
/* EXEC_SEND_STAGE holds at any size, not only in large calls, where the
 * host's ranks have a CPU each: the sending rank copies nothing else in
 * its channel and the receiver reduces what it gets (a reduce's leaves:
 * single copy would have the receiver read, then reduce, while the sender
 * waits idle), or the step forwards what it has just reduced in an
 * in-place call, whose other sends go through the transport's buffers
 * already (EXEC_SEND_VOLATILE), in calls below EXEC_EARLY_FORWARD_MAX
 * (src/executor.c; docs/PERFORMANCE.md, "Sends through the slots below
 * 32 MiB"). */
#define EXEC_SEND_EARLY 8u
braid_result exec_get_sched(braid_comm *c, exec_op *op,
                            sched_cache_entry **out);
const uint8_t *exec_send_map(sched_cache_entry *e, const exec_op *op, int rank);
/* Frees every cached schedule (comm_free; tests); a kept call made
 * from them is stale after (c->cache_gen). */
void exec_sched_cache_clear(braid_comm *c);
/* Bytes of scratch op takes when it runs. */
braid_result exec_scratch_need(braid_comm *c, exec_op *op, size_t *bytes);
/* Grows the communicator's host scratch to at least bytes. */
braid_result exec_scratch_reserve(braid_comm *c, size_t bytes);
/* Scratch for ops that run together: part[k] is op k's own (NULL without
 * scratch), every part reserved before any is handed out. */
braid_result exec_scratch_layout(braid_comm *c, exec_op *ops, int nops,
                                 void **part);
/* Readies the device connections op will use (tp_ops.prepare; c->lock
 * held). */
braid_result exec_dev_prepare_conns(braid_comm *c, exec_op *op);

/* src/exec_kernel.c: collectives in one kernel (BRAID_CUDA_KERNEL_MAX).
 * exk_setup: collective, at the end of comm_dev_setup; exk_teardown before
 * the device side goes. exk_coll: whether a collective can go that way;
 * exk_op: whether op does (a whole call does when all its ops do:
 * exec_plan_kernels, src/exec_plan.h). exk_launch puts the call's kernels on
 * stream and returns its completion (*ev) and the number of its last
 * kernel (*seq); exk_finish waits for them and reports the call's error
 * (locked: the caller holds c->lock).
 * exk_calls: kernels launched so far; exk_blocks: the most blocks of a
 * call, 0 without kernels (tests). */
braid_result exk_setup(braid_comm *c, size_t max, size_t slot);
void exk_teardown(braid_comm *c);
int exk_coll(sched_coll coll);
int exk_op(const braid_comm *c, const exec_op *op);
braid_result exk_launch(braid_comm *c, const exec_op *ops, int nops,
                        void *stream, void **ev, uint64_t *seq);
braid_result exk_finish(braid_comm *c, const exec_op *op, void *ev,
                        uint64_t seq, int locked);
uint64_t exk_calls(const braid_comm *c);
int exk_blocks(const braid_comm *c);

/* Small calls on a CUDA stream, staged with their copies on the user's
 * stream around the call's gate (src/enqueue.c). An entry per op with
 * device buffers: where its buffers lie in the pinned area. */
typedef struct exec_stage {
  int k;                  /* the op */
  size_t inlen, outlen;   /* bytes this rank uses */
  size_t off_in, off_out; /* in the pinned area */
  void *dev_out;          /* the op's device output */
} exec_stage;
/* How many ops of the unit to stage (st: room for nops) when the device
 * side is set up, every device op is small and on its GPU, and all fit in
 * cap bytes; 0 when the unit must go the usual way. */
int exec_dev_stream_plan(braid_comm *c, const exec_op *ops, int nops,
                         size_t cap, exec_stage *st);
/* The pinned bytes a stream needs for one small call (0: none). */
size_t exec_dev_stream_cap(const braid_comm *c);
/* Issues the input copies on the user's stream and makes the staged ops
 * host ops on the pinned copies; then the output copies (after the gate). */
braid_result exec_dev_stream_in(braid_comm *c, exec_op *ops,
                                const exec_stage *st, int nst, char *host,
                                void *stream);
braid_result exec_dev_stream_out(braid_comm *c, const exec_op *ops,
                                 const exec_stage *st, int nst,
                                 const char *host, void *stream);
/* After a unit failed once its stream had reached the gate: copies the
 * device outputs as they are into the pinned area, so that the output
 * copies leave them unchanged. */
void exec_dev_stream_undo(braid_comm *c, const exec_stage *st, int nst,
                          char *host);

/* Local steps on the communicator's internal stream, finished on return. */
int exec_dev_copy(braid_comm *c, const xop *x, void *dst, const void *src,
                  size_t len);
int exec_dev_reduce(braid_comm *c, const xop *x, void *dst, const void *src,
                    size_t len);
int exec_dev_div(braid_comm *c, const xop *x);

/* src/executor.c: runs a set of ops to completion (caller holds c->lock). */
braid_result exec_run(braid_comm *c, exec_op *ops, int nops);
/* src/executor.c: the pointer and byte length of chunk (ck.index + sub) of
 * channel h's current slice. */
char *exec_cptr(const xop *x, const xchan *h, sched_chunks ck, uint32_t sub,
                size_t *len);

/* src/exec_fast.c: the small-call path. A prepared call (src/executor.c,
 * prep_keep) whose steps on this rank are sends, receives (with or without
 * a reduction) and local copies and reductions, each a whole message small
 * enough for its transport's fast ops (tp_ops.fast_*), is compiled into a
 * list of actions; its repeats run that list and skip the executor's loop,
 * which takes over where a receive finds nothing yet. */
#define EXEC_FAST_MAX 16
enum { EXEC_FAST_RECV = 1, EXEC_FAST_SEND, EXEC_FAST_COPY, EXEC_FAST_REDUCE };
enum { EXEC_FAST_SRC_SCR = 1, EXEC_FAST_DST_SCR = 2 };
typedef struct exec_fast_act {
  int prim;      /* EXEC_FAST_* */
  int ch, step;  /* its channel (index in x->chans) and step there */
  uint32_t sub;  /* its chunk in the step */
  int peer;      /* RECV, SEND */
  tp_conn *conn; /* RECV, SEND */
  const tp_ops *ops;
  const char *src; /* SEND, COPY, REDUCE; RECV: the reduction's operand */
  char *dst;       /* RECV, COPY, REDUCE */
  /* EXEC_FAST_SRC_SCR, EXEC_FAST_DST_SCR: src, dst are offsets into the
   * communicator's scratch, which may move between calls (it grows) */
  int scr;
  size_t len;
  tp_reducer red; /* RECV (fn NULL: a copy), REDUCE */
  /* SEND: on the first send of its connection, how many the list sends
   * there and the largest (the room checked before the run); 0 on the
   * others */
  int nsend;
  size_t maxlen;
} exec_fast_act;
typedef struct exec_fast {
  int n; /* actions; 0: the call takes the executor's loop */
  exec_fast_act a[EXEC_FAST_MAX];
} exec_fast;
/* Compiles prepared x (no step run yet) into f; f->n is 0 when it does not
 * qualify. */
void exec_fast_compile(braid_comm *c, const xop *x, exec_fast *f);
/* Runs op by f, in order: f->n when it finished; else the action, a
 * receive whose message is not there (or not the one expected), where it
 * stopped, every one before it done, and nothing done when it is 0. */
int exec_fast_run(braid_comm *c, exec_op *op, const exec_fast *f);
/* Moves prepared channels (prep_take's, no step run) past the first k
 * actions of f, for the loop to go on from there. */
void exec_fast_resume(const exec_fast *f, int k, xchan *chans);

#endif
