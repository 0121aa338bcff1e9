/*
 * tcp transport (docs/TRANSPORTS.md): one nonblocking TCP socket per (peer,
 * channel). Each message is an 8-byte header (type in the top byte, payload
 * length below) followed by the payload. Sends write what the socket takes
 * and queue the rest, up to nslots messages: isend keeps a reference to the
 * caller's buffer, isend_copy a copy in the queue slot (at most nslots *
 * slot_bytes bytes of copies per connection). Receives read straight into the
 * destination, or through a slot-sized staging buffer when reducing.
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/call_fp.h"
#include "transports/common.h"
#include "transports/sock_util.h"
#include "transports/tcp_int.h"

/* ---- failures ------------------------------------------------------------ */

/* Whether the next thing to read on o (between messages) is a goodbye from
 * a peer that stopped because of another rank's failure: that rank, or -1. */
static int bye_peek(tcp_state *s, tp_conn *o) {
  if (o->rmode != 0)
    return -1;
  uint64_t h;
  ssize_t n = recv(o->fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
  if (n != (ssize_t)sizeof(h) || (h >> 56) != TCP_BYE)
    return -1;
  uint64_t d = (h & (TCP_LEN_MAX - 1)) - 1;
  return d < (uint64_t)s->nranks && (int)d != s->rank ? (int)d : -1;
}

/* Which rank to name for the closed connection c (see sock_blame): the
 * other connections that closed too are the candidates. */
static int tcp_blame(tcp_state *s, tp_conn *c) {
  if (s->pids == NULL || s->same_host == NULL)
    return c->peer;
  size_t nconn = (size_t)s->nranks * (size_t)s->nchannels;
  /* A goodbye on any connection names the rank its sender blamed. */
  for (size_t i = 0; i < nconn; i++) {
    tp_conn *o = s->conns[i];
    int d = o && (o == c || o->err == 0) ? bye_peek(s, o) : -1;
    if (d >= 0)
      return d;
  }
  uint8_t *closed = calloc((size_t)s->nranks, 1);
  if (closed == NULL)
    return c->peer;
  int r = c->peer;
  /* A peer that is still running closed on purpose; the rank that died
   * may be a moment from showing it (its sockets close before it becomes a
   * zombie): look again for up to 100 ms. */
  for (int tries = 0; tries < 20; tries++) {
    for (size_t i = 0; i < nconn; i++) {
      tp_conn *o = s->conns[i];
      if (o != NULL && o != c &&
          ((o->err == BRAID_ERR_REMOTE && o->blame == o->peer) ||
           (o->err == 0 && sock_peer_dead(o->fd))))
        closed[o->peer] = 1;
    }
    r = sock_blame(c->peer, s->rank, s->nranks, s->pids, s->same_host, closed);
    if (r != c->peer || !s->same_host[c->peer] ||
        tp_pid_state(s->pids[c->peer]) != TP_PID_RUNNING)
      break;
    usleep(5000);
  }
  free(closed);
  return r;
}

static int conn_fail(tp_conn *c, int code, int err_no) {
  tcp_state *s = c->s;
  if (c->err)
    return TREPEAT(s, c->err);
  c->err = code;
  c->blame = c->peer;
  if (code == BRAID_ERR_REMOTE)
    c->blame = tcp_blame(s, c);
  if (code == BRAID_ERR_REMOTE && s->culprit < 0)
    s->culprit = c->blame;
  if (code == BRAID_ERR_REMOTE && c->blame != c->peer)
    return TERR(s, code,
                "tcp: rank %d died (its process was killed or is gone); rank "
                "%d then %s the connection of channel %d to rank %d",
                c->blame, c->peer, err_no == 0 ? "closed" : "reset", c->channel,
                s->rank);
  if (code == BRAID_ERR_REMOTE)
    return TERR(s, code,
                "tcp: rank %d %s the connection of channel %d to rank %d "
                "(process died?)",
                c->peer, err_no == 0 ? "closed" : "reset", c->channel, s->rank);
  return TERR(s, code, "tcp: connection to rank %d (channel %d) failed: %s",
              c->peer, c->channel, strerror(err_no));
}

static int io_fail(tp_conn *c, ssize_t n) {
  if (n == 0)
    return conn_fail(c, BRAID_ERR_REMOTE, 0);
  if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN ||
      errno == ETIMEDOUT)
    return conn_fail(c, BRAID_ERR_REMOTE, errno);
  return conn_fail(c, BRAID_ERR_SYSTEM, errno);
}

/* ---- sending ------------------------------------------------------------- */

