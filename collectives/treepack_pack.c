/*
 * Spanning-tree packing for collectives/treepack.c: weighted spanning trees
 * on a dense capacity matrix (GB/s) whose rates add up to (nearly) the best
 * rate the graph allows.
 *
 * Directed (broadcast from a root; reduce packs on the transposed matrix):
 * Edmonds' theorem says the largest number of arc-disjoint spanning
 * arborescences rooted at r equals min over v of maxflow(r -> v). We round
 * capacities down to multiples of a unit u (chosen among the capacities and
 * their small fractions so that k * u is largest, k the integral Edmonds
 * number of the rounded multigraph) and build the k arborescences one at a
 * time by Lovász's constructive proof: grow an arborescence A from r, adding
 * an arc (x, y), x in A, y not in A, only if the multigraph left after
 * removing A and (x, y) still has maxflow(r -> y) >= k' - 1 (k' = the number
 * of arborescences still to build, including A). Only sets containing y lose
 * an in-arc, so that single max-flow decides; the proof guarantees an arc
 * always qualifies.
 *
 * Undirected (allreduce: a tree's edges carry the reduction up and the
 * result down, so a tree of rate w uses w on both directions of each edge):
 * spanning trees of the multigraph with min(c_ab, c_ba) / u parallel edges,
 * packed by the matroid partition algorithm (shortest augmenting exchange
 * paths among k forests); k is the largest count whose forests all span
 * (Nash-Williams/Tutte), found by bisection.
 *
 * Larger rank counts (above TPK_EXACT_MAX, TPK_EXACT_MAX_UND for undirected
 * trees) take a greedy packing: the widest
 * spanning arborescence (or maximum bottleneck spanning tree) of the residual
 * capacities, weighted by its bottleneck, subtracted, repeated.
 *
 * Afterwards identical trees merge, the leftover real capacity is handed out
 * greedily (each tree grows by its residual bottleneck), and when more trees
 * remain than allowed the lightest are dropped and the rest grown again.
 * Undirected trees are then rooted at a central vertex, spreading the roots.
 *
 * treepack_lp: the small linear program treepack.c solves to weight trees
 * by the links under them (dense simplex).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "treepack_int.h"

#define TPK_EXACT_MAX 32     /* ranks: exact packing up to here, greedy above */
#define TPK_EXACT_MAX_UND 12 /* the same for undirected trees */

/* ---- integral max flow (Edmonds-Karp), stopping at `limit` ---- */

typedef struct iflow_ws {
  int *res, *prev, *queue;
} iflow_ws;

static int iflow(const int *cap, int n, int s, int t, int limit,
                 const iflow_ws *ws) {
  memcpy(ws->res, cap, sizeof(int) * (size_t)n * (size_t)n);
  int flow = 0;
  while (flow < limit) {
    for (int i = 0; i < n; i++)
      ws->prev[i] = -1;
    ws->prev[s] = s;
    int head = 0, tail = 0;
    ws->queue[tail++] = s;
    while (head < tail && ws->prev[t] < 0) {
      int x = ws->queue[head++];
      const int *row = ws->res + (size_t)x * n;
      for (int y = 0; y < n; y++)
        if (row[y] > 0 && ws->prev[y] < 0) {
          ws->prev[y] = x;
          ws->queue[tail++] = y;
        }
    }
    if (ws->prev[t] < 0)
      break;
    int b = limit - flow;
    for (int y = t; y != s; y = ws->prev[y]) {
      int r = ws->res[(size_t)ws->prev[y] * n + y];
      if (r < b)
        b = r;
    }
    for (int y = t; y != s; y = ws->prev[y]) {
      ws->res[(size_t)ws->prev[y] * n + y] -= b;
      ws->res[(size_t)y * n + ws->prev[y]] += b;
    }
    flow += b;
  }
  return flow;
}

/* Rounds cap / u down into m (diagonal 0). Undirected: min of both ways. */
static void quantize(const double *cap, int n, double u, int undirected,
                     int *m) {
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      double c = cap[(size_t)a * n + b];
      if (undirected && cap[(size_t)b * n + a] < c)
        c = cap[(size_t)b * n + a];
      double q = a == b ? 0 : floor(c / u * (1 + 1e-9));
      m[(size_t)a * n + b] = q > TREEPACK_KMAX ? TREEPACK_KMAX : (int)q;
    }
}

