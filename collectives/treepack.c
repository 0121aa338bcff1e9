/*
 * Spanning-tree packing (after Blink, Wang et al., MLSys 2020): weighted
 * spanning trees over the ranks, each carrying the share of the data its
 * rate earns. Unlike rings, trees need no Hamiltonian cycle, so they use
 * every link of a fragmented allocation (DGX-1 GPUs {0, 2, 4, 5, 6}, say).
 *
 * Planning (plan):
 *  1. Candidate trees. treepack_pack.c packs trees on three rank graphs:
 *     flow_from_view(view, SCHED_ROUTE_ANY); the pairs whose route crosses
 *     no other rank's vertex; the pairs joined by one link. Broadcast packs
 *     arborescences from the root up to the Edmonds rate min over v of
 *     maxflow(root -> v); reduce the same on the reversed graph (data flows
 *     to the root); allreduce undirected spanning trees (a tree reduces up
 *     and broadcasts down the same edges, loading both directions of each
 *     edge with its rate) up to the Nash-Williams/Tutte bound min over
 *     partitions P of c(edges across P) / (|P| - 1). Chains along the
 *     rank order and along multiring's rings join the candidates.
 *  2. Rates on the links. Every rank pair's route (as transports and the
 *     simulator take it) crosses links; a linear program gives the trees the
 *     rates that maximise the total with every link direction within its
 *     bandwidth (routes through another rank's GPU share its links, which
 *     the rank graphs count twice). Ties go to trees with fewer extra hops
 *     and fewer branchings (TP_HOP_COST, TP_BRANCH_COST). At most
 *     max_channels trees (0: GEN_MAX_CHANNELS) keep a rate.
 *  3. Channels. Channels sharing a link share it per message, whatever
 *     their weights, so a tree with k times the lightest tree's rate runs on
 *     about k channels of equal weight (replicas; TREEPACK_CHANNELS in all
 *     unless the trees alone need more); weight = rate / total rate.
 *
 * Steps of one channel (one tree):
 *   broadcast  down the tree: a rank receives from its parent and forwards
 *              to its children, largest subtree first (RECV_COPY_SEND, SEND);
 *              the root sends from in and copies in to out. K = 1.
 *   reduce     up the tree: a rank folds its children's partial sums
 *              (smallest subtree first) into an accumulator and sends it to
 *              its parent (RECV_REDUCE_SEND); interior non-roots accumulate
 *              in one scratch block, the root in out. K = 1.
 *   allreduce  reduce up to the tree's root (accumulating in out), then
 *              broadcast down the same tree: each output element is reduced
 *              once (at the root), then copied. K chunks (TREEPACK_AR_K) in a
 *              software pipeline: in round i a rank at depth d first passes
 *              chunk i - (1 + 2d) down, then reduces chunk i up, so no rank
 *              waits for the round trip of the chunk it just sent (see
 *              ar_lag). Roots differ among trees: each tree is rooted at a
 *              vertex of least height, ties to the rank rooting fewest.
 * One rank: a local copy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"
#include "gen_util.h"
#include "route.h"
#include "treepack_int.h"
#include "view.h"

#define TREEPACK_MAX_TREES TREEPACK_KMAX
#define TREEPACK_CHANNELS 16 /* channels when trees are replicated */
#define TREEPACK_AR_K 128    /* allreduce chunks per block */
#define TREEPACK_AR_PIECE ((size_t)256 << 10) /* smallest allreduce piece */

typedef struct ptree {
  int n, root;
  const int *par;
  int *size;  /* subtree sizes */
  int *kids;  /* n x n: children of each rank, largest subtree first */
  int *nkids; /* per rank */
} ptree;

static braid_result ptree_init(ptree *t, int n, const int *par) {
  t->n = n;
  t->par = par;
  t->root = -1;
  t->size = calloc((size_t)n, sizeof(int));
  t->nkids = calloc((size_t)n, sizeof(int));
  t->kids = malloc(sizeof(int) * (size_t)n * (size_t)n);
  if (!t->size || !t->nkids || !t->kids)
    return ERR(BRAID_ERR_NOMEM, "treepack: no memory for a tree of %d ranks",
               n);
  for (int v = 0; v < n; v++) {
    if (par[v] < 0)
      t->root = v;
    for (int x = v, hops = 0; x >= 0 && hops <= n; x = par[x], hops++)
      t->size[x]++;
  }
  for (int v = 0; v < n; v++) {
    int p = par[v];
    if (p < 0)
      continue;
    int *k = t->kids + (size_t)p * n, i = t->nkids[p]++;
    while (i > 0 && t->size[k[i - 1]] < t->size[v]) {
      k[i] = k[i - 1];
      i--;
    }
    k[i] = v;
  }
  if (t->root < 0 || t->size[t->root] != n)
    return ERR(BRAID_ERR_INTERNAL,
               "treepack: a tree does not span the %d ranks", n);
  return BRAID_SUCCESS;
}

