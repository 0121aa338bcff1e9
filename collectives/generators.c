/*
 * The generator table, lookup, and helpers shared by the generators.
 */
#include "generators.h"

#include <string.h>
#include <strings.h>

#include "gen_util.h"
#include "view.h"

#define B(c) (1u << (c))

/* The order matters where two generators model the same time: the earlier
 * wins (collectives/select.c). */
const gen_desc *const gen_table[] = {
    &gen_ring_desc,
    &gen_tree_desc,
    &gen_binomial_desc,
    &gen_rhd_desc,
    &gen_direct_desc,
    &gen_linear_desc,
    &gen_multiring_desc,
    &gen_treepack_desc,
    &gen_hybrid_desc,
    &gen_hier_desc,
    &gen_chaintree_desc,
    &gen_det_desc,
    NULL,
};

int gen_count(void) {
  return (int)(sizeof gen_table / sizeof gen_table[0]) - 1;
}

int gen_index(const gen_desc *g) {
  for (int i = 0; g != NULL && gen_table[i] != NULL; i++)
    if (gen_table[i] == g)
      return i;
  return -1;
}

const gen_desc *gen_find(const char *name) {
  if (!name)
    return NULL;
  GEN_FOREACH (g) {
    if (strcasecmp(g->name, name) == 0)
      return g;
  }
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

braid_result gen_build(const gen_desc *g, const gen_params *p, sched **out) {
  if (out != NULL)
    *out = NULL;
  if (g == NULL || p == NULL || out == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  braid_result r = g->fn(p, out);
  if (r != BRAID_SUCCESS) { /* a failed generator leaves nothing behind */
    sched_free(*out);
    *out = NULL;
  }
  return r;
}

braid_result gen_check_view(const gen_params *p, const gen_desc *d) {
  if (!p || !d)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  const sched_view *v = p->view;
  if (d->needs == 0)
    return BRAID_SUCCESS;
  if (v == NULL)
    return gen_refuse("%s needs to know where the ranks sit (no topology view)",
                      d->name);
  if (v->nranks != p->nranks)
    return gen_refuse("%s: the view has %d ranks, the call %d", d->name,
                      v->nranks, p->nranks);
  if ((d->needs & GEN_NEEDS_HOSTS) && v->nhosts < 2)
    return gen_refuse("%s needs ranks on two hosts or more (the view has %d)",
                      d->name, v->nhosts);
  if ((d->needs & GEN_NEEDS_GRAPH) && v->g == NULL)
    return gen_refuse("%s needs a topology graph (the view has none)", d->name);
  if ((d->needs & GEN_NEEDS_GRAPH) && mr_view_check(v, p->nranks) != 0)
    return gen_refuse(
        "%s needs every rank on its own vertex of the topology graph "
        "(two ranks share one, or one is off the graph)",
        d->name);
  return BRAID_SUCCESS;
}

static int rooted(sched_coll coll) {
  switch (coll) {
  case SCHED_BROADCAST:
  case SCHED_REDUCE:
  case SCHED_GATHER:
  case SCHED_SCATTER:
  case SCHED_SEND:
  case SCHED_RECV:
    return 1;
  default:
    return 0;
  }
}

braid_result gen_check(const gen_params *p, const gen_desc *d) {
  if (!p || !d)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  if ((int)p->coll < 0 || p->coll >= SCHED_NUM_COLLS)
    return gen_refuse("%s: unknown collective %d", d->name, (int)p->coll);
  if (!(d->colls & B(p->coll)))
    return gen_refuse("%s does not generate %s", d->name,
                      sched_coll_name(p->coll));
  if (p->nranks < 1 || p->nranks > GEN_MAX_RANKS)
    return gen_refuse("%s: %d ranks (1 to %d)", d->name, p->nranks,
                      GEN_MAX_RANKS);
  if (p->nchannels < 1 || p->nchannels > GEN_MAX_CHANNELS)
    return gen_refuse("%s: %d channels (1 to %d)", d->name, p->nchannels,
                      GEN_MAX_CHANNELS);
  /* Only rooted collectives and p2p read the root. */
  if ((p->root < 0 || p->root >= p->nranks) && rooted(p->coll))
    return gen_refuse("%s: root %d is not a rank of %d", d->name, p->root,
                      p->nranks);
  return BRAID_SUCCESS;
}

static sched_chunks sub(sched_chunks r, uint32_t off, uint32_t n) {
  return sched_ck((sched_buf)r.buf, r.index + off, n);
}

braid_result gen_exchange(sched_channel *c, int peer, sched_chunks snd,
                          sched_chunks rcv, sched_chunks rsrc) {
  uint32_t ns = snd.buf == SCHED_BUF_NONE ? 0 : snd.count;
  uint32_t nr = rcv.buf == SCHED_BUF_NONE ? 0 : rcv.count;
  uint32_t s = 0, r = 0;
  while (s < ns || r < nr) {
    if (s < ns) {
      uint32_t b = ns - s < GEN_BURST ? ns - s : GEN_BURST;
      CHECKR(sched_send(c, peer, sub(snd, s, b)));
      s += b;
    }
    if (r < nr) {
      uint32_t b = nr - r < GEN_BURST ? nr - r : GEN_BURST;
      if (rsrc.buf != SCHED_BUF_NONE)
        CHECKR(sched_recv_reduce(c, peer, sub(rsrc, r, b), sub(rcv, r, b)));
      else
        CHECKR(sched_recv(c, peer, sub(rcv, r, b)));
      r += b;
    }
  }
  return BRAID_SUCCESS;
}

braid_result gen_fold_rank_order(sched_channel *c, int n, int r,
                                 sched_chunks mine, sched_chunks scr,
                                 sched_chunks dst) {
  if (r == 0) {
    CHECKR(sched_recv_reduce(c, 1, mine, dst));
    for (int q = 2; q < n; q++)
      CHECKR(sched_recv_reduce(c, q, dst, dst));
    return BRAID_SUCCESS;
  }
  if (r == 1) { /* x0 arrives first: mine is its right operand */
    CHECKR(sched_recv_reduce_rev(c, 0, mine, dst));
    for (int q = 2; q < n; q++)
      CHECKR(sched_recv_reduce(c, q, dst, dst));
    return BRAID_SUCCESS;
  }
  CHECKR(sched_recv(c, 0, scr));
  for (int q = 1; q < r; q++)
    CHECKR(sched_recv_reduce(c, q, scr, scr));
  CHECKR(sched_reduce_local(c, mine, scr));
  if (r == n - 1) {
    int same = scr.buf == dst.buf && scr.index == dst.index;
    return same ? BRAID_SUCCESS : sched_copy(c, scr, dst);
  }
  CHECKR(sched_recv_reduce(c, r + 1, scr, dst));
  for (int q = r + 2; q < n; q++)
    CHECKR(sched_recv_reduce(c, q, dst, dst));
  return BRAID_SUCCESS;
}
