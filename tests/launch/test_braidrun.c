/*
 * braidrun end to end: the variables each rank gets, output prefixes,
 * teardown when a rank fails (exit status, signal, SIGKILL escalation),
 * --timeout, signal forwarding, -x, host lists and network namespaces.
 */
#include "../test_fork.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct run_result {
  int code; /* exit status, or 128 + signal */
  double secs;
  char out[16384], err[16384];
} run_result;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void slurp(int fd, char *buf, size_t len) {
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, buf, len - 1);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
}

/* Runs braidrun with args (NULL terminated); when sig != 0, sends sig to it
 * once its stdout holds nready "sleeping" lines (every rank started). Kills
 * it after 30 s (a test failure). */
static run_result *run_sig(const char *const *args, int sig, int nready) {
  static run_result res;
  memset(&res, 0, sizeof res);
  int fo = memfd_create("out", 0), fe = memfd_create("err", 0);
  cr_assert(fo >= 0 && fe >= 0);
  const char *argv[64] = {BRAIDRUN_PATH};
  int k = 1;
  for (; args[k - 1]; k++)
    argv[k] = args[k - 1];
  argv[k] = NULL;
  double t0 = now_s();
  pid_t pid = test_fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    dup2(fo, 1);
    dup2(fe, 2);
    execv(BRAIDRUN_PATH, (char **)argv);
    _exit(126);
  }
  int st = 0, sent = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      break;
    double el = now_s() - t0;
    if (sig && !sent) {
      char buf[4096];
      ssize_t got = pread(fo, buf, sizeof buf - 1, 0);
      buf[got > 0 ? got : 0] = '\0';
      int ready = 0;
      for (const char *p = buf; (p = strstr(p, "sleeping")) != NULL; p++)
        ready++;
      if (ready >= nready) {
        kill(pid, sig);
        sent = 1;
      }
    }
    if (el > 30) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      cr_assert_fail("braidrun did not finish within 30 s");
    }
    usleep(5000);
  }
  res.secs = now_s() - t0;
  res.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  slurp(fo, res.out, sizeof res.out);
  slurp(fe, res.err, sizeof res.err);
  return &res;
}

static run_result *run(const char *const *args) { return run_sig(args, 0, 0); }

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

