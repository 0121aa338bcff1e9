/*
 * Pre-multiplied sums: the communicator's table of ops (a slot per op, a
 * generation per slot so that a destroyed op's handle stays invalid when
 * the slot is reused) and the local step that multiplies an input by its
 * scalar before the sum runs.
 */
#include "src/premul.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_dev.h"
#include "src/comm_dev.h"
#include "src/log.h"
#include "src/reduce.h"

/* handle: bit 30 | tag (10 bits: the communicator) | generation (8) | slot
 * (12) */
#define PM_BIT 0x40000000u
#define PM_SLOTS 4096
#define PM_TAG(h) (((h) >> 20) & 0x3ffu)
#define PM_GEN(h) (((h) >> 12) & 0xffu)
#define PM_SLOT(h) ((h)&0xfffu)

typedef struct premul_tab {
  pthread_mutex_t lock;
  unsigned tag;
  int n;                   /* slots used so far */
  premul_op *op[PM_SLOTS]; /* NULL: free */
  uint8_t gen[PM_SLOTS];
} premul_tab;

static atomic_uint pm_tags;

int premul_is_op(braid_op op) {
  return ((unsigned)op & ~0x3fffffffu) == PM_BIT;
}

static braid_result pm_bad(braid_comm *c, const char *fn, const char *why,
                           unsigned h) {
  WARN(LOG_COLL, "%s: op %#x %s", fn, h, why);
  return comm_fail(c, BRAID_ERR_INVALID_ARG, "%s: op %#x %s", fn, h, why);
}

/* The live op of handle h on c, or NULL with the error set. */
static premul_op *pm_find(braid_comm *c, const char *fn, braid_op op,
                          braid_result *r) {
  unsigned h = (unsigned)op;
  premul_tab *t = c->premul;
  *r = BRAID_ERR_INVALID_ARG;
  if (!premul_is_op(op)) {
    *r = pm_bad(c, fn, "is neither a braid_op nor a pre-multiplied sum", h);
    return NULL;
  }
  if (t == NULL || PM_TAG(h) != t->tag) {
    *r = pm_bad(c, fn,
                "is a pre-multiplied sum of another communicator (an op "
                "belongs to the communicator that created it)",
                h);
    return NULL;
  }
  pthread_mutex_lock(&t->lock);
  premul_op *p = t->op[PM_SLOT(h)];
  if (p == NULL || p->handle != op)
    p = NULL;
  pthread_mutex_unlock(&t->lock);
  if (p == NULL)
    *r = pm_bad(c, fn, "was destroyed (or never created)", h);
  else
    *r = BRAID_SUCCESS;
  return p;
}

braid_result braid_op_create_premul_sum(braid_op *op, const void *scalar,
                                        braid_dtype dt, int scalar_on_device,
                                        braid_comm *comm) {
  const char *fn = "braid_op_create_premul_sum";
  if (comm == NULL) {
    WARN(LOG_COLL, "%s: comm is NULL", fn);
    return BRAID_ERR_INVALID_ARG;
  }
  char why[160] = "";
  if (op == NULL)
    snprintf(why, sizeof why, "op is NULL");
  else if (scalar == NULL)
    snprintf(why, sizeof why, "scalar is NULL");
  else if ((unsigned)dt >= BRAID_NUM_DTYPES || dt == BRAID_BOOL)
    snprintf(why, sizeof why,
             "dt is %d: not a dtype a sum takes (bool and unknown dtypes are "
             "refused)",
             (int)dt);
  else if (scalar_on_device != 0 && scalar_on_device != 1)
    snprintf(why, sizeof why, "scalar_on_device is %d (0: host, 1: device)",
             scalar_on_device);
  int gpu = -1;
  if (!why[0] && scalar_on_device && cudev_is_device(scalar, &gpu) != 1)
    snprintf(why, sizeof why,
             "scalar_on_device is 1 but scalar %p is not device memory",
             scalar);
  if (why[0] || op == NULL || scalar == NULL) { /* (the last two: said) */
    WARN(LOG_COLL, "%s: %s", fn, why);
    return comm_fail(comm, BRAID_ERR_INVALID_ARG, "%s: %s", fn, why);
  }
  if (comm->premul == NULL) {
    premul_tab *t = calloc(1, sizeof *t);
    if (t == NULL)
      return BRAID_ERR_NOMEM;
    pthread_mutex_init(&t->lock, NULL);
    t->tag = atomic_fetch_add(&pm_tags, 1) & 0x3ffu;
    comm->premul = t;
  }
  premul_op *p = calloc(1, sizeof *p);
  if (p == NULL)
    return BRAID_ERR_NOMEM;
  p->dt = dt;
  p->on_device = scalar_on_device;
  if (scalar_on_device)
    p->dscalar = scalar;
  else
    memcpy(p->scalar, scalar, braid_dtype_size(dt));
  premul_tab *t = comm->premul;
  pthread_mutex_lock(&t->lock);
  int s = 0;
  while (s < t->n && t->op[s] != NULL)
    s++;
  if (s == PM_SLOTS) {
    pthread_mutex_unlock(&t->lock);
    free(p);
    return comm_fail(comm, BRAID_ERR_NOMEM,
                     "%s: %d ops exist on this communicator already", fn,
                     PM_SLOTS);
  }
  if (s == t->n)
    t->n++;
  t->gen[s]++;
  p->handle = (braid_op)(PM_BIT | t->tag << 20 | (unsigned)t->gen[s] << 12 |
                         (unsigned)s);
  t->op[s] = p;
  pthread_mutex_unlock(&t->lock);
  *op = p->handle;
  return BRAID_SUCCESS;
}

