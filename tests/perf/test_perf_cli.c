/*
 * braid-perf as a user runs it: bad options exit 2 with a clear message, and
 * a quick sweep of every collective, dtype and op with -c 1 under braidrun
 * (1 and 2 ranks, shm and tcp) finds no wrong element.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifndef BRAID_PERF_EXE
#error "BRAID_PERF_EXE must name the braid-perf binary"
#endif

typedef struct outcome {
  int status; /* exit status, or 128 + signal, or -1 on timeout */
  char *out;  /* stdout and stderr together */
} outcome;

/* Runs argv with extra environment entries, capturing its output, killing it
 * after timeout_s. */
static outcome run(char *const *argv, char *const *extra_env, int timeout_s) {
  outcome oc = {-1, NULL};
  int p[2];
  cr_assert_eq(pipe(p), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  size_t ne = 0, nx = 0;
  while (environ[ne])
    ne++;
  while (extra_env && extra_env[nx])
    nx++;
  char **env = calloc(ne + nx + 1, sizeof *env);
  for (size_t i = 0; i < nx; i++)
    env[i] = extra_env[i];
  for (size_t i = 0; i < ne; i++)
    env[nx + i] = environ[i];
  pid_t pid;
  int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  close(p[1]);
  cr_assert_eq(e, 0, "cannot start %s: %s", argv[0], strerror(e));
  size_t len = 0, cap = 4096;
  oc.out = malloc(cap);
  time_t end = time(NULL) + timeout_s;
  for (;;) {
    struct pollfd pf = {p[0], POLLIN, 0};
    int left = (int)(end - time(NULL));
    if (left <= 0) {
      /* braidrun forwards SIGTERM to its ranks; SIGKILL if that fails. */
      kill(pid, SIGTERM);
      for (int i = 0; i < 50 && waitpid(pid, NULL, WNOHANG) == 0; i++)
        usleep(100000);
      kill(pid, SIGKILL);
      break;
    }
    if (poll(&pf, 1, 1000) <= 0)
      continue;
    if (len + 1024 > cap)
      oc.out = realloc(oc.out, cap *= 2);
    ssize_t k = read(p[0], oc.out + len, cap - len - 1);
    if (k <= 0)
      break;
    len += (size_t)k;
  }
  oc.out[len] = 0;
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (time(NULL) >= end)
    oc.status = -1;
  else if (WIFEXITED(st))
    oc.status = WEXITSTATUS(st);
  else
    oc.status = 128 + WTERMSIG(st);
  return oc;
}

static void expect_usage_error(const char *what, char *const *argv) {
  outcome oc = run(argv, NULL, 30);
  cr_expect_eq(oc.status, 2, "%s: exit status %d, output:\n%s", argv[2],
               oc.status, oc.out);
  cr_expect(strstr(oc.out, what) != NULL, "message lacks '%s':\n%s", what,
            oc.out);
  free(oc.out);
}

Test(perf_cli, bad_options_exit_2_with_a_message) {
  char *exe = BRAID_PERF_EXE;
  expect_usage_error("invalid size '1X'",
                     (char *const[]){exe, "all_reduce", "-b", "1X", NULL});
  expect_usage_error("unknown datatype 'floaty'",
                     (char *const[]){exe, "all_reduce", "-d", "floaty", NULL});
  expect_usage_error("unknown reduction op 'median'",
                     (char *const[]){exe, "all_reduce", "-o", "median", NULL});
  expect_usage_error("unknown collective 'all_sum'",
                     (char *const[]){exe, "all_sum", NULL});
  /* device buffers: "not built with CUDA", or in a CUDA build with the
   * GPUs hidden, "no CUDA device" */
  outcome oc = run((char *const[]){exe, "all_reduce", "-G", "1", NULL},
                   (char *const[]){"CUDA_VISIBLE_DEVICES=", NULL}, 30);
  cr_expect_eq(oc.status, 2, "-G 1: exit %d:\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "not built with CUDA") ||
                strstr(oc.out, "no CUDA device"),
            "-G 1:\n%s", oc.out);
  free(oc.out);
}

Test(perf_cli, nccl_tests_names_and_help) {
  /* all_reduce_perf is a link to braid-perf next to it. */
  char path[4096];
  snprintf(path, sizeof path, "%s", BRAID_PERF_EXE);
  char *slash = strrchr(path, '/');
  cr_assert(slash);
  snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path),
           "all_reduce_perf");
  cr_assert_eq(access(path, X_OK), 0, "%s missing", path);
  outcome oc = run((char *const[]){path, "-b", "1Z", NULL}, NULL, 30);
  cr_expect_eq(oc.status, 2, "%s", oc.out);
  cr_expect(strstr(oc.out, "invalid size '1Z'"), "%s", oc.out);
  free(oc.out);
  oc = run((char *const[]){BRAID_PERF_EXE, "--help", NULL}, NULL, 30);
  cr_expect_eq(oc.status, 0, "%s", oc.out);
  cr_expect(strstr(oc.out, "-b,--minbytes"), "%s", oc.out);
  cr_expect(strstr(oc.out, "<collective|all> [options]"), "%s", oc.out);
  free(oc.out);
  /* under a link's name the collective is not an argument */
  oc = run((char *const[]){path, "--help", NULL}, NULL, 30);
  cr_expect_eq(oc.status, 0, "%s", oc.out);
  cr_expect(strstr(oc.out, "all_reduce_perf [options]"), "%s", oc.out);
  cr_expect(strstr(oc.out, "<collective|all>") == NULL, "%s", oc.out);
  free(oc.out);
}

