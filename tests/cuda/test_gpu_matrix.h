/*
 * The correctness matrix (tests/core/coll_matrix.c) on device buffers.
 *
 * coll_matrix.c is compiled unchanged with this header force-included
 * (-include): every collective it calls goes through a wrapper that copies
 * the call's host buffers into cudaMalloc'd memory (one allocation when they
 * overlap, so in-place calls stay in place), runs the collective on the
 * device copies, and copies them back, so coll_matrix checks the device
 * results with its own expected values. A guard area after each device
 * allocation catches writes past the end.
 *
 * GPU_MATRIX_STREAM: calls go on a wrapped CUDA stream
 * (braid_stream_from_cuda) instead of blocking: the copies in and out are
 * issued on the same stream around the call without any host wait between
 * them, so the results are only right when the call is stream-ordered.
 * GPU_MATRIX_BLOCKING_RANK=r (environment) makes rank r issue blocking calls
 * meanwhile: ranks may mix the two, and every rank must still take the same
 * path for a call (small calls through host memory, BRAID_CUDA_HOST_MAX).
 *
 * Every rank exits 77 (a skip) when no CUDA device is visible.
 */
#ifndef BRAID_TEST_GPU_MATRIX_H
#define BRAID_TEST_GPU_MATRIX_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "device/cuda_dev.h"

#define GM_GUARD 64
#define GM_GUARD_BYTE 0x5a

/* Exits 77 without a device; with several, a rank takes GPU (local rank
 * mod count) (braidrun's BRAID_LOCAL_RANK), as a job with one rank per GPU
 * would. */
__attribute__((constructor)) static void gm_probe(void) {
  int count = cudev_count();
  if (count > 0) {
    const char *lr = getenv("BRAID_LOCAL_RANK");
    if (count > 1 && lr != NULL &&
        cudaSetDevice(atoi(lr) % count) != cudaSuccess) {
      fprintf(stderr, "gpu matrix: cudaSetDevice(%d) failed\n",
              atoi(lr) % count);
      exit(3);
    }
    return;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  fprintf(stderr, "SKIP: no CUDA device: %s\n",
          e != cudaSuccess ? cudaGetErrorString(e)
                           : "cudaGetDeviceCount found none");
  exit(77);
}

static void gm_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return;
  fprintf(stderr, "gpu matrix: %s: %s\n", what, cudaGetErrorString(e));
  exit(3);
}

#ifdef GPU_MATRIX_STREAM
static cudaStream_t gm_cuda;
static braid_stream *gm_bs;
static braid_stream *gm_stream(void) {
  if (gm_bs == NULL) {
    gm_check(cudaStreamCreateWithFlags(&gm_cuda, cudaStreamNonBlocking),
             "cudaStreamCreate");
    braid_result r = braid_stream_from_cuda((void *)gm_cuda, &gm_bs);
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "gpu matrix: braid_stream_from_cuda: %s\n",
              braid_result_string(r));
      exit(3);
    }
  }
  return gm_bs;
}
#define GM_CUDA gm_cuda
/* GPU_MATRIX_BLOCKING_RANK: this rank issues blocking calls. */
static int gm_blocking_here(void) {
  static int v = -1;
  if (v < 0) {
    const char *b = getenv("GPU_MATRIX_BLOCKING_RANK");
    const char *me = getenv("BRAID_RANK");
    v = b != NULL && me != NULL && atoi(b) == atoi(me);
  }
  return v;
}
#else
#define GM_CUDA ((cudaStream_t)0)
static int gm_blocking_here(void) { return 1; }
#endif

/* One device region standing for one host range. */
typedef struct gm_region {
  const char *host;
  size_t len;
  char *dev;
} gm_region;

/* The device copies of one call (up to two regions), kept until the call's
 * results are copied back (the end of the group for send/recv). */
typedef struct gm_call {
  gm_region reg[2];
  int nreg;
} gm_call;

static gm_call gm_pending[64];
static int gm_npending, gm_group_depth;