/* 1 when a call queued on c (or running from the queue) uses p. */
static int pm_in_use(braid_comm *c, const premul_op *p) {
  int used = 0;
  pthread_mutex_lock(&c->qlock);
  for (exec_work *w = c->qhead; w != NULL && !used; w = w->next)
    for (int k = 0; k < w->nops; k++)
      used |= w->ops[k].premul == p;
  pthread_mutex_unlock(&c->qlock);
  return used;
}

braid_result braid_op_destroy(braid_op op, braid_comm *comm) {
  const char *fn = "braid_op_destroy";
  if (comm == NULL) {
    WARN(LOG_COLL, "%s: comm is NULL", fn);
    return BRAID_ERR_INVALID_ARG;
  }
  if ((unsigned)op < BRAID_NUM_OPS)
    return pm_bad(comm, fn, "is a built-in op: only created ops are destroyed",
                  (unsigned)op);
  braid_result r;
  premul_op *p = pm_find(comm, fn, op, &r);
  if (p == NULL)
    return r;
  if (pm_in_use(comm, p))
    return pm_bad(comm, fn,
                  "is in use by a call that has not finished (synchronise "
                  "its stream first)",
                  (unsigned)op);
  premul_tab *t = comm->premul;
  pthread_mutex_lock(&t->lock);
  t->op[PM_SLOT((unsigned)op)] = NULL;
  pthread_mutex_unlock(&t->lock);
  free(p);
  return BRAID_SUCCESS;
}

braid_result premul_resolve(braid_comm *c, exec_op *op) {
  if (!premul_is_op(op->op)) /* built-in, or check_op names it */
    return BRAID_SUCCESS;
  braid_result r;
  premul_op *p = pm_find(c, op->name, op->op, &r);
  if (p == NULL)
    return r;
  if (p->dt != op->dt) {
    r = comm_fail(c, BRAID_ERR_INVALID_ARG,
                  "%s: op %#x is a pre-multiplied sum for dtype %s, the "
                  "call's dtype is %s",
                  op->name, (unsigned)op->op, braid_dtype_name(p->dt),
                  braid_dtype_name(op->dt));
    WARN(LOG_COLL, "%s: %s", op->name, err_msg());
    return r;
  }
  op->premul = p;
  op->op = BRAID_SUM;
  return BRAID_SUCCESS;
}

/* Elements of the call's input on this rank. */
static size_t pm_elems(const braid_comm *c, const exec_op *op) {
  return op->count * (size_t)sched_in_blocks(op->coll, c->nranks);
}

/* Whether op is a pre-multiplied sum that reads its input on this rank. */
static int pm_reads(const braid_comm *c, const exec_op *op) {
  return op->premul != NULL && op->count > 0 && op->in != NULL &&
         sched_uses_in(op->coll, op->root, c->rank);
}

