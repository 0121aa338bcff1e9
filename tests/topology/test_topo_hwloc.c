/*
 * hwloc XML: the PCI tree (switch ports merged, root ports passed through),
 * NVML OS devices, the NVLinkBandwidth matrix (NVSwitch ports merged),
 * writing hwloc XML, and malformed files.
 */
#include "topo_test_util.h"

static int V(const topo_graph *g, const char *n) {
  int id = topo_find(g, n);
  cr_assert_geq(id, 0, "%s has %s", g->name, n);
  return id;
}

Test(topo_hwloc, nvswitch_fixture) {
  topo_graph *g = load_ok(BRAID_TOPO_TEST_DATA "/hwloc-nvswitch.xml");
  cr_assert_eq(topo_count(g, TOPO_GPU), 4);
  cr_assert_eq(topo_count(g, TOPO_NIC), 2, "one NIC per port, not per netdev");
  cr_assert_eq(topo_count(g, TOPO_CPU), 2);
  cr_assert_eq(topo_count(g, TOPO_PCI), 2, "one vertex per physical switch");
  cr_assert_eq(topo_count(g, TOPO_NVS), 1, "NVSwitch ports merged");
  const topo_vertex *c0 = &g->v[V(g, "CPU0")];
  cr_assert_eq(c0->cores, 2);
  cr_assert_eq(c0->pus, 2);
  cr_assert_eq(c0->mem_bytes, 64ull << 30);
  cr_assert_str_eq(c0->vendor, "AuthenticAMD");
  cr_assert_str_eq(c0->arch, "x86_64");
  cr_assert_str_eq(c0->affinity, "00000003");
  const topo_vertex *g2 = &g->v[V(g, "GPU2")];
  cr_assert_str_eq(g2->busid, "0000:87:00.0");
  cr_assert_eq(g2->dev, 2);
  cr_assert_eq(g2->sm, 80);
  cr_assert_eq(g2->numa, 1);
  cr_assert_str_eq(g->v[V(g, "NIC1")].netdev, "mlx5_1");
  int l = topo_link_between(g, V(g, "GPU0"), V(g, "NVS0"));
  cr_assert_eq(g->links[l].count, 12, "two ports of 6 lanes");
  cr_assert_float_eq(g->links[l].bw, 300.0, 1e-9);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "GPU3")), TOPO_PATH_NVL);
  cr_assert_float_eq(topo_path_bw(g, V(g, "GPU0"), V(g, "GPU3")), 300.0, 1e-9,
                     "GPU-GPU bandwidth counts every port");
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "NIC1")), TOPO_PATH_SYS);
  cr_assert_float_eq(topo_path_bw(g, V(g, "GPU0"), V(g, "NIC0")), 31.5, 0.05);
  topo_graph_free(g);
}

Test(topo_hwloc, nvlink_pair_fixture) {
  topo_graph *g = load_ok(BRAID_TOPO_TEST_DATA "/hwloc-v100-pair.xml");
  cr_assert_eq(topo_count(g, TOPO_GPU), 2);
  cr_assert_eq(topo_count(g, TOPO_NIC), 0);
  cr_assert_eq(topo_count(g, TOPO_NVS), 0);
  int l = topo_link_between(g, V(g, "GPU0"), V(g, "GPU1"));
  cr_assert_geq(l, 0);
  cr_assert_eq(g->links[l].type, TOPO_LINK_NVL);
  cr_assert_eq(g->links[l].count, 2);
  cr_assert_float_eq(g->links[l].bw, 50.0, 1e-9);
  cr_assert_float_eq(topo_path_bw(g, V(g, "GPU0"), V(g, "CPU0")), 15.75, 0.01);
  topo_graph_free(g);
}

