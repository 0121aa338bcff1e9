/*
 * Transport-level exchange between two ranks, shared by the ofi tests and
 * the network-namespace program: both directions at once, every channel,
 * every byte checked against a pattern naming (sender, channel, message).
 */
#ifndef BRAID_TESTS_XCHG_H
#define BRAID_TESTS_XCHG_H

#include <stddef.h>
#include <stdint.h>

#include "src/bootstrap.h"
#include "transports/transport.h"

#define XCHG_SKIP 77 /* exit code: the transport is not available here */

int64_t xchg_now_ms(void);
uint8_t xchg_byte(int src, int ch, int msg, size_t j);

/* tp.setup with every other rank as a peer. On failure returns the result
 * and err holds the transport's text. */
int xchg_setup(const tp_ops *tp, boot *b, int nchannels, int nslots,
               size_t slot_bytes, int timeout_ms, void **state, char *err,
               size_t errlen);

/* Sends nmsg messages to peer on every channel and receives as many, sizes
 * sizes[i % nsizes], keeping up to window sends in flight per channel.
 * reduce: receive with recv_reduce (int32 sum with a local operand; sizes
 * must then be multiples of 4) and check the sums. Returns 0, or the failing
 * code with err explaining. Bounded by timeout_ms. */
int xchg_run(const tp_ops *tp, void *state, int rank, int peer, int nchannels,
             const size_t *sizes, int nsizes, int nmsg, int window, int reduce,
             int timeout_ms, char *err, size_t errlen);

/* The unique id of a job of forked ranks. Rank 0 makes it after the fork,
 * so the forking process runs no rendezvous thread (forking a process with
 * other threads running can leave the child holding a dead thread's lock),
 * and the other ranks wait for it here. */
typedef struct xchg_idbox {
  volatile int state; /* 0 waiting, 1 ready, -1 rank 0 failed */
  braid_unique_id id;
  char err[240];
} xchg_idbox;

/* Shared (MAP_SHARED) and zeroed; NULL on failure. */
xchg_idbox *xchg_idbox_new(void);
void xchg_idbox_free(xchg_idbox *b);
/* 0 with *id set, or -1 (err explains) after timeout_ms. */
int xchg_get_id(xchg_idbox *b, int rank, braid_unique_id *id, int timeout_ms,
                char *err, size_t errlen);

/* Calls expr-like progress on (c) until not TP_AGAIN; helper for tests. */
int xchg_wait_recv(const tp_ops *tp, tp_conn *c, void *dst, size_t len,
                   int timeout_ms);

#endif
