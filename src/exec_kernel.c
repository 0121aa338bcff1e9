/*
 * Collectives in one kernel: device calls of one host's ranks without a
 * host thread on the way (BRAID_CUDA_KERNEL_MAX): allreduce, reduce,
 * broadcast, allgather and reduce_scatter.
 *
 * The device path of src/exec_dev.c moves each slot with a copy or a
 * reduction that a host thread issues and whose event it polls: about 14 us
 * per hand-over under MPS on an H200 (docs/PERFORMANCE.md), so an 8-byte
 * allreduce of 2 ranks takes tens of microseconds. Here a call runs as one
 * kernel per rank (cudev_kernel_coll, device/cuda_dev.h): each
 * rank copies its input into an area of its device memory that every rank
 * maps through CUDA IPC, raises a flag in every peer's area, waits for the
 * peers' flags in its own, and makes its output from the ranks' inputs (the
 * direct schedules of collectives/direct.c: reductions fold every input in
 * rank order, so every rank gets the same bits); a call larger than a slot
 * (BRAID_CUDA_KERNEL_SLOT) goes through the area in chunks, and each block
 * of the kernel does its part of each chunk on flags of its own. On a CUDA
 * stream the kernel goes straight on the user's stream, with no gate: the
 * call is stream-ordered because the kernel is.
 *
 * Which calls. A call (a single op or a group) goes this way when every op
 * is one of those collectives on device buffers of the communicator's GPU
 * whose largest buffer (allgather's output, reduce_scatter's input, else
 * count elements) is at most BRAID_CUDA_KERNEL_MAX bytes (rank 0's value),
 * every rank is on this host over the cuda transport (comm_dev.ipc_all),
 * there are at most CUDEV_KA_RANKS of them, and BRAID_CHECK is off: the
 * same answer on every rank, as every rank must take the same path.
 *
 * Order. The kernels of one rank run one after the other in issue order (an
 * event of the previous call is waited for when a call goes on another
 * stream), and their chunks are numbered in that order, the same on every
 * rank: chunk s uses slot s % 2. A call on a CUDA stream launches in the
 * issuing thread; a blocking call, or one on a host stream, launches when
 * it runs, on the internal stream. So that launches keep issue order, a call
 * on a CUDA stream issued while such calls wait in the queue
 * (braid_comm.kernel_deferred) first waits in the issuing thread for them
 * to end (src/enqueue.c, deferred_ended): launched from the progress thread
 * behind a gate instead, its kernel would be on braid's stream while the
 * gate holds the user's, and on a hardware queue the two streams share it
 * would never start.
 *
 * Errors. A kernel cannot return one: a wait for a peer that sees the abort
 * word set, or lasts BRAID_TIMEOUT, stores what happened in a status word
 * of pinned host memory and ends the call (chunks before the failed one
 * have written their part of the output); later calls end at once. Each call's
 * completion is an event that the progress thread (or the blocking call) polls;
 * meanwhile it checks the peers' health as the executor does
 * (exec_check_health) and sets the abort word when the communicator is aborted
 * or broken or a peer is gone, then reads the status and reports the call's
 * error, as the other paths do.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/plan.h"
#include "device/cuda_dev.h"
#include "src/comm_dev.h"
#include "src/config.h"
#include "src/exec_int.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"

#define EXK_EVENTS_MAX 4096

typedef struct exk {
  cudev_ka k;        /* area[rank]: this rank's (cudev_malloc) */
  void *host;        /* pinned: status (uint64_t), then abort (uint32_t) */
  uint64_t seq;      /* chunks launched (cuda_dev.h: numbered from 1) */
  void *tp;          /* the tp_cuda state: counts the peers' mappings */
  int device, share; /* room_share's */
  void *last_ev;     /* the previous call's completion, and its stream */
  void *last_stream;
  pthread_mutex_t lock; /* events */
  void *free_ev[EXK_EVENTS_MAX], *all_ev[EXK_EVENTS_MAX];
  int nfree, nall;
} exk;

