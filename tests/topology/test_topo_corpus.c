/*
 * Every parser over the fuzzing seed corpus (fast): each file either loads
 * into a consistent graph or fails with a message that names the file and a
 * line. The fuzz targets (topology/fuzz/) run the same entry points.
 */
#include "topo_test_util.h"

#include <dirent.h>

typedef braid_result (*parse_fn)(const char *, size_t, const char *,
                                 topo_graph **);

static int run_dir(const char *sub, parse_fn fn, int graphs, int *ok,
                   int *bad) {
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/%s", BRAID_FUZZ_CORPUS, sub);
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "seed corpus %s", dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    braid_result r;
    if (graphs) {
      topo_nccl_graphs *gs = NULL;
      r = topo_parse_nccl_graphs(buf, len, path, &gs);
      topo_nccl_graphs_free(gs);
    } else {
      topo_graph *g = NULL;
      r = fn(buf, len, path, &g);
      if (r == BRAID_SUCCESS) {
        cr_assert_eq(topo_graph_check(g), BRAID_SUCCESS, "%s: %s", path,
                     err_msg());
        cr_assert_eq(topo_paths_all(g), BRAID_SUCCESS);
        /* writing never fails on what was read */
        char *out = NULL;
        size_t on = 0;
        FILE *m = open_memstream(&out, &on);
        cr_assert_eq(topo_write_nccl(g, m), BRAID_SUCCESS);
        cr_assert_eq(topo_write_braid(g, m), BRAID_SUCCESS);
        cr_assert_eq(topo_write_hwloc(g, m), BRAID_SUCCESS);
        cr_assert_eq(topo_write_dot(g, m), BRAID_SUCCESS);
        fclose(m);
        free(out);
      }
      topo_graph_free(g);
    }
    if (r == BRAID_SUCCESS)
      (*ok)++;
    else {
      (*bad)++;
      cr_assert(strncmp(err_msg(), path, strlen(path)) == 0 &&
                    err_msg()[strlen(path)] == ':',
                "the error names the file and line: '%s'", err_msg());
    }
    n++;
  }
  closedir(d);
  return n;
}

Test(topo_corpus, nccl) {
  int ok = 0, bad = 0;
  cr_assert_gt(run_dir("nccl", topo_parse_nccl, 0, &ok, &bad), 0);
  cr_assert_gt(ok, 0);
  cr_assert_gt(bad, 0, "the corpus holds malformed seeds too");
}

Test(topo_corpus, hwloc) {
  int ok = 0, bad = 0;
  cr_assert_gt(run_dir("hwloc", topo_parse_hwloc, 0, &ok, &bad), 0);
  cr_assert_gt(ok, 0);
}

Test(topo_corpus, braid) {
  int ok = 0, bad = 0;
  cr_assert_gt(run_dir("braid", topo_parse_braid, 0, &ok, &bad), 0);
  cr_assert_gt(ok, 0);
  cr_assert_gt(bad, 0);
}

Test(topo_corpus, nccl_graphs) {
  int ok = 0, bad = 0;
  cr_assert_gt(run_dir("graphs", NULL, 1, &ok, &bad), 0);
  cr_assert_gt(ok, 0);
}

Test(topo_corpus, shipped_models_and_fixtures) {
  const char *const *n = topo_model_names();
  for (int i = 0; n[i]; i++) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.topo", BRAID_MACHINES_DIR, n[i]);
    topo_graph_free(load_ok(p));
  }
  topo_graph_free(load_ok(BRAID_TOPO_TEST_DATA "/hwloc-nvswitch.xml"));
  topo_graph_free(load_ok(BRAID_TOPO_TEST_DATA "/hwloc-v100-pair.xml"));
}
