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
 * Provider: BRAID_OFI_PROVIDER (a name like "tcp", "tcp;ofi_rxm", "verbs"),
 * else the fastest present (verbs, efa, cxi, psm3, psm2, opx, then tcp, net,
 * sockets, udp). shm is used only when named: it reaches this host only, and
 * braid's own shm transport serves that case. Domain: BRAID_OFI_DOMAIN
 * (interface-name syntax of BRAID_SOCKET_IFNAME), else for socket providers
 * the interface the tcp transport would pick, else the first domain.
 */
#include "transports/ofi/ofi.h"
#include "transports/transport.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/bootstrap.h"
#include "src/config.h"
#include "src/log.h"

#ifdef BRAID_HAVE_OFI

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

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
  int err; /* positive fi_errno of a failed completion */
  size_t got;
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
  int err; /* braid_result of a failure on this connection, sticky */
};

struct ofi_state {
  int rank, nranks, nchannels, nslots;
  size_t max_msg;
  boot *boot;
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  int mr_local, mr_endpoint;
  tp_regcache rc;
  fi_addr_t *addrs;
  tp_conn *conns; /* nranks * nchannels, NULL rows for unused peers */
  uint8_t *used;
  ofi_op *hello_ops; /* greeting ops left posted by a failed setup */
  char err[256];
};

static uint64_t ofi_tag(int rank, int channel, uint64_t seq) {
  return ((uint64_t)rank << (64 - OFI_RANK_BITS)) |
         ((uint64_t)channel << (64 - OFI_RANK_BITS - OFI_CHAN_BITS)) |
         (seq & 0xffffffffu);
}

/* Failure on a connection: maps a libfabric error (positive errno) to a
 * braid_result and records text naming the peer. */
static int ofi_fail(tp_conn *c, int fierr, const char *what,
                    const char *detail) {
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
  snprintf(st->err, sizeof(st->err), "ofi: %s with rank %d channel %d: %s%s%s",
           what, c->peer, c->channel, fi_strerror(fierr),
           detail != NULL && *detail ? ": " : "", detail ? detail : "");
  WARN(LOG_NET, "%s", st->err);
  if (c->err == 0)
    c->err = r;
  return r;
}

/* Reads completions until the queue is empty (bounded per call). */
static int ofi_progress(ofi_state *st) {
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
      if (op->err != FI_ECANCELED)
        ofi_fail(op->c, op->err,
                 op == &op->c->rx ? "receive failed" : "send failed", d);
      continue;
    }
    if (n < 0) {
      snprintf(st->err, sizeof(st->err), "ofi: fi_cq_read: %s",
               fi_strerror((int)-n));
      return BRAID_ERR_SYSTEM;
    }
    for (ssize_t i = 0; i < n; i++) {
      ofi_op *op = ent[i].op_context;
      if (op == NULL)
        continue;
      op->got = ent[i].len;
      op->done = 1;
    }
    if (n < 16)
      return 0;
  }
  return 0;
}

/* Releases completed sends in order; returns the connection's sticky error. */
static int ofi_reap_tx(tp_conn *c) {
  int nslots = c->st->nslots;
  while (c->tx_done < c->tx_seq) {
    ofi_op *op = &c->tx[c->tx_done % (uint64_t)nslots];
    if (!op->done)
      break;
    if (op->mr_entry >= 0)
      rc_put(&c->st->rc, op->mr_entry);
    op->mr_entry = -1;
    c->tx_done++;
  }
  return c->err;
}

static int ofi_desc(ofi_state *st, const void *buf, size_t len, void **desc,
                    int *entry) {
  *desc = NULL;
  *entry = -1;
  if (!st->mr_local || len == 0)
    return 0;
  if (rc_get(&st->rc, buf, len, desc, entry) != 0) {
    snprintf(st->err, sizeof(st->err),
             "ofi: registering %zu bytes at %p with the provider failed", len,
             buf);
    return BRAID_ERR_SYSTEM;
  }
  return 0;
}

