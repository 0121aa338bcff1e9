/*
 * tp_cuda: device buffers between the ranks of one host through CUDA IPC,
 * several ranks on one GPU included. The protocol (FIFOs of device slots,
 * counters in host shm, credits, publications) is in cuda_fifo.c; this file
 * sets it up over the bootstrap, maps the peers' device memory, checks
 * liveness, and binds the copy engine to the device layer (cuda_dev.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device/cuda_dev.h"
#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/cuda/cuda_fifo.h"
#include "transports/cuda/cuda_tp.h"

/* ---- the device layer as a copy engine ----------------------------------- */

static int eng_copy(void *dst, const void *src, size_t n, void *stream) {
  return cudev_memcpy(dst, src, n, stream);
}

static int eng_reduce(void *dst, const void *a, const void *b, size_t bytes,
                      const tp_reducer *r, void *stream) {
  const tp_dev_reducer *d = tp_reducer_dev(r);
  if (d->rev) /* dst = message (+) local: b is the message */
    return cudev_reduce(dst, b, a, bytes / r->elem_size, d->dt, d->op, stream);
  return cudev_reduce(dst, a, b, bytes / r->elem_size, d->dt, d->op, stream);
}

static int eng_event_new(void **ev) { return cudev_event_create(ev); }
static int eng_record(void *ev, void *stream) {
  return cudev_event_record(ev, stream);
}
static int eng_query(void *ev) {
  int q = cudev_event_query(ev);
  return q == CUDEV_AGAIN ? TP_AGAIN : q;
}
static void eng_event_free(void *ev) { cudev_event_destroy(ev); }

const cuf_engine cuf_cuda_engine = {
    .copy = eng_copy,
    .reduce = eng_reduce,
    .event_new = eng_event_new,
    .record = eng_record,
    .query = eng_query,
    .event_free = eng_event_free,
    .error = cudev_error,
};

static int pinned_alloc(void **p, size_t n) { return cudev_host_alloc(p, n); }
static void pinned_free(void *p) { cuda_free_later(p, 1); }

const staged_mem staged_pinned = {.alloc = pinned_alloc, .free = pinned_free};

/* ---- state --------------------------------------------------------------- */

struct tp_conn {
  struct cu_state *st;
  int peer, channel, lpeer;
  cuf_tx tx;
  cuf_rx rx;
};

/* Most mappings of a peer's memory that others hand over (the collective
 * kernels' areas: one per communicator's kernels at a time); teardown hands
 * them to cuda_close_later with the slots' mapping. */
#define CU_MORE 3
_Static_assert(CU_MORE + 1 <= CUDA_RELEASE_DEVS,
               "cuda_close_later keeps at most CUDA_RELEASE_DEVS mappings");

typedef struct cu_peer {
  int rank;
  cuf_seg seg;
  void *dev;           /* its slot region, mapped here */
  int ipc_mapped;      /* dev came from cudev_ipc_open */
  int held;            /* counted in its segment (cuf_held) */
  void *more[CU_MORE]; /* its memory mapped for others: cuda_tp_close_later */
  int nmore;
} cu_peer;

typedef struct cu_state {
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes;
  uint64_t slot_data;
  int npeers;
  int *lidx; /* rank -> local peer index or -1 */
  cu_peer *peers;
  cuf_peer *live; /* liveness of peers[i] */
  cuf_seg me;
  void *dev; /* our slot region (incoming) */
  size_t dev_bytes;
  void *adopted[CUDA_RELEASE_DEVS - 1]; /* cuda_tp_adopt */
  int nadopted;
  void *tx_stream, *rx_stream;
  void *order_stream; /* cuda_tp_set_stream: all copies go there */
  tp_conn *conns;     /* npeers * nchannels */
  uint32_t lone_bell;
  char why[TP_WHY]; /* the last failure's message (tp_keep) */
} cu_state;

typedef struct cu_rec {
  char name[64];
  uint64_t size, pidns, dev_addr, dev_bytes;
  int32_t pid, status;
  uint8_t ipc[CUDEV_IPC_BYTES];
} cu_rec;

