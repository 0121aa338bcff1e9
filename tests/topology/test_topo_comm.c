/*
 * comm_topo_load: BRAID_TOPO_FILE replaces detection, BRAID_TOPO_DUMP_FILE
 * writes what the communicator uses. Each test runs in its own process, so
 * the environment is read fresh.
 */
#include "topo_test_util.h"

#include "src/comm.h"

Test(topo_comm, file_and_dump) {
  char dump[] = "/tmp/braid-topo-dump-XXXXXX.xml";
  int fd = mkstemps(dump, 4);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("BRAID_TOPO_FILE", BRAID_MACHINES_DIR "/dgx-h100.topo", 1);
  setenv("BRAID_TOPO_DUMP_FILE", dump, 1);
  topo_graph *g = NULL;
  cr_assert_eq(comm_topo_load(&g), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g->name, "DGX-H100");
  cr_assert_eq(topo_count(g, TOPO_GPU), 8);
  topo_graph *d = load_ok(dump);
  cr_assert_eq(topo_count(d, TOPO_GPU), 8, "the dump is NCCL XML of it");
  cr_assert_eq(topo_count(d, TOPO_NVS), 1);
  topo_graph_free(d);
  topo_graph_free(g);
  unlink(dump);
}

Test(topo_comm, bad_file_is_an_error) {
  setenv("BRAID_TOPO_FILE", "/nonexistent/topo.xml", 1);
  topo_graph *g = NULL;
  cr_assert_eq(comm_topo_load(&g), BRAID_ERR_INVALID_ARG);
  cr_assert_null(g);
  cr_assert_has(err_msg(), "/nonexistent/topo.xml");
}

Test(topo_comm, detects_without_a_file) {
  unsetenv("BRAID_TOPO_FILE");
  char dump[] = "/tmp/braid-topo-dump-XXXXXX.topo";
  int fd = mkstemps(dump, 5);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("BRAID_TOPO_DUMP_FILE", dump, 1);
  topo_graph *g = NULL;
  cr_assert_eq(comm_topo_load(&g), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g->name, "live");
  cr_assert_geq(topo_count(g, TOPO_CPU), 1);
  topo_graph *d = load_ok(dump);
  cr_assert(topo_graph_compare(g, d) == BRAID_SUCCESS, "%s", err_msg());
  topo_graph_free(d);
  topo_graph_free(g);
  unlink(dump);
}