static void ptree_free(ptree *t) {
  free(t->size);
  free(t->kids);
  free(t->nkids);
}

/* Down the tree from `from` at the root; others receive into out. */
static braid_result bcast_down(sched_channel *c, const ptree *t, int r,
                               sched_chunks from) {
  const int *k = t->kids + (size_t)r * t->n;
  int nk = t->nkids[r], P = t->par[r];
  sched_chunks out = gen_out(from.index, 1);
  if (P < 0) {
    for (int i = 0; i < nk; i++)
      CHECKR(sched_send(c, k[i], from));
    return BRAID_SUCCESS;
  }
  if (nk == 0)
    return sched_recv(c, P, out);
  CHECKR(sched_recv_copy_send(c, P, out, k[0]));
  for (int i = 1; i < nk; i++)
    CHECKR(sched_send(c, k[i], out));
  return BRAID_SUCCESS;
}

/* Up the tree: the subtree's sum ends in acc (sent on to the parent);
 * leaves send their input. */
static braid_result reduce_up(sched_channel *c, const ptree *t, int r,
                              sched_chunks acc) {
  const int *k = t->kids + (size_t)r * t->n;
  int nk = t->nkids[r], P = t->par[r];
  sched_chunks in = gen_in(acc.index, 1);
  if (nk == 0)
    return P >= 0 ? sched_send(c, P, in) : BRAID_SUCCESS;
  for (int i = 0; i < nk; i++) {
    int kid = k[nk - 1 - i]; /* smallest subtree first */
    sched_chunks src = i == 0 ? in : acc;
    if (i == nk - 1 && P >= 0)
      CHECKR(sched_recv_reduce_send(c, kid, src, acc, P));
    else
      CHECKR(sched_recv_reduce(c, kid, src, acc));
  }
  return BRAID_SUCCESS;
}

/* Allreduce lag of rank r: 1 + 2 x its depth. In round i a rank first
 * passes chunk i - lag down, then reduces chunk i up. A child's lag exceeds
 * its parent's by two, so the chunk it waits for left the parent two rounds
 * before: the down and up transfers between them (two messages) overlap the
 * next rounds instead of costing a round trip per chunk. */
static int ar_lag(const ptree *t, int r) {
  int d = 0;
  for (int x = r; t->par[x] >= 0 && d <= t->n; x = t->par[x])
    d++;
  return 1 + 2 * d;
}

static braid_result tree_rank(sched_channel *c, sched_coll coll, const ptree *t,
                              int r, int K) {
  int lag = coll == SCHED_ALLREDUCE ? ar_lag(t, r) : 0;
  switch (coll) {
  case SCHED_BROADCAST:
    if (r == t->root) {
      CHECKR(bcast_down(c, t, r, gen_in(0, 1)));
      CHECKR(sched_copy(c, gen_in(0, 1), gen_out(0, 1)));
    } else {
      CHECKR(bcast_down(c, t, r, gen_out(0, 1)));
    }
    break;
  case SCHED_REDUCE:
    CHECKR(reduce_up(c, t, r, r == t->root ? gen_out(0, 1) : gen_scr(0, 1)));
    break;
  case SCHED_ALLREDUCE:
    for (int i = 0; i < K + lag; i++) {
      if (i >= lag)
        CHECKR(bcast_down(c, t, r, gen_out((uint32_t)(i - lag), 1)));
      if (i < K)
        CHECKR(reduce_up(c, t, r, gen_out((uint32_t)i, 1)));
    }
    break;
  default:
    return ERR(BRAID_ERR_INTERNAL, "treepack: no steps for %s",
               sched_coll_name(coll));
  }
  return BRAID_SUCCESS;
}

/* ---- the links under the trees ---- */

/* Every rank pair's route (as the simulator and transports take it for
 * SCHED_ROUTE_ANY) as resources: each direction of each link. */
