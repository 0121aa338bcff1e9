/*
 * braid-perf: nccl-tests compatible bandwidth and correctness sweeps.
 *
 *   braid-perf <collective|all> [nccl-tests options]
 *   all_reduce_perf [nccl-tests options]      (a link to braid-perf)
 *
 * With -G 1 the send and receive buffers are in GPU memory (cudaMalloc) and
 * the calls run on a CUDA stream wrapped by braid_stream_from_cuda (-y 1 or
 * -z 1: blocking calls); inputs are written and outputs checked through host
 * copies, outside the timed loops.
 *
 * Rank and size come from the launcher (braidrun, mpirun, torchrun, Slurm)
 * through braid_comm_init_env(). Rank 0 prints the table; every rank checks
 * its own output and the counts of wrong elements are summed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/perf_dev.h"
#include "perf.h"

typedef struct bench {
  const perf_opts *o;
  braid_comm *comm;
  braid_stream *stream; /* NULL: blocking calls */
  int rank, nranks;
  unsigned char *sendbuf, *recvbuf;
  size_t bufbytes;
  /* -G 1: sendbuf and recvbuf are device memory, mirrored on the host by
   * hsend and hrecv for filling and checking; cuda_stream is wrapped by
   * stream (NULL for blocking calls). */
  int dev;
  unsigned char *hsend, *hrecv;
  void *cuda_stream;
  char devdesc[128];
  uint64_t rep; /* seed of the next check */
} bench;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(bench *b, const char *what, braid_result r) {
  fprintf(stderr, "braid-perf: rank %d: %s failed: %s: %s\n", b->rank, what,
          braid_result_string(r), braid_comm_last_error(b->comm));
  fflush(stderr);
  braid_comm_abort(b->comm);
  exit(PERF_EXIT_RUNTIME);
}

/* braid_alltoallv with count elements to and from every rank: the counts
 * and displacements, kept between calls. */
static braid_result issue_alltoallv(bench *b, const void *s, void *r,
                                    size_t count, braid_dtype dt) {
  static size_t *arr;
  static int have;
  size_t n = (size_t)b->nranks;
  if (have != b->nranks) {
    free(arr);
    arr = malloc(sizeof *arr * 2 * n);
    have = arr != NULL ? b->nranks : 0;
    if (arr == NULL)
      return BRAID_ERR_NOMEM;
  }
  for (size_t j = 0; j < n; j++) {
    arr[j] = count;
    arr[n + j] = j * count;
  }
  return braid_alltoallv(s, arr, arr + n, r, arr, arr + n, dt, b->comm,
                         b->stream);
}

/* One call of collective c. */
static braid_result issue(bench *b, perf_coll c, const void *s, void *r,
                          size_t count, braid_dtype dt, braid_op op, int root) {
  braid_comm *cm = b->comm;
  braid_stream *st = b->stream;
  switch (c) {
  case COLL_ALL_REDUCE:
    return braid_allreduce(s, r, count, dt, op, cm, st);
  case COLL_ALL_GATHER:
    return braid_allgather(s, r, count, dt, cm, st);
  case COLL_BROADCAST:
    return braid_broadcast(s, r, count, dt, root, cm, st);
  case COLL_REDUCE:
    return braid_reduce(s, r, count, dt, op, root, cm, st);
  case COLL_REDUCE_SCATTER:
    return braid_reduce_scatter(s, r, count, dt, op, cm, st);
  case COLL_GATHER:
    return braid_gather(s, r, count, dt, root, cm, st);
  case COLL_SCATTER:
    return braid_scatter(s, r, count, dt, root, cm, st);
  case COLL_ALLTOALL:
    return braid_alltoall(s, r, count, dt, cm, st);
  case COLL_ALLTOALLV:
    return issue_alltoallv(b, s, r, count, dt);
  case COLL_SENDRECV: {
    int to = (b->rank + 1) % b->nranks;
    int from = (b->rank + b->nranks - 1) % b->nranks;
    braid_result e = braid_group_start();
    if (e != BRAID_SUCCESS)
      return e;
    braid_result e1 = braid_send(s, count, dt, to, cm, st);
    braid_result e2 = braid_recv(r, count, dt, from, cm, st);
    e = braid_group_end();
    return e1 != BRAID_SUCCESS ? e1 : e2 != BRAID_SUCCESS ? e2 : e;
  }
  default:
    return BRAID_ERR_INVALID_ARG;
  }
}

