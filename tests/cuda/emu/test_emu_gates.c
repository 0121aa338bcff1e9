/*
 * A wrapped CUDA stream passes its gates in order (src/stream.c): a gate
 * whose work ended before an earlier one's (communicators sharing the
 * stream, a call that failed before the stream reached it) is released
 * only once the earlier ones are, so the stream never runs ahead of a call
 * that has not run; gates ended from several threads at once all open.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "src/stream.h"

/* Polls an event for at most ms milliseconds; 1 once it has completed. */
static int done_within(cudaEvent_t ev, int ms) {
  for (int i = 0; i < ms; i++) {
    if (cudaEventQuery(ev) == cudaSuccess)
      return 1;
    usleep(1000);
  }
  return cudaEventQuery(ev) == cudaSuccess;
}

/* A wrapped stream with gates 1..n on it, then an event. */
static braid_stream *gated(int n, cudaStream_t *cs, cudaEvent_t *ev) {
  cr_assert_eq(cudaSetDevice(0), cudaSuccess);
  cr_assert_eq(cudaStreamCreateWithFlags(cs, cudaStreamNonBlocking),
               cudaSuccess);
  braid_stream *s = NULL;
  cr_assert_eq(braid_stream_from_cuda((void *)*cs, &s), BRAID_SUCCESS);
  for (int i = 1; i <= n; i++)
    cr_assert_eq(cudev_gate_enqueue(s->gate, (uint32_t)i), BRAID_SUCCESS);
  s->gate_seq = (uint32_t)n;
  cr_assert_eq(cudaEventCreate(ev), cudaSuccess);
  cr_assert_eq(cudaEventRecord(*ev, *cs), cudaSuccess);
  return s;
}

Test(emu_gates, later_gates_ended_first_wait_for_the_earlier) {
  cudaStream_t cs;
  cudaEvent_t ev;
  braid_stream *s = gated(3, &cs, &ev);
  cr_assert(done_within(ev, 0) == 0);
  stream_gate_end(s, 3);
  stream_gate_end(s, 2);
  usleep(50 * 1000);
  cr_assert(cudev_gate_reached(s->gate, 1), "the stream reached gate 1");
  cr_assert(!cudev_gate_reached(s->gate, 2),
            "the stream passed gate 1, whose work has not ended");
  cr_assert_eq(cudaEventQuery(ev), cudaErrorNotReady);
  stream_gate_end(s, 1);
  cr_assert(done_within(ev, 5000), "gates 1-3 ended, the stream still held");
  cr_assert(cudev_gate_reached(s->gate, 3));
  cr_assert_eq(s->gate_open, 3u);
  cr_assert_eq(s->nended, 0);
  cudaEventDestroy(ev);
  cr_assert_eq(braid_stream_destroy(s), BRAID_SUCCESS);
  cudaStreamDestroy(cs);
}

#define GATES 400
#define THREADS 4

typedef struct ender {
  braid_stream *s;
  int first;
} ender;

/* Thread t ends gates t+1, t+1+THREADS, ... from the last down. */
static void *end_some(void *arg) {
  ender *e = arg;
  int top = GATES - (GATES - e->first) % THREADS;
  for (int g = top; g >= e->first; g -= THREADS)
    stream_gate_end(e->s, (uint32_t)g);
  return NULL;
}

Test(emu_gates, gates_ended_by_several_threads_all_open) {
  cudaStream_t cs;
  cudaEvent_t ev;
  braid_stream *s = gated(GATES, &cs, &ev);
  pthread_t th[THREADS];
  ender e[THREADS];
  for (int t = 0; t < THREADS; t++) {
    e[t] = (ender){s, t + 1};
    cr_assert_eq(pthread_create(&th[t], NULL, end_some, &e[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    pthread_join(th[t], NULL);
  cr_assert_eq(s->gate_open, (uint32_t)GATES);
  cr_assert_eq(s->nended, 0, "%d ended gates never released", s->nended);
  cr_assert(done_within(ev, 10000), "every gate ended, the stream held");
  cudaEventDestroy(ev);
  cr_assert_eq(braid_stream_destroy(s), BRAID_SUCCESS);
  cudaStreamDestroy(cs);
}
