/*
 * The planner: the generator and parameters of a call, for the runtime and
 * braid-topo schedule alike (plan.h).
 */
#include "collectives/plan.h"

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

const gen_desc *plan_select(const plan_request *rq, char *err, size_t errlen) {
  size_t at = plan_bucket_bytes(rq->bytes);
  const sched_view *v = rq->view;
  if (!rq->on_gpus && (v == NULL || v->nhosts < 2 || v->g == NULL ||
                       rq->nranks > PLAN_SIM_MAX_RANKS))
    return select_algo(rq->coll, rq->nranks, at, rq->transport_class, rq->algo,
                       err, errlen);
  select_filter f; /* opt-in generators only where algo names them */
  if (select_filter_parse(rq->algo, &f, err, errlen) != 0)
    return NULL;
  return select_algo_view(rq->coll, v, at, &rq->sim, &f, rq->max_channels, err,
                          errlen);
}

int plan_channels(size_t bytes, int max_channels) {
  size_t n = bytes / PLAN_BYTES_PER_CHANNEL;
  if (n < 1)
    return 1;
  return n > (size_t)max_channels ? (max_channels < 1 ? 1 : max_channels)
                                  : (int)n;
}

gen_params plan_params(const plan_request *rq) {
  return (gen_params){
      rq->coll,        rq->nranks,
      rq->root,        plan_channels(rq->bytes, rq->max_channels),
      rq->view,        rq->bytes,
      rq->max_channels};
}