/* A bad argument: the connection stays usable. */
#define AERR(c, ...)                                                           \
  ((c) ? tp_keep((c)->st->why, ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))        \
       : (int)ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))

static int logged(tp_conn *c, int rc) {
  (void)c;
  if (rc != BRAID_SUCCESS && rc != TP_AGAIN)
    WARN(LOG_SHM, "%s", err_msg());
  return rc;
}

/* Every call advances every connection's publications: a peer may wait for
 * a message this rank finished copying while it works elsewhere. */
static int progress_all(cu_state *st) {
  for (int i = 0; i < st->npeers * st->nchannels; i++) {
    int rc = cuf_tx_progress(&st->conns[i].tx);
    if (rc)
      return rc;
  }
  return BRAID_SUCCESS;
}

/* ---- data path ----------------------------------------------------------- */

static int cu_isend_mode(tp_conn *c, const void *src, size_t len,
                         uint64_t *ticket, int whole) {
  if (!c || !ticket || (!src && len))
    return AERR(c, "cuda isend to rank %d: %s is NULL", c ? c->peer : -1,
                ticket ? "src" : "ticket");
  int rc = progress_all(c->st);
  if (!rc)
    rc = cuf_tx_isend(&c->tx, src, len, whole, ticket);
  return logged(c, rc);
}

static int cu_isend(tp_conn *c, const void *src, size_t len, uint64_t *ticket) {
  return cu_isend_mode(c, src, len, ticket, 0);
}

/* Every copy reading src is issued before this returns (on the stream, so
 * later kernels on it that overwrite src run after them). */
static int cu_isend_copy(tp_conn *c, const void *src, size_t len,
                         uint64_t *ticket) {
  return cu_isend_mode(c, src, len, ticket, 1);
}

static int cu_send_done(tp_conn *c, uint64_t ticket) {
  if (!c)
    return ERR(BRAID_ERR_INVALID_ARG, "cuda send_done: no connection");
  int rc = progress_all(c->st);
  if (!rc)
    rc = cuf_tx_send_done(&c->tx, ticket);
  return logged(c, rc);
}

static int cu_recv(tp_conn *c, void *dst, size_t len) {
  if (!c || (!dst && len))
    return AERR(c, "cuda recv from rank %d: dst is NULL", c ? c->peer : -1);
  int rc = progress_all(c->st);
  if (!rc)
    rc = cuf_rx_recv(&c->rx, NULL, dst, len, NULL, NULL);
  return logged(c, rc);
}

static int cu_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                          const tp_reducer *r) {
  if (!c || (len && (!src || !dst)) || !r || r->elem_size == 0 ||
      len % r->elem_size)
    return AERR(c,
                "cuda recv_reduce from rank %d: NULL buffer or reducer, or "
                "%zu bytes not a multiple of the element size %zu",
                c ? c->peer : -1, len, r ? r->elem_size : 0);
  if (c->st->slot_data % r->elem_size)
    return AERR(c,
                "cuda recv_reduce from rank %d: slots of %" PRIu64
                " bytes do not hold whole elements of %zu bytes",
                c->peer, c->st->slot_data, r->elem_size);
  int rc = progress_all(c->st);
  /* on the communicator's stream, after the work that wrote src */
  if (!rc)
    rc = cuf_rx_recv(&c->rx, src, dst, len, r, tp_reducer_dev(r)->dev_stream);
  return logged(c, rc);
}

static int cu_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static int cu_flush(void *state) {
  cu_state *st = state;
  if (!st)
    return BRAID_SUCCESS;
  int rc = progress_all(st);
  if (rc)
    return rc;
  for (int i = 0; i < st->npeers * st->nchannels; i++)
    if (!cuf_tx_idle(&st->conns[i].tx))
      return TP_AGAIN;
  return BRAID_SUCCESS;
}

/* ---- doorbell and liveness ----------------------------------------------- */

static uint32_t cu_bell_read(void *state) {
  cu_state *st = state;
  if (!st->me.hdr)
    return st->lone_bell;
  return atomic_load_explicit(&st->me.hdr->bell, memory_order_acquire);
}