static int ofi_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  ofi_state *st = c->st;
  int r = ofi_progress(st);
  if (r != 0)
    return r;
  if ((r = ofi_reap_tx(c)) != 0)
    return r;
  if (len > st->max_msg) {
    snprintf(st->err, sizeof(st->err),
             "ofi: a %zu-byte message to rank %d is larger than the "
             "provider's %zu-byte limit",
             len, c->peer, st->max_msg);
    return BRAID_ERR_INVALID_ARG;
  }
  if (c->tx_seq - c->tx_done >= (uint64_t)st->nslots)
    return TP_AGAIN;
  ofi_op *op = &c->tx[c->tx_seq % (uint64_t)st->nslots];
  memset(op, 0, sizeof(*op));
  op->c = c;
  op->mr_entry = -1;
  void *desc = NULL;
  if ((r = ofi_desc(st, src, len, &desc, &op->mr_entry)) != 0)
    return r;
  uint64_t seq = c->tx_seq + 1;
  ssize_t rc = fi_tsend(st->ep, len ? src : NULL, len, desc, c->addr,
                        ofi_tag(st->rank, c->channel, seq), op);
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

static int ofi_send_done(tp_conn *c, uint64_t ticket) {
  int r = ofi_progress(c->st);
  if (r != 0)
    return r;
  if ((r = ofi_reap_tx(c)) != 0)
    return r;
  return c->tx_done >= ticket ? BRAID_SUCCESS : TP_AGAIN;
}

/* Posts (once) and tests the receive of the next message into buf. */
static int ofi_recv_into(tp_conn *c, void *buf, size_t len) {
  ofi_state *st = c->st;
  int r;
  if (c->err != 0)
    return c->err;
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
    snprintf(st->err, sizeof(st->err),
             "ofi: receive from rank %d resumed with %zu bytes, posted with "
             "%zu",
             c->peer, len, c->rx_len);
    return BRAID_ERR_INTERNAL;
  }
  if ((r = ofi_progress(st)) != 0)
    return r;
  if (!c->rx.done)
    return c->err != 0 ? c->err : TP_AGAIN;
  c->rx_posted = 0;
  if (c->rx.mr_entry >= 0)
    rc_put(&st->rc, c->rx.mr_entry);
  if (c->rx.err != 0)
    return c->err != 0 ? c->err
                       : ofi_fail(c, c->rx.err, "receive failed", NULL);
  if (c->rx.got != len) {
    snprintf(st->err, sizeof(st->err),
             "ofi: message %llu from rank %d channel %d has %zu bytes, "
             "expected %zu (ranks disagree on sizes)",
             (unsigned long long)(c->rx_seq + 1), c->peer, c->channel,
             c->rx.got, len);
    c->err = BRAID_ERR_MISMATCH;
    return c->err;
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
      len % r->elem_size != 0) {
    snprintf(st->err, sizeof(st->err),
             "ofi: recv_reduce of %zu bytes from rank %d: bad reducer or a "
             "length that is not a multiple of the element size",
             len, c->peer);
    return BRAID_ERR_INVALID_ARG;
  }
  if (!c->rx_posted && len > c->stage_cap) {
    /* Drop the old buffer's registration before it can be freed. */
    if (st->mr_local && c->stage != NULL)
      rc_invalidate(&st->rc, c->stage, c->stage_cap);
    void *p = realloc(c->stage, len);
    if (p == NULL)
      return BRAID_ERR_NOMEM;
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
  if (st == NULL || peer < 0 || peer >= st->nranks || channel < 0 ||
      channel >= st->nchannels || st->conns == NULL || !st->used[peer])
    return NULL;
  return &st->conns[(size_t)peer * (size_t)st->nchannels + (size_t)channel];
}

static int ofi_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static int ofi_check_peers(void *state, int *dead_rank) {
  ofi_state *st = state;
  for (int p = 0; st->conns != NULL && p < st->nranks; p++) {
    if (!st->used[p])
      continue;
    for (int ch = 0; ch < st->nchannels; ch++) {
      tp_conn *c = &st->conns[(size_t)p * (size_t)st->nchannels + ch];
      if (c->err == BRAID_ERR_REMOTE) {
        *dead_rank = p;
        return BRAID_ERR_REMOTE;
      }
    }
  }
  int dead = -1;
  braid_result r = boot_check_peers(st->boot, &dead);
  if (r == BRAID_ERR_REMOTE) {
    *dead_rank = dead;
    snprintf(st->err, sizeof(st->err),
             "ofi: rank %d is gone (its bootstrap connection closed)", dead);
  }
  return r;
}

static const char *ofi_last_error(void *state) {
  ofi_state *st = state;
  return st != NULL ? st->err : "ofi: no state";
}

