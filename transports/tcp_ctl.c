/*
 * tcp transport, the control connections: one per peer beside the data
 * channels, carrying small fixed frames (tcp_frame) that never wait behind
 * data:
 *  - heartbeats: a rank whose wait has lasted BRAID_HEARTBEAT_MS sends a
 *    PING to every peer it has not heard from for an interval; a thread of
 *    each rank answers with a PONG at once, also while the program computes
 *    outside braid. A peer that leaves one unanswered for two intervals is
 *    stopped (SIGSTOP, a debugger) or unreachable (its host gone): the wait
 *    names it (src/exec_wait.c) long before BRAID_TIMEOUT.
 *  - wait notes (tp_ops.note_wait): a rank that waits long for a peer tells
 *    that peer, in which call; two ranks each waiting for the other in
 *    different calls with nothing in flight are a mismatch no message shows
 *    (a reduce whose root they disagree on).
 *  - mismatches told (tp_ops.tell_mismatch): the rank that found one tells
 *    every peer, whose next health check fails its call with it.
 * The frames are read by the heartbeat thread when it runs, else by the
 * health checks; everything is under ctl_lock.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/call_fp.h"
#include "transports/sock_util.h"
#include "transports/tcp_int.h"

int tcp_ctl_init(tcp_state *s) {
  s->stop_fd = -1;
  s->noted_peer = -1;
  s->ctl = calloc((size_t)s->nranks, sizeof(tcp_ctl));
  if (s->ctl == NULL)
    return -1;
  for (int p = 0; p < s->nranks; p++)
    s->ctl[p].fd = -1;
  pthread_mutex_init(&s->ctl_lock, NULL);
  return 0;
}

/* Writes what o holds: 0, or -1 when the connection failed. */
static int out_flush(tcp_ctl *o) {
  while (o->out_len > 0) {
    ssize_t n = send(o->fd, o->out, o->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0)
      return -1;
    memmove(o->out, o->out + n, o->out_len - (size_t)n);
    o->out_len -= (size_t)n;
  }
  return 0;
}

/* Sends a frame to peer p, or keeps it to send later; dropped only when
 * the peer has not read eight frames (it is not reading at all). */
static void ctl_send(tcp_state *s, int p, uint32_t type, int32_t a, int32_t b,
                     uint64_t x, uint64_t y) {
  tcp_ctl *o = &s->ctl[p];
  if (o->fd < 0 || o->gone)
    return;
  tcp_frame f = {TCP_CTL_MAGIC, type, a, b, x, y};
  if (out_flush(o) != 0 || o->out_len + sizeof f > sizeof o->out)
    return;
  memcpy(o->out + o->out_len, &f, sizeof f);
  o->out_len += sizeof f;
  (void)out_flush(o);
}

static void ctl_frame(tcp_state *s, int p, const tcp_frame *f) {
  tcp_ctl *o = &s->ctl[p];
  o->heard_ms = sock_now_ms();
  switch (f->type) {
  case TCP_CTL_PING:
    ctl_send(s, p, TCP_CTL_PONG, 0, 0, f->x, 0);
    break;
  case TCP_CTL_NOTE:
    o->noted = 1;
    o->note_on = f->a;
    o->note_epoch = (uint32_t)f->b;
    o->note_fp = f->x;
    break;
  case TCP_CTL_MISMATCH:
    if (!s->told_set && f->a >= 0 && f->a < s->nranks) {
      s->told = (tp_mismatch){f->a, f->b, f->x, f->y};
      s->told_set = 1;
    }
    break;
  default: /* PONG: heard_ms is all it says */
    break;
  }
}