typedef struct phys {
  int n, nr;
  int *off;    /* n*n + 1: route a -> b is res[off[a*n+b] .. off[a*n+b+1]) */
  int *res;    /* 2 * link + direction */
  double *bw;  /* per resource */
  double *pbw; /* per pair: the route's bottleneck (0: no route) */
  char *kind;  /* per pair: TP_HOP, TP_FREE or TP_SHARED */
} phys;

enum { TP_NONE = 0, TP_HOP = 1, TP_FREE = 2, TP_SHARED = 3 };
#define TP_NCAND 3   /* candidate graphs (see plan) */
#define TP_CHAINS 64 /* room for chains along rings (see add_chains) */
/* Multi-hop routes hold all their links at once and collide with the other
 * transfers on them: a unit of rate over an extra hop is worth this less. */
#define TP_HOP_COST 0.5
#define TP_BRANCH_COST 0.1
#define TP_LOC_BW 1000.0 /* ranks on one vertex (as flow.c's FLOW_LOC_BW) */

static void phys_free(phys *ph) {
  free(ph->off);
  free(ph->res);
  free(ph->bw);
  free(ph->pbw);
  free(ph->kind);
}

static braid_result phys_init(phys *ph, const sched_view *v) {
  topo_graph *g = v->g;
  int n = v->nranks, cap = 64;
  braid_result r = BRAID_SUCCESS;
  size_t nn = (size_t)n * (size_t)n;
  memset(ph, 0, sizeof(*ph));
  ph->n = n;
  ph->nr = 2 * g->nl;
  ph->off = calloc(nn + 1, sizeof(int));
  ph->res = malloc(sizeof(int) * (size_t)cap);
  ph->bw = malloc(sizeof(double) * (size_t)(ph->nr > 0 ? ph->nr : 1));
  ph->pbw = calloc(nn, sizeof(double));
  ph->kind = calloc(nn, 1);
  char *isrank = calloc((size_t)g->nv, 1);
  route_ctx *rc = route_ctx_new(g);
  if (!ph->off || !ph->res || !ph->bw || !ph->pbw || !ph->kind || !isrank ||
      !rc) {
    r = ERR(BRAID_ERR_NOMEM, "treepack: no memory for the routes of %d ranks",
            n);
    goto out;
  }
  for (int l = 0; l < g->nl; l++)
    ph->bw[2 * l] = ph->bw[2 * l + 1] = g->links[l].bw;
  for (int r = 0; r < n; r++)
    if (v->vertex[r] >= 0 && v->vertex[r] < g->nv)
      isrank[v->vertex[r]] = 1;
  int used = 0;
  for (size_t ab = 0; ab < nn && r == BRAID_SUCCESS; ab++) {
    int a = (int)(ab / (size_t)n), b = (int)(ab % (size_t)n);
    int va = v->vertex[a], vb = v->vertex[b];
    topo_path tp;
    ph->off[ab] = used;
    if (a == b || va < 0 || vb < 0) {
      continue;
    } else if (va == vb) {
      ph->pbw[ab] = TP_LOC_BW;
      ph->kind[ab] = TP_HOP;
    } else if (route_find(rc, va, vb, SCHED_ROUTE_ANY, &tp) == 0) {
      if (used + tp.nhops > cap) {
        cap = 2 * (used + tp.nhops);
        int *nr = realloc(ph->res, sizeof(int) * (size_t)cap);
        if (!nr)
          r = ERR(BRAID_ERR_NOMEM,
                  "treepack: no memory for %d hops of the routes", cap);
        else
          ph->res = nr;
      }
      ph->pbw[ab] = tp.bw;
      ph->kind[ab] = tp.nhops == 1 ? TP_HOP : TP_FREE;
      for (int i = 0; i < tp.nhops && r == BRAID_SUCCESS; i++) {
        int l = tp.links[i];
        ph->res[used++] = 2 * l + (g->links[l].a == tp.verts[i] ? 0 : 1);
        if (i > 0 && isrank[tp.verts[i]])
          ph->kind[ab] = TP_SHARED;
      }
      topo_path_release(&tp);
    }
  }
  ph->off[nn] = used;
out:
  free(isrank);
  route_ctx_free(rc);
  return r;
}

/* Adds k times tree pa's load to load[]: dir 0 data flows parent to child
 * (broadcast), 1 child to parent (reduce), 2 both ways (allreduce). */
