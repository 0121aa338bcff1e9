/*
 * The shared-memory transport's doorbell, its notes on waits and CPUs, and
 * its peers' liveness (tp_shm's bell_read, bell_wait, set_fp, note_wait,
 * peer_wait, quiet, note_cpu, peer_cpu, check_peers, set_cause): what the
 * executor's wait (src/exec_wait.c) asks of it.
 */
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/common.h"
#include "transports/shm.h"

uint32_t shm_bell_read(void *state) {
  shm_state *st = state;
  if (!st->me)
    return st->lone_bell;
  return atomic_load_explicit(&st->me->bell, memory_order_acquire);
}

/* 1 if a peer published a slot this rank has not read, or released slots
 * since this rank last looked (then the look is recorded), or this rank
 * receives a shared single copy: the sender's pieces end in microseconds,
 * and a sender that ends one just before this rank sleeps rings no bell. */
static int shm_changed(shm_state *st) {
  for (int i = 0; i < st->npeers * st->nchannels; i++) {
    tp_conn *c = &st->conns[i];
    if (c->rx_shared)
      return 1;
    shm_slot *s = slot_at(c->rx_base, st->me->slot_bytes, (uint64_t)st->nslots,
                          c->rx_cons);
    if (atomic_load_explicit(&s->seq, memory_order_acquire) == c->rx_cons + 1)
      return 1;
    uint64_t t = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
    if (t != c->tx_tail) {
      c->tx_tail = t;
      return 1;
    }
  }
  return 0;
}

void shm_bell_wait(void *state, uint32_t seen, int timeout_us) {
  shm_state *st = state;
  if (timeout_us <= 0)
    return;
  struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000L};
  if (!st->me) {
    nanosleep(&ts, NULL);
    return;
  }
  atomic_fetch_add_explicit(&st->me->sleeping, 1, memory_order_seq_cst);
  atomic_thread_fence(memory_order_seq_cst);
  if (shm_changed(st)) {
    /* published before `sleeping` was seen: nobody rang, so count the
     * change here (a caller compares the bell with what it read) */
    atomic_fetch_add_explicit(&st->me->bell, 1, memory_order_seq_cst);
  } else if (atomic_load_explicit(&st->me->bell, memory_order_seq_cst) ==
             seen) {
    syscall(SYS_futex, (uint32_t *)&st->me->bell, FUTEX_WAIT, seen, &ts, NULL,
            0);
  }
  atomic_fetch_sub_explicit(&st->me->sleeping, 1, memory_order_seq_cst);
}

void shm_set_fp(void *state, uint64_t fp) { ((shm_state *)state)->fp = fp; }

void shm_note_wait(void *state, int on, uint64_t fp) {
  shm_state *st = state;
  if (st->me == NULL)
    return;
  atomic_store_explicit(&st->me->wait_on, -1, memory_order_release);
  atomic_store_explicit(&st->me->wait_fp, fp, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->me->wait_epoch, 1, memory_order_relaxed);
  atomic_store_explicit(&st->me->wait_on, on, memory_order_release);
}

int shm_peer_wait(void *state, int peer, int *on, uint64_t *fp,
                  uint32_t *epoch) {
  shm_state *st = state;
  if (peer < 0 || peer >= st->nranks || st->lidx[peer] < 0)
    return 0;
  shm_hdr *h = st->peers[st->lidx[peer]].hdr;
  uint32_t e = atomic_load_explicit(&h->wait_epoch, memory_order_acquire);
  int w = atomic_load_explicit(&h->wait_on, memory_order_acquire);
  uint64_t f = atomic_load_explicit(&h->wait_fp, memory_order_relaxed);
  if (w < 0 || atomic_load_explicit(&h->wait_epoch, memory_order_acquire) != e)
    return 0;
  *on = w;
  *fp = f;
  *epoch = e;
  return 1;
}

int shm_quiet(void *state, int peer) {
  shm_state *st = state;
  if (peer < 0 || peer >= st->nranks || st->lidx[peer] < 0)
    return 0;
  for (int ch = 0; ch < st->nchannels; ch++) {
    tp_conn *c = &st->conns[st->lidx[peer] * st->nchannels + ch];
    shm_slot *s = slot_at(c->rx_base, st->me->slot_bytes, (uint64_t)st->nslots,
                          c->rx_cons);
    if (c->pend_frags > 0 ||
        atomic_load_explicit(&c->tx->tail, memory_order_acquire) !=
            c->tx_prod ||
        atomic_load_explicit(&s->seq, memory_order_acquire) == c->rx_cons + 1)
      return 0;
  }
  return 1;
}

void shm_note_cpu(void *state, int cpu) {
  shm_state *st = state;
  if (st->me != NULL &&
      atomic_load_explicit(&st->me->cpu, memory_order_relaxed) != cpu)
    atomic_store_explicit(&st->me->cpu, cpu, memory_order_relaxed);
}

int shm_peer_cpu(void *state, int peer) {
  shm_state *st = state;
  if (peer < 0 || peer >= st->nranks || st->lidx[peer] < 0)
    return -1;
  return atomic_load_explicit(&st->peers[st->lidx[peer]].hdr->cpu,
                              memory_order_relaxed);
}

/* 1 when a message copied in by peer i still waits in one of our rings: a
 * peer that exited after its last send is reported only once that is read. */
static int rx_waiting(shm_state *st, int i) {
  for (int ch = 0; ch < st->nchannels; ch++) {
    tp_conn *c = &st->conns[i * st->nchannels + ch];
    shm_slot *s = slot_at(c->rx_base, st->me->slot_bytes, (uint64_t)st->nslots,
                          c->rx_cons);
    if (atomic_load_explicit(&s->seq, memory_order_acquire) == c->rx_cons + 1 &&
        s->kind == SHM_KIND_DATA)
      return 1;
  }
  return 0;
}

int shm_check_peers(void *state, int *dead_rank) {
  shm_state *st = state;
  if (shm_told(st))
    return BRAID_ERR_MISMATCH;
  for (int i = 0; i < st->npeers; i++) {
    shm_peer *p = &st->peers[i];
    if (!p->pid_ok)
      continue;
    if (!p->dead)
      p->dead = tp_peer_exited(p->pidfd, p->pid);
    if (p->dead && !rx_waiting(st, i)) {
      int cause = atomic_load(&p->hdr->cause);
      if (cause >= 0 && cause != st->rank) {
        if (dead_rank)
          *dead_rank = cause;
        return tp_keep(st->why,
                       ERR(BRAID_ERR_REMOTE,
                           "shm: rank %d died; rank %d (pid %d) then left",
                           cause, p->rank, p->pid));
      }
      if (dead_rank)
        *dead_rank = p->rank;
      return tp_keep(st->why,
                     ERR(BRAID_ERR_REMOTE,
                         "shm: rank %d (pid %d) on this host has exited",
                         p->rank, p->pid));
    }
  }
  shm_pend_progress(st);
  return BRAID_SUCCESS;
}

void shm_set_cause(void *state, int dead_rank) {
  shm_state *st = state;
  if (st != NULL && st->me != NULL)
    atomic_store(&st->me->cause, dead_rank);
}
