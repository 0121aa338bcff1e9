/*
 * The executor: runs schedules over transports (DESIGN §4).
 *
 * Every channel of every op is a resumable state machine over
 * (slice, step, chunk-in-range, phase). Nothing blocks: a transport call that
 * cannot finish returns TP_AGAIN and the channel keeps its place. When no
 * channel moves, the rank waits (src/exec_wait.c: spins while that can help,
 * polls with yields, then sleeps on the shm doorbell or the sockets), so more
 * ranks than cores still make progress. Every wait is bounded by the
 * communicator's timeout, and dead peers are noticed while waiting.
 *
 * A send may still read its source after the transport accepted it (TCP
 * queue, shm single-copy): such sends stay "pending" with their byte range,
 * and a later step that writes an overlapping range first waits for them.
 *
 * Device buffers (op->dev >= 0) go through src/exec_dev.c first: an op whose
 * peers all have a device transport runs here with device pointers (x->dev:
 * transports from comm_dev_ops, local steps as kernels and copies on the
 * communicator's internal stream); any other is staged through host memory
 * and runs here as a host op.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/generators.h"
#include "collectives/select.h"
#include "device/cuda_dev.h"
#include "src/check.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/flight.h"
#include "src/log.h"
#include "src/premul.h"
#include "transports/call_fp.h"

/* ---- geometry ---------------------------------------------------------- */

static void part_range(const xop *x, const xchan *h, int j, size_t *lo,
                       size_t *hi) {
  size_t m = sched_chunk_len(x->E, x->K, j);
  *lo = (size_t)((double)m * h->w_lo);
  *hi = h->w_hi >= 1.0 ? m : (size_t)((double)m * h->w_hi);
  if (*hi > m)
    *hi = m;
  if (*lo > *hi)
    *lo = *hi;
}

/* Pointer and byte length of slice `slice` of chunk (ck.index + sub). */
static char *cptr(const xop *x, const xchan *h, sched_chunks ck, uint32_t sub,
                  size_t *len) {
  uint32_t idx = ck.index + sub;
  if (h->whole && x->K == 1) { /* every small call: no division */
    *len = x->E * x->esize;
    return x->bufs[ck.buf] + (size_t)idx * x->E * x->esize;
  }
  uint32_t block = idx / (uint32_t)x->K;
  int j = (int)(idx % (uint32_t)x->K);
  size_t lo, hi;
  part_range(x, h, j, &lo, &hi);
  size_t L = hi - lo, S = (size_t)h->nslices, s = (size_t)h->slice;
  size_t off = L * s / S, end = L * (s + 1) / S;
  *len = (end - off) * x->esize;
  size_t elem =
      (size_t)block * x->E + sched_chunk_off(x->E, x->K, j) + lo + off;
  return x->bufs[ck.buf] + elem * x->esize;
}

char *exec_cptr(const xop *x, const xchan *h, sched_chunks ck, uint32_t sub,
                size_t *len) {
  return cptr(x, h, ck, sub, len);
}

/* ---- pending sends and hazards ---------------------------------------- */

static int retire(braid_comm *c, xchan *h, int i) {
  pend *p = &h->pend[i];
  int r = p->ops->send_done(p->conn, p->ticket);
  if (r == TP_AGAIN) {
    /* the peer too: the wait's transport is found from it (a stale peer
     * of another transport had its pollfd read this connection) */
    h->wait_conn = p->conn;
    h->wait_events = POLLOUT;
    h->wait_peer = p->peer;
    return TP_AGAIN;
  }
  if (r != BRAID_SUCCESS)
    return r;
  h->pend[i] = h->pend[--h->npend];
  (void)c;
  return BRAID_SUCCESS;
}

/* Before writing [p, p+len): wait for pending sends that read it. */
static int hazard(braid_comm *c, xchan *h, const char *p, size_t len) {
  for (int i = 0; i < h->npend;) {
    const pend *q = &h->pend[i];
    if (q->p < p + len && p < q->p + q->len) {
      int r = retire(c, h, i);
      if (r != BRAID_SUCCESS)
        return r;
      continue;
    }
    i++;
  }
  return BRAID_SUCCESS;
}

static int pend_room(braid_comm *c, xchan *h) {
  if (h->npend < XPEND)
    return BRAID_SUCCESS;
  for (int i = 0; i < h->npend; i++) {
    int r = retire(c, h, i);
    if (r == BRAID_SUCCESS)
      return BRAID_SUCCESS;
    if (r != TP_AGAIN)
      return r;
  }
  return TP_AGAIN;
}

