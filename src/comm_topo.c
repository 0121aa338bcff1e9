/*
 * The machine a communicator uses (src/comm.h): the topology file the
 * settings name, else what topology/ detects; written out when the settings
 * ask for it.
 */
#include "src/comm.h"

#include <string.h>

#include "src/config.h"
#include "src/log.h"
#include "topology/topo.h"

braid_result comm_topo_load(topo_graph **out) {
  *out = NULL;
  const cfg_env *cfg = cfg_get();
  braid_result r;
  if (cfg && cfg->topo_file && cfg->topo_file[0]) {
    r = topo_load(cfg->topo_file, TOPO_FMT_AUTO, out);
    if (r != BRAID_SUCCESS) {
      WARN(LOG_TOPO, "BRAID_TOPO_FILE: %s", err_msg());
      return r;
    }
    INFO(LOG_TOPO, "topology from BRAID_TOPO_FILE=%s", cfg->topo_file);
  } else {
    r = topo_detect(out);
    if (r != BRAID_SUCCESS) {
      WARN(LOG_TOPO, "topology detection failed: %s", err_msg());
      return r;
    }
  }
  if (cfg && cfg->topo_dump_file && cfg->topo_dump_file[0]) {
    r = topo_save(*out, cfg->topo_dump_file, TOPO_FMT_AUTO);
    if (r != BRAID_SUCCESS) /* the topology is fine; only the dump failed */
      WARN(LOG_TOPO, "BRAID_TOPO_DUMP_FILE: %s", err_msg());
    else
      INFO(LOG_TOPO, "topology written to BRAID_TOPO_DUMP_FILE=%s",
           cfg->topo_dump_file);
  }
  return BRAID_SUCCESS;
}
