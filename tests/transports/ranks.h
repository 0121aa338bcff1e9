/*
 * Test harness: real rank processes made with fork. Each child runs a rank
 * function, writes a message into a pipe and exits with its return code; the
 * parent waits with a deadline and kills stragglers.
 */
#ifndef BRAID_TESTS_TRANSPORTS_RANKS_H
#define BRAID_TESTS_TRANSPORTS_RANKS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "../free_port.h"
#include "braid.h"

#define RANK_TIMED_OUT (-1000) /* status of a rank killed at the deadline */

/* Returns 0 on success, another code (< 128) on failure; msg explains. */
typedef int (*rank_fn)(int rank, int nranks, const braid_unique_id *id,
                       void *arg, char *msg, size_t msglen);

typedef struct rank_proc {
  pid_t pid;
  int fd;     /* read end of the message pipe */
  int status; /* exit code, -signal, or RANK_TIMED_OUT */
  int done;
  char msg[512];
} rank_proc;

void spawn_rank(rank_proc *p, int rank, int nranks, const braid_unique_id *id,
                rank_fn fn, void *arg);
/* Waits for every process of p[0..n) until timeout_ms; kills the rest. */
void wait_ranks(rank_proc *p, int n, int timeout_ms);
/* Waits until any of p[0..n) exits; returns its index or -1 at timeout. */
int wait_any(rank_proc *p, int n, int timeout_ms);
/* spawn + wait for nranks ranks; returns the number of ranks that failed and
 * prints each failure. */
int run_ranks(int nranks, const braid_unique_id *id, rank_fn fn, void *arg,
              int timeout_ms, rank_proc *out);

/* Connects to addr and, when secret is not NULL, sends at once a greeting
 * answer (kind 1) with this magic and an HMAC keyed by these 16 bytes over a
 * challenge it has not read (then zero bytes); returns the socket or -1. */
int rogue_connect(const struct sockaddr_storage *addr, uint32_t magic,
                  const char *secret);
/* Whether the other end closed fd (EOF or reset) within timeout_ms; what it
 * sends before is read and discarded. */
int closed_by_peer(int fd, int timeout_ms);
/* The IPv4 listening socket address of process pid that this process does
 * not share, from /proc: 0 found, -1 not (yet). */
int find_listener(pid_t pid, struct sockaddr_storage *out);

#endif
