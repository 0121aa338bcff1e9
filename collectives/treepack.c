/* Placeholder while the generator is written: makes nothing. */
#include "generators.h"

sched *gen_treepack(const gen_params *p) {
  (void)p;
  return NULL;
}
