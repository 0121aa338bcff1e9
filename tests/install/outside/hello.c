/* A program outside the tree, built against an installed braid. */
#include <braid.h>
#include <stdio.h>

int main(void) {
  braid_unique_id id;
  braid_comm *c = NULL;
  if (braid_get_unique_id(&id) != BRAID_SUCCESS ||
      braid_comm_init(&c, 1, &id, 0, NULL) != BRAID_SUCCESS)
    return 1;
  float x[3] = {1, 2, 3}, y[3] = {0};
  if (braid_allreduce(x, y, 3, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
          BRAID_SUCCESS ||
      y[2] != 3.0f)
    return 2;
  braid_comm_destroy(c);
  int v = 0;
  braid_get_version(&v);
  printf("hello from braid %d\n", v);
  return 0;
}
