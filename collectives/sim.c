/*
 * The simulator (see sim.h): a discrete-event run of a schedule on a system
 * graph.
 *
 * Agents. Every (rank, channel) is an agent that walks its step list once
 * per pipeline slice, chunk by chunk, exactly as src/executor.c's channel
 * state machine does (chan_init, chan_advance): a channel's share of chunk j
 * is [m_j * W_c, m_j * W_{c+1}) of the chunk's m_j bytes, cut into
 * S_c = ceil(max_j share / slice_bytes) slices; zero-length pieces are
 * skipped. Messages between two ranks on one channel match in FIFO order,
 * and a sender holds at most `slots` unconsumed messages per connection
 * (a slot is freed when the receiver has consumed the message).
 *
 * Transfers. A message of L bytes posted at time t on a path with links
 * l_1..l_k (each direction of a link is its own resource) takes each link
 * in turn, as far as the link is free:
 *   s_0 = t + alpha,  s_i = max(s_(i-1), free(l_i)),
 *   free(l_i) = s_i + L / bw(l_i),
 *   arrive = max_i free(l_i) + sum_i lat(l_i)
 * (without contention: t + alpha + L / min_i bw(l_i) + latencies). Links
 * are FIFO servers that reserve capacity slice by slice in the order
 * messages are posted (events are processed in time order). Concurrent flows
 * on one link therefore interleave their slices and each gets an equal share
 * on average, without recomputing rates on every event; a message never
 * waits on the links it does not cross, and a link it has reached is not
 * left idle while a later link of its path is busy (waiting for all links to
 * be free at once did that, and halved multi-hop all-to-all on a PCIe
 * switch). After each post the sender's channel is busy for the
 * class's posting overhead (its next send, receive or local step waits). alpha
 * is the software latency of the pair's class (inside a host or across hosts);
 * ranks on one vertex copy through that vertex's memory at loc_bw. A reduction
 * of L bytes costs L * gamma at the reducing rank; a local COPY costs L /
 * loc_bw.
 *
 * Routes: the channel's sched_route (see route.h); paths are computed once
 * per (sender vertex, receiver vertex, route) and cached. Memory is the
 * schedule plus one connection per (sender, receiver, channel) with its
 * `slots` message slots: nothing is stored per message.
 */
#include "sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "sim_int.h"

/* ---- small containers --------------------------------------------------- */

typedef struct hmap {
  uint64_t *key;
  int *val;
  size_t cap, n;
} hmap;

static int hmap_init(hmap *m, size_t want) {
  m->cap = 64;
  while (m->cap < want * 2)
    m->cap <<= 1;
  m->n = 0;
  m->key = malloc(m->cap * sizeof(uint64_t));
  m->val = malloc(m->cap * sizeof(int));
  if (!m->key || !m->val)
    return -1;
  memset(m->val, 0xff, m->cap * sizeof(int)); /* -1: empty */
  return 0;
}

static void hmap_free(hmap *m) {
  free(m->key);
  free(m->val);
}

static size_t hslot(const hmap *m, uint64_t k) {
  uint64_t h = k * 0x9e3779b97f4a7c15ull;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->val[i] >= 0 && m->key[i] != k)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int hmap_get(const hmap *m, uint64_t k) { return m->val[hslot(m, k)]; }

static int hmap_put(hmap *m, uint64_t k, int v) {
  if ((m->n + 1) * 2 > m->cap) {
    hmap o = *m;
    if (hmap_init(m, o.cap)) {
      hmap_free(m);
      *m = o;
      return -1;
    }
    for (size_t i = 0; i < o.cap; i++)
      if (o.val[i] >= 0) {
        size_t j = hslot(m, o.key[i]);
        m->key[j] = o.key[i];
        m->val[j] = o.val[i];
        m->n++;
      }
    hmap_free(&o);
  }
  size_t i = hslot(m, k);
  if (m->val[i] < 0)
    m->n++;
  m->key[i] = k;
  m->val[i] = v;
  return 0;
}

typedef struct ev {
  double t;
  uint64_t seq;
  int a;
} ev;

