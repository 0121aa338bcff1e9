/*
 * libfabric transport: one reliable-datagram (FI_EP_RDM) endpoint per
 * communicator, tagged messages, one completion queue polled from every call.
 *
 * A message from rank s on channel ch carries the tag (s, ch, seq), seq
 * counting the messages of that (peer, channel) connection, and the receiver
 * posts exactly the tag it expects next: order per connection holds whatever
 * order the provider delivers in. Receives go straight into the caller's
 * buffer (recv) or into a staging buffer (recv_reduce). Outstanding sends per
 * connection are bounded by nslots (TP_AGAIN beyond); the rest of the flow
 * control is the provider's.
 *
 * Each message carries the fingerprint of the sender's call (tp_ops.set_fp;
 * 0 on the last channel, which carries send/recv) as its remote CQ data,
 * where the provider has 64 bits of it (tcp;ofi_rxm, shm, verbs;ofi_rxm):
 * one word per message, no copy. The receiver compares it with its own
 * call's, as tcp does, and refuses a message of another call with
 * BRAID_ERR_MISMATCH naming both calls. Providers with less CQ data carry
 * none, and sizes alone tell a mismatch there.
 *
 * Provider: BRAID_OFI_PROVIDER (a name like "tcp", "tcp;ofi_rxm", "verbs"),
 * else the fastest present (verbs, efa, cxi, psm3, psm2, opx, then tcp, net,
 * sockets, udp). shm is used only when named: it reaches this host only, and
 * braid's own shm transport serves that case. Domain: BRAID_OFI_DOMAIN
 * (interface-name syntax of BRAID_SOCKET_IFNAME), else for socket providers
 * the interface the tcp transport would pick, else the first domain.
 */
#include "transports/ofi/ofi.h"
#include "transports/call_fp.h"
#include "transports/ofi/ofi_int.h"
#include "transports/transport.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/bootstrap.h"
#include "src/log.h"

#ifdef BRAID_HAVE_OFI

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "transports/ibverbs/ib_proto.h"

int ofi_fail(tp_conn *c, int fierr, const char *what, const char *detail) {
  ofi_state *st = c->st;
  int r;
  switch (fierr) {
  case FI_ETRUNC:
  case FI_EMSGSIZE:
    r = BRAID_ERR_MISMATCH;
    break;
  case FI_ECONNRESET:
  case FI_ECONNREFUSED:
  case FI_ECONNABORTED:
  case FI_ENOTCONN:
  case FI_EHOSTUNREACH:
  case FI_ENETUNREACH:
  case FI_ETIMEDOUT:
  case EPIPE:
  case FI_EIO:
  case FI_ESHUTDOWN:
  case FI_EADDRNOTAVAIL:
    r = BRAID_ERR_REMOTE;
    break;
  default:
    r = BRAID_ERR_SYSTEM;
    break;
  }
  (void)OERR(st, r, "ofi: %s with rank %d channel %d: %s%s%s", what, c->peer,
             c->channel, ofi_fn.strerror(fierr),
             detail != NULL && *detail ? ": " : "", detail ? detail : "");
  WARN(LOG_NET, "%s", st->why);
  if (c->err == 0)
    c->err = r;
  return r;
}

/* The fingerprint messages on c carry and expect: the call's on the
 * collective channels, none on the last (send/recv). */
static uint64_t conn_fp(const tp_conn *c) {
  return c->channel < c->st->net.nchannels - 1 ? c->st->fp : 0;
}

/* A received message of call `theirs`: BRAID_ERR_MISMATCH (recorded on the
 * connection, naming both calls) when it is another call than this rank's,
 * else 0. */
static int ofi_fp_check(tp_conn *c, uint64_t theirs) {
  ofi_state *st = c->st;
  uint64_t fp = conn_fp(c);
  if (fp == 0 || theirs == 0 || theirs == fp)
    return 0;
  char what[224];
  tp_fp_mismatch(theirs, fp, c->peer, what, sizeof what);
  if (!st->mm_set)
    st->mm = (tp_mismatch){st->net.rank, c->peer, theirs, fp};
  st->mm_set = 1;
  (void)OERR(st, BRAID_ERR_MISMATCH, "ofi: channel %d from rank %d: %s",
             c->channel, c->peer, what);
  WARN(LOG_NET, "%s", st->why);
  if (c->err == 0)
    c->err = BRAID_ERR_MISMATCH;
  return BRAID_ERR_MISMATCH;
}

