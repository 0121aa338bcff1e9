/*
 * tp_cuda's own code between real rank processes, on a stand-in device
 * layer made of host shared memory (cudev_fake.c): setup over the
 * bootstrap, the IPC handle exchange and mapping, slot offsets of several
 * peers and channels, fragments, recv_reduce, length mismatches, dead peers,
 * failed setups, and that nothing stays in /dev/shm. Runs without a GPU.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cuda_dev.h"
#include "ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/cuda/cuda_tp.h"
#include "transports/transport.h"

void fakedev_unlink_all(void);

#define FAIL(...)                                                              \
  do {                                                                         \
    snprintf(msg, msglen, __VA_ARGS__);                                        \
    return 1;                                                                  \
  } while (0)

#define NR 3
#define SLOT 4096

typedef struct job {
  boot *b;
  void *st;
  void *stream;
} job;

static int job_start(job *j, int rank, int nranks, const braid_unique_id *id,
                     const uint8_t *peers, char *msg, size_t msglen) {
  memset(j, 0, sizeof(*j));
  if (boot_init(id, rank, nranks, 20000, &j->b))
    FAIL("boot_init: %s", err_msg());
  tp_setup su;
  memset(&su, 0, sizeof(su));
  su.boot = j->b;
  su.rank = rank;
  su.nranks = nranks;
  su.nchannels = 2;
  su.nslots = 2;
  su.slot_bytes = SLOT;
  su.timeout_ms = 20000;
  uint8_t all[NR];
  for (int p = 0; p < nranks; p++)
    all[p] = p != rank;
  int rc = tp_cuda.setup(&su, peers ? peers : all, &j->st);
  if (rc)
    FAIL("setup: %d %s", rc, err_msg());
  if (cudev_stream_create(&j->stream))
    FAIL("stream");
  if (rank % 2) /* odd ranks copy on a stream of their own choosing */
    cuda_tp_set_stream(j->st, j->stream);
  return 0;
}

/* Ends the job; returns how many of this rank's releases of device memory
 * still wait once every rank has torn its transport down (none may: each
 * peer has let go of what it mapped, cuda_release.c). */
static int job_end(job *j) {
  boot_barrier(j->b);
  tp_cuda.teardown(j->st);
  cudev_stream_destroy(j->stream);
  boot_barrier(j->b);
  boot_close(j->b);
  return cuda_release_sweep();
}

static unsigned char pat(int from, int to, size_t i) {
  return (unsigned char)(from * 71 + to * 13 + i * 7 + 1);
}

static size_t len_of(int from, int to) {
  return (size_t)(2 * SLOT + 100 * from + to); /* 3 fragments */
}

/* Everyone sends to everyone on channel 1 at once, and checks what came. */
static int all_to_all(job *j, int rank, char *msg, size_t msglen) {
  static unsigned char out[NR][3 * SLOT], in[NR][3 * SLOT];
  uint64_t t[NR] = {0};
  int sent[NR] = {0}, sdone[NR] = {0}, rdone[NR] = {0}, left = 0;
  for (int p = 0; p < NR; p++) {
    if (p == rank)
      continue;
    for (size_t i = 0; i < len_of(rank, p); i++)
      out[p][i] = pat(rank, p, i);
    left += 3;
  }
  uint32_t bell = 0;
  for (long it = 0; it < 2000000 && left > 0; it++) {
    int moved = 0;
    for (int p = 0; p < NR; p++) {
      if (p == rank)
        continue;
      tp_conn *c = tp_cuda.conn(j->st, p, 1);
      int rc;
      if (!sent[p]) {
        rc = tp_cuda.isend(c, out[p], len_of(rank, p), &t[p]);
        if (rc == BRAID_SUCCESS)
          sent[p] = 1, left--, moved = 1;
        else if (rc != TP_AGAIN)
          FAIL("isend to %d: %s", p, err_msg());
      }
      if (sent[p] && !sdone[p]) {
        rc = tp_cuda.send_done(c, t[p]);
        if (rc == BRAID_SUCCESS)
          sdone[p] = 1, left--, moved = 1;
        else if (rc != TP_AGAIN)
          FAIL("send_done to %d: %s", p, err_msg());
      }
      if (!rdone[p]) {
        rc = tp_cuda.recv(c, in[p], len_of(p, rank));
        if (rc == BRAID_SUCCESS)
          rdone[p] = 1, left--, moved = 1;
        else if (rc != TP_AGAIN)
          FAIL("recv from %d: %s", p, err_msg());
      }
    }
    if (!moved) { /* the doorbell wakes this rank when a peer moves */
      tp_cuda.bell_wait(j->st, bell, 200);
      bell = tp_cuda.bell_read(j->st);
    }
  }
  if (left)
    FAIL("rank %d: all-to-all did not finish (%d steps left)", rank, left);
  for (int p = 0; p < NR; p++)
    for (size_t i = 0; p != rank && i < len_of(p, rank); i++)
      if (in[p][i] != pat(p, rank, i))
        FAIL("rank %d: byte %zu from rank %d is %u, want %u", rank, i, p,
             in[p][i], pat(p, rank, i));
  if (tp_cuda.flush(j->st) != BRAID_SUCCESS)
    FAIL("flush after everything was done");
  return 0;
}

