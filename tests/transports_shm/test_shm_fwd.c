/*
 * The shared-memory transport's receives into an output nobody reads soon:
 * recv_reduce_fwd (the reduction sent on as it is made, from the slot it
 * is made in, and streamed into dst) and recv_stream, between real rank
 * processes (shm_world.h).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "tests/transports_shm/shm_world.h"
#include "transports/shm.h"

#define NSLOTS 4
#define SLOT (64u << 10)

static void fsum(void *dst, const void *a, const void *b, size_t n) {
  float *d = dst;
  const float *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] + y[i];
}

static float a_of(size_t i) { return (float)(i % 1000); }
static float b_of(size_t i) { return (float)(2 * (i % 777) + 1); }

/* Rank 0 sends a message of nfloats; rank 1 reduces it with its own and
 * sends the sum back on the same connection through recv_reduce_fwd. The
 * ranks meet at a barrier after rank 0 has sent and before it reads the
 * sum, so that rank 1's ring to rank 0 (NSLOTS slots) fills: the first
 * NSLOTS fragments go straight from the reduction into a slot, the others
 * from dst once rank 0 reads. With busy, rank 1 first sends rank 0 a
 * message that takes more than the ring, so that the forward cannot start
 * (its ticket is 0) and rank 1 sends the sum itself. */
static int fwd_round(world *w, void *st, size_t nfloats, int busy) {
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  size_t len = nfloats * sizeof(float);
  size_t big = (NSLOTS + 2) * (size_t)SLOT;
  float *a = malloc(len + 1), *b = malloc(len + 1), *d = malloc(len + 64);
  uint8_t *m = malloc(big), *mr = malloc(big);
  CHK(a && b && d && m && mr, "no memory");
  for (size_t i = 0; i < nfloats; i++) {
    a[i] = a_of(i);
    b[i] = b_of(i);
  }
  fill(m, big, 7);
  tp_reducer red = {fsum, sizeof(float)};
  uint64_t t = 0;
  if (w->rank == 0) {
    CHK(WAIT(st, tp_shm.isend(c, a, len, &t)) == 0, "isend");
    CHK(WAIT(st, tp_shm.send_done(c, t)) == 0, "send_done");
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    if (busy) {
      CHK(WAIT(st, tp_shm.recv(c, mr, big)) == 0, "recv of the busy message");
      CHK(memcmp(mr, m, big) == 0, "the busy message arrived changed");
    }
    memset(d, 0xee, len);
    CHK(WAIT(st, tp_shm.recv(c, d, len)) == 0, "recv of the sum");
    for (size_t i = 0; i < nfloats; i++)
      CHK(d[i] == a_of(i) + b_of(i), "sum[%zu] = %g on rank 0", i,
          (double)d[i]);
  } else {
    uint64_t tb = 0;
    if (busy)
      CHK(tp_shm.isend(c, m, big, &tb) == 0, "isend of the busy message");
    uint64_t before = shm_conn_fwd_frags(c);
    /* dst 4 bytes past a line: the streamed copy's unaligned ends */
    float *dst = (float *)((char *)d + 4);
    memset(d, 0x5a, len + 64);
    int r = WAIT(st, tp_shm.recv_reduce_fwd(c, b, dst, len, &red, c, &t));
    CHK(r == BRAID_SUCCESS, "recv_reduce_fwd: %d %s", r, err_msg());
    for (size_t i = 0; i < nfloats; i++)
      CHK(dst[i] == a_of(i) + b_of(i), "dst[%zu] = %g on rank 1", i,
          (double)dst[i]);
    CHK(((uint8_t *)d)[0] == 0x5a && ((uint8_t *)dst)[len] == 0x5a,
        "bytes around dst written");
    uint64_t fused = shm_conn_fwd_frags(c) - before;
    size_t nfrags = (len + SLOT - 1) / SLOT;
    if (busy) {
      CHK(t == 0 && fused == 0,
          "a forward started on a busy connection (ticket %llu, %llu "
          "fragments)",
          (unsigned long long)t, (unsigned long long)fused);
    } else {
      size_t want = nfrags < NSLOTS ? nfrags : NSLOTS;
      if (len <= SHM_INLINE)
        want = 0; /* inline fragments are not forwarded from a slot */
      CHK(t != 0 && fused == want,
          "%llu of %zu fragments reduced into a slot, expected %zu (ticket "
          "%llu)",
          (unsigned long long)fused, nfrags, want, (unsigned long long)t);
    }
    CHK(boot_barrier(w->b) == BRAID_SUCCESS, "barrier");
    if (busy) {
      CHK(WAIT(st, tp_shm.send_done(c, tb)) == 0, "send_done (busy)");
      CHK(WAIT(st, tp_shm.isend(c, dst, len, &t)) == 0, "isend of the sum");
    }
    CHK(WAIT(st, tp_shm.send_done(c, t)) == 0, "send_done of the sum");
  }
  free(a);
  free(b);
  free(d);
  free(m);
  free(mr);
  return 0;
}