static void die_dev(bench *b, const char *msg) {
  fprintf(stderr, "braid-perf: rank %d: %s\n", b->rank, msg);
  fflush(stderr);
  braid_comm_abort(b->comm);
  exit(PERF_EXIT_RUNTIME);
}

static void sync_stream(bench *b) {
  if (!b->stream)
    return;
  braid_result r = braid_stream_synchronize(b->stream);
  if (r != BRAID_SUCCESS)
    die(b, "braid_stream_synchronize", r);
  char msg[PERF_DEV_MSG];
  if (b->cuda_stream && perf_dev_stream_sync(b->cuda_stream, msg))
    die_dev(b, msg);
}

static void barrier(bench *b) {
  braid_result r = braid_barrier(b->comm, NULL);
  if (r != BRAID_SUCCESS)
    die(b, "braid_barrier", r);
}

/* Combines a per-rank time as -a asks. */
static double aggregate_time(bench *b, double t) {
  braid_result r;
  if (b->o->average == AVG_RANK0) {
    r = braid_broadcast(&t, &t, 1, BRAID_FLOAT64, 0, b->comm, NULL);
  } else {
    braid_op op = b->o->average == AVG_MIN   ? BRAID_MIN
                  : b->o->average == AVG_MAX ? BRAID_MAX
                                             : BRAID_SUM;
    r = braid_allreduce(&t, &t, 1, BRAID_FLOAT64, op, b->comm, NULL);
    if (b->o->average == AVG_MEAN)
      t /= b->nranks;
  }
  if (r != BRAID_SUCCESS)
    die(b, "aggregating the time across ranks", r);
  return t;
}

static int64_t sum_wrong(bench *b, int64_t w) {
  braid_result r =
      braid_allreduce(&w, &w, 1, BRAID_INT64, BRAID_SUM, b->comm, NULL);
  if (r != BRAID_SUCCESS)
    die(b, "summing wrong elements across ranks", r);
  return w;
}

typedef struct call {
  perf_coll c;
  braid_dtype dt;
  braid_op op;  /* braid-perf's op (data, checks, output) */
  braid_op bop; /* the op the calls take: op, or a pre-multiplied sum */
  int root;
  perf_counts pc;
  size_t es;
} call;

static void pointers(bench *b, const call *k, int inplace, void **s, void **r) {
  if (!inplace) {
    *s = b->sendbuf;
    *r = b->recvbuf;
    return;
  }
  *s = b->recvbuf + k->pc.send_inplace_off * (size_t)b->rank * k->es;
  *r = b->recvbuf + k->pc.recv_inplace_off * (size_t)b->rank * k->es;
}

/* The host mirror of a pointer into a device buffer. */
static unsigned char *host_of(bench *b, const void *p) {
  const unsigned char *q = p;
  if (q >= b->sendbuf && q < b->sendbuf + b->bufbytes)
    return b->hsend + (q - b->sendbuf);
  return b->hrecv + (q - b->recvbuf);
}

/* Fills the input for a check or for timing; clears the output. */
static void prepare(bench *b, const call *k, int inplace, uint64_t seed) {
  void *s, *r;
  pointers(b, k, inplace, &s, &r);
  if (!b->dev) {
    memset(b->recvbuf, 0xA5, b->bufbytes);
    perf_fill_input(k->c, k->dt, k->op, b->rank, b->nranks, k->root, seed, s, 0,
                    k->pc.send);
    return;
  }
  char msg[PERF_DEV_MSG];
  memset(b->hrecv, 0xA5, b->bufbytes);
  perf_fill_input(k->c, k->dt, k->op, b->rank, b->nranks, k->root, seed,
                  host_of(b, s), 0, k->pc.send);
  if (perf_dev_from_host(b->recvbuf, b->hrecv, b->bufbytes, msg) ||
      (!inplace &&
       perf_dev_from_host(b->sendbuf, b->hsend, k->pc.send * k->es, msg)))
    die_dev(b, msg);
}

/* The output as the host sees it (a copy of the device buffer for -G 1). */
static const void *output_of(bench *b, void *r) {
  if (!b->dev)
    return r;
  char msg[PERF_DEV_MSG];
  if (perf_dev_to_host(b->hrecv, b->recvbuf, b->bufbytes, msg))
    die_dev(b, msg);
  return host_of(b, r);
}

