/*
 * reduce_bench: how close the device layer's reduction kernels come to the
 * GPU's memory bandwidth.
 *
 *   reduce_bench [-b size] [-n iters] [--gpu n] [-o all]
 *
 * For every dtype x {sum, max} (-o all: every op) at `size` bytes per buffer
 * (256M by default) it times, on one CUDA stream:
 *   - cudaMemcpy device to device of `size` bytes: 2 x size bytes through
 *     memory (one read, one write) per copy; its rate B is the reference;
 *   - cudev_reduce(dst, a, b): 3 x size bytes (two reads, one write);
 *   - cudev_reduce_fwd(dst, fwd, a, b): 4 x size bytes (two reads, two
 *     writes; fwd is a second buffer on the same GPU, where the transport
 *     passes a peer's buffer mapped through IPC).
 * and prints each as GB/s (10^9 bytes/s) and as a fraction of B, as a
 * markdown table (comment lines start with '#'). The target for both
 * kernels is a fraction >= 0.90.
 *
 * Times: the best of 5 repetitions of `iters` launches between two stream
 * synchronizations (wall clock), after 2 untimed launches.
 *
 * Exit status: 0, 2 bad options or no CUDA device, 3 a CUDA call failed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_dev.h"
#include "perf.h"

enum { EXIT_USAGE = 2, EXIT_RUNTIME = 3, REPS = 5 };

typedef struct rb {
  void *stream;
  unsigned char *a, *b, *dst, *fwd;
  size_t size;
  int iters;
} rb;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *what, braid_result r) {
  fprintf(stderr, "reduce_bench: %s failed: %s: %s\n", what,
          braid_result_string(r), cudev_error());
  exit(EXIT_RUNTIME);
}

enum kind { K_COPY, K_REDUCE, K_FWD };

static braid_result launch(rb *x, enum kind k, braid_dtype dt, braid_op op) {
  size_t n = x->size / perf_dtype_size(dt);
  switch (k) {
  case K_COPY:
    return cudev_memcpy(x->dst, x->a, x->size, x->stream);
  case K_REDUCE:
    return cudev_reduce(x->dst, x->a, x->b, n, dt, op, x->stream);
  default:
    return cudev_reduce_fwd(x->dst, x->fwd, x->a, x->b, n, dt, op, x->stream);
  }
}

/* Seconds per launch: the best of REPS timed loops. */
static double time_kind(rb *x, enum kind k, braid_dtype dt, braid_op op) {
  static const char *names[] = {"cudev_memcpy", "cudev_reduce",
                                "cudev_reduce_fwd"};
  braid_result r;
  for (int i = 0; i < 2; i++)
    if ((r = launch(x, k, dt, op)) != BRAID_SUCCESS)
      fail(names[k], r);
  if ((r = cudev_stream_sync(x->stream)) != BRAID_SUCCESS)
    fail("cudev_stream_sync", r);
  double best = 1e30;
  for (int rep = 0; rep < REPS; rep++) {
    double t0 = now_s();
    for (int i = 0; i < x->iters; i++)
      if ((r = launch(x, k, dt, op)) != BRAID_SUCCESS)
        fail(names[k], r);
    if ((r = cudev_stream_sync(x->stream)) != BRAID_SUCCESS)
      fail("cudev_stream_sync", r);
    double t = (now_s() - t0) / x->iters;
    if (t < best)
      best = t;
  }
  return best;
}

static void *dev_buf(size_t n, const void *init) {
  void *p = NULL;
  braid_result r = cudev_malloc(&p, n);
  if (r != BRAID_SUCCESS)
    fail("cudev_malloc", r);
  if ((r = cudev_memcpy(p, init, n, NULL)) != BRAID_SUCCESS ||
      (r = cudev_stream_sync(NULL)) != BRAID_SUCCESS)
    fail("initialising a device buffer", r);
  return p;
}

static void usage(FILE *f) {
  fprintf(f, "usage: reduce_bench [-b size (256M)] [-n iters (20)] "
             "[--gpu n (0)] [-o all]\n");
}