/* Started alone, braid-perf runs one rank (as nccl-tests does without a
 * launcher), and any step factor from 2 on steps the sizes. */
Test(perf_cli, one_rank_without_a_launcher_any_step_factor, .timeout = 60) {
  char *const argv[] = {BRAID_PERF_EXE, "all_reduce", "-b",      "8",  "-e",
                        "64M",          "-f",         "8388608", "-n", "1",
                        "-w",           "0",          NULL};
  outcome oc = run(argv, NULL, 50);
  cr_expect_eq(oc.status, 0, "exit %d:\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "# Out of bounds values : 0 OK"), "%s", oc.out);
  /* exactly the rows 8 and 8 * 8388608 bytes (64 MiB), nothing between */
  cr_expect(strstr(oc.out, "\n           8 "), "no 8-byte row:\n%s", oc.out);
  cr_expect(strstr(oc.out, "\n    67108864 "), "no 64 MiB row:\n%s", oc.out);
  int rows = 0;
  for (const char *q = oc.out; (q = strstr(q, " float32 ")) != NULL; q++)
    rows++;
  cr_expect_eq(rows, 2, "%d rows, expected 2:\n%s", rows, oc.out);
  free(oc.out);
}

/* One of a launcher's rank and size variables without the other is the
 * error docs/LAUNCH.md describes, naming the variable, not a job of one
 * rank. */
Test(perf_cli, rank_without_size_is_an_error, .timeout = 120) {
  static const char *const cases[][3] = {
      {"RANK=1", "MASTER_ADDR=127.0.0.1", "RANK is set but WORLD_SIZE is not"},
      {"BRAID_RANK=1", NULL, "BRAID_RANK is set but BRAID_SIZE is not"},
      {"OMPI_COMM_WORLD_RANK=1", NULL,
       "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"},
      {"SLURM_PROCID=1", NULL, "SLURM_PROCID is set but SLURM_NTASKS is not"},
      {"PMI_RANK=1", NULL, "PMI_RANK is set but PMI_SIZE is not"},
      {"WORLD_SIZE=2", NULL, "WORLD_SIZE is set but RANK is not"},
  };
  char *const argv[] = {BRAID_PERF_EXE, "all_reduce", "-b", "8", "-e", "8",
                        "-n",           "1",          "-w", "0", NULL};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *const env[] = {(char *)cases[i][0], (char *)cases[i][1],
                         cases[i][1] ? "MASTER_PORT=29811" : NULL, NULL};
    outcome oc = run(argv, env, 30);
    cr_expect_eq(oc.status, 3, "%s: exit %d:\n%s", cases[i][0], oc.status,
                 oc.out);
    cr_expect(strstr(oc.out, cases[i][2]), "%s: no '%s':\n%s", cases[i][0],
              cases[i][2], oc.out);
    cr_expect(strstr(oc.out, "Out of bounds") == NULL,
              "%s: ran as one rank:\n%s", cases[i][0], oc.out);
    free(oc.out);
  }
}

/* A (dtype, op) pair braid refuses: nothing to run is a usage error naming
 * the pair and why; pairs refused beside others that run are named in a
 * note. */
Test(perf_cli, refused_pairs, .timeout = 120) {
  char *const band[] = {BRAID_PERF_EXE, "all_reduce", "-b", "8",    "-e", "64",
                        "-f",           "2",          "-n", "1",    "-w", "0",
                        "-d",           "float32",    "-o", "band", NULL};
  outcome oc = run(band, NULL, 30);
  cr_expect_eq(oc.status, 2, "float32 band: exit %d:\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "nothing to run: braid refuses every requested "
                           "(dtype, op) pair: float32 band (bitwise ops take "
                           "integer dtypes and bool)"),
            "%s", oc.out);
  cr_expect(strstr(oc.out, "0 OK") == NULL, "%s", oc.out);
  free(oc.out);
  char *const avg[] = {BRAID_PERF_EXE, "reduce", "-b", "8", "-e", "8",
                       "-n",           "1",      "-w", "0", "-d", "bool",
                       "-o",           "avg",    NULL};
  oc = run(avg, NULL, 30);
  cr_expect_eq(oc.status, 2, "bool avg: exit %d:\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "bool avg (avg is not defined on bool)"), "%s",
            oc.out);
  free(oc.out);
  char *const all[] = {BRAID_PERF_EXE, "all_reduce", "-b", "8", "-e", "8",
                       "-n",           "1",          "-w", "0", "-d", "all",
                       "-o",           "all",        NULL};
  oc = run(all, NULL, 100);
  cr_expect_eq(oc.status, 0, "-d all -o all: exit %d:\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "# note: skipped, braid refuses them: float16 band"),
            "%s", oc.out);
  cr_expect(strstr(oc.out, "bool avg (avg is not defined on bool)"), "%s",
            oc.out);
  cr_expect(strstr(oc.out, "# Out of bounds values : 0 OK"), "%s", oc.out);
  free(oc.out);
}