/* Calls whose blocks are smaller than this stage an in-place forward of a
 * chunk just reduced (EXEC_SEND_EARLY): a 2-rank allreduce through torch
 * was 6 to 20% faster so at 512 KiB and 1 MiB, 4 to 9% slower at 2 and
 * 4 MiB (docs/PERFORMANCE.md, "Sends through the slots below 32 MiB"). */
#define EXEC_EARLY_FORWARD_MAX ((size_t)2 << 20)

/* EXEC_SEND_EARLY's sends go through the transport's buffers below the
 * large calls too, where the host's ranks have a CPU each; an in-place
 * forward only in a call below EXEC_EARLY_FORWARD_MAX. */
static int early_stage(const braid_comm *c, const xop *x, const xchan *h,
                       unsigned f) {
  return (f & EXEC_SEND_EARLY) && c->wait.nlocal > 0 &&
         c->wait.nlocal <= c->wait.ncpus &&
         (h->sc->steps[h->step].prim != SCHED_P_RECV_REDUCE_SEND ||
          x->op->count * x->esize < EXEC_EARLY_FORWARD_MAX);
}

/* Whether the send of this step goes through the transport's buffers
 * (EXEC_SEND_STAGE, in a large call or early). */
static int staged(const braid_comm *c, const xop *x, const xchan *h,
                  unsigned f) {
  return (f & EXEC_SEND_STAGE) && (x->large || early_stage(c, x, h, f));
}

static int do_send(braid_comm *c, const xop *x, xchan *h, int peer,
                   const char *p, size_t len) {
  unsigned f = h->smap != NULL ? h->smap[h->step] : 0u;
  int r = pend_room(c, h);
  if (r != BRAID_SUCCESS)
    return r;
  tp_conn *conn = x_conn(c, x, h, peer);
  const tp_ops *ops = x_ops(c, x, h, peer);
  uint64_t t = 0;
  if ((f & EXEC_SEND_VOLATILE) && ops->isend_copy != NULL)
    r = ops->isend_copy(conn, p, len, &t);
  else if (ops->isend_staged != NULL && staged(c, x, h, f))
    r = ops->isend_staged(conn, p, len, &t);
  else if ((f & EXEC_SEND_SHARE) && ops->isend_shared != NULL)
    r = ops->isend_shared(conn, p, len, &t);
  else
    r = ops->isend(conn, p, len, &t);
  if (r == TP_AGAIN) {
    h->wait_conn = conn;
    h->wait_events = POLLOUT;
    h->wait_peer = peer;
    return r;
  }
  if (r != BRAID_SUCCESS)
    return r;
  h->pend[h->npend++] = (pend){conn, ops, peer, t, p, len};
  return BRAID_SUCCESS;
}

/* Whether the step's dst is an output nobody reads soon: a large
 * out-of-place call's output, on the host. Written there past the cache,
 * a 2-rank allreduce of 32 to 256 MiB was 11 to 17% faster
 * (docs/PERFORMANCE.md, "Out of place: the output written past the
 * cache"). */
static int out_stream(const xop *x, const sched_step *st) {
  return x->large && !x->op->inplace && x->dev < 0 &&
         st->dst.buf == SCHED_BUF_OUT;
}

/* Whether a RECV_REDUCE_SEND into such an output sends its reduction on as
 * it is made (tp_ops.recv_reduce_fwd): where the send would be staged and
 * both peers are on one transport that can. */
static int fused(braid_comm *c, const xop *x, const xchan *h,
                 const sched_step *st) {
  if (st->prim != SCHED_P_RECV_REDUCE_SEND || !out_stream(x, st))
    return 0;
  unsigned f = h->smap != NULL ? h->smap[h->step] : 0u;
  const tp_ops *ops = x_ops(c, x, h, st->peer);
  return ops->recv_reduce_fwd != NULL && ops == x_ops(c, x, h, st->peer_out) &&
         staged(c, x, h, f);
}

/* The fused receive of chan_advance: the forward's ticket joins the
 * channel's pending sends (h->forwarded), or the step sends dst itself. */
static int recv_reduce_fwd(braid_comm *c, const xop *x, xchan *h, tp_conn *conn,
                           const char *src, char *dst, size_t len) {
  const sched_step *st = &h->sc->steps[h->step];
  int r = pend_room(c, h);
  if (r != BRAID_SUCCESS)
    return r;
  tp_conn *out = x_conn(c, x, h, st->peer_out);
  const tp_ops *ops = x_ops(c, x, h, st->peer);
  uint64_t t = 0;
  r = ops->recv_reduce_fwd(conn, src, dst, len, &x->red.base, out, &t);
  if (r == BRAID_SUCCESS && t != 0) {
    h->pend[h->npend++] = (pend){out, ops, st->peer_out, t, dst, len};
    h->forwarded = 1;
  }
  return r;
}

