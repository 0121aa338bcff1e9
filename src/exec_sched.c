/*
 * The executor's preparation of an op: the schedule it runs (asked of the
 * planner, collectives/plan.c, and cached per communicator), which of its
 * sends read chunks that a later step overwrites, and the scratch it takes,
 * laid out at once for the ops of a group.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/plan.h"
#include "device/cuda_dev.h"
#include "src/exec_int.h"
#include "src/exec_plan.h"
#include "src/log.h"

/* The planner's size: bytes of one block (count x datatype size). */
static size_t coll_bytes(const exec_op *op) {
  return op->count * braid_dtype_size(op->dt);
}

static void entry_free(sched_cache_entry *e) {
  if (!e->borrowed)
    sched_free(e->s);
  free(e->send_map[0]);
  free(e->send_map[1]);
}

braid_result exec_get_sched(braid_comm *c, exec_op *op,
                            sched_cache_entry **out) {
  exec_plan pl;
  braid_result r = exec_plan_sched(c, op, &pl);
  if (r != BRAID_SUCCESS)
    return r;
  sched *fs = pl.file;
  const sched_view *view = pl.view;
  int nch = pl.nchannels;
  int root = op->root;
  const void *key = fs ? (const void *)fs : (const void *)pl.gen;
  for (int i = 0; i < c->ncache; i++) {
    sched_cache_entry *e = &c->cache[i];
    if (e->coll == op->coll && e->root == root && e->key == key &&
        e->view == view && e->nchannels == nch) {
      *out = e;
      return BRAID_SUCCESS;
    }
  }
  sched *s = fs;
  if (s == NULL) {
    plan_request rq;
    comm_plan_request(c, op->coll, op->root, coll_bytes(op), view, &rq);
    gen_params p = plan_params(&rq);
    r = gen_build(pl.gen, &p, &s);
    if (r != BRAID_SUCCESS) /* a refusal is the call's bad argument */
      return comm_fail(c, r == BRAID_ERR_NOMEM ? r : BRAID_ERR_INVALID_ARG,
                       "%s: algorithm %s cannot run this call: %s", op->name,
                       pl.gen->name, err_why(r));
  }
  if (s->nchannels > c->nchannels) {
    braid_result r =
        comm_fail(c, BRAID_ERR_INTERNAL,
                  "%s: generator %s made %d channels, the comm has %d",
                  op->name, s->algo, s->nchannels, c->nchannels);
    sched_free(s);
    return r;
  }
  if (log_level_now >= LOG_TRACE) { /* once per schedule made */
    const char *why = pl.why;
    plan_path path =
        op->dev < 0 ? PLAN_PATH_HOST : exec_plan_path(c, op, 0, &why);
    TRACE(LOG_SCHED,
          "%s on %d ranks: algorithm %s%s, %d channels; plan: path %s (%s), "
          "%s, %zu bytes per block",
          op->name, c->nranks, fs ? "from BRAID_SCHEDULE_FILE: " : "", s->algo,
          s->nchannels, plan_path_name(path), why, pl.gen_why, coll_bytes(op));
  }
  if (c->ncache == COMM_SCHED_CACHE) { /* evict the oldest */
    entry_free(&c->cache[0]);
    memmove(&c->cache[0], &c->cache[1],
            sizeof c->cache[0] * (COMM_SCHED_CACHE - 1));
    c->ncache--;
    c->cache_gen++;
  }
  c->cache[c->ncache] = (sched_cache_entry){
      op->coll, root, nch, key, view, s, {NULL, NULL}, fs != NULL};
  *out = &c->cache[c->ncache++];
  return BRAID_SUCCESS;
}

void exec_sched_cache_clear(braid_comm *c) {
  for (int i = 0; i < c->ncache; i++)
    entry_free(&c->cache[i]);
  c->ncache = 0;
  c->cache_gen++;
}

braid_result exec_scratch_reserve(braid_comm *c, size_t bytes) {
  if (bytes <= c->scratch_bytes)
    return BRAID_SUCCESS;
  void *p = realloc(c->scratch, bytes);
  if (p == NULL)
    return comm_fail(c, BRAID_ERR_NOMEM, "cannot allocate %zu bytes of scratch",
                     bytes);
  c->scratch = p;
  c->scratch_bytes = bytes;
  return BRAID_SUCCESS;
}

/* Where a chunk really lives: in place, input chunks alias output chunks
 * (NCCL's conventions), so both names map to one key. */
