/*
 * The schedule IR: allocation, step appending and the per-collective buffer
 * tables (see schedule.h for the chunk geometry).
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

braid_result sched_new(sched_coll coll, int nranks, int root,
                       int chunks_per_block, int nchannels, const char *algo,
                       sched **out) {
  *out = NULL;
  const char *name = algo ? algo : "?";
  if ((int)coll < 0 || coll >= SCHED_NUM_COLLS)
    return ERR(BRAID_ERR_INVALID_ARG, "schedule %s: unknown collective %d",
               name, (int)coll);
  if (nranks < 1 || chunks_per_block < 1 || nchannels < 1)
    return ERR(BRAID_ERR_INVALID_ARG,
               "schedule %s: %d ranks, %d chunks per block, %d channels "
               "(each at least 1)",
               name, nranks, chunks_per_block, nchannels);
  sched *s = calloc(1, sizeof(*s));
  if (!s)
    return ERR(BRAID_ERR_NOMEM, "schedule %s: no memory for a schedule", name);
  s->coll = coll;
  s->nranks = nranks;
  s->root = root;
  s->chunks_per_block = chunks_per_block;
  s->scratch_blocks = 0;
  s->nchannels = nchannels;
  s->weights = calloc((size_t)nchannels, sizeof(double));
  s->route = calloc((size_t)nchannels, 1);
  s->ch = calloc((size_t)nranks * (size_t)nchannels, sizeof(sched_channel));
  if (!s->weights || !s->route || !s->ch) {
    sched_free(s);
    return ERR(BRAID_ERR_NOMEM,
               "schedule %s: no memory for %d channels of %d ranks", name,
               nchannels, nranks);
  }
  for (int c = 0; c < nchannels; c++)
    s->weights[c] = 1.0 / nchannels;
  if (algo) {
    strncpy(s->algo, algo, sizeof(s->algo) - 1);
    s->algo[sizeof(s->algo) - 1] = '\0';
  }
  *out = s;
  return BRAID_SUCCESS;
}

void sched_free(sched *s) {
  if (!s)
    return;
  if (s->ch) {
    for (int i = 0; i < s->nranks * s->nchannels; i++)
      free(s->ch[i].steps);
  }
  free(s->ch);
  free(s->weights);
  free(s->route);
  free(s);
}

sched_channel *sched_chan(sched *s, int rank, int channel) {
  if (!s || rank < 0 || rank >= s->nranks || channel < 0 ||
      channel >= s->nchannels)
    return NULL;
  return &s->ch[rank * s->nchannels + channel];
}

const sched_channel *sched_chan_c(const sched *s, int rank, int channel) {
  if (!s || rank < 0 || rank >= s->nranks || channel < 0 ||
      channel >= s->nchannels)
    return NULL;
  return &s->ch[rank * s->nchannels + channel];
}

sched_chunks sched_ck(sched_buf buf, uint32_t index, uint32_t count) {
  sched_chunks c;
  c.buf = (uint8_t)buf;
  c.index = index;
  c.count = count;
  return c;
}

static sched_chunks none_ck(void) { return sched_ck(SCHED_BUF_NONE, 0, 0); }

braid_result sched_add(sched_channel *c, sched_prim prim, int peer,
                       int peer_out, sched_chunks src, sched_chunks dst) {
  if (!c)
    return ERR(BRAID_ERR_INVALID_ARG, "schedule: no channel for a %s step",
               sched_prim_name(prim));
  if (c->nsteps == c->cap) {
    int ncap = c->cap ? c->cap * 2 : 8;
    sched_step *n = realloc(c->steps, (size_t)ncap * sizeof(*n));
    if (!n)
      return ERR(BRAID_ERR_NOMEM,
                 "schedule: no memory to grow a channel to %d steps", ncap);
    c->steps = n;
    c->cap = ncap;
  }
  sched_step *st = &c->steps[c->nsteps++];
  memset(st, 0, sizeof(*st));
  st->prim = (uint8_t)prim;
  st->peer = peer;
  st->peer_out = peer_out;
  st->src = src;
  st->dst = dst;
  return BRAID_SUCCESS;
}

braid_result sched_send(sched_channel *c, int peer, sched_chunks src) {
  return sched_add(c, SCHED_P_SEND, peer, -1, src, none_ck());
}

braid_result sched_recv(sched_channel *c, int peer, sched_chunks dst) {
  return sched_add(c, SCHED_P_RECV, peer, -1, none_ck(), dst);
}

braid_result sched_recv_reduce(sched_channel *c, int peer, sched_chunks src,
                               sched_chunks dst) {
  return sched_add(c, SCHED_P_RECV_REDUCE, peer, -1, src, dst);
}

braid_result sched_recv_reduce_send(sched_channel *c, int peer,
                                    sched_chunks src, sched_chunks dst,
                                    int peer_out) {
  return sched_add(c, SCHED_P_RECV_REDUCE_SEND, peer, peer_out, src, dst);
}

braid_result sched_recv_reduce_rev(sched_channel *c, int peer, sched_chunks src,
                                   sched_chunks dst) {
  return sched_add(c, SCHED_P_RECV_REDUCE_REV, peer, -1, src, dst);
}

braid_result sched_recv_copy_send(sched_channel *c, int peer, sched_chunks dst,
                                  int peer_out) {
  return sched_add(c, SCHED_P_RECV_COPY_SEND, peer, peer_out, none_ck(), dst);
}

braid_result sched_copy(sched_channel *c, sched_chunks src, sched_chunks dst) {
  return sched_add(c, SCHED_P_COPY, -1, -1, src, dst);
}

braid_result sched_reduce_local(sched_channel *c, sched_chunks src,
                                sched_chunks dst) {
  return sched_add(c, SCHED_P_REDUCE, -1, -1, src, dst);
}

int sched_in_blocks(sched_coll coll, int nranks) {
  switch (coll) {
  case SCHED_ALLREDUCE:
  case SCHED_BROADCAST:
  case SCHED_REDUCE:
  case SCHED_ALLGATHER:
  case SCHED_GATHER:
  case SCHED_SEND:
    return 1;
  case SCHED_REDUCE_SCATTER:
  case SCHED_SCATTER:
  case SCHED_ALLTOALL:
    return nranks;
  case SCHED_RECV:
  default:
    return 0;
  }
}

int sched_out_blocks(sched_coll coll, int nranks) {
  switch (coll) {
  case SCHED_ALLREDUCE:
  case SCHED_BROADCAST:
  case SCHED_REDUCE:
  case SCHED_REDUCE_SCATTER:
  case SCHED_SCATTER:
  case SCHED_RECV:
    return 1;
  case SCHED_ALLGATHER:
  case SCHED_GATHER:
  case SCHED_ALLTOALL:
    return nranks;
  case SCHED_SEND:
  default:
    return 0;
  }
}

int sched_uses_in(sched_coll coll, int root, int rank) {
  switch (coll) {
  case SCHED_BROADCAST:
  case SCHED_SCATTER:
    return rank == root;
  case SCHED_RECV:
    return 0;
  case SCHED_ALLREDUCE:
  case SCHED_REDUCE:
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
  case SCHED_GATHER:
  case SCHED_ALLTOALL:
  case SCHED_SEND:
    return 1;
  default:
    return 0;
  }
}

int sched_uses_out(sched_coll coll, int root, int rank) {
  switch (coll) {
  case SCHED_REDUCE:
  case SCHED_GATHER:
    return rank == root;
  case SCHED_SEND:
    return 0;
  case SCHED_ALLREDUCE:
  case SCHED_BROADCAST:
  case SCHED_ALLGATHER:
  case SCHED_REDUCE_SCATTER:
  case SCHED_SCATTER:
  case SCHED_ALLTOALL:
  case SCHED_RECV:
    return 1;
  default:
    return 0;
  }
}

int sched_reduces(sched_coll coll) {
  return coll == SCHED_ALLREDUCE || coll == SCHED_REDUCE ||
         coll == SCHED_REDUCE_SCATTER;
}

const char *sched_coll_name(sched_coll coll) {
  static const char *const names[SCHED_NUM_COLLS] = {
      "allreduce", "broadcast", "reduce",   "allgather", "reduce_scatter",
      "gather",    "scatter",   "alltoall", "send",      "recv"};
  if ((int)coll < 0 || coll >= SCHED_NUM_COLLS)
    return "unknown";
  return names[coll];
}

int sched_prim_recvs(sched_prim p) {
  return p == SCHED_P_RECV || p == SCHED_P_RECV_REDUCE ||
         p == SCHED_P_RECV_REDUCE_SEND || p == SCHED_P_RECV_COPY_SEND ||
         p == SCHED_P_RECV_REDUCE_REV;
}

int sched_prim_reduces_msg(sched_prim p) {
  return p == SCHED_P_RECV_REDUCE || p == SCHED_P_RECV_REDUCE_SEND ||
         p == SCHED_P_RECV_REDUCE_REV;
}

int sched_prim_has_src(sched_prim p) {
  return p == SCHED_P_SEND || p == SCHED_P_COPY || p == SCHED_P_REDUCE ||
         sched_prim_reduces_msg(p);
}

const char *sched_prim_name(sched_prim prim) {
  static const char *const names[SCHED_NUM_PRIMS] = {
      "SEND",           "RECV", "RECV_REDUCE", "RECV_REDUCE_SEND",
      "RECV_COPY_SEND", "COPY", "REDUCE",      "RECV_REDUCE_REV"};
  if ((int)prim < 0 || prim >= SCHED_NUM_PRIMS)
    return "UNKNOWN";
  return names[prim];
}

const char *sched_buf_name(sched_buf buf) {
  switch (buf) {
  case SCHED_BUF_NONE:
    return "none";
  case SCHED_BUF_IN:
    return "in";
  case SCHED_BUF_OUT:
    return "out";
  case SCHED_BUF_SCRATCH:
    return "scratch";
  default:
    return "unknown";
  }
}

const char *sched_route_name(sched_route r) {
  switch (r) {
  case SCHED_ROUTE_ANY:
    return "any";
  case SCHED_ROUTE_NVL:
    return "nvl";
  case SCHED_ROUTE_HOST:
    return "host";
  default:
    return "unknown";
  }
}
