/*
 * Freeing device memory that peer processes map (cuda_tp.h, "Exported
 * device memory").
 *
 * CUDA leaves freeing memory that another process still maps through an
 * IPC handle undefined: on a GPU, that process faults the next time it
 * touches the memory, and the fault ends its CUDA context (every context
 * on the GPU under MPS). A communicator's ranks do not end together: one
 * destroys it while a peer is still finishing a call, or has not got
 * there yet. Waiting for the peers in braid_comm_destroy would hang a
 * rank whose peer never destroys the communicator (it exited early, or it
 * keeps the communicator for longer); freeing at once is the fault above.
 *
 * So each peer counts the mappings it holds of a rank's memory in that
 * rank's segment (cuf_held): one more before it opens one, one less once
 * it has closed it, after its own work that touches the memory has ended.
 * A rank's teardown frees its memory at once when every count is zero or
 * the peer's process has exited (its mappings went with it); otherwise the
 * memory and the segment go on a list of this process, and every later
 * teardown or setup of a tp_cuda state frees what its peers have let go of
 * since. What is still held when the process exits goes with it.
 *
 * Freeing waits for the whole device: cudaFree and cudaFreeHost return
 * once every stream's work issued so far has run, a user's stream held at
 * braid's gate included, and a collective kernel that waits for its peers.
 * A teardown that frees while another communicator's call holds a stream
 * would wait for that call, and for ever where the call waits for a peer
 * that first tears down the same way (its own call held behind ours). So
 * while braid holds any stream of the process (cuda_held counts gates not
 * yet released and collective kernels not yet ended), memory to free waits
 * on a list instead (cuda_free_later), freed by the first sweep that finds
 * nothing held: setups and teardowns of communicators, and stream destroys.
 * Closing a mapping of a peer's memory (cudaIpcCloseMemHandle) waits for
 * the whole device on some drivers too (an H100's did: docs/CUDA.md), so
 * it waits the same way (cuda_close_later), and the peer's count drops
 * only once the mapping is closed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/cuda_dev.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"

typedef struct held_mem {
  cuf_seg seg; /* the owner's: the peers' counts */
  void *dev[CUDA_RELEASE_DEVS];
  int ndev;
  cuf_peer *peers; /* their pids (pidfds): exited ones hold nothing */
  int npeers;
  struct held_mem *next;
} held_mem;

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static held_mem *held_list;

/* Memory that waits for no stream to be held by braid (held_mu). */
typedef struct later_mem {
  void *p;
  int pinned;
} later_mem;
static later_mem *later;
static int nlater, caplater;
static atomic_long held_work; /* cuda_held */

/* Mappings of a peer's memory that wait for no stream to be held by braid
 * before they are closed (held_mu). */
typedef struct closing {
  cuf_seg seg; /* the peer's */
  int rank, drop;
  void *base[CUDA_RELEASE_DEVS];
  int nbase;
  struct closing *next;
} closing;
static closing *closing_list;

void cuda_held(int delta) { atomic_fetch_add(&held_work, delta); }

static void free_now(void *p, int pinned) {
  if (pinned)
    cudev_host_free(p);
  else
    cudev_free(p);
}

/* held_mu held */
static void free_later_locked(void *p, int pinned) {
  if (p == NULL)
    return;
  if (atomic_load(&held_work) <= 0) {
    free_now(p, pinned);
    return;
  }
  if (nlater == caplater) {
    int cap = caplater ? 2 * caplater : 16;
    later_mem *n = realloc(later, sizeof *n * (size_t)cap);
    if (n == NULL) {
      WARN(LOG_SHM,
           "cuda: out of memory: %s memory at %p stays allocated "
           "until the process exits",
           pinned ? "pinned host" : "device", p);
      return;
    }
    later = n;
    caplater = cap;
  }
  later[nlater++] = (later_mem){p, pinned};
}

void cuda_free_later(void *p, int pinned) {
  pthread_mutex_lock(&held_mu);
  free_later_locked(p, pinned);
  pthread_mutex_unlock(&held_mu);
}

int cuda_free_waiting(void) {
  pthread_mutex_lock(&held_mu);
  int n = nlater;
  for (closing *c = closing_list; c != NULL; c = c->next)
    n++;
  pthread_mutex_unlock(&held_mu);
  return n;
}