static uint64_t canon(const exec_op *op, int rank, int K, uint8_t buf,
                      uint32_t idx) {
  if (op->inplace && buf == SCHED_BUF_IN) {
    switch (op->coll) {
    case SCHED_ALLREDUCE:
    case SCHED_BROADCAST:
    case SCHED_REDUCE:
    case SCHED_ALLTOALL:
      buf = SCHED_BUF_OUT;
      break;
    case SCHED_ALLGATHER:
    case SCHED_GATHER:
      buf = SCHED_BUF_OUT;
      idx += (uint32_t)((op->coll == SCHED_GATHER ? op->root : rank) * K);
      break;
    default:
      break;
    }
  } else if (op->inplace && buf == SCHED_BUF_OUT &&
             (op->coll == SCHED_REDUCE_SCATTER || op->coll == SCHED_SCATTER)) {
    buf = SCHED_BUF_IN;
    idx += (uint32_t)((op->coll == SCHED_SCATTER ? op->root : rank) * K);
  }
  return (uint64_t)buf << 32 | idx;
}

static int writes(const sched_step *st) {
  return st->prim != SCHED_P_SEND && st->dst.buf != SCHED_BUF_NONE;
}

/* A copy onto itself: in place, a COPY from a chunk of IN to the chunk of
 * OUT it aliases writes nothing (the executor skips it). Counted as a
 * write, it made the root's send of an in-place broadcast "volatile", and
 * so copied through the slots instead of read by its peer directly. */
static int noop_copy(const exec_op *op, int rank, int K, const sched_step *w) {
  if (w->prim != SCHED_P_COPY || w->src.count != w->dst.count)
    return 0;
  for (uint32_t a = 0; a < w->src.count; a++)
    if (canon(op, rank, K, w->src.buf, w->src.index + a) !=
        canon(op, rank, K, w->dst.buf, w->dst.index + a))
      return 0;
  return 1;
}

/* Does a step after `i` overwrite a chunk that step i sends? */
static int is_volatile(const exec_op *op, int rank, int K,
                       const sched_channel *sc, int i) {
  const sched_step *st = &sc->steps[i];
  sched_chunks sent;
  if (st->prim == SCHED_P_SEND)
    sent = st->src;
  else if (st->prim == SCHED_P_RECV_REDUCE_SEND ||
           st->prim == SCHED_P_RECV_COPY_SEND)
    sent = st->dst;
  else
    return 0;
  for (int j = i + 1; j < sc->nsteps; j++) {
    const sched_step *w = &sc->steps[j];
    if (!writes(w) || noop_copy(op, rank, K, w))
      continue;
    for (uint32_t a = 0; a < sent.count; a++)
      for (uint32_t b = 0; b < w->dst.count; b++)
        if (canon(op, rank, K, sent.buf, sent.index + a) ==
            canon(op, rank, K, w->dst.buf, w->dst.index + b))
          return 1;
  }
  return 0;
}

/* The peer a step sends to, or -1. */
static int send_peer(const sched_step *st) {
  if (st->prim == SCHED_P_SEND)
    return st->peer;
  if (st->prim == SCHED_P_RECV_COPY_SEND ||
      st->prim == SCHED_P_RECV_REDUCE_SEND)
    return st->peer_out;
  return -1;
}

/* Does rank's channel copy anything itself besides its sends: a receive,
 * or a local copy or reduction that writes (an in-place no-op copy does
 * not)? */
static int copies_besides_sends(const exec_op *op, int rank, int K,
                                const sched_channel *sc) {
  for (int i = 0; i < sc->nsteps; i++) {
    const sched_step *w = &sc->steps[i];
    if (sched_prim_recvs((sched_prim)w->prim) || w->prim == SCHED_P_REDUCE ||
        (w->prim == SCHED_P_COPY && !noop_copy(op, rank, K, w)))
      return 1;
  }
  return 0;
}

/* Does the peer reduce what step i of rank's channel ch sends it? The n-th
 * step that sends to the peer meets the peer's n-th step that receives
 * from rank on the same channel (the verifier holds schedules to it). */
