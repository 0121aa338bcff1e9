/*
 * The correctness matrix: every collective x dtype x op x count x in/out of
 * place, checked element by element against exactly computed values
 * (integers stored in every dtype, chosen so that sums, products and averages
 * stay exact). Run as N ranks (braidrun -n N coll_matrix [--counts a,b,..]).
 * Exits non-zero on any wrong element, printing the first few.
 *
 * int16, bool and the bitwise ops (band, bor, bxor) run at every count up
 * to --new-max (65539 by default) and, above it, in two pairs only (int16
 * bxor, bool band): their kernels are the same templates at every size,
 * and the matrix's time goes to its largest counts. alltoallv
 * runs with uneven counts, zeros among them, and gaps between the blocks.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

#include "coll_values.h"

#define GUARD 16
static const int64_t guard_val = 77;

/* Buffers are kept and reused from call to call: a fresh allocation of
 * megabytes is fresh pages, and faulting them in took most of the matrix's
 * time (more than the collectives). A call holds at most two buffers. Under
 * AddressSanitizer each buffer is its own allocation again, so that a read
 * past its end is caught. */
#if defined(__SANITIZE_ADDRESS__)
#define MATRIX_EXACT_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MATRIX_EXACT_ALLOC 1
#endif
#endif

#ifndef MATRIX_EXACT_ALLOC
static struct {
  void *p;
  size_t cap;
  int used;
} g_bufs[2];
#endif

static void *buf_get(size_t bytes) {
#ifdef MATRIX_EXACT_ALLOC
  return malloc(bytes);
#else
  for (int i = 0; i < 2; i++) {
    if (g_bufs[i].used)
      continue;
    if (g_bufs[i].cap < bytes) {
      free(g_bufs[i].p);
      g_bufs[i].p = malloc(bytes);
      g_bufs[i].cap = g_bufs[i].p != NULL ? bytes : 0;
      if (g_bufs[i].p == NULL)
        return NULL;
    }
    g_bufs[i].used = 1;
    return g_bufs[i].p;
  }
  fprintf(stderr, "rank %d: a call asked for a third buffer\n", g_rank);
  exit(3);
#endif
}

/* Gives back a buffer of alloc() (NULL: nothing). */
static void release(void *p) {
#ifdef MATRIX_EXACT_ALLOC
  free(p);
#else
  for (int i = 0; p != NULL && i < 2; i++)
    if (g_bufs[i].p == p && g_bufs[i].used) {
      g_bufs[i].used = 0;
      return;
    }
  if (p != NULL) {
    fprintf(stderr, "rank %d: release of a buffer not in use\n", g_rank);
    exit(3);
  }
#endif
}

/* The body is poisoned with 0xa5 bytes (no expected value looks like that
 * in any dtype), the tail holds guard values. */
static void *alloc(size_t n, braid_dtype dt) {
  size_t es = braid_dtype_size(dt);
  char *p = buf_get((n + GUARD) * es + 64);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    exit(3);
  }
  memset(p, 0xa5, n * es);
  for (size_t i = n; i < n + GUARD; i++)
    put(p, i, dt, guard_val);
  return p;
}

static int check_guard(const void *buf, size_t n, braid_dtype dt,
                       const char *what) {
  for (size_t i = n; i < n + GUARD; i++)
    if (get(buf, i, dt) != as_dtype(guard_val, dt)) {
      fprintf(stderr, "rank %d: %s wrote past the end of recvbuf\n", g_rank,
              what);
      return 1;
    }
  return 0;
}

static void tally(int bad, const char *what) {
  if (bad)
    g_fail++;
  else
    g_pass++;
  (void)what;
}

static int call_ok(braid_result r, braid_comm *c, const char *what) {
  if (r == BRAID_SUCCESS)
    return 1;
  fprintf(stderr, "rank %d: %s failed: %s (%s)\n", g_rank, what,
          braid_result_string(r), braid_comm_last_error(c));
  g_fail++;
  return 0;
}

/* ---- the tests ----------------------------------------------------------- */