/* A ring on channel 0: dst = mine + the previous rank's, 3 fragments. */
static int ring_reduce(job *j, int rank, char *msg, size_t msglen) {
  enum { N = 2500 };
  static float mine[N], got[N];
  for (int i = 0; i < N; i++)
    mine[i] = (float)(rank * 1000 + i);
  tp_conn *to = tp_cuda.conn(j->st, (rank + 1) % NR, 0);
  tp_conn *from = tp_cuda.conn(j->st, (rank + NR - 1) % NR, 0);
  tp_dev_reducer r = {.base = {NULL, sizeof(float)},
                      .dt = BRAID_FLOAT32,
                      .op = BRAID_SUM,
                      .dev_stream = rank == 0 ? j->stream : NULL};
  uint64_t t = 0;
  int sent = 0, sdone = 0, rdone = 0;
  for (long it = 0; it < 2000000 && !(sdone && rdone); it++) {
    int rc;
    if (!sent &&
        (rc = tp_cuda.isend_copy(to, mine, sizeof(mine), &t)) != TP_AGAIN) {
      if (rc)
        FAIL("isend_copy: %s", err_msg());
      sent = 1;
    }
    if (sent && !sdone && (rc = tp_cuda.send_done(to, t)) != TP_AGAIN) {
      if (rc)
        FAIL("send_done: %s", err_msg());
      sdone = 1;
    }
    if (!rdone && (rc = tp_cuda.recv_reduce(from, mine, got, sizeof(got),
                                            &r.base)) != TP_AGAIN) {
      if (rc)
        FAIL("recv_reduce: %s", err_msg());
      rdone = 1;
    }
  }
  if (!(sdone && rdone))
    FAIL("ring did not finish");
  int prev = (rank + NR - 1) % NR;
  for (int i = 0; i < N; i++)
    if (got[i] != (float)(rank * 1000 + i) + (float)(prev * 1000 + i))
      FAIL("rank %d element %d: %g", rank, i, (double)got[i]);
  return 0;
}

/* Rank 0 sends 100 bytes where rank 1 expects 200. */
static int mismatch(job *j, int rank, char *msg, size_t msglen) {
  static char buf[200];
  if (rank == 0) {
    tp_conn *c = tp_cuda.conn(j->st, 1, 0);
    uint64_t t;
    int rc = TP_AGAIN;
    while ((rc = tp_cuda.isend(c, buf, 100, &t)) == TP_AGAIN)
      ;
    while (rc == BRAID_SUCCESS && (rc = tp_cuda.send_done(c, t)) == TP_AGAIN)
      ;
    if (rc)
      FAIL("send: %s", err_msg());
  } else if (rank == 1) {
    tp_conn *c = tp_cuda.conn(j->st, 0, 0);
    int rc = TP_AGAIN;
    for (long it = 0; it < 20000000 && rc == TP_AGAIN; it++)
      rc = tp_cuda.recv(c, buf, 200);
    const char *e = err_msg();
    if (rc != BRAID_ERR_MISMATCH || !strstr(e, "rank 0") ||
        !strstr(e, "100 bytes") || !strstr(e, "expects 200"))
      FAIL("mismatch gave %d: %s", rc, e);
  }
  return 0;
}

