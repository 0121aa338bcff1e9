/*
 * The plan of a call (exec_plan.h): its path and its schedule's generator,
 * decided here for enqueue and the executors.
 */
#include "src/exec_plan.h"

#include "src/log.h"

static int is_p2p(const exec_op *op) {
  return op->coll == SCHED_SEND || op->coll == SCHED_RECV;
}

/* Every peer the op talks to has a device transport. */
static int can_direct(braid_comm *c, const exec_op *op) {
  if (c->dev == NULL)
    return 0;
  if (is_p2p(op))
    return comm_dev_ops(c, op->root, SCHED_ROUTE_ANY) != NULL;
  /* a peer with a device transport has one for every route */
  for (int r = 0; r < c->nranks; r++)
    if (r != c->rank && comm_dev_ops(c, r, SCHED_ROUTE_ANY) == NULL)
      return 0;
  return 1;
}

static size_t op_bytes(const exec_op *op) {
  return op->count * braid_dtype_size(op->dt);
}

int exec_plan_small(const braid_comm *c, const exec_op *op) {
  if (c->dev == NULL || c->dev->host_max == 0 || op->dev < 0 ||
      op->is_barrier || op->count > c->dev->host_max || exk_op(c, op))
    return 0;
  /* the largest buffer of the call on any rank: the same on every rank */
  return plan_device_path(op->coll, c->nranks, op_bytes(op), 0,
                          c->dev->host_max, NULL) == PLAN_PATH_STAGED;
}

int exec_plan_kernels(const braid_comm *c, const exec_op *ops, int nops) {
  if (!atomic_load(&c->dev_up) || nops < 1)
    return 0;
  for (int k = 0; k < nops; k++)
    if (!exk_op(c, &ops[k]))
      return 0;
  return 1;
}

/* Logs a path once per (collective, size bucket, path) at BRAID_TRACE. */
static void trace_path(braid_comm *c, const exec_op *op, plan_path p,
                       const char *why) {
  if (log_level_now < LOG_TRACE)
    return;
  int b = plan_bucket(op_bytes(op));
  uint8_t bit = (uint8_t)(1u << p);
  if (c->plan_logged[op->coll][b] & bit)
    return;
  c->plan_logged[op->coll][b] |= bit;
  size_t lo = plan_bucket_bytes(op_bytes(op));
  TRACE(LOG_SCHED,
        "plan: %s of %zu to %zu bytes per block on %d ranks: path %s (%s)",
        op->name, lo, lo ? 2 * lo - 1 : 0, c->nranks, plan_path_name(p), why);
}

plan_path exec_plan_path(braid_comm *c, const exec_op *op, int call_kernels,
                         const char **why) {
  plan_path p = PLAN_PATH_DEVICE;
  const char *w = "every peer has a device transport";
  if (op->dev < 0 || op->is_barrier) {
    p = PLAN_PATH_HOST;
    w = op->is_barrier ? "a barrier" : "host buffers";
  } else if (call_kernels > 0 ||
             (call_kernels == EXEC_PLAN_ALONE && exk_op(c, op))) {
    p = PLAN_PATH_KERNEL;
    plan_device_path(op->coll, c->nranks, op_bytes(op), SIZE_MAX, 0, &w);
  } else if (!can_direct(c, op)) {
    p = PLAN_PATH_STAGED;
    w = c->dev == NULL ? "no device side yet"
                       : "a peer without a device transport";
  } else if (exec_plan_small(c, op)) {
    p = PLAN_PATH_STAGED;
    w = "at most BRAID_CUDA_HOST_MAX: through pinned host memory";
  }
  if (p != PLAN_PATH_HOST)
    trace_path(c, op, p, w);
  if (why != NULL)
    *why = w;
  return p;
}

braid_result exec_plan_sched(braid_comm *c, const exec_op *op, exec_plan *out) {
  size_t bytes = op_bytes(op);
  int bucket = plan_bucket(bytes);
  /* device calls on GPUs the topology places plan on those GPUs */
  int on_gpus = op->dev >= 0 && c->dev != NULL && c->dev->view != NULL;
  *out = (exec_plan){.path = op->dev < 0 ? PLAN_PATH_HOST : PLAN_PATH_DEVICE,
                     .view = on_gpus ? c->dev->view : c->view,
                     .why = op->dev < 0 ? "host buffers" : NULL};
  out->file = comm_file_sched(c, op->coll, op->root);
  if (out->file != NULL) {
    out->nchannels = out->file->nchannels;
    out->gen_why = "BRAID_SCHEDULE_FILE";
    return BRAID_SUCCESS;
  }
  /* the planner picks once per size bucket (collectives/plan.h): cached */
  out->gen = c->sel_cache[on_gpus][op->coll][bucket];
  out->gen_why = on_gpus ? "the planner's choice on the ranks' GPUs"
                         : "the planner's choice";
  if (out->gen == NULL) {
    plan_request rq;
    comm_plan_request(c, op->coll, op->root, bytes, out->view, &rq);
    if (plan_select(&rq, &out->gen) != BRAID_SUCCESS)
      return comm_fail(c, BRAID_ERR_INVALID_ARG, "%s: no algorithm: %s",
                       op->name, err_msg());
    c->sel_cache[on_gpus][op->coll][bucket] = out->gen;
  }
  out->nchannels = plan_channels(bytes, c->nchannels);
  return BRAID_SUCCESS;
}