/* ---- one channel ------------------------------------------------------- */

/* A step failed with r: a transport's failure (its message recorded) when
 * it moved data with a peer, else the device's or the executor's own. */
static int chan_error(braid_comm *c, const xop *x, const xchan *h, int peer,
                      int r) {
  const char *why = "";
  const sched_step *st = &h->sc->steps[h->step];
  int local = st->prim == SCHED_P_COPY || st->prim == SCHED_P_REDUCE;
  char what[sizeof c->last_error];
  snprintf(what, sizeof what,
           "%s #%llu on rank %d: channel %d step %d (%s, peer %d)", x->op->name,
           (unsigned long long)x->op->seq, c->rank, h->ch, h->step,
           sched_prim_name((sched_prim)st->prim), peer);
  if (local && x->dev >= 0)
    why = cudev_error();
  else if (peer >= 0 && peer < c->nranks && x_ops(c, x, h, peer) != NULL)
    return exec_tp_fail(c, r, "%s", what);
  return comm_fail(c, (braid_result)r, "%s: %s", what,
                   why[0] ? why : braid_result_string((braid_result)r));
}

/* Advance as far as possible. Returns BRAID_SUCCESS (check h->done) or an
 * error; *moved is set when anything happened. */
static int chan_advance(braid_comm *c, xop *x, xchan *h, int *moved) {
  const sched_channel *sc = h->sc;
  for (;;) {
    if (h->slice >= h->nslices) {
      while (h->npend > 0) {
        int r = retire(c, h, h->npend - 1);
        if (r == TP_AGAIN)
          return BRAID_SUCCESS;
        if (r != BRAID_SUCCESS)
          return chan_error(c, x, h, -1, r);
      }
      h->done = 1;
      *moved = 1;
      return BRAID_SUCCESS;
    }
    if (h->step >= sc->nsteps) {
      h->step = 0;
      h->slice++;
      continue;
    }
    const sched_step *st = &sc->steps[h->step];
    uint32_t n = st->src.buf != SCHED_BUF_NONE ? st->src.count : st->dst.count;
    if (h->sub >= n) {
      h->sub = 0;
      h->phase = 0;
      h->step++;
      continue;
    }
    size_t len = 0, len2 = 0;
    char *src = st->src.buf != SCHED_BUF_NONE
                    ? cptr(x, h, st->src, h->sub, &len)
                    : NULL;
    char *dst = st->dst.buf != SCHED_BUF_NONE
                    ? cptr(x, h, st->dst, h->sub, &len2)
                    : NULL;
    if (src == NULL)
      len = len2;
    if (len == 0) {
      h->sub++;
      continue;
    }
    int r = BRAID_SUCCESS;
    int peer = st->peer;
    int local = st->prim == SCHED_P_COPY || st->prim == SCHED_P_REDUCE;
    if (x->dev >= 0 && !local && x_ops(c, x, h, peer) == NULL)
      return chan_error(c, x, h, peer, BRAID_ERR_INTERNAL); /* no device tp */
    switch ((sched_prim)st->prim) {
    case SCHED_P_SEND:
      r = do_send(c, x, h, peer, src, len);
      break;
    case SCHED_P_RECV:
    case SCHED_P_RECV_COPY_SEND:
      if (h->phase == 0) {
        r = hazard(c, h, dst, len);
        if (r == BRAID_SUCCESS) {
          tp_conn *conn = x_conn(c, x, h, peer);
          const tp_ops *ops = x_ops(c, x, h, peer);
          if (st->prim == SCHED_P_RECV && ops->recv_stream != NULL &&
              out_stream(x, st))
            r = ops->recv_stream(conn, dst, len);
          else
            r = ops->recv(conn, dst, len);
          if (r == TP_AGAIN) {
            h->wait_conn = conn;
            h->wait_events = POLLIN;
            h->wait_peer = peer;
          }
        }
        if (r == BRAID_SUCCESS && st->prim == SCHED_P_RECV_COPY_SEND) {
          h->phase = 1;
          *moved = 1;
        }
      }
      if (h->phase == 1 && r == BRAID_SUCCESS) {
        peer = st->peer_out;
        r = do_send(c, x, h, peer, dst, len);
      }
      break;
    case SCHED_P_RECV_REDUCE:
    case SCHED_P_RECV_REDUCE_SEND:
    case SCHED_P_RECV_REDUCE_REV:
      if (h->phase == 0) {
        r = hazard(c, h, dst, len);
        if (r == BRAID_SUCCESS) {
          tp_conn *conn = x_conn(c, x, h, peer);
          const tp_dev_reducer *red =
              st->prim == SCHED_P_RECV_REDUCE_REV ? &x->red_rev : &x->red;
          if (fused(c, x, h, st))
            r = recv_reduce_fwd(c, x, h, conn, src, dst, len);
          else
            r = x_ops(c, x, h, peer)
                    ->recv_reduce(conn, src, dst, len, &red->base);
          if (r == TP_AGAIN) {
            h->wait_conn = conn;
            h->wait_events = POLLIN;
            h->wait_peer = peer;
          }
        }
        if (r == BRAID_SUCCESS && st->prim == SCHED_P_RECV_REDUCE_SEND &&
            !h->forwarded) {
          h->phase = 1;
          *moved = 1;
        }
        h->forwarded = 0;
      }
      if (h->phase == 1 && r == BRAID_SUCCESS) {
        peer = st->peer_out;
        r = do_send(c, x, h, peer, dst, len);
      }
      break;
    case SCHED_P_COPY:
      if (dst == NULL || src == NULL) {
        r = BRAID_ERR_INTERNAL;
        break;
      }
      if (dst == src) /* in place: nothing to do */
        break;
      r = hazard(c, h, dst, len);
      if (r == BRAID_SUCCESS && x->dev >= 0)
        r = exec_dev_copy(c, x, dst, src, len);
      else if (r == BRAID_SUCCESS)
        memmove(dst, src, len);
      break;
    case SCHED_P_REDUCE:
      r = hazard(c, h, dst, len);
      if (r == BRAID_SUCCESS && x->dev >= 0)
        r = exec_dev_reduce(c, x, dst, src, len);
      else if (r == BRAID_SUCCESS)
        x->red.base.fn(dst, dst, src, len / x->esize);
      break;
    default:
      r = BRAID_ERR_INTERNAL;
    }
    if (r == TP_AGAIN)
      return BRAID_SUCCESS;
    if (r != BRAID_SUCCESS)
      return chan_error(c, x, h, peer, r);
    *moved = 1;
    h->phase = 0;
    h->sub++;
  }
}