braid_result premul_begin(braid_comm *c, exec_op *ops, int nops,
                          const void **saved) {
  for (int k = 0; k < nops; k++)
    saved[k] = NULL;
  for (int k = 0; k < nops; k++) {
    exec_op *op = &ops[k];
    if (!pm_reads(c, op) || op->dev >= 0) /* device: premul_dev_begin */
      continue;
    const premul_op *p = op->premul;
    size_t es = braid_dtype_size(op->dt), n = pm_elems(c, op);
    unsigned char s[8];
    if (p->on_device) { /* read now, as the call runs */
      /* on the internal stream when there is one: the legacy default
       * stream would wait for a user's stream that a gate holds */
      void *st = c->dev != NULL ? c->dev->stream : NULL;
      braid_result r = cudev_memcpy(s, p->dscalar, es, st);
      if (r == BRAID_SUCCESS)
        r = cudev_stream_sync(st);
      if (r != BRAID_SUCCESS) {
        premul_end(ops, nops, saved);
        return comm_fail(c, r,
                         "%s: reading the pre-multiplied sum's device "
                         "scalar failed: %s",
                         op->name, cudev_error());
      }
    } else {
      memcpy(s, p->scalar, es);
    }
    void *buf = malloc(n * es);
    if (buf == NULL) {
      premul_end(ops, nops, saved);
      return BRAID_ERR_NOMEM;
    }
    red_premul(buf, op->in, n, op->dt, s);
    saved[k] = op->in;
    op->in = buf;
    op->inplace = 0; /* the copy is apart from recvbuf */
  }
  return BRAID_SUCCESS;
}

void premul_end(exec_op *ops, int nops, const void **saved) {
  for (int k = 0; k < nops; k++) {
    if (saved[k] == NULL)
      continue;
    free((void *)ops[k].in);
    ops[k].in = saved[k];
    saved[k] = NULL;
  }
}

braid_result premul_dev_begin(braid_comm *c, exec_op *ops, int nops,
                              const void **saved) {
  size_t total = 0, at[4], *off = nops <= 4 ? at : malloc(sizeof *off * nops);
  if (off == NULL)
    return BRAID_ERR_NOMEM;
  for (int k = 0; k < nops; k++) {
    saved[k] = NULL;
    off[k] = total;
    if (pm_reads(c, &ops[k]) && ops[k].dev >= 0)
      total += (pm_elems(c, &ops[k]) * braid_dtype_size(ops[k].dt) + 255) &
               ~(size_t)255;
  }
  char *buf = NULL;
  braid_result r = BRAID_SUCCESS;
  if (total > 0)
    r = comm_dev_premul(c, total, (void **)&buf);
  for (int k = 0; k < nops && total > 0 && r == BRAID_SUCCESS; k++) {
    exec_op *op = &ops[k];
    if (!pm_reads(c, op) || op->dev < 0)
      continue;
    const premul_op *p = op->premul;
    r = cudev_scale(buf + off[k], op->in, pm_elems(c, op), op->dt,
                    p->on_device ? p->dscalar : p->scalar, p->on_device,
                    c->dev->stream);
    if (r != BRAID_SUCCESS) {
      r = comm_fail(c, r,
                    "%s: multiplying the input by the pre-multiplied sum's "
                    "scalar on GPU %d: %s",
                    op->name, c->dev->device, cudev_error());
      break;
    }
    saved[k] = op->in;
    op->in = buf + off[k];
    op->inplace = 0; /* the product is apart from recvbuf */
  }
  /* the products are made before anything reads them, on any stream or
   * from another process */
  if (r == BRAID_SUCCESS && total > 0 &&
      (r = cudev_stream_sync(c->dev->stream)) != BRAID_SUCCESS)
    r = comm_fail(c, r,
                  "%s: multiplying by the pre-multiplied sum's scalar: %s",
                  ops[0].name, cudev_error());
  if (r != BRAID_SUCCESS)
    premul_dev_end(ops, nops, saved);
  if (off != at)
    free(off);
  return r;
}

void premul_dev_end(exec_op *ops, int nops, const void **saved) {
  for (int k = 0; k < nops; k++) {
    if (saved[k] != NULL)
      ops[k].in = saved[k];
    saved[k] = NULL;
  }
}

void premul_free(braid_comm *c) {
  premul_tab *t = c->premul;
  if (t == NULL)
    return;
  for (int s = 0; s < t->n; s++)
    free(t->op[s]);
  pthread_mutex_destroy(&t->lock);
  free(t);
  c->premul = NULL;
}
