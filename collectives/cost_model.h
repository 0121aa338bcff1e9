/*
 * The cost model's parameters per transport class (alpha, beta, gamma,
 * posting overhead), shared by the selector (collectives/select.c, which
 * hands them to each generator's cost function) and the simulator's CPU
 * defaults (collectives/sim_params.c), so that both models agree.
 */
#ifndef BRAID_COLLECTIVES_COST_MODEL_H
#define BRAID_COLLECTIVES_COST_MODEL_H

/* Transport classes of the cost model. */
enum { SELECT_TP_SHM = 0, SELECT_TP_TCP = 1, SELECT_TP_NUM };

/* Cost model parameters of one transport class. */
typedef struct select_model {
  double alpha_us;    /* latency of one message step, microseconds */
  double beta_ns;     /* time per byte moved, nanoseconds */
  double gamma_ns;    /* time per byte reduced, nanoseconds */
  double overhead_us; /* extra cost of each message posted in a burst */
} select_model;

/* The parameters of a transport class, NULL for an unknown one. */
const select_model *select_model_get(int transport_class);

#endif
