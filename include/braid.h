/*
 * braid — collective communication for host and device buffers.
 *
 * Public C API. Everything here is prefixed braid_; nothing else is exported.
 *
 * Conventions (NCCL's argument order, C naming):
 *  - every function returns a braid_result; BRAID_SUCCESS is 0;
 *  - arguments are checked before anything is sent: a bad argument returns
 *    BRAID_ERR_INVALID_ARG, braid_comm_last_error() names the argument, and
 *    the communicator stays usable;
 *  - every wait is bounded by the communicator's timeout (BRAID_TIMEOUT);
 *  - a dead peer turns into BRAID_ERR_REMOTE on every surviving rank, and
 *    braid_comm_last_error() names the rank;
 *  - in place when sendbuf == recvbuf; for allgather, in place means
 *    sendbuf == recvbuf + rank * sendcount * size; for reduce_scatter,
 *    recvbuf == sendbuf + rank * recvcount * size (NCCL's conventions);
 *  - stream == NULL makes a call blocking; a host stream (braid_stream_create)
 *    queues calls in order and completes them asynchronously;
 *  - buffers may be host memory or CUDA device memory (cudaMalloc), told
 *    apart per call; all buffers of one call must be on the same side (and
 *    GPU), else BRAID_ERR_INVALID_ARG, as is a device buffer shorter than
 *    the call needs (where the driver can tell); every rank passes device
 *    buffers in a call where one does. A blocking call on device buffers
 *    runs on the device and returns when the result is there; it does not
 *    wait for the caller's CUDA streams (synchronise them first).
 */
#ifndef BRAID_H
#define BRAID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BRAID_API __attribute__((visibility("default")))
#else
#define BRAID_API
#endif

#define BRAID_VERSION_MAJOR 0
#define BRAID_VERSION_MINOR 1
#define BRAID_VERSION_PATCH 0
#define BRAID_VERSION_CODE                                                     \
  (BRAID_VERSION_MAJOR * 10000 + BRAID_VERSION_MINOR * 100 +                   \
   BRAID_VERSION_PATCH)

typedef enum braid_result {
  BRAID_SUCCESS = 0,
  BRAID_ERR_INVALID_ARG = 1, /* a bad argument; nothing was sent */
  BRAID_ERR_SYSTEM = 2,      /* a system call or library failed */
  BRAID_ERR_REMOTE = 3,      /* a peer died, closed or reported an error */
  BRAID_ERR_TIMEOUT = 4,     /* a wait passed the communicator's timeout */
  BRAID_ERR_MISMATCH = 5, /* ranks called different collectives (BRAID_CHECK) */
  BRAID_ERR_UNSUPPORTED =
      6,                  /* not available in this build or on this machine */
  BRAID_ERR_NOMEM = 7,    /* out of memory */
  BRAID_ERR_INTERNAL = 8, /* a bug in braid; please report it */
  BRAID_IN_PROGRESS = 9,  /* braid_stream_query: work is still running */
  BRAID_ERR_ABORTED = 10  /* the communicator was aborted */
} braid_result;

typedef enum braid_dtype {
  BRAID_INT8 = 0,
  BRAID_UINT8 = 1,
  BRAID_INT32 = 2,
  BRAID_UINT32 = 3,
  BRAID_INT64 = 4,
  BRAID_UINT64 = 5,
  BRAID_FLOAT16 = 6,
  BRAID_BFLOAT16 = 7,
  BRAID_FLOAT32 = 8,
  BRAID_FLOAT64 = 9,
  BRAID_INT16 = 10,
  /* One byte; a nonzero byte is true. Reductions are logical and give 0
   * or 1: SUM and MAX or, PROD and MIN and, BAND/BOR/BXOR and, or, xor;
   * AVG is refused (BRAID_ERR_INVALID_ARG). Calls that only move data copy
   * the bytes as they are. On device buffers, reductions of BRAID_INT16 and
   * BRAID_BOOL are BRAID_ERR_UNSUPPORTED (docs/CUDA.md). */
  BRAID_BOOL = 11,
  /* 8-bit floats (NCCL's ncclFloat8e4m3 and ncclFloat8e5m2, torch's
   * float8_e4m3fn and float8_e5m2). E4M3: 4 exponent bits, 3 mantissa bits,
   * no infinities, NaN S.1111.111, largest finite 448. E5M2: 5 exponent
   * bits, 2 mantissa bits, infinities and NaNs, largest finite 57344. Each
   * reduction step widens both operands to float, applies the op and
   * rounds back to nearest even, saturating: a result beyond the largest
   * finite (an infinity included) gives the largest finite of its sign, as
   * NCCL's conversions (__NV_SATFINITE) do. Bitwise ops are refused as on
   * the other floats. docs/DTYPES.md. */
  BRAID_FLOAT8_E4M3 = 12,
  BRAID_FLOAT8_E5M2 = 13,
  BRAID_NUM_DTYPES = 14
} braid_dtype;

