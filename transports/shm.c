/*
 * Shared-memory transport between the ranks of one host: rings of slots in
 * POSIX shm segments, single-copy reads (CMA) for large messages, a futex
 * doorbell per rank, pidfd liveness checks. The layout and the protocol are
 * described in transports/shm.h.
 */
#include "transports/shm.h"
#include "transports/call_fp.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/common.h"

/* ---- helpers ------------------------------------------------------------ */

/* The connection breaks: its later calls fail with the same code and
 * message (conn_broken). */
#define CERR(c, code, ...) conn_break((c), ERR((code), __VA_ARGS__))

static int conn_break(tp_conn *c, int code) {
  WARN(LOG_SHM, "%s", err_msg());
  c->err = code;
  return tp_keep(c->st->why, code);
}

static int conn_broken(const tp_conn *c) {
  return tp_repeat(c->st->why, c->err);
}

/* A bad argument: the connection stays usable. */
#define AERR(c, ...)                                                           \
  ((c) ? tp_keep((c)->st->why, ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))        \
       : (int)ERR(BRAID_ERR_INVALID_ARG, __VA_ARGS__))

static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* After publishing or releasing a slot: wakes the owner of h if it sleeps.
 * The bell is touched only then, so a message between two ranks that are
 * both awake moves no cache line but the slot's (and, every nslots, the
 * tail's). The fence pairs with the one in shm_bell_wait: either this sees
 * `sleeping`, or the sleeper's scan (shm_changed) sees what was published. */
static void bell_ring(shm_hdr *h) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&h->sleeping, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&h->bell, 1, memory_order_seq_cst);
    futex_wake(&h->bell);
  }
}

/* ---- send side ---------------------------------------------------------- */

static uint64_t tx_free(tp_conn *c) {
  if (c->tx_prod - c->tx_tail >= c->tx_nslots)
    c->tx_tail = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
  return c->tx_nslots - (c->tx_prod - c->tx_tail);
}

/* Fills the next slot's header and publishes it. */
static void tx_publish(tp_conn *c, shm_slot *s, uint64_t len, uint64_t off,
                       uint64_t fp, uint32_t frag, uint32_t kind) {
  s->msg_len = len;
  s->off = off;
  s->fp = fp;
  s->frag_len = frag;
  s->kind = kind;
  atomic_store_explicit(&s->seq, c->tx_prod + 1, memory_order_release);
  c->tx_prod++;
}

/* Pushes as many fragments of the pending message as there are free slots.
 * Returns 1 when the message is fully pushed. */
static int tx_push(tp_conn *c) {
  int pushed = 0;
  while (c->pend_frags > 0 && tx_free(c) > 0) {
    shm_slot *s = slot_at(c->tx_base, c->tx_stride, c->tx_nslots, c->tx_prod);
    uint64_t n = c->pend_len - c->pend_off;
    if (n > c->tx_cap)
      n = c->tx_cap;
    if (c->pend_off + n > c->pend_ready)
      break; /* a forward whose data is not reduced yet (shm_recv_reduce_fwd) */
    if (n)
      memcpy(n <= SHM_INLINE ? (char *)s->u.inl : (char *)s + sizeof(shm_slot),
             c->pend_src + c->pend_off, n);
    tx_publish(c, s, c->pend_len, c->pend_off, c->pend_fp, (uint32_t)n,
               SHM_KIND_DATA);
    c->pend_off += n;
    c->pend_frags--;
    pushed = 1;
  }
  if (pushed)
    bell_ring(c->tx_hdr);
  return c->pend_frags == 0;
}

void shm_pend_progress(shm_state *st) {
  for (int i = 0; i < st->npend;) {
    if (tx_push(st->pend[i]))
      st->pend[i] = st->pend[--st->npend];
    else
      i++;
  }
}

/* Forgets single-copy sends the receiver has released. */
static void cmaq_pop(tp_conn *c) {
  c->tx_tail = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
  while (c->cmaq_n > 0 && c->cmaq[c->cmaq_head].slot_end <= c->tx_tail) {
    c->cmaq_head = (c->cmaq_head + 1) % c->tx_nslots;
    c->cmaq_n--;
  }
}

/* The fingerprint messages on c carry and expect: the call's on the
 * collective channels, none on the last (send/recv). */
