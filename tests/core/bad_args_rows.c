/*
 * The bad-argument walker's rows: for every public function of braid.h,
 * each argument and the bad values it is given, the words its message must
 * hold. Read by tests/core/bad_args.c.
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "bad_args.h"

void bad_defaults(args *a, env *e) {
  memset(a, 0, sizeof *a);
  a->e = e;
  a->in = e->a;
  a->out = e->b;
  a->count = 4;
  a->dt = BRAID_FLOAT32;
  a->op = BRAID_SUM;
  a->comm = e->c;
  a->pcomm = &e->newc;
  a->pstream = &e->news;
  a->sc = a->rc = e->cnt;
  a->sd = a->rd = e->dsp;
  a->nranks = 1;
  a->id = &e->id;
  a->pid = &e->idout;
  e->cfg = e->okcfg;
  a->cfg = &e->okcfg;
  a->text = e->text;
  a->buf = e->text;
  a->len = sizeof e->text;
  a->pint = &a->value;
  a->pres = &a->res;
}

/* ---- bad values --------------------------------------------------------- */

static void m_none(args *a) { (void)a; }
static void m_in_null(args *a) { a->in = NULL; }
static void m_out_null(args *a) { a->out = NULL; }
static void m_in_null_me(args *a) { a->in = NULL, a->root = a->e->rank; }
static void m_out_null_me(args *a) { a->out = NULL, a->root = a->e->rank; }
static void m_misalign(args *a) { a->in = (const char *)a->in + 1; }
static void m_overlap(args *a) { a->out = (char *)a->in + 4; }
static void m_overlap_me(args *a) { m_overlap(a), a->root = a->e->rank; }
static void m_count_big(args *a) { a->count = (size_t)1 << 62; }
static void m_dt42(args *a) { a->dt = (braid_dtype)42; }
static void m_dt_neg(args *a) { a->dt = (braid_dtype)-1; }
static void m_op9(args *a) { a->op = (braid_op)9; }
static void m_op_neg(args *a) { a->op = (braid_op)-1; }
static void m_op_band(args *a) { a->op = BRAID_BAND; }
static void m_op_bxor(args *a) { a->op = BRAID_BXOR; }
static void m_root7(args *a) { a->root = 7; }
static void m_root_neg(args *a) { a->root = -1; }
static void m_comm_null(args *a) { a->comm = NULL; }
static void m_stream_null(args *a) { a->stream = NULL; }
static void m_stream_cuda(args *a) { a->stream = a->e->cuda; }
static void m_stream_host(args *a) { a->stream = a->e->s1; }
static void m_pstream_null(args *a) { a->pstream = NULL; }
static void m_sc_null(args *a) { a->sc = NULL; }
static void m_sd_null(args *a) { a->sd = NULL; }
static void m_rc_null(args *a) { a->rc = NULL; }
static void m_rd_null(args *a) { a->rd = NULL; }
static void m_sc_self(args *a) { a->sc = a->e->cnt_self; }
static void m_sd_big(args *a) { a->sd = a->e->dsp_big; }
static void m_rd_overlap(args *a) { a->rd = a->e->dsp_step1; }
static void m_a2av_inplace(args *a) { a->out = (void *)a->in; }
static void m_pcomm_null(args *a) { a->pcomm = NULL; }
static void m_nranks0(args *a) { a->nranks = 0; }
static void m_nranks_neg(args *a) { a->nranks = -3; }
static void m_rank_neg(args *a) { a->rank = -1; }
static void m_rank_big(args *a) { a->rank = 1; }
static void m_id_null(args *a) { a->id = NULL; }
static void m_id_zero(args *a) {
  static braid_unique_id zero;
  a->id = &zero;
}
static void m_pid_null(args *a) { a->pid = NULL; }
static void m_cfg_null(args *a) { a->cfg = NULL; }
/* a copy of the good config with one field bad */
#define M_CFG(name, field, v)                                                  \
  static void name(args *a) { a->cfg = &a->e->cfg, a->cfg->field = v; }
