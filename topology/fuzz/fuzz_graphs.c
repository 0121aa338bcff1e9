/* libFuzzer target: the NCCL graph (channel) file parser. */
#include "topology/fuzz/fuzz_common.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  topo_nccl_graphs *gs = NULL;
  braid_result r = topo_parse_nccl_graphs((const char *)data, size, "fuzz", &gs,
                                          err, sizeof(err));
  if (r != BRAID_SUCCESS && (gs || strncmp(err, "fuzz", 4) != 0))
    abort();
  topo_nccl_graphs_free(gs);
  return 0;
}
