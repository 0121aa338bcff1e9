#include "xchg.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "src/config.h"
#include "src/log.h"

int64_t xchg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint8_t xchg_byte(int src, int ch, int msg, size_t j) {
  return (uint8_t)(j * 131u + (j >> 8) * 7u + (unsigned)msg * 17u +
                   (unsigned)src * 29u + (unsigned)ch * 3u + 1u);
}

int xchg_setup(const tp_ops *tp, boot *b, int nchannels, int nslots,
               size_t slot_bytes, int timeout_ms, void **state, char *err,
               size_t errlen) {
  int n = boot_nranks(b), rank = boot_rank(b);
  uint8_t *peers = calloc((size_t)n, 1);
  if (peers == NULL)
    return BRAID_ERR_NOMEM;
  for (int i = 0; i < n; i++)
    peers[i] = i != rank;
  tp_setup ts;
  memset(&ts, 0, sizeof(ts));
  ts.boot = b;
  ts.rank = rank;
  ts.nranks = n;
  ts.nchannels = nchannels;
  ts.nslots = nslots;
  ts.slot_bytes = slot_bytes;
  ts.timeout_ms = timeout_ms;
  cfg_tp_settings(&ts.set);
  int r = tp->setup(&ts, peers, state);
  free(peers);
  if (r != BRAID_SUCCESS)
    snprintf(err, errlen, "%s setup: %s (%s)", tp->name,
             braid_result_string((braid_result)r), err_msg());
  return r;
}

typedef struct chan {
  tp_conn *c;
  uint8_t **sbuf; /* window buffers */
  uint64_t *ticket;
  int sent, sdone, rcvd;
  uint8_t *rbuf, *local;
  int local_msg; /* message the local operand was filled for */
} chan;

static void fill(uint8_t *p, size_t n, int src, int ch, int msg) {
  for (size_t j = 0; j < n; j++)
    p[j] = xchg_byte(src, ch, msg, j);
}

static int32_t local_val(int ch, int msg, size_t k) {
  return (int32_t)(k * 5u + (unsigned)msg * 11u + (unsigned)ch) - 1000;
}

static void red_sum_i32(void *dst, const void *a, const void *b, size_t n) {
  int32_t *d = dst;
  const int32_t *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
}

static int check(const uint8_t *p, size_t n, int src, int ch, int msg,
                 char *err, size_t errlen) {
  for (size_t j = 0; j < n; j++)
    if (p[j] != xchg_byte(src, ch, msg, j)) {
      snprintf(err, errlen,
               "message %d (%zu bytes) from rank %d channel %d: byte %zu is "
               "%u, expected %u",
               msg, n, src, ch, j, p[j], xchg_byte(src, ch, msg, j));
      return 1;
    }
  return 0;
}

static int check_reduce(const uint8_t *dstb, size_t n, int src, int ch, int msg,
                        char *err, size_t errlen) {
  uint8_t *m = malloc(n ? n : 1);
  if (m == NULL)
    return 1;
  fill(m, n, src, ch, msg);
  int bad = 0;
  for (size_t k = 0; k < n / 4 && !bad; k++) {
    int32_t mv, dv;
    memcpy(&mv, m + 4 * k, 4);
    memcpy(&dv, dstb + 4 * k, 4);
    int32_t want = (int32_t)((uint32_t)mv + (uint32_t)local_val(ch, msg, k));
    if (dv != want) {
      snprintf(err, errlen,
               "reduced message %d from rank %d channel %d: element %zu is "
               "%d, expected %d",
               msg, src, ch, k, dv, want);
      bad = 1;
    }
  }
  free(m);
  return bad;
}

