#include "transports/sock_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/common.h"

int64_t sock_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sock_left_ms(int64_t deadline) {
  int64_t left = deadline - sock_now_ms();
  if (left < 0)
    return 0;
  if (left > 1000000000)
    return 1000000000;
  return (int)left;
}

socklen_t sock_addr_len(const struct sockaddr_storage *a) {
  if (a->ss_family == AF_INET)
    return sizeof(struct sockaddr_in);
  if (a->ss_family == AF_INET6)
    return sizeof(struct sockaddr_in6);
  return 0;
}

const char *sock_addr_str(const struct sockaddr_storage *a, char *buf,
                          size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)a;
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%d", ip, ntohs(in->sin_port));
  } else if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    snprintf(buf, len, "[%s]:%d", ip, ntohs(in6->sin6_port));
  } else {
    snprintf(buf, len, "(address family %d)", (int)a->ss_family);
  }
  return buf;
}

int sock_addr_port(const struct sockaddr_storage *a) {
  if (a->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)a)->sin_port);
  if (a->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
  return -1;
}

void sock_addr_set_port(struct sockaddr_storage *a, int port) {
  if (a->ss_family == AF_INET)
    ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
  else if (a->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
}

int sock_ifname_match(const char *spec, const char *name) {
  if (spec == NULL || spec[0] == '\0')
    return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') {
    exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    exact = 1;
    spec++;
  }
  int hit = 0;
  const char *p = spec;
  while (*p && !hit) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0) {
      if (exact)
        hit = strlen(name) == n && strncmp(name, p, n) == 0;
      else
        hit = strncmp(name, p, n) == 0;
    }
    p += n;
    if (*p == ',')
      p++;
  }
  return exclude ? !hit : hit;
}

int sock_ifname_names(const char *spec) {
  if (spec == NULL || spec[0] == '\0')
    return 1; /* no filter */
  spec += *spec == '^';
  spec += *spec == '=';
  return spec[strspn(spec, ",")] != '\0';
}

static int usable_family(const struct ifaddrs *ifa) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP))
    return 0;
  if (ifa->ifa_addr->sa_family == AF_INET)
    return AF_INET;
  if (ifa->ifa_addr->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
      return 0;
    return AF_INET6;
  }
  return 0;
}

static void take(const struct ifaddrs *ifa, struct sockaddr_storage *out,
                 char *ifname, size_t ifname_len) {
  memset(out, 0, sizeof(*out));
  memcpy(out, ifa->ifa_addr,
         ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                             : sizeof(struct sockaddr_in6));
  sock_addr_set_port(out, 0);
  if (ifname && ifname_len)
    snprintf(ifname, ifname_len, "%s", ifa->ifa_name);
}

void sock_list_ifaces(char *buf, size_t len) {
  if (len == 0)
    return;
  buf[0] = '\0';
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) {
    snprintf(buf, len, "(getifaddrs failed: %s)", strerror(errno));
    return;
  }
  size_t n = 0;
  for (struct ifaddrs *ifa = list; ifa != NULL && n + 1 < len;
       ifa = ifa->ifa_next) {
    if (!usable_family(ifa))
      continue;
    struct sockaddr_storage a;
    char as[80];
    take(ifa, &a, NULL, 0);
    sock_addr_str(&a, as, sizeof as);
    char *colon = strrchr(as, ':'); /* the port (0) says nothing */
    if (colon != NULL)
      *colon = '\0';
    const char *ip = as[0] == '[' ? as + 1 : as;
    if (as[0] == '[' && colon != NULL && colon[-1] == ']')
      colon[-1] = '\0';
    int w =
        snprintf(buf + n, len - n, "%s%s %s%s", n ? ", " : "", ifa->ifa_name,
                 ip, (ifa->ifa_flags & IFF_LOOPBACK) ? " (loopback)" : "");
    if (w < 0 || (size_t)w >= len - n)
      break;
    n += (size_t)w;
  }
  freeifaddrs(list);
  if (n == 0)
    snprintf(buf, len, "none");
}

