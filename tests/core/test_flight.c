/*
 * The flight recorder (src/flight.c, docs/TRACE.md): what a dump holds after
 * calls that went well (the last BRAID_FLIGHT_RECORDER of them, in order),
 * after a peer died (written by itself, the failed call waiting on the dead
 * rank), and on SIGUSR1 while a call waits; and braid-trace analyze naming
 * the culprit from real dumps.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

static char dir[64];

/* Removes the test's directory and the dumps in it. */
static void remove_dir(void) {
  if (dir[0] == '\0')
    return;
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
  dir[0] = '\0';
}

TestSuite(flight, .fini = remove_dir);

/* A directory for this test's dumps, the ranks' own named by `file` in it
 * (a BRAID_FLIGHT_RECORDER_FILE pattern: read once per process, at the
 * first communicator or id), and a job id. */
static void start_with(const char *file, braid_unique_id *id) {
  remove_dir(); /* a test's earlier one */
  snprintf(dir, sizeof dir, "/tmp/braid-flight-test.XXXXXX");
  cr_assert(mkdtemp(dir) != NULL);
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s/%s", dir, file);
  setenv("BRAID_FLIGHT_RECORDER_FILE", pattern, 1);
  cr_assert_eq(boot_unique_id(id), BRAID_SUCCESS, "%s", err_msg());
}

static void start(braid_unique_id *id) { start_with("auto.r%r.jsonl", id); }

/* The file's text (at most 64 KiB), or "" when it is not there. */
static char *slurp(const char *path) {
  static char buf[65536];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  return buf;
}

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

static braid_comm *init(int rank, int n, const braid_unique_id *id) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = 20000;
  braid_comm *c = NULL;
  return braid_comm_init(&c, n, id, rank, &cfg) == BRAID_SUCCESS ? c : NULL;
}

/* ---- calls that went well ----------------------------------------------- */

/* Dumps c's recorder to <dir>/<name>.r<rank>.jsonl and destroys c: 0, or 4
 * with the error in msg. */
static int dump_and_destroy(braid_comm *c, const char *name, int rank,
                            char *msg, size_t len) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s.r%d.jsonl", dir, name, rank);
  braid_result r = braid_comm_flight_dump(c, path);
  snprintf(msg, len, "%s", braid_comm_last_error(c));
  braid_comm_destroy(c);
  return r == BRAID_SUCCESS ? 0 : 4;
}

static int rank_calls(int rank, int n, const braid_unique_id *id, void *arg,
                      char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  float buf[8] = {0};
  for (int i = 0; i < 5; i++)
    if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
      return 2;
  if (braid_broadcast(buf, buf, 8, BRAID_FLOAT32, 1, c, NULL))
    return 3;
  return dump_and_destroy(c, "api", rank, msg, len);
}

Test(flight, last_calls_in_order, .timeout = 60) {
  setenv("BRAID_FLIGHT_RECORDER", "4", 1);
  braid_unique_id id;
  start(&id);
  cr_assert_eq(run_ranks(2, &id, rank_calls, NULL, 40000, NULL), 0);
  for (int r = 0; r < 2; r++) {
    char path[128], head[64];
    snprintf(path, sizeof path, "%s/api.r%d.jsonl", dir, r);
    const char *s = slurp(path);
    snprintf(head, sizeof head, "\"rank\":%d,\"nranks\":2", r);
    cr_expect(strncmp(s, "{\"braid_flight\":1,", 18) == 0, "%s", s);
    cr_expect(strstr(s, head) != NULL, "%s", s);
    cr_expect(strstr(s, "\"reason\":\"api\"") != NULL, "%s", s);
    cr_expect(strstr(s, "\"ncalls\":4}") != NULL, "%s", s);
    /* six calls, four kept: #3 .. #6, oldest first, all done */
    cr_expect_eq(count_of(s, "\"seq\":"), 4, "%s", s);
    const char *p3 = strstr(s, "\"seq\":3,"), *p6 = strstr(s, "\"seq\":6,");
    cr_expect(p3 != NULL && p6 != NULL && p3 < p6, "%s", s);
    cr_expect(strstr(s, "\"seq\":2,") == NULL, "%s", s);
    cr_expect(strstr(s, "\"kind\":\"broadcast\",\"count\":8") != NULL, "%s", s);
    cr_expect(strstr(s, "\"root\":1") != NULL, "%s", s);
    cr_expect_eq(count_of(s, "\"state\":\"done\""), 4, "%s", s);
    cr_expect_eq(count_of(s, "\"result\":\"BRAID_SUCCESS\""), 4, "%s", s);
  }
}

