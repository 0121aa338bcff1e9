/*
 * Calls that differ between ranks, without BRAID_CHECK: every collective's
 * messages carry a fingerprint of the call (src/check.c), and the receiving
 * transport (shm, tcp, ofi) refuses one from another call with
 * BRAID_ERR_MISMATCH and a message naming both. Each case runs two ranks
 * whose second call differs in one thing (kind, op, dtype of the same size,
 * count, root); no rank may return success from a call whose data it then
 * got wrong, and none may hang. Ranks also see each other's long waits
 * (src/exec_wait.c; shm: segment headers, tcp: notes on the control
 * connections): two that each wait for the other in different calls (a
 * reduce whose root they disagree on) are a mismatch too. ofi (over
 * libfabric's tcp;ofi_rxm and shm providers, skipped where absent) runs the
 * cases whose messages meet a rank of the other call: it has no wait notes.
 *
 * With three or four ranks, one differing from the rest, the rank that
 * finds the mismatch tells every other rank (tp_ops.tell_mismatch): ranks
 * that never met a message of the odd call fail with it too, naming both
 * calls and the rank that found it, while the finders stay in the
 * communicator. With BRAID_TIMEOUT at 60 s, BRAID_ERR_MISMATCH rather than
 * BRAID_ERR_TIMEOUT on every rank shows that nobody waited for the timeout.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"

typedef enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_NONE } kind;

typedef struct call {
  kind k;
  braid_dtype dt;
  braid_op op;
  size_t count;
  int root;
} call;

typedef struct fp_case {
  const char *name, *tp;
  call calls[2]; /* rank 0's and rank 1's second call */
  /* where the mismatch shows: 0 in that call, 1 in the allreduce after it
   * (no rank receives in the differing call: two ranks that each think
   * they are the root of a broadcast both send, and nobody reads) */
  int later;
  const char *words[2]; /* in the message of a rank that saw it */
  int waits; /* only the ranks' wait notes show it: no message meets */
} fp_case;

static braid_result run_call(const call *k, braid_comm *c, void *buf) {
  switch (k->k) {
  case K_ALLREDUCE:
    return braid_allreduce(buf, buf, k->count, k->dt, k->op, c, NULL);
  case K_BROADCAST:
    return braid_broadcast(buf, buf, k->count, k->dt, k->root, c, NULL);
  case K_REDUCE:
    return braid_reduce(buf, buf, k->count, k->dt, k->op, k->root, c, NULL);
  case K_NONE:
    return BRAID_SUCCESS;
  }
  return BRAID_ERR_INTERNAL;
}

/* Rank's message: "<result of the differing call>|<of the call after>|<the
 * last error>". Exit 0 unless the harness itself failed. */
static int rank_fp(int rank, int nranks, const braid_unique_id *id, void *arg,
                   char *msg, size_t len) {
  const fp_case *t = arg;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = t->tp;
  cfg.timeout_ms = 20000;
  cfg.check = -1; /* not BRAID_CHECK's agreement: the messages' own check */
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, nranks, id, rank, &cfg);
  if (r == BRAID_ERR_UNSUPPORTED) {
    snprintf(msg, len, "unsupported");
    return 0;
  }
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "init: %s", braid_result_string(r));
    return 1;
  }
  float buf[64] = {0};
  /* one call alike first: the connections are up and in step */
  r = braid_allreduce(buf, buf, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "first call: %s", braid_comm_last_error(c));
    return 2;
  }
  braid_result r1 = run_call(&t->calls[rank], c, buf);
  braid_result r2 =
      r1 == BRAID_SUCCESS
          ? braid_allreduce(buf, buf, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL)
          : BRAID_SUCCESS;
  snprintf(msg, len, "%d|%d|%s", (int)r1, (int)r2, braid_comm_last_error(c));
  braid_comm_abort(c);
  return 0;
}

