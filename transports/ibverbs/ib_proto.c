/*
 * Device-free protocol logic of the network transports (ib_proto.h).
 */
#include "transports/ibverbs/ib_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/log.h"

/* ---- HCA filter ------------------------------------------------------ */

braid_result ib_hca_parse(const char *spec, ib_hca_filter *f) {
  memset(f, 0, sizeof(*f));
  if (spec == NULL)
    return BRAID_SUCCESS;
  const char *p = spec;
  while (*p == ' ')
    p++;
  if (*p == '^') {
    f->exclude = 1;
    p++;
  }
  if (*p == '=') {
    f->exact = 1;
    p++;
  }
  if (*p == '\0') {
    if (f->exclude || f->exact) {
      return ERR(BRAID_ERR_INVALID_ARG, "BRAID_IB_HCA=\"%s\" names no device",
                 spec);
    }
    return BRAID_SUCCESS;
  }
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len == 0) {
      return ERR(BRAID_ERR_INVALID_ARG, "BRAID_IB_HCA=\"%s\": empty entry",
                 spec);
    }
    if (f->n == IB_HCA_MAX) {
      return ERR(BRAID_ERR_INVALID_ARG,
                 "BRAID_IB_HCA=\"%s\": more than %d entries", spec, IB_HCA_MAX);
    }
    ib_hca_entry *e = &f->e[f->n];
    e->port = -1;
    const char *colon = memchr(p, ':', len);
    size_t nlen = colon != NULL ? (size_t)(colon - p) : len;
    if (nlen == 0 || nlen >= IB_HCA_NAME) {
      return ERR(BRAID_ERR_INVALID_ARG,
                 "BRAID_IB_HCA=\"%s\": bad device name in \"%.*s\"", spec,
                 (int)len, p);
    }
    memcpy(e->name, p, nlen);
    e->name[nlen] = '\0';
    if (colon != NULL) {
      const char *q = colon + 1;
      const char *qend = p + len;
      long port = 0;
      if (q == qend) {
        return ERR(BRAID_ERR_INVALID_ARG,
                   "BRAID_IB_HCA=\"%s\": empty port after \"%s:\"", spec,
                   e->name);
      }
      for (; q < qend; q++) {
        if (*q < '0' || *q > '9' || port > 255) {
          return ERR(BRAID_ERR_INVALID_ARG,
                     "BRAID_IB_HCA=\"%s\": port of \"%s\" is not a number in "
                     "[1, 255]",
                     spec, e->name);
        }
        port = port * 10 + (*q - '0');
      }
      if (port < 1 || port > 255) {
        return ERR(BRAID_ERR_INVALID_ARG,
                   "BRAID_IB_HCA=\"%s\": port of \"%s\" is not in [1, 255]",
                   spec, e->name);
      }
      e->port = (int)port;
    }
    f->n++;
    p += len;
    if (*p == ',')
      p++;
  }
  return BRAID_SUCCESS;
}

int ib_hca_match(const ib_hca_filter *f, const char *dev, int port) {
  if (f->n == 0)
    return 1;
  int hit = 0;
  for (int i = 0; i < f->n && !hit; i++) {
    const ib_hca_entry *e = &f->e[i];
    int name_ok = f->exact ? strcmp(dev, e->name) == 0
                           : strncmp(dev, e->name, strlen(e->name)) == 0;
    hit = name_ok && (e->port < 0 || e->port == port);
  }
  return f->exclude ? !hit : hit;
}

/* ---- RoCE GIDs ------------------------------------------------------- */

int ib_gid_is_ipv4(const uint8_t gid[16]) {
  for (int i = 0; i < 10; i++)
    if (gid[i] != 0)
      return 0;
  return gid[10] == 0xff && gid[11] == 0xff;
}

int ib_gid_is_zero(const uint8_t gid[16]) {
  for (int i = 0; i < 16; i++)
    if (gid[i] != 0)
      return 0;
  return 1;
}

