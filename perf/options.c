/*
 * braid-perf command line: nccl-tests' options with their meanings.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

const perf_coll_info perf_colls[COLL_COUNT] = {
    [COLL_ALL_REDUCE] = {"all_reduce", "all_reduce_perf", 1, 0},
    [COLL_ALL_GATHER] = {"all_gather", "all_gather_perf", 0, 0},
    [COLL_BROADCAST] = {"broadcast", "broadcast_perf", 0, 1},
    [COLL_REDUCE] = {"reduce", "reduce_perf", 1, 1},
    [COLL_REDUCE_SCATTER] = {"reduce_scatter", "reduce_scatter_perf", 1, 0},
    [COLL_GATHER] = {"gather", "gather_perf", 0, 1},
    [COLL_SCATTER] = {"scatter", "scatter_perf", 0, 1},
    [COLL_ALLTOALL] = {"alltoall", "alltoall_perf", 0, 0},
    [COLL_SENDRECV] = {"sendrecv", "sendrecv_perf", 0, 0},
    [COLL_ALLTOALLV] = {"alltoallv", "alltoallv_perf", 0, 0},
};

static const char *const dtype_names[BRAID_NUM_DTYPES] = {
    "int8",   "uint8",   "int32",       "uint32",     "int64",
    "uint64", "float16", "bfloat16",    "float32",    "float64",
    "int16",  "bool",    "float8_e4m3", "float8_e5m2"};
static const char *const op_names[PERF_NUM_OPS] = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "premulsum"};

const char *perf_dtype_str(int dt) {
  return dt >= 0 && dt < BRAID_NUM_DTYPES ? dtype_names[dt] : "?";
}
const char *perf_op_str(int op) {
  return op >= 0 && op < PERF_NUM_OPS ? op_names[op] : "?";
}

int perf_dtype_from_name(const char *s) {
  static const struct {
    const char *alias;
    int dt;
  } aliases[] = {
      {"char", BRAID_INT8},
      {"int", BRAID_INT32},
      {"half", BRAID_FLOAT16},
      {"float", BRAID_FLOAT32},
      {"double", BRAID_FLOAT64},
      {"bf16", BRAID_BFLOAT16},
      {"fp16", BRAID_FLOAT16},
      {"fp32", BRAID_FLOAT32},
      {"fp64", BRAID_FLOAT64},
      {"uint", BRAID_UINT32},
      {"short", BRAID_INT16},
      {"f8e4m3", BRAID_FLOAT8_E4M3},
      {"f8e5m2", BRAID_FLOAT8_E5M2},
      {"fp8_e4m3", BRAID_FLOAT8_E4M3},
      {"fp8_e5m2", BRAID_FLOAT8_E5M2},
  };
  for (int i = 0; i < BRAID_NUM_DTYPES; i++)
    if (strcasecmp(s, dtype_names[i]) == 0)
      return i;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcasecmp(s, aliases[i].alias) == 0)
      return aliases[i].dt;
  return -1;
}

int perf_op_from_name(const char *s) {
  for (int i = 0; i < PERF_NUM_OPS; i++)
    if (strcasecmp(s, op_names[i]) == 0)
      return i;
  if (strcasecmp(s, "mulsum") == 0) /* nccl-tests' name */
    return (int)PERF_OP_PREMULSUM;
  return -1;
}

int perf_coll_from_name(const char *s) {
  for (int i = 0; i < COLL_COUNT; i++) {
    if (strcmp(s, perf_colls[i].name) == 0 ||
        strcmp(s, perf_colls[i].perf_name) == 0)
      return i;
  }
  /* Names without underscores, as the peers spell them. */
  static const struct {
    const char *alias;
    int c;
  } aliases[] = {
      {"allreduce", COLL_ALL_REDUCE},         {"allgather", COLL_ALL_GATHER},
      {"reducescatter", COLL_REDUCE_SCATTER}, {"all_to_all", COLL_ALLTOALL},
      {"alltoall_perf", COLL_ALLTOALL},       {"send_recv", COLL_SENDRECV},
  };
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(s, aliases[i].alias) == 0)
      return aliases[i].c;
  return -1;
}

