/*
 * The communicator and the operations queued on it (internal).
 */
#ifndef BRAID_SRC_COMM_H
#define BRAID_SRC_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "braid.h"
#include "collectives/schedule.h"
#include "src/bootstrap.h"
#include "src/reduce.h"
#include "topology/topo.h"
#include "transports/transport.h"

#define COMM_MAX_TRANSPORTS 4
#define COMM_SCHED_CACHE 64

/* One call, with everything needed to run it later. */
typedef struct exec_op {
  sched_coll coll; /* SCHED_* ; barrier is an allreduce of one byte */
  const void *in;
  void *out;
  size_t count; /* elements per block */
  braid_dtype dt;
  braid_op op;
  int root; /* or the peer of send/recv */
  int inplace;
  uint64_t seq;                /* collective sequence number on this comm */
  const char *name;            /* "allreduce", ... for messages */
  struct braid_stream *stream; /* NULL: blocking */
  int is_barrier;
  uint8_t barrier_byte[2]; /* barrier's own buffers */
  int dev;     /* -1: host buffers; else the CUDA device of the buffers */
  int checked; /* BRAID_CHECK compared its fingerprint already */
  /* alltoallv's count messages (send/recv of one uint64): the bytes live in
   * the op, as the barrier's; a receive compares what arrived with
   * count_want and fails with BRAID_ERR_MISMATCH when they differ */
  int is_count;
  uint64_t count_msg, count_want;
  /* the first op of an alltoallv: under BRAID_CHECK the call's fingerprint
   * (kind alltoallv, dtype, call number) is compared before it runs */
  int a2av_call;
  uint64_t fp;          /* its fingerprint (check_call_fp), made with its flight
                          record; 0: not made yet */
  uint64_t flight;      /* its flight recorder record (src/flight.c), 0: none */
  uint32_t flight_slot; /* where that record is in the recorder */
  /* a pre-multiplied sum (src/premul.h): op is BRAID_SUM and each rank's
   * input is first multiplied by this op's scalar */
  const struct premul_op *premul;
} exec_op;

/* A unit of work in the comm's queue: one op, or a group's ops. */
typedef struct exec_work {
  exec_op *ops;
  int nops;
  struct braid_stream *stream;
  atomic_int done; /* set once finished */
  braid_result result;
  struct exec_work *next;
} exec_work;

typedef struct sched_cache_entry {
  sched_coll coll;
  int root;
  int nchannels;
  const void *key;  /* the gen_desc that made s, or the file's schedule */
  const void *view; /* the sched_view it was generated on */
  sched *s;
  /* Per step of this rank's channels (channel after channel), how it sends
   * (EXEC_SEND_* bits, src/exec_int.h): [0] out of place, [1] in place. */
  uint8_t *send_map[2];
  int borrowed; /* s belongs to c->file_scheds: not freed with the entry */
} sched_cache_entry;

struct braid_comm {
  int rank, nranks;
  boot *boot;
  char name[64];
  int timeout_ms;
  int check;
  int deterministic; /* reductions in rank order (BRAID_DETERMINISTIC) */
  int nchannels;     /* schedule channels (transport has one more for p2p) */
  int nslots;
  size_t slot_bytes;
  size_t slice_bytes;
  char algo[128];
  char transport_forced[16];

  /* no CUDA device is visible to this process (cudev_count() answered 0
   * at init, and keeps that answer): every buffer is host memory */
  int host_only;
  /* The last call that passed every argument check (src/api.c, issue),
   * kept where the checks depend on nothing but the arguments (host_only):
   * a call with the same arguments again skips them. */
  exec_op checked;
  int checked_set;

  /* transports */
  int ntp;
  const tp_ops *tp[COMM_MAX_TRANSPORTS];
  void *tp_state[COMM_MAX_TRANSPORTS];
  int *peer_tp;    /* per rank: index into tp[] */
  tp_conn **conns; /* (peer * (nchannels + 1) + channel), filled lazily */

  /* schedules */
  sched_cache_entry cache[COMM_SCHED_CACHE];
  int ncache;
  uint64_t cache_gen; /* schedules evicted so far: c->prep is stale after */
  /* the last small call, prepared (src/executor.c prep_take): a call that
   * repeats it starts from a copy */
  struct exec_prep *prep;
  /* calls that tried the small-call path (src/exec_fast.c), those it
   * finished, and those it handed to the executor's loop at a receive */
  uint64_t fast_tried, fast_calls, fast_resumed;

