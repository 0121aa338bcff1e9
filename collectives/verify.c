/*
 * The verifier: symbolic execution of a schedule (see verify.h).
 *
 * Channels carry disjoint shares of every chunk and have their own
 * connections, so each channel is simulated on its own: all ranks run that
 * channel's steps concurrently, with a FIFO of `slots` messages per
 * (sender, receiver). A chunk holds a set of contributions (rank, input chunk
 * index), kept as a bitset with one bit per (rank, input block) — a chunk
 * only ever holds contributions from input chunks at its own position within
 * a block, since data moves between equal positions only — plus an expression
 * hash that is commutative but not associative: two chunks holding the same
 * set were reduced in the same order (bitwise identical results) only if
 * their hashes match.
 *
 * A fused step (RECV_REDUCE_SEND, RECV_COPY_SEND) handles its chunks one at
 * a time: receive (and reduce), then send; the send may wait for room.
 *
 * Point-to-point schedules name only the calling side: a SEND schedule is
 * checked against a receiver at `root` that takes in[0..K) in order, a RECV
 * schedule against a sender at `root` that sends its in[0..K) in order.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify_int.h"

/* ---- errors ---- */

int verify_fail_at(const char *file, int line, vctx *v, braid_result r,
                   const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  v->rc = err_vat(file, line, r, fmt, ap);
  va_end(ap);
  return -1;
}

static void ck_str(char *b, size_t n, const char *what, sched_chunks r, int k) {
  const char *bn = sched_buf_name((sched_buf)r.buf);
  if (k >= 0)
    snprintf(b, n, "%s %s[%u]", what, bn, r.index + (uint32_t)k);
  else if (r.count == 1)
    snprintf(b, n, "%s %s[%u]", what, bn, r.index);
  else
    snprintf(b, n, "%s %s[%u..%u]", what, bn, r.index, r.index + r.count - 1);
}

/* "SEND to 1, src in[0]" — the chunk k of the step when k >= 0. */
void verify_step_str(char *b, size_t n, const sched_step *st, int k) {
  char s1[48] = "", s2[48] = "";
  sched_prim p = (sched_prim)st->prim;
  if (st->prim >= SCHED_NUM_PRIMS) {
    snprintf(b, n, "primitive %u", st->prim);
    return;
  }
  int has_src = sched_prim_has_src(p);
  int has_dst = p != SCHED_P_SEND;
  if (has_src)
    ck_str(s1, sizeof(s1), ", src", st->src, k);
  if (has_dst)
    ck_str(s2, sizeof(s2), ", dst", st->dst, k);
  switch (p) {
  case SCHED_P_SEND:
    snprintf(b, n, "SEND to %d%s", st->peer, s1);
    break;
  case SCHED_P_RECV:
  case SCHED_P_RECV_REDUCE:
  case SCHED_P_RECV_REDUCE_REV:
    snprintf(b, n, "%s from %d%s%s", sched_prim_name(p), st->peer, s1, s2);
    break;
  case SCHED_P_RECV_REDUCE_SEND:
  case SCHED_P_RECV_COPY_SEND:
    snprintf(b, n, "%s from %d to %d%s%s", sched_prim_name(p), st->peer,
             st->peer_out, s1, s2);
    break;
  default:
    snprintf(b, n, "%s%s%s", sched_prim_name(p), s1 + 1, s2);
    break;
  }
}

/* ---- cells and messages ---- */

static int read_cell(vctx *v, int r, int si, const sched_step *st, int k,
                     sched_chunks ck, int *cell_out) {
  int i = (int)ck.index + k;
  int cell = cell_of(v, r, ck.buf, i);
  char d[160];
  if (!v->written[cell]) {
    verify_step_str(d, sizeof(d), st, k);
    return verify_fail(v, STEPFMT ": reads %s[%d] before anything wrote it", r,
                       v->c, si, d, sched_buf_name((sched_buf)ck.buf), i);
  }
  if (ck.buf == SCHED_BUF_IN && v->wstep[cell] >= 0) {
    /* Aliased with the output (in place) and written since: it must still
     * hold exactly the original input. */
    const uint64_t *b = cbits(v, cell);
    int bit = contrib_bit(v, r, i), ok = 1;
    for (int w = 0; w < v->W && ok; w++) {
      uint64_t want = (w == bit / 64) ? (1ull << (bit % 64)) : 0;
      if (b[w] != want)
        ok = 0;
    }
    if (!ok) {
      verify_step_str(d, sizeof(d), st, k);
      return verify_fail(v,
                         STEPFMT
                         ": reads in[%d], which step %d overwrote through "
                         "the aliased output (in place)",
                         r, v->c, si, d, i, v->wstep[cell]);
    }
  }
  *cell_out = cell;
  return 0;
}

