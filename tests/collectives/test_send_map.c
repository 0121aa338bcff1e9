/*
 * The executor's send map (src/exec_sched.c exec_send_map): per step of
 * a rank's channels, EXEC_SEND_VOLATILE where a later step overwrites what
 * the step sends, and EXEC_SEND_STAGE where, in a large call, the sender
 * copies the data into the transport's buffers instead of letting the
 * receiver read it (single copy): the sending rank copies nothing else in
 * its channel (an in-place broadcast's root), the receiver reduces what
 * it gets (a reduce-scatter's sends), or the step forwards what it has just
 * reduced (RECV_REDUCE_SEND). A rank that also receives, into a plain copy
 * (allgather), keeps single copy.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/schedule.h"
#include "src/exec_int.h"

/* Bits of every send step of rank's channels, in order, into bits[];
 * returns how many. */
static int send_bits(sched *s, const exec_op *op, int rank, unsigned *bits,
                     int max) {
  sched_cache_entry e;
  memset(&e, 0, sizeof e);
  e.s = s;
  const uint8_t *m = exec_send_map(&e, op, rank);
  cr_assert_not_null(m, "no send map");
  int n = 0;
  size_t o = 0;
  for (int ch = 0; ch < s->nchannels; ch++) {
    const sched_channel *sc = sched_chan_c(s, rank, ch);
    for (int i = 0; i < sc->nsteps; i++, o++) {
      int p = sc->steps[i].prim;
      int sends = p == SCHED_P_SEND || p == SCHED_P_RECV_COPY_SEND ||
                  p == SCHED_P_RECV_REDUCE_SEND;
      if (!sends) {
        cr_assert_eq(m[o], 0,
                     "rank %d channel %d step %d sends nothing but "
                     "has bits %u",
                     rank, ch, i, m[o]);
        continue;
      }
      cr_assert_lt(n, max);
      bits[n++] = m[o];
    }
  }
  free(e.send_map[0]);
  free(e.send_map[1]);
  return n;
}

static sched *ring(sched_coll coll, int nranks, int root) {
  gen_params p = {.coll = coll, .nranks = nranks, .root = root, .nchannels = 1};
  sched *s = NULL;
  cr_assert_eq(gen_ring(&p, &s), BRAID_SUCCESS, "ring %d: %s", (int)coll,
               err_msg());
  return s;
}

static exec_op op_of(sched_coll coll, int root, int inplace) {
  exec_op op;
  memset(&op, 0, sizeof op);
  op.coll = coll;
  op.root = root;
  op.inplace = inplace;
  op.count = 1024;
  op.dt = BRAID_FLOAT32;
  op.op = BRAID_SUM;
  return op;
}

Test(send_map, broadcast_root_stages_in_place_only) {
  sched *s = ring(SCHED_BROADCAST, 2, 0);
  unsigned b[64];
  exec_op ip = op_of(SCHED_BROADCAST, 0, 1);
  int n = send_bits(s, &ip, 0, b, 64);
  cr_assert_gt(n, 0, "the root sends nothing");
  for (int i = 0; i < n; i++)
    cr_assert(b[i] & EXEC_SEND_STAGE,
              "in place, the root copies nothing else: send %d should be "
              "staged (bits %u)",
              i, b[i]);
  /* out of place the root also copies its input to its output: its core
   * is busy, so its peer reads the data itself */
  exec_op oop = op_of(SCHED_BROADCAST, 0, 0);
  n = send_bits(s, &oop, 0, b, 64);
  for (int i = 0; i < n; i++)
    cr_assert_not(b[i] & EXEC_SEND_STAGE,
                  "out of place, send %d should not be staged (bits %u)", i,
                  b[i]);
  sched_free(s);
}

/* EXEC_SEND_SHARE: the sender copies nothing else and the receiver does
 * not reduce, so the waiting sender may copy a share (isend_shared). */
