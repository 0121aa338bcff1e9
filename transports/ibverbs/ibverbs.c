/*
 * InfiniBand / RoCE verbs transport: one RC queue pair per (peer, channel),
 * connected through the bootstrap.
 *
 * Protocol (logic in ib_proto.c, unit-tested without a device): the receiver
 * owns nslots slots of slot_bytes, each after a word for the fingerprint of
 * the sender's call (tp_ops.set_fp; 0 on the last channel, which carries
 * send/recv); the sender copies a message behind that word into its local
 * registered staging slot and RDMA-writes both with immediate (the length of
 * the message) into the receiver's slot seq % nslots. The immediate consumes a
 * posted receive and tells the receiver the slot is full. The receiver hands
 * the slot to recv (copy) or recv_reduce (reduce straight from the slot) and
 * returns credits by RDMA-writing its consumed count into the sender's credit
 * word every nslots/2 messages. Sends never pass the credits. A message of
 * another call than the receiver's (fingerprints differ, as tcp compares
 * them) is refused with BRAID_ERR_MISMATCH naming both calls.
 *
 * User buffers are never registered: a registration keyed by address goes
 * stale when the application unmaps and maps memory again, so data moves
 * through braid's own registered slots (one registration per connection,
 * through the registration cache).
 *
 * Device and port: BRAID_IB_HCA (NCCL's syntax); RoCE GID: BRAID_IB_GID_INDEX
 * or automatic (RoCE v2 with an IPv4 address first).
 */
#include "transports/call_fp.h"
#include "transports/transport.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/ibverbs/ib_int.h"
#include "transports/ibverbs/ib_proto.h"
#include "transports/ibverbs/ibverbs.h"

#ifdef BRAID_HAVE_IBVERBS

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>

static int wc_result(enum ibv_wc_status s) {
  switch (s) {
  case IBV_WC_RETRY_EXC_ERR:
  case IBV_WC_RNR_RETRY_EXC_ERR:
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_OP_ERR:
  case IBV_WC_REM_ABORT_ERR:
  case IBV_WC_RESP_TIMEOUT_ERR:
  case IBV_WC_REM_INV_RD_REQ_ERR:
  case IBV_WC_WR_FLUSH_ERR:
    return BRAID_ERR_REMOTE;
  default:
    return BRAID_ERR_SYSTEM;
  }
}

int ib_conn_fail(tp_conn *c, int r, const char *fmt, ...) {
  ib_state *st = c->st;
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  (void)IERR(st, r,
             "ibverbs: %.150s, connection to rank %d channel %d on %.40s", msg,
             c->peer, c->channel, st->dev);
  WARN(LOG_NET, "%s", st->why);
  ib_conn_step(&c->state, IB_EV_FAIL);
  if (c->err == 0)
    c->err = r;
  return c->err;
}

int ib_post_recv(tp_conn *c) {
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)c->index << 8) | K_RECV;
  wr.num_sge = 0;
  return ibv_post_recv(c->qp, &wr, &bad);
}

static int post_credit(tp_conn *c) {
  if (c->sq_out >= c->sq_max)
    return TP_AGAIN;
  uint64_t v = ib_rx_announce(&c->rx);
  struct ibv_sge sge = {(uintptr_t)&v, sizeof(v), 0};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)c->index << 8) | K_CREDIT;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = c->remote.credit_addr;
  wr.wr.rdma.rkey = c->remote.credit_rkey;
  int e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0)
    return ib_conn_fail(c, BRAID_ERR_SYSTEM, "posting a credit update: %s",
                        strerror(e));
  c->sq_out++;
  c->credit_pending = 0;
  return BRAID_SUCCESS;
}