M_CFG(m_cfg_size, size, 3)
M_CFG(m_cfg_timeout, timeout_ms, -5)
M_CFG(m_cfg_nch_neg, nchannels, -1)
M_CFG(m_cfg_nch_big, nchannels, 33)
M_CFG(m_cfg_check, check, 7)
M_CFG(m_cfg_det, deterministic, 2)
M_CFG(m_cfg_blocking, blocking, 2)
M_CFG(m_cfg_tp, transport, "tpc")
M_CFG(m_cfg_algo, algo, "allreduce:nosuch")
#undef M_CFG
static void m_color(args *a) { a->color = -2; }
static void m_key_any(args *a) {
  a->color = BRAID_SPLIT_NOCOLOR, a->key = INT_MIN;
}
static void m_nex_neg(args *a) { a->nex = -1; }
static void m_nex_big(args *a) { a->nex = 9; }
static void m_ex_null(args *a) { a->nex = 1, a->ex = NULL; }
static void m_ex7(args *a) { a->e->ex[0] = 7, a->nex = 1, a->ex = a->e->ex; }
static void m_ex_self(args *a) {
  a->e->ex[0] = a->e->rank, a->nex = 1, a->ex = a->e->ex;
}
static void m_path_empty(args *a) { a->path = ""; }
static void m_pint_null(args *a) { a->pint = NULL; }
static void m_pres_null(args *a) { a->pres = NULL; }
static void m_text_null(args *a) { a->text = NULL; }
static void m_text_short(args *a) { a->text = "abcd"; }
static void m_text_nothex(args *a) { memset(a->e->text, 'z', 2 * 128); }
static void m_text_nomagic(args *a) { memset(a->e->text, 'a', 2 * 128); }
static void m_buf_null(args *a) { a->buf = NULL; }
static void m_len_short(args *a) { a->len = 10; }
static void m_value99(args *a) { a->value = 99; }
static void m_value1(args *a) { a->value = 1; }
static void m_value_neg(args *a) { a->value = -1; }
static void m_group_streams(args *a) { a->variant = 1; }
static void m_pop_null(args *a) { a->variant = 3; }
static void m_dt42_group(args *a) { a->dt = (braid_dtype)42, a->variant = 2; }

/* ---- the public functions ----------------------------------------------- */

