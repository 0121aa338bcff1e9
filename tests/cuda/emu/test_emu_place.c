/*
 * A rank's GPU is placed in the communicator's system graph by its PCI bus
 * id (src/comm_dev.c): on the emulated GPU, given the bus id of one of a
 * machine model's GPUs and that model as BRAID_TOPO_FILE, every rank's
 * device state names that GPU's vertex; given a bus id the machine lacks,
 * none (-1), and the calls still run. A first call on a CUDA stream leaves
 * the calling thread's current device as it was. Channels routed "host"
 * reach a same-host peer through pinned host memory, not CUDA IPC. Ranks
 * sharing one GPU with no MPS control daemon at CUDA_MPS_PIPE_DIRECTORY
 * are warned once (by the lowest); with its pipe there, not.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/sched_file.h"
#include "src/comm.h"
#include "src/comm_dev.h"
#include "src/log.h"
#include "test_gpu_ranks.h"
#include "tests/collectives/gen_try.h"
#include "topology/topo.h"
#include "transports/cuda/cuda_tp.h"

#define MACHINE BRAID_MACHINES_DIR "/dgx-h100.topo"

static int want_vertex; /* set before the ranks fork */

static int placed(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL, h[64];
  if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess)
    return 50;
  for (int i = 0; i < 64; i++)
    h[i] = (float)(rank + i);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  braid_result r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 10;
  }
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  for (int i = 0; i < 64; i++)
    if (h[i] != (float)(2 * i + 1)) {
      fprintf(stderr, "rank %d: element %d is %g\n", rank, i, (double)h[i]);
      return 20;
    }
  if (c->dev == NULL || c->dev->gpu_vertex != want_vertex) {
    fprintf(stderr, "rank %d: GPU placed at vertex %d, expected %d\n", rank,
            c->dev ? c->dev->gpu_vertex : -2, want_vertex);
    return 30;
  }
  return 0;
}

static void run_with(const char *busid, int vertex) {
  GPU_REQUIRE();
  setenv("BRAID_TOPO_FILE", MACHINE, 1);
  setenv("CUDA_EMU_BUSID", busid, 1);
  want_vertex = vertex;
  int st[2];
  gpu_run_ranks(2, placed, 60, st);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0, "bus id %s: rank %d exit %d (see stderr)", busid, r,
                 st[r]);
}

Test(emu_place, gpu_found_by_bus_id, .timeout = 120) {
  topo_graph *g = NULL;
  cr_assert_eq(topo_load(MACHINE, TOPO_FMT_AUTO, &g), BRAID_SUCCESS, "%s",
               err_msg());
  int gpu3 = topo_nth(g, TOPO_GPU, 3);
  cr_assert(gpu3 >= 0 && g->v[gpu3].busid[0], "the model has a GPU3 bus id");
  char busid[32];
  snprintf(busid, sizeof busid, "%s", g->v[gpu3].busid);
  topo_graph_free(g);
  run_with(busid, gpu3);
}

Test(emu_place, unknown_bus_id_is_no_vertex, .timeout = 120) {
  run_with("0000:fe:1f.7", -1);
}

/* The first device call on a CUDA stream sets the device side up in the
 * caller's thread (src/enqueue.c), and a blocking call runs there: the
 * caller's current device must be left as it was. Buffers on device 1,
 * the thread's current device 0. */
static int keeps_device(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL, h[64];
  cudaStream_t s = NULL;
  braid_stream *bs = NULL;
  if (cudaSetDevice(1) != cudaSuccess ||
      cudaMalloc((void **)&d, sizeof h) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      braid_stream_from_cuda((void *)s, &bs) != BRAID_SUCCESS)
    return 50;
  for (int i = 0; i < 64; i++)
    h[i] = (float)(rank + i);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  cudaSetDevice(0);
  braid_result r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, bs);
  int now = -1;
  cudaGetDevice(&now);
  if (r == BRAID_SUCCESS)
    r = braid_stream_synchronize(bs);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 10;
  }
  if (now != 0) {
    fprintf(stderr, "rank %d: current device %d after the call, was 0\n", rank,
            now);
    return 40;
  }
  /* and a blocking call, which runs in this thread */
  r = braid_allreduce(d, d, 64, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  cudaGetDevice(&now);
  if (r != BRAID_SUCCESS || now != 0) {
    fprintf(stderr, "rank %d: blocking allreduce: %s, current device %d\n",
            rank, braid_result_string(r), now);
    return 41;
  }
  cudaStreamSynchronize(s);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 64; i++)
    if (h[i] != (float)(4 * i + 2)) {
      fprintf(stderr, "rank %d: element %d is %g\n", rank, i, (double)h[i]);
      return 20;
    }
  braid_stream_destroy(bs);
  cudaStreamDestroy(s);
  cudaFree(d);
  return 0;
}

Test(emu_place, stream_call_keeps_the_callers_device, .timeout = 120) {
  GPU_REQUIRE();
  setenv("CUDA_EMU_BUSID", "0000:e1:00.0,0000:e2:00.0", 1);
  int st[2];
  gpu_run_ranks(2, keeps_device, 60, st);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0,
                 "rank %d exit %d (40, 41: the current device changed; "
                 "see stderr)",
                 r, st[r]);
}

/* Route hints at run time: a 2-rank ring allreduce from BRAID_SCHEDULE_FILE
 * whose channel 1 is routed "host" runs exactly, and that channel reached
 * the peer through pinned host memory (staged over shm); with every channel
 * routed "any", nothing goes that way. */
