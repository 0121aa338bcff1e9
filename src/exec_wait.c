/*
 * The executor's waiting side: how a rank waits (spin, yield, sleep: the
 * policy is described above exec_wait_pass), health checks of the peers, the
 * message of a timeout, sleeping until a transport may have moved, and the
 * final flush.
 * Device transports (c->dev) are checked and flushed like the host ones.
 */
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/view.h"
#include "src/check.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/flight.h"
#include "src/log.h"
#include "transports/call_fp.h"

/* The longest nap while a channel waits on a transport that can neither
 * be polled nor ring a doorbell. */
#define EXEC_BLIND_NAP_US 200
/* A spinning wait reads the clock every this many passes. */
#define EXEC_SPIN_CLOCK_EVERY 8

int64_t exec_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *exec_tp_why(int r) { return err_why((braid_result)r); }

braid_result exec_tp_fail(braid_comm *c, int r, const char *fmt, ...) {
  char what[sizeof c->last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return comm_fail(c, (braid_result)r, "%s: %s", what, exec_tp_why(r));
}

static const exec_op *first_pending(xop *xs, int nops) {
  for (int k = 0; k < nops; k++)
    if (!xs[k].done)
      return xs[k].op;
  return xs[0].op;
}

/* Records in every transport, host and device, that rank `dead` is the
 * cause, so that a peer that sees this rank leave next names that rank
 * too (tp_ops.set_cause). */
static void tell_cause(braid_comm *c, int dead) {
  for (int k = 0; k < c->ntp; k++)
    if (c->tp[k]->set_cause != NULL)
      c->tp[k]->set_cause(c->tp_state[k], dead);
  /* the device transports too: a peer that sees this rank leave through
   * tp_cuda's segment must name the same cause */
  const tp_ops *dt = NULL;
  void *ds = NULL;
  for (int i = comm_dev_transports(c, 0, &dt, &ds); i > 0;
       i = comm_dev_transports(c, i, &dt, &ds))
    if (dt->set_cause != NULL)
      dt->set_cause(ds, dead);
}

/* check_peers of a transport failed with r (its message recorded). */
static braid_result dead_peer(braid_comm *c, xop *xs, int nops, int r,
                              int dead) {
  const exec_op *op = first_pending(xs, nops);
  const boot_peer *bp = dead >= 0 ? boot_peer_info(c->boot, dead) : NULL;
  char where[96] = "";
  if (bp != NULL && bp->host[0])
    snprintf(where, sizeof where, "; rank %d ran on host %s", dead, bp->host);
  (void)comm_fail(c, BRAID_ERR_REMOTE,
                  "rank %d died or closed its connections during %s #%llu "
                  "(seen by rank %d: %s%s)",
                  dead, op->name, (unsigned long long)op->seq, c->rank,
                  exec_tp_why(r), where);
  tell_cause(c, dead);
  return r;
}

braid_result exec_check_health(braid_comm *c, xop *xs, int nops) {
  if (atomic_load(&c->aborted))
    return comm_fail(c, BRAID_ERR_ABORTED, "the communicator was aborted");
  for (int i = 0; i < c->ntp; i++) {
    int dead = -1;
    int r = c->tp[i]->check_peers != NULL
                ? c->tp[i]->check_peers(c->tp_state[i], &dead)
                : BRAID_SUCCESS;
    if (r == BRAID_ERR_MISMATCH) { /* a peer told of one */
      const exec_op *op = first_pending(xs, nops);
      return exec_tp_fail(c, r, "%s #%llu on rank %d", op->name,
                          (unsigned long long)op->seq, c->rank);
    }
    if (r != BRAID_SUCCESS)
      return dead_peer(c, xs, nops, r, dead);
  }
  const tp_ops *t = NULL;
  void *state = NULL;
  for (int i = comm_dev_transports(c, 0, &t, &state); i > 0;
       i = comm_dev_transports(c, i, &t, &state)) {
    int dead = -1;
    int r =
        t->check_peers != NULL ? t->check_peers(state, &dead) : BRAID_SUCCESS;
    if (r != BRAID_SUCCESS)
      return dead_peer(c, xs, nops, r, dead);
  }
  int dead = -1;
  if (boot_check_peers(c->boot, &dead) != BRAID_SUCCESS) {
    const boot_peer *bp = dead >= 0 ? boot_peer_info(c->boot, dead) : NULL;
    braid_result r =
        comm_fail(c, BRAID_ERR_REMOTE,
                  "rank %d died or closed its connections (seen "
                  "by rank %d on the bootstrap socket%s%s)",
                  dead, c->rank, bp != NULL ? "; it ran on host " : "",
                  bp != NULL ? bp->host : "");
    if (dead >= 0)
      tell_cause(c, dead);
    return r;
  }
  return BRAID_SUCCESS;
}

/* A transport saw a peer fail (reset, failed read). Ask the peer checks,
 * for a short while, which rank died first: they name the cause and record
 * it, so ranks that see this one leave next name that rank too. */
braid_result exec_remote_cause(braid_comm *c, xop *xs, int nops,
                               braid_result r) {
  if (r != BRAID_ERR_REMOTE)
    return r;
  int64_t until = exec_now_us() + 200000;
  for (;;) {
    /* a rank told of a mismatch (then gone, so its connections reset)
     * fails with the mismatch it was told, as over every transport */
    braid_result h = exec_check_health(c, xs, nops);
    if (h == BRAID_ERR_REMOTE || h == BRAID_ERR_MISMATCH)
      return h;
    if (exec_now_us() > until)
      return r; /* keep the transport's own message */
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
}

void exec_describe_wait(xop *xs, int nops, char *buf, size_t len) {
  buf[0] = '\0';
  for (int k = 0; k < nops; k++) {
    if (xs[k].done)
      continue;
    for (int i = 0; i < xs[k].nch; i++) {
      xchan *h = &xs[k].chans[i];
      if (h->done)
        continue;
      const sched_step *st =
          h->step < h->sc->nsteps ? &h->sc->steps[h->step] : NULL;
      snprintf(buf, len, "waiting on rank %d (channel %d, step %d %s%s)",
               h->wait_peer, h->ch, h->step,
               st ? sched_prim_name((sched_prim)st->prim) : "end",
               xs[k].dev >= 0 ? ", device buffers" : "");
      return;
    }
  }
}

void exec_sleep_once(braid_comm *c, xop *xs, int nops, const uint32_t *seen,
                     int timeout_us) {
  struct pollfd fds[64];
  int nfds = 0, device = 0, blind = 0;
  for (int k = 0; k < nops; k++) {
    if (xs[k].done)
      continue;
    device |= xs[k].dev >= 0;
    for (int i = 0; i < xs[k].nch && nfds < 64; i++) {
      xchan *h = &xs[k].chans[i];
      if (h->done || h->wait_conn == NULL || h->wait_peer < 0)
        continue;
      const tp_ops *ops = x_ops(c, &xs[k], h, h->wait_peer);
      int fd =
          ops != NULL && ops->pollfd != NULL ? ops->pollfd(h->wait_conn) : -1;
      if (fd >= 0)
        fds[nfds++] = (struct pollfd){fd, h->wait_events, 0};
      else if (ops != NULL && ops->bell_wait == NULL)
        blind = 1;
    }
  }
  /* A channel waits on a transport that nothing can wake us for (ofi: its
   * completion queues have no wait object, and providers with manual
   * progress move data only while polled): naps stay short. */
  if (blind && timeout_us > EXEC_BLIND_NAP_US)
    timeout_us = EXEC_BLIND_NAP_US;
  if (device) {
    /* Device transports: short waits only. GPU copies finishing ring no
     * doorbell, and the executor reads only the host transports' bells
     * before a pass, so a bell read here may already include the change
     * this rank waits for: the wait stays as short as a plain nap would
     * be, and ends early when a peer rings. With one device doorbell and
     * no descriptor to watch, sleep on it (tp_cuda caps its own wait at
     * 20 us while its copies run); else nap. */
    int us = timeout_us < 200 ? timeout_us : 200;
    const tp_ops *dt = NULL, *bell_ops = NULL;
    void *ds = NULL, *bell_state = NULL;
    int nbells = 0;
    for (int i = comm_dev_transports(c, 0, &dt, &ds); i > 0;
         i = comm_dev_transports(c, i, &dt, &ds))
      if (dt->bell_read != NULL && dt->bell_wait != NULL) {
        bell_ops = dt;
        bell_state = ds;
        nbells++;
      }
    if (nbells == 1 && nfds == 0) {
      bell_ops->bell_wait(bell_state, bell_ops->bell_read(bell_state), us);
      return;
    }
    (void)poll(fds, (nfds_t)nfds, 0);
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
    return;
  }
  int bell = -1;
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->bell_wait != NULL)
      bell = i;
  if (bell >= 0 && nfds == 0) {
    c->tp[bell]->bell_wait(c->tp_state[bell], seen[bell], timeout_us);
  } else if (bell >= 0) {
    c->tp[bell]->bell_wait(c->tp_state[bell], seen[bell], 100);
    (void)poll(fds, (nfds_t)nfds, 0);
  } else {
    struct timespec ts = {timeout_us / 1000000,
                          (long)(timeout_us % 1000000) * 1000};
    (void)ppoll(fds, (nfds_t)nfds, &ts, NULL);
  }
}

static int flush_one(braid_comm *c, const tp_ops *t, void *state) {
  if (t->flush == NULL)
    return BRAID_SUCCESS;
  int r = t->flush(state);
  if (r == BRAID_SUCCESS || r == TP_AGAIN)
    return r;
  return exec_tp_fail(c, r, "flushing %s", t->name);
}

int exec_flush(braid_comm *c, const xop *xs, int nops) {
  int again = 0, device = 0;
  for (int k = 0; k < nops; k++)
    device |= xs[k].dev >= 0;
  for (int i = 0; i < c->ntp; i++) {
    int r = flush_one(c, c->tp[i], c->tp_state[i]);
    if (r == TP_AGAIN)
      again = 1;
    else if (r != BRAID_SUCCESS)
      return r;
  }
  const tp_ops *t = NULL;
  void *state = NULL;
  for (int i = device ? comm_dev_transports(c, 0, &t, &state) : 0; i > 0;
       i = comm_dev_transports(c, i, &t, &state)) {
    int r = flush_one(c, t, state);
    if (r == TP_AGAIN)
      again = 1;
    else if (r != BRAID_SUCCESS)
      return r;
  }
  return again ? TP_AGAIN : BRAID_SUCCESS;
}

/* ---- how a rank waits -----------------------------------------------------
 *
 * What the policy rests on, measured on a 2-core VM (docs/PERFORMANCE.md,
 * "Waiting"): waking a rank asleep on a futex costs ~50 us there (its vCPU
 * went idle); a sched_yield with nothing else to run returns in well under a
 * microsecond; and the kernel often puts two ranks of a new job on one CPU
 * (the rendezvous wakes each on the other's CPU) and left them there for
 * thousands of calls while each spun out its budget before yielding to the
 * other: 52 us per 8-byte allreduce instead of 0.6.
 *
 * So a rank that finds nothing to do:
 *  1. spins (BRAID_SPIN_US) only where spinning can help: not when a peer it
 *     waits on last noted this very CPU (shm peers note theirs), not when
 *     its host has more ranks than the CPUs it may use, and not when its
 *     last waits spun out the budget and ended just after it, at the first
 *     yields (the peer needed this CPU: a tcp peer leaves no note), but for
 *     one wait in 64 that spins again to see;
 *  2. then polls with a sched_yield between passes (up to BRAID_YIELD_US of
 *     idleness): nearly as quick as spinning when the CPU is its own, and
 *     the CPU goes to whoever else wants it (a peer, the program's threads);
 *  3. then sleeps on the doorbell or the sockets, the naps doubling from
 *     50 us to ~12 ms, so a long wait costs no CPU.
 * A rank that finds a peer on its CPU while its host has a CPU for every
 * rank moves off that CPU (unstack), at most every 10 ms; it is not pinned.
 * The last step of making a communicator is a few barriers (exec_wait_settle),
 * so that this move, and the wake-up of the CPU it moves to (~50 us), is
 * paid in braid_comm_init rather than in the first calls.
 */

#define EXEC_UNSTACK_EVERY_US 10000
/* How long two ranks must be seen waiting for each other in different
 * calls, the same note all along, before it is called a mismatch: a rank
 * the scheduler left off its CPU that long is rare; one about to see a
 * message is not. */
#define EXEC_CYCLE_US 1000000
/* Waits in a row that spun out their budget and ended within
 * EXEC_AFTER_SPIN_US of it, after which waits skip the spin but for one in
 * EXEC_SPIN_PROBE. */
#define EXEC_USELESS_SPINS 3
#define EXEC_AFTER_SPIN_US 20
#define EXEC_SPIN_PROBE 64

/* Ranks on this host (from the communicator's host map, which every rank
 * shares), whether any host holds several, and the CPUs this thread may
 * use; counted once. */
static int same_host(const braid_comm *c, int q) {
  const sched_view *v = c->view;
  return v != NULL ? v->host[q] == v->host[c->rank]
                   : q == c->rank || boot_same_host(c->boot, c->rank, q);
}

static void wait_count(braid_comm *c) {
  const sched_view *v = c->view;
  int n = 0;
  for (int q = 0; q < c->nranks; q++)
    n += same_host(c, q);
  c->wait.shared_host = v != NULL && v->nhosts < c->nranks;
  cpu_set_t set;
  int ncpus = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    ncpus = CPU_COUNT(&set);
  c->wait.nlocal = n;
  c->wait.ncpus = ncpus > 0 ? ncpus : 1;
  c->wait.cpu = -1;
}

static void note_cpu(braid_comm *c, int cpu) {
  c->wait.cpu = cpu;
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i]->note_cpu != NULL)
      c->tp[i]->note_cpu(c->tp_state[i], cpu);
}

