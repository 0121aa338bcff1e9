/*
 * tcp transport, setup and teardown (transports/tcp.c has the rest): every
 * pair of ranks connects nchannels sockets and a control connection
 * (transports/tcp_ctl.c), the higher rank to the lower one's listener, each
 * proving the job's secret before its greeting (rank, channel) is believed.
 * Teardown lets queued copies go out, tells the peers which rank this side
 * blamed after a failure, and closes everything.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/sock_util.h"
#include "transports/tcp_int.h"

static tp_conn *conn_new(tcp_state *s, int peer, int channel, int fd) {
  tp_conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NULL;
  c->q = calloc((size_t)s->nslots, sizeof(tcp_msg));
  if (c->q == NULL) {
    free(c);
    return NULL;
  }
  c->s = s;
  c->peer = peer;
  c->blame = peer;
  c->channel = channel;
  c->fd = fd;
  s->conns[peer * s->nchannels + channel] = c;
  return c;
}

/* A new connection: data channel `channel`, or the control connection
 * (channel nchannels, transports/tcp_ctl.c). 0, or -1 out of memory. */
static int conn_add(tcp_state *s, int peer, int channel, int fd) {
  if (channel == s->nchannels) {
    s->ctl[peer].fd = fd;
    return 0;
  }
  return conn_new(s, peer, channel, fd) != NULL ? 0 : -1;
}

/* Whether the connection (peer, channel) is made already. */
static int conn_made(const tcp_state *s, int peer, int channel) {
  return channel == s->nchannels
             ? s->ctl[peer].fd >= 0
             : s->conns[peer * s->nchannels + channel] != NULL;
}

/* Setup failed with code, its message recorded: the state goes, the
 * message stays. */
static int setup_fail(tcp_state *s, int code) {
  char why[TP_WHY];
  snprintf(why, sizeof why, "%s", err_msg());
  tcp_teardown(s);
  return tp_repeat(why, code);
}

static int tcp_connect_all(tp_setup *st, tcp_state *s, const uint8_t *peers,
                           const struct sockaddr_storage *addrs, size_t bufs,
                           const uint8_t *secret, int64_t deadline) {
  char e[200];
  for (int p = st->rank + 1; p < st->nranks; p++) {
    if (!peers[p])
      continue;
    for (int ch = 0; ch <= st->nchannels; ch++) { /* and the control one */
      tcp_hello h = {st->rank, ch, st->nranks, st->nchannels};
      int fd;
      if (sock_connect_auth(&addrs[p], deadline, bufs, TCP_MAGIC, TCP_KIND,
                            secret, &h, sizeof(h), &fd) != 0) {
        snprintf(e, sizeof e, "%s", err_msg());
        return ERR(BRAID_ERR_SYSTEM,
                   "tcp: rank %d cannot connect to rank %d (channel %d): "
                   "%.150s",
                   st->rank, p, ch, e);
      }
      if (conn_add(s, p, ch, fd) != 0) {
        close(fd);
        return ERR(BRAID_ERR_NOMEM, "tcp: out of memory");
      }
    }
  }
  return BRAID_SUCCESS;
}