/* ---- preparing an op --------------------------------------------------- */

static void chan_init(braid_comm *c, xop *x, xchan *h, const sched_channel *sc,
                      int ch, int tch, int route, double w_lo, double w_hi) {
  memset(h, 0, offsetof(xchan, pend));
  h->sc = sc;
  h->ch = ch;
  h->tch = tch;
  h->route = route;
  h->w_lo = w_lo;
  h->w_hi = w_hi;
  h->wait_peer = -1;
  size_t maxpart = 0;
  int whole = w_lo == 0.0 && w_hi >= 1.0;
  if (whole) /* the longest chunk: E / K rounded up */
    maxpart = x->K == 1 ? x->E : (x->E + (size_t)x->K - 1) / (size_t)x->K;
  for (int j = 0; !whole && j < x->K; j++) {
    size_t lo, hi;
    part_range(x, h, j, &lo, &hi);
    if (hi - lo > maxpart)
      maxpart = hi - lo;
  }
  size_t bytes = maxpart * x->esize;
  size_t slice = x->dev >= 0 ? comm_dev_slice(c, route) : c->slice_bytes;
  h->nslices = bytes == 0 ? 1 : (int64_t)((bytes + slice - 1) / slice);
  if (sc->nsteps == 0)
    h->nslices = 0;
  h->whole = whole && h->nslices == 1;
}

/* Readies the device connection to peer on a channel (tp_ops.prepare). */
static braid_result prepare_conn(braid_comm *c, const exec_op *op, int peer,
                                 int channel, int route) {
  const tp_ops *o = comm_dev_ops(c, peer, route);
  if (peer < 0 || peer == c->rank || o == NULL || o->prepare == NULL)
    return BRAID_SUCCESS;
  tp_conn *k = comm_dev_conn(c, peer, channel, route);
  if (k == NULL)
    return comm_fail(c, BRAID_ERR_INTERNAL,
                     "%s #%llu on rank %d: no device connection", op->name,
                     (unsigned long long)op->seq, c->rank);
  int r = o->prepare(k);
  if (r != BRAID_SUCCESS)
    return exec_tp_fail(c, r, "%s #%llu on rank %d", op->name,
                        (unsigned long long)op->seq, c->rank);
  return BRAID_SUCCESS;
}