/* Moves this thread off `cpu` without pinning it: narrowing the CPUs it may
 * use to the others migrates it at once, and widening them back leaves it
 * where the kernel put it. 1 if it moved. */
static int unstack(int cpu) {
  cpu_set_t all, others;
  if (cpu < 0 || cpu >= CPU_SETSIZE ||
      sched_getaffinity(0, sizeof all, &all) != 0 || !CPU_ISSET(cpu, &all) ||
      CPU_COUNT(&all) < 2)
    return 0;
  others = all;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0)
    return 0;
  (void)sched_setaffinity(0, sizeof all, &all);
  return 1;
}

/* A peer some channel waits on that last noted `cpu`, or -1. */
static int peer_on_cpu(braid_comm *c, xop *xs, int nops, int cpu) {
  for (int k = 0; k < nops; k++) {
    if (xs[k].done || xs[k].dev >= 0)
      continue;
    for (int i = 0; i < xs[k].nch; i++) {
      const xchan *h = &xs[k].chans[i];
      if (h->done || h->wait_peer < 0 || h->wait_peer == c->rank)
        continue;
      const tp_ops *t = c->tp[c->peer_tp[h->wait_peer]];
      if (t->peer_cpu != NULL &&
          t->peer_cpu(c->tp_state[c->peer_tp[h->wait_peer]], h->wait_peer) ==
              cpu)
        return h->wait_peer;
    }
  }
  return -1;
}