/* The status word as this thread reads it (the kernels' is x->k.status). */
static volatile uint64_t *status_of(const exk *x) {
  return (volatile uint64_t *)x->host;
}

/* The abort word as this thread writes it (the kernels' is x->k.abort). */
static volatile uint32_t *abort_of(const exk *x) {
  return (volatile uint32_t *)((char *)x->host + 8);
}

static exk *of(const braid_comm *c) {
  return c->dev != NULL ? (exk *)c->dev->exk : NULL;
}

/* ---- setup ------------------------------------------------------------- */

typedef struct exk_rec {
  int32_t ok;
  int32_t room; /* cudev_kernel_coll_room of this rank's GPU */
  int32_t most; /* BRAID_CUDA_KERNEL_BLOCKS (rank 0's holds) */
  int32_t sms;  /* of this rank's GPU */
  char busid[32];
  char handle[CUDEV_IPC_BYTES];
} exk_rec;

/* Shares of the room on each GPU held by this process's communicators with
 * collective kernels (bit k: share k): each takes the lowest free share k
 * and gets room / 2^k (room_share), so that the kernels of all of them, in
 * flight at once on unordered streams (a data-parallel and a
 * tensor-parallel group), never ask for more blocks than the GPU holds (the
 * shares add up to less than twice the room, and each takes half of its
 * own): a resident block whose peer block cannot get an SM would wait until
 * BRAID_TIMEOUT. A destroyed communicator's share is free again. */
#define EXK_GPUS 64
static _Atomic uint64_t exk_shares[EXK_GPUS];

/* x's share of the room on its GPU: room / 2^k for the share k it takes
 * (x->share; 64: none left, and no room); halved again below. */
static int room_share(exk *x, int room) {
  x->share = 64;
  if (x->device < 0 || x->device >= EXK_GPUS)
    return room;
  _Atomic uint64_t *w = &exk_shares[x->device];
  uint64_t old = atomic_load(w);
  while (old != UINT64_MAX && !atomic_compare_exchange_weak(
                                  w, &old, old | 1ull << __builtin_ctzll(~old)))
    ;
  if (old != UINT64_MAX)
    x->share = __builtin_ctzll(~old);
  return x->share >= 30 ? 0 : room >> x->share;
}

/* The blocks a rank wants when BRAID_CUDA_KERNEL_BLOCKS is not set, with
 * `sharing` ranks of the communicator on its GPU of `sms` SMs. Ranks that
 * share a GPU move all their data through its memory, and together need
 * about a block per SM to keep it busy: each takes the largest power of
 * two within its share of the SMs. On an H100 (132 SMs) at 256 MiB, two
 * ranks reached 0.53 of the bound with 32 blocks each and 0.77 with 64 or
 * 66; four 0.79 with 32 but 0.75-0.76 with 33, 64 or 66 (docs/
 * PERFORMANCE.md, "Figures"). A rank alone on its GPU reads its peers over
 * the links between GPUs and takes 32, leaving the SMs to the
 * application's kernels (not measured: the GPU machines at hand have one
 * GPU). */
static int blocks_wanted(int sms, int sharing) {
  if (sharing < 2)
    return 32;
  int b = 1;
  while (b * 2 <= sms / sharing)
    b *= 2;
  return b;
}

/* The most blocks of a call (cudev_ka.blocks), the same on every rank: at
 * most rank 0's BRAID_CUDA_KERNEL_BLOCKS (else what each rank wants:
 * blocks_wanted), and as all ranks' blocks must be resident at once on the
 * GPUs they share, the ranks on one GPU together take at most half of what
 * their share of it holds (room_share), and that on the fullest GPU. */
