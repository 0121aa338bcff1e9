/* libFuzzer target: the hwloc topology parser. */
#include "topology/fuzz/fuzz_common.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  topo_graph *g = NULL;
  err_clear();
  braid_result r = topo_parse_hwloc((const char *)data, size, "fuzz", &g);
  fuzz_check(r, g);
  return 0;
}
