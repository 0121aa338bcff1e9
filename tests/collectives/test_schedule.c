/*
 * The schedule IR's helpers: allocation, step appending, buffer tables and
 * names.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "collectives/schedule.h"

Test(schedule, lifecycle) {
  sched *s = NULL;
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 0, 0, 1, 1, "x", &s),
               BRAID_ERR_INVALID_ARG);
  cr_assert_null(s);
  cr_assert_str_eq(err_msg(), "schedule x: 0 ranks, 1 chunks per block, 1 "
                              "channels (each at least 1)");
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 2, 0, 0, 1, "x", &s),
               BRAID_ERR_INVALID_ARG);
  cr_assert_eq(sched_new(SCHED_ALLREDUCE, 2, 0, 1, 0, "x", &s),
               BRAID_ERR_INVALID_ARG);
  cr_assert_eq(sched_new(SCHED_NUM_COLLS, 2, 0, 1, 1, "x", &s),
               BRAID_ERR_INVALID_ARG);
  cr_assert_null(s);
  cr_assert_eq(sched_new(SCHED_ALLGATHER, 3, 1, 2, 4,
                         "a-very-long-generator-name-that-is-cut-off", &s),
               BRAID_SUCCESS);
  cr_assert_not_null(s);
  cr_assert_eq(strlen(s->algo), sizeof(s->algo) - 1);
  double w = 0;
  for (int c = 0; c < 4; c++) {
    cr_assert_float_eq(s->weights[c], 0.25, 1e-12);
    w += s->weights[c];
  }
  cr_assert_float_eq(w, 1.0, 1e-12);
  cr_assert_null(sched_chan(s, 3, 0));
  cr_assert_null(sched_chan(s, 0, 4));
  cr_assert_null(sched_chan(s, -1, 0));
  sched_channel *c = sched_chan(s, 2, 3);
  cr_assert_eq(c, &s->ch[2 * 4 + 3]);
  cr_assert_eq(sched_chan_c(s, 2, 3), c);
  /* Appending grows the list and records every field. */
  for (int i = 0; i < 100; i++)
    cr_assert_eq(sched_send(c, 1, sched_ck(SCHED_BUF_IN, (uint32_t)i % 2, 1)),
                 BRAID_SUCCESS);
  cr_assert_eq(sched_recv_reduce_send(c, 0, sched_ck(SCHED_BUF_IN, 0, 2),
                                      sched_ck(SCHED_BUF_OUT, 2, 2), 1),
               BRAID_SUCCESS);
  cr_assert_eq(c->nsteps, 101);
  const sched_step *st = &c->steps[100];
  cr_assert_eq(st->prim, SCHED_P_RECV_REDUCE_SEND);
  cr_assert_eq(st->peer, 0);
  cr_assert_eq(st->peer_out, 1);
  cr_assert_eq(st->src.buf, SCHED_BUF_IN);
  cr_assert_eq(st->dst.index, 2);
  cr_assert_eq(st->dst.count, 2);
  cr_assert_eq(c->steps[0].dst.buf, SCHED_BUF_NONE);
  cr_assert_eq(c->steps[0].peer_out, -1);
  sched_copy(c, sched_ck(SCHED_BUF_IN, 0, 1), sched_ck(SCHED_BUF_OUT, 0, 1));
  cr_assert_eq(c->steps[101].peer, -1);
  cr_assert_eq(sched_add(NULL, SCHED_P_SEND, 0, -1,
                         sched_ck(SCHED_BUF_IN, 0, 1),
                         sched_ck(SCHED_BUF_NONE, 0, 0)),
               BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(err_msg(), "schedule: no channel for a SEND step");
  sched_free(s);
  sched_free(NULL);
}

Test(schedule, tables) {
  int n = 5;
  cr_assert_eq(sched_in_blocks(SCHED_ALLREDUCE, n), 1);
  cr_assert_eq(sched_out_blocks(SCHED_ALLGATHER, n), n);
  cr_assert_eq(sched_in_blocks(SCHED_REDUCE_SCATTER, n), n);
  cr_assert_eq(sched_out_blocks(SCHED_REDUCE_SCATTER, n), 1);
  cr_assert_eq(sched_in_blocks(SCHED_ALLTOALL, n), n);
  cr_assert_eq(sched_out_blocks(SCHED_ALLTOALL, n), n);
  cr_assert_eq(sched_in_blocks(SCHED_SEND, n), 1);
  cr_assert_eq(sched_out_blocks(SCHED_SEND, n), 0);
  cr_assert_eq(sched_in_blocks(SCHED_RECV, n), 0);
  cr_assert_eq(sched_out_blocks(SCHED_RECV, n), 1);
  cr_assert(sched_uses_in(SCHED_BROADCAST, 2, 2));
  cr_assert_not(sched_uses_in(SCHED_BROADCAST, 2, 1));
  cr_assert_not(sched_uses_out(SCHED_REDUCE, 2, 1));
  cr_assert_not(sched_uses_out(SCHED_GATHER, 0, 3));
  cr_assert_not(sched_uses_in(SCHED_SCATTER, 0, 3));
  cr_assert(sched_uses_out(SCHED_SCATTER, 0, 3));
  cr_assert(sched_reduces(SCHED_REDUCE_SCATTER));
  cr_assert_not(sched_reduces(SCHED_ALLGATHER));
  cr_assert_str_eq(sched_coll_name(SCHED_REDUCE_SCATTER), "reduce_scatter");
  cr_assert_str_eq(sched_coll_name(SCHED_NUM_COLLS), "unknown");
  cr_assert_str_eq(sched_prim_name(SCHED_P_REDUCE), "REDUCE");
  cr_assert_str_eq(sched_prim_name(SCHED_P_RECV_COPY_SEND), "RECV_COPY_SEND");
  cr_assert_str_eq(sched_prim_name(SCHED_P_RECV_REDUCE_REV), "RECV_REDUCE_REV");
  cr_assert_str_eq(sched_prim_name(SCHED_NUM_PRIMS), "UNKNOWN");
  /* what each primitive does with a step's fields */
  static const struct {
    sched_prim p;
    int recvs, reduces_msg, has_src;
  } what[SCHED_NUM_PRIMS] = {
      {SCHED_P_SEND, 0, 0, 1},           {SCHED_P_RECV, 1, 0, 0},
      {SCHED_P_RECV_REDUCE, 1, 1, 1},    {SCHED_P_RECV_REDUCE_SEND, 1, 1, 1},
      {SCHED_P_RECV_COPY_SEND, 1, 0, 0}, {SCHED_P_COPY, 0, 0, 1},
      {SCHED_P_REDUCE, 0, 0, 1},         {SCHED_P_RECV_REDUCE_REV, 1, 1, 1}};
  for (int i = 0; i < SCHED_NUM_PRIMS; i++) {
    cr_assert_eq(sched_prim_recvs(what[i].p), what[i].recvs, "%d", i);
    cr_assert_eq(sched_prim_reduces_msg(what[i].p), what[i].reduces_msg, "%d",
                 i);
    cr_assert_eq(sched_prim_has_src(what[i].p), what[i].has_src, "%d", i);
  }
  cr_assert_str_eq(sched_buf_name(SCHED_BUF_SCRATCH), "scratch");
  /* Chunk geometry covers the block exactly. */
  size_t E = 1000003;
  size_t total = 0;
  for (int j = 0; j < 7; j++) {
    cr_assert_eq(sched_chunk_off(E, 7, j), total);
    total += sched_chunk_len(E, 7, j);
  }
  cr_assert_eq(total, E);
}
