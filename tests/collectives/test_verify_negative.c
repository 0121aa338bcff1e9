/*
 * The verifier must catch broken schedules and name the rank, step and
 * chunk: each test takes a correct schedule (or builds a small one), breaks
 * it, and checks the report.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/verify.h"
#include "tests/collectives/gen_try.h"

/* One verifier workspace for the whole test process (verify.h). */
static verify_ws *test_ws(void) {
  static verify_ws *w;
  if (w == NULL)
    w = verify_ws_new();
  return w;
}

static char err[1024];

static sched *gen(const char *name, sched_coll c, int n, int root, int nch) {
  gen_params p = {c, n, root, nch, NULL, 0, 0};
  sched *s = gen_try(gen_find(name)->fn, &p);
  cr_assert_not_null(s);
  cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
  cr_assert_eq(verify_sched(s, 1, 8), 0, "%s", err_msg());
  return s;
}

static void drop_step(sched *s, int rank, int ch, int idx) {
  sched_channel *c = sched_chan(s, rank, ch);
  cr_assert_lt(idx, c->nsteps);
  memmove(&c->steps[idx], &c->steps[idx + 1],
          sizeof(sched_step) * (size_t)(c->nsteps - idx - 1));
  c->nsteps--;
}

/* Inserts a copy of step `from` at position `at`. */
static void dup_step(sched *s, int rank, int ch, int from, int at) {
  sched_channel *c = sched_chan(s, rank, ch);
  sched_step st = c->steps[from];
  cr_assert_eq(
      sched_add(c, (sched_prim)st.prim, st.peer, st.peer_out, st.src, st.dst),
      0);
  memmove(&c->steps[at + 1], &c->steps[at],
          sizeof(sched_step) * (size_t)(c->nsteps - 1 - at));
  c->steps[at] = st;
}

static void swap_steps(sched *s, int rank, int ch, int a, int b) {
  sched_channel *c = sched_chan(s, rank, ch);
  sched_step t = c->steps[a];
  c->steps[a] = c->steps[b];
  c->steps[b] = t;
}

#define EXPECT_FAIL(s, ip, slots, ...)                                         \
  do {                                                                         \
    cr_assert_eq(verify_sched((s), (ip), (slots)), BRAID_ERR_INVALID_ARG,      \
                 "verifier accepted a broken schedule");                       \
    const char *subs[] = {__VA_ARGS__};                                        \
    for (size_t i__ = 0; i__ < sizeof(subs) / sizeof(subs[0]); i__++)          \
      cr_assert(strstr(err_msg(), subs[i__]) != NULL, "\"%s\" lacks \"%s\"",   \
                err_msg(), subs[i__]);                                         \
  } while (0)

Test(verify_negative, dropped_send_never_sent) {
  /* Broadcast chain 0 -> 1 -> 2 -> 3: rank 0 forgets to send. */
  sched *s = gen("ring", SCHED_BROADCAST, 4, 0, 1);
  cr_assert_eq(sched_chan(s, 0, 0)->steps[0].prim, SCHED_P_SEND);
  drop_step(s, 0, 0, 0);
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 0 step 0 (RECV_COPY_SEND from 0 to 2",
              "never sends");
  sched_free(s);
}

Test(verify_negative, dropped_recv_leaves_output_unwritten) {
  sched *s = gen("ring", SCHED_ALLGATHER, 4, 0, 1);
  sched_channel *c = sched_chan(s, 2, 0);
  cr_assert_eq(c->steps[c->nsteps - 1].prim, SCHED_P_RECV);
  drop_step(s, 2, 0, c->nsteps - 1);
  /* Rank 2's last block (from rank 1's forward of rank 3's block) is never
   * written, and rank 1's forwarded message is never received. */
  EXPECT_FAIL(s, 0, 8, "rank 2 channel 0: out[3] is never written");
  sched_free(s);
}

Test(verify_negative, duplicated_recv_reduce) {
  /* Direct reduce to root 0 on 3 ranks; rank 1 sends twice and the root
   * reduces rank 1's input twice. */
  sched *s = gen("direct", SCHED_REDUCE, 3, 0, 1);
  sched_channel *root = sched_chan(s, 0, 0);
  cr_assert_eq(root->steps[0].prim, SCHED_P_RECV_REDUCE);
  cr_assert_eq(root->steps[0].peer, 1);
  dup_step(s, 1, 0, 0, 0);
  dup_step(s, 0, 0, 0, 1);
  sched_chan(s, 0, 0)->steps[1].src = sched_ck(SCHED_BUF_OUT, 0, 1);
  EXPECT_FAIL(s, 0, 8,
              "rank 0 channel 0 step 1 (RECV_REDUCE from 1, src out[0], dst "
              "out[0]): contribution (rank 1, chunk 0) reduced twice");
  sched_free(s);
}