int ofi_progress(ofi_state *st) {
  struct fi_cq_tagged_entry ent[16];
  for (int round = 0; round < 64; round++) {
    ssize_t n = fi_cq_read(st->cq, ent, 16);
    if (n == -FI_EAGAIN)
      return 0;
    if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry e;
      memset(&e, 0, sizeof(e));
      if (fi_cq_readerr(st->cq, &e, 0) < 0)
        return 0;
      ofi_op *op = e.op_context;
      if (op == NULL)
        continue;
      char detail[128];
      const char *d = fi_cq_strerror(st->cq, e.prov_errno, e.err_data, detail,
                                     sizeof(detail));
      op->done = 1;
      op->err = e.err != 0 ? e.err : FI_EOTHER;
      int rx = op == &op->c->rx;
      /* a message too long for this call's buffer: of another call? (ofi_rxm
       * fills in the data of a truncated message without the flag; the
       * entry was zeroed, and every send carries data, so 0 is none) */
      if (rx && st->cq_data &&
          ((e.flags & FI_REMOTE_CQ_DATA) || op->err == FI_ETRUNC) &&
          ofi_fp_check(op->c, e.data) != 0)
        continue;
      if (op->err != FI_ECANCELED)
        ofi_fail(op->c, op->err, rx ? "receive failed" : "send failed", d);
      continue;
    }
    if (n < 0)
      return OERR(st, BRAID_ERR_SYSTEM, "ofi: fi_cq_read: %s",
                  ofi_fn.strerror((int)-n));
    for (ssize_t i = 0; i < n; i++) {
      ofi_op *op = ent[i].op_context;
      if (op == NULL)
        continue;
      op->got = ent[i].len;
      if (ent[i].flags & FI_REMOTE_CQ_DATA)
        op->data = ent[i].data;
      op->done = 1;
    }
    if (n < 16)
      return 0;
  }
  return 0;
}

/* Releases completed sends in order; returns the connection's sticky error
 * (its message recorded again). */
static int ofi_reap_tx(tp_conn *c) {
  int nslots = c->st->net.nslots;
  while (c->tx_done < c->tx_seq) {
    ofi_op *op = &c->tx[c->tx_done % (uint64_t)nslots];
    if (!op->done)
      break;
    if (op->mr_entry >= 0)
      rc_put(&c->st->rc, op->mr_entry);
    op->mr_entry = -1;
    c->tx_done++;
  }
  return c->err != 0 ? OREPEAT(c->st, c->err) : 0;
}

static int ofi_desc(ofi_state *st, const void *buf, size_t len, void **desc,
                    int *entry) {
  *desc = NULL;
  *entry = -1;
  if (!st->mr_local || len == 0)
    return 0;
  if (rc_get(&st->rc, buf, len, desc, entry) != 0)
    return OERR(st, BRAID_ERR_SYSTEM,
                "ofi: registering %zu bytes at %p with the provider failed",
                len, buf);
  return 0;
}

/* Posts one send; copy: first copy src into the connection's own slot for
 * this sequence number, so that src is free on return. */