typedef enum braid_op {
  BRAID_SUM = 0,
  BRAID_PROD = 1,
  BRAID_MIN = 2,
  BRAID_MAX = 3,
  BRAID_AVG = 4, /* sum divided by the rank count (integers: truncated) */
  /* Bitwise and, or, xor: integer dtypes and BRAID_BOOL only; on the
   * float dtypes BRAID_ERR_INVALID_ARG, nothing sent. On
   * device buffers BRAID_ERR_UNSUPPORTED (docs/CUDA.md). */
  BRAID_BAND = 5,
  BRAID_BOR = 6,
  BRAID_BXOR = 7,
  BRAID_NUM_OPS = 8
} braid_op;

/* Opaque handles. */
typedef struct braid_comm braid_comm;
typedef struct braid_stream braid_stream;

/* The rendezvous token: the root's address and a random secret. Create it on
 * one process with braid_get_unique_id() and give it to every rank out of band
 * (or use braid_comm_init_env()). braid_unique_id_to_string() makes it text. */
#define BRAID_UNIQUE_ID_BYTES 128
typedef struct braid_unique_id {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braid_unique_id;

/* Per-communicator settings. Initialise with braid_config_init(); a zero
 * field (or NULL) means "take the environment variable, else the default".
 * braid_comm_init and braid_comm_init_env refuse a config whose fields are
 * out of range (a size not set by braid_config_init, a negative timeout,
 * channels outside 0 to 32, check or deterministic other than -1, 0 or 1,
 * blocking other than 0 or 1, an unknown transport, an algo filter that
 * does not parse) with
 * BRAID_ERR_INVALID_ARG and a WARN log line naming the field and its value.
 */
typedef struct braid_config {
  size_t size;           /* sizeof(braid_config), set by braid_config_init */
  int timeout_ms;        /* bound on every wait (BRAID_TIMEOUT) */
  int nchannels;         /* channels per collective (BRAID_NCHANNELS) */
  int check;             /* 1: compare fingerprints (BRAID_CHECK); -1: off */
  const char *transport; /* "shm", "tcp" (BRAID_TRANSPORT) */
  const char *algo;      /* NCCL-style algorithm filter (BRAID_ALGO) */
  const char *name;      /* a name for this communicator in logs */
  /* 1: allreduce, reduce and reduce_scatter give the serial fold of the
   * ranks' inputs in rank order, the same bits whatever the algorithm,
   * channels, slicing, transport and size (BRAID_DETERMINISTIC); -1: off */
  int deterministic;
  /* 1 (braid_config_init's): braid_comm_init, braid_comm_init_env and
   * braid_comm_split return once the communicator is made. 0: they return
   * at once with BRAID_IN_PROGRESS and the communicator, made by a thread
   * of braid's; poll braid_comm_get_async_error until it says
   * BRAID_SUCCESS (or an error) before using it: calls on it return
   * BRAID_IN_PROGRESS until then. Split communicators inherit it. */
  int blocking;
} braid_config;

#define BRAID_SPLIT_NOCOLOR (-1)

BRAID_API void braid_config_init(braid_config *cfg);
BRAID_API const char *braid_result_string(braid_result r);
BRAID_API braid_result braid_get_version(int *version);
BRAID_API size_t braid_dtype_size(braid_dtype dt);
BRAID_API const char *braid_dtype_name(braid_dtype dt);
BRAID_API const char *braid_op_name(braid_op op);

/* ---- communicators ---------------------------------------------------- */

BRAID_API braid_result braid_get_unique_id(braid_unique_id *id);
/* Hex text of an id (2*BRAID_UNIQUE_ID_BYTES+1 bytes) and back; text that
 * is not a braid id's (length, a non-hex digit, no braid magic) is refused
 * with BRAID_ERR_INVALID_ARG and a WARN log line saying why. Functions that
 * take no communicator log their bad arguments, having nowhere else to put
 * them. */
BRAID_API braid_result braid_unique_id_to_string(const braid_unique_id *id,
                                                 char *buf, size_t len);
BRAID_API braid_result braid_unique_id_from_string(braid_unique_id *id,
                                                   const char *text);

/* Collective over the nranks processes that call it with the same id. An
 * id serves one rendezvous: a process that made a communicator with it
 * already, as the same rank, is refused at once (BRAID_ERR_INVALID_ARG);
 * get an id per communicator, or split the first (braid_comm_split). */
BRAID_API braid_result braid_comm_init(braid_comm **comm, int nranks,
                                       const braid_unique_id *id, int rank,
                                       const braid_config *cfg);
/* Rank, size and rendezvous from the launcher's environment: braidrun
 * (BRAID_UNIQUE_ID), torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
 * Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS), MPICH/PMI
 * (PMI_RANK, PMI_SIZE). See docs/ENV.md. */
BRAID_API braid_result braid_comm_init_env(braid_comm **comm,
                                           const braid_config *cfg);
/* The launcher whose variables braid_comm_init_env would read: "braidrun",
 * "torchrun", "openmpi", "slurm" or "pmi" when one of its rank or size
 * variables is set, "braid" for BRAID_UNIQUE_ID alone, NULL when none is:
 * a process started on its own (whose braid_comm_init_env fails, "no
 * launcher found"). Reads the environment only; the pointer is static. */
BRAID_API const char *braid_env_launcher(void);
/* Collective: ranks with the same color form a new communicator, ordered by
 * key then by old rank. color == BRAID_SPLIT_NOCOLOR gives *out == NULL. */
BRAID_API braid_result braid_comm_split(braid_comm *comm, int color, int key,
                                        braid_comm **out);
/* A communicator of the ranks that are left (ULFM's MPI_Comm_shrink, NCCL's
 * ncclCommShrink), made by them alone: no new unique id, no help from the
 * excluded. excluded[0..nexcluded) are the ranks to leave out; with
 * nexcluded == 0, the ranks whose processes are gone (their control
 * connections closed). Collective over the ranks that are left; they agree
 * on who that is (a rank one of them counts gone is out), and their new
 * ranks keep the old order. An alive rank left out that calls it gets
 * BRAID_ERR_INVALID_ARG ("excluded"). The old communicator stays as it
 * was (broken, after a death): destroy it. */
BRAID_API braid_result braid_comm_shrink(braid_comm *comm, const int *excluded,
                                         int nexcluded, braid_comm **newcomm);
/* Waits for every queued call, then quiesces (collective). */
BRAID_API braid_result braid_comm_finalize(braid_comm *comm);
/* Frees the communicator (local; call finalize first for a clean close).
 * Calls of it still queued on braid streams run first, as NCCL's destroy
 * finishes them, each bounded by the timeout (one whose peers never come
 * waits that long; braid_comm_abort stops them instead). Otherwise never
 * waits for the peers or for other communicators' calls: its device memory
 * that a peer still maps, or that freeing while another call holds a CUDA
 * stream would wait for, is freed later (docs/CUDA.md). */
BRAID_API braid_result braid_comm_destroy(braid_comm *comm);
/* Stops every pending and running call with BRAID_ERR_ABORTED and frees the
 * communicator. Safe from any thread: a call blocked in another thread (a
 * peer stopped, gone quiet) returns BRAID_ERR_ABORTED within a few
 * milliseconds, and the communicator is freed only once no thread is inside
 * a call; a thread whose call was aborted must not use the communicator
 * again. Local: the peers see this rank leave. */
BRAID_API braid_result braid_comm_abort(braid_comm *comm);
/* Without issuing a call: BRAID_IN_PROGRESS while a non-blocking init or
 * split still makes the communicator, then BRAID_SUCCESS, or the error that
 * stopped it, or the first error the communicator met since (a dead peer,
 * a timeout: it is broken), in *async_error (as ncclCommGetAsyncError).
 * Returns BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG for a NULL argument. */
BRAID_API braid_result braid_comm_get_async_error(braid_comm *comm,
                                                  braid_result *async_error);
BRAID_API braid_result braid_comm_rank(const braid_comm *comm, int *rank);
BRAID_API braid_result braid_comm_size(const braid_comm *comm, int *size);
/* Writes the communicator's flight recorder (its last BRAID_FLIGHT_RECORDER
 * calls: kind, sizes, state, the rank each waits for; docs/TRACE.md) to
 * `path`, or, when path is NULL, to BRAID_FLIGHT_RECORDER_FILE's pattern
 * (%h host, %p pid, %r rank, %c communicator name). Local; safe while
 * calls run in other threads (a record changing meanwhile may show a mix of
 * two states). BRAID_ERR_UNSUPPORTED when the recorder is off; an empty
 * path is BRAID_ERR_INVALID_ARG. */
BRAID_API braid_result braid_comm_flight_dump(braid_comm *comm,
                                              const char *path);
/* The last error on this communicator, in words: what, which rank or peer.
 * With comm NULL, the last error of the calling thread, whatever the
 * communicator (as NCCL's ncclGetLastError(NULL)): why a braid_comm_init
 * or braid_comm_init_env that returned no communicator failed. */
BRAID_API const char *braid_comm_last_error(const braid_comm *comm);

/* ---- reduction ops ---------------------------------------------------- */

/* A pre-multiplied sum (NCCL's ncclRedOpCreatePreMulSum; torch's
 * PREMUL_SUM): a reducing call (allreduce, reduce, reduce_scatter) with
 * *op gives, element by element, the sum over the ranks r of
 * scalar_r * x_r, where each rank multiplies its own input by its own
 * scalar (rounded to dt; integers wrap) before the sum, which then goes as
 * BRAID_SUM's. scalar points to one element of dt: host memory, read now
 * (scalar_on_device 0), or device memory, read each time a call with the op
 * runs (1; it must stay valid while the op is used). The op belongs to
 * comm and to dt: another dtype, or another communicator, is
 * BRAID_ERR_INVALID_ARG, as are bool and unknown dtypes. Device buffers
 * take the dtypes of the device's reduction kernels (int16:
 * BRAID_ERR_UNSUPPORTED; docs/DTYPES.md). The handle is
 * a braid_op value beyond the built-in ones; braid_op_name gives
 * "premul_sum". */
BRAID_API braid_result braid_op_create_premul_sum(braid_op *op,
                                                  const void *scalar,
                                                  braid_dtype dt,
                                                  int scalar_on_device,
                                                  braid_comm *comm);
/* Frees an op made by braid_op_create_premul_sum. A call queued on a
 * stream that uses it and has not finished, a built-in op, an op already
 * destroyed or another communicator's: BRAID_ERR_INVALID_ARG with the
 * reason in braid_comm_last_error. */
BRAID_API braid_result braid_op_destroy(braid_op op, braid_comm *comm);

/* ---- collectives ------------------------------------------------------ */

BRAID_API braid_result braid_allreduce(const void *sendbuf, void *recvbuf,
                                       size_t count, braid_dtype dt,
                                       braid_op op, braid_comm *comm,
                                       braid_stream *stream);
BRAID_API braid_result braid_reduce(const void *sendbuf, void *recvbuf,
                                    size_t count, braid_dtype dt, braid_op op,
                                    int root, braid_comm *comm,
                                    braid_stream *stream);
/* In place when sendbuf == recvbuf at the root; sendbuf only read at root. */
BRAID_API braid_result braid_broadcast(const void *sendbuf, void *recvbuf,
                                       size_t count, braid_dtype dt, int root,
                                       braid_comm *comm, braid_stream *stream);
/* recvbuf holds nranks * sendcount elements. */
BRAID_API braid_result braid_allgather(const void *sendbuf, void *recvbuf,
                                       size_t sendcount, braid_dtype dt,
                                       braid_comm *comm, braid_stream *stream);
/* sendbuf holds nranks * recvcount elements. */
BRAID_API braid_result braid_reduce_scatter(const void *sendbuf, void *recvbuf,
                                            size_t recvcount, braid_dtype dt,
                                            braid_op op, braid_comm *comm,
                                            braid_stream *stream);
/* recvbuf (nranks * sendcount elements) only used at the root. */
BRAID_API braid_result braid_gather(const void *sendbuf, void *recvbuf,
                                    size_t sendcount, braid_dtype dt, int root,
                                    braid_comm *comm, braid_stream *stream);
/* sendbuf (nranks * recvcount elements) only used at the root. */
BRAID_API braid_result braid_scatter(const void *sendbuf, void *recvbuf,
                                     size_t recvcount, braid_dtype dt, int root,
                                     braid_comm *comm, braid_stream *stream);
/* Block j of sendbuf goes to rank j; both hold nranks * count elements. */
BRAID_API braid_result braid_alltoall(const void *sendbuf, void *recvbuf,
                                      size_t count, braid_dtype dt,
                                      braid_comm *comm, braid_stream *stream);
/* Each rank sends block j of sendbuf, sendcounts[j] elements from
 * sendbuf + sdispls[j] elements, to rank j, and receives rank j's block for
 * it, recvcounts[j] elements, at recvbuf + rdispls[j] elements (MPI's
 * Alltoallv; every array has one entry per rank, counts and displacements
 * in elements; zero counts allowed). Rank i's recvcounts[j] must equal rank
 * j's sendcounts[i]: each rank tells every other the count it sends before
 * the data, and a rank that expects another count fails the call with
 * BRAID_ERR_MISMATCH, naming both ranks and counts, before any data of that
 * block is received (the communicator is then broken, as after any
 * mismatch; the peer's call fails too or its next one does). Checked before
 * anything is sent (BRAID_ERR_INVALID_ARG, the message names the argument):
 * NULL arrays, a NULL buffer where a count is nonzero, sendcounts[rank] !=
 * recvcounts[rank], receive blocks that overlap each other, a send block
 * that overlaps a receive block (there is no in-place form, so sendbuf ==
 * recvbuf is refused unless the blocks are apart). Host buffers, blocking
 * or on a host stream, inside groups too; device buffers:
 * BRAID_ERR_UNSUPPORTED. */
BRAID_API braid_result braid_alltoallv(const void *sendbuf,
                                       const size_t *sendcounts,
                                       const size_t *sdispls, void *recvbuf,
                                       const size_t *recvcounts,
                                       const size_t *rdispls, braid_dtype dt,
                                       braid_comm *comm, braid_stream *stream);
/* Point to point; messages between two ranks arrive in the order sent. Put
 * matching sends and receives that depend on each other in one group. */
BRAID_API braid_result braid_send(const void *sendbuf, size_t count,
                                  braid_dtype dt, int peer, braid_comm *comm,
                                  braid_stream *stream);
BRAID_API braid_result braid_recv(void *recvbuf, size_t count, braid_dtype dt,
                                  int peer, braid_comm *comm,
                                  braid_stream *stream);
BRAID_API braid_result braid_barrier(braid_comm *comm, braid_stream *stream);

/* Calls between start and end are issued together at end (send/recv run
 * concurrently, so exchanges cannot deadlock). Groups nest. A group's calls
 * are all on one stream, or blocking (any stream NULL makes the whole group
 * blocking); calls on two streams: BRAID_ERR_INVALID_ARG at end. */
BRAID_API braid_result braid_group_start(void);
BRAID_API braid_result braid_group_end(void);

/* ---- streams ---------------------------------------------------------- */

/* A host stream: calls on it return once queued and run in issue order, on
 * one communicator or several (a call on one waits for the stream's earlier
 * calls on the others; a group's calls on several communicators run
 * together). A stream, like a communicator, takes calls from one thread at
 * a time. */
BRAID_API braid_result braid_stream_create(braid_stream **stream);
/* Waits for everything queued, then frees. */
BRAID_API braid_result braid_stream_destroy(braid_stream *stream);
/* Waits for everything queued; returns the first error of those calls. */
BRAID_API braid_result braid_stream_synchronize(braid_stream *stream);
/* BRAID_SUCCESS when all is done, BRAID_IN_PROGRESS while work remains, or
 * the first error. */
BRAID_API braid_result braid_stream_query(braid_stream *stream);
/* Wraps a CUDA stream (cudaStream_t passed as void*; NULL is the default
 * stream). Calls on it are stream-ordered as NCCL's: a call runs after the
 * work issued on the stream before it, and work issued on the stream after
 * it sees its result. Allreduce, reduce, broadcast, allgather and
 * reduce_scatter among the ranks of a host, and calls of up to 32 KiB,
 * return once enqueued (by default: BRAID_CUDA_KERNEL_MAX,
 * BRAID_CUDA_HOST_MAX); the others wait in the calling thread for the
 * stream to reach them and return once done (BRAID_CUDA_GATE,
 * docs/CUDA.md: no stream is held, so none can hang). Such calls take device
 * buffers only (host buffers: BRAID_ERR_INVALID_ARG). A call that the
 * stream does not reach within BRAID_TIMEOUT fails with BRAID_ERR_TIMEOUT.
 * braid_stream_synchronize waits for the calls (and returns their first
 * error), braid_stream_destroy frees the wrapper, not the CUDA stream.
 * Calls on CUDA streams see each other's results in issue order; a call
 * on a host stream and one on a CUDA stream run in issue order too, but
 * one that reads device memory the other writes must wait for it
 * (braid_stream_synchronize, cudaStreamSynchronize), as a blocking call
 * must. A call on a stream being captured into a CUDA graph is
 * BRAID_ERR_UNSUPPORTED. BRAID_ERR_UNSUPPORTED (the log says why) in a
 * build without CUDA or without a visible device. */
BRAID_API braid_result braid_stream_from_cuda(void *cuda_stream,
                                              braid_stream **stream);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_H */
