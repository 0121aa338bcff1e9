/*
 * Device memory on a communicator (src/comm_dev.h): which transport carries
 * device buffers to each peer, the internal stream, device scratch and
 * pinned staging.
 *
 * Setup is collective. Every rank publishes whether it can serve device
 * buffers (a CUDA build, the device, a stream) and its host; a host is
 * usable when all of its ranks can. Each rank then derives the same answer
 * for every pair: same usable host -> tp_cuda (CUDA IPC); two usable hosts
 * -> staged over the pair's host transport; otherwise none (NULL: the
 * executor stages the whole call through host memory). tp_cuda's setup is
 * itself collective and fails on every rank together; then every same-host
 * pair falls back to none.
 *
 * Device-wide waits. While a call on a user's CUDA stream runs, that stream
 * is held at its gate (cudev_gate) until the call is done. Anything this
 * thread does that waits for the whole device -- cudaFree, cudaFreeHost,
 * cudaDeviceSynchronize, on some drivers cudaIpcCloseMemHandle -- would wait
 * for the held stream, which waits for this thread: a deadlock. So:
 *  - scratch and staging grow without freeing: the outgrown buffer goes on
 *    a list freed at comm_dev_teardown, and each growth at least doubles,
 *    so the list holds less than the current buffer's size in all;
 *  - teardown frees with cuda_free_later (transports/cuda/cuda_release.c):
 *    while any communicator of the process holds a stream (a gate not yet
 *    released, a collective kernel not yet ended), the memory waits, and a
 *    later setup, teardown or stream destroy frees it;
 *  - only the internal stream is ever synchronised during an operation,
 *    never the device;
 *  - setup (the first collective with device buffers) creates a stream,
 *    cudaMalloc's tp_cuda's IPC region and maps the peers' regions, and a
 *    setup that fails frees them again (cudaFree). On a CUDA stream it runs
 *    in the issuing thread before the call's gate is enqueued (src/
 *    enqueue.c), so no stream is held by braid meanwhile;
 *  - staged's pinned slots are cudaHostAlloc'd on first use, which may be
 *    on the progress thread while a gate holds the user's stream.
 *    cudaHostAlloc does not wait for other streams' work, but it takes the
 *    driver's allocation locks: a user thread that meanwhile blocks in the
 *    driver on the held stream (a synchronous copy to pageable memory
 *    issued behind the call, for example) can hold such a lock, and both
 *    would wait. Synchronising the user's stream only with
 *    cudaStreamSynchronize / events avoids it.
 */
#include "src/comm_dev.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/view.h"
#include "device/cuda_dev.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"

/* A buffer outgrown during an operation, freed at teardown (see
 * "Device-wide waits" above). */
typedef struct dev_retired {
  void *p;
  int host; /* 1: cudev_host_alloc'd, 0: cudev_malloc'd */
} dev_retired;

typedef struct dev_list {
  dev_retired *v;
  int n, cap;
} dev_list;

/* c->dev with what teardown needs. */
typedef struct dev_priv {
  comm_dev pub;
  void *cuda_state;                  /* tp_cuda, or NULL */
  void *staged[COMM_MAX_TRANSPORTS]; /* per host transport of c->tp */
  int ncuda, nstaged;                /* peers on each */
  dev_list retired;                  /* outgrown scratch and staging */
  uint8_t *host_used; /* per peer: a host-routed channel reached it */
} dev_priv;

/* Frees the buffers of a retired list, and the list. */
static void list_release(dev_list *l) {
  for (int i = 0; i < l->n; i++)
    cuda_free_later(l->v[i].p, l->v[i].host);
  free(l->v);
  *l = (dev_list){NULL, 0, 0};
}

typedef struct dev_rec {
  int32_t ok;
  int32_t device;
  int32_t vertex;       /* the GPU's vertex in the rank's c->topo, or -1 */
  uint32_t topo_sig;    /* which topology the vertex numbers (topo_sig) */
  uint64_t host_max;    /* this rank's BRAID_CUDA_HOST_MAX */
  uint64_t kernel_max;  /* this rank's BRAID_CUDA_KERNEL_MAX */
  uint64_t kernel_slot; /* and BRAID_CUDA_KERNEL_SLOT */
  uint64_t buffsize; /* this rank's BRAID_CUDA_BUFFSIZE (or BRAID_BUFFSIZE) */
  char busid[32];
} dev_rec;

