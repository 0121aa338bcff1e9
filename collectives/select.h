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

#include "generators.h"

/* Transport classes of the cost model. */
enum { SELECT_TP_SHM = 0, SELECT_TP_TCP = 1, SELECT_TP_NUM };

/* Cost model parameters of one transport class. */
typedef struct select_model {
  double alpha_us;    /* latency of one message step, microseconds */
  double beta_ns;     /* time per byte moved, nanoseconds */
  double gamma_ns;    /* time per byte reduced, nanoseconds */
  double overhead_us; /* extra cost of each message posted in a burst */
} select_model;

const select_model *select_model_get(int transport_class);

/* A parsed filter: for every collective, a bit (1u << i) per allowed entry i
 * of gen_table. */
typedef struct select_filter {
  uint32_t allow[SCHED_NUM_COLLS];
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
 * Returns 0, or -1 with a message naming the bad token in err. */
int select_filter_parse(const char *text, select_filter *f, char *err,
                        size_t errlen);
int select_filter_allows(const select_filter *f, sched_coll coll,
                         const gen_desc *g);

/* Modelled time in microseconds of generator g for a call whose blocks are
 * `bytes` bytes (the call's count times the datatype size), or -1 when g
 * does not support the collective. */
double select_cost(const gen_desc *g, sched_coll coll, int nranks, size_t bytes,
                   int transport_class);

/* Picks the cheapest generator that supports (coll, nranks) and that the
 * filter text allows. When only the default entry applies (no "coll:" entry
 * for this collective) and it leaves no algorithm that supports the
 * collective — "ring" for gather — the filter is ignored for it, so that a
 * global "ring" still lets gather and alltoall run. Returns NULL with a
 * message in err when the filter text is malformed or the collective's own
 * entry leaves no algorithm for it. */
const gen_desc *select_algo(sched_coll coll, int nranks, size_t bytes,
                            int transport_class, const char *algo_filter,
                            char *err, size_t errlen);

/* The same with a filter parsed once by select_filter_parse (NULL: no
 * filter), for callers that select on every call. */
const gen_desc *select_algo_f(sched_coll coll, int nranks, size_t bytes,
                              int transport_class, const select_filter *f,
                              char *err, size_t errlen);

#endif
