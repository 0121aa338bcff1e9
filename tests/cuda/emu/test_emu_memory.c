/*
 * The emulated GPU's device memory keeps CUDA's rules that the device-path
 * tests rely on it to enforce: host code that touches a device address
 * faults, as on a GPU, while copies reach the memory; a kernel handed
 * pageable host memory aborts (on a GPU it faults); and cudaFree of
 * memory that another process still has open through an IPC handle (which
 * CUDA leaves undefined) aborts, saying so, but not once that process has
 * closed the handle.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../test_fork.h"
#include "device/cuda_dev.h"

/* The signal that ended fn run in a child (0: it exited). */
static int dies_of(void (*fn)(void)) {
  pid_t pid = test_fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    fn();
    _exit(0);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void touch(void) {
  char *d = NULL;
  if (cudaMalloc((void **)&d, 64) == cudaSuccess)
    fprintf(stderr, "%c\n", ((volatile char *)d)[0]); /* faults here */
}

Test(emu_memory, host_code_touching_device_memory_faults) {
  char *d = NULL, h[4] = "abc", back[4] = "";
  cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
  cr_assert_eq(cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice), cudaSuccess);
  cr_assert_eq(cudaMemcpy(back, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cr_assert_str_eq(back, "abc", "a copy does reach device memory");
  cr_assert_eq(cudaFree(d), cudaSuccess);
  cr_assert_eq(dies_of(touch), SIGSEGV);
}

/* A child opens d's handle, says so, and closes it when told (or at once
 * when `close_first`); the parent then frees d. */
static void free_while_open(int close_first) {
  void *d = NULL;
  cudaIpcMemHandle_t h;
  cr_assert_eq(cudaMalloc(&d, 4096), cudaSuccess);
  cr_assert_eq(cudaIpcGetMemHandle(&h, d), cudaSuccess);
  int up[2], down[2];
  cr_assert(pipe(up) == 0 && pipe(down) == 0);
  pid_t pid = test_fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    void *m = NULL;
    char c = 0;
    close(up[0]);
    close(down[1]); /* a parent that died ends the read below */
    if (cudaIpcOpenMemHandle(&m, h, cudaIpcMemLazyEnablePeerAccess) !=
        cudaSuccess)
      _exit(1);
    if (close_first && cudaIpcCloseMemHandle(m) != cudaSuccess)
      _exit(2);
    if (write(up[1], "o", 1) != 1 || read(down[0], &c, 1) != 1)
      _exit(3);
    _exit(close_first || cudaIpcCloseMemHandle(m) == cudaSuccess ? 0 : 4);
  }
  char c = 0;
  cr_assert_eq(read(up[0], &c, 1), 1, "the child could not open the handle");
  cudaError_t e = cudaFree(d); /* aborts while the child has it open */
  cr_assert(write(down[1], "x", 1) == 1);
  int st = 0;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  cr_assert_eq(e, cudaSuccess);
}

static void free_open(void) { free_while_open(0); }

Test(emu_memory, freeing_memory_another_process_maps_aborts) {
  cr_assert_eq(dies_of(free_open), SIGABRT);
}

Test(emu_memory, freeing_memory_another_process_closed_is_fine) {
  free_while_open(1);
}

static void reduce_pageable(void) {
  static float host[4];
  float *d = NULL;
  void *stream = NULL;
  if (cudaMalloc((void **)&d, sizeof host) == cudaSuccess &&
      cudev_stream_create(&stream) == BRAID_SUCCESS)
    (void)cudev_reduce(d, d, host, 4, BRAID_FLOAT32, BRAID_SUM, stream);
}

Test(emu_memory, a_kernel_on_pageable_host_memory_aborts) {
  float *d = NULL, *pinned = NULL;
  void *stream = NULL;
  cr_assert_eq(cudaMalloc((void **)&d, 16), cudaSuccess);
  cr_assert_eq(cudaMallocHost((void **)&pinned, 16), cudaSuccess);
  cr_assert_eq(cudev_stream_create(&stream), BRAID_SUCCESS);
  cr_assert_eq(cudaMemset(d, 0, 16), cudaSuccess);
  cr_assert_eq(cudev_reduce(d, d, pinned, 4, BRAID_FLOAT32, BRAID_SUM, stream),
               BRAID_SUCCESS, "pinned memory is fine");
  cr_assert_eq(cudev_stream_sync(stream), BRAID_SUCCESS);
  cr_assert_eq(dies_of(reduce_pageable), SIGABRT);
}
