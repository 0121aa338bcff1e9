/*
 * braid_comm_init_env end to end: real ranks join one job and allreduce,
 * launched by braidrun, torchrun-style variables (MASTER_ADDR/MASTER_PORT),
 * Slurm-style variables (rendezvous file) and Open MPI's mpirun when present.
 */
#include "../free_port.h"
#include "../test_fork.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 3

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for pid at most secs; kills it and fails past that. */
static int wait_bounded(pid_t pid, double secs) {
  double t0 = now_s();
  int st;
  for (;;) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (now_s() - t0 > secs) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      cr_assert_fail("process %ld did not finish within %.0f s", (long)pid,
                     secs);
    }
    usleep(10000);
  }
}

/* Runs argv with stdout captured into out; returns the exit code. */
static int run_capture(char *const argv[], char *out, size_t len) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = test_fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    setenv("BRAID_TIMEOUT", "30", 1);
    execv(argv[0], argv);
    _exit(126);
  }
  close(p[1]);
  size_t got = 0;
  ssize_t n;
  while (got + 1 < len && (n = read(p[0], out + got, len - 1 - got)) > 0)
    got += (size_t)n;
  out[got] = '\0';
  close(p[0]);
  return wait_bounded(pid, 60);
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

Test(init_env, braidrun) {
  char out[8192];
  char *argv[] = {BRAIDRUN_PATH, "--timeout",      "60", "-n",
                  "3",           INIT_HELPER_PATH, NULL};
  int code = run_capture(argv, out, sizeof out);
  cr_assert_eq(code, 0, "braidrun exited %d; stdout:\n%s", code, out);
  cr_assert_eq(count(out, "of 3 ok sum=6"), 3, "%s", out);
}

/* Forks NRANKS ranks; vars(rank, i) gives the i-th NAME=value (NULL ends). */
static void run_forked(const char *(*vars)(int rank, int i)) {
  pid_t pid[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    pid[r] = test_fork();
    cr_assert_neq(pid[r], -1);
    if (pid[r] == 0) {
      static const char *drop[] = {"BRAID_RANK",
                                   "BRAID_SIZE",
                                   "BRAID_UNIQUE_ID",
                                   "RANK",
                                   "WORLD_SIZE",
                                   "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "BRAID_COMM_ID",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE",
                                   "SLURM_PROCID",
                                   "SLURM_NTASKS",
                                   "PMI_RANK",
                                   "PMI_SIZE"};
      for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        unsetenv(drop[i]);
      setenv("BRAID_TIMEOUT", "30", 1);
      for (int i = 0; vars(r, i); i++)
        putenv((char *)vars(r, i));
      execl(INIT_HELPER_PATH, INIT_HELPER_PATH, (char *)NULL);
      _exit(126);
    }
  }
  for (int r = 0; r < NRANKS; r++) {
    int code = wait_bounded(pid[r], 60);
    cr_assert_eq(code, 0, "rank %d exited %d", r, code);
  }
}

static char port_var[32];