braid_result exec_dev_prepare_conns(braid_comm *c, exec_op *op) {
  if (op->dev < 0 || op->is_barrier || c->dev == NULL)
    return BRAID_SUCCESS;
  if (op->coll == SCHED_SEND || op->coll == SCHED_RECV) /* as xop_prepare */
    return prepare_conn(c, op, op->root, c->nchannels, SCHED_ROUTE_ANY);
  sched_cache_entry *e = NULL;
  CHECKR(exec_get_sched(c, op, &e));
  const sched *s = e->s;
  for (int ch = 0; ch < s->nchannels; ch++) {
    const sched_channel *sc = sched_chan_c(s, c->rank, ch);
    int route = s->route != NULL ? s->route[ch] : SCHED_ROUTE_ANY;
    for (int i = 0; i < sc->nsteps; i++) {
      CHECKR(prepare_conn(c, op, sc->steps[i].peer, ch, route));
      CHECKR(prepare_conn(c, op, sc->steps[i].peer_out, ch, route));
    }
  }
  return BRAID_SUCCESS;
}

/* part: this op's scratch when the caller laid out scratch for several ops
 * (scratch_layout); NULL: the op reserves the communicator's own. */
static braid_result xop_prepare(braid_comm *c, xop *x, exec_op *op,
                                xchan *chans, void *part) {
  memset(x, 0, sizeof *x);
  x->chans = chans;
  x->op = op;
  x->esize = braid_dtype_size(op->dt);
  x->E = op->count;
  x->dev = op->is_barrier ? -1 : op->dev;
  size_t cma_max = cfg_get()->cma_max;
  x->large = cma_max > 0 && op->count * x->esize >= cma_max;
  x->red.base.fn = red_get(op->dt, op->op);
  x->red.base.elem_size = x->esize;
  x->red.dt = op->dt;
  x->red.op = op->op;
  x->red.dev_stream = x->dev >= 0 ? c->dev->stream : NULL;
  x->red_rev = x->red;
  x->red_rev.base.fn = red_get_rev(op->dt, op->op);
  x->red_rev.rev = 1;
  x->bufs[SCHED_BUF_IN] = (char *)op->in; /* never written when const */
  x->bufs[SCHED_BUF_OUT] = (char *)op->out;
  if (op->is_barrier) {
    x->bufs[SCHED_BUF_IN] = (char *)&op->barrier_byte[0];
    x->bufs[SCHED_BUF_OUT] = (char *)&op->barrier_byte[1];
  }
  if (op->is_count) {
    x->bufs[SCHED_BUF_IN] = (char *)&op->count_msg;
    x->bufs[SCHED_BUF_OUT] = (char *)&op->count_msg;
  }
  if (op->coll == SCHED_SEND || op->coll == SCHED_RECV) {
    x->is_p2p = 1;
    x->K = 1;
    x->me = c->rank;
    x->p2p_step = (sched_step){
        op->coll == SCHED_SEND ? SCHED_P_SEND : SCHED_P_RECV, op->root, -1,
        op->coll == SCHED_SEND ? sched_ck(SCHED_BUF_IN, 0, 1)
                               : sched_ck(SCHED_BUF_NONE, 0, 0),
        op->coll == SCHED_RECV ? sched_ck(SCHED_BUF_OUT, 0, 1)
                               : sched_ck(SCHED_BUF_NONE, 0, 0)};
    x->p2p = (sched_channel){&x->p2p_step, 1, 1};
    x->nch = 1;
    chan_init(c, x, &x->chans[0], &x->p2p, 0, c->nchannels, SCHED_ROUTE_ANY,
              0.0, 1.0);
    return BRAID_SUCCESS;
  }
  sched_cache_entry *e = NULL;
  CHECKR(exec_get_sched(c, op, &e));
  x->s = e->s;
  const sched *s = x->s;
  const uint8_t *smap = exec_send_map(e, op, c->rank);
  x->K = s->chunks_per_block;
  x->me = c->rank;
  if (s->scratch_blocks > 0 && part != NULL) {
    x->bufs[SCHED_BUF_SCRATCH] = part;
  } else if (s->scratch_blocks > 0) {
    size_t bytes =
        (size_t)s->scratch_blocks * op->count * braid_dtype_size(op->dt);
    if (x->dev >= 0) {
      void *p = NULL;
      CHECKR(comm_dev_scratch(c, bytes, &p));
      x->bufs[SCHED_BUF_SCRATCH] = p;
    } else {
      CHECKR(exec_scratch_reserve(c, bytes));
      x->bufs[SCHED_BUF_SCRATCH] = c->scratch;
    }
  }
  x->nch = s->nchannels;
  double w = 0.0;
  for (int ch = 0; ch < x->nch; ch++) {
    double wn = ch == x->nch - 1 ? 1.0 : w + s->weights[ch];
    const sched_channel *sc = sched_chan_c(s, x->me, ch);
    chan_init(c, x, &x->chans[ch], sc, ch, ch,
              s->route != NULL ? s->route[ch] : SCHED_ROUTE_ANY, w, wn);
    x->chans[ch].smap = smap;
    if (smap != NULL)
      smap += sc->nsteps;
    w = wn;
  }
  return BRAID_SUCCESS;
}