static int msg_alloc(vctx *v) {
  if (v->mfree < 0) {
    int ncap = v->mcap ? v->mcap * 2 : 64;
    vmsg *m = realloc(v->msgs, (size_t)ncap * sizeof(*m));
    if (!m)
      return -1;
    v->msgs = m;
    uint64_t *b =
        realloc(v->mbits, (size_t)ncap * (size_t)v->W * sizeof(uint64_t));
    if (!b)
      return -1;
    v->mbits = b;
    for (int i = ncap - 1; i >= v->mcap; i--) {
      v->msgs[i].next_free = v->mfree;
      v->mfree = i;
    }
    v->mcap = ncap;
  }
  int id = v->mfree;
  v->mfree = v->msgs[id].next_free;
  return id;
}

static void msg_release(vctx *v, int id) {
  v->msgs[id].next_free = v->mfree;
  v->mfree = id;
}

static uint64_t *mb(vctx *v, int id) {
  return v->mbits + (size_t)id * (size_t)v->W;
}

/* Sends cell `cell` (chunk i of buf) from r to peer. 1: sent, 0: full. */
static int push(vctx *v, int r, int si, int peer, int cell, int buf, int i) {
  const sched *s = v->s;
  if (s->coll == SCHED_SEND && peer == s->root) {
    /* The virtual receiver takes in[0..K) in order. */
    vstate *vs = &v->st[r];
    int want = vs->p2p_count, bit = contrib_bit(v, r, want);
    const uint64_t *b = cbits(v, cell);
    const sched_step *st = &sched_chan_c(s, r, v->c)->steps[si];
    char d[160];
    verify_step_str(d, sizeof(d), st, v->st[r].k);
    if (want >= v->K)
      return verify_fail(
          v, STEPFMT ": sends more than the %d chunks of the message", r, v->c,
          si, d, v->K);
    for (int w = 0; w < v->W; w++) {
      uint64_t exp = (w == bit / 64) ? (1ull << (bit % 64)) : 0;
      if (b[w] != exp)
        return verify_fail(v,
                           STEPFMT
                           ": message %d to rank %d should be in[%d] (sent "
                           "in order)",
                           r, v->c, si, d, want, peer, want);
    }
    vs->p2p_count++;
    return 1;
  }
  int qi = qidx(v, r, peer);
  if (v->qlen[qi] >= v->slots)
    return 0;
  int id = msg_alloc(v);
  if (id < 0)
    return verify_fail_r(v, BRAID_ERR_NOMEM, "out of memory");
  memcpy(mb(v, id), cbits(v, cell), (size_t)v->W * sizeof(uint64_t));
  v->msgs[id].j = i % v->K;
  v->msgs[id].hash = v->hash[cell];
  v->msgs[id].from_step = si;
  v->msgs[id].from_chunk = (uint32_t)i;
  v->msgs[id].from_buf = (uint8_t)buf;
  int pos = (v->qhead[qi] + v->qlen[qi]) % v->slots;
  v->q[(size_t)qi * (size_t)v->slots + (size_t)pos] = id;
  v->qlen[qi]++;
  v->nsent[qi]++;
  return 1;
}

/* Takes the next message from peer to r: its id, -2 when none waits, -1 on
 * error. */
