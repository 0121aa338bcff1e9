/*
 * Submitting work (src/enqueue.c): a call runs at once in the calling
 * thread (blocking), or goes to its stream's queue (streams, groups);
 * draining and shutting the queues down when a communicator ends.
 */
#ifndef BRAID_SRC_ENQUEUE_H
#define BRAID_SRC_ENQUEUE_H

#include "src/comm.h"

braid_result enq_submit(braid_comm *c, exec_op *op);
void enq_shutdown(braid_comm *c);
braid_result enq_drain(braid_comm *c);

#endif
