/*
 * Live detection on the machine running the tests: the CPU, NUMA nodes,
 * memory and NICs must match what hwloc and sysfs say; GPUs appear when the
 * machine has NVIDIA devices; NVML absent means no NVLink, not an error.
 */
#include "topo_test_util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <hwloc.h>
#include <limits.h>

static topo_graph *detect(void) {
  topo_graph *g = NULL;
  cr_assert_eq(topo_detect(&g), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(topo_graph_check(g), BRAID_SUCCESS, "%s", err_msg());
  return g;
}

Test(topo_live, cpu_numa_memory) {
  topo_graph *g = detect();
  hwloc_topology_t t;
  cr_assert_eq(hwloc_topology_init(&t), 0);
  cr_assert_eq(hwloc_topology_load(t), 0);
  int numa = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  int cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  unsigned long long mem = 0;
  for (int i = 0; i < numa; i++)
    mem += hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i)
               ->attr->numanode.local_memory;
  unsigned long long l3 = 0;
  int nl3 = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_L3CACHE);
  for (int i = 0; i < nl3; i++)
    l3 += hwloc_get_obj_by_type(t, HWLOC_OBJ_L3CACHE, (unsigned)i)
              ->attr->cache.size;
  hwloc_topology_destroy(t);
  cr_assert_eq(topo_count(g, TOPO_CPU), numa > 0 ? numa : 1);
  unsigned long long gl3 = 0;
  for (int i = 0; i < topo_count(g, TOPO_CPU); i++)
    gl3 += g->v[topo_nth(g, TOPO_CPU, i)].l3_bytes;
  cr_assert_eq(gl3, l3, "L3 cache: graph %llu, hwloc %llu", gl3, l3);
  int gc = 0, gp = 0;
  unsigned long long gm = 0;
  for (int i = 0; i < topo_count(g, TOPO_CPU); i++) {
    const topo_vertex *v = &g->v[topo_nth(g, TOPO_CPU, i)];
    gc += v->cores;
    gp += v->pus;
    gm += v->mem_bytes;
    cr_assert(v->affinity[0], "CPU%d has a cpu mask", i);
  }
  cr_assert_eq(gc, cores, "cores: graph %d, hwloc %d", gc, cores);
  cr_assert_eq(gp, pus, "hardware threads: graph %d, hwloc %d", gp, pus);
  cr_assert_eq(gm, mem, "memory: graph %llu, hwloc %llu", gm, mem);
  cr_assert(gm > 0, "memory is known");
  /* every pair of NUMA nodes is joined (SYS) */
  for (int a = 0; a < topo_count(g, TOPO_CPU); a++)
    for (int b = 0; b < topo_count(g, TOPO_CPU); b++)
      if (a != b)
        cr_assert_eq(topo_path_class(g, topo_nth(g, TOPO_CPU, a),
                                     topo_nth(g, TOPO_CPU, b)),
                     TOPO_PATH_SYS);
  topo_graph_free(g);
}

/* The PCI bus id a net device sits on: the last path component of its
   device link that looks like one ("0000:00:03.0" for a virtio NIC whose
   device is .../0000:00:03.0/virtio2). */
static int netdev_busid(const char *ifname, char *out, size_t n) {
  char link[512], real[PATH_MAX];
  snprintf(link, sizeof(link), "/sys/class/net/%s/device", ifname);
  if (!realpath(link, real) || !strstr(real, "/pci"))
    return -1;
  char *p = real + strlen(real);
  while (p > real) {
    while (p > real && p[-1] != '/')
      p--;
    unsigned d, b, s, f;
    char tail;
    if (sscanf(p, "%x:%x:%x.%x%c", &d, &b, &s, &f, &tail) == 4) {
      snprintf(out, n, "%04x:%02x:%02x.%x", d, b, s, f);
      return 0;
    }
    if (p > real)
      *--p = 0;
  }
  return -1;
}