static int fwd_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, NSLOTS, SLOT, NULL) != BRAID_SUCCESS)
    return 1;
  /* one fragment, a few, more than the ring, a partial last fragment */
  static const size_t counts[] = {4, SLOT / 4, 3 * SLOT / 4,
                                  (10 * SLOT + 4096) / 4 + 3};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    if (fwd_round(w, st, counts[k], 0) || fwd_round(w, st, counts[k], 1))
      return 1;
  if (w->rank == 1) { /* bad arguments: refused, nothing consumed */
    tp_conn *c = tp_shm.conn(st, 0, 0);
    tp_reducer red = {fsum, sizeof(float)};
    float x[2] = {0, 0};
    uint64_t t = 0;
    CHK(tp_shm.recv_reduce_fwd(c, x, x, 8, &red, NULL, &t) ==
            BRAID_ERR_INVALID_ARG,
        "no forward connection accepted");
    CHK(tp_shm.recv_reduce_fwd(c, x, x, 6, &red, c, &t) ==
            BRAID_ERR_INVALID_ARG,
        "6 bytes of floats accepted");
  }
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, reduction_forwarded_as_made) {
  shm_force_cma(0); /* copies through the slots, which this is about */
  run_ranks(2, fwd_rank, -1);
  shm_force_cma(-1);
}

/* recv_stream lands every byte of messages of awkward sizes at awkward
 * addresses, and nothing around them. */
static int stream_rank(world *w) {
  void *st = NULL;
  if (shm_up(w, &st, 1, NSLOTS, SLOT, NULL) != BRAID_SUCCESS)
    return 1;
  tp_conn *c = tp_shm.conn(st, 1 - w->rank, 0);
  static const size_t lens[] = {0,    1,    63,       4095,
                                4096, 4097, SLOT + 7, 7 * SLOT + 100};
  size_t cap = 7 * SLOT + 100 + 128;
  uint8_t *src = malloc(cap), *dst = malloc(cap);
  CHK(src && dst, "no memory");
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    size_t len = lens[k], at = 1 + k % 5;
    fill(src, len, (unsigned)k + 1);
    if (w->rank == 0) {
      uint64_t t;
      CHK(WAIT(st, tp_shm.isend(c, src, len, &t)) == 0, "isend");
      CHK(WAIT(st, tp_shm.send_done(c, t)) == 0, "send_done");
    } else {
      memset(dst, 0xa5, cap);
      CHK(WAIT(st, tp_shm.recv_stream(c, dst + at, len)) == 0,
          "recv_stream of %zu bytes", len);
      CHK(memcmp(dst + at, src, len) == 0, "%zu bytes arrived changed", len);
      for (size_t i = 0; i < at; i++)
        CHK(dst[i] == 0xa5, "byte %zu before dst written", i);
      CHK(dst[at + len] == 0xa5, "the byte after %zu bytes written", len);
    }
  }
  free(src);
  free(dst);
  CHK(boot_barrier(w->b) == BRAID_SUCCESS, "final barrier");
  tp_shm.teardown(st);
  return 0;
}

Test(shm, streamed_receive) {
  shm_force_cma(0);
  run_ranks(2, stream_rank, -1);
  shm_force_cma(-1);
}
