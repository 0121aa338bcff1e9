/*
 * Merging an MSCCL gpu's threadblocks into one braid channel
 * (msccl_int.h). braid's channels each carry a share of every chunk, while
 * MSCCL's threadblocks each carry some chunks, so every gpu's threadblocks
 * become the one channel of its rank, in the order a run of them would
 * take: the threadblocks of all gpus are stepped together, one chunk at a
 * time, messages between two gpus queue in order with room for two (the
 * verifier's slots), and each gpu takes the first step that can go,
 * receiving steps before local ones before sends. The order taken is each
 * rank's step list. When nothing can go, the reason is found by following
 * who waits for whom: a dependency cycle, a message nobody sends or one
 * sent on another channel first.
 */
#include "msccl_int.h"
#include "msccl_xml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"

#define ORDER_SLOTS 2

typedef struct msg {
  int chan, tb, step; /* the sender's */
} msg;

typedef struct fifo {
  msg *m;
  int head, len, cap;
} fifo;

typedef struct tbst {
  int pc, sub; /* next step, next chunk of it */
} tbst;

typedef struct ord {
  const ms_algo *a;
  int n;
  fifo *q;   /* n * n, q[from * n + to] */
  tbst **st; /* per gpu, per threadblock */
  sched *s;
  ms_origin **org;
  int *norg, *caporg;
} ord;

static fifo *Q(ord *o, int from, int to) { return &o->q[from * o->n + to]; }

static int push(fifo *f, msg m) {
  if (f->head + f->len == f->cap) {
    if (f->head) {
      memmove(f->m, f->m + f->head, (size_t)f->len * sizeof(msg));
      f->head = 0;
    } else {
      int cap = f->cap ? f->cap * 2 : 4;
      msg *nm = realloc(f->m, (size_t)cap * sizeof(msg));
      if (!nm)
        return -1;
      f->m = nm;
      f->cap = cap;
    }
  }
  f->m[f->head + f->len++] = m;
  return 0;
}

static const ms_step *head(const ord *o, int g, int t) {
  const ms_tb *tb = &o->a->gpu[g].tb[t];
  int pc = o->st[g][t].pc;
  return pc < tb->nsteps ? &tb->steps[pc] : NULL;
}

static int dep_done(const ord *o, int g, const ms_step *s) {
  return s->depid < 0 || o->st[g][s->depid].pc > s->deps;
}

/* 0: ready; 1: waits on its dependency; 2: no message (or one of another
 * channel) to receive; 3: no room to send; -1: finished. */
static int blocked(ord *o, int g, int t) {
  const ms_step *s = head(o, g, t);
  if (!s)
    return -1;
  if (!dep_done(o, g, s))
    return 1;
  const ms_tb *tb = &o->a->gpu[g].tb[t];
  ms_type ty = (ms_type)s->type;
  if (ms_recvs(ty)) {
    fifo *f = Q(o, tb->recv, g);
    if (!f->len || f->m[f->head].chan != tb->chan)
      return 2;
  }
  if (ms_sends(ty) && Q(o, g, tb->send)->len >= ORDER_SLOTS)
    return 3;
  return 0;
}

static int prio(ms_type t) { return ms_recvs(t) ? 0 : ms_sends(t) ? 2 : 1; }

static sched_chunks ck(int buf, int off) {
  return sched_ck((sched_buf)buf, (uint32_t)off, 1);
}

static int note(ord *o, int g, int t, int step) {
  if (o->norg[g] == o->caporg[g]) {
    int cap = o->caporg[g] ? o->caporg[g] * 2 : 16;
    ms_origin *no = realloc(o->org[g], (size_t)cap * sizeof(ms_origin));
    if (!no)
      return -1;
    o->org[g] = no;
    o->caporg[g] = cap;
  }
  o->org[g][o->norg[g]++] = (ms_origin){t, step};
  return 0;
}