static int ev_before(const ev *x, const ev *y) {
  return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

/* ---- the simulation state ----------------------------------------------- */

typedef struct spath {
  int off, n; /* resources res[off .. off + n) */
  double bw, lat;
} spath;

typedef struct sconn {
  int src, dst, path;
  int head, count;
  double last;       /* arrival of the last message posted (FIFO) */
  int wrecv, wsend;  /* agents waiting on it, -1 none */
  double alpha, ovh; /* latency, sender's posting overhead (us) */
} sconn;

typedef struct agent {
  const sched_channel *sc;
  int rank, ch, slice, step, sub, phase, nslices, done;
  size_t io;   /* offset of its steps in cin/cout */
  double busy; /* posting its last message until then */
} agent;

typedef struct simst {
  const sched *s;
  const sched_view *v;
  const sim_params *p;
  topo_graph *g;
  route_ctx *rc;
  int K, nch, slots;
  size_t *plen; /* nch * K: channel share of chunk j, bytes */
  agent *ag;
  int nag;
  int *cin, *cout; /* per step of each agent: connection ids (-1 none) */
  sconn *conn;
  int nconn, capconn;
  double *q; /* nconn * slots arrival times */
  hmap cmap, pmap;
  spath *path;
  int npath, cappath;
  int *res;
  int nres, capres;
  double *rfree, *rbw;
  ev *heap;
  int nheap, capheap;
  uint64_t seq;
  size_t messages;
  double now;
  braid_result fail_rc; /* the first failure's result */
} simst;

/* Records what went wrong for the calling thread (ERR, at the caller's line),
 * keeps the result in st->fail_rc and returns -1 (FAILED for the agents), so
 * that the helpers keep returning ids and states: fail for a schedule or view
 * that cannot run (BRAID_ERR_INVALID_ARG), fail_r for another result. */
__attribute__((format(printf, 5, 6))) static int fail_at(const char *file,
                                                         int line, simst *st,
                                                         braid_result r,
                                                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st->fail_rc = err_vat(file, line, r, fmt, ap);
  va_end(ap);
  return -1;
}
#define fail(st, ...)                                                          \
  fail_at(__FILE__, __LINE__, (st), BRAID_ERR_INVALID_ARG, __VA_ARGS__)
#define fail_r(st, r, ...) fail_at(__FILE__, __LINE__, (st), (r), __VA_ARGS__)

static int grow(void **p, int *cap, int need, size_t esz) {
  if (need <= *cap)
    return 0;
  int c = *cap ? *cap : 16;
  while (c < need)
    c *= 2;
  void *n = realloc(*p, (size_t)c * esz);
  if (!n)
    return -1;
  *p = n;
  *cap = c;
  return 0;
}

static int push(simst *st, double t, int a) {
  if (grow((void **)&st->heap, &st->capheap, st->nheap + 1, sizeof(ev)))
    return -1;
  ev e = {t, st->seq++, a};
  int i = st->nheap++;
  while (i > 0) {
    int par = (i - 1) / 2;
    if (!ev_before(&e, &st->heap[par]))
      break;
    st->heap[i] = st->heap[par];
    i = par;
  }
  st->heap[i] = e;
  return 0;
}

static ev pop(simst *st) {
  ev top = st->heap[0], last = st->heap[--st->nheap];
  int i = 0, n = st->nheap;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && ev_before(&st->heap[c + 1], &st->heap[c]))
      c++;
    if (!ev_before(&st->heap[c], &last))
      break;
    st->heap[i] = st->heap[c];
    i = c;
  }
  if (n > 0)
    st->heap[i] = last;
  return top;
}

/* ---- paths and connections ------------------------------------------------
 */