void exec_wait_note_cpu(braid_comm *c) {
  if (c->wait.nlocal == 0)
    wait_count(c);
  int cpu = sched_getcpu();
  if (cpu != c->wait.cpu)
    note_cpu(c, cpu);
}

int exec_wait_may_spin(braid_comm *c, int peer) {
  if (c->wait.nlocal == 0)
    wait_count(c);
  if (c->wait.nlocal > c->wait.ncpus)
    return 0;
  int cpu = sched_getcpu();
  if (cpu != c->wait.cpu)
    note_cpu(c, cpu);
  const tp_ops *t = c->tp[c->peer_tp[peer]];
  return cpu < 0 || t->peer_cpu == NULL ||
         t->peer_cpu(c->tp_state[c->peer_tp[peer]], peer) != cpu;
}

braid_result exec_wait_settle(braid_comm *c) {
  if (c->wait.nlocal == 0)
    wait_count(c);
  /* collective: every rank decides alike, from the host map alone (not from
   * its CPUs or its BRAID_UNSTACK, which may differ between ranks) */
  uint64_t seq = c->coll_seq; /* a user's first call stays #1 */
  if (!c->wait.shared_host) {
    /* one round all the same: the ranks leave init together, and the call
     * path (arguments, queue, executor, planner) has run once in this
     * process, so that a user's first call does not pay for its first use
     * (a one-rank communicator's first call took 70 to 500 us) */
    uint8_t mine = 0, any = 0;
    braid_result r =
        braid_allreduce(&mine, &any, 1, BRAID_UINT8, BRAID_MAX, c, NULL);
    c->coll_seq = seq;
    return r;
  }
  /* Rounds of "did anyone move in the last round?" until one says no. A
   * rank asleep in the first (the others still connecting) is woken ~50 us
   * after the others leave it, and a rank that moves pays the wake-up of
   * its new CPU: a round after the last move has every rank awake where
   * it stays, so they leave it, and start their first calls, together.
   * Each round also gathers every rank's CPU, so that ranks of one host on
   * one CPU part here whatever their transport: shm peers find it in their
   * waits as well (a note in the segment), tcp peers would not, and a new
   * process often starts on a CPU another rank holds (libfabric's psm
   * providers narrow a process to CPU 0 for a moment while they load, now
   * only in a communicator that spans hosts, transports/ofi/ofi_lib.c: 2
   * tcp ranks then took 58 us per 8-byte call, for hundreds of calls). */
  int32_t *cpus = calloc((size_t)c->nranks, sizeof *cpus);
  if (cpus == NULL)
    return comm_fail(c, BRAID_ERR_NOMEM,
                     "braid_comm_init: no memory for the CPUs of %d ranks",
                     c->nranks);
  uint8_t any = 1;
  braid_result r = BRAID_SUCCESS;
  for (int round = 0; round < 4 && (round < 2 || any); round++) {
    int32_t cpu = sched_getcpu();
    r = braid_allgather(&cpu, cpus, 1, BRAID_INT32, c, NULL);
    if (r != BRAID_SUCCESS)
      break;
    if (cfg_get()->unstack && cpu >= 0 && c->wait.nlocal <= c->wait.ncpus)
      for (int q = 0; q < c->rank; q++) /* of two, the higher rank moves */
        if (cpus[q] == cpu && same_host(c, q)) {
          if (unstack(cpu)) {
            c->wait.moves++;
            note_cpu(c, sched_getcpu());
          }
          break;
        }
    uint8_t mine = c->wait.moves != 0;
    c->wait.moves = 0;
    r = braid_allreduce(&mine, &any, 1, BRAID_UINT8, BRAID_MAX, c, NULL);
    if (r != BRAID_SUCCESS)
      break;
  }
  free(cpus);
  c->coll_seq = seq;
  return r;
}

