/*
 * What several transports share (transports/common.h), the parts of a setup:
 * the job token, the rounds in which every rank's status goes round, the
 * first checks of a network transport.
 */
#include "transports/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/bootstrap.h"
#include "src/log.h"

uint64_t tp_job_token(struct tp_bootstrap *b) {
  size_t len = 0;
  const uint8_t *s = b ? boot_secret(b, &len) : NULL;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; s && i < len; i++)
    h = (h ^ s[i]) * 1099511628211ULL;
  return h & 0xffffffffffffULL;
}

int tp_setup_round(tp_setup *su, int rc, const void *mine, void *all,
                   size_t len, size_t status_off, const char *who,
                   const char *what, int *boot_rc) {
  /* this rank's own message outlives a failed exchange */
  char own[TP_WHY] = "";
  if (rc)
    snprintf(own, sizeof own, "%s", err_msg());
  int x = boot_allgather(su->boot, mine, all, len);
  *boot_rc = x;
  /* a failure here, then the exchange that tells the others: the
   * exchange's reason often names the rank whose death caused both (a peer
   * that gave up and unlinked its segment before this rank mapped it) */
  if (x && rc)
    return ERR((braid_result)x, "%s; then the exchange of results failed: %s",
               own, err_msg());
  if (x)
    return ERR_WRAP((braid_result)x, "%s: bootstrap exchange failed", who);
  for (int i = 0; !rc && i < su->nranks; i++) {
    int32_t status;
    memcpy(&status, (const char *)all + (size_t)i * len + status_off,
           sizeof(status));
    if (status)
      rc = ERR(BRAID_ERR_REMOTE, "%s: rank %d could not %s (see its log)", who,
               i, what);
  }
  return rc;
}

int tp_setup_check(tp_setup *su, const char *who, size_t max_slot_bytes) {
  if (su->boot != NULL && su->nranks >= 1 && su->rank >= 0 &&
      su->rank < su->nranks && su->nchannels >= 1 && su->nslots >= 1 &&
      (!max_slot_bytes ||
       (su->slot_bytes > 0 && su->slot_bytes <= max_slot_bytes)))
    return BRAID_SUCCESS;
  return ERR(BRAID_ERR_INVALID_ARG,
             "%s: bad setup (%s, rank %d of %d, %d channels, %d slots of %zu "
             "bytes)",
             who, su->boot ? "bootstrap" : "no bootstrap", su->rank, su->nranks,
             su->nchannels, su->nslots, su->slot_bytes);
}

int tp_net_init(tp_net *n, const tp_setup *su, const uint8_t *peers) {
  *n = (tp_net){.boot = su->boot,
                .rank = su->rank,
                .nranks = su->nranks,
                .nchannels = su->nchannels,
                .nslots = su->nslots,
                .slot_bytes = su->slot_bytes,
                .used = calloc((size_t)su->nranks, 1)};
  if (n->used == NULL)
    return -1;
  int k = 0;
  for (int p = 0; p < su->nranks; p++)
    if (peers != NULL && peers[p] && p != su->rank)
      n->used[p] = 1, k++;
  return k;
}

void tp_net_fini(tp_net *n) {
  free(n->used);
  n->used = NULL;
}