static void close_now(cuf_seg *seg, int rank, int drop, void *const *base,
                      int nbase) {
  for (int k = 0; k < nbase; k++)
    if (base[k] != NULL)
      cudev_ipc_close(base[k]);
  _Atomic int32_t *n = seg->hdr != NULL ? cuf_held(seg->hdr, rank) : NULL;
  if (n != NULL && drop > 0)
    atomic_fetch_sub(n, drop);
  cuf_seg_unmap(seg);
}

void cuda_close_later(cuf_seg *seg, int rank, int drop, void *const *base,
                      int nbase) {
  closing *c = NULL;
  pthread_mutex_lock(&held_mu);
  if (atomic_load(&held_work) > 0 && nbase <= CUDA_RELEASE_DEVS)
    c = calloc(1, sizeof *c);
  if (c == NULL) {
    close_now(seg, rank, drop, base, nbase);
  } else {
    c->seg = *seg;
    c->rank = rank;
    c->drop = drop;
    for (int k = 0; k < nbase; k++)
      c->base[k] = base[k];
    c->nbase = nbase;
    c->next = closing_list;
    closing_list = c;
  }
  *seg = (cuf_seg){0};
  pthread_mutex_unlock(&held_mu);
}

/* The rank of a peer that still holds a mapping of m's memory, or -1. */
static int holder(held_mem *m) {
  for (int i = 0; m->seg.hdr != NULL && i < m->npeers; i++) {
    _Atomic int32_t *n = cuf_held(m->seg.hdr, m->peers[i].rank);
    if (n != NULL && atomic_load(n) > 0 && !cuf_peer_gone(&m->peers[i]))
      return m->peers[i].rank;
  }
  return -1;
}

static void free_held(held_mem *m) { /* held_mu held */
  for (int k = 0; k < m->ndev; k++)
    free_later_locked(m->dev[k], 0);
  cuf_seg_unmap(&m->seg);
  for (int i = 0; i < m->npeers; i++)
    if (m->peers[i].pidfd >= 0)
      close(m->peers[i].pidfd);
  free(m->peers);
  free(m);
}

void cuda_release(int rank, cuf_seg *seg, void *const *dev, int ndev,
                  cuf_peer *peers, int npeers) {
  held_mem *m = calloc(1, sizeof *m);
  if (m == NULL) {
    WARN(LOG_SHM,
         "cuda: rank %d: out of memory: its device memory that peers map "
         "stays allocated until the process exits",
         rank);
    return;
  }
  m->seg = *seg;
  *seg = (cuf_seg){0};
  for (int k = 0; k < ndev && k < CUDA_RELEASE_DEVS; k++)
    if (dev[k] != NULL)
      m->dev[m->ndev++] = dev[k];
  m->peers = peers;
  m->npeers = npeers;
  for (int i = 0; i < npeers; i++)
    m->peers[i].hdr = NULL; /* their segments are unmapped */
  int who = holder(m);
  pthread_mutex_lock(&held_mu);
  if (who < 0) {
    free_held(m);
  } else {
    INFO(LOG_SHM,
         "cuda: rank %d: rank %d still maps this rank's device memory: it is "
         "freed once every peer has closed it (or exited)",
         rank, who);
    m->next = held_list;
    held_list = m;
  }
  pthread_mutex_unlock(&held_mu);
  (void)cuda_release_sweep();
}

int cuda_release_sweep(void) {
  int left = 0;
  pthread_mutex_lock(&held_mu);
  if (atomic_load(&held_work) <= 0) {
    while (closing_list != NULL) {
      closing *c = closing_list;
      closing_list = c->next;
      close_now(&c->seg, c->rank, c->drop, c->base, c->nbase);
      free(c);
    }
    for (int i = 0; i < nlater; i++)
      free_now(later[i].p, later[i].pinned);
    nlater = 0;
  }
  for (held_mem **p = &held_list; *p != NULL;) {
    held_mem *m = *p;
    if (holder(m) < 0) {
      *p = m->next;
      free_held(m);
    } else {
      left++;
      p = &m->next;
    }
  }
  pthread_mutex_unlock(&held_mu);
  return left;
}
