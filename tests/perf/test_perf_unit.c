/*
 * braid-perf internals without a running library: option parsing, sizes and
 * bandwidth formulas, and the data patterns (every collective simulated in
 * process for every dtype, op and several rank counts must check clean, and a
 * corrupted element must be counted).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* ---- option parsing ---- */

static int parse(char *const *args, perf_opts *o, char **msg) {
  int argc = 0;
  while (args[argc])
    argc++;
  size_t len = 0;
  *msg = NULL;
  FILE *err = open_memstream(msg, &len);
  int r = perf_parse_args(argc, (char **)args, o, err);
  fclose(err);
  return r;
}

#define EXPECT_BAD(substr, ...)                                                \
  do {                                                                         \
    char *const a_[] = {__VA_ARGS__, NULL};                                    \
    perf_opts o_;                                                              \
    char *m_;                                                                  \
    int r_ = parse(a_, &o_, &m_);                                              \
    cr_expect_eq(r_, -1, "parse should fail for %s", a_[1]);                   \
    cr_expect(m_ &&strstr(m_, substr), "message '%s' lacks '%s'",              \
              m_ ? m_ : "", substr);                                           \
    free(m_);                                                                  \
  } while (0)

Test(perf_options, defaults_are_nccl_tests_defaults) {
  char *const a[] = {"braid-perf", "all_reduce", NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0);
  free(m);
  cr_expect_eq(o.minbytes, 32u << 20);
  cr_expect_eq(o.maxbytes, 32u << 20);
  cr_expect_eq(o.iters, 20);
  cr_expect_eq(o.warmup, 5);
  cr_expect_eq(o.agg, 1);
  cr_expect_eq(o.check, 1);
  cr_expect_eq(o.average, AVG_MEAN);
  cr_expect_eq(o.ndtypes, 1);
  cr_expect_eq(o.dtypes[0], BRAID_FLOAT32);
  cr_expect_eq(o.ops[0], BRAID_SUM);
  cr_expect_eq(o.ncolls, 1);
  cr_expect_eq(o.colls[0], COLL_ALL_REDUCE);
}

Test(perf_options, full_command_line) {
  char *const a[] = {
      "braid-perf", "reduce", "-b",    "8",   "-e", "128M", "-f", "2",  "-n",
      "7",          "-w",     "3",     "-m",  "4",  "-c",   "2",  "-o", "all",
      "-d",         "all",    "-r",    "all", "-z", "1",    "-a", "3",  "-J",
      "x.json",     "--csv",  "x.csv", "-y",  "1",  NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0, "%s", m);
  free(m);
  cr_expect_eq(o.minbytes, 8);
  cr_expect_eq(o.maxbytes, 128u << 20);
  cr_expect_eq(o.stepfactor, 2);
  cr_expect_eq(o.iters, 7);
  cr_expect_eq(o.warmup, 3);
  cr_expect_eq(o.agg, 4);
  cr_expect_eq(o.check, 2);
  cr_expect_eq(o.nops, PERF_NUM_OPS);
  cr_expect_eq(o.ops[PERF_NUM_OPS - 1], PERF_OP_PREMULSUM);
  cr_expect_eq(o.ndtypes, BRAID_NUM_DTYPES);
  cr_expect_eq(o.root, -1);
  cr_expect_eq(o.blocking, 1);
  cr_expect_eq(o.stream_null, 1);
  cr_expect_eq(o.average, AVG_MAX);
  cr_expect_str_eq(o.json, "x.json");
  cr_expect_str_eq(o.csv, "x.csv");
}

Test(perf_options, binary_name_selects_collective) {
  char *const a[] = {
      "/usr/bin/all_gather_perf", "-b", "1K", "-e", "1K", "-d", "half", NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0, "%s", m);
  free(m);
  cr_expect_eq(o.colls[0], COLL_ALL_GATHER);
  cr_expect_eq(o.minbytes, 1024);
  cr_expect_eq(o.dtypes[0], BRAID_FLOAT16);
}

Test(perf_options, all_collectives) {
  char *const a[] = {"braid-perf", "all", NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0);
  free(m);
  cr_expect_eq(o.ncolls, COLL_COUNT);
}

