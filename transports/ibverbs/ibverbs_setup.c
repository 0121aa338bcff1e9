/*
 * ibverbs transport, setup: device and port choice (BRAID_IB_HCA), GID
 * choice, queue pairs, and their connection through the bootstrap (see
 * ibverbs.c for the protocol).
 */
#include "transports/ibverbs/ib_int.h"
#include "transports/ibverbs/ibverbs.h"

#ifdef BRAID_HAVE_IBVERBS

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/common.h"

/* ---- setup ------------------------------------------------------------ */

static int ib_reg(void *ctx, void *addr, size_t len, void **handle,
                  void **key) {
  ib_state *st = ctx;
  struct ibv_mr *mr = ibv_reg_mr(
      st->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL)
    return -1;
  *handle = mr;
  *key = mr;
  return 0;
}

static void ib_dereg(void *ctx, void *handle) {
  (void)ctx;
  ibv_dereg_mr(handle);
}

int ib_probe_device(const tp_settings *set, char *name, size_t len) {
  if (name != NULL && len > 0)
    name[0] = '\0';
  ib_hca_filter f;
  if (ib_hca_parse(set->ib_hca, &f) != BRAID_SUCCESS)
    return 0;
  int ndev = 0, found = 0;
  struct ibv_device **list = ibv_get_device_list(&ndev);
  if (list == NULL)
    return 0;
  for (int d = 0; d < ndev && !found; d++) {
    struct ibv_context *ctx = ibv_open_device(list[d]);
    struct ibv_device_attr da;
    if (ctx == NULL)
      continue;
    if (ibv_query_device(ctx, &da) == 0)
      for (int p = 1; p <= da.phys_port_cnt && !found; p++) {
        struct ibv_port_attr pa;
        const char *dn = ibv_get_device_name(list[d]);
        if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 &&
            pa.state == IBV_PORT_ACTIVE && ib_hca_match(&f, dn, p)) {
          found = 1;
          if (name != NULL && len > 0)
            snprintf(name, len, "%s:%d", dn, p);
        }
      }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return found;
}

/* Opens the first active (device, port) set's ib_hca selects, with its
 * ib_gid_index. */
