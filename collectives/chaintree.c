/* Placeholder while the generator is written: makes nothing. */
#include "generators.h"

sched *gen_chaintree(const gen_params *p) {
  (void)p;
  return NULL;
}
