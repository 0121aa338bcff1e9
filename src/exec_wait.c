/*
 * The executor's waiting side: health checks of the peers, the message of a
 * timeout, sleeping until a transport may have moved, and the final flush.
 * Device transports (c->dev) are checked and flushed like the host ones.
 */
#include <poll.h>
#include <stdio.h>
#include <time.h>

#include "src/exec_int.h"
#include "src/log.h"

/* The longest nap while a channel waits on a transport that can neither
 * be polled nor ring a doorbell. */
#define EXEC_BLIND_NAP_US 200

int64_t exec_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const exec_op *first_pending(xop *xs, int nops) {
  for (int k = 0; k < nops; k++)
    if (!xs[k].done)
      return xs[k].op;
  return xs[0].op;
}

static braid_result dead_peer(braid_comm *c, xop *xs, int nops, const tp_ops *t,
                              void *state, int dead) {
  const exec_op *op = first_pending(xs, nops);
  const char *why = t->last_error != NULL ? t->last_error(state) : "";
  comm_set_error(c,
                 "rank %d died or closed its connections during %s #%llu "
                 "(seen by rank %d: %s)",
                 dead, op->name, (unsigned long long)op->seq, c->rank, why);
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
  return BRAID_ERR_REMOTE;
}

braid_result exec_check_health(braid_comm *c, xop *xs, int nops) {
  if (atomic_load(&c->aborted)) {
    comm_set_error(c, "the communicator was aborted");
    return BRAID_ERR_ABORTED;
  }
  for (int i = 0; i < c->ntp; i++) {
    int dead = -1;
    if (c->tp[i]->check_peers != NULL &&
        c->tp[i]->check_peers(c->tp_state[i], &dead) != BRAID_SUCCESS)
      return dead_peer(c, xs, nops, c->tp[i], c->tp_state[i], dead);
  }
  const tp_ops *t = NULL;
  void *state = NULL;
  for (int i = comm_dev_transports(c, 0, &t, &state); i > 0;
       i = comm_dev_transports(c, i, &t, &state)) {
    int dead = -1;
    if (t->check_peers != NULL && t->check_peers(state, &dead) != BRAID_SUCCESS)
      return dead_peer(c, xs, nops, t, state, dead);
  }
  int dead = -1;
  if (boot_check_peers(c->boot, &dead) != BRAID_SUCCESS) {
    comm_set_error(c,
                   "rank %d died or closed its connections (seen by rank "
                   "%d on the bootstrap socket)",
                   dead, c->rank);
    return BRAID_ERR_REMOTE;
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
    if (exec_check_health(c, xs, nops) == BRAID_ERR_REMOTE)
      return BRAID_ERR_REMOTE;
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
  comm_set_error(c, "flushing %s: %s", t->name,
                 t->last_error != NULL ? t->last_error(state)
                                       : braid_result_string((braid_result)r));
  return r;
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