/* A setting every rank must share: rank 0's, with a warning where this
 * rank's differs. */
static uint64_t rank0s(const braid_comm *c, const char *name, uint64_t mine,
                       uint64_t rank0) {
  if (mine != rank0)
    WARN(LOG_ENV, "rank %d: %s is %llu here but %llu on rank 0; using rank 0's",
         c->rank, name, (unsigned long long)mine, (unsigned long long)rank0);
  return rank0;
}

static tp_conn *host_conn(void *arg, int peer, int channel) {
  return comm_conn((braid_comm *)arg, peer, channel);
}

/* Whether this rank can serve device buffers on `device`: BRAID_SUCCESS,
 * or why not. */
static braid_result local_ok(comm_dev *d, int device) {
  if (!cudev_built())
    return ERR(BRAID_ERR_UNSUPPORTED,
               "libbraid was built without CUDA (BRAID_CUDA=OFF or "
               "no nvcc at build time)");
  int n = cudev_count();
  if (n <= 0)
    return ERR(BRAID_ERR_UNSUPPORTED,
               "no CUDA device is visible (driver or GPU missing): %s",
               cudev_error());
  if (device < 0 || device >= n)
    return ERR(BRAID_ERR_UNSUPPORTED, "GPU %d does not exist (%d visible)",
               device, n);
  /* the kernels loaded now, before any gate holds a stream: loaded lazily
   * at their first launch, behind a gate, they could wait for it */
  if (cudev_set_device(device) != BRAID_SUCCESS ||
      cudev_preload() != BRAID_SUCCESS ||
      cudev_stream_create(&d->stream) != BRAID_SUCCESS ||
      cudev_event_create(&d->order_ev) != BRAID_SUCCESS)
    return ERR(BRAID_ERR_UNSUPPORTED, "GPU %d: %s", device, cudev_error());
  return BRAID_SUCCESS;
}

/* Host usability: every rank of the host is ok. */
static int host_ok(braid_comm *c, const dev_rec *all, int r) {
  for (int q = 0; q < c->nranks; q++)
    if (boot_same_host(c->boot, r, q) && !all[q].ok)
      return 0;
  return 1;
}

static void place_gpu(braid_comm *c, comm_dev *d) {
  d->gpu_vertex = -1;
  if (c->topo == NULL)
    return;
  char busid[32];
  if (cudev_busid(d->device, busid, sizeof busid) != BRAID_SUCCESS) {
    INFO(LOG_TOPO, "rank %d: no PCI bus id for GPU %d: %s", c->rank, d->device,
         cudev_error());
    return;
  }
  d->gpu_vertex = topo_find_busid(c->topo, busid);
  if (d->gpu_vertex < 0)
    INFO(LOG_TOPO, "rank %d: GPU %d (%s) is not in the topology", c->rank,
         d->device, busid);
}

/* tp_cuda over the same-host pairs (collective: every rank calls it when
 * any pair of the job uses it). 0: set up or fell back; else an error. */
static braid_result cuda_setup(braid_comm *c, dev_priv *p, const uint8_t *on) {
  tp_setup st;
  memset(&st, 0, sizeof st);
  st.boot = c->boot;
  st.rank = c->rank;
  st.nranks = c->nranks;
  st.nchannels = c->nchannels + 1;
  st.nslots = c->nslots;
  st.slot_bytes = p->pub.slot_bytes;
  st.timeout_ms = c->timeout_ms;
  cfg_tp_settings(&st.set);
  void *state = NULL;
  err_clear(); /* what setup records is its own */
  int r = tp_cuda.setup(&st, on, &state);
  if (r == BRAID_SUCCESS) {
    p->cuda_state = state;
    if (state != NULL && p->pub.stream != NULL)
      cuda_tp_set_stream(state, p->pub.stream);
    return BRAID_SUCCESS;
  }
  /* it failed on every rank: check that the bootstrap still works, then
   * stage same-host pairs through host memory */
  char why[sizeof c->last_error];
  snprintf(why, sizeof why, "%s", err_msg()[0] ? err_msg() : "no detail");
  braid_result b = boot_barrier(c->boot);
  if (b != BRAID_SUCCESS)
    return comm_fail(c, b,
                     "cuda transport setup failed on rank %d: %s; then the "
                     "bootstrap failed: %s",
                     c->rank, why, err_msg());
  WARN(LOG_SHM,
       "rank %d: the cuda transport is unavailable (%s); device buffers "
       "between ranks of one host go through host memory",
       c->rank, why);
  return BRAID_SUCCESS;
}