Test(perf_options, bad_values_name_the_problem) {
  EXPECT_BAD("invalid size '12Q'", "braid-perf", "all_reduce", "-b", "12Q");
  EXPECT_BAD("invalid size '-5'", "braid-perf", "all_reduce", "-e", "-5");
  EXPECT_BAD("invalid size 'M'", "braid-perf", "all_reduce", "-e", "M");
  EXPECT_BAD("unknown datatype 'float7'", "braid-perf", "all_reduce", "-d",
             "float7");
  /* the list of what it takes names every type it takes */
  EXPECT_BAD(" int16,", "braid-perf", "all_reduce", "-d", "float7");
  EXPECT_BAD(" bool,", "braid-perf", "all_reduce", "-d", "float7");
  EXPECT_BAD("unknown reduction op 'mean'", "braid-perf", "all_reduce", "-o",
             "mean");
  EXPECT_BAD("unknown collective 'allreduce2'", "braid-perf", "allreduce2");
  EXPECT_BAD("missing collective", "braid-perf", "-b", "8");
  EXPECT_BAD("step factor", "braid-perf", "all_reduce", "-f", "-4");
  EXPECT_BAD("step factor", "braid-perf", "all_reduce", "-f", "8x");
  EXPECT_BAD("step factor", "braid-perf", "all_reduce", "-f",
             "99999999999999999999999");
  EXPECT_BAD("larger than maxbytes", "braid-perf", "all_reduce", "-b", "1M",
             "-e", "1K");
  EXPECT_BAD("not built with CUDA", "braid-perf", "all_reduce", "-G", "1");
  EXPECT_BAD("unknown option", "braid-perf", "all_reduce", "-Q", "1");
  EXPECT_BAD("unknown option", "braid-perf", "all_reduce", "--frobnicate");
  EXPECT_BAD("needs a value", "braid-perf", "all_reduce", "-n");
  EXPECT_BAD("-a", "braid-perf", "all_reduce", "-a", "7");
  EXPECT_BAD("invalid root", "braid-perf", "broadcast", "-r", "x");
  EXPECT_BAD("-i (stepbytes) must be positive", "braid-perf", "all_reduce",
             "-i", "0");
  EXPECT_BAD("-i (stepbytes) must be positive", "braid-perf", "all_reduce",
             "-i", "0", "-f", "1");
  EXPECT_BAD("one rank per process", "braid-perf", "all_reduce", "-g", "2");
  EXPECT_BAD(".png or .svg", "braid-perf", "all_reduce", "--plot", "a.jpg");
  EXPECT_BAD("unexpected argument", "braid-perf", "all_reduce", "extra");
}

Test(perf_options, sizes) {
  size_t s;
  cr_expect_eq(perf_parse_size("64K", &s), 0);
  cr_expect_eq(s, 65536);
  cr_expect_eq(perf_parse_size("1.5M", &s), 0);
  cr_expect_eq(s, 3u << 19);
  cr_expect_eq(perf_parse_size("2G", &s), 0);
  cr_expect_eq(s, (size_t)2 << 30);
  cr_expect_eq(perf_parse_size("8", &s), 0);
  cr_expect_eq(s, 8);
  cr_expect_eq(perf_parse_size("1KB", &s), 0);
  cr_expect_eq(s, 1024);
  cr_expect_neq(perf_parse_size("1KX", &s), 0);
  cr_expect_neq(perf_parse_size("", &s), 0);
  cr_expect_neq(perf_parse_size("ten", &s), 0);
  /* strtod's words are not sizes (nan once became an allocation of
   * (size_t)NaN bytes) */
  static const char *const words[] = {"nan",      "NaN",  "nanK", "inf",
                                      "infinity", "-nan", " nan"};
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    cr_expect_neq(perf_parse_size(words[i], &s), 0, "'%s' taken", words[i]);
  EXPECT_BAD("invalid size 'nan' for -b", "braid-perf", "all_reduce", "-b",
             "nan");
  EXPECT_BAD("invalid size 'nan' for -e", "braid-perf", "all_reduce", "-e",
             "nan");
  cr_expect_eq(perf_parse_size(".5K", &s), 0);
  cr_expect_eq(s, 512);
}

/* -T takes what BRAID_TIMEOUT takes: a larger value once overflowed the
 * milliseconds into a short or negative timeout. */
Test(perf_options, timeout_range) {
  static const char *const ok[] = {"0", "1", "86400"};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    char *const a[] = {"braid-perf", "all_reduce", "-T", (char *)ok[i], NULL};
    perf_opts o;
    char *m;
    cr_expect_eq(parse(a, &o, &m), 0, "-T %s: %s", ok[i], m);
    free(m);
    cr_expect_eq(o.timeout_s, atoi(ok[i]));
  }
  EXPECT_BAD("invalid value '86401' for -T (timeout)", "braid-perf",
             "all_reduce", "-T", "86401");
  EXPECT_BAD("invalid value '4294968' for -T", "braid-perf", "all_reduce", "-T",
             "4294968");
  EXPECT_BAD("invalid value '2147484' for -T", "braid-perf", "all_reduce",
             "--timeout", "2147484");
  EXPECT_BAD("invalid value '-1' for -T", "braid-perf", "all_reduce", "-T",
             "-1");
}