Test(topo_live, nics) {
  topo_graph *g = detect();
  DIR *d = opendir("/sys/class/net");
  if (!d)
    cr_skip_test("no /sys/class/net on this machine");
  int physical = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char busid[24];
    if (e->d_name[0] == '.' || netdev_busid(e->d_name, busid, sizeof(busid)))
      continue; /* lo, bridges, ifb: no PCI device */
    physical++;
    int found = -1;
    for (int i = 0; i < topo_count(g, TOPO_NIC); i++) {
      const topo_vertex *v = &g->v[topo_nth(g, TOPO_NIC, i)];
      if (!strcmp(v->busid, busid))
        found = topo_nth(g, TOPO_NIC, i);
    }
    cr_assert_geq(found, 0, "%s (%s) is a NIC of the graph", e->d_name, busid);
    const topo_vertex *v = &g->v[found];
    /* a NIC is named after its net device, or its RDMA device */
    char rdma[256];
    snprintf(rdma, sizeof(rdma), "/sys/class/infiniband/%s", v->netdev);
    cr_assert(!strcmp(v->netdev, e->d_name) || access(rdma, F_OK) == 0,
              "NIC %s named %s", busid, v->netdev);
    char sp[512];
    snprintf(sp, sizeof(sp), "/sys/class/net/%s/speed", e->d_name);
    FILE *f = fopen(sp, "r");
    long mbps = -1;
    if (f) {
      if (fscanf(f, "%ld", &mbps) != 1)
        mbps = -1;
      fclose(f);
    }
    if (mbps > 0 && !strcmp(v->netdev, e->d_name))
      cr_assert_float_eq(v->speed, mbps / 8000.0, 1e-9, "%s speed", e->d_name);
    /* the NIC reaches the network and its CPU */
    cr_assert_eq(topo_path_class(g, found, topo_nth(g, TOPO_NET, 0)),
                 TOPO_PATH_NET);
    cr_assert_leq(topo_path_class(g, found, topo_nth(g, TOPO_CPU, 0)),
                  TOPO_PATH_SYS);
  }
  closedir(d);
  if (!physical)
    cr_skip_test("this machine has no PCI network device");
  cr_assert_geq(topo_count(g, TOPO_NIC), physical);
  topo_graph_free(g);
}

Test(topo_live, gpus_and_nvml) {
  topo_graph *g = detect();
  int nvidia = 0;
  DIR *d = opendir("/sys/bus/pci/devices");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[512], buf[32];
    unsigned ven = 0, cls = 0;
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/vendor", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f)
      continue;
    if (fgets(buf, sizeof(buf), f))
      ven = (unsigned)strtoul(buf, NULL, 16);
    fclose(f);
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/class", e->d_name);
    if ((f = fopen(p, "r"))) {
      if (fgets(buf, sizeof(buf), f))
        cls = (unsigned)strtoul(buf, NULL, 16);
      fclose(f);
    }
    if (ven == 0x10de && (cls >> 16) == 0x03)
      nvidia++;
  }
  if (d)
    closedir(d);
  cr_assert_eq(topo_count(g, TOPO_GPU), nvidia,
               "GPUs: graph %d, NVIDIA display devices %d",
               topo_count(g, TOPO_GPU), nvidia);
  int nl = -1;
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  cr_assert_eq(topo_nvml_add_links(g, &nl), BRAID_SUCCESS,
               "NVML missing or present is not an error: %s", err_msg());
  if (!lib) {
    fprintf(stderr, "note: no libnvidia-ml here; checked that its absence "
                    "means no NVLink\n");
    cr_assert_eq(nl, 0);
  } else
    dlclose(lib);
  topo_graph_free(g);
}

Test(topo_live, dump_and_reload) {
  topo_graph *g = detect();
  for (int fmt = TOPO_FMT_BRAID; fmt <= TOPO_FMT_HWLOC; fmt++) {
    size_t n;
    char *t = write_str(g, (topo_format)fmt, &n);
    topo_graph *g2 = NULL;
    cr_assert_eq(topo_parse(t, n, "live", TOPO_FMT_AUTO, &g2), BRAID_SUCCESS,
                 "format %d: %s\n%s", fmt, err_msg(), t);
    cr_assert_eq(g2->nv, g->nv);
    if (fmt == TOPO_FMT_BRAID)
      cr_assert(topo_graph_compare(g, g2) == BRAID_SUCCESS, "%s", err_msg());
    free(t);
    topo_graph_free(g2);
  }
  topo_graph_free(g);
}
