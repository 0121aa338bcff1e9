/*
 * braidrun end to end: the variables each rank gets, output prefixes,
 * teardown when a rank fails (exit status, signal, SIGKILL escalation, ranks
 * failing together, what the ranks started), --timeout, signal forwarding,
 * ranks that flood and a stdout that does not read, -x, host lists and
 * network namespaces.
 */
#include "../test_fork.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
  size_t out_bytes; /* OUT_PIPE: all that braidrun wrote to stdout */
  char out[16384], err[16384];
} run_result;

/* Where braidrun's stdout goes: a file (out holds it), /dev/null, or a pipe
 * that the test reads only from run_opts.read_after on (out holds the
 * start of it). */
enum { OUT_FILE, OUT_NULL, OUT_PIPE };

typedef struct run_opts {
  int out;
  double read_after; /* OUT_PIPE: seconds; < 0: once braidrun has exited */
  double limit;      /* braidrun is killed after this (a failure); 0: 30 s */
  /* called every 5 ms while braidrun runs; fo is its stdout (OUT_FILE) */
  void (*tick)(pid_t braidrun, int fo, void *arg);
  void *arg;
} run_opts;

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

/* Reads what the (non-blocking) pipe holds: the first bytes into res->out,
 * all of them counted. */
static void take_pipe(run_result *res, int fd) {
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    size_t have = strlen(res->out), room = sizeof res->out - 1 - have;
    size_t k = (size_t)n < room ? (size_t)n : room;
    memcpy(res->out + have, buf, k);
    res->out[have + k] = '\0';
    res->out_bytes += (size_t)n;
  }
}

/* How many times word is in the first 4 KiB of the file fd. */
static int count_in_file(int fd, const char *word) {
  char buf[4096];
  ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
  buf[got > 0 ? got : 0] = '\0';
  int n = 0;
  for (const char *p = buf; (p = strstr(p, word)) != NULL; p++)
    n++;
  return n;
}

/* Runs braidrun with args (NULL terminated) as o says. */
static run_result *run_opt(const char *const *args, const run_opts *o) {
  static run_result res;
  memset(&res, 0, sizeof res);
  int fe = memfd_create("err", 0), fo = -1, pr = -1;
  if (o->out == OUT_FILE) {
    fo = memfd_create("out", 0);
  } else if (o->out == OUT_NULL) {
    fo = open("/dev/null", O_WRONLY);
  } else {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pr = p[0];
    fo = p[1];
    fcntl(pr, F_SETFL, O_NONBLOCK);
  }
  cr_assert(fo >= 0 && fe >= 0);
  const char *argv[64] = {BRAIDRUN_PATH};
  int k = 1;
  for (; args[k - 1]; k++)
    argv[k] = args[k - 1];
  argv[k] = NULL;
  double t0 = now_s(), limit = o->limit > 0 ? o->limit : 30;
  pid_t pid = test_fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    dup2(fo, 1);
    dup2(fe, 2);
    if (pr >= 0)
      close(pr);
    execv(BRAIDRUN_PATH, (char **)argv);
    _exit(126);
  }
  if (pr >= 0)
    close(fo);
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      break;
    double el = now_s() - t0;
    if (o->tick)
      o->tick(pid, fo, o->arg);
    if (pr >= 0 && o->read_after >= 0 && el >= o->read_after)
      take_pipe(&res, pr);
    if (el > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      cr_assert_fail("braidrun did not finish within %g s", limit);
    }
    usleep(5000);
  }
  res.secs = now_s() - t0;
  res.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (pr >= 0) {
    take_pipe(&res, pr);
    close(pr);
  } else if (o->out == OUT_FILE) {
    slurp(fo, res.out, sizeof res.out);
  } else {
    close(fo);
  }
  slurp(fe, res.err, sizeof res.err);
  return &res;
}

typedef struct sig_when_ready {
  int sig, nready, sent;
} sig_when_ready;

static void send_when_ready(pid_t braidrun, int fo, void *arg) {
  sig_when_ready *s = arg;
  if (!s->sent && count_in_file(fo, "sleeping") >= s->nready) {
    kill(braidrun, s->sig);
    s->sent = 1;
  }
}

/* Runs braidrun with args (NULL terminated); when sig != 0, sends sig to it
 * once its stdout holds nready "sleeping" lines (every rank started). Kills
 * it after 30 s (a test failure). */
