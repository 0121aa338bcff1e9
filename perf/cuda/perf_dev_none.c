/*
 * braid-perf's device buffers in a build without CUDA: every call says so.
 * perf_parse_args refuses -G 1 first (perf_dev_built() is 0).
 */
#include <stdio.h>

#include "perf_dev.h"

static int none(char *msg) {
  snprintf(msg, PERF_DEV_MSG,
           "braid-perf was built without CUDA (configure with "
           "-DBRAID_CUDA=ON)");
  return -1;
}

int perf_dev_built(void) { return 0; }
int perf_dev_count(char *msg) { return none(msg); }
int perf_dev_select(int device, char *desc, size_t len, char *msg) {
  (void)device;
  if (len)
    desc[0] = 0;
  return none(msg);
}
int perf_dev_alloc(void **p, size_t n, char *msg) {
  (void)n;
  *p = NULL;
  return none(msg);
}
void perf_dev_free(void *p) { (void)p; }
int perf_dev_to_host(void *dst, const void *src, size_t n, char *msg) {
  (void)dst, (void)src, (void)n;
  return none(msg);
}
int perf_dev_from_host(void *dst, const void *src, size_t n, char *msg) {
  (void)dst, (void)src, (void)n;
  return none(msg);
}
int perf_dev_fill(void *p, int byte, size_t n, char *msg) {
  (void)p, (void)byte, (void)n;
  return none(msg);
}
int perf_dev_stream_create(void **stream, char *msg) {
  *stream = NULL;
  return none(msg);
}
int perf_dev_stream_sync(void *stream, char *msg) {
  (void)stream;
  return none(msg);
}
void perf_dev_stream_destroy(void *stream) { (void)stream; }
int perf_dev_sync(char *msg) { return none(msg); }
