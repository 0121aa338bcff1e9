/*
 * The graph itself: building, merging links, lookups, copies, comparison,
 * bandwidth facts and path classes on small hand-built graphs.
 */
#include "src/log.h"
#include "topology/topo.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

static int add(topo_graph *g, topo_vtype t, const char *name) {
  int id = topo_add_vertex(g, t, name);
  cr_assert_geq(id, 0, "adding %s", name ? name : "(auto)");
  return id;
}

Test(topo_graph, build_and_lookup) {
  topo_graph *g = topo_graph_new("t");
  cr_assert_not_null(g);
  int c = add(g, TOPO_CPU, NULL), p = add(g, TOPO_PCI, NULL);
  int g0 = add(g, TOPO_GPU, NULL), g1 = add(g, TOPO_GPU, NULL);
  cr_assert_str_eq(g->v[g1].name, "GPU1");
  cr_assert_eq(topo_count(g, TOPO_GPU), 2);
  cr_assert_eq(topo_nth(g, TOPO_GPU, 1), g1);
  cr_assert_eq(topo_nth(g, TOPO_GPU, 2), -1);
  cr_assert_eq(topo_find(g, "GPU0"), g0);
  cr_assert_eq(topo_add_vertex(g, TOPO_GPU, "GPU0"), -1, "duplicate names");
  cr_assert_geq(topo_add_link(g, p, c, TOPO_LINK_PCI, 24, -1, 1), 0);
  cr_assert_eq(topo_add_link(g, g0, g0, TOPO_LINK_NVL, 25, -1, 1), -1,
               "self loops are refused");
  int l = topo_add_link(g, g0, g1, TOPO_LINK_NVL, 25, -1, 1);
  cr_assert_eq(topo_add_link(g, g1, g0, TOPO_LINK_NVL, 25, -1, 1), l,
               "a second lane merges into the link");
  cr_assert_eq(g->links[l].count, 2);
  cr_assert_float_eq(g->links[l].bw, 50.0, 1e-9);
  cr_assert_eq(topo_link_between(g, g0, g1), l);
  cr_assert_eq(topo_other(g, l, g0), g1);
  cr_assert_eq(g->v[g0].nadj, 1);
  cr_assert_eq(topo_graph_check(g), BRAID_SUCCESS, "%s", err_msg());
  topo_graph *cp = topo_graph_copy(g);
  cr_assert(topo_graph_compare(g, cp) == BRAID_SUCCESS, "%s", err_msg());
  cp->links[l].count = 3;
  cr_assert_eq(topo_graph_compare(g, cp), BRAID_ERR_MISMATCH);
  cr_assert(strstr(err_msg(), "GPU0-GPU1") != NULL,
            "the message names the link: %s", err_msg());
  topo_graph_free(cp);
  topo_graph_free(g);
}

/* Lookups by name stay exact as the name index grows and is rebuilt, in
 * copies too (a cluster of 1024 hosts has 50000 vertices). */
Test(topo_graph, names_index_finds_every_vertex) {
  topo_graph *g = topo_graph_new("many");
  cr_assert_not_null(g);
  enum { N = 20000 };
  char name[48];
  for (int i = 0; i < N; i++) {
    /* every third one named automatically ("GPU<k>", "CPU<k>", ...) */
    topo_vtype t = (topo_vtype)(i % 3);
    snprintf(name, sizeof name, "h%d.v%d", i / 7, i % 7);
    cr_assert_eq(add(g, t, i % 3 == 2 ? NULL : name), i);
  }
  for (int i = 0; i < N; i++) {
    cr_assert_eq(topo_find(g, g->v[i].name), i, "%s", g->v[i].name);
    cr_assert_eq(topo_add_vertex(g, TOPO_GPU, g->v[i].name), -1, "duplicate %s",
                 g->v[i].name);
  }
  cr_assert_eq(topo_find(g, "h0.v7"), -1);
  cr_assert_eq(topo_find(g, ""), -1);
  topo_graph *cp = topo_graph_copy(g);
  cr_assert_not_null(cp);
  for (int i = 0; i < N; i += 97)
    cr_assert_eq(topo_find(cp, g->v[i].name), i);
  topo_graph_free(cp);
  topo_graph_free(g);
  topo_graph *e = topo_graph_new("empty");
  cr_assert_eq(topo_find(e, "GPU0"), -1, "an empty graph finds nothing");
  topo_graph_free(e);
}

