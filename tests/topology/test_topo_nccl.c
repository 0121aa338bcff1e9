/*
 * NCCL topology XML: the five Azure files (counts and paths), round trips,
 * NCCL graph files, and malformed input.
 */
#include "topo_test_util.h"

static int V(const topo_graph *g, const char *n) {
  int id = topo_find(g, n);
  cr_assert_geq(id, 0, "%s has %s", g->name, n);
  return id;
}

static void counts(const topo_graph *g, int gpu, int nic, int numa, int pci,
                   int nvs) {
  cr_assert_eq(topo_count(g, TOPO_GPU), gpu, "%s GPUs", g->name);
  cr_assert_eq(topo_count(g, TOPO_NIC), nic, "%s NICs", g->name);
  cr_assert_eq(topo_count(g, TOPO_CPU), numa, "%s NUMA", g->name);
  cr_assert_eq(topo_count(g, TOPO_PCI), pci, "%s switches", g->name);
  cr_assert_eq(topo_count(g, TOPO_NVS), nvs, "%s NVSwitches", g->name);
  cr_assert_eq(topo_count(g, TOPO_NET), nic ? 1 : 0);
}

Test(topo_nccl, azure_ndv2) {
  char p[512];
  topo_graph *g = load_ok(azure_file("ndv2-topo.xml", p, sizeof(p)));
  counts(g, 8, 1, 2, 0, 0);
  cr_assert_str_eq(g->v[V(g, "GPU0")].busid, "0001:00:00.0");
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "GPU3")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "GPU4")), TOPO_PATH_SYS);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "NIC0")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, V(g, "GPU7"), V(g, "NIC0")), TOPO_PATH_SYS);
  cr_assert_float_eq(topo_path_bw(g, V(g, "GPU0"), V(g, "GPU3")), 31.5, 0.05,
                     "PCIe 16 GT/s x16");
  cr_assert_eq(g->v[V(g, "NIC0")].pci_class, 0x020700);
  topo_graph_free(g);
}

Test(topo_nccl, azure_ndv4) {
  char p[512];
  topo_graph *g = load_ok(azure_file("ndv4-topo.xml", p, sizeof(p)));
  counts(g, 8, 8, 4, 4, 0);
  int g0 = V(g, "GPU0");
  cr_assert_str_eq(g->v[g0].busid, "0003:00:00.0");
  cr_assert_eq(topo_path_class(g, g0, V(g, "GPU1")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC1")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "GPU2")), TOPO_PATH_SYS);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC7")), TOPO_PATH_SYS);
  cr_assert_float_eq(topo_path_bw(g, g0, V(g, "NIC0")), 31.5, 0.05);
  /* no NIC speed in the file: HDR (200 Gb/s) for a PCIe gen4 NIC */
  int l = topo_link_between(g, V(g, "NIC0"), V(g, "NET0"));
  cr_assert_float_eq(g->links[l].bw, 25.0, 1e-9);
  topo_path pa;
  cr_assert_eq(topo_path_get(g, g0, V(g, "NIC1"), &pa), BRAID_SUCCESS);
  cr_assert_eq(pa.nhops, 2);
  cr_assert_str_eq(g->v[pa.verts[1]].busid, "ffff:ff:01.0");
  topo_path_release(&pa);
  topo_graph_free(g);
}

Test(topo_nccl, azure_ndv5) {
  char p[512];
  topo_graph *g = load_ok(azure_file("ndv5-topo.xml", p, sizeof(p)));
  counts(g, 8, 8, 2, 8, 0);
  int g0 = V(g, "GPU0");
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC0")), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, V(g, "NIC1")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, g0, V(g, "GPU1")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, g0, V(g, "GPU4")), TOPO_PATH_SYS);
  cr_assert_float_eq(topo_path_bw(g, g0, V(g, "NIC0")), 63.0, 0.05,
                     "PCIe 32 GT/s x16");
  int l = topo_link_between(g, V(g, "NIC0"), V(g, "NET0"));
  cr_assert_float_eq(g->links[l].bw, 50.0, 1e-9, "NDR for a gen5 NIC");
  topo_graph_free(g);
}

Test(topo_nccl, azure_ncv4) {
  char p[512];
  topo_graph *g = load_ok(azure_file("ncv4-topo.xml", p, sizeof(p)));
  counts(g, 4, 1, 4, 0, 0);
  for (int i = 0; i < 4; i++) {
    const topo_vertex *v = &g->v[topo_nth(g, TOPO_GPU, i)];
    cr_assert_eq(v->dev, i);
    cr_assert_eq(v->rank, i);
    cr_assert_eq(v->sm, 80);
    cr_assert_eq(v->numa, i);
    cr_assert_eq(v->device_id, 0x20b5);
  }
  const topo_vertex *nic = &g->v[V(g, "NIC0")];
  cr_assert_str_eq(nic->netdev, "eth0");
  cr_assert_float_eq(nic->speed, 12.5, 1e-9, "100000 Mb/s");
  cr_assert_eq(nic->maxconn, 65536);
  /* an <nvlink> naming the GPU itself adds nothing */
  for (int i = 0; i < g->nl; i++)
    cr_assert_neq(g->links[i].type, TOPO_LINK_NVL);
  cr_assert_eq(topo_path_class(g, V(g, "GPU0"), V(g, "NIC0")), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, V(g, "GPU1"), V(g, "NIC0")), TOPO_PATH_SYS);
  cr_assert_eq(topo_path_class(g, V(g, "GPU1"), V(g, "GPU3")), TOPO_PATH_SYS);
  topo_graph_free(g);
}