static int blocks_for(const exk_rec *all, int n) {
  int most = CUDEV_KA_BLOCKS;
  for (int q = 0; q < n; q++) {
    int sharing = 0;
    for (int p = 0; p < n; p++)
      sharing += strncmp(all[p].busid, all[q].busid, sizeof all[q].busid) == 0;
    sharing = sharing > 0 ? sharing : 1;
    int want =
        all[0].most > 0 ? all[0].most : blocks_wanted(all[q].sms, sharing);
    int b = all[q].room / 2 / sharing;
    b = want < b ? want : b;
    most = b < most ? b : most;
  }
  return most < 1 ? 1 : most;
}

/* Hands the peers' areas (no kernel of this rank may touch them any more)
 * to the tp_cuda state, which closes them with its own mappings, and this
 * rank's, which it frees once no peer maps it (transports/cuda/
 * cuda_release.c). */
static void exk_free(exk *x) {
  if (x == NULL)
    return;
  for (int q = 0; q < x->k.nranks; q++)
    if (q != x->k.rank && x->k.area[q] != NULL &&
        cuda_tp_close_later(x->tp, q, x->k.area[q]) != BRAID_SUCCESS) {
      cudev_ipc_close(x->k.area[q]);
      (void)cuda_tp_hold(x->tp, q, -1);
    }
  void *mine = x->k.area[x->k.rank];
  if (mine != NULL && x->tp == NULL) /* no peers */
    cuda_free_later(mine, 0);
  else if (mine != NULL && cuda_tp_adopt(x->tp, mine) != BRAID_SUCCESS)
    WARN(LOG_COLL,
         "rank %d: leaves its collective-kernel area (%zu bytes of GPU "
         "memory) allocated until the process exits (too many to track)",
         x->k.rank, (size_t)CUDEV_KA_AREA(x->k.slot));
  if (x->share < 64)
    atomic_fetch_and(&exk_shares[x->device], ~(1ull << x->share));
  cuda_free_later(x->host, 1);
  for (int i = 0; i < x->nall; i++)
    cudev_event_destroy(x->all_ev[i]);
  pthread_mutex_destroy(&x->lock);
  free(x);
}

/* This rank's area, zeroed, and its pinned words. */
static braid_result make_area(braid_comm *c, exk *x) {
  size_t bytes = CUDEV_KA_AREA(x->k.slot);
  void *zero = calloc(1, CUDEV_KA_FLAGS);
  void *area = NULL;
  int ok = zero != NULL && cudev_malloc(&area, bytes) == BRAID_SUCCESS;
  x->k.area[x->k.rank] = area;
  ok = ok &&
       cudev_memcpy(area, zero, CUDEV_KA_FLAGS, c->dev->stream) ==
           BRAID_SUCCESS &&
       cudev_stream_sync(c->dev->stream) == BRAID_SUCCESS &&
       cudev_host_alloc(&x->host, 16) == BRAID_SUCCESS;
  free(zero);
  void *dptr = NULL;
  if (ok) {
    memset(x->host, 0, 16);
    ok = cudev_host_dptr(x->host, &dptr) == BRAID_SUCCESS;
  }
  if (!ok)
    return ERR(BRAID_ERR_SYSTEM, "%zu bytes of device memory and its flags: %s",
               bytes, cudev_error());
  x->k.status = (uint64_t *)dptr;
  x->k.abort = (uint32_t *)((char *)dptr + 8);
  return BRAID_SUCCESS;
}

