/*
 * Data parallelism over real braid communicators (ranks are forked
 * processes): N ranks sharing a global batch end with the parameters of one
 * rank taking the whole batch, replicas are identical, and bucketing with
 * overlap matches one allreduce per tensor.
 *
 * Tolerance: after STEPS SGD steps the parameters of an N-rank run and the
 * one-rank run differ only by float summation order (sgemm over a shard vs
 * the whole batch, then the average); we require
 * |p_N - p_1| <= 1e-6 + 1e-4 |p_1| for every parameter (measured: at most
 * 6e-8 apart after 4 steps).
 */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test_fork.h"
#include "braid.h"
#include "dist.h"
#include "lenet.h"
#include "train.h"

#define STEPS 4
#define BATCH 48

/* A small learnable set: class c images are noisy pictures of band c. */
static void make_data(dataset *ds, size_t n, uint64_t seed) {
  memset(ds, 0, sizeof *ds);
  ds->n = n;
  ds->rows = ds->cols = 28;
  ds->nclasses = 10;
  ds->images = malloc(n * 784);
  ds->labels = malloc(n);
  rng r = {seed};
  for (size_t i = 0; i < n; i++) {
    int c = (int)(rng_next(&r) % 10);
    ds->labels[i] = (uint8_t)c;
    for (int p = 0; p < 784; p++) {
      int row = p / 28;
      int on = row / 3 == c;
      ds->images[i * 784 + p] =
          (uint8_t)(on ? 160 + rng_next(&r) % 96 : rng_next(&r) % 64);
    }
  }
}

typedef struct shared {
  int ok[8];
  int identical[8];
  uint64_t hash[8];
  char err[8][256];
  float params[]; /* rank 0's final parameters */
} shared;

static size_t nparams(void) {
  lenet m;
  cr_assert_eq(lenet_create(&m, 1), 0);
  size_t n = m.nparams;
  lenet_destroy(&m);
  return n;
}

/* Rank 0 makes the unique id (its rendezvous service runs in rank 0) and
 * hands it to the others through pipes, so the test process itself starts
 * no braid threads before forking. */