/* The spinning budget of a wait that starts now. */
static int wait_begin(braid_comm *c, xop *xs, int nops, int64_t now) {
  const cfg_env *cfg = cfg_get();
  if (c->wait.nlocal == 0)
    wait_count(c);
  if (c->wait.nlocal > c->wait.ncpus)
    return 0; /* more ranks than CPUs: a spinning rank holds up another */
  int cpu = sched_getcpu();
  if (cpu != c->wait.cpu)
    note_cpu(c, cpu);
  int peer = cpu < 0 ? -1 : peer_on_cpu(c, xs, nops, cpu);
  if (peer < 0) {
    /* no note says so (a tcp peer, or one that moved), but the last waits
     * spun out their budget and ended right after the first yields: the
     * peer needed this CPU; spin again only now and then to see */
    if (c->wait.useless >= EXEC_USELESS_SPINS &&
        ++c->wait.probe % EXEC_SPIN_PROBE != 0)
      return 0;
    return cfg->spin_us;
  }
  /* of two ranks on one CPU the higher moves: were both to move at once,
   * they could land together again */
  if (cfg->unstack && c->rank > peer &&
      now - c->wait.unstacked_us > EXEC_UNSTACK_EVERY_US) {
    c->wait.unstacked_us = now;
    if (unstack(cpu)) {
      c->wait.moves++;
      note_cpu(c, sched_getcpu());
      return cfg->spin_us;
    }
  }
  return 0;
}

