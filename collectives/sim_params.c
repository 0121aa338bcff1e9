/*
 * The simulator's parameters (sim_params_gpu, sim_params_cpu) and the
 * nccl-tests conventions its results follow (sim_bus_factor,
 * sim_size_bytes); the simulation itself is sim.c.
 */
#include "cost_model.h"
#include "sim.h"
#include "sim_int.h"

/* Defaults. GPUs: NCCL's tuning model (src/graph/tuning.cc, hwLat/baseLat)
 * puts one NVLink or PCIe hop at 0.6-2 us of software latency and a network
 * hop at 2.7-5 us; we take 1 us inside a host and 5 us across hosts. GPU
 * reductions run at HBM speed, fused with the copy (about 1 TB/s counting
 * the extra read: 0.001 ns per byte); a copy between ranks on one GPU runs
 * at HBM speed (1000 GB/s). Posting a message costs its sender 0.1 us
 * inside a host (a peer's share of a kernel's setup) and 0.5 us to the
 * network (a proxy's work request); both are assumptions of the same order
 * as NCCL's per-peer costs, and what makes one-shot algorithms pay for
 * their n - 1 messages. CPUs: the selector's cost model
 * (collectives/cost_model.c, SELECT_TP_SHM and SELECT_TP_TCP), so that both
 * models of the runtime agree. Slices and slots: the executor's defaults
 * (src/config.c and src/comm.c: BRAID_BUFFSIZE 4 MiB / BRAID_NSLOTS 8 =
 * 512 KiB slices, 8 slots). */
#define SIM_SLICE_DEFAULT ((size_t)512 << 10)
#define SIM_SLOTS_DEFAULT 8

void sim_params_gpu(sim_params *p) {
  p->alpha_intra_us = 1.0;
  p->alpha_net_us = 5.0;
  p->gamma_ns = 0.001;
  p->loc_bw = 1000.0;
  p->slice_bytes = SIM_SLICE_DEFAULT;
  p->slots = SIM_SLOTS_DEFAULT;
  p->overhead_intra_us = 0.1;
  p->overhead_net_us = 0.5;
}

void sim_params_cpu(sim_params *p) {
  const select_model *shm = select_model_get(SELECT_TP_SHM);
  const select_model *tcp = select_model_get(SELECT_TP_TCP);
  p->alpha_intra_us = shm->alpha_us;
  p->alpha_net_us = tcp->alpha_us;
  p->gamma_ns = shm->gamma_ns;
  p->loc_bw = 1.0 / shm->beta_ns; /* bytes per ns = GB/s */
  p->slice_bytes = SIM_SLICE_DEFAULT;
  p->slots = SIM_SLOTS_DEFAULT;
  p->overhead_intra_us = shm->overhead_us;
  p->overhead_net_us = tcp->overhead_us;
}

double sim_bus_factor(sched_coll coll, int n) {
  if (n <= 1)
    return coll == SCHED_ALLREDUCE ? 0 : 1;
  switch (coll) {
  case SCHED_ALLREDUCE:
    return 2.0 * (n - 1) / n;
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
  case SCHED_GATHER:
  case SCHED_SCATTER:
  case SCHED_ALLTOALL:
    return (double)(n - 1) / n;
  default:
    return 1;
  }
}

double sim_size_bytes(sched_coll coll, int n, size_t bytes) {
  switch (coll) {
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
  case SCHED_GATHER:
  case SCHED_SCATTER:
  case SCHED_ALLTOALL:
    return (double)bytes * n;
  default:
    return (double)bytes;
  }
}
