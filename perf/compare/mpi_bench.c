/*
 * Open MPI timing harness for perf/compare: the same collective, sizes,
 * datatype (float32, sum) and rank count as braid-perf. See harness.h.
 *
 *   mpirun -np 2 --mca btl self,vader mpi_bench allreduce 8 256M 20 5
 */
#include <mpi.h>
#include <stdint.h>

#include "harness.h"

static void call(int coll, float *s, float *r, size_t cnt) {
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
  }
}

/* Spot check of the first and last element: the harness measures the right
 * thing. Returns the number of wrong elements seen. */
static int check(int coll, const float *r, size_t cnt, int rank, int n) {
  if (cnt == 0)
    return 0;
  float sum = (float)n * (float)(n + 1) / 2.0f;
  int bad = 0;
  switch (coll) {
  case H_ALLREDUCE:
  case H_REDUCE_SCATTER:
    bad += r[0] != sum;
    bad += r[cnt - 1] != sum;
    break;
  case H_ALLGATHER:
    for (int j = 0; j < n; j++)
      bad += r[(size_t)j * cnt] != (float)(j + 1);
    break;
  case H_BROADCAST:
    bad += r[0] != 1.0f || r[cnt - 1] != 1.0f;
    break;
  }
  (void)rank;
  return bad;
}

int main(int argc, char **argv) {
  int coll, iters, warmup;
  size_t minb, maxb;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (h_args(argc, argv, &coll, &minb, &maxb, &iters, &warmup)) {
    MPI_Finalize();
    return 2;
  }
  size_t cap = maxb < 64 ? 64 : maxb;
  float *s = aligned_alloc(64, (cap + 63) / 64 * 64);
  float *r = aligned_alloc(64, (cap + 63) / 64 * 64);
  if (!s || !r) {
    fprintf(stderr, "mpi_bench: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  for (size_t i = 0; i < cap / 4; i++) {
    s[i] = (float)(rank + 1);
    r[i] = coll == H_BROADCAST && rank == 0 ? 1.0f : 0.0f;
  }
  if (rank == 0)
    h_header(stdout, "openmpi", coll, n);
  int bad = 0;
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? bytes * 2 : 1) {
    size_t cnt = h_param_count(coll, bytes, n);
    for (int i = 0; i < warmup; i++)
      call(coll, s, r, cnt);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
      call(coll, s, r, cnt);
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t /= n;
    bad += check(coll, r, cnt, rank, n);
    if (rank == 0) {
      double alg, bus;
      h_bw(coll, cnt, t, n, &alg, &bus);
      size_t shown = coll == H_ALLGATHER || coll == H_REDUCE_SCATTER
                         ? cnt * (size_t)n * 4
                         : cnt * 4;
      printf("%zu %zu %.3f %.6g %.6g\n", shown, cnt, t * 1e6, alg, bus);
      fflush(stdout);
    }
    if (bytes >= maxb)
      break;
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && bad)
    fprintf(stderr, "mpi_bench: %d wrong elements in the spot checks\n", bad);
  free(s);
  free(r);
  MPI_Finalize();
  return bad ? 1 : 0;
}