static int path_get(simst *st, int ra, int rb, int route) {
  int va = st->v->vertex[ra], vb = st->v->vertex[rb];
  uint64_t key =
      ((uint64_t)va * (uint64_t)st->g->nv + (uint64_t)vb) * SCHED_NUM_ROUTES +
      (uint64_t)route;
  int id = hmap_get(&st->pmap, key);
  if (id >= 0)
    return id;
  if (grow((void **)&st->path, &st->cappath, st->npath + 1, sizeof(spath)))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for paths");
  spath *sp = &st->path[st->npath];
  int nl = st->g->nl;
  if (va == vb) {
    if (grow((void **)&st->res, &st->capres, st->nres + 1, sizeof(int)))
      return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for paths");
    sp->off = st->nres;
    sp->n = 1;
    sp->bw = st->p->loc_bw;
    sp->lat = 0;
    st->res[st->nres++] = 2 * nl + va;
  } else {
    topo_path tp;
    if (route_find(st->rc, va, vb, route, &tp) != 0)
      return fail(st,
                  "sim: no %s route from rank %d (%s) to rank %d (%s) on %s",
                  sched_route_name((sched_route)route), ra, st->g->v[va].name,
                  rb, st->g->v[vb].name, st->g->name);
    if (grow((void **)&st->res, &st->capres, st->nres + tp.nhops,
             sizeof(int))) {
      topo_path_release(&tp);
      return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for paths");
    }
    sp->off = st->nres;
    sp->n = tp.nhops;
    sp->bw = INFINITY;
    sp->lat = tp.lat_us;
    for (int i = 0; i < tp.nhops; i++) {
      int l = tp.links[i];
      int dir = st->g->links[l].a == tp.verts[i] ? 0 : 1;
      st->res[st->nres++] = 2 * l + dir;
      if (st->g->links[l].bw < sp->bw)
        sp->bw = st->g->links[l].bw;
    }
    topo_path_release(&tp);
    if (!(sp->bw > 0))
      return fail(st, "sim: route from rank %d to rank %d has no bandwidth", ra,
                  rb);
  }
  if (hmap_put(&st->pmap, key, st->npath))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for paths");
  return st->npath++;
}

static int conn_get(simst *st, int src, int dst, int ch) {
  uint64_t key = ((uint64_t)src * (uint64_t)st->s->nranks + (uint64_t)dst) *
                     (uint64_t)st->nch +
                 (uint64_t)ch;
  int id = hmap_get(&st->cmap, key);
  if (id >= 0)
    return id;
  int route = st->s->route ? st->s->route[ch] : SCHED_ROUTE_ANY;
  if (route < 0 || route >= SCHED_NUM_ROUTES)
    return fail(st, "sim: channel %d has route %d", ch, route);
  int path = path_get(st, src, dst, route);
  if (path < 0)
    return -1;
  if (grow((void **)&st->conn, &st->capconn, st->nconn + 1, sizeof(sconn)))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for connections");
  sconn *c = &st->conn[st->nconn];
  memset(c, 0, sizeof *c);
  c->src = src;
  c->dst = dst;
  c->path = path;
  c->wrecv = c->wsend = -1;
  int same = st->v->host[src] == st->v->host[dst];
  c->alpha = same ? st->p->alpha_intra_us : st->p->alpha_net_us;
  c->ovh = same ? st->p->overhead_intra_us : st->p->overhead_net_us;
  if (hmap_put(&st->cmap, key, st->nconn))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for connections");
  return st->nconn++;
}

static int check_peer(simst *st, const agent *a, int i, int peer) {
  if (peer < 0 || peer >= st->s->nranks || peer == a->rank)
    return fail(st, "sim: rank %d channel %d step %d (%s): bad peer %d",
                a->rank, a->ch, i,
                sched_prim_name((sched_prim)a->sc->steps[i].prim), peer);
  return 0;
}

/* Connection ids of every step of every agent. */
static int setup_conns(simst *st) {
  for (int ai = 0; ai < st->nag; ai++) {
    agent *a = &st->ag[ai];
    for (int i = 0; i < a->sc->nsteps; i++) {
      const sched_step *sp = &a->sc->steps[i];
      int in = -1, out = -1, to = -1, from = -1;
      switch ((sched_prim)sp->prim) {
      case SCHED_P_SEND:
        to = sp->peer;
        break;
      case SCHED_P_RECV:
      case SCHED_P_RECV_REDUCE:
      case SCHED_P_RECV_REDUCE_REV:
        from = sp->peer;
        break;
      case SCHED_P_RECV_REDUCE_SEND:
      case SCHED_P_RECV_COPY_SEND:
        from = sp->peer;
        to = sp->peer_out;
        break;
      case SCHED_P_COPY:
      case SCHED_P_REDUCE:
        break;
      default:
        return fail(st, "sim: rank %d channel %d step %d: bad primitive %d",
                    a->rank, a->ch, i, sp->prim);
      }
      if (from != -1 || sp->prim == SCHED_P_RECV) {
        if (check_peer(st, a, i, from) ||
            (in = conn_get(st, from, a->rank, a->ch)) < 0)
          return -1;
      }
      if (to != -1 || sp->prim == SCHED_P_SEND) {
        if (check_peer(st, a, i, to) ||
            (out = conn_get(st, a->rank, to, a->ch)) < 0)
          return -1;
      }
      st->cin[a->io + (size_t)i] = in;
      st->cout[a->io + (size_t)i] = out;
    }
  }
  return 0;
}

