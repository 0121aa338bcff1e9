/*
 * The schedule IR: a collective call as data (DESIGN §1).
 *
 * A schedule gives every rank one or more channels; a channel is an ordered
 * list of steps; a step names a primitive and the chunks it touches, never
 * bytes. The executor (src/executor.c), the verifier (collectives/verify.c),
 * and later the simulator, renderer and file format all read this structure.
 *
 * Chunk geometry. Each buffer is made of blocks of the call's count elements:
 *   allreduce, broadcast, reduce: in 1 block, out 1 block
 *   allgather, gather:            in 1 block, out nranks blocks
 *   reduce_scatter, scatter:      in nranks blocks, out 1 block
 *   alltoall:                     in nranks blocks, out nranks blocks
 *   send: in 1 block; recv: out 1 block
 * Every block is cut into `chunks_per_block` (K) chunks; chunk index
 * i = block * K + j. Chunk j of any block covers elements
 *   [j * E / K, (j + 1) * E / K)   of that block (E = the call's count).
 * The scratch buffer holds `scratch_blocks` blocks with the same geometry.
 * Data only moves between chunks with the same j (same size).
 *
 * Channels split every chunk by weight: channel c takes the sub-range
 * [floor(m * W_c), floor(m * W_{c+1})) of a chunk of m elements, W being the
 * cumulative weights. The executor runs each channel's step list once per
 * pipeline slice (every chunk's channel share cut into S equal slices).
 *
 * Primitives (enum sched_prim, SCHED_P_*; all chunk ranges of one step have
 * the same count):
 *   SEND(peer, src)                     send src to peer
 *   RECV(peer, dst)                     receive into dst
 *   RECV_REDUCE(peer, src, dst)         dst = src (+) received
 *   RECV_REDUCE_SEND(peer, src, dst, peer_out)
 *                                       dst = src (+) received; send dst on
 *   RECV_COPY_SEND(peer, dst, peer_out) receive into dst; send dst on
 *   COPY(src, dst)                      dst = src
 *   REDUCE(src, dst)                    dst = dst (+) src
 *   RECV_REDUCE_REV(peer, src, dst)     dst = received (+) src: the message
 *                                       is the left operand (a rank whose
 *                                       own input comes after the one it
 *                                       receives in a rank-order fold)
 * Messages between two ranks on one channel are matched in order.
 */
#ifndef BRAID_COLLECTIVES_SCHEDULE_H
#define BRAID_COLLECTIVES_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "src/log.h" /* braid_result; ERR's message: err_msg() */

typedef enum sched_coll {
  SCHED_ALLREDUCE = 0,
  SCHED_BROADCAST,
  SCHED_REDUCE,
  SCHED_ALLGATHER,
  SCHED_REDUCE_SCATTER,
  SCHED_GATHER,
  SCHED_SCATTER,
  SCHED_ALLTOALL,
  SCHED_SEND,
  SCHED_RECV,
  SCHED_NUM_COLLS
} sched_coll;

typedef enum sched_buf {
  SCHED_BUF_NONE = 0,
  SCHED_BUF_IN = 1,
  SCHED_BUF_OUT = 2,
  SCHED_BUF_SCRATCH = 3
} sched_buf;

typedef enum sched_prim {
  SCHED_P_SEND = 0,
  SCHED_P_RECV,
  SCHED_P_RECV_REDUCE,
  SCHED_P_RECV_REDUCE_SEND,
  SCHED_P_RECV_COPY_SEND,
  SCHED_P_COPY,
  SCHED_P_REDUCE,
  SCHED_P_RECV_REDUCE_REV,
  SCHED_NUM_PRIMS
} sched_prim;

/* Which links a channel's messages should take (a hint for transports that
 * have a choice, and the simulator's routing): the best path, NVLink only,
 * or through host memory (PCIe / CPU, never NVLink). */
typedef enum sched_route {
  SCHED_ROUTE_ANY = 0,
  SCHED_ROUTE_NVL = 1,
  SCHED_ROUTE_HOST = 2,
  SCHED_NUM_ROUTES
} sched_route;

/* `count` consecutive chunks of one buffer, starting at `index`. */
typedef struct sched_chunks {
  uint8_t buf;    /* sched_buf */
  uint32_t index; /* first chunk */
  uint32_t count; /* number of chunks, >= 1 when buf != NONE */
} sched_chunks;