static int pop(vctx *v, int r, int si, int peer) {
  const sched *s = v->s;
  if (s->coll == SCHED_RECV && peer == s->root) {
    vstate *vs = &v->st[r];
    if (vs->p2p_count >= v->K) {
      char d[160];
      verify_step_str(d, sizeof(d), &sched_chan_c(s, r, v->c)->steps[si],
                      vs->k);
      return verify_fail(
          v, STEPFMT ": receives more than the %d chunks rank %d sends", r,
          v->c, si, d, v->K, peer);
    }
    int id = msg_alloc(v);
    if (id < 0)
      return verify_fail_r(v, BRAID_ERR_NOMEM, "out of memory");
    memset(mb(v, id), 0, (size_t)v->W * sizeof(uint64_t));
    int bit = contrib_bit(v, peer, vs->p2p_count);
    mb(v, id)[bit / 64] |= 1ull << (bit % 64);
    v->msgs[id].j = vs->p2p_count;
    v->msgs[id].hash = leaf_hash(v, peer, vs->p2p_count);
    v->msgs[id].from_step = vs->p2p_count;
    v->msgs[id].from_chunk = (uint32_t)vs->p2p_count;
    v->msgs[id].from_buf = SCHED_BUF_IN;
    vs->p2p_count++;
    return id;
  }
  int qi = qidx(v, peer, r);
  if (v->qlen[qi] == 0)
    return -2;
  int id = v->q[(size_t)qi * (size_t)v->slots + (size_t)v->qhead[qi]];
  v->qhead[qi] = (v->qhead[qi] + 1) % v->slots;
  v->qlen[qi]--;
  return id;
}

static void write_cell(vctx *v, int cell, const uint64_t *b, uint64_t h,
                       int si) {
  if (b != cbits(v, cell))
    memcpy(cbits(v, cell), b, (size_t)v->W * sizeof(uint64_t));
  v->hash[cell] = h;
  v->written[cell] = 1;
  v->wstep[cell] = si;
}

/* Checks a received message against the destination chunk. */
static int check_msg(vctx *v, int r, int si, const sched_step *st, int k,
                     int id) {
  int dj = (int)((st->dst.index + (uint32_t)k) % (uint32_t)v->K);
  if (!v->msgs || id < 0 || id >= v->mcap)
    return verify_fail_r(v, BRAID_ERR_INTERNAL,
                         "internal error: message %d out of range", id);
  if (v->msgs[id].j != dj) {
    char d[160];
    verify_step_str(d, sizeof(d), st, k);
    return verify_fail(v,
                       STEPFMT
                       ": the message from rank %d (its step %d, %s[%u]) is "
                       "chunk position %d of a block but the destination is "
                       "position %d: sizes differ",
                       r, v->c, si, d, st->peer, v->msgs[id].from_step,
                       sched_buf_name((sched_buf)v->msgs[id].from_buf),
                       v->msgs[id].from_chunk, v->msgs[id].j, dj);
  }
  return 0;
}

/* dst = src (+) m where m is message bits/hash; checks double reduction. */
static int reduce_into(vctx *v, int r, int si, const sched_step *st, int k,
                       int src_cell, const uint64_t *m, uint64_t mh,
                       int dst_cell) {
  const uint64_t *a = cbits(v, src_cell);
  int dup = first_common(v, a, m);
  if (dup >= 0) {
    char d[160], cs[48];
    verify_step_str(d, sizeof(d), st, k);
    contrib_str(v, dup, (int)((st->dst.index + (uint32_t)k) % (uint32_t)v->K),
                cs, sizeof(cs));
    return verify_fail(v, STEPFMT ": contribution %s reduced twice", r, v->c,
                       si, d, cs);
  }
  for (int w = 0; w < v->W; w++)
    v->tmp[w] = a[w] | m[w];
  write_cell(v, dst_cell, v->tmp, hash_combine(v->hash[src_cell], mh), si);
  return 0;
}