/* ---- agents ------------------------------------------------------------- */

enum { GO = 0, STOP = 1, FAILED = -1 };

static size_t msg_len(const simst *st, const agent *a, const sched_step *sp) {
  const sched_chunks *ck = sp->src.buf != SCHED_BUF_NONE ? &sp->src : &sp->dst;
  uint32_t idx = ck->index + (uint32_t)a->sub;
  size_t L = st->plen[(size_t)a->ch * st->K + idx % (uint32_t)st->K];
  size_t S = (size_t)a->nslices, s = (size_t)a->slice;
  return L * (s + 1) / S - L * s / S;
}

/* The agent is still paying its last post's overhead: come back then. */
static int busy(simst *st, agent *a, int ai) {
  if (a->busy <= st->now)
    return GO;
  if (push(st, a->busy, ai))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for events");
  return STOP;
}

static int try_send(simst *st, int ci, size_t len, int ai) {
  sconn *c = &st->conn[ci];
  agent *a = &st->ag[ai];
  int b = busy(st, a, ai);
  if (b != GO)
    return b;
  if (c->count >= st->slots) {
    c->wsend = ai;
    return STOP;
  }
  const spath *sp = &st->path[c->path];
  const int *res = st->res + sp->off;
  double head = st->now + c->alpha, arr = head;
  for (int i = 0; i < sp->n; i++) {
    double s = st->rfree[res[i]] > head ? st->rfree[res[i]] : head;
    double e = s + (double)len / (st->rbw[res[i]] * 1e3);
    st->rfree[res[i]] = e;
    head = s;
    if (e > arr)
      arr = e;
  }
  arr += sp->lat;
  if (arr < c->last)
    arr = c->last;
  c->last = arr;
  st->q[(size_t)ci * st->slots + (size_t)((c->head + c->count) % st->slots)] =
      arr;
  c->count++;
  st->messages++;
  a->busy = st->now + c->ovh;
  if (c->wrecv >= 0) {
    if (push(st, arr, c->wrecv))
      return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for events");
    c->wrecv = -1;
  }
  return GO;
}

static int try_recv(simst *st, int ci, int ai) {
  sconn *c = &st->conn[ci];
  if (c->count == 0) {
    c->wrecv = ai;
    return STOP;
  }
  double arr = st->q[(size_t)ci * st->slots + (size_t)c->head];
  if (st->ag[ai].busy > arr)
    arr = st->ag[ai].busy;
  if (arr > st->now) {
    if (push(st, arr, ai))
      return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for events");
    return STOP;
  }
  c->head = (c->head + 1) % st->slots;
  c->count--;
  if (c->wsend >= 0) {
    if (push(st, st->now, c->wsend))
      return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for events");
    c->wsend = -1;
  }
  return GO;
}

/* Runs agent ai at st->now until it blocks, waits or finishes. */
static int run_agent(simst *st, int ai) {
  agent *a = &st->ag[ai];
  const sched_channel *sc = a->sc;
  for (;;) {
    if (a->slice >= a->nslices) {
      a->done = 1;
      return GO;
    }
    if (a->step >= sc->nsteps) {
      a->step = 0;
      a->slice++;
      continue;
    }
    const sched_step *sp = &sc->steps[a->step];
    int n =
        (int)(sp->src.buf != SCHED_BUF_NONE ? sp->src.count : sp->dst.count);
    if (a->sub >= n) {
      a->sub = 0;
      a->phase = 0;
      a->step++;
      continue;
    }
    size_t len = msg_len(st, a, sp);
    if (len == 0) {
      a->sub++;
      continue;
    }
    size_t io = a->io + (size_t)a->step;
    int r = GO;
    double cost = 0;
    switch ((sched_prim)sp->prim) {
    case SCHED_P_SEND:
      r = try_send(st, st->cout[io], len, ai);
      break;
    case SCHED_P_COPY:
    case SCHED_P_REDUCE:
      if (a->phase == 0) {
        if ((r = busy(st, a, ai)) != GO)
          break;
        a->phase = 1;
        cost = sp->prim == SCHED_P_COPY ? (double)len / (st->p->loc_bw * 1e3)
                                        : (double)len * st->p->gamma_ns * 1e-3;
      }
      break;
    default: /* the receiving primitives */
      if (a->phase == 0) {
        r = try_recv(st, st->cin[io], ai);
        if (r != GO)
          break;
        a->phase = 1;
        if (sched_prim_reduces_msg((sched_prim)sp->prim))
          cost = (double)len * st->p->gamma_ns * 1e-3;
        if (cost > 0)
          break;
      }
      if (st->cout[io] >= 0)
        r = try_send(st, st->cout[io], len, ai);
      break;
    }
    if (r != GO)
      return r;
    if (cost > 0) {
      if (push(st, st->now + cost, ai))
        return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for events");
      return STOP;
    }
    a->phase = 0;
    a->sub++;
  }
}