/* Device memory is kept and reused from call to call, as coll_matrix.c
 * keeps its host buffers: allocating and freeing megabytes per call cost
 * more than the calls (and cudaFree waits for the whole device). */
#define GM_BLOCKS 8
static struct {
  char *dev;
  size_t cap;
  int used;
} gm_blocks[GM_BLOCKS];

static char *gm_dev_get(size_t bytes) {
  for (int i = 0; i < GM_BLOCKS; i++) {
    if (gm_blocks[i].used)
      continue;
    if (gm_blocks[i].cap < bytes) {
      if (gm_blocks[i].dev != NULL)
        gm_check(cudaFree(gm_blocks[i].dev), "cudaFree");
      gm_blocks[i].dev = NULL;
      gm_blocks[i].cap = 0;
      gm_check(cudaMalloc((void **)&gm_blocks[i].dev, bytes), "cudaMalloc");
      gm_blocks[i].cap = bytes;
    }
    gm_blocks[i].used = 1;
    return gm_blocks[i].dev;
  }
  fprintf(stderr, "gpu matrix: more than %d device buffers at once\n",
          GM_BLOCKS);
  exit(3);
}

static void gm_dev_put(char *p) {
  for (int i = 0; i < GM_BLOCKS; i++)
    if (gm_blocks[i].used && gm_blocks[i].dev == p) {
      gm_blocks[i].used = 0;
      return;
    }
  fprintf(stderr, "gpu matrix: freeing a device buffer not in use\n");
  exit(3);
}

static void gm_region_in(gm_region *g) {
  g->dev = gm_dev_get(g->len + GM_GUARD);
  gm_check(cudaMemsetAsync(g->dev + g->len, GM_GUARD_BYTE, GM_GUARD, GM_CUDA),
           "cudaMemset(guard)");
  gm_check(
      cudaMemcpyAsync(g->dev, g->host, g->len, cudaMemcpyHostToDevice, GM_CUDA),
      "cudaMemcpy(in)");
  /* a blocking call does not wait for the caller's streams */
  if (gm_blocking_here())
    gm_check(cudaStreamSynchronize(GM_CUDA), "cudaStreamSynchronize(in)");
}

/* Maps host [in, in+inlen) and [out, out+outlen) (either may be empty). */
static gm_call *gm_map(const void *in, size_t inlen, void *out, size_t outlen,
                       const void **din, void **dout) {
  if (gm_npending == 64) {
    fprintf(stderr, "gpu matrix: too many calls in one group\n");
    exit(3);
  }
#ifdef GPU_MATRIX_STREAM
  (void)gm_stream(); /* the copies go on it: create it first */
#endif
  gm_call *m = &gm_pending[gm_npending++];
  memset(m, 0, sizeof *m);
  const char *i = in, *o = out;
  if (inlen > 0 && outlen > 0 && i < o + outlen && o < i + inlen) {
    const char *lo = i < o ? i : o;
    const char *hi = i + inlen > o + outlen ? i + inlen : o + outlen;
    m->reg[0] = (gm_region){lo, (size_t)(hi - lo), NULL};
    m->nreg = 1;
    gm_region_in(&m->reg[0]);
    *din = m->reg[0].dev + (i - lo);
    *dout = m->reg[0].dev + (o - lo);
    return m;
  }
  *din = in;
  *dout = out;
  if (inlen > 0) {
    m->reg[m->nreg] = (gm_region){i, inlen, NULL};
    gm_region_in(&m->reg[m->nreg]);
    *din = m->reg[m->nreg++].dev;
  }
  if (outlen > 0) {
    m->reg[m->nreg] = (gm_region){o, outlen, NULL};
    gm_region_in(&m->reg[m->nreg]);
    *dout = m->reg[m->nreg++].dev;
  }
  return m;
}

/* Copies every pending call's regions back, checks the guards, frees. The
 * result of the call(s) is r, or the stream's error. */