/* Collective when the communicator qualifies (the same on every rank). */
braid_result exk_setup(braid_comm *c, size_t max, size_t slot) {
  comm_dev *d = c->dev;
  int n = c->nranks;
  if (max == 0 || !d->ipc_all || n > CUDEV_KA_RANKS)
    return BRAID_SUCCESS;
  exk *x = calloc(1, sizeof *x);
  exk_rec *all = calloc((size_t)n, sizeof *all);
  exk_rec mine = {0};
  char why[256] = "out of memory";
  if (x != NULL) {
    pthread_mutex_init(&x->lock, NULL);
    x->k.rank = c->rank;
    x->k.nranks = n;
    x->k.slot = ((max < slot ? max : slot) + 255) / 256 * 256;
    x->k.timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
    x->device = d->device;
    x->share = 64;
    for (int q = 0; q < n && x->tp == NULL; q++)
      x->tp = q != c->rank ? d->state[q] : NULL;
  }
  if (x != NULL && all != NULL && make_area(c, x) != BRAID_SUCCESS) {
    snprintf(why, sizeof why, "%s", err_msg());
  } else if (x != NULL && all != NULL) {
    if (cudev_ipc_get(x->k.area[c->rank], mine.handle) != BRAID_SUCCESS)
      snprintf(why, sizeof why, "an IPC handle for its area: %s",
               cudev_error());
    else if (cudev_kernel_coll_room(&mine.room, &mine.sms) != BRAID_SUCCESS ||
             mine.room < 1 ||
             cudev_busid(d->device, mine.busid, sizeof mine.busid) !=
                 BRAID_SUCCESS)
      snprintf(why, sizeof why, "the kernel's room on GPU %d: %s", d->device,
               cudev_error());
    else
      mine.ok = 1;
    mine.room = mine.ok ? room_share(x, mine.room) : mine.room;
    mine.most = cfg_get()->cuda_kernel_blocks;
  }
  int here = !mine.ok; /* the failure, if any, is this rank's */
  braid_result r = all != NULL
                       ? boot_allgather(c->boot, &mine, all, sizeof mine)
                       : ERR(BRAID_ERR_NOMEM, "out of memory");
  int ok = r == BRAID_SUCCESS && x != NULL; /* x: else mine.ok is 0 */
  for (int q = 0; q < n && ok; q++)
    ok = all[q].ok;
  for (int q = 0; q < n && ok; q++) {
    /* counted before it is mapped, so that q never frees it mapped */
    if (q == c->rank)
      continue;
    if (cuda_tp_hold(x->tp, q, 1) != BRAID_SUCCESS) {
      snprintf(why, sizeof why, "rank %d is not a cuda peer", q);
    } else if (cudev_ipc_open(all[q].handle, &x->k.area[q]) != BRAID_SUCCESS) {
      snprintf(why, sizeof why, "mapping rank %d's area: %s", q, cudev_error());
      (void)cuda_tp_hold(x->tp, q, -1);
    } else {
      continue;
    }
    ok = 0;
    here = 1;
  }
  /* every rank must know whether every rank mapped every area */
  int32_t okw = ok, *oks = r == BRAID_SUCCESS ? calloc((size_t)n, 4) : NULL;
  if (r == BRAID_SUCCESS)
    r = oks != NULL ? boot_allgather(c->boot, &okw, oks, sizeof okw)
                    : ERR(BRAID_ERR_NOMEM, "out of memory");
  for (int q = 0; q < n && r == BRAID_SUCCESS && ok; q++)
    ok = oks[q];
  free(oks);
  if (r == BRAID_SUCCESS && ok && x != NULL)
    x->k.blocks = blocks_for(all, n);
  free(all);
  if (r != BRAID_SUCCESS) {
    r = comm_fail(c, r, "rank %d: setting up collectives in one kernel: %s",
                  c->rank, err_msg());
    exk_free(x);
    return r;
  }
  if (!ok || x == NULL) {
    WARN(LOG_COLL,
         "rank %d: no collectives in one kernel (BRAID_CUDA_KERNEL_MAX): %s; "
         "small calls take the usual device path",
         c->rank, here ? why : "a peer could not set it up");
    exk_free(x);
    return BRAID_SUCCESS;
  }
  d->exk = x;
  d->kernel_max = max;
  INFO(LOG_COLL,
       "rank %d: allreduce, reduce, broadcast, allgather and reduce_scatter "
       "calls up to %zu bytes run in one kernel over CUDA IPC "
       "(BRAID_CUDA_KERNEL_MAX), with up to %d blocks",
       c->rank, max, x->k.blocks);
  return BRAID_SUCCESS;
}