static void run_case(const fp_case *t) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  int bad = run_ranks(2, &id, rank_fp, (void *)t, 60000, p);
  cr_assert_eq(bad, 0, "%s over %s: a rank failed or hung", t->name, t->tp);
  if (strcmp(p[0].msg, "unsupported") == 0 ||
      strcmp(p[1].msg, "unsupported") == 0)
    cr_skip_test("%s is not available here (BRAID_OFI_PROVIDER=%s)", t->tp,
                 getenv("BRAID_OFI_PROVIDER"));
  int saw = 0;
  for (int r = 0; r < 2; r++) {
    int r1 = -1, r2 = -1;
    char *text = NULL;
    cr_assert(sscanf(p[r].msg, "%d|%d|", &r1, &r2) == 2,
              "%s over %s, rank %d: %s", t->name, t->tp, r, p[r].msg);
    text = strchr(strchr(p[r].msg, '|') + 1, '|') + 1;
    int where = t->later ? r2 : r1;
    /* no success where the mismatch must show (the peer may have given up
     * first: then this rank sees it leave) */
    cr_expect(t->later ? r1 == BRAID_SUCCESS && r2 != BRAID_SUCCESS
                       : r1 != BRAID_SUCCESS,
              "%s over %s, rank %d: results %d, %d: %s", t->name, t->tp, r, r1,
              r2, text);
    if (where == BRAID_ERR_MISMATCH) {
      saw++;
      for (int w = 0; w < 2; w++)
        cr_expect(strstr(text, t->words[w]) != NULL,
                  "%s over %s, rank %d: no '%s' in: %s", t->name, t->tp, r,
                  t->words[w], text);
      cr_expect(strstr(text, "collective mismatch: rank ") != NULL,
                "%s over %s, rank %d: %s", t->name, t->tp, r, text);
    }
  }
  cr_expect(saw >= 1, "%s over %s: no rank reported BRAID_ERR_MISMATCH",
            t->name, t->tp);
}

#define AR(dt, op, n)                                                          \
  { K_ALLREDUCE, dt, op, n, 0 }
#define F32 BRAID_FLOAT32

static const fp_case cases[] = {
    {"op",
     "",
     {AR(F32, BRAID_SUM, 16), AR(F32, BRAID_MAX, 16)},
     0,
     {"sum", "max"},
     0},
    {"dtype of the same size",
     "",
     {AR(F32, BRAID_SUM, 16), AR(BRAID_INT32, BRAID_SUM, 16)},
     0,
     {"float32", "int32"},
     0},
    {"count",
     "",
     {AR(F32, BRAID_SUM, 16), AR(F32, BRAID_SUM, 12)},
     0,
     {"another count", "allreduce"},
     0},
    {"kind",
     "",
     {AR(F32, BRAID_SUM, 16), {K_BROADCAST, F32, BRAID_SUM, 16, 0}},
     0,
     {"broadcast", "allreduce"},
     0},
    {"root of reduce",
     "",
     {{K_REDUCE, F32, BRAID_SUM, 16, 0}, {K_REDUCE, F32, BRAID_SUM, 16, 1}},
     0,
     {"root 1", "root 0"},
     1},
    {"root of broadcast",
     "",
     {{K_BROADCAST, F32, BRAID_SUM, 16, 0},
      {K_BROADCAST, F32, BRAID_SUM, 16, 1}},
     1,
     {"broadcast", "allreduce"},
     0},
};

static void run_all(const char *tp) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fp_case t = cases[i];
    t.tp = tp;
    if (t.waits && strcmp(tp, "ofi") == 0)
      continue;
    run_case(&t);
  }
}

Test(call_fp, differing_calls_found_over_shm, .timeout = 240) {
  run_all("shm");
}

Test(call_fp, differing_calls_found_over_tcp, .timeout = 240) {
  run_all("tcp");
}

/* the fingerprint in each message's remote CQ data (transports/ofi/ofi.c) */
Test(call_fp, differing_calls_found_over_ofi_tcp, .timeout = 240) {
  setenv("BRAID_OFI_PROVIDER", "tcp;ofi_rxm", 1);
  run_all("ofi");
}

Test(call_fp, differing_calls_found_over_ofi_shm, .timeout = 240) {
  setenv("BRAID_OFI_PROVIDER", "shm", 1);
  run_all("ofi");
}

/* ---- several ranks: the others are told ------------------------------- */

typedef struct told_case {
  const char *name, *tp;
  const char *algo; /* ring: ranks 2 and 3 never receive from rank 0 */
  int nranks;
  call odd, rest; /* rank 0's differing call, and everyone else's */
  const char *words[2];
  braid_unique_id side; /* a second communicator's, to wait for the rest */
} told_case;