/* Advances rank r by one unit: 1 progressed, 0 blocked, -1 error. */
static int advance(vctx *v, int r) {
  const sched_channel *ch = sched_chan_c(v->s, r, v->c);
  vstate *vs = &v->st[r];
  if (vs->pc >= ch->nsteps)
    return 0;
  int si = vs->pc;
  const sched_step *st = &ch->steps[si];
  sched_prim p = (sched_prim)st->prim;
  int k = vs->k, cell = -1, dcell = -1, res;
  switch (p) {
  case SCHED_P_SEND:
    if (read_cell(v, r, si, st, k, st->src, &cell))
      return -1;
    res = push(v, r, si, st->peer, cell, st->src.buf, (int)st->src.index + k);
    if (res <= 0)
      return res;
    break;
  case SCHED_P_COPY:
  case SCHED_P_REDUCE:
    if (read_cell(v, r, si, st, k, st->src, &cell))
      return -1;
    dcell = cell_of(v, r, st->dst.buf, (int)st->dst.index + k);
    if (p == SCHED_P_COPY) {
      write_cell(v, dcell, cbits(v, cell), v->hash[cell], si);
    } else {
      int dd = -1;
      if (read_cell(v, r, si, st, k, st->dst, &dd))
        return -1;
      memcpy(v->tmp + v->W, cbits(v, cell), (size_t)v->W * sizeof(uint64_t));
      if (reduce_into(v, r, si, st, k, dcell, v->tmp + v->W, v->hash[cell],
                      dcell))
        return -1;
    }
    break;
  case SCHED_P_RECV:
  case SCHED_P_RECV_REDUCE:
  case SCHED_P_RECV_REDUCE_SEND:
  case SCHED_P_RECV_COPY_SEND:
  case SCHED_P_RECV_REDUCE_REV:
    dcell = cell_of(v, r, st->dst.buf, (int)st->dst.index + k);
    if (vs->phase == 0) {
      int scell = -1;
      if (sched_prim_reduces_msg(p)) {
        if (read_cell(v, r, si, st, k, st->src, &scell))
          return -1;
      }
      int id = pop(v, r, si, st->peer);
      if (id == -1)
        return -1;
      if (id == -2)
        return 0;
      if (check_msg(v, r, si, st, k, id))
        return -1;
      if (scell >= 0) {
        if (reduce_into(v, r, si, st, k, scell, mb(v, id), v->msgs[id].hash,
                        dcell))
          return -1;
      } else {
        write_cell(v, dcell, mb(v, id), v->msgs[id].hash, si);
      }
      msg_release(v, id);
      if (p == SCHED_P_RECV_REDUCE_SEND || p == SCHED_P_RECV_COPY_SEND) {
        vs->phase = 1;
        return 1;
      }
    } else {
      res = push(v, r, si, st->peer_out, dcell, st->dst.buf,
                 (int)st->dst.index + k);
      if (res <= 0)
        return res;
      vs->phase = 0;
    }
    break;
  default:
    return verify_fail(v, "rank %d channel %d step %d: unknown primitive", r,
                       v->c, si);
  }
  vs->k++;
  uint32_t cnt = (p == SCHED_P_SEND) ? st->src.count : st->dst.count;
  if ((uint32_t)vs->k >= cnt) {
    vs->k = 0;
    vs->pc++;
  }
  return 1;
}

/* ---- driver ---- */

static int run_channel(vctx *v) {
  const sched *s = v->s;
  size_t ncell = (size_t)v->n * (size_t)v->ncells;
  memset(v->bits, 0, ncell * (size_t)v->W * sizeof(uint64_t));
  memset(v->written, 0, ncell);
  for (size_t i = 0; i < ncell; i++) {
    v->wstep[i] = -1;
    v->hash[i] = 0;
  }
  memset(v->qhead, 0, (size_t)v->n * (size_t)v->n * sizeof(int));
  memset(v->qlen, 0, (size_t)v->n * (size_t)v->n * sizeof(int));
  memset(v->nsent, 0, (size_t)v->n * (size_t)v->n * sizeof(int));
  memset(v->st, 0, (size_t)v->n * sizeof(vstate));
  /* Release any message left from the previous channel. */
  v->mfree = -1;
  for (int i = v->mcap - 1; i >= 0; i--) {
    v->msgs[i].next_free = v->mfree;
    v->mfree = i;
  }
  for (int r = 0; r < v->n; r++) {
    if (verify_check_static(v, r))
      return -1;
    if (!sched_uses_in(s->coll, s->root, r))
      continue;
    for (int i = 0; i < v->in_n; i++) {
      int cell = cell_of(v, r, SCHED_BUF_IN, i);
      int bit = contrib_bit(v, r, i);
      set_bit(cbits(v, cell), bit);
      v->hash[cell] = leaf_hash(v, r, i);
      v->written[cell] = 1;
    }
  }
  int progress = 1;
  while (progress) {
    progress = 0;
    for (int r = 0; r < v->n; r++) {
      int res;
      while ((res = advance(v, r)) > 0)
        progress = 1;
      if (res < 0)
        return -1;
    }
  }
  for (int r = 0; r < v->n; r++)
    if (v->st[r].pc < sched_chan_c(s, r, v->c)->nsteps)
      return verify_report_stuck(v);
  return verify_check_final(v);
}