/* ---- who waits for whom (shm peers) ---------------------------------------
 * A wait that lasts (1 ms, then every health check) is noted in the rank's
 * segment header: the rank it waits for and its call's fingerprint. A rank
 * whose peer waits for it while it waits for the peer, with nothing in
 * flight between them either way, in another call, is in a mismatch that no
 * message will show (two ranks that each think they are the root of a
 * reduce both wait to receive): seen at two checks in a row with the same
 * note, it is BRAID_ERR_MISMATCH naming both calls. */

/* The rank the first unfinished channel waits for, its op and channel. */
static int waited_peer(xop *xs, int nops, const xop **op, const xchan **ch) {
  for (int k = 0; k < nops; k++) {
    if (xs[k].done)
      continue;
    for (int i = 0; i < xs[k].nch; i++)
      if (!xs[k].chans[i].done && xs[k].chans[i].wait_peer >= 0) {
        *op = &xs[k];
        *ch = &xs[k].chans[i];
        return xs[k].chans[i].wait_peer;
      }
  }
  return -1;
}

void exec_wait_end(braid_comm *c, const exec_waiter *w) {
  if (w->spin_us <= 0)
    return; /* it did not spin: nothing learnt */
  int64_t after = exec_now_us() - w->idle_since - w->spin_us;
  if (after < 0)
    c->wait.useless = 0; /* the spin caught the peer: it helps */
  else if (after <= EXEC_AFTER_SPIN_US && c->wait.useless < (1 << 20))
    c->wait.useless++;
}

