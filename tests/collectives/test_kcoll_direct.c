/*
 * The collective kernels execute the direct (one-shot) schedule.
 *
 * A call on device buffers that takes the kernel path (PLAN_PATH_KERNEL,
 * collectives/plan.h) runs as one kernel whose per-chunk logic is
 * device/kcoll_chunk.h, shared by the GPU kernel and the emulated GPU.
 * For every collective the kernels run, every rank count they take (1 to
 * CUDEV_KA_RANKS) and every root, this test
 *  - builds the direct schedule (collectives/direct.c) and passes it through
 *    the verifier (contributions, matching, deadlock) and the rank-order
 *    check, as braid-topo schedule and the executor's schedules are;
 *  - runs that schedule symbolically: each chunk holds the list of
 *    (rank, input block) it was folded from, in fold order;
 *  - runs kcoll_chunk.h's jobs for each rank (kc_chunk_at, kc_jobs,
 *    kc_job_at, kc_job_ranks) on element indices, giving each output
 *    element the same kind of list;
 * and requires that every output block the collective promises holds the
 * same list on both: the same ranks' inputs, the same blocks of them, folded
 * in the same order. So the kernel's code follows the verified schedule,
 * and a change to either that breaks this shows here, on any machine.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/schedule.h"
#include "collectives/verify.h"
#include "device/kcoll_chunk.h"
#include "src/log.h"

#define MAXT 16  /* terms of a fold: at most CUDEV_KA_RANKS */
#define MAXB 8   /* blocks of a buffer */
#define MAXQ 256 /* messages in flight between two ranks */

/* What a chunk holds: the inputs (rank << 8 | block) it was folded from, in
 * order; n == 0: nothing defined. */
typedef struct expr {
  int n;
  uint16_t t[MAXT];
} expr;

static expr one(int rank, int block) {
  expr e = {.n = 1};
  e.t[0] = (uint16_t)(rank << 8 | block);
  return e;
}

static expr fold(const expr *a, const expr *b) {
  expr e = *a;
  cr_assert(a->n > 0 && b->n > 0, "a fold of an undefined chunk");
  cr_assert(a->n + b->n <= MAXT);
  for (int i = 0; i < b->n; i++)
    e.t[e.n++] = b->t[i];
  return e;
}

static int expr_eq(const expr *a, const expr *b) {
  return a->n == b->n && !memcmp(a->t, b->t, sizeof(uint16_t) * (size_t)a->n);
}

static void expr_str(const expr *e, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < e->n && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%d.%d", i ? " + " : "",
                           e->t[i] >> 8, e->t[i] & 0xff);
  if (e->n == 0)
    snprintf(buf, len, "(nothing)");
}

/* ---- the schedule, run symbolically ------------------------------------ */

typedef struct rank_bufs {
  expr buf[4][MAXB]; /* sched_buf: NONE, IN, OUT, SCRATCH; K = 1 */
} rank_bufs;

typedef struct queue {
  expr m[MAXQ][MAXB];
  int cnt[MAXQ];
  int head, tail;
} queue;

static rank_bufs bufs[CUDEV_KA_RANKS];
static queue qs[CUDEV_KA_RANKS][CUDEV_KA_RANKS]; /* [from][to] */

static void push(int from, int to, const expr *src, int cnt) {
  queue *q = &qs[from][to];
  cr_assert(q->tail - q->head < MAXQ && cnt <= MAXB);
  memcpy(q->m[q->tail % MAXQ], src, sizeof(expr) * (size_t)cnt);
  q->cnt[q->tail % MAXQ] = cnt;
  q->tail++;
}

static const expr *pop(int from, int to, int cnt) {
  queue *q = &qs[from][to];
  if (q->head == q->tail)
    return NULL;
  cr_assert_eq(q->cnt[q->head % MAXQ], cnt, "a message of another size");
  return q->m[q->head++ % MAXQ];
}

static expr *at(int r, sched_chunks c, uint32_t i) {
  cr_assert(c.buf > SCHED_BUF_NONE && c.buf <= SCHED_BUF_SCRATCH);
  cr_assert(c.index + i < MAXB);
  return &bufs[r].buf[c.buf][c.index + i];
}