/* The staged adapter over the host transport that carries peer q's host
 * buffers (one per host transport, shared by its peers). */
static braid_result staged_for(braid_comm *c, dev_priv *p, int q,
                               void **state) {
  int k = c->peer_tp[q];
  if (p->staged[k] == NULL) {
    staged_cfg g = {.inner = c->tp[k],
                    .inner_state = c->tp_state[k],
                    .inner_conn = host_conn,
                    .inner_arg = c,
                    .eng = &cuf_cuda_engine,
                    .mem = &staged_pinned,
                    .stream = p->pub.stream,
                    .rank = c->rank,
                    .nranks = c->nranks,
                    .nchannels = c->nchannels + 1,
                    .nslots = c->nslots,
                    .slot_bytes = c->slot_bytes};
    int r = staged_new(&g, &p->staged[k]);
    if (r != BRAID_SUCCESS)
      return comm_fail(c, (braid_result)r, "rank %d: staging over %s: %s",
                       c->rank, c->tp[k]->name, err_msg());
  }
  *state = p->staged[k];
  return BRAID_SUCCESS;
}

/* The transports of every peer: tp_cuda for the same-host pairs when it is
 * set up (with a staged path for host-routed channels), staged adapters over
 * the host transports for the other-host pairs. */
static braid_result peers_setup(braid_comm *c, dev_priv *p,
                                const uint8_t *local, const uint8_t *remote) {
  comm_dev *d = &p->pub;
  for (int q = 0; q < c->nranks; q++) {
    void *st = NULL;
    if (local[q] && p->cuda_state != NULL) {
      d->ops[q] = &tp_cuda;
      d->state[q] = p->cuda_state;
      p->ncuda++;
    } else if (!remote[q]) {
      continue;
    }
    braid_result r = staged_for(c, p, q, &st);
    if (r != BRAID_SUCCESS)
      return r;
    d->host_ops[q] = &tp_staged;
    d->host_state[q] = st;
    if (d->ops[q] == NULL) {
      d->ops[q] = &tp_staged;
      d->state[q] = st;
      p->nstaged++;
    }
  }
  return BRAID_SUCCESS;
}

static void dev_free(dev_priv *p) {
  if (p == NULL)
    return;
  view_free(p->pub.view);
  free(p->retired.v);
  free(p->host_used);
  free(p->pub.ops);
  free(p->pub.state);
  free(p->pub.host_ops);
  free(p->pub.host_state);
  free(p);
}

/* A fingerprint of a topology's vertices (names and bus ids, in order):
 * ranks compare theirs before trusting each other's vertex numbers. */
static uint32_t topo_sig(const topo_graph *g) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (int v = 0; g != NULL && v < g->nv; v++) {
    for (const char *p = g->v[v].name; *p; p++)
      h = (h ^ (uint8_t)*p) * 16777619u;
    for (const char *p = g->v[v].busid; *p; p++)
      h = (h ^ (uint8_t)*p) * 16777619u;
    h = (h ^ (uint32_t)g->v[v].type) * 16777619u;
  }
  return h;
}

/* Ranks of one host on one GPU are processes with contexts of their own,
 * which the GPU runs one at a time unless an MPS server merges them: every
 * hand-over of a slot between the ranks then waits for a switch (an H200
 * gave about 600 us per 8-byte allreduce of 2 ranks, about 40 us under
 * MPS; docs/PERFORMANCE.md). The lowest such rank warns when no MPS
 * control daemon is found at its pipe (CUDA_MPS_PIPE_DIRECTORY, else
 * /tmp/nvidia-mps, as nvidia-cuda-mps-control uses). */
