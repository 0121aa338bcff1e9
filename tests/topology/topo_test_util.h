/* Helpers shared by the topology tests. */
#ifndef BRAID_TESTS_TOPO_TEST_UTIL_H
#define BRAID_TESTS_TOPO_TEST_UTIL_H

#include "src/log.h"
#include "topology/topo.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Skips loudly when ../shared/topologies/azure is not beside the checkout. */
static inline const char *azure_file(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", BRAID_AZURE_DIR, name);
  if (access(buf, R_OK) != 0) {
    fprintf(stderr,
            "SKIP: %s is missing: clone shared/ beside the repository to "
            "run the Azure topology tests\n",
            buf);
    cr_skip_test("%s is missing (shared/ not beside the repository)", buf);
  }
  return buf;
}

static inline topo_graph *load_ok(const char *path) {
  topo_graph *g = NULL;
  braid_result r = topo_load(path, TOPO_FMT_AUTO, &g);
  cr_assert_eq(r, BRAID_SUCCESS, "%s: %s", path, err_msg());
  cr_assert_eq(topo_graph_check(g), BRAID_SUCCESS, "%s", err_msg());
  return g;
}

/* Writes g in a format into a malloc'd string. */
static inline char *write_str(const topo_graph *g, topo_format fmt,
                              size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  cr_assert_not_null(f);
  braid_result r = fmt == TOPO_FMT_NCCL    ? topo_write_nccl(g, f)
                   : fmt == TOPO_FMT_HWLOC ? topo_write_hwloc(g, f)
                                           : topo_write_braid(g, f);
  fclose(f);
  cr_assert_eq(r, BRAID_SUCCESS);
  if (len)
    *len = n;
  return buf;
}

/* Parses text that must fail; returns the message for inspection (the
 * thread's, until the next failure). */
static inline const char *parse_fails(topo_format fmt, const char *text,
                                      const char *fname) {
  topo_graph *g = NULL;
  err_clear();
  braid_result r = topo_parse(text, strlen(text), fname, fmt, &g);
  cr_assert_neq(r, BRAID_SUCCESS, "parsing should fail:\n%s", text);
  cr_assert_null(g);
  cr_assert(strlen(err_msg()) > 0, "an error message is given");
  return err_msg();
}

#define cr_assert_has(s, sub)                                                  \
  cr_assert(strstr((s), (sub)) != NULL, "'%s' should contain '%s'", (s), (sub))

#endif