/* An alltoallv runs as sends and receives; it is recorded as one call with
 * its call number, its count the elements its rank sends. */
static int rank_alltoallv(int rank, int n, const braid_unique_id *id, void *arg,
                          char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  float buf[8] = {0}, in[8] = {0}, out[8];
  size_t sc[2] = {(size_t)rank + 1, (size_t)rank + 1}, sd[2] = {0, 4};
  size_t rc[2] = {1, 2}, rd[2] = {0, 4};
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  if (braid_alltoallv(in, sc, sd, out, rc, rd, BRAID_FLOAT32, c, NULL))
    return 3;
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  return dump_and_destroy(c, "a2av", rank, msg, len);
}

Test(flight, an_alltoallv_is_one_call, .timeout = 60) {
  braid_unique_id id;
  start(&id);
  cr_assert_eq(run_ranks(2, &id, rank_alltoallv, NULL, 40000, NULL), 0);
  for (int r = 0; r < 2; r++) {
    char path[128], want[128];
    snprintf(path, sizeof path, "%s/a2av.r%d.jsonl", dir, r);
    const char *s = slurp(path);
    cr_expect_eq(count_of(s, "\"seq\":"), 3, "%s", s);
    snprintf(want, sizeof want,
             "{\"seq\":2,\"kind\":\"alltoallv\",\"count\":%d,"
             "\"dtype\":\"float32\",\"op\":\"\",\"root\":-1,",
             2 * (r + 1));
    cr_expect(strstr(s, want) != NULL, "no %s in %s", want, s);
    cr_expect(strstr(s, "\"seq\":3,\"kind\":\"allreduce\"") != NULL, "%s", s);
    cr_expect_eq(count_of(s, "\"state\":\"done\""), 3, "%s", s);
  }
}

/* The rounds braid_comm_init runs at its end (ranks of one host settle on
 * their CPUs) are not a user's calls: the recorder holds only these two. */
static int rank_two_calls(int rank, int n, const braid_unique_id *id, void *arg,
                          char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  float buf[8] = {0};
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL) ||
      braid_barrier(c, NULL))
    return 2;
  return dump_and_destroy(c, "two", rank, msg, len);
}

Test(flight, init_rounds_not_recorded, .timeout = 60) {
  setenv("BRAID_FLIGHT_RECORDER", "16", 1);
  /* two ranks of one host settle on their CPUs; one rank runs one round */
  for (int n = 2; n >= 1; n--) {
    braid_unique_id id;
    start(&id);
    cr_assert_eq(run_ranks(n, &id, rank_two_calls, NULL, 40000, NULL), 0);
    for (int r = 0; r < n; r++) {
      char path[128];
      snprintf(path, sizeof path, "%s/two.r%d.jsonl", dir, r);
      const char *s = slurp(path);
      cr_expect_eq(count_of(s, "\"seq\":"), 2, "%d ranks: %s", n, s);
      cr_expect(strstr(s, "\"seq\":1,\"kind\":\"allreduce\"") != NULL,
                "%d ranks: %s", n, s);
      cr_expect(strstr(s, "\"kind\":\"allreduce\",\"count\":1,") == NULL,
                "%d ranks: %s", n, s);
      cr_expect(strstr(s, "\"kind\":\"allgather\"") == NULL, "%d ranks: %s", n,
                s);
    }
  }
}