/* Copies on the GPU ring no bell when they finish: while any runs, sleep
 * only briefly. */
static void cu_bell_wait(void *state, uint32_t seen, int timeout_us) {
  cu_state *st = state;
  for (int i = 0; i < st->npeers * st->nchannels; i++) {
    if (!cuf_tx_idle(&st->conns[i].tx) || cuf_rx_busy(&st->conns[i].rx)) {
      if (timeout_us > 20)
        timeout_us = 20;
      break;
    }
  }
  cuf_bell_wait(st->me.hdr, seen, timeout_us);
}

static int rx_waiting(void *arg, int i) {
  cu_state *st = arg;
  for (int ch = 0; ch < st->nchannels; ch++)
    if (cuf_rx_waiting(&st->conns[i * st->nchannels + ch].rx))
      return 1;
  return 0;
}

static int cu_check_peers(void *state, int *dead_rank) {
  cu_state *st = state;
  int rc = cuf_peers_check(st->live, st->npeers, st->rank, rx_waiting, st,
                           dead_rank);
  return rc ? tp_keep(st->why, rc) : progress_all(st);
}

static void cu_set_cause(void *state, int dead_rank) {
  cu_state *st = state;
  if (st && st->me.hdr)
    atomic_store(&st->me.hdr->cause, dead_rank);
}

void cuda_tp_set_stream(void *state, void *stream) {
  cu_state *st = state;
  if (!st)
    return;
  st->order_stream = stream;
  for (int i = 0; i < st->npeers * st->nchannels; i++) {
    st->conns[i].tx.stream = stream ? stream : st->tx_stream;
    st->conns[i].rx.stream = stream ? stream : st->rx_stream;
  }
}

/* rank's entry among st's peers, or NULL when it is not one. */
static cu_peer *peer_of(cu_state *st, int rank) {
  int i = st != NULL && rank >= 0 && rank < st->nranks ? st->lidx[rank] : -1;
  return i >= 0 ? &st->peers[i] : NULL;
}

int cuda_tp_hold(void *state, int rank, int delta) {
  cu_state *st = state;
  cu_peer *p = peer_of(st, rank);
  _Atomic int32_t *held = p != NULL ? cuf_held(p->seg.hdr, st->rank) : NULL;
  if (held == NULL)
    return BRAID_ERR_INTERNAL;
  atomic_fetch_add(held, delta);
  return BRAID_SUCCESS;
}

int cuda_tp_close_later(void *state, int rank, void *base) {
  cu_peer *p = peer_of(state, rank);
  if (p == NULL)
    return BRAID_ERR_INTERNAL;
  if (p->nmore >= CU_MORE)
    return BRAID_ERR_NOMEM;
  p->more[p->nmore++] = base;
  return BRAID_SUCCESS;
}

int cuda_tp_adopt(void *state, void *dev) {
  cu_state *st = state;
  if (st == NULL || st->nadopted >= CUDA_RELEASE_DEVS - 1)
    return BRAID_ERR_NOMEM;
  st->adopted[st->nadopted++] = dev;
  return BRAID_SUCCESS;
}

static tp_conn *cu_conn(void *state, int peer, int channel) {
  cu_state *st = state;
  if (!st || peer < 0 || peer >= st->nranks || channel < 0 ||
      channel >= st->nchannels || st->lidx[peer] < 0)
    return NULL;
  return &st->conns[st->lidx[peer] * st->nchannels + channel];
}

/* ---- setup and teardown -------------------------------------------------- */

