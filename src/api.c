/*
 * The collective entry points: every argument is checked before anything is
 * sent (BRAID_ERR_INVALID_ARG names the argument; the communicator stays
 * usable), then the call becomes an exec_op and is issued.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_dev.h"
#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/config.h"
#include "src/enqueue.h"
#include "src/exec_int.h"
#include "src/flight.h"
#include "src/log.h"
#include "src/premul.h"
#include "src/stream.h"

/* ---- small public helpers --------------------------------------------- */

static const size_t dtype_sizes[BRAID_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2,
                                                     2, 4, 8, 2, 1, 1, 1};
static const char *dtype_names[BRAID_NUM_DTYPES] = {
    "int8",   "uint8",   "int32",       "uint32",     "int64",
    "uint64", "float16", "bfloat16",    "float32",    "float64",
    "int16",  "bool",    "float8_e4m3", "float8_e5m2"};
static const char *op_names[BRAID_NUM_OPS] = {"sum", "prod", "min", "max",
                                              "avg", "band", "bor", "bxor"};

size_t braid_dtype_size(braid_dtype dt) {
  return (unsigned)dt < BRAID_NUM_DTYPES ? dtype_sizes[dt] : 0;
}

const char *braid_dtype_name(braid_dtype dt) {
  return (unsigned)dt < BRAID_NUM_DTYPES ? dtype_names[dt] : "invalid";
}

const char *braid_op_name(braid_op op) {
  return (unsigned)op < BRAID_NUM_OPS ? op_names[op]
         : premul_is_op(op)           ? "premul_sum"
                                      : "invalid";
}

braid_result braid_get_version(int *version) {
  if (version == NULL)
    return comm_arg_bad(NULL, "braid_get_version: version is NULL");
  *version = BRAID_VERSION_CODE;
  return BRAID_SUCCESS;
}

void braid_config_init(braid_config *cfg) {
  if (cfg == NULL) {
    (void)comm_arg_bad(NULL, "braid_config_init: cfg is NULL");
    return;
  }
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->blocking = 1;
}

braid_result braid_unique_id_to_string(const braid_unique_id *id, char *buf,
                                       size_t len) {
  const char *fn = "braid_unique_id_to_string";
  if (id == NULL)
    return comm_arg_bad(NULL, "%s: id is NULL", fn);
  if (buf == NULL)
    return comm_arg_bad(NULL, "%s: buf is NULL", fn);
  if (len < 2 * BRAID_UNIQUE_ID_BYTES + 1)
    return comm_arg_bad(NULL, "%s: len is %zu, the text needs %d bytes", fn,
                        len, 2 * BRAID_UNIQUE_ID_BYTES + 1);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < BRAID_UNIQUE_ID_BYTES; i++) {
    unsigned char b = (unsigned char)id->internal[i];
    buf[2 * i] = hex[b >> 4];
    buf[2 * i + 1] = hex[b & 15];
  }
  buf[2 * BRAID_UNIQUE_ID_BYTES] = '\0';
  return BRAID_SUCCESS;
}

braid_result braid_unique_id_from_string(braid_unique_id *id,
                                         const char *text) {
  const char *fn = "braid_unique_id_from_string";
  if (id == NULL)
    return comm_arg_bad(NULL, "%s: id is NULL", fn);
  if (text == NULL)
    return comm_arg_bad(NULL, "%s: text is NULL", fn);
  if (boot_id_from_text(text, id) != BRAID_SUCCESS)
    return comm_arg_bad(NULL, "%s: text \"%.16s%s\": %s", fn, text,
                        strlen(text) > 16 ? "..." : "", err_msg());
  return BRAID_SUCCESS;
}

/* ---- argument checks --------------------------------------------------- */

