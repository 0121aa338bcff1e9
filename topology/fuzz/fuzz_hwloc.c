/* libFuzzer target: the hwloc topology parser. */
#include "topology/fuzz/fuzz_common.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  topo_graph *g = NULL;
  braid_result r =
      topo_parse_hwloc((const char *)data, size, "fuzz", &g, err, sizeof(err));
  fuzz_check(r, g, err);
  return 0;
}