Test(verify_negative, reduce_local_twice) {
  /* Direct allreduce: rank 2 adds its own input twice. */
  sched *s = gen("direct", SCHED_ALLREDUCE, 4, 0, 1);
  sched_channel *c = sched_chan(s, 2, 0);
  int at = -1;
  for (int i = 0; i < c->nsteps; i++)
    if (c->steps[i].prim == SCHED_P_REDUCE)
      at = i;
  cr_assert_geq(at, 0);
  dup_step(s, 2, 0, at, at + 1);
  char want[128];
  snprintf(want, sizeof(want),
           "rank 2 channel 0 step %d (REDUCE src in[0], dst scratch[0]): "
           "contribution (rank 2, chunk 0) reduced twice",
           at + 1);
  EXPECT_FAIL(s, 0, 8, want);
  sched_free(s);
}

Test(verify_negative, peer_out_of_range_or_self) {
  sched *s = gen("ring", SCHED_ALLGATHER, 4, 0, 1);
  sched_chan(s, 1, 0)->steps[0].peer = 9;
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 0 step 0 (SEND to 9, src in[0])",
              "peer 9 is not another rank");
  sched_chan(s, 1, 0)->steps[0].peer = 1;
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 0 step 0", "peer 1 is not another rank");
  sched_free(s);
}

Test(verify_negative, wrong_peer) {
  /* Ring allgather on 3 ranks: rank 0 sends its block to 2 instead of 1, so
   * rank 1 receives one message fewer from rank 0 than it expects. */
  sched *s = gen("ring", SCHED_ALLGATHER, 3, 0, 1);
  sched_chan(s, 0, 0)->steps[0].peer = 2;
  EXPECT_FAIL(s, 0, 8,
              "rank 1 channel 0 step 3 (RECV from 0, dst out[2]): waits for a "
              "message that rank 0 never sends (rank 0 has finished its steps "
              "after sending 1 message(s) to rank 1 on this channel)");
  sched_free(s);
}

Test(verify_negative, swapped_steps_deadlock) {
  /* Pairwise alltoall on 2 ranks: both ranks receive before sending. */
  sched *s = gen("direct", SCHED_ALLTOALL, 2, 0, 1);
  for (int r = 0; r < 2; r++) {
    sched_channel *c = sched_chan(s, r, 0);
    int snd = -1;
    for (int i = 0; i < c->nsteps; i++)
      if (c->steps[i].prim == SCHED_P_SEND)
        snd = i;
    cr_assert_geq(snd, 0);
    cr_assert_eq(c->steps[snd + 1].prim, SCHED_P_RECV);
    swap_steps(s, r, 0, snd, snd + 1);
  }
  EXPECT_FAIL(s, 0, 8, "deadlock on channel 0",
              "rank 0 step 1 (RECV from 1, dst out[1]) waits for a message "
              "from rank 1",
              "rank 1 step 1 (RECV from 0, dst out[0]) waits for a message "
              "from rank 0");
  sched_free(s);
}

Test(verify_negative, slot_capacity_deadlock) {
  /* Two ranks each send 10 chunks before receiving: fine with 10 slots,
   * deadlock with 8. */
  sched *s;
  cr_assert_eq(sched_new(SCHED_ALLGATHER, 2, 0, 10, 1, "test", &s),
               BRAID_SUCCESS);
  for (int r = 0; r < 2; r++) {
    sched_channel *c = sched_chan(s, r, 0);
    sched_send(c, 1 - r, sched_ck(SCHED_BUF_IN, 0, 10));
    sched_copy(c, sched_ck(SCHED_BUF_IN, 0, 10),
               sched_ck(SCHED_BUF_OUT, (uint32_t)r * 10, 10));
    sched_recv(c, 1 - r, sched_ck(SCHED_BUF_OUT, (uint32_t)(1 - r) * 10, 10));
  }
  cr_assert_eq(verify_sched(s, 0, 10), 0, "%s", err_msg());
  cr_assert_eq(verify_sched(s, 1, 10), 0, "%s", err_msg());
  EXPECT_FAIL(s, 0, 8, "deadlock on channel 0 with 8 slots",
              "rank 0 step 0 (SEND to 1, src in[8]) waits for room to send to "
              "rank 1 (8 messages queued)");
  sched_free(s);
}

