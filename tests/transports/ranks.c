#include "ranks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "src/log.h"
#include "transports/sock_util.h"

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void spawn_rank(rank_proc *p, int rank, int nranks, const braid_unique_id *id,
                rank_fn fn, void *arg) {
  memset(p, 0, sizeof(*p));
  int fds[2];
  if (pipe(fds) != 0) {
    p->pid = -1;
    p->done = 1;
    p->status = 127;
    snprintf(p->msg, sizeof(p->msg), "pipe: %s", strerror(errno));
    return;
  }
  fflush(NULL);
  pid_t pid = test_fork();
  if (pid == 0) {
    close(fds[0]);
    char msg[512] = "";
    int rc = fn(rank, nranks, id, arg, msg, sizeof(msg));
    ssize_t w = write(fds[1], msg, strlen(msg));
    (void)w;
    close(fds[1]);
    _exit(rc);
  }
  close(fds[1]);
  p->pid = pid;
  p->fd = fds[0];
  if (pid < 0) {
    p->done = 1;
    p->status = 127;
    snprintf(p->msg, sizeof(p->msg), "fork: %s", strerror(errno));
    close(fds[0]);
  }
}

static void reap(rank_proc *p, int st) {
  p->done = 1;
  p->status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  fcntl(p->fd, F_SETFL, O_NONBLOCK);
  ssize_t n = read(p->fd, p->msg, sizeof(p->msg) - 1);
  p->msg[n > 0 ? n : 0] = '\0';
  close(p->fd);
}

static int poll_once(rank_proc *p, int n) {
  int got = -1;
  for (int i = 0; i < n; i++) {
    if (p[i].done)
      continue;
    int st;
    if (waitpid(p[i].pid, &st, WNOHANG) == p[i].pid) {
      reap(&p[i], st);
      if (got < 0)
        got = i;
    }
  }
  return got;
}

int wait_any(rank_proc *p, int n, int timeout_ms) {
  long long end = now_ms() + timeout_ms;
  while (now_ms() < end) {
    int i = poll_once(p, n);
    if (i >= 0)
      return i;
    usleep(5000);
  }
  return -1;
}

void wait_ranks(rank_proc *p, int n, int timeout_ms) {
  long long end = now_ms() + timeout_ms;
  for (;;) {
    poll_once(p, n);
    int left = 0;
    for (int i = 0; i < n; i++)
      left += !p[i].done;
    if (left == 0)
      return;
    if (now_ms() >= end)
      break;
    usleep(5000);
  }
  for (int i = 0; i < n; i++) {
    if (p[i].done)
      continue;
    kill(p[i].pid, SIGKILL);
    int st;
    waitpid(p[i].pid, &st, 0);
    reap(&p[i], st);
    p[i].status = RANK_TIMED_OUT;
  }
}

int run_ranks(int nranks, const braid_unique_id *id, rank_fn fn, void *arg,
              int timeout_ms, rank_proc *out) {
  rank_proc *p = out ? out : calloc((size_t)nranks, sizeof(*p));
  for (int r = 0; r < nranks; r++)
    spawn_rank(&p[r], r, nranks, id, fn, arg);
  wait_ranks(p, nranks, timeout_ms);
  int bad = 0;
  for (int r = 0; r < nranks; r++)
    if (p[r].status != 0) {
      bad++;
      fprintf(stderr, "rank %d/%d failed (status %d%s): %s\n", r, nranks,
              p[r].status,
              p[r].status == RANK_TIMED_OUT ? ", killed at the deadline" : "",
              p[r].msg);
    }
  if (out == NULL)
    free(p);
  return bad;
}

int rogue_connect(const struct sockaddr_storage *addr, uint32_t magic,
                  const char *secret) {
  int fd;
  if (sock_connect(addr, sock_now_ms() + 5000, 0, &fd) != 0) {
    fprintf(stderr, "rogue_connect: %s\n", err_msg());
    return -1;
  }
  if (secret) {
    /* Answer at once, without waiting for the challenge (the listener may
     * not serve yet): an answer signed with this secret over a nonce of
     * zeros, followed by zeros longer than any greeting's body. */
    uint8_t msg[sizeof(sock_auth) + SOCK_GATE_MAX_MSG], zero[SOCK_NONCE];
    memset(msg, 0, sizeof(msg));
    memset(zero, 0, sizeof(zero));
    sock_auth a = {.magic = magic, .kind = 1};
    memset(a.nonce, 0x11, sizeof(a.nonce));
    sock_auth_sign((const uint8_t *)secret, magic, a.kind, zero, a.nonce,
                   msg + sizeof(a), SOCK_GATE_MAX_MSG, a.mac);
    memcpy(msg, &a, sizeof(a));
    if (sock_write_full(fd, msg, sizeof(msg), sock_now_ms() + 5000) != 0) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

int closed_by_peer(int fd, int timeout_ms) {
  int64_t end = sock_now_ms() + timeout_ms;
  for (;;) {
    char c[256];
    int rc = sock_read_full(fd, c, sizeof(c), end);
    if (rc == SOCK_EOF || rc == SOCK_RESET)
      return 1;
    if (rc != 0)
      return 0;
  }
}

int find_listener(pid_t pid, struct sockaddr_storage *out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  unsigned long inodes[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 64) {
    char lnk[400], tgt[128];
    snprintf(lnk, sizeof(lnk), "%s/%s", path, e->d_name);
    ssize_t k = readlink(lnk, tgt, sizeof(tgt) - 1);
    if (k <= 0)
      continue;
    tgt[k] = '\0';
    unsigned long ino;
    if (sscanf(tgt, "socket:[%lu]", &ino) != 1)
      continue;
    /* skip sockets this (parent) process also holds: the root listener */
    char mine[300];
    snprintf(mine, sizeof(mine), "/proc/self/fd/%s", e->d_name);
    k = readlink(mine, tgt, sizeof(tgt) - 1);
    if (k > 0) {
      tgt[k] = '\0';
      unsigned long ino2;
      if (sscanf(tgt, "socket:[%lu]", &ino2) == 1 && ino2 == ino)
        continue;
    }
    inodes[n++] = ino;
  }
  closedir(d);
  snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  char line[512];
  int found = -1;
  while (fgets(line, sizeof(line), f) && found < 0) {
    unsigned addr, port, st;
    unsigned long ino;
    if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*d %*d %lu",
               &addr, &port, &st, &ino) != 4 ||
        st != 0x0A)
      continue;
    for (int i = 0; i < n; i++)
      if (inodes[i] == ino) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        memset(out, 0, sizeof(*out));
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = addr; /* /proc prints it in memory order */
        in->sin_port = htons((uint16_t)port);
        found = 0;
      }
  }
  fclose(f);
  return found;
}