static int ib_progress(ib_state *st) {
  struct ibv_wc wc[32];
  for (int round = 0; round < 8; round++) {
    int n = ibv_poll_cq(st->cq, 32, wc);
    if (n < 0)
      return IERR(st, BRAID_ERR_SYSTEM, "ibverbs: ibv_poll_cq failed on %s",
                  st->dev);
    for (int i = 0; i < n; i++) {
      size_t idx = (size_t)(wc[i].wr_id >> 8);
      int kind = (int)(wc[i].wr_id & 0xff);
      tp_conn *c = &st->conns[idx];
      if (wc[i].status != IBV_WC_SUCCESS) {
        ib_conn_fail(c, wc_result(wc[i].status),
                     "completion error: %s (vendor "
                     "error 0x%x)",
                     ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
        continue;
      }
      if (kind == K_RECV) {
        uint32_t len = ntohl(wc[i].imm_data);
        if (len > st->net.slot_bytes || ib_rx_arrive(&c->rx, len) != 0) {
          ib_conn_fail(c, BRAID_ERR_REMOTE, "protocol error: %s",
                       "peer wrote without a credit or past a slot");
          continue;
        }
        int e = ib_post_recv(c);
        if (e != 0)
          ib_conn_fail(c, BRAID_ERR_SYSTEM, "reposting a receive: %s",
                       strerror(e));
      } else if (kind == K_DATA) {
        c->sq_out--;
        if (ib_tx_complete(&c->tx) != 0)
          ib_conn_fail(c, BRAID_ERR_INTERNAL, "%s",
                       "more send completions than sends");
      } else {
        c->sq_out--;
      }
    }
    if (n < 32)
      break;
  }
  return 0;
}

static int ib_refresh(tp_conn *c) {
  int r = ib_progress(c->st);
  if (r != 0)
    return r;
  if (c->err != 0)
    return IREPEAT(c->st, c->err);
  if (ib_tx_ack(&c->tx, *credit_word(c)) != 0)
    return ib_conn_fail(c, BRAID_ERR_REMOTE, "protocol error: %s",
                        "credit counter moved backwards or past the sends");
  if (c->credit_pending) {
    r = post_credit(c);
    if (r != BRAID_SUCCESS && r != TP_AGAIN)
      return r;
  }
  return 0;
}

/* The fingerprint messages on c carry and expect: the call's on the
 * collective channels, none on the last (send/recv). */
static uint64_t conn_fp(const tp_conn *c) {
  return c->channel < c->st->net.nchannels - 1 ? c->st->fp : 0;
}

static int ibv_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  ib_state *st = c->st;
  int r = ib_refresh(c);
  if (r != 0)
    return r;
  if (len > st->net.slot_bytes)
    return IERR(st, BRAID_ERR_INVALID_ARG,
                "ibverbs: a %zu-byte message to rank %d is larger than the "
                "%zu-byte slots",
                len, c->peer, st->net.slot_bytes);
  if (ib_tx_credits(&c->tx) == 0 ||
      c->tx.sent - c->tx.completed >= (uint64_t)st->net.nslots ||
      c->sq_out >= c->sq_max)
    return TP_AGAIN;
  uint32_t slot;
  uint64_t seq;
  ib_tx_take(&c->tx, &slot, &seq);
  uint64_t fp = conn_fp(c);
  memcpy(send_slot(c, slot), &fp, IB_FP_BYTES);
  if (len > 0)
    memcpy(send_slot(c, slot) + IB_FP_BYTES, src, len);
  struct ibv_sge sge = {(uintptr_t)send_slot(c, slot),
                        (uint32_t)(IB_FP_BYTES + len), c->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)c->index << 8) | K_DATA;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl((uint32_t)len);
  wr.wr.rdma.remote_addr =
      c->remote.slots_addr + (uint64_t)slot * slot_stride(st);
  wr.wr.rdma.rkey = c->remote.slots_rkey;
  int e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0)
    return ib_conn_fail(c, BRAID_ERR_SYSTEM, "ibv_post_send: %s", strerror(e));
  c->sq_out++;
  *ticket = seq;
  return BRAID_SUCCESS;
}

