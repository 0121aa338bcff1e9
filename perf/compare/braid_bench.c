/*
 * braid timing harness for perf/compare: the same loop, checks and output
 * as mpi_bench and gloo_bench (harness.c), on braid's public API with
 * blocking calls (stream NULL). Rank and size come from the launcher
 * (braid_comm_init_env: braidrun, mpirun, torchrun variables); started
 * alone it runs one rank. See harness.h.
 *
 *   BRAID_TRANSPORT=shm braidrun -n 2 braid_bench allreduce 8 256M 20 5
 *   BRAID_TRANSPORT=tcp braidrun -n 2 braid_bench allreduce 8 8 200 10 gap:1000
 */
#include <stdio.h>
#include <stdlib.h>

#include "braid.h"
#include "harness.h"

static void fail(braid_comm *comm, const char *what, braid_result e) {
  int rank = -1;
  braid_comm_rank(comm, &rank);
  fprintf(stderr, "braid_bench: rank %d: %s: %s: %s\n", rank, what,
          braid_result_string(e), braid_comm_last_error(comm));
  exit(3);
}

static void call(void *ctx, int coll, float *s, float *r, size_t cnt) {
  braid_comm *c = ctx;
  braid_result e = BRAID_SUCCESS;
  switch (coll) {
  case H_ALLREDUCE:
    e = braid_allreduce(s, r, cnt, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    break;
  case H_ALLGATHER:
    e = braid_allgather(s, r, cnt, BRAID_FLOAT32, c, NULL);
    break;
  case H_REDUCE_SCATTER:
    e = braid_reduce_scatter(s, r, cnt, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    break;
  case H_BROADCAST:
    /* In place at the root, as MPI_Bcast. */
    e = braid_broadcast(r, r, cnt, BRAID_FLOAT32, 0, c, NULL);
    break;
  case H_BARRIER:
    e = braid_barrier(c, NULL);
    break;
  }
  if (e != BRAID_SUCCESS)
    fail(c, "collective", e);
}

static void barrier(void *ctx) {
  braid_result e = braid_barrier(ctx, NULL);
  if (e != BRAID_SUCCESS)
    fail(ctx, "braid_barrier", e);
}

static void sum(void *ctx, double *v) {
  braid_result e =
      braid_allreduce(v, v, 1, BRAID_FLOAT64, BRAID_SUM, ctx, NULL);
  if (e != BRAID_SUCCESS)
    fail(ctx, "braid_allreduce (timing sum)", e);
}

static braid_result join(braid_comm **comm) {
  braid_config cfg;
  braid_config_init(&cfg);
  if (braid_env_launcher() != NULL)
    return braid_comm_init_env(comm, &cfg);
  braid_unique_id id;
  braid_result e = braid_get_unique_id(&id);
  if (e != BRAID_SUCCESS)
    return e;
  return braid_comm_init(comm, 1, &id, 0, &cfg);
}

int main(int argc, char **argv) {
  h_opts o;
  if (h_args(argc, argv, &o))
    return 2;
  braid_comm *comm = NULL;
  braid_result e = join(&comm);
  if (e != BRAID_SUCCESS) {
    fprintf(stderr, "braid_bench: joining the job failed: %s%s%s\n",
            braid_result_string(e), comm ? ": " : "",
            comm ? braid_comm_last_error(comm) : "");
    return 3;
  }
  h_lib lib = {.name = "braid",
               .ctx = comm,
               .call = call,
               .barrier = barrier,
               .sum = sum};
  braid_comm_rank(comm, &lib.rank);
  braid_comm_size(comm, &lib.nranks);
  int rc = h_run(&lib, &o);
  e = braid_comm_finalize(comm);
  if (e != BRAID_SUCCESS) {
    fprintf(stderr, "braid_bench: rank %d: braid_comm_finalize: %s\n", lib.rank,
            braid_result_string(e));
    rc = rc ? rc : 3;
  }
  braid_comm_destroy(comm);
  return rc;
}