int sock_pick_addr_family(const char *spec, int prefer,
                          struct sockaddr_storage *out, char *ifname,
                          size_t ifname_len) {
  if (!sock_ifname_names(spec))
    return SOCK_FAIL(SOCK_ERR,
                     "BRAID_SOCKET_IFNAME=%s names no interface (expected "
                     "name prefixes such as eth,ib; ^docker excludes, =eth0 "
                     "is an exact name)",
                     spec);
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return SOCK_FAIL(SOCK_ERR, "getifaddrs failed: %s", strerror(errno));
  int found = 0;
  int has_spec = spec != NULL && spec[0] != '\0';
  if (!has_spec || prefer != AF_INET6)
    prefer = AF_INET;
  int other = prefer == AF_INET6 ? AF_INET : AF_INET6;
  /* With a filter: the preferred family, then the other, on interfaces
   * that are not loopback; then the same on loopback. A filter that only
   * excludes ("^eth0") passes lo too, and a listener there is unreachable
   * from other hosts, so loopback is taken only when nothing else passes
   * (or when the filter names it: "lo", "=lo"). */
  for (int pass = 0; pass < 4 && !found; pass++) {
    int want = pass % 2 == 0 ? prefer : other;
    int loop = pass >= 2;
    if (!has_spec && pass > 0)
      break; /* no filter: IPv4 off loopback only, as below */
    for (struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next) {
      if (usable_family(ifa) != want)
        continue;
      if (has_spec) {
        if (!(ifa->ifa_flags & IFF_LOOPBACK) != !loop ||
            !sock_ifname_match(spec, ifa->ifa_name))
          continue;
      } else {
        if (want != AF_INET || (ifa->ifa_flags & IFF_LOOPBACK) ||
            strncmp(ifa->ifa_name, "docker", 6) == 0 ||
            strncmp(ifa->ifa_name, "virbr", 5) == 0)
          continue;
      }
      take(ifa, out, ifname, ifname_len);
      found = 1;
    }
  }
  freeifaddrs(list);
  if (found)
    return 0;
  if (has_spec) {
    char ifs[256]; /* the message must fit the thread's (src/log.c) */
    sock_list_ifaces(ifs, sizeof ifs);
    return SOCK_FAIL(SOCK_ERR,
                     "BRAID_SOCKET_IFNAME=%s matches no interface that is up "
                     "and has an IPv4 or global IPv6 address (up here: %s)",
                     spec, ifs);
  }
  memset(out, 0, sizeof(*out));
  struct sockaddr_in *in = (struct sockaddr_in *)out;
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (ifname && ifname_len)
    snprintf(ifname, ifname_len, "lo");
  return 0;
}

int sock_pick_addr(const char *spec, struct sockaddr_storage *out, char *ifname,
                   size_t ifname_len) {
  return sock_pick_addr_family(spec, AF_INET, out, ifname, ifname_len);
}

int sock_addr_ifname(const struct sockaddr_storage *a, char *ifname,
                     size_t len) {
  if (len == 0)
    return -1;
  snprintf(ifname, len, "?");
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return -1;
  int found = 0;
  for (struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != a->ss_family)
      continue;
    if (a->ss_family == AF_INET)
      found = memcmp(&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr,
                     &((const struct sockaddr_in *)a)->sin_addr,
                     sizeof(struct in_addr)) == 0;
    else if (a->ss_family == AF_INET6)
      found = memcmp(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                     &((const struct sockaddr_in6 *)a)->sin6_addr,
                     sizeof(struct in6_addr)) == 0;
    if (found)
      snprintf(ifname, len, "%s", ifa->ifa_name);
  }
  freeifaddrs(list);
  return found ? 0 : -1;
}

int sock_resolve(const char *host, int port, struct sockaddr_storage *out) {
  if (host == NULL || host[0] == '\0')
    return SOCK_FAIL(SOCK_ERR, "empty host name");
  if (port < 0 || port > 65535)
    return SOCK_FAIL(SOCK_ERR, "port %d out of range (0..65535)", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL)
    return SOCK_FAIL(SOCK_ERR, "cannot resolve host '%s': %s", host,
                     gai_strerror(rc));
  /* Prefer IPv4 when the name has both. */
  const struct addrinfo *pick = res;
  for (const struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  memset(out, 0, sizeof(*out));
  memcpy(out, pick->ai_addr, pick->ai_addrlen);
  sock_addr_set_port(out, port);
  freeaddrinfo(res);
  return 0;
}

braid_result sock_result(int code) {
  switch (code) {
  case 0:
    return BRAID_SUCCESS;
  case SOCK_TIMEOUT:
    return BRAID_ERR_TIMEOUT;
  case SOCK_EOF:
  case SOCK_RESET:
    return BRAID_ERR_REMOTE;
  case SOCK_REFUSED:
    return BRAID_ERR_INVALID_ARG;
  default:
    return BRAID_ERR_SYSTEM;
  }
}

int sock_set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return SOCK_ERR;
  return 0;
}

