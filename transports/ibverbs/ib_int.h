/*
 * Private to the ibverbs transport (ibverbs.c: data path, ibverbs_setup.c:
 * device choice and connection setup).
 */
#ifndef BRAID_TRANSPORTS_IB_INT_H
#define BRAID_TRANSPORTS_IB_INT_H

#ifdef BRAID_HAVE_IBVERBS

#include <stddef.h>
#include <stdint.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/common.h"
#include "transports/ibverbs/ib_proto.h"
#include "transports/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#define IBV_MAGIC 0x49425652u
enum { K_DATA = 1, K_CREDIT = 2, K_RECV = 3 };
enum { ST_OK = 0, ST_FAILED = 1, ST_IDLE = 2 };

typedef struct ibv_blob {
  uint32_t magic;
  int32_t status;
  char dev[56];
} ibv_blob;

typedef struct ib_state ib_state;

struct tp_conn {
  ib_state *st;
  int peer, channel;
  size_t index;
  struct ibv_qp *qp;
  ib_conn_state state;
  uint8_t *mem; /* [send slots | receive slots | credit word] */
  size_t mem_len;
  uint32_t lkey;
  int rc_entry;
  ib_wire_info remote;
  ib_tx_flow tx;
  ib_rx_flow rx;
  int sq_out, sq_max;
  int credit_pending;
  int err;
};

/* Each slot: the sender's call fingerprint (one word), then the message. */
#define IB_FP_BYTES sizeof(uint64_t)

struct ib_state {
  tp_net net; /* rank, nranks, nchannels, nslots, slot_bytes, boot, used */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  uint8_t port;
  int eth;
  int gid_index;
  union ibv_gid gid;
  struct ibv_port_attr pattr;
  char dev[64];
  tp_regcache rc;
  int rc_ready;
  tp_conn *conns;
  uint64_t fp;    /* the call's fingerprint (tp_ops.set_fp) */
  tp_mismatch mm; /* the first message of another call met here */
  int mm_set;
  char why[TP_WHY]; /* the last failure's message (tp_keep) */
};

/* A failure of state st: records the message (ERR) and keeps it in
 * st->why, which a broken connection records again (IREPEAT). */
#define IERR(st, code, ...) tp_keep((st)->why, ERR((code), __VA_ARGS__))
#define IREPEAT(st, code) tp_repeat((st)->why, (code))

/* Bytes from one slot to the next: the fingerprint word and slot_bytes. */
static inline size_t slot_stride(const ib_state *st) {
  return IB_FP_BYTES + st->net.slot_bytes;
}
static inline uint8_t *send_slot(tp_conn *c, uint32_t s) {
  return c->mem + (size_t)s * slot_stride(c->st);
}
static inline uint8_t *recv_slot(tp_conn *c, uint32_t s) {
  return c->mem + ((size_t)c->st->net.nslots + s) * slot_stride(c->st);
}
static inline volatile uint64_t *credit_word(tp_conn *c) {
  return (volatile uint64_t *)(c->mem + 2 * (size_t)c->st->net.nslots *
                                            slot_stride(c->st));
}

/* Records a failure on a connection, with its message (IERR); returns its
 * (sticky) result. */
int ib_conn_fail(tp_conn *c, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Posts one zero-length receive (consumed by a write with immediate). */
int ib_post_recv(tp_conn *c);
void ibv_teardown(void *state);
int ibv_setup(tp_setup *ts, const uint8_t *peers, void **state);

#endif /* BRAID_HAVE_IBVERBS */
#endif
