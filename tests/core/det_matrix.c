/*
 * Deterministic reductions over real ranks (BRAID_DETERMINISTIC, or the
 * config field with --cfg): allreduce, reduce and reduce_scatter of float32
 * and bfloat16 random data, every op, in and out of place, must give bit
 * for bit the serial fold x0 op x1 op .. op x(n-1) computed here, element
 * by element, with this file's own arithmetic (bfloat16: widened to float,
 * reduced, rounded to nearest even; avg: the fold, then divided). The data
 * mixes magnitudes (2^-16 to 2^16, signed zeros among them) so that sums
 * depend on their order. Each case runs on several communicators: the
 * planner's choice at 1 and 4 channels, and each deterministic generator
 * named (direct at 2 channels, det at 4); slicing comes from BRAID_BUFFSIZE.
 * Also: a config field out of range is refused, and a filter entry that
 * leaves a reduction no deterministic algorithm fails the init.
 * Run as N ranks: braidrun -n N det_matrix [--counts a,b,..] [--cfg].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

static int g_rank, g_n, g_cfg;
static long g_pass, g_fail;

/* ---- data: a value of rank q at input element e, the same on every rank */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* float to bfloat16, to nearest, ties to even (finite values here) */
static uint16_t to_bf16(float f) {
  uint32_t u = f2u(f);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) { return u2f((uint32_t)h << 16); }

/* prod keeps to 2^-3..2^3 (a product of 8 stays finite); the others use
 * 2^-16..2^16, and one value in 16 is a signed zero. */
static float value(int q, size_t e, int op, int seed) {
  uint64_t h = mix(((uint64_t)seed << 48) ^ ((uint64_t)q << 40) ^ e);
  uint32_t sign = (uint32_t)(h & 1u) << 31;
  uint32_t mant = (uint32_t)(h >> 8) & 0x7fffffu;
  int span = op == BRAID_PROD ? 7 : 33;
  int ex = (int)((h >> 40) % (uint64_t)span) - span / 2;
  if (op != BRAID_PROD && ((h >> 56) & 15u) == 0)
    return u2f(sign);
  return u2f(sign | (uint32_t)(127 + ex) << 23 | mant);
}

static float op_f(int op, float a, float b) {
  switch (op) {
  case BRAID_PROD:
    return a * b;
  case BRAID_MIN:
    return a < b ? a : b; /* equal (+0, -0): b */
  case BRAID_MAX:
    return a > b ? a : b;
  default: /* sum, avg */
    return a + b;
  }
}

static void put(void *buf, size_t i, braid_dtype dt, float f) {
  if (dt == BRAID_BFLOAT16)
    ((uint16_t *)buf)[i] = to_bf16(f);
  else
    ((float *)buf)[i] = f;
}

/* The serial fold at input element e, as bits of the dtype. */
static uint32_t fold(braid_dtype dt, int op, size_t e, int seed) {
  int bf = dt == BRAID_BFLOAT16;
  float acc = 0;
  for (int q = 0; q < g_n; q++) {
    float x = value(q, e, op, seed);
    if (bf)
      x = from_bf16(to_bf16(x));
    acc = q == 0 ? x : op_f(op, acc, x);
    if (bf)
      acc = from_bf16(to_bf16(acc));
  }
  if (op == BRAID_AVG && g_n > 1)
    acc = acc / (float)g_n;
  return bf ? to_bf16(acc) : f2u(acc);
}

static uint32_t bits_at(const void *buf, size_t i, braid_dtype dt) {
  if (dt == BRAID_BFLOAT16)
    return ((const uint16_t *)buf)[i];
  return f2u(((const float *)buf)[i]);
}

/* ---- one case ------------------------------------------------------------ */

enum { C_ALLREDUCE, C_REDUCE, C_REDUCE_SCATTER, NCOLL };
static const char *const coll_name[NCOLL] = {"allreduce", "reduce",
                                             "reduce_scatter"};

static void tally(int bad) {
  if (bad)
    g_fail++;
  else
    g_pass++;
}

static int check(const char *comm, int coll, braid_dtype dt, int op, size_t n,
                 int inplace, const void *out, size_t e0, int seed) {
  for (size_t i = 0; i < n; i++) {
    uint32_t want = fold(dt, op, e0 + i, seed), got = bits_at(out, i, dt);
    if (got != want) {
      fprintf(stderr,
              "det_matrix rank %d/%d [%s] %s %s %s count %zu %s: element "
              "%zu is 0x%08x, the serial fold 0x%08x\n",
              g_rank, g_n, comm, coll_name[coll], braid_dtype_name(dt),
              braid_op_name((braid_op)op), n,
              inplace ? "in place" : "out of place", i, got, want);
      return 1;
    }
  }
  return 0;
}

static void run_case(braid_comm *c, const char *comm, int coll, braid_dtype dt,
                     int op, size_t n, int inplace, int seed) {
  size_t es = braid_dtype_size(dt);
  size_t nin = coll == C_REDUCE_SCATTER ? n * (size_t)g_n : n;
  int root = seed % g_n; /* reduce: the root moves with the case */
  char *in = malloc(nin * es + 1);
  char *out = malloc(n * es + 1);
  if (in == NULL || out == NULL) {
    fprintf(stderr, "det_matrix: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < nin; i++)
    put(in, i, dt, value(g_rank, i, op, seed));
  const char *sb = in;
  char *rb = out;
  size_t e0 = 0;
  if (coll == C_REDUCE_SCATTER) {
    e0 = (size_t)g_rank * n;
    if (inplace)
      rb = in + e0 * es;
  } else if (inplace) {
    rb = in;
  }
  braid_result r;
  if (coll == C_ALLREDUCE)
    r = braid_allreduce(sb, rb, n, dt, (braid_op)op, c, NULL);
  else if (coll == C_REDUCE)
    r = braid_reduce(sb, rb, n, dt, (braid_op)op, root, c, NULL);
  else
    r = braid_reduce_scatter(sb, rb, n, dt, (braid_op)op, c, NULL);
  int bad = 0;
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "det_matrix rank %d [%s] %s: %s (%s)\n", g_rank, comm,
            coll_name[coll], braid_result_string(r), braid_comm_last_error(c));
    bad = 1;
  } else if (coll != C_REDUCE || g_rank == root) {
    bad = check(comm, coll, dt, op, n, inplace, rb, e0, seed);
  }
  tally(bad);
  free(in);
  free(out);
}