static void warn_shared_gpu(braid_comm *c, const dev_rec *all,
                            const dev_rec *mine) {
  int with = -1;
  for (int q = 0; q < c->nranks && mine->busid[0]; q++) {
    if (q == c->rank || !all[q].ok || !boot_same_host(c->boot, c->rank, q) ||
        strncmp(all[q].busid, mine->busid, sizeof mine->busid) != 0)
      continue;
    if (q < c->rank)
      return; /* a lower rank warns */
    if (with < 0)
      with = q;
  }
  if (with < 0)
    return;
  const char *dir = cfg_get()->mps_pipe_dir;
  char pipe[512];
  snprintf(pipe, sizeof pipe, "%s/control",
           dir != NULL ? dir : "/tmp/nvidia-mps");
  if (access(pipe, F_OK) == 0)
    return;
  WARN(LOG_INIT,
       "rank %d shares GPU %s with rank %d (and maybe more) and no MPS "
       "control daemon was found (%s): the GPU runs one process at a time, "
       "and each hand-over between the ranks waits for a switch (hundreds "
       "of microseconds); start one with nvidia-cuda-mps-control -d "
       "(docs/CUDA.md)",
       c->rank, mine->busid, with, pipe);
}

/* The ranks' GPUs as a view of c->topo, for the topology-aware generators
 * and the simulator: when every rank is on this host with the same
 * topology and each found a GPU of its own in it by bus id. NULL
 * otherwise. Every rank decides from the same records, so all agree. */
static sched_view *gpu_view(braid_comm *c, const dev_rec *all) {
  int n = c->nranks;
  if (c->topo == NULL || n < 2)
    return NULL;
  for (int r = 0; r < n; r++) {
    if (!all[r].ok || all[r].vertex < 0 || all[r].vertex >= c->topo->nv ||
        all[r].topo_sig != all[0].topo_sig ||
        c->topo->v[all[r].vertex].type != TOPO_GPU ||
        !boot_same_host(c->boot, c->rank, r))
      return NULL;
    for (int q = 0; q < r; q++)
      if (all[q].vertex == all[r].vertex)
        return NULL; /* GPUs shared by ranks: the host path decides */
  }
  sched_view *v = NULL;
  if (view_hosts(NULL, n, NULL, &v) != BRAID_SUCCESS) {
    INFO(LOG_TOPO, "rank %d: no view of the ranks' GPUs: %s", c->rank,
         err_msg());
    return NULL;
  }
  v->g = c->topo; /* c->topo outlives the device state */
  v->owns_graph = 0;
  for (int r = 0; r < n; r++)
    v->vertex[r] = all[r].vertex;
  return v;
}