#ifdef BRAIDRUN_EXE
static void sweep_sizes(const char *nranks, const char *transport,
                        const char *dtypes, const char *minb,
                        const char *maxb) {
  char tenv[64];
  snprintf(tenv, sizeof tenv, "BRAID_TRANSPORT=%s", transport);
  char *const env[] = {tenv, "BRAID_TIMEOUT=30", NULL};
  /* clang-format off */
  char *const argv[] = {
      BRAIDRUN_EXE, "-n", (char *)nranks, BRAID_PERF_EXE, "all",
      "-d", (char *)dtypes, "-o", "all", "-r", "all",
      "-b", (char *)minb, "-e", (char *)maxb, "-f", "8",
      "-n", "2", "-w", "1", "-c", "1", "-T", "30", NULL};
  /* clang-format on */
  outcome oc = run(argv, env, 120);
  cr_expect_eq(oc.status, 0, "%s ranks over %s: exit %d\n%s", nranks, transport,
               oc.status, oc.out);
  cr_expect(strstr(oc.out, "# Out of bounds values : 0 OK"),
            "%s ranks over %s: wrong elements or no footer:\n%s", nranks,
            transport, oc.out);
  /* Every collective printed rows. */
  static const char *colls[] = {
      "all_reduce", "all_gather", "broadcast", "reduce",   "reduce_scatter",
      "gather",     "scatter",    "alltoall",  "sendrecv", "alltoallv"};
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    char h[64];
    snprintf(h, sizeof h, "# collective %s\n", colls[i]);
    cr_expect(strstr(oc.out, h), "no rows for %s", colls[i]);
  }
  free(oc.out);
}

static void sweep(const char *nranks, const char *transport,
                  const char *dtypes) {
  sweep_sizes(nranks, transport, dtypes, "8", "4K");
}

/* Pre-multiplied sums on 3 ranks (scalars 1, 2, 1) under nccl-tests'
 * name, every dtype, the reducing collectives, every root: exact. */
Test(perf_cli, premulsum_3_ranks, .timeout = 150) {
  char *const env[] = {"BRAID_TIMEOUT=30", NULL};
  /* clang-format off */
  char *const argv[] = {
      BRAIDRUN_EXE, "-n", "3", BRAID_PERF_EXE, "all", "-d", "all",
      "-o", "mulsum", "-r", "all", "-b", "8", "-e", "64K", "-f", "64",
      "-n", "1", "-w", "1", "-c", "1", "-T", "30", NULL};
  /* clang-format on */
  outcome oc = run(argv, env, 120);
  cr_expect_eq(oc.status, 0, "exit %d\n%s", oc.status, oc.out);
  cr_expect(strstr(oc.out, "# Out of bounds values : 0 OK"), "%s", oc.out);
  static const char *colls[] = {"all_reduce", "reduce", "reduce_scatter"};
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    char h[64];
    snprintf(h, sizeof h, "# collective %s\n", colls[i]);
    cr_expect(strstr(oc.out, h), "no rows for %s:\n%s", colls[i], oc.out);
  }
  cr_expect(strstr(oc.out, "bfloat16  premulsum"), "no premulsum rows:\n%s",
            oc.out);
  free(oc.out);
}

Test(perf_cli, sweep_every_collective_1_rank, .timeout = 150) {
  sweep("1", "shm", "all");
}
Test(perf_cli, sweep_every_collective_2_ranks_shm, .timeout = 150) {
  sweep("2", "shm", "all");
}
Test(perf_cli, sweep_every_collective_2_ranks_tcp, .timeout = 150) {
  sweep("2", "tcp", "float32");
}
/* Pipelined, single-copy sizes: 64 KiB to 4 MiB. */
Test(perf_cli, sweep_large_sizes_2_ranks_shm, .timeout = 150) {
  sweep_sizes("2", "shm", "float32", "64K", "4M");
}
Test(perf_cli, sweep_large_sizes_2_ranks_tcp, .timeout = 150) {
  sweep_sizes("2", "tcp", "float32", "64K", "4M");
}
#else
Test(perf_cli, sweep_every_collective) {
  cr_skip_test("braidrun is not part of this build (tools/braidrun): the "
               "braid-perf sweep under braidrun cannot run");
}
#endif
