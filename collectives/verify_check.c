/*
 * The verifier's checks: static checks of every step before the simulation,
 * the report when the simulation is stuck, and the final semantics of every
 * collective (see verify.c).
 */
#include <stdio.h>
#include <string.h>

#include "verify_int.h"

/* ---- static checks ---- */

static int check_range(vctx *v, int r, int si, const sched_step *st,
                       sched_chunks ck, const char *what) {
  char d[160];
  const sched *s = v->s;
  if (ck.buf == SCHED_BUF_NONE || ck.buf > SCHED_BUF_SCRATCH || ck.count < 1) {
    verify_step_str(d, sizeof(d), st, -1);
    return verify_fail(v, STEPFMT ": %s operand is missing or empty", r, v->c,
                       si, d, what);
  }
  if ((uint64_t)ck.index + ck.count > (uint64_t)buf_chunks(v, ck.buf)) {
    verify_step_str(d, sizeof(d), st, -1);
    return verify_fail(
        v,
        STEPFMT ": %s chunks %s[%u..%llu] out of range (the buffer "
                "has %d chunks)",
        r, v->c, si, d, what, sched_buf_name((sched_buf)ck.buf), ck.index,
        (unsigned long long)ck.index + ck.count - 1, buf_chunks(v, ck.buf));
  }
  if (ck.buf == SCHED_BUF_IN && !sched_uses_in(s->coll, s->root, r)) {
    verify_step_str(d, sizeof(d), st, -1);
    return verify_fail(v,
                       STEPFMT ": rank %d does not use its input buffer in %s",
                       r, v->c, si, d, r, sched_coll_name(s->coll));
  }
  if (ck.buf == SCHED_BUF_OUT && !sched_uses_out(s->coll, s->root, r)) {
    verify_step_str(d, sizeof(d), st, -1);
    return verify_fail(v,
                       STEPFMT ": rank %d does not use its output buffer in %s",
                       r, v->c, si, d, r, sched_coll_name(s->coll));
  }
  return 0;
}

static int check_peer(vctx *v, int r, int si, const sched_step *st, int peer,
                      const char *what) {
  char d[160];
  if (peer < 0 || peer >= v->n || peer == r) {
    verify_step_str(d, sizeof(d), st, -1);
    return verify_fail(v, STEPFMT ": %s %d is not another rank (nranks %d)", r,
                       v->c, si, d, what, peer, v->n);
  }
  return 0;
}

int verify_check_static(vctx *v, int r) {
  const sched *s = v->s;
  const sched_channel *ch = sched_chan_c(s, r, v->c);
  int p2p = s->coll == SCHED_SEND || s->coll == SCHED_RECV;
  char d[160];
  if (!ch || ch->nsteps < 0 || (ch->nsteps > 0 && !ch->steps))
    return verify_fail(v, "rank %d channel %d: no step list", r, v->c);
  if (p2p && r == s->root && ch->nsteps > 0)
    return verify_fail(
        v,
        "rank %d channel %d: rank %d is the %s peer itself and must "
        "have no steps",
        r, v->c, r, sched_coll_name(s->coll));
  for (int si = 0; si < ch->nsteps; si++) {
    const sched_step *st = &ch->steps[si];
    if (st->prim >= SCHED_NUM_PRIMS)
      return verify_fail(v, "rank %d channel %d step %d: unknown primitive %u",
                         r, v->c, si, st->prim);
    sched_prim p = (sched_prim)st->prim;
    int has_src = sched_prim_has_src(p);
    int has_dst = p != SCHED_P_SEND;
    if (p2p) {
      sched_prim want = s->coll == SCHED_SEND ? SCHED_P_SEND : SCHED_P_RECV;
      verify_step_str(d, sizeof(d), st, -1);
      if (p != want)
        return verify_fail(v, STEPFMT ": a %s schedule holds only %s steps", r,
                           v->c, si, d, sched_coll_name(s->coll),
                           sched_prim_name(want));
      if (st->peer != s->root)
        return verify_fail(v, STEPFMT ": wrong peer %d, the %s peer is rank %d",
                           r, v->c, si, d, st->peer, sched_coll_name(s->coll),
                           s->root);
    }
    if ((p == SCHED_P_SEND || sched_prim_recvs(p)) &&
        check_peer(v, r, si, st, st->peer, "peer"))
      return -1;
    if ((p == SCHED_P_RECV_REDUCE_SEND || p == SCHED_P_RECV_COPY_SEND) &&
        check_peer(v, r, si, st, st->peer_out, "peer_out"))
      return -1;
    if (has_src && check_range(v, r, si, st, st->src, "src"))
      return -1;
    if (has_dst && check_range(v, r, si, st, st->dst, "dst"))
      return -1;
    if (has_dst && st->dst.buf == SCHED_BUF_IN) {
      verify_step_str(d, sizeof(d), st, -1);
      return verify_fail(v, STEPFMT ": writes the input buffer", r, v->c, si,
                         d);
    }
    if (has_src && has_dst &&
        (st->src.count != st->dst.count ||
         st->src.index % (uint32_t)v->K != st->dst.index % (uint32_t)v->K)) {
      verify_step_str(d, sizeof(d), st, -1);
      if (st->src.count != st->dst.count)
        return verify_fail(v, STEPFMT ": src has %u chunks but dst has %u", r,
                           v->c, si, d, st->src.count, st->dst.count);
      if (st->src.index % (uint32_t)v->K != st->dst.index % (uint32_t)v->K)
        return verify_fail(v,
                           STEPFMT
                           ": src and dst chunks differ in size (positions "
                           "%u and %u within a block)",
                           r, v->c, si, d, st->src.index % (uint32_t)v->K,
                           st->dst.index % (uint32_t)v->K);
    }
  }
  return 0;
}

