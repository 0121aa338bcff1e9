/*
 * One rank of tests/netns/run_ifname.sh: joins the job from the launcher's
 * environment (MASTER_ADDR/MASTER_PORT, or braidrun's BRAID_UNIQUE_ID),
 * allreduces BYTES bytes of float32 (argv[1], default 4 MiB) twice, checks
 * every element and says so. A failed init prints its message, which must
 * name BRAID_SOCKET_IFNAME when that setting is the cause.
 *
 *   ifname_job [BYTES]
 *
 * Exit: 0 ok, 1 failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "braid.h"

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)4 << 20;
  size_t count = bytes / sizeof(float);
  braid_comm *c = NULL;
  braid_result r = braid_comm_init_env(&c, NULL);
  if (r != BRAID_SUCCESS) {
    printf("init failed: %s: %s\n", braid_result_string(r),
           braid_comm_last_error(NULL));
    return 1;
  }
  int rank = -1, size = 0;
  braid_comm_rank(c, &rank);
  braid_comm_size(c, &size);
  float *in = malloc(count * sizeof(float) + 1);
  float *out = malloc(count * sizeof(float) + 1);
  if (in == NULL || out == NULL) {
    printf("rank %d: out of memory\n", rank);
    return 1;
  }
  for (int rep = 0; rep < 2; rep++) {
    for (size_t i = 0; i < count; i++)
      in[i] = (float)((i % 1000) + rank + rep);
    r = braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, c, NULL);
    if (r != BRAID_SUCCESS) {
      printf("rank %d: allreduce failed: %s\n", rank, braid_comm_last_error(c));
      braid_comm_abort(c);
      return 1;
    }
    for (size_t i = 0; i < count; i++) {
      /* sum over ranks q of (i % 1000) + q + rep: exact in float32 */
      float want = (float)(size * ((i % 1000) + rep) + size * (size - 1) / 2);
      if (out[i] != want) {
        printf("rank %d: element %zu is %g, not %g\n", rank, i, out[i], want);
        braid_comm_abort(c);
        return 1;
      }
    }
  }
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  free(in);
  free(out);
  printf("rank %d of %d: allreduce of %zu bytes ok\n", rank, size,
         count * sizeof(float));
  return 0;
}
