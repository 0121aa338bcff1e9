/* A program outside the tree, built against an installed braid. Alone it
 * makes a one-rank communicator; under a launcher (braidrun, torchrun,
 * mpirun) it joins the job and checks an allreduce across its ranks. */
#include <braid.h>
#include <stdio.h>
#include <stdlib.h>

static int launched(void) {
  return getenv("BRAID_UNIQUE_ID") || getenv("WORLD_SIZE") ||
         getenv("OMPI_COMM_WORLD_SIZE");
}

int main(void) {
  braid_comm *c = NULL;
  if (launched()) {
    if (braid_comm_init_env(&c, NULL) != BRAID_SUCCESS)
      return 1;
  } else {
    braid_unique_id id;
    if (braid_get_unique_id(&id) != BRAID_SUCCESS ||
        braid_comm_init(&c, 1, &id, 0, NULL) != BRAID_SUCCESS)
      return 1;
  }
  int rank = 0, size = 0;
  braid_comm_rank(c, &rank);
  braid_comm_size(c, &size);
  float x[3] = {1, 2, (float)(rank + 1)}, y[3] = {0};
  if (braid_allreduce(x, y, 3, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
          BRAID_SUCCESS ||
      y[0] != (float)size || y[2] != (float)(size * (size + 1) / 2)) {
    fprintf(stderr, "allreduce failed: %s\n", braid_comm_last_error(c));
    return 2;
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  int v = 0;
  braid_get_version(&v);
  printf("hello from braid %d, rank %d of %d\n", v, rank, size);
  return 0;
}