/* Writes queued messages: BRAID_SUCCESS (maybe some left) or an error. */
static int conn_flush(tp_conn *c) {
  int nslots = c->s->nslots;
  while (c->qcount > 0 && !c->err) {
    struct iovec iov[TCP_IOV_MAX];
    int k = 0;
    for (int i = 0; i < c->qcount && k + 2 <= TCP_IOV_MAX; i++) {
      tcp_msg *m = &c->q[(c->qhead + i) % nslots];
      size_t off = m->off;
      if (off < sizeof(m->hdr)) {
        iov[k].iov_base = (char *)&m->hdr + off;
        iov[k++].iov_len = sizeof(m->hdr) - off;
        off = 0;
      } else {
        off -= sizeof(m->hdr);
      }
      if (m->len > off) {
        iov[k].iov_base = (char *)m->src + off;
        iov[k++].iov_len = m->len - off;
      }
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
    ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return BRAID_SUCCESS;
      if (errno == EINTR)
        continue;
      return io_fail(c, n);
    }
    size_t left = (size_t)n;
    while (c->qcount > 0) {
      tcp_msg *m = &c->q[c->qhead];
      size_t need = sizeof(m->hdr) + m->len - m->off;
      if (left < need) {
        m->off += left;
        break;
      }
      left -= need;
      c->written = m->ticket;
      if (m->copied) {
        c->staged -= m->len;
        c->s->staged -= m->len;
        m->copied = 0;
        if (m->copy_cap > c->s->slot_bytes) { /* keep only slot-sized ones */
          free(m->copy);
          m->copy = NULL;
          m->copy_cap = 0;
        }
      }
      c->qhead = (c->qhead + 1) % nslots;
      c->qcount--;
    }
  }
  return c->err ? TREPEAT(c->s, c->err) : BRAID_SUCCESS;
}

/* Any call flushes every connection with queued data, so a rank waiting on
 * one peer still feeds the others. */
static void flush_all(tcp_state *s) {
  for (int i = 0; i < s->nflush;) {
    tp_conn *c = s->flush[i];
    (void)conn_flush(c);
    if (c->qcount == 0 || c->err) {
      c->listed = 0;
      s->flush[i] = s->flush[--s->nflush];
      continue;
    }
    i++;
  }
}

/* The checks common to isend and isend_copy, and a flush: BRAID_SUCCESS
 * when the message may be queued now, TP_AGAIN or an error otherwise. */
static int send_check(tp_conn *c, const void *src, size_t len,
                      const uint64_t *ticket) {
  if (c == NULL || ticket == NULL || (len && src == NULL))
    return ERR(BRAID_ERR_INVALID_ARG, "tcp isend: no connection, ticket or "
                                      "source");
  if (c->err)
    return TREPEAT(c->s, c->err);
  if ((uint64_t)len >= TCP_LEN_MAX)
    return TERR(c->s, BRAID_ERR_INVALID_ARG,
                "tcp: message of %zu bytes to rank %d is too large", len,
                c->peer);
  flush_all(c->s);
  int r = conn_flush(c);
  if (r != BRAID_SUCCESS)
    return r;
  return c->qcount >= c->s->nslots ? TP_AGAIN : BRAID_SUCCESS;
}

/* The fingerprint messages on c carry and expect: the call's on the
 * collective channels, none on the last (send/recv). */
static uint64_t conn_fp(const tp_conn *c) {
  return c->channel < c->s->nchannels - 1 ? c->s->fp : 0;
}

/* Queues the message in slot m (the next free one) and writes what the
 * socket takes. */
static int send_queue(tp_conn *c, tcp_msg *m, const void *src, size_t len,
                      uint64_t *ticket) {
  tcp_state *s = c->s;
  m->hdr[0] = ((uint64_t)TCP_DATA << 56) | (uint64_t)len;
  m->hdr[1] = conn_fp(c);
  m->src = src;
  m->len = len;
  m->off = 0;
  m->copied = 0;
  m->ticket = ++c->next_ticket;
  c->qcount++;
  *ticket = m->ticket;
  int r = conn_flush(c);
  if (r != BRAID_SUCCESS)
    return r;
  if (c->qcount > 0 && !c->listed) {
    c->listed = 1;
    s->flush[s->nflush++] = c;
  }
  return BRAID_SUCCESS;
}

static int tcp_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  int r = send_check(c, src, len, ticket);
  if (r != BRAID_SUCCESS)
    return r;
  tcp_msg *m = &c->q[(c->qhead + c->qcount) % c->s->nslots];
  return send_queue(c, m, src, len, ticket);
}

