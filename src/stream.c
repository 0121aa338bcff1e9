/*
 * Streams: a host stream counts the calls queued on it and keeps the first
 * error; a wrapped CUDA stream adds a gate (cudev_gate) whose numbers the
 * user's stream passes in order (src/enqueue.c says how calls use them).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/log.h"
#include "src/stream.h"
#include "transports/cuda/cuda_tp.h"

void *enq_stream_cuda(const braid_stream *s) {
  return s != NULL ? s->cuda : NULL;
}

int enq_stream_capturing(const braid_stream *s) {
  return s != NULL && s->cuda != NULL ? cudev_stream_capturing(s->user) : 0;
}

uint64_t enq_stream_host_calls(braid_stream *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t n = s->host_calls;
  pthread_mutex_unlock(&s->lock);
  return n;
}

uint64_t enq_stream_kernel_calls(braid_stream *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t n = s->kernel_calls;
  pthread_mutex_unlock(&s->lock);
  return n;
}

void stream_complete(braid_stream *s, braid_result r) {
  pthread_mutex_lock(&s->lock);
  s->completed++;
  if (r != BRAID_SUCCESS && s->first_error == BRAID_SUCCESS)
    s->first_error = r;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

/* Gate seq's work ended: the stream may pass it once every gate before it
 * ended too. */
void stream_gate_end(braid_stream *s, uint32_t seq) {
  pthread_mutex_lock(&s->lock);
  uint32_t open = s->gate_open;
  if (seq == open + 1) {
    open = seq;
    for (int i = 0; i < s->nended;) /* the ones that waited for it */
      if (s->ended[i] == open + 1) {
        open++;
        s->ended[i] = s->ended[--s->nended];
        i = 0;
      } else {
        i++;
      }
  } else if ((int32_t)(seq - open) > 1) {
    if (s->nended == s->capended) {
      int cap = s->capended ? 2 * s->capended : 16;
      uint32_t *e = realloc(s->ended, sizeof *e * (size_t)cap);
      if (e != NULL) {
        s->ended = e;
        s->capended = cap;
      }
    }
    if (s->nended < s->capended)
      s->ended[s->nended++] = seq;
    else /* no memory: never hang the stream */
      open = seq;
  }
  if (open != s->gate_open) {
    cuda_held(-(int)(open - s->gate_open)); /* counted in enqueue.c */
    s->gate_open = open;
    cudev_gate_release(s->gate, open);
  }
  pthread_mutex_unlock(&s->lock);
}

/* ---- streams ----------------------------------------------------------- */

braid_result braid_stream_create(braid_stream **stream) {
  if (stream == NULL)
    return comm_arg_bad(NULL, "braid_stream_create: stream is NULL");
  braid_stream *s = calloc(1, sizeof *s);
  if (s == NULL)
    return BRAID_ERR_NOMEM;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  *stream = s;
  return BRAID_SUCCESS;
}

braid_result braid_stream_synchronize(braid_stream *s) {
  if (s == NULL)
    return comm_arg_bad(NULL, "braid_stream_synchronize: stream is NULL");
  pthread_mutex_lock(&s->lock);
  while (s->completed < s->submitted)
    pthread_cond_wait(&s->cond, &s->lock);
  braid_result r = s->first_error;
  s->first_error = BRAID_SUCCESS;
  pthread_mutex_unlock(&s->lock);
  return r;
}

