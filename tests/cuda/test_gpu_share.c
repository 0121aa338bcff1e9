/*
 * Sharing a GPU: calls on more CUDA streams than the GPU has hardware
 * queues (some of them then share one with braid's own streams), and two
 * communicators of the same ranks with collective kernels in flight at once
 * (their blocks must fit on the GPU together), a communicator that a
 * rank destroys while its peer still uses it, and one destroyed while
 * another's call holds a stream. Forked ranks on one GPU;
 * skips without one. Run plainly, with collective kernels
 * (BRAID_CUDA_KERNEL_MAX) and through pinned host memory
 * (BRAID_CUDA_HOST_MAX): gpu.cmake.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/config.h"
#include "test_gpu_ranks.h"
#include "transports/cuda/cuda_tp.h"

/* Calls on more CUDA streams than a GPU has hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), made after the
 * communicator's first call so that braid's own streams exist already:
 * some of the user's streams then share a hardware queue with braid's,
 * and a call's work must not wait there behind a user's stream held for
 * that very call (docs/CUDA.md, "Stream gates and hardware queues").
 * Stream k: a copy in, the allreduce, a copy of the result out that must
 * see it. BRAID_TIMEOUT is 20 s, so that work held so fails in time. */
#define NSTREAMS 20
static int many_streams(braid_comm *c, int rank, int n) {
  enum { K = 256 };
  const size_t bytes = (size_t)NSTREAMS * K * sizeof(float);
  CK(cudaSetDevice(0));
  float *h = malloc(bytes), *d = NULL, *o = NULL;
  if (h == NULL)
    return 3;
  for (int k = 0; k < NSTREAMS; k++)
    for (int i = 0; i < K; i++)
      h[k * K + i] = (float)(rank + k);
  CK(cudaMalloc((void **)&d, bytes));
  CK(cudaMalloc((void **)&o, bytes));
  CK(cudaMemset(d, 0, bytes));
  int rc = 0;
  if (braid_allreduce(d, d, K, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
      BRAID_SUCCESS)
    rc = 12;
  cudaStream_t s[NSTREAMS];
  braid_stream *bs[NSTREAMS];
  for (int k = 0; k < NSTREAMS; k++) {
    CK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    if (braid_stream_from_cuda((void *)s[k], &bs[k]) != BRAID_SUCCESS)
      return 10;
  }
  for (int k = 0; k < NSTREAMS && rc == 0; k++) {
    float *dk = d + (size_t)k * K, *ok = o + (size_t)k * K;
    CK(cudaMemcpyAsync(dk, h + (size_t)k * K, K * sizeof(float),
                       cudaMemcpyHostToDevice, s[k]));
    braid_result r =
        braid_allreduce(dk, dk, K, BRAID_FLOAT32, BRAID_SUM, c, bs[k]);
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "rank %d: allreduce on stream %d: %s (%s)\n", rank, k,
              braid_result_string(r), braid_comm_last_error(c));
      rc = 12;
    }
    CK(cudaMemcpyAsync(ok, dk, K * sizeof(float), cudaMemcpyDeviceToDevice,
                       s[k]));
  }
  int synced = gpu_sync_streams(c, rank, bs, s, NSTREAMS);
  if (synced == 50)
    return 50;
  rc = rc ? rc : synced;
  CK(cudaMemcpy(h, o, bytes, cudaMemcpyDeviceToHost));
  for (int k = 0; k < NSTREAMS && rc == 0; k++) {
    float want = (float)(n * k + n * (n - 1) / 2);
    for (int i = 0; i < K && rc == 0; i++)
      if (h[k * K + i] != want) {
        fprintf(stderr, "rank %d: stream %d, element %d: %g, want %g\n", rank,
                k, i, (double)h[k * K + i], (double)want);
        rc = 14;
      }
  }
  if (rc == 0)
    rc = gpu_kernel_calls(rank, bs, NSTREAMS, NSTREAMS);
  for (int k = 0; k < NSTREAMS; k++) {
    braid_stream_destroy(bs[k]);
    cudaStreamDestroy(s[k]);
  }
  cudaFree(d);
  cudaFree(o);
  free(h);
  return rc;
}

/* Two communicators of the same ranks (the second split from the first)
 * with collective kernels on one GPU: the second gets half the room of the
 * first (src/exec_kernel.c, room_share), so that both calls' kernels, in
 * flight at once on two streams, fit on the GPU together. Each makes one
 * call on a stream of its own, neither synchronised before the other's is
 * issued. Without BRAID_CUDA_KERNEL_MAX only the results are checked. */
