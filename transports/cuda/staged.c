/*
 * The staged adapter: device buffers over a host transport's connection,
 * through pinned host memory, pipelined.
 *
 * Send: a message is cut into fragments of at most slot_bytes. Each
 * fragment takes one of nslots pinned slots of its connection: the copy
 * device -> slot is issued on the stream and its event recorded; once the
 * event has completed the slot goes to the inner transport's isend; once the
 * inner send_done says the slot is no longer read, the slot is free again.
 * So the copy of fragment k+1 runs while fragment k is on the wire. A
 * message is done for send_done once the copies of all its fragments have
 * completed: its source is no longer read, though slots may still be on the
 * wire (flush waits for those). Waiting for the inner transport instead
 * would make the sender wait for its receiver wherever the inner send
 * completes only once received (shm's single-copy reads, rendezvous
 * protocols), and a ring whose ranks each overwrite what they just sent
 * would then wait in a cycle.
 *
 * Receive: each fragment is received by the inner transport into a pinned
 * slot, then copied (or reduced, the kernel reading the mapped pinned slot)
 * into device memory; the slot is free once that event has completed, and
 * the next fragment is received meanwhile. The receive completes when every
 * fragment's copy has completed.
 *
 * The inner connection is the host connection of the same (peer, channel):
 * calls on a communicator are serialized and an operation finishes every
 * message before the next begins, so host and device messages never
 * interleave on it. Length mismatches are caught by the inner transport,
 * which carries each fragment's length.
 *
 * Nothing here calls CUDA: copies go through a copy engine (cuda_fifo.h),
 * pinned memory through staged_mem (cuda_tp.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "transports/common.h"
#include "transports/cuda/cuda_fifo.h"
#include "transports/cuda/cuda_tp.h"

struct tp_conn {
  struct stg_state *st;
  int peer, channel, ready;
  int failed; /* sticky */
  tp_conn *inner;
  uint64_t nslots, cap;
  /* send side */
  char *tbuf;
  void **tev;
  uint64_t *tticket, *tlen, *tlast;
  uint64_t tprod, tsent, tfree; /* copies issued, handed on, slots freed */
  uint64_t msgs, done; /* messages accepted; done on the inner transport */
  uint64_t copied;     /* messages whose fragments are all in pinned slots */
  const char *src;
  uint64_t len, off;
  int pushing;
  /* receive side */
  char *rbuf;
  void **rev;
  uint64_t rgot, rdone, rbase; /* fragments received, copied; message start */
};

typedef struct stg_state {
  staged_cfg cfg;
  tp_conn *conns;   /* nranks * nchannels, set up on first use */
  char why[TP_WHY]; /* the last failure's message (tp_keep) */
} stg_state;

/* The connection breaks: its later calls fail with the same code and
 * message. The text may quote the message below (inner_err). */
static int fail(tp_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(tp_conn *c, int code, const char *fmt, ...) {
  char m[TP_WHY];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  c->failed = code ? code : BRAID_ERR_INTERNAL;
  return tp_keep(c->st->why, ERR(c->failed, "%s", m));
}

/* A bad argument: the connection stays usable. */
#define AERR(c, ...)                                                           \
  ((c) ? tp_keep((c)->st->why, ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))        \
       : (int)ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))

/* The message of the inner transport's call that just failed. */
static const char *inner_err(void) {
  const char *m = err_msg();
  return m[0] ? m : "no detail";
}

static const char *eng_err(stg_state *st) {
  const char *m = st->cfg.eng->error ? st->cfg.eng->error() : NULL;
  return m && m[0] ? m : "no detail";
}

/* ---- connections --------------------------------------------------------- */

static void conn_free(stg_state *st, tp_conn *c) {
  for (uint64_t i = 0; i < c->nslots; i++) {
    if (c->tev && c->tev[i])
      st->cfg.eng->event_free(c->tev[i]);
    if (c->rev && c->rev[i])
      st->cfg.eng->event_free(c->rev[i]);
  }
  free(c->tev);
  free(c->rev);
  free(c->tticket);
  free(c->tlen);
  free(c->tlast);
  if (c->tbuf)
    st->cfg.mem->free(c->tbuf);
  if (c->rbuf)
    st->cfg.mem->free(c->rbuf);
}

