/*
 * Device buffers in the executor.
 *
 * The first call with device buffers that is not a send or a receive sets
 * the communicator's device side up (comm_dev_setup: collective, so every
 * rank must pass device buffers in that call, as every rank must in every
 * call). Then, per op (the planner's path, src/exec_plan.c):
 *
 *  - direct: every peer the op talks to has a device transport
 *    (comm_dev_ops): the op runs in the executor with device pointers;
 *    transports move device memory, local copies and reductions run on the
 *    communicator's internal stream;
 *  - staged: some peer has none (or a send/receive comes before any setup),
 *    or the call is small (BRAID_CUDA_HOST_MAX, below): the op's device
 *    inputs are copied to host memory, the ordinary host path runs on the
 *    copies, and the outputs are copied back. This is right for every
 *    transport and collective but crosses PCIe twice per call without
 *    overlap; the pipelined way across hosts is the staging device
 *    transport of src/comm_dev.c, which makes such peers direct.
 *
 * Small calls. A device call moves through several CUDA operations per
 * step (a copy or kernel, an event, its completion seen by the host), each
 * costing microseconds; for a few bytes, copying in, reducing on the CPU
 * over the host transports and copying out is two copies in all (which is
 * faster up to which size is for perf/cuda/run_device.sh to measure on a
 * GPU; until then the threshold is 0 by default). Calls whose largest
 * buffer on any rank is at most BRAID_CUDA_HOST_MAX bytes (agreed at setup:
 * rank 0's value) are staged so on every rank. On a CUDA stream the copies
 * go on the user's stream around the call's gate (src/enqueue.c), so the
 * progress thread makes no CUDA call at all for them.
 *
 * A call on a CUDA stream sets the device side up in the issuing thread,
 * before its gate goes on the user's stream (src/enqueue.c): a setup that
 * fails frees what it made, and cudaFree waits for every stream, a stream
 * held at the call's own gate too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_dev.h"
#include "src/exec_int.h"
#include "src/exec_plan.h"
#include "src/log.h"
#include "src/premul.h"
#include "transports/cuda/cuda_tp.h"

/* ---- local steps on the internal stream -------------------------------- */

/* Each local step waits for its stream before the channel moves on: simple
 * and right. An event recorded per step, waited for only by the next step
 * that touches the same range, would let steps of different channels and
 * slices overlap. */
int exec_dev_copy(braid_comm *c, const xop *x, void *dst, const void *src,
                  size_t len) {
  (void)x;
  braid_result r = cudev_memcpy(dst, src, len, c->dev->stream);
  return r == BRAID_SUCCESS ? cudev_stream_sync(c->dev->stream) : r;
}

int exec_dev_reduce(braid_comm *c, const xop *x, void *dst, const void *src,
                    size_t len) {
  braid_result r = cudev_reduce(dst, dst, src, len / x->esize, x->op->dt,
                                x->op->op, c->dev->stream);
  return r == BRAID_SUCCESS ? cudev_stream_sync(c->dev->stream) : r;
}

int exec_dev_div(braid_comm *c, const xop *x) {
  braid_result r =
      cudev_div(x->op->out, x->E, x->op->dt, c->nranks, c->dev->stream);
  if (r == BRAID_SUCCESS)
    r = cudev_stream_sync(c->dev->stream);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r,
                     "%s #%llu on rank %d: dividing the average on GPU %d: %s",
                     x->op->name, (unsigned long long)x->op->seq, c->rank,
                     x->dev, cudev_error());
  return r;
}

static int is_p2p(const exec_op *op) {
  return op->coll == SCHED_SEND || op->coll == SCHED_RECV;
}