static void cu_teardown(void *state) {
  cu_state *st = state;
  if (!st)
    return;
  /* copies still running read or write the mappings below */
  if (st->order_stream)
    cudev_stream_sync(st->order_stream);
  if (st->tx_stream)
    cudev_stream_sync(st->tx_stream);
  if (st->rx_stream)
    cudev_stream_sync(st->rx_stream);
  for (int i = 0; st->conns && i < st->npeers * st->nchannels; i++) {
    cuf_tx_fini(&st->conns[i].tx);
    cuf_rx_fini(&st->conns[i].rx);
  }
  /* the mappings of the peers' memory, then their counts */
  for (int i = 0; st->peers && i < st->npeers; i++) {
    cu_peer *p = &st->peers[i];
    void *base[CU_MORE + 1] = {p->ipc_mapped ? p->dev : NULL};
    for (int k = 0; k < p->nmore; k++)
      base[k + 1] = p->more[k];
    cuda_close_later(&p->seg, st->rank, p->held + p->nmore, base, 1 + p->nmore);
  }
  /* our slots and what was adopted, once no peer maps them */
  void *dev[CUDA_RELEASE_DEVS] = {st->dev};
  for (int k = 0; k < st->nadopted; k++)
    dev[k + 1] = st->adopted[k];
  if (st->live != NULL)
    cuda_release(st->rank, &st->me, dev, 1 + st->nadopted, st->live,
                 st->npeers);
  else /* no peers' pids: setup ended before any was known */
    cuda_free_later(st->dev, 0);
  st->live = NULL;
  if (st->tx_stream)
    cudev_stream_destroy(st->tx_stream);
  if (st->rx_stream)
    cudev_stream_destroy(st->rx_stream);
  free(st->conns);
  free(st->live);
  free(st->peers);
  free(st->lidx);
  free(st);
}

/* Streams, the device slot region and its IPC handle, the host segment. */
static int local_create(tp_setup *su, cu_state *st, cu_rec *mine) {
  int rc = cudev_stream_create(&st->tx_stream);
  if (!rc)
    rc = cudev_stream_create(&st->rx_stream);
  if (rc)
    return ERR(rc, "cuda: rank %d cannot create streams: %s", st->rank,
               cudev_error());
  uint64_t rings = (uint64_t)st->npeers * (uint64_t)st->nchannels;
  st->dev_bytes = rings * (uint64_t)st->nslots * st->slot_data;
  void *dev = NULL;
  rc = cudev_malloc(&dev, st->dev_bytes);
  if (!rc)
    st->dev = dev;
  if (rc)
    return ERR(rc,
               "cuda: rank %d cannot allocate %zu bytes of device memory "
               "for %d peers x %d channels x %d slots of %" PRIu64 " bytes: %s",
               st->rank, st->dev_bytes, st->npeers, st->nchannels, st->nslots,
               st->slot_data, cudev_error());
  rc = cudev_ipc_get(st->dev, mine->ipc);
  if (rc)
    return ERR(rc, "cuda: rank %d cannot export its slots (IPC): %s", st->rank,
               cudev_error());
  int32_t *ranks = malloc(sizeof(int32_t) * (size_t)st->npeers);
  if (!ranks)
    return ERR(BRAID_ERR_NOMEM, "cuda setup: no memory");
  for (int i = 0; i < st->npeers; i++)
    ranks[i] = st->peers[i].rank;
  rc = cuf_seg_create(&st->me, st->rank, st->npeers, ranks, st->nchannels,
                      st->nslots, st->slot_data, tp_job_token(su->boot));
  free(ranks);
  if (rc)
    return rc;
  snprintf(mine->name, sizeof(mine->name), "%s", st->me.name);
  mine->size = st->me.size;
  mine->dev_addr = (uint64_t)(uintptr_t)st->dev;
  mine->dev_bytes = st->dev_bytes;
  return BRAID_SUCCESS;
}

