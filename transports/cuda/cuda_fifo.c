/*
 * The GPU-free part of the cuda transports: host shm segments, the slot /
 * credit / publication protocol over a copy engine, liveness. See
 * transports/cuda/cuda_fifo.h.
 */
#include "transports/cuda/cuda_fifo.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "src/log.h"

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* ---- segments ------------------------------------------------------------ */

int cuf_seg_create(cuf_seg *s, int rank, int npeers, const int32_t *peer_rank,
                   int nchannels, int nslots, uint64_t slot_data,
                   uint64_t token) {
  memset(s, 0, sizeof(*s));
  if (npeers < 1 || nchannels < 1 || nslots < 1 || !peer_rank)
    return ERR(BRAID_ERR_INVALID_ARG,
               "cuda: rank %d: bad segment shape (%d peers, %d channels, %d "
               "slots)",
               rank, npeers, nchannels, nslots);
  uint64_t ring =
      round_up(sizeof(cuf_ring) + (uint64_t)nslots * sizeof(cuf_slot), CUF_CL);
  uint64_t hdr =
      round_up(sizeof(cuf_hdr) + 2 * sizeof(int32_t) * (uint64_t)npeers, 4096);
  uint64_t total = hdr + (uint64_t)npeers * (uint64_t)nchannels * ring;
  tp_seg_req req = {.who = "cuda",
                    .prefix = "braid-cu",
                    .token = token,
                    .rank = rank,
                    .bytes = total};
  void *m = NULL;
  int rc = tp_seg_create(&req, s->name, sizeof(s->name), &m);
  if (rc)
    return rc;
  cuf_hdr *h = m;
  h->pid = (int32_t)getpid();
  h->rank = rank;
  h->npeers = npeers;
  h->nchannels = nchannels;
  h->nslots = nslots;
  h->slot_data = slot_data;
  h->ring_bytes = ring;
  h->rings_off = hdr;
  h->total = total;
  atomic_store(&h->cause, -1);
  for (int i = 0; i < npeers; i++) {
    h->peer_rank[i] = peer_rank[i];
    atomic_init(cuf_held(h, peer_rank[i]), 0);
  }
  h->magic = CUF_MAGIC;
  s->hdr = h;
  s->size = total;
  s->owner = 1;
  return BRAID_SUCCESS;
}

int cuf_seg_attach(cuf_seg *s, const char *name, uint64_t size, int rank,
                   int nchannels) {
  memset(s, 0, sizeof(*s));
  snprintf(s->name, sizeof(s->name), "%s", name);
  void *m = NULL;
  int e = tp_seg_map(name, size, &m);
  if (e)
    return ERR(BRAID_ERR_SYSTEM,
               "cuda: cannot map the segment %s of rank %d: %s (is rank %d on "
               "this host?)",
               name, rank, strerror(e), rank);
  s->hdr = m;
  s->size = size;
  if (s->hdr->magic != CUF_MAGIC || s->hdr->rank != rank ||
      s->hdr->nchannels != nchannels) {
    int r = ERR(BRAID_ERR_INTERNAL,
                "cuda: the segment of rank %d is not what this rank expects "
                "(rank %d, channels %d vs %d)",
                rank, (int)s->hdr->rank, (int)s->hdr->nchannels, nchannels);
    cuf_seg_unmap(s);
    return r;
  }
  return BRAID_SUCCESS;
}

void cuf_seg_unlink(cuf_seg *s) {
  if (s->owner && s->name[0] && !s->unlinked)
    shm_unlink(s->name);
  s->unlinked = 1;
}

void cuf_seg_unmap(cuf_seg *s) {
  cuf_seg_unlink(s);
  if (s->hdr)
    munmap(s->hdr, s->size);
  s->hdr = NULL;
}

cuf_ring *cuf_ring_of(cuf_hdr *h, int rank, int channel, int *index) {
  if (!h || channel < 0 || channel >= h->nchannels)
    return NULL;
  for (int k = 0; k < h->npeers; k++) {
    if (h->peer_rank[k] != rank)
      continue;
    int i = k * h->nchannels + channel;
    if (index)
      *index = i;
    return (cuf_ring *)((char *)h + h->rings_off + (uint64_t)i * h->ring_bytes);
  }
  return NULL;
}

_Atomic int32_t *cuf_held(cuf_hdr *h, int rank) {
  for (int k = 0; h != NULL && k < h->npeers; k++)
    if (h->peer_rank[k] == rank)
      return (_Atomic int32_t *)&h->peer_rank[h->npeers + k];
  return NULL;
}

