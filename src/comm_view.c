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
 * host the cost model of collectives/select.c decides as before. Device
 * calls whose ranks' GPUs the topology places (src/comm_dev.c) are
 * simulated on those GPUs instead. collectives/plan.c decides; this file
 * hands it the communicator's request. Under BRAID_DETERMINISTIC it checks
 * once that the filter and the schedule file leave reductions that fold in
 * rank order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/plan.h"
#include "collectives/sched_file.h"
#include "collectives/select.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "src/comm.h"
#include "src/comm_dev.h"
#include "src/config.h"
#include "src/log.h"

/* One CPU host with one NIC of `nic_gbs` GB/s, replicated nhosts times. */
static braid_result cluster_graph(int nhosts, double nic_gbs,
                                  topo_graph **out) {
  topo_graph *h = topo_graph_new("cpu-host");
  if (h == NULL)
    return ERR(BRAID_ERR_NOMEM, "out of memory");
  int cpu = topo_add_vertex(h, TOPO_CPU, "CPU0");
  int nic = topo_add_vertex(h, TOPO_NIC, "NIC0");
  if (nic >= 0)
    h->v[nic].speed = nic_gbs;
  braid_result r =
      cpu >= 0 && nic >= 0 &&
              topo_add_link(h, cpu, nic, TOPO_LINK_PCI, 0, -1, 1) >= 0
          ? topo_cluster(h, nhosts, nic_gbs, out)
          : ERR(BRAID_ERR_NOMEM, "out of memory");
  topo_graph_free(h);
  return r;
}

static braid_result build_view(braid_comm *c) {
  int n = c->nranks;
  int *host = malloc(sizeof(int) * (size_t)n);
  if (host == NULL)
    return BRAID_ERR_NOMEM;
  int nhosts = 0;
  for (int r = 0; r < n; r++) {
    host[r] = -1;
    for (int q = 0; q < r && host[r] < 0; q++)
      if (boot_same_host(c->boot, r, q))
        host[r] = host[q];
    if (host[r] < 0)
      host[r] = nhosts++;
  }
  topo_graph *g = NULL;
  braid_result res = BRAID_SUCCESS;
  if (nhosts >= 2) {
    const select_model *tcp = select_model_get(SELECT_TP_TCP);
    res = cluster_graph(nhosts, 1.0 / tcp->beta_ns, &g);
  }
  if (res == BRAID_SUCCESS) {
    res = view_hosts(g, n, host, &c->view);
    if (res != BRAID_SUCCESS)
      res = BRAID_ERR_INTERNAL;
    else
      c->view->owns_graph = g != NULL;
  }
  if (res != BRAID_SUCCESS) {
    topo_graph_free(g);
    res = comm_fail(c, res, "the communicator's host map: %s", err_msg());
  }
  free(host);
  return res;
}

/* BRAID_SCHEDULE_FILE: every schedule is verified when it is loaded; the
 * ones for this communicator's size may ask for more channels than
 * BRAID_NCHANNELS gives, and then get them. */
static braid_result load_schedules(braid_comm *c, const char *path) {
  sched **s = NULL;
  int n = 0;
  if (sched_file_load(path, &s, &n) != BRAID_SUCCESS)
    return comm_fail(c, BRAID_ERR_INVALID_ARG, "BRAID_SCHEDULE_FILE=%s: %s",
                     path, err_msg());
  int used = 0;
  for (int i = 0; i < n; i++) {
    if (s[i]->nranks != c->nranks)
      continue;
    if (s[i]->coll == SCHED_SEND || s[i]->coll == SCHED_RECV) {
      WARN(LOG_INIT,
           "BRAID_SCHEDULE_FILE=%s: schedule %d (%s) is not used: braid_send "
           "and braid_recv run as one message between two ranks",
           path, i, sched_coll_name(s[i]->coll));
      continue;
    }
    used++;
    if (s[i]->nchannels > 32) {
      braid_result r =
          comm_fail(c, BRAID_ERR_INVALID_ARG,
                    "BRAID_SCHEDULE_FILE=%s: schedule %d (%s) has %d "
                    "channels; at most 32 are supported",
                    path, i, sched_coll_name(s[i]->coll), s[i]->nchannels);
      for (int j = 0; j < n; j++)
        sched_free(s[j]);
      free(s);
      return r;
    }
    if (s[i]->nchannels > c->nchannels)
      c->nchannels = s[i]->nchannels;
  }
  if (used == 0)
    WARN(LOG_INIT,
         "BRAID_SCHEDULE_FILE=%s: none of its %d schedules is for a "
         "collective of %d ranks; the selector chooses",
         path, n, c->nranks);
  else
    INFO(LOG_INIT, "BRAID_SCHEDULE_FILE=%s: %d of %d schedules for %d ranks",
         path, used, n, c->nranks);
  c->file_scheds = s;
  c->nfile_scheds = n;
  return BRAID_SUCCESS;
}

