/*
 * The planner: the generator and parameters of a call, for the runtime and
 * braid-topo schedule alike (plan.h).
 */
#include "collectives/plan.h"

#include <stdint.h>
#include <stdio.h>

#include "collectives/select.h"
#include "collectives/view.h"

void plan_request_defaults(plan_request *rq, sched_coll coll, int nranks,
                           size_t bytes, const sched_view *v, int on_gpus) {
  *rq = (plan_request){.coll = coll,
                       .root = 0,
                       .nranks = nranks,
                       .bytes = bytes,
                       .view = v,
                       .on_gpus = on_gpus,
                       .algo = NULL,
                       .transport_class = SELECT_TP_SHM,
                       .max_channels = PLAN_DEFAULT_CHANNELS};
  if (on_gpus)
    sim_params_gpu(&rq->sim);
  else
    sim_params_cpu(&rq->sim);
}

int plan_bucket(size_t bytes) {
  return bytes == 0 ? 0 : 64 - __builtin_clzll((unsigned long long)bytes);
}

size_t plan_bucket_bytes(size_t bytes) {
  int b = plan_bucket(bytes);
  return b == 0 ? 0 : (size_t)1 << (b - 1);
}

braid_result plan_det_filter(const char *algo, sched_coll coll,
                             select_filter *f, int *ignored) {
  if (ignored != NULL)
    *ignored = 0;
  CHECKR(select_filter_parse(algo, f));
  uint32_t det = 0;
  char names[96] = "";
  size_t o = 0;
  for (int i = 0; gen_table[i] != NULL && i < 32; i++)
    if ((gen_table[i]->flags & GEN_RANK_ORDER) &&
        (gen_table[i]->colls & (1u << coll))) {
      det |= 1u << i;
      if (o < sizeof names)
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s",
                              o ? ", " : "", gen_table[i]->name);
    }
  uint32_t allow = f->allow[coll] & det;
  if (allow == 0 && (f->named & (1u << coll)))
    return ERR(BRAID_ERR_INVALID_ARG,
               "BRAID_DETERMINISTIC: BRAID_ALGO=\"%s\" leaves no algorithm "
               "that folds %s in rank order (those that do: %s)",
               algo ? algo : "", sched_coll_name(coll), names);
  if (allow == 0) { /* only the default entry applies: not to this one */
    allow = det;
    if (ignored != NULL)
      *ignored = algo != NULL && algo[0] != '\0';
  }
  f->allow[coll] = allow;
  f->asked[coll] = allow; /* the opt-in ones among them too */
  f->named |= 1u << coll; /* no default entry rule widens it again */
  return BRAID_SUCCESS;
}

braid_result plan_select(const plan_request *rq, const gen_desc **out) {
  size_t at = plan_bucket_bytes(rq->bytes);
  const sched_view *v = rq->view;
  select_filter f; /* opt-in generators only where algo names them */
  int det = rq->deterministic && sched_reduces(rq->coll);
  *out = NULL;
  if (det)
    CHECKR(plan_det_filter(rq->algo, rq->coll, &f, NULL));
  if (!rq->on_gpus && (v == NULL || v->nhosts < 2 || v->g == NULL ||
                       rq->nranks > PLAN_SIM_MAX_RANKS)) {
    if (det)
      return select_algo_f(rq->coll, rq->nranks, at, rq->transport_class, &f,
                           out);
    return select_algo(rq->coll, rq->nranks, at, rq->transport_class, rq->algo,
                       out);
  }
  if (!det)
    CHECKR(select_filter_parse(rq->algo, &f));
  return select_algo_view(rq->coll, v, at, &rq->sim, &f, rq->max_channels, out);
}

int plan_channels(size_t bytes, int max_channels) {
  size_t n = bytes / PLAN_BYTES_PER_CHANNEL;
  if (n < 1)
    return 1;
  return n > (size_t)max_channels ? (max_channels < 1 ? 1 : max_channels)
                                  : (int)n;
}

gen_params plan_params(const plan_request *rq) {
  return (gen_params){.coll = rq->coll,
                      .nranks = rq->nranks,
                      .root = rq->root,
                      .nchannels = plan_channels(rq->bytes, rq->max_channels),
                      .view = rq->view,
                      .bytes = rq->bytes,
                      .max_channels = rq->max_channels};
}

const char *plan_path_name(plan_path p) {
  static const char *const names[PLAN_PATH_NUM] = {"host", "device", "staged",
                                                   "kernel"};
  return (int)p >= 0 && p < PLAN_PATH_NUM ? names[p] : "unknown";
}

int plan_kernel_coll(sched_coll coll) {
  switch (coll) {
  case SCHED_ALLREDUCE:
  case SCHED_REDUCE:
  case SCHED_BROADCAST:
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
    return 1;
  default:
    return 0;
  }
}

size_t plan_call_bytes(sched_coll coll, int nranks, size_t bytes) {
  int ib = sched_in_blocks(coll, nranks);
  int ob = sched_out_blocks(coll, nranks);
  size_t blocks = (size_t)(ib > ob ? ib : ob);
  if (blocks < 1)
    blocks = 1;
  return bytes > SIZE_MAX / blocks ? SIZE_MAX : bytes * blocks;
}

plan_path plan_device_path(sched_coll coll, int nranks, size_t bytes,
                           size_t kernel_max, size_t host_max,
                           const char **why) {
  size_t most = plan_call_bytes(coll, nranks, bytes);
  const char *w = "larger than BRAID_CUDA_HOST_MAX: the schedule moves the "
                  "device buffers";
  plan_path p = PLAN_PATH_DEVICE;
  if (plan_kernel_coll(coll) && bytes > 0 && most <= kernel_max) {
    p = PLAN_PATH_KERNEL;
    w = "the direct schedule as collective kernels, at most "
        "BRAID_CUDA_KERNEL_MAX";
  } else if (host_max > 0 && most <= host_max) {
    p = PLAN_PATH_STAGED;
    w = "at most BRAID_CUDA_HOST_MAX: through pinned host memory";
  }
  if (why != NULL)
    *why = w;
  return p;
}