braid_result comm_dev_setup(braid_comm *c, int device) {
  if (c == NULL)
    return BRAID_ERR_INVALID_ARG;
  if (c->dev != NULL)
    return BRAID_SUCCESS;
  int n = c->nranks;
  dev_priv *p = calloc(1, sizeof *p);
  dev_rec *all = calloc((size_t)n, sizeof *all);
  uint8_t *local = calloc((size_t)n, 1), *remote = calloc((size_t)n, 1);
  if (p != NULL) {
    p->pub.ops = calloc((size_t)n, sizeof *p->pub.ops);
    p->pub.state = calloc((size_t)n, sizeof *p->pub.state);
    p->pub.host_ops = calloc((size_t)n, sizeof *p->pub.host_ops);
    p->pub.host_state = calloc((size_t)n, sizeof *p->pub.host_state);
    p->host_used = calloc((size_t)n, 1);
  }
  if (p == NULL || all == NULL || local == NULL || remote == NULL ||
      p->pub.ops == NULL || p->pub.state == NULL || p->pub.host_ops == NULL ||
      p->pub.host_state == NULL || p->host_used == NULL) {
    dev_free(p);
    free(all);
    free(local);
    free(remote);
    return comm_fail(c, BRAID_ERR_NOMEM,
                     "rank %d: out of memory setting up device buffers",
                     c->rank);
  }
  comm_dev *d = &p->pub;
  d->device = device;
  d->gpu_vertex = -1;
  /* a rank that cannot serve device buffers still joins every exchange, so
   * that its peers agree on the pairs and never wait for it */
  char why[160] = "";
  const cfg_env *env = cfg_get();
  dev_rec mine = {.device = device,
                  .vertex = -1,
                  .topo_sig = topo_sig(c->topo),
                  .host_max = env->cuda_host_max,
                  .kernel_max = env->cuda_kernel_max,
                  .kernel_slot = env->cuda_kernel_slot,
                  .buffsize =
                      env->cuda_buffsize ? env->cuda_buffsize : env->buffsize};
  mine.ok = local_ok(d, device) == BRAID_SUCCESS;
  if (!mine.ok)
    snprintf(why, sizeof why, "%s", err_msg());
  if (mine.ok) {
    place_gpu(c, d);
    mine.vertex = d->gpu_vertex;
    if (cudev_busid(device, mine.busid, sizeof mine.busid) != BRAID_SUCCESS)
      mine.busid[0] = 0;
  }
  braid_result r = boot_allgather(c->boot, &mine, all, sizeof mine);
  int any_cuda = 0;
  size_t kernel_max = 0, kernel_slot = 0; /* rank 0's */
  if (r == BRAID_SUCCESS) {
    d->host_max = (size_t)rank0s(c, "BRAID_CUDA_HOST_MAX", mine.host_max,
                                 all[0].host_max);
    kernel_max = (size_t)rank0s(c, "BRAID_CUDA_KERNEL_MAX", mine.kernel_max,
                                all[0].kernel_max);
    kernel_slot = (size_t)rank0s(c, "BRAID_CUDA_KERNEL_SLOT", mine.kernel_slot,
                                 all[0].kernel_slot);
    cfg_slots((size_t)rank0s(c, "BRAID_CUDA_BUFFSIZE", mine.buffsize,
                             all[0].buffsize),
              &d->slot_bytes, &d->slice_bytes);
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++)
        any_cuda |= boot_same_host(c->boot, a, b) && host_ok(c, all, a);
    int me_ok = mine.ok && host_ok(c, all, c->rank);
    for (int q = 0; q < n && me_ok; q++) {
      if (q == c->rank || !host_ok(c, all, q))
        continue;
      if (boot_same_host(c->boot, c->rank, q))
        local[q] = 1;
      else
        remote[q] = 1;
    }
  } else {
    r = comm_fail(c, r, "rank %d: exchanging device capabilities: %s", c->rank,
                  err_msg());
  }
  d->slice_mixed = any_cuda && d->slot_bytes < c->slice_bytes ? d->slot_bytes
                                                              : c->slice_bytes;
  if (r == BRAID_SUCCESS && any_cuda)
    r = cuda_setup(c, p, local);
  if (r == BRAID_SUCCESS && mine.ok) {
    warn_shared_gpu(c, all, &mine);
    d->view = gpu_view(c, all);
    r = peers_setup(c, p, local, remote);
    /* the same on every rank: all on one host, all usable, tp_cuda up */
    d->ipc_all = p->ncuda == n - 1;
  }
  free(all);
  free(local);
  free(remote);
  c->dev = d;
  if (r == BRAID_SUCCESS && mine.ok) /* ipc_all: the same on every rank */
    r = exk_setup(c, kernel_max, kernel_slot);
  if (r == BRAID_SUCCESS && !mine.ok)
    r = comm_fail(c, BRAID_ERR_UNSUPPORTED,
                  "rank %d cannot move device buffers on GPU %d: %s", c->rank,
                  device, why);
  if (r != BRAID_SUCCESS) {
    comm_dev_teardown(c);
    return r;
  }
  atomic_store(&c->dev_up, 1);
  INFO(LOG_INIT,
       "rank %d: device buffers on GPU %d (topology vertex %d): %d peers over "
       "cuda IPC (staged through pinned memory on host-routed channels), %d "
       "staged through pinned memory, %d through host memory; calls up to "
       "%zu bytes through pinned host memory (BRAID_CUDA_HOST_MAX); "
       "schedules for %s",
       c->rank, device, d->gpu_vertex, p->ncuda, p->nstaged,
       n - 1 - p->ncuda - p->nstaged, d->host_max,
       d->view ? "the ranks' GPUs (topology-aware generators)"
               : "the host map");
  return BRAID_SUCCESS;
}