static int want_host_routed;

static int routed(braid_comm *c, int rank, int n) {
  enum { N = 300007 }; /* ~1.2 MB: several slices on both channels */
  float *d = NULL, *h = malloc(sizeof *h * N);
  if (h == NULL || cudaMalloc((void **)&d, sizeof *h * N) != cudaSuccess)
    return 50;
  for (int i = 0; i < N; i++)
    h[i] = (float)(rank + i % 1000);
  cudaMemcpy(d, h, sizeof *h * N, cudaMemcpyHostToDevice);
  braid_result r = braid_allreduce(d, d, N, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s (%s)\n", rank,
            braid_result_string(r), braid_comm_last_error(c));
    return 10;
  }
  cudaMemcpy(h, d, sizeof *h * N, cudaMemcpyDeviceToHost);
  cudaFree(d);
  for (int i = 0; i < N; i++)
    if (h[i] != (float)(2 * (i % 1000) + 1)) {
      fprintf(stderr, "rank %d: element %d is %g\n", rank, i, (double)h[i]);
      free(h);
      return 20;
    }
  free(h);
  if (comm_dev_ops(c, 1 - rank, SCHED_ROUTE_ANY) != &tp_cuda ||
      comm_dev_ops(c, 1 - rank, SCHED_ROUTE_HOST) != &tp_staged) {
    fprintf(stderr, "rank %d: peer's transports: any %s, host %s\n", rank,
            comm_dev_ops(c, 1 - rank, SCHED_ROUTE_ANY)->name,
            comm_dev_ops(c, 1 - rank, SCHED_ROUTE_HOST)->name);
    return 30;
  }
  if (comm_dev_host_routed(c, 1 - rank) != want_host_routed) {
    fprintf(stderr, "rank %d: host-routed to the peer: %d, expected %d\n", rank,
            comm_dev_host_routed(c, 1 - rank), want_host_routed);
    return 40;
  }
  (void)n;
  return 0;
}

static void run_routed(int route1, int expect) {
  GPU_REQUIRE();
  gen_params gp = {.coll = SCHED_ALLREDUCE, .nranks = 2, .nchannels = 2};
  sched *s = gen_try(gen_find("ring")->fn, &gp);
  cr_assert_not_null(s);
  s->route[1] = (uint8_t)route1;
  char path[] = "/tmp/braid-route-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  cr_assert_eq(sched_file_write(s, f), 0);
  fclose(f);
  sched_free(s);
  setenv("BRAID_SCHEDULE_FILE", path, 1);
  setenv("CUDA_EMU_BUSID", "0000:e1:00.0,0000:e2:00.0", 1);
  setenv("BRAID_TRANSPORT", "shm", 1);
  want_host_routed = expect;
  int st[2];
  gpu_run_ranks(2, routed, 60, st);
  unlink(path);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(st[r], 0,
                 "route %s: rank %d exit %d (20: wrong data, 30: transports, "
                 "40: host path use; see stderr)",
                 sched_route_name((sched_route)route1), r, st[r]);
}

Test(emu_place, host_routed_channel_goes_through_host_memory, .timeout = 120) {
  run_routed(SCHED_ROUTE_HOST, 1);
}

Test(emu_place, unrouted_channels_stay_on_cuda_ipc, .timeout = 120) {
  run_routed(SCHED_ROUTE_ANY, 0);
}

/* ---- several ranks on one GPU, with and without MPS ---- */

static int reduced(braid_comm *c, int rank, int n) {
  (void)n;
  float *d = NULL, h = (float)rank;
  if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess)
    return 50;
  cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice);
  braid_result r = braid_allreduce(d, d, 1, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  cudaFree(d);
  return r == BRAID_SUCCESS ? 0 : 10;
}

/* Runs 3 ranks on the one emulated GPU, logging to files in a new folder;
 * returns how many lines of all their logs name the missing MPS daemon. */
static int mps_warnings(int with_pipe) {
  GPU_REQUIRE();
  char dir[] = "/tmp/braid-mps-XXXXXX", path[96];
  cr_assert(mkdtemp(dir) != NULL);
  if (with_pipe) {
    snprintf(path, sizeof path, "%s/control", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL);
    fclose(f);
  }
  setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  snprintf(path, sizeof path, "%s/log-%%p", dir);
  setenv("BRAID_DEBUG_FILE", path, 1);
  int st[3];
  gpu_run_ranks(3, reduced, 60, st);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(st[r], 0, "rank %d exit %d", r, st[r]);
  int found = 0;
  char cmd[160], line[1024];
  snprintf(cmd, sizeof cmd, "cat %s/log-* 2>/dev/null; rm -rf %s", dir, dir);
  FILE *p = popen(cmd, "r");
  cr_assert(p != NULL);
  while (fgets(line, sizeof line, p) != NULL)
    found += strstr(line, "no MPS control daemon was found") != NULL;
  pclose(p);
  return found;
}

Test(emu_place, shared_gpu_without_mps_warns_once, .timeout = 120) {
  cr_expect_eq(mps_warnings(0), 1, "one warning among 3 ranks on one GPU");
}

Test(emu_place, shared_gpu_under_mps_does_not_warn, .timeout = 120) {
  cr_expect_eq(mps_warnings(1), 0, "no warning with the MPS pipe present");
}