/* ---- directed: Lovász's arborescence construction ---- */

static int edmonds_number(const int *m, int n, int root, const iflow_ws *ws) {
  int k = INT_MAX;
  for (int v = 0; v < n; v++)
    if (v != root) {
      int f = iflow(m, n, root, v, k, ws);
      if (f < k)
        k = f;
    }
  return k;
}

/* Builds k arc-disjoint arborescences of multigraph m (destroyed); par is
 * k x n. Returns 0, or -1 when the construction got stuck (cannot happen
 * when k <= the Edmonds number). */
static int lovasz(int *m, int n, int root, int k, int *par, const iflow_ws *ws,
                  int *depth, int *order) {
  for (int i = 0; i < k; i++) {
    int *pa = par + (size_t)i * n, left = k - i - 1, size = 1;
    for (int v = 0; v < n; v++) {
      pa[v] = -1;
      depth[v] = -1;
    }
    depth[root] = 0;
    order[0] = root;
    while (size < n) {
      int done = 0;
      /* Shallow first (short trees, low latency), then wide arcs. */
      for (int oi = 0; oi < size && !done; oi++) {
        int x = order[oi], best = -1;
        for (int y = 0; y < n; y++) {
          if (depth[y] >= 0 || m[(size_t)x * n + y] <= 0)
            continue;
          m[(size_t)x * n + y]--;
          int ok = left == 0 || iflow(m, n, root, y, left, ws) >= left;
          m[(size_t)x * n + y]++;
          if (ok &&
              (best < 0 || m[(size_t)x * n + y] > m[(size_t)x * n + best]))
            best = y;
        }
        if (best >= 0) {
          m[(size_t)x * n + best]--;
          pa[best] = x;
          depth[best] = depth[x] + 1;
          order[size++] = best;
          done = 1;
        }
      }
      if (!done)
        return -1;
    }
  }
  return 0;
}

/* ---- undirected: matroid partition into k forests ---- */

typedef struct forests {
  int n, k, nm;
  int *ea, *eb, *as;       /* multi-edge ends, forest of each (-1 none) */
  int *pe, *dep, *comp;    /* per forest x vertex: parent edge, depth, tree */
  int *from, *queue, *adj; /* BFS over edges; adjacency scratch */
  int *adjn;
} forests;

/* Roots every forest (parent edge, depth, component) from the assignment. */
static void forests_index(forests *F) {
  int n = F->n;
  for (int f = 0; f < F->k; f++) {
    int *pe = F->pe + (size_t)f * n, *dep = F->dep + (size_t)f * n,
        *comp = F->comp + (size_t)f * n;
    for (int v = 0; v < n; v++) {
      F->adjn[v] = 0;
      comp[v] = -1;
      pe[v] = -1;
      dep[v] = 0;
    }
    for (int e = 0; e < F->nm; e++)
      if (F->as[e] == f) {
        F->adj[(size_t)F->ea[e] * n + F->adjn[F->ea[e]]++] = e;
        F->adj[(size_t)F->eb[e] * n + F->adjn[F->eb[e]]++] = e;
      }
    for (int s = 0; s < n; s++) {
      if (comp[s] >= 0)
        continue;
      int head = 0, tail = 0;
      comp[s] = s;
      F->queue[tail++] = s;
      while (head < tail) {
        int x = F->queue[head++];
        for (int i = 0; i < F->adjn[x]; i++) {
          int e = F->adj[(size_t)x * n + i];
          int y = F->ea[e] == x ? F->eb[e] : F->ea[e];
          if (comp[y] >= 0)
            continue;
          comp[y] = s;
          pe[y] = e;
          dep[y] = dep[x] + 1;
          F->queue[tail++] = y;
        }
      }
    }
  }
}

