/*
 * braid_comm_shrink: a communicator of the ranks that are left, made by the
 * survivors alone (no new unique id, no help from the dead).
 *
 * 1. Each rank starts from its own view of who is gone: the ranks the
 *    caller excluded, or, with none given, the ranks whose bootstrap control
 *    connection has closed (a dead process closes it).
 * 2. The survivors agree: in rounds over the bootstrap's control
 *    connections, every rank sends its view to every rank it believes alive
 *    and takes the union of what it receives; a rank it cannot hear from is
 *    gone too. The rounds end when every view a rank received equals its
 *    own (with no failure during the rounds, the second round). A rank
 *    that others count as gone is told so in the round's message and
 *    leaves with BRAID_ERR_INVALID_ARG ("excluded"), so an excluded rank
 *    that is alive does not wait.
 * 3. The survivors, in their old rank order, make the new communicator as
 *    braid_comm_split does (a bootstrap over the members' control
 *    connections, new transports).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm.h"
#include "src/log.h"

#define SHRINK_MAGIC 0x6b6e697268733162ULL /* "b1shrink" */

/* Views larger than this many ranks are refused (a round message). */
#define SHRINK_MAX_RANKS 65536

typedef struct shrink_msg {
  uint64_t magic;
  int32_t round, from;
  uint8_t gone[]; /* nranks bytes */
} shrink_msg;

static braid_result bad(braid_comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static braid_result bad(braid_comm *c, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return comm_arg_bad(c, "braid_comm_shrink: %s", msg);
}

/* Rounds until the survivors' views agree; gone[] is this rank's. */
static braid_result agree(braid_comm *c, uint8_t *gone) {
  int n = c->nranks;
  size_t sz = sizeof(shrink_msg) + (size_t)n;
  shrink_msg *out = malloc(sz), *in = malloc(sz);
  uint8_t *next = malloc((size_t)n);
  braid_result r = out && in && next ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
  for (int round = 0; r == BRAID_SUCCESS && round <= n; round++) {
    *out = (shrink_msg){SHRINK_MAGIC, round, c->rank};
    memcpy(out->gone, gone, (size_t)n);
    memcpy(next, gone, (size_t)n);
    /* to every other rank: the live ones take part, a live one counted
     * gone learns it (a dead one's socket refuses, which is fine) */
    for (int p = 0; p < n; p++)
      if (p != c->rank && boot_note_send(c->boot, p, out, sz) != BRAID_SUCCESS)
        next[p] = 1;
    int same = 1;
    for (int p = 0; p < n && r == BRAID_SUCCESS; p++) {
      if (p == c->rank || gone[p] || next[p])
        continue;
      braid_result got = boot_note_recv(c->boot, p, in, sz);
      if (got == BRAID_ERR_ABORTED) {
        r = comm_fail(c, got, "braid_comm_shrink: %s", err_msg());
        break;
      }
      if (got != BRAID_SUCCESS || in->magic != SHRINK_MAGIC || in->from != p) {
        next[p] = 1; /* silent or gone: counted gone */
        same = 0;
        continue;
      }
      if (in->round != round) {
        r = comm_fail(c, BRAID_ERR_MISMATCH,
                      "braid_comm_shrink: rank %d is in round %d of the "
                      "agreement, this rank in round %d",
                      p, in->round, round);
        break;
      }
      if (in->gone[c->rank]) {
        r = comm_fail(c, BRAID_ERR_INVALID_ARG,
                      "braid_comm_shrink: rank %d counts this rank (%d) as "
                      "gone: it is excluded from the new communicator",
                      p, c->rank);
        break;
      }
      for (int q = 0; q < n; q++) {
        same &= in->gone[q] == gone[q];
        next[q] |= in->gone[q];
      }
    }
    for (int q = 0; q < n; q++)
      same &= next[q] == gone[q];
    memcpy(gone, next, (size_t)n);
    if (r == BRAID_SUCCESS && same && round >= 1)
      break;
  }
  free(out);
  free(in);
  free(next);
  return r;
}

static braid_result shrink_in(braid_comm *c, const int *excluded, int nexcluded,
                              braid_comm **newcomm);

braid_result braid_comm_shrink(braid_comm *c, const int *excluded,
                               int nexcluded, braid_comm **newcomm) {
  if (c == NULL)
    return comm_arg_bad(NULL, "braid_comm_shrink: comm is NULL");
  if (newcomm == NULL)
    return bad(c, "newcomm is NULL");
  braid_result ready = comm_ready(c);
  if (ready != BRAID_SUCCESS)
    return ready;
  *newcomm = NULL;
  CHECKR(comm_enter(c, "braid_comm_shrink"));
  braid_result r = shrink_in(c, excluded, nexcluded, newcomm);
  comm_leave(c);
  return r;
}

static braid_result shrink_in(braid_comm *c, const int *excluded, int nexcluded,
                              braid_comm **newcomm) {
  if (nexcluded < 0 || nexcluded > c->nranks)
    return bad(c, "nexcluded is %d (0 to %d)", nexcluded, c->nranks);
  if (nexcluded > 0 && excluded == NULL)
    return bad(c, "excluded is NULL with nexcluded %d", nexcluded);
  if (c->nranks > SHRINK_MAX_RANKS)
    return bad(c, "%d ranks: at most %d", c->nranks, SHRINK_MAX_RANKS);
  uint8_t *gone = calloc((size_t)c->nranks, 1);
  int *ranks = malloc(sizeof(int) * (size_t)c->nranks);
  if (gone == NULL || ranks == NULL) {
    free(gone);
    free(ranks);
    return BRAID_ERR_NOMEM;
  }
  braid_result r = BRAID_SUCCESS;
  for (int i = 0; i < nexcluded && r == BRAID_SUCCESS; i++) {
    int e = excluded[i];
    if (e < 0 || e >= c->nranks)
      r = bad(c, "excluded[%d] is %d, the communicator has %d ranks (0..%d)", i,
              e, c->nranks, c->nranks - 1);
    else if (e == c->rank)
      r = bad(c, "excluded[%d] is this rank (%d)", i, e);
    else
      gone[e] = 1;
  }
  for (int p = 0; nexcluded == 0 && p < c->nranks; p++)
    gone[p] = p != c->rank && boot_peer_gone(c->boot, p);
  if (r == BRAID_SUCCESS) {
    pthread_mutex_lock(&c->lock);
    r = agree(c, gone);
    pthread_mutex_unlock(&c->lock);
  }
  int n = 0, me = -1;
  for (int p = 0; r == BRAID_SUCCESS && p < c->nranks; p++)
    if (!gone[p]) {
      if (p == c->rank)
        me = n;
      ranks[n++] = p;
    }
  if (r == BRAID_SUCCESS) {
    INFO(LOG_COLL, "braid_comm_shrink: rank %d of %d is rank %d of %d", c->rank,
         c->nranks, me, n);
    r = comm_sub(c, ranks, n, me, "braid_comm_shrink", NULL, newcomm);
  }
  free(gone);
  free(ranks);
  return r;
}