Test(topo_graph, bandwidth_facts) {
  cr_assert_float_eq(topo_pcie_bw(8, 16), 15.75, 0.01); /* gen3 x16 */
  cr_assert_float_eq(topo_pcie_bw(16, 16), 31.5, 0.01); /* gen4 x16 */
  cr_assert_float_eq(topo_pcie_bw(32, 16), 63.0, 0.02); /* gen5 x16 */
  cr_assert_float_eq(topo_pcie_bw(2.5, 1), 0.25, 1e-9); /* gen1: 8b/10b */
  cr_assert_eq(topo_pcie_gen(16), 4);
  cr_assert_float_eq(topo_nvlink_lane_bw(70), 25.0, 1e-9);
  cr_assert_float_eq(topo_nvlink_lane_bw(80), 25.0, 1e-9);
  cr_assert_float_eq(topo_nvlink_lane_bw(90), 25.0, 1e-9);
  cr_assert_float_eq(topo_nvlink_lane_bw(60), 20.0, 1e-9);
  cr_assert_str_eq(topo_pclass_name(TOPO_PATH_PXB), "PXB");
  cr_assert_eq(topo_vtype_parse("nvswitch"), TOPO_NVS);
  cr_assert_eq(topo_ltype_parse("bogus"), -1);
}

/* Two sockets; socket 0: switch A (GPU0, GPU1, NIC0) under switch T; GPU2
   under switch B under T; socket 1: GPU3 on the root. GPU0-GPU3 NVLink. */
static topo_graph *sample(void) {
  topo_graph *g = topo_graph_new("sample");
  int c0 = add(g, TOPO_CPU, NULL), c1 = add(g, TOPO_CPU, NULL);
  int t = add(g, TOPO_PCI, "T"), a = add(g, TOPO_PCI, "A"),
      b = add(g, TOPO_PCI, "B");
  int g0 = add(g, TOPO_GPU, NULL), g1 = add(g, TOPO_GPU, NULL),
      g2 = add(g, TOPO_GPU, NULL), g3 = add(g, TOPO_GPU, NULL);
  int n0 = add(g, TOPO_NIC, NULL), net = add(g, TOPO_NET, NULL);
  topo_add_link(g, c0, c1, TOPO_LINK_SYS, 40, -1, 1);
  topo_add_link(g, t, c0, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, a, t, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, b, t, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, g0, a, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, g1, a, TOPO_LINK_PCI, 15.75, -1, 1);
  topo_add_link(g, n0, a, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, g2, b, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, g3, c1, TOPO_LINK_PCI, 31.5, -1, 1);
  topo_add_link(g, g0, g3, TOPO_LINK_NVL, 50, -1, 2);
  topo_add_link(g, n0, net, TOPO_LINK_NET, 25, -1, 1);
  return g;
}

