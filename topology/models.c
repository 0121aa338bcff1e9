/*
 * Machine models (files in topology/machines/, braid's text format) and
 * cluster replication.
 */
#include "topology/topo_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BRAID_MACHINES_SRC_DIR
#define BRAID_MACHINES_SRC_DIR ""
#endif
#ifndef BRAID_MACHINES_INSTALL_DIR
#define BRAID_MACHINES_INSTALL_DIR ""
#endif
#ifndef BRAID_MACHINES_REL_DIR
#define BRAID_MACHINES_REL_DIR "share/braid/machines"
#endif

/* <prefix>/share/braid/machines for the program running from <prefix>/bin:
 * an installation found wherever its prefix is. "" when unknown. */
static void beside_program(char *dir, size_t len) {
  char exe[1024];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  dir[0] = '\0';
  if (n <= 0)
    return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL)
    return;
  *slash = '\0'; /* <prefix>/bin */
  snprintf(dir, len, "%s/../%s", exe, BRAID_MACHINES_REL_DIR);
}

static const char *const model_names[] = {
    "dgx1-v100", "dgx-a100", "dgx-h100", "pcie-4gpu", "cpu-2socket", NULL};

const char *const *topo_model_names(void) { return model_names; }

braid_result topo_model_load(const char *name, topo_graph **out) {
  *out = NULL;
  if (!name || !*name)
    return ERR(BRAID_ERR_INVALID_ARG, "no machine model named");
  if (strchr(name, '/') || strstr(name, ".topo") || strstr(name, ".xml"))
    return topo_load(name, TOPO_FMT_AUTO, out);
  char beside[1100];
  beside_program(beside, sizeof(beside));
  /* an installed program's own copy first; the source tree's for programs
   * run from the build tree, where there is none beside them */
  const char *dirs[] = {beside, BRAID_MACHINES_SRC_DIR,
                        BRAID_MACHINES_INSTALL_DIR};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    if (!dirs[i][0])
      continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.topo", dirs[i], name);
    if (access(path, R_OK) == 0)
      return topo_load(path, TOPO_FMT_BRAID, out);
  }
  char list[256] = "";
  for (int i = 0; model_names[i]; i++) {
    strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
    strncat(list, model_names[i], sizeof(list) - strlen(list) - 1);
  }
  return ERR(BRAID_ERR_INVALID_ARG,
             "no machine model '%s' (known: %s; searched %s, %s and %s)", name,
             list, beside, BRAID_MACHINES_SRC_DIR, BRAID_MACHINES_INSTALL_DIR);
}

braid_result topo_cluster(const topo_graph *host, int nhosts, double nic_bw,
                          topo_graph **out) {
  *out = NULL;
  if (nhosts < 1 || nhosts > 4096)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cluster: host count %d out of range [1, 4096]", nhosts);
  if (host->nhosts > 1)
    return ERR(BRAID_ERR_INVALID_ARG, "cluster: '%s' is already a cluster",
               host->name);
  if ((long)host->nv * nhosts > TOPO_MAX_VERTICES / 2)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cluster: %d hosts of %d vertices is too large (at most %ld "
               "hosts of this machine: %d vertices in all)",
               nhosts, host->nv,
               (long)(TOPO_MAX_VERTICES / 2) / (host->nv ? host->nv : 1),
               TOPO_MAX_VERTICES / 2);
  char name[64];
  snprintf(name, sizeof(name), "%dx %.50s", nhosts, host->name);
  topo_graph *g = topo_graph_new(name);
  int *map = malloc((size_t)(host->nv ? host->nv : 1) * sizeof(int));
  if (!g || !map)
    goto nomem;
  g->nhosts = nhosts;
  /* vertices host by host, type by type, so GPU i of host h is
     gpus[h * gpus_per_host + i] */
  for (int h = 0; h < nhosts; h++)
    for (int t = 0; t < TOPO_NVTYPES; t++) {
      if (t == TOPO_NET)
        continue;
      for (int i = 0; i < host->ntype[t]; i++) {
        int src = host->of_type[t][i];
        char vn[48];
        /* h < 4096 (checked above): at most 4 digits, 46 bytes in all */
        snprintf(vn, sizeof(vn), "h%hu.%.40s", (unsigned short)h,
                 host->v[src].name);
        int id = topo_add_vertex(g, (topo_vtype)t, vn);
        if (id < 0)
          goto nomem;
        int *adj = g->v[id].adj, index = g->v[id].index;
        g->v[id] = host->v[src];
        snprintf(g->v[id].name, sizeof(g->v[id].name), "%s", vn);
        g->v[id].adj = adj;
        g->v[id].nadj = g->v[id].capadj = 0;
        g->v[id].index = index;
        g->v[id].host = h;
        if (h == 0)
          map[src] = id;
      }
    }
  int per = g->nv / nhosts;
  for (int h = 0; h < nhosts; h++)
    for (int l = 0; l < host->nl; l++) {
      const topo_link *k = &host->links[l];
      if (k->type == TOPO_LINK_NET || host->v[k->a].type == TOPO_NET ||
          host->v[k->b].type == TOPO_NET)
        continue;
      if (topo_add_link(g, map[k->a] + h * per, map[k->b] + h * per, k->type,
                        k->bw, k->lat_us, k->count) < 0)
        goto nomem;
    }
  if (topo_count(g, TOPO_NIC)) {
    int net = topo_add_vertex(g, TOPO_NET, "NET0");
    if (net < 0)
      goto nomem;
    for (int i = 0; i < topo_count(g, TOPO_NIC); i++) {
      int nic = topo_nth(g, TOPO_NIC, i);
      double bw = nic_bw > 0 ? nic_bw : topo_nic_bw(g, nic);
      if (topo_add_link(g, nic, net, TOPO_LINK_NET, bw, -1, 1) < 0)
        goto nomem;
    }
  }
  free(map);
  *out = g;
  return BRAID_SUCCESS;
nomem:
  free(map);
  topo_graph_free(g);
  return TOPO_NOMEM("cluster");
}