/* Maps peer i's segment and slots and binds its connections. */
static int peer_attach(cu_state *st, int i, const cu_rec *rec) {
  cu_peer *p = &st->peers[i];
  cuf_peer *lv = &st->live[i];
  if (!rec->name[0])
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda setup: rank %d lists rank %d as a cuda peer, but rank "
               "%d has no cuda peers",
               st->rank, p->rank, p->rank);
  int rc =
      cuf_seg_attach(&p->seg, rec->name, rec->size, p->rank, st->nchannels);
  if (rc)
    return rc;
  if (p->seg.hdr->nslots != st->nslots ||
      p->seg.hdr->slot_data != st->slot_data)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda setup: rank %d has %d slots of %" PRIu64
               " bytes, rank %d %d of %" PRIu64,
               p->rank, (int)p->seg.hdr->nslots, p->seg.hdr->slot_data,
               st->rank, st->nslots, st->slot_data);
  /* counted before it is mapped, so that the owner never frees it mapped */
  _Atomic int32_t *held = cuf_held(p->seg.hdr, st->rank);
  if (held == NULL)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda setup: rank %d lists rank %d as a cuda peer but not "
               "the other way round",
               p->rank, st->rank);
  atomic_fetch_add(held, 1);
  p->held = 1;
  if (rec->pid == (int32_t)getpid() && rec->pidns == tp_pidns_id()) {
    p->dev = (void *)(uintptr_t)rec->dev_addr; /* same process */
  } else {
    rc = cudev_ipc_open(rec->ipc, &p->dev);
    if (rc)
      return ERR(rc,
                 "cuda setup: rank %d cannot map the slots of rank %d "
                 "(CUDA IPC): %s",
                 st->rank, p->rank, cudev_error());
    p->ipc_mapped = 1;
  }
  lv->hdr = p->seg.hdr;
  if (lv->pid_ok) {
    lv->pidfd = tp_pidfd_open(lv->pid);
    if (lv->pidfd < 0 && errno == ESRCH)
      return ERR(BRAID_ERR_REMOTE, "cuda: rank %d (pid %d) exited during setup",
                 p->rank, lv->pid);
  } else {
    INFO(LOG_SHM,
         "cuda: rank %d is in another pid namespace: liveness through the "
         "bootstrap only",
         p->rank);
  }
  uint64_t ring_data = (uint64_t)st->nslots * st->slot_data;
  for (int ch = 0; ch < st->nchannels; ch++) {
    tp_conn *c = &st->conns[i * st->nchannels + ch];
    *c = (tp_conn){.st = st, .peer = p->rank, .channel = ch, .lpeer = i};
    int at_peer = -1, at_me = -1;
    cuf_ring *tx = cuf_ring_of(p->seg.hdr, st->rank, ch, &at_peer);
    cuf_ring *rx = cuf_ring_of(st->me.hdr, p->rank, ch, &at_me);
    if (!tx || !rx)
      return ERR(BRAID_ERR_INVALID_ARG,
                 "cuda setup: rank %d lists rank %d as a cuda peer but not "
                 "the other way round",
                 p->rank, st->rank);
    c->tx.peer = c->rx.peer = p->rank;
    c->tx.channel = c->rx.channel = ch;
    c->tx.why = c->rx.why = st->why;
    rc = cuf_tx_init(&c->tx, &cuf_cuda_engine, st->tx_stream, tx, p->seg.hdr,
                     (char *)p->dev + (uint64_t)at_peer * ring_data,
                     (uint64_t)st->nslots, st->slot_data);
    if (!rc)
      rc = cuf_rx_init(&c->rx, &cuf_cuda_engine, st->rx_stream, rx, p->seg.hdr,
                       (char *)st->dev + (uint64_t)at_me * ring_data,
                       (uint64_t)st->nslots, st->slot_data);
    if (rc)
      return ERR(rc, "cuda setup: rank %d: events for rank %d: %s", st->rank,
                 p->rank, cudev_error());
  }
  return BRAID_SUCCESS;
}