/* Runs one chunk of threadblock t's next step on gpu g. */
static int run_one(ord *o, int g, int t) {
  const ms_tb *tb = &o->a->gpu[g].tb[t];
  tbst *ts = &o->st[g][t];
  const ms_step *s = &tb->steps[ts->pc];
  ms_type ty = (ms_type)s->type;
  int K = o->a->K, i = ts->sub;
  sched_channel *c = sched_chan(o->s, g, 0);
  sched_chunks src = ck(s->sbuf, s->soff + i), dst = ck(s->dbuf, s->doff + i);
  int rc = 0, local = ty == MS_CPY || ty == MS_RE || ty == MS_NOP;
  if (local) { /* whole step at once */
    src.count = dst.count = (uint32_t)s->cnt;
    i = s->cnt - 1;
  }
  if (ms_recvs(ty)) {
    fifo *f = Q(o, tb->recv, g);
    f->head++;
    f->len--;
  }
  if (ms_sends(ty) && push(Q(o, g, tb->send), (msg){tb->chan, t, ts->pc}))
    return -1;
  switch (ty) {
  case MS_SEND:
    rc = sched_send(c, tb->send, src);
    break;
  case MS_RECV:
    rc = sched_recv(c, tb->recv, dst);
    break;
  case MS_RCS:
    rc = sched_recv_copy_send(c, tb->recv, dst, tb->send);
    break;
  case MS_RRS: /* the sum needs a home: a scratch chunk of its position */
    rc = sched_recv_reduce_send(
        c, tb->recv, src,
        ck(SCHED_BUF_SCRATCH, o->a->scratch_blocks * K + (s->soff + i) % K),
        tb->send);
    break;
  case MS_RRC:
    rc = sched_recv_reduce(c, tb->recv, src, dst);
    break;
  case MS_RRCS:
    rc = sched_recv_reduce_send(c, tb->recv, src, dst, tb->send);
    break;
  case MS_CPY:
    rc = sched_copy(c, src, dst);
    break;
  case MS_RE:
    rc = sched_reduce_local(c, src, dst);
    break;
  default:
    break;
  }
  if (rc || (ty != MS_NOP && note(o, g, t, ts->pc)))
    return -1;
  if (++i >= s->cnt) {
    ts->pc++;
    ts->sub = 0;
  } else {
    ts->sub = i;
  }
  return 0;
}

/* "gpu G threadblock T step S (rrc o[2] from gpu 1, line L)" */
static void describe(const ord *o, int g, int t, char *b, size_t n) {
  const ms_tb *tb = &o->a->gpu[g].tb[t];
  const tbst *ts = &o->st[g][t];
  const ms_step *s = &tb->steps[ts->pc];
  ms_type ty = (ms_type)s->type;
  int off = ty == MS_SEND || ty == MS_RRS ? s->soff : s->doff;
  sched_buf buf =
      (sched_buf)(ty == MS_SEND || ty == MS_RRS ? s->sbuf : s->dbuf);
  char chunk[48] = "";
  if (ty != MS_NOP)
    snprintf(chunk, sizeof(chunk), " %s[%d]", sched_buf_name(buf),
             off + (ms_recvs(ty) || ms_sends(ty) ? ts->sub : 0));
  char peers[48] = "";
  if (ms_recvs(ty))
    snprintf(peers, sizeof(peers), " from gpu %d", tb->recv);
  if (ms_sends(ty))
    snprintf(peers + strlen(peers), sizeof(peers) - strlen(peers), " to gpu %d",
             tb->send);
  snprintf(b, n, "gpu %d threadblock %d step %d (%s%s%s, line %d)", g, t,
           ts->pc, ms_type_name(ty), chunk, peers,
           mxml_line(o->a->buf, o->a->len, s->pos));
}

static int find_tb(const ord *o, int g, int send, int recv, int chan) {
  const ms_gpu *gp = &o->a->gpu[g];
  for (int t = 0; t < gp->ntb; t++)
    if (gp->tb[t].chan == chan && ((send >= 0 && gp->tb[t].send == send) ||
                                   (recv >= 0 && gp->tb[t].recv == recv)))
      return t;
  return -1;
}