static void phys_load(const phys *ph, const int *pa, int dir, double k,
                      double *load) {
  int n = ph->n;
  for (int v = 0; v < n; v++) {
    if (pa[v] < 0)
      continue;
    for (int d = 0; d < 2; d++) {
      if ((dir == 0 && d == 1) || (dir == 1 && d == 0))
        continue;
      size_t ab = d == 0 ? (size_t)pa[v] * n + v : (size_t)v * n + pa[v];
      for (int i = ph->off[ab]; i < ph->off[ab + 1]; i++)
        load[ph->res[i]] += k;
    }
  }
}

/* The rates of trees par[0..nt) that fit the links best (a linear program
 * over the trees: max sum w, each link's load within its bandwidth),
 * keeping at most maxt trees, and their total in *total (0: none fits, with
 * w zero). BRAID_SUCCESS or BRAID_ERR_NOMEM. */
static braid_result phys_weights(const phys *ph, int nt, const int *par,
                                 double *w, int dir, int maxt, double *total) {
  int n = ph->n, nr = ph->nr, m = 0, k = nt;
  int *row = malloc(sizeof(int) * (size_t)(nr + 1));
  int *col = malloc(sizeof(int) * (size_t)(nt + 1));
  double *load = calloc((size_t)(nr + nt + 1), sizeof(double));
  double *A = malloc(sizeof(double) * (size_t)(nr + 1) * (size_t)(nt + 1));
  double *bw = malloc(sizeof(double) * (size_t)(nr + 1));
  double *x = malloc(sizeof(double) * (size_t)(nt + 1)), tot = 0;
  double *val = malloc(sizeof(double) * (size_t)(nt + 1));
  for (int t = 0; t < nt; t++)
    w[t] = 0;
  braid_result r = BRAID_SUCCESS;
  if (!row || !col || !load || !A || !bw || !x || !val) {
    r = ERR(BRAID_ERR_NOMEM, "treepack: no memory to weight %d trees", nt);
    goto out;
  }
  for (int t = 0; t < nt; t++) {
    phys_load(ph, par + (size_t)t * n, dir, 1, load);
    col[t] = t;
  }
  for (int i = 0; i < nr; i++)
    if (load[i] > 0)
      row[m++] = i;
  if (m == 0) { /* every rank on one vertex: no link carries anything */
    w[0] = TP_LOC_BW;
    tot = w[0];
    goto out;
  }
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < m; i++)
      bw[i] = ph->bw[row[i]];
    for (int j = 0; j < k; j++) {
      memset(load, 0, sizeof(double) * (size_t)nr);
      phys_load(ph, par + (size_t)col[j] * n, dir, 1, load);
      double hops = 0;
      for (int i = 0; i < m; i++) {
        A[(size_t)i * k + j] = load[row[i]];
        hops += load[row[i]];
      }
      /* Worth of a unit of rate: 1, less TP_HOP_COST per extra hop of an
       * average arc (an arc of the tree carries the rate once, twice for
       * allreduce). */
      double arcs = (double)(n - 1) * (dir == 2 ? 2 : 1);
      /* ... and less TP_BRANCH_COST per branching (a rank passing a chunk
       * to more than one child, or more than two tree neighbours for
       * allreduce): one channel serves its branches one after another. */
      const int *pa = par + (size_t)col[j] * n;
      double br = 0;
      for (int v = 0; v < n; v++) {
        int deg = pa[v] >= 0 && dir == 2;
        for (int u = 0; u < n; u++)
          deg += pa[u] == v;
        br += deg > (dir == 2 ? 2 : 1) ? deg - (dir == 2 ? 2 : 1) : 0;
      }
      val[j] = 1.0 / (1.0 + TP_HOP_COST * (hops - arcs) / arcs) /
               (1.0 + TP_BRANCH_COST * br / (n - 1));
    }
    r = treepack_lp(A, bw, val, m, k, x);
    if (r != BRAID_SUCCESS)
      goto out;
    int kept = 0; /* the heaviest maxt trees with a share of the rate */
    tot = 0;
    for (int j = 0; j < k; j++)
      tot += x[j];
    for (int j = 0; j < k; j++) {
      int rank = 0;
      for (int i = 0; i < k; i++)
        rank += x[i] > x[j] || (x[i] == x[j] && i < j);
      load[j] = x[j] > 1e-9 * tot && rank < maxt; /* keep? */
    }
    for (int j = 0; j < k; j++)
      if (load[j] > 0) {
        x[kept] = x[j];
        col[kept++] = col[j];
      }
    int drop = kept < k;
    k = kept;
    if (!drop || pass == 1) /* solved on exactly the kept trees */
      break;
  }
  tot = 0;
  for (int j = 0; j < k; j++) {
    w[col[j]] = x[j];
    tot += x[j];
  }