cuf_slot *cuf_ring_slots(cuf_ring *r) {
  return (cuf_slot *)((char *)r + sizeof(cuf_ring));
}

/* ---- doorbell ------------------------------------------------------------ */

void cuf_bell_ring(cuf_hdr *h) {
  if (!h)
    return;
  atomic_fetch_add_explicit(&h->bell, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&h->sleeping, memory_order_seq_cst))
    syscall(SYS_futex, (uint32_t *)&h->bell, FUTEX_WAKE, INT_MAX, NULL, NULL,
            0);
}

void cuf_bell_wait(cuf_hdr *h, uint32_t seen, int timeout_us) {
  if (timeout_us <= 0)
    return;
  struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000L};
  if (!h) {
    nanosleep(&ts, NULL);
    return;
  }
  atomic_fetch_add_explicit(&h->sleeping, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&h->bell, memory_order_seq_cst) == seen)
    syscall(SYS_futex, (uint32_t *)&h->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_fetch_sub_explicit(&h->sleeping, 1, memory_order_seq_cst);
}

/* ---- events of one side -------------------------------------------------- */

static const char *eng_err(const cuf_engine *eng) {
  const char *m = eng->error ? eng->error() : NULL;
  return m && m[0] ? m : "no detail";
}

static int events_new(const cuf_engine *eng, uint64_t n, void ***out) {
  void **ev = calloc(n, sizeof(void *));
  if (!ev)
    return ERR(BRAID_ERR_NOMEM, "cuda: no memory for %llu events",
               (unsigned long long)n);
  for (uint64_t i = 0; i < n; i++) {
    int rc = eng->event_new(&ev[i]);
    if (rc) {
      for (uint64_t j = 0; j < i; j++)
        eng->event_free(ev[j]);
      free(ev);
      return ERR(rc, "cuda: creating an event failed: %s", eng_err(eng));
    }
  }
  *out = ev;
  return BRAID_SUCCESS;
}

static void events_free(const cuf_engine *eng, void **ev, uint64_t n) {
  for (uint64_t i = 0; ev && i < n; i++)
    if (ev[i])
      eng->event_free(ev[i]);
  free(ev);
}

/* ---- send side ----------------------------------------------------------- */

int cuf_tx_init(cuf_tx *t, const cuf_engine *eng, void *stream, cuf_ring *ring,
                cuf_hdr *bell, char *data, uint64_t nslots, uint64_t cap) {
  int peer = t->peer, channel = t->channel;
  char *why = t->why;
  *t = (cuf_tx){.eng = eng,
                .stream = stream,
                .peer = peer,
                .channel = channel,
                .why = why,
                .ring = ring,
                .slots = cuf_ring_slots(ring),
                .bell = bell,
                .data = data,
                .nslots = nslots,
                .cap = cap};
  t->last = calloc(nslots, sizeof(uint64_t));
  if (!t->last)
    return ERR(BRAID_ERR_NOMEM, "cuda: no memory for %llu slots",
               (unsigned long long)nslots);
  return events_new(eng, nslots, &t->ev);
}

void cuf_tx_fini(cuf_tx *t) {
  if (t->eng)
    events_free(t->eng, t->ev, t->nslots);
  free(t->last);
  t->ev = NULL;
  t->last = NULL;
}

static int tx_fail(cuf_tx *t, int code, const char *what) {
  t->failed = code ? code : BRAID_ERR_INTERNAL;
  return tp_keep(t->why, ERR(t->failed,
                             "cuda send to rank %d channel %d: %s failed: %s",
                             t->peer, t->channel, what, eng_err(t->eng)));
}

/* Publishes, in order, the slots whose copy has completed. */
static int tx_publish(cuf_tx *t) {
  uint64_t pub = t->pub;
  while (pub < t->prod) {
    int q = t->eng->query(t->ev[pub % t->nslots]);
    if (q == TP_AGAIN)
      break;
    if (q != BRAID_SUCCESS) {
      t->pub = pub;
      return tx_fail(t, q, "the copy into the peer's slot");
    }
    uint64_t m = t->last[pub % t->nslots];
    if (m)
      t->done = m;
    pub++;
  }
  if (pub != t->pub) {
    t->pub = pub;
    atomic_store_explicit(&t->ring->head, pub, memory_order_release);
    cuf_bell_ring(t->bell);
  }
  return BRAID_SUCCESS;
}

