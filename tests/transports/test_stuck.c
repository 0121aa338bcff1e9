/*
 * A stopped rank is named. Three ranks over shm; rank 2 stops itself
 * (SIGSTOP) before the second allreduce. The others' waits are noted in
 * their segment headers (src/exec_wait.c), so when their wait times out the
 * message follows who waits for whom to the rank at the end of the chain
 * and says that its process is stopped; a rank that waits for another
 * survivor names the stopped rank too, not only the peer it waited on.
 *
 * Over tcp (as between hosts, where no segment header is seen), the
 * waiting ranks exchange heartbeats on the control connections
 * (transports/tcp_ctl.c) once a wait lasts BRAID_HEARTBEAT_MS; the stopped
 * rank answers none, and the others name it as one that has not answered
 * a heartbeat, in a warning and in the timeout's message.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

static int rank_stuck(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t len) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = arg;
  cfg.timeout_ms = 3000;
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, nranks, id, rank, &cfg);
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "init: %s", braid_result_string(r));
    return 1;
  }
  float buf[4] = {1, 2, 3, 4};
  r = braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "first allreduce: %s", braid_comm_last_error(c));
    return 2;
  }
  if (rank == 2)
    raise(SIGSTOP); /* until the test kills it */
  r = braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  snprintf(msg, len, "%d|%s", (int)r, braid_comm_last_error(c));
  braid_comm_abort(c);
  return 0;
}

Test(stuck, stopped_rank_named_at_the_timeout, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  for (int r = 0; r < 3; r++)
    spawn_rank(&p[r], r, 3, &id, rank_stuck, "shm");
  wait_ranks(p, 2, 30000); /* ranks 0 and 1: their timeout is 3 s */
  kill(p[2].pid, SIGKILL);
  waitpid(p[2].pid, NULL, 0);
  close(p[2].fd);
  char want[64];
  snprintf(want, sizeof want, "rank 2 (pid %d) is stopped", (int)p[2].pid);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
    int res = -1;
    cr_assert(sscanf(p[r].msg, "%d|", &res) == 1, "rank %d: %s", r, p[r].msg);
    cr_expect_eq(res, BRAID_ERR_TIMEOUT, "rank %d: %s", r, p[r].msg);
    cr_expect(strstr(p[r].msg, want) != NULL, "rank %d: no '%s' in: %s", r,
              want, p[r].msg);
  }
}

Test(stuck, stopped_rank_named_by_heartbeat_over_tcp, .timeout = 60) {
  /* read by each rank's first configuration look-up, after the fork */
  setenv("BRAID_HEARTBEAT_MS", "200", 1);
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  for (int r = 0; r < 3; r++)
    spawn_rank(&p[r], r, 3, &id, rank_stuck, "tcp");
  wait_ranks(p, 2, 30000);
  kill(p[2].pid, SIGKILL);
  waitpid(p[2].pid, NULL, 0);
  close(p[2].fd);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
    int res = -1;
    cr_assert(sscanf(p[r].msg, "%d|", &res) == 1, "rank %d: %s", r, p[r].msg);
    cr_expect_eq(res, BRAID_ERR_TIMEOUT, "rank %d: %s", r, p[r].msg);
    cr_expect(strstr(p[r].msg, "rank 2 (host ") != NULL &&
                  strstr(p[r].msg, "has not answered a heartbeat") != NULL,
              "rank %d: the stopped rank 2 is not named by its heartbeat: %s",
              r, p[r].msg);
  }
}