static void ofi_teardown(void *state) {
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
    fi_freeinfo(st->info);
  if (st->conns != NULL) {
    size_t n = (size_t)st->nranks * (size_t)st->nchannels;
    for (size_t i = 0; i < n; i++) {
      free(st->conns[i].tx);
      free(st->conns[i].stage);
    }
  }
  free(st->conns);
  free(st->addrs);
  free(st->used);
  free(st->hello_ops);
  free(st);
}

/* ---- setup ------------------------------------------------------------ */

static int ofi_reg(void *ctx, void *addr, size_t len, void **handle,
                   void **key) {
  ofi_state *st = ctx;
  struct fid_mr *mr = NULL;
  if (fi_mr_reg(st->domain, addr, len, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL) !=
      0)
    return -1;
  if (st->mr_endpoint &&
      (fi_mr_bind(mr, &st->ep->fid, 0) != 0 || fi_mr_enable(mr) != 0)) {
    fi_close(&mr->fid);
    return -1;
  }
  *handle = mr;
  *key = fi_mr_desc(mr);
  return 0;
}

static void ofi_dereg(void *ctx, void *handle) {
  (void)ctx;
  fi_close(&((struct fid_mr *)handle)->fid);
}

static const char *const ofi_pref[] = {"verbs", "efa", "cxi", "psm3",    "psm2",
                                       "opx",   "tcp", "net", "sockets", "udp"};

/* Lower is better; -1: not a default choice. */
static int ofi_prov_rank(const char *prov) {
  size_t core = strcspn(prov, ";");
  for (size_t i = 0; i < sizeof(ofi_pref) / sizeof(ofi_pref[0]); i++)
    if (strlen(ofi_pref[i]) == core && strncmp(prov, ofi_pref[i], core) == 0)
      return (int)i;
  if (strncmp(prov, "shm", core) == 0 || strncmp(prov, "sm2", core) == 0)
    return -1;
  return (int)(sizeof(ofi_pref) / sizeof(ofi_pref[0]));
}

static int ofi_prov_named(const char *want, const char *prov) {
  if (strcmp(want, prov) == 0)
    return 1;
  size_t core = strcspn(prov, ";");
  return strlen(want) == core && strncmp(want, prov, core) == 0;
}

static int ofi_socket_prov(const char *prov) {
  size_t core = strcspn(prov, ";");
  return (core == 3 && strncmp(prov, "tcp", 3) == 0) ||
         (core == 3 && strncmp(prov, "net", 3) == 0) ||
         (core == 3 && strncmp(prov, "udp", 3) == 0) ||
         (core == 7 && strncmp(prov, "sockets", 7) == 0);
}