static int two_comms(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  CK(cudaSetDevice(0));
  float h[K], *d[2] = {NULL, NULL};
  cudaStream_t s[2];
  braid_stream *bs[2];
  braid_comm *cs[2] = {c, NULL};
  int rc = gpu_ones_on_two_streams(rank, K, d, s, bs);
  if (rc)
    return rc;
  /* the first one's device side first, then the second communicator's */
  if (braid_allreduce(d[0], d[0], K, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
          BRAID_SUCCESS ||
      braid_comm_split(c, 0, rank, &cs[1]) != BRAID_SUCCESS)
    return 12;
  for (int j = 0; j < 2 && rc == 0; j++)
    if (braid_allreduce(d[j], d[j], K, BRAID_FLOAT32, BRAID_SUM, cs[j],
                        bs[j]) != BRAID_SUCCESS)
      rc = 12;
  for (int j = 0; j < 2; j++) {
    if (braid_stream_synchronize(bs[j]) != BRAID_SUCCESS && rc == 0)
      rc = 13;
    CK(cudaStreamSynchronize(s[j]));
    CK(cudaMemcpy(h, d[j], sizeof h, cudaMemcpyDeviceToHost));
    float want = j == 0 ? (float)(n * n) : (float)n;
    for (int i = 0; i < K && rc == 0; i++)
      if (h[i] != want) {
        fprintf(stderr, "rank %d: communicator %d, element %d: %g, want %g\n",
                rank, j, i, (double)h[i], (double)want);
        rc = 14;
      }
  }
  int room = 0, sms = 0;
  if (rc == 0 && exk_blocks(c) > 0 &&
      cudev_kernel_coll_room(&room, &sms) == BRAID_SUCCESS) {
    for (int j = 0; j < 2 && rc == 0; j++) {
      int want = (room >> j) / 2 / n;
      /* BRAID_CUDA_KERNEL_BLOCKS, else the ranks on the GPU (all n here)
       * share its SMs, each the largest power of two within its share */
      int most = cfg_get()->cuda_kernel_blocks;
      if (most == 0 && n == 1)
        most = 32;
      else if (most == 0)
        for (most = 1; most * 2 <= sms / n;)
          most *= 2;
      want = want > most ? most : want < 1 ? 1 : want;
      if (exk_blocks(cs[j]) != want) {
        fprintf(stderr,
                "rank %d: communicator %d has %d blocks, want %d (room %d, "
                "%d ranks on the GPU)\n",
                rank, j, exk_blocks(cs[j]), want, room, n);
        rc = 15;
      }
    }
  }
  braid_comm_destroy(cs[1]);
  gpu_ones_free(d, s, bs);
  return rc;
}

/* A communicator that one rank destroys while another still uses it: the
 * first frees none of its device memory that the other still maps (CUDA
 * leaves that undefined; on a GPU the other faults, and the emulated GPU
 * aborts), but does not wait for it either: the memory waits on a list
 * (transports/cuda/cuda_release.c) and goes once the other has destroyed
 * its communicator too. A communicator made after it gets the same share
 * of the GPU's room for kernels as it had (src/exec_kernel.c,
 * room_share). */
static int destroy_first(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  CK(cudaSetDevice(0));
  float *d = NULL, h[K];
  CK(cudaMalloc((void **)&d, sizeof h));
  CK(cudaMemset(d, 0, sizeof h));
  braid_comm *sub[2] = {NULL, NULL};
  int blocks[2] = {0, 0}, rc = 0;
  for (int j = 0; j < 2 && rc == 0; j++) {
    if (braid_comm_split(c, 0, rank, &sub[j]) != BRAID_SUCCESS ||
        braid_allreduce(d, d, K, BRAID_FLOAT32, BRAID_SUM, sub[j], NULL) !=
            BRAID_SUCCESS)
      return 12;
    blocks[j] = exk_blocks(sub[j]);
    if (j == 1)
      break;
    /* still using it until rank 0 has destroyed its own and looked */
    if (rank != 0 && !gpu_wait_held(30000)) {
      fprintf(stderr,
              "rank %d: rank 0 did not destroy its communicator "
              "in 30 s\n",
              rank);
      rc = 19;
    }
    braid_comm_destroy(sub[0]);
    int waiting = cuda_release_sweep();
    if (rank == 0 && waiting != 1) {
      fprintf(stderr,
              "rank 0: %d releases of device memory wait after destroying "
              "the communicator; want 1 (rank 1 still maps its memory)\n",
              waiting);
      rc = 14;
    }
    if (rank == 0)
      atomic_store(gpu_held_done, 1);
    if (braid_barrier(c, NULL) != BRAID_SUCCESS)
      return 15;
    if ((waiting = cuda_release_sweep()) != 0) {
      fprintf(stderr,
              "rank %d: %d releases of device memory wait after every rank "
              "destroyed the communicator\n",
              rank, waiting);
      rc = 16;
    }
  }
  if (rc == 0 && blocks[1] != blocks[0]) {
    fprintf(stderr,
            "rank %d: the communicator made after one was destroyed has %d "
            "kernel blocks, the destroyed one had %d\n",
            rank, blocks[1], blocks[0]);
    rc = 17;
  }
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < K && rc == 0; i++)
    if (h[i] != 0.0f)
      rc = 18;
  braid_comm_destroy(sub[1]);
  cudaFree(d);
  (void)n;
  return rc;
}

