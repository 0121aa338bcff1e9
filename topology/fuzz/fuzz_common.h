/*
 * Shared body of the topology fuzz targets: parse, and on success check the
 * graph, compute paths (small graphs) and run every writer; on failure the
 * message must name the file.
 */
#ifndef BRAID_TOPOLOGY_FUZZ_COMMON_H
#define BRAID_TOPOLOGY_FUZZ_COMMON_H

#include "src/log.h"
#include "topology/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline FILE *fuzz_sink(void) {
  static FILE *f;
  if (!f)
    f = fopen("/dev/null", "w");
  return f;
}

static inline void fuzz_check(braid_result r, topo_graph *g) {
  if (r != BRAID_SUCCESS) {
    if (g || strncmp(err_msg(), "fuzz", 4) != 0) {
      fprintf(stderr, "bad error contract: r=%d g=%p err='%s'\n", (int)r,
              (void *)g, err_msg());
      abort();
    }
    return;
  }
  if (topo_graph_check(g) != BRAID_SUCCESS) {
    fprintf(stderr, "inconsistent graph: %s\n", err_msg());
    abort();
  }
  if (g->nv <= 256) {
    topo_paths_all(g);
    for (int a = 0; a < g->nv; a++)
      for (int b = 0; b < g->nv; b++)
        if (topo_path_class(g, a, b) != topo_path_class(g, b, a) ||
            topo_path_bw(g, a, b) != topo_path_bw(g, b, a)) {
          fprintf(stderr, "asymmetric path %d-%d\n", a, b);
          abort();
        }
    /* hop lists follow links, from a to b */
    for (int a = 0; a < g->nv && a < 16; a++)
      for (int b = 0; b < g->nv; b++) {
        topo_path p;
        if (topo_path_get(g, a, b, &p) != BRAID_SUCCESS)
          continue;
        for (int i = 0; i < p.nhops; i++) {
          const topo_link *l = &g->links[p.links[i]];
          int u = p.verts[i], v = p.verts[i + 1];
          if (!((l->a == u && l->b == v) || (l->a == v && l->b == u)) ||
              p.verts[0] != a || p.verts[p.nhops] != b) {
            fprintf(stderr, "broken hop list %d-%d\n", a, b);
            abort();
          }
        }
        topo_path_release(&p);
      }
  }
  FILE *f = fuzz_sink();
  if (f) {
    topo_write_braid(g, f);
    topo_write_nccl(g, f);
    topo_write_hwloc(g, f);
    topo_write_dot(g, f);
  }
  topo_graph_free(g);
}

#endif
