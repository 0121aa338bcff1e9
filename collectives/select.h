/*
 * Algorithm selection: an alpha-beta(-gamma) cost model per transport class
 * picks the generator for a call, and BRAID_ALGO-style filters (NCCL_ALGO's
 * syntax) restrict the choice. Pure: the caller passes the filter text (the
 * value of BRAID_ALGO read by src/config.c).
 */
#ifndef BRAID_COLLECTIVES_SELECT_H
#define BRAID_COLLECTIVES_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "cost_model.h"
#include "generators.h"
#include "sim.h"
#include "src/log.h" /* braid_result; err_msg() reads the message */

/* A parsed filter: for every collective, a bit (1u << i) per allowed entry i
 * of gen_table (gen_index). */
typedef struct select_filter {
  uint32_t allow[SCHED_NUM_COLLS];
  /* the entries named in a list that is not a "^" exclusion: the only
   * opt-in generators (GEN_OPT_IN) the filter allows */
  uint32_t asked[SCHED_NUM_COLLS];
  uint32_t named; /* bit (1u << coll) for collectives with their own entry */
} select_filter;

/* Parses NCCL_ALGO-style text:
 *   ""  or NULL              every algorithm
 *   "ring,tree"              only these, for every collective
 *   "^tree"                  all but these
 *   "allreduce:ring;broadcast:^tree"
 *                            per collective; an entry without "coll:" sets
 *                            the default for the collectives not named
 * Names are case-insensitive; spaces around names are ignored. Collective
 * names: allreduce, broadcast, reduce, allgather, reducescatter (or
 * reduce_scatter), gather, scatter, alltoall, send, recv, sendrecv (both).
 * BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG with a message (ERR) naming the
 * bad token. */
braid_result select_filter_parse(const char *text, select_filter *f);
/* Whether f allows g for coll: g is among f's entries, and an opt-in
 * generator (GEN_OPT_IN) is named by them. NULL is the empty filter (every
 * generator but the opt-in ones), as no BRAID_ALGO. */
int select_filter_allows(const select_filter *f, sched_coll coll,
                         const gen_desc *g);
/* A filter that allows every generator, opt-in ones included (a tool that
 * shows every candidate). */
void select_filter_all(select_filter *f);

/* Modelled time in microseconds of generator g for a call whose blocks are
 * `bytes` bytes (the call's count times the datatype size): g's own cost
 * function on the transport class's model, or -1 when g does not support
 * the collective. */
double select_cost(const gen_desc *g, sched_coll coll, int nranks, size_t bytes,
                   int transport_class);

/* Picks the cheapest generator that supports (coll, nranks) and that the
 * filter text allows. When only the default entry applies (no "coll:" entry
 * for this collective) and it leaves no algorithm that supports the
 * collective — "ring" for gather — the filter is ignored for it, so that a
 * global "ring" still lets gather and alltoall run. BRAID_SUCCESS with the
 * generator in *out, or BRAID_ERR_INVALID_ARG with a message (ERR) when the
 * filter text is malformed or the collective's own entry leaves no
 * algorithm for it ("BRAID_ALGO=\"...\": the algorithm filter leaves no
 * algorithm for ..."). */
braid_result select_algo(sched_coll coll, int nranks, size_t bytes,
                         int transport_class, const char *algo_filter,
                         const gen_desc **out);

/* The same with a filter parsed once by select_filter_parse (NULL: no
 * filter), for callers that select on every call. */
braid_result select_algo_f(sched_coll coll, int nranks, size_t bytes,
                           int transport_class, const select_filter *f,
                           const gen_desc **out);

/* ---- selection on a topology view, by simulation (collectives/sim.h) ---- */

/* One candidate of a selection on a view. */
typedef struct select_cand {
  const gen_desc *gen;
  int ok;        /* 1: simulated (res valid); 0: skipped, why in note */
  int nchannels; /* channels of its schedule (ok only) */
  sim_result res;
  char note[160];
} select_cand;

/* Builds and simulates the schedule of every generator that
 * gen_supports_view(coll, v) and the filter allows (NULL: all but the
 * opt-in ones; a default entry that leaves nothing for coll is ignored, as
 * in select_algo_f; select_filter_all: every one), for
 * blocks of `bytes` bytes, root `root` (rooted collectives), at most
 * max_channels channels for topology-aware generators (0: their default),
 * the runtime's channels for a call of `bytes` for the others
 * (plan_channels of max_channels, or of PLAN_DEFAULT_CHANNELS for 0).
 * Fills out[0 .. *count) in gen_table order, skipped ones included with
 * ok = 0 (a generator that builds no schedule, or whose schedule does not
 * simulate: its reason in note). BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG
 * with a message (ERR) for bad arguments. */
braid_result select_sim_table(sched_coll coll, int root, const sched_view *v,
                              size_t bytes, const sim_params *p,
                              const select_filter *f, int max_channels,
                              select_cand *out, int max, int *count);

/* The generator to use for calls in the power-of-two bucket [bytes,
 * 2 bytes) (the runtime selects once per bucket, at its lower end), root 0:
 * every candidate is simulated at both ends and the one with the smallest
 * worst ratio to the fastest there wins (then the lower time at `bytes`,
 * then the earlier entry), so a generator fastest at both ends is picked.
 * BRAID_SUCCESS with the generator in *out, or BRAID_ERR_UNSUPPORTED with a
 * message (ERR) when none could be simulated. */
braid_result select_algo_view(sched_coll coll, const sched_view *v,
                              size_t bytes, const sim_params *p,
                              const select_filter *f, int max_channels,
                              const gen_desc **out);

#endif
