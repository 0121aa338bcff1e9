/* libFuzzer target: the schedule file parser (collectives/sched_file.c).
 * Accepted input must verify, write and read back to the same text; rejected
 * input must leave no schedules and name the file in its message. */
#include "collectives/sched_file.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *text_of(sched **s, int n, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (!f || sched_file_write_all(s, n, f)) {
    fprintf(stderr, "writer failed\n");
    abort();
  }
  fclose(f);
  return buf;
}

static void free_all(sched **s, int n) {
  for (int i = 0; i < n; i++)
    sched_free(s[i]);
  free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sched **s = NULL;
  int n = -1;
  if (sched_file_parse((const char *)data, size, "fuzz", &s, &n) !=
      BRAID_SUCCESS) {
    if (s || n != 0 || strncmp(err_msg(), "fuzz:", 5) != 0) {
      fprintf(stderr, "bad error contract: s=%p n=%d err='%s'\n", (void *)s, n,
              err_msg());
      abort();
    }
    return 0;
  }
  size_t l1, l2;
  char *t1 = text_of(s, n, &l1);
  sched **b = NULL;
  int m = 0;
  if (sched_file_parse(t1, l1, "fuzz-rewritten", &b, &m) != BRAID_SUCCESS ||
      m != n) {
    fprintf(stderr, "written schedules do not read back: %s\n", err_msg());
    abort();
  }
  char *t2 = text_of(b, m, &l2);
  if (l1 != l2 || memcmp(t1, t2, l1) != 0) {
    fprintf(stderr, "round trip changed the text\n");
    abort();
  }
  free(t1);
  free(t2);
  free_all(s, n);
  free_all(b, m);
  return 0;
}
