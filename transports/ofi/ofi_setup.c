/*
 * libfabric transport, setup: provider and domain choice, endpoint, address
 * exchange and the connection greeting (see ofi.c for the protocol).
 */
#include "transports/ofi/ofi.h"
#include "transports/ofi/ofi_int.h"

#ifdef BRAID_HAVE_OFI

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/common.h"
#include "transports/ibverbs/ib_proto.h"
#include "transports/sock_util.h"

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

/* Picks one fi_info entry by set's ofi_provider, ofi_domain and
 * socket_ifname; NULL, with its message recorded, when none fits. */
static struct fi_info *ofi_choose(struct fi_info *list,
                                  const tp_settings *set) {
  const char *want = set->ofi_provider;
  const char *dom = set->ofi_domain;
  char ifname[64] = "";
  if (dom == NULL) {
    struct sockaddr_storage a;
    if (sock_pick_addr(set->socket_ifname, &a, ifname, sizeof(ifname)) != 0)
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
  if (best == NULL && (want != NULL || dom != NULL))
    (void)ERR(BRAID_ERR_UNSUPPORTED,
              "ofi: no libfabric provider matches BRAID_OFI_PROVIDER=%s "
              "BRAID_OFI_DOMAIN=%s with reliable tagged messaging",
              want ? want : "(any)", dom ? dom : "(any)");
  else if (best == NULL)
    (void)ERR(BRAID_ERR_UNSUPPORTED,
              "ofi: no libfabric provider offers reliable tagged messaging "
              "between hosts (shm is used only when named)");
  return best;
}

/* The providers with reliable tagged messaging; NULL, with its message
 * recorded, when there are none. */
static struct fi_info *ofi_list(void) {
  if (ofi_lib_load() != BRAID_SUCCESS)
    return NULL;
  struct fi_info *hints = ofi_fn.dupinfo(NULL);
  if (hints == NULL) {
    (void)ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
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
  int rc = ofi_fn.getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
                          NULL, 0, hints, &list);
  ofi_fn.freeinfo(hints);
  if (rc != 0 || list == NULL) {
    (void)ERR(BRAID_ERR_UNSUPPORTED,
              "ofi: fi_getinfo found no provider with reliable tagged "
              "messaging: %s",
              ofi_fn.strerror(-rc));
    return NULL;
  }
  return list;
}

int ofi_probe_fast(const tp_settings *set, char *name, size_t len) {
  if (name != NULL && len > 0)
    name[0] = '\0';
  struct fi_info *list = ofi_list();
  if (list == NULL)
    return 0;
  struct fi_info *pick = ofi_choose(list, set);
  int fast = 0;
  if (pick != NULL) {
    if (name != NULL && len > 0)
      snprintf(name, len, "%s", pick->fabric_attr->prov_name);
    fast = !ofi_socket_prov(pick->fabric_attr->prov_name) &&
           ofi_prov_rank(pick->fabric_attr->prov_name) >= 0;
  }
  ofi_fn.freeinfo(list);
  return fast;
}

static int ofi_open(ofi_state *st, ofi_blob *me, const tp_settings *set) {
  struct fi_info *list = ofi_list();
  if (list == NULL)
    return BRAID_ERR_UNSUPPORTED;
  int rc;
  struct fi_info *pick = ofi_choose(list, set);
  if (pick == NULL) {
    ofi_fn.freeinfo(list);
    return BRAID_ERR_UNSUPPORTED;
  }
  st->info = ofi_fn.dupinfo(pick);
  ofi_fn.freeinfo(list);
  if (st->info == NULL)
    return ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
  struct fi_info *fi = st->info;
  st->mr_local = (fi->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  st->mr_endpoint = (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
  st->max_msg = fi->ep_attr->max_msg_size;
  st->cq_data = fi->domain_attr->cq_data_size >= sizeof(uint64_t);
  const char *step = "fi_fabric";
  rc = ofi_fn.fabric(fi->fabric_attr, &st->fabric, NULL);
  if (rc == 0) {
    step = "fi_domain";
    rc = fi_domain(st->fabric, fi, &st->domain, NULL);
  }
  if (rc == 0) {
    struct fi_cq_attr cqa;
    memset(&cqa, 0, sizeof(cqa));
    cqa.format = FI_CQ_FORMAT_TAGGED;
    cqa.size = (size_t)st->net.nslots * 4 *
               (size_t)(st->net.nranks * st->net.nchannels);
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
    ava.count = (size_t)st->net.nranks;
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
  if (rc != 0)
    return ERR(BRAID_ERR_SYSTEM, "ofi: %s on provider %s domain %s: %s", step,
               fi->fabric_attr->prov_name, fi->domain_attr->name,
               ofi_fn.strerror(-rc));
  me->addrlen = (uint32_t)alen;
  snprintf(me->prov, sizeof(me->prov), "%s", fi->fabric_attr->prov_name);
  if (st->mr_local)
    rc_init(&st->rc, OFI_REGCACHE, ofi_reg, ofi_dereg, st);
  INFO(LOG_NET, "ofi: rank %d uses provider %s domain %s%s", st->net.rank,
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
                         ofi_tag(st->net.rank, OFI_HELLO_CHAN, 0), op)
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

static int ofi_hello(ofi_state *st, int timeout_ms) {
  int n = 0;
  for (int p = 0; p < st->net.nranks; p++)
    n += st->net.used[p];
  ofi_op *ops = calloc((size_t)n * 2 + 1, sizeof(ofi_op));
  if (ops == NULL)
    return ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
  int64_t deadline = sock_now_ms() + (timeout_ms > 0 ? timeout_ms : 300000);
  int k = 0, e = 0, bad = -1;
  const char *what = "";
  /* Receives from everyone, greetings to the higher ranks. */
  for (int p = 0; p < st->net.nranks; p++) {
    if (!st->net.used[p])
      continue;
    tp_conn *c = &st->conns[(size_t)p * (size_t)st->net.nchannels];
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
    if (ops[2 * i].c->peer > st->net.rank) {
      e = ofi_post_hello(st, &ops[2 * i + 1], 1, deadline);
      what = "greeting";
      bad = ops[2 * i].c->peer;
    }
  /* Answers to the lower ranks once they have greeted. */
  for (int i = 0; i < k && e == 0; i++) {
    bad = ops[2 * i].c->peer;
    what = "waiting for the greeting of";
    e = ofi_wait_op(st, &ops[2 * i], deadline);
    if (e == 0 && bad < st->net.rank) {
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
  if (e != 0)
    r = ERR(e == FI_ETIMEDOUT ? BRAID_ERR_TIMEOUT : BRAID_ERR_REMOTE,
            "ofi: %s rank %d at setup: %s", what, bad,
            e == FI_ETIMEDOUT ? "timed out" : ofi_fn.strerror(e));
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

int ofi_setup(tp_setup *ts, const uint8_t *peers, void **state) {
  *state = NULL;
  int r = tp_setup_check(ts, "ofi", 0);
  if (r != BRAID_SUCCESS)
    return r;
  if (ts->nranks > (1 << OFI_RANK_BITS) || ts->nchannels >= OFI_HELLO_CHAN)
    return ERR(BRAID_ERR_INVALID_ARG,
               "ofi: %d ranks x %d channels do not fit the tag (at most %d "
               "ranks, %d channels)",
               ts->nranks, ts->nchannels, 1 << OFI_RANK_BITS, OFI_HELLO_CHAN);
  const size_t nr = (unsigned)ts->nranks, nch = (unsigned)ts->nchannels;
  ofi_state *st = calloc(1, sizeof(*st));
  if (st == NULL)
    return ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
  int any = tp_net_init(&st->net, ts, peers);
  ofi_blob *all = calloc(nr, sizeof(ofi_blob));
  if (any < 0 || all == NULL) {
    free(all);
    ofi_teardown(st);
    return ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
  }

  /* Open the endpoint only when this rank has peers; always take part in
   * the allgather so that a failure on one rank reaches every rank. */
  ofi_blob me;
  memset(&me, 0, sizeof(me));
  me.magic = OFI_MAGIC;
  me.status = OFI_IDLE;
  int lr = BRAID_SUCCESS;
  char own[TP_WHY] = ""; /* the message of lr, kept over the exchange */
  if (any) {
    lr = ofi_open(st, &me, &ts->set);
    me.status = lr == BRAID_SUCCESS ? OFI_OK : OFI_FAILED;
    if (lr != BRAID_SUCCESS)
      snprintf(own, sizeof own, "%s", err_msg());
  }
  braid_result br = boot_allgather(ts->boot, &me, all, sizeof(me));
  if (br != BRAID_SUCCESS) {
    br = ERR_WRAP(br, "ofi: exchanging endpoint addresses failed");
    free(all);
    ofi_teardown(st);
    return br;
  }
  if (lr != BRAID_SUCCESS) {
    free(all);
    ofi_teardown(st);
    return tp_repeat(own, lr);
  }
  for (int p = 0; p < ts->nranks && r == BRAID_SUCCESS; p++) {
    if (!st->net.used[p])
      continue;
    const ofi_blob *b = &all[p];
    if (b->magic != OFI_MAGIC || b->status == OFI_FAILED)
      r = ERR(BRAID_ERR_UNSUPPORTED,
              "ofi: rank %d could not open libfabric (see its log)", p);
    else if (b->status == OFI_IDLE)
      r = ERR(BRAID_ERR_INVALID_ARG,
              "ofi: rank %d does not list rank %d as an ofi peer", p, ts->rank);
    else if (strncmp(b->prov, me.prov, sizeof(b->prov)) != 0)
      r = ERR(BRAID_ERR_UNSUPPORTED,
              "ofi: rank %d chose provider %.36s, this rank %.36s (set "
              "BRAID_OFI_PROVIDER alike everywhere)",
              p, b->prov, me.prov);
  }
  if (r == BRAID_SUCCESS && any) {
    size_t nconn = nr * nch;
    st->addrs = calloc(nr, sizeof(fi_addr_t));
    st->conns = calloc(nconn, sizeof(tp_conn));
    if (st->addrs == NULL || st->conns == NULL)
      r = ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
    for (int p = 0; p < ts->nranks && r == BRAID_SUCCESS; p++) {
      st->addrs[p] = FI_ADDR_NOTAVAIL;
      if (!st->net.used[p])
        continue;
      int n = fi_av_insert(st->av, all[p].addr, 1, &st->addrs[p], 0, NULL);
      if (n != 1) {
        r = ERR(BRAID_ERR_SYSTEM,
                "ofi: fi_av_insert of rank %d's address failed (%d)", p, n);
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
          r = ERR(BRAID_ERR_NOMEM, "ofi: out of memory");
          break;
        }
      }
    }
  }
  free(all);
  if (r == BRAID_SUCCESS && any)
    r = ofi_hello(st, ts->timeout_ms);
  if (r != BRAID_SUCCESS) {
    ofi_teardown(st);
    return r;
  }
  *state = st;
  return BRAID_SUCCESS;
}

#endif /* BRAID_HAVE_OFI */