static int ofi_post_send(tp_conn *c, const void *src, size_t len,
                         uint64_t *ticket, int copy) {
  ofi_state *st = c->st;
  int r = ofi_progress(st);
  if (r != 0)
    return r;
  if ((r = ofi_reap_tx(c)) != 0)
    return r;
  if (len > st->max_msg || (copy && len > st->net.slot_bytes))
    return OERR(st, BRAID_ERR_INVALID_ARG,
                "ofi: a %zu-byte message to rank %d is larger than the "
                "%zu-byte %s",
                len, c->peer, copy ? st->net.slot_bytes : st->max_msg,
                copy ? "slots" : "limit of the provider");
  if (c->tx_seq - c->tx_done >= (uint64_t)st->net.nslots)
    return TP_AGAIN;
  if (copy && c->cbuf == NULL) {
    c->cbuf = malloc((size_t)st->net.nslots * st->net.slot_bytes);
    if (c->cbuf == NULL)
      return OERR(st, BRAID_ERR_NOMEM,
                  "ofi: no memory for the copies of sends to rank %d", c->peer);
  }
  uint64_t idx = c->tx_seq % (uint64_t)st->net.nslots;
  ofi_op *op = &c->tx[idx];
  memset(op, 0, sizeof(*op));
  op->c = c;
  op->mr_entry = -1;
  op->copied = copy;
  const void *buf = src;
  if (copy) {
    buf = c->cbuf + idx * st->net.slot_bytes;
    if (len > 0)
      memcpy((void *)buf, src, len);
  }
  void *desc = NULL;
  if ((r = ofi_desc(st, buf, len, &desc, &op->mr_entry)) != 0)
    return r;
  uint64_t seq = c->tx_seq + 1;
  uint64_t tag = ofi_tag(st->net.rank, c->channel, seq);
  ssize_t rc = st->cq_data ? fi_tsenddata(st->ep, len ? buf : NULL, len, desc,
                                          conn_fp(c), c->addr, tag, op)
                           : fi_tsend(st->ep, len ? buf : NULL, len, desc,
                                      c->addr, tag, op);
  if (rc == -FI_EAGAIN) {
    if (op->mr_entry >= 0)
      rc_put(&st->rc, op->mr_entry);
    ofi_progress(st);
    return TP_AGAIN;
  }
  if (rc != 0)
    return ofi_fail(c, (int)-rc, "fi_tsend", NULL);
  c->tx_seq = seq;
  *ticket = seq;
  return BRAID_SUCCESS;
}

static int ofi_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  return ofi_post_send(c, src, len, ticket, 0);
}

/* Large messages move by rendezvous and complete only with the receiver's
 * help; a copy frees the source at once, and the copy slots (nslots, bounded
 * like the sends) drain through flush. */
static int ofi_isend_copy(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket) {
  return ofi_post_send(c, src, len, ticket, 1);
}

/* Every connection's sends complete (copies included), without waiting. */
static int ofi_flush(void *state) {
  ofi_state *st = state;
  if (st == NULL || st->conns == NULL)
    return BRAID_SUCCESS;
  int r = ofi_progress(st);
  if (r != 0)
    return r;
  int left = 0;
  size_t n = (size_t)st->net.nranks * (size_t)st->net.nchannels;
  for (size_t i = 0; i < n; i++) {
    tp_conn *c = &st->conns[i];
    if (c->st == NULL)
      continue;
    if ((r = ofi_reap_tx(c)) != 0)
      return r;
    left |= c->tx_done < c->tx_seq;
  }
  return left ? TP_AGAIN : BRAID_SUCCESS;
}

static int ofi_send_done(tp_conn *c, uint64_t ticket) {
  int r = ofi_progress(c->st);
  if (r != 0)
    return r;
  if ((r = ofi_reap_tx(c)) != 0)
    return r;
  /* Sends still in flight hold their source unless it was copied. */
  for (uint64_t q = c->tx_done + 1; q <= ticket && q <= c->tx_seq; q++) {
    const ofi_op *op = &c->tx[(q - 1) % (uint64_t)c->st->net.nslots];
    if (!op->done && !op->copied)
      return TP_AGAIN;
  }
  if (ticket > c->tx_seq)
    return OERR(c->st, BRAID_ERR_INVALID_ARG,
                "ofi: send_done to rank %d: ticket %llu never issued", c->peer,
                (unsigned long long)ticket);
  return BRAID_SUCCESS;
}