Test(braidrun, variables_and_prefixes) {
  run_result *r = run(ARGS("-n", "4", HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "exit %d, stderr:\n%s", r->code, r->err);
  cr_assert_eq(count_lines(r->out), 4, "stdout:\n%s", r->out);
  char id0[64] = "";
  for (int k = 0; k < 4; k++) {
    char want[200];
    snprintf(want, sizeof want,
             "[%d] rank=%d size=4 local_rank=%d local_size=4 idlen=256 id=", k,
             k, k);
    const char *line = strstr(r->out, want);
    cr_assert_not_null(line, "no line '%s' in:\n%s", want, r->out);
    char id[64];
    snprintf(id, 17, "%s", line + strlen(want));
    if (k == 0)
      snprintf(id0, sizeof id0, "%s", id);
    cr_assert_str_eq(id, id0, "rank %d has another unique id", k);
    snprintf(want, sizeof want, "[%d] stderr of %d\n", k, k);
    cr_assert_not_null(strstr(r->err, want), "no '%s' in stderr:\n%s", want,
                       r->err);
  }
}

Test(braidrun, partial_line_is_flushed) {
  run_result *r = run(ARGS("-n", "2", HELPER_PATH, "partial"));
  cr_assert_eq(r->code, 0);
  cr_assert_not_null(strstr(r->out, "[0] no newline\n"), "%s", r->out);
  cr_assert_not_null(strstr(r->out, "[1] no newline\n"), "%s", r->out);
}

Test(braidrun, failing_rank_tears_the_job_down) {
  run_result *r = run(ARGS("-n", "3", HELPER_PATH, "fail", "1", "7"));
  cr_assert_eq(r->code, 7, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 10.0, "took %.1f s: sleeping ranks were not killed",
               r->secs);
  cr_assert_not_null(strstr(r->err, "rank 1 (pid "), "%s", r->err);
  cr_assert_not_null(strstr(r->err, "exited with status 7"), "%s", r->err);
}

Test(braidrun, signal_status_propagates) {
  run_result *r = run(ARGS("-n", "2", HELPER_PATH, "abort", "0"));
  cr_assert_eq(r->code, 128 + SIGABRT, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 10.0);
  cr_assert_not_null(strstr(r->err, "rank 0"), "%s", r->err);
  cr_assert_not_null(strstr(r->err, "killed by signal 6"), "%s", r->err);
}

Test(braidrun, sigkill_after_grace) {
  run_result *r =
      run(ARGS("--grace", "0.5", "-n", "3", HELPER_PATH, "stubborn", "2"));
  cr_assert_eq(r->code, 3, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 10.0, "took %.1f s", r->secs);
  cr_assert_not_null(strstr(r->err, "did not stop within 0.5 s"), "%s", r->err);
}

Test(braidrun, timeout) {
  run_result *r =
      run(ARGS("--timeout", "0.5", "-n", "2", HELPER_PATH, "sleep"));
  cr_assert_eq(r->code, 124, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 10.0);
  cr_assert_geq(r->secs, 0.45);
  cr_assert_not_null(strstr(r->err, "timeout"), "%s", r->err);
}

Test(braidrun, forwards_sigint) {
  run_result *r = run_sig(ARGS("-n", "2", HELPER_PATH, "sleep"), SIGINT, 2);
  cr_assert_eq(r->code, 128 + SIGINT, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 10.0);
  cr_assert_not_null(strstr(r->err, "forwarding"), "%s", r->err);
}

Test(braidrun, exports_variables) {
  setenv("BRAIDRUN_TEST_FROM_HERE", "inherited-value", 1);
  run_result *r =
      run(ARGS("-x", "BRAIDRUN_TEST_X=bar", "-x", "BRAIDRUN_TEST_FROM_HERE",
               "-n", "1", HELPER_PATH, "var", "BRAIDRUN_TEST_X"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_str_eq(r->out, "[0] BRAIDRUN_TEST_X=bar\n");
  r = run(ARGS("-x", "BRAIDRUN_TEST_FROM_HERE", "-n", "1", "--", HELPER_PATH,
               "var", "BRAIDRUN_TEST_FROM_HERE"));
  cr_assert_str_eq(r->out, "[0] BRAIDRUN_TEST_FROM_HERE=inherited-value\n");
  /* braidrun's own variables win over an inherited one */
  setenv("BRAID_RANK", "77", 1);
  r = run(ARGS("-n", "1", HELPER_PATH, "var", "BRAID_RANK"));
  cr_assert_str_eq(r->out, "[0] BRAID_RANK=0\n");
}

Test(braidrun, host_list_local_ranks) {
  run_result *r =
      run(ARGS("--hosts", "localhost:2,localhost", HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_not_null(strstr(r->out, "[0] rank=0 size=3 local_rank=0 "
                                    "local_size=2"),
                     "%s", r->out);
  cr_assert_not_null(strstr(r->out, "[1] rank=1 size=3 local_rank=1 "
                                    "local_size=2"),
                     "%s", r->out);
  cr_assert_not_null(strstr(r->out, "[2] rank=2 size=3 local_rank=0 "
                                    "local_size=1"),
                     "%s", r->out);
  /* -n below the slots fills the first hosts */
  r = run(ARGS("-n", "2", "--hosts", "localhost:1,localhost:3", HELPER_PATH,
               "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_not_null(strstr(r->out, "[1] rank=1 size=2 local_rank=0 "
                                    "local_size=1"),
                     "%s", r->out);
}

Test(braidrun, hostfile) {
  char path[] = "/tmp/braidrun-hostfile-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  const char text[] = "# two hosts\nlocalhost slots=2\n\nlocalhost:1 # one\n";
  cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)sizeof text - 1);
  close(fd);
  run_result *r = run(ARGS("--hostfile", path, HELPER_PATH, "env"));
  unlink(path);
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_eq(count_lines(r->out), 3, "%s", r->out);
  cr_assert_not_null(strstr(r->out, "[2] rank=2 size=3 local_rank=0 "
                                    "local_size=1"),
                     "%s", r->out);
}

Test(braidrun, usage_errors) {
  run_result *r = run(ARGS("-n", "2", "/nonexistent/program"));
  cr_assert_eq(r->code, 127);
  cr_assert_not_null(strstr(r->err, "/nonexistent/program"), "%s", r->err);
  r = run(ARGS("-n", "2", "no-such-command-braid"));
  cr_assert_eq(r->code, 127);
  cr_assert_not_null(strstr(r->err, "command not found"), "%s", r->err);
  /* a directory is no program (it was started, and every rank said only
   * "exec failed") */
  r = run(ARGS("-n", "2", "/tmp"));
  cr_assert_eq(r->code, 127);
  cr_assert_not_null(strstr(r->err, "/tmp: not an executable file"), "%s",
                     r->err);
  /* an executable file the kernel cannot run: its path and why */
  char bad[] = "/tmp/braid-test-noexec-XXXXXX";
  int fd = mkstemp(bad);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, "\x01\x02garbage\n", 10), 10);
  close(fd);
  chmod(bad, 0700);
  r = run(ARGS("-n", "1", bad));
  unlink(bad);
  cr_assert_eq(r->code, 127);
  cr_assert_not_null(strstr(r->err, "cannot run /tmp/braid-test-noexec-"), "%s",
                     r->err);
  cr_assert_not_null(strstr(r->err, "Exec format error"), "%s", r->err);
  r = run(ARGS("-n", "x", HELPER_PATH));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "-n 'x'"), "%s", r->err);
  r = run(ARGS("-n", "5", "--hosts", "localhost:2", HELPER_PATH));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "more than the 2 slots"), "%s", r->err);
  r = run(ARGS("--hosts", "braid-no-such-ns:2", HELPER_PATH));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "network namespace 'braid-no-such-ns' "
                                    "does not exist"),
                     "%s", r->err);
  r = run(ARGS("--timeout", "-1", "-n", "1", HELPER_PATH));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "--timeout '-1'"), "%s", r->err);
  r = run(ARGS("--frobnicate", "1", HELPER_PATH));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "unknown option '--frobnicate'"), "%s",
                     r->err);
  r = run(ARGS("-n", "2"));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "no program"), "%s", r->err);
  r = run(ARGS("--help"));
  cr_assert_eq(r->code, 0);
  cr_assert_not_null(strstr(r->out, "--hosts"));
  cr_assert_not_null(strstr(r->out, "--timeout"));
  cr_assert_not_null(strstr(r->out, "-x VAR"));
}