/* Waits up to ms for this rank's last kernel to end; 1 once it has. */
static int last_ended(const exk *x, int ms) {
  int ended = x->last_ev == NULL;
  for (int i = 0; !ended && i <= ms; i++) {
    ended = cudev_event_query(x->last_ev) != CUDEV_AGAIN;
    struct timespec nap = {0, 1000000};
    if (!ended && i < ms)
      nanosleep(&nap, NULL);
  }
  return ended;
}

/* This rank's last kernel reads the peers' areas and its own: it must end
 * before they are unmapped and handed over (exk_free), and its status words
 * freed. It ends by itself once its peers have run theirs (or it has waited
 * BRAID_TIMEOUT for them); after a failure, or after 5 s, it is told to
 * stop. One that has not ended 2 s later has not started (its stream is
 * held by other work): it keeps the areas mapped, and the words allocated,
 * until the process exits. The peers' kernels may still use this rank's
 * area: the tp_cuda state frees it once no peer maps it any more. */
void exk_teardown(braid_comm *c) {
  exk *x = of(c);
  if (x == NULL)
    return;
  int quit = atomic_load(&c->aborted) || c->broken != BRAID_SUCCESS ||
             *status_of(x) != 0;
  if (quit || !last_ended(x, 5000)) {
    *abort_of(x) = 1;
    if (!last_ended(x, 2000)) {
      WARN(LOG_COLL,
           "rank %d: its last collective kernel has not ended 2 s after "
           "being told to stop (not started yet?): the kernel areas stay "
           "mapped (%zu bytes of GPU memory each) and its status words "
           "allocated until the process exits",
           c->rank, (size_t)CUDEV_KA_AREA(x->k.slot));
      for (int q = 0; q < x->k.nranks; q++)
        x->k.area[q] = NULL;
      x->host = NULL;
    }
  }
  c->dev->exk = NULL;
  exk_free(x);
}

/* ---- which calls ------------------------------------------------------- */

/* The kernel's collective of an op, or -1. */
static int kc_coll(sched_coll coll) {
  switch (coll) {
  case SCHED_ALLREDUCE:
    return CUDEV_KC_ALLREDUCE;
  case SCHED_REDUCE:
    return CUDEV_KC_REDUCE;
  case SCHED_BROADCAST:
    return CUDEV_KC_BROADCAST;
  case SCHED_ALLGATHER:
    return CUDEV_KC_ALLGATHER;
  case SCHED_REDUCE_SCATTER:
    return CUDEV_KC_REDUCE_SCATTER;
  default:
    return -1;
  }
}

/* The op as the kernel's call (det: the communicator's
 * BRAID_DETERMINISTIC). */
static cudev_kcall kc_call(const braid_comm *c, const exec_op *op) {
  cudev_kcall k = {kc_coll(op->coll), op->root, op->out, op->in,
                   op->count,         op->dt,   op->op,  c->deterministic};
  return k;
}

int exk_coll(sched_coll coll) { return kc_coll(coll) >= 0; }

int exk_op(const braid_comm *c, const exec_op *op) {
  const comm_dev *d = c->dev;
  if (d == NULL || d->exk == NULL || kc_coll(op->coll) < 0 || op->is_barrier ||
      op->dev != d->device || op->count == 0 || c->check ||
      op->premul != NULL) /* its product is made first (src/premul.c) */
    return 0;
  /* the planner's size rule: the call's largest buffer on any rank (as
   * braid-perf reports sizes) at most BRAID_CUDA_KERNEL_MAX */
  return plan_device_path(op->coll, c->nranks,
                          op->count * braid_dtype_size(op->dt), d->kernel_max,
                          0, NULL) == PLAN_PATH_KERNEL;
}

/* ---- launching and finishing ------------------------------------------- */

/* An event of the pool, made on first need (at most EXK_EVENTS_MAX: calls
 * in flight at once). */
