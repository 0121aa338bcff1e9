/*
 * The main of every Criterion program of the suite (linked into each by
 * tests/CMakeLists.txt). Criterion's own main exits 0 when a test skips,
 * which ctest reports as a pass; this one prints each skip with its reason
 * ("SKIP suite::test: why") and exits 77 when a test skipped and none
 * failed, which ctest reports as a skip (SKIP_RETURN_CODE, set on every
 * test of the suite). A failure still exits 1 whatever else skipped, and
 * so does a run in which no test ran.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

/* tests that ran, and those of them that skipped (Criterion's own count
 * of skips also holds the tests that --filter left out) */
static size_t ran, skipped;

ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
  ran++;
  if (stats->test_status != CR_STATUS_SKIPPED)
    return;
  skipped++;
  fprintf(stderr, "SKIP %s::%s: %s\n", stats->test->category, stats->test->name,
          stats->message && *stats->message ? stats->message
                                            : "(no reason given)");
}

/* Visible: Criterion's test workers find main in the dynamic symbol table
 * to run one test in its place, and the project builds with hidden
 * visibility by default. */
__attribute__((visibility("default"))) int main(int argc, char *argv[]) {
  struct criterion_test_set *tests = criterion_initialize();
  int rc = 0;
  int run = criterion_handle_args(argc, argv, true);
  if (run)
    rc = criterion_run_all_tests(tests) ? 0 : 1;
  criterion_finalize(tests);
  if (run && ran == 0) {
    fprintf(stderr, "FAIL: no test ran (a --filter that matches none?)\n");
    return 1;
  }
  if (rc == 0 && skipped > 0) {
    fprintf(stderr, "SKIP: %zu test%s skipped (the reasons above); exit 77\n",
            skipped, skipped == 1 ? "" : "s");
    return 77;
  }
  return rc;
}