void exec_wait_done(braid_comm *c, exec_waiter *w) {
  if (w->noted_tp >= 0)
    c->tp[w->noted_tp]->note_wait(c->tp_state[w->noted_tp], -1, 0);
  w->noted_tp = -1;
  w->cycle_peer = -1;
}

static int rank_stopped(braid_comm *c, int r, int *pid);

static braid_result wait_cycle(braid_comm *c, xop *xs, int nops,
                               exec_waiter *w) {
  const xop *x = NULL;
  const xchan *h = NULL;
  int p = waited_peer(xs, nops, &x, &h);
  if (p < 0)
    return BRAID_SUCCESS;
  const sched_step *step =
      h->step < h->sc->nsteps ? &h->sc->steps[h->step] : NULL;
  flight_waiting(c, x->op, p, h->ch, h->step, step != NULL ? step->prim : -1);
  if (p == c->rank || x->dev >= 0)
    return BRAID_SUCCESS;
  int ti = c->peer_tp[p];
  const tp_ops *t = c->tp[ti];
  void *st = c->tp_state[ti];
  if (t->note_wait == NULL || t->peer_wait == NULL || t->quiet == NULL)
    return BRAID_SUCCESS;
  uint64_t fp = x->is_p2p ? 0 : x->fp_set ? x->fp : check_call_fp(x->op);
  if (w->noted_tp != ti || w->noted_on != p) {
    if (w->noted_tp >= 0 && w->noted_tp != ti)
      exec_wait_done(c, w);
    t->note_wait(st, p, fp);
    w->noted_tp = ti;
    w->noted_on = p;
  }
  int on = -1;
  uint64_t pfp = 0;
  uint32_t epoch = 0;
  /* The same call number only: a peer one call behind that waits for this
   * rank is most likely about to see a release this rank has made (the
   * acknowledgment of a single-copy send it has not looked at yet) */
  int pid = 0;
  if (fp == 0 || t->peer_wait(st, p, &on, &pfp, &epoch) != 1 || on != c->rank ||
      pfp == 0 || pfp == fp || ((pfp ^ fp) & 0xffffffu) != 0 ||
      !t->quiet(st, p) || rank_stopped(c, p, &pid)) {
    w->cycle_peer = -1;
    return BRAID_SUCCESS;
  }
  int64_t now = exec_now_us();
  if (w->cycle_peer != p || w->cycle_epoch != epoch) {
    w->cycle_peer = p; /* confirmed, or not, a second later */
    w->cycle_epoch = epoch;
    w->cycle_since = now;
    return BRAID_SUCCESS;
  }
  if (now - w->cycle_since < EXEC_CYCLE_US)
    return BRAID_SUCCESS;
  char what[224];
  tp_fp_mismatch(pfp, fp, p, what, sizeof what);
  tp_mismatch m = {c->rank, p, pfp, fp};
  check_tell_mismatch(c, &m);
  return comm_fail(c, BRAID_ERR_MISMATCH,
                   "%s #%llu on rank %d: rank %d waits for this rank, and this "
                   "rank for it, with nothing in flight between them: %s",
                   x->op->name, (unsigned long long)x->op->seq, c->rank, p,
                   what);
}

