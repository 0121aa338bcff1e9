/*
 * The spanning-tree packing (collectives/treepack_pack.c) that the treepack
 * generator (collectives/treepack.c) weights and schedules.
 */
#ifndef BRAID_COLLECTIVES_TREEPACK_INT_H
#define BRAID_COLLECTIVES_TREEPACK_INT_H

#include "src/log.h"

/* Integral trees the exact packing may build. */
#define TREEPACK_KMAX 48

/*
 * Packs trees on cap (n x n, GB/s, all pairs joined by a path of positive
 * capacity). par: room for TREEPACK_KMAX x n parents (at least maxt x n); w:
 * their rates. Directed trees are rooted at root; undirected ones at the
 * root picked for them. BRAID_SUCCESS, BRAID_ERR_UNSUPPORTED (no spanning
 * tree), BRAID_ERR_INVALID_ARG (n < 2) or BRAID_ERR_NOMEM, with the message.
 */
braid_result treepack_pack(const double *cap, int n, int root, int undirected,
                           int maxt, int *par, double *w, int *ntrees);

/*
 * max c.x subject to A x <= b, x >= 0 (A: m x k row-major, A >= 0, b > 0,
 * c > 0), by the simplex method on a dense tableau from the all-slack basis,
 * Bland's rule. x gets the optimum; BRAID_SUCCESS or BRAID_ERR_NOMEM.
 */
braid_result treepack_lp(const double *A, const double *b, const double *c,
                         int m, int k, double *x);

#endif