static int tcp_accept_all(tp_setup *st, tcp_state *s, const uint8_t *peers,
                          int lfd, const uint8_t *secret, int64_t deadline) {
  int need = 0;
  for (int p = 0; p < st->rank; p++)
    need += peers[p] ? st->nchannels + 1 : 0;
  char what[64], as[80];
  snprintf(what, sizeof(what), "tcp listener of rank %d", st->rank);
  sock_gate g;
  sock_gate_init(&g, lfd, TCP_MAGIC, TCP_KIND, secret, sizeof(tcp_hello),
                 TCP_AUTH_MS, what);
  int res = BRAID_SUCCESS;
  while (need > 0) {
    int fd;
    tcp_hello h;
    struct sockaddr_storage from;
    int rc = sock_gate_next(&g, deadline, &fd, &h, &from);
    if (rc != 0) {
      int miss = -1;
      for (int p = 0; p < st->rank && miss < 0; p++)
        for (int ch = 0; peers[p] && ch <= st->nchannels; ch++)
          if (!conn_made(s, p, ch)) {
            miss = p;
            break;
          }
      res = ERR(rc == SOCK_TIMEOUT ? BRAID_ERR_TIMEOUT : BRAID_ERR_SYSTEM,
                "tcp: rank %d %s waiting for %d connection(s), first missing "
                "from rank %d",
                st->rank, rc == SOCK_TIMEOUT ? "timed out" : "failed", need,
                miss);
      break;
    }
    if (h.nranks != st->nranks || h.nchannels != st->nchannels || h.rank < 0 ||
        h.rank >= st->rank || !peers[h.rank] || h.channel < 0 ||
        h.channel > st->nchannels || conn_made(s, h.rank, h.channel)) {
      WARN(LOG_NET,
           "%s: rejected connection from %s claiming rank %d channel %d "
           "(nranks %d, nchannels %d): not an expected peer connection",
           what, sock_addr_str(&from, as, sizeof(as)), h.rank, h.channel,
           h.nranks, h.nchannels);
      close(fd);
      continue;
    }
    if (conn_add(s, h.rank, h.channel, fd) != 0) {
      close(fd);
      res = ERR(BRAID_ERR_NOMEM, "tcp: out of memory");
      break;
    }
    need--;
  }
  sock_gate_free(&g);
  return res;
}

int tcp_setup(tp_setup *st, const uint8_t *peers, void **state) {
  if (st == NULL || peers == NULL || state == NULL || st->boot == NULL ||
      st->nranks <= 0 || st->rank < 0 || st->rank >= st->nranks ||
      st->nchannels <= 0 || st->nslots <= 0 || st->slot_bytes == 0) {
    if (st == NULL)
      return ERR(BRAID_ERR_INVALID_ARG, "tcp setup: no setup");
    return ERR(BRAID_ERR_INVALID_ARG,
               "tcp setup: bad arguments (rank %d, nranks %d, nchannels %d, "
               "nslots %d, slot_bytes %zu)",
               st->rank, st->nranks, st->nchannels, st->nslots, st->slot_bytes);
  }
  *state = NULL;
  tcp_state *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return ERR(BRAID_ERR_NOMEM, "tcp setup: out of memory");
  s->rank = st->rank;
  s->culprit = -1;
  s->timeout_ms = st->timeout_ms > 0 ? st->timeout_ms : 300000;
  s->nranks = st->nranks;
  s->nchannels = st->nchannels;
  s->nslots = st->nslots;
  s->slot_bytes = st->slot_bytes;
  size_t nconn = (size_t)st->nranks * (size_t)st->nchannels;
  s->conns = calloc(nconn, sizeof(tp_conn *));
  s->flush = calloc(nconn, sizeof(tp_conn *));
  struct sockaddr_storage *addrs =
      calloc((size_t)st->nranks, sizeof(struct sockaddr_storage));
  if (s->conns == NULL || s->flush == NULL || addrs == NULL ||
      tcp_ctl_init(s) != 0) {
    free(addrs);
    return setup_fail(s, ERR(BRAID_ERR_NOMEM, "tcp setup: out of memory"));
  }
  size_t bufs = (size_t)st->nslots * st->slot_bytes;
  int64_t deadline = sock_now_ms() + s->timeout_ms;
  /* The control listener's address (boot_listen_addr: the interface
   * BRAID_SOCKET_IFNAME names, else the route to the root), so that the
   * data takes the path the bootstrap took. */
  const boot_peer *me = boot_peer_info(st->boot, st->rank);
  struct sockaddr_storage local = me->addr, bound;
  sock_addr_set_port(&local, 0);
  char e[200];
  int lfd = -1, r;
  if (sock_listen(&local, 0, bufs, &lfd, &bound) != 0) {
    free(addrs);
    snprintf(e, sizeof e, "%s", err_msg());
    return setup_fail(
        s, ERR(BRAID_ERR_SYSTEM, "tcp setup on rank %d: %.200s", st->rank, e));
  }
  r = boot_allgather(st->boot, &bound, addrs, sizeof(bound));
  if (r != BRAID_SUCCESS) {
    r = ERR_WRAP(r, "tcp setup on rank %d: exchanging addresses", st->rank);
  } else {
    const uint8_t *secret = boot_secret(st->boot, NULL);
    r = tcp_connect_all(st, s, peers, addrs, bufs, secret, deadline);
    if (r == BRAID_SUCCESS)
      r = tcp_accept_all(st, s, peers, lfd, secret, deadline);
  }
  close(lfd);
  free(addrs);
  if (r != BRAID_SUCCESS)
    return setup_fail(s, r);
  s->pids = calloc((size_t)st->nranks, sizeof(int32_t));
  s->same_host = calloc((size_t)st->nranks, 1);
  for (int p = 0; s->pids && s->same_host && p < st->nranks; p++) {
    s->pids[p] = boot_peer_info(st->boot, p)->pid;
    s->same_host[p] = (uint8_t)boot_same_host(st->boot, st->rank, p);
  }
  s->pfd = calloc(nconn ? nconn : 1, sizeof(struct pollfd));
  s->pfd_conn = calloc(nconn ? nconn : 1, sizeof(int));
  if (s->pfd == NULL || s->pfd_conn == NULL)
    return setup_fail(s, ERR(BRAID_ERR_NOMEM, "tcp setup: out of memory"));
  for (size_t i = 0; i < nconn; i++)
    if (s->conns[i]) {
      s->pfd[s->npfd].fd = s->conns[i]->fd;
      s->pfd[s->npfd].events = POLLIN;
      s->pfd_conn[s->npfd++] = (int)i;
    }
  r = tcp_ctl_start(s, st->set.heartbeat_ms);
  if (r != BRAID_SUCCESS)
    return setup_fail(s, r);
  INFO(LOG_NET,
       "tcp: rank %d connected %d socket(s) and a control connection "
       "to each peer",
       st->rank, s->npfd);
  *state = s;
  return BRAID_SUCCESS;
}