#define CHAIN_MAX 24

/* Nothing can go: follow who waits for whom from the first gpu with work. */
static braid_result diagnose(ord *o) {
  int g = -1, t = -1;
  for (int x = 0; x < o->n && g < 0; x++)
    for (int y = 0; y < o->a->gpu[x].ntb && g < 0; y++)
      if (head(o, x, y))
        g = x, t = y;
  int cg[CHAIN_MAX], ct[CHAIN_MAX], len = 0;
  char why[320] = "", err[1024];
  char line0[16];
  snprintf(line0, sizeof(line0), "%d",
           mxml_line(o->a->buf, o->a->len, head(o, g, t)->pos));
  size_t w = (size_t)snprintf(err, sizeof err, "%s: deadlock: ", line0);
  for (;;) {
    for (int k = 0; k < len; k++)
      if (cg[k] == g && ct[k] == t) {
        snprintf(why, sizeof(why),
                 ", which waits for gpu %d threadblock %d step %d again: a "
                 "cycle, no step of it can ever run",
                 g, t, o->st[g][t].pc);
        goto out;
      }
    if (len == CHAIN_MAX) {
      snprintf(why, sizeof(why), "...");
      goto out;
    }
    char d[192];
    describe(o, g, t, d, sizeof(d));
    if (w < sizeof err)
      w += (size_t)snprintf(err + w, sizeof err - w, "%s%s",
                            len ? ", which waits for " : "", d);
    cg[len] = g;
    ct[len++] = t;
    const ms_tb *tb = &o->a->gpu[g].tb[t];
    const ms_step *s = head(o, g, t);
    int b = blocked(o, g, t), ng = g, nt = -1;
    if (b == 1) {
      nt = s->depid;
      if (!head(o, g, nt)) { /* cannot happen: finished means done */
        snprintf(why, sizeof(why), "threadblock %d finished", nt);
        goto out;
      }
    } else if (b == 2) {
      fifo *f = Q(o, tb->recv, g);
      ng = tb->recv;
      if (f->len) {
        msg m = f->m[f->head];
        snprintf(why, sizeof(why),
                 ": the next message from gpu %d is gpu %d threadblock %d "
                 "step %d's on channel %d, not channel %d",
                 ng, ng, m.tb, m.step, m.chan, tb->chan);
        goto out;
      }
      nt = find_tb(o, ng, g, -1, tb->chan);
      if (nt < 0 || !head(o, ng, nt)) {
        if (nt < 0)
          snprintf(why, sizeof(why),
                   ": gpu %d has no threadblock that sends to gpu %d on "
                   "channel %d",
                   ng, g, tb->chan);
        else
          snprintf(why, sizeof(why),
                   ": gpu %d threadblock %d, which sends to it, has run all "
                   "its steps without sending this chunk (a step missing?)",
                   ng, nt);
        goto out;
      }
    } else if (b == 3) {
      ng = tb->send;
      nt = find_tb(o, ng, -1, g, tb->chan);
      if (nt < 0 || !head(o, ng, nt)) {
        snprintf(why, sizeof(why),
                 ": gpu %d receives no more from gpu %d on channel %d, and "
                 "%d messages wait there",
                 ng, g, tb->chan, ORDER_SLOTS);
        goto out;
      }
    } else {
      goto out;
    }
    if (w < sizeof err && b != 1)
      w += (size_t)snprintf(err + w, sizeof err - w, " %s",
                            b == 2 ? "(a message)" : "(room to send)");
    g = ng;
    t = nt;
  }
out:
  if (w < sizeof err)
    snprintf(err + w, sizeof err - w, "%s%s",
             why[0] == ':' || why[0] == ',' ? "" : ": ", why);
  return ERR(BRAID_ERR_INVALID_ARG, "%s:%s", o->a->fname, err);
}

