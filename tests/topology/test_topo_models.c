/*
 * Machine models (topology/machines/): vertex and link counts, specific path
 * classes and bandwidths from the vendors' public descriptions, and cluster
 * replication.
 */
#include "src/log.h"
#include "topology/topo.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static topo_graph *model(const char *name) {
  topo_graph *g = NULL;
  braid_result r = topo_model_load(name, &g);
  cr_assert_eq(r, BRAID_SUCCESS, "%s: %s", name, err_msg());
  cr_assert_eq(topo_graph_check(g), BRAID_SUCCESS, "%s", err_msg());
  return g;
}

static int nlinks(const topo_graph *g, topo_ltype t) {
  int n = 0;
  for (int i = 0; i < g->nl; i++)
    n += g->links[i].type == t;
  return n;
}

static void counts(const topo_graph *g, int gpu, int cpu, int pci, int nvs,
                   int nic, int net, int nvl, int pcil, int sys, int netl) {
  cr_assert_eq(topo_count(g, TOPO_GPU), gpu, "%s GPUs", g->name);
  cr_assert_eq(topo_count(g, TOPO_CPU), cpu, "%s CPUs", g->name);
  cr_assert_eq(topo_count(g, TOPO_PCI), pci, "%s PCI switches", g->name);
  cr_assert_eq(topo_count(g, TOPO_NVS), nvs, "%s NVSwitches", g->name);
  cr_assert_eq(topo_count(g, TOPO_NIC), nic, "%s NICs", g->name);
  cr_assert_eq(topo_count(g, TOPO_NET), net, "%s NET", g->name);
  cr_assert_eq(g->nv, gpu + cpu + pci + nvs + nic + net);
  cr_assert_eq(nlinks(g, TOPO_LINK_NVL), nvl, "%s NVL links", g->name);
  cr_assert_eq(nlinks(g, TOPO_LINK_PCI), pcil, "%s PCI links", g->name);
  cr_assert_eq(nlinks(g, TOPO_LINK_SYS), sys, "%s SYS links", g->name);
  cr_assert_eq(nlinks(g, TOPO_LINK_NET), netl, "%s NET links", g->name);
}

static int V(const topo_graph *g, const char *n) {
  int id = topo_find(g, n);
  cr_assert_geq(id, 0, "%s has %s", g->name, n);
  return id;
}

Test(topo_models, names_and_unknown) {
  const char *const *n = topo_model_names();
  int k = 0;
  for (; n[k]; k++) {
    topo_graph *g = model(n[k]);
    topo_graph_free(g);
  }
  cr_assert_eq(k, 5);
  topo_graph *g;
  cr_assert_eq(topo_model_load("dgx-9000", &g), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "dgx-9000") && strstr(err_msg(), "dgx-a100"),
            "%s", err_msg());
}

Test(topo_models, dgx1_v100) {
  topo_graph *g = model("dgx1-v100");
  counts(g, 8, 2, 4, 0, 4, 1, 16, 16, 1, 4);
  /* every V100 uses its six NVLink lanes */
  for (int i = 0; i < 8; i++) {
    int id = topo_nth(g, TOPO_GPU, i), lanes = 0;
    for (int k = 0; k < g->v[id].nadj; k++)
      if (g->links[g->v[id].adj[k]].type == TOPO_LINK_NVL)
        lanes += g->links[g->v[id].adj[k]].count;
    cr_assert_eq(lanes, 6, "GPU%d has %d lanes", i, lanes);
  }
  int g0 = V(g, "GPU0"), g1 = V(g, "GPU1"), g3 = V(g, "GPU3"),
      g4 = V(g, "GPU4"), g5 = V(g, "GPU5"), g6 = V(g, "GPU6");
  /* hybrid cube-mesh as nvidia-smi topo -m shows it on a DGX-1V */
  cr_assert_eq(topo_path_class(g, g0, g1), TOPO_PATH_NVL);
  cr_assert_eq(g->links[topo_link_between(g, g0, g1)].count, 1);
  cr_assert_float_eq(topo_path_bw(g, g0, g1), 25.0, 1e-9);
  cr_assert_eq(topo_path_class(g, g0, g3), TOPO_PATH_NVL);
  cr_assert_eq(g->links[topo_link_between(g, g0, g3)].count, 2);
  cr_assert_float_eq(topo_path_bw(g, g0, g3), 50.0, 1e-9);
  cr_assert_eq(g->links[topo_link_between(g, g0, g4)].count, 2);
  cr_assert_eq(g->links[topo_link_between(g, g1, g5)].count, 2);
  cr_assert_eq(topo_link_between(g, g0, g5), -1, "no direct GPU0-GPU5 link");
  cr_assert_eq(topo_path_class(g, g0, g5), TOPO_PATH_NVB);
  /* the widest NVLink route is GPU0-GPU3-GPU2-GPU1-GPU5, two lanes each */
  cr_assert_float_eq(topo_path_bw(g, g0, g5), 50.0, 1e-9);
  topo_path p;
  cr_assert_eq(topo_path_get(g, g0, g5, &p), BRAID_SUCCESS);
  cr_assert_eq(p.nhops, 4);
  cr_assert_eq(p.verts[1], g3);
  cr_assert_eq(p.verts[3], g1);
  topo_path_release(&p);
  cr_assert_eq(topo_path_class(g, g4, g6), TOPO_PATH_NVL);
  /* NICs share the PCIe switch of a GPU pair */
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g1, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC1")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC2")), TOPO_PATH_SYS);
  cr_assert_float_eq(topo_path_bw(g, g0, V(g, "NIC0")), 15.75, 0.01,
                     "PCIe gen3 x16");
  cr_assert_float_eq(g->v[V(g, "NIC0")].speed, 12.5, 1e-9, "EDR 100 Gb/s");
  topo_graph_free(g);
}