static void run_one(bench *b, const call *k, int inplace, perf_result *res) {
  const perf_opts *o = b->o;
  void *s, *r;
  memset(res, 0, sizeof *res);
  res->wrong = -1;
  if (inplace && (k->c == COLL_SENDRECV || k->c == COLL_ALLTOALLV)) {
    /* sending and receiving one buffer is not meaningful; alltoallv has
     * no in-place form */
    return;
  }
  pointers(b, k, inplace, &s, &r);
  if (o->check)
    prepare(b, k, inplace, 99);
  braid_result e = issue(b, k->c, s, r, k->pc.param, k->dt, k->bop, k->root);
  if (e != BRAID_SUCCESS)
    die(b, perf_colls[k->c].name, e);
  sync_stream(b);
  res->valid = 1;
  barrier(b);

  double t0 = now_s();
  for (int it = 0; it < o->iters; it++) {
    if (o->agg > 1 && (e = braid_group_start()) != BRAID_SUCCESS)
      die(b, "braid_group_start", e);
    for (int a = 0; a < o->agg; a++) {
      e = issue(b, k->c, s, r, k->pc.param, k->dt, k->bop, k->root);
      if (e != BRAID_SUCCESS)
        die(b, perf_colls[k->c].name, e);
    }
    if (o->agg > 1 && (e = braid_group_end()) != BRAID_SUCCESS)
      die(b, "braid_group_end", e);
    if (o->blocking) {
      sync_stream(b);
      barrier(b);
    }
  }
  sync_stream(b);
  double sec = (now_s() - t0) / ((double)o->iters * o->agg);
  sec = aggregate_time(b, sec);
  res->time_us = sec * 1e6;
  perf_get_bw(k->c, k->pc.param, k->es, sec, b->nranks, &res->algbw,
              &res->busbw);

  if (o->check) {
    int64_t wrong = 0;
    for (int ci = 0; ci < o->check; ci++) {
      uint64_t seed = ++b->rep;
      prepare(b, k, inplace, seed);
      e = issue(b, k->c, s, r, k->pc.param, k->dt, k->bop, k->root);
      if (e != BRAID_SUCCESS)
        die(b, perf_colls[k->c].name, e);
      sync_stream(b);
      int64_t w = perf_check_output(k->c, k->dt, k->op, b->rank, b->nranks,
                                    k->root, seed, &k->pc, output_of(b, r));
      wrong = sum_wrong(b, w);
      if (wrong)
        break;
    }
    res->wrong = wrong;
  }
}

static void warmup(bench *b, const call *k0, size_t bytes) {
  call k = *k0;
  perf_get_counts(k.c, bytes / k.es, b->nranks, &k.pc);
  for (int i = 0; i < b->o->warmup; i++) {
    braid_result e =
        issue(b, k.c, b->sendbuf, b->recvbuf, k.pc.param, k.dt, k.bop, k.root);
    if (e != BRAID_SUCCESS)
      die(b, perf_colls[k.c].name, e);
  }
  sync_stream(b);
}

static void print_ranks(bench *b) {
  enum { LINE = 256 };
  char line[LINE];
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  memset(line, 0, sizeof line);
  snprintf(line, sizeof line, "#  Rank %2d Pid %6d on %10s %s\n", b->rank,
           (int)getpid(), host, b->dev ? b->devdesc : "host memory");
  char *all = calloc((size_t)b->nranks, LINE);
  if (!all)
    die(b, "allocating the rank table", BRAID_ERR_NOMEM);
  braid_result e = braid_allgather(line, all, LINE, BRAID_UINT8, b->comm, NULL);
  if (e != BRAID_SUCCESS)
    die(b, "braid_allgather (rank table)", e);
  if (b->rank == 0) {
    printf("# Using ranks\n");
    for (int i = 0; i < b->nranks; i++)
      fputs(all + (size_t)i * LINE, stdout);
  }
  free(all);
}