static void describe_stuck(simst *st) {
  for (int ai = 0; ai < st->nag; ai++) {
    agent *a = &st->ag[ai];
    if (a->done)
      continue;
    const sched_step *sp = &a->sc->steps[a->step];
    int peer = sp->peer;
    if (a->phase == 1 || sp->prim == SCHED_P_SEND)
      peer = sp->prim == SCHED_P_SEND ? sp->peer : sp->peer_out;
    fail(st,
         "sim: deadlock: rank %d channel %d waits at step %d (%s, peer %d, "
         "slice %d of %d)",
         a->rank, a->ch, a->step, sched_prim_name((sched_prim)sp->prim), peer,
         a->slice, a->nslices);
    return;
  }
  for (int ci = 0; ci < st->nconn; ci++)
    if (st->conn[ci].count > 0) {
      fail(st, "sim: %d message(s) from rank %d to rank %d never received",
           st->conn[ci].count, st->conn[ci].src, st->conn[ci].dst);
      return;
    }
}

/* ---- sim_run --------------------------------------------------------------
 */

static void st_free(simst *st) {
  route_ctx_free(st->rc);
  free(st->plen);
  free(st->ag);
  free(st->cin);
  free(st->cout);
  free(st->conn);
  free(st->q);
  hmap_free(&st->cmap);
  hmap_free(&st->pmap);
  free(st->path);
  free(st->res);
  free(st->rfree);
  free(st->rbw);
  free(st->heap);
}

static braid_result check_args(const sched *s, const sched_view *v,
                               const sim_params *p) {
  if (!s || !v || !p || !v->g)
    return ERR(BRAID_ERR_INVALID_ARG, "sim: %s",
               !s   ? "no schedule"
               : !v ? "no view"
               : !p ? "no parameters"
                    : "the view has no graph");
  if (s->nranks != v->nranks)
    return ERR(BRAID_ERR_INVALID_ARG,
               "sim: the schedule has %d ranks, the view %d", s->nranks,
               v->nranks);
  if (s->nchannels < 1 || s->chunks_per_block < 1)
    return ERR(BRAID_ERR_INVALID_ARG,
               "sim: schedule with %d channels, %d chunks per block",
               s->nchannels, s->chunks_per_block);
  if (p->slots < 1 || p->slice_bytes < 1 || !(p->loc_bw > 0) ||
      p->gamma_ns < 0 || p->alpha_intra_us < 0 || p->alpha_net_us < 0 ||
      p->overhead_intra_us < 0 || p->overhead_net_us < 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "sim: bad parameters (slots %d, slice %zu, loc_bw %g, gamma %g)",
               p->slots, p->slice_bytes, p->loc_bw, p->gamma_ns);
  for (int r = 0; r < v->nranks; r++)
    if (v->vertex[r] < 0 || v->vertex[r] >= v->g->nv)
      return ERR(BRAID_ERR_INVALID_ARG, "sim: rank %d has no vertex in %s", r,
                 v->g->name);
  return BRAID_SUCCESS;
}

