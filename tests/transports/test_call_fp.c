/*
 * Calls that differ between ranks, without BRAID_CHECK: every collective's
 * messages carry a fingerprint of the call (src/check.c), and the receiving
 * transport (shm, tcp) refuses one from another call with
 * BRAID_ERR_MISMATCH and a message naming both. Each case runs two ranks
 * whose second call differs in one thing (kind, op, dtype of the same size,
 * count, root); no rank may return success from a call whose data it then
 * got wrong, and none may hang. Over shm, ranks also see each other's long
 * waits (src/exec_wait.c): two that each wait for the other in different
 * calls (a reduce whose root they disagree on) are a mismatch too.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "src/bootstrap.h"

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
  /* shows only where ranks see each other's waits (shm): two ranks that
   * each wait for the other to send, nothing in flight */
  int shm_only;
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
  char err[256];
  cr_assert_eq(boot_unique_id(&id, err, sizeof(err)), BRAID_SUCCESS, "%s", err);
  rank_proc p[2];
  int bad = run_ranks(2, &id, rank_fp, (void *)t, 60000, p);
  cr_assert_eq(bad, 0, "%s over %s: a rank failed or hung", t->name, t->tp);
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
    if (t.shm_only && strcmp(tp, "shm") != 0)
      continue;
    t.tp = tp;
    run_case(&t);
  }
}

Test(call_fp, differing_calls_found_over_shm, .timeout = 240) {
  run_all("shm");
}

Test(call_fp, differing_calls_found_over_tcp, .timeout = 240) {
  run_all("tcp");
}