/* Tries to add multi-edge e0 to the union of the forests. 1 if added. */
static int forests_insert(forests *F, int e0, char *seen) {
  int n = F->n;
  forests_index(F);
  memset(seen, 0, (size_t)F->nm);
  int head = 0, tail = 0;
  F->queue[tail++] = e0;
  seen[e0] = 1;
  F->from[e0] = -1;
  while (head < tail) {
    int x = F->queue[head++];
    for (int f = 0; f < F->k; f++) {
      if (F->as[x] == f)
        continue;
      const int *pe = F->pe + (size_t)f * n, *dep = F->dep + (size_t)f * n,
                *comp = F->comp + (size_t)f * n;
      int a = F->ea[x], b = F->eb[x];
      if (comp[a] != comp[b]) { /* x fits in forest f: shift the chain */
        int cur = x, to = f;
        while (cur >= 0) {
          int old = F->as[cur];
          F->as[cur] = to;
          to = old;
          cur = F->from[cur];
        }
        return 1;
      }
      while (a != b) { /* the cycle x closes in f */
        int *deeper = dep[a] >= dep[b] ? &a : &b;
        int e = pe[*deeper];
        if (!seen[e]) {
          seen[e] = 1;
          F->from[e] = x;
          F->queue[tail++] = e;
        }
        *deeper = F->ea[e] == *deeper ? F->eb[e] : F->ea[e];
      }
    }
  }
  return 0;
}

/* Packs k spanning trees in multigraph m (symmetric). Returns 1 with the
 * trees in F->as when all k forests span, 0 when not, -1 out of memory. */
static int forests_pack(const int *m, int n, int k, forests *F, char *seen) {
  F->k = k;
  F->nm = 0;
  /* Interleave parallel edges of all pairs (round by round). */
  for (int round = 0;; round++) {
    int any = 0;
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++)
        if (m[(size_t)a * n + b] > round) {
          any = 1;
          F->ea[F->nm] = a;
          F->eb[F->nm] = b;
          F->as[F->nm++] = -1;
        }
    if (!any)
      break;
  }
  int inserted = 0;
  for (int e = 0; e < F->nm && inserted < k * (n - 1); e++)
    inserted += forests_insert(F, e, seen);
  return inserted == k * (n - 1);
}

/* ---- greedy packing on real capacities (large rank counts) ---- */

/* The widest spanning arborescence from root (undirected: max bottleneck
 * spanning tree) of res, by Prim's rule. Its bottleneck, or 0 if none. */
static double widest(const double *res, int n, int root, int undirected,
                     int *pa, double *key, char *in) {
  for (int v = 0; v < n; v++) {
    pa[v] = -1;
    key[v] = -1;
    in[v] = 0;
  }
  in[root] = 1;
  int last = root;
  double bott = INFINITY;
  for (int it = 1; it < n; it++) {
    for (int v = 0; v < n; v++) {
      if (in[v])
        continue;
      double c = res[(size_t)last * n + v];
      if (undirected && res[(size_t)v * n + last] < c)
        c = res[(size_t)v * n + last];
      if (c > key[v]) {
        key[v] = c;
        pa[v] = last;
      }
    }
    int best = -1;
    for (int v = 0; v < n; v++)
      if (!in[v] && (best < 0 || key[v] > key[best]))
        best = v;
    if (best < 0 || key[best] <= 0)
      return 0;
    in[best] = 1;
    if (key[best] < bott)
      bott = key[best];
    last = best;
  }
  return bott;
}

/* Subtracts (sign -1) or adds (+1) w along tree pa from res. */
static void charge(double *res, int n, const int *pa, int undirected,
                   double w) {
  for (int v = 0; v < n; v++) {
    if (pa[v] < 0)
      continue;
    res[(size_t)pa[v] * n + v] -= w;
    if (undirected)
      res[(size_t)v * n + pa[v]] -= w;
  }
}

static double tree_bottleneck(const double *res, int n, const int *pa,
                              int undirected) {
  double b = INFINITY;
  for (int v = 0; v < n; v++) {
    if (pa[v] < 0)
      continue;
    double c = res[(size_t)pa[v] * n + v];
    if (undirected && res[(size_t)v * n + pa[v]] < c)
      c = res[(size_t)v * n + pa[v]];
    if (c < b)
      b = c;
  }
  return b < 0 ? 0 : b;
}