/* nccl-tests' step rules: a factor above 1 multiplies (and wins over -i),
 * 0 or 1 means none: the sizes step by -i. */
Test(perf_options, nccl_tests_step_rules) {
  static const struct {
    const char *f, *i;
    size_t factor, bytes;
  } rows[] = {
      {"1", NULL, 0, 1u << 20}, {"0", NULL, 0, 1u << 20}, {"1", "4K", 0, 4096},
      {"2", "1M", 2, 1u << 20}, {"4", "0", 4, 0},
  };
  for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
    char *a[8] = {"braid-perf", "all_reduce", "-f", (char *)rows[k].f};
    if (rows[k].i) {
      a[4] = "-i";
      a[5] = (char *)rows[k].i;
    }
    perf_opts o;
    char *m;
    cr_expect_eq(parse(a, &o, &m), 0, "-f %s -i %s: %s", rows[k].f,
                 rows[k].i ? rows[k].i : "-", m);
    free(m);
    cr_expect_eq(o.stepfactor, rows[k].factor, "-f %s", rows[k].f);
    cr_expect_eq(o.stepbytes, rows[k].bytes, "-f %s -i %s", rows[k].f,
                 rows[k].i ? rows[k].i : "-");
  }
}

/* nccl-tests' options braid-perf does not implement: the value that asks
 * for nccl-tests' default is taken, any other is refused by name. */
Test(perf_options, nccl_tests_options_not_supported) {
  static const char *const plain[][2] = {
      {"-N", "1"},           {"-C", "0"},
      {"-S", "0"},           {"-R", "0"},
      {"-M", "0"},           {"-D", "0"},
      {"--run_cycles", "1"}, {"--local_register", "0"}};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
    char *const a[] = {"braid-perf", "all_reduce", (char *)plain[i][0],
                       (char *)plain[i][1], NULL};
    perf_opts o;
    char *m;
    cr_expect_eq(parse(a, &o, &m), 0, "%s %s: %s", plain[i][0], plain[i][1], m);
    free(m);
  }
  EXPECT_BAD("-N 2: nccl-tests' --run_cycles", "braid-perf", "all_reduce", "-N",
             "2");
  EXPECT_BAD("is not supported by braid-perf", "braid-perf", "all_reduce", "-N",
             "0");
  EXPECT_BAD("-C 1: nccl-tests' --report_cputime", "braid-perf", "all_reduce",
             "-C", "1");
  EXPECT_BAD("only -C 0, nccl-tests' default", "braid-perf", "all_reduce", "-C",
             "1");
  EXPECT_BAD("-R 1: nccl-tests' --local_register", "braid-perf", "all_reduce",
             "-R", "1");
  EXPECT_BAD("-R 2: nccl-tests' --local_register (it registers the buffers "
             "with NCCL) is not supported",
             "braid-perf", "all_reduce", "--local_register", "2");
  EXPECT_BAD("-F out.csv: nccl-tests' --output_file", "braid-perf",
             "all_reduce", "-F", "out.csv");
  EXPECT_BAD("--csv FILE", "braid-perf", "all_reduce", "-F", "out.csv");
  EXPECT_BAD("-x 1: nccl-tests' --cta_policy", "braid-perf", "all_reduce", "-x",
             "1");
  EXPECT_BAD("-V 16: nccl-tests' --device_cta_count", "braid-perf",
             "all_reduce", "-V", "16");
  EXPECT_BAD("--cudagraph 1: nccl-tests' --cudagraph", "braid-perf",
             "all_reduce", "--cudagraph", "1");
  EXPECT_BAD("braid-perf's -G is --device", "braid-perf", "all_reduce",
             "--cudagraph", "1");
}

/* What runs of the requested collectives, dtypes and ops, and the pairs
 * braid refuses, named with the reason. */
static int runnable(char *const *args, char *refused, size_t len) {
  perf_opts o;
  char *m;
  cr_assert_eq(parse(args, &o, &m), 0, "%s", m);
  free(m);
  return perf_runnable(&o, refused, len);
}