/* Destroying a communicator waits for no other communicator's call: rank
 * 0 destroys A while its call on c, on a CUDA stream, waits 2 s for rank
 * 1. Freeing A's memory (cudaFree, cudaFreeHost) waits for the whole
 * device, the stream held by that call included (and for ever where rank
 * 1 destroyed its A first behind a call of its own that waits for rank 0):
 * it waits instead until braid holds no stream (transports/cuda/
 * cuda_release.c, cuda_free_later), and is freed by the end. */
static int comm_destroy(void *c) { return braid_comm_destroy(c) != 0; }

static int destroy_while_held(braid_comm *c, int rank, int n) {
  enum { K = 64 };
  CK(cudaSetDevice(0));
  float *d[2] = {NULL, NULL};
  cudaStream_t s[2];
  braid_stream *bs[2];
  braid_comm *a = NULL;
  int rc = gpu_ones_on_two_streams(rank, K, d, s, bs);
  if (rc)
    return rc;
  /* both device sides first (setting one up waits for the peers) */
  if (braid_allreduce(d[1], d[1], K, BRAID_FLOAT32, BRAID_SUM, c, NULL) !=
          BRAID_SUCCESS ||
      braid_comm_split(c, 0, rank, &a) != BRAID_SUCCESS ||
      braid_allreduce(d[1], d[1], K, BRAID_FLOAT32, BRAID_SUM, a, NULL) !=
          BRAID_SUCCESS)
    return 12;
  rc = gpu_while_held(c, rank, n, d[0], K, bs[0], s[0], comm_destroy, a,
                      "braid_comm_destroy of another communicator");
  for (int j = 0; j < 2; j++) {
    braid_stream_destroy(bs[j]);
    bs[j] = NULL;
  }
  int left = cuda_release_sweep(), later = cuda_free_waiting();
  if (rc == 0 && later != 0) {
    fprintf(stderr,
            "rank %d: %d buffers still wait to be freed when no stream is "
            "held (%d releases wait for peers)\n",
            rank, later, left);
    rc = 19;
  }
  gpu_ones_free(d, s, bs);
  return rc;
}

Test(gpu_share, calls_on_more_streams_than_hardware_queues, .timeout = 120) {
  setenv("BRAID_TIMEOUT", "20", 1);
  gpu_run(many_streams, 2, "many streams");
}

Test(gpu_share, two_communicators_share_the_gpu, .timeout = 120) {
  /* the emulated GPU's room, small enough that halving it shows (a GPU's
   * own room is what the test expects there), unless the test's
   * environment sets one (emu_gpu_share_blocks: large enough that the
   * blocks wanted show) */
  setenv("CUDA_EMU_KERNEL_ROOM", "64", 0);
  gpu_run(two_comms, 2, "two communicators");
}

Test(gpu_share, a_rank_destroys_a_communicator_before_its_peer,
     .timeout = 120) {
  setenv("CUDA_EMU_KERNEL_ROOM", "64", 1);
  gpu_run(destroy_first, 2, "destroy first");
}

Test(gpu_share, destroying_a_communicator_waits_for_no_other, .timeout = 120) {
  gpu_run(destroy_while_held, 2, "destroy while another's call waits");
}