static int share_id(int rank, int n, int (*fds)[2], braid_unique_id *id,
                    char *err) {
  if (rank == 0) {
    braid_result r = braid_get_unique_id(id);
    if (r != BRAID_SUCCESS) {
      snprintf(err, 256, "braid_get_unique_id: %s", braid_result_string(r));
      return -1;
    }
    for (int k = 1; k < n; k++) {
      if (write(fds[k][1], id, sizeof *id) != (ssize_t)sizeof *id) {
        snprintf(err, 256, "cannot pass the id to rank %d", k);
        return -1;
      }
    }
    return 0;
  }
  struct pollfd p = {fds[rank][0], POLLIN, 0};
  size_t got = 0;
  while (got < sizeof *id) {
    if (poll(&p, 1, 30000) != 1) {
      snprintf(err, 256, "no unique id from rank 0 within 30 s");
      return -1;
    }
    ssize_t k = read(fds[rank][0], (char *)id + got, sizeof *id - got);
    if (k <= 0) {
      snprintf(err, 256, "rank 0 closed the id pipe");
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

static void rank_main(int rank, int n, int (*fds)[2], const train_opts *o,
                      shared *sh) {
  openblas_set_num_threads(1);
  braid_unique_id id;
  if (share_id(rank, n, fds, &id, sh->err[rank]) != 0)
    return;
  braid_comm *comm = NULL;
  braid_result r = braid_comm_init(&comm, n, &id, rank, NULL);
  if (r != BRAID_SUCCESS) {
    snprintf(sh->err[rank], 256, "braid_comm_init: %s (see braid's log)",
             braid_result_string(r));
    return;
  }
  dist d;
  if (dist_wrap_braid(&d, comm, sh->err[rank], 256) != 0)
    return;
  dataset train, test;
  make_data(&train, 480, 1);
  make_data(&test, 100, 2);
  lenet m;
  if (lenet_create(&m, (o->batch + n - 1) / n) != 0) {
    snprintf(sh->err[rank], 256, "out of memory");
    return;
  }
  train_result res;
  if (train_run(o, &d, &m, &train, &test, &res, sh->err[rank], 256) == 0) {
    sh->ok[rank] = 1;
    sh->identical[rank] = res.replicas_identical;
    sh->hash[rank] = res.hash;
    if (rank == 0)
      memcpy(sh->params, m.params, m.nparams * sizeof(float));
  }
  dist_close(&d);
  braid_comm_finalize(comm);
  braid_comm_destroy(comm);
  lenet_destroy(&m);
  dataset_free(&train);
  dataset_free(&test);
}

/* Runs the trainer on n forked ranks; returns rank 0's parameters. */
static float *run_ranks(int n, const train_opts *o) {
  const size_t np = nparams();
  shared *sh = mmap(NULL, sizeof(shared) + np * sizeof(float),
                    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(sh, MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  int fds[8][2];
  for (int r = 0; r < n; r++)
    cr_assert_eq(pipe(fds[r]), 0);
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    pids[r] = test_fork();
    cr_assert_geq(pids[r], 0);
    if (pids[r] == 0) {
      alarm(100);
      rank_main(r, n, fds, o, sh);
      _exit(0);
    }
  }
  for (int r = 0; r < n; r++) {
    close(fds[r][0]);
    close(fds[r][1]);
  }
  time_t start = time(NULL);
  int alive = n;
  while (alive > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      alive--;
      cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "rank process %d ended badly (status %d)", (int)p, st);
      continue;
    }
    if (time(NULL) - start > 90) {
      for (int r = 0; r < n; r++)
        kill(pids[r], SIGKILL);
      cr_assert_fail("%d-rank run did not finish in 90 s", n);
    }
    usleep(20000);
  }
  for (int r = 0; r < n; r++) {
    cr_assert(sh->ok[r], "rank %d of %d: %s", r, n, sh->err[r]);
    cr_expect(sh->identical[r], "rank %d of %d saw different replicas", r, n);
    cr_expect_eq(sh->hash[r], sh->hash[0], "rank %d hash differs", r);
  }
  float *p = malloc(np * sizeof(float));
  memcpy(p, sh->params, np * sizeof(float));
  munmap(sh, sizeof(shared) + np * sizeof(float));
  return p;
}

static void base_opts(train_opts *o) {
  train_opts_default(o);
  o->batch = BATCH;
  o->steps = STEPS;
  o->epochs = 1;
  o->lr = 0.2f;
  o->seed = 5;
  o->log = NULL;
}

static void compare(const char *what, const float *a, const float *ref,
                    double atol, double rtol) {
  size_t np = nparams(), bad = 0, first_bad = 0, moved = 0, differ = 0;
  double max_abs = 0;
  for (size_t i = 0; i < np; i++) {
    double d = fabs((double)a[i] - ref[i]);
    if (d > max_abs)
      max_abs = d;
    differ += d > 0;
    if (d > atol + rtol * fabs(ref[i]) && bad++ == 0)
      first_bad = i;
    moved += a[i] != 0.0f;
  }
  cr_log_info("%s: %zu of %zu parameters differ, max |difference| %.3g", what,
              differ, np, max_abs);
  cr_expect(moved > np / 2, "%s: parameters are mostly zero", what);
  cr_expect_eq(bad, 0u,
               "%s: %zu parameters out of tolerance, first %zu: %.9g vs %.9g",
               what, bad, first_bad, a[first_bad], ref[first_bad]);
}

Test(trainer_multirank, shards_match_one_rank, .timeout = 240) {
  train_opts o;
  base_opts(&o);
  float *p1 = run_ranks(1, &o);
  /* training moved the parameters away from the initial ones */
  lenet m0;
  cr_assert_eq(lenet_create(&m0, 1), 0);
  lenet_init_params(&m0, o.seed);
  cr_expect_neq(memcmp(m0.params, p1, m0.nparams * sizeof(float)), 0);
  lenet_destroy(&m0);

  float *p2 = run_ranks(2, &o);
  compare("2 ranks vs 1", p2, p1, 1e-6, 1e-4);
  /* 48 / 3: equal shards; 3 ranks with batch 50: unequal shards 16/17/17 */
  float *p3 = run_ranks(3, &o);
  compare("3 ranks vs 1", p3, p1, 1e-6, 1e-4);
  o.batch = 50;
  float *q1 = run_ranks(1, &o);
  float *q3 = run_ranks(3, &o);
  compare("3 ranks, uneven shards, vs 1", q3, q1, 1e-6, 1e-4);
  free(p1), free(p2), free(p3), free(q1), free(q3);
}

Test(trainer_multirank, buckets_match_per_tensor_allreduce, .timeout = 240) {
  train_opts o;
  base_opts(&o);
  o.bucket_mb = 0; /* one allreduce per tensor, after backward */
  o.overlap = 0;
  float *ref = run_ranks(2, &o);
  o.bucket_mb = 0.05; /* three buckets, overlapped */
  o.overlap = 1;
  float *b3 = run_ranks(2, &o);
  o.bucket_mb = 64; /* the whole model in one bucket */
  float *b1 = run_ranks(2, &o);
  /* averaging two values is one rounding whatever the bucket, so these are
   * expected to agree exactly; allow the last bit */
  compare("3 overlapped buckets vs per tensor", b3, ref, 0, 1e-6);
  compare("1 bucket vs per tensor", b1, ref, 0, 1e-6);
  free(ref), free(b3), free(b1);
}