braid_result braid_stream_query(braid_stream *s) {
  if (s == NULL)
    return comm_arg_bad(NULL, "braid_stream_query: stream is NULL");
  pthread_mutex_lock(&s->lock);
  braid_result r =
      s->completed < s->submitted ? BRAID_IN_PROGRESS : s->first_error;
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* A destroyed stream's gate and small-call area: the gate's words go back
 * to their pool once the user's stream has reached the last gate, the area
 * to this file's pool once the stream has also run the copies out of it
 * (`done`, recorded on the stream at destroy). Until then they stay on this
 * list, as the stream still reads them, and a later braid_stream_destroy
 * or stream_area_take that finds the stream past them lets them go. Freeing
 * the area (cudaFreeHost) would wait for the whole device, other streams
 * held at braid's gates included: it is freed so only when no event could
 * be recorded. */
typedef struct retired {
  cudev_gate *gate; /* NULL once let go */
  char *host;
  size_t bytes;
  void *done;
  struct retired *next;
} retired;
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static retired *retired_list;
static struct {
  char *host;
  size_t bytes;
} * areas; /* small-call areas no stream uses (retired_mu) */
static int nareas, capareas;

/* 0, or -1 when the pool cannot grow (retired_mu held). */
static int area_give(char *host, size_t bytes) {
  if (nareas == capareas) {
    int cap = capareas ? 2 * capareas : 8;
    void *a = realloc(areas, sizeof *areas * (size_t)cap);
    if (a == NULL)
      return -1;
    areas = a;
    capareas = cap;
  }
  areas[nareas].host = host;
  areas[nareas++].bytes = bytes;
  return 0;
}

/* 1 once r's stream is past its gate and its area, which are let go. */
static int retired_done(retired *r) {
  if (r->gate != NULL && !cudev_gate_free(r->gate))
    return 0;
  r->gate = NULL;
  if (r->host != NULL && r->done != NULL) {
    int q = cudev_event_query(r->done);
    if (q == CUDEV_AGAIN)
      return 0;
    cudev_event_destroy(r->done);
    r->done = NULL;
    if (q == BRAID_SUCCESS && area_give(r->host, r->bytes) == 0)
      r->host = NULL;
  }
  if (r->host != NULL)
    cuda_free_later(r->host, 1);
  return 1;
}

static void retired_sweep(void) { /* retired_mu held */
  for (retired **p = &retired_list; *p != NULL;) {
    retired *r = *p;
    if (retired_done(r)) {
      *p = r->next;
      free(r);
    } else {
      p = &r->next;
    }
  }
}

char *stream_area_take(size_t want, size_t *bytes) {
  char *host = NULL;
  pthread_mutex_lock(&retired_mu);
  retired_sweep();
  for (int i = 0; i < nareas && host == NULL; i++)
    if (areas[i].bytes >= want) {
      host = areas[i].host;
      *bytes = areas[i].bytes;
      areas[i] = areas[--nareas];
    }
  pthread_mutex_unlock(&retired_mu);
  return host;
}

static void retire(braid_stream *s) {
  (void)cuda_release_sweep(); /* what waited for held streams */
  retired *r = malloc(sizeof *r);
  if (r == NULL) { /* they stay for good */
    WARN(LOG_COLL, "braid_stream_destroy: out of memory: the gate's words "
                   "stay allocated");
    return;
  }
  *r = (retired){s->gate, s->host, s->host_bytes, NULL, NULL};
  /* a stream being captured would take the record into its graph */
  if (r->host != NULL && !enq_stream_capturing(s) &&
      cudev_event_create(&r->done) == BRAID_SUCCESS &&
      cudev_event_record(r->done, s->user) != BRAID_SUCCESS) {
    cudev_event_destroy(r->done);
    r->done = NULL;
  }
  pthread_mutex_lock(&retired_mu);
  retired_sweep();
  if (retired_done(r)) {
    free(r);
  } else {
    if (r->gate != NULL)
      WARN(LOG_COLL,
           "braid_stream_destroy: the CUDA stream has not reached braid's "
           "last call on it (work issued before it still runs, or never "
           "ends): the gate's words%s stay allocated until it has, as it "
           "will read them",
           r->host != NULL ? " and the small calls' pinned area" : "");
    r->next = retired_list;
    retired_list = r;
  }
  pthread_mutex_unlock(&retired_mu);
}

braid_result braid_stream_destroy(braid_stream *s) {
  if (s == NULL)
    return comm_arg_bad(NULL, "braid_stream_destroy: stream is NULL");
  braid_result r = braid_stream_synchronize(s);
  retire(s);
  free(s->ended);
  if (s->reach_ev != NULL)
    cudev_event_destroy(s->reach_ev);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return r;
}

braid_result braid_stream_from_cuda(void *cuda_stream, braid_stream **stream) {
  (void)cfg_get(); /* logging configured for the messages below */
  if (stream == NULL)
    return comm_arg_bad(NULL, "braid_stream_from_cuda: stream is NULL");
  *stream = NULL;
  if (!cudev_built()) {
    WARN(LOG_COLL, "braid_stream_from_cuda: unsupported: this braid was built "
                   "without CUDA (BRAID_CUDA=OFF or no CUDA toolkit found)");
    return BRAID_ERR_UNSUPPORTED;
  }
  if (cudev_count() <= 0) {
    const char *why = cudev_error();
    if (why == NULL || why[0] == '\0' || strcmp(why, "no error") == 0)
      why = "the CUDA runtime sees none (no GPU, or no driver)";
    WARN(LOG_COLL, "braid_stream_from_cuda: unsupported: no CUDA device: %s",
         why);
    return BRAID_ERR_UNSUPPORTED;
  }
  braid_stream *s = NULL;
  braid_result r = braid_stream_create(&s);
  if (r != BRAID_SUCCESS)
    return r;
  r = cudev_gate_new(cuda_stream, &s->gate);
  if (r != BRAID_SUCCESS) {
    WARN(LOG_COLL, "braid_stream_from_cuda: cannot attach to the stream: %s",
         cudev_error());
    braid_stream_destroy(s);
    return r;
  }
  static atomic_int told;
  const cfg_env *cfg = cfg_get();
  if (cfg->cuda_one_queue && cfg->cuda_gate && atomic_exchange(&told, 1) == 0)
    WARN(LOG_COLL,
         "BRAID_CUDA_GATE=1 with CUDA_DEVICE_MAX_CONNECTIONS=1: every CUDA "
         "stream shares one hardware queue, where a stream held at braid's "
         "gate holds braid's own work too: calls that braid runs on its "
         "stream will time out (BRAID_TIMEOUT); unset BRAID_CUDA_GATE");
  /* the default stream is NULL as a cudaStream_t: mark the wrapper anyway */
  s->cuda = cuda_stream != NULL ? cuda_stream : (void *)s->gate;
  s->user = cuda_stream;
  *stream = s;
  return BRAID_SUCCESS;
}