int main(int argc, char **argv) {
  rb x;
  memset(&x, 0, sizeof x);
  x.size = 256u << 20;
  x.iters = 20;
  int gpu = 0, all_ops = 0;
  static const struct option longopts[] = {
      {"minbytes", required_argument, 0, 'b'},
      {"iters", required_argument, 0, 'n'},
      {"gpu", required_argument, 0, 'g'},
      {"op", required_argument, 0, 'o'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "b:n:g:o:h", longopts, NULL)) != -1) {
    char *end = NULL;
    switch (c) {
    case 'b':
      if (perf_parse_size(optarg, &x.size) || x.size < 1024) {
        fprintf(stderr,
                "reduce_bench: invalid size '%s' for -b (at least 1K)\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'n':
      x.iters = (int)strtol(optarg, &end, 10);
      if (!*optarg || *end || x.iters < 1) {
        fprintf(stderr, "reduce_bench: invalid value '%s' for -n\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'g':
      gpu = (int)strtol(optarg, &end, 10);
      if (!*optarg || *end || gpu < 0) {
        fprintf(stderr, "reduce_bench: invalid value '%s' for --gpu\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'o':
      if (strcmp(optarg, "all") != 0) {
        fprintf(stderr, "reduce_bench: -o takes only 'all'\n");
        return EXIT_USAGE;
      }
      all_ops = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "reduce_bench: unexpected argument '%s'\n", argv[optind]);
    return EXIT_USAGE;
  }
  int ndev = cudev_count();
  if (ndev < 1) {
    fprintf(stderr, "reduce_bench: no CUDA device (%s)\n",
            cudev_built() ? "the CUDA runtime finds none"
                          : "libbraid was built without CUDA");
    return EXIT_USAGE;
  }
  if (gpu >= ndev) {
    fprintf(stderr, "reduce_bench: --gpu %d: only %d CUDA device%s\n", gpu,
            ndev, ndev == 1 ? "" : "s");
    return EXIT_USAGE;
  }
  braid_result r = cudev_set_device(gpu);
  if (r != BRAID_SUCCESS)
    fail("cudev_set_device", r);
  char busid[32] = "?";
  (void)cudev_busid(gpu, busid, sizeof busid);
  if ((r = cudev_stream_create(&x.stream)) != BRAID_SUCCESS)
    fail("cudev_stream_create", r);

  /* Bytes 0x3C: a normal, finite value in every floating-point type. */
  x.size = (x.size + 255) / 256 * 256;
  unsigned char *init = malloc(x.size);
  if (!init) {
    fprintf(stderr, "reduce_bench: out of host memory (%zu bytes)\n", x.size);
    return EXIT_RUNTIME;
  }
  memset(init, 0x3C, x.size);
  x.a = dev_buf(x.size, init);
  x.b = dev_buf(x.size, init);
  x.dst = dev_buf(x.size, init);
  x.fwd = dev_buf(x.size, init);
  free(init);

  double gb = (double)x.size * 1e-9;
  double tc = time_kind(&x, K_COPY, BRAID_UINT8, BRAID_SUM);
  double bw = 2 * gb / tc;
  printf("# reduce_bench: GPU %d (%s), %zu bytes per buffer, best of %d x "
         "%d launches\n",
         gpu, busid, x.size, REPS, x.iters);
  printf("# cudaMemcpy device to device: %.1f GB/s (2 x size per copy), "
         "%.1f us\n",
         bw, tc * 1e6);
  printf("# reduce: 3 x size per call; reduce_fwd: 4 x size; fraction of "
         "the memcpy rate (target >= 0.90)\n");
  printf("| dtype | op | reduce GB/s | reduce / memcpy | reduce_fwd GB/s | "
         "reduce_fwd / memcpy |\n");
  printf("|---|---|---:|---:|---:|---:|\n");
  /* the device's kernels: int8 to float64 and the 8-bit floats, avg the
   * last op they take (int16, bool and the bitwise ops are host-only,
   * docs/CUDA.md) */
  for (int d = 0; d < BRAID_NUM_DTYPES; d++) {
    if (d > BRAID_FLOAT64 && d != BRAID_FLOAT8_E4M3 && d != BRAID_FLOAT8_E5M2)
      continue;
    for (int o = 0; o <= BRAID_AVG; o++) {
      if (!all_ops && o != BRAID_SUM && o != BRAID_MAX)
        continue;
      braid_dtype dt = (braid_dtype)d;
      braid_op op = (braid_op)o;
      double tr = time_kind(&x, K_REDUCE, dt, op);
      double tf = time_kind(&x, K_FWD, dt, op);
      double br = 3 * gb / tr, bf = 4 * gb / tf;
      printf("| %s | %s | %.1f | %.2f | %.1f | %.2f |\n", perf_dtype_str(d),
             perf_op_str(o), br, br / bw, bf, bf / bw);
    }
  }
  cudev_free(x.a);
  cudev_free(x.b);
  cudev_free(x.dst);
  cudev_free(x.fwd);
  cudev_stream_destroy(x.stream);
  return 0;
}