/* Reads every frame that has arrived (ctl_lock held). */
static void ctl_drain(tcp_state *s) {
  for (int p = 0; p < s->nranks; p++) {
    tcp_ctl *o = &s->ctl[p];
    if (o->fd < 0 || o->gone)
      continue;
    if (o->out_len > 0 && out_flush(o) != 0)
      o->gone = 1;
    while (!o->gone) {
      ssize_t n = recv(o->fd, (char *)&o->in + o->in_got,
                       sizeof o->in - o->in_got, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (n <= 0) { /* the data channels report the peer's end */
        o->gone = 1;
        break;
      }
      o->in_got += (size_t)n;
      if (o->in_got < sizeof o->in)
        continue;
      o->in_got = 0;
      if (o->in.magic != TCP_CTL_MAGIC) {
        WARN(LOG_NET, "tcp: garbage on the control connection from rank %d", p);
        o->gone = 1;
        break;
      }
      ctl_frame(s, p, &o->in);
    }
  }
}

static void *hb_main(void *arg) {
  tcp_state *s = arg;
  struct pollfd *fds = calloc((size_t)s->nranks + 1, sizeof *fds);
  if (fds == NULL)
    return NULL;
  for (;;) {
    int n = 0, pending = 0;
    pthread_mutex_lock(&s->ctl_lock);
    for (int p = 0; p < s->nranks; p++)
      if (s->ctl[p].fd >= 0 && !s->ctl[p].gone) {
        fds[n++] = (struct pollfd){s->ctl[p].fd, POLLIN, 0};
        pending |= s->ctl[p].out_len > 0;
      }
    pthread_mutex_unlock(&s->ctl_lock);
    fds[n++] = (struct pollfd){s->stop_fd, POLLIN, 0};
    if (poll(fds, (nfds_t)n, pending ? 10 : -1) < 0 && errno != EINTR)
      break;
    if (fds[n - 1].revents)
      break;
    pthread_mutex_lock(&s->ctl_lock);
    ctl_drain(s);
    pthread_mutex_unlock(&s->ctl_lock);
  }
  free(fds);
  return NULL;
}

braid_result tcp_ctl_start(tcp_state *s, int hb_ms) {
  int any = 0;
  for (int p = 0; p < s->nranks; p++)
    any |= s->ctl[p].fd >= 0;
  s->hb_ms = hb_ms;
  if (!any || s->hb_ms <= 0) {
    s->hb_ms = 0;
    return BRAID_SUCCESS;
  }
  s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd < 0)
    return ERR(BRAID_ERR_SYSTEM, "tcp: eventfd for the heartbeat thread: %s",
               strerror(errno));
  /* the thread takes no signal: the program's handlers run elsewhere */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int r = pthread_create(&s->hb_tid, NULL, hb_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (r != 0)
    return ERR(BRAID_ERR_SYSTEM, "tcp: cannot start the heartbeat thread: %s",
               strerror(r));
  s->hb_thread = 1;
  return BRAID_SUCCESS;
}

void tcp_ctl_stop(tcp_state *s) {
  if (s->ctl == NULL)
    return;
  if (s->hb_thread) {
    uint64_t one = 1;
    ssize_t n = write(s->stop_fd, &one, sizeof one);
    (void)n;
    pthread_join(s->hb_tid, NULL);
    s->hb_thread = 0;
  }
  if (s->stop_fd >= 0)
    close(s->stop_fd);
  s->stop_fd = -1;
  for (int p = 0; p < s->nranks; p++)
    if (s->ctl[p].fd >= 0)
      close(s->ctl[p].fd);
  pthread_mutex_destroy(&s->ctl_lock);
  free(s->ctl);
  s->ctl = NULL;
}

int tcp_ctl_check(tcp_state *s) {
  if (s->ctl == NULL)
    return 0;
  pthread_mutex_lock(&s->ctl_lock);
  if (!s->hb_thread)
    ctl_drain(s);
  int told = s->told_set;
  tp_mismatch m = s->told;
  pthread_mutex_unlock(&s->ctl_lock);
  if (!told)
    return 0;
  if (!s->mm_set) {
    s->mm = m;
    s->mm_set = 1;
  }
  char what[240];
  tp_fp_told(&m, s->rank, what, sizeof what);
  (void)TERR(s, BRAID_ERR_MISMATCH, "tcp: %s", what);
  return 1;
}

int tcp_mismatch(void *state, tp_mismatch *m) {
  tcp_state *s = state;
  if (s == NULL || !s->mm_set)
    return 0;
  *m = s->mm;
  return 1;
}

void tcp_tell_mismatch(void *state, const tp_mismatch *m) {
  tcp_state *s = state;
  if (s == NULL || s->ctl == NULL || m == NULL)
    return;
  pthread_mutex_lock(&s->ctl_lock);
  for (int p = 0; p < s->nranks; p++)
    ctl_send(s, p, TCP_CTL_MISMATCH, m->by, m->peer, m->theirs, m->mine);
  pthread_mutex_unlock(&s->ctl_lock);
}

/* The note goes to the rank waited for only (a frame to every peer per
 * long wait would cost more than the note is worth); the note before it,
 * to another rank, is taken back there. */
void tcp_note_wait(void *state, int on, uint64_t fp) {
  tcp_state *s = state;
  if (s == NULL || s->ctl == NULL)
    return;
  pthread_mutex_lock(&s->ctl_lock);
  s->note_epoch++;
  if (s->noted_peer >= 0 && s->noted_peer != on)
    ctl_send(s, s->noted_peer, TCP_CTL_NOTE, -1, (int32_t)s->note_epoch, 0, 0);
  if (on >= 0 && on < s->nranks)
    ctl_send(s, on, TCP_CTL_NOTE, on, (int32_t)s->note_epoch, fp, 0);
  s->noted_peer = on >= 0 && on < s->nranks ? on : -1;
  pthread_mutex_unlock(&s->ctl_lock);
}

int tcp_peer_wait(void *state, int peer, int *on, uint64_t *fp,
                  uint32_t *epoch) {
  tcp_state *s = state;
  if (s == NULL || s->ctl == NULL || peer < 0 || peer >= s->nranks)
    return -1;
  pthread_mutex_lock(&s->ctl_lock);
  if (!s->hb_thread)
    ctl_drain(s);
  const tcp_ctl *o = &s->ctl[peer];
  int known = o->noted && o->note_on >= 0;
  if (known) {
    *on = o->note_on;
    *fp = o->note_fp;
    *epoch = o->note_epoch;
  }
  pthread_mutex_unlock(&s->ctl_lock);
  return known ? 1 : -1;
}

/* Nothing in flight between this rank and peer: nothing queued here for it,
 * no message from it half read, nothing from it unread in the sockets. */
int tcp_quiet(void *state, int peer) {
  tcp_state *s = state;
  if (s == NULL || peer < 0 || peer >= s->nranks)
    return 0;
  for (int ch = 0; ch < s->nchannels; ch++) {
    tp_conn *c = s->conns[peer * s->nchannels + ch];
    if (c == NULL)
      return 0;
    int unread = 0;
    if (c->qcount > 0 || (c->rmode != 0 && c->rhdr_got > 0) ||
        ioctl(c->fd, FIONREAD, &unread) != 0 || unread > 0)
      return 0;
  }
  return 1;
}

int tcp_heartbeat(void *state, int *silent_ms) {
  tcp_state *s = state;
  if (s == NULL || s->ctl == NULL || !s->hb_thread)
    return -1;
  int64_t now = sock_now_ms(), every = s->hb_ms;
  int worst = -1;
  int64_t longest = 0;
  pthread_mutex_lock(&s->ctl_lock);
  for (int p = 0; p < s->nranks; p++) {
    tcp_ctl *o = &s->ctl[p];
    if (o->fd < 0 || o->gone)
      continue;
    if (o->ping_ms != 0 && o->heard_ms >= o->ping_ms)
      o->ping_ms = 0; /* answered */
    int64_t last = o->heard_ms > o->sent_ms ? o->heard_ms : o->sent_ms;
    if (o->ping_ms == 0 && now - last >= every) {
      ctl_send(s, p, TCP_CTL_PING, 0, 0, (uint64_t)now, 0);
      o->ping_ms = o->sent_ms = now;
    }
    if (o->ping_ms != 0 && now - o->ping_ms >= 2 * every &&
        now - o->ping_ms > longest) {
      worst = p;
      longest = now - o->ping_ms;
    }
  }
  pthread_mutex_unlock(&s->ctl_lock);
  if (worst >= 0 && silent_ms != NULL)
    *silent_ms = longest > 0x7fffffff ? 0x7fffffff : (int)longest;
  return worst;
}