struct verify_ws {
  char *arena; /* the cell, queue and rank arrays of one call */
  size_t cap;
  vmsg *msgs; /* the message pool, as msg_alloc grew it */
  uint64_t *mbits;
  int mcap;
  size_t mbits_n; /* uint64_t words in mbits */
};

verify_ws *verify_ws_new(void) { return calloc(1, sizeof(verify_ws)); }

static void ws_release(verify_ws *w) {
  free(w->arena);
  free(w->msgs);
  free(w->mbits);
}

void verify_ws_free(verify_ws *w) {
  if (w != NULL)
    ws_release(w);
  free(w);
}

/* Carves the call's arrays out of w's arena (run_channel initialises them
 * for every channel) and lends it the message pool. 0, or -1 when out of
 * memory. */
static int ws_take(verify_ws *w, vctx *v, size_t ncell, size_t nq) {
  const size_t sizes[] = {(ncell * (size_t)v->W + 1) *
                              sizeof(uint64_t),           /* bits */
                          (ncell + 1) * sizeof(uint64_t), /* hash */
                          ncell + 1,                      /* written */
                          (ncell + 1) * sizeof(int),      /* wstep */
                          (nq * (size_t)v->slots + 1) * sizeof(int), /* q */
                          (nq + 1) * sizeof(int),                    /* qhead */
                          (nq + 1) * sizeof(int),                    /* qlen */
                          (nq + 1) * sizeof(int),                    /* nsent */
                          ((size_t)v->n + 1) * sizeof(vstate),       /* st */
                          (2 * (size_t)v->W + 1) * sizeof(uint64_t)}; /* tmp */
  enum { NARR = sizeof sizes / sizeof sizes[0] };
  size_t off[NARR], total = 0;
  for (int i = 0; i < NARR; i++) {
    off[i] = total;
    total += (sizes[i] + 63) / 64 * 64;
  }
  if (total > w->cap) {
    free(w->arena);
    w->arena = malloc(total);
    w->cap = w->arena != NULL ? total : 0;
    if (w->arena == NULL)
      return -1;
  }
  char *a = w->arena;
  v->bits = (uint64_t *)(void *)(a + off[0]);
  v->hash = (uint64_t *)(void *)(a + off[1]);
  v->written = (uint8_t *)(a + off[2]);
  v->wstep = (int *)(void *)(a + off[3]);
  v->q = (int *)(void *)(a + off[4]);
  v->qhead = (int *)(void *)(a + off[5]);
  v->qlen = (int *)(void *)(a + off[6]);
  v->nsent = (int *)(void *)(a + off[7]);
  v->st = (vstate *)(void *)(a + off[8]);
  v->tmp = (uint64_t *)(void *)(a + off[9]);
  memset(v->tmp, 0, sizes[9]);
  /* the message pool keeps its slots; their bit sets take W words each */
  size_t need = (size_t)w->mcap * (size_t)v->W;
  if (need > w->mbits_n) {
    uint64_t *b = realloc(w->mbits, need * sizeof(uint64_t));
    if (b == NULL)
      return -1;
    w->mbits = b;
    w->mbits_n = need;
  }
  v->msgs = w->msgs;
  v->mbits = w->mbits;
  v->mcap = w->mcap;
  return 0;
}

/* Takes the message pool back (msg_alloc may have grown it to mcap slots
 * of W words). */
static void ws_give_back(verify_ws *w, const vctx *v) {
  if (v->mcap != w->mcap)
    w->mbits_n = (size_t)v->mcap * (size_t)v->W;
  w->msgs = v->msgs;
  w->mbits = v->mbits;
  w->mcap = v->mcap;
}

braid_result verify_sched(const sched *s, int inplace, int slots) {
  return verify_sched_ws(s, inplace, slots, NULL);
}