  /* the selector's picks, per collective and power-of-two size: [0] on
   * c->view, [1] on the ranks' GPUs (c->dev->view) for device calls */
  const struct gen_desc *sel_cache[2][SCHED_NUM_COLLS][65];
  /* paths logged at BRAID_TRACE, a bit per plan_path, per collective and
   * power-of-two size (src/exec_plan.c) */
  uint8_t plan_logged[SCHED_NUM_COLLS][65];

  /* executor state reused across calls (calls on a comm are serialised) */
  void *xpool;
  size_t xpool_cap;
  /* how this rank waits (src/exec_wait.c): ranks on its host and CPUs it
   * may run on (0: not counted yet), its last CPU, its moves since the
   * last look, when it last moved */
  struct {
    int nlocal, ncpus, cpu, moves;
    int useless, probe; /* waits whose spin did not help in a row */
    int shared_host;    /* some host holds several of the ranks */
    int64_t unstacked_us;
  } wait;

  /* scratch for schedules that need it */
  void *scratch;
  size_t scratch_bytes;

  /* device sends and receives before the device side is set up: their
   * pinned staging and stream (src/comm_dev.c, comm_dev_loose), or NULL */
  struct comm_loose *loose;

  /* sequence numbers */
  uint64_t coll_seq;

  /* the queue of asynchronous work, run in issue order by the progress
   * thread; blocking calls run inline when the queue is empty. */
  pthread_mutex_t lock; /* serialises execution */
  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  exec_work *qhead, *qtail;
  struct premul_tab *premul; /* braid_op_create_premul_sum's ops */
  int qlen;
  /* queued calls that may launch collective kernels when they run: a call
   * on a CUDA stream launches its own only when there is none (src/
   * exec_kernel.c, "Order") */
  atomic_int kernel_deferred;
  int thread_started, thread_stop;
  pthread_t thread;

  /* the machine, when BRAID_TOPO_FILE or BRAID_TOPO_DUMP_FILE asks for it */
  topo_graph *topo;
  /* where the ranks sit, for topology-aware generators (src/comm_view.c) */
  struct sched_view *view;
  /* the schedules of BRAID_SCHEDULE_FILE, used instead of the selector's */
  sched **file_scheds;
  int nfile_scheds;

  /* device memory (CUDA), set up lazily by src/comm_dev.c; dev_up is 1
   * while dev is set up (read by the issuing thread without the lock) */
  struct comm_dev *dev;
  atomic_int dev_up;

  /* the last calls, for dumps (src/flight.c); NULL: BRAID_FLIGHT_RECORDER=0 */
  struct flight *flight;

  /* state */
  atomic_int aborted;
  atomic_int inflight; /* threads inside a call's submission (enqueue.c) */
  int blocking;        /* 0: init and split return at once (comm_async.c) */
  /* while a non-blocking init or split makes this communicator: its state
   * (BRAID_IN_PROGRESS, then the result), and whether it was destroyed
   * meanwhile (its maker frees it then) */
  atomic_int made;
  int orphaned;
  pthread_t maker; /* the thread that makes it, once maker_set */
  atomic_int maker_set;
  braid_result broken;  /* non-success once a remote/timeout error happened */
  char broken_why[512]; /* the message of that error (comm_break) */
  char last_error[512];
  pthread_mutex_t err_lock;
};

/* src/comm.c */
/* A communicator of the ranks ranks[0..n) of c (this rank is ranks[me]),
 * made by them alone over c's bootstrap: braid_comm_split's and
 * braid_comm_shrink's last step; errors are named in c with fn. */
braid_result comm_sub(braid_comm *c, const int *ranks, int n, int me,
                      const char *fn, braid_comm *into, braid_comm **out);
/* A zeroed communicator with its locks made: what braid_comm_init's
 * non-blocking form hands out at once. */
braid_comm *comm_alloc(void);
void comm_free(braid_comm *c);
/* An id whose root rank 0 runs anew at each creation (an address from
 * BRAID_COMM_ID or MASTER_ADDR): may be used again in this process, though
 * a creation with it succeeded (comm_init_into refuses an id used before,
 * whose root has gone). */
void comm_id_reusable(const braid_unique_id *id);

/* The work of braid_comm_init, braid_comm_init_env and braid_comm_split
 * into an allocated communicator (the *_into forms leave it to be freed on
 * failure; split's with into NULL allocates, and *out stays NULL for
 * BRAID_SPLIT_NOCOLOR). */
braid_result comm_init_into(braid_comm *shell, int nranks,
                            const braid_unique_id *id, int rank,
                            const braid_config *cfg);