static run_result *run_sig(const char *const *args, int sig, int nready) {
  sig_when_ready s = {sig, nready, 0};
  run_opts o = {
      .out = OUT_FILE, .tick = sig ? send_when_ready : NULL, .arg = &s};
  return run_opt(args, &o);
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
  run_result *r = run(ARGS("--hosts", "localhost:2", HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_not_null(strstr(r->out, "[1] rank=1 size=2 local_rank=1 "
                                    "local_size=2"),
                     "%s", r->out);
  /* -n below the slots: the local size counts the ranks placed */
  r = run(ARGS("-n", "2", "--hosts", "localhost:3", HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_not_null(strstr(r->out, "[1] rank=1 size=2 local_rank=1 "
                                    "local_size=2"),
                     "%s", r->out);
}

/* A host named twice is one host: local ranks 0..3 of 4, not 0,1,0,1 of 2
 * (which made two ranks of one machine claim the same local rank). */
Test(braidrun, host_named_twice_is_one_host) {
  run_result *r =
      run(ARGS("--hosts", "localhost:2,localhost:2", HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  for (int k = 0; k < 4; k++) {
    char want[128];
    snprintf(want, sizeof want,
             "[%d] rank=%d size=4 local_rank=%d local_size=4 ", k, k, k);
    cr_assert_not_null(strstr(r->out, want), "no '%s' in:\n%s", want, r->out);
  }
  r = run(ARGS("-n", "3", "--hosts", "localhost,localhost:1,localhost:5",
               HELPER_PATH, "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  cr_assert_not_null(strstr(r->out, "[2] rank=2 size=3 local_rank=2 "
                                    "local_size=3"),
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
  /* both lines name localhost: one host of 3 slots */
  cr_assert_not_null(strstr(r->out, "[2] rank=2 size=3 local_rank=2 "
                                    "local_size=3"),
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
  /* alone, an unknown option is still unknown (not "needs a value") */
  r = run(ARGS("--bogus"));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "unknown option '--bogus'"), "%s", r->err);
  r = run(ARGS("-n", "2"));
  cr_assert_eq(r->code, 2);
  cr_assert_not_null(strstr(r->err, "no program"), "%s", r->err);
  r = run(ARGS("--help"));
  cr_assert_eq(r->code, 0);
  cr_assert_not_null(strstr(r->out, "--hosts"));
  cr_assert_not_null(strstr(r->out, "--timeout"));
  cr_assert_not_null(strstr(r->out, "-x VAR"));
}

/* ---- a rank that floods, a stdout that does not read ----------------------
 */

/* The rank writes faster than braidrun prefixes its lines: a braidrun that
 * read one stream until it ran dry never came back to its deadlines. */
Test(braidrun, flooding_rank_keeps_the_timeout) {
  run_opts o = {.out = OUT_NULL, .limit = 10};
  run_result *r =
      run_opt(ARGS("--timeout", "1", "-n", "1", FLOOD_HELPER_PATH), &o);
  cr_assert_eq(r->code, 124, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 6.0, "took %.1f s", r->secs);
}

/* ... nor to reaping, teardown and the other ranks' output */
Test(braidrun, flooding_rank_keeps_teardown_and_other_output) {
  run_opts o = {.out = OUT_NULL, .limit = 10};
  run_result *r = run_opt(ARGS("-n", "2", FLOOD_HELPER_PATH, "1", "3"), &o);
  cr_assert_eq(r->code, 3, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 6.0, "took %.1f s", r->secs);
  cr_assert_not_null(strstr(r->err, "[1] failing\n"), "%s", r->err);
  cr_assert_not_null(strstr(r->err, "rank 1 (pid "), "%s", r->err);
}

/* braidrun's stdout is a pipe nobody reads: --timeout still stops the job,
 * and what stdout did not take is dropped, with a word on stderr. */
Test(braidrun, stalled_stdout_keeps_the_timeout) {
  run_opts o = {.out = OUT_PIPE, .read_after = -1, .limit = 15};
  run_result *r = run_opt(ARGS("--timeout", "1", "-n", "1", "sh", "-c",
                               "yes | head -c 2000000; exec sleep 30"),
                          &o);
  cr_assert_eq(r->code, 124, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 6.0, "took %.1f s", r->secs);
  cr_assert_not_null(strstr(r->err, "timeout"), "%s", r->err);
  cr_assert_not_null(strstr(r->err, "stdout did not take the last "), "%s",
                     r->err);
  cr_assert_eq(strncmp(r->out, "[0] y\n[0] y\n", 12), 0, "stdout: %.40s",
               r->out);
}

/* A stdout read late loses nothing: braidrun holds the output, then leaves
 * it in the ranks' pipes, and writes it all once stdout takes it. */
Test(braidrun, slow_stdout_loses_nothing) {
  run_opts o = {.out = OUT_PIPE, .read_after = 1.0, .limit = 20};
  run_result *r = run_opt(
      ARGS("-n", "2", "sh", "-c", "yes | head -c 1000000; echo end"), &o);
  cr_assert_eq(r->code, 0, "exit %d; stderr:\n%s", r->code, r->err);
  /* 500000 lines "y" and "end" from each rank, each with "[r] " */
  cr_assert_eq(r->out_bytes, (size_t)2 * (500000 * 6 + 8), "%zu bytes",
               r->out_bytes);
  cr_assert_null(strstr(r->err, "dropped"), "%s", r->err);
}

/* ---- ranks that fail together, and what the ranks started ---------------- */

/* a directory for the files that a test's ranks write */
static void make_dir(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/braidrun-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.')
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static int file_exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

static pid_t read_pid(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  long p = -1;
  if (f != NULL) {
    if (fscanf(f, "%ld", &p) != 1)
      p = -1;
    fclose(f);
  }
  return (pid_t)p;
}

/* 1 once pid has exited (it is gone, or a zombie), waiting up to 2 s; when
 * it has not, kills it, so that a failing test leaves nothing behind. */
static int exited(pid_t pid) {
  if (pid <= 0)
    return 0;
  for (int i = 0; i < 200; i++) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "pid (name) S ..." */
    if (p != NULL && (p[2] == 'Z' || p[2] == 'X'))
      return 1;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  return 0;
}

typedef struct together {
  const char *dir;
  int done;
} together;

/* Once the 4 ranks are ready, stops braidrun, lets every rank die, and lets
 * braidrun go on: it then reaps them all in one batch. */
static void die_while_braidrun_stopped(pid_t braidrun, int fo, void *arg) {
  together *t = arg;
  if (t->done || count_in_file(fo, "sleeping") < 4)
    return;
  t->done = 1;
  kill(braidrun, SIGSTOP);
  char go[512];
  snprintf(go, sizeof go, "%s/go", t->dir);
  fclose(fopen(go, "w"));
  for (int i = 0; i < 500; i++) {
    int dead = 0;
    for (int k = 0; k < 4; k++) {
      char name[16];
      snprintf(name, sizeof name, "dead%d", k);
      dead += file_exists(t->dir, name);
    }
    if (dead == 4)
      break;
    usleep(10000);
  }
  usleep(200000); /* from the marker to the exit */
  kill(braidrun, SIGCONT);
}

/* Rank 2 is killed, the others then exit 20 (as ranks that lose a peer do),
 * and braidrun reaps them all at once, rank 0 first: the rank blamed, and
 * braidrun's status, are rank 2's; the summary names the others too. */
Test(braidrun, failures_together_blame_the_killed_rank) {
  char dir[64], script[512];
  make_dir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo sleeping; while [ ! -e %s/go ]; do sleep 0.02; done; "
           "if [ \"$BRAID_RANK\" = 2 ]; then : > %s/dead2; kill -KILL $$; "
           "fi; : > %s/dead$BRAID_RANK; exit 20",
           dir, dir, dir);
  together t = {dir, 0};
  run_opts o = {.out = OUT_FILE, .tick = die_while_braidrun_stopped, .arg = &t};
  run_result *r = run_opt(ARGS("-n", "4", "sh", "-c", script), &o);
  remove_dir(dir);
  cr_assert(t.done, "the ranks never got ready; stdout:\n%s", r->out);
  cr_assert_eq(r->code, 128 + SIGKILL, "exit %d; stderr:\n%s", r->code, r->err);
  const char *sum = strstr(r->err, "job failed: rank 2 (pid ");
  cr_assert_not_null(sum, "%s", r->err);
  char line[2048];
  snprintf(line, sizeof line, "%.*s", (int)strcspn(sum, "\n"), sum);
  cr_assert_not_null(strstr(line, "killed by signal 9"), "%s", line);
  for (int k = 0; k < 4; k += k == 1 ? 2 : 1) {
    char want[64];
    snprintf(want, sizeof want, "rank %d (pid ", k);
    cr_assert_not_null(strstr(line, want), "no '%s' in: %s", want, line);
  }
  cr_assert_not_null(strstr(line, "exited with status 20"), "%s", line);
}

/* Rank 1 fails and leaves a background process in its process group: the
 * teardown's SIGTERM reaches it although rank 1 itself is gone. */
Test(braidrun, teardown_stops_what_an_exited_rank_started) {
  char dir[64], script[512];
  make_dir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > %s/bg$BRAID_RANK; "
           "if [ \"$BRAID_RANK\" = 1 ]; then sleep 0.3; exit 5; fi; "
           "exec sleep 30",
           dir);
  run_result *r = run(ARGS("--grace", "5", "-n", "2", "sh", "-c", script));
  pid_t bg0 = read_pid(dir, "bg0"), bg1 = read_pid(dir, "bg1");
  remove_dir(dir);
  int gone0 = exited(bg0), gone1 = exited(bg1);
  cr_assert_eq(r->code, 5, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 4.0, "took %.1f s: SIGTERM should do", r->secs);
  cr_assert(gone0, "rank 0's background process %ld survived", (long)bg0);
  cr_assert(gone1, "rank 1's background process %ld survived", (long)bg1);
}

/* SIGINT to braidrun: the ranks die of it, their background processes
 * ignore it (as a shell's background jobs do); they get SIGTERM then. */
Test(braidrun, sigint_stops_what_the_ranks_started) {
  char dir[64], script[512];
  make_dir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > %s/bg$BRAID_RANK; "
           "echo sleeping; exec sleep 30",
           dir);
  run_result *r =
      run_sig(ARGS("--grace", "5", "-n", "2", "sh", "-c", script), SIGINT, 2);
  pid_t bg0 = read_pid(dir, "bg0"), bg1 = read_pid(dir, "bg1");
  remove_dir(dir);
  int gone0 = exited(bg0), gone1 = exited(bg1);
  cr_assert_eq(r->code, 128 + SIGINT, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 4.0, "took %.1f s", r->secs);
  cr_assert(gone0, "rank 0's background process %ld survived", (long)bg0);
  cr_assert(gone1, "rank 1's background process %ld survived", (long)bg1);
}

/* Background processes that ignore SIGTERM, of ranks that have exited: the
 * SIGKILL after the grace period reaches them. */
Test(braidrun, sigkill_reaches_what_exited_ranks_started) {
  char dir[64], script[1024];
  make_dir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "sh -c 'trap \"\" TERM; echo $$ > %s/bg'$BRAID_RANK'; exec sleep "
           "30' </dev/null >/dev/null 2>&1 & "
           "if [ \"$BRAID_RANK\" = 1 ]; then "
           "while [ ! -e %s/bg0 ] || [ ! -e %s/bg1 ]; do sleep 0.02; done; "
           "exit 5; fi; exec sleep 30",
           dir, dir, dir);
  run_result *r = run(ARGS("--grace", "0.5", "-n", "2", "sh", "-c", script));
  pid_t bg0 = read_pid(dir, "bg0"), bg1 = read_pid(dir, "bg1");
  remove_dir(dir);
  int gone0 = exited(bg0), gone1 = exited(bg1);
  cr_assert_eq(r->code, 5, "exit %d; stderr:\n%s", r->code, r->err);
  cr_assert_lt(r->secs, 6.0, "took %.1f s", r->secs);
  cr_assert(gone0, "rank 0's helper %ld survived", (long)bg0);
  cr_assert(gone1, "rank 1's helper %ld survived", (long)bg1);
  cr_assert_not_null(strstr(r->err, "processes that rank 1 started (process "
                                    "group "),
                     "%s", r->err);
  cr_assert_not_null(strstr(r->err, "did not stop within 0.5 s; sending "
                                    "SIGKILL"),
                     "%s", r->err);
}

/* ---- -x -------------------------------------------------------------------
 */

Test(braidrun, export_last_wins_and_refuses_per_rank_variables) {
  /* env prints the environment as the rank got it, duplicates included */
  run_result *r = run(ARGS("-x", "BRAIDRUN_TEST_A=1", "-x", "BRAIDRUN_TEST_A=2",
                           "-n", "1", "env"));
  cr_assert_eq(r->code, 0, "%s", r->err);
  int n = 0;
  for (const char *p = r->out; (p = strstr(p, "[0] BRAIDRUN_TEST_A=")); p++)
    n++;
  cr_assert_eq(n, 1, "%d entries:\n%s", n, r->out);
  cr_assert_not_null(strstr(r->out, "[0] BRAIDRUN_TEST_A=2\n"), "%s", r->out);
  /* braidrun's own per-rank variables cannot be exported */
  r = run(
      ARGS("-x", "BRAID_RANK=5", "-n", "2", HELPER_PATH, "var", "BRAID_RANK"));
  cr_assert_eq(r->code, 2, "exit %d; stdout:\n%s", r->code, r->out);
  cr_assert_not_null(strstr(r->err, "-x BRAID_RANK=5: braidrun sets "
                                    "BRAID_RANK itself"),
                     "%s", r->err);
  setenv("BRAID_UNIQUE_ID", "00", 1);
  r = run(ARGS("-x", "BRAID_UNIQUE_ID", "-n", "1", HELPER_PATH, "env"));
  unsetenv("BRAID_UNIQUE_ID");
  cr_assert_eq(r->code, 2, "exit %d; stdout:\n%s", r->code, r->out);
  cr_assert_not_null(strstr(r->err, "braidrun sets BRAID_UNIQUE_ID itself"),
                     "%s", r->err);
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