int perf_parse_size(const char *s, size_t *out) {
  if (!s || !*s)
    return -1;
  const char *p = s;
  while (isspace((unsigned char)*p))
    p++;
  /* digits (or a point) first: not a sign, nor strtod's nan, inf or
   * infinity */
  if (!isdigit((unsigned char)*p) && *p != '.')
    return -1;
  errno = 0;
  char *end;
  double v = strtod(p, &end);
  if (end == p || errno || !(v >= 0))
    return -1;
  double mult = 1;
  if (*end) {
    switch (*end) {
    case 'k':
    case 'K':
      mult = 1024.0;
      break;
    case 'm':
    case 'M':
      mult = 1024.0 * 1024;
      break;
    case 'g':
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      break;
    default:
      return -1;
    }
    end++;
    if (*end == 'B' || *end == 'b') /* "64KB" */
      end++;
    if (*end)
      return -1;
  }
  v *= mult;
  if (v > (double)SIZE_MAX / 2)
    return -1;
  *out = (size_t)v;
  return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
  if (!s || !*s)
    return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 0);
  if (*end || errno || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

void perf_usage(FILE *f, const char *prog) {
  size_t pl = strlen(prog);
  if (pl > 5 && strcmp(prog + pl - 5, "_perf") == 0) /* a link's name */
    fprintf(f,
            "usage: %s [options]   (braid-perf under its nccl-tests "
            "name: the collective is in the name)\n",
            prog);
  else
    fprintf(f,
            "usage: %s <collective|all> [options]\n"
            "       <collective>_perf [options]   (nccl-tests names, "
            "e.g. all_reduce_perf)\n",
            prog);
  fprintf(
      f,
      "collectives: all_reduce all_gather broadcast reduce reduce_scatter\n"
      "             gather scatter alltoall sendrecv alltoallv, or 'all' for "
      "every one\n"
      "options (nccl-tests meanings):\n"
      "  -b,--minbytes <size>      smallest size, K/M/G suffixes (32M)\n"
      "  -e,--maxbytes <size>      largest size (32M)\n"
      "  -i,--stepbytes <size>     fixed increment between sizes (1M)\n"
      "  -f,--stepfactor <n>       multiply the size by n each step; 0 "
      "or 1: step by -i,\n"
      "                            which a factor above 1 overrides (off)\n"
      "  -n,--iters <n>            timed iterations (20)\n"
      "  -w,--warmup_iters <n>     untimed warm-up iterations (5)\n"
      "  -m,--agg_iters <n>        operations per iteration, in one group "
      "(1)\n"
      "  -c,--check <n>            check iterations; 0 disables (1)\n"
      "  -o,--op <op|all>          sum prod min max avg band bor bxor "
      "premulsum\n"
      "                            (also mulsum: each rank's scalar is 1 "
      "or 2) (sum)\n"
      "  -d,--datatype <t|all>     int8 uint8 int16 int32 uint32 int64 "
      "uint64\n"
      "                            float16 bfloat16 float32 float64 bool "
      "float8_e4m3\n                            float8_e5m2 (float32)\n"
      "                            (pairs braid refuses, bitwise ops on "
      "floats and\n"
      "                            avg or premulsum on bool, are skipped with "
      "a note;\n"
      "                            when nothing is left to run: exit 2)\n"
      "  -r,--root <rank|all>      root for rooted collectives (0)\n"
      "  -z,--blocking <0/1>       1: each call completes, then a barrier "
      "(0)\n"
      "  -y,--stream_null <0/1>    1: blocking calls (NULL stream) instead "
      "of a host stream (0)\n"
      "  -a,--average <0/1/2/3>    time across ranks: 0 rank 0, 1 mean, 2 "
      "min, 3 max (1)\n"
      "  -T,--timeout <s>          bound on every wait, 1 to 86400 s; 0: "
      "the library\n"
      "                            default (0)\n"
      "  -J,--json <file>          also write the results as JSON\n"
      "     --csv <file>           also write the results as CSV\n"
      "     --plot <file.png|svg>  draw busbw and latency against size "
      "(gnuplot)\n"
      "  -G,--device <0/1>         1: send/receive buffers in GPU memory "
      "(CUDA build)\n"
      "     --gpu <n|local>        GPU of every rank with -G 1: n, or the "
      "local rank\n"
      "                            modulo the device count (0)\n"
      "  -t,--nthreads 1, -g,--ngpus 1, -p,--parallel_init 0, -N 1, -C 0, "
      "-S 0,\n"
      "  -R 0, -M 0, -D 0: accepted (nccl-tests' defaults); their other "
      "values,\n"
      "  -x, -V, -F and --cudagraph are not supported\n"
      "  -h,--help\n"
      "exit status: 0 ok, 1 wrong elements, 2 bad options, 3 runtime error\n");
}

static int parse_list_dtype(const char *s, perf_opts *o) {
  if (strcasecmp(s, "all") == 0) {
    for (int i = 0; i < BRAID_NUM_DTYPES; i++)
      o->dtypes[i] = i;
    o->ndtypes = BRAID_NUM_DTYPES;
    return 0;
  }
  int dt = perf_dtype_from_name(s);
  if (dt < 0)
    return -1;
  o->dtypes[0] = dt;
  o->ndtypes = 1;
  return 0;
}

static int parse_list_op(const char *s, perf_opts *o) {
  if (strcasecmp(s, "all") == 0) {
    for (int i = 0; i < PERF_NUM_OPS; i++)
      o->ops[i] = i;
    o->nops = PERF_NUM_OPS;
    return 0;
  }
  int op = perf_op_from_name(s);
  if (op < 0)
    return -1;
  o->ops[0] = op;
  o->nops = 1;
  return 0;
}

enum { OPT_CSV = 1000, OPT_PLOT, OPT_GPU, OPT_CUDAGRAPH };

/* nccl-tests' options braid-perf does not implement: each is accepted with
 * the value that asks for nccl-tests' default behaviour (which is
 * braid-perf's), else refused by name. */
static const struct nccl_only {
  int c;
  const char *name;  /* nccl-tests' long name */
  const char *what;  /* what it does there */
  const char *plain; /* the value accepted, NULL: none */
  const char *hint;  /* what braid-perf offers instead, "" none */
} nccl_only[] = {
    {'N', "run_cycles", "repeats the whole run", "1", ""},
    {'C', "report_cputime", "reports CPU time instead of wall-clock time", "0",
     ""},
    {'S', "report_timestamps", "prints timestamps", "0", ""},
    {'R', "local_register", "registers the buffers with NCCL", "0", ""},
    {'M', "memory_report", "reports GPU memory use", "0", ""},
    {'D', "device_implementation", "runs NCCL's device API kernels", "0", ""},
    {'x', "cta_policy", "sets NCCL's CTA policy", NULL, ""},
    {'V', "device_cta_count", "sets the CTAs of the device API kernels", NULL,
     ""},
    {'F', "output_file", "writes the results as CSV, in older nccl-tests", NULL,
     "; --csv FILE writes braid-perf's CSV"},
    {OPT_CUDAGRAPH, "cudagraph", "launches CUDA graphs (nccl-tests' -G)", NULL,
     "; braid-perf's -G is --device"},
};

/* 0: a, the value of nccl-tests' option c, is accepted; -1 after the
 * message. */
static int nccl_only_option(int c, const char *a, const char *prog, FILE *err) {
  for (size_t i = 0; i < sizeof nccl_only / sizeof *nccl_only; i++) {
    const struct nccl_only *n = &nccl_only[i];
    if (n->c != c)
      continue;
    if (n->plain != NULL && strcmp(a, n->plain) == 0)
      return 0;
    char opt[40];
    if (c < 256)
      snprintf(opt, sizeof opt, "-%c", c);
    else
      snprintf(opt, sizeof opt, "--%s", n->name);
    fprintf(err,
            "%s: %s %s: nccl-tests' --%s (it %s) is not supported by "
            "braid-perf",
            prog, opt, a, n->name, n->what);
    if (n->plain != NULL)
      fprintf(err, "; only %s %s, nccl-tests' default, is accepted", opt,
              n->plain);
    fprintf(err, "%s\n", n->hint);
    return -1;
  }
  return -1;
}

int perf_cuda_built;

int perf_parse_args(int argc, char **argv, perf_opts *o, FILE *err) {
  memset(o, 0, sizeof *o);
  o->minbytes = o->maxbytes = 32u << 20;
  o->stepbytes = 1u << 20;
  o->stepfactor = 0;
  o->iters = 20;
  o->warmup = 5;
  o->agg = 1;
  o->check = 1;
  o->average = AVG_MEAN;
  o->dtypes[0] = BRAID_FLOAT32;
  o->ndtypes = 1;
  o->ops[0] = BRAID_SUM;
  o->nops = 1;

  const char *prog = argv[0] ? strrchr(argv[0], '/') : NULL;
  prog = prog ? prog + 1 : (argv[0] ? argv[0] : "braid-perf");
  int first = 1;
  int c0 = perf_coll_from_name(prog);
  if (c0 >= 0) {
    o->colls[0] = c0;
    o->ncolls = 1;
  } else {
    if (argc < 2 || argv[1][0] == '-') {
      if (argc >= 2 &&
          (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        perf_usage(stdout, prog);
        return 1;
      }
      fprintf(err,
              "%s: missing collective (first argument), e.g. %s "
              "all_reduce -b 8 -e 128M -f 2\n",
              prog, prog);
      return -1;
    }
    if (strcmp(argv[1], "all") == 0) {
      for (int i = 0; i < COLL_COUNT; i++)
        o->colls[i] = i;
      o->ncolls = COLL_COUNT;
    } else {
      int c = perf_coll_from_name(argv[1]);
      if (c < 0) {
        fprintf(err,
                "%s: unknown collective '%s' (expected all_reduce, "
                "all_gather, broadcast, reduce, reduce_scatter, gather, "
                "scatter, alltoall, sendrecv, alltoallv or all)\n",
                prog, argv[1]);
        return -1;
      }
      o->colls[0] = c;
      o->ncolls = 1;
    }
    first = 2;
  }

  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},
      {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},
      {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},
      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'},
      {"parallel_init", required_argument, 0, 'p'},
      {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},
      {"timeout", required_argument, 0, 'T'},
      {"average", required_argument, 0, 'a'},
      {"json", required_argument, 0, 'J'},
      {"output_file", required_argument, 0, 'J'},
      {"csv", required_argument, 0, OPT_CSV},
      {"plot", required_argument, 0, OPT_PLOT},
      {"device", required_argument, 0, 'G'},
      {"gpu", required_argument, 0, OPT_GPU},
      {"run_cycles", required_argument, 0, 'N'},
      {"report_cputime", required_argument, 0, 'C'},
      {"report_timestamps", required_argument, 0, 'S'},
      {"local_register", required_argument, 0, 'R'},
      {"memory_report", required_argument, 0, 'M'},
      {"device_implementation", required_argument, 0, 'D'},
      {"cta_policy", required_argument, 0, 'x'},
      {"device_cta_count", required_argument, 0, 'V'},
      {"cudagraph", required_argument, 0, OPT_CUDAGRAPH},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};

  int sub_argc = argc - first + 1;
  char **sub_argv = argv + first - 1; /* sub_argv[0] stands in for the name */
  optind = 1;
  opterr = 0;
  for (;;) {
    int li = 0;
    int c = getopt_long(sub_argc, sub_argv,
                        ":t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:a:J:G:hN:C:S:R:"
                        "M:D:x:V:F:",
                        longopts, &li);
    if (c == -1)
      break;
    const char *a = optarg;
    int v = 0;
    switch (c) {
    case 't':
    case 'g':
      if (parse_int(a, 1, 1, &v)) {
        fprintf(err,
                "%s: -%c '%s': braid-perf runs one rank per process; "
                "launch more ranks with braidrun or mpirun\n",
                prog, c, a);
        return -1;
      }
      break;
    case 'p':
      if (parse_int(a, 0, 1, &v))
        goto bad_int01;
      break;
    case 'b':
    case 'e':
    case 'i': {
      size_t s;
      if (perf_parse_size(a, &s)) {
        fprintf(err,
                "%s: invalid size '%s' for -%c (%s): expected a number "
                "with an optional K, M or G suffix\n",
                prog, a, c,
                c == 'b'   ? "minbytes"
                : c == 'e' ? "maxbytes"
                           : "stepbytes");
        return -1;
      }
      if (c == 'b')
        o->minbytes = s;
      else if (c == 'e')
        o->maxbytes = s;
      else
        o->stepbytes = s;
      break;
    }
    case 'f': {
      /* as nccl-tests: a factor above 1 multiplies the size each step, 0
       * or 1 means no factor (the sizes step by -i) */
      char *end = NULL;
      errno = 0;
      unsigned long long f = strtoull(a, &end, 10);
      if (a[0] < '0' || a[0] > '9' || *end != '\0' || errno == ERANGE ||
          f > SIZE_MAX) {
        fprintf(err,
                "%s: invalid step factor '%s' for -f: expected an "
                "integer (0 or 1: no factor, step by -i)\n",
                prog, a);
        return -1;
      }
      o->stepfactor = f > 1 ? (size_t)f : 0;
      break;
    }
    case 'T':
      /* seconds, as BRAID_TIMEOUT takes them; 0: the library's */
      if (parse_int(a, 0, PERF_TIMEOUT_MAX_S, &o->timeout_s)) {
        fprintf(err,
                "%s: invalid value '%s' for -T (timeout): expected seconds "
                "from 1 to %d, as BRAID_TIMEOUT takes, or 0 for the "
                "library default\n",
                prog, a, PERF_TIMEOUT_MAX_S);
        return -1;
      }
      break;
    case 'n':
    case 'w':
    case 'm':
    case 'c': {
      long lo = (c == 'n' || c == 'm') ? 1 : 0;
      if (parse_int(a, lo, INT_MAX, &v)) {
        fprintf(err,
                "%s: invalid value '%s' for -%c: expected an integer >= %ld\n",
                prog, a, c, lo);
        return -1;
      }
      if (c == 'n')
        o->iters = v;
      else if (c == 'w')
        o->warmup = v;
      else if (c == 'm')
        o->agg = v;
      else
        o->check = v;
      break;
    }
    case 'o':
      if (parse_list_op(a, o)) {
        fprintf(err,
                "%s: unknown reduction op '%s' (expected sum, prod, min, "
                "max, avg, band, bor, bxor, premulsum (mulsum) or all)\n",
                prog, a);
        return -1;
      }
      break;
    case 'd':
      if (parse_list_dtype(a, o)) {
        /* every name perf takes (perf_dtype_str) */
        fprintf(err, "%s: unknown datatype '%s' (expected", prog, a);
        for (int i = 0; i < BRAID_NUM_DTYPES; i++)
          fprintf(err, " %s,", perf_dtype_str(i));
        fprintf(err, " or all)\n");
        return -1;
      }
      break;
    case 'r':
      if (strcasecmp(a, "all") == 0)
        o->root = -1;
      else if (parse_int(a, 0, INT_MAX, &o->root)) {
        fprintf(err, "%s: invalid root '%s': expected a rank >= 0 or 'all'\n",
                prog, a);
        return -1;
      }
      break;
    case 'z':
      if (parse_int(a, 0, 1, &o->blocking))
        goto bad_int01;
      break;
    case 'y':
      if (parse_int(a, 0, 1, &o->stream_null))
        goto bad_int01;
      break;
    case 'a':
      if (parse_int(a, 0, 3, &o->average)) {
        fprintf(err,
                "%s: invalid value '%s' for -a: expected 0 (rank 0), 1 "
                "(mean), 2 (min) or 3 (max)\n",
                prog, a);
        return -1;
      }
      break;
    case 'J':
      o->json = a;
      break;
    case OPT_CSV:
      o->csv = a;
      break;
    case OPT_PLOT: {
      const char *dot = strrchr(a, '.');
      if (!dot || (strcasecmp(dot, ".png") && strcasecmp(dot, ".svg"))) {
        fprintf(err,
                "%s: --plot '%s': the file name must end in .png or .svg\n",
                prog, a);
        return -1;
      }
      if (!perf_have_gnuplot()) {
        fprintf(err,
                "%s: --plot needs gnuplot on PATH (Debian package "
                "gnuplot-nox)\n",
                prog);
        return -1;
      }
      o->plot = a;
      break;
    }
    case 'G':
      if (parse_int(a, 0, 1, &o->device))
        goto bad_int01;
      if (o->device && !perf_cuda_built) {
        fprintf(err,
                "%s: -G/--device: braid-perf was not built with CUDA; "
                "device buffers are not available\n",
                prog);
        return -1;
      }
      break;
    case OPT_GPU:
      if (strcasecmp(a, "local") == 0) {
        o->gpu = PERF_GPU_LOCAL;
      } else if (parse_int(a, 0, 1 << 20, &o->gpu)) {
        fprintf(err,
                "%s: invalid value '%s' for --gpu: expected a device number "
                "or 'local'\n",
                prog, a);
        return -1;
      }
      break;
    case 'N':
    case 'C':
    case 'S':
    case 'R':
    case 'M':
    case 'D':
    case 'x':
    case 'V':
    case 'F':
    case OPT_CUDAGRAPH:
      if (nccl_only_option(c, a, prog, err))
        return -1;
      break;
    case 'h':
      perf_usage(stdout, prog);
      return 1;
    case ':':
      fprintf(err, "%s: option '%s' needs a value\n", prog,
              sub_argv[optind - 1]);
      return -1;
    default:
      if (optopt)
        fprintf(err, "%s: unknown option '-%c' (see %s --help)\n", prog, optopt,
                prog);
      else
        fprintf(err, "%s: unknown option '%s' (see %s --help)\n", prog,
                sub_argv[optind - 1], prog);
      return -1;
    bad_int01:
      fprintf(err, "%s: invalid value '%s' for -%c: expected 0 or 1\n", prog, a,
              c);
      return -1;
    }
  }
  if (optind < sub_argc) {
    fprintf(err, "%s: unexpected argument '%s' (see %s --help)\n", prog,
            sub_argv[optind], prog);
    return -1;
  }
  if (o->stepfactor == 0 && o->stepbytes == 0) {
    fprintf(err,
            "%s: -i (stepbytes) must be positive when the sizes step by "
            "it (no -f factor above 1)\n",
            prog);
    return -1;
  }
  if (o->minbytes > o->maxbytes) {
    fprintf(err, "%s: minbytes (%zu) is larger than maxbytes (%zu)\n", prog,
            o->minbytes, o->maxbytes);
    return -1;
  }
  return 0;
}

