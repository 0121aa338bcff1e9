/*
 * Streams (braid_stream): host streams, and CUDA streams wrapped with a gate
 * (src/enqueue.c says how calls use them).
 */
#ifndef BRAID_SRC_STREAM_H
#define BRAID_SRC_STREAM_H

#include <pthread.h>
#include <stdint.h>

#include "braid.h"
#include "device/cuda_dev.h"

struct braid_stream {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t submitted, completed;
  braid_result first_error;
  void *cuda;       /* wrapped cudaStream_t, NULL for host streams */
  cudev_gate *gate; /* on the wrapped stream */
  uint32_t gate_seq;
  /* Gates 1..gate_open are released. A gate whose work ends before an
   * earlier one's (communicators sharing the stream, a call that failed
   * before its gate was reached) waits in `ended` until those before it
   * end too: releasing it would let the stream pass the earlier gates,
   * whose calls have not run (lock). */
  uint32_t gate_open;
  uint32_t *ended;
  int nended, capended;
  void *user; /* the wrapped cudaStream_t itself (NULL: default) */
  char *host; /* pinned area of small calls, made on first use */
  size_t host_bytes;
  uint64_t host_calls;   /* small calls staged on the stream (tests) */
  uint64_t kernel_calls; /* calls launched on it as kernels (tests) */
  void *reach_ev;        /* BRAID_CUDA_GATE=0: where a call waits (enqueue.c) */
};

/* A small-call area (pinned) of at least `want` bytes that a destroyed
 * stream left, its size in *bytes; NULL when there is none. */
char *stream_area_take(size_t want, size_t *bytes);
/* One more call on s ended with r (the first error is kept). */
void stream_complete(braid_stream *s, braid_result r);
/* Gate seq's work ended (or failed): the user's stream may pass it once
 * every gate before it has ended too. */
void stream_gate_end(braid_stream *s, uint32_t seq);

/* The wrapped cudaStream_t of a stream (non-NULL for every
 * CUDA stream, even the default one), NULL for host streams and NULL. */
void *enq_stream_cuda(const braid_stream *s);
/* 1 while a wrapped CUDA stream is being captured into a CUDA graph, 0 not
 * (or a host stream), -1 when CUDA cannot say. */
int enq_stream_capturing(const braid_stream *s);
/* How many small calls went on the stream with their copies (tests). */
uint64_t enq_stream_host_calls(braid_stream *s);
uint64_t enq_stream_kernel_calls(braid_stream *s);

#endif
