/*
 * Shared-memory transport, setup and teardown (transports/shm.c has the
 * rest): each rank creates one segment for its incoming rings, publishes
 * its name over the bootstrap, maps its peers' segments and unlinks its own
 * name once all are mapped; single-copy reads (CMA) are agreed per pair.
 */
#include "transports/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/common.h"

/* Single copy saves the sender's copy but keeps its send open until the
 * receiver has read: where every rank of the host runs on a CPU of its own
 * the receiver reads at once, and from 16 KiB on one read beats two copies
 * (2 ranks, 16 to 64 KiB: allgather, broadcast, reduce_scatter and
 * allreduce 1.3 to 1.7x faster than through the slots, docs/PERFORMANCE.md);
 * where ranks share CPUs a sender that waits for a descheduled receiver
 * loses more than the copy (4 ranks on 2 CPUs: reduce_scatter 1.5x slower
 * from 16 KiB), so single copy starts at 64 KiB there. */
int shm_ranks_fit(int nlocal) {
  cpu_set_t set;
  int ncpus = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    ncpus = CPU_COUNT(&set);
  return ncpus > 0 && nlocal <= ncpus;
}

size_t shm_cma_default(int nlocal) {
  return shm_ranks_fit(nlocal) ? SHM_CMA_THRESHOLD_OWN_CPU
                               : SHM_DEFAULT_CMA_THRESHOLD;
}

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

static _Atomic int shm_cma_mode = -1;
static _Atomic int shm_cma_logged;

void shm_force_cma(int mode) { atomic_store(&shm_cma_mode, mode); }

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static shm_ring *ring_at(shm_hdr *h, int lpeer, int channel) {
  uint64_t i = (uint64_t)lpeer * (uint64_t)h->nchannels + (uint64_t)channel;
  return (shm_ring *)((char *)h + h->rings_off + i * h->ring_bytes);
}

void shm_teardown(void *state) {
  shm_state *st = state;
  if (!st)
    return;
  for (int i = 0; st->peers && i < st->npeers; i++) {
    shm_peer *p = &st->peers[i];
    if (p->hdr)
      munmap(p->hdr, p->size);
    if (p->pidfd >= 0)
      close(p->pidfd);
  }
  if (st->me)
    munmap(st->me, st->me_size);
  for (int i = 0; st->conns && i < st->npeers * st->nchannels; i++) {
    free(st->conns[i].cmaq);
    free(st->conns[i].bounce);
  }
  free(st->conns);
  free(st->pend);
  free(st->peers);
  free(st->lidx);
  free(st);
}

static void seg_unlink(shm_state *st) {
  if (st->name[0] && !st->unlinked)
    shm_unlink(st->name);
  st->unlinked = 1;
}

typedef struct shm_rec {
  char name[64];
  int32_t pid, status;
  uint64_t size, pidns;
} shm_rec;

uint64_t shm_segment_bytes(int npeers, int nchannels, int nslots,
                           size_t slot_bytes) {
  uint64_t data = round_up(slot_bytes, SHM_CL);
  uint64_t slot = sizeof(shm_slot) + data;
  uint64_t ring = sizeof(shm_ring) + (uint64_t)nslots * slot;
  uint64_t nrings = (uint64_t)npeers * (uint64_t)nchannels;
  uint64_t hdr =
      round_up(sizeof(shm_hdr) + sizeof(int32_t) * (uint64_t)npeers, 4096);
  if (nrings > 0 && ring > (UINT64_MAX / 2) / nrings)
    return 0;
  return hdr + nrings * ring;
}

