/*
 * What several transports share: the message a broken state says again,
 * whether a peer process still runs, the job token and pid namespace that name
 * and guard shared-memory segments, the creation and mapping of those segments,
 * the rounds of a setup in which every rank's status goes round, and the
 * first checks of a network transport's setup (shm, cuda, ofi, ibverbs,
 * tcp). Nothing here knows a transport's layout or protocol.
 */
#ifndef BRAID_TRANSPORTS_COMMON_H
#define BRAID_TRANSPORTS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "src/log.h"
#include "transports/transport.h"

/* A state's sticky message (char why[TP_WHY]): the text of the failure
 * that broke a connection, which every later call that fails for that
 * reason records again. A transport fails with ERR (src/log.h) where it
 * finds the failure, and keeps the message when a later call may need it:
 *     return tp_keep(s->why, ERR(BRAID_ERR_REMOTE, "tcp: rank %d ...", p));
 * tp_keep copies the calling thread's message into why and returns r;
 * tp_repeat records why again for the calling thread (ERR) and returns r.
 * Text found on another thread (a heartbeat thread) reaches the caller's
 * thread the same way: kept in the state, recorded by the call that reports
 * it. */
#define TP_WHY 512
void tp_keep_msg(char *why);
/* Inline, so that the compiler and the static analyzer see r come back. */
static inline int tp_keep(char *why, int r) {
  tp_keep_msg(why);
  return r;
}
static inline int tp_repeat(const char *why, int r) {
  return ERR((braid_result)r, "%s", why);
}

/* What happened to process pid (of this pid namespace). */
#define TP_PID_RUNNING 0 /* runs, sleeps or is stopped */
#define TP_PID_KILLED 1  /* zombie killed by a signal */
#define TP_PID_EXITED 2  /* zombie that exited */
#define TP_PID_GONE 3    /* no such process (reaped) */
int tp_pid_state(int pid);
/* 1 when pid no longer runs (a zombie or reaped). */
int tp_pid_gone(int pid);
/* A descriptor that turns readable when process pid exits (a pidfd), or -1
 * with errno set (ESRCH: pid is gone already; ENOSYS: an older kernel). */
int tp_pidfd_open(int pid);
/* 1 when the peer process no longer runs: its pidfd (when >= 0) is
 * readable, else tp_pid_gone(pid). Does not wait. */
int tp_peer_exited(int pidfd, int pid);
/* This process's pid namespace (0 when unknown): a pid is meaningful to a
 * peer only when both report the same. */
uint64_t tp_pidns_id(void);
/* 48 bits of the job's secret: segments of one job share it in their names
 * (0 without a bootstrap). */
uint64_t tp_job_token(struct tp_bootstrap *b);

/* A shared-memory segment to create in /dev/shm. */
typedef struct tp_seg_req {
  const char *who;    /* starts the error text: "shm", "cuda" */
  const char *prefix; /* name: /<prefix>-<token>-<pid>-<rank>-<n> */
  uint64_t token;     /* tp_job_token */
  int rank;
  uint64_t bytes;
  const char *detail; /* after "bytes in /dev/shm" when it cannot be sized */
  const char *hint;   /* after the reason when /dev/shm is full */
} tp_seg_req;
/* Creates the segment under a fresh name (name[namelen], "" on failure),
 * sizes it, reserves its pages and maps it (*map). Returns BRAID_SUCCESS,
 * or BRAID_ERR_NOMEM (/dev/shm full) / BRAID_ERR_SYSTEM with the reason
 * (ERR); on failure nothing is left in /dev/shm. */
int tp_seg_create(const tp_seg_req *r, char *name, size_t namelen, void **map);
/* Maps size bytes of the existing segment name (*map). Returns 0 or the
 * errno of what failed (EINVAL: the segment is smaller than size). */
int tp_seg_map(const char *name, uint64_t size, void **map);

/* One round of a setup in which every rank's record (len bytes, holding at
 * status_off an int32_t that is 0 when that rank is fine) goes round into
 * all[nranks]. rc is this rank's result so far (its message already
 * recorded). *boot_rc gets the exchange's own result. Returns that when the
 * exchange failed (the message: this rank's own when rc is a failure, else
 * "<who>: bootstrap exchange failed: <why>"), else rc when not 0, else
 * BRAID_ERR_REMOTE with "<who>: rank R could not <what> (see its log)" for
 * the first rank whose status is not 0, else BRAID_SUCCESS. */
int tp_setup_round(tp_setup *su, int rc, const void *mine, void *all,
                   size_t len, size_t status_off, const char *who,
                   const char *what, int *boot_rc);

/* The first checks of a network transport's setup: a bootstrap, the rank in
 * 0..nranks-1, at least one channel and one slot, and when max_slot_bytes
 * is not 0 a slot size in 1..max_slot_bytes; else BRAID_ERR_INVALID_ARG
 * with "<who>: bad setup (...)". */
int tp_setup_check(tp_setup *su, const char *who, size_t max_slot_bytes);

/* What a network transport (ofi, ibverbs) keeps of its setup. */
typedef struct tp_net {
  struct tp_bootstrap *boot;
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes;
  uint8_t *used; /* nranks: 1 for each rank this one connects to */
} tp_net;
/* Fills n from su, and n->used (calloc'ed; tp_net_fini frees it) with 1
 * where peers[p] is set and p is not this rank. Returns how many ranks
 * that is, or -1 without memory. */
int tp_net_init(tp_net *n, const tp_setup *su, const uint8_t *peers);
void tp_net_fini(tp_net *n);

#endif