/* ---- communicators ------------------------------------------------------- */

static braid_comm *comm_with(braid_comm *world, const char *algo, int nch,
                             int det) {
  braid_unique_id id;
  if (g_rank == 0 && braid_get_unique_id(&id) != BRAID_SUCCESS)
    memset(&id, 0, sizeof id);
  if (braid_broadcast(&id, &id, sizeof id, BRAID_UINT8, 0, world, NULL) !=
      BRAID_SUCCESS)
    return NULL;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.algo = algo;
  cfg.nchannels = nch;
  cfg.deterministic = det;
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, g_n, &id, g_rank, &cfg);
  return r == BRAID_SUCCESS ? c : NULL;
}

/* A config field out of range, and a reduction's own filter entry that
 * names no deterministic algorithm, are refused. */
static void refusals(braid_comm *world) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.deterministic = 2;
  braid_comm *c = NULL;
  braid_unique_id id;
  memset(&id, 0, sizeof id);
  tally(braid_comm_init(&c, g_n, &id, g_rank, &cfg) != BRAID_ERR_INVALID_ARG);
  braid_comm *bad = comm_with(world, "allreduce:ring", 0, 1);
  if (bad != NULL) {
    fprintf(stderr, "det_matrix: allreduce:ring was taken\n");
    braid_comm_destroy(bad);
  }
  tally(bad != NULL);
}

static int parse_counts(const char *s, size_t *counts, int max) {
  int k = 0;
  while (*s && k < max) {
    char *end = NULL;
    counts[k++] = strtoull(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s)
      break;
  }
  return k;
}

int main(int argc, char **argv) {
  size_t counts[16] = {1, 7, 1023, 65539};
  int ncounts = 4;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--counts") && i + 1 < argc)
      ncounts = parse_counts(argv[++i], counts, 16);
    else if (!strcmp(argv[i], "--cfg"))
      g_cfg = 1;
  }
  braid_config wcfg;
  braid_config_init(&wcfg);
  wcfg.deterministic = g_cfg ? 1 : 0;
  braid_comm *world = NULL;
  braid_result r = braid_comm_init_env(&world, &wcfg);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "det_matrix: braid_comm_init_env: %s\n",
            braid_result_string(r));
    return 1;
  }
  braid_comm_rank(world, &g_rank);
  braid_comm_size(world, &g_n);
  const char *env = getenv("BRAID_DETERMINISTIC");
  if (!g_cfg && (env == NULL || strcmp(env, "1") != 0)) {
    fprintf(stderr, "det_matrix: set BRAID_DETERMINISTIC=1 or pass --cfg\n");
    return 1;
  }
  int det = g_cfg ? 1 : 0;
  struct {
    const char *name, *algo;
    int nch;
  } cs[] = {{"auto/1ch", NULL, 1},
            {"auto/4ch", NULL, 4},
            {"direct/2ch", "direct", 2},
            {"det/4ch", "det", 4}};
  enum { NCOMM = sizeof cs / sizeof cs[0] };
  braid_comm *comm[NCOMM];
  for (int k = 0; k < NCOMM; k++) {
    comm[k] = comm_with(world, cs[k].algo, cs[k].nch, det);
    if (comm[k] == NULL) {
      fprintf(stderr, "det_matrix rank %d: no communicator %s\n", g_rank,
              cs[k].name);
      return 1;
    }
  }
  static const int ops[] = {BRAID_SUM, BRAID_PROD, BRAID_MIN, BRAID_MAX,
                            BRAID_AVG};
  static const braid_dtype dts[] = {BRAID_FLOAT32, BRAID_BFLOAT16};
  int seed = 1;
  for (int ci = 0; ci < ncounts; ci++)
    for (int coll = 0; coll < NCOLL; coll++)
      for (int d = 0; d < 2; d++)
        for (int o = 0; o < 5; o++) {
          /* above 64K elements: sum and max only (the kernels are the
           * same at every size; the order is what changes) */
          if (counts[ci] > 65539 && ops[o] != BRAID_SUM && ops[o] != BRAID_MAX)
            continue;
          for (int ip = 0; ip < 2; ip++, seed++)
            for (int k = 0; k < NCOMM; k++)
              run_case(comm[k], cs[k].name, coll, dts[d], ops[o], counts[ci],
                       ip, seed);
        }
  refusals(world);
  for (int k = 0; k < NCOMM; k++)
    braid_comm_destroy(comm[k]);
  long fails = 0;
  braid_allreduce(&g_fail, &fails, 1, BRAID_INT64, BRAID_SUM, world, NULL);
  if (g_rank == 0)
    printf("det_matrix: %d ranks, %ld checks on rank 0, %ld failed on all "
           "ranks\n",
           g_n, g_pass + g_fail, fails);
  braid_comm_finalize(world);
  braid_comm_destroy(world);
  return fails != 0;
}
