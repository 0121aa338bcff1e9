/*
 * Graphviz for braid-topo (tools/topo_dot.h).
 */
#include "tools/topo_dot.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int topo_run_dot(const char *who, const char *fmt, const char *in,
                 const char *out) {
  char tflag[16];
  snprintf(tflag, sizeof(tflag), "-T%s", fmt);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
    return 1;
  }
  if (pid == 0) {
    execlp("dot", "dot", tflag, "-o", out, in, (char *)NULL);
    fprintf(stderr, "%s: cannot run Graphviz 'dot' (%s); install graphviz\n",
            who, strerror(errno));
    _exit(127);
  }
  struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
      if (WIFSIGNALED(st))
        fprintf(stderr, "%s: dot was killed by signal %d\n", who, WTERMSIG(st));
      else if (WEXITSTATUS(st) != 127) /* 127: said when exec failed */
        fprintf(stderr, "%s: dot failed (exit %d; its message above)\n", who,
                WEXITSTATUS(st));
      return 1;
    }
    if (w < 0 && errno != EINTR) {
      fprintf(stderr, "%s: waitpid: %s\n", who, strerror(errno));
      return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > TOPO_DOT_TIMEOUT_S) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      fprintf(stderr, "%s: dot took more than %d s\n", who, TOPO_DOT_TIMEOUT_S);
      return 1;
    }
    nanosleep(&nap, NULL);
  }
}
