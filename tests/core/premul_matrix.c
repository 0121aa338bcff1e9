/*
 * The pre-multiplied sum (braid_op_create_premul_sum) over real ranks:
 * allreduce, reduce and reduce_scatter, in and out of place, on int32,
 * float32, bfloat16 and float8_e4m3, on a blocking call and a host stream,
 * each rank with its own scalar (host), against the sum computed here
 * with values whose products and sums are exact in every order; then the
 * refusals: another dtype, another communicator, a destroyed op, a
 * built-in op, a device scalar that is host memory. Run as N ranks
 * (braidrun -n N premul_matrix).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

static int g_rank, g_n, g_fail;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: ", g_rank);                                    \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      g_fail++;                                                                \
    }                                                                          \
  } while (0)

/* rank r's scalar and input element i: small integers (scalar 1 to 3,
 * input 0 to 3), so every product and sum below 2^4 x ranks is exact */
static int scal(int r) { return r % 3 + 1; }
static int inval(int r, size_t i) { return (int)((i + (size_t)r) % 4); }

/* e4m3 of a small integer (exact up to 16) and back */
static uint8_t e4(int v) {
  if (v == 0)
    return 0;
  int e = 0;
  while ((v >> e) > 1)
    e++;
  int m = e >= 3 ? (v >> (e - 3)) & 7 : (v << (3 - e)) & 7;
  return (uint8_t)((e + 7) << 3 | m);
}

static void put(braid_dtype dt, void *b, size_t i, int v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  switch (dt) {
  case BRAID_INT32:
    ((int32_t *)b)[i] = v;
    break;
  case BRAID_FLOAT32:
    ((float *)b)[i] = f;
    break;
  case BRAID_BFLOAT16:
    ((uint16_t *)b)[i] = (uint16_t)(u >> 16);
    break;
  default:
    ((uint8_t *)b)[i] = e4(v);
    break;
  }
}

/* one call: coll 0 allreduce, 1 reduce (root n-1), 2 reduce_scatter */
static void one(braid_comm *c, braid_stream *s, braid_dtype dt, int coll,
                int inplace, size_t count) {
  size_t es = braid_dtype_size(dt), nin = coll == 2 ? count * g_n : count;
  char *in = calloc(nin + 1, es), *out = calloc(nin + 1, es);
  char *want = calloc(nin + 1, es);
  unsigned char sc[8];
  put(dt, sc, 0, scal(g_rank));
  braid_op op;
  braid_result r = braid_op_create_premul_sum(&op, sc, dt, 0, c);
  CHECK(r == BRAID_SUCCESS, "create: %s", braid_comm_last_error(c));
  put(dt, sc, 0, 99); /* read at creation: changing it now changes nothing */
  for (size_t i = 0; i < nin; i++)
    put(dt, in, i, inval(g_rank, i));
  size_t nout = coll == 2 ? count : count;
  size_t off = coll == 2 ? (size_t)g_rank * count : 0;
  for (size_t i = 0; i < nout; i++) {
    int sum = 0;
    for (int q = 0; q < g_n; q++)
      sum += scal(q) * inval(q, off + i);
    put(dt, want, i, sum);
  }
  void *dst = inplace ? in + (coll == 2 ? off * es : 0) : out;
  int root = g_n - 1;
  r = coll == 0   ? braid_allreduce(in, dst, count, dt, op, c, s)
      : coll == 1 ? braid_reduce(in, dst, count, dt, op, root, c, s)
                  : braid_reduce_scatter(in, dst, count, dt, op, c, s);
  if (r == BRAID_SUCCESS && s != NULL) {
    braid_result d = braid_op_destroy(op, c); /* queued: in use */
    CHECK(d == BRAID_ERR_INVALID_ARG || d == BRAID_SUCCESS,
          "destroy while queued: %s", braid_result_string(d));
    if (d == BRAID_SUCCESS) /* it had finished already: make a new one */
      braid_op_create_premul_sum(&op, sc, dt, 0, c);
    r = braid_stream_synchronize(s);
  }
  CHECK(r == BRAID_SUCCESS, "%s coll %d: %s (%s)", braid_dtype_name(dt), coll,
        braid_result_string(r), braid_comm_last_error(c));
  if (r == BRAID_SUCCESS && (coll != 1 || g_rank == root))
    for (size_t i = 0; i < nout; i++)
      if (memcmp((char *)dst + i * es, want + i * es, es) != 0) {
        CHECK(0, "%s coll %d inplace %d count %zu: element %zu wrong",
              braid_dtype_name(dt), coll, inplace, count, i);
        break;
      }
  braid_op_destroy(op, c);
  free(in);
  free(out);
  free(want);
}