/* One step of rank r: 0 when it must wait for a message. */
static int step(int r, const sched_step *st) {
  uint32_t n = st->prim == SCHED_P_SEND || st->prim == SCHED_P_COPY ||
                       st->prim == SCHED_P_REDUCE
                   ? st->src.count
                   : st->dst.count;
  expr got[MAXB];
  cr_assert(n <= MAXB);
  if (sched_prim_recvs((sched_prim)st->prim)) {
    const expr *m = pop(st->peer, r, (int)n);
    if (m == NULL)
      return 0;
    memcpy(got, m, sizeof(expr) * n);
  }
  expr tmp[MAXB];
  for (uint32_t i = 0; i < n; i++) {
    switch (st->prim) {
    case SCHED_P_SEND:
    case SCHED_P_COPY:
      tmp[i] = *at(r, st->src, i);
      break;
    case SCHED_P_RECV:
    case SCHED_P_RECV_COPY_SEND:
      tmp[i] = got[i];
      break;
    case SCHED_P_RECV_REDUCE:
    case SCHED_P_RECV_REDUCE_SEND:
      tmp[i] = fold(at(r, st->src, i), &got[i]);
      break;
    case SCHED_P_RECV_REDUCE_REV:
      tmp[i] = fold(&got[i], at(r, st->src, i));
      break;
    case SCHED_P_REDUCE:
      tmp[i] = fold(at(r, st->dst, i), at(r, st->src, i));
      break;
    default:
      cr_assert_fail("unknown primitive %d", st->prim);
    }
  }
  if (st->prim == SCHED_P_SEND) {
    push(r, st->peer, tmp, (int)n);
    return 1;
  }
  for (uint32_t i = 0; i < n; i++)
    *at(r, st->dst, i) = tmp[i];
  if (st->prim == SCHED_P_RECV_REDUCE_SEND ||
      st->prim == SCHED_P_RECV_COPY_SEND)
    push(r, st->peer_out, tmp, (int)n);
  return 1;
}

static void run_sched(const sched *s) {
  int n = s->nranks, pc[CUDEV_KA_RANKS] = {0};
  memset(bufs, 0, sizeof bufs);
  memset(qs, 0, sizeof qs);
  int in_blocks = s->coll == SCHED_REDUCE_SCATTER ? n : 1;
  for (int r = 0; r < n; r++)
    for (int b = 0; b < in_blocks; b++)
      bufs[r].buf[SCHED_BUF_IN][b] = one(r, b);
  cr_assert_eq(s->nchannels, 1);
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < n; r++) {
      const sched_channel *c = sched_chan_c(s, r, 0);
      while (pc[r] < c->nsteps && step(r, &c->steps[pc[r]])) {
        pc[r]++;
        moved = 1;
      }
    }
  }
  for (int r = 0; r < n; r++)
    cr_assert_eq(pc[r], sched_chan_c(s, r, 0)->nsteps, "rank %d stuck", r);
}

/* ---- the kernel's jobs, on element indices ----------------------------- */

#define COUNT 3 /* elements of a block */

static expr kout[CUDEV_KA_RANKS][MAXB * COUNT];

/* What each output element of rank me holds after the kernel's jobs: one
 * chunk (the whole call fits a slot), one block, parts of one element. */
static void run_kernel(int coll, int n, int root, int me) {
  cudev_kcall c = {.coll = coll,
                   .root = root,
                   .count = COUNT,
                   .dt = BRAID_FLOAT32,
                   .op = BRAID_SUM};
  size_t nin = cudev_kc_elems(&c, n);
  cudev_ka k = {.rank = me, .nranks = n, .slot = 256 * 4, .blocks = 1};
  cr_assert(cudev_kc_valid(&k, &c));
  size_t ce = k.slot / sizeof(float);
  cr_assert_eq(kc_chunks(nin, ce), 1);
  kc_chunk ch = kc_chunk_at(&k, 1, nin, ce, 1, 1, 0, 0);
  memset(kout[me], 0, sizeof kout[me]);
  for (int q = 0; q < kc_jobs(&c, me, n); q++) {
    kc_job jb;
    if (!kc_job_at(&c, me, n, 0, q, &ch, &jb))
      continue;
    int q0, q1;
    kc_job_ranks(&jb, n, &q0, &q1);
    for (size_t i = jb.a; i < jb.e; i++) {
      ptrdiff_t o = (ptrdiff_t)i + jb.d0;
      cr_assert(o >= 0 && o < MAXB * COUNT);
      size_t y = ch.c0 + i; /* the element each rank's input gives */
      expr e = one(q0, (int)(y / COUNT));
      for (int x = q0 + 1; x < q1; x++) {
        expr t = one(x, (int)(y / COUNT));
        e = fold(&e, &t);
      }
      cr_assert(kout[me][o].n == 0, "element %td written twice", o);
      kout[me][o] = e;
    }
  }
}