/* Ranks inside a real network namespace (needs root and iproute2). */
Test(braidrun, network_namespace) {
  char ns[64], cmd[200];
  snprintf(ns, sizeof ns, "braidrun-test-%ld", (long)getpid());
  snprintf(cmd, sizeof cmd, "ip netns add %s 2>/dev/null", ns);
  if (geteuid() != 0 || system(cmd) != 0) {
    cr_log_info("SKIPPED braidrun.network_namespace: cannot create a network "
                "namespace here (needs root and the 'ip' command)");
    cr_skip_test("cannot create a network namespace (needs root and ip)");
  }
  char hosts[128];
  snprintf(hosts, sizeof hosts, "%s:2,localhost:1", ns);
  run_result *r = run(ARGS("--hosts", hosts, HELPER_PATH, "netns"));
  snprintf(cmd, sizeof cmd, "ip netns del %s", ns);
  cr_expect_eq(system(cmd), 0, "could not delete namespace %s", ns);
  cr_assert_eq(r->code, 0, "exit %d; stderr:\n%s", r->code, r->err);
  char mine[128] = "";
  ssize_t n = readlink("/proc/self/ns/net", mine, sizeof mine - 1);
  cr_assert_gt(n, 0);
  mine[n] = '\0';
  char l[3][256];
  for (int k = 0; k < 3; k++) {
    char key[32];
    snprintf(key, sizeof key, "[%d] netns=", k);
    const char *p = strstr(r->out, key);
    cr_assert_not_null(p, "no '%s' in:\n%s", key, r->out);
    cr_assert_eq(sscanf(p + strlen(key), "%255s", l[k]), 1);
  }
  char *l0 = l[0], *l1 = l[1], *l2 = l[2];
  cr_assert_str_neq(l0, mine, "rank 0 is not in the namespace");
  cr_assert_str_eq(l0, l1, "ranks 0 and 1 share the host %s", ns);
  cr_assert_str_eq(l2, mine, "rank 2 (localhost) should not be in %s", ns);
}