/* ---- a repeated small call --------------------------------------------- */

/* The op fields xop_prepare reads: a call equal in all of them prepares
 * to the same state, while the schedule cache keeps what it made. */
typedef struct prep_key {
  const void *in;
  void *out;
  size_t count;
  int coll, dt, op, root, inplace;
} prep_key;

/* The last prepared call that qualifies (prep_keep), and its channels'
 * states up to their pending sends (XCHAN_HEAD bytes each). */
struct exec_prep {
  prep_key key;
  uint64_t gen;   /* c->cache_gen when it was kept */
  size_t scratch; /* bytes of the communicator's scratch it takes */
  exec_fast fast; /* its small-call path (src/exec_fast.c), if it has one */
  xop x;
  char chans[];
};

#define XCHAN_HEAD offsetof(xchan, pend)

/* A barrier's bytes live in its op (xop_prepare): their address is its
 * key, so that a kept barrier is taken only by an op at the same place,
 * whose bytes the kept state then points at. */
static prep_key key_of(const exec_op *op) {
  const void *in = op->is_barrier ? &op->barrier_byte[0] : op->in;
  void *out = op->is_barrier ? (void *)&op->barrier_byte[1] : op->out;
  return (prep_key){in,          out,         op->count, (int)op->coll,
                    (int)op->dt, (int)op->op, op->root,  op->inplace};
}

static int same_key(const prep_key *a, const prep_key *b) {
  return a->in == b->in && a->out == b->out && a->count == b->count &&
         a->coll == b->coll && a->dt == b->dt && a->op == b->op &&
         a->root == b->root && a->inplace == b->inplace;
}

/* Host collectives (and barriers, keyed by where their op is: key_of)
 * that need no pre-multiplied copy. */
static int preparable(const exec_op *op) {
  return !op->is_count && op->dev < 0 && op->premul == NULL &&
         op->coll != SCHED_SEND && op->coll != SCHED_RECV;
}

/* The kept call when op repeats it, else NULL. */
static const struct exec_prep *prep_of(const braid_comm *c, const exec_op *op) {
  const struct exec_prep *p = c->prep;
  if (p == NULL || p->gen != c->cache_gen || !preparable(op))
    return NULL;
  prep_key k = key_of(op);
  return same_key(&k, &p->key) ? p : NULL;
}

/* 1, with x and chans prepared, when op repeats the kept call. */
static int prep_take(braid_comm *c, xop *x, exec_op *op, xchan *chans) {
  const struct exec_prep *p = prep_of(c, op);
  if (p == NULL)
    return 0;
  /* the scratch may have moved since (grown for a larger call) */
  if (p->scratch > 0 && exec_scratch_reserve(c, p->scratch) != BRAID_SUCCESS)
    return 0; /* xop_prepare meets the same and says so */
  *x = p->x;
  x->op = op;
  x->chans = chans;
  if (p->scratch > 0)
    x->bufs[SCHED_BUF_SCRATCH] = c->scratch;
  for (int i = 0; i < x->nch; i++)
    memcpy(&chans[i], p->chans + (size_t)i * XCHAN_HEAD, XCHAN_HEAD);
  return 1;
}

/* Keeps a just prepared call for its repeats: small ones only (every
 * channel one slice of its whole range). */
static void prep_keep(braid_comm *c, const xop *x, const exec_op *op) {
  if (!preparable(op) || x->s == NULL)
    return;
  for (int i = 0; i < x->nch; i++)
    if (!x->chans[i].whole)
      return;
  if (c->prep == NULL &&
      (c->prep = malloc(sizeof *c->prep + (size_t)c->nchannels * XCHAN_HEAD)) ==
          NULL)
    return;
  struct exec_prep *p = c->prep;
  p->key = key_of(op);
  p->gen = c->cache_gen;
  p->scratch = (size_t)x->s->scratch_blocks * op->count * x->esize;
  p->x = *x;
  for (int i = 0; i < x->nch; i++)
    memcpy(p->chans + (size_t)i * XCHAN_HEAD, &x->chans[i], XCHAN_HEAD);
  if (cfg_get()->fast_path)
    exec_fast_compile(c, x, &p->fast);
  else
    p->fast.n = 0;
}

int exec_prep_fresh(const braid_comm *c) {
  return c->prep != NULL && c->prep->gen == c->cache_gen;
}

