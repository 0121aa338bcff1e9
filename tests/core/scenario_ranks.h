/*
 * The scenarios' rank harness (tests/core/scenarios*.c): forks n ranks, each
 * making a communicator and running a function.
 */
#ifndef BRAID_TESTS_CORE_SCENARIO_RANKS_H
#define BRAID_TESTS_CORE_SCENARIO_RANKS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "braid.h"

typedef int (*rank_fn)(braid_comm *c, int rank, int n);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Forks n ranks running fn; fills status[] with each exit code (128+signal
 * when killed, -1 when it had to be killed after timeout_s). */
static void run_ranks(int n, rank_fn fn, double timeout_s, int *status) {
  /* Fork first; rank 0 then makes the id (its root service thread must not
   * exist while anything forks) and hands it to the others through pipes. */
  int pipes[16][2];
  for (int r = 1; r < n; r++)
    cr_assert(pipe(pipes[r]) == 0);
  pid_t pids[16];
  for (int r = 0; r < n; r++) {
    pid_t p = test_fork();
    cr_assert(p >= 0);
    if (p == 0) {
      braid_unique_id id;
      if (r == 0) {
        if (braid_get_unique_id(&id) != BRAID_SUCCESS)
          _exit(101);
        for (int q = 1; q < n; q++)
          if (write(pipes[q][1], &id, sizeof id) != (ssize_t)sizeof id)
            _exit(102);
      } else if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
        _exit(103);
      }
      braid_comm *c = NULL;
      braid_result res = braid_comm_init(&c, n, &id, r, NULL);
      if (res != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: init: %s\n", r, braid_result_string(res));
        _exit(100);
      }
      int rc = fn(c, r, n);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = p;
  }
  for (int r = 1; r < n; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  double end = now_s() + timeout_s;
  for (int r = 0; r < n; r++)
    status[r] = -2;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; r++) {
      if (status[r] != -2)
        continue;
      int st;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        left--;
      }
    }
    if (left > 0 && now_s() > end) {
      for (int r = 0; r < n; r++)
        if (status[r] == -2) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          status[r] = -1;
        }
      break;
    }
    usleep(2000);
  }
}

#endif