static uint64_t conn_fp(const tp_conn *c) {
  return c->channel < c->st->nchannels - 1 ? c->st->fp : 0;
}

/* mode: SEND_COPY never single-copy, SEND_CMA single-copy from the
 * threshold, SEND_SHARED the same, copied by both ranks when large. */
enum { SEND_COPY, SEND_CMA, SEND_SHARED };

static int shm_isend_mode(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket, int mode) {
  if (!c || !ticket || (!src && len))
    return AERR(c, "shm isend to rank %d: %s is NULL", c ? c->peer : -1,
                c == NULL ? "the connection"
                : ticket  ? "src"
                          : "ticket");
  if (c->err)
    return conn_broken(c);
  shm_pend_progress(c->st);
  if (c->pend_frags > 0 || tx_free(c) == 0)
    return TP_AGAIN;
  if (mode != SEND_COPY && c->tx_cma && len > 0 &&
      len >= c->st->cma_threshold) {
    uint64_t piece;
    int shared =
        mode == SEND_SHARED && c->tx_share && shm_share_pieces(len, &piece) > 1;
    cmaq_pop(c); /* at most nslots - 1 remain: one slot is free */
    shm_slot *s = slot_at(c->tx_base, c->tx_stride, c->tx_nslots, c->tx_prod);
    s->u.cma.addr = (uint64_t)(uintptr_t)src;
    atomic_store_explicit(&s->u.cma.dst, 0, memory_order_relaxed);
    atomic_store_explicit(&s->u.cma.claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&s->u.cma.finished, 0, memory_order_relaxed);
    tx_publish(c, s, len, 0, conn_fp(c), (uint32_t)shared, SHM_KIND_CMA);
    shm_cmaq *q = &c->cmaq[(c->cmaq_head + c->cmaq_n) % c->tx_nslots];
    q->msgno = ++c->tx_msgno;
    q->slot_end = c->tx_prod;
    q->shared = shared;
    c->cmaq_n++;
    c->cma_sent++;
    bell_ring(c->tx_hdr);
    *ticket = c->tx_msgno;
    return BRAID_SUCCESS;
  }
  c->pend_src = src;
  c->pend_len = len;
  c->pend_ready = len;
  c->pend_off = 0;
  c->pend_frags = len == 0 ? 1 : (len + c->tx_cap - 1) / c->tx_cap;
  c->pend_msgno = ++c->tx_msgno;
  c->pend_fp = conn_fp(c);
  if (!tx_push(c))
    c->st->pend[c->st->npend++] = c;
  *ticket = c->tx_msgno;
  return BRAID_SUCCESS;
}

static int shm_isend(tp_conn *c, const void *src, size_t len,
                     uint64_t *ticket) {
  return shm_isend_mode(c, src, len, ticket, SEND_CMA);
}

static int shm_isend_shared(tp_conn *c, const void *src, size_t len,
                            uint64_t *ticket) {
  return shm_isend_mode(c, src, len, ticket, SEND_SHARED);
}

/* The source may change once this returns (isend_copy), or the sender
 * copies (isend_staged): never single-copy. */
static int shm_isend_copy(tp_conn *c, const void *src, size_t len,
                          uint64_t *ticket) {
  return shm_isend_mode(c, src, len, ticket, SEND_COPY);
}

static void share_write(tp_conn *c);

static int shm_send_done(tp_conn *c, uint64_t ticket) {
  if (!c || ticket > c->tx_msgno)
    return AERR(c, "shm send_done to rank %d: ticket %" PRIu64 " never issued",
                c ? c->peer : -1, ticket);
  if (c->err)
    return conn_broken(c);
  shm_pend_progress(c->st);
  if (c->pend_frags > 0 && c->pend_msgno <= ticket)
    return TP_AGAIN;
  if (c->cmaq_n == 0)
    return BRAID_SUCCESS;
  cmaq_pop(c);
  if (c->cmaq_n > 0 && c->cmaq[c->cmaq_head].msgno <= ticket) {
    share_write(c); /* waiting anyway: copy a share of it */
    cmaq_pop(c);
    if (c->cmaq_n > 0 && c->cmaq[c->cmaq_head].msgno <= ticket)
      return TP_AGAIN;
  }
  return BRAID_SUCCESS;
}

/* ---- receive side ------------------------------------------------------- */

