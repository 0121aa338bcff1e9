/*
 * braid_comm_abort from another thread: a thread blocked in an allreduce
 * whose peer is stopped (SIGSTOP) returns BRAID_ERR_ABORTED, well before the
 * communicator's timeout, and the abort returns once that thread has left
 * the call (it frees the communicator then). The same for a thread blocked
 * in braid_comm_finalize, _split and _shrink, which wait in the bootstrap's
 * exchanges: the abort freed the communicator under them (a crash). The
 * time from the abort to the release is printed, not asserted
 * (docs/RUNTIME.md gives it).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../transports/ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

typedef struct blocked {
  braid_comm *c;
  const char *call;
  braid_result r;
  double at; /* when its call returned */
} blocked;

static void *blocked_main(void *arg) {
  blocked *b = arg;
  float buf[4] = {1, 2, 3, 4};
  braid_comm *out = NULL;
  if (strcmp(b->call, "finalize") == 0)
    b->r = braid_comm_finalize(b->c);
  else if (strcmp(b->call, "split") == 0)
    b->r = braid_comm_split(b->c, 0, 0, &out);
  else if (strcmp(b->call, "shrink") == 0)
    b->r = braid_comm_shrink(b->c, NULL, 0, &out);
  else
    b->r = braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, b->c, NULL);
  b->at = now_ms();
  if (out != NULL)
    braid_comm_destroy(out);
  return NULL;
}

typedef struct case_ {
  const char *tp, *call;
} case_;

static int rank_abort(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t len) {
  const case_ *k = arg;
  const char *tp = k->tp;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = tp;
  cfg.timeout_ms = 30000;
  braid_comm *c = NULL;
  if (braid_comm_init(&c, nranks, id, rank, &cfg) != BRAID_SUCCESS)
    return 1;
  float buf[4] = {0};
  if (braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL))
    return 2;
  if (rank == 1)
    raise(SIGSTOP); /* until the test kills it */
  blocked b = {c, k->call, BRAID_SUCCESS, 0};
  pthread_t t;
  if (pthread_create(&t, NULL, blocked_main, &b) != 0)
    return 3;
  usleep(300000); /* the call waits for the stopped rank by now */
  double t0 = now_ms();
  braid_result ra = braid_comm_abort(c);
  double t1 = now_ms();
  pthread_join(t, NULL);
  snprintf(msg, len, "%d|%d|%.1f|%.1f", (int)ra, (int)b.r, b.at - t0, t1 - t0);
  return 0;
}

static void abort_in(const char *tp, const char *call) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  case_ k = {tp, call};
  for (int r = 0; r < 2; r++)
    spawn_rank(&p[r], r, 2, &id, rank_abort, &k);
  wait_ranks(p, 1, 25000); /* rank 0; rank 1 stays stopped */
  kill(p[1].pid, SIGKILL);
  waitpid(p[1].pid, NULL, 0);
  close(p[1].fd);
  cr_assert_eq(p[0].status, 0, "%s: rank 0: status %d: %s", tp, p[0].status,
               p[0].msg);
  int ra = -1, rb = -1;
  double released = -1, returned = -1;
  cr_assert(sscanf(p[0].msg, "%d|%d|%lf|%lf", &ra, &rb, &released, &returned) ==
                4,
            "%s: %s", tp, p[0].msg);
  cr_expect_eq(ra, BRAID_SUCCESS, "%s: abort gave %d", tp, ra);
  cr_expect_eq(rb, BRAID_ERR_ABORTED, "%s: the blocked call gave %d", tp, rb);
  /* released by the abort, not by the 30 s timeout */
  cr_expect(released >= 0 && released < 10000,
            "%s: the blocked call returned %.1f ms after the abort", tp,
            released);
  cr_expect(returned >= released - 1,
            "%s: abort returned at %.1f ms, before "
            "the call it waited for (%.1f ms)",
            tp, returned, released);
  fprintf(stderr, "%s: the blocked %s returned %.1f ms after the abort\n", tp,
          call, released);
}

static void abort_on(const char *tp) { abort_in(tp, "allreduce"); }

Test(abort, releases_a_blocked_call_over_shm, .timeout = 60) {
  abort_on("shm");
}

Test(abort, releases_a_blocked_call_over_tcp, .timeout = 60) {
  abort_on("tcp");
}

Test(abort, releases_a_blocked_finalize, .timeout = 60) {
  abort_in("shm", "finalize");
}

Test(abort, releases_a_blocked_split, .timeout = 60) {
  abort_in("shm", "split");
}

Test(abort, releases_a_blocked_shrink, .timeout = 60) {
  abort_in("tcp", "shrink");
}
