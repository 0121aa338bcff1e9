/* libFuzzer target: the NCCL graph (channel) file parser. */
#include "topology/fuzz/fuzz_common.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  topo_nccl_graphs *gs = NULL;
  err_clear();
  braid_result r =
      topo_parse_nccl_graphs((const char *)data, size, "fuzz", &gs);
  if (r != BRAID_SUCCESS && (gs || strncmp(err_msg(), "fuzz", 4) != 0))
    abort();
  topo_nccl_graphs_free(gs);
  return 0;
}