/* The rank's index among the ranks on its host (same host name). */
static int local_rank(bench *b) {
  enum { HOST = 64 };
  char host[HOST];
  memset(host, 0, sizeof host);
  gethostname(host, sizeof host - 1);
  char *all = calloc((size_t)b->nranks, HOST);
  if (!all)
    die(b, "allocating the host table", BRAID_ERR_NOMEM);
  braid_result e = braid_allgather(host, all, HOST, BRAID_UINT8, b->comm, NULL);
  if (e != BRAID_SUCCESS)
    die(b, "braid_allgather (host names)", e);
  int lr = 0;
  for (int i = 0; i < b->rank; i++)
    lr += strncmp(all + (size_t)i * HOST, host, HOST) == 0;
  free(all);
  return lr;
}

/* -G 1: picks the GPU (--gpu), allocates and clears the device buffers and
 * their host mirrors. ndev: the device count. */
static int setup_device(bench *b, int ndev) {
  char msg[PERF_DEV_MSG];
  if (ndev < 1)
    return -1;
  int lr = local_rank(b);
  int gpu = b->o->gpu == PERF_GPU_LOCAL ? lr % ndev : b->o->gpu;
  if (gpu >= ndev) {
    fprintf(stderr,
            "braid-perf: rank %d: --gpu %d: only %d CUDA device%s visible\n",
            b->rank, gpu, ndev, ndev == 1 ? "" : "s");
    return -1;
  }
  if (perf_dev_select(gpu, b->devdesc, sizeof b->devdesc, msg) ||
      perf_dev_alloc((void **)&b->sendbuf, b->bufbytes, msg) ||
      perf_dev_alloc((void **)&b->recvbuf, b->bufbytes, msg) ||
      perf_dev_fill(b->sendbuf, 0, b->bufbytes, msg) ||
      perf_dev_fill(b->recvbuf, 0, b->bufbytes, msg))
    die_dev(b, msg);
  b->hsend = aligned_alloc(64, b->bufbytes);
  b->hrecv = aligned_alloc(64, b->bufbytes);
  if (!b->hsend || !b->hrecv)
    die(b, "allocating the host copies of the device buffers", BRAID_ERR_NOMEM);
  memset(b->hsend, 0, b->bufbytes);
  memset(b->hrecv, 0, b->bufbytes);
  return 0;
}

/* Joins the launcher's job, or, started alone, runs one rank (as
 * nccl-tests does without mpirun). */