/* For a source the caller overwrites next: what the socket does not take
 * now is copied into the message's queue slot, so send_done is immediate and
 * later calls write the copy. TP_AGAIN, before anything is written, when the
 * copies could exceed nslots * slot_bytes bytes. */
static int tcp_isend_copy(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket) {
  int r = send_check(c, src, len, ticket);
  if (r != BRAID_SUCCESS)
    return r;
  tcp_state *s = c->s;
  size_t bound = (size_t)s->nslots * s->slot_bytes;
  if (len > bound)
    return TERR(s, BRAID_ERR_INVALID_ARG,
                "tcp: isend_copy of %zu bytes to rank %d exceeds the %zu bytes "
                "a connection may hold in copies (nslots %d x slot_bytes %zu)",
                len, c->peer, bound, s->nslots, s->slot_bytes);
  if (c->staged + len > bound)
    return TP_AGAIN;
  tcp_msg *m = &c->q[(c->qhead + c->qcount) % s->nslots];
  r = send_queue(c, m, src, len, ticket);
  if (r != BRAID_SUCCESS || *ticket <= c->written)
    return r;
  /* m is still queued: keep only the unwritten part of the payload */
  size_t done = m->off > sizeof(m->hdr) ? m->off - sizeof(m->hdr) : 0;
  size_t rest = len - done;
  if (rest > 0 && m->copy_cap < rest) {
    free(m->copy);
    m->copy_cap = 0;
    m->copy = malloc(rest);
    if (m->copy == NULL) /* the stream is mid-message: give it up */
      return conn_fail(c, BRAID_ERR_NOMEM, ENOMEM);
    m->copy_cap = rest;
  }
  if (rest)
    memcpy(m->copy, (const char *)src + done, rest);
  m->src = m->copy;
  m->len = rest;
  m->off -= done;
  m->copied = 1;
  c->staged += rest;
  s->staged += rest;
  return BRAID_SUCCESS;
}

/* Whether ticket (not yet written) is a queued copy. */
static int queued_copy(const tp_conn *c, uint64_t ticket) {
  if (ticket <= c->written || ticket > c->next_ticket)
    return 0;
  uint64_t i = (uint64_t)c->qhead + (ticket - c->written - 1);
  return c->q[i % (uint64_t)c->s->nslots].copied;
}

static int tcp_send_done(tp_conn *c, uint64_t ticket) {
  if (c == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "tcp send_done: no connection");
  if (ticket <= c->written)
    return BRAID_SUCCESS;
  flush_all(c->s);
  int r = conn_flush(c);
  /* A copy no longer reads its source, whatever is queued before it. */
  if (ticket <= c->written || queued_copy(c, ticket))
    return BRAID_SUCCESS;
  return r != BRAID_SUCCESS ? r : TP_AGAIN;
}

/* Writes what the socket takes of every queued message: BRAID_SUCCESS when
 * no copy is left, TP_AGAIN while some is, or a connection's error. */
int tcp_flush(void *state) {
  tcp_state *s = state;
  if (s == NULL)
    return BRAID_SUCCESS;
  flush_all(s);
  if (s->staged == 0) /* per call: no walk over every connection */
    return BRAID_SUCCESS;
  size_t nconn = (size_t)s->nranks * (size_t)s->nchannels;
  int again = 0;
  for (size_t i = 0; i < nconn; i++) {
    tp_conn *c = s->conns[i];
    if (c != NULL && c->staged > 0 && c->err)
      return TREPEAT(s, c->err);
    again |= c != NULL && c->staged > 0;
  }
  return again ? TP_AGAIN : BRAID_SUCCESS;
}

/* ---- receiving ----------------------------------------------------------- */

/* Reads the header (and whatever payload follows into buf, up to cap).
 * BRAID_SUCCESS once the header is complete and matches len. */