static void refusals(braid_comm *c, braid_comm *other) {
  float one = 1.0f, x = 1.0f, y;
  braid_op op, op2;
  CHECK(braid_op_create_premul_sum(&op, &one, BRAID_FLOAT32, 0, c) ==
            BRAID_SUCCESS,
        "create");
  CHECK(strcmp(braid_op_name(op), "premul_sum") == 0, "name %s",
        braid_op_name(op));
  braid_result r = braid_allreduce(&x, &y, 1, BRAID_FLOAT64, op, c, NULL);
  CHECK(r == BRAID_ERR_INVALID_ARG &&
            strstr(braid_comm_last_error(c), "dtype float32"),
        "another dtype: %s (%s)", braid_result_string(r),
        braid_comm_last_error(c));
  r = braid_allreduce(&x, &y, 1, BRAID_FLOAT32, op, other, NULL);
  CHECK(r == BRAID_ERR_INVALID_ARG &&
            strstr(braid_comm_last_error(other), "another communicator"),
        "another communicator: %s (%s)", braid_result_string(r),
        braid_comm_last_error(other));
  CHECK(braid_op_destroy(op, other) == BRAID_ERR_INVALID_ARG,
        "destroy on another communicator");
  CHECK(braid_op_destroy(BRAID_SUM, c) == BRAID_ERR_INVALID_ARG,
        "destroy a built-in op");
  CHECK(braid_op_destroy(op, c) == BRAID_SUCCESS, "destroy");
  CHECK(braid_op_destroy(op, c) == BRAID_ERR_INVALID_ARG &&
            strstr(braid_comm_last_error(c), "destroyed"),
        "destroy twice: %s", braid_comm_last_error(c));
  /* the slot's next op has another handle: the old one stays invalid */
  CHECK(braid_op_create_premul_sum(&op2, &one, BRAID_FLOAT32, 0, c) ==
                BRAID_SUCCESS &&
            op2 != op,
        "reuse");
  r = braid_allreduce(&x, &y, 1, BRAID_FLOAT32, op, c, NULL);
  CHECK(r == BRAID_ERR_INVALID_ARG, "a destroyed op: %s",
        braid_result_string(r));
  braid_op_destroy(op2, c);
  CHECK(braid_op_create_premul_sum(&op, &one, BRAID_FLOAT32, 1, c) ==
            BRAID_ERR_INVALID_ARG,
        "a host scalar said to be on the device");
  CHECK(braid_op_create_premul_sum(&op, &one, BRAID_BOOL, 0, c) ==
            BRAID_ERR_INVALID_ARG,
        "bool");
  CHECK(braid_op_create_premul_sum(NULL, &one, BRAID_FLOAT32, 0, c) ==
            BRAID_ERR_INVALID_ARG,
        "NULL op");
  /* the communicator is still usable */
  r = braid_allreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  CHECK(r == BRAID_SUCCESS && y == (float)g_n, "usable after refusals");
}

int main(void) {
  braid_comm *c = NULL, *other = NULL;
  if (braid_comm_init_env(&c, NULL) != BRAID_SUCCESS)
    return 1;
  braid_comm_rank(c, &g_rank);
  braid_comm_size(c, &g_n);
  if (braid_comm_split(c, 0, g_rank, &other) != BRAID_SUCCESS)
    return 1;
  braid_stream *s = NULL;
  braid_stream_create(&s);
  static const braid_dtype dts[] = {BRAID_INT32, BRAID_FLOAT32, BRAID_BFLOAT16,
                                    BRAID_FLOAT8_E4M3};
  static const size_t counts[] = {1, 7, 1023, 70001};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (int coll = 0; coll < 3; coll++)
      for (int ip = 0; ip < 2; ip++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
          one(c, k % 2 ? s : NULL, dts[d], coll, ip, counts[k]);
  refusals(c, other);
  braid_stream_destroy(s);
  braid_comm_finalize(other);
  braid_comm_destroy(other);
  braid_comm_finalize(c);
  braid_comm_destroy(c);
  if (g_rank == 0 || g_fail)
    printf("premul_matrix rank %d of %d: %d failed\n", g_rank, g_n, g_fail);
  return g_fail ? 1 : 0;
}