static int ib_open(ib_state *st, const tp_settings *set) {
  ib_hca_filter f;
  CHECKR(ib_hca_parse(set->ib_hca, &f));
  int ndev = 0;
  struct ibv_device **list = ibv_get_device_list(&ndev);
  if (list == NULL || ndev == 0) {
    const char *why = list == NULL ? strerror(errno) : "empty list";
    (void)ERR(BRAID_ERR_UNSUPPORTED,
              "ibverbs: no RDMA device found (ibv_get_device_list: %s)", why);
    if (list != NULL)
      ibv_free_device_list(list);
    return BRAID_ERR_UNSUPPORTED;
  }
  for (int d = 0; d < ndev && st->ctx == NULL; d++) {
    const char *name = ibv_get_device_name(list[d]);
    struct ibv_context *ctx = ibv_open_device(list[d]);
    if (ctx == NULL)
      continue;
    struct ibv_device_attr da;
    int chosen = 0;
    if (ibv_query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt && !chosen; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0 ||
            pa.state != IBV_PORT_ACTIVE || !ib_hca_match(&f, name, p))
          continue;
        st->ctx = ctx;
        st->port = (uint8_t)p;
        st->pattr = pa;
        st->eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        snprintf(st->dev, sizeof(st->dev), "%s:%d", name, p);
        chosen = 1;
      }
    }
    if (!chosen)
      ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (st->ctx == NULL)
    return ERR(BRAID_ERR_UNSUPPORTED,
               "ibverbs: no active port on the %d RDMA device(s) passes "
               "BRAID_IB_HCA=%s",
               ndev, set->ib_hca ? set->ib_hca : "(all)");
  st->gid_index = set->ib_gid_index;
  if (st->eth && st->gid_index < 0) {
    int n = st->pattr.gid_tbl_len > 0 ? st->pattr.gid_tbl_len : 0;
    uint8_t(*gids)[16] = calloc((size_t)n + 1, 16);
    int *v2 = calloc((size_t)n + 1, sizeof(int));
    for (int i = 0; gids && v2 && i < n; i++) {
      struct ibv_gid_entry e;
      if (ibv_query_gid_ex(st->ctx, st->port, (uint32_t)i, &e, 0) != 0)
        continue;
      memcpy(gids[i], e.gid.raw, 16);
      v2[i] = e.gid_type == IBV_GID_TYPE_ROCE_V2;
    }
    st->gid_index =
        gids && v2 ? ib_gid_auto(n, (const uint8_t(*)[16])gids, v2) : -1;
    free(gids);
    free(v2);
    if (st->gid_index < 0)
      return ERR(BRAID_ERR_UNSUPPORTED,
                 "ibverbs: %s is RoCE but has no usable GID", st->dev);
  }
  if (st->gid_index >= 0 &&
      ibv_query_gid(st->ctx, st->port, st->gid_index, &st->gid) != 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "ibverbs: %s has no GID at BRAID_IB_GID_INDEX=%d", st->dev,
               st->gid_index);
  st->pd = ibv_alloc_pd(st->ctx);
  int cqe = st->net.nranks * st->net.nchannels * st->net.nslots * 4 + 64;
  if (st->pd != NULL)
    st->cq = ibv_create_cq(st->ctx, cqe, NULL, NULL, 0);
  if (st->pd == NULL || st->cq == NULL)
    return ERR(BRAID_ERR_SYSTEM, "ibverbs: allocating a PD/CQ on %s: %s",
               st->dev, strerror(errno));
  rc_init(&st->rc, st->net.nranks * st->net.nchannels + 1, ib_reg, ib_dereg,
          st);
  st->rc_ready = 1;
  INFO(LOG_NET, "ibverbs: rank %d uses %s (%s, GID index %d)", st->net.rank,
       st->dev, st->eth ? "RoCE" : "InfiniBand", st->gid_index);
  return BRAID_SUCCESS;
}

static int conn_create(ib_state *st, tp_conn *c, ib_wire_info *w) {
  size_t ring = (size_t)st->net.nslots * slot_stride(st);
  c->mem_len = 2 * ring + 64;
  if (posix_memalign((void **)&c->mem, 4096, c->mem_len) != 0)
    return IERR(st, BRAID_ERR_NOMEM, "ibverbs: out of memory");
  memset(c->mem, 0, c->mem_len);
  void *key;
  if (rc_get(&st->rc, c->mem, c->mem_len, &key, &c->rc_entry) != 0)
    return IERR(st, BRAID_ERR_SYSTEM, "ibverbs: ibv_reg_mr of %zu bytes: %s",
                c->mem_len, strerror(errno));
  struct ibv_mr *mr = key;
  c->lkey = mr->lkey;
  c->sq_max = 2 * st->net.nslots + 4;
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof(qa));
  qa.send_cq = st->cq;
  qa.recv_cq = st->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = (uint32_t)c->sq_max;
  qa.cap.max_recv_wr = (uint32_t)(2 * st->net.nslots);
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 64;
  c->qp = ibv_create_qp(st->pd, &qa);
  if (c->qp == NULL)
    return IERR(st, BRAID_ERR_SYSTEM, "ibverbs: ibv_create_qp: %s",
                strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = st->port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                        IBV_QP_ACCESS_FLAGS) != 0)
    return IERR(st, BRAID_ERR_SYSTEM, "ibverbs: QP to INIT: %s",
                strerror(errno));
  for (int i = 0; i < 2 * st->net.nslots; i++)
    if (ib_post_recv(c) != 0)
      return IERR(st, BRAID_ERR_SYSTEM, "ibverbs: posting receives failed");
  ib_tx_init(&c->tx, (uint32_t)st->net.nslots);
  if (ib_rx_init(&c->rx, (uint32_t)st->net.nslots) != 0)
    return IERR(st, BRAID_ERR_NOMEM, "ibverbs: out of memory");
  ib_conn_step(&c->state, IB_EV_CREATED);
  memset(w, 0, sizeof(*w));
  w->qpn = c->qp->qp_num;
  w->psn = (uint32_t)(c->index * 7919u + 1u) & 0xffffffu;
  w->lid = st->pattr.lid;
  w->port = st->port;
  w->mtu = (uint8_t)st->pattr.active_mtu;
  memcpy(w->gid, st->gid.raw, 16);
  w->slots_addr = (uintptr_t)recv_slot(c, 0);
  w->slots_rkey = mr->rkey;
  w->credit_addr = (uintptr_t)credit_word(c);
  w->credit_rkey = mr->rkey;
  w->nslots = (uint32_t)st->net.nslots;
  w->slot_bytes = st->net.slot_bytes;
  w->rank = st->net.rank;
  w->channel = c->channel;
  return BRAID_SUCCESS;
}

