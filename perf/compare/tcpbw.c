/*
 * TCP ceiling for perf/compare: two processes joined by one loopback TCP
 * connection (TCP_NODELAY) push bytes at each other.
 *
 *   tcpbw <minbytes> <maxbytes>
 *
 * Per size S:
 *   pingpong: A sends S, B sends S back; one-way time = round trip / 2;
 *   bidir:    both send S and receive S at the same time (what a 2-rank ring
 *             step does); time per exchange.
 * Prints: size_bytes pingpong_us pingpong_GBps bidir_us bidir_GBps, GB/s
 * being S divided by the time (per direction). For 2 ranks, bidir GB/s is the
 * busbw ceiling of allreduce, allgather and reduce-scatter; pingpong GB/s is
 * the ceiling of broadcast.
 *
 *   tcpbw <minbytes> <maxbytes> stream|stream-poll
 *
 * A repeated small broadcast with no library: A writes messages of S bytes
 * and a 16-byte header back to back, one send each, and B reads each one
 * whole, spinning on nonblocking reads (stream) or on poll() with a read
 * only once it says there is data (stream-poll); time per message, the
 * pace at which a root can issue blocking broadcasts that each need one
 * write. Prints: size_bytes stream_us.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, 0);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN) {
        struct pollfd pf = {fd, POLLOUT, 0};
        poll(&pf, 1, 10000);
        continue;
      }
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int recv_all(int fd, char *p, size_t n) {
  while (n) {
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0 && errno == EAGAIN) {
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, 10000);
        continue;
      }
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Sends and receives n bytes at once on a nonblocking socket. */
static int exchange(int fd, const char *s, char *r, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    struct pollfd pf = {
        fd, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
    if (poll(&pf, 1, 10000) <= 0)
      return -1;
    if ((pf.revents & POLLOUT) && sent < n) {
      ssize_t k = send(fd, s + sent, n - sent, 0);
      if (k > 0)
        sent += (size_t)k;
      else if (k < 0 && errno != EAGAIN && errno != EINTR)
        return -1;
    }
    if ((pf.revents & POLLIN) && got < n) {
      ssize_t k = recv(fd, r + got, n - got, 0);
      if (k > 0)
        got += (size_t)k;
      else if (k == 0 || (errno != EAGAIN && errno != EINTR))
        return -1;
    }
  }
  return 0;
}

/* Both sides meet: A writes a byte and waits for B's, B the other way. */
static int line_up(int fd, int me) {
  char c = 0;
  if (me == 0)
    return send_all(fd, &c, 1) || recv_all(fd, &c, 1) ? -1 : 0;
  return recv_all(fd, &c, 1) || send_all(fd, &c, 1) ? -1 : 0;
}

static int iters_for(size_t bytes) {
  size_t it = bytes ? ((size_t)256 << 20) / bytes : 20000;
  if (it > 20000)
    it = 20000;
  if (it < 3)
    it = 3;
  return (int)it;
}

static int sweep(int fd, int me, size_t minb, size_t maxb, char *s, char *r) {
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? bytes * 2 : 1) {
    int it = iters_for(bytes);
    double pp = 0, bd = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
      int n = pass ? it : (it < 10 ? it : 10);
      if (line_up(fd, me))
        return -1;
      double t0 = now();
      for (int i = 0; i < n; i++) {
        if (me == 0) {
          if (send_all(fd, s, bytes) || recv_all(fd, r, bytes))
            return -1;
        } else if (recv_all(fd, r, bytes) || send_all(fd, s, bytes))
          return -1;
      }
      pp = (now() - t0) / n / 2;
      t0 = now();
      for (int i = 0; i < n; i++)
        if (exchange(fd, s, r, bytes))
          return -1;
      bd = (now() - t0) / n;
    }
    if (me == 0) {
      printf("%zu %.3f %.6g %.3f %.6g\n", bytes, pp * 1e6,
             pp > 0 ? (double)bytes / 1e9 / pp : 0, bd * 1e6,
             bd > 0 ? (double)bytes / 1e9 / bd : 0);
      fflush(stdout);
    }
    if (bytes >= maxb)
      break;
  }
  return 0;
}

/* The stream of S-byte messages, each with a 16-byte header, one send
 * each; the receiver spins on nonblocking reads, or on poll() first. */
static int stream(int fd, int me, size_t minb, size_t maxb, char *s, char *r,
                  int polled) {
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? bytes * 2 : 1) {
    size_t msg = bytes + 16;
    int it = iters_for(msg) * 5;
    double t = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
      int n = pass ? it : it / 10;
      if (line_up(fd, me))
        return -1;
      double t0 = now();
      for (int i = 0; i < n; i++) {
        if (me == 0) {
          if (send_all(fd, s, msg))
            return -1;
          continue;
        }
        for (size_t got = 0; got < msg;) {
          struct pollfd pf = {fd, POLLIN, 0};
          while (polled && poll(&pf, 1, 0) == 0)
            ;
          ssize_t k = recv(fd, r + got, msg - got, MSG_DONTWAIT);
          if (k > 0)
            got += (size_t)k;
          else if (k == 0 || (errno != EAGAIN && errno != EINTR))
            return -1;
        }
      }
      /* the last message is in: the receiver says so */
      char c = 0;
      if (me == 0 ? recv_all(fd, &c, 1) : send_all(fd, &c, 1))
        return -1;
      t = (now() - t0) / n;
    }
    if (me == 0) {
      printf("%zu %.3f\n", bytes, t * 1e6);
      fflush(stdout);
    }
    if (bytes >= maxb)
      break;
  }
  return 0;
}

static int run(int fd, int me, size_t minb, size_t maxb, int streamed) {
  size_t cap = (maxb < 64 ? 64 : maxb) + 16;
  char *s = malloc(cap), *r = malloc(cap);
  int rc = -1;
  if (s && r) {
    memset(s, me + 1, cap);
    memset(r, 0, cap);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    rc = streamed ? stream(fd, me, minb, maxb, s, r, streamed == 2)
                  : sweep(fd, me, minb, maxb, s, r);
  }
  free(s);
  free(r);
  return rc;
}

int main(int argc, char **argv) {
  size_t minb, maxb;
  int streamed = argc != 4                             ? 0
                 : strcmp(argv[3], "stream") == 0      ? 1
                 : strcmp(argv[3], "stream-poll") == 0 ? 2
                                                       : 0;
  if ((argc != 3 && !streamed) || h_size(argv[1], &minb) ||
      h_size(argv[2], &maxb) || minb > maxb) {
    fprintf(stderr, "usage: %s <minbytes> <maxbytes> [stream|stream-poll]\n",
            argv[0]);
    return 2;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al)) {
    perror("tcpbw: listen");
    return 3;
  }
  printf("# TCP loopback ceiling, 2 processes, one connection\n");
  printf(streamed ? "# size_bytes stream_us\n"
                  : "# size_bytes pingpong_us pingpong_GBps bidir_us "
                    "bidir_GBps\n");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(ls);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
      _exit(3);
    _exit(run(fd, 1, minb, maxb, streamed) ? 3 : 0);
  }
  int fd = accept(ls, NULL, NULL);
  close(ls);
  int rc = fd < 0 || run(fd, 0, minb, maxb, streamed) ? 3 : 0;
  if (fd >= 0)
    close(fd);
  int st;
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
    rc = 3;
  if (rc)
    fprintf(stderr, "tcpbw: a transfer failed\n");
  return rc;
}
