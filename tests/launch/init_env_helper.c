/*
 * A rank for the braid_comm_init_env tests: joins the job from the launcher's
 * environment, allreduces rank + 1, checks the sum and says so.
 */
#include <stdint.h>
#include <stdio.h>

#include "braid.h"

int main(void) {
  braid_comm *c = NULL;
  braid_result r = braid_comm_init_env(&c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "braid_comm_init_env: %s\n", braid_result_string(r));
    return 1;
  }
  int rank = -1, size = 0;
  braid_comm_rank(c, &rank);
  braid_comm_size(c, &size);
  int32_t v = rank + 1, sum = 0;
  r = braid_allreduce(&v, &sum, 1, BRAID_INT32, BRAID_SUM, c, NULL);
  int want = size * (size + 1) / 2;
  if (r != BRAID_SUCCESS || sum != want) {
    fprintf(stderr, "rank %d: allreduce %s, sum %d, want %d (%s)\n", rank,
            braid_result_string(r), (int)sum, want, braid_comm_last_error(c));
    braid_comm_abort(c);
    return 1;
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  printf("rank %d of %d ok sum=%d\n", rank, size, (int)sum);
  return 0;
}