void comm_dev_teardown(braid_comm *c) {
  if (c == NULL || c->dev == NULL)
    return;
  atomic_store(&c->dev_up, 0);
  dev_priv *p = (dev_priv *)c->dev;
  comm_dev *d = &p->pub;
  if (d->stream != NULL) { /* the calling thread may have another device */
    (void)cudev_set_device(d->device);
    (void)cudev_stream_sync(d->stream);
  }
  exk_teardown(c);
  for (int k = 0; k < COMM_MAX_TRANSPORTS; k++)
    if (p->staged[k] != NULL)
      tp_staged.teardown(p->staged[k]);
  if (p->cuda_state != NULL)
    tp_cuda.teardown(p->cuda_state);
  cuda_free_later(d->scratch, 0);
  cuda_free_later(d->stage, 1);
  cuda_free_later(d->premul, 0);
  list_release(&p->retired);
  if (d->stream != NULL)
    cudev_stream_destroy(d->stream);
  if (d->order_ev != NULL)
    cudev_event_destroy(d->order_ev);
  dev_free(p);
  c->dev = NULL;
  (void)cuda_release_sweep(); /* what waited for held streams */
}

size_t comm_dev_slice(const braid_comm *c, int route) {
  if (c->dev == NULL)
    return c->slice_bytes;
  return c->dev->ipc_all && route != SCHED_ROUTE_HOST ? c->dev->slice_bytes
                                                      : c->dev->slice_mixed;
}

const tp_ops *comm_dev_ops(braid_comm *c, int peer, int route) {
  if (c == NULL || c->dev == NULL || peer < 0 || peer >= c->nranks)
    return NULL;
  return route == SCHED_ROUTE_HOST ? c->dev->host_ops[peer] : c->dev->ops[peer];
}

void *comm_dev_state(braid_comm *c, int peer, int route) {
  if (c == NULL || c->dev == NULL || peer < 0 || peer >= c->nranks)
    return NULL;
  return route == SCHED_ROUTE_HOST ? c->dev->host_state[peer]
                                   : c->dev->state[peer];
}

tp_conn *comm_dev_conn(braid_comm *c, int peer, int channel, int route) {
  const tp_ops *o = comm_dev_ops(c, peer, route);
  if (o == NULL || channel < 0 || channel > c->nchannels)
    return NULL;
  dev_priv *p = (dev_priv *)c->dev;
  if (o != c->dev->ops[peer] && !p->host_used[peer]) {
    p->host_used[peer] = 1;
    INFO(LOG_INIT,
         "rank %d: host-routed channels reach rank %d through pinned host "
         "memory over %s, not CUDA IPC",
         c->rank, peer, c->tp[c->peer_tp[peer]]->name);
  }
  return o->conn(comm_dev_state(c, peer, route), peer, channel);
}

int comm_dev_host_routed(const braid_comm *c, int peer) {
  if (c == NULL || c->dev == NULL || peer < 0 || peer >= c->nranks)
    return 0;
  return ((const dev_priv *)c->dev)->host_used[peer];
}

int comm_dev_transports(braid_comm *c, int i, const tp_ops **ops,
                        void **state) {
  if (c == NULL || c->dev == NULL)
    return 0;
  const dev_priv *p = (const dev_priv *)c->dev;
  /* position 0: tp_cuda (when a peer uses it); 1..: the staged adapters */
  for (; i <= COMM_MAX_TRANSPORTS; i++) {
    if (i == 0 && p->cuda_state != NULL && p->ncuda > 0) {
      *ops = &tp_cuda;
      *state = p->cuda_state;
      return i + 1;
    }
    if (i > 0 && p->staged[i - 1] != NULL) {
      *ops = &tp_staged;
      *state = p->staged[i - 1];
      return i + 1;
    }
  }
  return 0;
}

/* Room on the retired list for one more buffer, made before the new buffer
 * is allocated so that an outgrown buffer is never lost. */
static int retire_room(dev_list *l) {
  if (l->n < l->cap)
    return 0;
  int cap = l->cap ? 2 * l->cap : 8;
  dev_retired *n = realloc(l->v, sizeof *n * (size_t)cap);
  if (n == NULL)
    return -1;
  l->v = n;
  l->cap = cap;
  return 0;
}