static int peer_reduces(const sched *s, int rank, int ch, int i) {
  const sched_channel *sc = sched_chan_c(s, rank, ch);
  int peer = send_peer(&sc->steps[i]);
  if (peer < 0 || peer >= s->nranks)
    return 0;
  int n = 0;
  for (int j = 0; j < i; j++)
    n += send_peer(&sc->steps[j]) == peer;
  const sched_channel *pc = sched_chan_c(s, peer, ch);
  for (int j = 0; j < pc->nsteps; j++) {
    const sched_step *w = &pc->steps[j];
    if (!sched_prim_recvs((sched_prim)w->prim) || w->peer != rank)
      continue;
    if (n-- == 0)
      return sched_prim_reduces_msg((sched_prim)w->prim);
  }
  return 0;
}

const uint8_t *exec_send_map(sched_cache_entry *e, const exec_op *op,
                             int rank) {
  int ip = op->inplace ? 1 : 0;
  if (e->send_map[ip] != NULL)
    return e->send_map[ip];
  const sched *s = e->s;
  size_t total = 0;
  for (int ch = 0; ch < s->nchannels; ch++)
    total += (size_t)sched_chan_c(s, rank, ch)->nsteps;
  uint8_t *m = calloc(total + 1, 1);
  if (m == NULL)
    return NULL; /* everything counts as stable; hazards still protect */
  size_t o = 0;
  int K = s->chunks_per_block;
  for (int ch = 0; ch < s->nchannels; ch++) {
    const sched_channel *sc = sched_chan_c(s, rank, ch);
    int alone = !copies_besides_sends(op, rank, K, sc);
    for (int i = 0; i < sc->nsteps; i++) {
      int sends = send_peer(&sc->steps[i]) >= 0;
      int reduced = sends && peer_reduces(s, rank, ch, i);
      /* what a RECV_REDUCE_SEND forwards, it has just written: in this
       * core's cache, from where the copy into the slots costs less than
       * the receiver's read of it from memory */
      int hot = sends && sc->steps[i].prim == SCHED_P_RECV_REDUCE_SEND;
      int stage = sends && (alone || reduced || hot);
      int share = sends && alone && !reduced;
      int early = sends && ((alone && reduced) || (hot && op->inplace));
      m[o++] =
          (uint8_t)((is_volatile(op, rank, K, sc, i) ? EXEC_SEND_VOLATILE : 0) |
                    (stage ? EXEC_SEND_STAGE : 0) |
                    (share ? EXEC_SEND_SHARE : 0) |
                    (early ? EXEC_SEND_EARLY : 0));
    }
  }
  e->send_map[ip] = m;
  return m;
}

braid_result exec_scratch_need(braid_comm *c, exec_op *op, size_t *bytes) {
  *bytes = 0;
  if (op->coll == SCHED_SEND || op->coll == SCHED_RECV || op->is_barrier)
    return BRAID_SUCCESS;
  sched_cache_entry *e = NULL;
  CHECKR(exec_get_sched(c, op, &e));
  *bytes = (size_t)e->s->scratch_blocks * coll_bytes(op);
  return BRAID_SUCCESS;
}

/* Scratch for ops that run together (a group): each its own part, all
 * reserved before any op takes a pointer, since reserving per op would move
 * an earlier op's part (realloc) or hand two ops the same bytes. Host ops'
 * parts in c->scratch, device ops' in the device scratch; part[k] NULL for
 * an op without scratch. */
braid_result exec_scratch_layout(braid_comm *c, exec_op *ops, int nops,
                                 void **part) {
  size_t host = 0, dev = 0;
  for (int k = 0; k < nops; k++) {
    size_t need = 0;
    CHECKR(exec_scratch_need(c, &ops[k], &need));
    int on_dev = ops[k].dev >= 0 && !ops[k].is_barrier;
    size_t *total = on_dev ? &dev : &host;
    /* the offset for now; a pointer once the totals are reserved */
    part[k] = need > 0 ? (void *)(uintptr_t)(*total + 1) : NULL;
    *total += (need + 63) & ~(size_t)63;
  }
  void *dev_base = NULL;
  if (host > 0)
    CHECKR(exec_scratch_reserve(c, host));
  if (dev > 0)
    CHECKR(comm_dev_scratch(c, dev, &dev_base));
  for (int k = 0; k < nops; k++)
    if (part[k] != NULL) {
      int on_dev = ops[k].dev >= 0 && !ops[k].is_barrier;
      part[k] =
          (char *)(on_dev ? dev_base : c->scratch) + ((uintptr_t)part[k] - 1);
    }
  return BRAID_SUCCESS;
}