Test(topo_nccl, azure_ncv4_graph_file) {
  char p[512];
  azure_file("ncv4-graph.xml", p, sizeof(p));
  topo_graph *g = NULL;
  /* it is not a topology: the loader says what it is */
  cr_assert_eq(topo_load(p, TOPO_FMT_AUTO, &g), BRAID_ERR_INVALID_ARG);
  cr_assert_has(err_msg(), "NCCL graph");
  FILE *f = fopen(p, "r");
  char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  topo_nccl_graphs *gs = NULL;
  cr_assert_eq(topo_parse_nccl_graphs(buf, n, p, &gs), BRAID_SUCCESS, "%s",
               err_msg());
  cr_assert_eq(gs->n, 3);
  cr_assert_eq(gs->g[0].pattern, 4);
  cr_assert_eq(gs->g[0].nchannels, 2);
  cr_assert_eq(gs->g[0].nch, 2);
  cr_assert_eq(gs->g[1].nch, 4);
  cr_assert_str_eq(gs->g[0].type_intra, "SYS");
  int total = 0;
  for (int i = 0; i < gs->n; i++)
    for (int c = 0; c < gs->g[i].nch; c++) {
      const topo_nccl_channel *ch = &gs->g[i].ch[c];
      cr_assert_eq(ch->n, 4, "each channel visits the 4 GPUs");
      int seen = 0;
      for (int k = 0; k < ch->n; k++) {
        cr_assert(ch->gpus[k] >= 0 && ch->gpus[k] < 4);
        seen |= 1 << ch->gpus[k];
      }
      cr_assert_eq(seen, 0xf, "a permutation of GPUs 0-3");
      total++;
    }
  cr_assert_eq(total, 10);
  topo_nccl_graphs_free(gs);
}

static void round_trip(const char *path) {
  topo_graph *g1 = load_ok(path);
  size_t n1, n2;
  char *t1 = write_str(g1, TOPO_FMT_NCCL, &n1);
  topo_graph *g2 = NULL;
  cr_assert_eq(topo_parse(t1, n1, "rt1.xml", TOPO_FMT_AUTO, &g2), BRAID_SUCCESS,
               "%s\n%s", err_msg(), t1);
  cr_assert(topo_graph_compare(g1, g2) == BRAID_SUCCESS, "%s: %s", path,
            err_msg());
  char *t2 = write_str(g2, TOPO_FMT_NCCL, &n2);
  cr_assert_str_eq(t1, t2, "NCCL XML -> graph -> NCCL XML is stable");
  /* every vertex attribute NCCL carries survives */
  for (int i = 0; i < g1->nv; i++) {
    const topo_vertex *a = &g1->v[i], *b = &g2->v[topo_find(g2, a->name)];
    cr_assert_eq(a->dev, b->dev);
    cr_assert_eq(a->sm, b->sm);
    cr_assert_eq(a->numa, b->numa);
    cr_assert_eq(a->pci_class, b->pci_class);
    cr_assert_str_eq(a->affinity, b->affinity);
    cr_assert_str_eq(a->netdev, b->netdev);
  }
  /* and the same through braid's own format */
  size_t n3;
  char *t3 = write_str(g1, TOPO_FMT_BRAID, &n3);
  topo_graph *g3 = NULL;
  cr_assert_eq(topo_parse(t3, n3, "rt.topo", TOPO_FMT_AUTO, &g3), BRAID_SUCCESS,
               "%s", err_msg());
  cr_assert(topo_graph_compare(g1, g3) == BRAID_SUCCESS, "%s: %s", path,
            err_msg());
  free(t1);
  free(t2);
  free(t3);
  topo_graph_free(g1);
  topo_graph_free(g2);
  topo_graph_free(g3);
}

Test(topo_nccl, round_trips) {
  static const char *const files[] = {"ndv2-topo.xml", "ndv4-topo.xml",
                                      "ndv5-topo.xml", "ncv4-topo.xml"};
  char p[512];
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
    round_trip(azure_file(files[i], p, sizeof(p)));
}

Test(topo_nccl, models_round_trip_through_nccl) {
  /* NVLink meshes and NVSwitches survive NCCL's format */
  static const char *const models[] = {"dgx1-v100", "dgx-a100", "dgx-h100"};
  for (int i = 0; i < 3; i++) {
    topo_graph *g1 = NULL, *g2 = NULL;
    cr_assert_eq(topo_model_load(models[i], &g1), BRAID_SUCCESS, "%s",
                 err_msg());
    size_t n;
    char *t = write_str(g1, TOPO_FMT_NCCL, &n);
    cr_assert_eq(topo_parse_nccl(t, n, "m.xml", &g2), BRAID_SUCCESS, "%s",
                 err_msg());
    /* NCCL's format has no inter-socket figure: compare the rest */
    for (int l = 0; l < g1->nl; l++)
      if (g1->links[l].type == TOPO_LINK_SYS)
        g1->links[l].bw = 40.0;
    cr_assert(topo_graph_compare(g1, g2) == BRAID_SUCCESS, "%s: %s", models[i],
              err_msg());
    free(t);
    topo_graph_free(g1);
    topo_graph_free(g2);
  }
}