static int xop_finish(braid_comm *c, xop *x) {
  exec_op *op = x->op;
  int r = BRAID_SUCCESS;
  if (op->is_count && op->coll == SCHED_RECV &&
      op->count_msg != op->count_want) {
    /* every rank is told, as of a collective's mismatch: the sender, and
     * any rank waiting on one of them, fail now rather than at a timeout */
    tp_mismatch m = {c->rank, op->root, tp_fp_a2av_count(op->count_msg),
                     tp_fp_a2av_count(op->count_want)};
    check_tell_mismatch(c, &m);
    return comm_fail(
        c, BRAID_ERR_MISMATCH,
        "%s: rank %d sends %llu elements to rank %d, which expects "
        "%llu (recvcounts[%d] must equal rank %d's sendcounts[%d])",
        op->name, op->root, (unsigned long long)op->count_msg, c->rank,
        (unsigned long long)op->count_want, op->root, op->root, c->rank);
  }
  if (op->op == BRAID_AVG && x->E > 0) {
    int div = 0;
    if (op->coll == SCHED_ALLREDUCE || op->coll == SCHED_REDUCE_SCATTER ||
        (op->coll == SCHED_REDUCE && c->rank == op->root))
      div = 1;
    if (div && x->dev >= 0)
      r = exec_dev_div(c, x);
    else if (div)
      red_div(op->out, x->E, op->dt, c->nranks);
  }
  /* bool results are 0 or 1: with one rank a reduction is a copy, which
   * no kernel normalised (with more, every element went through one) */
  if (op->dt == BRAID_BOOL && c->nranks == 1 && x->E > 0 && x->dev < 0 &&
      (op->coll == SCHED_ALLREDUCE || op->coll == SCHED_REDUCE_SCATTER ||
       op->coll == SCHED_REDUCE))
    red_bool_norm(op->out, x->E);
  x->done = 1;
  return r;
}

/* ---- running ----------------------------------------------------------- */

static int p2p_blocked(xop *xs, int k) {
  /* messages to one peer go out in issue order: only the oldest unfinished
   * send (or recv) per peer runs at once */
  for (int i = 0; i < k; i++)
    if (!xs[i].done && xs[i].is_p2p && xs[i].op->coll == xs[k].op->coll &&
        xs[i].op->root == xs[k].op->root)
      return 1;
  return 0;
}

static braid_result loop_from(braid_comm *c, exec_op *ops, int nops, int done);

braid_result exec_run(braid_comm *c, exec_op *ops, int nops) {
  /* only a kept call with a list is looked up here: any other repeat is
   * found once, by prep_take */
  const struct exec_prep *p =
      nops == 1 && c->prep != NULL && c->prep->fast.n > 0 ? prep_of(c, ops)
                                                          : NULL;
  int k = 0;
  if (p != NULL) {
    c->fast_tried++;
    k = exec_fast_run(c, ops, &p->fast);
  }
  if (k > 0 && k == p->fast.n) {
    flight_fast(c, ops);
    c->fast_calls++;
    return BRAID_SUCCESS;
  }
  if (k > 0) { /* the loop goes on from the receive that found nothing */
    c->fast_resumed++;
    flight_started(c, ops);
    braid_result r = loop_from(c, ops, 1, k);
    flight_done(c, ops, r);
    return r;
  }
  int dev = 0, pm = 0;
  for (int k = 0; k < nops; k++) {
    flight_started(c, &ops[k]);
    dev |= ops[k].dev >= 0 && !ops[k].is_barrier;
    pm |= ops[k].premul != NULL;
  }
  /* a pre-multiplied sum reads a copy of its input times the scalar */
  const void *stack_saved[4], **saved = stack_saved;
  braid_result r = BRAID_SUCCESS;
  if (pm && nops > 4 && (saved = calloc((size_t)nops, sizeof *saved)) == NULL)
    return BRAID_ERR_NOMEM;
  if (pm)
    r = premul_begin(c, ops, nops, saved);
  if (r == BRAID_SUCCESS)
    r = dev ? exec_dev_run(c, ops, nops) : exec_loop(c, ops, nops);
  if (pm)
    premul_end(ops, nops, saved);
  if (saved != stack_saved)
    free(saved);
  for (int k = 0; k < nops; k++)
    flight_done(c, &ops[k], r);
  return r;
}

braid_result exec_loop(braid_comm *c, exec_op *ops, int nops) {
  return loop_from(c, ops, nops, 0);
}

/* exec_loop, for one repeated op after the first `done` actions of its
 * small-call path (0: from the start). */
