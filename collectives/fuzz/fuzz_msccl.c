/* libFuzzer target: the MSCCL XML importer (collectives/msccl.c and its XML
 * reader). Accepted input must be a verified schedule that writes as JSON
 * and reads back; rejected input must leave no schedule and name the file
 * in its message. */
#include "collectives/msccl.h"
#include "collectives/sched_file.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sched *s = NULL;
  if (msccl_import((const char *)data, size, "fuzz", &s, NULL) !=
      BRAID_SUCCESS) {
    if (s || strncmp(err_msg(), "fuzz:", 5) != 0) {
      fprintf(stderr, "bad error contract: s=%p err='%s'\n", (void *)s,
              err_msg());
      abort();
    }
    return 0;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f || sched_file_write(s, f)) {
    fprintf(stderr, "writer failed\n");
    abort();
  }
  fclose(f);
  sched **b = NULL;
  int m = 0;
  if (sched_file_parse(buf, len, "fuzz-json", &b, &m) != BRAID_SUCCESS ||
      m != 1) {
    fprintf(stderr, "an imported schedule does not read back: %s\n", err_msg());
    abort();
  }
  sched_free(b[0]);
  free(b);
  free(buf);
  sched_free(s);
  return 0;
}