int verify_report_stuck(vctx *v) {
  char out[1024];
  size_t o = 0;
  int listed = 0, more = 0;
  out[0] = '\0';
  /* An unmatched receive is clearer than a generic deadlock. */
  for (int r = 0; r < v->n; r++) {
    const sched_channel *ch = sched_chan_c(v->s, r, v->c);
    vstate *vs = &v->st[r];
    if (vs->pc >= ch->nsteps)
      continue;
    const sched_step *st = &ch->steps[vs->pc];
    int recv = sched_prim_recvs((sched_prim)st->prim) && vs->phase == 0;
    if (recv) {
      const sched_channel *pc = sched_chan_c(v->s, st->peer, v->c);
      if (v->st[st->peer].pc >= pc->nsteps) {
        char d[160];
        verify_step_str(d, sizeof(d), st, vs->k);
        return verify_fail(v,
                           STEPFMT
                           ": waits for a message that rank %d never sends "
                           "(rank %d has finished its steps after sending "
                           "%d message(s) to rank %d on this channel)",
                           r, v->c, vs->pc, d, st->peer, st->peer,
                           v->nsent[qidx(v, st->peer, r)], r);
      }
    }
  }
  for (int r = 0; r < v->n; r++) {
    const sched_channel *ch = sched_chan_c(v->s, r, v->c);
    vstate *vs = &v->st[r];
    if (vs->pc >= ch->nsteps)
      continue;
    if (listed == 4) {
      more++;
      continue;
    }
    const sched_step *st = &ch->steps[vs->pc];
    char d[160];
    verify_step_str(d, sizeof(d), st, vs->k);
    int recv = st->prim != SCHED_P_SEND && vs->phase == 0;
    int to = st->prim == SCHED_P_SEND ? st->peer : st->peer_out;
    if (recv)
      o += (size_t)snprintf(out + o, sizeof(out) - o,
                            "%srank %d step %d (%s) waits for a message from "
                            "rank %d",
                            listed ? "; " : "", r, vs->pc, d, st->peer);
    else
      o += (size_t)snprintf(out + o, sizeof(out) - o,
                            "%srank %d step %d (%s) waits for room to send to "
                            "rank %d (%d messages queued)",
                            listed ? "; " : "", r, vs->pc, d, to,
                            v->qlen[qidx(v, r, to)]);
    if (o >= sizeof(out))
      o = sizeof(out) - 1;
    listed++;
  }
  if (more)
    return verify_fail(v,
                       "deadlock on channel %d with %d slots: %s; and %d more",
                       v->c, v->slots, out, more);
  return verify_fail(v, "deadlock on channel %d with %d slots: %s", v->c,
                     v->slots, out);
}

/* ---- final semantics ---- */

/* Expected contents of out chunk i at rank r into v->tmp; 0 if the rank has
 * no output. */
