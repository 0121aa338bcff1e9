/*
 * Collective mismatches told between the ranks of one host (tp_shm's
 * mismatch and tell_mismatch; src/check.c says why). A rank that broke on a
 * mismatch writes it into the header of every peer's segment, where that
 * peer's next health check (shm_check_peers, every 50 ms of a wait) finds
 * it, and wakes the peer if it sleeps on its doorbell.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/call_fp.h"
#include "transports/shm.h"

int shm_mismatch(void *state, tp_mismatch *m) {
  shm_state *st = state;
  if (st == NULL || !st->mm_set)
    return 0;
  *m = st->mm;
  return 1;
}

void shm_tell_mismatch(void *state, const tp_mismatch *m) {
  shm_state *st = state;
  if (st == NULL || m == NULL)
    return;
  for (int i = 0; i < st->npeers; i++) {
    shm_hdr *h = st->peers[i].hdr;
    uint32_t free_claim = 0;
    if (h == NULL || st->peers[i].dead ||
        !atomic_compare_exchange_strong(&h->told_claim, &free_claim, 1u))
      continue; /* someone told it first */
    h->told_by = m->by;
    h->told_peer = m->peer;
    h->told_theirs = m->theirs;
    h->told_mine = m->mine;
    atomic_store_explicit(&h->told_ready, 1u, memory_order_release);
    atomic_fetch_add_explicit(&h->bell, 1, memory_order_seq_cst);
    syscall(SYS_futex, (uint32_t *)&h->bell, FUTEX_WAKE, INT_MAX, NULL, NULL,
            0);
  }
}

int shm_told(shm_state *st) {
  if (st->me == NULL ||
      !atomic_load_explicit(&st->me->told_ready, memory_order_acquire))
    return 0;
  if (!st->mm_set) {
    st->mm = (tp_mismatch){st->me->told_by, st->me->told_peer,
                           st->me->told_theirs, st->me->told_mine};
    st->mm_set = 1;
  }
  /* a mismatch this rank met itself comes first; else the one told */
  tp_mismatch m = {st->me->told_by, st->me->told_peer, st->me->told_theirs,
                   st->me->told_mine};
  char what[240];
  tp_fp_told(&m, st->rank, what, sizeof what);
  (void)tp_keep(st->why, ERR(BRAID_ERR_MISMATCH, "shm: %s", what));
  return 1;
}