Test(send_map, idle_senders_share) {
  sched *s = ring(SCHED_BROADCAST, 2, 0);
  unsigned b[64];
  exec_op ip = op_of(SCHED_BROADCAST, 0, 1), oop = op_of(SCHED_BROADCAST, 0, 0);
  int n = send_bits(s, &ip, 0, b, 64);
  cr_assert_gt(n, 0);
  for (int i = 0; i < n; i++)
    cr_assert(b[i] & EXEC_SEND_SHARE,
              "in-place broadcast root, send %d: not shared (bits %u)", i,
              b[i]);
  n = send_bits(s, &oop, 0, b, 64);
  for (int i = 0; i < n; i++)
    cr_assert_not(b[i] & EXEC_SEND_SHARE,
                  "out-of-place broadcast root (it copies too), send %d "
                  "shared",
                  i);
  sched_free(s);
  /* allgather: every rank receives too; reduce_scatter: the peer reduces */
  sched_coll busy[] = {SCHED_ALLGATHER, SCHED_REDUCE_SCATTER, SCHED_ALLREDUCE};
  for (int k = 0; k < 3; k++) {
    s = ring(busy[k], 2, 0);
    for (int r = 0; r < 2; r++) {
      exec_op op = op_of(busy[k], 0, 0);
      n = send_bits(s, &op, r, b, 64);
      for (int i = 0; i < n; i++)
        cr_assert_not(b[i] & EXEC_SEND_SHARE,
                      "collective %d rank %d send %d shared (bits %u)",
                      (int)busy[k], r, i, b[i]);
    }
    sched_free(s);
  }
}

/* EXEC_SEND_EARLY (staged below BRAID_SHM_CMA_MAX too): the sender copies
 * nothing else and the receiver reduces (a reduce's non-root on 2 ranks,
 * the chain's first rank on 3), or an in-place call forwards what it has
 * just reduced (a 2-rank allreduce's RECV_REDUCE_SEND). Nowhere else: a
 * broadcast's root (its peer copies), an out-of-place allreduce, a
 * reduce_scatter or an allgather (their ranks receive too), the middle of
 * a reduce chain (it reduces too). */
Test(send_map, early_staging) {
  unsigned b[64];
  for (int nr = 2; nr <= 3; nr++) {
    sched *s = ring(SCHED_REDUCE, nr, 0);
    for (int r = 0; r < nr; r++) {
      exec_op op = op_of(SCHED_REDUCE, 0, 0);
      int n = send_bits(s, &op, r, b, 64);
      /* on the ring ending at root 0, rank 1 starts the chain */
      int leaf = r == 1;
      cr_assert(r != 0 || n == 0, "the root sends");
      for (int i = 0; i < n; i++) {
        cr_assert(b[i] & EXEC_SEND_STAGE,
                  "reduce, %d ranks, rank %d: send %d not staged", nr, r, i);
        cr_assert_eq(!!(b[i] & EXEC_SEND_EARLY), leaf,
                     "reduce, %d ranks, rank %d send %d: bits %u", nr, r, i,
                     b[i]);
      }
    }
    sched_free(s);
  }
  sched *s = ring(SCHED_ALLREDUCE, 2, 0);
  for (int ip = 0; ip < 2; ip++) {
    exec_op op = op_of(SCHED_ALLREDUCE, 0, ip);
    int n = send_bits(s, &op, 0, b, 64);
    cr_assert_eq(n, 2);
    cr_assert_not(b[0] & EXEC_SEND_EARLY, "in place %d: bits %u", ip, b[0]);
    cr_assert_eq(!!(b[1] & EXEC_SEND_EARLY), ip,
                 "allreduce's forward, in place %d: bits %u", ip, b[1]);
  }
  sched_free(s);
  sched_coll other[] = {SCHED_BROADCAST, SCHED_REDUCE_SCATTER, SCHED_ALLGATHER};
  for (int k = 0; k < 3; k++) {
    s = ring(other[k], 2, 0);
    for (int r = 0; r < 2; r++)
      for (int ip = 0; ip < 2; ip++) {
        exec_op op = op_of(other[k], 0, ip);
        int n = send_bits(s, &op, r, b, 64);
        for (int i = 0; i < n; i++)
          cr_assert_not(b[i] & EXEC_SEND_EARLY,
                        "collective %d rank %d in place %d send %d: bits %u",
                        (int)other[k], r, ip, i, b[i]);
      }
    sched_free(s);
  }
}