static int conn_connect(ib_state *st, tp_conn *c, uint32_t my_psn) {
  const ib_wire_info *r = &c->remote;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = r->mtu < st->pattr.active_mtu ? (enum ibv_mtu)r->mtu
                                             : st->pattr.active_mtu;
  a.dest_qp_num = r->qpn;
  a.rq_psn = r->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = st->port;
  if (st->eth || st->gid_index >= 0) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)(st->gid_index > 0 ? st->gid_index : 0);
    a.ah_attr.grh.hop_limit = 64;
  }
  a.ah_attr.dlid = r->lid;
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return ib_conn_fail(c, BRAID_ERR_SYSTEM, "QP to RTR: %s", strerror(errno));
  ib_conn_step(&c->state, IB_EV_RTR);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = my_psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return ib_conn_fail(c, BRAID_ERR_SYSTEM, "QP to RTS: %s", strerror(errno));
  ib_conn_step(&c->state, IB_EV_RTS);
  return BRAID_SUCCESS;
}

/* Creates, exchanges and connects every (peer, channel) QP. */
static int ib_connect_all(ib_state *st) {
  size_t nch = (size_t)st->net.nchannels;
  size_t bytes = nch * IB_WIRE_BYTES;
  uint8_t *mine = malloc(bytes), *theirs = malloc(bytes);
  ib_wire_info *w = calloc(nch, sizeof(*w));
  int r = mine && theirs && w
              ? BRAID_SUCCESS
              : IERR(st, BRAID_ERR_NOMEM, "ibverbs: out of memory");
  for (int p = 0; p < st->net.nranks && r == BRAID_SUCCESS; p++) {
    if (!st->net.used[p])
      continue;
    for (size_t ch = 0; ch < nch && r == BRAID_SUCCESS; ch++) {
      tp_conn *c = &st->conns[(size_t)p * nch + ch];
      r = conn_create(st, c, &w[ch]);
      ib_wire_pack(&w[ch], mine + ch * IB_WIRE_BYTES);
    }
    if (r != BRAID_SUCCESS)
      break;
    braid_result b1, b2;
    if (st->net.rank < p) {
      b1 = boot_send(st->net.boot, p, mine, bytes);
      b2 = b1 == BRAID_SUCCESS ? boot_recv(st->net.boot, p, theirs, bytes) : b1;
    } else {
      b1 = boot_recv(st->net.boot, p, theirs, bytes);
      b2 = b1 == BRAID_SUCCESS ? boot_send(st->net.boot, p, mine, bytes) : b1;
    }
    if (b2 != BRAID_SUCCESS) {
      r = IERR(st, b2, "ibverbs: exchanging QP info with rank %d: %s", p,
               err_msg());
      break;
    }
    for (size_t ch = 0; ch < nch && r == BRAID_SUCCESS; ch++) {
      tp_conn *c = &st->conns[(size_t)p * nch + ch];
      r = ib_wire_unpack(theirs + ch * IB_WIRE_BYTES, &c->remote,
                         (uint32_t)st->net.nslots, st->net.slot_bytes, p,
                         (int)ch);
      if (r != BRAID_SUCCESS) {
        r = tp_keep(st->why, ERR_WRAP(r, "ibverbs: rank %d", p));
        break;
      }
      ib_conn_step(&c->state, IB_EV_PEER_INFO);
      r = conn_connect(st, c, w[ch].psn);
    }
  }
  free(mine);
  free(theirs);
  free(w);
  return r;
}