out:
  free(row);
  free(col);
  free(load);
  free(A);
  free(bw);
  free(x);
  free(val);
  *total = r == BRAID_SUCCESS ? tot : 0;
  return r;
}

/* The matrix trees are packed on, from raw (data direction a -> b):
 * transposed for reduce (data flows towards the root), the smaller of both
 * ways for allreduce. *reached: 1 when every rank is reached, 0 when not.
 * BRAID_SUCCESS or BRAID_ERR_NOMEM. */
static braid_result orient(const gen_params *p, const double *raw, double *cap,
                           int *reached) {
  int n = p->nranks, und = p->coll == SCHED_ALLREDUCE;
  flow_net *f = flow_new(n);
  if (!f)
    return ERR(BRAID_ERR_NOMEM,
               "treepack: no memory for a flow graph of %d "
               "ranks",
               n);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      double c = raw[(size_t)a * n + b];
      if (p->coll == SCHED_REDUCE)
        c = raw[(size_t)b * n + a];
      if (und && raw[(size_t)b * n + a] < c)
        c = raw[(size_t)b * n + a];
      cap[(size_t)a * n + b] = f->cap[(size_t)a * n + b] =
          (c > 0 && a != b) ? c : 0;
    }
  *reached = flow_broadcast_rate(f, und ? 0 : p->root) > 0;
  flow_free(f);
  return BRAID_SUCCESS;
}

/* Every pair joined: a sliver where the graph has nothing. */
static void patch(double *cap, int n) {
  double mx = 0;
  for (int i = 0; i < n * n; i++)
    if (cap[i] > mx)
      mx = cap[i];
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b && cap[(size_t)a * n + b] <= 0)
        cap[(size_t)a * n + b] = mx > 0 ? mx * 1e-3 : 1.0;
}

/* Appends tree pa (n parents) to the pool unless it is there already. */
static void pool_add(int *pool, int *np, int n, const int *pa) {
  for (int u = 0; u < *np; u++)
    if (!memcmp(pool + (size_t)u * n, pa, sizeof(int) * (size_t)n))
      return;
  memmove(pool + (size_t)(*np)++ * n, pa, sizeof(int) * (size_t)n);
}

/* Chains along ring order ord: from the root both ways round (broadcast,
 * reduce), or the ring cut at each position and held at its middle
 * (allreduce). Chains keep every rank's degree at most 2. */
static void add_chains(int *pool, int *np, int cap, int n, const int *ord,
                       int und, int root, int *pa) {
  for (int c = 0; c < n && *np < cap; c++) {
    if (!und && (ord[c] != root))
      continue;
    for (int way = 0; way < (und ? 1 : 2) && *np < cap; way++) {
      int step = way ? n - 1 : 1, mid = und ? (n - 1) / 2 : 0;
      /* ord[c + mid] is the top; ranks before and after it hang off it. */
      for (int i = 0; i < n; i++) {
        int pos = (c + i * step) % n, toward;
        if (i == mid)
          toward = -1;
        else
          toward = ord[(c + (i < mid ? i + 1 : i - 1) * step) % n];
        pa[ord[pos]] = toward;
      }
      pool_add(pool, np, n, pa);
    }
  }
}

/* Packs trees on each candidate graph: the flow graph of the ranks
 * (flow_from_view, SCHED_ROUTE_ANY), the routes that cross no other rank's
 * vertex, and the one-hop routes; then weights the union of those trees by
 * the links under them (phys_weights). Routes through another rank's GPU
 * share that rank's links, which the flow graph counts twice; the link-level
 * weights undo that, and the other candidates avoid it. Gives the trees with
 * a positive rate in *parp (allocated), w and *ntp; a refusal where no tree
 * carries data, or BRAID_ERR_NOMEM. */
