/*
 * The plan of a call: how it runs (its path: host, device, staged through
 * pinned host memory, or collective kernels), the generator and channels
 * of its schedule, and why. Enqueue (src/enqueue.c) and the executors
 * (src/executor.c, src/exec_dev.c, src/exec_sched.c) ask these functions
 * and do what they say; the size rules and the generator's choice are
 * collectives/plan.c's, which braid-topo schedule asks too.
 */
#ifndef BRAID_SRC_EXEC_PLAN_H
#define BRAID_SRC_EXEC_PLAN_H

#include "collectives/generators.h"
#include "collectives/plan.h"
#include "src/exec_int.h"

typedef struct exec_plan {
  plan_path path;
  const gen_desc *gen;    /* the planner's generator (NULL: file, kernels) */
  sched *file;            /* the schedule of BRAID_SCHEDULE_FILE, or NULL */
  const sched_view *view; /* the view the schedule is planned on */
  int nchannels;          /* channels of the schedule */
  const char *why;        /* why this path (static text) */
  const char *gen_why;    /* why this schedule (static text) */
} exec_plan;

/* exec_plan_path's call_kernels: the op as a call of its own (it goes as
 * kernels when it can). */
#define EXEC_PLAN_ALONE (-1)

/* The path of op: host buffers (or a barrier) take the host path; in a
 * call that goes as collective kernels (call_kernels 1, exec_plan_kernels)
 * the kernel path; else staged where a peer has no device transport or
 * the call is small (BRAID_CUDA_HOST_MAX), the device path otherwise. *why
 * (when not NULL) says why. BRAID_TRACE logs each path once per collective
 * and size bucket. */
plan_path exec_plan_path(braid_comm *c, const exec_op *op, int call_kernels,
                         const char **why);

/* Whether a call (every op of it) goes as collective kernels
 * (src/exec_kernel.c: exk_op), the device side being up. */
int exec_plan_kernels(const braid_comm *c, const exec_op *ops, int nops);

/* Whether a device op is small (BRAID_CUDA_HOST_MAX, agreed at setup) and
 * does not go as kernels: then it runs on the host transports through
 * pinned host memory, on every rank alike. */
int exec_plan_small(const braid_comm *c, const exec_op *op);

/* The schedule's part of op's plan (not send/recv): the schedule file's, or
 * the planner's generator for op's size bucket (cached per communicator),
 * its view and channels; path set to PLAN_PATH_HOST for host buffers and
 * left to exec_plan_path's caller otherwise. BRAID_ERR_INVALID_ARG with
 * the planner's message when it finds no algorithm. */
braid_result exec_plan_sched(braid_comm *c, const exec_op *op, exec_plan *out);

#endif