/* Posts (once) and tests the receive of the next message into buf. */
static int ofi_recv_into(tp_conn *c, void *buf, size_t len) {
  ofi_state *st = c->st;
  int r;
  if (c->err != 0)
    return OREPEAT(st, c->err);
  if (!c->rx_posted) {
    ofi_op *op = &c->rx;
    memset(op, 0, sizeof(*op));
    op->c = c;
    op->mr_entry = -1;
    void *desc = NULL;
    if ((r = ofi_desc(st, buf, len, &desc, &op->mr_entry)) != 0)
      return r;
    ssize_t rc = fi_trecv(st->ep, len ? buf : NULL, len, desc, FI_ADDR_UNSPEC,
                          ofi_tag(c->peer, c->channel, c->rx_seq + 1), 0, op);
    if (rc == -FI_EAGAIN) {
      if (op->mr_entry >= 0)
        rc_put(&st->rc, op->mr_entry);
      ofi_progress(st);
      return TP_AGAIN;
    }
    if (rc != 0)
      return ofi_fail(c, (int)-rc, "fi_trecv", NULL);
    c->rx_posted = 1;
    c->rx_len = len;
  } else if (len != c->rx_len) {
    return OERR(st, BRAID_ERR_INTERNAL,
                "ofi: receive from rank %d resumed with %zu bytes, posted with "
                "%zu",
                c->peer, len, c->rx_len);
  }
  if ((r = ofi_progress(st)) != 0)
    return r;
  if (!c->rx.done)
    return c->err != 0 ? OREPEAT(st, c->err) : TP_AGAIN;
  c->rx_posted = 0;
  if (c->rx.mr_entry >= 0)
    rc_put(&st->rc, c->rx.mr_entry);
  if (c->rx.err != 0)
    return c->err != 0 ? OREPEAT(st, c->err)
                       : ofi_fail(c, c->rx.err, "receive failed", NULL);
  if (ofi_fp_check(c, c->rx.data) != 0)
    return OREPEAT(st, c->err);
  if (c->rx.got != len) {
    c->err = BRAID_ERR_MISMATCH;
    return OERR(st, c->err,
                "ofi: message %llu from rank %d channel %d has %zu bytes, "
                "expected %zu (ranks disagree on sizes)",
                (unsigned long long)c->rx_seq + 1, c->peer, c->channel,
                c->rx.got, len);
  }
  c->rx_seq++;
  return BRAID_SUCCESS;
}

static int ofi_recv(tp_conn *c, void *dst, size_t len) {
  return ofi_recv_into(c, dst, len);
}

static int ofi_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  ofi_state *st = c->st;
  if (r == NULL || r->fn == NULL || r->elem_size == 0 ||
      len % r->elem_size != 0)
    return OERR(st, BRAID_ERR_INVALID_ARG,
                "ofi: recv_reduce of %zu bytes from rank %d: bad reducer or a "
                "length that is not a multiple of the element size",
                len, c->peer);
  if (!c->rx_posted && len > c->stage_cap) {
    /* Drop the old buffer's registration before it can be freed. */
    if (st->mr_local && c->stage != NULL)
      rc_invalidate(&st->rc, c->stage, c->stage_cap);
    void *p = realloc(c->stage, len);
    if (p == NULL)
      return OERR(st, BRAID_ERR_NOMEM,
                  "ofi: no memory for a %zu-byte staging buffer", len);
    c->stage = p;
    c->stage_cap = len;
  }
  int rc = ofi_recv_into(c, c->stage, len);
  if (rc != BRAID_SUCCESS)
    return rc;
  if (len > 0)
    r->fn(dst, src, c->stage, len / r->elem_size);
  return BRAID_SUCCESS;
}

static tp_conn *ofi_conn(void *state, int peer, int channel) {
  ofi_state *st = state;
  if (st == NULL || peer < 0 || peer >= st->net.nranks || channel < 0 ||
      channel >= st->net.nchannels || st->conns == NULL || !st->net.used[peer])
    return NULL;
  return &st->conns[(size_t)peer * (size_t)st->net.nchannels + (size_t)channel];
}

static int ofi_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static int ofi_check_peers(void *state, int *dead_rank) {
  ofi_state *st = state;
  for (int p = 0; st->conns != NULL && p < st->net.nranks; p++) {
    if (!st->net.used[p])
      continue;
    for (int ch = 0; ch < st->net.nchannels; ch++) {
      tp_conn *c = &st->conns[(size_t)p * (size_t)st->net.nchannels + ch];
      if (c->err == BRAID_ERR_REMOTE) {
        *dead_rank = p;
        return OREPEAT(st, BRAID_ERR_REMOTE);
      }
    }
  }
  int dead = -1;
  braid_result r = boot_check_peers(st->net.boot, &dead);
  if (r == BRAID_ERR_REMOTE) {
    *dead_rank = dead;
    return OERR(st, r, "ofi: rank %d is gone (its bootstrap connection closed)",
                dead);
  }
  return r != BRAID_SUCCESS ? OREPEAT(st, r) : BRAID_SUCCESS;
}