/* BRAID_DETERMINISTIC against BRAID_ALGO and BRAID_SCHEDULE_FILE: a
 * reducing collective's own filter entry that names no generator folding in
 * rank order, or a schedule file's reduction that does not fold in rank
 * order (verify_rank_order, in and out of place), is refused; a default
 * filter entry that names none is ignored for the reducing collectives
 * (docs/ENV.md). */
static braid_result det_setup(braid_comm *c, const char *path) {
  static const sched_coll colls[] = {SCHED_ALLREDUCE, SCHED_REDUCE,
                                     SCHED_REDUCE_SCATTER};
  int warned = 0;
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    select_filter f;
    int ignored = 0;
    if (plan_det_filter(c->algo, colls[i], &f, &ignored) != BRAID_SUCCESS)
      return comm_fail(c, BRAID_ERR_INVALID_ARG, "%s", err_msg());
    if (ignored && !warned++)
      WARN(LOG_INIT,
           "BRAID_DETERMINISTIC=1: BRAID_ALGO=%s names no algorithm that "
           "folds in rank order; ignored for allreduce, reduce and "
           "reduce_scatter",
           c->algo);
  }
  for (int i = 0; i < c->nfile_scheds; i++) {
    const sched *s = c->file_scheds[i];
    if (s->nranks != c->nranks || !sched_reduces(s->coll))
      continue;
    for (int ip = 0; ip < 2; ip++)
      if (verify_rank_order(s, ip) != BRAID_SUCCESS)
        return comm_fail(c, BRAID_ERR_INVALID_ARG,
                         "BRAID_DETERMINISTIC=1: BRAID_SCHEDULE_FILE=%s: "
                         "schedule %d (%s, %s) does not fold in rank order%s: "
                         "%s",
                         path, i, sched_coll_name(s->coll), s->algo,
                         ip ? " in place" : "", err_msg());
  }
  return BRAID_SUCCESS;
}

braid_result comm_view_setup(braid_comm *c) {
  braid_result r = build_view(c);
  if (r != BRAID_SUCCESS)
    return r;
  const char *path = cfg_get()->schedule_file;
  if (path != NULL && path[0] != '\0')
    r = load_schedules(c, path);
  if (r == BRAID_SUCCESS && c->deterministic)
    r = det_setup(c, path);
  return r;
}

void comm_view_free(braid_comm *c) {
  view_free(c->view);
  c->view = NULL;
  for (int i = 0; i < c->nfile_scheds; i++)
    sched_free(c->file_scheds[i]);
  free(c->file_scheds);
  c->file_scheds = NULL;
  c->nfile_scheds = 0;
}

static int transport_class(braid_comm *c) {
  for (int i = 0; i < c->ntp; i++)
    if (c->tp[i] != &tp_shm && c->tp[i] != &tp_self)
      return SELECT_TP_TCP;
  return SELECT_TP_SHM;
}

void comm_plan_request(braid_comm *c, sched_coll coll, int root, size_t bytes,
                       const sched_view *view, plan_request *rq) {
  int gpus = view != NULL && view != c->view; /* the ranks' GPUs, one host */
  plan_request_defaults(rq, coll, c->nranks, bytes, view, gpus);
  rq->root = root;
  rq->algo = c->algo[0] ? c->algo : NULL;
  rq->transport_class = transport_class(c);
  rq->sim.slice_bytes =
      gpus ? comm_dev_slice(c, SCHED_ROUTE_ANY) : c->slice_bytes;
  rq->sim.slots = c->nslots;
  rq->max_channels = c->nchannels;
  rq->deterministic = c->deterministic;
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