static int cma_read(tp_conn *c, void *dst, uint64_t raddr, size_t len) {
  shm_peer *p = &c->st->peers[c->lpeer];
  size_t done = 0;
  while (done < len) {
    struct iovec l = {(char *)dst + done, len - done};
    struct iovec r = {(void *)(uintptr_t)(raddr + done), len - done};
    ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      return CERR(c, e == ESRCH ? BRAID_ERR_REMOTE : BRAID_ERR_SYSTEM,
                  "shm recv from rank %d channel %d: single-copy read of %zu "
                  "bytes from pid %d failed: %s",
                  c->peer, c->channel, len - done, p->pid, strerror(e));
    }
    done += (size_t)n;
  }
  return BRAID_SUCCESS;
}

static int cma_reduce(tp_conn *c, const char *src, char *dst, uint64_t raddr,
                      size_t len, const tp_reducer *r) {
  if (!c->bounce && !(c->bounce = aligned_alloc(SHM_CL, SHM_PIECE)))
    return CERR(c, BRAID_ERR_NOMEM, "shm recv_reduce from rank %d: no memory",
                c->peer);
  size_t piece = SHM_PIECE - SHM_PIECE % r->elem_size;
  for (size_t off = 0; off < len; off += piece) {
    size_t n = len - off < piece ? len - off : piece;
    int rc = cma_read(c, c->bounce, raddr + off, n);
    if (rc)
      return rc;
    r->fn(dst + off, src + off, c->bounce, n / r->elem_size);
  }
  return BRAID_SUCCESS;
}

/* ---- Single copy, shared ----------------------------------------------
 * A single-copy message is copied in pieces (shm_share_pieces). The receiver
 * publishes where the message goes (u.cma.dst) and then takes pieces one by
 * one, reading each from the sender's memory. A sender that waits for that
 * send (send_done) takes pieces too, writing each into the receiver's
 * memory (process_vm_writev), so two cores copy where one did: a broadcast's
 * root has nothing else to do. Each piece is taken once (u.cma.claimed),
 * and the receiver frees the slot only when every piece is copied
 * (u.cma.finished), so nothing writes into its buffer after the receive
 * returns. A piece the sender could not write marks the message (bit 31);
 * the receiver then reads all of it itself, once the sender's pieces are
 * finished. Reductions are read by the receiver alone (cma_reduce). */

uint32_t shm_share_pieces(uint64_t len, uint64_t *piece) {
  *piece = len;
  if (len < SHM_SHARE_FROM)
    return 1; /* the receiver alone: sharing costs more than it saves */
  /* 2 to SHM_SHARE_SPLIT pieces of about SHM_SHARE_PIECE bytes or more */
  uint64_t n = len / SHM_SHARE_PIECE;
  n = n < 2 ? 2 : n > SHM_SHARE_SPLIT ? SHM_SHARE_SPLIT : n;
  uint64_t p = ((len + n - 1) / n + 4095) & ~(uint64_t)4095;
  *piece = p;
  return (uint32_t)((len + p - 1) / p);
}

#define SHARE_FAILED 0x80000000u

static _Atomic int share_wait_only; /* shm_force_share_wait */
void shm_force_share_wait(int on) { atomic_store(&share_wait_only, on); }

static int share_read(tp_conn *c, shm_slot *s, char *dst, size_t len) {
  uint64_t piece;
  uint32_t n = shm_share_pieces(len, &piece);
  if (s->frag_len == 0 || n == 1) /* not shared: no shared word touched */
    return cma_read(c, dst, s->u.cma.addr, len);
  if (!c->rx_shared) {
    c->rx_shared = 1;
    atomic_store_explicit(&s->u.cma.dst, (uint64_t)(uintptr_t)dst,
                          memory_order_release);
  }
  for (;;) {
    if (atomic_load_explicit(&share_wait_only, memory_order_relaxed))
      break;
    uint32_t i =
        atomic_fetch_add_explicit(&s->u.cma.claimed, 1, memory_order_acq_rel);
    if (i >= n)
      break;
    uint64_t off = (uint64_t)i * piece;
    int rc = cma_read(c, dst + off, s->u.cma.addr + off,
                      len - off < piece ? len - off : piece);
    if (rc)
      return rc;
    atomic_fetch_add_explicit(&s->u.cma.finished, 1, memory_order_release);
  }
  uint32_t f = atomic_load_explicit(&s->u.cma.finished, memory_order_acquire);
  if ((f & ~SHARE_FAILED) < n)
    return TP_AGAIN; /* the sender is writing a piece */
  if (f & SHARE_FAILED) {
    int rc = cma_read(c, dst, s->u.cma.addr, len);
    if (rc)
      return rc;
  }
  c->rx_shared = 0;
  return BRAID_SUCCESS;
}