/* Picks one fi_info entry; fills err when none fits. */
static struct fi_info *ofi_choose(struct fi_info *list, char *err,
                                  size_t errlen) {
  const cfg_env *cfg = cfg_get();
  const char *want = cfg->ofi_provider;
  const char *dom = cfg->ofi_domain;
  char ifname[64] = "";
  if (dom == NULL) {
    struct sockaddr_storage a;
    char e2[128];
    if (sock_pick_addr(cfg->socket_ifname, &a, ifname, sizeof(ifname), e2,
                       sizeof(e2)) != 0)
      ifname[0] = '\0';
  }
  struct fi_info *best = NULL;
  int best_score = 0;
  for (struct fi_info *i = list; i != NULL; i = i->next) {
    const char *prov = i->fabric_attr->prov_name;
    const char *dname = i->domain_attr->name ? i->domain_attr->name : "";
    int pr;
    if (want != NULL)
      pr = ofi_prov_named(want, prov) ? 0 : -1;
    else
      pr = ofi_prov_rank(prov);
    if (pr < 0)
      continue;
    if (dom != NULL && !sock_ifname_match(dom, dname))
      continue;
    /* Score: provider preference, then domain fit, then IPv4. */
    int dfit = 0;
    if (dom == NULL && ofi_socket_prov(prov)) {
      if (ifname[0] != '\0' && strcmp(dname, ifname) == 0)
        dfit = 2;
      else if (strcmp(dname, "lo") != 0)
        dfit = 1;
    }
    int score = (100 - pr) * 100 + dfit * 10 +
                (i->addr_format == FI_SOCKADDR_IN ? 1 : 0);
    if (best == NULL || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  if (best == NULL) {
    if (want != NULL || dom != NULL)
      snprintf(err, errlen,
               "ofi: no libfabric provider matches BRAID_OFI_PROVIDER=%s "
               "BRAID_OFI_DOMAIN=%s with reliable tagged messaging",
               want ? want : "(any)", dom ? dom : "(any)");
    else
      snprintf(err, errlen,
               "ofi: no libfabric provider offers reliable tagged messaging "
               "between hosts (shm is used only when named)");
  }
  return best;
}

static struct fi_info *ofi_list(char *err, size_t errlen) {
  struct fi_info *hints = fi_allocinfo();
  if (hints == NULL) {
    snprintf(err, errlen, "ofi: out of memory");
    return NULL;
  }
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_VIRT_ADDR | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
  struct fi_info *list = NULL;
  int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
                      NULL, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0 || list == NULL) {
    snprintf(err, errlen,
             "ofi: fi_getinfo found no provider with reliable tagged "
             "messaging: %s",
             fi_strerror(-rc));
    return NULL;
  }
  return list;
}

int ofi_probe_fast(char *name, size_t len) {
  char err[256];
  if (name != NULL && len > 0)
    name[0] = '\0';
  struct fi_info *list = ofi_list(err, sizeof(err));
  if (list == NULL)
    return 0;
  struct fi_info *pick = ofi_choose(list, err, sizeof(err));
  int fast = 0;
  if (pick != NULL) {
    if (name != NULL && len > 0)
      snprintf(name, len, "%s", pick->fabric_attr->prov_name);
    fast = !ofi_socket_prov(pick->fabric_attr->prov_name) &&
           ofi_prov_rank(pick->fabric_attr->prov_name) >= 0;
  }
  fi_freeinfo(list);
  return fast;
}

static int ofi_open(ofi_state *st, ofi_blob *me, char *err, size_t errlen) {
  struct fi_info *list = ofi_list(err, errlen);
  if (list == NULL)
    return BRAID_ERR_UNSUPPORTED;
  int rc;
  struct fi_info *pick = ofi_choose(list, err, errlen);
  if (pick == NULL) {
    fi_freeinfo(list);
    return BRAID_ERR_UNSUPPORTED;
  }
  st->info = fi_dupinfo(pick);
  fi_freeinfo(list);
  if (st->info == NULL)
    return BRAID_ERR_NOMEM;
  struct fi_info *fi = st->info;
  st->mr_local = (fi->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  st->mr_endpoint = (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
  st->max_msg = fi->ep_attr->max_msg_size;
  const char *step = "fi_fabric";
  rc = fi_fabric(fi->fabric_attr, &st->fabric, NULL);
  if (rc == 0) {
    step = "fi_domain";
    rc = fi_domain(st->fabric, fi, &st->domain, NULL);
  }
  if (rc == 0) {
    struct fi_cq_attr cqa;
    memset(&cqa, 0, sizeof(cqa));
    cqa.format = FI_CQ_FORMAT_TAGGED;
    cqa.size = (size_t)st->nslots * 4 * (size_t)(st->nranks * st->nchannels);
    if (cqa.size < 256)
      cqa.size = 256;
    if (cqa.size > 65536)
      cqa.size = 65536;
    cqa.wait_obj = FI_WAIT_NONE;
    step = "fi_cq_open";
    rc = fi_cq_open(st->domain, &cqa, &st->cq, NULL);
  }
  if (rc == 0) {
    struct fi_av_attr ava;
    memset(&ava, 0, sizeof(ava));
    ava.type = FI_AV_TABLE;
    ava.count = (size_t)st->nranks;
    step = "fi_av_open";
    rc = fi_av_open(st->domain, &ava, &st->av, NULL);
  }
  if (rc == 0) {
    step = "fi_endpoint";
    rc = fi_endpoint(st->domain, fi, &st->ep, NULL);
  }
  if (rc == 0) {
    step = "fi_ep_bind(cq)";
    rc = fi_ep_bind(st->ep, &st->cq->fid, FI_TRANSMIT | FI_RECV);
  }
  if (rc == 0) {
    step = "fi_ep_bind(av)";
    rc = fi_ep_bind(st->ep, &st->av->fid, 0);
  }
  if (rc == 0) {
    step = "fi_enable";
    rc = fi_enable(st->ep);
  }
  size_t alen = sizeof(me->addr);
  if (rc == 0) {
    step = "fi_getname";
    rc = fi_getname(&st->ep->fid, me->addr, &alen);
  }
  if (rc != 0) {
    snprintf(err, errlen, "ofi: %s on provider %s domain %s: %s", step,
             fi->fabric_attr->prov_name, fi->domain_attr->name,
             fi_strerror(-rc));
    return BRAID_ERR_SYSTEM;
  }
  me->addrlen = (uint32_t)alen;
  snprintf(me->prov, sizeof(me->prov), "%s", fi->fabric_attr->prov_name);
  if (st->mr_local)
    rc_init(&st->rc, OFI_REGCACHE, ofi_reg, ofi_dereg, st);
  INFO(LOG_NET, "ofi: rank %d uses provider %s domain %s%s", st->rank,
       fi->fabric_attr->prov_name, fi->domain_attr->name,
       st->mr_local ? " (local registration)" : "");
  return BRAID_SUCCESS;
}

/* Connects every peer now: a zero-byte greeting each way, waited for with
 * progress (bounded by timeout_ms). Connection-oriented providers (rxm)
 * otherwise connect on the first send and need the peer to be calling into
 * libfabric at that moment; a broken path also shows here, at setup, with
 * the peer named. The lower rank of each pair greets first and the higher
 * one answers once greeted, so no pair connects from both ends at once. */
static int ofi_post_hello(ofi_state *st, ofi_op *op, int send,
                          int64_t deadline) {
  tp_conn *c = op->c;
  ssize_t rc;
  for (;;) {
    rc = send ? fi_tsend(st->ep, NULL, 0, NULL, c->addr,
                         ofi_tag(st->rank, OFI_HELLO_CHAN, 0), op)
              : fi_trecv(st->ep, NULL, 0, NULL, FI_ADDR_UNSPEC,
                         ofi_tag(c->peer, OFI_HELLO_CHAN, 0), 0, op);
    if (rc != -FI_EAGAIN || sock_now_ms() >= deadline)
      break;
    if (ofi_progress(st) != 0)
      break;
    sched_yield();
  }
  if (rc == 0)
    op->posted = 1;
  return rc == 0 ? 0 : (int)-rc;
}

static int ofi_wait_op(ofi_state *st, ofi_op *op, int64_t deadline) {
  while (!op->done && sock_now_ms() < deadline) {
    if (ofi_progress(st) != 0)
      break;
    if (!op->done)
      sched_yield();
  }
  return op->done ? op->err : FI_ETIMEDOUT;
}

static int ofi_hello(ofi_state *st, int timeout_ms, char *err, size_t errlen) {
  int n = 0;
  for (int p = 0; p < st->nranks; p++)
    n += st->used[p];
  ofi_op *ops = calloc((size_t)n * 2 + 1, sizeof(ofi_op));
  if (ops == NULL)
    return BRAID_ERR_NOMEM;
  int64_t deadline = sock_now_ms() + (timeout_ms > 0 ? timeout_ms : 300000);
  int k = 0, e = 0, bad = -1;
  const char *what = "";
  /* Receives from everyone, greetings to the higher ranks. */
  for (int p = 0; p < st->nranks; p++) {
    if (!st->used[p])
      continue;
    tp_conn *c = &st->conns[(size_t)p * (size_t)st->nchannels];
    ops[2 * k].c = ops[2 * k + 1].c = c;
    ops[2 * k].mr_entry = ops[2 * k + 1].mr_entry = -1;
    k++;
  }
  for (int i = 0; i < k && e == 0; i++) {
    e = ofi_post_hello(st, &ops[2 * i], 0, deadline);
    what = "posting the greeting receive for";
    bad = ops[2 * i].c->peer;
  }
  for (int i = 0; i < k && e == 0; i++)
    if (ops[2 * i].c->peer > st->rank) {
      e = ofi_post_hello(st, &ops[2 * i + 1], 1, deadline);
      what = "greeting";
      bad = ops[2 * i].c->peer;
    }
  /* Answers to the lower ranks once they have greeted. */
  for (int i = 0; i < k && e == 0; i++) {
    bad = ops[2 * i].c->peer;
    what = "waiting for the greeting of";
    e = ofi_wait_op(st, &ops[2 * i], deadline);
    if (e == 0 && bad < st->rank) {
      what = "answering";
      e = ofi_post_hello(st, &ops[2 * i + 1], 1, deadline);
    }
  }
  for (int i = 0; i < k && e == 0; i++) {
    bad = ops[2 * i].c->peer;
    what = "completing the greeting with";
    e = ofi_wait_op(st, &ops[2 * i + 1], deadline);
  }
  int r = BRAID_SUCCESS;
  if (e != 0) {
    snprintf(err, errlen, "ofi: %s rank %d at setup: %s", what, bad,
             e == FI_ETIMEDOUT ? "timed out" : fi_strerror(e));
    r = e == FI_ETIMEDOUT ? BRAID_ERR_TIMEOUT : BRAID_ERR_REMOTE;
  }
  int pending = 0;
  for (int i = 0; i < 2 * k; i++) {
    pending |= ops[i].posted && !ops[i].done;
    ops[i].c->err = 0; /* the greeting's errors are reported here */
  }
  if (pending)
    st->hello_ops = ops; /* freed after the endpoint is closed */
  else
    free(ops);
  return r;
}

static int ofi_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  *state = NULL;
  ts->errbuf[0] = '\0';
  if (ts->boot == NULL || ts->nranks < 1 || ts->rank < 0 ||
      ts->rank >= ts->nranks || ts->nchannels < 1 || ts->nslots < 1) {
    snprintf(ts->errbuf, sizeof(ts->errbuf),
             "ofi: bad setup (boot %p, rank %d of %d, %d channels, %d slots)",
             (void *)ts->boot, ts->rank, ts->nranks, ts->nchannels, ts->nslots);
    return BRAID_ERR_INVALID_ARG;
  }
  if (ts->nranks > (1 << OFI_RANK_BITS) || ts->nchannels >= OFI_HELLO_CHAN) {
    snprintf(ts->errbuf, sizeof(ts->errbuf),
             "ofi: %d ranks x %d channels do not fit the tag (at most %d "
             "ranks, %d channels)",
             ts->nranks, ts->nchannels, 1 << OFI_RANK_BITS, OFI_HELLO_CHAN);
    return BRAID_ERR_INVALID_ARG;
  }
  const size_t nr = (unsigned)ts->nranks, nch = (unsigned)ts->nchannels;
  ofi_state *st = calloc(1, sizeof(*st));
  if (st == NULL)
    return BRAID_ERR_NOMEM;
  st->rank = ts->rank;
  st->nranks = ts->nranks;
  st->nchannels = ts->nchannels;
  st->nslots = ts->nslots;
  st->boot = ts->boot;
  st->used = calloc(nr, 1);
  ofi_blob *all = calloc(nr, sizeof(ofi_blob));
  if (st->used == NULL || all == NULL) {
    free(all);
    ofi_teardown(st);
    return BRAID_ERR_NOMEM;
  }
  int any = 0;
  for (int p = 0; p < ts->nranks; p++)
    if (peers != NULL && peers[p] && p != ts->rank)
      st->used[p] = 1, any = 1;

  /* Open the endpoint only when this rank has peers; always take part in
   * the allgather so that a failure on one rank reaches every rank. */
  ofi_blob me;
  memset(&me, 0, sizeof(me));
  me.magic = OFI_MAGIC;
  me.status = OFI_IDLE;
  int lr = BRAID_SUCCESS;
  if (any) {
    lr = ofi_open(st, &me, ts->errbuf, sizeof(ts->errbuf));
    me.status = lr == BRAID_SUCCESS ? OFI_OK : OFI_FAILED;
  }
  braid_result br = boot_allgather(ts->boot, &me, all, sizeof(me));
  if (br != BRAID_SUCCESS) {
    snprintf(ts->errbuf, sizeof(ts->errbuf),
             "ofi: exchanging endpoint addresses failed: %s",
             boot_last_error(ts->boot));
    free(all);
    ofi_teardown(st);
    return br;
  }
  if (lr != BRAID_SUCCESS) {
    free(all);
    ofi_teardown(st);
    return lr;
  }
  int r = BRAID_SUCCESS;
  for (int p = 0; p < ts->nranks && r == BRAID_SUCCESS; p++) {
    if (!st->used[p])
      continue;
    const ofi_blob *b = &all[p];
    if (b->magic != OFI_MAGIC || b->status == OFI_FAILED) {
      snprintf(ts->errbuf, sizeof(ts->errbuf),
               "ofi: rank %d could not open libfabric (see its log)", p);
      r = BRAID_ERR_UNSUPPORTED;
    } else if (b->status == OFI_IDLE) {
      snprintf(ts->errbuf, sizeof(ts->errbuf),
               "ofi: rank %d does not list rank %d as an ofi peer", p,
               ts->rank);
      r = BRAID_ERR_INVALID_ARG;
    } else if (strncmp(b->prov, me.prov, sizeof(b->prov)) != 0) {
      snprintf(ts->errbuf, sizeof(ts->errbuf),
               "ofi: rank %d chose provider %.36s, this rank %.36s (set "
               "BRAID_OFI_PROVIDER alike everywhere)",
               p, b->prov, me.prov);
      r = BRAID_ERR_UNSUPPORTED;
    }
  }
  if (r == BRAID_SUCCESS && any) {
    size_t nconn = nr * nch;
    st->addrs = calloc(nr, sizeof(fi_addr_t));
    st->conns = calloc(nconn, sizeof(tp_conn));
    if (st->addrs == NULL || st->conns == NULL)
      r = BRAID_ERR_NOMEM;
    for (int p = 0; p < ts->nranks && r == BRAID_SUCCESS; p++) {
      st->addrs[p] = FI_ADDR_NOTAVAIL;
      if (!st->used[p])
        continue;
      int n = fi_av_insert(st->av, all[p].addr, 1, &st->addrs[p], 0, NULL);
      if (n != 1) {
        snprintf(ts->errbuf, sizeof(ts->errbuf),
                 "ofi: fi_av_insert of rank %d's address failed (%d)", p, n);
        r = BRAID_ERR_SYSTEM;
        break;
      }
      for (int ch = 0; ch < ts->nchannels; ch++) {
        tp_conn *c = &st->conns[(size_t)p * nch + ch];
        c->st = st;
        c->peer = p;
        c->channel = ch;
        c->addr = st->addrs[p];
        c->tx = calloc((size_t)ts->nslots, sizeof(ofi_op));
        if (c->tx == NULL) {
          r = BRAID_ERR_NOMEM;
          break;
        }
      }
    }
  }
  free(all);
  if (r == BRAID_SUCCESS && any)
    r = ofi_hello(st, ts->timeout_ms, ts->errbuf, sizeof(ts->errbuf));
  if (r != BRAID_SUCCESS) {
    if (r == BRAID_ERR_NOMEM && ts->errbuf[0] == '\0')
      snprintf(ts->errbuf, sizeof(ts->errbuf), "ofi: out of memory");
    ofi_teardown(st);
    return r;
  }
  *state = st;
  return BRAID_SUCCESS;
}

#else /* !BRAID_HAVE_OFI */

int ofi_probe_fast(char *name, size_t len) {
  if (name != NULL && len > 0)
    name[0] = '\0';
  return 0;
}

static int ofi_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  (void)peers;
  *state = NULL;
  snprintf(ts->errbuf, sizeof(ts->errbuf),
           "ofi: this braid was built without libfabric (install "
           "libfabric-dev and reconfigure)");
  return BRAID_ERR_UNSUPPORTED;
}
static tp_conn *ofi_conn(void *state, int peer, int channel) {
  (void)state, (void)peer, (void)channel;
  return NULL;
}
static int ofi_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  (void)c, (void)src, (void)len, (void)ticket;
  return BRAID_ERR_UNSUPPORTED;
}
static int ofi_send_done(tp_conn *c, uint64_t ticket) {
  (void)c, (void)ticket;
  return BRAID_ERR_UNSUPPORTED;
}
static int ofi_recv(tp_conn *c, void *dst, size_t len) {
  (void)c, (void)dst, (void)len;
  return BRAID_ERR_UNSUPPORTED;
}
static int ofi_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  (void)c, (void)src, (void)dst, (void)len, (void)r;
  return BRAID_ERR_UNSUPPORTED;
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
static const char *ofi_last_error(void *state) {
  (void)state;
  return "ofi: this braid was built without libfabric";
}

#endif

const tp_ops tp_ofi = {
    .name = "ofi",
    .setup = ofi_setup,
    .conn = ofi_conn,
    .isend = ofi_isend,
    .send_done = ofi_send_done,
    .recv = ofi_recv,
    .recv_reduce = ofi_recv_reduce,
    .pollfd = ofi_pollfd,
    .bell_read = NULL,
    .bell_wait = NULL,
    .check_peers = ofi_check_peers,
    .teardown = ofi_teardown,
    .last_error = ofi_last_error,
};
