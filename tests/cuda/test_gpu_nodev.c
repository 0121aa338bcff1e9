/*
 * Without a GPU (CI, this build machine): braid_stream_from_cuda says
 * BRAID_ERR_UNSUPPORTED and the log says why; host buffers still classify as
 * host memory and run.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "braid.h"
#include "device/cuda_dev.h"

static void read_file(const char *path, char *buf, size_t len) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

Test(gpu_nodev, stream_from_cuda_is_unsupported_with_the_reason) {
  if (cudev_count() > 0)
    cr_skip_test("a CUDA device is present (%d): the GPU tests cover "
                 "braid_stream_from_cuda",
                 cudev_count());
  char path[] = "/tmp/braid_nodev_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  setenv("BRAID_DEBUG_FILE", path, 1);
  braid_stream *s = (braid_stream *)path; /* must be cleared */
  braid_result r = braid_stream_from_cuda(NULL, &s);
  cr_expect_eq(r, BRAID_ERR_UNSUPPORTED, "got %s", braid_result_string(r));
  cr_expect_null(s, "the stream was not cleared");
  char log[4096];
  read_file(path, log, sizeof log);
  unlink(path);
  const char *want = cudev_built() ? "no CUDA device" : "built without CUDA";
  cr_expect(strstr(log, want) != NULL, "the log does not say \"%s\": \"%s\"",
            want, log);
  cr_expect_eq(braid_stream_from_cuda(NULL, NULL), BRAID_ERR_INVALID_ARG);
}

Test(gpu_nodev, host_buffers_classify_as_host) {
  float x[4] = {1, 2, 3, 4};
  int dev = 7;
  cr_expect_eq(cudev_is_device(x, &dev), 0);
  void *h = malloc(64);
  cr_expect_eq(cudev_is_device(h, &dev), 0);
  free(h);
}
