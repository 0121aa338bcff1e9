/*
 * Live detection: hwloc for the CPU side and the PCI tree (exported to XML
 * and read by the hwloc XML reader, so that files and live machines go
 * through the same code), sysfs for NIC speeds, and NVML (loaded with dlopen;
 * an absent library means no NVLink, not an error) for NVLinks.
 */
#include "src/log.h"
#include "topology/topo_int.h"

#include <dlfcn.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

/* ---- sysfs NIC speeds ---- */
static double read_first_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  double v = -1;
  if (fscanf(f, "%lf", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

static void nic_speeds(topo_graph *g) {
  for (int i = 0; i < topo_count(g, TOPO_NIC); i++) {
    topo_vertex *v = &g->v[topo_nth(g, TOPO_NIC, i)];
    if (!v->netdev[0] || strchr(v->netdev, '/') || v->speed > 0)
      continue;
    char path[160];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", v->netdev);
    double mbps = read_first_number(path);
    if (mbps > 0) {
      v->speed = mbps / 8000.0;
    } else {
      int port = v->port > 0 ? v->port : 1;
      snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/rate",
               v->netdev, port);
      double gbps = read_first_number(path); /* "200 Gb/sec (4X HDR)" */
      if (gbps > 0)
        v->speed = gbps / 8.0;
    }
    if (v->speed <= 0)
      continue;
    for (int k = 0; k < v->nadj; k++) {
      topo_link *l = &g->links[v->adj[k]];
      if (l->type == TOPO_LINK_NET)
        l->bw = v->speed;
    }
  }
  topo_paths_reset(g);
}

/* ---- NVML through dlopen (declarations from NVML's public API) ---- */
typedef struct nvml_pci {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci;
typedef void *nvml_dev;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_count_fn)(unsigned *);
typedef int (*nvml_handle_fn)(unsigned, nvml_dev *);
typedef int (*nvml_pci_fn)(nvml_dev, nvml_pci *);
typedef int (*nvml_state_fn)(nvml_dev, unsigned, int *);
typedef int (*nvml_remote_fn)(nvml_dev, unsigned, nvml_pci *);
typedef int (*nvml_rtype_fn)(nvml_dev, unsigned, int *);
typedef int (*nvml_cc_fn)(nvml_dev, int *, int *);

#define NVML_MAX_LINKS 18
#define NVML_REMOTE_SWITCH 2

braid_result topo_nvml_add_links(topo_graph *g, int *nlinks) {
  *nlinks = 0;
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    INFO(LOG_TOPO, "NVML not found (%s): no NVLink information", dlerror());
    return BRAID_SUCCESS;
  }
  nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
  nvml_init_fn shut = (nvml_init_fn)dlsym(lib, "nvmlShutdown");
  nvml_count_fn count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
  nvml_handle_fn handle =
      (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml_pci_fn pci = (nvml_pci_fn)dlsym(lib, "nvmlDeviceGetPciInfo_v3");
  if (!pci)
    pci = (nvml_pci_fn)dlsym(lib, "nvmlDeviceGetPciInfo_v2");
  nvml_state_fn state = (nvml_state_fn)dlsym(lib, "nvmlDeviceGetNvLinkState");
  nvml_remote_fn remote =
      (nvml_remote_fn)dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  nvml_rtype_fn rtype =
      (nvml_rtype_fn)dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  nvml_cc_fn cc = (nvml_cc_fn)dlsym(lib, "nvmlDeviceGetCudaComputeCapability");
  if (!init || !shut || !count || !handle || !pci) {
    WARN(LOG_TOPO, "NVML lacks the functions braid needs: no NVLink info");
    dlclose(lib);
    return BRAID_SUCCESS;
  }
  if (init() != 0) {
    INFO(LOG_TOPO, "nvmlInit failed (no driver?): no NVLink information");
    dlclose(lib);
    return BRAID_SUCCESS;
  }
  unsigned n = 0;
  braid_result res = BRAID_SUCCESS;
  if (count(&n) != 0 || n > 1024)
    n = 0;
  int nvs = -1;
  for (unsigned i = 0; i < n && res == BRAID_SUCCESS; i++) {
    nvml_dev d;
    nvml_pci info;
    char busid[24];
    if (handle(i, &d) != 0 || pci(d, &info) != 0)
      continue;
    info.bus_id[sizeof(info.bus_id) - 1] = 0;
    if (topo_busid_norm(info.bus_id, busid, sizeof(busid)))
      continue;
    int gpu = topo_find_busid(g, busid);
    if (gpu < 0 || g->v[gpu].type != TOPO_GPU) {
      /* hwloc did not show it: hang it from the first CPU */
      gpu = topo_add_vertex(g, TOPO_GPU, NULL);
      if (gpu < 0) {
        res = TOPO_NOMEM("NVML");
        break;
      }
      snprintf(g->v[gpu].busid, sizeof(g->v[gpu].busid), "%s", busid);
      if (topo_count(g, TOPO_CPU))
        topo_add_link(g, gpu, topo_nth(g, TOPO_CPU, 0), TOPO_LINK_PCI, -1, -1,
                      1);
    }
    g->v[gpu].dev = (int)i;
    int maj = 0, min = 0;
    if (cc && cc(d, &maj, &min) == 0 && maj > 0 && maj < 100)
      g->v[gpu].sm = maj * 10 + min;
    if (!state || !remote)
      continue;
    double lane = topo_nvlink_lane_bw(g->v[gpu].sm);
    for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
      int on = 0;
      nvml_pci rp;
      char rbus[24];
      if (state(d, l, &on) != 0 || !on || remote(d, l, &rp) != 0)
        continue;
      rp.bus_id[sizeof(rp.bus_id) - 1] = 0;
      if (topo_busid_norm(rp.bus_id, rbus, sizeof(rbus)))
        continue;
      int t = -1, target = topo_find_busid(g, rbus);
      if (rtype && rtype(d, l, &t) != 0)
        t = -1;
      if (t == NVML_REMOTE_SWITCH ||
          (target < 0 || g->v[target].type != TOPO_GPU)) {
        if (nvs < 0 && (nvs = topo_add_vertex(g, TOPO_NVS, NULL)) < 0) {
          res = TOPO_NOMEM("NVML");
          break;
        }
        target = nvs;
      }
      if (target == gpu)
        continue;
      if (target != nvs && gpu > target)
        continue; /* lanes are symmetric: the lower GPU counts them */
      if (topo_add_link(g, gpu, target, TOPO_LINK_NVL, lane, -1, 1) < 0) {
        res = TOPO_NOMEM("NVML");
        break;
      }
      (*nlinks)++;
    }
  }
  shut();
  dlclose(lib);
  return res;
}