/* 1 if rank r runs on this host and its process is stopped (SIGSTOP, a
 * debugger): /proc/<pid>/stat's state after the command. */
static int rank_stopped(braid_comm *c, int r, int *pid) {
  const boot_peer *bp = boot_peer_info(c->boot, r);
  if (bp == NULL || !boot_same_host(c->boot, c->rank, r))
    return 0;
  char path[48], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)bp->pid);
  FILE *f = fopen(path, "re");
  size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f != NULL)
    fclose(f);
  buf[n] = '\0';
  const char *q = strrchr(buf, ')');
  *pid = (int)bp->pid;
  return q != NULL && (q[1] == ' ') && (q[2] == 'T' || q[2] == 't');
}

/* From rank p on, who waits for whom, as far as the notes of this host's
 * ranks tell (tp_ops.peer_wait), into buf; returns the rank at the end of
 * the chain (one that is not waiting in a collective, or the first seen
 * twice). */
static int wait_chain(braid_comm *c, int p, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int hops = 0; hops < c->nranks && p >= 0 && p != c->rank; hops++) {
    const tp_ops *t = c->tp[c->peer_tp[p]];
    int on = -1, pid = 0;
    uint64_t fp = 0;
    uint32_t epoch = 0;
    if (t->peer_wait == NULL) /* another host: its notes are not seen */
      break;
    int known = t->peer_wait(c->tp_state[c->peer_tp[p]], p, &on, &fp, &epoch);
    if (known != 1) {
      int stopped = rank_stopped(c, p, &pid);
      if (known < 0 && !stopped) /* its note went to another rank */
        break;
      char pids[32] = "";
      if (stopped)
        snprintf(pids, sizeof pids, " (pid %d)", pid);
      snprintf(buf + n, len - n, "%srank %d%s is %s", n ? "; " : "", p, pids,
               stopped ? "stopped (SIGSTOP or a debugger)"
                       : "not waiting in a collective (busy elsewhere, or "
                         "not at this call yet)");
      return p;
    }
    char call[96];
    tp_fp_describe(fp, call, sizeof call);
    int k = snprintf(buf + n, len - n, "%srank %d waits for rank %d in %s",
                     n ? "; " : "", p, on, call);
    if (k < 0 || (size_t)k >= len - n)
      break;
    n += (size_t)k;
    p = on;
  }
  return p;
}

/* A wait that has lasted a heartbeat interval: the transports exchange
 * heartbeats (tp_ops.heartbeat); a peer that leaves one unanswered for two
 * intervals (stopped, or its host gone) is named in buf and, once, in a
 * warning. The wait goes on: a stopped rank may resume. */
static void heartbeats(braid_comm *c, exec_waiter *w, const xop *x,
                       int64_t idle, char *buf, size_t len) {
  int every = cfg_get()->heartbeat_ms;
  buf[0] = '\0';
  if (every <= 0 || idle < (int64_t)every * 1000)
    return;
  int peer = -1, ms = 0;
  for (int i = 0; i < c->ntp; i++) {
    int m = 0;
    int q = c->tp[i]->heartbeat != NULL
                ? c->tp[i]->heartbeat(c->tp_state[i], &m)
                : -1;
    if (q >= 0 && m > ms) {
      peer = q;
      ms = m;
    }
  }
  w->hb_peer = peer;
  w->hb_ms = peer >= 0 ? ms : 0;
  if (peer < 0)
    return;
  const boot_peer *bp = boot_peer_info(c->boot, peer);
  snprintf(buf, len,
           "rank %d (host %s) has not answered a heartbeat for %.1f s "
           "(stopped or unreachable)",
           peer, bp != NULL ? bp->host : "?", ms / 1000.0);
  if (!w->hb_warned && x != NULL) {
    WARN(LOG_COLL,
         "%s #%llu on rank %d has waited %lld ms: %s; BRAID_TIMEOUT (%d ms) "
         "ends the wait",
         x->op->name, (unsigned long long)x->op->seq, c->rank,
         (long long)(idle / 1000), buf, c->timeout_ms);
    w->hb_warned = 1;
  }
}