int sock_set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0
             ? 0
             : SOCK_ERR;
}

void sock_set_bufs(int fd, size_t bytes) {
  if (bytes == 0)
    return;
  int v = bytes > (size_t)(1 << 30) ? (1 << 30) : (int)bytes;
  /* Only ever grow them (the defaults may be larger already); the kernel
   * caps them at net.core.[rw]mem_max, so this is best effort. */
  int opts[2] = {SO_SNDBUF, SO_RCVBUF};
  for (int i = 0; i < 2; i++) {
    int cur = 0;
    socklen_t l = sizeof(cur);
    if (getsockopt(fd, SOL_SOCKET, opts[i], &cur, &l) == 0 && cur >= v)
      continue;
    (void)setsockopt(fd, SOL_SOCKET, opts[i], &v, sizeof(v));
  }
}

int sock_listen(const struct sockaddr_storage *addr, int reuse, size_t bufs,
                int *fd, struct sockaddr_storage *bound) {
  char as[80];
  int s = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return SOCK_FAIL(SOCK_ERR, "socket() for a listener on %s failed: %s",
                     sock_addr_str(addr, as, sizeof(as)), strerror(errno));
  int one = 1;
  if (reuse)
    (void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sock_set_bufs(s, bufs);
  if (bind(s, (const struct sockaddr *)addr, sock_addr_len(addr)) != 0) {
    int e = errno;
    close(s);
    return SOCK_FAIL(SOCK_ERR, "bind to %s failed: %s",
                     sock_addr_str(addr, as, sizeof(as)), strerror(e));
  }
  if (listen(s, SOMAXCONN) != 0 || sock_set_nonblock(s) != 0) {
    int e = errno;
    close(s);
    return SOCK_FAIL(SOCK_ERR, "listen on %s failed: %s",
                     sock_addr_str(addr, as, sizeof(as)), strerror(e));
  }
  if (bound) {
    socklen_t l = sizeof(*bound);
    memset(bound, 0, sizeof(*bound));
    if (getsockname(s, (struct sockaddr *)bound, &l) != 0) {
      int e = errno;
      close(s);
      return SOCK_FAIL(SOCK_ERR, "getsockname on listener %s failed: %s",
                       sock_addr_str(addr, as, sizeof(as)), strerror(e));
    }
  }
  *fd = s;
  return 0;
}

/* One nonblocking connect attempt: 0 connected, 1 retry later, <0 error. */
static int connect_once(const struct sockaddr_storage *addr, int64_t deadline,
                        size_t bufs, int *fd, int *err_no) {
  int s = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *err_no = errno;
    return SOCK_ERR;
  }
  sock_set_bufs(s, bufs);
  sock_set_nonblock(s);
  int rc = connect(s, (const struct sockaddr *)addr, sock_addr_len(addr));
  if (rc != 0 && errno != EINPROGRESS) {
    *err_no = errno;
    close(s);
    return (*err_no == ECONNREFUSED || *err_no == ETIMEDOUT ||
            *err_no == EHOSTUNREACH || *err_no == ENETUNREACH ||
            *err_no == EAGAIN)
               ? 1
               : SOCK_ERR;
  }
  if (rc != 0) {
    struct pollfd p = {.fd = s, .events = POLLOUT};
    int left = sock_left_ms(deadline);
    int n;
    do {
      n = poll(&p, 1, left);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      *err_no = ETIMEDOUT;
      close(s);
      return SOCK_TIMEOUT;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr != 0) {
      *err_no = soerr;
      close(s);
      return (soerr == ECONNREFUSED || soerr == ETIMEDOUT ||
              soerr == EHOSTUNREACH || soerr == ENETUNREACH)
                 ? 1
                 : SOCK_ERR;
    }
  }
  *fd = s;
  return 0;
}

