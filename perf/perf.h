/*
 * braid-perf: nccl-tests compatible bandwidth sweeps over braid.h.
 *
 * Internal header shared by the braid-perf sources (options, data patterns,
 * output). Uses only the public API.
 */
#ifndef BRAID_PERF_H
#define BRAID_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "braid.h"

/* Exit statuses. */
enum {
  PERF_EXIT_OK = 0,
  PERF_EXIT_WRONG = 1,  /* some element differed from the expected value */
  PERF_EXIT_USAGE = 2,  /* bad command line */
  PERF_EXIT_RUNTIME = 3 /* braid returned an error, or out of memory */
};

typedef enum perf_coll {
  COLL_ALL_REDUCE = 0,
  COLL_ALL_GATHER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_REDUCE_SCATTER,
  COLL_GATHER,
  COLL_SCATTER,
  COLL_ALLTOALL,
  COLL_SENDRECV,
  COLL_ALLTOALLV, /* braid_alltoallv with equal counts */
  COLL_COUNT
} perf_coll;

typedef struct perf_coll_info {
  const char *name;      /* subcommand: all_reduce */
  const char *perf_name; /* nccl-tests binary name: all_reduce_perf */
  int has_op;            /* takes a reduction op */
  int has_root;          /* takes a root */
  /* busbw = algbw * num / den with num, den functions of nranks (see
   * perf_bus_factor) */
} perf_coll_info;

extern const perf_coll_info perf_colls[COLL_COUNT];

/* How per-rank times are combined (-a): nccl-tests' meanings. */
enum { AVG_RANK0 = 0, AVG_MEAN = 1, AVG_MIN = 2, AVG_MAX = 3 };

#define PERF_MAX_LIST 16

/* braid-perf's reduction ops: braid's (braid_op values), then the
 * pre-multiplied sum (nccl-tests' mulsum): each rank makes it with
 * braid_op_create_premul_sum and its scalar perf_premul_scalar(rank). */
#define PERF_OP_PREMULSUM ((braid_op)BRAID_NUM_OPS)
#define PERF_NUM_OPS (BRAID_NUM_OPS + 1)

typedef struct perf_opts {
  int colls[COLL_COUNT]; /* which collectives, in order */
  int ncolls;
  size_t minbytes, maxbytes, stepbytes;
  size_t stepfactor; /* 0: use stepbytes */
  int iters, warmup, agg, check, blocking, stream_null, average;
  int dtypes[BRAID_NUM_DTYPES];
  int ndtypes;
  int ops[PERF_NUM_OPS]; /* braid_op values or PERF_OP_PREMULSUM */
  int nops;
  int root;         /* -1: every root */
  int timeout_s;    /* -T: 0 = library default, else 1..PERF_TIMEOUT_MAX_S */
  const char *json; /* -J file */
  const char *csv;  /* --csv file */
  const char *plot; /* --plot file (.png or .svg) */
  int device;       /* -G: device buffers */
  int gpu;          /* --gpu: device number, or PERF_GPU_LOCAL */
} perf_opts;

/* -T's largest value: BRAID_TIMEOUT's (docs/ENV.md). */
#define PERF_TIMEOUT_MAX_S 86400

/* --gpu local: the rank's index among the ranks of its host, modulo the
 * number of devices. */
#define PERF_GPU_LOCAL (-1)

/* Set by main before perf_parse_args when braid-perf was built with CUDA;
 * 0 (the default): -G 1 is refused as a usage error. */
extern int perf_cuda_built;

/* The (collective, dtype, op) combinations of o that run: those braid
 * takes (perf_pair_valid), and with -G 1 on device buffers
 * (perf_dev_valid). refused (len bytes, "" when none) gets the requested
 * (dtype, op) pairs braid refuses, grouped by reason: "float32 band,
 * float32 bor (bitwise ops take integer dtypes and bool); bool avg (avg is
 * not defined on bool)". */
int perf_runnable(const perf_opts *o, char *refused, size_t len);
/* Parses argv (argv[0]'s basename may name the collective, as with
 * all_reduce_perf). Returns 0 on success, 1 when help was printed, or -1 after
 * writing a message naming the bad argument to err. */