/* The source was copied at isend: it is free at once. */
static int ibv_send_done(tp_conn *c, uint64_t ticket) {
  int r = ib_refresh(c);
  if (r != 0)
    return r;
  if (ticket > c->tx.sent)
    return IERR(c->st, BRAID_ERR_INVALID_ARG,
                "ibverbs: send_done to rank %d: ticket %llu never issued",
                c->peer, (unsigned long long)ticket);
  return BRAID_SUCCESS;
}

static int ibv_take(tp_conn *c, size_t len, const uint8_t **data) {
  ib_state *st = c->st;
  int r = ib_refresh(c);
  if (r != 0)
    return r;
  uint32_t slot, mlen;
  if (ib_rx_head(&c->rx, &slot, &mlen) != 0)
    return TP_AGAIN;
  uint64_t theirs, fp = conn_fp(c);
  memcpy(&theirs, recv_slot(c, slot), IB_FP_BYTES);
  if (fp != 0 && theirs != 0 && theirs != fp) {
    char what[224];
    tp_fp_mismatch(theirs, fp, c->peer, what, sizeof what);
    if (!st->mm_set)
      st->mm = (tp_mismatch){st->net.rank, c->peer, theirs, fp};
    st->mm_set = 1;
    c->err = BRAID_ERR_MISMATCH;
    return IERR(st, c->err, "ibverbs: channel %d from rank %d: %s", c->channel,
                c->peer, what);
  }
  if (mlen != len) {
    c->err = BRAID_ERR_MISMATCH;
    return IERR(st, c->err,
                "ibverbs: message %llu from rank %d channel %d has %u bytes, "
                "expected %zu (ranks disagree on sizes)",
                (unsigned long long)c->rx.consumed + 1, c->peer, c->channel,
                mlen, len);
  }
  *data = recv_slot(c, slot) + IB_FP_BYTES;
  return BRAID_SUCCESS;
}

static int ibv_release(tp_conn *c) {
  if (ib_rx_consume(&c->rx)) {
    c->credit_pending = 1;
    int r = post_credit(c);
    if (r != BRAID_SUCCESS && r != TP_AGAIN)
      return r;
  }
  return BRAID_SUCCESS;
}

static int ibv_recv(tp_conn *c, void *dst, size_t len) {
  const uint8_t *p = NULL;
  int r = ibv_take(c, len, &p);
  if (r != BRAID_SUCCESS)
    return r;
  if (len > 0)
    memcpy(dst, p, len);
  return ibv_release(c);
}

static int ibv_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *red) {
  if (red == NULL || red->fn == NULL || red->elem_size == 0 ||
      len % red->elem_size != 0)
    return IERR(c->st, BRAID_ERR_INVALID_ARG,
                "ibverbs: recv_reduce of %zu bytes from rank %d: bad reducer "
                "or a length that is not a multiple of the element size",
                len, c->peer);
  const uint8_t *p = NULL;
  int r = ibv_take(c, len, &p);
  if (r != BRAID_SUCCESS)
    return r;
  if (len > 0)
    red->fn(dst, src, p, len / red->elem_size);
  return ibv_release(c);
}

static tp_conn *ibv_conn(void *state, int peer, int channel) {
  ib_state *st = state;
  if (st == NULL || st->conns == NULL || peer < 0 || peer >= st->net.nranks ||
      channel < 0 || channel >= st->net.nchannels || !st->net.used[peer])
    return NULL;
  return &st->conns[(size_t)peer * (size_t)st->net.nchannels + (size_t)channel];
}

static int ibv_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static int ibv_check_peers(void *state, int *dead_rank) {
  ib_state *st = state;
  size_t n = (size_t)st->net.nranks * (size_t)st->net.nchannels;
  for (size_t i = 0; st->conns != NULL && i < n; i++)
    if (st->conns[i].qp != NULL && st->conns[i].err == BRAID_ERR_REMOTE) {
      *dead_rank = st->conns[i].peer;
      return IREPEAT(st, BRAID_ERR_REMOTE);
    }
  int dead = -1;
  braid_result r = boot_check_peers(st->net.boot, &dead);
  if (r == BRAID_ERR_REMOTE)
    *dead_rank = dead;
  return r != BRAID_SUCCESS ? IREPEAT(st, r) : BRAID_SUCCESS;
}

