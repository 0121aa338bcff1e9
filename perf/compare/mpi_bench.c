/*
 * Open MPI timing harness for perf/compare: the same collective, sizes,
 * datatype (float32, sum), rank count and call pattern as braid_bench and
 * gloo_bench, through the loop of harness.c. See harness.h.
 *
 *   mpirun -np 2 --mca btl self,vader mpi_bench allreduce 8 256M 20 5
 *   mpirun -np 2 --mca btl self,vader mpi_bench allreduce 8 8 100 0 first
 */
#include <mpi.h>

#include "harness.h"

static void call(void *ctx, int coll, float *s, float *r, size_t cnt) {
  (void)ctx;
  switch (coll) {
  case H_ALLREDUCE:
    MPI_Allreduce(s, r, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case H_ALLGATHER:
    MPI_Allgather(s, (int)cnt, MPI_FLOAT, r, (int)cnt, MPI_FLOAT,
                  MPI_COMM_WORLD);
    break;
  case H_REDUCE_SCATTER:
    MPI_Reduce_scatter_block(s, r, (int)cnt, MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    break;
  case H_BROADCAST:
    MPI_Bcast(r, (int)cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
    break;
  case H_BARRIER:
    MPI_Barrier(MPI_COMM_WORLD);
    break;
  }
}

static void barrier(void *ctx) {
  (void)ctx;
  MPI_Barrier(MPI_COMM_WORLD);
}

static void sum(void *ctx, double *v) {
  (void)ctx;
  MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  h_lib lib = {.name = "openmpi", .call = call, .barrier = barrier, .sum = sum};
  MPI_Comm_rank(MPI_COMM_WORLD, &lib.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &lib.nranks);
  h_opts o;
  if (h_args(argc, argv, &o)) {
    MPI_Finalize();
    return 2;
  }
  int rc = h_run(&lib, &o);
  MPI_Finalize();
  return rc;
}