Test(perf_options, refused_pairs_are_named) {
  char r[1024];
  cr_expect_eq(runnable((char *const[]){"all_reduce_perf", "-d", "float32",
                                        "-o", "band", NULL},
                        r, sizeof r),
               0);
  cr_expect_str_eq(r,
                   "float32 band (bitwise ops take integer dtypes and bool)");
  cr_expect_eq(
      runnable((char *const[]){"reduce_perf", "-d", "bool", "-o", "avg", NULL},
               r, sizeof r),
      0);
  cr_expect_str_eq(r, "bool avg (avg is not defined on bool)");
  cr_expect_eq(runnable((char *const[]){"reduce_perf", "-d", "bool", "-o",
                                        "mulsum", NULL},
                        r, sizeof r),
               0);
  cr_expect(strstr(r, "bool premulsum (a pre-multiplied sum"), "%s", r);
  /* some run, some are refused */
  int n = runnable((char *const[]){"braid-perf", "all_reduce", "-d", "all",
                                   "-o", "all", NULL},
                   r, sizeof r);
  cr_expect_gt(n, 0);
  cr_expect(strstr(r, "float16 band, float16 bor, float16 bxor, bfloat16 band"),
            "%s", r);
  cr_expect(strstr(r, "float8_e5m2 bxor (bitwise ops take integer dtypes and "
                      "bool); bool avg (avg is not defined on bool); bool "
                      "premulsum"),
            "%s", r);
  /* a collective without an op takes every dtype: nothing refused */
  cr_expect_eq(runnable((char *const[]){"all_gather_perf", "-d", "float32",
                                        "-o", "band", NULL},
                        r, sizeof r),
               1);
  cr_expect_str_eq(r, "");
  cr_expect_eq(runnable((char *const[]){"braid-perf", "all", "-d", "float32",
                                        "-o", "band", NULL},
                        r, sizeof r),
               COLL_COUNT - 3);
  cr_expect_str_eq(r,
                   "float32 band (bitwise ops take integer dtypes and bool)");
}

/* ---- sizes and bandwidth ---- */

Test(perf_bw, nccl_tests_formulas) {
  double alg, bus;
  /* 1 GB in 1 s on 4 ranks. */
  perf_get_bw(COLL_ALL_REDUCE, 250000000, 4, 1.0, 4, &alg, &bus);
  cr_expect(fabs(alg - 1.0) < 1e-9);
  cr_expect(fabs(bus - 1.5) < 1e-9, "allreduce busbw 2(n-1)/n");
  /* allgather: per-rank count 62.5M floats -> 1 GB total. */
  perf_get_bw(COLL_ALL_GATHER, 62500000, 4, 1.0, 4, &alg, &bus);
  cr_expect(fabs(alg - 1.0) < 1e-9);
  cr_expect(fabs(bus - 0.75) < 1e-9);
  perf_get_bw(COLL_REDUCE_SCATTER, 62500000, 4, 1.0, 4, &alg, &bus);
  cr_expect(fabs(bus - 0.75) < 1e-9);
  perf_get_bw(COLL_ALLTOALL, 62500000, 4, 1.0, 4, &alg, &bus);
  cr_expect(fabs(bus - 0.75) < 1e-9);
  perf_get_bw(COLL_BROADCAST, 250000000, 4, 1.0, 4, &alg, &bus);
  cr_expect(fabs(bus - 1.0) < 1e-9);
  perf_get_bw(COLL_REDUCE, 250000000, 4, 2.0, 4, &alg, &bus);
  cr_expect(fabs(bus - 0.5) < 1e-9);
}

Test(perf_bw, counts) {
  perf_counts pc;
  perf_get_counts(COLL_ALL_GATHER, 1000, 3, &pc);
  cr_expect_eq(pc.param, 333);
  cr_expect_eq(pc.send, 333);
  cr_expect_eq(pc.recv, 999);
  cr_expect_eq(pc.send_inplace_off, 333);
  perf_get_counts(COLL_REDUCE_SCATTER, 1000, 3, &pc);
  cr_expect_eq(pc.send, 999);
  cr_expect_eq(pc.recv, 333);
  cr_expect_eq(pc.recv_inplace_off, 333);
  perf_get_counts(COLL_ALL_REDUCE, 1000, 3, &pc);
  cr_expect_eq(pc.param, 1000);
  cr_expect_eq(pc.recv, 1000);
}

/* ---- data patterns ---- */

Test(perf_data, half_and_bfloat16_encodings) {
  uint16_t h[5];
  perf_store(BRAID_FLOAT16, h, 0, 1);
  perf_store(BRAID_FLOAT16, h, 1, 2);
  perf_store(BRAID_FLOAT16, h, 2, 2048);
  perf_store(BRAID_FLOAT16, h, 3, -3);
  perf_store(BRAID_FLOAT16, h, 4, 0);
  cr_expect_eq(h[0], 0x3c00);
  cr_expect_eq(h[1], 0x4000);
  cr_expect_eq(h[2], 0x6800);
  cr_expect_eq(h[3], 0xc200);
  cr_expect_eq(h[4], 0);
  uint16_t b[2];
  perf_store(BRAID_BFLOAT16, b, 0, 1);
  perf_store(BRAID_BFLOAT16, b, 1, -2);
  cr_expect_eq(b[0], 0x3f80);
  cr_expect_eq(b[1], 0xc000);
}