/* Replaces *buf (of *have bytes) with a buffer of at least `bytes` (device
 * memory of GPU `device`, or pinned host memory): the old one goes on l,
 * not freed (see "Device-wide waits"). Work queued on the internal stream
 * may still use the old buffer; it stays valid until teardown, which
 * synchronises the stream first. */
static braid_result grow(braid_comm *c, dev_list *l, void **buf, size_t *have,
                         size_t bytes, int host, int device) {
  if (retire_room(l) != 0)
    return comm_fail(c, BRAID_ERR_NOMEM, "rank %d: out of memory growing %s",
                     c->rank, host ? "pinned staging" : "device scratch");
  size_t want = *have > SIZE_MAX / 2 ? bytes : 2 * *have;
  if (want < bytes)
    want = bytes;
  void *n = NULL;
  braid_result r = host ? cudev_host_alloc(&n, want) : cudev_malloc(&n, want);
  if (r != BRAID_SUCCESS && want > bytes) { /* doubling too much: exact */
    want = bytes;
    r = host ? cudev_host_alloc(&n, want) : cudev_malloc(&n, want);
  }
  if (r != BRAID_SUCCESS && host)
    return comm_fail(c, r, "rank %d: %zu bytes of pinned host memory: %s",
                     c->rank, bytes, cudev_error());
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r, "rank %d: %zu bytes of device scratch on GPU %d: %s",
                     c->rank, bytes, device, cudev_error());
  if (*buf != NULL)
    l->v[l->n++] = (dev_retired){*buf, host};
  *buf = n;
  __atomic_store_n(have, want, __ATOMIC_RELEASE); /* exec_dev_reserved */
  return BRAID_SUCCESS;
}

braid_result comm_dev_scratch(braid_comm *c, size_t bytes, void **out) {
  if (c == NULL || c->dev == NULL || out == NULL)
    return BRAID_ERR_INVALID_ARG;
  comm_dev *d = c->dev;
  if (bytes > d->scratch_bytes) {
    braid_result r = grow(c, &((dev_priv *)d)->retired, &d->scratch,
                          &d->scratch_bytes, bytes, 0, d->device);
    if (r != BRAID_SUCCESS)
      return r;
  }
  *out = d->scratch;
  return BRAID_SUCCESS;
}

braid_result comm_dev_stage(braid_comm *c, size_t bytes, void **out) {
  if (c == NULL || c->dev == NULL || out == NULL)
    return BRAID_ERR_INVALID_ARG;
  comm_dev *d = c->dev;
  if (bytes > d->stage_bytes) {
    braid_result r = grow(c, &((dev_priv *)d)->retired, &d->stage,
                          &d->stage_bytes, bytes, 1, d->device);
    if (r != BRAID_SUCCESS)
      return r;
  }
  *out = d->stage;
  return BRAID_SUCCESS;
}

braid_result comm_dev_premul(braid_comm *c, size_t bytes, void **out) {
  if (c == NULL || c->dev == NULL || out == NULL)
    return BRAID_ERR_INVALID_ARG;
  comm_dev *d = c->dev;
  braid_result r = BRAID_SUCCESS;
  if (bytes > d->premul_bytes)
    r = grow(c, &((dev_priv *)d)->retired, &d->premul, &d->premul_bytes, bytes,
             0, d->device);
  *out = d->premul;
  return r;
}

/* ---- loose: device sends and receives before the device side is set up ----
 * Pinned staging and a stream of the communicator's own, grown like c->dev's
 * staging and kept until the communicator ends (comm_dev.h). */
typedef struct comm_loose {
  void *stream;
  int dev;
  void *host;
  size_t bytes; /* written under c->lock, read atomically */
  dev_list retired;
} comm_loose;