/* ---- which communicator a dump is of ------------------------------------ */

/* The "comm_id" of the dump at path into out (16 hex digits), or "". */
static void id_of(const char *path, char *out, size_t len) {
  const char *s = slurp(path), *p = strstr(s, "\"comm_id\":\"");
  const char *e = p != NULL ? strchr(p + 11, '"') : NULL;
  size_t n = e != NULL ? (size_t)(e - (p + 11)) : 0;
  snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p ? p + 11 : "");
}

enum { ID_WORLD, ID_SAME, ID_OWN, ID_N };
static const char *const id_names[ID_N] = {"world", "same", "own"};

/* Each rank dumps its world, a split of it with every rank in the same
 * order (the same members as the world) and a split of its own (one
 * rank), each file named by the rank in the world. */
static int rank_ids(int rank, int n, const braid_unique_id *id, void *arg,
                    char *msg, size_t len) {
  (void)arg;
  braid_comm *c[ID_N] = {init(rank, n, id), NULL, NULL};
  if (c[ID_WORLD] == NULL)
    return 1;
  if (braid_comm_split(c[ID_WORLD], 0, rank, &c[ID_SAME]) != BRAID_SUCCESS ||
      braid_comm_split(c[ID_WORLD], rank, 0, &c[ID_OWN]) != BRAID_SUCCESS) {
    snprintf(msg, len, "split: %s", braid_comm_last_error(c[ID_WORLD]));
    return 2;
  }
  int bad = 0;
  for (int k = ID_N - 1; k >= 0; k--) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s.r%d.jsonl", dir, id_names[k], rank);
    if (braid_comm_flight_dump(c[k], path) != BRAID_SUCCESS && !bad) {
      snprintf(msg, len, "%s: %s", id_names[k], braid_comm_last_error(c[k]));
      bad = 3;
    }
    braid_comm_destroy(c[k]);
  }
  return bad;
}

/* Every rank of a communicator writes one id, which no other communicator
 * has: not a split with the same members, not another rank's own split,
 * not the communicators of another job. */
Test(flight, ids_tell_communicators_apart, .timeout = 60) {
  char ids[2][ID_N][2][24]; /* job, communicator, rank */
  for (int job = 0; job < 2; job++) {
    braid_unique_id id;
    start(&id);
    cr_assert_eq(run_ranks(2, &id, rank_ids, NULL, 40000, NULL), 0);
    for (int k = 0; k < ID_N; k++)
      for (int r = 0; r < 2; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s.r%d.jsonl", dir, id_names[k], r);
        id_of(path, ids[job][k][r], sizeof ids[job][k][r]);
        cr_expect_eq(strlen(ids[job][k][r]), 16, "%s: \"%s\"", path,
                     ids[job][k][r]);
      }
  }
  for (int job = 0; job < 2; job++) {
    cr_expect_str_eq(ids[job][ID_WORLD][0], ids[job][ID_WORLD][1]);
    cr_expect_str_eq(ids[job][ID_SAME][0], ids[job][ID_SAME][1]);
    cr_expect_str_neq(ids[job][ID_OWN][0], ids[job][ID_OWN][1]);
  }
  /* any two that are not one communicator differ */
  for (int a = 0; a < 2 * ID_N * 2; a++)
    for (int b = a + 1; b < 2 * ID_N * 2; b++) {
      int ja = a / (2 * ID_N), ka = a / 2 % ID_N, ra = a % 2;
      int jb = b / (2 * ID_N), kb = b / 2 % ID_N, rb = b % 2;
      if (ja == jb && ka == kb && ka != ID_OWN)
        continue; /* two ranks of one communicator */
      cr_expect_str_neq(ids[ja][ka][ra], ids[jb][kb][rb],
                        "job %d %s rank %d, job %d %s rank %d", ja,
                        id_names[ka], ra, jb, id_names[kb], rb);
    }
}

/* ---- a peer that died --------------------------------------------------- */