/* The sender's share of its single-copy sends whose receiver has begun:
 * pieces not yet taken, written into the receiver's buffer. */
static void share_write(tp_conn *c) {
  if (!c->tx_share)
    return;
  pid_t pid = c->st->peers[c->lpeer].pid;
  int wrote = 0;
  for (uint64_t k = 0; k < c->cmaq_n && c->tx_share; k++) {
    const shm_cmaq *q = &c->cmaq[(c->cmaq_head + k) % c->tx_nslots];
    if (!q->shared)
      continue;
    shm_slot *s =
        slot_at(c->tx_base, c->tx_stride, c->tx_nslots, q->slot_end - 1);
    uint64_t dst = atomic_load_explicit(&s->u.cma.dst, memory_order_acquire);
    if (dst == 0)
      break; /* not begun, nor the ones after it */
    uint64_t piece, len = s->msg_len;
    uint32_t n = shm_share_pieces(len, &piece);
    for (;;) {
      uint32_t i =
          atomic_fetch_add_explicit(&s->u.cma.claimed, 1, memory_order_acq_rel);
      if (i >= n)
        break;
      uint64_t off = (uint64_t)i * piece, want = len - off;
      if (want > piece)
        want = piece;
      struct iovec l = {(char *)(uintptr_t)s->u.cma.addr + off, want};
      struct iovec r = {(void *)(uintptr_t)(dst + off), want};
      ssize_t got = process_vm_writev(pid, &l, 1, &r, 1, 0);
      if (got != (ssize_t)want) { /* the receiver reads it all itself */
        atomic_fetch_or_explicit(&s->u.cma.finished, SHARE_FAILED,
                                 memory_order_relaxed);
        c->tx_share = 0;
        INFO(LOG_SHM,
             "shm send to rank %d: writing into its memory failed (%s): "
             "it reads single-copy messages alone from now on",
             c->peer, got < 0 ? strerror(errno) : "short write");
      } else {
        c->share_wrote++;
      }
      atomic_fetch_add_explicit(&s->u.cma.finished, 1, memory_order_release);
      wrote = 1;
    }
  }
  if (wrote)
    bell_ring(c->tx_hdr);
}

/* ---- a reduction forwarded as it is made -------------------------------- */

/* dst = src, n bytes; stream: with stores that bypass the cache, for an
 * output nobody reads soon (an out-of-place call's, large): its lines are
 * then written without being read first. */
static void copy_out(char *dst, const char *src, size_t n, int stream) {
#if defined(__x86_64__)
  if (stream && n >= 4096) {
    size_t head = (size_t)(-(uintptr_t)dst & 63);
    memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64)
      for (int k = 0; k < 64; k += 16)
        _mm_stream_si128((__m128i *)(dst + i + k),
                         _mm_loadu_si128((const __m128i *)(src + i + k)));
    memcpy(dst + i, src + i, n - i);
    _mm_sfence();
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, n);
}

/* Whether the fragment at off, n bytes, of the message fwd forwards can be
 * reduced straight into fwd's next slot: every byte before it pushed, the
 * fragment the one fwd pushes next, and a slot free. */
static int fwd_frag(tp_conn *fwd, uint64_t off, uint64_t n) {
  uint64_t want = fwd->pend_len - fwd->pend_off;
  if (want > fwd->tx_cap)
    want = fwd->tx_cap;
  return fwd->pend_frags > 0 && fwd->pend_off == off && want == n &&
         n > SHM_INLINE && tx_free(fwd) > 0;
}

/* Reduces a fragment into fwd's next slot, publishes it, and copies it to
 * dst. */
