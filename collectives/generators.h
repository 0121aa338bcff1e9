/*
 * Generators: functions from (collective, rank count, root, channel count) to
 * a schedule (DESIGN §1). One algorithm per file in collectives/.
 */
#ifndef BRAID_COLLECTIVES_GENERATORS_H
#define BRAID_COLLECTIVES_GENERATORS_H

#include "schedule.h"

struct sched_view; /* collectives/view.h */

typedef struct gen_params {
  sched_coll coll;
  int nranks;
  int root;      /* broadcast/reduce/gather/scatter root; send/recv peer */
  int nchannels; /* >= 1: the channels of topology-blind generators */
  /* Topology-aware generators: where the ranks sit (NULL: unknown; those
   * generators then return NULL), the bytes of one block (0: unknown), and
   * the most channels they may use (0: GEN_MAX_CHANNELS). */
  const struct sched_view *view;
  size_t bytes;
  int max_channels;
} gen_params;

typedef sched *(*gen_fn)(const gen_params *p);

typedef struct gen_desc {
  const char *name; /* "ring", "tree", "binomial", "rhd", "direct", ... */
  gen_fn fn;
  uint32_t colls; /* bit (1u << sched_coll) for each collective supported */
  uint32_t needs; /* GEN_NEEDS_* */
  uint32_t flags; /* GEN_OPT_IN, GEN_RANK_ORDER */
} gen_desc;

/* A generator the selector considers only where the algorithm filter
 * (BRAID_ALGO, braid-topo --algo) names it: one whose cost the simulator
 * does not model in full yet. */
#define GEN_OPT_IN 1u
/* A generator whose reductions (allreduce, reduce, reduce_scatter) give
 * every element as the serial fold x0 op x1 op .. op x(n-1) of the ranks'
 * inputs in rank order, on every rank, for any channel count and slicing
 * (verify_rank_order proves it of its schedules in the tests). Only these
 * run reductions under BRAID_DETERMINISTIC=1 (collectives/plan.h). */
#define GEN_RANK_ORDER 2u

/* What a generator needs from the view. */
#define GEN_NEEDS_GRAPH 1u /* a graph with ranks on distinct vertices */
#define GEN_NEEDS_HOSTS 2u /* ranks on >= 2 hosts */

/* All generators, terminated by an entry with name == NULL. */
extern const gen_desc gen_table[];
const gen_desc *gen_find(const char *name);
/* Does generator g support collective `coll` on `nranks` ranks without a
 * view? (Topology-aware generators: no; see gen_supports_view.) */
int gen_supports(const gen_desc *g, sched_coll coll, int nranks);
/* The same, and the view gives what g needs (v may be NULL). */
int gen_supports_view(const gen_desc *g, sched_coll coll, int nranks,
                      const struct sched_view *v);

/* One entry per file: */
sched *gen_ring(const gen_params *p);     /* ring.c */
sched *gen_tree(const gen_params *p);     /* tree.c: double binary tree */
sched *gen_binomial(const gen_params *p); /* binomial.c */
sched *gen_rhd(const gen_params *p);    /* rhd.c: recursive halving/doubling */
sched *gen_direct(const gen_params *p); /* direct.c: one-shot, every pair */
sched *gen_linear(const gen_params *p); /* linear.c: root-centred, p2p */
sched *gen_det(const gen_params *p);    /* det.c: rank-order reductions */
/* Topology-aware (need p->view): */
sched *gen_multiring(const gen_params *p); /* multiring.c: several rings */
sched *gen_treepack(const gen_params *p);  /* treepack.c: spanning trees */
sched *gen_hybrid(const gen_params *p);    /* hybrid.c: NVLink + PCIe */
sched *gen_hier(const gen_params *p);      /* hier.c: intra/inter host */
sched *gen_chaintree(const gen_params *p); /* chaintree.c: trees of chains */

#endif