int perf_parse_args(int argc, char **argv, perf_opts *o, FILE *err);
void perf_usage(FILE *f, const char *prog);
/* "64K" -> 65536; -1 on a malformed or negative size. */
int perf_parse_size(const char *s, size_t *out);
/* Name lookups; -1 when unknown. */
int perf_dtype_from_name(const char *s);
int perf_op_from_name(const char *s);
int perf_coll_from_name(const char *s);
const char *perf_dtype_str(int dt);
const char *perf_op_str(int op);
/* 0 for the (dtype, op) pairs braid refuses: a bitwise op on a float type,
 * avg or a pre-multiplied sum on bool. */
int perf_pair_valid(braid_dtype dt, braid_op op);
/* Why braid refuses the pair ("bitwise ops take integer dtypes and bool"),
 * NULL when it takes it. */
const char *perf_pair_refusal(braid_dtype dt, braid_op op);
/* 0 for what braid refuses on device buffers (BRAID_ERR_UNSUPPORTED):
 * alltoallv, and reductions of int16 or bool or with a bitwise op. */
int perf_dev_valid(perf_coll c, braid_dtype dt, braid_op op);

/* ---- sizes and bandwidth (nccl-tests' conventions) ---- */

typedef struct perf_counts {
  size_t param;      /* the count passed to the call */
  size_t send, recv; /* elements in the send and receive buffers */
  size_t send_inplace_off, recv_inplace_off; /* elements, times rank */
} perf_counts;

/* For a size in bytes (size / dtype size = count). */
void perf_get_counts(perf_coll c, size_t count, int nranks, perf_counts *pc);
/* algbw and busbw in GB/s for a time in seconds. */
void perf_get_bw(perf_coll c, size_t param_count, size_t eltsize, double sec,
                 int nranks, double *algbw, double *busbw);
double perf_bus_factor(perf_coll c, int nranks);

/* ---- data patterns: exact expected results ---- */

/* Writes the input of `rank` for this collective into buf (`n` elements
 * starting at element index `first` of the rank's logical send buffer). */
void perf_fill_input(perf_coll c, braid_dtype dt, braid_op op, int rank,
                     int nranks, int root, uint64_t seed, void *buf,
                     size_t first, size_t n);
/* Counts elements of `got` (the rank's receive buffer, `recv` elements) that
 * differ from the expected result. Returns 0 for ranks whose output is
 * undefined (non-root reduce/gather). */
int64_t perf_check_output(perf_coll c, braid_dtype dt, braid_op op, int rank,
                          int nranks, int root, uint64_t seed,
                          const perf_counts *pc, const void *got);
/* The scalar rank `rank` multiplies its input by in a pre-multiplied sum:
 * 1 on even ranks, 2 on odd ones (exact in every dtype). */
int64_t perf_premul_scalar(int rank);
/* Largest rank count for which every value of (dt, op) stays exact. */
int perf_exact_max_ranks(braid_dtype dt, braid_op op);

/* Element conversion for small integers (exact in every dtype used here). */
void perf_store(braid_dtype dt, void *buf, size_t i, int64_t v);
size_t perf_dtype_size(braid_dtype dt);

/* ---- results and output ---- */

typedef struct perf_result {
  double time_us, algbw, busbw;
  int64_t wrong; /* -1: not checked */
  int valid;     /* 0: this mode is not supported (printed as N/A) */
} perf_result;

typedef struct perf_row {
  int coll, dtype, op, root;
  size_t bytes, count;
  perf_result oop, inp;
} perf_row;

typedef struct perf_rows {
  perf_row *v;
  size_t n, cap;
} perf_rows;

int perf_rows_push(perf_rows *r, const perf_row *row);
void perf_print_header(FILE *f, const perf_opts *o, int nranks);
void perf_print_table_header(FILE *f);
void perf_print_row(FILE *f, const perf_row *row);
int perf_write_csv(const char *path, const perf_rows *r, int nranks);
int perf_write_json(const char *path, const perf_opts *o, const perf_rows *r,
                    int nranks, int version, double avg_busbw, int64_t wrong);
/* Draws busbw and latency against size with gnuplot. 0 on success. */
int perf_plot(const char *path, const perf_rows *r, int nranks, FILE *err);
/* 1 when gnuplot is on PATH. */
int perf_have_gnuplot(void);

#endif