braid_result comm_dev_loose(braid_comm *c, int dev, size_t bytes, void **host,
                            void **stream) {
  comm_loose *l = c->loose;
  if (l == NULL && (l = c->loose = calloc(1, sizeof *l)) == NULL)
    return comm_fail(c, BRAID_ERR_NOMEM, "rank %d: out of memory", c->rank);
  if (l->stream != NULL && l->dev != dev)
    return comm_fail(
        c, BRAID_ERR_INVALID_ARG,
        "rank %d: device buffers on GPU %d after sends or receives "
        "on GPU %d: a rank uses one GPU",
        c->rank, dev, l->dev);
  braid_result r = BRAID_SUCCESS;
  if (l->stream == NULL || bytes > l->bytes) {
    int mine = cudev_get_device();
    r = cudev_set_device(dev);
    if (r == BRAID_SUCCESS && l->stream == NULL) {
      r = cudev_stream_create(&l->stream);
      if (r == BRAID_SUCCESS)
        l->dev = dev;
    }
    if (r != BRAID_SUCCESS)
      r = comm_fail(c, r, "rank %d: a stream on GPU %d: %s", c->rank, dev,
                    cudev_error());
    else if (bytes > l->bytes)
      r = grow(c, &l->retired, &l->host, &l->bytes, bytes, 1, dev);
    if (mine >= 0 && mine != dev)
      (void)cudev_set_device(mine);
  }
  *host = l->host;
  *stream = l->stream;
  return r;
}

size_t comm_dev_loose_bytes(const braid_comm *c) {
  const comm_loose *l = c->loose;
  return l != NULL && l->stream != NULL
             ? __atomic_load_n(&l->bytes, __ATOMIC_ACQUIRE)
             : 0;
}

void comm_dev_loose_free(braid_comm *c) {
  comm_loose *l = c->loose;
  if (l == NULL)
    return;
  if (l->stream != NULL)
    cudev_stream_destroy(l->stream);
  cuda_free_later(l->host, 1);
  list_release(&l->retired);
  free(l);
  c->loose = NULL;
}

braid_result comm_dev_order_after(braid_comm *c, const char *name,
                                  void *stream) {
  comm_dev *d = c->dev;
  if (d == NULL || !d->order_set || d->order_stream == stream)
    return BRAID_SUCCESS;
  braid_result r = cudev_stream_wait(stream, d->order_ev);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r,
                     "%s on rank %d: cannot order the call after the last one "
                     "on another CUDA stream: %s",
                     name, c->rank, cudev_error());
  return r;
}

void comm_dev_order_mark(braid_comm *c, void *stream) {
  comm_dev *d = c->dev;
  if (d == NULL)
    return;
  if (cudev_event_record(d->order_ev, stream) == BRAID_SUCCESS) {
    d->order_stream = stream;
    d->order_set = 1;
    return;
  }
  /* the next call on another stream may then run before this one */
  WARN(LOG_COLL,
       "rank %d: cannot mark the end of a call on its CUDA stream (%s); "
       "order calls on different streams with events",
       c->rank, cudev_error());
  d->order_set = 0;
}

/* ---- the GPU current while a call puts work on a user's stream -------- */

/* The GPU of a call's work on a user's stream: the communicator's, or before
 * its device side is set up (a send or receive first) the call's buffers'. */
int comm_dev_of(const braid_comm *c, const exec_op *op) {
  return c->dev != NULL ? c->dev->device : op->dev;
}

/* Makes GPU dev current while a call puts work on a user's stream; *mine:
 * the caller's, which comm_dev_restore(_of) gives back. */
braid_result comm_dev_select_of(braid_comm *c, const char *name, int dev,
                                int *mine) {
  *mine = -1;
  if (dev < 0) /* no buffers (a barrier) before the device side is set up */
    return BRAID_SUCCESS;
  *mine = cudev_get_device();
  braid_result r = *mine == dev ? BRAID_SUCCESS : cudev_set_device(dev);
  if (r != BRAID_SUCCESS)
    return comm_fail(c, r, "%s on rank %d: selecting GPU %d: %s", name, c->rank,
                     dev, cudev_error());
  return r;
}

braid_result comm_dev_select(braid_comm *c, const char *name, int *mine) {
  return comm_dev_select_of(c, name, c->dev->device, mine);
}

void comm_dev_restore_of(int dev, int mine) {
  if (mine >= 0 && mine != dev)
    (void)cudev_set_device(mine);
}

void comm_dev_restore(const braid_comm *c, int mine) {
  comm_dev_restore_of(c->dev->device, mine);
}