static void fwd_reduce(tp_conn *fwd, char *dst, const char *src,
                       const char *data, uint64_t n, const tp_reducer *r,
                       int stream) {
  shm_slot *s =
      slot_at(fwd->tx_base, fwd->tx_stride, fwd->tx_nslots, fwd->tx_prod);
  char *out = (char *)s + sizeof(shm_slot);
  r->fn(out, src, data, n / r->elem_size);
  tx_publish(fwd, s, fwd->pend_len, fwd->pend_off, fwd->pend_fp, (uint32_t)n,
             SHM_KIND_DATA);
  bell_ring(fwd->tx_hdr);
  fwd->pend_off += n;
  fwd->pend_frags--;
  fwd->fwd_frags++;
  copy_out(dst, out, n, stream);
}

/* Consumes published slots of the current message; reduces when r != NULL. */
static int rx_progress(tp_conn *c, const char *src, char *dst, size_t len,
                       const tp_reducer *r, tp_conn *fwd, int stream) {
  if (c->err)
    return conn_broken(c);
  shm_pend_progress(c->st);
  int rc = TP_AGAIN, freed = 0;
  uint64_t nslots = (uint64_t)c->st->nslots;
  uint64_t stride = c->st->me->slot_bytes;
  for (;;) {
    shm_slot *s = slot_at(c->rx_base, stride, nslots, c->rx_cons);
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != c->rx_cons + 1)
      break;
    uint64_t fp = conn_fp(c);
    if (c->rx_off == 0 && fp != 0 && s->fp != 0 && s->fp != fp) {
      char what[224];
      tp_fp_mismatch(s->fp, fp, c->peer, what, sizeof what);
      if (!c->st->mm_set)
        c->st->mm = (tp_mismatch){c->st->rank, c->peer, s->fp, fp};
      c->st->mm_set = 1;
      rc = CERR(c, BRAID_ERR_MISMATCH, "shm recv from rank %d channel %d: %s",
                c->peer, c->channel, what);
      break;
    }
    if (s->msg_len != len) {
      rc = CERR(c, BRAID_ERR_MISMATCH,
                "shm recv from rank %d channel %d: message has %" PRIu64
                " bytes, the receive expects %zu",
                c->peer, c->channel, s->msg_len, len);
      break;
    }
    if (s->kind == SHM_KIND_CMA) {
      if (c->rx_off != 0) {
        rc =
            CERR(c, BRAID_ERR_INTERNAL,
                 "shm recv from rank %d: descriptor inside a message", c->peer);
        break;
      }
      rc = r ? cma_reduce(c, src, dst, s->u.cma.addr, len, r)
             : share_read(c, s, dst, len);
      if (rc)
        break;
      c->rx_off = len;
      c->cma_recvd++;
    } else {
      uint64_t n = s->frag_len;
      if (s->kind != SHM_KIND_DATA || s->off != c->rx_off ||
          n > c->st->me->slot_data || n > len - c->rx_off ||
          (r && n % r->elem_size)) {
        rc = CERR(c, BRAID_ERR_INTERNAL,
                  "shm recv from rank %d channel %d: bad slot (kind %u, "
                  "offset %" PRIu64 ", %" PRIu64 " bytes) at offset %" PRIu64,
                  c->peer, c->channel, s->kind, s->off, n, c->rx_off);
        break;
      }
      const char *data = n <= SHM_INLINE ? (const char *)s->u.inl
                                         : (const char *)s + sizeof(shm_slot);
      if (fwd != NULL && fwd_frag(fwd, c->rx_off, n))
        fwd_reduce(fwd, dst + c->rx_off, src + c->rx_off, data, n, r, stream);
      else if (r && n)
        r->fn(dst + c->rx_off, src + c->rx_off, data, n / r->elem_size);
      else if (n)
        copy_out(dst + c->rx_off, data, n, stream);
      c->rx_off += n;
    }
    if (fwd != NULL)
      fwd->pend_ready = c->rx_off;
    c->rx_cons++;
    atomic_store_explicit(&c->rx->tail, c->rx_cons, memory_order_release);
    freed = 1;
    if (c->rx_off == len) {
      c->rx_off = 0;
      rc = BRAID_SUCCESS;
      break;
    }
  }
  if (freed)
    bell_ring(c->st->peers[c->lpeer].hdr);
  return rc;
}

static int recv_mode(tp_conn *c, void *dst, size_t len, int stream) {
  if (!c || (!dst && len))
    return AERR(c, "shm recv from rank %d: dst is NULL", c ? c->peer : -1);
  return rx_progress(c, NULL, dst, len, NULL, NULL, stream);
}