Test(topo_models, dgx_a100) {
  topo_graph *g = model("dgx-a100");
  counts(g, 8, 2, 4, 1, 8, 1, 8, 20, 1, 8);
  int g0 = V(g, "GPU0"), g7 = V(g, "GPU7");
  cr_assert_eq(g->links[topo_link_between(g, g0, V(g, "NVS0"))].count, 12);
  cr_assert_eq(topo_path_class(g, g0, g7), TOPO_PATH_NVL);
  cr_assert_float_eq(topo_path_bw(g, g0, g7), 300.0, 1e-9,
                     "12 lanes x 25 GB/s");
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC7")), TOPO_PATH_SYS);
  cr_assert_float_eq(g->v[V(g, "NIC0")].speed, 25.0, 1e-9, "HDR 200 Gb/s");
  topo_path p;
  cr_assert_eq(topo_path_get(g, g0, g7, &p), BRAID_SUCCESS);
  cr_assert_eq(p.nhops, 2);
  cr_assert_eq(p.verts[1], V(g, "NVS0"));
  topo_path_release(&p);
  topo_graph_free(g);
}

Test(topo_models, dgx_h100) {
  topo_graph *g = model("dgx-h100");
  counts(g, 8, 2, 8, 1, 8, 1, 8, 24, 1, 8);
  int g0 = V(g, "GPU0"), g5 = V(g, "GPU5");
  cr_assert_eq(g->links[topo_link_between(g, g0, V(g, "NVS0"))].count, 18);
  cr_assert_eq(topo_path_class(g, g0, g5), TOPO_PATH_NVL);
  cr_assert_float_eq(topo_path_bw(g, g0, g5), 450.0, 1e-9);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC1")), TOPO_PATH_PHB);
  cr_assert_float_eq(topo_path_bw(g, g0, V(g, "NIC0")), 63.0, 0.05,
                     "PCIe gen5 x16");
  cr_assert_float_eq(g->v[V(g, "NIC0")].speed, 50.0, 1e-9, "NDR 400 Gb/s");
  topo_graph_free(g);
}

Test(topo_models, pcie_box_and_cpu_host) {
  topo_graph *g = model("pcie-4gpu");
  counts(g, 4, 1, 1, 0, 1, 1, 0, 6, 0, 1);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "GPU3")), TOPO_PATH_PIX);
  cr_assert_float_eq(topo_path_bw(g, V(g, "GPU0"), V(g, "GPU3")), 31.5, 0.05);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "NIC0")), TOPO_PATH_PHB);
  topo_graph_free(g);
  g = model("cpu-2socket");
  counts(g, 0, 2, 0, 0, 1, 1, 0, 1, 1, 1);
  cr_assert_eq(topo_path_class(g, V(g, "CPU1"), V(g, "NIC0")), TOPO_PATH_SYS);
  cr_assert_eq(g->v[V(g, "CPU0")].cores, 20);
  topo_graph_free(g);
}

Test(topo_models, cluster) {
  topo_graph *h = model("dgx-a100"), *c = NULL;
  cr_assert_eq(topo_cluster(h, 4, 25.0, &c), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(c->nhosts, 4);
  cr_assert_eq(topo_count(c, TOPO_GPU), 32);
  cr_assert_eq(topo_count(c, TOPO_NIC), 32);
  cr_assert_eq(topo_count(c, TOPO_NET), 1);
  cr_assert_eq(c->nv, 4 * (h->nv - 1) + 1);
  cr_assert_eq(c->nl, 4 * (h->nl - 8) + 32);
  int a = topo_find(c, "h0.GPU0"), b = topo_find(c, "h3.GPU5");
  cr_assert_geq(a, 0);
  cr_assert_geq(b, 0);
  cr_assert_eq(c->v[b].host, 3);
  cr_assert_eq(topo_nth(c, TOPO_GPU, 3 * 8 + 5), b, "GPUs host-major");
  cr_assert_eq(topo_path_class(c, a, b), TOPO_PATH_NET);
  cr_assert_float_eq(topo_path_bw(c, a, b), 25.0, 1e-9);
  cr_assert_eq(topo_path_class(c, a, topo_find(c, "h0.GPU5")), TOPO_PATH_NVL);
  topo_path p;
  cr_assert_eq(topo_path_get(c, a, b, &p), BRAID_SUCCESS);
  cr_assert_eq(c->v[p.verts[1]].type, TOPO_PCI);
  cr_assert_eq(c->v[p.verts[2]].type, TOPO_NIC);
  cr_assert_eq(c->v[p.verts[3]].type, TOPO_NET);
  topo_path_release(&p);
  cr_assert_eq(topo_cluster(h, 0, 25, &c), BRAID_ERR_INVALID_ARG);
  topo_graph_free(c);
  topo_graph_free(h);
}