#define A a->in, a->out, a->count, a->dt
static long c_allreduce(args *a) {
  if (a->variant != 2)
    return braid_allreduce(A, a->op, a->comm, a->stream);
  braid_group_start(); /* in a group: refused at once; the group ends empty */
  braid_result r = braid_allreduce(A, a->op, a->comm, a->stream);
  braid_result end = braid_group_end();
  return end != BRAID_SUCCESS ? end : r;
}
static long c_reduce(args *a) {
  return braid_reduce(A, a->op, a->root, a->comm, a->stream);
}
static long c_broadcast(args *a) {
  return braid_broadcast(A, a->root, a->comm, a->stream);
}
static long c_allgather(args *a) {
  return braid_allgather(A, a->comm, a->stream);
}
static long c_reduce_scatter(args *a) {
  return braid_reduce_scatter(A, a->op, a->comm, a->stream);
}
static long c_gather(args *a) {
  return braid_gather(A, a->root, a->comm, a->stream);
}
static long c_scatter(args *a) {
  return braid_scatter(A, a->root, a->comm, a->stream);
}
static long c_alltoall(args *a) {
  return braid_alltoall(A, a->comm, a->stream);
}
#undef A
static long c_alltoallv(args *a) {
  return braid_alltoallv(a->in, a->sc, a->sd, a->out, a->rc, a->rd, a->dt,
                         a->comm, a->stream);
}
static long c_send(args *a) {
  return braid_send(a->in, a->count, a->dt, a->root, a->comm, a->stream);
}
static long c_recv(args *a) {
  return braid_recv(a->out, a->count, a->dt, a->root, a->comm, a->stream);
}
static long c_barrier(args *a) {
  braid_result r = braid_barrier(a->comm, a->stream);
  return r == BRAID_SUCCESS && a->stream ? braid_stream_synchronize(a->stream)
                                         : r;
}
static long c_group_start(args *a) {
  (void)a;
  braid_result r = braid_group_start();
  braid_result e = braid_group_end();
  return r != BRAID_SUCCESS ? r : e;
}
static long c_group_end(args *a) {
  env *e = a->e;
  if (a->variant == 0) /* no group open */
    return braid_group_end();
  braid_group_start(); /* calls on two streams */
  braid_allreduce(e->a, e->b, 4, BRAID_FLOAT32, BRAID_SUM, e->c, e->s1);
  braid_allreduce(e->a, e->b, 4, BRAID_FLOAT32, BRAID_SUM, e->c, e->s2);
  return braid_group_end();
}
static long c_stream_create(args *a) {
  braid_result r = braid_stream_create(a->pstream);
  if (r == BRAID_SUCCESS)
    braid_stream_destroy(*a->pstream);
  return r;
}
static long c_stream_destroy(args *a) {
  return braid_stream_destroy(a->stream);
}
static long c_stream_synchronize(args *a) {
  return braid_stream_synchronize(a->stream);
}
static long c_stream_query(args *a) { return braid_stream_query(a->stream); }
static long c_stream_from_cuda(args *a) {
  braid_result r = braid_stream_from_cuda(NULL, a->pstream);
  if (r == BRAID_SUCCESS)
    braid_stream_destroy(*a->pstream);
  return r;
}
static long c_config_init(args *a) {
  braid_config_init(a->cfg);
  return 1;
}
static long c_result_string(args *a) {
  return !strcmp(braid_result_string((braid_result)a->value), "unknown result");
}
static long c_get_version(args *a) { return braid_get_version(a->pint); }
/* no argument to get wrong: one of the documented names (or NULL) */
static long c_env_launcher(args *a) {
  (void)a;
  static const char *const names[] = {"braidrun", "torchrun", "openmpi",
                                      "slurm",    "pmi",      "braid"};
  const char *l = braid_env_launcher();
  int known = l == NULL;
  for (size_t i = 0; l != NULL && i < sizeof names / sizeof *names; i++)
    known |= !strcmp(l, names[i]);
  return known;
}
static long c_dtype_size(args *a) {
  return braid_dtype_size((braid_dtype)a->value) == 0;
}
static long c_dtype_name(args *a) {
  return !strcmp(braid_dtype_name((braid_dtype)a->value), "invalid");
}
static long c_op_name(args *a) {
  return !strcmp(braid_op_name((braid_op)a->value), "invalid");
}
static long c_get_unique_id(args *a) { return braid_get_unique_id(a->pid); }
static long c_unique_id_to_string(args *a) {
  return braid_unique_id_to_string(a->id, a->buf, a->len);
}
static long c_unique_id_from_string(args *a) {
  return braid_unique_id_from_string(a->pid, a->text);
}
static long c_comm_init(args *a) {
  return braid_comm_init(a->pcomm, a->nranks, a->id, a->rank, a->cfg);
}
static long c_comm_init_env(args *a) {
  return braid_comm_init_env(a->pcomm, a->cfg);
}
static long c_comm_split(args *a) {
  return braid_comm_split(a->comm, a->color, a->key, a->pcomm);
}
static long c_comm_shrink(args *a) {
  return braid_comm_shrink(a->comm, a->ex, a->nex, a->pcomm);
}
static long c_comm_finalize(args *a) { return braid_comm_finalize(a->comm); }
static long c_comm_destroy(args *a) { return braid_comm_destroy(a->comm); }
static long c_comm_abort(args *a) { return braid_comm_abort(a->comm); }
static long c_comm_get_async_error(args *a) {
  return braid_comm_get_async_error(a->comm, a->pres);
}
static long c_comm_rank(args *a) { return braid_comm_rank(a->comm, a->pint); }
static long c_comm_size(args *a) { return braid_comm_size(a->comm, a->pint); }
static long c_comm_flight_dump(args *a) {
  return braid_comm_flight_dump(a->comm, a->path);
}
static long c_op_create_premul_sum(args *a) {
  static braid_op made;
  return braid_op_create_premul_sum(a->variant == 3 ? NULL : &made, a->in,
                                    a->dt, a->value, a->comm);
}
static long c_op_destroy(args *a) { return braid_op_destroy(a->op, a->comm); }
/* with NULL: the thread's last error, here the one just made */
static long c_comm_last_error(args *a) {
  int n;
  if (a->comm == NULL)
    (void)braid_comm_rank(NULL, &n);
  return strstr(braid_comm_last_error(a->comm), "comm is NULL") != NULL;
}

/* by name without braid_ */
#define CALLERS(X)                                                             \
  X(config_init), X(result_string), X(get_version), X(env_launcher),           \
      X(dtype_size), X(dtype_name), X(op_name), X(get_unique_id),              \
      X(unique_id_to_string), X(unique_id_from_string), X(comm_init),          \
      X(comm_init_env), X(comm_split), X(comm_shrink), X(comm_finalize),       \
      X(comm_destroy), X(comm_abort), X(comm_get_async_error), X(comm_rank),   \
      X(comm_size), X(comm_flight_dump), X(comm_last_error), X(allreduce),     \
      X(reduce), X(broadcast), X(allgather), X(reduce_scatter), X(gather),     \
      X(scatter), X(alltoall), X(alltoallv), X(send), X(recv), X(barrier),     \
      X(group_start), X(group_end), X(stream_create), X(stream_destroy),       \
      X(stream_synchronize), X(stream_query), X(stream_from_cuda),             \
      X(op_create_premul_sum), X(op_destroy)