/* Creates, sizes and initialises this rank's segment. */
static int seg_create(shm_state *st, boot *b) {
  uint64_t data = round_up(st->slot_bytes, SHM_CL);
  uint64_t slot = sizeof(shm_slot) + data;
  uint64_t ring = sizeof(shm_ring) + (uint64_t)st->nslots * slot;
  uint64_t hdr =
      round_up(sizeof(shm_hdr) + sizeof(int32_t) * (uint64_t)st->npeers, 4096);
  uint64_t total =
      shm_segment_bytes(st->npeers, st->nchannels, st->nslots, st->slot_bytes);
  if (total == 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "shm: segment size overflows (nslots %d, slot_bytes %zu)",
               st->nslots, st->slot_bytes);
  char detail[96];
  snprintf(detail, sizeof(detail),
           " (%d peers x %d channels x %d slots x %zu bytes)", st->npeers,
           st->nchannels, st->nslots, st->slot_bytes);
  tp_seg_req req = {.who = "shm",
                    .prefix = "braid",
                    .token = tp_job_token(b),
                    .rank = st->rank,
                    .bytes = total,
                    .detail = detail,
                    .hint = "; /dev/shm is too small (enlarge it, e.g. "
                            "docker --shm-size, or lower BRAID_BUFFSIZE / "
                            "BRAID_NSLOTS)"};
  void *m = NULL;
  int rc = tp_seg_create(&req, st->name, sizeof(st->name), &m);
  if (rc)
    return rc;
  shm_hdr *h = m;
  st->me = h;
  st->me_size = total;
  h->pid = (int32_t)getpid();
  h->rank = st->rank;
  h->npeers = st->npeers;
  h->nchannels = st->nchannels;
  h->nslots = st->nslots;
  h->slot_data = data;
  h->slot_bytes = slot;
  h->ring_bytes = ring;
  h->rings_off = hdr;
  h->total = total;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  atomic_store(&h->cause, -1);
  atomic_store(&h->cpu, -1);
  atomic_store(&h->wait_on, -1);
  h->cma_magic = SHM_MAGIC ^ ((uint64_t)ts.tv_nsec << 20) ^
                 (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
  h->cma_addr = (uint64_t)(uintptr_t)&h->cma_magic;
  for (int i = 0; i < st->npeers; i++)
    h->peer_rank[i] = st->peers[i].rank;
  h->magic = SHM_MAGIC; /* peers read it after the next exchange */
  return BRAID_SUCCESS;
}

/* Maps peer p's segment, finds our rings there, probes CMA, opens a pidfd. */
static int peer_attach(shm_state *st, shm_peer *p, const shm_rec *rec,
                       int use_cma) {
  p->pid = rec->pid;
  void *m = NULL;
  int e = tp_seg_map(rec->name, rec->size, &m);
  if (!e)
    p->hdr = m, p->size = rec->size;
  if (e)
    return ERR(BRAID_ERR_SYSTEM,
               "shm: rank %d cannot map the segment %s of rank %d: %s "
               "(is rank %d on this host?)",
               st->rank, rec->name, p->rank, strerror(e), p->rank);
  shm_hdr *h = p->hdr;
  if (h->magic != SHM_MAGIC || h->rank != p->rank ||
      h->nchannels != st->nchannels)
    return ERR(BRAID_ERR_INTERNAL,
               "shm: the segment of rank %d is not what rank %d expects "
               "(channels %d vs %d)",
               p->rank, st->rank, (int)h->nchannels, st->nchannels);
  p->pidfd = -1;
  p->pid_ok = rec->pidns == tp_pidns_id();
  if (!p->pid_ok) {
    INFO(LOG_SHM,
         "shm: rank %d is in another pid namespace: no single-copy, "
         "liveness through the bootstrap only",
         p->rank);
  } else {
    p->pidfd = tp_pidfd_open(p->pid);
    if (p->pidfd < 0 && errno == ESRCH)
      return ERR(BRAID_ERR_REMOTE, "shm: rank %d (pid %d) exited during setup",
                 p->rank, p->pid);
  }
  p->can_read = 0;
  if (use_cma && p->pid_ok) {
    uint64_t v = 0;
    struct iovec l = {&v, sizeof(v)};
    struct iovec r = {(void *)(uintptr_t)h->cma_addr, sizeof(v)};
    ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
    p->can_read = n == (ssize_t)sizeof(v) && v == h->cma_magic;
    if (!p->can_read) {
      const char *why = n < 0 ? strerror(errno) : "wrong bytes";
      if (!atomic_exchange(&shm_cma_logged, 1))
        INFO(LOG_SHM,
             "shm: single-copy reads from rank %d (pid %d) unavailable (%s); "
             "using copies",
             p->rank, p->pid, why);
      else
        TRACE(LOG_SHM, "shm: no single-copy from rank %d: %s", p->rank, why);
    }
  }
  return BRAID_SUCCESS;
}

/* Points peer i's connections at our rings in its segment and its rings in
 * ours. */
static void slots_prefault(char *base, uint64_t stride, uint64_t n);
static int conns_init(shm_state *st, int i) {
  shm_peer *p = &st->peers[i];
  shm_hdr *h = p->hdr;
  int at = -1;
  for (int k = 0; k < h->npeers; k++)
    if (h->peer_rank[k] == st->rank)
      at = k;
  if (at < 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "shm setup: rank %d lists rank %d as a shm peer but not the "
               "other way round",
               st->rank, p->rank);
  for (int ch = 0; ch < st->nchannels; ch++) {
    tp_conn *c = &st->conns[i * st->nchannels + ch];
    *c = (tp_conn){.st = st, .peer = p->rank, .channel = ch, .lpeer = i};
    c->tx_hdr = h;
    c->tx = ring_at(h, at, ch);
    c->tx_base = (char *)c->tx + sizeof(shm_ring);
    c->tx_nslots = (uint64_t)h->nslots;
    c->tx_stride = h->slot_bytes;
    c->tx_cap = h->slot_data;
    c->rx = ring_at(st->me, i, ch);
    c->rx_base = (char *)c->rx + sizeof(shm_ring);
    atomic_store(&c->rx->cma_ok, (uint32_t)p->can_read);
    slots_prefault(c->tx_base, c->tx_stride, c->tx_nslots);
    slots_prefault(c->rx_base, st->me->slot_bytes, (uint64_t)st->nslots);
    if (!(c->cmaq = calloc(c->tx_nslots, sizeof(shm_cmaq))))
      return ERR(BRAID_ERR_NOMEM, "shm setup: no memory");
  }
  return BRAID_SUCCESS;
}

/* Maps the page of every slot's header (and a small message's data) into
 * this process now: the first pass through each slot faulted it in, which
 * made the first nslots small calls after init 4-8 us instead of 1 on a VM
 * (docs/PERFORMANCE.md, "Waiting"). */
static void slots_prefault(char *base, uint64_t stride, uint64_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg <= 0)
    return;
  for (uint64_t i = 0; i < n; i++) {
    char *p = base + i * stride;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1);
    uintptr_t e =
        ((uintptr_t)p + 256 + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0)
      continue;
#endif
    for (uintptr_t q = a; q < e; q += (uintptr_t)pg)
      (void)*(volatile char *)q;
  }
}