static void t_allreduce(braid_comm *c, braid_dtype dt, int op, size_t n,
                        int inplace) {
  void *out = alloc(n, dt);
  void *in = inplace ? out : alloc(n, dt);
  fill(in, n, dt, g_rank, op, 0);
  if (call_ok(braid_allreduce(in, out, n, dt, (braid_op)op, c, NULL), c,
              "allreduce")) {
    int bad = check_guard(out, n, dt, "allreduce");
    int walk = !bad && !matches(out, n, dt, EXPECT, op, 0);
    for (size_t i = 0; walk && i < n && !bad; i++) {
      double w = want_reduce(i, op, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("allreduce", dt, op, n, inplace, i, g, w);
    }
    tally(bad, "allreduce");
  }
  if (!inplace)
    release(in);
  release(out);
}

/* Every rank gets the same bits from an allreduce, whatever the algorithm:
 * float32 min and max of signed zeros (equal operands give the second,
 * src/reduce.h), where the order in which a rank folds its operands shows
 * in the sign. The results are gathered and compared byte for byte. */
static void t_same_bits(braid_comm *c, int op, size_t n, int inplace) {
  const braid_dtype dt = BRAID_FLOAT32;
  float *out = alloc(n, dt);
  float *in = inplace ? out : alloc(n, dt);
  for (size_t i = 0; i < n; i++)
    in[i] = (g_rank + i) % 2 ? -0.0f : 0.0f;
  int ok = call_ok(braid_allreduce(in, out, n, dt, (braid_op)op, c, NULL), c,
                   "allreduce of signed zeros");
  if (!inplace)
    release(in); /* two buffers at a time (buf_get) */
  float *all = alloc(n * (size_t)g_n, dt);
  if (ok && call_ok(braid_allgather(out, all, n, dt, c, NULL), c,
                    "allgather of the results")) {
    int bad = 0;
    for (int q = 1; q < g_n && !bad; q++)
      for (size_t i = 0; i < n && !bad; i++)
        if (signbit(all[(size_t)q * n + i]) != signbit(all[i]) ||
            all[(size_t)q * n + i] != 0.0f) {
          fprintf(stderr,
                  "rank %d: allreduce %s of signed zeros, count %zu, %s: "
                  "element %zu is %g on rank %d, %g on rank 0\n",
                  g_rank, braid_op_name((braid_op)op), n,
                  inplace ? "in place" : "out of place", i,
                  (double)all[(size_t)q * n + i], q, (double)all[i]);
          bad = 1;
        }
    tally(bad, "allreduce of signed zeros");
  }
  release(all);
  release(out);
}

static void t_reduce(braid_comm *c, braid_dtype dt, int op, size_t n,
                     int inplace, int root) {
  int me_root = g_rank == root;
  void *out = me_root ? alloc(n, dt) : NULL;
  void *in = (inplace && me_root) ? out : alloc(n, dt);
  fill(in, n, dt, g_rank, op, 0);
  if (call_ok(braid_reduce(in, out, n, dt, (braid_op)op, root, c, NULL), c,
              "reduce")) {
    int bad = 0;
    if (me_root) {
      bad = check_guard(out, n, dt, "reduce");
      int walk = !bad && !matches(out, n, dt, EXPECT, op, 0);
      for (size_t i = 0; walk && i < n && !bad; i++) {
        double w = want_reduce(i, op, dt), g = get(out, i, dt);
        if (g != w)
          bad = report("reduce", dt, op, n, inplace, i, g, w);
      }
    } else if (!inplace && !matches(in, n, dt, g_rank, op, 0)) {
      for (size_t i = 0; i < n && !bad; i++) /* sendbuf untouched */
        if (get(in, i, dt) != as_dtype(val(g_rank, i, vop_of(dt, op)), dt))
          bad = report("reduce(sendbuf)", dt, op, n, inplace, i, get(in, i, dt),
                       as_dtype(val(g_rank, i, vop_of(dt, op)), dt));
    }
    tally(bad, "reduce");
  }
  if (in != out)
    release(in);
  release(out);
}

static void t_reduce_scatter(braid_comm *c, braid_dtype dt, int op, size_t n,
                             int inplace) {
  size_t total = n * (size_t)g_n;
  void *in = alloc(total, dt);
  fill(in, total, dt, g_rank, op, 0);
  void *out = inplace ? (char *)in + (size_t)g_rank * n * braid_dtype_size(dt)
                      : alloc(n, dt);
  if (call_ok(braid_reduce_scatter(in, out, n, dt, (braid_op)op, c, NULL), c,
              "reduce_scatter")) {
    int bad = inplace ? 0 : check_guard(out, n, dt, "reduce_scatter");
    int walk = !bad && !matches(out, n, dt, EXPECT, op, (size_t)g_rank * n);
    for (size_t i = 0; walk && i < n && !bad; i++) {
      size_t gi = (size_t)g_rank * n + i;
      double w = want_reduce(gi, op, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("reduce_scatter", dt, op, n, inplace, i, g, w);
    }
    tally(bad, "reduce_scatter");
  }
  if (!inplace)
    release(out);
  release(in);
}

static void t_broadcast(braid_comm *c, braid_dtype dt, size_t n, int inplace,
                        int root) {
  void *out = alloc(n, dt);
  void *in = NULL;
  if (g_rank == root) {
    in = inplace ? out : alloc(n, dt);
    fill(in, n, dt, root, -1, 0);
  }
  if (call_ok(braid_broadcast(in, out, n, dt, root, c, NULL), c, "broadcast")) {
    int bad = check_guard(out, n, dt, "broadcast");
    int walk = !bad && !matches(out, n, dt, root, -1, 0);
    for (size_t i = 0; walk && i < n && !bad; i++) {
      double w = want_data(root, i, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("broadcast", dt, -1, n, inplace, i, g, w);
    }
    tally(bad, "broadcast");
  }
  if (in != NULL && in != out)
    release(in);
  release(out);
}

static void t_allgather(braid_comm *c, braid_dtype dt, size_t n, int inplace) {
  size_t total = n * (size_t)g_n, es = braid_dtype_size(dt);
  void *out = alloc(total, dt);
  void *in = inplace ? (char *)out + (size_t)g_rank * n * es : alloc(n, dt);
  fill(in, n, dt, g_rank, -1, 0);
  if (call_ok(braid_allgather(in, out, n, dt, c, NULL), c, "allgather")) {
    int bad = check_guard(out, total, dt, "allgather");
    int walk = !bad && !blocks_match(out, n, dt, g_n, 1);
    for (size_t i = 0; walk && i < total && !bad; i++) {
      double w = want_data((int)(i / n), i % n, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("allgather", dt, -1, n, inplace, i, g, w);
    }
    tally(bad, "allgather");
  }
  if (!inplace)
    release(in);
  release(out);
}

static void t_gather(braid_comm *c, braid_dtype dt, size_t n, int inplace,
                     int root) {
  size_t total = n * (size_t)g_n, es = braid_dtype_size(dt);
  int me_root = g_rank == root;
  void *out = me_root ? alloc(total, dt) : NULL;
  void *in =
      (inplace && me_root) ? (char *)out + (size_t)root * n * es : alloc(n, dt);
  fill(in, n, dt, g_rank, -1, 0);
  if (call_ok(braid_gather(in, out, n, dt, root, c, NULL), c, "gather")) {
    int bad = 0;
    if (me_root) {
      bad = check_guard(out, total, dt, "gather");
      int walk = !bad && !blocks_match(out, n, dt, g_n, 1);
      for (size_t i = 0; walk && i < total && !bad; i++) {
        double w = want_data((int)(i / n), i % n, dt), g = get(out, i, dt);
        if (g != w)
          bad = report("gather", dt, -1, n, inplace, i, g, w);
      }
    }
    tally(bad, "gather");
  }
  if (!(inplace && me_root))
    release(in);
  release(out);
}

static void t_scatter(braid_comm *c, braid_dtype dt, size_t n, int inplace,
                      int root) {
  size_t total = n * (size_t)g_n, es = braid_dtype_size(dt);
  int me_root = g_rank == root;
  void *in = NULL;
  if (me_root) {
    in = alloc(total, dt);
    fill(in, total, dt, root, -1, 0);
  }
  void *out =
      (inplace && me_root) ? (char *)in + (size_t)root * n * es : alloc(n, dt);
  if (call_ok(braid_scatter(in, out, n, dt, root, c, NULL), c, "scatter")) {
    int bad = (inplace && me_root) ? 0 : check_guard(out, n, dt, "scatter");
    int walk = !bad && !matches(out, n, dt, root, -1, (size_t)g_rank * n);
    for (size_t i = 0; walk && i < n && !bad; i++) {
      double w = want_data(root, (size_t)g_rank * n + i, dt),
             g = get(out, i, dt);
      if (g != w)
        bad = report("scatter", dt, -1, n, inplace, i, g, w);
    }
    tally(bad, "scatter");
  }
  if (!(inplace && me_root))
    release(out);
  release(in);
}

static void t_alltoall(braid_comm *c, braid_dtype dt, size_t n, int inplace) {
  size_t total = n * (size_t)g_n;
  void *out = alloc(total, dt);
  void *in = inplace ? out : alloc(total, dt);
  fill(in, total, dt, g_rank, -1, 0);
  if (call_ok(braid_alltoall(in, out, n, dt, c, NULL), c, "alltoall")) {
    int bad = check_guard(out, total, dt, "alltoall");
    int walk = !bad && !blocks_match(out, n, dt, g_n, 0);
    for (size_t i = 0; walk && i < total && !bad; i++) {
      int from = (int)(i / n);
      size_t src = (size_t)g_rank * n + i % n;
      double w = want_data(from, src, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("alltoall", dt, -1, n, inplace, i, g, w);
    }
    tally(bad, "alltoall");
  }
  if (!inplace)
    release(in);
  release(out);
}

static void t_sendrecv(braid_comm *c, braid_dtype dt, size_t n) {
  int to = (g_rank + 1) % g_n, from = (g_rank + g_n - 1) % g_n;
  void *in = alloc(n, dt), *out = alloc(n, dt);
  fill(in, n, dt, g_rank, -1, 0);
  braid_group_start();
  braid_result r1 = braid_send(in, n, dt, to, c, NULL);
  braid_result r2 = braid_recv(out, n, dt, from, c, NULL);
  braid_result r3 = braid_group_end();
  if (call_ok(r1, c, "send") && call_ok(r2, c, "recv") &&
      call_ok(r3, c, "group_end(send/recv)")) {
    int bad = check_guard(out, n, dt, "recv");
    int walk = !bad && !matches(out, n, dt, from, -1, 0);
    for (size_t i = 0; walk && i < n && !bad; i++) {
      double w = want_data(from, i, dt), g = get(out, i, dt);
      if (g != w)
        bad = report("sendrecv", dt, -1, n, 0, i, g, w);
    }
    tally(bad, "sendrecv");
  }
  release(in);
  release(out);
}

/* alltoallv: rank i sends rank j cnt(i, j) elements, uneven and zero for
 * some pairs (rank i's own block among them), from element j * 11 of its
 * data; send blocks lie in reverse rank order, receive blocks in rank
 * order, with gaps between them that must stay untouched. */
static size_t a2av_cnt(int i, int j, size_t n) {
  if (n == 0 || (i * 7 + j * 3) % 5 == 2 || (i == 1 && j == 1))
    return 0; /* 1 -> 0, 2 -> 1, 3 -> 2, and rank 1's own block */
  return n + (size_t)((i * 3 + j) % 5);
}

static void t_alltoallv(braid_comm *c, braid_dtype dt, size_t n) {
  size_t es = braid_dtype_size(dt);
  size_t *a = malloc(sizeof *a * 4 * (size_t)g_n);
  if (a == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    exit(3);
  }
  size_t *sc = a, *sd = a + g_n, *rc = a + 2 * g_n, *rd = a + 3 * g_n;
  size_t stot = 0, rtot = 0;
  for (int j = g_n - 1; j >= 0; j--) {
    sc[j] = a2av_cnt(g_rank, j, n);
    sd[j] = stot;
    stot += sc[j] + 1;
  }
  for (int j = 0; j < g_n; j++) {
    rc[j] = a2av_cnt(j, g_rank, n);
    rd[j] = rtot;
    rtot += rc[j] + 2;
  }
  void *in = alloc(stot, dt), *out = alloc(rtot, dt);
  for (int j = 0; j < g_n; j++)
    fill((char *)in + sd[j] * es, sc[j], dt, g_rank, -1, (size_t)j * 11);
  if (call_ok(braid_alltoallv(in, sc, sd, out, rc, rd, dt, c, NULL), c,
              "alltoallv")) {
    int bad = check_guard(out, rtot, dt, "alltoallv");
    for (int j = 0; j < g_n && !bad; j++) {
      const char *blk = (const char *)out + rd[j] * es;
      if (!matches(blk, rc[j], dt, j, -1, (size_t)g_rank * 11))
        for (size_t k = 0; k < rc[j] && !bad; k++) {
          double w = want_data(j, (size_t)g_rank * 11 + k, dt),
                 g = get(blk, k, dt);
          if (g != w)
            bad = report("alltoallv", dt, -1, n, 0, rd[j] + k, g, w);
        }
      for (size_t k = rc[j]; k < rc[j] + 2 && !bad; k++)
        if (((const unsigned char *)blk)[k * es] != 0xa5) {
          fprintf(stderr,
                  "rank %d: alltoallv %s wrote into the gap after "
                  "rank %d's block\n",
                  g_rank, braid_dtype_name(dt), j);
          bad = 1;
        }
    }
    tally(bad, "alltoallv");
  }
  release(in);
  release(out);
  free(a);
}

/* int16, bool and the bitwise ops; above --new-max only a few pairs run. */
static int is_new(braid_dtype dt, int op) {
  return dt == BRAID_INT16 || dt == BRAID_BOOL || op >= BRAID_BAND;
}
static int large_pair(braid_dtype dt, int op) {
  return (dt == BRAID_FLOAT8_E4M3 && op == BRAID_SUM) ||
         (dt == BRAID_INT16 && op == BRAID_BXOR) ||
         (dt == BRAID_BOOL && op == BRAID_BAND);
}
/* On device buffers (tests/cuda/test_gpu_matrix.h force-included), braid
 * refuses reductions of int16 or bool or with a bitwise op
 * (BRAID_ERR_UNSUPPORTED, docs/CUDA.md): the matrix checks the refusal
 * instead; their data movement runs as everywhere. */
#ifdef BRAID_TEST_GPU_MATRIX_H
static int dev_refuses(braid_dtype dt, int op) { return is_new(dt, op); }
#else
static int dev_refuses(braid_dtype dt, int op) {
  (void)dt;
  (void)op;
  return 0;
}
#endif

static void t_refused(braid_comm *c, braid_dtype dt, int op, size_t n) {
  void *in = alloc(n, dt), *out = alloc(n, dt);
  fill(in, n, dt, g_rank, op, 0);
  braid_result r = braid_allreduce(in, out, n, dt, (braid_op)op, c, NULL);
  int bad = r != BRAID_ERR_UNSUPPORTED ||
            strstr(braid_comm_last_error(c), "device buffers") == NULL;
  if (bad && g_fail < 20)
    fprintf(stderr,
            "rank %d: allreduce %s %s on device buffers: %s (%s), expected "
            "unsupported\n",
            g_rank, braid_dtype_name(dt), braid_op_name((braid_op)op),
            braid_result_string(r), braid_comm_last_error(c));
  tally(bad, "refused");
  release(in);
  release(out);
}

/* Pairs braid refuses (the scenarios check the refusal). */
static int valid_pair(braid_dtype dt, int op) {
  int flt = dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 ||
            dt == BRAID_FLOAT32 || dt == BRAID_FLOAT64 || is_fp8(dt);
  return !(flt && op >= BRAID_BAND) && !(dt == BRAID_BOOL && op == BRAID_AVG);
}

int main(int argc, char **argv) {
  size_t counts[16] = {0, 1, 7, 1023, (1u << 20) + 3};
  int ncounts = 5;
  const char *only = NULL;
  size_t new_max = 65539;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--counts") == 0 && a + 1 < argc) {
      ncounts = 0;
      char *s = argv[++a];
      for (char *t = strtok(s, ","); t && ncounts < 16; t = strtok(NULL, ","))
        counts[ncounts++] = strtoull(t, NULL, 10);
    } else if (strcmp(argv[a], "--only") == 0 && a + 1 < argc) {
      only = argv[++a];
    } else if (strcmp(argv[a], "--new-max") == 0 && a + 1 < argc) {
      new_max = strtoull(argv[++a], NULL, 10);
    } else {
      fprintf(stderr, "usage: coll_matrix [--counts a,b,...] [--only name] "
                      "[--new-max count]\n");
      return 2;
    }
  }
  braid_comm *c = NULL;
  braid_result r = braid_comm_init_env(&c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "coll_matrix: braid_comm_init_env: %s\n",
            braid_result_string(r));
    return 1;
  }
  braid_comm_rank(c, &g_rank);
  braid_comm_size(c, &g_n);
  int root = g_n - 1; /* a root other than 0 where there is one */
#define RUN(name) (only == NULL || strcmp(only, name) == 0)
  for (int ci = 0; ci < ncounts; ci++) {
    size_t n = counts[ci];
    int large = n > new_max;
    for (int d = 0; d < BRAID_NUM_DTYPES; d++) {
      braid_dtype dt = (braid_dtype)d;
      /* data movement of the new dtypes: int16 at every count, bool (bytes,
       * as uint8) up to new_max */
      int moves = !(large && dt == BRAID_BOOL);
      for (int ip = 0; ip < 2; ip++) {
        for (int op = 0; op < BRAID_NUM_OPS; op++) {
          if (!valid_pair(dt, op) ||
              (large && (is_new(dt, op) || is_fp8(dt)) && !large_pair(dt, op)))
            continue;
          if (dev_refuses(dt, op)) {
            if (ip == 0 && n > 0 && !large && RUN("allreduce"))
              t_refused(c, dt, op, n);
            continue;
          }
          if (RUN("allreduce"))
            t_allreduce(c, dt, op, n, ip);
          if (RUN("reduce"))
            t_reduce(c, dt, op, n, ip, root);
          if (RUN("reduce_scatter"))
            t_reduce_scatter(c, dt, op, n, ip);
        }
        if (RUN("allreduce") && dt == BRAID_FLOAT32) {
          t_same_bits(c, BRAID_MIN, n, ip);
          t_same_bits(c, BRAID_MAX, n, ip);
        }
        if (!moves)
          continue;
        if (RUN("broadcast"))
          t_broadcast(c, dt, n, ip, root);
        if (RUN("allgather"))
          t_allgather(c, dt, n, ip);
        if (RUN("gather"))
          t_gather(c, dt, n, ip, root);
        if (RUN("scatter"))
          t_scatter(c, dt, n, ip, root);
        if (RUN("alltoall"))
          t_alltoall(c, dt, n, ip);
      }
      if (RUN("sendrecv") && moves)
        t_sendrecv(c, dt, n);
      /* alltoallv: every dtype up to new_max, above it one */
      if (RUN("alltoallv") && (!large || dt == BRAID_FLOAT32))
        t_alltoallv(c, dt, n);
    }
    if (RUN("barrier"))
      tally(!call_ok(braid_barrier(c, NULL), c, "barrier"), "barrier");
  }
  r = braid_comm_finalize(c);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: finalize: %s (%s)\n", g_rank,
            braid_result_string(r), braid_comm_last_error(c));
    g_fail++;
  }
  braid_comm_destroy(c);
  if (g_rank == 0 || g_fail > 0)
    printf("coll_matrix rank %d of %d: %ld passed, %ld failed\n", g_rank, g_n,
           g_pass, g_fail);
  return g_fail > 0 ? 1 : 0;
}
