/*
 * The generator table, lookup, and helpers shared by the generators.
 */
#include "generators.h"

#include <string.h>
#include <strings.h>

#include "gen_util.h"

#define B(c) (1u << (c))

const gen_desc gen_table[] = {
    {"ring", gen_ring,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE)},
    {"tree", gen_tree,
     B(SCHED_ALLREDUCE) | B(SCHED_BROADCAST) | B(SCHED_REDUCE)},
    {"binomial", gen_binomial,
     B(SCHED_BROADCAST) | B(SCHED_REDUCE) | B(SCHED_GATHER) | B(SCHED_SCATTER) |
         B(SCHED_ALLREDUCE)},
    {"rhd", gen_rhd,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER)},
    {"direct", gen_direct,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_ALLTOALL) | B(SCHED_BROADCAST) | B(SCHED_REDUCE) |
         B(SCHED_GATHER) | B(SCHED_SCATTER)},
    {"linear", gen_linear,
     B(SCHED_SEND) | B(SCHED_RECV) | B(SCHED_GATHER) | B(SCHED_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE)},
    {NULL, NULL, 0},
};

const gen_desc *gen_find(const char *name) {
  if (!name)
    return NULL;
  for (const gen_desc *g = gen_table; g->name; g++)
    if (strcasecmp(g->name, name) == 0)
      return g;
  return NULL;
}

int gen_supports(const gen_desc *g, sched_coll coll, int nranks) {
  if (!g || !g->name || (int)coll < 0 || coll >= SCHED_NUM_COLLS)
    return 0;
  if (nranks < 1 || nranks > GEN_MAX_RANKS)
    return 0;
  return (g->colls & B(coll)) != 0;
}

int gen_check(const gen_params *p, uint32_t coll_mask) {
  if (!p || (int)p->coll < 0 || p->coll >= SCHED_NUM_COLLS)
    return -1;
  if (!(coll_mask & B(p->coll)))
    return -1;
  if (p->nranks < 1 || p->nranks > GEN_MAX_RANKS)
    return -1;
  if (p->nchannels < 1 || p->nchannels > GEN_MAX_CHANNELS)
    return -1;
  if (p->root < 0 || p->root >= p->nranks) {
    /* Only rooted collectives and p2p read the root. */
    switch (p->coll) {
    case SCHED_BROADCAST:
    case SCHED_REDUCE:
    case SCHED_GATHER:
    case SCHED_SCATTER:
    case SCHED_SEND:
    case SCHED_RECV:
      return -1;
    default:
      break;
    }
  }
  return 0;
}

static sched_chunks sub(sched_chunks r, uint32_t off, uint32_t n) {
  return sched_ck((sched_buf)r.buf, r.index + off, n);
}

int gen_exchange(sched_channel *c, int peer, sched_chunks snd, sched_chunks rcv,
                 sched_chunks rsrc) {
  uint32_t ns = snd.buf == SCHED_BUF_NONE ? 0 : snd.count;
  uint32_t nr = rcv.buf == SCHED_BUF_NONE ? 0 : rcv.count;
  uint32_t s = 0, r = 0;
  int e = 0;
  while (s < ns || r < nr) {
    if (s < ns) {
      uint32_t b = ns - s < GEN_BURST ? ns - s : GEN_BURST;
      e |= sched_send(c, peer, sub(snd, s, b));
      s += b;
    }
    if (r < nr) {
      uint32_t b = nr - r < GEN_BURST ? nr - r : GEN_BURST;
      if (rsrc.buf != SCHED_BUF_NONE)
        e |= sched_recv_reduce(c, peer, sub(rsrc, r, b), sub(rcv, r, b));
      else
        e |= sched_recv(c, peer, sub(rcv, r, b));
      r += b;
    }
  }
  return e ? -1 : 0;
}
