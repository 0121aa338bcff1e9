/*
 * How torch tensors travel through braid: the braid dtype and element
 * count of a tensor, the braid op of a torch ReduceOp, per-peer counts of
 * all_to_all, and the checks every tensor argument passes.
 */
#ifndef BRAID_TORCH_WIRE_H
#define BRAID_TORCH_WIRE_H

#include <braid.h>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace braid_torch {

/* A tensor as braid sees it: `count` elements of `dt` (complex tensors are
 * pairs of reals; types braid has no name for move as bytes). */
struct Wire {
  braid_dtype dt = BRAID_UINT8;
  size_t per = 1;   /* braid elements per tensor element */
  size_t count = 0; /* braid elements in the tensor */
};

/* Per-peer counts and displacements in elements of a Wire's dtype. */
struct Counts {
  std::vector<size_t> counts, displs;
};

/* A CPU, strided (dense) tensor, or an exception naming `what`. */
void check_tensor(const char *op, const std::string &what, const at::Tensor &t);

/* Not a quantized tensor: the operations that gather into staging
 * tensors of their own (list forms) cannot make one of a quantized type
 * (or an exception naming `what` and the form that takes it). */
void check_not_quantized(const char *op, const std::string &what,
                         const at::Tensor &t, const char *instead);

/* A list of `want` tensors (or an exception naming `what`). */
void check_count(const char *op, const char *what, size_t got, size_t want);

/* A root in 0..size-1. */
void check_root(const char *op, int64_t root, int size);

/* The dtype of `ref` and `numel` elements. */
void check_like(const char *op, const std::string &what, const at::Tensor &t,
                const at::Tensor &ref, int64_t numel);

/* "what[i]" */
std::string nth(const char *what, size_t i);

/* For operations that only move data: any dtype. */
Wire move_wire(const at::Tensor &t);

/* A torch ReduceOp as braid runs it: a built-in op, or for PREMUL_SUM a
 * pre-multiplied sum whose factor is a double or a one-element CPU tensor
 * (read, in the call's dtype, when the call runs). */
struct RedOp {
  braid_op op = BRAID_SUM; /* built-in ops; BRAID_SUM for PREMUL_SUM */
  bool premul = false;
  double factor = 0.0; /* PREMUL_SUM, unless factor_t is defined */
  at::Tensor factor_t;
  at::ScalarType st = at::kFloat; /* the call's dtype */
};

/* For reductions: the dtype and op must make sense together (complex: SUM
 * and AVG only, as pairs of reals; bitwise ops: integers and bool; no AVG
 * of bool; PREMUL_SUM: real dtypes, a factor that is a double or one
 * one-element CPU tensor), else an exception that names them. */
Wire reduce_wire(const char *op, const at::Tensor &t, const c10d::ReduceOp &rop,
                 RedOp *out);

/* The op one call runs with, made in the thread that runs it: a built-in
 * op as it is, or a braid pre-multiplied sum for the call's dtype with the
 * factor's value now, destroyed when the CallOp goes (once the calls that
 * use it returned: the binding's calls are blocking). */
class CallOp {
public:
  CallOp(braid_comm *comm, const RedOp &rop, braid_dtype dt);
  ~CallOp();
  CallOp(const CallOp &) = delete;
  CallOp &operator=(const CallOp &) = delete;
  /* BRAID_SUCCESS, or why the op could not be made (the communicator's
   * last error says more). */
  braid_result result() const { return result_; }
  braid_op op() const { return op_; }

private:
  braid_comm *comm_;
  braid_op op_ = BRAID_SUM;
  bool made_ = false;
  braid_result result_ = BRAID_SUCCESS;
};

/* all_to_all_single's split sizes (rows of dim 0; empty: equal blocks). */
Counts split_counts(const char *op, const char *what, const at::Tensor &t,
                    const std::vector<int64_t> &splits, int size,
                    const Wire &w);

/* all_to_all's tensor lists, one block per tensor. */
Counts list_counts(const std::vector<at::Tensor> &ts, const Wire &w);

/* A tensor's data (an address even for an empty tensor). */
void *data(const at::Tensor &t);

} // namespace braid_torch

#endif