static const char *torch_vars(int rank, int i) {
  static char rv[NRANKS][32];
  snprintf(rv[rank], sizeof rv[rank], "RANK=%d", rank);
  const char *v[] = {rv[rank], "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                     port_var, NULL};
  return v[i];
}

Test(init_env, torchrun_variables) {
  snprintf(port_var, sizeof port_var, "MASTER_PORT=%d", free_port());
  run_forked(torch_vars);
}

static char dir_var[300], rdv_dir[256], job_var[64];

static const char *slurm_vars(int rank, int i) {
  static char rv[NRANKS][32];
  snprintf(rv[rank], sizeof rv[rank], "SLURM_PROCID=%d", rank);
  const char *v[] = {rv[rank], "SLURM_NTASKS=3", "SLURM_STEP_ID=0",
                     job_var,  dir_var,          NULL};
  return v[i];
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

static void rdv_setup(void) {
  snprintf(rdv_dir, sizeof rdv_dir, "/tmp/braid-test-initenv-XXXXXX");
  cr_assert_not_null(mkdtemp(rdv_dir));
  snprintf(dir_var, sizeof dir_var, "BRAID_RENDEZVOUS_DIR=%s", rdv_dir);
  snprintf(job_var, sizeof job_var, "SLURM_JOB_ID=%ld", (long)getpid());
}

static void rdv_teardown(void) { rmdir(rdv_dir); }

Test(init_env, slurm_variables_rendezvous_file, .init = rdv_setup,
     .fini = rdv_teardown) {
  run_forked(slurm_vars);
  cr_assert_eq(dir_entries(rdv_dir), 0, "rank 0 left its rendezvous file");
}

Test(init_env, mpirun, .init = rdv_setup, .fini = rdv_teardown) {
  const char *mpirun = MPIRUN_PATH;
  if (mpirun[0] == '\0' || access(mpirun, X_OK) != 0) {
    cr_log_info("SKIPPED init_env.mpirun: Open MPI's mpirun is not installed");
    rdv_teardown(); /* Criterion runs no fini after a skip */
    cr_skip_test("mpirun not found");
  }
  char out[8192];
  char *argv[] = {(char *)mpirun,
                  "--allow-run-as-root",
                  "--oversubscribe",
                  "-np",
                  "3",
                  "-x",
                  dir_var,
                  "-x",
                  "BRAID_TIMEOUT",
                  INIT_HELPER_PATH,
                  NULL};
  int code = run_capture(argv, out, sizeof out);
  cr_assert_eq(code, 0, "mpirun exited %d; stdout:\n%s", code, out);
  cr_assert_eq(count(out, "of 3 ok sum=6"), 3, "%s", out);
  cr_assert_eq(dir_entries(rdv_dir), 0, "rank 0 left its rendezvous file");
}

/* Two "hosts" as network namespaces on one bridge: braidrun --hosts runs
 * ranks in them; ranks in one namespace use shared memory, across them TCP.
 * The bridge and the veth ends inside the namespaces share one name, so one
 * BRAID_SOCKET_IFNAME fits braidrun's root and every rank. */
static char ns_if[16], ns_a[40], ns_b[40];
static int ns_ready;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static void ns_setup(void) {
  int id = (int)(getpid() % 100000);
  snprintf(ns_if, sizeof ns_if, "bd%05d", id);
  snprintf(ns_a, sizeof ns_a, "braid-test-%d-a", id);
  snprintf(ns_b, sizeof ns_b, "braid-test-%d-b", id);
  int net = id % 250;
  if (geteuid() != 0 || sh("command -v ip >/dev/null") != 0)
    return;
  if (sh("ip link add %s type bridge 2>/dev/null", ns_if) != 0)
    return;
  ns_ready = 1;
  int bad = sh("ip addr add 10.201.%d.1/24 dev %s && ip link set %s up", net,
               ns_if, ns_if);
  const char *ns[2] = {ns_a, ns_b};
  for (int i = 0; i < 2 && !bad; i++)
    bad = sh("ip netns add %s && "
             "ip link add %s%c type veth peer name %s netns %s && "
             "ip link set %s%c master %s up && "
             "ip netns exec %s ip addr add 10.201.%d.%d/24 dev %s && "
             "ip netns exec %s ip link set %s up && "
             "ip netns exec %s ip link set lo up",
             ns[i], ns_if, 'a' + i, ns_if, ns[i], ns_if, 'a' + i, ns_if, ns[i],
             net, i + 2, ns_if, ns[i], ns_if, ns[i]);
  if (bad)
    ns_ready = -1;
}

static void ns_teardown(void) {
  if (ns_ready == 0)
    return;
  sh("ip link del %s 2>/dev/null", ns_if);
  sh("ip netns del %s 2>/dev/null", ns_a);
  sh("ip netns del %s 2>/dev/null", ns_b);
}

Test(init_env, braidrun_network_namespaces, .init = ns_setup,
     .fini = ns_teardown) {
  if (ns_ready == 0) {
    cr_log_info("SKIPPED init_env.braidrun_network_namespaces: needs root "
                "and iproute2 with bridge/veth/netns support");
    cr_skip_test("cannot create network namespaces here");
  }
  cr_assert_eq(ns_ready, 1, "could not set up namespaces %s, %s on %s", ns_a,
               ns_b, ns_if);
  char hosts[128], out[8192];
  snprintf(hosts, sizeof hosts, "%s:2,%s:1", ns_a, ns_b);
  setenv("BRAID_SOCKET_IFNAME", ns_if, 1);
  char *argv[] = {BRAIDRUN_PATH, "--timeout",      "60", "--hosts",
                  hosts,         INIT_HELPER_PATH, NULL};
  int code = run_capture(argv, out, sizeof out);
  cr_assert_eq(code, 0, "braidrun exited %d; stdout:\n%s", code, out);
  cr_assert_eq(count(out, "of 3 ok sum=6"), 3, "%s", out);
}