void tcp_teardown(void *state) {
  tcp_state *s = state;
  if (s == NULL)
    return;
  size_t nconn = (size_t)s->nranks * (size_t)s->nchannels;
  /* Copies still queued belong to messages a live peer waits for: let them
   * go out while they move (stop after 5 s, or the timeout, without
   * progress, or when a connection fails). */
  int64_t idle = s->timeout_ms < 5000 ? s->timeout_ms : 5000;
  int64_t end = sock_now_ms() + idle;
  size_t left = (size_t)-1;
  while (s->conns && s->culprit < 0 && tcp_flush(s) == TP_AGAIN &&
         sock_now_ms() < end) {
    size_t now = 0;
    for (size_t i = 0; i < nconn; i++)
      now += s->conns[i] ? s->conns[i]->staged : 0;
    if (now < left)
      end = sock_now_ms() + idle;
    left = now;
    usleep(1000);
  }
  /* After a failure, tell the peers which rank this side blamed, where the
   * stream is between messages, so that they name it rather than us. */
  for (size_t i = 0; s->conns && s->culprit >= 0 && i < nconn; i++) {
    tp_conn *c = s->conns[i];
    if (c == NULL || c->err || c->peer == s->culprit ||
        (c->qcount > 0 && c->q[c->qhead].off != 0))
      continue;
    uint64_t h[2] = {((uint64_t)TCP_BYE << 56) | (uint64_t)(s->culprit + 1), 0};
    (void)send(c->fd, h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  tcp_ctl_stop(s);
  for (size_t i = 0; s->conns && i < nconn; i++) {
    tp_conn *c = s->conns[i];
    if (c == NULL)
      continue;
    close(c->fd);
    for (int k = 0; k < s->nslots; k++)
      free(c->q[k].copy);
    free(c->q);
    free(c->stage);
    free(c);
  }
  free(s->conns);
  free(s->flush);
  free(s->pfd);
  free(s->pfd_conn);
  free(s->pids);
  free(s->same_host);
  free(s);
}