typedef struct sched_step {
  uint8_t prim;     /* sched_prim */
  int32_t peer;     /* SEND: to; RECV*: from; -1 for local steps */
  int32_t peer_out; /* fused *_SEND: to; -1 otherwise */
  sched_chunks src; /* SEND, RECV_REDUCE*, COPY, REDUCE: local operand */
  sched_chunks dst; /* RECV*, COPY, REDUCE: destination */
} sched_step;

typedef struct sched_channel {
  sched_step *steps;
  int nsteps;
  int cap;
} sched_channel;

typedef struct sched {
  sched_coll coll;
  int nranks;
  int root; /* broadcast, reduce, gather, scatter; send/recv: peer */
  int chunks_per_block; /* K */
  int scratch_blocks;   /* blocks of scratch each rank needs (0: none) */
  int nchannels;
  double *weights;   /* nchannels weights summing to 1 */
  uint8_t *route;    /* nchannels sched_route hints (all SCHED_ROUTE_ANY) */
  sched_channel *ch; /* nranks * nchannels, index rank * nchannels + c */
  char algo[32];     /* generator name, e.g. "ring" */
} sched;

/* Lifecycle. sched_new allocates channels and equal weights into *out:
 * BRAID_ERR_INVALID_ARG (a count below 1, an unknown collective) or
 * BRAID_ERR_NOMEM, with the message (err_msg), and *out NULL otherwise. */
braid_result sched_new(sched_coll coll, int nranks, int root,
                       int chunks_per_block, int nchannels, const char *algo,
                       sched **out);
void sched_free(sched *s);
sched_channel *sched_chan(sched *s, int rank, int channel);
const sched_channel *sched_chan_c(const sched *s, int rank, int channel);

/* Appending steps: BRAID_SUCCESS, BRAID_ERR_INVALID_ARG (no channel: c
 * NULL) or BRAID_ERR_NOMEM (the channel could not grow), with the message. */
sched_chunks sched_ck(sched_buf buf, uint32_t index, uint32_t count);
braid_result sched_add(sched_channel *c, sched_prim prim, int peer,
                       int peer_out, sched_chunks src, sched_chunks dst);
braid_result sched_send(sched_channel *c, int peer, sched_chunks src);
braid_result sched_recv(sched_channel *c, int peer, sched_chunks dst);
braid_result sched_recv_reduce(sched_channel *c, int peer, sched_chunks src,
                               sched_chunks dst);
braid_result sched_recv_reduce_send(sched_channel *c, int peer,
                                    sched_chunks src, sched_chunks dst,
                                    int peer_out);
braid_result sched_recv_reduce_rev(sched_channel *c, int peer, sched_chunks src,
                                   sched_chunks dst);
braid_result sched_recv_copy_send(sched_channel *c, int peer, sched_chunks dst,
                                  int peer_out);
braid_result sched_copy(sched_channel *c, sched_chunks src, sched_chunks dst);
braid_result sched_reduce_local(sched_channel *c, sched_chunks src,
                                sched_chunks dst);

/* Blocks per buffer for a collective (see the table above). */
int sched_in_blocks(sched_coll coll, int nranks);
int sched_out_blocks(sched_coll coll, int nranks);
/* Does `rank` use its input / output buffer at all in this collective?
 * (gather's recvbuf and scatter's sendbuf only at the root, and so on.) */
int sched_uses_in(sched_coll coll, int root, int rank);
int sched_uses_out(sched_coll coll, int root, int rank);
/* Does the collective reduce? */
int sched_reduces(sched_coll coll);

/* What a primitive does with a step's fields: receives a message from
 * `peer`; reduces a message with a local operand (RECV_REDUCE,
 * RECV_REDUCE_SEND, RECV_REDUCE_REV); reads `src`. */
int sched_prim_recvs(sched_prim p);
int sched_prim_reduces_msg(sched_prim p);
int sched_prim_has_src(sched_prim p);

const char *sched_coll_name(sched_coll coll);
const char *sched_prim_name(sched_prim prim);
const char *sched_buf_name(sched_buf buf);
const char *sched_route_name(sched_route r); /* "any", "nvl", "host" */

/* Element geometry (see the header comment). */
static inline size_t sched_chunk_off(size_t E, int K, int j) {
  if (E <= UINT32_MAX) /* E * j fits in 64 bits: no 128-bit division */
    return (size_t)((uint64_t)E * (unsigned)j / (unsigned)K);
  return (size_t)(((unsigned __int128)E * (unsigned)j) / (unsigned)K);
}
static inline size_t sched_chunk_len(size_t E, int K, int j) {
  return sched_chunk_off(E, K, j + 1) - sched_chunk_off(E, K, j);
}

#endif