/* Decodes an element holding a small integer. */
static double load(braid_dtype dt, const void *buf, size_t i) {
  switch (dt) {
  case BRAID_INT8:
    return ((const int8_t *)buf)[i];
  case BRAID_UINT8:
    return ((const uint8_t *)buf)[i];
  case BRAID_INT32:
    return ((const int32_t *)buf)[i];
  case BRAID_UINT32:
    return ((const uint32_t *)buf)[i];
  case BRAID_INT64:
    return (double)((const int64_t *)buf)[i];
  case BRAID_UINT64:
    return (double)((const uint64_t *)buf)[i];
  case BRAID_FLOAT16: {
    uint16_t h = ((const uint16_t *)buf)[i];
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff;
    double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
  }
  case BRAID_BFLOAT16: {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  case BRAID_FLOAT32:
    return ((const float *)buf)[i];
  case BRAID_FLOAT64:
    return ((const double *)buf)[i];
  case BRAID_INT16:
    return ((const int16_t *)buf)[i];
  case BRAID_BOOL:
    return ((const uint8_t *)buf)[i];
  case BRAID_FLOAT8_E4M3:
  case BRAID_FLOAT8_E5M2: { /* sign, exponent, mantissa: no NaN here */
    uint8_t x = ((const uint8_t *)buf)[i];
    int mb = dt == BRAID_FLOAT8_E5M2 ? 2 : 3;
    int bias = dt == BRAID_FLOAT8_E5M2 ? 15 : 7;
    int e = (x & 0x7f) >> mb, m = x & ((1 << mb) - 1);
    double v =
        e ? ldexp((1 << mb) + m, e - bias - mb) : ldexp(m, 1 - bias - mb);
    return (x & 0x80) ? -v : v;
  }
  default:
    return 0;
  }
}

static double reduce2(braid_dtype dt, braid_op op, double a, double b) {
  int64_t x = (int64_t)a, y = (int64_t)b;
  if (dt == BRAID_BOOL) /* logical: sum and max or, prod and min and */
    return op == BRAID_PROD || op == BRAID_MIN || op == BRAID_BAND ? (x && y)
           : op == BRAID_BXOR                                      ? (!x != !y)
                                                                   : (x || y);
  switch (op) {
  case BRAID_BAND:
    return (double)(x & y);
  case BRAID_BOR:
    return (double)(x | y);
  case BRAID_BXOR:
    return (double)(x ^ y);
  case BRAID_SUM:
  case BRAID_AVG:
    return a + b;
  case BRAID_PROD:
    return a * b;
  case BRAID_MIN:
    return a < b ? a : b;
  default:
    return a > b ? a : b;
  }
}

/* Runs collective c by hand on n simulated ranks, then checks every rank's
 * output with perf_check_output. Returns the total of wrong elements; with
 * corrupt set, flips one output element of the last rank first. */
static int64_t simulate(perf_coll c, braid_dtype dt, braid_op op, int n,
                        int root, size_t count, int corrupt) {
  perf_counts pc;
  perf_get_counts(c, count, n, &pc);
  size_t es = perf_dtype_size(dt);
  unsigned char **in = calloc((size_t)n, sizeof *in);
  unsigned char **out = calloc((size_t)n, sizeof *out);
  for (int r = 0; r < n; r++) {
    in[r] = calloc(pc.send + 1, es);
    out[r] = calloc(pc.recv + 1, es);
    perf_fill_input(c, dt, op, r, n, root, 5, in[r], 0, pc.send);
  }
  size_t p = pc.param;
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < pc.recv; i++) {
      int src = r;
      size_t idx = i;
      double v = 0;
      int reduce = 0;
      switch (c) {
      case COLL_ALL_REDUCE:
      case COLL_REDUCE:
        reduce = 1;
        idx = i;
        break;
      case COLL_REDUCE_SCATTER:
        reduce = 1;
        idx = (size_t)r * p + i;
        break;
      case COLL_BROADCAST:
        src = root;
        break;
      case COLL_ALL_GATHER:
      case COLL_GATHER:
        src = (int)(i / p);
        idx = i % p;
        break;
      case COLL_SCATTER:
        src = root;
        idx = (size_t)r * p + i;
        break;
      case COLL_ALLTOALL:
      case COLL_ALLTOALLV:
        src = (int)(i / p);
        idx = (size_t)r * p + i % p;
        break;
      case COLL_SENDRECV:
        src = (r + n - 1) % n;
        break;
      default:
        break;
      }
      if (reduce && op == PERF_OP_PREMULSUM) {
        /* each rank's input times its scalar, then summed */
        v = 0;
        for (int q = 0; q < n; q++)
          v += (double)perf_premul_scalar(q) * load(dt, in[q], idx);
        perf_store(dt, out[r], i, (int64_t)v);
      } else if (reduce) {
        v = load(dt, in[0], idx);
        for (int q = 1; q < n; q++)
          v = reduce2(dt, op, v, load(dt, in[q], idx));
        if (op == BRAID_AVG)
          v = trunc(v / n);
        perf_store(dt, out[r], i, (int64_t)v);
      } else {
        memcpy(out[r] + i * es, in[src] + idx * es, es);
      }
    }
  }
  if (corrupt && pc.recv) {
    int r = (c == COLL_REDUCE || c == COLL_GATHER) ? root : n - 1;
    out[r][(pc.recv / 2) * es] ^= 0x40;
  }
  int64_t wrong = 0;
  for (int r = 0; r < n; r++) {
    wrong += perf_check_output(c, dt, op, r, n, root, 5, &pc, out[r]);
    free(in[r]);
    free(out[r]);
  }
  free(in);
  free(out);
  return wrong;
}

