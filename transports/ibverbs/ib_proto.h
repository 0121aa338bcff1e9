/*
 * Device-free protocol logic of the network transports, unit-tested without
 * an RDMA device (tests/transports_ib/):
 *
 *  - the HCA filter (BRAID_IB_HCA, NCCL's syntax);
 *  - RoCE GID choice;
 *  - credits and slot-ring indices of the RDMA-write protocol;
 *  - the connection state machine;
 *  - the wire format of the connection info exchanged over the bootstrap;
 *  - a memory-registration cache (used by ibverbs and by ofi when the
 *    provider needs FI_MR_LOCAL), generic over the register call.
 */
#ifndef BRAID_TRANSPORTS_IB_PROTO_H
#define BRAID_TRANSPORTS_IB_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

/* ---- HCA filter ------------------------------------------------------ */

#define IB_HCA_MAX 32
#define IB_HCA_NAME 64

typedef struct ib_hca_entry {
  char name[IB_HCA_NAME];
  int port; /* -1: any port */
} ib_hca_entry;

typedef struct ib_hca_filter {
  int exclude; /* leading '^': the listed devices are the ones NOT used */
  int exact;   /* leading '=' (after any '^'): names match whole, not prefix */
  int n;       /* 0: no filter, everything passes */
  ib_hca_entry e[IB_HCA_MAX];
} ib_hca_filter;

/* Parses "mlx5_0:1,mlx5_1", "^mlx5_2", "=mlx5_0", "^=mlx5_3:2". NULL or ""
 * gives the empty filter. Returns BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG
 * with a message naming what is wrong. */
braid_result ib_hca_parse(const char *spec, ib_hca_filter *f);
/* 1 when (device, port) is selected by the filter, else 0. */
int ib_hca_match(const ib_hca_filter *f, const char *dev, int port);

/* ---- RoCE GIDs ------------------------------------------------------- */

/* 1 when the GID is an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
int ib_gid_is_ipv4(const uint8_t gid[16]);
/* 1 when the GID is all zeros (an empty table entry). */
int ib_gid_is_zero(const uint8_t gid[16]);
/* Automatic choice among n table entries: RoCE v2 with an IPv4 address
 * first, then RoCE v2, then any non-zero entry whose type is not v2 (IB or
 * RoCE v1) except link-local fe80:: when another exists. is_v2[i] tells the
 * entry's type. Returns the index, or -1 when every entry is empty. */
int ib_gid_auto(int n, const uint8_t (*gids)[16], const int *is_v2);

/* ---- credits and slots ----------------------------------------------- */

/* Sender side of one connection. The receiver owns nslots slots; a message
 * goes to slot (seq % nslots); the receiver returns credits by publishing how
 * many messages it has consumed (a 64-bit counter the sender reads). */
typedef struct ib_tx_flow {
  uint32_t nslots;
  uint64_t sent;      /* messages posted */
  uint64_t completed; /* send completions seen (in order, RC) */
  uint64_t acked;     /* receiver's consumed count, as last read */
} ib_tx_flow;

void ib_tx_init(ib_tx_flow *t, uint32_t nslots);
/* Credits left: slots the receiver has free for us. */
uint32_t ib_tx_credits(const ib_tx_flow *t);
/* Takes a credit: 0 with *slot and *seq (1-based ticket) set, -1 when none. */
int ib_tx_take(ib_tx_flow *t, uint32_t *slot, uint64_t *seq);
/* The receiver's consumed counter moved: -1 when the value is impossible
 * (goes backwards or past what was sent: a corrupt or foreign peer). */
int ib_tx_ack(ib_tx_flow *t, uint64_t consumed);
/* One send completion: -1 when more completions than sends. */
int ib_tx_complete(ib_tx_flow *t);
/* 1 when every send up to ticket seq has completed. */
int ib_tx_done(const ib_tx_flow *t, uint64_t seq);

/* Receiver side. */
typedef struct ib_rx_flow {
  uint32_t nslots;
  uint64_t arrived;   /* messages whose data has landed */
  uint64_t consumed;  /* messages handed to the caller */
  uint64_t announced; /* consumed count last published to the sender */
  uint32_t *lens;     /* length of the message in each slot */
} ib_rx_flow;

int ib_rx_init(ib_rx_flow *r, uint32_t nslots); /* -1: no memory */
void ib_rx_free(ib_rx_flow *r);
/* A message of len bytes landed (write with immediate): -1 on overrun, i.e.
 * the sender wrote with no credit. */