Test(topo_hwloc, write_and_read_back) {
  static const char *const models[] = {"dgx1-v100", "dgx-a100", "dgx-h100",
                                       "pcie-4gpu", "cpu-2socket"};
  for (int i = 0; i < 5; i++) {
    topo_graph *g1 = NULL, *g2 = NULL;
    cr_assert_eq(topo_model_load(models[i], &g1), BRAID_SUCCESS, "%s",
                 err_msg());
    size_t n;
    char *t = write_str(g1, TOPO_FMT_HWLOC, &n);
    cr_assert_eq(topo_parse(t, n, "w.xml", TOPO_FMT_AUTO, &g2), BRAID_SUCCESS,
                 "%s: %s", models[i], err_msg());
    for (int l = 0; l < g1->nl; l++)
      if (g1->links[l].type == TOPO_LINK_SYS)
        g1->links[l].bw = 40.0; /* hwloc has no inter-socket figure */
    cr_assert(topo_graph_compare(g1, g2) == BRAID_SUCCESS, "%s: %s", models[i],
              err_msg());
    cr_assert_eq(g2->v[V(g2, "CPU0")].cores, g1->v[V(g1, "CPU0")].cores);
    free(t);
    topo_graph_free(g1);
    topo_graph_free(g2);
  }
}

Test(topo_hwloc, malformed) {
  const char *err;
  const char *head = "<topology version=\"2.0\">\n"
                     "<object type=\"Machine\" cpuset=\"0x1\">\n"
                     "<object type=\"NUMANode\" os_index=\"0\" "
                     "cpuset=\"0x1\"/>\n";
  char buf[2048];
  snprintf(buf, sizeof(buf),
           "%s<object type=\"PCIDev\" pci_busid=\"nope\" pci_type=\"0302 "
           "[10de:20b0] [0:0] 0\"/>\n</object>\n</topology>\n",
           head);
  err = parse_fails(TOPO_FMT_HWLOC, buf, "h.xml");
  cr_assert_has(err, "h.xml:4:");
  cr_assert_has(err, "'pci_busid'");

  snprintf(buf, sizeof(buf),
           "%s<object type=\"PCIDev\" pci_busid=\"0000:01:00.0\" "
           "pci_type=\"display\"/>\n</object>\n</topology>\n",
           head);
  err = parse_fails(TOPO_FMT_HWLOC, buf, "t.xml");
  cr_assert_has(err, "t.xml:4:");
  cr_assert_has(err, "'pci_type'");

  snprintf(buf, sizeof(buf),
           "%s<object os_index=\"3\"/>\n</object>\n</topology>\n", head);
  err = parse_fails(TOPO_FMT_HWLOC, buf, "m.xml");
  cr_assert_has(err, "m.xml:4:");
  cr_assert_has(err, "'type'");
  cr_assert_has(err, "missing");

  snprintf(buf, sizeof(buf),
           "%s</object>\n<distances2hetero nbobjs=\"99999999\" kind=\"1\" "
           "name=\"NVLinkBandwidth\" indexing=\"gp\">\n</distances2hetero>\n"
           "</topology>\n",
           head);
  err = parse_fails(TOPO_FMT_HWLOC, buf, "n.xml");
  cr_assert_has(err, "n.xml:5:");
  cr_assert_has(err, "'nbobjs'");

  snprintf(buf, sizeof(buf),
           "%s</object>\n<distances2 type=\"OSDev\" nbobjs=\"2\" kind=\"1\" "
           "name=\"NVLinkBandwidth\" indexing=\"gp\">\n<indexes "
           "length=\"4\">7 9 </indexes>\n<u64values length=\"2\">0 "
           "</u64values>\n</distances2>\n</topology>\n",
           head);
  err = parse_fails(TOPO_FMT_HWLOC, buf, "v.xml");
  cr_assert_has(err, "v.xml:5:");
  cr_assert_has(err, "'nbobjs'");
  cr_assert_has(err, "u64values");

  snprintf(buf, sizeof(buf),
           "<topology version=\"2.0\">\n<object type=\"Machine\">\n"
           "<object type=\"NUMANode\" os_index=\"0\" cpuset=\"0xzz\"/>\n"
           "</object>\n</topology>\n");
  err = parse_fails(TOPO_FMT_HWLOC, buf, "c.xml");
  cr_assert_has(err, "c.xml:3:");
  cr_assert_has(err, "'cpuset'");
}