static braid_result get_event(braid_comm *c, exk *x, void **ev) {
  pthread_mutex_lock(&x->lock);
  braid_result r = BRAID_SUCCESS;
  if (x->nfree > 0) {
    *ev = x->free_ev[--x->nfree];
  } else if (x->nall >= EXK_EVENTS_MAX) {
    r = comm_fail(c, BRAID_ERR_NOMEM,
                  "rank %d: %d collective kernels in flight at once", c->rank,
                  x->nall);
  } else if ((r = cudev_event_create(ev)) == BRAID_SUCCESS) {
    x->all_ev[x->nall++] = *ev;
  } else {
    r = comm_fail(c, r, "rank %d: an event for a collective kernel: %s",
                  c->rank, cudev_error());
  }
  pthread_mutex_unlock(&x->lock);
  return r;
}

static void put_event(exk *x, void *ev) {
  pthread_mutex_lock(&x->lock);
  x->free_ev[x->nfree++] = ev;
  pthread_mutex_unlock(&x->lock);
}

braid_result exk_launch(braid_comm *c, const exec_op *ops, int nops,
                        void *stream, void **ev, uint64_t *seq) {
  exk *x = of(c);
  void *e = NULL;
  braid_result r = get_event(c, x, &e);
  if (r != BRAID_SUCCESS)
    return r;
  const char *what = "waiting for the previous call";
  if (x->last_ev != NULL && x->last_stream != stream)
    r = cudev_stream_wait(stream, x->last_ev);
  for (int k = 0; k < nops && r == BRAID_SUCCESS; k++) {
    const exec_op *op = &ops[k];
    what = "launching the kernel";
    cudev_kcall call = kc_call(c, op);
    size_t bytes = cudev_kc_elems(&call, c->nranks) * braid_dtype_size(op->dt);
    r = cudev_kernel_coll(&x->k, x->seq + 1, &call, stream);
    if (r != BRAID_SUCCESS)
      break;
    x->seq += CUDEV_KA_CHUNKS(bytes, x->k.slot);
  }
  if (r == BRAID_SUCCESS) {
    what = "recording its completion";
    r = cudev_event_record(e, stream);
  }
  if (r != BRAID_SUCCESS) {
    /* the launched ones run; the rest is missing on this rank: the peers'
     * kernels time out, and so does this communicator */
    r = comm_fail(c, r, "%s #%llu on rank %d (in one kernel): %s: %s",
                  ops[0].name, (unsigned long long)ops[0].seq, c->rank, what,
                  cudev_error());
    put_event(x, e);
    return r;
  }
  x->last_ev = e;
  x->last_stream = stream;
  *ev = e;
  *seq = x->seq;
  TRACE(LOG_COLL, "%s #%llu: %d collective kernels up to chunk %llu",
        ops[0].name, (unsigned long long)ops[0].seq, nops,
        (unsigned long long)x->seq);
  return BRAID_SUCCESS;
}

uint64_t exk_calls(const braid_comm *c) {
  const exk *x = of(c);
  return x != NULL ? x->seq : 0;
}

int exk_blocks(const braid_comm *c) {
  const exk *x = of(c);
  return x != NULL ? x->k.blocks : 0;
}

static braid_result report(braid_comm *c, const exec_op *op, uint64_t st) {
  int why = (int)(st >> 56), peer = (int)((st >> 48) & 0xff);
  unsigned long long call = st & 0xffffffffffffull;
  if (why == CUDEV_KA_MISMATCH)
    return comm_fail(
        c, BRAID_ERR_MISMATCH,
        "%s #%llu on rank %d: rank %d ran another call (collective, "
        "root, count, dtype or op) as kernel chunk %llu: every rank "
        "must make the same calls in the same order",
        op->name, (unsigned long long)op->seq, c->rank, peer, call);
  if (why == CUDEV_KA_TIMEOUT)
    return comm_fail(c, BRAID_ERR_TIMEOUT,
                     "%s #%llu on rank %d: rank %d did not reach kernel chunk "
                     "%llu within %d ms (BRAID_TIMEOUT)",
                     op->name, (unsigned long long)op->seq, c->rank, peer, call,
                     c->timeout_ms);
  braid_result r = __atomic_load_n(&c->broken, __ATOMIC_ACQUIRE);
  if (r == BRAID_SUCCESS)
    r = BRAID_ERR_ABORTED;
  return comm_fail(c, r,
                   "%s #%llu on rank %d: kernel chunk %llu stopped: the "
                   "communicator was aborted or broken (%s)",
                   op->name, (unsigned long long)op->seq, c->rank, call,
                   atomic_load(&c->aborted) ? "aborted" : comm_broken_why(c));
}