static int expected(vctx *v, int r, int i) {
  const sched *s = v->s;
  int n = v->n, K = v->K, b = i / K, j = i % K;
  memset(v->tmp, 0, (size_t)v->W * sizeof(uint64_t));
  if (!sched_uses_out(s->coll, s->root, r))
    return 0;
  switch (s->coll) {
  case SCHED_ALLREDUCE:
  case SCHED_REDUCE:
    for (int q = 0; q < n; q++)
      set_bit(v->tmp, contrib_bit(v, q, j));
    break;
  case SCHED_BROADCAST:
  case SCHED_RECV:
    set_bit(v->tmp, contrib_bit(v, s->root, j));
    break;
  case SCHED_ALLGATHER:
  case SCHED_GATHER:
    set_bit(v->tmp, contrib_bit(v, b, j));
    break;
  case SCHED_REDUCE_SCATTER:
    for (int q = 0; q < n; q++)
      set_bit(v->tmp, contrib_bit(v, q, r * K + j));
    break;
  case SCHED_SCATTER:
    set_bit(v->tmp, contrib_bit(v, s->root, r * K + j));
    break;
  case SCHED_ALLTOALL:
    set_bit(v->tmp, contrib_bit(v, b, r * K + j));
    break;
  default:
    return 0;
  }
  return 1;
}

int verify_check_final(vctx *v) {
  const sched *s = v->s;
  for (int r = 0; r < v->n; r++) {
    if (s->coll == SCHED_SEND) {
      if (r != s->root && v->st[r].p2p_count != v->K)
        return verify_fail(
            v, "rank %d channel %d: sends %d of the %d chunks to rank %d", r,
            v->c, v->st[r].p2p_count, v->K, s->root);
      continue;
    }
    if (s->coll == SCHED_RECV && r == s->root)
      continue;
    for (int i = 0; i < v->out_n; i++) {
      if (!expected(v, r, i))
        break;
      int cell = cell_of(v, r, SCHED_BUF_OUT, i);
      if (!v->written[cell])
        return verify_fail(v,
                           "rank %d channel %d: out[%d] is never written (%s)",
                           r, v->c, i, sched_coll_name(s->coll));
      const uint64_t *got = cbits(v, cell);
      int miss = -1, extra = -1;
      for (int w = 0; w < v->W && miss < 0 && extra < 0; w++) {
        uint64_t m = v->tmp[w] & ~got[w], x = got[w] & ~v->tmp[w];
        if (m)
          miss = w * 64 + __builtin_ctzll(m);
        if (x)
          extra = w * 64 + __builtin_ctzll(x);
      }
      if (miss >= 0 || extra >= 0) {
        char cs[48];
        contrib_str(v, miss >= 0 ? miss : extra, i % v->K, cs, sizeof(cs));
        return verify_fail(
            v,
            "rank %d channel %d: out[%d] (last written by step %d) "
            "%s contribution %s for %s",
            r, v->c, i, v->wstep[cell], miss >= 0 ? "lacks" : "has the extra",
            cs, sched_coll_name(s->coll));
      }
      if (s->coll == SCHED_ALLREDUCE && r > 0) {
        int c0 = cell_of(v, 0, SCHED_BUF_OUT, i);
        if (v->hash[c0] != v->hash[cell])
          return verify_fail(
              v,
              "rank %d channel %d: out[%d] is reduced in a different "
              "order than on rank 0 (results would not be bitwise "
              "identical)",
              r, v->c, i);
      }
    }
  }
  /* Messages nobody received. */
  for (int a = 0; a < v->n; a++)
    for (int b = 0; b < v->n; b++) {
      int qi = qidx(v, a, b);
      if (v->qlen[qi] == 0)
        continue;
      int id = v->q[(size_t)qi * (size_t)v->slots + (size_t)v->qhead[qi]];
      const sched_step *st =
          &sched_chan_c(s, a, v->c)->steps[v->msgs[id].from_step];
      char d[160];
      verify_step_str(d, sizeof(d), st, -1);
      return verify_fail(v,
                         STEPFMT
                         ": %d message(s) to rank %d are never received "
                         "(first: %s[%u])",
                         a, v->c, v->msgs[id].from_step, d, v->qlen[qi], b,
                         sched_buf_name((sched_buf)v->msgs[id].from_buf),
                         v->msgs[id].from_chunk);
    }
  return 0;
}