static int rank_body(int rank, int nranks, const braid_unique_id *id, char *msg,
                     size_t msglen) {
  job j;
  if (job_start(&j, rank, nranks, id, NULL, msg, msglen))
    return 1;
  if (tp_cuda.conn(j.st, rank, 0) || tp_cuda.conn(j.st, NR, 0) ||
      tp_cuda.conn(j.st, (rank + 1) % NR, 2))
    FAIL("conn for self, a missing rank or channel");
  if (all_to_all(&j, rank, msg, msglen) || ring_reduce(&j, rank, msg, msglen))
    return 1;
  /* again: the counters go on from where they are */
  if (all_to_all(&j, rank, msg, msglen) || mismatch(&j, rank, msg, msglen))
    return 1;
  int left = job_end(&j);
  if (left != 0)
    FAIL("rank %d: %d releases of device memory still wait after every rank "
         "tore its transport down",
         rank, left);
  return 0;
}

static int rank_main(int rank, int nranks, const braid_unique_id *id, void *arg,
                     char *msg, size_t msglen) {
  (void)arg;
  int rc = rank_body(rank, nranks, id, msg, msglen);
  if (rc) /* a failed rank leaves its "device memory" behind otherwise */
    fakedev_unlink_all();
  return rc;
}

/* Entries of /dev/shm made by these processes. */
static int leftovers(const rank_proc *p, int n, char *name, size_t len) {
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d)) != NULL) {
    for (int i = 0; i < n; i++) {
      char a[64], b[64];
      snprintf(a, sizeof(a), "braid-fakedev-%d-", (int)p[i].pid);
      snprintf(b, sizeof(b), "-%d-%d-", (int)p[i].pid, i);
      if (strncmp(e->d_name, a, strlen(a)) == 0 ||
          (strncmp(e->d_name, "braid-cu-", 9) == 0 && strstr(e->d_name, b))) {
        snprintf(name, len, "%s", e->d_name);
        found++;
      }
    }
  }
  if (d)
    closedir(d);
  return found;
}

Test(cuda_ipc_fake, three_ranks_exchange_reduce_and_clean_up) {
  braid_unique_id id;
  char name[256] = "";
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[NR];
  cr_assert_eq(run_ranks(NR, &id, rank_main, NULL, 60000, p), 0, "%s | %s | %s",
               p[0].msg, p[1].msg, p[2].msg);
  cr_assert_eq(leftovers(p, NR, name, sizeof(name)), 0, "/dev/shm/%s stayed",
               name);
}

static int rank_die(int rank, int nranks, const braid_unique_id *id, void *arg,
                    char *msg, size_t msglen) {
  (void)arg;
  job j;
  if (job_start(&j, rank, nranks, id, NULL, msg, msglen))
    return 1;
  if (rank == 1) {
    fakedev_unlink_all();
    _exit(0);
  }
  for (int i = 0; i < 5000; i++) {
    int dead = -1;
    int rc = tp_cuda.check_peers(j.st, &dead);
    if (rc == BRAID_ERR_REMOTE) {
      const char *e = err_msg();
      if (dead != 1 || !strstr(e, "rank 1"))
        FAIL("dead rank %d: %s", dead, e);
      tp_cuda.teardown(j.st);
      cudev_stream_destroy(j.stream);
      boot_close(j.b);
      return 0;
    }
    if (rc)
      FAIL("check_peers: %d", rc);
    usleep(1000);
  }
  FAIL("rank 1's exit was never noticed");
}

Test(cuda_ipc_fake, dead_peer_is_named) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_die, NULL, 60000, p), 0, "%s | %s",
               p[0].msg, p[1].msg);
}

/* Rank 0 lists rank 1 as a peer, rank 1 lists nobody: both fail, neither
 * hangs. */
static int rank_asym(int rank, int nranks, const braid_unique_id *id, void *arg,
                     char *msg, size_t msglen) {
  (void)arg;
  uint8_t peers[2] = {0, (uint8_t)(rank == 0)};
  job j;
  char m[512] = "";
  if (job_start(&j, rank, nranks, id, peers, m, sizeof(m)) == 0)
    FAIL("rank %d: setup succeeded", rank);
  if (!strstr(m, "setup"))
    FAIL("rank %d: unexpected failure: %s", rank, m);
  boot_close(j.b);
  return 0;
}

Test(cuda_ipc_fake, one_sided_peers_fail_everywhere) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  cr_assert_eq(run_ranks(2, &id, rank_asym, NULL, 60000, p), 0, "%s | %s",
               p[0].msg, p[1].msg);
}
