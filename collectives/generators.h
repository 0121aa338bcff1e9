/*
 * Generators: functions from (collective, rank count, root, channel count) to
 * a schedule (DESIGN §1). One algorithm per file in collectives/.
 */
#ifndef BRAID_COLLECTIVES_GENERATORS_H
#define BRAID_COLLECTIVES_GENERATORS_H

#include "schedule.h"

typedef struct gen_params {
  sched_coll coll;
  int nranks;
  int root;      /* broadcast/reduce/gather/scatter root; send/recv peer */
  int nchannels; /* >= 1 */
} gen_params;

typedef sched *(*gen_fn)(const gen_params *p);

typedef struct gen_desc {
  const char *name; /* "ring", "tree", "binomial", "rhd", "direct", ... */
  gen_fn fn;
  uint32_t colls; /* bit (1u << sched_coll) for each collective supported */
} gen_desc;

/* All generators, terminated by an entry with name == NULL. */
extern const gen_desc gen_table[];
const gen_desc *gen_find(const char *name);
/* Does generator g support collective `coll` on `nranks` ranks? */
int gen_supports(const gen_desc *g, sched_coll coll, int nranks);

/* One entry per file: */
sched *gen_ring(const gen_params *p);     /* ring.c */
sched *gen_tree(const gen_params *p);     /* tree.c: double binary tree */
sched *gen_binomial(const gen_params *p); /* binomial.c */
sched *gen_rhd(const gen_params *p);    /* rhd.c: recursive halving/doubling */
sched *gen_direct(const gen_params *p); /* direct.c: one-shot, every pair */
sched *gen_linear(const gen_params *p); /* linear.c: root-centred, p2p */

#endif