braid_result topo_detect(topo_graph **out) {
  *out = NULL;
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0)
    return ERR(BRAID_ERR_SYSTEM, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return ERR(BRAID_ERR_SYSTEM, "hwloc_topology_load failed");
  }
  char *xml = NULL;
  int len = 0;
  if (hwloc_topology_export_xmlbuffer(t, &xml, &len, 0) != 0 || !xml) {
    hwloc_topology_destroy(t);
    return ERR(BRAID_ERR_SYSTEM, "hwloc could not export the topology");
  }
  size_t n = strnlen(xml, (size_t)(len > 0 ? len : 0));
  braid_result r = topo_parse_hwloc(xml, n, "<live hwloc>", out);
  hwloc_free_xmlbuffer(t, xml);
  hwloc_topology_destroy(t);
  if (r != BRAID_SUCCESS)
    return r;
  snprintf((*out)->name, sizeof((*out)->name), "live");
  nic_speeds(*out);
  int nl = 0;
  r = topo_nvml_add_links(*out, &nl);
  if (r != BRAID_SUCCESS) {
    topo_graph_free(*out);
    *out = NULL;
    return r;
  }
  INFO(LOG_TOPO, "detected %d GPUs, %d NICs, %d NUMA nodes, %d NVLink lanes",
       topo_count(*out, TOPO_GPU), topo_count(*out, TOPO_NIC),
       topo_count(*out, TOPO_CPU), nl);
  return BRAID_SUCCESS;
}