static braid_result plan(const gen_params *p, int maxt, int **parp, double *w,
                         int *ntp) {
  int n = p->nranks, und = p->coll == SCHED_ALLREDUCE;
  int root = und ? 0 : p->root;
  int dir = und ? 2 : (p->coll == SCHED_REDUCE ? 1 : 0);
  size_t nn = (size_t)n * (size_t)n;
  phys ph;
  braid_result r = phys_init(&ph, p->view);
  int npool = 0;
  flow_net *f = flow_from_view(p->view, SCHED_ROUTE_ANY);
  double *raw = calloc(nn, sizeof(double)), *cap = calloc(nn, sizeof(double));
  int pool_cap = TREEPACK_MAX_TREES * TP_NCAND + TP_CHAINS;
  int *pool = malloc(sizeof(int) * (size_t)n * (size_t)pool_cap);
  int *cap_i = malloc(sizeof(int) * (size_t)n);
  double tw[TREEPACK_MAX_TREES], *pw = malloc(sizeof(double) * pool_cap);
  if (r == BRAID_SUCCESS &&
      (!f || f->n != n || !raw || !cap || !pool || !cap_i || !pw))
    r = ERR(BRAID_ERR_NOMEM, "treepack: no memory to plan trees over %d ranks",
            n);
  for (int cand = 0; cand < TP_NCAND && r == BRAID_SUCCESS; cand++) {
    for (size_t ab = 0; ab < nn; ab++)
      raw[ab] = cand == 0 ? f->cap[ab]
                : ph.kind[ab] != TP_NONE &&
                        ph.kind[ab] <= (cand == 1 ? TP_FREE : TP_HOP)
                    ? ph.pbw[ab]
                    : 0;
    int ok = 0, nt = 0;
    r = orient(p, raw, cap, &ok);
    if (r != BRAID_SUCCESS || (!ok && cand > 0))
      continue;
    if (!ok)
      patch(cap, n);
    int *par = pool + (size_t)npool * n;
    r = treepack_pack(cap, n, root, und, TREEPACK_MAX_TREES, par, tw, &nt);
    if (r == BRAID_SUCCESS)
      for (int t = 0; t < nt; t++) /* append the new trees */
        pool_add(pool, &npool, n, par + (size_t)t * n);
    else if (r == BRAID_ERR_UNSUPPORTED) /* no tree on this graph */
      r = BRAID_SUCCESS;
  }
  if (r != BRAID_SUCCESS)
    goto out;
  int *ord = malloc(sizeof(int) * (size_t)n), *pa = cap_i;
  if (ord && pa) {
    ring_plan rp;
    for (int i = 0; i < n; i++)
      ord[i] = i;
    add_chains(pool, &npool, pool_cap, n, ord, und, root, pa);
    if (multiring_plan(p->view, 0, &rp) == BRAID_SUCCESS) {
      for (int c = 0; c < rp.nch; c++)
        add_chains(pool, &npool, pool_cap, n, rp.order + (size_t)c * n, und,
                   root, pa);
      ring_plan_free(&rp);
    }
  }
  free(ord);
  double total = 0;
  if (npool > 0)
    r = phys_weights(&ph, npool, pool, pw, dir, maxt, &total);
  if (r == BRAID_SUCCESS && !(total > 0))
    r = gen_refuse("treepack: no tree over the view's links carries data "
                   "between the %d ranks",
                   n);
  if (r != BRAID_SUCCESS)
    goto out;
  int nt = 0;
  for (int t = 0; t < npool; t++)
    if (pw[t] > 0) {
      memmove(pool + (size_t)nt * n, pool + (size_t)t * n,
              sizeof(int) * (size_t)n);
      w[nt++] = pw[t];
    }
  *parp = pool;
  pool = NULL;
  *ntp = nt;
out:
  phys_free(&ph);
  flow_free(f);
  free(raw);
  free(cap);
  free(pool);
  free(cap_i);
  free(pw);
  return r;
}

/* Channels of each tree. Channels that share a link share it about equally
 * per message in the executor (and the simulator), whatever their weights,
 * so a tree with k times the rate of the lightest runs on about k channels
 * of equal weight. At most maxch channels in all (maxch >= nt). */
static int replicas(const double *w, int nt, int maxch, int *rep) {
  double u = INFINITY;
  for (int t = 0; t < nt; t++)
    if (w[t] < u)
      u = w[t];
  for (;;) {
    int tot = 0;
    for (int t = 0; t < nt; t++) {
      double k = floor(w[t] / u + 0.5);
      rep[t] = k < 1 ? 1 : (k > maxch ? maxch : (int)k);
      tot += rep[t];
    }
    if (tot <= maxch)
      return tot;
    u *= 1.05;
  }
}