static int shm_recv(tp_conn *c, void *dst, size_t len) {
  return recv_mode(c, dst, len, 0);
}

static int shm_recv_stream(tp_conn *c, void *dst, size_t len) {
  return recv_mode(c, dst, len, 1);
}

/* recv_reduce's arguments: BRAID_SUCCESS, or a bad argument's error. */
static int reduce_args(tp_conn *c, const void *src, const void *dst, size_t len,
                       const tp_reducer *r) {
  if (!c || (len && (!src || !dst)) || !r || !r->fn || r->elem_size == 0 ||
      r->elem_size > SHM_CL || (r->elem_size & (r->elem_size - 1)) ||
      len % r->elem_size) /* fragments hold whole elements */
    return AERR(c,
                "shm recv_reduce from rank %d: NULL buffer or reducer, or "
                "%zu bytes not a multiple of an element size (1..64, power "
                "of two) of %zu",
                c ? c->peer : -1, len, r ? r->elem_size : 0);
  return BRAID_SUCCESS;
}

static int shm_recv_reduce(tp_conn *c, const void *src, void *dst, size_t len,
                           const tp_reducer *r) {
  int rc = reduce_args(c, src, dst, len, r);
  return rc != BRAID_SUCCESS ? rc : rx_progress(c, src, dst, len, r, NULL, 0);
}

/* recv_reduce with the result sent on to out as it is made: each fragment
 * reduced into out's next slot while free, then streamed into dst; the
 * rest pushed from dst as it is reduced (pend_ready). *ticket: out's send
 * of dst; 0 when out was busy at the start (the caller sends dst). */
static int shm_recv_reduce_fwd(tp_conn *c, const void *src, void *dst,
                               size_t len, const tp_reducer *r, tp_conn *out,
                               uint64_t *ticket) {
  int rc = reduce_args(c, src, dst, len, r);
  if (rc != BRAID_SUCCESS)
    return rc;
  if (!out || !ticket || out->st != c->st)
    return AERR(c, "shm recv_reduce_fwd from rank %d: no forward connection",
                c->peer);
  if (c->rx_off == 0 && out->fwd_msgno == 0) { /* a new message */
    if (out->err)
      return conn_broken(out);
    shm_pend_progress(c->st);
    if (out->pend_frags > 0 || len == 0) {
      *ticket = 0;
      return shm_recv_reduce(c, src, dst, len, r);
    }
    out->pend_src = dst;
    out->pend_len = len;
    out->pend_ready = 0;
    out->pend_off = 0;
    out->pend_frags = (len + out->tx_cap - 1) / out->tx_cap;
    out->pend_msgno = out->fwd_msgno = ++out->tx_msgno;
    out->pend_fp = conn_fp(out);
    c->st->pend[c->st->npend++] = out;
  }
  if (out->fwd_msgno == 0) { /* busy at the start: received plainly */
    *ticket = 0;
    return shm_recv_reduce(c, src, dst, len, r);
  }
  rc = rx_progress(c, src, dst, len, r, out, 1);
  if (rc == BRAID_SUCCESS) {
    *ticket = out->fwd_msgno;
    out->fwd_msgno = 0;
    shm_pend_progress(c->st);
  } else if (rc != TP_AGAIN && !out->err) {
    out->err = rc; /* its message stays incomplete: out fails from now */
  }
  return rc;
}

/* ---- the small-call path (tp_ops.fast_*, src/exec_fast.c) --------------- */

/* One slot, copied, where isend would also copy: below the single-copy
 * threshold to a peer that reads this process's memory. */
static size_t shm_fast_max(tp_conn *c) {
  size_t cap = (size_t)c->tx_cap;
  if (c->tx_cma && c->st->cma_threshold > 0 && c->st->cma_threshold <= cap)
    cap = c->st->cma_threshold - 1;
  return cap;
}

/* A message of one slot goes out in the slot that is free and next in
 * line: the one isend would fill, filled the same way; n of them in the
 * next n. */
static int shm_fast_room(tp_conn *c, size_t len, int n) {
  return len <= shm_fast_max(c) && c->err == 0 && c->pend_frags == 0 && n > 0 &&
         tx_free(c) >= (uint64_t)n;
}