/* Pinned slots and events of a connection, on its first use. */
static int conn_ready(tp_conn *c) {
  if (c->ready)
    return BRAID_SUCCESS;
  if (c->failed)
    return tp_repeat(c->st->why, c->failed);
  stg_state *st = c->st;
  const staged_cfg *g = &st->cfg;
  c->inner = g->inner_conn(g->inner_arg, c->peer, c->channel);
  if (!c->inner)
    return fail(c, BRAID_ERR_INTERNAL,
                "staged: no %s connection to rank %d channel %d",
                g->inner->name, c->peer, c->channel);
  uint64_t n = c->nslots;
  size_t bytes = (size_t)(n * c->cap);
  c->tev = calloc(n, sizeof(void *));
  c->rev = calloc(n, sizeof(void *));
  c->tticket = calloc(n, sizeof(uint64_t));
  c->tlen = calloc(n, sizeof(uint64_t));
  c->tlast = calloc(n, sizeof(uint64_t));
  if (!c->tev || !c->rev || !c->tticket || !c->tlen || !c->tlast)
    return fail(c, BRAID_ERR_NOMEM, "staged: no memory for rank %d", c->peer);
  void *tb = NULL, *rb = NULL;
  int rc = g->mem->alloc(&tb, bytes);
  if (!rc) {
    c->tbuf = tb;
    rc = g->mem->alloc(&rb, bytes);
  }
  if (!rc)
    c->rbuf = rb;
  if (rc)
    return fail(c, rc,
                "staged to rank %d channel %d: cannot allocate 2 x %zu bytes "
                "of pinned memory: %s",
                c->peer, c->channel, bytes, eng_err(st));
  for (uint64_t i = 0; i < n; i++) {
    rc = g->eng->event_new(&c->tev[i]);
    if (!rc)
      rc = g->eng->event_new(&c->rev[i]);
    if (rc)
      return fail(c, rc, "staged to rank %d: events: %s", c->peer, eng_err(st));
  }
  c->ready = 1;
  return BRAID_SUCCESS;
}

/* ---- send side ----------------------------------------------------------- */

/* Issues device -> pinned copies of the current message while slots are
 * free, hands completed slots to the inner transport, frees slots it is
 * done with. */
static int tx_progress(tp_conn *c) {
  if (c->failed)
    return tp_repeat(c->st->why, c->failed);
  if (!c->ready)
    return BRAID_SUCCESS;
  stg_state *st = c->st;
  const cuf_engine *eng = st->cfg.eng;
  const tp_ops *in = st->cfg.inner;
  while (c->tfree < c->tsent) { /* slots the inner transport is done with */
    uint64_t s = c->tfree % c->nslots;
    int rc = in->send_done(c->inner, c->tticket[s]);
    if (rc == TP_AGAIN)
      break;
    if (rc)
      return fail(c, rc, "staged send to rank %d channel %d over %s: %s",
                  c->peer, c->channel, in->name, inner_err());
    if (c->tlast[s])
      c->done = c->tlast[s];
    c->tfree++;
  }
  while (c->tsent < c->tprod) { /* copied slots go on the wire */
    uint64_t s = c->tsent % c->nslots;
    int rc = eng->query(c->tev[s]);
    if (rc == TP_AGAIN)
      break;
    if (rc)
      return fail(c, rc,
                  "staged send to rank %d channel %d: the copy to pinned "
                  "memory failed: %s",
                  c->peer, c->channel, eng_err(st));
    if (c->tlast[s] > c->copied) /* slots complete in order */
      c->copied = c->tlast[s];
    rc = in->isend(c->inner, c->tbuf + s * c->cap, (size_t)c->tlen[s],
                   &c->tticket[s]);
    if (rc == TP_AGAIN)
      break;
    if (rc)
      return fail(c, rc, "staged send to rank %d channel %d over %s: %s",
                  c->peer, c->channel, in->name, inner_err());
    c->tsent++;
  }
  while (c->pushing && c->tprod - c->tfree < c->nslots) { /* new copies */
    uint64_t s = c->tprod % c->nslots;
    uint64_t n = c->len - c->off < c->cap ? c->len - c->off : c->cap;
    int rc = n ? eng->copy(c->tbuf + s * c->cap, c->src + c->off, (size_t)n,
                           st->cfg.stream)
               : BRAID_SUCCESS;
    if (!rc)
      rc = eng->record(c->tev[s], st->cfg.stream);
    if (rc)
      return fail(c, rc,
                  "staged send to rank %d channel %d: the copy to pinned "
                  "memory failed: %s",
                  c->peer, c->channel, eng_err(st));
    c->off += n;
    c->tlen[s] = n;
    c->tlast[s] = c->off == c->len ? c->msgs : 0;
    c->tprod++;
    if (c->off == c->len)
      c->pushing = 0;
  }
  return BRAID_SUCCESS;
}

static int progress_all(stg_state *st) {
  size_t n = (size_t)st->cfg.nranks * (size_t)st->cfg.nchannels;
  for (size_t i = 0; i < n; i++) {
    int rc = tx_progress(&st->conns[i]);
    if (rc)
      return rc;
  }
  return BRAID_SUCCESS;
}

