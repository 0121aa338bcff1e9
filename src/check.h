/*
 * Call fingerprints and mismatch checks (src/check.c): the compact
 * fingerprint every collective's messages carry, BRAID_CHECK's comparison
 * before each collective, and telling every rank of a mismatch found here.
 */
#ifndef BRAID_SRC_CHECK_H
#define BRAID_SRC_CHECK_H

#include <stdint.h>

#include "src/comm.h"

/* BRAID_CHECK fingerprint comparison (collective). */
braid_result check_fingerprint(braid_comm *c, const exec_op *op);
/* The compact fingerprint a collective's messages carry (0: send/recv). */
uint64_t check_call_fp(const exec_op *op);
/* Tells every rank of the comm's transports of mismatch m (found here). */
void check_tell_mismatch(braid_comm *c, const tp_mismatch *m);
/* c broke on BRAID_ERR_MISMATCH: tells the others of the one a transport of
 * this rank found (none: a peer told this rank, or BRAID_CHECK). */
void check_broke(braid_comm *c);

#endif