Test(topo_graph, path_classes) {
  topo_graph *g = sample();
  int g0 = topo_find(g, "GPU0"), g1 = topo_find(g, "GPU1"),
      g2 = topo_find(g, "GPU2"), g3 = topo_find(g, "GPU3"),
      n0 = topo_find(g, "NIC0"), c0 = topo_find(g, "CPU0"),
      c1 = topo_find(g, "CPU1");
  cr_assert_eq(topo_path_class(g, g0, g0), TOPO_PATH_LOC);
  cr_assert_eq(topo_path_class(g, g0, g1), TOPO_PATH_PIX);
  cr_assert_float_eq(topo_path_bw(g, g0, g1), 15.75, 1e-9,
                     "bottleneck is GPU1's x8 link");
  cr_assert_eq(topo_path_class(g, g0, n0), TOPO_PATH_PIX);
  cr_assert_eq(topo_path_class(g, g0, g2), TOPO_PATH_PXB);
  cr_assert_eq(topo_path_class(g, g0, c0), TOPO_PATH_PHB);
  cr_assert_eq(topo_path_class(g, g0, g3), TOPO_PATH_NVL);
  cr_assert_float_eq(topo_path_bw(g, g0, g3), 50.0, 1e-9);
  /* GPU1 -> GPU3: over PCI to the socket link (SYS), never through GPU0's
     NVLink after entering GPU0 over PCI */
  cr_assert_eq(topo_path_class(g, g1, g3), TOPO_PATH_SYS);
  cr_assert_eq(topo_path_class(g, n0, g3), TOPO_PATH_SYS);
  cr_assert_eq(topo_path_class(g, c0, c1), TOPO_PATH_SYS);
  topo_path p;
  cr_assert_eq(topo_path_get(g, g2, n0, &p), BRAID_SUCCESS);
  cr_assert_eq(p.cls, TOPO_PATH_PXB);
  cr_assert_eq(p.nhops, 4, "GPU2 B T A NIC0");
  cr_assert_eq(p.verts[0], g2);
  cr_assert_eq(p.verts[1], topo_find(g, "B"));
  cr_assert_eq(p.verts[2], topo_find(g, "T"));
  cr_assert_eq(p.verts[3], topo_find(g, "A"));
  cr_assert_eq(p.verts[4], n0);
  for (int i = 0; i < p.nhops; i++) {
    const topo_link *l = &g->links[p.links[i]];
    cr_assert((l->a == p.verts[i] && l->b == p.verts[i + 1]) ||
              (l->b == p.verts[i] && l->a == p.verts[i + 1]));
  }
  cr_assert_float_eq(p.lat_us, 4.0, 1e-9, "four PCI hops of 1 us");
  topo_path_release(&p);
  cr_assert_eq(topo_paths_all(g), BRAID_SUCCESS);
  /* symmetric classes and bandwidths */
  for (int a = 0; a < g->nv; a++)
    for (int b = 0; b < g->nv; b++) {
      cr_assert_eq(topo_path_class(g, a, b), topo_path_class(g, b, a), "%s-%s",
                   g->v[a].name, g->v[b].name);
      cr_assert_float_eq(topo_path_bw(g, a, b), topo_path_bw(g, b, a), 1e-9);
    }
  topo_graph_free(g);
}

Test(topo_graph, nvb_and_disconnected) {
  topo_graph *g = topo_graph_new("nvb");
  int g0 = add(g, TOPO_GPU, NULL), g1 = add(g, TOPO_GPU, NULL),
      g2 = add(g, TOPO_GPU, NULL), lone = add(g, TOPO_GPU, NULL);
  topo_add_link(g, g0, g1, TOPO_LINK_NVL, 25, -1, 1);
  topo_add_link(g, g1, g2, TOPO_LINK_NVL, 50, -1, 2);
  cr_assert_eq(topo_path_class(g, g0, g2), TOPO_PATH_NVB);
  cr_assert_float_eq(topo_path_bw(g, g0, g2), 25.0, 1e-9);
  cr_assert_eq(topo_path_class(g, g0, lone), TOPO_PATH_DIS);
  cr_assert_float_eq(topo_path_bw(g, g0, lone), 0.0, 1e-9);
  /* the cache is dropped when the graph changes */
  topo_add_link(g, g0, g2, TOPO_LINK_NVL, 25, -1, 1);
  cr_assert_eq(topo_path_class(g, g0, g2), TOPO_PATH_NVL);
  topo_graph_free(g);
}