int sock_connect(const struct sockaddr_storage *addr, int64_t deadline,
                 size_t bufs, int *fd) {
  char as[80];
  int err_no = 0;
  int backoff = 10;
  for (;;) {
    int rc = connect_once(addr, deadline, bufs, fd, &err_no);
    if (rc == 0) {
      sock_set_nodelay(*fd);
      return 0;
    }
    if (rc < 0 && rc != SOCK_TIMEOUT)
      return SOCK_FAIL(rc, "connect to %s failed: %s",
                       sock_addr_str(addr, as, sizeof(as)), strerror(err_no));
    int left = sock_left_ms(deadline);
    if (left == 0 || rc == SOCK_TIMEOUT)
      return SOCK_FAIL(SOCK_TIMEOUT, "connect to %s timed out (last error: %s)",
                       sock_addr_str(addr, as, sizeof(as)), strerror(err_no));
    int nap = backoff < left ? backoff : left;
    struct timespec ts = {nap / 1000, (long)(nap % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (backoff < 200)
      backoff *= 2;
  }
}

int sock_accept(int lfd, int64_t deadline, int *fd,
                struct sockaddr_storage *peer) {
  for (;;) {
    socklen_t l = sizeof(*peer);
    int s =
        accept4(lfd, (struct sockaddr *)peer, &l, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) {
      sock_set_nodelay(s);
      *fd = s;
      return 0;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
        errno != ECONNABORTED)
      return SOCK_ERR;
    int left = sock_left_ms(deadline);
    if (left == 0)
      return SOCK_TIMEOUT;
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, left) < 0 && errno != EINTR)
      return SOCK_ERR;
  }
}

static int wait_fd(int fd, short ev, int64_t deadline) {
  struct pollfd p = {.fd = fd, .events = ev};
  for (;;) {
    int left = sock_left_ms(deadline);
    int n = poll(&p, 1, left);
    if (n > 0)
      return 0;
    if (n == 0)
      return SOCK_TIMEOUT;
    if (errno != EINTR)
      return SOCK_ERR;
  }
}

int sock_write_full(int fd, const void *buf, size_t len, int64_t deadline) {
  const char *p = buf;
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = wait_fd(fd, POLLOUT, deadline);
      if (rc != 0)
        return rc;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      return SOCK_RESET;
    return SOCK_ERR;
  }
  return 0;
}

int sock_read_full(int fd, void *buf, size_t len, int64_t deadline) {
  char *p = buf;
  size_t off = 0;
  while (off < len) {
    ssize_t n = recv(fd, p + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n == 0)
      return SOCK_EOF;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = wait_fd(fd, POLLIN, deadline);
      if (rc != 0)
        return rc;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno == ECONNRESET || errno == EPIPE)
      return SOCK_RESET;
    return SOCK_ERR;
  }
  return 0;
}

const char *sock_strerror(int code, char *buf, size_t len) {
  switch (code) {
  case 0:
    snprintf(buf, len, "success");
    break;
  case SOCK_EOF:
    snprintf(buf, len, "connection closed by the peer");
    break;
  case SOCK_TIMEOUT:
    snprintf(buf, len, "timed out");
    break;
  case SOCK_RESET:
    snprintf(buf, len, "connection reset by the peer");
    break;
  case SOCK_REFUSED:
    snprintf(buf, len, "the greeting did not prove the job's secret");
    break;
  default:
    snprintf(buf, len, "%s", strerror(errno));
    break;
  }
  return buf;
}

int sock_peer_dead(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0)
    return 0;
  if (p.revents & POLLNVAL)
    return 1;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0)
    return 1;
  if (n < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN ||
                errno == ETIMEDOUT))
    return 1;
  return 0;
}

/* ---- who died -------------------------------------------------------------
 */

static int blame_score(int r, const int32_t *pids, const uint8_t *same_host) {
  if (!same_host[r])
    return 2; /* unknown: as good as gone */
  switch (tp_pid_state(pids[r])) {
  case TP_PID_KILLED:
    return 3;
  case TP_PID_GONE:
    return 2;
  case TP_PID_EXITED:
    return 1;
  default:
    return 0;
  }
}

int sock_blame(int peer, int me, int n, const int32_t *pids,
               const uint8_t *same_host, const uint8_t *closed) {
  if (pids == NULL || same_host == NULL || peer < 0 || peer >= n)
    return peer;
  int best = peer, bs = blame_score(peer, pids, same_host);
  for (int q = 0; closed && q < n && bs < 3; q++) {
    if (q == me || q == peer || !closed[q])
      continue;
    int sc = blame_score(q, pids, same_host);
    if (sc > bs) {
      best = q;
      bs = sc;
    }
  }
  if (bs >= 2)
    return best;
  for (int want = TP_PID_KILLED; want <= TP_PID_GONE; want += 2)
    for (int q = 0; q < n; q++)
      if (q != me && same_host[q] && tp_pid_state(pids[q]) == want)
        return q;
  return best;
}
