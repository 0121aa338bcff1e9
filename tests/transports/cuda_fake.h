/*
 * A fake copy engine for the cuda transports' protocol tests: copies,
 * reductions and event records queue up like work on a GPU stream and run
 * only when the test calls fake_run, so a test can hold the "GPU" and watch
 * what the protocol does meanwhile.
 */
#ifndef BRAID_TESTS_TRANSPORTS_CUDA_FAKE_H
#define BRAID_TESTS_TRANSPORTS_CUDA_FAKE_H

#include <stddef.h>

#include "transports/cuda/cuda_fifo.h"

extern const cuf_engine fake_engine;

/* Runs up to n queued operations (n < 0: all); returns how many ran. */
int fake_run(int n);
/* Operations waiting. */
int fake_pending(void);
/* Copies issued so far (not counting event records). */
int fake_copies(void);
/* The next copy, reduction or record issued fails with this code (0: no). */
void fake_fail_next(int code);
/* Forgets everything queued (between tests). */
void fake_reset(void);

#endif