static int read_header(tp_conn *c, char *buf, size_t cap, size_t len,
                       int mode) {
  if (c->rmode != 0 && c->rmode != mode)
    return TERR(c->s, BRAID_ERR_INTERNAL,
                "tcp: recv and recv_reduce interleaved on one message from "
                "rank %d",
                c->peer);
  if (c->rmode == mode) {
    if (c->rlen != len)
      return TERR(c->s, BRAID_ERR_INTERNAL,
                  "tcp: a resumed receive from rank %d changed its length from "
                  "%zu to %zu",
                  c->peer, c->rlen, len);
    if (c->rhdr_got == sizeof(c->rhdr))
      return BRAID_SUCCESS;
  } else {
    c->rmode = mode;
    c->rlen = len;
    c->rhdr_got = 0;
    c->rgot = c->rdone = 0;
  }
  while (c->rhdr_got < sizeof(c->rhdr)) {
    struct iovec iov[2];
    iov[0].iov_base = (char *)&c->rhdr + c->rhdr_got;
    iov[0].iov_len = sizeof(c->rhdr) - c->rhdr_got;
    iov[1].iov_base = buf;
    iov[1].iov_len = cap;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = cap ? 2 : 1};
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return TP_AGAIN;
      if (n < 0 && errno == EINTR)
        continue;
      return io_fail(c, n);
    }
    size_t h = sizeof(c->rhdr) - c->rhdr_got;
    if ((size_t)n < h) {
      c->rhdr_got += (size_t)n;
      continue;
    }
    c->rhdr_got = sizeof(c->rhdr);
    c->rgot = (size_t)n - h;
  }
  uint64_t type = c->rhdr[0] >> 56, mlen = c->rhdr[0] & (TCP_LEN_MAX - 1);
  if (type == TCP_BYE) {
    uint64_t d = mlen - 1;
    c->err = BRAID_ERR_REMOTE;
    c->blame =
        d < (uint64_t)c->s->nranks && (int)d != c->s->rank ? (int)d : c->peer;
    if (c->s->culprit < 0)
      c->s->culprit = c->blame;
    if (c->blame != c->peer)
      return TERR(c->s, c->err,
                  "tcp: rank %d failed; rank %d saw it and closed the "
                  "connection of channel %d to rank %d",
                  c->blame, c->peer, c->channel, c->s->rank);
    return TERR(c->s, c->err,
                "tcp: rank %d closed the connection of channel %d to rank %d "
                "after an error",
                c->peer, c->channel, c->s->rank);
  }
  if (type != TCP_DATA) {
    c->err = BRAID_ERR_REMOTE;
    c->blame = c->peer;
    return TERR(c->s, c->err,
                "tcp: garbage on the connection from rank %d (channel %d)",
                c->peer, c->channel);
  }
  uint64_t fp = conn_fp(c);
  if (fp != 0 && c->rhdr[1] != 0 && c->rhdr[1] != fp) {
    char what[224];
    tp_fp_mismatch(c->rhdr[1], fp, c->peer, what, sizeof what);
    if (!c->s->mm_set)
      c->s->mm = (tp_mismatch){c->s->rank, c->peer, c->rhdr[1], fp};
    c->s->mm_set = 1;
    c->err = BRAID_ERR_MISMATCH;
    return TERR(c->s, c->err, "tcp: channel %d from rank %d: %s", c->channel,
                c->peer, what);
  }
  if (mlen != len) {
    c->err = BRAID_ERR_MISMATCH;
    return TERR(c->s, c->err,
                "tcp: rank %d sent a %llu-byte message on channel %d where "
                "rank %d expected %zu bytes (collectives called in a different "
                "order? BRAID_CHECK=1 finds which)",
                c->peer, (unsigned long long)mlen, c->channel, c->s->rank, len);
  }
  return BRAID_SUCCESS;
}

static int tcp_recv(tp_conn *c, void *dst, size_t len) {
  if (c == NULL || (len && dst == NULL))
    return ERR(BRAID_ERR_INVALID_ARG, "tcp recv: no connection or buffer");
  if (c->err)
    return TREPEAT(c->s, c->err);
  flush_all(c->s);
  int r = read_header(c, dst, len, len, 1);
  if (r != BRAID_SUCCESS)
    return r;
  while (c->rgot < len) {
    ssize_t n = recv(c->fd, (char *)dst + c->rgot, len - c->rgot, MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return TP_AGAIN;
      if (n < 0 && errno == EINTR)
        continue;
      return io_fail(c, n);
    }
    c->rgot += (size_t)n;
  }
  c->rmode = 0;
  return BRAID_SUCCESS;
}

/* Reduces the whole elements in staging into dst and keeps the rest. */
static void reduce_staged(tp_conn *c, const char *src, char *dst,
                          const tp_reducer *r) {
  size_t fill = c->rgot - c->rdone;
  size_t k = fill / r->elem_size * r->elem_size;
  if (k == 0)
    return;
  r->fn(dst + c->rdone, src + c->rdone, c->stage, k / r->elem_size);
  if (fill > k)
    memmove(c->stage, c->stage + k, fill - k);
  c->rdone += k;
}