static braid_result gm_unmap_all(braid_result r) {
  unsigned char guard[GM_GUARD];
  for (int k = 0; k < gm_npending; k++) {
    gm_call *m = &gm_pending[k];
    for (int j = 0; j < m->nreg; j++) {
      gm_region *g = &m->reg[j];
      gm_check(cudaMemcpyAsync((void *)g->host, g->dev, g->len,
                               cudaMemcpyDeviceToHost, GM_CUDA),
               "cudaMemcpy(out)");
      gm_check(cudaMemcpyAsync(guard, g->dev + g->len, GM_GUARD,
                               cudaMemcpyDeviceToHost, GM_CUDA),
               "cudaMemcpy(guard)");
      gm_check(cudaStreamSynchronize(GM_CUDA), "cudaStreamSynchronize");
      for (int b = 0; b < GM_GUARD; b++)
        if (guard[b] != GM_GUARD_BYTE) {
          fprintf(stderr, "gpu matrix: a call wrote past the end of a device "
                          "buffer\n");
          r = r == BRAID_SUCCESS ? BRAID_ERR_INTERNAL : r;
          break;
        }
      gm_dev_put(g->dev);
    }
  }
  gm_npending = 0;
  return r;
}

/* After a call: in a group the copies wait for group_end. */
static braid_result gm_done(braid_result r) {
  if (gm_group_depth > 0)
    return r;
#ifdef GPU_MATRIX_STREAM
  if (r == BRAID_SUCCESS) {
    r = gm_unmap_all(r);
    braid_result s = braid_stream_synchronize(gm_bs);
    return r != BRAID_SUCCESS ? r : s;
  }
#endif
  return gm_unmap_all(r);
}

#ifdef GPU_MATRIX_STREAM
#define GM_S(s) ((void)(s), gm_blocking_here() ? NULL : gm_stream())
#else
#define GM_S(s) (s)
#endif

static int gm_n(braid_comm *c) {
  int n = 0;
  braid_comm_size(c, &n);
  return n;
}
static int gm_me(braid_comm *c) {
  int me = 0;
  braid_comm_rank(c, &me);
  return me;
}

/* Bytes of a call's input and output on this rank: (blocks) x count. */
#define GM_B(n, dt, blocks) ((size_t)(n)*braid_dtype_size(dt) * (blocks))

static braid_result gm_allreduce(const void *in, void *out, size_t n,
                                 braid_dtype dt, braid_op op, braid_comm *c,
                                 braid_stream *s) {
  if (n == 0)
    return braid_allreduce(in, out, n, dt, op, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, 1), out, GM_B(n, dt, 1), &di, &dout);
  return gm_done(braid_allreduce(di, dout, n, dt, op, c, GM_S(s)));
}

static braid_result gm_reduce(const void *in, void *out, size_t n,
                              braid_dtype dt, braid_op op, int root,
                              braid_comm *c, braid_stream *s) {
  if (n == 0)
    return braid_reduce(in, out, n, dt, op, root, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, 1), out, out ? GM_B(n, dt, 1) : 0, &di, &dout);
  return gm_done(braid_reduce(di, dout, n, dt, op, root, c, GM_S(s)));
}

static braid_result gm_reduce_scatter(const void *in, void *out, size_t n,
                                      braid_dtype dt, braid_op op,
                                      braid_comm *c, braid_stream *s) {
  if (n == 0)
    return braid_reduce_scatter(in, out, n, dt, op, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, gm_n(c)), out, GM_B(n, dt, 1), &di, &dout);
  return gm_done(braid_reduce_scatter(di, dout, n, dt, op, c, GM_S(s)));
}

static braid_result gm_broadcast(const void *in, void *out, size_t n,
                                 braid_dtype dt, int root, braid_comm *c,
                                 braid_stream *s) {
  if (n == 0)
    return braid_broadcast(in, out, n, dt, root, c, s);
  const void *di;
  void *dout;
  gm_map(in, in ? GM_B(n, dt, 1) : 0, out, GM_B(n, dt, 1), &di, &dout);
  return gm_done(braid_broadcast(di, dout, n, dt, root, c, GM_S(s)));
}