Test(send_map, allgather_keeps_single_copy) {
  sched *s = ring(SCHED_ALLGATHER, 2, 0);
  unsigned b[64];
  for (int inplace = 0; inplace < 2; inplace++)
    for (int r = 0; r < 2; r++) {
      exec_op op = op_of(SCHED_ALLGATHER, 0, inplace);
      int n = send_bits(s, &op, r, b, 64);
      cr_assert_gt(n, 0);
      for (int i = 0; i < n; i++)
        cr_assert_not(b[i] & EXEC_SEND_STAGE,
                      "allgather rank %d (in place %d) send %d: the peer "
                      "copies and this rank receives too, yet staged",
                      r, inplace, i);
    }
  sched_free(s);
}

Test(send_map, reductions_stage_what_the_peer_reduces) {
  /* reduce-scatter: every send is reduced on arrival */
  sched *s = ring(SCHED_REDUCE_SCATTER, 2, 0);
  unsigned b[64];
  exec_op rs = op_of(SCHED_REDUCE_SCATTER, 0, 0);
  int n = send_bits(s, &rs, 1, b, 64);
  cr_assert_gt(n, 0);
  for (int i = 0; i < n; i++)
    cr_assert(b[i] & EXEC_SEND_STAGE, "reduce_scatter send %d not staged", i);
  sched_free(s);
  /* allreduce (reduce-scatter, then allgather) on 2 ranks: the first send
   * is reduced on arrival, the second forwards the chunk the rank has just
   * reduced (RECV_REDUCE_SEND) */
  s = ring(SCHED_ALLREDUCE, 2, 0);
  exec_op ar = op_of(SCHED_ALLREDUCE, 0, 0);
  n = send_bits(s, &ar, 0, b, 64);
  cr_assert_eq(n, 2);
  cr_assert(b[0] & EXEC_SEND_STAGE, "allreduce's first send not staged");
  cr_assert(b[1] & EXEC_SEND_STAGE,
            "the forward of the chunk just reduced not staged");
  sched_free(s);
  /* on 3 ranks the allgather's forward of a chunk received as it is
   * (RECV_COPY_SEND) keeps single copy */
  s = ring(SCHED_ALLREDUCE, 3, 0);
  n = send_bits(s, &ar, 0, b, 64);
  cr_assert_eq(n, 4);
  for (int i = 0; i < 3; i++)
    cr_assert(b[i] & EXEC_SEND_STAGE, "allreduce send %d not staged", i);
  cr_assert_not(b[3] & EXEC_SEND_STAGE,
                "the allgather's plain forward (RECV_COPY_SEND) staged");
  sched_free(s);
}

Test(send_map, volatile_bit_kept) {
  /* in-place allreduce: the reduce-scatter's send reads a chunk that the
   * allgather overwrites later on the same rank */
  sched *s = ring(SCHED_ALLREDUCE, 2, 0);
  unsigned b[64];
  exec_op ar = op_of(SCHED_ALLREDUCE, 0, 1);
  int n = send_bits(s, &ar, 0, b, 64);
  int vol = 0;
  for (int i = 0; i < n; i++)
    vol |= (b[i] & EXEC_SEND_VOLATILE) != 0;
  cr_assert(vol, "no volatile send in an in-place ring allreduce");
  sched_free(s);
}