int shm_setup(tp_setup *su, const uint8_t *peers, void **state) {
  if (!su || !state)
    return ERR(BRAID_ERR_INVALID_ARG, "shm setup: no setup or state");
  *state = NULL;
  boot *b = su->boot;
  if (!b || !peers || su->nranks < 1 || su->rank < 0 || su->rank >= su->nranks)
    return ERR(BRAID_ERR_INVALID_ARG,
               "shm setup: missing bootstrap/peers or bad rank %d of %d",
               su->rank, su->nranks);
  if (su->nchannels < 1 || su->nslots < 1 || su->slot_bytes == 0 ||
      su->slot_bytes > (size_t)UINT32_MAX - SHM_CL)
    return ERR(BRAID_ERR_INVALID_ARG,
               "shm setup: nchannels (%d) and nslots (%d) must be >= 1 and "
               "slot_bytes (%zu) in 1..4 GiB",
               su->nchannels, su->nslots, su->slot_bytes);
  /* Every failure below is shared through the two exchanges, so that all
   * ranks fail setup together instead of waiting for each other. */
  shm_state *st = calloc(1, sizeof(*st));
  size_t n = (size_t)su->nranks, nconn = n * (size_t)su->nchannels;
  shm_rec *recs = calloc(n, sizeof(shm_rec));
  int32_t *all = calloc(n, sizeof(int32_t));
  shm_rec mine = {.pid = (int32_t)getpid(), .pidns = tp_pidns_id()};
  int rc = BRAID_SUCCESS, use_cma = 0;
  if (st) {
    st->lidx = malloc(sizeof(int) * n);
    st->peers = calloc(n, sizeof(shm_peer));
    st->conns = calloc(nconn, sizeof(tp_conn));
    st->pend = calloc(nconn, sizeof(tp_conn *));
  }
  if (!st || !recs || !all || !st->lidx || !st->peers || !st->conns ||
      !st->pend) {
    rc = ERR(BRAID_ERR_NOMEM, "shm setup: no memory for %d ranks", su->nranks);
  } else {
    *st = (shm_state){.rank = su->rank,
                      .nranks = su->nranks,
                      .nchannels = su->nchannels,
                      .nslots = su->nslots,
                      .slot_bytes = su->slot_bytes,
                      .lidx = st->lidx,
                      .peers = st->peers,
                      .conns = st->conns,
                      .pend = st->pend};
    int mode = atomic_load(&shm_cma_mode);
    use_cma = mode >= 0 ? mode : su->set.shm_cma;
    for (int i = 0; i < su->nranks; i++) {
      int on = peers[i] && i != su->rank; /* self is tp_self's job */
      st->lidx[i] = on ? st->npeers : -1;
      if (on)
        st->peers[st->npeers++] = (shm_peer){.rank = i, .pidfd = -1};
    }
    st->ranks_fit = shm_ranks_fit(st->npeers + 1);
    st->cma_threshold = su->set.cma_threshold ? su->set.cma_threshold
                                              : shm_cma_default(st->npeers + 1);
    if (use_cma)
      prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (st->npeers > 0) {
      rc = seg_create(st, b);
      memcpy(mine.name, st->name, sizeof(mine.name));
      mine.size = st->me_size;
    }
  }
  /* Phase 1: segment names (or failures) go round. */
  mine.status = rc ? 1 : 0;
  int x = 0;
  rc = tp_setup_round(su, rc, &mine, recs, sizeof(mine),
                      offsetof(shm_rec, status), "shm setup",
                      "create its segment", &x);
  if (rc || !st) /* st: NULL only when rc says so */
    goto out;
  /* Attach to every peer; failures go round in phase 2. */
  int32_t status = 0;
  for (int i = 0; i < st->npeers && !status; i++) {
    shm_peer *p = &st->peers[i];
    if (!recs[p->rank].name[0])
      status = ERR(BRAID_ERR_INVALID_ARG,
                   "shm setup: rank %d lists rank %d as a shm peer, but "
                   "rank %d has no shm peers",
                   st->rank, p->rank, p->rank);
    else if (!(status = peer_attach(st, p, &recs[p->rank], use_cma)))
      status = conns_init(st, i);
  }
  /* Phase 2: everyone has mapped everything, so the names can go. */
  rc = tp_setup_round(su, status, &status, all, sizeof(status), 0, "shm setup",
                      "attach to its shm peers", &x);
  seg_unlink(st);
  if (rc)
    goto out;
  /* Peers wrote cma_ok into our rings before phase 2. */
  for (size_t i = 0; i < (size_t)st->npeers * (size_t)st->nchannels; i++) {
    tp_conn *c = &st->conns[i];
    c->tx_cma = use_cma && atomic_load(&c->tx->cma_ok);
    /* writing into the peer takes the access reading it took; and a
     * receiver waits for a piece the sender writes, which a sender that
     * shares its CPU may be descheduled in the middle of */
    c->tx_share = c->tx_cma && st->peers[c->lpeer].can_read && st->ranks_fit;
  }
  INFO(LOG_SHM,
       "shm: rank %d connected to %d local peers, %d channels, %d "
       "slots of %zu bytes, single-copy %s",
       st->rank, st->npeers, st->nchannels, st->nslots, st->slot_bytes,
       use_cma ? "allowed" : "off");
out:
  if (st)
    seg_unlink(st);
  free(recs);
  free(all);
  if (rc) {
    shm_teardown(st);
    return rc;
  }
  *state = st;
  return BRAID_SUCCESS;
}