/* Grows every tree by its residual bottleneck, heaviest first. */
static void fill(const double *cap, int n, int undirected, int nt,
                 const int *par, double *w, double *res) {
  memcpy(res, cap, sizeof(double) * (size_t)n * (size_t)n);
  for (int t = 0; t < nt; t++)
    charge(res, n, par + (size_t)t * n, undirected, w[t]);
  for (int t = 0; t < nt; t++) {
    double b = tree_bottleneck(res, n, par + (size_t)t * n, undirected);
    if (b > 0) {
      w[t] += b;
      charge(res, n, par + (size_t)t * n, undirected, b);
    }
  }
}

/* Reroots tree pa (rooted anywhere) at r. */
static void reroot(int *pa, int r) {
  int prev = -1, x = r;
  while (x >= 0) {
    int up = pa[x];
    pa[x] = prev;
    prev = x;
    x = up;
  }
}

/* Sorts trees by weight (heaviest first), merging identical ones. */
static int merge_sort(int n, int nt, int *par, double *w) {
  int out = 0;
  for (int t = 0; t < nt; t++) {
    int same = -1;
    for (int u = 0; u < out && same < 0; u++)
      if (!memcmp(par + (size_t)u * n, par + (size_t)t * n,
                  sizeof(int) * (size_t)n))
        same = u;
    if (same >= 0) {
      w[same] += w[t];
      continue;
    }
    memmove(par + (size_t)out * n, par + (size_t)t * n,
            sizeof(int) * (size_t)n);
    w[out++] = w[t];
  }
  for (int i = 1; i < out; i++) /* insertion sort, stable */
    for (int j = i; j > 0 && w[j] > w[j - 1]; j--) {
      double tw = w[j];
      w[j] = w[j - 1];
      w[j - 1] = tw;
      for (int v = 0; v < n; v++) {
        int tp = par[(size_t)j * n + v];
        par[(size_t)j * n + v] = par[(size_t)(j - 1) * n + v];
        par[(size_t)(j - 1) * n + v] = tp;
      }
    }
  return out;
}

/* Picks each undirected tree's root: the vertex of least height, ties to
 * the vertex that is root of fewest trees so far, then the lowest. */
static void pick_roots(int n, int nt, int *par, int *used) {
  memset(used, 0, sizeof(int) * (size_t)n);
  for (int t = 0; t < nt; t++) {
    int *pa = par + (size_t)t * n, best = -1, besth = 0;
    for (int r = 0; r < n; r++) {
      reroot(pa, r);
      int h = 0;
      for (int v = 0; v < n; v++) {
        int d = 0;
        for (int x = v; pa[x] >= 0; x = pa[x])
          d++;
        if (d > h)
          h = d;
      }
      if (best < 0 || h < besth || (h == besth && used[r] < used[best])) {
        best = r;
        besth = h;
      }
    }
    reroot(pa, best);
    used[best]++;
  }
}