static int stg_isend_mode(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket, int whole) {
  if (!c || !ticket || (!src && len))
    return AERR(c, "staged isend to rank %d: %s is NULL", c ? c->peer : -1,
                c == NULL ? "the connection"
                : ticket  ? "src"
                          : "ticket");
  int rc = conn_ready(c);
  if (!rc)
    rc = progress_all(c->st);
  if (rc)
    return rc;
  uint64_t need = len == 0 ? 1 : (len + c->cap - 1) / c->cap;
  if (!whole || need > c->nslots)
    need = 1;
  if (c->pushing || c->nslots - (c->tprod - c->tfree) < need)
    return TP_AGAIN;
  c->src = src;
  c->len = len;
  c->off = 0;
  c->pushing = 1;
  *ticket = ++c->msgs;
  return tx_progress(c);
}

static int stg_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  return stg_isend_mode(c, src, len, ticket, 0);
}

/* Every copy reading src is issued (on the stream) before this returns. */
static int stg_isend_copy(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket) {
  return stg_isend_mode(c, src, len, ticket, 1);
}

static int stg_send_done(tp_conn *c, uint64_t ticket) {
  if (!c || ticket > c->msgs)
    return AERR(c,
                "staged send_done to rank %d: ticket %" PRIu64 " never issued",
                c ? c->peer : -1, ticket);
  int rc = progress_all(c->st);
  if (rc)
    return rc;
  /* a slot goes to the inner transport only once copied: copied >= done */
  return c->copied >= ticket ? BRAID_SUCCESS : TP_AGAIN;
}

/* ---- receive side -------------------------------------------------------- */

static int rx_progress(tp_conn *c, const char *src, char *dst, size_t len,
                       const tp_reducer *r) {
  int rc = conn_ready(c);
  if (!rc)
    rc = progress_all(c->st);
  if (rc)
    return rc;
  stg_state *st = c->st;
  const cuf_engine *eng = st->cfg.eng;
  const tp_ops *in = st->cfg.inner;
  void *stream = st->cfg.stream;
  if (r && tp_reducer_dev(r)->dev_stream)
    stream = tp_reducer_dev(r)->dev_stream;
  uint64_t nfrags = len == 0 ? 1 : (len + c->cap - 1) / c->cap;
  for (;;) {
    while (c->rdone < c->rgot) { /* copies done: slots free */
      rc = eng->query(c->rev[c->rdone % c->nslots]);
      if (rc == TP_AGAIN)
        break;
      if (rc)
        return fail(c, rc,
                    "staged recv from rank %d channel %d: the copy from "
                    "pinned memory failed: %s",
                    c->peer, c->channel, eng_err(st));
      c->rdone++;
    }
    if (c->rgot - c->rbase == nfrags || c->rgot - c->rdone == c->nslots)
      break;
    uint64_t k = c->rgot - c->rbase, s = c->rgot % c->nslots;
    uint64_t off = k * c->cap;
    uint64_t n = len - off < c->cap ? len - off : c->cap;
    char *slot = c->rbuf + s * c->cap;
    rc = in->recv(c->inner, slot, (size_t)n);
    if (rc == TP_AGAIN)
      break;
    if (rc)
      return fail(c, rc, "staged recv from rank %d channel %d over %s: %s",
                  c->peer, c->channel, in->name, inner_err());
    if (n && r)
      rc = eng->reduce(dst + off, src + off, slot, (size_t)n, r, stream);
    else if (n)
      rc = eng->copy(dst + off, slot, (size_t)n, stream);
    if (!rc)
      rc = eng->record(c->rev[s], stream);
    if (rc)
      return fail(c, rc,
                  "staged recv from rank %d channel %d: the %s from pinned "
                  "memory failed: %s",
                  c->peer, c->channel, r ? "reduction" : "copy", eng_err(st));
    c->rgot++;
  }
  if (c->rgot - c->rbase < nfrags || c->rdone != c->rgot)
    return TP_AGAIN;
  c->rbase = c->rgot;
  return BRAID_SUCCESS;
}

static int stg_recv(tp_conn *c, void *dst, size_t len) {
  if (!c || (!dst && len))
    return AERR(c, "staged recv from rank %d: dst is NULL", c ? c->peer : -1);
  return rx_progress(c, NULL, dst, len, NULL);
}

static int stg_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  if (!c || (len && (!src || !dst)) || !r || r->elem_size == 0 ||
      len % r->elem_size || c->cap % r->elem_size)
    return AERR(c,
                "staged recv_reduce from rank %d: NULL buffer or reducer, or "
                "%zu bytes not a multiple of the element size %zu",
                c ? c->peer : -1, len, r ? r->elem_size : 0);
  return rx_progress(c, src, dst, len, r);
}