/* Integers as 8-bit floats: exact where the format holds them, else the
 * nearest (ties to even), checked with this file's decoder. */
Test(perf_data, float8_encodings) {
  static const braid_dtype dts[2] = {BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};
  for (int k = 0; k < 2; k++)
    for (int v = -100; v <= 100; v++) {
      /* 8 bytes, as load() reads any dtype (gcc 13 warns of the wider
       * reads it cannot rule out on one byte) */
      uint8_t b[8] = {0};
      perf_store(dts[k], b, 0, v);
      double got = load(dts[k], b, 0);
      int lim = k ? 8 : 16;
      if (v >= -lim && v <= lim)
        cr_expect_eq(got, (double)v, "%s %d stored as %g",
                     perf_dtype_str(dts[k]), v, got);
      else
        cr_expect(fabs(got - v) <= fabs((double)v) / (k ? 8 : 16),
                  "%s %d stored as %g", perf_dtype_str(dts[k]), v, got);
    }
  uint8_t b = 0;
  perf_store(BRAID_FLOAT8_E4M3, &b, 0, 9); /* 9: exact, 1.001 x 8 */
  cr_expect_eq(b, 0x51);
  perf_store(BRAID_FLOAT8_E5M2, &b, 0, 9); /* tie between 8 and 10: 8 */
  cr_expect_eq(b, 0x48);
  perf_store(BRAID_FLOAT8_E5M2, &b, 0, 5);
  cr_expect_eq(b, 0x45);
}

Test(perf_data, every_collective_dtype_op_is_exact) {
  static const int ranks[] = {1, 2, 3, 4, 8};
  for (int c = 0; c < COLL_COUNT; c++) {
    int nops = perf_colls[c].has_op ? PERF_NUM_OPS : 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
      for (int op = 0; op < nops; op++) {
        if (perf_colls[c].has_op &&
            !perf_pair_valid((braid_dtype)dt, (braid_op)op))
          continue;
        for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
          int n = ranks[ri];
          int root = n > 1 ? 1 : 0;
          int64_t w = simulate((perf_coll)c, (braid_dtype)dt, (braid_op)op, n,
                               root, 257, 0);
          cr_expect_eq(w, 0, "%s %s %s n=%d: %lld wrong", perf_colls[c].name,
                       perf_dtype_str(dt), perf_op_str(op), n, (long long)w);
          int64_t wc = simulate((perf_coll)c, (braid_dtype)dt, (braid_op)op, n,
                                root, 257, 1);
          cr_expect_eq(wc, 1, "%s %s %s n=%d: corruption counted %lld",
                       perf_colls[c].name, perf_dtype_str(dt), perf_op_str(op),
                       n, (long long)wc);
        }
      }
    }
  }
}