static void shm_fast_send(tp_conn *c, const void *src, size_t len) {
  shm_slot *s = slot_at(c->tx_base, c->tx_stride, c->tx_nslots, c->tx_prod);
  if (len)
    memcpy(len <= SHM_INLINE ? (char *)s->u.inl : (char *)s + sizeof(shm_slot),
           src, len);
  c->tx_msgno++; /* the ticket isend would have given: send_done sees it */
  tx_publish(c, s, len, 0, conn_fp(c), (uint32_t)len, SHM_KIND_DATA);
  bell_ring(c->tx_hdr);
}

/* Takes the next message only when it is the whole expected one in one
 * slot from this rank's call: whatever else is there (another call's, a
 * fragment, a descriptor) stays for rx_progress to read and name. */
static int shm_fast_recv(tp_conn *c, const void *src, void *dst, size_t len,
                         const tp_reducer *r) {
  if (c->err || c->rx_off != 0 || len > c->st->me->slot_data ||
      (r != NULL && len % r->elem_size != 0))
    return 0;
  shm_slot *s = slot_at(c->rx_base, c->st->me->slot_bytes,
                        (uint64_t)c->st->nslots, c->rx_cons);
  if (atomic_load_explicit(&s->seq, memory_order_acquire) != c->rx_cons + 1)
    return 0;
  uint64_t fp = conn_fp(c);
  if (s->kind != SHM_KIND_DATA || s->msg_len != len || s->frag_len != len ||
      s->off != 0 || (fp != 0 && s->fp != 0 && s->fp != fp))
    return 0;
  const char *data = len <= SHM_INLINE ? (const char *)s->u.inl
                                       : (const char *)s + sizeof(shm_slot);
  if (r != NULL)
    r->fn(dst, src, data, len / r->elem_size);
  else if (len)
    memcpy(dst, data, len);
  c->rx_cons++;
  atomic_store_explicit(&c->rx->tail, c->rx_cons, memory_order_release);
  bell_ring(c->st->peers[c->lpeer].hdr);
  return 1;
}

static int shm_pollfd(tp_conn *c) {
  (void)c;
  return -1;
}

static tp_conn *shm_conn(void *state, int peer, int channel) {
  shm_state *st = state;
  if (!st || peer < 0 || peer >= st->nranks || channel < 0 ||
      channel >= st->nchannels || st->lidx[peer] < 0)
    return NULL;
  return &st->conns[st->lidx[peer] * st->nchannels + channel];
}

int shm_peer_cma(void *state, int peer) {
  tp_conn *c = shm_conn(state, peer, 0);
  return c ? c->tx_cma : 0;
}

uint64_t shm_conn_cma_sent(const tp_conn *c) { return c ? c->cma_sent : 0; }
uint64_t shm_conn_cma_recvd(const tp_conn *c) { return c ? c->cma_recvd : 0; }
uint64_t shm_conn_share_wrote(const tp_conn *c) {
  return c ? c->share_wrote : 0;
}
uint64_t shm_conn_fwd_frags(const tp_conn *c) { return c ? c->fwd_frags : 0; }

const tp_ops tp_shm = {
    .name = "shm",
    .setup = shm_setup,
    .conn = shm_conn,
    .isend = shm_isend,
    .isend_copy = shm_isend_copy,
    .isend_staged = shm_isend_copy,
    .isend_shared = shm_isend_shared,
    .send_done = shm_send_done,
    .recv = shm_recv,
    .recv_stream = shm_recv_stream,
    .recv_reduce = shm_recv_reduce,
    .recv_reduce_fwd = shm_recv_reduce_fwd,
    .pollfd = shm_pollfd,
    .bell_read = shm_bell_read,
    .bell_wait = shm_bell_wait,
    .set_fp = shm_set_fp,
    .note_wait = shm_note_wait,
    .peer_wait = shm_peer_wait,
    .quiet = shm_quiet,
    .note_cpu = shm_note_cpu,
    .peer_cpu = shm_peer_cpu,
    .check_peers = shm_check_peers,
    .set_cause = shm_set_cause,
    .mismatch = shm_mismatch,
    .tell_mismatch = shm_tell_mismatch,
    .teardown = shm_teardown,
    .fast_room = shm_fast_room,
    .fast_send = shm_fast_send,
    .fast_recv = shm_fast_recv,
    .fast_max = shm_fast_max,
};