static braid_result perf_comm_init(braid_comm **comm, const braid_config *cfg) {
  if (braid_env_launcher() != NULL)
    return braid_comm_init_env(comm, cfg);
  braid_unique_id id;
  braid_result e = braid_get_unique_id(&id);
  if (e != BRAID_SUCCESS)
    return e;
  return braid_comm_init(comm, 1, &id, 0, cfg);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  perf_opts o;
  perf_cuda_built = perf_dev_built();
  int pr = perf_parse_args(argc, argv, &o, stderr);
  if (pr == 1)
    return PERF_EXIT_OK;
  if (pr < 0)
    return PERF_EXIT_USAGE;
  /* Before the communicator, like a bad option: every rank finds it alike. */
  char refused[1024];
  if (perf_runnable(&o, refused, sizeof refused) == 0) {
    if (refused[0])
      fprintf(stderr,
              "braid-perf: nothing to run: braid refuses every requested "
              "(dtype, op) pair: %s\n",
              refused);
    else
      fprintf(stderr,
              "braid-perf: nothing to run: braid takes none of the requested "
              "collectives, dtypes and ops on device buffers (-G 1: not "
              "alltoallv, nor reductions of int16 or bool or with a bitwise "
              "op)\n");
    return PERF_EXIT_USAGE;
  }
  int ndev = 0;
  if (o.device) {
    /* Before the communicator: a machine without a GPU fails alike on every
     * rank, with no peer to wait for. */
    char msg[PERF_DEV_MSG];
    ndev = perf_dev_count(msg);
    if (ndev < 1) {
      fprintf(stderr, "braid-perf: -G 1: no CUDA device (%s)\n", msg);
      return PERF_EXIT_USAGE;
    }
  }

  braid_config cfg;
  braid_config_init(&cfg);
  if (o.timeout_s)
    cfg.timeout_ms = o.timeout_s * 1000;
  bench b;
  memset(&b, 0, sizeof b);
  b.o = &o;
  braid_result e = perf_comm_init(&b.comm, &cfg);
  if (e != BRAID_SUCCESS) {
    fprintf(stderr, "braid-perf: joining the job failed: %s: %s\n",
            braid_result_string(e), braid_comm_last_error(b.comm));
    return PERF_EXIT_RUNTIME;
  }
  braid_comm_rank(b.comm, &b.rank);
  braid_comm_size(b.comm, &b.nranks);
  int rooted = 0;
  for (int i = 0; i < o.ncolls; i++)
    rooted |= perf_colls[o.colls[i]].has_root;
  if (rooted && o.root >= b.nranks) {
    if (b.rank == 0)
      fprintf(stderr, "braid-perf: root %d is out of range (%d ranks)\n",
              o.root, b.nranks);
    braid_comm_destroy(b.comm);
    return PERF_EXIT_USAGE;
  }

  b.bufbytes = o.maxbytes < 64 ? 64 : (o.maxbytes + 63) / 64 * 64;
  b.dev = o.device;
  if (b.dev) {
    if (setup_device(&b, ndev)) {
      braid_comm_destroy(b.comm);
      return PERF_EXIT_USAGE;
    }
  } else {
    b.sendbuf = aligned_alloc(64, b.bufbytes);
    b.recvbuf = aligned_alloc(64, b.bufbytes);
    if (!b.sendbuf || !b.recvbuf)
      die(&b, "allocating the buffers", BRAID_ERR_NOMEM);
    memset(b.sendbuf, 0, b.bufbytes);
    memset(b.recvbuf, 0, b.bufbytes);
  }

  const char *mode = "blocking calls";
  if (b.dev) {
    mode = "device buffers, blocking calls";
    if (!o.stream_null && !o.blocking) {
      char msg[PERF_DEV_MSG];
      if (perf_dev_stream_create(&b.cuda_stream, msg))
        die_dev(&b, msg);
      e = braid_stream_from_cuda(b.cuda_stream, &b.stream);
      if (e != BRAID_SUCCESS)
        die(&b, "braid_stream_from_cuda", e);
      mode = "device buffers, CUDA stream (braid_stream_from_cuda), "
             "synchronized after each timed loop";
    }
  } else if (!o.stream_null && !o.blocking) {
    e = braid_stream_create(&b.stream);
    if (e != BRAID_SUCCESS) {
      b.stream = NULL;
      mode = "blocking calls (host streams unavailable)";
    } else {
      mode = "host stream, synchronized after each timed loop";
    }
  }

  if (b.rank == 0)
    perf_print_header(stdout, &o, b.nranks);
  print_ranks(&b);
  if (b.rank == 0) {
    printf("#\n# mode: %s\n", mode);
    perf_print_table_header(stdout);
    if (refused[0])
      printf("# note: skipped, braid refuses them: %s\n", refused);
  }

  perf_rows rows = {0};
  double bw_sum = 0;
  long bw_n = 0;
  int64_t wrong_total = 0;
  int printed_header = 0;

  for (int ci = 0; ci < o.ncolls; ci++) {
    perf_coll c = (perf_coll)o.colls[ci];
    const perf_coll_info *info = &perf_colls[c];
    int nops = info->has_op ? o.nops : 1;
    int r0 = 0, r1 = 0;
    if (info->has_root) {
      r0 = o.root < 0 ? 0 : o.root;
      r1 = o.root < 0 ? b.nranks - 1 : o.root;
    }
    for (int di = 0; di < o.ndtypes; di++) {
      for (int oi = 0; oi < nops; oi++) {
        for (int root = r0; root <= r1; root++) {
          call k;
          memset(&k, 0, sizeof k);
          k.c = c;
          k.dt = (braid_dtype)o.dtypes[di];
          k.op = info->has_op ? (braid_op)o.ops[oi] : BRAID_SUM;
          k.root = root;
          k.es = perf_dtype_size(k.dt);
          if (info->has_op && !perf_pair_valid(k.dt, k.op))
            continue; /* refused by braid: bitwise on floats, avg on bool */
          if (o.device && !perf_dev_valid(c, k.dt, k.op)) {
            if (b.rank == 0)
              printf("# note: %s %s %s skipped: braid does not take it on "
                     "device buffers\n",
                     info->name, perf_dtype_str(k.dt),
                     info->has_op ? perf_op_str(k.op) : "");
            continue;
          }
          if (b.rank == 0 && o.check && info->has_op &&
              b.nranks > perf_exact_max_ranks(k.dt, k.op))
            printf("# note: %s %s on %d ranks exceeds the exact range of "
                   "the type; #wrong may count rounding\n",
                   perf_dtype_str(k.dt), perf_op_str(k.op), b.nranks);
          if (b.rank == 0 && (o.ncolls > 1 || !printed_header)) {
            printf("# collective %s\n", info->name);
            printed_header = 1;
          }
          k.bop = k.op;
          if (k.op == PERF_OP_PREMULSUM) {
            unsigned char scalar[8] = {0};
            perf_store(k.dt, scalar, 0, perf_premul_scalar(b.rank));
            e = braid_op_create_premul_sum(&k.bop, scalar, k.dt, 0, b.comm);
            if (e != BRAID_SUCCESS)
              die(&b, "braid_op_create_premul_sum", e);
          }
          warmup(&b, &k, o.maxbytes);
          warmup(&b, &k, o.minbytes);
          for (size_t size = o.minbytes; size <= o.maxbytes;) {
            perf_row row;
            memset(&row, 0, sizeof row);
            perf_get_counts(c, size / k.es, b.nranks, &k.pc);
            row.coll = c;
            row.dtype = k.dt;
            row.op = k.op;
            row.root = root;
            row.count = k.pc.param;
            row.bytes = (k.pc.send > k.pc.recv ? k.pc.send : k.pc.recv) * k.es;
            run_one(&b, &k, 0, &row.oop);
            run_one(&b, &k, 1, &row.inp);
            const perf_result *rs[2] = {&row.oop, &row.inp};
            for (int m = 0; m < 2; m++) {
              if (!rs[m]->valid)
                continue;
              bw_sum += rs[m]->busbw;
              bw_n++;
              if (rs[m]->wrong > 0)
                wrong_total += rs[m]->wrong;
            }
            if (b.rank == 0) {
              perf_print_row(stdout, &row);
              if (perf_rows_push(&rows, &row))
                die(&b, "recording results", BRAID_ERR_NOMEM);
            }
            size_t next =
                o.stepfactor ? size * o.stepfactor : size + o.stepbytes;
            if (o.stepfactor && size > SIZE_MAX / o.stepfactor)
              next = SIZE_MAX; /* the next size would not fit: done */
            if (next <= size)
              next = size ? SIZE_MAX : 1;
            if (next == SIZE_MAX)
              break;
            size = next;
          }
          if (k.op == PERF_OP_PREMULSUM &&
              (e = braid_op_destroy(k.bop, b.comm)) != BRAID_SUCCESS)
            die(&b, "braid_op_destroy", e);
        }
      }
    }
  }

  double avg_bw = bw_n ? bw_sum / (double)bw_n : 0;
  int status = wrong_total ? PERF_EXIT_WRONG : PERF_EXIT_OK;
  if (b.rank == 0) {
    printf("# Out of bounds values : %lld %s\n", (long long)wrong_total,
           wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", avg_bw);
    printf("#\n");
    fflush(stdout);
    if (o.csv && perf_write_csv(o.csv, &rows, b.nranks)) {
      fprintf(stderr, "braid-perf: cannot write CSV file %s\n", o.csv);
      status = status ? status : PERF_EXIT_RUNTIME;
    }
    int version = 0;
    braid_get_version(&version);
    if (o.json && perf_write_json(o.json, &o, &rows, b.nranks, version, avg_bw,
                                  wrong_total)) {
      fprintf(stderr, "braid-perf: cannot write JSON file %s\n", o.json);
      status = status ? status : PERF_EXIT_RUNTIME;
    }
    if (o.plot && perf_plot(o.plot, &rows, b.nranks, stderr))
      status = status ? status : PERF_EXIT_RUNTIME;
  }
  free(rows.v);
  if (b.stream)
    braid_stream_destroy(b.stream);
  perf_dev_stream_destroy(b.cuda_stream);
  e = braid_comm_finalize(b.comm);
  if (e != BRAID_SUCCESS) {
    fprintf(stderr, "braid-perf: rank %d: braid_comm_finalize: %s\n", b.rank,
            braid_result_string(e));
    status = status ? status : PERF_EXIT_RUNTIME;
  }
  braid_comm_destroy(b.comm);
  if (b.dev) {
    perf_dev_free(b.sendbuf);
    perf_dev_free(b.recvbuf);
    free(b.hsend);
    free(b.hrecv);
  } else {
    free(b.sendbuf);
    free(b.recvbuf);
  }
  return status;
}