Test(verify_negative, inplace_clobber) {
  /* Ring reduce_scatter keeping partial sums in out instead of scratch:
   * correct out of place, but in place out aliases in block `rank`, which
   * the last step still needs. */
  sched *s = gen("ring", SCHED_REDUCE_SCATTER, 4, 0, 1);
  for (int r = 0; r < 4; r++) {
    sched_channel *c = sched_chan(s, r, 0);
    for (int i = 0; i < c->nsteps; i++)
      if (c->steps[i].dst.buf == SCHED_BUF_SCRATCH)
        c->steps[i].dst.buf = SCHED_BUF_OUT;
      else if (c->steps[i].src.buf == SCHED_BUF_SCRATCH)
        c->steps[i].src.buf = SCHED_BUF_OUT;
  }
  cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
  EXPECT_FAIL(s, 1, 8, "step 3 (RECV_REDUCE from",
              "which step 2 overwrote through the aliased output (in place)");
  sched_free(s);
}

Test(verify_negative, writes_input) {
  sched *s = gen("binomial", SCHED_ALLREDUCE, 4, 0, 1);
  sched_channel *c = sched_chan(s, 0, 0);
  c->steps[0].dst.buf = SCHED_BUF_IN;
  EXPECT_FAIL(s, 0, 8, "rank 0 channel 0 step 0", "writes the input buffer");
  sched_free(s);
}

Test(verify_negative, unused_buffer) {
  /* Reduce: a non-root must not touch its output buffer. */
  sched *s = gen("tree", SCHED_REDUCE, 6, 2, 2);
  int hit = 0;
  for (int r = 0; r < 6 && !hit; r++) {
    if (r == 2)
      continue;
    sched_channel *c = sched_chan(s, r, 0);
    for (int i = 0; i < c->nsteps && !hit; i++)
      if (c->steps[i].dst.buf == SCHED_BUF_SCRATCH) {
        c->steps[i].dst.buf = SCHED_BUF_OUT;
        char want[96];
        snprintf(want, sizeof(want), "rank %d channel 0 step %d", r, i);
        EXPECT_FAIL(s, 0, 8, want, "does not use its output buffer in reduce");
        hit = 1;
      }
  }
  cr_assert(hit);
  sched_free(s);
  /* Broadcast: a non-root has no input. */
  s = gen("direct", SCHED_BROADCAST, 3, 0, 1);
  sched_chan(s, 1, 0)->steps[0].dst.buf = SCHED_BUF_IN;
  sched_chan(s, 1, 0)->steps[0].prim = SCHED_P_SEND;
  sched_chan(s, 1, 0)->steps[0].src = sched_ck(SCHED_BUF_IN, 0, 1);
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 0 step 0 (SEND to 0, src in[0])",
              "rank 1 does not use its input buffer in broadcast");
  sched_free(s);
}

Test(verify_negative, chunk_size_mismatch) {
  sched *s;
  cr_assert_eq(sched_new(SCHED_BROADCAST, 2, 0, 2, 1, "test", &s),
               BRAID_SUCCESS);
  sched_send(sched_chan(s, 0, 0), 1, sched_ck(SCHED_BUF_IN, 0, 2));
  sched_copy(sched_chan(s, 0, 0), sched_ck(SCHED_BUF_IN, 0, 2),
             sched_ck(SCHED_BUF_OUT, 0, 2));
  sched_recv(sched_chan(s, 1, 0), 0, sched_ck(SCHED_BUF_OUT, 1, 1));
  sched_recv(sched_chan(s, 1, 0), 0, sched_ck(SCHED_BUF_OUT, 0, 1));
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 0 step 0 (RECV from 0, dst out[1])",
              "sizes differ");
  sched_free(s);
}

Test(verify_negative, read_before_write_and_range) {
  sched *s;
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 1, 0, 2, 1, "test", &s),
               BRAID_SUCCESS);
  sched_copy(sched_chan(s, 0, 0), sched_ck(SCHED_BUF_OUT, 1, 1),
             sched_ck(SCHED_BUF_OUT, 1, 1));
  EXPECT_FAIL(s, 0, 8, "rank 0 channel 0 step 0 (COPY src out[1], dst out[1])",
              "reads out[1] before anything wrote it");
  sched_chan(s, 0, 0)->steps[0].src = sched_ck(SCHED_BUF_IN, 1, 2);
  EXPECT_FAIL(s, 0, 8, "src chunks in[1..2] out of range");
  sched_chan(s, 0, 0)->steps[0].src = sched_ck(SCHED_BUF_SCRATCH, 0, 1);
  EXPECT_FAIL(s, 0, 8, "out of range (the buffer has 0 chunks)");
  sched_free(s);
}