/* "<differing call>|<the call after>|<the last error>". The finders stay
 * in the communicator until every rank has its answer (a barrier on a
 * second communicator), so nobody learns of the mismatch by seeing a rank
 * leave. */
static int rank_told(int rank, int nranks, const braid_unique_id *id, void *arg,
                     char *msg, size_t len) {
  const told_case *t = arg;
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = t->tp;
  cfg.timeout_ms = 60000;
  cfg.check = -1;
  cfg.algo = t->algo;
  braid_comm *c = NULL, *side = NULL;
  braid_result r = braid_comm_init(&c, nranks, id, rank, &cfg);
  if (r == BRAID_SUCCESS)
    r = braid_comm_init(&side, nranks, &t->side, rank, &cfg);
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "init: %s", braid_result_string(r));
    return 1;
  }
  float buf[64] = {0};
  r = braid_allreduce(buf, buf, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    snprintf(msg, len, "first call: %s", braid_comm_last_error(c));
    return 2;
  }
  braid_result r1 = run_call(rank == 0 ? &t->odd : &t->rest, c, buf);
  /* a later call: fails at once once the communicator is broken */
  braid_result r2 =
      braid_allreduce(buf, buf, 16, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  snprintf(msg, len, "%d|%d|%s", (int)r1, (int)r2, braid_comm_last_error(c));
  r = braid_barrier(side, NULL);
  braid_comm_abort(c);
  braid_comm_destroy(side);
  return r == BRAID_SUCCESS ? 0 : 3;
}

static void run_told(told_case *t) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(boot_unique_id(&t->side), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  int bad = run_ranks(t->nranks, &id, rank_told, t, 120000, p);
  cr_assert_eq(bad, 0, "%s over %s: a rank failed or hung", t->name, t->tp);
  int told = 0;
  for (int r = 0; r < t->nranks; r++) {
    int r1 = -1, r2 = -1;
    cr_assert(sscanf(p[r].msg, "%d|%d|", &r1, &r2) == 2,
              "%s over %s, rank %d: %s", t->name, t->tp, r, p[r].msg);
    const char *text = strchr(strchr(p[r].msg, '|') + 1, '|') + 1;
    /* a rank whose part of the differing call is legitimately done (it
     * sent its data to the root it knows) fails in the call after */
    int first = r1 != BRAID_SUCCESS ? r1 : r2;
    cr_expect_eq(first, BRAID_ERR_MISMATCH,
                 "%s over %s, rank %d: results %d, %d (not a mismatch): %s",
                 t->name, t->tp, r, r1, r2, text);
    cr_expect_eq(r2, BRAID_ERR_MISMATCH, "%s over %s, rank %d: %s", t->name,
                 t->tp, r, text);
    for (int w = 0; w < 2; w++)
      cr_expect(strstr(text, t->words[w]) != NULL,
                "%s over %s, rank %d: no '%s' in: %s", t->name, t->tp, r,
                t->words[w], text);
    cr_expect(strstr(text, "collective mismatch: rank ") != NULL,
              "%s over %s, rank %d: %s", t->name, t->tp, r, text);
    told += strstr(text, "which told every rank") != NULL;
  }
  /* somebody learnt it only from the rank that found it */
  cr_expect(told >= 1, "%s over %s: no rank was told of the mismatch", t->name,
            t->tp);
}

static void run_told_all(const char *tp) {
  told_case cases4[] = {
      {"op, 4 ranks",
       tp,
       "ring",
       4,
       AR(F32, BRAID_MAX, 16),
       AR(F32, BRAID_SUM, 16),
       {"sum", "max"},
       {{0}}},
      {"root of reduce, 3 ranks",
       tp,
       NULL,
       3,
       {K_REDUCE, F32, BRAID_SUM, 16, 0},
       {K_REDUCE, F32, BRAID_SUM, 16, 1},
       {"root 0", "root 1"},
       {{0}}},
  };
  for (size_t i = 0; i < sizeof cases4 / sizeof cases4[0]; i++)
    run_told(&cases4[i]);
}

Test(call_fp, every_rank_told_over_shm, .timeout = 300) { run_told_all("shm"); }

Test(call_fp, every_rank_told_over_tcp, .timeout = 300) { run_told_all("tcp"); }