static int rank_dies(int rank, int n, const braid_unique_id *id, void *arg,
                     char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  float buf[8] = {0};
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  if (rank == 1)
    _exit(0); /* gone before the second call */
  braid_result r =
      braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  snprintf(msg, len, "%d", (int)r);
  braid_comm_abort(c);
  return r == BRAID_ERR_REMOTE ? 0 : 3;
}

Test(flight, written_when_a_peer_dies, .timeout = 60) {
  braid_unique_id id;
  start(&id);
  rank_proc p[2];
  run_ranks(2, &id, rank_dies, NULL, 40000, p);
  cr_assert_eq(p[0].status, 0, "rank 0: %d %s", p[0].status, p[0].msg);
  char path[128];
  snprintf(path, sizeof path, "%s/auto.r0.jsonl", dir);
  const char *s = slurp(path);
  cr_expect(strstr(s, "\"reason\":\"remote\"") != NULL, "%s", s);
  cr_expect(strstr(s, "rank 1 died") != NULL, "%s", s);
  cr_expect(strstr(s, "\"seq\":2,") != NULL, "%s", s);
  cr_expect(strstr(s, "\"state\":\"failed\"") != NULL, "%s", s);
  cr_expect(strstr(s, "\"waits_on\":1,") != NULL, "%s", s);
  cr_expect(strstr(s, "\"result\":\"BRAID_ERR_REMOTE\"") != NULL, "%s", s);
}

/* ---- SIGUSR1 ------------------------------------------------------------ */

static int rank_signal(int rank, int n, const braid_unique_id *id, void *arg,
                       char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  float buf[8] = {0};
  char go[128], ready[128];
  snprintf(go, sizeof go, "%s/go", dir);
  snprintf(ready, sizeof ready, "%s/ready", dir);
  if (rank == 0) { /* its handler is in place: the test may signal */
    FILE *f = fopen(ready, "w");
    if (f == NULL)
      return 3;
    fclose(f);
  }
  if (rank == 1) /* joins once the test saw rank 0's dump */
    for (int i = 0; i < 3000 && access(go, F_OK) != 0; i++)
      usleep(10000);
  braid_result r =
      braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  snprintf(msg, len, "%s", braid_comm_last_error(c));
  braid_comm_destroy(c);
  return r == BRAID_SUCCESS ? 0 : 2;
}

/* A child forked after the communicator, which never uses braid, takes
 * SIGUSR1 as if braid had never been there (it dies of it); it used to
 * inherit the handler, live on, and make its parent write a dump. */
static int rank_fork_usr1(int rank, int n, const braid_unique_id *id, void *arg,
                          char *msg, size_t len) {
  (void)arg;
  braid_comm *c = init(rank, n, id);
  if (c == NULL)
    return 1;
  pid_t child = fork();
  if (child < 0)
    return 2;
  if (child == 0) {
    for (int i = 0; i < 500; i++) /* at most 5 s */
      usleep(10000);
    _exit(7);
  }
  usleep(100000);
  kill(child, SIGUSR1);
  int st = 0;
  waitpid(child, &st, 0);
  usleep(200000); /* time for a dump the signal should not have caused */
  char path[128];
  snprintf(path, sizeof path, "%s/auto.r0.jsonl", dir);
  int dumped = access(path, F_OK) == 0;
  snprintf(msg, len, "child %s %d; parent dump %s",
           WIFSIGNALED(st) ? "killed by signal" : "exited",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
           dumped ? "written" : "none");
  braid_comm_destroy(c);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1 && !dumped ? 0 : 3;
}

Test(flight, a_forked_child_keeps_sigusr1s_default, .timeout = 60) {
  braid_unique_id id;
  start(&id);
  rank_proc p[1];
  spawn_rank(&p[0], 0, 1, &id, rank_fork_usr1, NULL);
  wait_ranks(p, 1, 30000);
  cr_expect_eq(p[0].status, 0, "%d: %s", p[0].status, p[0].msg);
}

