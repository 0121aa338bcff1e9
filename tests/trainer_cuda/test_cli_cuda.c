/*
 * braid-trainer-cuda end to end. Without a GPU (or with every device hidden
 * by CUDA_VISIBLE_DEVICES=-1) a rank exits 2 with "no CUDA device: " and
 * the reason. On a GPU: one epoch on a subset of Fashion-MNIST with 2 ranks
 * under braidrun reaches test accuracy > 0.7 with identical replicas.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "idx.h"
#include "lenet_cuda.h"

#ifndef TRAINER_CUDA_PATH
#error TRAINER_CUDA_PATH must name the braid-trainer-cuda binary
#endif
#ifndef BRAIDRUN_PATH
#define BRAIDRUN_PATH ""
#endif

#define DATA "/usr/share/datasets/fashion-mnist"
enum { NTRAIN = 20000, NTEST = 2000 };

static char dir[256];
static char out[1 << 17];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/braid-trainer-cuda-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(trainer_cuda_cli, .init = make_dir, .fini = remove_dir);

/* Criterion runs no fini after a skip: the directory goes first. */
#define skip(...)                                                              \
  do {                                                                         \
    remove_dir();                                                              \
    cr_skip_test(__VA_ARGS__);                                                 \
  } while (0)

/* Runs a shell command under timeout(1); stdout and stderr land in out;
 * returns the exit status. */
static int run(const char *fmt, ...) {
  char cmd[2048], full[2400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "timeout 150 %s > %s/out.txt 2>&1", cmd, dir);
  int st = system(full);
  char path[300];
  snprintf(path, sizeof path, "%s/out.txt", dir);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[n] = 0;
  if (f)
    fclose(f);
  cr_log_info("$ %s\n%s", cmd, out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

Test(trainer_cuda_cli, without_gpu_every_rank_exits_2_with_the_reason) {
  /* On a GPU machine the devices are hidden from the program. */
  const char *hide = lenet_cuda_devices() > 0 ? "CUDA_VISIBLE_DEVICES=-1 " : "";
  int rc = run("env %s%s --epochs 1", hide, TRAINER_CUDA_PATH);
  cr_assert_eq(rc, 2, "exit status %d:\n%s", rc, out);
  cr_assert(strstr(out, "braid-trainer-cuda: no CUDA device: ") != NULL, "%s",
            out);
  /* the reason follows the colon */
  const char *p = strstr(out, "no CUDA device: ") + strlen("no CUDA device: ");
  cr_assert(*p && *p != '\n', "no reason given:\n%s", out);
  if (!*BRAIDRUN_PATH)
    return;
  rc = run("env %s%s -n 2 %s --epochs 1", hide, BRAIDRUN_PATH,
           TRAINER_CUDA_PATH);
  /* braidrun stops the job when the first rank exits */
  cr_assert_neq(rc, 0, "%s", out);
  cr_assert_geq(count(out, "] braid-trainer-cuda: no CUDA device: "), 1, "%s",
                out);
  cr_assert(strstr(out, "exited with status 2") != NULL, "%s", out);
}

/* ---- a data subset ----------------------------------------------------- */

static void put32(FILE *f, uint32_t v) {
  uint32_t be = htonl(v);
  cr_assert_eq(fwrite(&be, 4, 1, f), 1);
}

/* The first n images and labels of ds as plain IDX files split-*. */
static void write_subset(const dataset *ds, const char *split, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, split);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  put32(f, 0x803);
  put32(f, (uint32_t)n);
  put32(f, (uint32_t)ds->rows);
  put32(f, (uint32_t)ds->cols);
  const size_t px = (size_t)ds->rows * (size_t)ds->cols;
  cr_assert_eq(fwrite(ds->images, px, n, f), n);
  cr_assert_eq(fclose(f), 0);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split);
  f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  put32(f, 0x801);
  put32(f, (uint32_t)n);
  cr_assert_eq(fwrite(ds->labels, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

static void need_gpu_and_data(void) {
  if (lenet_cuda_devices() == 0)
    skip("no CUDA device: cudaGetDeviceCount finds none on "
         "this machine; braid-trainer-cuda is trained only on a GPU");
  if (!*BRAIDRUN_PATH)
    skip("braidrun is not built");
  if (access(DATA, R_OK) != 0)
    skip("no Fashion-MNIST in " DATA " (Debian package dataset-fashion-mnist)");
}

Test(trainer_cuda_cli, two_ranks_one_epoch_on_a_subset, .timeout = 240) {
  need_gpu_and_data();
  char err[512];
  dataset train = {0}, test = {0};
  cr_assert_eq(dataset_load_fmnist(DATA, "train", &train, err, sizeof err), 0,
               "%s", err);
  cr_assert_eq(dataset_load_fmnist(DATA, "t10k", &test, err, sizeof err), 0,
               "%s", err);
  cr_assert_geq(train.n, NTRAIN);
  cr_assert_geq(test.n, NTEST);
  write_subset(&train, "train", NTRAIN);
  write_subset(&test, "t10k", NTEST);
  dataset_free(&train);
  dataset_free(&test);

  int rc = run("%s -n 2 %s --epochs 1 --batch 50 --data %s", BRAIDRUN_PATH,
               TRAINER_CUDA_PATH, dir);
  cr_assert_eq(rc, 0, "exit status %d:\n%s", rc, out);
  cr_assert(strstr(out, "20000 training, 2000 test images") != NULL, "%s", out);
  cr_assert(strstr(out, "replicas identical on 2 ranks") != NULL, "%s", out);
  const char *p = strstr(out, "final test accuracy ");
  cr_assert_not_null(p, "%s", out);
  double acc = 0.0;
  cr_assert_eq(sscanf(p, "final test accuracy %lf", &acc), 1, "%s", out);
  cr_assert_gt(acc, 0.7, "test accuracy %.4f after one epoch:\n%s", acc, out);
  cr_assert_leq(acc, 1.0);
}
