/*
 * The tcp transport's internals, shared by transports/tcp.c (messages,
 * sending, receiving, failures) and transports/tcp_setup.c (connecting the
 * sockets, teardown).
 */
#ifndef BRAID_TRANSPORTS_TCP_INT_H
#define BRAID_TRANSPORTS_TCP_INT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/sock_util.h"
#include "transports/transport.h"

#define TCP_MAGIC 0x42524454u /* "BRDT" */
#define TCP_KIND 1u
#define TCP_AUTH_MS 1000
#define TCP_DATA 1u
#define TCP_BYE 2u /* "closing because rank (len - 1) failed" */
#define TCP_LEN_MAX ((uint64_t)1 << 56)
#define TCP_IOV_MAX 32

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
  int32_t *pids;      /* per rank, from the bootstrap */
  uint8_t *same_host; /* per rank */
  struct pollfd *pfd;
  int *pfd_conn;
  int npfd;
  int culprit; /* the rank this side blamed first, -1 before any failure */
  int timeout_ms;
  char err[256];
};

#define SERR(s, ...) snprintf((s)->err, sizeof((s)->err), __VA_ARGS__)

/* transports/tcp_setup.c */
int tcp_setup(tp_setup *st, const uint8_t *peers, void **state);
void tcp_teardown(void *state);
/* transports/tcp.c: writes what the sockets take of every queued send */
int tcp_flush(void *state);

#endif