/* Every message sent was received. */
static braid_result check_drained(ord *o) {
  for (int f = 0; f < o->n; f++)
    for (int t = 0; t < o->n; t++) {
      fifo *q = Q(o, f, t);
      if (!q->len)
        continue;
      msg m = q->m[q->head];
      const ms_step *s = &o->a->gpu[f].tb[m.tb].steps[m.step];
      return ERR(BRAID_ERR_INVALID_ARG,
                 "%s:%d: gpu %d threadblock %d step %d (%s %s[%d] to gpu %d) "
                 "sends %d chunk(s) that no step of gpu %d receives on "
                 "channel %d (a step missing?)",
                 o->a->fname, mxml_line(o->a->buf, o->a->len, s->pos), f, m.tb,
                 m.step, ms_type_name((ms_type)s->type),
                 sched_buf_name((sched_buf)(s->sbuf ? s->sbuf : s->dbuf)),
                 s->sbuf ? s->soff : s->doff, t, q->len, t, m.chan);
    }
  return BRAID_SUCCESS;
}

static braid_result run_all(ord *o) {
  for (;;) {
    int moved = 0, left = 0;
    for (int g = 0; g < o->n; g++) {
      int best = -1, bp = 3;
      for (int t = 0; t < o->a->gpu[g].ntb; t++) {
        int b = blocked(o, g, t);
        left += b >= 0;
        if (b == 0 && prio((ms_type)head(o, g, t)->type) < bp) {
          best = t;
          bp = prio((ms_type)head(o, g, t)->type);
        }
      }
      if (best >= 0) {
        if (run_one(o, g, best))
          return ERR(BRAID_ERR_NOMEM, "%s:0: out of memory", o->a->fname);
        moved = 1;
      }
    }
    if (!left)
      return check_drained(o);
    if (!moved)
      return diagnose(o);
  }
}

static void free_ord(ord *o) {
  if (o->q)
    for (int i = 0; i < o->n * o->n; i++)
      free(o->q[i].m);
  free(o->q);
  if (o->st)
    for (int g = 0; g < o->n; g++)
      free(o->st[g]);
  free(o->st);
  free(o->norg);
  free(o->caporg);
}

braid_result ms_build(const ms_algo *a, sched **out, ms_origin ***orgp) {
  *out = NULL;
  *orgp = NULL;
  ord o;
  memset(&o, 0, sizeof(o));
  o.a = a;
  o.n = a->ngpus;
  int rrs = 0;
  for (int g = 0; g < a->ngpus; g++)
    for (int t = 0; t < a->gpu[g].ntb; t++)
      for (int s = 0; s < a->gpu[g].tb[t].nsteps; s++)
        rrs |= a->gpu[g].tb[t].steps[s].type == MS_RRS;
  o.q = calloc((size_t)o.n * (size_t)o.n, sizeof(fifo));
  o.st = calloc((size_t)o.n, sizeof(tbst *));
  o.org = calloc((size_t)o.n, sizeof(ms_origin *));
  o.norg = calloc((size_t)o.n, sizeof(int));
  o.caporg = calloc((size_t)o.n, sizeof(int));
  int nomem =
      sched_new(a->coll, o.n, 0, a->K, 1, "msccl", &o.s) != BRAID_SUCCESS;
  nomem = nomem || !o.q || !o.st || !o.org || !o.norg || !o.caporg;
  for (int g = 0; g < o.n && !nomem; g++)
    nomem = !(o.st[g] = calloc((size_t)(a->gpu[g].ntb + 1), sizeof(tbst)));
  braid_result rc;
  if (nomem) {
    rc = ERR(BRAID_ERR_NOMEM, "%s:0: out of memory", a->fname);
  } else {
    o.s->scratch_blocks = a->scratch_blocks + rrs;
    rc = run_all(&o);
  }
  free_ord(&o);
  if (rc != BRAID_SUCCESS) {
    if (o.org)
      for (int g = 0; g < o.n; g++)
        free(o.org[g]);
    free(o.org);
    sched_free(o.s);
    return rc;
  }
  *out = o.s;
  *orgp = o.org;
  return BRAID_SUCCESS;
}
