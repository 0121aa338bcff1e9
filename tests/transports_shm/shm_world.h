/*
 * Rank processes for the shared-memory transport's tests: the test process
 * makes a unique id, forks the ranks (run_ranks), waits for them with a
 * deadline (killing stragglers) and checks that no segment is left in
 * /dev/shm. Each rank reports a failure on stderr (CHK) and by its exit
 * status.
 */
#ifndef BRAID_TESTS_TRANSPORTS_SHM_WORLD_H
#define BRAID_TESTS_TRANSPORTS_SHM_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "src/bootstrap.h"
#include "transports/shm.h"

#define SKIP_CODE 77
#define MAXR 8

typedef struct world {
  boot *b;
  int rank, n;
} world;

int64_t now_ms(void);

#define CHK(cond, ...)                                                         \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d, %s:%d: ", w->rank, __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      return 1;                                                                \
    }                                                                          \
  } while (0)

/* Runs expr until it stops answering TP_AGAIN, sleeping on the doorbell in
 * between; bounded by 10 s and by the peers being alive. */
#define WAIT(st, expr)                                                         \
  ({                                                                           \
    int r_;                                                                    \
    int64_t dl_ = now_ms() + 10000;                                            \
    for (;;) {                                                                 \
      uint32_t seen_ = tp_shm.bell_read(st);                                   \
      r_ = (expr);                                                             \
      if (r_ != TP_AGAIN)                                                      \
        break;                                                                 \
      int dead_ = -1;                                                          \
      if (tp_shm.check_peers(st, &dead_) != BRAID_SUCCESS) {                   \
        r_ = BRAID_ERR_REMOTE;                                                 \
        break;                                                                 \
      }                                                                        \
      if (now_ms() > dl_) {                                                    \
        r_ = BRAID_ERR_TIMEOUT;                                                \
        break;                                                                 \
      }                                                                        \
      tp_shm.bell_wait(st, seen_, 20000);                                      \
    }                                                                          \
    r_;                                                                        \
  })

/* Connects all ranks to each other (peers == NULL) or to the marked ones. */
int shm_up(world *w, void **st, int nch, int nslots, size_t slot_bytes,
           const uint8_t *peers);
/* Fills p with n bytes of a sequence that seed picks. */
void fill(uint8_t *p, size_t n, unsigned seed);
/* Runs fn on n forked ranks; killed_rank (or -1) must die of SIGKILL.
 * Asserts (Criterion) that every other rank succeeded; returns 1 when a
 * rank skipped (exit SKIP_CODE). */
int run_ranks(int n, int (*fn)(world *), int killed_rank);

#endif