Test(verify_negative, bitwise_order) {
  /* Direct allreduce on 3 ranks: rank 2 folds (in1 + in2) + in0 instead of
   * (in0 + in1) + in2: same set, different rounding. */
  sched *s = gen("direct", SCHED_ALLREDUCE, 3, 0, 1);
  sched_channel *c = sched_chan(s, 2, 0);
  c->nsteps = 2; /* keep the two sends */
  sched_recv(c, 1, sched_ck(SCHED_BUF_SCRATCH, 0, 1));
  sched_reduce_local(c, sched_ck(SCHED_BUF_IN, 0, 1),
                     sched_ck(SCHED_BUF_SCRATCH, 0, 1));
  sched_recv_reduce(c, 0, sched_ck(SCHED_BUF_SCRATCH, 0, 1),
                    sched_ck(SCHED_BUF_OUT, 0, 1));
  EXPECT_FAIL(s, 0, 8, "rank 2 channel 0: out[0]",
              "different order than on rank 0");
  sched_free(s);
}

Test(verify_negative, extra_message) {
  sched *s = gen("direct", SCHED_GATHER, 3, 0, 1);
  dup_step(s, 2, 0, 0, 0);
  /* The second of the two sends is the one nobody receives. */
  EXPECT_FAIL(s, 0, 8, "rank 2 channel 0 step 1 (SEND to 0, src in[0])",
              "1 message(s) to rank 0 are never received");
  sched_free(s);
}

Test(verify_negative, wrong_result_semantics) {
  /* Allgather whose rank 3 stores the block from rank 2 in the wrong place. */
  sched *s = gen("direct", SCHED_ALLGATHER, 4, 0, 1);
  sched_channel *c = sched_chan(s, 3, 0);
  for (int i = 0; i < c->nsteps; i++)
    if (c->steps[i].prim == SCHED_P_RECV && c->steps[i].peer == 2)
      c->steps[i].dst.index = 1;
  EXPECT_FAIL(s, 0, 8, "rank 3 channel 0: out[2] is never written (allgather)");
  sched_free(s);
}

Test(verify_negative, p2p) {
  gen_params p = {SCHED_SEND, 4, 2, 2, NULL, 0, 0};
  sched *s = gen_try(gen_linear, &p);
  cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
  sched_chan(s, 1, 1)->steps[0].peer = 3;
  EXPECT_FAIL(s, 0, 8, "rank 1 channel 1 step 0 (SEND to 3, src in[0])",
              "wrong peer 3, the send peer is rank 2");
  sched_free(s);
  p.coll = SCHED_RECV;
  s = gen_try(gen_linear, &p);
  cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
  sched_recv(sched_chan(s, 0, 0), 2, sched_ck(SCHED_BUF_OUT, 0, 1));
  EXPECT_FAIL(s, 0, 8, "rank 0 channel 0 step 1 (RECV from 2, dst out[0])",
              "receives more than the 1 chunks rank 2 sends");
  sched_free(s);
  /* The peer itself has no steps. */
  s = gen_try(gen_linear, &p);
  sched_recv(sched_chan(s, 2, 0), 1, sched_ck(SCHED_BUF_OUT, 0, 1));
  EXPECT_FAIL(s, 0, 8, "rank 2 channel 0", "must have no steps");
  sched_free(s);
}

Test(verify_negative, bad_arguments) {
  cr_assert_eq(verify_sched(NULL, 0, 8), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "no schedule"));
  sched *s = gen("ring", SCHED_ALLREDUCE, 3, 0, 1);
  EXPECT_FAIL(s, 0, 0, "slots must be at least 1");
  s->weights[0] = 0.5;
  EXPECT_FAIL(s, 0, 8, "weights sum to 0.5");
  s->weights[0] = 1.0;
  s->root = 7; /* ignored for allreduce */
  cr_assert_eq(verify_sched(s, 0, 8), 0, "%s", err_msg());
  s->coll = SCHED_BROADCAST;
  EXPECT_FAIL(s, 0, 8, "broadcast root 7 out of range");
  sched_free(s);
}

Test(verify_negative, lost_contribution) {
  /* Ring allreduce on 4 ranks: rank 1 forwards instead of reducing in its
   * first reduce-scatter step, dropping its own input for that chunk. */
  sched *s = gen("ring", SCHED_ALLREDUCE, 4, 0, 1);
  sched_step *st = &sched_chan(s, 1, 0)->steps[1];
  cr_assert_eq(st->prim, SCHED_P_RECV_REDUCE_SEND);
  cr_assert_eq(st->src.index, 0);
  st->prim = SCHED_P_RECV_COPY_SEND;
  st->src = sched_ck(SCHED_BUF_NONE, 0, 0);
  EXPECT_FAIL(s, 0, 8, "channel 0: out[0]",
              "lacks contribution (rank 1, chunk 0) for allreduce");
  sched_free(s);
}

