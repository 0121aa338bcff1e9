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
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/cuda/cuda_dev.h"
#include "transports/cuda/cuda_tp.h"

typedef struct held_mem {
  cuf_seg seg; /* the owner's: the peers' counts */
  void *dev[CUDA_RELEASE_DEVS];
  int ndev, rank;
  cuf_peer *peers; /* their pids (pidfds): exited ones hold nothing */
  int npeers;
  struct held_mem *next;
} held_mem;

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static held_mem *held_list;

/* The rank of a peer that still holds a mapping of m's memory, or -1. */
static int holder(held_mem *m) {
  for (int i = 0; m->seg.hdr != NULL && i < m->npeers; i++) {
    _Atomic int32_t *n = cuf_held(m->seg.hdr, m->peers[i].rank);
    if (n != NULL && atomic_load(n) > 0 && !cuf_peer_gone(&m->peers[i]))
      return m->peers[i].rank;
  }
  return -1;
}

static void free_held(held_mem *m) {
  for (int k = 0; k < m->ndev; k++)
    cudev_free(m->dev[k]);
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
  m->rank = rank;
  m->peers = peers;
  m->npeers = npeers;
  for (int i = 0; i < npeers; i++)
    m->peers[i].hdr = NULL; /* their segments are unmapped */
  int who = holder(m);
  if (who < 0) {
    free_held(m);
  } else {
    INFO(LOG_SHM,
         "cuda: rank %d: rank %d still maps this rank's device memory: it is "
         "freed once every peer has closed it (or exited)",
         rank, who);
    pthread_mutex_lock(&held_mu);
    m->next = held_list;
    held_list = m;
    pthread_mutex_unlock(&held_mu);
  }
  (void)cuda_release_sweep();
}

int cuda_release_sweep(void) {
  int left = 0;
  pthread_mutex_lock(&held_mu);
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
