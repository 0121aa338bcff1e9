/*
 * Simulator helpers shared inside collectives/ (sim.c, sim_params.c,
 * sim_bound.c, select.c).
 */
#ifndef BRAID_COLLECTIVES_SIM_INT_H
#define BRAID_COLLECTIVES_SIM_INT_H

#include "sim.h"

/* nccl-tests' "size" of a call whose blocks are `bytes` bytes: one block for
 * allreduce, broadcast, reduce, send/recv; all nranks blocks (the output of
 * allgather and gather, the input of reduce_scatter and scatter, either
 * buffer of alltoall) otherwise. algbw = size / time. */
double sim_size_bytes(sched_coll coll, int n, size_t bytes);

#endif