/* ---- the comparison ---------------------------------------------------- */

static const struct {
  int kc;
  sched_coll sc;
} colls[] = {{CUDEV_KC_ALLREDUCE, SCHED_ALLREDUCE},
             {CUDEV_KC_REDUCE, SCHED_REDUCE},
             {CUDEV_KC_BROADCAST, SCHED_BROADCAST},
             {CUDEV_KC_ALLGATHER, SCHED_ALLGATHER},
             {CUDEV_KC_REDUCE_SCATTER, SCHED_REDUCE_SCATTER}};

static sched *direct(sched_coll coll, int n, int root) {
  gen_params p = {.coll = coll, .nranks = n, .root = root, .nchannels = 1};
  sched *s = NULL;
  cr_assert_eq(gen_build(gen_find("direct"), &p, &s), BRAID_SUCCESS,
               "direct %s on %d ranks: %s", sched_coll_name(coll), n,
               err_msg());
  cr_assert_eq(verify_sched(s, 0, 1), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(verify_rank_order(s, 0), BRAID_SUCCESS, "%s", err_msg());
  return s;
}

/* Output blocks the collective promises on rank r. */
static int promised(sched_coll coll, int n, int root, int r) {
  return coll == SCHED_ALLGATHER             ? n
         : coll == SCHED_REDUCE && r != root ? 0
                                             : 1;
}

Test(kcoll_direct, kernel_jobs_are_the_direct_schedule) {
  int checked = 0;
  for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++)
    for (int n = 1; n <= CUDEV_KA_RANKS; n++)
      for (int root = 0; root < (cudev_kc_rooted(colls[ci].kc) ? n : 1);
           root++) {
        sched_coll sc = colls[ci].sc;
        sched *s = direct(sc, n, root);
        run_sched(s);
        for (int r = 0; r < n; r++) {
          run_kernel(colls[ci].kc, n, root, r);
          for (int b = 0; b < promised(sc, n, root, r); b++)
            for (int x = 0; x < COUNT; x++) {
              const expr *want = &bufs[r].buf[SCHED_BUF_OUT][b];
              const expr *got = &kout[r][b * COUNT + x];
              char ws[128], gs[128];
              expr_str(want, ws, sizeof ws);
              expr_str(got, gs, sizeof gs);
              cr_assert(want->n > 0,
                        "%s n=%d root %d: rank %d out[%d] is "
                        "not defined by the schedule",
                        sched_coll_name(sc), n, root, r, b);
              cr_assert(expr_eq(want, got),
                        "%s n=%d root %d: rank %d out[%d] element %d: the "
                        "schedule folds %s, the kernel %s",
                        sched_coll_name(sc), n, root, r, b, x, ws, gs);
              checked++;
            }
        }
        sched_free(s);
      }
  /* 5 collectives over 1..8 ranks, every root of the rooted ones */
  cr_assert_gt(checked, 1000, "only %d elements compared", checked);
}

/* The comparison can fail: a kernel fold in another order is caught. */
Test(kcoll_direct, a_reordered_fold_is_caught) {
  sched *s = direct(SCHED_ALLREDUCE, 3, 0);
  run_sched(s);
  expr want = bufs[1].buf[SCHED_BUF_OUT][0];
  expr a = one(1, 0), b = one(0, 0), c = one(2, 0);
  expr ab = fold(&a, &b);
  expr wrong = fold(&ab, &c);
  cr_assert(!expr_eq(&want, &wrong));
  run_kernel(CUDEV_KC_ALLREDUCE, 3, 0, 1);
  cr_assert(expr_eq(&want, &kout[1][0]));
  sched_free(s);
}