static braid_result bad(braid_comm *c, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* fn is the call's short name ("allreduce"); the message names the public
 * function (braid_allreduce). */
static braid_result bad(braid_comm *c, const char *fn, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return comm_arg_bad(c, "braid_%s: %s", fn, msg);
}

static int overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/* Checks everything and fills op; op->in/out/count/dt/op/root set by the
 * caller. */
static braid_result check_op(braid_comm *c, exec_op *op, int reduces) {
  const char *fn = op->name;
  if (c->broken != BRAID_SUCCESS)
    return comm_fail(c, c->broken,
                     "%s: the communicator is broken since an earlier error "
                     "(%s); destroy it",
                     fn, comm_broken_why(c));
  if ((unsigned)op->dt >= BRAID_NUM_DTYPES)
    return bad(c, fn, "dtype is %d, not a braid_dtype (0..%d)", (int)op->dt,
               BRAID_NUM_DTYPES - 1);
  if (reduces && (unsigned)op->op >= BRAID_NUM_OPS)
    return bad(c, fn, "op is %d, not a braid_op (0..%d)", (int)op->op,
               BRAID_NUM_OPS - 1);
  int flt = op->dt == BRAID_FLOAT16 || op->dt == BRAID_BFLOAT16 ||
            op->dt == BRAID_FLOAT32 || op->dt == BRAID_FLOAT64 ||
            op->dt == BRAID_FLOAT8_E4M3 || op->dt == BRAID_FLOAT8_E5M2;
  int bitwise =
      op->op == BRAID_BAND || op->op == BRAID_BOR || op->op == BRAID_BXOR;
  if (reduces && bitwise && flt)
    return bad(c, fn,
               "op %s is not defined on dtype %s (bitwise ops take integer "
               "dtypes and bool)",
               braid_op_name(op->op), braid_dtype_name(op->dt));
  if (reduces && op->op == BRAID_AVG && op->dt == BRAID_BOOL)
    return bad(c, fn,
               "op avg is not defined on dtype bool (use sum, max or bor for "
               "a logical or)");
  int n = c->nranks, me = c->rank;
  int rooted = op->coll == SCHED_BROADCAST || op->coll == SCHED_REDUCE ||
               op->coll == SCHED_GATHER || op->coll == SCHED_SCATTER;
  int p2p = op->coll == SCHED_SEND || op->coll == SCHED_RECV;
  if ((rooted || p2p) && (op->root < 0 || op->root >= n))
    return bad(c, fn, "%s is %d, the communicator has %d ranks (0..%d)",
               rooted ? "root" : "peer", op->root, n, n - 1);
  size_t es = braid_dtype_size(op->dt);
  int ib = sched_in_blocks(op->coll, n), ob = sched_out_blocks(op->coll, n);
  int blocks = ib > ob ? ib : ob;
  size_t total; /* a product, not divisions: this check runs per call */
  if (__builtin_mul_overflow(op->count, es * (size_t)blocks * 2, &total))
    return bad(c, fn,
               "count is %zu, which overflows the buffer size (%d blocks of "
               "%zu-byte %s)",
               op->count, blocks, es, braid_dtype_name(op->dt));
  int use_in = sched_uses_in(op->coll, op->root, me) && ib > 0;
  int use_out = sched_uses_out(op->coll, op->root, me) && ob > 0;
  if (op->count == 0)
    return BRAID_SUCCESS;
  if (use_in && op->in == NULL)
    return bad(c, fn, "sendbuf is NULL with count %zu", op->count);
  if (use_out && op->out == NULL)
    return bad(c, fn, "recvbuf is NULL with count %zu", op->count);
  if (use_in && ((uintptr_t)op->in % es) != 0)
    return bad(c, fn, "sendbuf %p is not aligned to %zu bytes (%s)", op->in, es,
               braid_dtype_name(op->dt));
  if (use_out && ((uintptr_t)op->out % es) != 0)
    return bad(c, fn, "recvbuf %p is not aligned to %zu bytes (%s)", op->out,
               es, braid_dtype_name(op->dt));
  return BRAID_SUCCESS;
}

/* The bytes a call reads from sendbuf and writes to recvbuf, on any rank
 * that uses them. */
static void op_lens(const braid_comm *c, const exec_op *op, size_t len[2]) {
  size_t bytes = op->count * braid_dtype_size(op->dt);
  len[0] = bytes * (size_t)sched_in_blocks(op->coll, c->nranks);
  len[1] = bytes * (size_t)sched_out_blocks(op->coll, c->nranks);
}

/* In place per NCCL's conventions (sets op->inplace), or no overlap at
 * all. After classify, so that a device buffer too short for the call is
 * named as such rather than as overlapping the memory after it. */
static braid_result check_overlap(braid_comm *c, exec_op *op) {
  const char *fn = op->name;
  int n = c->nranks, me = c->rank;
  size_t es = braid_dtype_size(op->dt), len[2];
  op_lens(c, op, len);
  size_t inlen = len[0], outlen = len[1];
  if (!sched_uses_in(op->coll, op->root, me) ||
      sched_in_blocks(op->coll, n) == 0 ||
      !sched_uses_out(op->coll, op->root, me) ||
      sched_out_blocks(op->coll, n) == 0)
    return BRAID_SUCCESS;
  const char *in = op->in;
  const char *out = op->out;
  const char *want = NULL;
  switch (op->coll) {
  case SCHED_ALLGATHER:
  case SCHED_GATHER:
    want = out +
           (size_t)(op->coll == SCHED_GATHER ? op->root : me) * op->count * es;
    break;
  case SCHED_REDUCE_SCATTER:
  case SCHED_SCATTER:
    want = in +
           (size_t)(op->coll == SCHED_SCATTER ? op->root : me) * op->count * es;
    if (out == want) {
      op->inplace = 1;
      return BRAID_SUCCESS;
    }
    want = NULL;
    break;
  default:
    want = out;
    break;
  }
  if (want != NULL && in == want) {
    op->inplace = 1;
    return BRAID_SUCCESS;
  }
  if (overlap(in, inlen, out, outlen))
    return bad(c, fn,
               "sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap "
               "without being in place (NCCL's in-place conventions: see "
               "braid.h)",
               (const void *)in, inlen, (const void *)out, outlen);
  return BRAID_SUCCESS;
}

/* Host or device: every buffer of a call on the same side (and GPU); sets
 * op->dev. A CUDA stream takes device buffers only (as NCCL's calls). */
static braid_result classify(braid_comm *c, exec_op *op) {
  op->dev = -1;
  if (c->host_only) /* and no stream can wrap a CUDA stream (src/stream.c) */
    return BRAID_SUCCESS;
  const char *fn = op->name;
  int n = c->nranks, me = c->rank;
  int use_in = sched_uses_in(op->coll, op->root, me) &&
               sched_in_blocks(op->coll, n) > 0 && op->in != NULL;
  int use_out = sched_uses_out(op->coll, op->root, me) &&
                sched_out_blocks(op->coll, n) > 0 && op->out != NULL;
  const void *ptr[2] = {use_in ? op->in : NULL, use_out ? op->out : NULL};
  static const char *names[2] = {"sendbuf", "recvbuf"};
  int kind[2] = {-1, -1}, gpu[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    if (ptr[i] == NULL)
      continue;
    kind[i] = cudev_is_device(ptr[i], &gpu[i]);
    if (kind[i] < 0)
      return bad(c, fn,
                 "cannot tell whether %s %p is host or device memory: %s",
                 names[i], ptr[i], cudev_error());
  }
  if (kind[0] >= 0 && kind[1] >= 0 && kind[0] != kind[1]) {
    int d = kind[0] == 1 ? 0 : 1;
    return bad(c, fn,
               "%s is device memory (GPU %d) but %s is host memory: a call's "
               "buffers must all be device memory or all host memory",
               names[d], gpu[d], names[1 - d]);
  }
  if (kind[0] == 1 && kind[1] == 1 && gpu[0] != gpu[1])
    return bad(c, fn,
               "sendbuf is on GPU %d but recvbuf is on GPU %d: a call's "
               "buffers must be on one GPU",
               gpu[0], gpu[1]);
  for (int i = 0; i < 2; i++)
    if (kind[i] == 1)
      op->dev = gpu[i];
  /* A device buffer that runs into memory no allocation maps would fault
   * on the GPU, and a fault there ends the process's CUDA context: refuse
   * the call instead (host buffers cannot be measured). */
  size_t len[2];
  op_lens(c, op, len);
  for (int i = 0; i < 2; i++) {
    size_t room = kind[i] == 1 ? cudev_room(ptr[i], len[i]) : SIZE_MAX;
    if (room < len[i])
      return bad(c, fn,
                 "%s %p runs past the device memory mapped there (GPU %d): "
                 "the call needs %zu bytes from it (count %zu of %s), only "
                 "%zu are allocated",
                 names[i], ptr[i], gpu[i], len[i], op->count,
                 braid_dtype_name(op->dt), room);
  }
  if (enq_stream_cuda(op->stream) != NULL && op->dev < 0 &&
      (kind[0] == 0 || kind[1] == 0))
    return bad(c, fn,
               "%s is host memory but the stream wraps a CUDA stream: calls "
               "on a CUDA stream take device buffers (use a host stream or "
               "NULL for host buffers)",
               names[kind[0] == 0 ? 0 : 1]);
  /* A call is not a node that a CUDA graph can hold: captured, its gate
   * would wait for a "reached" that comes only when the graph is launched,
   * and the collective would never run in the graph's launches. */
  int cap = enq_stream_capturing(op->stream);
  if (cap < 0)
    return bad(c, fn,
               "cannot tell whether the CUDA stream is being captured into a "
               "CUDA graph: %s",
               cudev_error());
  if (cap > 0) {
    bad(c, fn,
        "the CUDA stream is being captured into a CUDA graph: calls on a "
        "capturing stream are not supported (issue them outside the "
        "capture)");
    return BRAID_ERR_UNSUPPORTED;
  }
  return BRAID_SUCCESS;
}

/* int16, bool and the bitwise ops on device buffers: the device's reduction
 * kernels do not have them (docs/CUDA.md), so a call that reduces is
 * refused; one that only moves data moves it as bytes. */
static braid_result dev_dtype(braid_comm *c, exec_op *op, int reduces) {
  int newdt = op->dt == BRAID_INT16 || op->dt == BRAID_BOOL;
  int newop = reduces && (op->op == BRAID_BAND || op->op == BRAID_BOR ||
                          op->op == BRAID_BXOR);
  if (op->dev < 0 || (!newdt && !newop))
    return BRAID_SUCCESS;
  if (reduces) {
    bad(c, op->name,
        "op %s on dtype %s is not supported on device buffers (the CUDA "
        "reduction kernels lack int16, bool and the bitwise ops; host "
        "buffers take them)",
        braid_op_name(op->op), braid_dtype_name(op->dt));
    return BRAID_ERR_UNSUPPORTED;
  }
  op->count *= braid_dtype_size(op->dt);
  op->dt = BRAID_UINT8;
  return BRAID_SUCCESS;
}

/* The same arguments as the last call that passed the checks, on a
 * communicator where the checks depend on the arguments alone (no device:
 * classify asks nothing, dev_dtype changes nothing) and that is not
 * broken: what the checks found (in place) is taken over. A training
 * loop's calls repeat; this saves them some 300 instructions each. */
static int checked_before(braid_comm *c, exec_op *op) {
  const exec_op *k = &c->checked;
  if (!c->checked_set || c->broken != BRAID_SUCCESS || op->premul != NULL ||
      k->coll != op->coll || k->in != op->in || k->out != op->out ||
      k->count != op->count || k->dt != op->dt || k->op != op->op ||
      k->root != op->root || k->stream != op->stream ||
      k->is_barrier != op->is_barrier)
    return 0;
  op->inplace = k->inplace;
  op->dev = -1;
  return 1;
}

static braid_result issue(braid_comm *c, exec_op *op, int reduces) {
  if (c == NULL)
    return bad(NULL, op->name, "comm is NULL");
  braid_result r = comm_ready(c); /* before its sequence number */
  if (r != BRAID_SUCCESS)
    return r;
  r = reduces ? premul_resolve(c, op) : BRAID_SUCCESS;
  if (r == BRAID_SUCCESS && !checked_before(c, op)) {
    r = check_op(c, op, reduces);
    if (r == BRAID_SUCCESS && op->count > 0)
      r = classify(c, op);
    if (r == BRAID_SUCCESS && op->count > 0)
      r = dev_dtype(c, op, reduces);
    if (r == BRAID_SUCCESS && op->count > 0)
      r = check_overlap(c, op);
    c->checked_set = r == BRAID_SUCCESS && op->count > 0 && c->host_only &&
                     op->premul == NULL;
    if (c->checked_set)
      c->checked = *op;
  }
  if (r != BRAID_SUCCESS || op->count == 0)
    return r;
  if (op->coll != SCHED_SEND && op->coll != SCHED_RECV)
    op->seq = ++c->coll_seq;
  flight_queued(c, op);
  return enq_submit(c, op);
}

#define OP_INIT(o, kind, nm, s)                                                \
  exec_op o;                                                                   \
  memset(&o, 0, sizeof o);                                                     \
  o.coll = kind;                                                               \
  o.name = nm;                                                                 \
  o.dev = -1;                                                                  \
  o.stream = s

braid_result braid_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                             braid_dtype dt, braid_op op, braid_comm *comm,
                             braid_stream *stream) {
  OP_INIT(o, SCHED_ALLREDUCE, "allreduce", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = count;
  o.dt = dt;
  o.op = op;
  return issue(comm, &o, 1);
}

braid_result braid_reduce(const void *sendbuf, void *recvbuf, size_t count,
                          braid_dtype dt, braid_op op, int root,
                          braid_comm *comm, braid_stream *stream) {
  OP_INIT(o, SCHED_REDUCE, "reduce", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = count;
  o.dt = dt;
  o.op = op;
  o.root = root;
  return issue(comm, &o, 1);
}

braid_result braid_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                             braid_dtype dt, int root, braid_comm *comm,
                             braid_stream *stream) {
  OP_INIT(o, SCHED_BROADCAST, "broadcast", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = count;
  o.dt = dt;
  o.root = root;
  return issue(comm, &o, 0);
}

braid_result braid_allgather(const void *sendbuf, void *recvbuf,
                             size_t sendcount, braid_dtype dt, braid_comm *comm,
                             braid_stream *stream) {
  OP_INIT(o, SCHED_ALLGATHER, "allgather", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = sendcount;
  o.dt = dt;
  return issue(comm, &o, 0);
}

braid_result braid_reduce_scatter(const void *sendbuf, void *recvbuf,
                                  size_t recvcount, braid_dtype dt, braid_op op,
                                  braid_comm *comm, braid_stream *stream) {
  OP_INIT(o, SCHED_REDUCE_SCATTER, "reduce_scatter", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = recvcount;
  o.dt = dt;
  o.op = op;
  return issue(comm, &o, 1);
}

braid_result braid_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                          braid_dtype dt, int root, braid_comm *comm,
                          braid_stream *stream) {
  OP_INIT(o, SCHED_GATHER, "gather", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = sendcount;
  o.dt = dt;
  o.root = root;
  return issue(comm, &o, 0);
}

braid_result braid_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                           braid_dtype dt, int root, braid_comm *comm,
                           braid_stream *stream) {
  OP_INIT(o, SCHED_SCATTER, "scatter", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = recvcount;
  o.dt = dt;
  o.root = root;
  return issue(comm, &o, 0);
}

braid_result braid_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                            braid_dtype dt, braid_comm *comm,
                            braid_stream *stream) {
  OP_INIT(o, SCHED_ALLTOALL, "alltoall", stream);
  o.in = sendbuf;
  o.out = recvbuf;
  o.count = count;
  o.dt = dt;
  return issue(comm, &o, 0);
}

braid_result braid_send(const void *sendbuf, size_t count, braid_dtype dt,
                        int peer, braid_comm *comm, braid_stream *stream) {
  OP_INIT(o, SCHED_SEND, "send", stream);
  o.in = sendbuf;
  o.count = count;
  o.dt = dt;
  o.root = peer;
  return issue(comm, &o, 0);
}

braid_result braid_recv(void *recvbuf, size_t count, braid_dtype dt, int peer,
                        braid_comm *comm, braid_stream *stream) {
  OP_INIT(o, SCHED_RECV, "recv", stream);
  o.out = recvbuf;
  o.count = count;
  o.dt = dt;
  o.root = peer;
  return issue(comm, &o, 0);
}

braid_result braid_barrier(braid_comm *comm, braid_stream *stream) {
  if (comm == NULL)
    return bad(NULL, "barrier", "comm is NULL");
  OP_INIT(o, SCHED_ALLREDUCE, "barrier", stream);
  o.count = 1;
  o.dt = BRAID_UINT8;
  o.op = BRAID_SUM;
  /* The barrier's bytes live in the op (see xop_prepare), so a queued copy
   * points at its own. */
  o.is_barrier = 1;
  if (comm->broken != BRAID_SUCCESS)
    return comm_fail(comm, comm->broken,
                     "barrier: the communicator is broken since an "
                     "earlier error (%s); destroy it",
                     braid_result_string(comm->broken));
  braid_result ready = comm_ready(comm);
  if (ready != BRAID_SUCCESS)
    return ready;
  o.seq = ++comm->coll_seq;
  flight_queued(comm, &o);
  return enq_submit(comm, &o);
}

/* ---- alltoallv --------------------------------------------------------- */

typedef struct a2av_blk {
  size_t lo, hi; /* bytes from the buffer's start */
  int j;
} a2av_blk;

static int blk_cmp(const void *a, const void *b) {
  const a2av_blk *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The nonzero blocks of one side, sorted; each checked against overflow. */
static braid_result a2av_blocks(braid_comm *c, const size_t *counts,
                                const size_t *displs, size_t es,
                                const char *cname, const char *dname,
                                a2av_blk *b, int *nb) {
  *nb = 0;
  for (int j = 0; es > 0 && j < c->nranks; j++) {
    if (counts[j] == 0)
      continue;
    if (counts[j] > SIZE_MAX / es / 2 || displs[j] > SIZE_MAX / es / 2 ||
        displs[j] * es > SIZE_MAX / 2 - counts[j] * es)
      return bad(c, "alltoallv",
                 "%s[%d] = %zu with %s[%d] = %zu overflows the buffer size",
                 cname, j, counts[j], dname, j, displs[j]);
    b[*nb] = (a2av_blk){displs[j] * es, (displs[j] + counts[j]) * es, j};
    (*nb)++;
  }
  qsort(b, (size_t)*nb, sizeof *b, blk_cmp);
  return BRAID_SUCCESS;
}

static braid_result a2av_check(braid_comm *c, const char *sb, const size_t *sc,
                               const size_t *sd, char *rb, const size_t *rc,
                               const size_t *rd, braid_dtype dt, a2av_blk *s,
                               a2av_blk *r) {
  const char *fn = "alltoallv";
  size_t es = braid_dtype_size(dt);
  int ns = 0, nr = 0;
  if (es == 0) /* checked by the caller already */
    return bad(c, fn, "dtype is %d, not a braid_dtype", (int)dt);
  braid_result e = a2av_blocks(c, sc, sd, es, "sendcounts", "sdispls", s, &ns);
  if (e == BRAID_SUCCESS)
    e = a2av_blocks(c, rc, rd, es, "recvcounts", "rdispls", r, &nr);
  if (e != BRAID_SUCCESS)
    return e;
  if (sc[c->rank] != rc[c->rank])
    return bad(c, fn,
               "rank %d sends itself sendcounts[%d] = %zu elements but "
               "receives recvcounts[%d] = %zu",
               c->rank, c->rank, sc[c->rank], c->rank, rc[c->rank]);
  if (ns > 0 && sb == NULL)
    return bad(c, fn, "sendbuf is NULL with sendcounts[%d] = %zu", s[0].j,
               sc[s[0].j]);
  if (nr > 0 && rb == NULL)
    return bad(c, fn, "recvbuf is NULL with recvcounts[%d] = %zu", r[0].j,
               rc[r[0].j]);
  if (ns > 0 && (uintptr_t)sb % es != 0)
    return bad(c, fn, "sendbuf %p is not aligned to %zu bytes (%s)",
               (const void *)sb, es, braid_dtype_name(dt));
  if (nr > 0 && (uintptr_t)rb % es != 0)
    return bad(c, fn, "recvbuf %p is not aligned to %zu bytes (%s)", (void *)rb,
               es, braid_dtype_name(dt));
  for (int k = 1; k < nr; k++)
    if (r[k].lo < r[k - 1].hi)
      return bad(c, fn,
                 "receive blocks overlap: rank %d's (rdispls %zu, %zu "
                 "elements) and rank %d's (rdispls %zu, %zu elements)",
                 r[k - 1].j, rd[r[k - 1].j], rc[r[k - 1].j], r[k].j, rd[r[k].j],
                 rc[r[k].j]);
  if (ns == 0 || nr == 0)
    return BRAID_SUCCESS;
  /* a send block against the receive blocks: sorted and disjoint, their
   * ends ascend, so the first that ends past its start is the one to test */
  uintptr_t s0 = (uintptr_t)sb, r0 = (uintptr_t)rb;
  for (int k = 0; k < ns; k++) {
    uintptr_t lo = s0 + s[k].lo, hi = s0 + s[k].hi;
    int a = 0, z = nr;
    while (a < z) {
      int m = (a + z) / 2;
      if (r0 + r[m].hi <= lo)
        a = m + 1;
      else
        z = m;
    }
    if (a < nr && r0 + r[a].lo < hi)
      return bad(c, fn,
                 "the block sent to rank %d (sdispls %zu, %zu elements) "
                 "overlaps the block received from rank %d (rdispls %zu, %zu "
                 "elements): alltoallv has no in-place form",
                 s[k].j, sd[s[k].j], sc[s[k].j], r[a].j, rd[r[a].j],
                 rc[r[a].j]);
  }
  return BRAID_SUCCESS;
}

/* One send or receive of alltoallv, checked as braid_send/braid_recv are. */
static braid_result a2av_op(braid_comm *c, exec_op *o, sched_coll coll,
                            int peer, const void *in, void *out, size_t count,
                            braid_dtype dt, braid_stream *stream) {
  OP_INIT(x, coll, "alltoallv", stream);
  x.in = in;
  x.out = out;
  x.count = count;
  x.dt = dt;
  x.root = peer;
  *o = x;
  braid_result r = check_op(c, o, 0);
  if (r == BRAID_SUCCESS)
    r = classify(c, o);
  if (r == BRAID_SUCCESS && o->dev >= 0) {
    bad(c, "alltoallv",
        "device buffers are not supported (alltoallv takes host buffers)");
    r = BRAID_ERR_UNSUPPORTED;
  }
  return r;
}

braid_result braid_alltoallv(const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf,
                             const size_t *recvcounts, const size_t *rdispls,
                             braid_dtype dt, braid_comm *comm,
                             braid_stream *stream) {
  const char *fn = "alltoallv";
  if (comm == NULL)
    return bad(NULL, fn, "comm is NULL");
  /* the communicator's state and the dtype, as for any call */
  OP_INIT(probe, SCHED_SEND, fn, stream);
  probe.dt = dt;
  probe.root = comm->rank;
  braid_result r = check_op(comm, &probe, 0);
  if (r != BRAID_SUCCESS)
    return r;
  const size_t *arr[4] = {sendcounts, sdispls, recvcounts, rdispls};
  static const char *arrn[4] = {"sendcounts", "sdispls", "recvcounts",
                                "rdispls"};
  for (int i = 0; i < 4; i++)
    if (arr[i] == NULL)
      return bad(comm, fn, "%s is NULL (one entry per rank is needed)",
                 arrn[i]);
  int n = comm->nranks, me = comm->rank;
  size_t es = braid_dtype_size(dt);
  a2av_blk *blk = malloc(sizeof *blk * (size_t)n * 2);
  /* per peer: the count messages both ways and the data both ways */
  exec_op *ops = malloc(sizeof *ops * (size_t)(4 * n));
  if (blk == NULL || ops == NULL) {
    free(blk);
    free(ops);
    return BRAID_ERR_NOMEM;
  }
  const char *sb = sendbuf;
  char *rb = recvbuf;
  r = a2av_check(comm, sb, sendcounts, sdispls, rb, recvcounts, rdispls, dt,
                 blk, blk + n);
  int nops = 0;
  /* peers in the order me+k (sends) and me-k (receives), so that the ranks
   * do not all start with rank 0; rank i's count message to j carries
   * sendcounts[j], and j compares it with its recvcounts[i] before any
   * data is compared, so that a block one side sends and the other does
   * not expect ends in an error instead of lingering */
  for (int k = 0; r == BRAID_SUCCESS && k < n; k++) {
    int to = (me + k) % n, from = (me - k + n) % n;
    if (k > 0) {
      exec_op *hs = &ops[nops], *hr = &ops[nops + 1];
      r = a2av_op(comm, hs, SCHED_SEND, to, &hs->count_msg, NULL, 1,
                  BRAID_UINT64, stream);
      if (r == BRAID_SUCCESS)
        r = a2av_op(comm, hr, SCHED_RECV, from, NULL, &hr->count_msg, 1,
                    BRAID_UINT64, stream);
      if (r != BRAID_SUCCESS)
        break;
      hs->is_count = hr->is_count = 1;
      hs->in = NULL; /* the executor takes count_msg of the queued copy */
      hr->out = NULL;
      hs->count_msg = sendcounts[to];
      hr->count_want = recvcounts[from];
      nops += 2;
    }
    if (sendcounts[to] > 0) {
      r = a2av_op(comm, &ops[nops], SCHED_SEND, to, sb + sdispls[to] * es, NULL,
                  sendcounts[to], dt, stream);
      nops += r == BRAID_SUCCESS;
    }
    if (r == BRAID_SUCCESS && recvcounts[from] > 0) {
      r = a2av_op(comm, &ops[nops], SCHED_RECV, from, NULL,
                  rb + rdispls[from] * es, recvcounts[from], dt, stream);
      nops += r == BRAID_SUCCESS;
    }
  }
  free(blk);
  if (r == BRAID_SUCCESS && nops > 0) {
    /* a collective: it takes a call number, as the others do (its sends
     * and receives carry no fingerprint, src/check.c) */
    uint64_t sent = 0, seq = ++comm->coll_seq;
    for (int j = 0; j < n; j++)
      sent += sendcounts[j];
    for (int k = 0; k < nops; k++)
      ops[k].seq = seq;
    ops[0].a2av_call = 1;
    flight_queued_alltoallv(comm, ops, nops, sent, dt);
    braid_group_start();
    for (int k = 0; k < nops && r == BRAID_SUCCESS; k++)
      r = enq_submit(comm, &ops[k]);
    braid_result e = braid_group_end();
    if (r == BRAID_SUCCESS)
      r = e;
  }
  free(ops);
  return r;
}