#define C(f)                                                                   \
  { #f, c_##f }
const bad_caller bad_callers[] = {CALLERS(C)};
const int bad_ncallers = (int)(sizeof bad_callers / sizeof bad_callers[0]);

/* ---- the table: function, argument, words the message holds ('|' apart),
 * what must come, the bad value ------------------------------------------ */

#define CUDA_ROW(f)                                                            \
  { f, "stream", "stream wraps a CUDA stream", EC, m_stream_cuda }
#define COMM_ROW(f)                                                            \
  { f, "comm", "comm is NULL", L, m_comm_null }
#define COUNT_ROW(f)                                                           \
  { f, "count", "count is 4611686018427387904", E, m_count_big }
#define DT_ROW(f)                                                              \
  { f, "dt", "dtype is 42", E, m_dt42 }
#define IN_ROW(f, m)                                                           \
  { f, "sendbuf", "sendbuf is NULL", E, m }
#define OUT_ROW(f, m)                                                          \
  { f, "recvbuf", "recvbuf is NULL", E, m }
#define ROOT_ROWS(f, a)                                                        \
  {f, a, a " is 7, the communicator has", E, m_root7}, {                       \
    f, a, a " is -1, the communicator has", E, m_root_neg                      \
  }
#define OVERLAP_ROW(f, m)                                                      \
  { f, "recvbuf", "sendbuf 0x|recvbuf 0x|overlap", E, m }
#define CFG_ROWS(f)                                                            \
  {f, "cfg", "cfg->size is 3", L, m_cfg_size},                                 \
      {f, "cfg", "cfg->timeout_ms is -5", L, m_cfg_timeout},                   \
      {f, "cfg", "cfg->nchannels is -1", L, m_cfg_nch_neg},                    \
      {f, "cfg", "cfg->nchannels is 33", L, m_cfg_nch_big},                    \
      {f, "cfg", "cfg->check is 7", L, m_cfg_check},                           \
      {f, "cfg", "cfg->deterministic is 2", L, m_cfg_det},                     \
      {f, "cfg", "cfg->blocking is 2", L, m_cfg_blocking},                     \
      {f, "cfg", "cfg->transport \"tpc\"", L, m_cfg_tp}, {                     \
    f, "cfg", "cfg->algo is \"allreduce:nosuch\"", L, m_cfg_algo               \
  }

const row bad_rows[] = {
    {"config_init", "cfg", "cfg is NULL", VL, m_cfg_null},
    {"result_string", "r", NULL, V, m_value99},
    {"result_string", "r", NULL, V, m_value_neg},
    {"get_version", "version", "version is NULL", L, m_pint_null},
    {"dtype_size", "dt", NULL, V, m_value99},
    {"dtype_size", "dt", NULL, V, m_value_neg},
    {"dtype_name", "dt", NULL, V, m_value99},
    {"op_name", "op", NULL, V, m_value99},
    {"get_unique_id", "id", "id is NULL", L, m_pid_null},
    {"unique_id_to_string", "id", "id is NULL", L, m_id_null},
    {"unique_id_to_string", "buf", "buf is NULL", L, m_buf_null},
    {"unique_id_to_string", "len", "len is 10|257", L, m_len_short},
    {"unique_id_from_string", "id", "id is NULL", L, m_pid_null},
    {"unique_id_from_string", "text", "text is NULL", L, m_text_null},
    {"unique_id_from_string", "text", "text \"abcd\": 4 characters", L,
     m_text_short},
    {"unique_id_from_string", "text", "text \"zzzz|character 0 ('z')", L,
     m_text_nothex},
    {"unique_id_from_string", "text", "text \"aaaa|no braid magic", L,
     m_text_nomagic},
    {"comm_init", "comm", "comm is NULL", L, m_pcomm_null},
    {"comm_init", "nranks", "nranks is 0", L, m_nranks0},
    {"comm_init", "nranks", "nranks is -3", L, m_nranks_neg},
    {"comm_init", "rank", "rank is -1, nranks is 1", L, m_rank_neg},
    {"comm_init", "rank", "rank is 1, nranks is 1", L, m_rank_big},
    {"comm_init", "id", "id is NULL", L, m_id_null},
    {"comm_init", "id", "id has no braid magic", L, m_id_zero},
    CFG_ROWS("comm_init"),
    {"comm_init_env", "comm", "comm is NULL", L, m_pcomm_null},
    CFG_ROWS("comm_init_env"),
    COMM_ROW("comm_split"),
    {"comm_split", "color", "color is -2", E, m_color},
    {"comm_split", "key", NULL, OK, m_key_any},
    {"comm_split", "out", "out is NULL", E, m_pcomm_null},
    COMM_ROW("comm_shrink"),
    {"comm_shrink", "excluded", "excluded is NULL with nexcluded 1", E,
     m_ex_null},
    {"comm_shrink", "excluded", "excluded[0] is 7, the communicator has", E,
     m_ex7},
    {"comm_shrink", "excluded", "excluded[0] is this rank", E, m_ex_self},
    {"comm_shrink", "nexcluded", "nexcluded is -1", E, m_nex_neg},
    {"comm_shrink", "nexcluded", "nexcluded is 9", E, m_nex_big},
    {"comm_shrink", "newcomm", "newcomm is NULL", E, m_pcomm_null},
    COMM_ROW("comm_finalize"),
    COMM_ROW("comm_destroy"),
    COMM_ROW("comm_abort"),
    COMM_ROW("comm_get_async_error"),
    {"comm_get_async_error", "async_error", "async_error is NULL", E,
     m_pres_null},
    COMM_ROW("comm_rank"),
    {"comm_rank", "rank", "rank is NULL", E, m_pint_null},
    COMM_ROW("comm_size"),
    {"comm_size", "size", "size is NULL", E, m_pint_null},
    COMM_ROW("comm_flight_dump"),
    {"comm_flight_dump", "path", "path is \"\"", E, m_path_empty},
    {"comm_last_error", "comm", NULL, V, m_comm_null},
    /* collectives */
    IN_ROW("allreduce", m_in_null),
    {"allreduce", "sendbuf", "sendbuf 0x|not aligned to 4 bytes", E,
     m_misalign},
    OUT_ROW("allreduce", m_out_null),
    OVERLAP_ROW("allreduce", m_overlap),
    COUNT_ROW("allreduce"),
    DT_ROW("allreduce"),
    {"allreduce", "dt", "dtype is -1", E, m_dt_neg},
    {"allreduce", "dt", "dtype is 42", E, m_dt42_group},
    {"allreduce", "op", "op is 9", E, m_op9},
    {"allreduce", "op", "op is -1", E, m_op_neg},
    {"allreduce", "op", "op band is not defined on dtype float32", E,
     m_op_band},
    COMM_ROW("allreduce"),
    CUDA_ROW("allreduce"),
    IN_ROW("reduce", m_in_null),
    OUT_ROW("reduce", m_out_null_me),
    OVERLAP_ROW("reduce", m_overlap_me),
    COUNT_ROW("reduce"),
    DT_ROW("reduce"),
    {"reduce", "op", "op is 9", E, m_op9},
    ROOT_ROWS("reduce", "root"),
    COMM_ROW("reduce"),
    CUDA_ROW("reduce"),
    IN_ROW("broadcast", m_in_null_me),
    OUT_ROW("broadcast", m_out_null),
    OVERLAP_ROW("broadcast", m_overlap_me),
    COUNT_ROW("broadcast"),
    DT_ROW("broadcast"),
    ROOT_ROWS("broadcast", "root"),
    COMM_ROW("broadcast"),
    CUDA_ROW("broadcast"),
    IN_ROW("allgather", m_in_null),
    OUT_ROW("allgather", m_out_null),
    OVERLAP_ROW("allgather", m_overlap),
    {"allgather", "sendcount", "count is 4611686018427387904", E, m_count_big},
    DT_ROW("allgather"),
    COMM_ROW("allgather"),
    CUDA_ROW("allgather"),
    IN_ROW("reduce_scatter", m_in_null),
    OUT_ROW("reduce_scatter", m_out_null),
    OVERLAP_ROW("reduce_scatter", m_overlap),
    {"reduce_scatter", "recvcount", "count is 4611686018427387904", E,
     m_count_big},
    DT_ROW("reduce_scatter"),
    {"reduce_scatter", "op", "op is 9", E, m_op9},
    {"reduce_scatter", "op", "op bxor is not defined on dtype float32", E,
     m_op_bxor},
    COMM_ROW("reduce_scatter"),
    CUDA_ROW("reduce_scatter"),
    IN_ROW("gather", m_in_null),
    OUT_ROW("gather", m_out_null_me),
    {"gather", "sendcount", "count is 4611686018427387904", E, m_count_big},
    DT_ROW("gather"),
    ROOT_ROWS("gather", "root"),
    COMM_ROW("gather"),
    CUDA_ROW("gather"),
    IN_ROW("scatter", m_in_null_me),
    OUT_ROW("scatter", m_out_null),
    {"scatter", "recvcount", "count is 4611686018427387904", E, m_count_big},
    DT_ROW("scatter"),
    ROOT_ROWS("scatter", "root"),
    COMM_ROW("scatter"),
    CUDA_ROW("scatter"),
    IN_ROW("alltoall", m_in_null),
    OUT_ROW("alltoall", m_out_null),
    OVERLAP_ROW("alltoall", m_overlap),
    COUNT_ROW("alltoall"),
    DT_ROW("alltoall"),
    COMM_ROW("alltoall"),
    CUDA_ROW("alltoall"),
    {"alltoallv", "sendbuf", "sendbuf is NULL with sendcounts[", E, m_in_null},
    {"alltoallv", "sendcounts", "sendcounts is NULL", E, m_sc_null},
    {"alltoallv", "sendcounts", "sends itself sendcounts[|= 3 elements", E,
     m_sc_self},
    {"alltoallv", "sdispls", "sdispls is NULL", E, m_sd_null},
    {"alltoallv", "sdispls", "sdispls[|= 9223372036854775807 overflows", E,
     m_sd_big},
    {"alltoallv", "recvbuf", "recvbuf is NULL with recvcounts[", E, m_out_null},
    {"alltoallv", "recvbuf", "sdispls 0|rdispls 0|no in-place form", E,
     m_a2av_inplace},
    {"alltoallv", "recvcounts", "recvcounts is NULL", E, m_rc_null},
    {"alltoallv", "rdispls", "rdispls is NULL", E, m_rd_null},
    {"alltoallv", "rdispls", "receive blocks overlap|rdispls 1", E,
     m_rd_overlap},
    DT_ROW("alltoallv"),
    COMM_ROW("alltoallv"),
    CUDA_ROW("alltoallv"),
    IN_ROW("send", m_in_null),
    COUNT_ROW("send"),
    DT_ROW("send"),
    ROOT_ROWS("send", "peer"),
    COMM_ROW("send"),
    CUDA_ROW("send"),
    OUT_ROW("recv", m_out_null),
    COUNT_ROW("recv"),
    DT_ROW("recv"),
    ROOT_ROWS("recv", "peer"),
    COMM_ROW("recv"),
    CUDA_ROW("recv"),
    COMM_ROW("barrier"),
    {"barrier", "stream", NULL, OK, m_stream_host},
    /* groups and streams */
    {"group_start", "-", NULL, OK, m_none},
    {"env_launcher", "-", NULL, V, m_none},
    {"group_end", "-", "no group is open", L, m_none},
    {"group_end", "-", "another stream", E, m_group_streams},
    {"stream_create", "stream", "stream is NULL", L, m_pstream_null},
    {"stream_destroy", "stream", "stream is NULL", L, m_stream_null},
    {"stream_synchronize", "stream", "stream is NULL", L, m_stream_null},
    {"stream_query", "stream", "stream is NULL", L, m_stream_null},
    {"stream_from_cuda", "stream", "stream is NULL", L, m_pstream_null},
    {"stream_from_cuda", "cuda_stream", NULL, CU, m_none},
    /* reduction ops */
    {"op_create_premul_sum", "op", "op is NULL", E, m_pop_null},
    {"op_create_premul_sum", "scalar", "scalar is NULL", E, m_in_null},
    {"op_create_premul_sum", "dt", "dt is 42", E, m_dt42},
    {"op_create_premul_sum", "scalar_on_device", "scalar_on_device is 99", E,
     m_value99},
    {"op_create_premul_sum", "scalar_on_device",
     "scalar_on_device is 1 but scalar", E, m_value1},
    COMM_ROW("op_create_premul_sum"),
    {"op_destroy", "op", "op 0x9 is neither", E, m_op9},
    {"op_destroy", "op", "is a built-in op", E, m_none},
    COMM_ROW("op_destroy"),
};
const int bad_nrows = (int)(sizeof bad_rows / sizeof bad_rows[0]);