static braid_result loop_from(braid_comm *c, exec_op *ops, int nops, int done) {
  exec_waiter w = {.noted_tp = -1, .cycle_peer = -1};
  xop stackx[4];
  xop *xs = nops <= 4 ? stackx : calloc((size_t)nops, sizeof *xs);
  if (xs == NULL)
    return BRAID_ERR_NOMEM;
  braid_result res = BRAID_SUCCESS;
  /* every op gets room for the comm's channel count from a reused pool */
  size_t need = (size_t)nops * (size_t)c->nchannels * sizeof(xchan);
  if (need > c->xpool_cap) {
    void *p = realloc(c->xpool, need);
    if (p == NULL) {
      res = BRAID_ERR_NOMEM;
      goto out;
    }
    c->xpool = p;
    c->xpool_cap = need;
  }
  void *stack_parts[4], **parts = NULL;
  if (nops > 1) { /* a group: every op's scratch apart, laid out at once */
    parts = nops <= 4 ? stack_parts : calloc((size_t)nops, sizeof *parts);
    res = parts == NULL ? BRAID_ERR_NOMEM
                        : exec_scratch_layout(c, ops, nops, parts);
  }
  for (int k = 0; k < nops && res == BRAID_SUCCESS; k++) {
    xchan *chans = (xchan *)c->xpool + (size_t)k * (size_t)c->nchannels;
    if (nops == 1 && prep_take(c, &xs[k], &ops[k], chans)) {
      if (done > 0)
        exec_fast_resume(&c->prep->fast, done, chans);
      continue; /* the last call again: no schedule set-up */
    }
    if (done > 0) { /* cannot be: exec_run found it kept a moment ago */
      res = comm_fail(c, BRAID_ERR_INTERNAL,
                      "%s: the small-call path stopped after %d actions and "
                      "the call's prepared state is gone",
                      ops[k].name, done);
      break;
    }
    res = xop_prepare(c, &xs[k], &ops[k], chans, parts ? parts[k] : NULL);
    if (res == BRAID_SUCCESS && nops == 1)
      prep_keep(c, &xs[k], &ops[k]);
  }
  if (parts != stack_parts)
    free(parts);
  if (res != BRAID_SUCCESS)
    goto out;
  exec_wait_note_cpu(c);
  uint32_t seen[COMM_MAX_TRANSPORTS] = {0};
  for (;;) {
    for (int i = 0; i < c->ntp; i++)
      if (c->tp[i]->bell_read != NULL)
        seen[i] = c->tp[i]->bell_read(c->tp_state[i]);
    int moved = 0, pending = 0, coll_active = 0;
    for (int k = 0; k < nops; k++) {
      xop *x = &xs[k];
      if (x->done)
        continue;
      pending = 1;
      if (!x->is_p2p) {
        if (coll_active) /* collectives of a group run one at a time */
          continue;
        coll_active = 1;
        if (!x->fp_set) { /* its messages carry it, and expect it */
          x->fp_set = 1;
          x->fp = x->op->fp ? x->op->fp : check_call_fp(x->op);
          if (x->dev < 0)
            exec_set_fp(c, x->fp);
        }
      } else if (p2p_blocked(xs, k)) {
        continue;
      }
      int all = 1;
      for (int i = 0; i < x->nch; i++) {
        xchan *h = &x->chans[i];
        if (h->done)
          continue;
        int r = chan_advance(c, x, h, &moved);
        if (r != BRAID_SUCCESS) {
          res = exec_remote_cause(c, xs, nops, (braid_result)r);
          goto out;
        }
        all &= h->done;
      }
      if (all) {
        res = (braid_result)xop_finish(c, x);
        if (res != BRAID_SUCCESS)
          goto out;
        moved = 1;
      }
    }
    if (!pending) {
      /* copies a transport still holds (isend_copy) must reach the wire
       * before the call returns: a peer may wait for them */
      int r = exec_flush(c, xs, nops);
      if (r != BRAID_SUCCESS && r != TP_AGAIN) {
        res = (braid_result)r;
        goto out;
      }
      if (r == BRAID_SUCCESS)
        break;
    }
    if (moved) {
      if (w.idle_since != 0)
        exec_wait_end(c, &w);
      w.idle_since = 0;
      w.sleeps = 0;
      if (w.noted_tp >= 0)
        exec_wait_done(c, &w);
      continue;
    }
    res = exec_wait_pass(c, xs, nops, &w, seen);
    if (res != BRAID_SUCCESS)
      goto out;
  }
out:
  if (w.noted_tp >= 0)
    exec_wait_done(c, &w);
  if (xs != stackx)
    free(xs);
  return res;
}