/* Bytes of the input and output this rank uses (0: unused). */
static void op_bytes(const braid_comm *c, const exec_op *op, size_t *inlen,
                     size_t *outlen) {
  size_t es = braid_dtype_size(op->dt);
  int ib = sched_in_blocks(op->coll, c->nranks);
  int ob = sched_out_blocks(op->coll, c->nranks);
  int ui =
      op->in != NULL && ib > 0 && sched_uses_in(op->coll, op->root, c->rank);
  int uo =
      op->out != NULL && ob > 0 && sched_uses_out(op->coll, op->root, c->rank);
  *inlen = ui ? op->count * es * (size_t)ib : 0;
  *outlen = uo ? op->count * es * (size_t)ob : 0;
}

#define STAGE_ALIGN 256

static size_t align_up(size_t n) {
  return (n + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
}

/* Where op k's buffers lie in the host staging area, from base; returns
 * the end. In place, the input and output overlap on the device and keep
 * the same relative position on the host. */
static size_t stage_layout(const braid_comm *c, const exec_op *ops, int k,
                           exec_stage *s, size_t base) {
  const exec_op *op = &ops[k];
  s->k = k;
  s->dev_out = op->out;
  op_bytes(c, op, &s->inlen, &s->outlen);
  const char *in = op->in, *out = op->out;
  if (s->inlen > 0 && s->outlen > 0 && in < out + s->outlen &&
      out < in + s->inlen) {
    const char *lo = in < out ? in : out;
    const char *hi_in = in + s->inlen, *hi_out = out + s->outlen;
    const char *hi = hi_in > hi_out ? hi_in : hi_out;
    s->off_in = base + (size_t)(in - lo);
    s->off_out = base + (size_t)(out - lo);
    return base + align_up((size_t)(hi - lo));
  }
  s->off_in = base;
  base += align_up(s->inlen);
  s->off_out = base;
  return base + align_up(s->outlen);
}

/* Issues the copies of the staged inputs into host on stream and points
 * the ops at their host copies (host ops from then on). */
static braid_result stage_in(exec_op *ops, const exec_stage *st, int nst,
                             char *host, void *stream) {
  braid_result r = BRAID_SUCCESS;
  for (int i = 0; i < nst && r == BRAID_SUCCESS; i++) {
    const exec_stage *s = &st[i];
    exec_op *o = &ops[s->k];
    if (s->inlen > 0)
      r = cudev_memcpy(host + s->off_in, o->in, s->inlen, stream);
    o->in = s->inlen > 0 ? host + s->off_in : NULL;
    o->out = s->outlen > 0 ? host + s->off_out : NULL;
    o->dev = -1;
  }
  return r;
}

/* Issues the copies of the staged outputs back to the device on stream. */
static braid_result stage_out(const exec_stage *st, int nst, const char *host,
                              void *stream) {
  braid_result r = BRAID_SUCCESS;
  for (int i = 0; i < nst && r == BRAID_SUCCESS; i++)
    if (st[i].outlen > 0)
      r = cudev_memcpy(st[i].dev_out, host + st[i].off_out, st[i].outlen,
                       stream);
  return r;
}

static braid_result dev_error(braid_comm *c, const exec_op *op, int dev,
                              const char *what, braid_result r) {
  return comm_fail(c, r, "%s #%llu on rank %d: %s (GPU %d): %s", op->name,
                   (unsigned long long)op->seq, c->rank, what, dev,
                   cudev_error());
}

/* The device all device ops use (*out, -1 on failure): a failure when they
 * differ or when the communicator already uses another one, or when none
 * is on a device. */
static braid_result op_device(braid_comm *c, const exec_op *ops, int nops,
                              int *out) {
  int dev = -1;
  const exec_op *first = &ops[0];
  *out = -1;
  for (int k = 0; k < nops; k++) {
    if (ops[k].dev < 0 || ops[k].is_barrier)
      continue;
    if (dev < 0) {
      dev = ops[k].dev;
      first = &ops[k];
    } else if (ops[k].dev != dev) {
      return comm_fail(
          c, BRAID_ERR_INVALID_ARG,
          "%s and %s in one group use buffers on GPU %d and GPU %d;"
          " a rank uses one GPU",
          first->name, ops[k].name, dev, ops[k].dev);
    }
  }
  if (dev >= 0 && c->dev != NULL && c->dev->device != dev)
    return comm_fail(c, BRAID_ERR_INVALID_ARG,
                     "%s: this communicator moves device buffers of GPU %d on "
                     "rank %d; these are on GPU %d",
                     first->name, c->dev->device, c->rank, dev);
  if (dev < 0)
    return BRAID_ERR_INVALID_ARG;
  *out = dev;
  return BRAID_SUCCESS;
}

/* A device collective: the first one sets the device side up. */
static int sets_up(const exec_op *op) {
  return op->dev >= 0 && !op->is_barrier && !is_p2p(op);
}

/* Selects the ops' device (*dev) on this thread and sets the device side up
 * when a collective among them needs it; *first: the first op on device
 * buffers, for messages. */
static braid_result prepare(braid_comm *c, const exec_op *ops, int nops,
                            const exec_op **first, int *dev) {
  CHECKR(op_device(c, ops, nops, dev));
  int need_setup = 0;
  *first = &ops[0];
  for (int k = nops - 1; k >= 0; k--) {
    if (ops[k].dev < 0 || ops[k].is_barrier)
      continue;
    *first = &ops[k];
    need_setup |= sets_up(&ops[k]);
  }
  braid_result r = cudev_set_device(*dev);
  if (r != BRAID_SUCCESS)
    return dev_error(c, *first, *dev, "selecting the device", r);
  if (c->dev != NULL || !need_setup)
    return BRAID_SUCCESS;
  r = comm_dev_setup(c, *dev);
  if (r != BRAID_SUCCESS) {
    char why[sizeof c->last_error];
    snprintf(why, sizeof why, "%s", c->last_error);
    return comm_fail(c, r,
                     "%s #%llu on rank %d: setting up device buffers on GPU "
                     "%d: %s",
                     (*first)->name, (unsigned long long)(*first)->seq, c->rank,
                     *dev, why[0] ? why : braid_result_string(r));
  }
  return r;
}

static braid_result prepare_only(braid_comm *c, exec_op *ops, int nops) {
  const exec_op *first = NULL;
  int dev = -1;
  return prepare(c, ops, nops, &first, &dev);
}

int exec_dev_needs_setup(braid_comm *c, const exec_op *ops, int nops) {
  if (atomic_load(&c->dev_up))
    return 0;
  for (int k = 0; k < nops; k++)
    if (sets_up(&ops[k]))
      return 1;
  return 0;
}

/* Loose staging for op (comm_dev_loose), its errors named by op. */
static braid_result loose(braid_comm *c, const exec_op *op, int dev,
                          size_t bytes, void **host, void **stream) {
  braid_result r = comm_dev_loose(c, dev, bytes, host, stream);
  if (r == BRAID_ERR_INVALID_ARG)
    return comm_fail(c, r, "%s #%llu: %s", op->name,
                     (unsigned long long)op->seq, err_msg());
  if (r != BRAID_SUCCESS)
    return dev_error(c, op, dev, "allocating host staging memory", r);
  return r;
}

/* Whether a device op of a call that does not go as kernels runs on host
 * copies of its buffers (staged through pinned host memory) rather than
 * moving between GPUs: the planner's path (src/exec_plan.c). */
static int staged(braid_comm *c, const exec_op *op) {
  return exec_plan_path(c, op, 0, NULL) == PLAN_PATH_STAGED;
}

/* ---- memory a call on a CUDA stream takes, grown before its gate --------
 * Scratch (cudaMalloc) and staging (cudaHostAlloc) grow on first need. On
 * the progress thread, with the user's stream held at the call's gate, a
 * growth can wait in the driver for a user thread that itself waits for
 * that stream: a copy to pageable memory issued behind the call, for one,
 * holds a lock of the driver that allocations take (seen on an H200 as a
 * hang of the stream matrix test). So the issuing thread grows both before
 * the gate goes on the stream; the progress thread then finds them large
 * enough. So too the connections the call uses (the staged transport makes
 * its pinned slots on first use: tp_ops.prepare). Scratch needs and
 * connections come from the call's schedule (c->lock); calls seen are
 * remembered, so that a repeated call checks without the lock and does not
 * wait for the progress thread's current call. */

static size_t stage_need(braid_comm *c, const exec_op *ops, int nops) {
  exec_stage st;
  size_t total = 0;
  for (int k = 0; k < nops; k++)
    if (staged(c, &ops[k]))
      total = stage_layout(c, ops, k, &st, total);
  return total;
}

static int known_need(const comm_dev *d, const exec_op *op, size_t *need) {
  size_t bytes = op->count * braid_dtype_size(op->dt);
  for (int i = 0; i < d->nknown; i++)
    if (d->known[i].coll == (int)op->coll && d->known[i].root == op->root &&
        d->known[i].bytes == bytes) {
      *need = d->known[i].need;
      return 1;
    }
  return 0;
}

static int moves_on_device(braid_comm *c, const exec_op *op) {
  return exec_plan_path(c, op, EXEC_PLAN_ALONE, NULL) == PLAN_PATH_DEVICE;
}

int exec_dev_reserved(braid_comm *c, const exec_op *ops, int nops) {
  int any = 0;
  for (int k = 0; k < nops; k++)
    any |= ops[k].dev >= 0 && !ops[k].is_barrier;
  if (!any)
    return 1;
  if (!atomic_load(&c->dev_up) || c->dev == NULL) {
    size_t have = comm_dev_loose_bytes(c);
    return have > 0 && stage_need(c, ops, nops) <= have;
  }
  /* one pass: each op is staged (its layout counts) or moves on the device
   * (its scratch need must be known and there) */
  comm_dev *d = c->dev;
  size_t have = __atomic_load_n(&d->scratch_bytes, __ATOMIC_ACQUIRE), total = 0;
  exec_stage st;
  for (int k = 0; k < nops; k++) {
    size_t need = 0;
    plan_path p = exec_plan_path(c, &ops[k], EXEC_PLAN_ALONE, NULL);
    if (p == PLAN_PATH_HOST || p == PLAN_PATH_KERNEL)
      continue;
    if (p == PLAN_PATH_STAGED)
      total = stage_layout(c, ops, k, &st, total);
    else if (!known_need(d, &ops[k], &need) || need > have)
      return 0;
  }
  return total <= __atomic_load_n(&d->stage_bytes, __ATOMIC_ACQUIRE);
}

braid_result exec_dev_reserve(braid_comm *c, exec_op *ops, int nops) {
  comm_dev *d = c->dev;
  if (d == NULL) { /* sends and receives before any setup: loose */
    void *h, *st;
    for (int k = 0; k < nops; k++)
      if (ops[k].dev >= 0 && !ops[k].is_barrier)
        return loose(c, &ops[k], ops[k].dev, stage_need(c, ops, nops), &h, &st);
    return BRAID_SUCCESS;
  }
  void *p = NULL;
  size_t total = stage_need(c, ops, nops), most = 0;
  braid_result r = comm_dev_stage(c, total, &p); /* grows only when short */
  for (int k = 0; k < nops && r == BRAID_SUCCESS; k++) {
    size_t need = 0;
    if (!moves_on_device(c, &ops[k]))
      continue;
    if (!known_need(d, &ops[k], &need)) {
      r = exec_scratch_need(c, &ops[k], &need);
      if (r == BRAID_SUCCESS)
        r = exec_dev_prepare_conns(c, &ops[k]);
      if (r != BRAID_SUCCESS)
        break;
      int i = d->nknown < 8 ? d->nknown++ : (int)(ops[k].seq % 8);
      d->known[i].coll = (int)ops[k].coll;
      d->known[i].root = ops[k].root;
      d->known[i].bytes = ops[k].count * braid_dtype_size(ops[k].dt);
      d->known[i].need = need;
    }
    /* ops run together, each in its own part (executor.c's
     * scratch_layout): room for all of them */
    most += (need + 63) & ~(size_t)63;
  }
  if (r == BRAID_SUCCESS)
    r = comm_dev_scratch(c, most, &p);
  return r;
}

static braid_result run_prepared(braid_comm *c, exec_op *ops, int nops,
                                 const exec_op *first, int dev) {
  braid_result r;
  if (exec_plan_kernels(c, ops, nops)) { /* src/exec_kernel.c */
    void *ev = NULL;
    uint64_t seq = 0;
    r = exk_launch(c, ops, nops, c->dev->stream, &ev, &seq);
    if (r != BRAID_SUCCESS)
      return r;
    cuda_held(1); /* a device-wide wait meanwhile would wait for it */
    r = exk_finish(c, first, ev, seq, 1);
    cuda_held(-1);
    return r;
  }
  exec_op *run = malloc(sizeof *run * (size_t)nops);
  exec_stage *st = malloc(sizeof *st * (size_t)nops);
  if (run == NULL || st == NULL) {
    free(run);
    free(st);
    return comm_fail(c, BRAID_ERR_NOMEM,
                     "%s: out of memory staging %d operations", first->name,
                     nops);
  }
  memcpy(run, ops, sizeof *run * (size_t)nops);
  int nst = 0;
  size_t total = 0;
  for (int k = 0; k < nops; k++)
    if (staged(c, &ops[k]))
      total = stage_layout(c, ops, k, &st[nst++], total);
  if (nst == 0) {
    free(st);
    r = exec_loop(c, run, nops);
    free(run);
    return r;
  }
  TRACE(LOG_COLL,
        "%s #%llu: %d of %d operations staged through %zu bytes "
        "of host memory",
        first->name, (unsigned long long)first->seq, nst, nops, total);
  /* c->dev's pinned staging when set up; a send or receive before any setup
   * (setup is collective, they are not) the loose one */
  void *p = NULL, *stream = NULL;
  if (c->dev != NULL) {
    r = comm_dev_stage(c, total, &p);
    stream = c->dev->stream;
    if (r != BRAID_SUCCESS)
      dev_error(c, first, dev, "allocating host staging memory", r);
  } else {
    r = loose(c, first, dev, total, &p, &stream);
  }
  char *host = p;
  if (r != BRAID_SUCCESS)
    goto out;
  r = stage_in(run, st, nst, host, stream);
  if (r == BRAID_SUCCESS)
    r = cudev_stream_sync(stream);
  if (r != BRAID_SUCCESS) {
    r = dev_error(c, first, dev, "copying inputs to host staging memory", r);
    goto out;
  }
  r = exec_loop(c, run, nops);
  if (r != BRAID_SUCCESS)
    goto out;
  r = stage_out(st, nst, host, stream);
  if (r == BRAID_SUCCESS)
    r = cudev_stream_sync(stream);
  if (r != BRAID_SUCCESS)
    r = dev_error(c, first, dev, "copying outputs back from host staging", r);
out:
  free(run);
  free(st);
  return r;
}

static braid_result run_on_device(braid_comm *c, exec_op *ops, int nops) {
  const exec_op *first = NULL;
  int dev = -1;
  braid_result r = prepare(c, ops, nops, &first, &dev);
  if (r != BRAID_SUCCESS)
    return r;
  /* pre-multiplied sums read their inputs' products (src/premul.c) */
  const void *stack_saved[4], **saved = stack_saved;
  if (nops > 4 && (saved = calloc((size_t)nops, sizeof *saved)) == NULL)
    return BRAID_ERR_NOMEM;
  r = premul_dev_begin(c, ops, nops, saved);
  if (r == BRAID_SUCCESS)
    r = run_prepared(c, ops, nops, first, dev);
  premul_dev_end(ops, nops, saved);
  if (saved != stack_saved)
    free(saved);
  return r;
}

/* Runs fn, which selects the ops' device, and gives the calling thread its
 * current device back: blocking calls and the setup before a gate run in
 * the user's thread. */
static braid_result on_callers_device(braid_comm *c, exec_op *ops, int nops,
                                      braid_result (*fn)(braid_comm *,
                                                         exec_op *, int)) {
  int mine = cudev_get_device();
  braid_result r = fn(c, ops, nops);
  if (mine >= 0 && cudev_get_device() != mine)
    (void)cudev_set_device(mine);
  return r;
}

braid_result exec_dev_prepare(braid_comm *c, exec_op *ops, int nops) {
  return on_callers_device(c, ops, nops, prepare_only);
}

braid_result exec_dev_run(braid_comm *c, exec_op *ops, int nops) {
  return on_callers_device(c, ops, nops, run_on_device);
}

/* ---- small calls on a CUDA stream (src/enqueue.c) ---------------------- */

int exec_dev_stream_plan(braid_comm *c, const exec_op *ops, int nops,
                         size_t cap, exec_stage *st) {
  if (!atomic_load(&c->dev_up) || c->dev == NULL || c->dev->host_max == 0)
    return 0;
  int nst = 0;
  size_t total = 0;
  for (int k = 0; k < nops; k++) {
    if (ops[k].dev < 0 || ops[k].is_barrier)
      continue;
    /* a call on another GPU fails when it runs, with its message */
    if (ops[k].dev != c->dev->device || !exec_plan_small(c, &ops[k]))
      return 0;
    total = stage_layout(c, ops, k, &st[nst++], total);
  }
  return total <= cap ? nst : 0;
}

size_t exec_dev_stream_cap(const braid_comm *c) {
  /* one call of the largest small size, in and out apart */
  return c->dev != NULL ? 2 * align_up(c->dev->host_max) : 0;
}

braid_result exec_dev_stream_in(braid_comm *c, exec_op *ops,
                                const exec_stage *st, int nst, char *host,
                                void *stream) {
  braid_result r = stage_in(ops, st, nst, host, stream);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r,
                     "%s on rank %d: copying the inputs to pinned host memory "
                     "on the CUDA stream (GPU %d): %s",
                     ops[st[0].k].name, c->rank, c->dev->device, cudev_error());
  return r;
}

braid_result exec_dev_stream_out(braid_comm *c, const exec_op *ops,
                                 const exec_stage *st, int nst,
                                 const char *host, void *stream) {
  braid_result r = stage_out(st, nst, host, stream);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r,
                     "%s on rank %d: copying the outputs back from pinned host "
                     "memory on the CUDA stream (GPU %d): %s",
                     ops[st[0].k].name, c->rank, c->dev->device, cudev_error());
  return r;
}

void exec_dev_stream_undo(braid_comm *c, const exec_stage *st, int nst,
                          char *host) {
  if (c->dev == NULL)
    return;
  braid_result r = cudev_set_device(c->dev->device);
  for (int i = 0; i < nst && r == BRAID_SUCCESS; i++)
    if (st[i].outlen > 0)
      r = cudev_memcpy(host + st[i].off_out, st[i].dev_out, st[i].outlen,
                       c->dev->stream);
  if (r == BRAID_SUCCESS)
    r = cudev_stream_sync(c->dev->stream);
  if (r != BRAID_SUCCESS)
    WARN(LOG_COLL,
         "rank %d: a failed call on a CUDA stream could not keep its "
         "recvbuf as it was (GPU %d): %s; its contents are undefined",
         c->rank, c->dev->device, cudev_error());
}
