/*
 * The tcp transport's internals, shared by transports/tcp.c (messages,
 * sending, receiving, failures) and transports/tcp_setup.c (connecting the
 * sockets, teardown).
 */
#ifndef BRAID_TRANSPORTS_TCP_INT_H
#define BRAID_TRANSPORTS_TCP_INT_H

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "src/log.h"
#include "transports/common.h"
#include "transports/sock_util.h"
#include "transports/transport.h"

#define TCP_MAGIC 0x42524454u /* "BRDT" */
#define TCP_KIND 1u
#define TCP_AUTH_MS 1000
#define TCP_DATA 1u
#define TCP_BYE 2u /* "closing because rank (len - 1) failed" */
#define TCP_LEN_MAX ((uint64_t)1 << 56)
#define TCP_IOV_MAX 32

/* Frames on a control connection (transports/tcp_ctl.c) */
#define TCP_CTL_MAGIC 0x4252434cu /* "BRCL" */
#define TCP_CTL_PING 1u           /* x = the sender's clock */
#define TCP_CTL_PONG 2u           /* the answer: x as in the PING */
#define TCP_CTL_NOTE 3u     /* a wait: a = on (-1: over), b = epoch, x = fp */
#define TCP_CTL_MISMATCH 4u /* a = by, b = peer, x = theirs, y = mine */

typedef struct tcp_frame {
  uint32_t magic, type;
  int32_t a, b;
  uint64_t x, y;
} tcp_frame;

/* The control connection to one peer, beside its data channels (channel
 * number nchannels at setup): heartbeats, wait notes and mismatches told,
 * read whole by the heartbeat thread or a health check, never behind data.
 * Everything here is under tcp_state.ctl_lock. */
typedef struct tcp_ctl {
  int fd;   /* -1: no such peer */
  int gone; /* end of file or an error seen: no longer read */
  tcp_frame in;
  size_t in_got;
  char out[8 * sizeof(tcp_frame)]; /* what the socket did not take yet */
  size_t out_len;
  int64_t heard_ms; /* the last frame from the peer */
  int64_t ping_ms;  /* the first unanswered heartbeat sent to it, 0: none */
  int64_t sent_ms;  /* the last heartbeat sent to it */
  int noted;        /* a note from it is held */
  int32_t note_on;
  uint32_t note_epoch;
  uint64_t note_fp;
} tcp_ctl;

typedef struct tcp_hello {
  int32_t rank, channel, nranks, nchannels;
} tcp_hello;

_Static_assert(sizeof(tcp_hello) + sizeof(sock_auth) <= SOCK_GATE_MAX_MSG,
               "greeting fits the gate");

/* A message on the wire: a 16-byte header, (type << 56 | length) and the
 * sender's call fingerprint (tp_ops.set_fp; 0: none), then the payload. */
typedef struct tcp_msg {
  uint64_t hdr[2];
  const char *src;
  size_t len;
  size_t off; /* bytes of header + payload already written */
  uint64_t ticket;
  int copied;      /* src is `copy` (isend_copy): send_done need not wait */
  char *copy;      /* this slot's copy buffer, kept for reuse */
  size_t copy_cap; /* its size */
} tcp_msg;

typedef struct tcp_state tcp_state;

struct tp_conn {
  tcp_state *s;
  int peer, channel, fd;
  int err;   /* sticky failure (BRAID_ERR_*), 0 while healthy */
  int blame; /* the rank named when err is BRAID_ERR_REMOTE */
  /* send side */
  tcp_msg *q;
  int qhead, qcount;
  int listed; /* in s->flush */
  uint64_t next_ticket, written;
  size_t staged; /* bytes of queued copies */
  /* receive side: one message at a time */
  int rmode; /* 0 idle, 1 recv, 2 recv_reduce */
  uint64_t rhdr[2];
  size_t rhdr_got;
  size_t rlen, rgot, rdone;
  char *stage;
  size_t stage_cap;
};

struct tcp_state {
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes;
  uint64_t fp;     /* the call this rank runs (tp_ops.set_fp) */
  tp_conn **conns; /* [peer * nchannels + channel] */
  tp_conn **flush; /* connections with queued sends */
  int nflush;
  size_t staged;      /* bytes of queued copies, every connection's together */
  int32_t *pids;      /* per rank, from the bootstrap */
  uint8_t *same_host; /* per rank */
  struct pollfd *pfd;
  int *pfd_conn;
  int npfd;
  int culprit; /* the rank this side blamed first, -1 before any failure */
  int timeout_ms;
  /* control connections (transports/tcp_ctl.c) */
  tcp_ctl *ctl; /* per rank */
  pthread_mutex_t ctl_lock;
  int hb_ms;     /* heartbeat interval, 0: off (no thread) */
  int hb_thread; /* the thread runs */
  pthread_t hb_tid;
  int stop_fd;    /* eventfd that stops it */
  int noted_peer; /* the rank this rank's last wait note went to, or -1 */
  uint32_t note_epoch;
  tp_mismatch mm; /* met here (by == rank) or told */
  int mm_set;
  tp_mismatch told; /* the first a peer told of */
  int told_set;
  char why[TP_WHY]; /* the last failure's message (tp_keep) */
};

/* A failure of state s: records the message (ERR) and keeps it in s->why,
 * which a connection that stays broken records again (TREPEAT). */
#define TERR(s, code, ...) tp_keep((s)->why, ERR((code), __VA_ARGS__))
#define TREPEAT(s, code) tp_repeat((s)->why, (code))

/* transports/tcp_setup.c */
int tcp_setup(tp_setup *st, const uint8_t *peers, void **state);
void tcp_teardown(void *state);
/* transports/tcp.c: writes what the sockets take of every queued send */
int tcp_flush(void *state);

/* transports/tcp_ctl.c: the control connections. tcp_ctl_init before
 * setup connects them (ctl fds -1), tcp_ctl_start once they are (the
 * heartbeat thread, when hb_ms, BRAID_HEARTBEAT_MS, is > 0), tcp_ctl_stop
 * before they close. tcp_ctl_check reads what arrived (when no thread does):
 * 1 when a peer told of a mismatch (its message recorded, and kept in
 * s->why). */
int tcp_ctl_init(tcp_state *s);
braid_result tcp_ctl_start(tcp_state *s, int hb_ms);
void tcp_ctl_stop(tcp_state *s);
int tcp_ctl_check(tcp_state *s);
int tcp_mismatch(void *state, tp_mismatch *m);
void tcp_tell_mismatch(void *state, const tp_mismatch *m);
void tcp_note_wait(void *state, int on, uint64_t fp);
int tcp_peer_wait(void *state, int peer, int *on, uint64_t *fp,
                  uint32_t *epoch);
int tcp_quiet(void *state, int peer);
int tcp_heartbeat(void *state, int *silent_ms);

#endif