int xchg_run(const tp_ops *tp, void *state, int rank, int peer, int nchannels,
             const size_t *sizes, int nsizes, int nmsg, int window, int reduce,
             int timeout_ms, char *err, size_t errlen) {
  size_t maxsz = 1;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] > maxsz)
      maxsz = sizes[i];
  chan *ch = calloc((size_t)nchannels, sizeof(chan));
  int rc = 0;
  if (ch == NULL)
    return BRAID_ERR_NOMEM;
  for (int k = 0; k < nchannels && rc == 0; k++) {
    ch[k].c = tp->conn(state, peer, k);
    ch[k].local_msg = -1;
    ch[k].sbuf = calloc((size_t)window, sizeof(uint8_t *));
    ch[k].ticket = calloc((size_t)window, sizeof(uint64_t));
    ch[k].rbuf = malloc(maxsz);
    ch[k].local = malloc(maxsz);
    if (ch[k].c == NULL) {
      snprintf(err, errlen, "%s: no connection to rank %d channel %d", tp->name,
               peer, k);
      rc = BRAID_ERR_INTERNAL;
    } else if (!ch[k].sbuf || !ch[k].ticket || !ch[k].rbuf || !ch[k].local) {
      rc = BRAID_ERR_NOMEM;
    }
    for (int w = 0; w < window && rc == 0; w++)
      if ((ch[k].sbuf[w] = malloc(maxsz)) == NULL)
        rc = BRAID_ERR_NOMEM;
  }
  tp_reducer red = {red_sum_i32, 4};
  int64_t deadline = xchg_now_ms() + timeout_ms;
  int todo = rc == 0 ? 1 : 0;
  while (todo && rc == 0) {
    todo = 0;
    int moved = 0;
    for (int k = 0; k < nchannels && rc == 0; k++) {
      chan *q = &ch[k];
      /* Retire finished sends, then post new ones while the window has
       * room. */
      while (q->sdone < q->sent) {
        int r = tp->send_done(q->c, q->ticket[q->sdone % window]);
        if (r == TP_AGAIN)
          break;
        if (r != BRAID_SUCCESS) {
          snprintf(err, errlen, "%s send_done to rank %d: %s (%s)", tp->name,
                   peer, braid_result_string((braid_result)r), err_msg());
          rc = r;
          break;
        }
        q->sdone++;
        moved = 1;
      }
      while (rc == 0 && q->sent < nmsg && q->sent - q->sdone < window) {
        size_t sz = sizes[q->sent % nsizes];
        uint8_t *b = q->sbuf[q->sent % window];
        fill(b, sz, rank, k, q->sent);
        int r = tp->isend(q->c, b, sz, &q->ticket[q->sent % window]);
        if (r == TP_AGAIN)
          break;
        if (r != BRAID_SUCCESS) {
          snprintf(err, errlen, "%s isend to rank %d: %s (%s)", tp->name, peer,
                   braid_result_string((braid_result)r), err_msg());
          rc = r;
          break;
        }
        q->sent++;
        moved = 1;
      }
      while (rc == 0 && q->rcvd < nmsg) {
        size_t sz = sizes[q->rcvd % nsizes];
        int r;
        if (reduce && q->local_msg != q->rcvd) {
          q->local_msg = q->rcvd;
          for (size_t e = 0; e < sz / 4; e++) {
            int32_t v = local_val(k, q->rcvd, e);
            memcpy(q->local + 4 * e, &v, 4);
          }
        }
        if (reduce) {
          r = tp->recv_reduce(q->c, q->local, q->rbuf, sz, &red);
        } else {
          r = tp->recv(q->c, q->rbuf, sz);
        }
        if (r == TP_AGAIN)
          break;
        if (r != BRAID_SUCCESS) {
          snprintf(err, errlen, "%s recv from rank %d: %s (%s)", tp->name, peer,
                   braid_result_string((braid_result)r), err_msg());
          rc = r;
          break;
        }
        if (reduce ? check_reduce(q->rbuf, sz, peer, k, q->rcvd, err, errlen)
                   : check(q->rbuf, sz, peer, k, q->rcvd, err, errlen))
          rc = BRAID_ERR_INTERNAL;
        q->rcvd++;
        moved = 1;
      }
      if (q->rcvd < nmsg || q->sdone < nmsg)
        todo = 1;
    }
    if (rc == 0 && todo && !moved) {
      int dead = -1;
      if (tp->check_peers(state, &dead) == BRAID_ERR_REMOTE) {
        snprintf(err, errlen, "%s: rank %d died (%s)", tp->name, dead,
                 err_msg());
        rc = BRAID_ERR_REMOTE;
      } else if (xchg_now_ms() > deadline) {
        snprintf(err, errlen,
                 "%s: timed out after %d ms (channel 0: sent %d, done %d, "
                 "received %d of %d)",
                 tp->name, timeout_ms, ch[0].sent, ch[0].sdone, ch[0].rcvd,
                 nmsg);
        rc = BRAID_ERR_TIMEOUT;
      } else {
        sched_yield();
      }
    }
  }
  for (int k = 0; k < nchannels; k++) {
    for (int w = 0; ch[k].sbuf && w < window; w++)
      free(ch[k].sbuf[w]);
    free(ch[k].sbuf);
    free(ch[k].ticket);
    free(ch[k].rbuf);
    free(ch[k].local);
  }
  free(ch);
  return rc;
}

int xchg_wait_recv(const tp_ops *tp, tp_conn *c, void *dst, size_t len,
                   int timeout_ms) {
  int64_t deadline = xchg_now_ms() + timeout_ms;
  for (;;) {
    int r = tp->recv(c, dst, len);
    if (r != TP_AGAIN)
      return r;
    if (xchg_now_ms() > deadline)
      return BRAID_ERR_TIMEOUT;
    sched_yield();
  }
}

xchg_idbox *xchg_idbox_new(void) {
  void *p = mmap(NULL, sizeof(xchg_idbox), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  memset(p, 0, sizeof(xchg_idbox));
  return p;
}

void xchg_idbox_free(xchg_idbox *b) {
  if (b != NULL)
    munmap(b, sizeof(*b));
}

int xchg_get_id(xchg_idbox *b, int rank, braid_unique_id *id, int timeout_ms,
                char *err, size_t errlen) {
  if (rank == 0) {
    if (boot_unique_id(&b->id) != BRAID_SUCCESS) {
      snprintf(b->err, sizeof(b->err), "%s", err_msg());
      __atomic_store_n(&b->state, -1, __ATOMIC_RELEASE);
      snprintf(err, errlen, "boot_unique_id: %s", b->err);
      return -1;
    }
    *id = b->id;
    __atomic_store_n(&b->state, 1, __ATOMIC_RELEASE);
    return 0;
  }
  int64_t deadline = xchg_now_ms() + timeout_ms;
  for (;;) {
    int s = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
    if (s == 1) {
      *id = b->id;
      return 0;
    }
    if (s < 0 || xchg_now_ms() > deadline) {
      snprintf(err, errlen, "no unique id from rank 0%s%s",
               s < 0 ? ": " : " in time", s < 0 ? b->err : "");
      return -1;
    }
    usleep(1000);
  }
}