Test(flight, written_on_sigusr1, .timeout = 60) {
  braid_unique_id id;
  start(&id);
  rank_proc p[2];
  for (int r = 0; r < 2; r++)
    spawn_rank(&p[r], r, 2, &id, rank_signal, NULL);
  char path[128], go[128], ready[128];
  snprintf(path, sizeof path, "%s/auto.r0.jsonl", dir);
  snprintf(go, sizeof go, "%s/go", dir);
  snprintf(ready, sizeof ready, "%s/ready", dir);
  for (int i = 0; i < 3000 && access(ready, F_OK) != 0; i++)
    usleep(10000);
  cr_assert(access(ready, F_OK) == 0, "rank 0 did not start");
  /* rank 0 waits in its allreduce for rank 1: ask until it answers */
  const char *s = "";
  for (int i = 0; i < 200 && strstr(s, "\"reason\":\"signal\"") == NULL; i++) {
    kill(p[0].pid, SIGUSR1);
    usleep(50000);
    s = slurp(path);
  }
  cr_expect(strstr(s, "\"reason\":\"signal\"") != NULL, "no dump: %s", s);
  cr_expect(strstr(s, "\"seq\":1,") != NULL, "%s", s);
  cr_expect(strstr(s, "\"state\":\"done\"") == NULL, "%s", s);
  FILE *f = fopen(go, "w");
  cr_assert(f != NULL);
  fclose(f);
  wait_ranks(p, 2, 40000);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: %d %s", r, p[r].status, p[r].msg);
}

/* ---- the recorder and braid-trace analyze, end to end --------------------
 * Three ranks; in each case one goes wrong; the others' dumps (written by
 * themselves when the communicator broke) go to braid-trace, whose verdict
 * must name that rank. */

typedef enum { BAD_STOPPED, BAD_SKIPS, BAD_OP, BAD_A2AV } bad_kind;

static int rank_bad(int rank, int n, const braid_unique_id *id, void *arg,
                    char *msg, size_t len) {
  bad_kind k = *(const bad_kind *)arg;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = 2000;
  braid_comm *c = NULL;
  if (braid_comm_init(&c, n, id, rank, &cfg) != BRAID_SUCCESS)
    return 1;
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  braid_result r = BRAID_SUCCESS;
  if ((k == BAD_STOPPED || k == BAD_A2AV) && rank == 2)
    raise(SIGSTOP); /* until the test kills it */
  if (k == BAD_A2AV) {
    size_t one[3] = {1, 1, 1}, at[3] = {0, 1, 2};
    r = braid_alltoallv(buf, one, at, buf + 4, one, at, BRAID_FLOAT32, c, NULL);
  }
  if (k == BAD_SKIPS && rank != 2) /* rank 2 leaves the broadcast out */
    r = braid_broadcast(buf, buf, 8, BRAID_FLOAT32, 0, c, NULL);
  if (r == BRAID_SUCCESS)
    r = braid_allreduce(buf, buf, 8, BRAID_FLOAT32,
                        k == BAD_OP && rank == 2 ? BRAID_MAX : BRAID_SUM, c,
                        NULL);
  snprintf(msg, len, "%d|%s", (int)r, braid_comm_last_error(c));
  braid_comm_abort(c);
  return 0;
}

/* braid-trace analyze on the test's directory: its report and messages. */
static const char *analyze_dir(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s analyze %s 2>&1", BRAID_TRACE, dir);
  FILE *f = popen(cmd, "r");
  cr_assert(f != NULL);
  static char out[32768];
  size_t got = fread(out, 1, sizeof out - 1, f);
  out[got] = '\0';
  int st = pclose(f);
  cr_expect_eq(WEXITSTATUS(st), 0, "%s: %s", cmd, out);
  return out;
}