static braid_result gm_allgather(const void *in, void *out, size_t n,
                                 braid_dtype dt, braid_comm *c,
                                 braid_stream *s) {
  if (n == 0)
    return braid_allgather(in, out, n, dt, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, 1), out, GM_B(n, dt, gm_n(c)), &di, &dout);
  return gm_done(braid_allgather(di, dout, n, dt, c, GM_S(s)));
}

static braid_result gm_gather(const void *in, void *out, size_t n,
                              braid_dtype dt, int root, braid_comm *c,
                              braid_stream *s) {
  if (n == 0)
    return braid_gather(in, out, n, dt, root, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, 1), out, out ? GM_B(n, dt, gm_n(c)) : 0, &di, &dout);
  return gm_done(braid_gather(di, dout, n, dt, root, c, GM_S(s)));
}

static braid_result gm_scatter(const void *in, void *out, size_t n,
                               braid_dtype dt, int root, braid_comm *c,
                               braid_stream *s) {
  if (n == 0)
    return braid_scatter(in, out, n, dt, root, c, s);
  const void *di;
  void *dout;
  size_t inlen = gm_me(c) == root && in ? GM_B(n, dt, gm_n(c)) : 0;
  gm_map(in, inlen, out, GM_B(n, dt, 1), &di, &dout);
  return gm_done(braid_scatter(di, dout, n, dt, root, c, GM_S(s)));
}

static braid_result gm_alltoall(const void *in, void *out, size_t n,
                                braid_dtype dt, braid_comm *c,
                                braid_stream *s) {
  if (n == 0)
    return braid_alltoall(in, out, n, dt, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, gm_n(c)), out, GM_B(n, dt, gm_n(c)), &di, &dout);
  return gm_done(braid_alltoall(di, dout, n, dt, c, GM_S(s)));
}

static braid_result gm_send(const void *in, size_t n, braid_dtype dt, int peer,
                            braid_comm *c, braid_stream *s) {
  if (n == 0)
    return braid_send(in, n, dt, peer, c, s);
  const void *di;
  void *dout;
  gm_map(in, GM_B(n, dt, 1), NULL, 0, &di, &dout);
  return gm_done(braid_send(di, n, dt, peer, c, GM_S(s)));
}

static braid_result gm_recv(void *out, size_t n, braid_dtype dt, int peer,
                            braid_comm *c, braid_stream *s) {
  if (n == 0)
    return braid_recv(out, n, dt, peer, c, s);
  const void *di;
  void *dout;
  gm_map(NULL, 0, out, GM_B(n, dt, 1), &di, &dout);
  return gm_done(braid_recv(dout, n, dt, peer, c, GM_S(s)));
}

static braid_result gm_group_start(void) {
  gm_group_depth++;
  return braid_group_start();
}

static braid_result gm_group_end(void) {
  braid_result r = braid_group_end();
  if (--gm_group_depth > 0)
    return r;
#ifdef GPU_MATRIX_STREAM
  if (r == BRAID_SUCCESS && gm_bs != NULL) {
    r = gm_unmap_all(r);
    braid_result s = braid_stream_synchronize(gm_bs);
    return r != BRAID_SUCCESS ? r : s;
  }
#endif
  return gm_unmap_all(r);
}

#ifdef GPU_MATRIX_STREAM
/* the barrier on the CUDA stream too (no buffers: ordered, nothing moved) */
static braid_result gm_barrier(braid_comm *c, braid_stream *s) {
  braid_result r = braid_barrier(c, GM_S(s));
  return r == BRAID_SUCCESS && !gm_blocking_here()
             ? braid_stream_synchronize(gm_bs)
             : r;
}
#define braid_barrier gm_barrier
#endif

#define braid_allreduce gm_allreduce
#define braid_reduce gm_reduce
#define braid_reduce_scatter gm_reduce_scatter
#define braid_broadcast gm_broadcast
#define braid_allgather gm_allgather
#define braid_gather gm_gather
#define braid_scatter gm_scatter
#define braid_alltoall gm_alltoall
#define braid_send gm_send
#define braid_recv gm_recv
#define braid_group_start gm_group_start
#define braid_group_end gm_group_end

#endif