int ib_rx_arrive(ib_rx_flow *r, uint32_t len);
/* The next message: 0 with *slot, *len set; -1 when none has arrived. */
int ib_rx_head(const ib_rx_flow *r, uint32_t *slot, uint32_t *len);
/* Frees the head slot. Returns 1 when a credit update should go out now
 * (half the slots, at least one, consumed since the last), else 0. */
int ib_rx_consume(ib_rx_flow *r);
/* Marks the credits published; returns the counter value to write. */
uint64_t ib_rx_announce(ib_rx_flow *r);

/* ---- connection state ------------------------------------------------ */

typedef enum ib_conn_state {
  IB_CONN_INIT = 0, /* nothing yet */
  IB_CONN_LOCAL,    /* QP created, buffers registered */
  IB_CONN_PEER,     /* peer's info received and checked */
  IB_CONN_RTR,      /* QP ready to receive */
  IB_CONN_RTS,      /* QP ready to send: connected */
  IB_CONN_ERROR,    /* a completion failed or the peer died */
  IB_CONN_CLOSED
} ib_conn_state;

typedef enum ib_conn_event {
  IB_EV_CREATED = 0,
  IB_EV_PEER_INFO,
  IB_EV_RTR,
  IB_EV_RTS,
  IB_EV_FAIL,
  IB_EV_CLOSE
} ib_conn_event;

/* Applies ev: 0 with *s updated, or -1 (state unchanged) when the event is
 * not allowed in this state. FAIL is allowed from every state but CLOSED;
 * CLOSE from every state. */
int ib_conn_step(ib_conn_state *s, ib_conn_event ev);
const char *ib_conn_state_name(ib_conn_state s);

/* ---- connection info on the wire ------------------------------------- */

#define IB_WIRE_MAGIC 0x42524942u /* "BRIB" */
#define IB_WIRE_BYTES 96

typedef struct ib_wire_info {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t port, mtu; /* enum ibv_mtu value */
  uint8_t gid[16];
  uint64_t slots_addr; /* receiver's slot ring */
  uint32_t slots_rkey;
  uint64_t credit_addr; /* sender's credit word (peer writes consumed) */
  uint32_t credit_rkey;
  uint32_t nslots;
  uint64_t slot_bytes;
  int32_t rank, channel;
} ib_wire_info;

/* Little-endian, fixed layout. */
void ib_wire_pack(const ib_wire_info *w, uint8_t out[IB_WIRE_BYTES]);
/* Checks the magic and that nslots/slot_bytes/rank/channel are what this
 * end expects: BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG with a message naming
 * the field. */
braid_result ib_wire_unpack(const uint8_t in[IB_WIRE_BYTES], ib_wire_info *w,
                            uint32_t want_nslots, uint64_t want_slot_bytes,
                            int want_rank, int want_channel);

/* ---- registration cache ---------------------------------------------- */

/* Registers [addr, addr+len): 0 with *handle and *key (the descriptor the
 * device wants: lkey, fi_mr_desc) set, or nonzero. */
typedef int (*rc_reg_fn)(void *ctx, void *addr, size_t len, void **handle,
                         void **key);
typedef void (*rc_dereg_fn)(void *ctx, void *handle);

typedef struct rc_entry {
  uintptr_t start, end; /* page-aligned */
  void *handle, *key;
  uint64_t last_use;
  int refs;
} rc_entry;

typedef struct tp_regcache {
  rc_entry *e;
  int n, cap; /* entries used, limit before eviction */
  int alloc;  /* entries allocated */
  uint64_t clock;
  uint64_t hits, misses, evictions;
  rc_reg_fn reg;
  rc_dereg_fn dereg;
  void *ctx;
} tp_regcache;

void rc_init(tp_regcache *c, int cap, rc_reg_fn reg, rc_dereg_fn dereg,
             void *ctx);
/* The registration covering [addr, addr+len), registering the page-aligned
 * range on a miss (evicting the least recently used idle entry when full).
 * Takes a reference: 0 with *key and *entry set; -1 when registration fails
 * or len is 0 with a NULL addr (nothing to register: *key = NULL, 0). */
int rc_get(tp_regcache *c, const void *addr, size_t len, void **key,
           int *entry);
void rc_put(tp_regcache *c, int entry);
/* Drops every idle entry overlapping [addr, addr+len) (memory the caller is
 * about to free); returns how many were dropped. */
int rc_invalidate(tp_regcache *c, const void *addr, size_t len);
void rc_free(tp_regcache *c);

#endif