braid_result exec_wait_pass(braid_comm *c, xop *xs, int nops, exec_waiter *w,
                            const uint32_t *seen) {
  const cfg_env *cfg = cfg_get();
  if (atomic_load_explicit(&c->aborted, memory_order_relaxed))
    return comm_fail(c, BRAID_ERR_ABORTED, "the communicator was aborted");
  int64_t t;
  if (w->idle_since != 0 && w->t_last - w->idle_since < w->spin_us &&
      ++w->polls % EXEC_SPIN_CLOCK_EVERY != 0)
    t = w->t_last; /* still spinning: the budget is read coarsely */
  else
    t = w->t_last = exec_now_us();
  if (w->idle_since == 0) {
    w->idle_since = t;
    w->spin_us = wait_begin(c, xs, nops, t);
  }
  int64_t idle = t - w->idle_since;
  if (t - w->last_check > 50000 && idle > 1000) {
    w->last_check = t;
    braid_result res = exec_check_health(c, xs, nops);
    /* A peer that sent its last message of the call and left at once (its
     * call done, its communicator gone) is seen gone by the check though
     * its messages may still be coming in after the last poll: the first
     * time, poll on; the next check (50 ms on) fails. Seen as "rank 1
     * died ... during allreduce #12" on the slower rank of a test's last
     * call. */
    if (res == BRAID_ERR_REMOTE && w->dead_seen == 0) {
      w->dead_seen = t;
      res = BRAID_SUCCESS;
    }
    if (res == BRAID_SUCCESS)
      res = wait_cycle(c, xs, nops, w);
    if (res != BRAID_SUCCESS)
      return res;
    const xop *x = NULL;
    const xchan *h = NULL;
    int p = waited_peer(xs, nops, &x, &h);
    char hb[160];
    heartbeats(c, w, x, idle, hb, sizeof hb);
    if (!w->warned && idle > 1000000 && p >= 0) {
      /* a stopped rank is named at once; the wait goes on (it may resume) */
      char chain[384];
      int end = wait_chain(c, p, chain, sizeof chain);
      int pid = 0;
      if (end >= 0 && end != c->rank && rank_stopped(c, end, &pid)) {
        WARN(LOG_COLL,
             "%s #%llu on rank %d has waited %lld ms: %s; BRAID_TIMEOUT "
             "(%d ms) ends the wait",
             x->op->name, (unsigned long long)x->op->seq, c->rank,
             (long long)(idle / 1000), chain, c->timeout_ms);
        w->warned = 1;
      }
    }
    if (idle > (int64_t)c->timeout_ms * 1000) {
      char what[160], chain[384] = "";
      exec_describe_wait(xs, nops, what, sizeof what);
      if (p >= 0)
        (void)wait_chain(c, p, chain, sizeof chain);
      const exec_op *op = first_pending(xs, nops);
      return comm_fail(c, BRAID_ERR_TIMEOUT,
                       "%s #%llu timed out after %d ms on rank %d: %s%s%s%s%s",
                       op->name, (unsigned long long)op->seq, c->timeout_ms,
                       c->rank, what, chain[0] ? "; " : "", chain,
                       hb[0] ? "; " : "", hb);
    }
  }
  if (idle < w->spin_us) {
    /* a few pauses only: PAUSE costs ~140 cycles on recent x86 cores, and
     * every pass of the loop is a chance to see the peer's message */
    for (int i = 0; i < 2; i++)
      exec_cpu_relax();
  } else if (idle < w->spin_us + cfg->yield_us) {
    sched_yield();
  } else {
    int us = 50 << (w->sleeps < 8 ? w->sleeps : 8); /* up to ~12 ms */
    w->sleeps++;
    exec_sleep_once(c, xs, nops, seen, us);
  }
  return BRAID_SUCCESS;
}