static void ofi_set_fp(void *state, uint64_t fp) {
  if (state != NULL)
    ((ofi_state *)state)->fp = fp;
}

static int ofi_mismatch(void *state, tp_mismatch *m) {
  ofi_state *st = state;
  if (st == NULL || !st->mm_set)
    return 0;
  *m = st->mm;
  return 1;
}

void ofi_teardown(void *state) {
  ofi_state *st = state;
  if (st == NULL)
    return;
  if (st->ep != NULL)
    fi_close(&st->ep->fid);
  if (st->mr_local)
    rc_free(&st->rc);
  if (st->av != NULL)
    fi_close(&st->av->fid);
  if (st->cq != NULL)
    fi_close(&st->cq->fid);
  if (st->domain != NULL)
    fi_close(&st->domain->fid);
  if (st->fabric != NULL)
    fi_close(&st->fabric->fid);
  if (st->info != NULL)
    ofi_fn.freeinfo(st->info);
  if (st->conns != NULL) {
    size_t n = (size_t)st->net.nranks * (size_t)st->net.nchannels;
    for (size_t i = 0; i < n; i++) {
      free(st->conns[i].tx);
      free(st->conns[i].stage);
      free(st->conns[i].cbuf);
    }
  }
  free(st->conns);
  free(st->addrs);
  tp_net_fini(&st->net);
  free(st->hello_ops);
  free(st);
}

#else /* !BRAID_HAVE_OFI */

int ofi_probe_fast(const tp_settings *set, char *name, size_t len) {
  (void)set;
  if (name != NULL && len > 0)
    name[0] = '\0';
  return 0;
}

static int ofi_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  (void)peers;
  (void)ts;
  *state = NULL;
  return ERR(BRAID_ERR_UNSUPPORTED,
             "ofi: this braid was built without libfabric (install "
             "libfabric-dev and reconfigure)");
}
/* Calls on a state that setup never made: none reach here. */
static int ofi_none(void) {
  return ERR(BRAID_ERR_UNSUPPORTED,
             "ofi: this braid was built without libfabric");
}
static tp_conn *ofi_conn(void *state, int peer, int channel) {
  (void)state, (void)peer, (void)channel;
  return NULL;
}
static int ofi_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  (void)c, (void)src, (void)len, (void)ticket;
  return ofi_none();
}
static int ofi_isend_copy(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket) {
  (void)c, (void)src, (void)len, (void)ticket;
  return ofi_none();
}
static int ofi_flush(void *state) {
  (void)state;
  return BRAID_SUCCESS;
}
static int ofi_send_done(tp_conn *c, uint64_t ticket) {
  (void)c, (void)ticket;
  return ofi_none();
}
static int ofi_recv(tp_conn *c, void *dst, size_t len) {
  (void)c, (void)dst, (void)len;
  return ofi_none();
}
static int ofi_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  (void)c, (void)src, (void)dst, (void)len, (void)r;
  return ofi_none();
}
static int ofi_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}
static int ofi_check_peers(void *state, int *dead_rank) {
  (void)state, (void)dead_rank;
  return BRAID_SUCCESS;
}
static void ofi_teardown(void *state) { (void)state; }
static void ofi_set_fp(void *state, uint64_t fp) { (void)state, (void)fp; }
static int ofi_mismatch(void *state, tp_mismatch *m) {
  (void)state, (void)m;
  return 0;
}

#endif

const tp_ops tp_ofi = {
    .name = "ofi",
    .setup = ofi_setup,
    .conn = ofi_conn,
    .isend = ofi_isend,
    .isend_copy = ofi_isend_copy,
    .send_done = ofi_send_done,
    .recv = ofi_recv,
    .recv_reduce = ofi_recv_reduce,
    .pollfd = ofi_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .set_fp = ofi_set_fp,
    .check_peers = ofi_check_peers,
    .mismatch = ofi_mismatch,
    .teardown = ofi_teardown,
    .flush = ofi_flush,
};