/* The peers' health as the executor checks it (c->lock held, or taken
 * when free: a check is skipped, not waited for). */
static braid_result health(braid_comm *c, const exec_op *op, int locked) {
  if (!locked && pthread_mutex_trylock(&c->lock) != 0)
    return BRAID_SUCCESS;
  exec_op o = *op;
  xop x;
  memset(&x, 0, sizeof x);
  x.op = &o;
  braid_result r = exec_check_health(c, &x, 1);
  if (!locked)
    pthread_mutex_unlock(&c->lock);
  return r;
}

/* How long a call's kernel may still run after a peer was seen gone before
 * the call is ended as BRAID_ERR_REMOTE (see exk_finish). */
#define KERNEL_GONE_GRACE_MS 1000

braid_result exk_finish(braid_comm *c, const exec_op *op, void *ev,
                        uint64_t seq, int locked) {
  exk *x = of(c);
  volatile uint32_t *abort_word = abort_of(x);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int q;
  long dead_ms = -1;
  braid_result r = BRAID_SUCCESS;
  for (long polls = 0; (q = cudev_event_query(ev)) == CUDEV_AGAIN; polls++) {
    if (polls < 2000)
      continue;
    if (polls < 4000) {
      sched_yield();
      continue;
    }
    /* a dead peer or an abort stops the kernels (checked about every
     * 10 ms); a peer seen gone gets KERNEL_GONE_GRACE_MS first: it may have
     * left right after raising the flags this call waits for, and this
     * rank's kernel may not have run yet (a GPU shared with other work, or
     * the emulated GPU's CPU thread on a loaded machine), which the host
     * executor's 50 ms would not cover */
    braid_result h = polls % 500 == 0 && r == BRAID_SUCCESS
                         ? health(c, op, locked)
                         : BRAID_SUCCESS;
    if (h == BRAID_ERR_REMOTE && dead_ms < 0)
      dead_ms = exec_ms_since(&t0);
    else if (h != BRAID_SUCCESS &&
             (h != BRAID_ERR_REMOTE ||
              exec_ms_since(&t0) - dead_ms > KERNEL_GONE_GRACE_MS)) {
      r = h;
      *abort_word = 1;
    }
    if (c->broken != BRAID_SUCCESS)
      *abort_word = 1;
    /* the kernel has its own limit; this one counts while the stream
     * has not reached it yet */
    if (r == BRAID_SUCCESS && exec_ms_since(&t0) > 2L * c->timeout_ms + 1000) {
      *abort_word = 1;
      r = comm_fail(c, BRAID_ERR_TIMEOUT,
                    "%s #%llu on rank %d: the CUDA stream did not reach the "
                    "call (in one kernel) within %d ms (twice "
                    "BRAID_TIMEOUT): work issued on the stream before it is "
                    "still running or waits for something that never comes",
                    op->name, (unsigned long long)op->seq, c->rank,
                    2 * c->timeout_ms + 1000);
    }
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  if (q != BRAID_SUCCESS && r == BRAID_SUCCESS) {
    r = comm_fail(c, (braid_result)q,
                  "%s #%llu on rank %d: the collective kernel failed: %s",
                  op->name, (unsigned long long)op->seq, c->rank,
                  cudev_error());
  }
  put_event(x, ev);
  /* a failed kernel ends every later one at once */
  uint64_t st = *status_of(x);
  if (r == BRAID_SUCCESS && st != 0 && (st & 0xffffffffffffull) <= seq)
    r = report(c, op, st);
  return r;
}