static int st_init(simst *st, size_t bytes) {
  const sched *s = st->s;
  int K = st->K, nch = st->nch;
  st->plen = malloc((size_t)nch * (size_t)K * sizeof(size_t));
  st->ag = calloc((size_t)s->nranks * (size_t)nch, sizeof(agent));
  st->rc = route_ctx_new(st->g);
  size_t nres = 2 * (size_t)st->g->nl + (size_t)st->g->nv;
  st->rfree = calloc(nres, sizeof(double));
  st->rbw = malloc(nres * sizeof(double));
  if (!st->plen || !st->ag || !st->rc || !st->rfree || !st->rbw ||
      hmap_init(&st->pmap, 64))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory");
  for (int l = 0; l < st->g->nl; l++)
    st->rbw[2 * l] = st->rbw[2 * l + 1] = st->g->links[l].bw;
  for (int i = 0; i < st->g->nv; i++)
    st->rbw[2 * st->g->nl + i] = st->p->loc_bw;
  /* channel shares and slices, as src/executor.c's part_range/chan_init */
  int *nslices = malloc((size_t)nch * sizeof(int));
  if (!nslices)
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory");
  double w = 0;
  for (int c = 0; c < nch; c++) {
    double wn = c == nch - 1 ? 1.0 : w + s->weights[c];
    size_t maxpart = 0;
    for (int j = 0; j < K; j++) {
      size_t m = sched_chunk_len(bytes, K, j);
      size_t lo = (size_t)((double)m * w);
      size_t hi = wn >= 1.0 ? m : (size_t)((double)m * wn);
      if (hi > m)
        hi = m;
      if (lo > hi)
        lo = hi;
      st->plen[(size_t)c * K + j] = hi - lo;
      if (hi - lo > maxpart)
        maxpart = hi - lo;
    }
    nslices[c] =
        maxpart == 0
            ? 1
            : (int)((maxpart + st->p->slice_bytes - 1) / st->p->slice_bytes);
    w = wn;
  }
  size_t nsteps = 0;
  for (int r = 0; r < s->nranks; r++)
    for (int c = 0; c < nch; c++) {
      const sched_channel *sc = sched_chan_c(s, r, c);
      if (!sc || sc->nsteps == 0)
        continue;
      agent *a = &st->ag[st->nag++];
      a->sc = sc;
      a->rank = r;
      a->ch = c;
      a->nslices = nslices[c];
      a->io = nsteps;
      nsteps += (size_t)sc->nsteps;
    }
  free(nslices);
  st->cin = malloc((nsteps ? nsteps : 1) * sizeof(int));
  st->cout = malloc((nsteps ? nsteps : 1) * sizeof(int));
  if (!st->cin || !st->cout || hmap_init(&st->cmap, (size_t)st->nag * 2 + 16))
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for %zu steps",
                  nsteps);
  if (setup_conns(st))
    return -1;
  st->q = malloc(((size_t)st->nconn * st->slots + 1) * sizeof(double));
  if (!st->q)
    return fail_r(st, BRAID_ERR_NOMEM, "sim: out of memory for %d connections",
                  st->nconn);
  return 0;
}

braid_result sim_run(const sched *s, const sched_view *v, size_t bytes,
                     const sim_params *p, sim_result *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!out)
    return ERR(BRAID_ERR_INVALID_ARG, "sim: no result");
  CHECKR(check_args(s, v, p));
  simst st;
  memset(&st, 0, sizeof st);
  st.s = s;
  st.v = v;
  st.p = p;
  st.g = v->g;
  st.K = s->chunks_per_block;
  st.nch = s->nchannels;
  st.slots = p->slots;
  int rc = st_init(&st, bytes);
  double end = 0;
  for (int ai = 0; rc == 0 && ai < st.nag; ai++)
    if (push(&st, 0, ai))
      rc = fail_r(&st, BRAID_ERR_NOMEM, "sim: out of memory for events");
  while (rc == 0 && st.nheap > 0) {
    ev e = pop(&st);
    st.now = e.t;
    if (st.ag[e.a].done)
      continue;
    if (run_agent(&st, e.a) == FAILED)
      rc = -1;
    else if (st.now > end)
      end = st.now;
  }
  if (rc == 0) {
    for (int ai = 0; ai < st.nag && rc == 0; ai++)
      if (!st.ag[ai].done)
        rc = -1;
    for (int ci = 0; ci < st.nconn && rc == 0; ci++)
      if (st.conn[ci].count > 0)
        rc = -1;
    if (rc)
      describe_stuck(&st);
  }
  if (rc == 0) {
    out->time_us = end;
    out->messages = st.messages;
    double size = sim_size_bytes(s->coll, s->nranks, bytes);
    out->algbw = end > 0 ? size / (end * 1e3) : 0;
    out->busbw = out->algbw * sim_bus_factor(s->coll, s->nranks);
    out->bound_us = sim_bound_us(s->coll, s->root, v, bytes, p);
    out->efficiency = out->bound_us >= 0 && end > 0 ? out->bound_us / end : 0;
  }
  st_free(&st);
  return rc ? st.fail_rc : BRAID_SUCCESS;
}