static void ibv_set_fp(void *state, uint64_t fp) {
  if (state != NULL)
    ((ib_state *)state)->fp = fp;
}

static int ibv_mismatch(void *state, tp_mismatch *m) {
  ib_state *st = state;
  if (st == NULL || !st->mm_set)
    return 0;
  *m = st->mm;
  return 1;
}

void ibv_teardown(void *state) {
  ib_state *st = state;
  if (st == NULL)
    return;
  size_t n = (size_t)st->net.nranks * (size_t)st->net.nchannels;
  for (size_t i = 0; st->conns != NULL && i < n; i++) {
    tp_conn *c = &st->conns[i];
    if (c->qp != NULL)
      ibv_destroy_qp(c->qp);
    ib_conn_step(&c->state, IB_EV_CLOSE);
    if (st->rc_ready && c->rc_entry >= 0)
      rc_put(&st->rc, c->rc_entry);
  }
  if (st->rc_ready)
    rc_free(&st->rc);
  for (size_t i = 0; st->conns != NULL && i < n; i++) {
    free(st->conns[i].mem);
    ib_rx_free(&st->conns[i].rx);
  }
  if (st->cq != NULL)
    ibv_destroy_cq(st->cq);
  if (st->pd != NULL)
    ibv_dealloc_pd(st->pd);
  if (st->ctx != NULL)
    ibv_close_device(st->ctx);
  free(st->conns);
  tp_net_fini(&st->net);
  free(st);
}

#else /* !BRAID_HAVE_IBVERBS */

int ib_probe_device(const tp_settings *set, char *name, size_t len) {
  (void)set;
  if (name != NULL && len > 0)
    name[0] = '\0';
  return 0;
}

static int ibv_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  (void)peers;
  (void)ts;
  *state = NULL;
  return ERR(BRAID_ERR_UNSUPPORTED,
             "ibverbs: this braid was built without libibverbs (install "
             "libibverbs-dev and reconfigure)");
}
/* Calls on a state that setup never made: none reach here. */
static int ibv_none(void) {
  return ERR(BRAID_ERR_UNSUPPORTED,
             "ibverbs: this braid was built without libibverbs");
}
static tp_conn *ibv_conn(void *state, int peer, int channel) {
  (void)state, (void)peer, (void)channel;
  return NULL;
}
static int ibv_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  (void)c, (void)src, (void)len, (void)ticket;
  return ibv_none();
}
static int ibv_send_done(tp_conn *c, uint64_t ticket) {
  (void)c, (void)ticket;
  return ibv_none();
}
static int ibv_recv(tp_conn *c, void *dst, size_t len) {
  (void)c, (void)dst, (void)len;
  return ibv_none();
}
static int ibv_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  (void)c, (void)src, (void)dst, (void)len, (void)r;
  return ibv_none();
}
static int ibv_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}
static int ibv_check_peers(void *state, int *dead_rank) {
  (void)state, (void)dead_rank;
  return BRAID_SUCCESS;
}
static void ibv_teardown(void *state) { (void)state; }
static void ibv_set_fp(void *state, uint64_t fp) { (void)state, (void)fp; }
static int ibv_mismatch(void *state, tp_mismatch *m) {
  (void)state, (void)m;
  return 0;
}

#endif

const tp_ops tp_ibverbs = {
    .name = "ibverbs",
    .setup = ibv_setup,
    .conn = ibv_conn,
    .isend = ibv_isend,
    .send_done = ibv_send_done,
    .recv = ibv_recv,
    .recv_reduce = ibv_recv_reduce,
    .pollfd = ibv_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .set_fp = ibv_set_fp,
    .check_peers = ibv_check_peers,
    .mismatch = ibv_mismatch,
    .teardown = ibv_teardown,
};