Test(perf_data, reductions_are_not_trivial) {
  /* The inputs differ between ranks, so a collective that returned its own
   * input would be caught. */
  for (int op = 0; op < PERF_NUM_OPS; op++) {
    if (!perf_pair_valid(BRAID_FLOAT32, (braid_op)op))
      continue;
    perf_counts pc;
    perf_get_counts(COLL_ALL_REDUCE, 64, 2, &pc);
    float in0[64];
    perf_fill_input(COLL_ALL_REDUCE, BRAID_FLOAT32, (braid_op)op, 0, 2, 0, 1,
                    in0, 0, 64);
    int64_t w = perf_check_output(COLL_ALL_REDUCE, BRAID_FLOAT32, (braid_op)op,
                                  0, 2, 0, 1, &pc, in0);
    cr_expect_gt(w, 0, "op %s: own input passes the check", perf_op_str(op));
  }
}

Test(perf_data, bitwise_and_bool_reductions_are_not_trivial) {
  static const braid_dtype dts[] = {BRAID_INT32, BRAID_INT16, BRAID_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (int op = 0; op < BRAID_NUM_OPS; op++) {
      if (!perf_pair_valid(dts[d], (braid_op)op) ||
          (dts[d] != BRAID_BOOL && op < BRAID_BAND))
        continue;
      perf_counts pc;
      perf_get_counts(COLL_ALL_REDUCE, 64, 3, &pc);
      int32_t in0[64];
      perf_fill_input(COLL_ALL_REDUCE, dts[d], (braid_op)op, 0, 3, 0, 1, in0, 0,
                      64);
      int64_t w = perf_check_output(COLL_ALL_REDUCE, dts[d], (braid_op)op, 0, 3,
                                    0, 1, &pc, in0);
      cr_expect_gt(w, 0, "%s %s: own input passes the check",
                   perf_dtype_str(dts[d]), perf_op_str(op));
    }
}

/* A pre-multiplied sum that ignored the scalars (a plain sum of the same
 * inputs) fails the check; the scalars differ between ranks. */
Test(perf_data, premulsum_checks_the_scalars) {
  cr_expect_eq(perf_premul_scalar(0), 1);
  cr_expect_eq(perf_premul_scalar(1), 2);
  cr_expect_eq(perf_premul_scalar(2), 1);
  static const braid_dtype dts[] = {BRAID_FLOAT32, BRAID_BFLOAT16,
                                    BRAID_FLOAT8_E4M3, BRAID_INT32};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    braid_dtype dt = dts[d];
    enum { N = 64, R = 3 };
    unsigned char in[R][N * 8], out[N * 8];
    for (int r = 0; r < R; r++)
      perf_fill_input(COLL_ALL_REDUCE, dt, PERF_OP_PREMULSUM, r, R, 0, 1, in[r],
                      0, N);
    for (size_t i = 0; i < N; i++) {
      double v = 0;
      for (int r = 0; r < R; r++)
        v += load(dt, in[r], i);
      perf_store(dt, out, i, (int64_t)v);
    }
    perf_counts pc;
    perf_get_counts(COLL_ALL_REDUCE, N, R, &pc);
    int64_t w = perf_check_output(COLL_ALL_REDUCE, dt, PERF_OP_PREMULSUM, 0, R,
                                  0, 1, &pc, out);
    cr_expect_gt(w, 0, "%s: a sum without the scalars passes",
                 perf_dtype_str(dt));
  }
  cr_expect(!perf_pair_valid(BRAID_BOOL, PERF_OP_PREMULSUM));
  cr_expect(perf_pair_valid(BRAID_FLOAT8_E5M2, PERF_OP_PREMULSUM));
  cr_expect(
      perf_dev_valid(COLL_REDUCE_SCATTER, BRAID_BFLOAT16, PERF_OP_PREMULSUM));
  cr_expect_eq(perf_exact_max_ranks(BRAID_BFLOAT16, PERF_OP_PREMULSUM), 128);
}

