/*
 * The generator table, lookup, and helpers shared by the generators.
 */
#include "generators.h"

#include <string.h>
#include <strings.h>

#include "gen_util.h"
#include "view.h"

#define B(c) (1u << (c))

const gen_desc gen_table[] = {
    {"ring", gen_ring,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE),
     0, 0},
    {"tree", gen_tree,
     B(SCHED_ALLREDUCE) | B(SCHED_BROADCAST) | B(SCHED_REDUCE), 0, 0},
    {"binomial", gen_binomial,
     B(SCHED_BROADCAST) | B(SCHED_REDUCE) | B(SCHED_GATHER) | B(SCHED_SCATTER) |
         B(SCHED_ALLREDUCE),
     0, 0},
    {"rhd", gen_rhd,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER), 0, 0},
    {"direct", gen_direct,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_ALLTOALL) | B(SCHED_BROADCAST) | B(SCHED_REDUCE) |
         B(SCHED_GATHER) | B(SCHED_SCATTER),
     0, GEN_RANK_ORDER},
    {"linear", gen_linear,
     B(SCHED_SEND) | B(SCHED_RECV) | B(SCHED_GATHER) | B(SCHED_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE),
     0, 0},
    {"multiring", gen_multiring,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE),
     GEN_NEEDS_GRAPH, 0},
    {"treepack", gen_treepack,
     B(SCHED_ALLREDUCE) | B(SCHED_BROADCAST) | B(SCHED_REDUCE), GEN_NEEDS_GRAPH,
     0},
    /* opt-in: its host-routed share runs through pinned staging over shm
     * (src/comm_dev.c), a CPU copy per message that the simulator's GPU
     * model leaves out and that no GPU has measured yet */
    {"hybrid", gen_hybrid,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER),
     GEN_NEEDS_GRAPH, GEN_OPT_IN},
    {"hier", gen_hier,
     B(SCHED_ALLREDUCE) | B(SCHED_ALLGATHER) | B(SCHED_REDUCE_SCATTER) |
         B(SCHED_BROADCAST) | B(SCHED_REDUCE),
     GEN_NEEDS_HOSTS, 0},
    {"chaintree", gen_chaintree,
     B(SCHED_ALLREDUCE) | B(SCHED_BROADCAST) | B(SCHED_REDUCE), GEN_NEEDS_HOSTS,
     0},
    /* opt-in outside BRAID_DETERMINISTIC, so that the default choices
     * stay those measured in docs/PERFORMANCE.md */
    {"det", gen_det,
     B(SCHED_ALLREDUCE) | B(SCHED_REDUCE) | B(SCHED_REDUCE_SCATTER), 0,
     GEN_OPT_IN | GEN_RANK_ORDER},
    {NULL, NULL, 0, 0, 0},
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
  return (g->colls & B(coll)) != 0 && g->needs == 0;
}

int gen_supports_view(const gen_desc *g, sched_coll coll, int nranks,
                      const sched_view *v) {
  if (!g || !g->name || (int)coll < 0 || coll >= SCHED_NUM_COLLS ||
      nranks < 1 || nranks > GEN_MAX_RANKS || (g->colls & B(coll)) == 0)
    return 0;
  if (g->needs == 0)
    return 1;
  if (v == NULL || v->nranks != nranks)
    return 0;
  if ((g->needs & GEN_NEEDS_HOSTS) && v->nhosts < 2)
    return 0;
  if (g->needs & GEN_NEEDS_GRAPH) {
    if (v->g == NULL)
      return 0;
    for (int a = 0; a < nranks; a++) /* ranks on distinct vertices */
      for (int b = a + 1; b < nranks; b++)
        if (v->vertex[a] == v->vertex[b])
          return 0;
  }
  return 1;
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

int gen_fold_rank_order(sched_channel *c, int n, int r, sched_chunks mine,
                        sched_chunks scr, sched_chunks dst) {
  int e = 0;
  if (r == 0) {
    e |= sched_recv_reduce(c, 1, mine, dst);
    for (int q = 2; q < n; q++)
      e |= sched_recv_reduce(c, q, dst, dst);
    return e ? -1 : 0;
  }
  e |= sched_recv(c, 0, scr);
  for (int q = 1; q < r; q++)
    e |= sched_recv_reduce(c, q, scr, scr);
  e |= sched_reduce_local(c, mine, scr);
  if (r == n - 1) {
    int same = scr.buf == dst.buf && scr.index == dst.index;
    return (e | (same ? 0 : sched_copy(c, scr, dst))) ? -1 : 0;
  }
  e |= sched_recv_reduce(c, r + 1, scr, dst);
  for (int q = r + 2; q < n; q++)
    e |= sched_recv_reduce(c, q, dst, dst);
  return e ? -1 : 0;
}