/* Channel c runs tree tree_of[c] with weight w[tree] / rep[tree]. */
static braid_result build(sched *s, const gen_params *p, int nt, const int *par,
                          const int *rep) {
  int n = p->nranks, K = s->chunks_per_block, c = 0;
  for (int t = 0; t < nt; t++) {
    ptree tr;
    braid_result r = ptree_init(&tr, n, par + (size_t)t * n);
    for (int k = 0; k < rep[t] && r == BRAID_SUCCESS; k++, c++)
      for (int q = 0; q < n && r == BRAID_SUCCESS; q++)
        r = tree_rank(sched_chan(s, q, c), p->coll, &tr, q, K);
    ptree_free(&tr);
    CHECKR(r);
  }
  return BRAID_SUCCESS;
}

/* Allreduce chunks: TREEPACK_AR_K, fewer when pieces of the block would
 * fall below TREEPACK_AR_PIECE bytes. Other collectives: 1 (no round trip
 * to hide). */
static int ar_chunks(const gen_params *p) {
  if (p->coll != SCHED_ALLREDUCE)
    return 1;
  if (p->bytes == 0 || p->bytes >= (size_t)TREEPACK_AR_K * TREEPACK_AR_PIECE)
    return TREEPACK_AR_K;
  size_t k = p->bytes / TREEPACK_AR_PIECE;
  return k < 1 ? 1 : (int)k;
}

braid_result gen_treepack(const gen_params *p, sched **out) {
  *out = NULL;
  if (!p)
    return ERR(BRAID_ERR_INVALID_ARG, "no generator or no parameters");
  gen_params q = *p;
  q.nchannels = 1; /* the trees decide the channels */
  CHECKR(gen_check(&q, &gen_treepack_desc));
  if (!p->view || !p->view->g)
    return gen_refuse("treepack needs a topology graph (%s)",
                      p->view ? "the view has none" : "no topology view");
  if (p->view->nranks != p->nranks)
    return gen_refuse("treepack: the view has %d ranks, the call %d",
                      p->view->nranks, p->nranks);
  int n = p->nranks;
  sched *s;
  if (n == 1) {
    CHECKR(sched_new(p->coll, 1, p->root, 1, 1, "treepack", &s));
    return gen_done(
        s, sched_copy(sched_chan(s, 0, 0), gen_in(0, 1), gen_out(0, 1)), out);
  }
  int maxt = p->max_channels > 0 ? p->max_channels : GEN_MAX_CHANNELS;
  if (maxt > GEN_MAX_CHANNELS)
    maxt = GEN_MAX_CHANNELS;
  if (maxt > TREEPACK_MAX_TREES)
    maxt = TREEPACK_MAX_TREES;
  int *par = NULL;
  int nt = 0, rep[TREEPACK_MAX_TREES];
  double w[TREEPACK_MAX_TREES];
  CHECKR(plan(p, maxt, &par, w, &nt));
  int maxch = maxt < TREEPACK_CHANNELS ? maxt : TREEPACK_CHANNELS;
  int nch = replicas(w, nt, maxch > nt ? maxch : nt, rep);
  double tot = 0;
  for (int t = 0; t < nt; t++)
    tot += w[t];
  braid_result r =
      sched_new(p->coll, n, p->root, ar_chunks(p), nch, "treepack", &s);
  if (r == BRAID_SUCCESS) {
    if (p->coll == SCHED_REDUCE && n > 2)
      s->scratch_blocks = 1;
    for (int t = 0, c = 0; t < nt; t++)
      for (int k = 0; k < rep[t]; k++)
        s->weights[c++] = w[t] / rep[t] / tot;
    r = gen_done(s, build(s, p, nt, par, rep), out);
  }
  free(par);
  return r;
}

const gen_desc gen_treepack_desc = {
    .name = "treepack",
    .fn = gen_treepack,
    .colls = ((1u << SCHED_ALLREDUCE) | (1u << SCHED_BROADCAST) |
              (1u << SCHED_REDUCE)),
    .needs = GEN_NEEDS_GRAPH,
    .flags = 0,
    .cost = NULL,
};
