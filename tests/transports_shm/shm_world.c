/* Rank processes for the shared-memory transport's tests (shm_world.h). */
#define _GNU_SOURCE
#include "tests/transports_shm/shm_world.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "src/config.h"
#include "src/log.h"

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int shm_up(world *w, void **st, int nch, int nslots, size_t slot_bytes,
           const uint8_t *peers) {
  uint8_t all[MAXR];
  for (int i = 0; i < w->n; i++)
    all[i] = i != w->rank;
  tp_setup su;
  memset(&su, 0, sizeof(su));
  su.boot = w->b;
  su.rank = w->rank;
  su.nranks = w->n;
  su.nchannels = nch;
  su.nslots = nslots;
  su.slot_bytes = slot_bytes;
  su.timeout_ms = 10000;
  cfg_tp_settings(&su.set);
  int r = tp_shm.setup(&su, peers ? peers : all, st);
  if (r != BRAID_SUCCESS)
    fprintf(stderr, "rank %d: shm setup: %s\n", w->rank, err_msg());
  return r;
}

void fill(uint8_t *p, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (uint8_t)(x >> 16);
  }
}

int run_ranks(int n, int (*fn)(world *), int killed_rank) {
  /* Fork first: rank 0 makes the id (the root service thread must not run
   * while anything forks) and hands it to the others through pipes. */
  int pipes[MAXR][2];
  for (int r = 1; r < n; r++)
    cr_assert_eq(pipe(pipes[r]), 0);
  pid_t pids[MAXR];
  for (int r = 0; r < n; r++) {
    pids[r] = test_fork();
    cr_assert_geq(pids[r], 0, "fork: %s", strerror(errno));
    if (pids[r] == 0) {
      braid_unique_id id;
      if (r == 0) {
        if (boot_unique_id(&id) != BRAID_SUCCESS) {
          fprintf(stderr, "boot_unique_id: %s\n", err_msg());
          _exit(2);
        }
        for (int q = 1; q < n; q++)
          if (write(pipes[q][1], &id, sizeof id) != (ssize_t)sizeof id)
            _exit(2);
      } else if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
        _exit(2);
      }
      world w = {NULL, r, n};
      if (boot_init(&id, r, n, 10000, &w.b) != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: boot_init: %s\n", r, err_msg());
        _exit(2);
      }
      int rc = fn(&w);
      boot_close(w.b);
      _exit(rc);
    }
  }
  for (int r = 1; r < n; r++) {
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  int status[MAXR], done = 0, skipped = 0;
  int64_t deadline = now_ms() + 30000;
  for (int r = 0; r < n; r++)
    status[r] = -1;
  while (done < n && now_ms() < deadline) {
    for (int r = 0; r < n; r++)
      if (status[r] == -1 && waitpid(pids[r], &status[r], WNOHANG) > 0)
        done++;
    if (done < n)
      usleep(5000);
  }
  for (int r = 0; r < n; r++)
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
  /* Nothing of these processes stays in /dev/shm. */
  DIR *d = opendir("/dev/shm");
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, "braid-", 6) != 0)
      continue;
    for (int r = 0; r < n; r++) {
      char key[32];
      snprintf(key, sizeof(key), "-%d-", (int)pids[r]);
      cr_expect_null(strstr(de->d_name, key), "left in /dev/shm: %s",
                     de->d_name);
    }
  }
  if (d)
    closedir(d);
  for (int r = 0; r < n; r++) {
    cr_assert_neq(status[r], -1, "rank %d did not finish within 30 s", r);
    if (r == killed_rank) {
      cr_assert(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL,
                "rank %d should have been killed", r);
      continue;
    }
    cr_assert(WIFEXITED(status[r]), "rank %d died of signal %d", r,
              WIFSIGNALED(status[r]) ? WTERMSIG(status[r]) : 0);
    if (WEXITSTATUS(status[r]) == SKIP_CODE) {
      skipped = 1;
      continue;
    }
    cr_assert_eq(WEXITSTATUS(status[r]), 0, "rank %d failed (exit %d)", r,
                 WEXITSTATUS(status[r]));
  }
  return skipped;
}