static int cu_setup(tp_setup *su, const uint8_t *peers, void **state) {
  if (!su || !state)
    return ERR(BRAID_ERR_INVALID_ARG, "cuda setup: no setup or state");
  *state = NULL;
  (void)cuda_release_sweep(); /* earlier communicators' memory let go of */
  boot *b = su->boot;
  if (!b || !peers || su->nranks < 1 || su->rank < 0 || su->rank >= su->nranks)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda setup: missing bootstrap/peers or bad rank %d of %d",
               su->rank, su->nranks);
  if (su->nchannels < 1 || su->nslots < 1 || su->slot_bytes == 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda setup: nchannels (%d), nslots (%d) and slot_bytes "
               "(%zu) must be >= 1",
               su->nchannels, su->nslots, su->slot_bytes);
  /* Failures are shared through the two exchanges: all ranks fail
   * together instead of waiting for each other. */
  cu_state *st = calloc(1, sizeof(*st));
  size_t n = (size_t)su->nranks;
  cu_rec *recs = calloc(n, sizeof(cu_rec));
  int32_t *all = calloc(n, sizeof(int32_t));
  cu_rec mine = {.pid = (int32_t)getpid(), .pidns = tp_pidns_id()};
  int rc = BRAID_SUCCESS;
  if (st) {
    st->lidx = malloc(sizeof(int) * n);
    st->peers = calloc(n, sizeof(cu_peer));
    st->live = calloc(n, sizeof(cuf_peer));
    st->conns = calloc(n * (size_t)su->nchannels, sizeof(tp_conn));
  }
  if (!st || !recs || !all || !st->lidx || !st->peers || !st->live ||
      !st->conns) {
    rc = ERR(BRAID_ERR_NOMEM, "cuda setup: no memory for %d ranks", su->nranks);
  } else {
    st->rank = su->rank;
    st->nranks = su->nranks;
    st->nchannels = su->nchannels;
    st->nslots = su->nslots;
    st->slot_bytes = su->slot_bytes;
    st->slot_data = (su->slot_bytes + CUF_ALIGN - 1) / CUF_ALIGN * CUF_ALIGN;
    for (int i = 0; i < su->nranks; i++) {
      int on = peers[i] && i != su->rank;
      st->lidx[i] = on ? st->npeers : -1;
      if (on) {
        st->live[st->npeers] = (cuf_peer){.rank = i, .pidfd = -1};
        st->peers[st->npeers++] = (cu_peer){.rank = i};
      }
    }
    if (st->npeers > 0 && !cudev_built())
      rc = ERR(BRAID_ERR_UNSUPPORTED,
               "cuda: rank %d: libbraid was built without CUDA", st->rank);
    else if (st->npeers > 0)
      rc = local_create(su, st, &mine);
  }
  mine.status = rc ? 1 : 0;
  int x = 0;
  rc = tp_setup_round(su, rc, &mine, recs, sizeof(mine),
                      offsetof(cu_rec, status), "cuda setup",
                      "create its slots", &x);
  if (rc || !st) /* st: NULL only when rc says so */
    goto out;
  /* every peer's pid first: one that dies while holding a mapping of this
   * rank's memory (cuf_held) holds nothing any more (cuda_release.c) */
  for (int i = 0; i < st->npeers; i++) {
    const cu_rec *rec = &recs[st->peers[i].rank];
    st->live[i].pid = rec->pid;
    st->live[i].pid_ok = rec->pidns == tp_pidns_id();
  }
  int32_t status = 0;
  for (int i = 0; i < st->npeers && !status; i++)
    status = peer_attach(st, i, &recs[st->peers[i].rank]);
  rc = tp_setup_round(su, status, &status, all, sizeof(status), 0, "cuda setup",
                      "map its cuda peers", &x);
  cuf_seg_unlink(&st->me);
  if (!rc)
    INFO(LOG_SHM,
         "cuda: rank %d connected to %d local peers, %d channels, %d slots "
         "of %" PRIu64 " bytes of device memory",
         st->rank, st->npeers, st->nchannels, st->nslots, st->slot_data);
out:
  if (st)
    cuf_seg_unlink(&st->me);
  free(recs);
  free(all);
  if (rc) {
    cu_teardown(st);
    return rc;
  }
  *state = st;
  return BRAID_SUCCESS;
}

const tp_ops tp_cuda = {
    .name = "cuda",
    .setup = cu_setup,
    .conn = cu_conn,
    .isend = cu_isend,
    .isend_copy = cu_isend_copy,
    .send_done = cu_send_done,
    .recv = cu_recv,
    .recv_reduce = cu_recv_reduce,
    .pollfd = cu_pollfd,
    .bell_read = cu_bell_read,
    .bell_wait = cu_bell_wait,
    .check_peers = cu_check_peers,
    .set_cause = cu_set_cause,
    .teardown = cu_teardown,
    .flush = cu_flush,
};