/* Appends to buf (of len bytes) what printf would write, cut at the end. */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t len,
                                                         const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n + 1 >= len)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, len - n, fmt, ap);
  va_end(ap);
}

int perf_runnable(const perf_opts *o, char *refused, size_t len) {
  int runs = 0;
  refused[0] = '\0';
  for (int ci = 0; ci < o->ncolls; ci++) {
    const perf_coll_info *info = &perf_colls[o->colls[ci]];
    int nops = info->has_op ? o->nops : 1;
    for (int di = 0; di < o->ndtypes; di++)
      for (int oi = 0; oi < nops; oi++) {
        braid_dtype dt = (braid_dtype)o->dtypes[di];
        braid_op op = info->has_op ? (braid_op)o->ops[oi] : BRAID_SUM;
        if (info->has_op && !perf_pair_valid(dt, op))
          continue;
        if (o->device && !perf_dev_valid((perf_coll)o->colls[ci], dt, op))
          continue;
        runs++;
      }
  }
  /* the refused pairs of a collective with an op, grouped by reason */
  int has_op = 0;
  for (int ci = 0; ci < o->ncolls; ci++)
    has_op |= perf_colls[o->colls[ci]].has_op;
  if (!has_op)
    return runs;
  const char *reasons[PERF_NUM_OPS * BRAID_NUM_DTYPES];
  int nreasons = 0;
  for (int di = 0; di < o->ndtypes; di++)
    for (int oi = 0; oi < o->nops; oi++) {
      const char *why =
          perf_pair_refusal((braid_dtype)o->dtypes[di], (braid_op)o->ops[oi]);
      int seen = why == NULL;
      for (int k = 0; k < nreasons && !seen; k++)
        seen = strcmp(reasons[k], why) == 0;
      if (!seen)
        reasons[nreasons++] = why;
    }
  for (int k = 0; k < nreasons; k++) {
    int first = 1;
    if (k > 0)
      append(refused, len, "; ");
    for (int di = 0; di < o->ndtypes; di++)
      for (int oi = 0; oi < o->nops; oi++) {
        const char *why =
            perf_pair_refusal((braid_dtype)o->dtypes[di], (braid_op)o->ops[oi]);
        if (why == NULL || strcmp(why, reasons[k]) != 0)
          continue;
        append(refused, len, "%s%s %s", first ? "" : ", ",
               perf_dtype_str(o->dtypes[di]), perf_op_str(o->ops[oi]));
        first = 0;
      }
    append(refused, len, " (%s)", reasons[k]);
  }
  return runs;
}