braid_result verify_cells(const sched *s, int *in_n, int *out_n, int *scr_n,
                          int *ncells) {
  int64_t k = s->chunks_per_block, n = s->nranks;
  int64_t in = (int64_t)sched_in_blocks(s->coll, s->nranks) * k;
  int64_t out = (int64_t)sched_out_blocks(s->coll, s->nranks) * k;
  int64_t scr = (int64_t)s->scratch_blocks * k;
  int64_t all = in + out + scr;
  if (k < 1 || s->scratch_blocks < 0 || n < 1 || all * n > INT32_MAX)
    return ERR(BRAID_ERR_INVALID_ARG,
               "a schedule of %d ranks with chunks_per_block %d and "
               "scratch_blocks %d has %lld chunks per rank, more than the "
               "verifier counts (%d chunks in all ranks)",
               s->nranks, s->chunks_per_block, s->scratch_blocks,
               (long long)all, INT32_MAX);
  *in_n = (int)in;
  *out_n = (int)out;
  *scr_n = (int)scr;
  *ncells = (int)all;
  return BRAID_SUCCESS;
}

braid_result verify_sched_ws(const sched *s, int inplace, int slots,
                             verify_ws *ws) {
  vctx v;
  memset(&v, 0, sizeof(v));
  if (!s)
    return ERR(BRAID_ERR_INVALID_ARG, "no schedule");
  if ((int)s->coll < 0 || s->coll >= SCHED_NUM_COLLS)
    return ERR(BRAID_ERR_INVALID_ARG, "unknown collective %d", (int)s->coll);
  if (s->nranks < 1 || s->nchannels < 1 || s->chunks_per_block < 1 ||
      s->scratch_blocks < 0 || !s->ch || !s->weights)
    return ERR(BRAID_ERR_INVALID_ARG,
               "malformed schedule: nranks %d, nchannels %d, "
               "chunks_per_block %d, scratch_blocks %d",
               s->nranks, s->nchannels, s->chunks_per_block, s->scratch_blocks);
  if (slots < 1)
    return ERR(BRAID_ERR_INVALID_ARG, "slots must be at least 1 (got %d)",
               slots);
  int rooted = s->coll == SCHED_BROADCAST || s->coll == SCHED_REDUCE ||
               s->coll == SCHED_GATHER || s->coll == SCHED_SCATTER ||
               s->coll == SCHED_SEND || s->coll == SCHED_RECV;
  if (rooted && (s->root < 0 || s->root >= s->nranks))
    return ERR(BRAID_ERR_INVALID_ARG, "%s root %d out of range (nranks %d)",
               sched_coll_name(s->coll), s->root, s->nranks);
  double wsum = 0;
  for (int c = 0; c < s->nchannels; c++) {
    if (!(s->weights[c] >= 0))
      return ERR(BRAID_ERR_INVALID_ARG, "channel %d has a negative weight", c);
    wsum += s->weights[c];
  }
  if (wsum < 0.999999 || wsum > 1.000001)
    return ERR(BRAID_ERR_INVALID_ARG, "channel weights sum to %g, not 1", wsum);

  v.s = s;
  v.n = s->nranks;
  v.K = s->chunks_per_block;
  v.nch = s->nchannels;
  v.slots = slots;
  v.inplace = inplace;
  int ib = sched_in_blocks(s->coll, v.n);
  v.ub = ib > 0 ? ib : 1;
  CHECKR(verify_cells(s, &v.in_n, &v.out_n, &v.scr_n, &v.ncells));
  size_t U = (size_t)v.n * (size_t)v.ub;
  v.W = (int)((U + 63) / 64);
  size_t ncell = (size_t)v.n * (size_t)v.ncells;
  size_t nq = (size_t)v.n * (size_t)v.n;
  verify_ws own;
  memset(&own, 0, sizeof own);
  verify_ws *w = ws != NULL ? ws : &own;
  v.mfree = -1;
  int rc = 0;
  if (ws_take(w, &v, ncell, nq) != 0)
    rc = verify_fail_r(&v, BRAID_ERR_NOMEM,
                       "out of memory verifying a %d-rank schedule", v.n);
  for (int c = 0; c < v.nch && rc == 0; c++) {
    v.c = c;
    rc = run_channel(&v);
  }
  ws_give_back(w, &v);
  if (w == &own)
    ws_release(&own);
  return rc ? v.rc : BRAID_SUCCESS;
}