/* Free slots, reading the receiver's tail only when fewer than `want` are
 * known to be free. */
static uint64_t tx_free(cuf_tx *t, uint64_t want) {
  if (t->nslots - (t->prod - t->tail) < want)
    t->tail = atomic_load_explicit(&t->ring->tail, memory_order_acquire);
  return t->nslots - (t->prod - t->tail);
}

/* Issues fragments of the current message while slots are free. */
static int tx_push(cuf_tx *t) {
  while (t->pushing && tx_free(t, 1) > 0) {
    uint64_t s = t->prod % t->nslots;
    uint64_t n = t->len - t->off;
    if (n > t->cap)
      n = t->cap;
    cuf_slot *h = &t->slots[s];
    h->msg_len = t->len;
    h->off = t->off;
    h->frag_len = n;
    h->msgno = t->msgs;
    if (n) {
      int rc =
          t->eng->copy(t->data + s * t->cap, t->src + t->off, n, t->stream);
      if (rc)
        return tx_fail(t, rc, "the copy into the peer's slot");
    }
    int rc = t->eng->record(t->ev[s], t->stream);
    if (rc)
      return tx_fail(t, rc, "recording the copy's event");
    t->off += n;
    t->last[s] = t->off == t->len ? t->msgs : 0;
    t->prod++;
    if (t->off == t->len)
      t->pushing = 0;
  }
  return BRAID_SUCCESS;
}

int cuf_tx_progress(cuf_tx *t) {
  if (t->failed)
    return tp_repeat(t->why, t->failed);
  int rc = tx_publish(t);
  if (!rc)
    rc = tx_push(t);
  return rc;
}

int cuf_tx_isend(cuf_tx *t, const void *src, size_t len, int whole,
                 uint64_t *ticket) {
  int rc = cuf_tx_progress(t);
  if (rc)
    return rc;
  uint64_t need = len == 0 ? 1 : (len + t->cap - 1) / t->cap;
  if (!whole || need > t->nslots)
    need = 1;
  if (t->pushing || tx_free(t, need) < need)
    return TP_AGAIN;
  t->src = src;
  t->len = len;
  t->off = 0;
  t->pushing = 1;
  t->msgs++;
  *ticket = t->msgs;
  return tx_push(t);
}

int cuf_tx_send_done(cuf_tx *t, uint64_t ticket) {
  if (ticket > t->msgs)
    return tp_keep(t->why, ERR(BRAID_ERR_INVALID_ARG,
                               "cuda send_done to rank %d channel %d: ticket "
                               "%" PRIu64 " never issued",
                               t->peer, t->channel, ticket));
  int rc = cuf_tx_progress(t);
  if (rc)
    return rc;
  return t->done >= ticket ? BRAID_SUCCESS : TP_AGAIN;
}

int cuf_tx_idle(const cuf_tx *t) { return !t->pushing && t->pub == t->prod; }

/* ---- receive side -------------------------------------------------------- */

int cuf_rx_init(cuf_rx *x, const cuf_engine *eng, void *stream, cuf_ring *ring,
                cuf_hdr *bell, char *data, uint64_t nslots, uint64_t cap) {
  int peer = x->peer, channel = x->channel;
  char *why = x->why;
  *x = (cuf_rx){.eng = eng,
                .stream = stream,
                .peer = peer,
                .channel = channel,
                .why = why,
                .ring = ring,
                .slots = cuf_ring_slots(ring),
                .bell = bell,
                .data = data,
                .nslots = nslots,
                .cap = cap};
  return events_new(eng, nslots, &x->ev);
}

void cuf_rx_fini(cuf_rx *x) {
  if (x->eng)
    events_free(x->eng, x->ev, x->nslots);
  x->ev = NULL;
}

static int rx_fail(cuf_rx *x, int code, const char *what) {
  x->failed = code ? code : BRAID_ERR_INTERNAL;
  return tp_keep(x->why, ERR(x->failed,
                             "cuda recv from rank %d channel %d: %s failed: %s",
                             x->peer, x->channel, what, eng_err(x->eng)));
}

/* Releases, in order, the slots whose copy-out has completed. */
static int rx_release(cuf_rx *x) {
  uint64_t cons = x->cons;
  while (cons < x->issued) {
    int q = x->eng->query(x->ev[cons % x->nslots]);
    if (q == TP_AGAIN)
      break;
    if (q != BRAID_SUCCESS) {
      x->cons = cons;
      return rx_fail(x, q, "the copy out of the slot");
    }
    cons++;
  }
  if (cons != x->cons) {
    x->cons = cons;
    atomic_store_explicit(&x->ring->tail, cons, memory_order_release);
    cuf_bell_ring(x->bell);
  }
  return BRAID_SUCCESS;
}

