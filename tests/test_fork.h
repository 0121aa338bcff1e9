/*
 * Forking rank processes from a test process that has other threads.
 *
 * A Criterion test runs in a worker process with a messaging thread of its
 * own (it reports assertions and phases to the runner). fork() copies only
 * the calling thread: a lock that another thread holds at that instant stays
 * held in the child forever. glibc's malloc guards its own locks around
 * fork, but AddressSanitizer's allocator in Debian 12's toolchain does not,
 * so a rank forked while the messaging thread is inside malloc or free
 * hangs at its first allocation of that size class (seen as a rank stuck in
 * a new thread's start, in ASan's allocator). test_fork waits until every
 * other thread of the process sleeps (twice in a row, 1 ms apart; at most
 * two seconds), then forks. Use it for every fork in tests. The child gets
 * SIGKILL when the forking thread ends (PR_SET_PDEATHSIG): fork from the
 * test's own thread.
 */
#ifndef BRAID_TEST_FORK_H
#define BRAID_TEST_FORK_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* 1 when every thread of this process but the caller is asleep ('S'). */
static inline int test_fork_others_asleep(void) {
  long me = (long)syscall(SYS_gettid);
  DIR *d = opendir("/proc/self/task");
  if (d == NULL)
    return 1; /* no way to tell: fork anyway */
  int quiet = 1;
  for (struct dirent *e = readdir(d); e != NULL && quiet; e = readdir(d)) {
    long tid = strtol(e->d_name, NULL, 10);
    if (tid <= 0 || tid == me)
      continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue; /* it exited */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "tid (name) S ..." */
    quiet = p == NULL || (p[1] == ' ' && p[2] == 'S');
  }
  closedir(d);
  return quiet;
}

static inline pid_t test_fork(void) {
  struct timespec ms = {0, 1000000};
  int calm = 0;
  for (int i = 0; i < 2000 && calm < 2; i++) {
    calm = test_fork_others_asleep() ? calm + 1 : 0;
    if (calm < 2)
      nanosleep(&ms, NULL);
  }
  pid_t parent = getpid();
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    /* a rank dies with the test that forked it: a test killed at its time
     * limit left ranks spinning, which slowed a whole suite by half */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
  }
  return p;
}

#endif