/* Candidate units: every distinct capacity and its halves .. sixths. */
static int exact_pack(const double *cap, int n, int root, int undirected,
                      int *par, double *w, int *nt, int *m, const iflow_ws *ws,
                      forests *F, char *seen, int *depth, int *order) {
  double bestu = 0, tried[64];
  int bestk = 0, ntried = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      double c = cap[(size_t)a * n + b];
      if (a == b || c <= 0)
        continue;
      for (int d = 1; d <= 6; d++) {
        double u = c / d;
        int dup = 0;
        for (int i = 0; i < ntried && !dup; i++)
          dup = fabs(tried[i] - u) <= 1e-9 * u;
        if (dup || ntried == 64)
          continue;
        tried[ntried++] = u;
        quantize(cap, n, u, undirected, m);
        int k;
        if (!undirected) {
          k = edmonds_number(m, n, root, ws);
        } else {
          /* k <= edges / (n - 1), and every tree touches every rank. */
          int lo = 0, hi = TREEPACK_KMAX, tot = 0;
          for (int x = 0; x < n; x++) {
            int deg = 0;
            for (int y = 0; y < n; y++)
              deg += m[(size_t)x * n + y];
            tot += deg;
            if (deg < hi)
              hi = deg;
          }
          if (tot / 2 / (n - 1) < hi)
            hi = tot / 2 / (n - 1);
          while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (forests_pack(m, n, mid, F, seen) == 1)
              lo = mid;
            else
              hi = mid - 1;
          }
          k = lo;
        }
        if (k > TREEPACK_KMAX)
          continue;
        if (k * u > bestk * bestu * (1 + 1e-9) ||
            (k * u >= bestk * bestu * (1 - 1e-9) && k < bestk)) {
          bestk = k;
          bestu = u;
        }
      }
    }
  if (bestk == 0)
    return -1;
  quantize(cap, n, bestu, undirected, m);
  if (!undirected) {
    if (lovasz(m, n, root, bestk, par, ws, depth, order))
      return -1;
  } else {
    if (forests_pack(m, n, bestk, F, seen) != 1)
      return -1;
    forests_index(F);
    for (int t = 0; t < bestk; t++) { /* forest t as parents from vertex 0 */
      int *pa = par + (size_t)t * n;
      for (int v = 0; v < n; v++) {
        int e = F->pe[(size_t)t * n + v];
        pa[v] = e < 0 ? -1 : (F->ea[e] == v ? F->eb[e] : F->ea[e]);
      }
      reroot(pa, 0);
    }
  }
  for (int t = 0; t < bestk; t++)
    w[t] = bestu;
  *nt = bestk;
  return 0;
}

static int greedy_pack(const double *cap, int n, int root, int undirected,
                       int lim, int *par, double *w, int *nt, double *res,
                       double *key, char *in) {
  memcpy(res, cap, sizeof(double) * (size_t)n * (size_t)n);
  *nt = 0;
  while (*nt < lim) {
    int *pa = par + (size_t)*nt * n;
    double b = widest(res, n, root, undirected, pa, key, in);
    if (b <= 0)
      break;
    w[(*nt)++] = b;
    charge(res, n, pa, undirected, b);
  }
  return *nt > 0 ? 0 : -1;
}

braid_result treepack_pack(const double *cap, int n, int root, int undirected,
                           int maxt, int *par, double *w, int *ntrees) {
  if (n < 2)
    return ERR(BRAID_ERR_INVALID_ARG, "treepack: no trees over %d ranks", n);
  size_t nn = (size_t)n * (size_t)n, mmax = nn * TREEPACK_KMAX;
  int rc = -1, nt = 0;
  braid_result r = BRAID_SUCCESS;
  iflow_ws ws = {malloc(sizeof(int) * nn), malloc(sizeof(int) * (size_t)n),
                 malloc(sizeof(int) * (size_t)n)};
  int *m = calloc(nn, sizeof(int)), *depth = malloc(sizeof(int) * (size_t)n),
      *order = malloc(sizeof(int) * (size_t)n);
  double *res = malloc(sizeof(double) * nn),
         *key = malloc(sizeof(double) * (size_t)n);
  char *in = malloc((size_t)n), *seen = NULL;
  forests F = {0};
  if (!ws.res || !ws.prev || !ws.queue || !m || !depth || !order || !res ||
      !key || !in) {
    r = ERR(BRAID_ERR_NOMEM, "treepack: no memory to pack trees over %d ranks",
            n);
    goto out;
  }
  if (n <= (undirected ? TPK_EXACT_MAX_UND : TPK_EXACT_MAX)) {
    F.n = n;
    F.ea = malloc(sizeof(int) * mmax);
    F.eb = malloc(sizeof(int) * mmax);
    F.as = malloc(sizeof(int) * mmax);
    F.from = malloc(sizeof(int) * mmax);
    F.queue = malloc(sizeof(int) * (mmax > (size_t)n ? mmax : (size_t)n));
    F.pe = malloc(sizeof(int) * (size_t)n * TREEPACK_KMAX);
    F.dep = malloc(sizeof(int) * (size_t)n * TREEPACK_KMAX);
    F.comp = malloc(sizeof(int) * (size_t)n * TREEPACK_KMAX);
    F.adj = malloc(sizeof(int) * nn);
    F.adjn = malloc(sizeof(int) * (size_t)n);
    seen = malloc(mmax);
    if (!F.ea || !F.eb || !F.as || !F.from || !F.queue || !F.pe || !F.dep ||
        !F.comp || !F.adj || !F.adjn || !seen) {
      r = ERR(BRAID_ERR_NOMEM,
              "treepack: no memory to pack trees over %d ranks", n);
      goto out;
    }
    rc = exact_pack(cap, n, root, undirected, par, w, &nt, m, &ws, &F, seen,
                    depth, order);
  }
  if (rc)
    rc = greedy_pack(cap, n, root, undirected, TREEPACK_KMAX, par, w, &nt, res,
                     key, in);
  if (rc) {
    r = ERR(BRAID_ERR_UNSUPPORTED, "treepack: no spanning tree over %d ranks",
            n);
    goto out;
  }
  nt = merge_sort(n, nt, par, w);
  fill(cap, n, undirected, nt, par, w, res);
  if (nt > maxt) { /* drop the lightest, give their share to the rest */
    nt = maxt;
    fill(cap, n, undirected, nt, par, w, res);
    nt = merge_sort(n, nt, par, w);
  }
  if (undirected)
    pick_roots(n, nt, par, m);
  *ntrees = nt;
out:
  free(ws.res);
  free(ws.prev);
  free(ws.queue);
  free(m);
  free(depth);
  free(order);
  free(res);
  free(key);
  free(in);
  free(seen);
  free(F.ea);
  free(F.eb);
  free(F.as);
  free(F.from);
  free(F.queue);
  free(F.pe);
  free(F.dep);
  free(F.comp);
  free(F.adj);
  free(F.adjn);
  return r;
}