static void analyze(bad_kind k, const char *want) {
  braid_unique_id id;
  start(&id);
  rank_proc p[3];
  for (int r = 0; r < 3; r++)
    spawn_rank(&p[r], r, 3, &id, rank_bad, &k);
  int stops = k == BAD_STOPPED || k == BAD_A2AV;
  wait_ranks(p, stops ? 2 : 3, 30000);
  if (stops) {
    kill(p[2].pid, SIGKILL);
    waitpid(p[2].pid, NULL, 0);
    close(p[2].fd);
  }
  const char *out = analyze_dir();
  cr_expect(strstr(out, want) != NULL, "no '%s' in:\n%s", want, out);
}

Test(flight, analyzer_names_a_stopped_rank, .timeout = 60) {
  analyze(BAD_STOPPED, "likely culprit: rank 2");
}

Test(flight, analyzer_names_a_rank_that_skipped_a_call, .timeout = 60) {
  analyze(BAD_SKIPS, "likely culprit: rank 2");
}

Test(flight, analyzer_names_a_mismatched_op, .timeout = 60) {
  analyze(BAD_OP, "likely culprit: rank 2");
}

Test(flight, analyzer_names_a_rank_missing_from_an_alltoallv, .timeout = 60) {
  analyze(BAD_A2AV, "likely culprit: rank 2 (rank 0's alltoallv #2 failed "
                    "waiting for it: BRAID_ERR_TIMEOUT)");
}

/* ---- two jobs' dumps in one folder ---------------------------------------
 * Two jobs of 3 ranks, each with a communicator named "comm" (the default
 * name), write their dumps into one folder under names that differ by pid,
 * as the default BRAID_FLIGHT_RECORDER_FILE does: braid-trace must read
 * two communicators, each with its own culprit, not one. */

/* Rank `victim` stops after the first call; the others time out in the
 * second, which writes their dumps. */
static int rank_stops(int rank, int n, const braid_unique_id *id, void *arg,
                      char *msg, size_t len) {
  int victim = *(const int *)arg;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = 1500;
  braid_comm *c = NULL;
  if (braid_comm_init(&c, n, id, rank, &cfg) != BRAID_SUCCESS)
    return 1;
  float buf[8] = {0};
  if (braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  if (rank == victim)
    raise(SIGSTOP); /* until the test kills it */
  braid_result r =
      braid_allreduce(buf, buf, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  snprintf(msg, len, "%d|%s", (int)r, braid_comm_last_error(c));
  braid_comm_abort(c);
  return r == BRAID_ERR_TIMEOUT ? 0 : 3;
}

static void job_with_stopped_rank(int victim) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3]; /* the victim last, so that the others are waited for */
  for (int r = 0, k = 0; r < 3; r++)
    if (r != victim)
      spawn_rank(&p[k++], r, 3, &id, rank_stops, &victim);
  spawn_rank(&p[2], victim, 3, &id, rank_stops, &victim);
  wait_ranks(p, 2, 30000);
  kill(p[2].pid, SIGKILL);
  waitpid(p[2].pid, NULL, 0);
  close(p[2].fd);
  for (int k = 0; k < 2; k++)
    cr_expect_eq(p[k].status, 0, "rank of job (victim %d): %d %s", victim,
                 p[k].status, p[k].msg);
}

Test(flight, two_jobs_in_one_folder_are_not_merged, .timeout = 90) {
  braid_unique_id unused;
  start_with("auto.%p.r%r.jsonl", &unused);
  job_with_stopped_rank(2);
  job_with_stopped_rank(1);
  const char *out = analyze_dir();
  cr_expect_eq(count_of(out, "comm \"comm\" (3 ranks, id "), 2,
               "not two communicators:\n%s", out);
  cr_expect(strstr(out, "likely culprit: rank 2 (") != NULL, "%s", out);
  cr_expect(strstr(out, "likely culprit: rank 1 (") != NULL, "%s", out);
  cr_expect(strstr(out, "two dumps of rank") == NULL, "%s", out);
  cr_expect(strstr(out, "no comm_id") == NULL, "%s", out);
}
