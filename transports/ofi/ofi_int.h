/*
 * Private to the libfabric transport (ofi.c: data path, ofi_setup.c:
 * provider choice and connection setup).
 */
#ifndef BRAID_TRANSPORTS_OFI_INT_H
#define BRAID_TRANSPORTS_OFI_INT_H

#ifdef BRAID_HAVE_OFI

#include <stddef.h>
#include <stdint.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/transport.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "transports/common.h"
#include "transports/ibverbs/ib_proto.h"
#include "transports/sock_util.h"

#define OFI_MAGIC 0x4f464942u /* "BIFO" */
#define OFI_BLOB 256
#define OFI_RANK_BITS 22
#define OFI_CHAN_BITS 10
/* The last channel number carries the setup greeting. */
#define OFI_HELLO_CHAN ((1 << OFI_CHAN_BITS) - 1)
#define OFI_REGCACHE 64

enum { OFI_OK = 0, OFI_FAILED = 1, OFI_IDLE = 2 };

/* What each rank publishes in the setup allgather. */
typedef struct ofi_blob {
  uint32_t magic;
  int32_t status; /* OFI_OK / OFI_FAILED / OFI_IDLE */
  uint32_t addrlen;
  char prov[36];
  uint8_t addr[OFI_BLOB - 48];
} ofi_blob;
_Static_assert(sizeof(ofi_blob) == OFI_BLOB, "ofi_blob layout");

typedef struct ofi_op {
  struct fi_context2 ctx; /* first: the provider's scratch */
  struct tp_conn *c;
  int done;
  int posted;
  int copied; /* isend_copy: the source was copied into the connection */
  int err;    /* positive fi_errno of a failed completion */
  size_t got;
  uint64_t data; /* a receive's remote CQ data: the sender's fingerprint */
  int mr_entry;
} ofi_op;

typedef struct ofi_state ofi_state;

struct tp_conn {
  ofi_state *st;
  int peer, channel;
  fi_addr_t addr;
  uint64_t tx_seq;  /* sends posted */
  uint64_t tx_done; /* sends complete, contiguously from the first */
  ofi_op *tx;       /* nslots ring: send seq s lives at (s - 1) % nslots */
  uint64_t rx_seq;  /* receives complete */
  ofi_op rx;
  int rx_posted;
  size_t rx_len;
  void *stage;
  size_t stage_cap;
  uint8_t *cbuf; /* isend_copy: nslots copies of up to slot_bytes */
  int err;       /* braid_result of a failure on this connection, sticky */
};

struct ofi_state {
  tp_net net; /* rank, nranks, nchannels, nslots, slot_bytes, boot, used */
  size_t max_msg;
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  int mr_local, mr_endpoint;
  int cq_data;    /* the provider carries 64 bits of remote CQ data */
  uint64_t fp;    /* the call's fingerprint (tp_ops.set_fp) */
  tp_mismatch mm; /* the first message of another call met here */
  int mm_set;
  tp_regcache rc;
  fi_addr_t *addrs;
  tp_conn *conns;    /* nranks * nchannels, NULL rows for unused peers */
  ofi_op *hello_ops; /* greeting ops left posted by a failed setup */
  char why[TP_WHY];  /* the last failure's message (tp_keep) */
};

/* The functions of libfabric's that are symbols, set by ofi_lib_load
 * (transports/ofi/ofi_lib.c), which opens libfabric on first use:
 * BRAID_SUCCESS, or BRAID_ERR_UNSUPPORTED with why recorded. Every other
 * fi_* call is inline, through the objects these return. */
typedef struct ofi_lib {
  int (*getinfo)(uint32_t version, const char *node, const char *service,
                 uint64_t flags, const struct fi_info *hints,
                 struct fi_info **info);
  void (*freeinfo)(struct fi_info *info);
  struct fi_info *(*dupinfo)(const struct fi_info *info);
  int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
                void *context);
  const char *(*strerror)(int errnum);
} ofi_lib;
extern ofi_lib ofi_fn;
braid_result ofi_lib_load(void);

/* A failure of state st: records the message (ERR) and keeps it in
 * st->why, which a broken connection records again (OREPEAT). */
#define OERR(st, code, ...) tp_keep((st)->why, ERR((code), __VA_ARGS__))
#define OREPEAT(st, code) tp_repeat((st)->why, (code))

static inline uint64_t ofi_tag(int rank, int channel, uint64_t seq) {
  return ((uint64_t)rank << (64 - OFI_RANK_BITS)) |
         ((uint64_t)channel << (64 - OFI_RANK_BITS - OFI_CHAN_BITS)) |
         (seq & 0xffffffffu);
}

/* Records a failure on a connection (fierr: a positive fi_errno), with its
 * message (OERR), and maps it to a braid_result, which it returns. */
int ofi_fail(tp_conn *c, int fierr, const char *what, const char *detail);
/* Reads completions until the queue is empty (bounded per call). */
int ofi_progress(ofi_state *st);
void ofi_teardown(void *state);
int ofi_setup(tp_setup *ts, const uint8_t *peers, void **state);

#endif /* BRAID_HAVE_OFI */
#endif