braid_result comm_init_env_into(braid_comm *shell, const braid_config *cfg);
braid_result comm_split_into(braid_comm *c, int color, int key,
                             braid_comm *into, braid_comm **out);

/* src/comm_async.c: the non-blocking forms (braid_config.blocking = 0). A
 * job says which: env (init_env), parent (split: color, key), else init
 * (nranks, rank, id); cfg is copied. comm_start hands out a shell at once
 * (*out; NULL for a split with BRAID_SPLIT_NOCOLOR) and makes it in a
 * thread: BRAID_IN_PROGRESS, or an error if it could not start. */
typedef struct comm_job {
  int env;
  braid_comm *parent;
  int color, key;
  int nranks, rank;
  braid_unique_id id;
  const braid_config *cfg;
} comm_job;
braid_result comm_start(braid_comm **out, const comm_job *job);
/* BRAID_SUCCESS when the communicator is made, BRAID_IN_PROGRESS while it
 * is being made (with a message in its last error), or why it could not be
 * made. */
braid_result comm_ready(braid_comm *c);
/* Every call that may wait on c (a collective's submission, finalize, a
 * split, a shrink, a flight dump) runs between these: braid_comm_abort from
 * another thread frees c only once no call is inside, and a call entering
 * after the abort gets BRAID_ERR_ABORTED (fn names it). */
braid_result comm_enter(braid_comm *c, const char *fn);
void comm_leave(braid_comm *c);
/* For braid_comm_destroy and _abort: 1 when the communicator is still being
 * made; its maker then frees it when done. */
int comm_orphan(braid_comm *c);
/* The transport BRAID_TRANSPORT names ("shm", "tcp", "ofi", "ibverbs" or
 * "ib"), NULL for anything else. */
const tp_ops *comm_tp_by_name(const char *name);
/* The failure point in src/ with the communicator at hand: ERR(r, ...)
 * (src/log.h), and the message becomes c's last error. Returns r. */
braid_result comm_fail_msg(braid_comm *c, braid_result r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* r evaluated once and the macro's own value, as ERR's (src/log.h). */
#define comm_fail(c, r, ...)                                                   \
  __extension__({                                                              \
    braid_result comm_r__ = (r);                                               \
    (void)comm_fail_msg((c), comm_r__, __VA_ARGS__);                           \
    comm_r__;                                                                  \
  })
/* A bad argument, in words that name the function, the argument and its
 * value ("braid_x: root is 7, ..."): set as c's last error and logged at
 * WARN; with c NULL (a call with no communicator to hold it) only logged,
 * logging set up first. Returns BRAID_ERR_INVALID_ARG. */
braid_result comm_arg_bad(braid_comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Marks the communicator broken by r (the first time only) and keeps the
 * current error message as the reason later calls repeat. */
void comm_break(braid_comm *c, braid_result r);
/* comm_break for a peer that died or went silent in a bootstrap exchange
 * (BRAID_ERR_REMOTE, BRAID_ERR_TIMEOUT): the exchange's frames may be left
 * on the control connections, and the error is the communicator's. */
void comm_break_dead(braid_comm *c, braid_result r);
/* Why the communicator is broken: that message, or r's name. */
const char *comm_broken_why(const braid_comm *c);
tp_conn *comm_conn(braid_comm *c, int peer, int channel);

/* src/comm_topo.c: the machine a communicator uses. BRAID_TOPO_FILE set:
 * loads it; otherwise detects. BRAID_TOPO_DUMP_FILE set: writes the result
 * there (format from its extension: .xml NCCL, .topo braid). */
braid_result comm_topo_load(topo_graph **out);

/* src/comm_view.c: where the ranks sit (c->view) and the schedules of
 * BRAID_SCHEDULE_FILE (c->file_scheds), set up at creation; freed by
 * comm_view_free. */
braid_result comm_view_setup(braid_comm *c);
void comm_view_free(braid_comm *c);
/* The planner's request (collectives/plan.h) for a call of `bytes` per
 * block on `view`: c->view, or the ranks' GPUs (c->dev->view) for device
 * calls that plan there; the communicator's settings (BRAID_ALGO, slices,
 * slots, channels) filled in. */
struct plan_request;
void comm_plan_request(braid_comm *c, sched_coll coll, int root, size_t bytes,
                       const struct sched_view *view, struct plan_request *rq);
/* The schedule BRAID_SCHEDULE_FILE gives for a call, or NULL. */
sched *comm_file_sched(braid_comm *c, sched_coll coll, int root);

#endif