/* Issues the copy (or reduction) of every published fragment of the current
 * message. */
static int rx_issue(cuf_rx *x, const char *src, char *dst, size_t len,
                    const tp_reducer *r, void *stream) {
  uint64_t head = atomic_load_explicit(&x->ring->head, memory_order_acquire);
  while (!x->all_issued && x->issued < head) {
    uint64_t s = x->issued % x->nslots;
    const cuf_slot *h = &x->slots[s];
    if (h->msg_len != len) {
      x->failed = BRAID_ERR_MISMATCH;
      return tp_keep(x->why, ERR(x->failed,
                                 "cuda recv from rank %d channel %d: message "
                                 "has %" PRIu64 " bytes, the receive expects "
                                 "%zu",
                                 x->peer, x->channel, h->msg_len, len));
    }
    uint64_t n = h->frag_len;
    if (h->off != x->off || n > x->cap || n > len - x->off ||
        (n == 0 && len != 0) || (r && n % r->elem_size)) {
      x->failed = BRAID_ERR_INTERNAL;
      return tp_keep(x->why,
                     ERR(x->failed,
                         "cuda recv from rank %d channel %d: bad slot (offset "
                         "%" PRIu64 ", %" PRIu64 " bytes, message %" PRIu64
                         ") at offset %" PRIu64,
                         x->peer, x->channel, h->off, n, h->msgno, x->off));
    }
    const char *slot = x->data + s * x->cap;
    int rc = BRAID_SUCCESS;
    if (n && r)
      rc = x->eng->reduce(dst + x->off, src + x->off, slot, n, r, stream);
    else if (n)
      rc = x->eng->copy(dst + x->off, slot, n, stream);
    if (rc)
      return rx_fail(x, rc,
                     r ? "the reduction out of the slot"
                       : "the copy out of the slot");
    rc = x->eng->record(x->ev[s], stream);
    if (rc)
      return rx_fail(x, rc, "recording the slot's event");
    x->off += n;
    x->issued++;
    if (x->off == len)
      x->all_issued = 1;
  }
  return BRAID_SUCCESS;
}

int cuf_rx_recv(cuf_rx *x, const void *src, void *dst, size_t len,
                const tp_reducer *r, void *stream) {
  if (x->failed)
    return tp_repeat(x->why, x->failed);
  if (!stream)
    stream = x->stream;
  int rc = rx_release(x);
  if (!rc)
    rc = rx_issue(x, src, dst, len, r, stream);
  if (!rc)
    rc = rx_release(x);
  if (rc)
    return rc;
  if (!x->all_issued || x->cons != x->issued)
    return TP_AGAIN;
  x->off = 0;
  x->all_issued = 0;
  return BRAID_SUCCESS;
}

int cuf_rx_waiting(const cuf_rx *x) {
  return atomic_load_explicit(&x->ring->head, memory_order_acquire) > x->issued;
}

int cuf_rx_busy(const cuf_rx *x) { return x->cons != x->issued; }

/* ---- liveness ------------------------------------------------------------ */

int cuf_peer_gone(cuf_peer *p) {
  if (!p->pid_ok || p->dead)
    return p->dead;
  p->dead = tp_peer_exited(p->pidfd, p->pid);
  return p->dead;
}

int cuf_peers_check(cuf_peer *peers, int n, int self_rank,
                    int (*waiting)(void *arg, int i), void *arg,
                    int *dead_rank) {
  for (int i = 0; i < n; i++) {
    cuf_peer *p = &peers[i];
    /* what it published before leaving is in our memory: read it first */
    if (!cuf_peer_gone(p) || (waiting && waiting(arg, i)))
      continue;
    int cause = p->hdr ? atomic_load(&p->hdr->cause) : -1;
    if (cause >= 0 && cause != self_rank) {
      if (dead_rank)
        *dead_rank = cause;
      return ERR(BRAID_ERR_REMOTE,
                 "cuda: rank %d died; rank %d (pid %d) then left", cause,
                 p->rank, p->pid);
    }
    if (dead_rank)
      *dead_rank = p->rank;
    return ERR(BRAID_ERR_REMOTE,
               "cuda: rank %d (pid %d) on this host has exited", p->rank,
               p->pid);
  }
  return BRAID_SUCCESS;
}
