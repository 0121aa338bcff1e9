/*
 * The flight recorder (docs/TRACE.md): the last BRAID_FLIGHT_RECORDER calls
 * of each communicator, with their state, written to a file per rank on a
 * failure, on abort with calls unfinished, on SIGUSR1 and by
 * braid_comm_flight_dump. `braid-trace analyze` reads the files.
 */
#ifndef BRAID_SRC_FLIGHT_H
#define BRAID_SRC_FLIGHT_H

#include <stdint.h>

#include "src/comm.h"

/* Makes the communicator's recorder (none when BRAID_FLIGHT_RECORDER=0):
 * its id for dumps (from c->boot; called once per communicator, in the
 * order its ranks make them), its records written once so that calls find
 * their pages mapped; registers it for SIGUSR1 and, once per process, sets
 * up the handler and its thread (when SIGUSR1 has its default action);
 * flight_free frees and unregisters it. Called before the communicator's
 * settling rounds, which flight_forget then erases: made after them, the
 * allocation and the thread's start ran on one rank while the other was in
 * its first call (8 B allreduce over shm, 2 ranks: up to 260 us instead of
 * 3 to 6). */
braid_result flight_new(braid_comm *c);
void flight_forget(braid_comm *c);
void flight_free(braid_comm *c);

/* The life of a call: issued (its op gets its record), running, waiting in
 * a wait that lasted (for `on`, at channel/step), finished with r. Each is
 * a few stores; a record that newer calls reused is left alone. */
void flight_queued(braid_comm *c, exec_op *op);
/* An alltoallv: one record (kind alltoallv, the call number its sends and
 * receives carry, count the elements this rank sends) for the group of
 * sends and receives it runs as, which all take it. */
void flight_queued_alltoallv(braid_comm *c, exec_op *ops, int nops,
                             uint64_t sent, braid_dtype dt);
void flight_started(braid_comm *c, const exec_op *op);
void flight_waiting(braid_comm *c, const exec_op *op, int on, int channel,
                    int step, int prim);
void flight_done(braid_comm *c, const exec_op *op, braid_result r);
/* A call the small-call path finished at once (src/exec_fast.c): started
 * and done at the time it was queued (one clock reading for the three). */
void flight_fast(braid_comm *c, const exec_op *op);

/* Writes the recorder to `path` (NULL: BRAID_FLIGHT_RECORDER_FILE's
 * pattern) as JSON Lines, its header naming the communicator by an id its
 * ranks share and no other communicator has ("comm_id"); `reason` is
 * timeout, remote, mismatch, error, abort, signal or api. BRAID_SUCCESS,
 * or why not (a message in the comm's last error). */
braid_result flight_dump(braid_comm *c, const char *reason, const char *path);
/* 1 if a call of the communicator was issued and has not finished. */
int flight_unfinished(const braid_comm *c);

#endif
