/*
 * self transport: messages from a rank to itself (a send/recv pair inside a
 * group). isend copies into a bounded in-order queue of nslots messages per
 * channel; recv and recv_reduce copy out of it.
 */
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "transports/transport.h"

typedef struct self_msg {
  char *buf;
  size_t cap, len;
} self_msg;

typedef struct self_state self_state;

struct tp_conn {
  self_state *s;
  int channel;
  self_msg *q;
  int head, count;
  uint64_t next_ticket;
};

struct self_state {
  int rank, nchannels, nslots;
  tp_conn *conns;
};

static int self_setup(tp_setup *st, const uint8_t *peers, void **state) {
  (void)peers;
  if (st == NULL || state == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "self setup: no setup or state");
  if (st->nchannels <= 0 || st->nslots <= 0 || st->rank < 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "self setup: bad arguments (rank %d, nchannels %d, nslots %d)",
               st->rank, st->nchannels, st->nslots);
  self_state *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return ERR(BRAID_ERR_NOMEM, "self setup: no memory");
  s->rank = st->rank;
  s->nchannels = st->nchannels;
  s->nslots = st->nslots;
  s->conns = calloc((size_t)st->nchannels, sizeof(tp_conn));
  if (s->conns == NULL) {
    free(s);
    return ERR(BRAID_ERR_NOMEM, "self setup: no memory");
  }
  for (int i = 0; i < st->nchannels; i++) {
    s->conns[i].s = s;
    s->conns[i].channel = i;
    s->conns[i].q = calloc((size_t)st->nslots, sizeof(self_msg));
    if (s->conns[i].q == NULL) {
      for (int j = 0; j < i; j++)
        free(s->conns[j].q);
      free(s->conns);
      free(s);
      return ERR(BRAID_ERR_NOMEM, "self setup: no memory");
    }
  }
  *state = s;
  return BRAID_SUCCESS;
}

static tp_conn *self_conn(void *state, int peer, int channel) {
  self_state *s = state;
  if (s == NULL || peer != s->rank || channel < 0 || channel >= s->nchannels)
    return NULL;
  return &s->conns[channel];
}

static int self_isend(tp_conn *c, const void *src, size_t len,
                      uint64_t *ticket) {
  if (c == NULL || ticket == NULL || (len && src == NULL))
    return ERR(BRAID_ERR_INVALID_ARG, "self isend: no connection or buffer");
  self_state *s = c->s;
  if (c->count == s->nslots)
    return TP_AGAIN;
  self_msg *m = &c->q[(c->head + c->count) % s->nslots];
  if (m->cap < len) {
    char *nb = realloc(m->buf, len);
    if (nb == NULL)
      return ERR(BRAID_ERR_NOMEM, "self: no memory to queue a %zu-byte message",
                 len);
    m->buf = nb;
    m->cap = len;
  }
  if (len)
    memcpy(m->buf, src, len);
  m->len = len;
  c->count++;
  *ticket = ++c->next_ticket;
  return BRAID_SUCCESS;
}

static int self_send_done(tp_conn *c, uint64_t ticket) {
  if (c == NULL || ticket > c->next_ticket)
    return ERR(BRAID_ERR_INVALID_ARG,
               "self send_done: ticket %llu never issued",
               (unsigned long long)ticket);
  return BRAID_SUCCESS; /* the data was copied at isend */
}

/* The next message, checked against len; NULL with *rc set otherwise. */
static self_msg *next_msg(tp_conn *c, size_t len, int *rc) {
  self_state *s = c->s;
  if (c->count == 0) {
    *rc = TP_AGAIN;
    return NULL;
  }
  self_msg *m = &c->q[c->head];
  if (m->len != len) {
    *rc = ERR(BRAID_ERR_MISMATCH,
              "self: rank %d sent itself a %zu-byte message on channel %d but "
              "receives %zu bytes (send and recv sizes differ?)",
              s->rank, m->len, c->channel, len);
    return NULL;
  }
  return m;
}

static void pop(tp_conn *c) {
  c->head = (c->head + 1) % c->s->nslots;
  c->count--;
}

static int self_recv(tp_conn *c, void *dst, size_t len) {
  if (c == NULL || (len && dst == NULL))
    return ERR(BRAID_ERR_INVALID_ARG, "self recv: no connection or buffer");
  int rc;
  self_msg *m = next_msg(c, len, &rc);
  if (m == NULL)
    return rc;
  if (len)
    memcpy(dst, m->buf, len);
  pop(c);
  return BRAID_SUCCESS;
}

static int self_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                            const tp_reducer *r) {
  if (c == NULL || r == NULL || r->fn == NULL || r->elem_size == 0 ||
      (len && (src == NULL || dst == NULL)))
    return ERR(BRAID_ERR_INVALID_ARG,
               "self recv_reduce: no connection, reducer or buffer");
  if (len % r->elem_size != 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "self: recv_reduce of %zu bytes is not a whole number of "
               "%zu-byte elements",
               len, r->elem_size);
  int rc;
  self_msg *m = next_msg(c, len, &rc);
  if (m == NULL)
    return rc;
  if (len)
    r->fn(dst, src, m->buf, len / r->elem_size);
  pop(c);
  return BRAID_SUCCESS;
}

static int self_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static int self_check_peers(void *state, int *dead_rank) {
  (void)state;
  (void)dead_rank;
  return BRAID_SUCCESS;
}

static void self_teardown(void *state) {
  self_state *s = state;
  if (s == NULL)
    return;
  for (int i = 0; i < s->nchannels; i++) {
    for (int k = 0; k < s->nslots; k++)
      free(s->conns[i].q[k].buf);
    free(s->conns[i].q);
  }
  free(s->conns);
  free(s);
}

const tp_ops tp_self = {
    .name = "self",
    .setup = self_setup,
    .conn = self_conn,
    .isend = self_isend,
    .send_done = self_send_done,
    .recv = self_recv,
    .recv_reduce = self_recv_reduce,
    .pollfd = self_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .check_peers = self_check_peers,
    .teardown = self_teardown,
};