int ibv_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  *state = NULL;
  int r = tp_setup_check(ts, "ibverbs", 0xffffffffu);
  if (r != BRAID_SUCCESS)
    return r;
  const size_t nr = (unsigned)ts->nranks, nch = (unsigned)ts->nchannels;
  if (nr * nch >= ((size_t)1 << 48))
    return ERR(BRAID_ERR_INVALID_ARG, "ibverbs: too many connections");
  ib_state *st = calloc(1, sizeof(*st));
  if (st == NULL)
    return ERR(BRAID_ERR_NOMEM, "ibverbs: out of memory");
  int any = tp_net_init(&st->net, ts, peers);
  ibv_blob *all = calloc(nr, sizeof(ibv_blob));
  if (any < 0 || all == NULL) {
    free(all);
    ibv_teardown(st);
    return ERR(BRAID_ERR_NOMEM, "ibverbs: out of memory");
  }
  ibv_blob me;
  memset(&me, 0, sizeof(me));
  me.magic = IBV_MAGIC;
  me.status = ST_IDLE;
  int lr = BRAID_SUCCESS;
  char own[TP_WHY] = ""; /* the message of lr, kept over the exchange */
  if (any) {
    lr = ib_open(st, &ts->set);
    me.status = lr == BRAID_SUCCESS ? ST_OK : ST_FAILED;
    snprintf(me.dev, sizeof(me.dev), "%.55s", st->dev);
    if (lr != BRAID_SUCCESS)
      snprintf(own, sizeof own, "%s", err_msg());
  }
  braid_result br = boot_allgather(ts->boot, &me, all, sizeof(me));
  r = br != BRAID_SUCCESS ? (int)br : lr;
  if (br != BRAID_SUCCESS)
    (void)ERR_WRAP(br, "ibverbs: exchanging device status failed");
  else if (lr != BRAID_SUCCESS)
    (void)tp_repeat(own, lr);
  for (int p = 0; p < ts->nranks && r == BRAID_SUCCESS; p++) {
    if (!st->net.used[p])
      continue;
    if (all[p].magic != IBV_MAGIC || all[p].status == ST_FAILED)
      r = ERR(BRAID_ERR_UNSUPPORTED,
              "ibverbs: rank %d has no usable RDMA device (see its log)", p);
    else if (all[p].status == ST_IDLE)
      r = ERR(BRAID_ERR_INVALID_ARG,
              "ibverbs: rank %d does not list rank %d as a peer", p, ts->rank);
  }
  free(all);
  if (r == BRAID_SUCCESS && any) {
    st->conns = calloc(nr * nch, sizeof(tp_conn));
    if (st->conns == NULL)
      r = ERR(BRAID_ERR_NOMEM, "ibverbs: out of memory");
    for (size_t i = 0; r == BRAID_SUCCESS && i < nr * nch; i++) {
      st->conns[i].st = st;
      st->conns[i].peer = (int)(i / nch);
      st->conns[i].channel = (int)(i % nch);
      st->conns[i].index = i;
      st->conns[i].rc_entry = -1;
    }
    if (r == BRAID_SUCCESS)
      r = ib_connect_all(st);
  }
  /* Nobody writes before every peer's QP is ready to receive. */
  if (r == BRAID_SUCCESS && boot_barrier(ts->boot) != BRAID_SUCCESS)
    r = ERR_WRAP(BRAID_ERR_REMOTE, "ibverbs: final barrier");
  if (r != BRAID_SUCCESS) {
    ibv_teardown(st);
    return r;
  }
  *state = st;
  return BRAID_SUCCESS;
}

#endif /* BRAID_HAVE_IBVERBS */
