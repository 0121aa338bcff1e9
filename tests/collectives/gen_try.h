/*
 * Tests' shorthand for running a generator (collectives/generators.h).
 */
#ifndef BRAID_TESTS_COLLECTIVES_GEN_TRY_H
#define BRAID_TESTS_COLLECTIVES_GEN_TRY_H

#include "collectives/generators.h"

/* The schedule fn makes of p, or NULL where it makes none (err_msg() says
 * why). */
static inline sched *gen_try(gen_fn fn, const gen_params *p) {
  sched *s = NULL;
  return fn(p, &s) == BRAID_SUCCESS ? s : NULL;
}

#endif