Test(verify_negative, second_channel) {
  /* Only channel 1 is broken: the report names it. */
  sched *s = gen("ring", SCHED_ALLGATHER, 5, 0, 2);
  sched_channel *c = sched_chan(s, 3, 1);
  c->steps[c->nsteps - 1].dst.index = 0;
  EXPECT_FAIL(s, 0, 8, "rank 3 channel 1");
  sched_free(s);
}

/* Random corruption of valid schedules: the verifier must never crash or
 * hang on malformed input (schedules may come from files), and it must
 * reject most of the corruptions. */
static uint32_t rnd_state = 12345;
static uint32_t rnd(void) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return rnd_state >> 8;
}

Test(verify_negative, random_corruption) {
  struct {
    const char *g;
    sched_coll c;
  } cases[] = {{"ring", SCHED_ALLREDUCE},  {"tree", SCHED_REDUCE},
               {"binomial", SCHED_GATHER}, {"rhd", SCHED_REDUCE_SCATTER},
               {"direct", SCHED_ALLTOALL}, {"linear", SCHED_SCATTER},
               {"rhd", SCHED_ALLGATHER},   {"binomial", SCHED_SCATTER}};
  int rejected = 0, total = 0;
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
    for (int trial = 0; trial < 300; trial++) {
      int n = 2 + (int)(rnd() % 9);
      sched *s = gen(cases[ci].g, cases[ci].c, n, (int)(rnd() % (uint32_t)n),
                     1 + (int)(rnd() % 2));
      int r = (int)(rnd() % (uint32_t)n),
          ch = (int)(rnd() % (uint32_t)s->nchannels);
      sched_channel *c = sched_chan(s, r, ch);
      if (c->nsteps == 0) {
        sched_free(s);
        continue;
      }
      sched_step *st = &c->steps[rnd() % (uint32_t)c->nsteps];
      switch (rnd() % 8) {
      case 0:
        st->prim = (uint8_t)(rnd() % 9);
        break;
      case 1:
        st->peer = (int32_t)(rnd() % (uint32_t)(n + 2)) - 1;
        break;
      case 2:
        st->peer_out = (int32_t)(rnd() % (uint32_t)(n + 2)) - 1;
        break;
      case 3:
        st->src.buf = (uint8_t)(rnd() % 5);
        break;
      case 4:
        st->dst.buf = (uint8_t)(rnd() % 5);
        break;
      case 5:
        st->src.index = rnd() % 70;
        break;
      case 6:
        st->dst.count = rnd() % 4 ? rnd() % 5 : 0xffffffffu;
        break;
      default:
        st->dst.index = rnd() % 2 ? rnd() % 70 : 0xfffffff0u;
        break;
      }
      for (int ip = 0; ip < 2; ip++) {
        int slots = 1 + (int)(rnd() % 8);
        rejected += verify_sched_ws(s, ip, slots, test_ws()) != 0;
        total++;
      }
      sched_free(s);
    }
  }
  /* Some corruptions are harmless (an unused field, a value set to what it
   * was); most are not. */
  cr_assert_gt(rejected, total / 2, "only %d of %d corruptions rejected",
               rejected, total);
}

/* A workspace that served larger schedules (more ranks, more words per set,
 * more messages) gives the same verdicts and messages as a fresh check. */
Test(verify_negative, workspace_reuse_changes_nothing) {
  verify_ws *w = verify_ws_new();
  cr_assert_not_null(w);
  for (int round = 0; round < 2; round++) {
    sched *big = gen("ring", SCHED_REDUCE_SCATTER, 24, 0, 2);
    cr_assert_eq(verify_sched_ws(big, 1, 2, w), 0, "%s", err_msg());
    sched_free(big);
    sched *s = gen("ring", SCHED_ALLREDUCE, 5, 0, 1);
    drop_step(s, 2, 0, 3);
    cr_assert_eq(verify_sched(s, 0, 8), BRAID_ERR_INVALID_ARG);
    snprintf(err, sizeof err, "%s", err_msg());
    cr_assert_eq(verify_sched_ws(s, 0, 8, w), BRAID_ERR_INVALID_ARG);
    cr_assert_str_eq(err_msg(), err);
    sched_free(s);
    s = gen("direct", SCHED_ALLTOALL, 9, 0, 3);
    cr_assert_eq(verify_sched_ws(s, 1, 2, w), 0, "%s", err_msg());
    sched_free(s);
  }
  verify_ws_free(w);
  verify_ws_free(NULL);
}