Test(perf_options, new_dtypes_ops_and_alltoallv) {
  static const char *dts[] = {"int16", "bool", "short"};
  static const int dtv[] = {BRAID_INT16, BRAID_BOOL, BRAID_INT16};
  for (int i = 0; i < 3; i++)
    cr_expect_eq(perf_dtype_from_name(dts[i]), dtv[i], "%s", dts[i]);
  static const char *ops[] = {"band", "bor", "bxor"};
  for (int i = 0; i < 3; i++)
    cr_expect_eq(perf_op_from_name(ops[i]), BRAID_BAND + i, "%s", ops[i]);
  cr_expect_str_eq(perf_dtype_str(BRAID_BOOL), "bool");
  cr_expect_str_eq(perf_op_str(BRAID_BXOR), "bxor");
  cr_expect_eq(perf_op_from_name("premulsum"), PERF_OP_PREMULSUM);
  cr_expect_eq(perf_op_from_name("mulsum"), PERF_OP_PREMULSUM);
  cr_expect_eq(perf_op_from_name("PreMulSum"), PERF_OP_PREMULSUM);
  cr_expect_str_eq(perf_op_str(PERF_OP_PREMULSUM), "premulsum");
  cr_expect_eq(perf_coll_from_name("alltoallv"), COLL_ALLTOALLV);
  cr_expect_eq(perf_coll_from_name("alltoallv_perf"), COLL_ALLTOALLV);
  char *const a[] = {"braid-perf", "alltoallv", "-d", "bool",
                     "-o",         "bxor",      NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0, "%s", m);
  free(m);
  cr_expect_eq(o.colls[0], COLL_ALLTOALLV);
  cr_expect_eq(o.dtypes[0], BRAID_BOOL);
  cr_expect_eq(o.ops[0], BRAID_BXOR);
  cr_expect(!perf_pair_valid(BRAID_FLOAT32, BRAID_BAND));
  cr_expect(!perf_pair_valid(BRAID_BOOL, BRAID_AVG));
  cr_expect(perf_pair_valid(BRAID_BOOL, BRAID_SUM));
  cr_expect(perf_pair_valid(BRAID_INT16, BRAID_BXOR));
}

/* The data of the collectives that move without reducing, for bool: about
 * half true, depending on the rank and the index, so that an output of all
 * true (or all false), or two ranks' blocks swapped, is counted wrong in
 * about half its elements. */
Test(perf_data, bool_movement_data_varies) {
  static const perf_coll colls[] = {
      COLL_ALL_GATHER, COLL_BROADCAST, COLL_GATHER,  COLL_SCATTER,
      COLL_ALLTOALL,   COLL_ALLTOALLV, COLL_SENDRECV};
  enum { N = 3, COUNT = 3 * 256 };
  for (size_t k = 0; k < sizeof colls / sizeof *colls; k++) {
    perf_coll c = colls[k];
    perf_counts pc;
    perf_get_counts(c, COUNT, N, &pc);
    uint8_t in[N][COUNT];
    for (int r = 0; r < N; r++) {
      perf_fill_input(c, BRAID_BOOL, BRAID_SUM, r, N, 0, 7, in[r], 0, pc.send);
      size_t t = 0;
      for (size_t i = 0; i < pc.send; i++)
        t += in[r][i];
      cr_expect(t * 10 >= pc.send * 3 && t * 10 <= pc.send * 7,
                "%s rank %d: %zu of %zu true", perf_colls[c].name, r, t,
                pc.send);
    }
    size_t diff = 0;
    for (size_t i = 0; i < pc.send; i++)
      diff += in[0][i] != in[1][i];
    cr_expect_gt(diff * 4, pc.send,
                 "%s: ranks 0 and 1 send alike in %zu of %zu",
                 perf_colls[c].name, pc.send - diff, pc.send);
    /* every output true, every output false: about half wrong */
    uint8_t out[COUNT];
    for (int v = 0; v < 2; v++) {
      memset(out, v, sizeof out);
      int64_t w =
          perf_check_output(c, BRAID_BOOL, BRAID_SUM, 0, N, 0, 7, &pc, out);
      cr_expect_gt(w * 4, (int64_t)pc.recv,
                   "%s: all %s counted %lld wrong of %zu", perf_colls[c].name,
                   v ? "true" : "false", (long long)w, pc.recv);
    }
  }
  /* allgather's blocks of ranks 0 and 1 swapped */
  perf_counts pc;
  perf_get_counts(COLL_ALL_GATHER, COUNT, N, &pc);
  uint8_t out[COUNT];
  for (int r = 0; r < N; r++)
    perf_fill_input(COLL_ALL_GATHER, BRAID_BOOL, BRAID_SUM,
                    r == 0   ? 1
                    : r == 1 ? 0
                             : r,
                    N, 0, 7, out + (size_t)r * pc.param, 0, pc.param);
  int64_t w = perf_check_output(COLL_ALL_GATHER, BRAID_BOOL, BRAID_SUM, 2, N, 0,
                                7, &pc, out);
  cr_expect_gt(w * 4, (int64_t)(2 * pc.param),
               "swapped blocks counted %lld wrong", (long long)w);
}

/* nccl-tests takes any step factor; so does braid-perf. */
Test(perf_options, any_step_factor_from_2) {
  char *const a[] = {"braid-perf", "all_reduce", "-b",      "8", "-e",
                     "64M",        "-f",         "8388608", NULL};
  perf_opts o;
  char *m;
  cr_assert_eq(parse(a, &o, &m), 0, "%s", m);
  free(m);
  cr_expect_eq(o.stepfactor, 8388608u);
}