braid_result treepack_lp(const double *A, const double *b, const double *c,
                         int m, int k, double *x) {
  int cols = k + m + 1; /* variables, slacks, right-hand side */
  double *T = calloc((size_t)(m + 1) * (size_t)cols, sizeof(double));
  int *basis = malloc(sizeof(int) * (size_t)(m > 0 ? m : 1));
  if (!T || !basis) {
    free(T);
    free(basis);
    return ERR(BRAID_ERR_NOMEM,
               "treepack: no memory for a linear program of %d x %d", m, k);
  }
  for (int i = 0; i < m; i++) {
    double *row = T + (size_t)i * cols;
    for (int j = 0; j < k; j++)
      row[j] = A[(size_t)i * k + j];
    row[k + i] = 1;
    row[cols - 1] = b[i];
    basis[i] = k + i;
  }
  double *obj = T + (size_t)m * cols; /* reduced costs, negated */
  for (int j = 0; j < k; j++)
    obj[j] = -c[j];
  for (int it = 0; it < 50 * (m + k) + 100; it++) {
    int enter = -1;
    for (int j = 0; j < cols - 1 && enter < 0; j++)
      if (obj[j] < -1e-12)
        enter = j;
    if (enter < 0)
      break;
    int leave = -1;
    double best = INFINITY;
    for (int i = 0; i < m; i++) {
      double a = T[(size_t)i * cols + enter];
      if (a <= 1e-12)
        continue;
      double ratio = T[(size_t)i * cols + cols - 1] / a;
      if (ratio < best - 1e-12 ||
          (ratio <= best + 1e-12 && leave >= 0 && basis[i] < basis[leave])) {
        best = ratio;
        leave = i;
      }
    }
    if (leave < 0)
      break; /* unbounded: cannot happen with b > 0 and A >= 0 covering */
    double *pr = T + (size_t)leave * cols, piv = pr[enter];
    for (int j = 0; j < cols; j++)
      pr[j] /= piv;
    for (int i = 0; i <= m; i++) {
      double *row = T + (size_t)i * cols, f = row[enter];
      if (i == leave || f == 0)
        continue;
      for (int j = 0; j < cols; j++)
        row[j] -= f * pr[j];
    }
    basis[leave] = enter;
  }
  for (int j = 0; j < k; j++)
    x[j] = 0;
  for (int i = 0; i < m; i++)
    if (basis[i] < k)
      x[basis[i]] = T[(size_t)i * cols + cols - 1] > 0
                        ? T[(size_t)i * cols + cols - 1]
                        : 0;
  free(T);
  free(basis);
  return BRAID_SUCCESS;
}
