/*
 * Pre-multiplied sums (braid_op_create_premul_sum): reduction ops a
 * communicator makes, each with a scalar of one dtype, read at creation
 * (host) or when a call runs (device). A call with one sums the ranks'
 * inputs after multiplying each by its rank's own scalar.
 */
#ifndef BRAID_SRC_PREMUL_H
#define BRAID_SRC_PREMUL_H

#include <stdatomic.h>

#include "src/comm.h"

typedef struct premul_op {
  braid_op handle;
  braid_dtype dt;
  int on_device;
  const void *dscalar;     /* on_device: read when a call runs */
  unsigned char scalar[8]; /* else: read at creation */
} premul_op;

/* 1 when op has the shape of a pre-multiplied sum's handle. */
int premul_is_op(braid_op op);
/* A reducing call's op: one not shaped as a handle is left to the
 * argument checks; a pre-multiplied sum of this communicator for the
 * call's dtype sets op->premul and op->op = BRAID_SUM; another handle is
 * BRAID_ERR_INVALID_ARG with the reason. */
braid_result premul_resolve(braid_comm *c, exec_op *op);
/* Before a call runs (src/executor.c): each op with a pre-multiplied sum
 * and a host input reads from a copy of its input multiplied by the scalar
 * (saved[k]: its own input, to give back with premul_end). */
braid_result premul_begin(braid_comm *c, exec_op *ops, int nops,
                          const void **saved);
void premul_end(exec_op *ops, int nops, const void **saved);
/* The same for ops on device buffers, once the call's device is selected
 * and set up (src/exec_dev.c): each input is multiplied on the GPU
 * (cudev_scale, on the internal stream, which is then synchronised; a
 * device scalar is read there) into the communicator's device buffer for
 * products (comm_dev_premul). premul_begin leaves these ops alone. */
braid_result premul_dev_begin(braid_comm *c, exec_op *ops, int nops,
                              const void **saved);
void premul_dev_end(exec_op *ops, int nops, const void **saved);
void premul_free(braid_comm *c);

#endif