static int tcp_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  if (c == NULL || r == NULL || r->fn == NULL || r->elem_size == 0 ||
      (len && (src == NULL || dst == NULL)))
    return ERR(BRAID_ERR_INVALID_ARG,
               "tcp recv_reduce: no connection, reducer or buffer");
  if (c->err)
    return TREPEAT(c->s, c->err);
  tcp_state *s = c->s;
  if (len % r->elem_size != 0)
    return TERR(s, BRAID_ERR_INVALID_ARG,
                "tcp: recv_reduce of %zu bytes from rank %d is not a whole "
                "number of %zu-byte elements",
                len, c->peer, r->elem_size);
  if (c->stage == NULL) {
    size_t cap = s->slot_bytes; /* never more than one slot */
    if (cap < 64)
      cap = 64;
    c->stage = malloc(cap);
    if (c->stage == NULL)
      return TERR(s, BRAID_ERR_NOMEM,
                  "tcp: no memory for a %zu-byte staging buffer", cap);
    c->stage_cap = cap;
  }
  size_t cap = c->stage_cap / r->elem_size * r->elem_size;
  if (cap == 0)
    return TERR(s, BRAID_ERR_INVALID_ARG,
                "tcp: %zu-byte elements do not fit the %zu-byte staging buffer",
                r->elem_size, c->stage_cap);
  flush_all(s);
  int rc = read_header(c, c->stage, len < cap ? len : cap, len, 2);
  if (rc != BRAID_SUCCESS)
    return rc;
  for (;;) {
    reduce_staged(c, src, dst, r);
    if (c->rdone == len)
      break;
    size_t fill = c->rgot - c->rdone;
    size_t room = cap - fill;
    if (room > len - c->rgot)
      room = len - c->rgot;
    ssize_t n = recv(c->fd, c->stage + fill, room, MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return TP_AGAIN;
      if (n < 0 && errno == EINTR)
        continue;
      return io_fail(c, n);
    }
    c->rgot += (size_t)n;
  }
  c->rmode = 0;
  return BRAID_SUCCESS;
}

static int tcp_pollfd(tp_conn *c) { return c ? c->fd : -1; }

static tp_conn *tcp_conn(void *state, int peer, int channel) {
  tcp_state *s = state;
  if (s == NULL || peer < 0 || peer >= s->nranks || channel < 0 ||
      channel >= s->nchannels)
    return NULL;
  return s->conns[peer * s->nchannels + channel];
}

static int tcp_check_peers(void *state, int *dead_rank) {
  tcp_state *s = state;
  if (s == NULL || s->npfd == 0)
    return BRAID_SUCCESS;
  if (tcp_ctl_check(s))
    return BRAID_ERR_MISMATCH;
  for (int i = 0; i < s->npfd; i++) {
    tp_conn *c = s->conns[s->pfd_conn[i]];
    if (c->err == BRAID_ERR_REMOTE) {
      if (dead_rank)
        *dead_rank = c->blame;
      return TREPEAT(s, BRAID_ERR_REMOTE);
    }
    s->pfd[i].revents = 0;
  }
  if (poll(s->pfd, (nfds_t)s->npfd, 0) <= 0)
    return BRAID_SUCCESS;
  for (int i = 0; i < s->npfd; i++) {
    if (!s->pfd[i].revents)
      continue;
    tp_conn *c = s->conns[s->pfd_conn[i]];
    int d = c->err == 0 ? bye_peek(s, c) : -1;
    if (d >= 0) {
      /* consumes the goodbye and records the failure (its message) */
      char none;
      (void)tcp_recv(c, &none, 0);
      if (dead_rank)
        *dead_rank = c->blame;
      return BRAID_ERR_REMOTE;
    }
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 ||
        (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      (void)io_fail(c, n); /* its message stays */
      if (dead_rank)
        *dead_rank = c->blame;
      return BRAID_ERR_REMOTE;
    }
  }
  return BRAID_SUCCESS;
}

static void tcp_set_fp(void *state, uint64_t fp) {
  ((tcp_state *)state)->fp = fp;
}

const tp_ops tp_tcp = {
    .name = "tcp",
    .setup = tcp_setup,
    .conn = tcp_conn,
    .isend = tcp_isend,
    .isend_copy = tcp_isend_copy,
    .send_done = tcp_send_done,
    .recv = tcp_recv,
    .recv_reduce = tcp_recv_reduce,
    .pollfd = tcp_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .check_peers = tcp_check_peers,
    .teardown = tcp_teardown,
    .set_fp = tcp_set_fp,
    .note_wait = tcp_note_wait,
    .peer_wait = tcp_peer_wait,
    .quiet = tcp_quiet,
    .mismatch = tcp_mismatch,
    .tell_mismatch = tcp_tell_mismatch,
    .heartbeat = tcp_heartbeat,
    .flush = tcp_flush,
};
