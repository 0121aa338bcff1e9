/*
 * Memory ceiling for perf/compare: a copy kernel (memcpy) and an add kernel
 * (c[i] = a[i] + b[i], float32), per buffer size, in P processes running at
 * once (a process-shared barrier starts every size together).
 *
 *   membw <minbytes> <maxbytes> [processes]
 *
 * Prints, per size: size_bytes copy_us copy_GBps add_us add_GBps, where
 * GB/s is the buffer size divided by the time of one kernel in one process
 * (each process's own rate; with P > 1 the slowest process is reported).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

typedef struct shared {
  pthread_barrier_t bar;
  double copy_t[64], add_t[64];
} shared;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void add_kernel(float *restrict c, const float *restrict a,
                       const float *restrict b, size_t n) {
  for (size_t i = 0; i < n; i++)
    c[i] = a[i] + b[i];
}

static int iters_for(size_t bytes) {
  /* About 512 MiB of traffic per size, between 3 and 200000 calls. */
  size_t it = bytes ? ((size_t)512 << 20) / bytes : 200000;
  if (it > 200000)
    it = 200000;
  if (it < 3)
    it = 3;
  return (int)it;
}

static void worker(shared *sh, int id, size_t minb, size_t maxb, int nproc) {
  size_t cap = (maxb < 64 ? 64 : maxb + 63) / 64 * 64;
  float *a = aligned_alloc(64, cap), *b = aligned_alloc(64, cap),
        *c = aligned_alloc(64, cap);
  if (!a || !b || !c) {
    fprintf(stderr, "membw: out of memory\n");
    _exit(3);
  }
  for (size_t i = 0; i < cap / 4; i++) {
    a[i] = (float)(i & 1023);
    b[i] = 1.0f;
    c[i] = 0.0f;
  }
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? bytes * 2 : 1) {
    int it = iters_for(bytes);
    memcpy(c, a, bytes); /* warm */
    pthread_barrier_wait(&sh->bar);
    double t0 = now();
    for (int i = 0; i < it; i++) {
      memcpy(c, a, bytes);
      __asm__ volatile("" ::: "memory");
    }
    sh->copy_t[id] = (now() - t0) / it;
    pthread_barrier_wait(&sh->bar);
    t0 = now();
    for (int i = 0; i < it; i++) {
      add_kernel(c, a, b, bytes / 4);
      __asm__ volatile("" ::: "memory");
    }
    sh->add_t[id] = (now() - t0) / it;
    pthread_barrier_wait(&sh->bar);
    if (id == 0) {
      double ct = 0, at = 0;
      for (int p = 0; p < nproc; p++) {
        ct = sh->copy_t[p] > ct ? sh->copy_t[p] : ct;
        at = sh->add_t[p] > at ? sh->add_t[p] : at;
      }
      printf("%zu %.3f %.6g %.3f %.6g\n", bytes, ct * 1e6,
             ct > 0 ? (double)bytes / 1e9 / ct : 0, at * 1e6,
             at > 0 ? (double)bytes / 1e9 / at : 0);
      fflush(stdout);
    }
    pthread_barrier_wait(&sh->bar);
    if (bytes >= maxb)
      break;
  }
  free(a);
  free(b);
  free(c);
}

int main(int argc, char **argv) {
  size_t minb, maxb;
  int nproc = argc > 3 ? atoi(argv[3]) : 1;
  if (argc < 3 || h_size(argv[1], &minb) || h_size(argv[2], &maxb) ||
      minb > maxb || nproc < 1 || nproc > 64) {
    fprintf(stderr, "usage: %s <minbytes> <maxbytes> [processes 1..64]\n",
            argv[0]);
    return 2;
  }
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED)
    return 3;
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->bar, &ba, (unsigned)nproc);
  printf("# memory ceiling, %d concurrent process(es)\n", nproc);
  printf("# size_bytes copy_us copy_GBps add_us add_GBps\n");
  fflush(stdout);
  for (int p = 1; p < nproc; p++) {
    pid_t pid = fork();
    if (pid == 0) {
      worker(sh, p, minb, maxb, nproc);
      _exit(0);
    }
  }
  worker(sh, 0, minb, maxb, nproc);
  int rc = 0;
  for (int p = 1; p < nproc; p++) {
    int st;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
      rc = 3;
  }
  return rc;
}
