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
   * generators then refuse), the bytes of one block (0: unknown), and the
   * most channels they may use (0: GEN_MAX_CHANNELS). */
  const struct sched_view *view;
  size_t bytes;
  int max_channels;
} gen_params;

/* A generator: the schedule for p into *out, or a failure with its message
 * (err_msg) and *out NULL: BRAID_ERR_UNSUPPORTED where the generator cannot
 * run p (the reason in words the user sees, naming the generator),
 * BRAID_ERR_NOMEM where memory ran out. */
typedef braid_result (*gen_fn)(const gen_params *p, sched **out);

/* What a cost function sees of a call (collectives/select.c fills it from
 * the transport class's model): times in microseconds, sizes in bytes. */
typedef struct gen_cost_in {
  sched_coll coll;
  int nranks; /* >= 2 */
  double n;   /* nranks */
  double m;   /* bytes of one block */
  double a;   /* alpha: latency of one message step */
  double b;   /* beta: time per byte moved */
  double gm;  /* gamma: time per byte reduced */
  double o;   /* overhead of each message posted in a burst */
  double red; /* gm when the collective reduces, else 0 */
  int L;      /* ceil(log2(nranks)) */
  double S;   /* slices of a pipelined algorithm (64 KiB each, 1..64) */
} gen_cost_in;

/* Modelled time of a collective the generator supports, microseconds. */
typedef double (*gen_cost_fn)(const gen_cost_in *in);

/* One algorithm, described by its own file: collectives/<name>.c exports
 * gen_<name>_desc. */
typedef struct gen_desc {
  const char *name; /* "ring", "tree", "binomial", "rhd", "direct", ... */
  gen_fn fn;
  uint32_t colls; /* bit (1u << sched_coll) for each collective supported */
  uint32_t needs; /* GEN_NEEDS_* */
  uint32_t flags; /* GEN_OPT_IN, GEN_RANK_ORDER */
  /* the cost model's time (collectives/select.h, select_cost); NULL: no
   * model, a pessimistic guess stands in */
  gen_cost_fn cost;
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

/* The descriptors, one per algorithm file: */
extern const gen_desc gen_ring_desc;     /* ring.c */
extern const gen_desc gen_tree_desc;     /* tree.c: double binary tree */
extern const gen_desc gen_binomial_desc; /* binomial.c */
extern const gen_desc gen_rhd_desc;      /* rhd.c: recursive halving/doubling */
extern const gen_desc gen_direct_desc;   /* direct.c: one-shot, every pair */
extern const gen_desc gen_linear_desc;   /* linear.c: root-centred, p2p */
extern const gen_desc gen_multiring_desc; /* multiring.c: several rings */
extern const gen_desc gen_treepack_desc;  /* treepack.c: spanning trees */
extern const gen_desc gen_hybrid_desc;    /* hybrid.c: NVLink + PCIe */
extern const gen_desc gen_hier_desc;      /* hier.c: intra/inter host */
extern const gen_desc gen_chaintree_desc; /* chaintree.c: trees of chains */
extern const gen_desc gen_det_desc;       /* det.c: rank-order reductions */

/* All generators, in the selector's order of preference among equals,
 * terminated by NULL (generators.c). */
extern const gen_desc *const gen_table[];
/* Every generator g of gen_table in order: GEN_FOREACH(g) { ... } */
#define GEN_FOREACH(g)                                                         \
  for (const gen_desc *const *g##_at = gen_table, *g; ((g) = *g##_at) != NULL; \
       g##_at++)
/* Entries of gen_table, and g's index there (-1: not there). */
int gen_count(void);
int gen_index(const gen_desc *g);
const gen_desc *gen_find(const char *name);
/* Does generator g support collective `coll` on `nranks` ranks without a
 * view? (Topology-aware generators: no; see gen_supports_view.) */
int gen_supports(const gen_desc *g, sched_coll coll, int nranks);
/* The same, and the view gives what g needs (v may be NULL). */
int gen_supports_view(const gen_desc *g, sched_coll coll, int nranks,
                      const struct sched_view *v);
/* Runs g on p (gen_fn): the schedule into *out, or BRAID_ERR_UNSUPPORTED
 * with the generator's reason (err_msg), BRAID_ERR_NOMEM, or
 * BRAID_ERR_INVALID_ARG (no generator or no parameters). */
braid_result gen_build(const gen_desc *g, const gen_params *p, sched **out);

/* The generator functions (gen_fn; each file's descriptor names its own): */
braid_result gen_ring(const gen_params *p, sched **out);
braid_result gen_tree(const gen_params *p, sched **out);
braid_result gen_binomial(const gen_params *p, sched **out);
braid_result gen_rhd(const gen_params *p, sched **out);
braid_result gen_direct(const gen_params *p, sched **out);
braid_result gen_linear(const gen_params *p, sched **out);
braid_result gen_det(const gen_params *p, sched **out);
/* Topology-aware (need p->view): */
braid_result gen_multiring(const gen_params *p, sched **out);
braid_result gen_treepack(const gen_params *p, sched **out);
braid_result gen_hybrid(const gen_params *p, sched **out);
braid_result gen_hier(const gen_params *p, sched **out);
braid_result gen_chaintree(const gen_params *p, sched **out);

#endif