/* ---- the rest of the vtable ---------------------------------------------- */

static int stg_pollfd(tp_conn *c) {
  if (!c || !c->inner || !c->st->cfg.inner->pollfd)
    return -1;
  return c->st->cfg.inner->pollfd(c->inner);
}

static int stg_check_peers(void *state, int *dead_rank) {
  stg_state *st = state;
  const tp_ops *in = st->cfg.inner;
  if (in->check_peers) {
    int rc = in->check_peers(st->cfg.inner_state, dead_rank);
    if (rc) {
      char m[TP_WHY];
      snprintf(m, sizeof m, "%s", inner_err());
      return tp_keep(st->why, ERR(rc, "staged over %s: %s", in->name, m));
    }
  }
  return progress_all(st);
}

static void stg_set_cause(void *state, int dead_rank) {
  stg_state *st = state;
  if (st && st->cfg.inner->set_cause)
    st->cfg.inner->set_cause(st->cfg.inner_state, dead_rank);
}

/* Pushes what the adapter holds; BRAID_SUCCESS once every accepted message
 * is done on the inner transport. */
static int stg_flush(void *state) {
  stg_state *st = state;
  if (!st)
    return BRAID_SUCCESS;
  int rc = progress_all(st);
  if (rc)
    return rc;
  size_t n = (size_t)st->cfg.nranks * (size_t)st->cfg.nchannels;
  for (size_t i = 0; i < n; i++)
    if (st->conns[i].done != st->conns[i].msgs)
      return TP_AGAIN;
  return BRAID_SUCCESS;
}

static void stg_teardown(void *state) {
  stg_state *st = state;
  if (!st)
    return;
  size_t n = (size_t)st->cfg.nranks * (size_t)st->cfg.nchannels;
  for (size_t i = 0; st->conns && i < n; i++)
    conn_free(st, &st->conns[i]);
  free(st->conns);
  free(st);
}

static tp_conn *stg_conn(void *state, int peer, int channel) {
  stg_state *st = state;
  if (!st || peer < 0 || peer >= st->cfg.nranks || channel < 0 ||
      channel >= st->cfg.nchannels)
    return NULL;
  return &st->conns[(size_t)peer * (size_t)st->cfg.nchannels + (size_t)channel];
}

static int stg_setup(tp_setup *su, const uint8_t *peers, void **state) {
  (void)peers;
  (void)su;
  if (state)
    *state = NULL;
  return ERR(BRAID_ERR_UNSUPPORTED,
             "staged: created over a host transport with staged_new, not set "
             "up on its own");
}

int staged_new(const staged_cfg *cfg, void **state) {
  *state = NULL;
  if (!cfg || !cfg->inner || !cfg->inner_conn || !cfg->eng || !cfg->mem ||
      cfg->nranks < 1 || cfg->nchannels < 1 || cfg->nslots < 1 ||
      cfg->slot_bytes < 64)
    return ERR(BRAID_ERR_INVALID_ARG,
               "staged: missing inner transport, engine or memory, or bad "
               "shape (%d ranks, %d channels, %d slots of %zu bytes)",
               cfg ? cfg->nranks : 0, cfg ? cfg->nchannels : 0,
               cfg ? cfg->nslots : 0, cfg ? cfg->slot_bytes : 0);
  stg_state *st = calloc(1, sizeof(*st));
  size_t n = (size_t)cfg->nranks * (size_t)cfg->nchannels;
  if (st)
    st->conns = calloc(n, sizeof(tp_conn));
  if (!st || !st->conns) {
    free(st);
    return ERR(BRAID_ERR_NOMEM, "staged: no memory for %d ranks", cfg->nranks);
  }
  st->cfg = *cfg;
  for (size_t i = 0; i < n; i++)
    st->conns[i] = (tp_conn){.st = st,
                             .peer = (int)(i / (size_t)cfg->nchannels),
                             .channel = (int)(i % (size_t)cfg->nchannels),
                             .nslots = (uint64_t)cfg->nslots,
                             .cap = cfg->slot_bytes & ~(uint64_t)63};
  *state = st;
  return BRAID_SUCCESS;
}

const tp_ops tp_staged = {
    .name = "staged",
    .setup = stg_setup,
    .conn = stg_conn,
    .isend = stg_isend,
    .isend_copy = stg_isend_copy,
    .send_done = stg_send_done,
    .recv = stg_recv,
    .recv_reduce = stg_recv_reduce,
    .pollfd = stg_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .check_peers = stg_check_peers,
    .set_cause = stg_set_cause,
    .teardown = stg_teardown,
    .flush = stg_flush,
    .prepare = conn_ready,
};
