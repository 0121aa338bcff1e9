/*
 * braid-trainer end to end: flag and data errors, a short run as one
 * process, and the same run on 2 ranks under braidrun and under mpirun
 * giving the one-process parameters (|p2 - p1| <= 1e-6 + 1e-4 |p1|) with
 * identical replicas.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TRAINER_PATH
#error TRAINER_PATH must name the braid-trainer binary
#endif
#ifndef BRAIDRUN_PATH
#define BRAIDRUN_PATH ""
#endif

#define DATA "/usr/share/datasets/fashion-mnist"

static char dir[256];
static char out[65536];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/braid-trainer-cli-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(trainer_cli, .init = make_dir, .fini = remove_dir);

/* Criterion runs no fini after a skip: the directory goes first. */
#define skip(...)                                                              \
  do {                                                                         \
    remove_dir();                                                              \
    cr_skip_test(__VA_ARGS__);                                                 \
  } while (0)

/* Runs a shell command (bounded by timeout(1)); stdout and stderr land in
 * out; returns the exit status. */
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

static float *load(const char *name, size_t *n) {
  char path[300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s was not written", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *p = malloc((size_t)len);
  cr_assert_eq(fread(p, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len / sizeof(float);
  return p;
}

static void need_data(void) {
  if (access(DATA "/train-images-idx3-ubyte.gz", R_OK) != 0 &&
      access(DATA "/train-images-idx3-ubyte", R_OK) != 0)
    skip("Fashion-MNIST not in " DATA
         " (Debian package dataset-fashion-mnist)");
}

Test(trainer_cli, bad_flags) {
  cr_expect_eq(run("%s --batch 0", TRAINER_PATH), 2);
  cr_expect_not_null(strstr(out, "--batch needs an integer"), "%s", out);
  cr_expect_eq(run("%s --frobnicate", TRAINER_PATH), 2);
  cr_expect_not_null(strstr(out, "unknown option --frobnicate"), "%s", out);
  cr_expect_eq(run("%s --help", TRAINER_PATH), 0);
  cr_expect_not_null(strstr(out, "--bucket-mb"), "%s", out);
}

Test(trainer_cli, missing_data_names_the_file) {
  cr_expect_eq(run("%s --data %s/none --steps 1", TRAINER_PATH, dir), 1);
  cr_expect_not_null(strstr(out, "/none/train-images-idx3-ubyte"), "%s", out);
  cr_expect_not_null(strstr(out, "missing"), "%s", out);
}

/* A path that cannot take the parameters stops every rank before the first
 * step, not after the whole run. */
Test(trainer_cli, save_params_path_checked_before_training, .timeout = 200) {
  need_data();
  cr_expect_eq(
      run("%s --steps 3 --no-eval --save-params %s/none/p", TRAINER_PATH, dir),
      1);
  cr_expect_not_null(strstr(out, "--save-params"), "%s", out);
  cr_expect_not_null(strstr(out, "/none/p: cannot create a file there"), "%s",
                     out);
  cr_expect_null(strstr(out, "epoch "), "trained first:\n%s", out);
  cr_expect_eq(
      run("%s --steps 3 --no-eval --save-params %s", TRAINER_PATH, dir), 1);
  cr_expect_not_null(strstr(out, "is a directory"), "%s", out);
  cr_expect_null(strstr(out, "epoch "), "trained first:\n%s", out);
  if (!BRAIDRUN_PATH[0] || access(BRAIDRUN_PATH, X_OK) != 0)
    skip("braidrun is not built (tools/braidrun): the 2-rank half not run");
  cr_expect_eq(run("%s -n 2 %s --steps 3 --no-eval --save-params %s/none/p",
                   BRAIDRUN_PATH, TRAINER_PATH, dir),
               1);
  cr_expect_not_null(strstr(out, "[1] braid-trainer: rank 1: another rank "
                                 "cannot start"),
                     "%s", out);
  cr_expect_null(strstr(out, "epoch "), "trained first:\n%s", out);
}

/* The parameters replace an earlier file whole, through a file beside it
 * that does not stay. */
Test(trainer_cli, save_params_replaces_the_file, .timeout = 200) {
  need_data();
  char path[300];
  snprintf(path, sizeof path, "%s/p", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("an earlier file", f);
  fclose(f);
  cr_assert_eq(run("%s --steps 1 --no-eval --batch 64 --save-params %s",
                   TRAINER_PATH, path),
               0, "%s", out);
  size_t n;
  float *p = load("p", &n);
  cr_expect_eq(n, 129068u, "%zu parameters written", n);
  cr_expect(isfinite(p[0]) && isfinite(p[n - 1]));
  free(p);
  cr_expect_eq(run("ls %s", dir), 0);
  cr_expect_null(strstr(out, ".tmp."), "a file left beside it:\n%s", out);
}

static float *reference(size_t *n) {
  cr_assert_eq(
      run("%s --steps 3 --no-eval --save-params %s/p1", TRAINER_PATH, dir), 0,
      "%s", out);
  cr_expect_not_null(strstr(out, "1 rank (single)"), "%s", out);
  cr_expect_not_null(strstr(out, "replicas identical on 1 rank"), "%s", out);
  return load("p1", n);
}

static void compare_with(const char *name, const float *ref, size_t n) {
  size_t m;
  float *p = load(name, &m);
  cr_assert_eq(m, n);
  size_t bad = 0, first_bad = 0;
  double max_abs = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)p[i] - ref[i]);
    if (d > max_abs)
      max_abs = d;
    if (d > 1e-6 + 1e-4 * fabs(ref[i]) && bad++ == 0)
      first_bad = i;
  }
  cr_log_info("%s: max |difference| from one process %.3g", name, max_abs);
  cr_expect_eq(bad, 0u, "%s: %zu parameters off; first %zu: %.9g vs %.9g", name,
               bad, first_bad, p[first_bad], ref[first_bad]);
  free(p);
}

Test(trainer_cli, single_process_short_run, .timeout = 200) {
  need_data();
  cr_assert_eq(run("%s --steps 6 --epochs 1 --batch 128", TRAINER_PATH), 0,
               "%s", out);
  cr_expect_not_null(strstr(out, "epoch  1/1"), "%s", out);
  cr_expect_not_null(strstr(out, "stopped by --steps"), "%s", out);
  double acc = -1;
  const char *p = strstr(out, "final test accuracy ");
  cr_assert_not_null(p, "%s", out);
  sscanf(p, "final test accuracy %lf", &acc);
  /* six steps already beat chance (0.1) by far */
  cr_expect(acc > 0.3, "test accuracy %g after 6 steps", acc);
}

Test(trainer_cli, braidrun_two_ranks_match_one, .timeout = 250) {
  need_data();
  if (!BRAIDRUN_PATH[0] || access(BRAIDRUN_PATH, X_OK) != 0)
    skip("braidrun is not built (tools/braidrun)");
  size_t n;
  float *ref = reference(&n);
  cr_assert_eq(run("%s -n 2 %s --steps 3 --no-eval --save-params %s/p2",
                   BRAIDRUN_PATH, TRAINER_PATH, dir),
               0, "%s", out);
  cr_expect_not_null(strstr(out, "2 ranks (braidrun)"), "%s", out);
  cr_expect_not_null(strstr(out, "replicas identical on 2 ranks"), "%s", out);
  compare_with("p2", ref, n);
  free(ref);
}

Test(trainer_cli, mpirun_two_ranks_match_one, .timeout = 250) {
  need_data();
  if (system("command -v mpirun > /dev/null 2>&1") != 0)
    skip("mpirun is not installed (Debian package openmpi-bin)");
  size_t n;
  float *ref = reference(&n);
  int rc = run("mpirun --allow-run-as-root --oversubscribe -n 2 %s --steps 3 "
               "--no-eval --save-params %s/p2",
               TRAINER_PATH, dir);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect_not_null(strstr(out, "2 ranks (openmpi)"), "%s", out);
  cr_expect_not_null(strstr(out, "replicas identical on 2 ranks"), "%s", out);
  compare_with("p2", ref, n);
  free(ref);
}