/* ---- malformed and hostile files ---- */

Test(topo_nccl, errors_name_file_line_attribute) {
  const char *err;
  err =
      parse_fails(TOPO_FMT_NCCL,
                  "<system version=\"1\">\n  <cpu numaid=\"zero\">\n  </cpu>\n"
                  "</system>\n",
                  "bad.xml");
  cr_assert_has(err, "bad.xml:2:");
  cr_assert_has(err, "'numaid'");
  cr_assert_has(err, "zero");

  err = parse_fails(TOPO_FMT_NCCL,
                    "<system version=\"1\">\n  <cpu numaid=\"0\">\n"
                    "    <pci class=\"0x030200\" link_width=\"16\"/>\n"
                    "  </cpu>\n</system>\n",
                    "nobus.xml");
  cr_assert_has(err, "nobus.xml:3:");
  cr_assert_has(err, "'busid'");
  cr_assert_has(err, "missing");

  err = parse_fails(TOPO_FMT_NCCL,
                    "<system version=\"1\">\n<cpu numaid=\"0\">\n"
                    "<pci busid=\"0000:07:00.0\" class=\"0x030200\">\n"
                    "<gpu dev=\"0\" sm=\"80\">\n"
                    "<nvlink target=\"0000:08:00.0\" count=\"100000\"/>\n"
                    "</gpu></pci></cpu></system>\n",
                    "huge.xml");
  cr_assert_has(err, "huge.xml:5:");
  cr_assert_has(err, "'count'");
  cr_assert_has(err, "out of range");

  err = parse_fails(TOPO_FMT_NCCL,
                    "<system version=\"1\">\n<cpu numaid=\"0\">\n"
                    "<pci busid=\"07:00.0:zz\" class=\"0x030200\"/>\n</cpu>\n"
                    "</system>\n",
                    "bus.xml");
  cr_assert_has(err, "bus.xml:3:");
  cr_assert_has(err, "'busid'");

  err = parse_fails(TOPO_FMT_NCCL,
                    "<system version=\"1\">\n<cpu numaid=\"0\">\n"
                    "<pci busid=\"0000:07:00.0\" class=\"pci\"/>\n</cpu>\n"
                    "</system>\n",
                    "cls.xml");
  cr_assert_has(err, "cls.xml:3:");
  cr_assert_has(err, "'class'");

  /* the same GPU twice (a cycle in the PCI tree) */
  err = parse_fails(TOPO_FMT_NCCL,
                    "<system version=\"1\">\n<cpu numaid=\"0\">\n"
                    "<pci busid=\"0000:07:00.0\" class=\"0x030200\"/>\n"
                    "<pci busid=\"0000:07:00.0\" class=\"0x030200\"/>\n</cpu>\n"
                    "</system>\n",
                    "dup.xml");
  cr_assert_has(err, "dup.xml:4:");
  cr_assert_has(err, "appears twice");

  err =
      parse_fails(TOPO_FMT_NCCL,
                  "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"00",
                  "trunc.xml");
  cr_assert_has(err, "trunc.xml:3:");

  err = parse_fails(
      TOPO_FMT_NCCL,
      "<system version=\"1\">\n<cpu numaid=\"0\">\n</pcx>\n</system>\n",
      "tag.xml");
  cr_assert_has(err, "tag.xml:3:");
  cr_assert_has(err, "</pcx>");

  err = parse_fails(TOPO_FMT_NCCL, "<system version=\"1\"></system>\n",
                    "empty.xml");
  cr_assert_has(err, "no <cpu>");

  err = parse_fails(TOPO_FMT_NCCL, "<topology/>", "root.xml");
  cr_assert_has(err, "expected <system>");

  err = parse_fails(TOPO_FMT_NCCL,
                    "<system>\n<cpu numaid=\"0\" numaid=\"1\"/>\n</system>",
                    "twice.xml");
  cr_assert_has(err, "twice.xml:2:");
  cr_assert_has(err, "'numaid' appears twice");
}

Test(topo_nccl, deep_nesting_is_refused) {
  size_t n = 0, cap = 200 * 64 + 256;
  char *s = malloc(cap);
  n += (size_t)snprintf(s + n, cap - n, "<system><cpu numaid=\"0\">");
  for (int i = 0; i < 200; i++)
    n += (size_t)snprintf(
        s + n, cap - n, "<pci busid=\"0000:%02x:00.0\" class=\"0x060400\">", i);
  const char *err;
  err = parse_fails(TOPO_FMT_NCCL, s, "deep.xml");
  cr_assert_has(err, "nested deeper");
  free(s);
}
