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

/* A send or recv schedule in BRAID_SCHEDULE_FILE is not used (point-to-point
 * calls run as one message), and the warning says so; a file of nothing
 * else leaves every call to the selector. */
Test(topo_comm, a_send_schedule_in_the_file_is_not_used) {
  char file[] = "/tmp/braid-sched-send-XXXXXX.json";
  char log[] = "/tmp/braid-sched-log-XXXXXX";
  int fd = mkstemps(file, 5), lfd = mkstemp(log);
  cr_assert(fd >= 0 && lfd >= 0);
  close(lfd);
  static const char text[] =
      "{\"braid_schedule\": 1, \"collective\": \"send\", \"nranks\": 1, "
      "\"root\": 0, \"chunks_per_block\": 1, \"scratch_blocks\": 0, "
      "\"channels\": [{\"weight\": 1, \"ranks\": [[]]}]}\n";
  cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  setenv("BRAID_SCHEDULE_FILE", file, 1);
  setenv("BRAID_DEBUG_FILE", log, 1);
  braid_unique_id id;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  braid_comm *c = NULL;
  cr_assert_eq(braid_comm_init(&c, 1, &id, 0, NULL), BRAID_SUCCESS, "%s",
               braid_comm_last_error(NULL));
  float x = 1, y = 0;
  cr_assert_eq(braid_send(&x, 1, BRAID_FLOAT32, 0, c, NULL) ||
                   braid_recv(&y, 1, BRAID_FLOAT32, 0, c, NULL),
               0);
  braid_comm_destroy(c);
  FILE *f = fopen(log, "r");
  cr_assert_not_null(f);
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  cr_assert_has(buf, "schedule 0 (send) is not used");
  cr_assert_has(buf, "none of its 1 schedules");
  unlink(file);
  unlink(log);
}