static int gid_link_local(const uint8_t gid[16]) {
  return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

int ib_gid_auto(int n, const uint8_t (*gids)[16], const int *is_v2) {
  int best = -1, best_rank = 0;
  for (int i = 0; i < n; i++) {
    if (ib_gid_is_zero(gids[i]))
      continue;
    int rank;
    if (is_v2[i] && ib_gid_is_ipv4(gids[i]))
      rank = 5;
    else if (is_v2[i] && !gid_link_local(gids[i]))
      rank = 4;
    else if (is_v2[i])
      rank = 3;
    else if (!gid_link_local(gids[i]))
      rank = 2;
    else
      rank = 1;
    if (rank > best_rank) {
      best = i;
      best_rank = rank;
    }
  }
  return best;
}

/* ---- credits and slots ----------------------------------------------- */

void ib_tx_init(ib_tx_flow *t, uint32_t nslots) {
  memset(t, 0, sizeof(*t));
  t->nslots = nslots;
}

uint32_t ib_tx_credits(const ib_tx_flow *t) {
  uint64_t inflight = t->sent - t->acked;
  return inflight >= t->nslots ? 0 : (uint32_t)(t->nslots - inflight);
}

int ib_tx_take(ib_tx_flow *t, uint32_t *slot, uint64_t *seq) {
  if (ib_tx_credits(t) == 0)
    return -1;
  *slot = (uint32_t)(t->sent % t->nslots);
  t->sent++;
  *seq = t->sent;
  return 0;
}

int ib_tx_ack(ib_tx_flow *t, uint64_t consumed) {
  if (consumed < t->acked || consumed > t->sent)
    return -1;
  t->acked = consumed;
  return 0;
}

int ib_tx_complete(ib_tx_flow *t) {
  if (t->completed >= t->sent)
    return -1;
  t->completed++;
  return 0;
}

int ib_tx_done(const ib_tx_flow *t, uint64_t seq) {
  return t->completed >= seq;
}

int ib_rx_init(ib_rx_flow *r, uint32_t nslots) {
  memset(r, 0, sizeof(*r));
  r->nslots = nslots;
  r->lens = calloc(nslots, sizeof(*r->lens));
  return r->lens != NULL ? 0 : -1;
}

void ib_rx_free(ib_rx_flow *r) {
  free(r->lens);
  r->lens = NULL;
}

int ib_rx_arrive(ib_rx_flow *r, uint32_t len) {
  if (r->arrived - r->consumed >= r->nslots)
    return -1;
  r->lens[r->arrived % r->nslots] = len;
  r->arrived++;
  return 0;
}

int ib_rx_head(const ib_rx_flow *r, uint32_t *slot, uint32_t *len) {
  if (r->arrived == r->consumed)
    return -1;
  *slot = (uint32_t)(r->consumed % r->nslots);
  *len = r->lens[*slot];
  return 0;
}

int ib_rx_consume(ib_rx_flow *r) {
  if (r->arrived == r->consumed)
    return 0;
  r->consumed++;
  uint64_t batch = r->nslots / 2 > 0 ? r->nslots / 2 : 1;
  return r->consumed - r->announced >= batch;
}

uint64_t ib_rx_announce(ib_rx_flow *r) {
  r->announced = r->consumed;
  return r->consumed;
}

/* ---- connection state ------------------------------------------------ */

int ib_conn_step(ib_conn_state *s, ib_conn_event ev) {
  ib_conn_state next;
  switch (ev) {
  case IB_EV_CREATED:
    if (*s != IB_CONN_INIT)
      return -1;
    next = IB_CONN_LOCAL;
    break;
  case IB_EV_PEER_INFO:
    if (*s != IB_CONN_LOCAL)
      return -1;
    next = IB_CONN_PEER;
    break;
  case IB_EV_RTR:
    if (*s != IB_CONN_PEER)
      return -1;
    next = IB_CONN_RTR;
    break;
  case IB_EV_RTS:
    if (*s != IB_CONN_RTR)
      return -1;
    next = IB_CONN_RTS;
    break;
  case IB_EV_FAIL:
    if (*s == IB_CONN_CLOSED)
      return -1;
    next = IB_CONN_ERROR;
    break;
  case IB_EV_CLOSE:
    next = IB_CONN_CLOSED;
    break;
  default:
    return -1;
  }
  *s = next;
  return 0;
}

const char *ib_conn_state_name(ib_conn_state s) {
  switch (s) {
  case IB_CONN_INIT:
    return "init";
  case IB_CONN_LOCAL:
    return "local";
  case IB_CONN_PEER:
    return "peer-info";
  case IB_CONN_RTR:
    return "ready-to-receive";
  case IB_CONN_RTS:
    return "connected";
  case IB_CONN_ERROR:
    return "error";
  case IB_CONN_CLOSED:
    return "closed";
  }
  return "unknown";
}

/* ---- connection info on the wire ------------------------------------- */

static uint8_t *put(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    *p++ = (uint8_t)(v >> (8 * i));
  return p;
}

static const uint8_t *get(const uint8_t *p, uint64_t *v, int bytes) {
  *v = 0;
  for (int i = 0; i < bytes; i++)
    *v |= (uint64_t)*p++ << (8 * i);
  return p;
}

void ib_wire_pack(const ib_wire_info *w, uint8_t out[IB_WIRE_BYTES]) {
  memset(out, 0, IB_WIRE_BYTES);
  uint8_t *p = out;
  p = put(p, IB_WIRE_MAGIC, 4);
  p = put(p, w->qpn, 4);
  p = put(p, w->psn, 4);
  p = put(p, w->lid, 2);
  p = put(p, w->port, 1);
  p = put(p, w->mtu, 1);
  memcpy(p, w->gid, 16);
  p += 16;
  p = put(p, w->slots_addr, 8);
  p = put(p, w->slots_rkey, 4);
  p = put(p, w->credit_addr, 8);
  p = put(p, w->credit_rkey, 4);
  p = put(p, w->nslots, 4);
  p = put(p, w->slot_bytes, 8);
  p = put(p, (uint32_t)w->rank, 4);
  put(p, (uint32_t)w->channel, 4);
}

braid_result ib_wire_unpack(const uint8_t in[IB_WIRE_BYTES], ib_wire_info *w,
                            uint32_t want_nslots, uint64_t want_slot_bytes,
                            int want_rank, int want_channel) {
  uint64_t v;
  const uint8_t *p = get(in, &v, 4);
  if (v != IB_WIRE_MAGIC) {
    return ERR(BRAID_ERR_INVALID_ARG,
               "connection info has magic 0x%08llx, not 0x%08x",
               (unsigned long long)v, IB_WIRE_MAGIC);
  }
  memset(w, 0, sizeof(*w));
  p = get(p, &v, 4);
  w->qpn = (uint32_t)v;
  p = get(p, &v, 4);
  w->psn = (uint32_t)v;
  p = get(p, &v, 2);
  w->lid = (uint16_t)v;
  p = get(p, &v, 1);
  w->port = (uint8_t)v;
  p = get(p, &v, 1);
  w->mtu = (uint8_t)v;
  memcpy(w->gid, p, 16);
  p += 16;
  p = get(p, &w->slots_addr, 8);
  p = get(p, &v, 4);
  w->slots_rkey = (uint32_t)v;
  p = get(p, &w->credit_addr, 8);
  p = get(p, &v, 4);
  w->credit_rkey = (uint32_t)v;
  p = get(p, &v, 4);
  w->nslots = (uint32_t)v;
  p = get(p, &w->slot_bytes, 8);
  p = get(p, &v, 4);
  w->rank = (int32_t)(uint32_t)v;
  get(p, &v, 4);
  w->channel = (int32_t)(uint32_t)v;
  if (w->nslots != want_nslots) {
    return ERR(BRAID_ERR_INVALID_ARG,
               "peer has %u slots per connection, this rank %u", w->nslots,
               want_nslots);
  }
  if (w->slot_bytes != want_slot_bytes) {
    return ERR(
        BRAID_ERR_INVALID_ARG, "peer has %llu-byte slots, this rank %llu",
        (unsigned long long)w->slot_bytes, (unsigned long long)want_slot_bytes);
  }
  if (w->rank != want_rank || w->channel != want_channel) {
    return ERR(BRAID_ERR_INVALID_ARG,
               "connection info is for rank %d channel %d, expected rank %d "
               "channel %d",
               w->rank, w->channel, want_rank, want_channel);
  }
  if (w->qpn == 0 || w->qpn > 0xffffff) {
    return ERR(BRAID_ERR_INVALID_ARG,
               "peer QP number %u is not a valid 24-bit QPN", w->qpn);
  }
  return BRAID_SUCCESS;
}

/* ---- registration cache ---------------------------------------------- */

static uintptr_t page_size(void) {
  long ps = sysconf(_SC_PAGESIZE);
  return ps > 0 ? (uintptr_t)ps : 4096;
}

void rc_init(tp_regcache *c, int cap, rc_reg_fn reg, rc_dereg_fn dereg,
             void *ctx) {
  memset(c, 0, sizeof(*c));
  c->cap = cap > 0 ? cap : 1;
  c->reg = reg;
  c->dereg = dereg;
  c->ctx = ctx;
}

static int rc_slot_free(const rc_entry *e) { return e->handle == NULL; }

int rc_get(tp_regcache *c, const void *addr, size_t len, void **key,
           int *entry) {
  *key = NULL;
  *entry = -1;
  if (len == 0)
    return 0;
  if (addr == NULL)
    return -1;
  uintptr_t a = (uintptr_t)addr, b = a + len;
  c->clock++;
  for (int i = 0; i < c->alloc; i++) {
    rc_entry *e = &c->e[i];
    if (!rc_slot_free(e) && e->start <= a && b <= e->end) {
      e->refs++;
      e->last_use = c->clock;
      c->hits++;
      *key = e->key;
      *entry = i;
      return 0;
    }
  }
  c->misses++;
  /* Full: evict the least recently used idle entry. */
  if (c->n >= c->cap) {
    int victim = -1;
    for (int i = 0; i < c->alloc; i++) {
      rc_entry *e = &c->e[i];
      if (!rc_slot_free(e) && e->refs == 0 &&
          (victim < 0 || e->last_use < c->e[victim].last_use))
        victim = i;
    }
    if (victim >= 0) {
      c->dereg(c->ctx, c->e[victim].handle);
      memset(&c->e[victim], 0, sizeof(c->e[victim]));
      c->n--;
      c->evictions++;
    }
  }
  int slot = -1;
  for (int i = 0; i < c->alloc && slot < 0; i++)
    if (rc_slot_free(&c->e[i]))
      slot = i;
  if (slot < 0) {
    int na = c->alloc > 0 ? c->alloc * 2 : 8;
    rc_entry *ne = realloc(c->e, (size_t)na * sizeof(*ne));
    if (ne == NULL)
      return -1;
    memset(ne + c->alloc, 0, (size_t)(na - c->alloc) * sizeof(*ne));
    c->e = ne;
    slot = c->alloc;
    c->alloc = na;
  }
  uintptr_t ps = page_size();
  uintptr_t start = a & ~(ps - 1);
  uintptr_t end = (b + ps - 1) & ~(ps - 1);
  void *handle = NULL, *k = NULL;
  /* The page start, as a pointer derived from addr. */
  void *base = (void *)((const char *)addr - (a - start));
  if (c->reg(c->ctx, base, end - start, &handle, &k) != 0 || handle == NULL)
    return -1;
  rc_entry *e = &c->e[slot];
  e->start = start;
  e->end = end;
  e->handle = handle;
  e->key = k;
  e->refs = 1;
  e->last_use = c->clock;
  c->n++;
  *key = k;
  *entry = slot;
  return 0;
}

void rc_put(tp_regcache *c, int entry) {
  if (entry < 0 || entry >= c->alloc)
    return;
  if (c->e[entry].refs > 0)
    c->e[entry].refs--;
}

int rc_invalidate(tp_regcache *c, const void *addr, size_t len) {
  uintptr_t a = (uintptr_t)addr, b = a + len;
  int dropped = 0;
  for (int i = 0; i < c->alloc; i++) {
    rc_entry *e = &c->e[i];
    if (!rc_slot_free(e) && e->refs == 0 && e->start < b && a < e->end) {
      c->dereg(c->ctx, e->handle);
      memset(e, 0, sizeof(*e));
      c->n--;
      dropped++;
    }
  }
  return dropped;
}

void rc_free(tp_regcache *c) {
  for (int i = 0; i < c->alloc; i++)
    if (!rc_slot_free(&c->e[i]))
      c->dereg(c->ctx, c->e[i].handle);
  free(c->e);
  c->e = NULL;
  c->n = c->alloc = 0;
}
