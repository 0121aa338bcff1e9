/*
 * Torch dtypes and reduce ops onto braid's, and the checks of tensor
 * arguments (wire.h).
 */
#include "wire.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <cstring>

namespace braid_torch {

namespace {

/* A braid dtype for a torch scalar type, and how many of them one element
 * is (complex: two reals); false where braid has none. */
bool braid_type(at::ScalarType st, braid_dtype *dt, size_t *per) {
  *per = 1;
  switch (st) {
  case at::kFloat:
    *dt = BRAID_FLOAT32;
    return true;
  case at::kDouble:
    *dt = BRAID_FLOAT64;
    return true;
  case at::kHalf:
    *dt = BRAID_FLOAT16;
    return true;
  case at::kBFloat16:
    *dt = BRAID_BFLOAT16;
    return true;
  case at::kChar:
    *dt = BRAID_INT8;
    return true;
  case at::kByte:
    *dt = BRAID_UINT8;
    return true;
  case at::kShort:
    *dt = BRAID_INT16;
    return true;
  case at::kInt:
    *dt = BRAID_INT32;
    return true;
  case at::kLong:
    *dt = BRAID_INT64;
    return true;
  case at::kBool:
    *dt = BRAID_BOOL;
    return true;
  case at::kComplexFloat:
    *dt = BRAID_FLOAT32;
    *per = 2;
    return true;
  case at::kComplexDouble:
    *dt = BRAID_FLOAT64;
    *per = 2;
    return true;
  default:
    return false;
  }
}

const char *op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return "SUM";
  case c10d::ReduceOp::AVG:
    return "AVG";
  case c10d::ReduceOp::PRODUCT:
    return "PRODUCT";
  case c10d::ReduceOp::MIN:
    return "MIN";
  case c10d::ReduceOp::MAX:
    return "MAX";
  case c10d::ReduceOp::BAND:
    return "BAND";
  case c10d::ReduceOp::BOR:
    return "BOR";
  case c10d::ReduceOp::BXOR:
    return "BXOR";
  case c10d::ReduceOp::PREMUL_SUM:
    return "PREMUL_SUM";
  default:
    return "UNUSED";
  }
}

/* PREMUL_SUM's factor, from the supplement torch's
 * _make_nccl_premul_sum attaches: a double, or a list of one tensor of
 * one element on the CPU (one per device for NCCL; the braid backend has
 * one device). Complex and bool tensors are refused. */
void premul_factor(const char *op, const at::Tensor &t,
                   const c10d::ReduceOp &rop, RedOp *red) {
  at::ScalarType st = t.scalar_type();
  TORCH_CHECK(!t.is_complex() && st != at::kBool, "braid: ", op,
              ": ReduceOp.PREMUL_SUM is not supported on ", st,
              " tensors (real floating and integer dtypes only)");
  const auto *sup = dynamic_cast<const c10d::NCCLPreMulSumSupplement *>(
      rop.supplement_.get());
  TORCH_CHECK(sup != nullptr, "braid: ", op,
              ": ReduceOp.PREMUL_SUM has no factor (make it with "
              "torch.distributed._make_nccl_premul_sum(factor))");
  red->premul = true;
  red->st = st;
  red->factor = sup->double_factor;
  if (sup->tensor_factors.empty())
    return;
  TORCH_CHECK(sup->tensor_factors.size() == 1, "braid: ", op,
              ": ReduceOp.PREMUL_SUM's factor is a list of ",
              sup->tensor_factors.size(),
              " tensors: the braid backend takes one (one device per rank)");
  const at::Tensor &f = sup->tensor_factors[0];
  TORCH_CHECK(f.defined(), "braid: ", op,
              ": ReduceOp.PREMUL_SUM's factor is an undefined tensor");
  TORCH_CHECK(f.device().is_cpu() && f.layout() == at::kStrided, "braid: ", op,
              ": ReduceOp.PREMUL_SUM's factor tensor is on ", f.device(),
              " (layout ", f.layout(), "): it must be a dense CPU tensor");
  TORCH_CHECK(f.numel() == 1, "braid: ", op,
              ": ReduceOp.PREMUL_SUM's factor tensor has ", f.numel(),
              " elements: it must have one");
  TORCH_CHECK(!f.is_complex(), "braid: ", op,
              ": ReduceOp.PREMUL_SUM's factor tensor is ", f.scalar_type(),
              ": it must be real");
  red->factor_t = f;
}

} // namespace

CallOp::CallOp(braid_comm *comm, const RedOp &rop, braid_dtype dt)
    : comm_(comm), op_(rop.op) {
  if (!rop.premul)
    return;
  /* The factor in the call's dtype, as torch converts it (a tensor factor
   * is read now, when the call runs). */
  at::Tensor f =
      rop.factor_t.defined()
          ? rop.factor_t.detach().reshape({}).to(rop.st).contiguous()
          : at::scalar_tensor(rop.factor, at::TensorOptions().dtype(rop.st));
  unsigned char scalar[8] = {0};
  size_t es = braid_dtype_size(dt);
  TORCH_CHECK(static_cast<size_t>(f.element_size()) == es && es <= 8,
              "braid: PREMUL_SUM's factor has ", f.element_size(),
              " bytes, braid's dtype ", es);
  std::memcpy(scalar, f.data_ptr(), es);
  result_ = braid_op_create_premul_sum(&op_, scalar, dt, 0, comm);
  made_ = result_ == BRAID_SUCCESS;
}

CallOp::~CallOp() {
  if (made_)
    braid_op_destroy(op_, comm_);
}

void check_tensor(const char *op, const std::string &what,
                  const at::Tensor &t) {
  TORCH_CHECK(t.defined(), "braid: ", op, ": ", what,
              " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "braid: ", op, ": ", what, " is on ",
              t.device(),
              ": the braid backend takes CPU tensors only (this build of "
              "torch and of the binding has no CUDA path; docs/TORCH.md)");
  TORCH_CHECK(t.layout() == at::kStrided, "braid: ", op, ": ", what,
              " has layout ", t.layout(),
              ": the braid backend takes dense (strided) tensors only");
}

void check_not_quantized(const char *op, const std::string &what,
                         const at::Tensor &t, const char *instead) {
  TORCH_CHECK(!t.is_quantized(), "braid: ", op, ": ", what, " is quantized (",
              t.scalar_type(),
              "): this form stages the data in tensors of "
              "the same type, which torch cannot make for a quantized one; "
              "use ",
              instead);
}

Wire move_wire(const at::Tensor &t) {
  Wire w;
  if (!braid_type(t.scalar_type(), &w.dt, &w.per)) {
    w.dt = BRAID_UINT8;
    w.per = t.element_size();
  }
  w.count = static_cast<size_t>(t.numel()) * w.per;
  return w;
}

Wire reduce_wire(const char *op, const at::Tensor &t, const c10d::ReduceOp &rop,
                 RedOp *red) {
  c10d::ReduceOp::RedOpType r = rop.op_;
  const char *name = op_name(r);
  *red = RedOp();
  braid_op *out = &red->op;
  switch (r) {
  case c10d::ReduceOp::SUM:
    *out = BRAID_SUM;
    break;
  case c10d::ReduceOp::AVG:
    *out = BRAID_AVG;
    break;
  case c10d::ReduceOp::PRODUCT:
    *out = BRAID_PROD;
    break;
  case c10d::ReduceOp::MIN:
    *out = BRAID_MIN;
    break;
  case c10d::ReduceOp::MAX:
    *out = BRAID_MAX;
    break;
  case c10d::ReduceOp::BAND:
    *out = BRAID_BAND;
    break;
  case c10d::ReduceOp::BOR:
    *out = BRAID_BOR;
    break;
  case c10d::ReduceOp::BXOR:
    *out = BRAID_BXOR;
    break;
  case c10d::ReduceOp::PREMUL_SUM:
    *out = BRAID_SUM;
    premul_factor(op, t, rop, red);
    break;
  default:
    TORCH_CHECK(false, "braid: ", op, ": ReduceOp.", name,
                " is not supported by the braid backend (it supports SUM, "
                "PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR and PREMUL_SUM)");
  }
  at::ScalarType st = t.scalar_type();
  Wire w;
  TORCH_CHECK(braid_type(st, &w.dt, &w.per), "braid: ", op, ": dtype ", st,
              " is not supported in reductions by the braid backend");
  bool bitwise = *out == BRAID_BAND || *out == BRAID_BOR || *out == BRAID_BXOR;
  if (t.is_complex())
    TORCH_CHECK(*out == BRAID_SUM || *out == BRAID_AVG, "braid: ", op,
                ": ReduceOp.", name, " is not supported on complex tensors (",
                st,
                "): only SUM and AVG, which act on the real and imaginary "
                "parts apart");
  if (bitwise)
    TORCH_CHECK(!at::isFloatingType(st), "braid: ", op, ": ReduceOp.", name,
                " needs an integer or bool tensor, not ", st);
  TORCH_CHECK(!(st == at::kBool && *out == BRAID_AVG), "braid: ", op,
              ": ReduceOp.AVG is not defined on bool tensors (SUM or MAX "
              "give a logical or)");
  w.count = static_cast<size_t>(t.numel()) * w.per;
  return w;
}

Counts split_counts(const char *op, const char *what, const at::Tensor &t,
                    const std::vector<int64_t> &splits, int size,
                    const Wire &w) {
  TORCH_CHECK(t.dim() >= 1, "braid: ", op, ": the ", what,
              " must have at least one dimension to split");
  int64_t rows = t.size(0);
  size_t per_row =
      rows == 0 ? 0 : static_cast<size_t>(t.numel() / rows) * w.per;
  Counts c;
  c.counts.resize(size);
  c.displs.resize(size);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "braid: ", op, ": the ", what, "'s ", rows,
                " rows do not split into ", size, " equal blocks");
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == size, "braid: ", op, ": ",
                what, " split sizes has ", splits.size(),
                " entries, the group ", size, " ranks");
  }
  int64_t sum = 0;
  for (int i = 0; i < size; i++) {
    int64_t s = splits.empty() ? rows / size : splits[i];
    TORCH_CHECK(s >= 0, "braid: ", op, ": ", what, " split size ", i, " is ",
                s);
    c.displs[i] = static_cast<size_t>(sum) * per_row;
    c.counts[i] = static_cast<size_t>(s) * per_row;
    sum += s;
  }
  TORCH_CHECK(sum == rows, "braid: ", op, ": ", what, " split sizes add up to ",
              sum, ", the ", what, " has ", rows, " rows");
  return c;
}

Counts list_counts(const std::vector<at::Tensor> &ts, const Wire &w) {
  Counts c;
  size_t off = 0;
  for (const at::Tensor &t : ts) {
    size_t n = static_cast<size_t>(t.numel()) * w.per;
    c.counts.push_back(n);
    c.displs.push_back(off);
    off += n;
  }
  return c;
}

void check_count(const char *op, const char *what, size_t got, size_t want) {
  TORCH_CHECK(got == want, "braid: ", op, ": ", what, " must hold ", want,
              " tensor", want == 1 ? "" : "s", ", got ", got);
}

void check_root(const char *op, int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "braid: ", op, ": root ", root,
              " is not a rank of the group (0..", size - 1, ")");
}

/* Same dtype and element count as `ref`. */
void check_like(const char *op, const std::string &what, const at::Tensor &t,
                const at::Tensor &ref, int64_t numel) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "braid: ", op, ": ", what,
              " has dtype ", t.scalar_type(), ", the input ",
              ref.scalar_type());
  TORCH_CHECK(t.numel() == numel, "braid: ", op, ": ", what, " has ", t.numel(),
              " elements, expected ", numel);
}

std::string nth(const char *what, size_t i) {
  return std::string(what) + "[" + std::to_string(i) + "]";
}

void *data(const at::Tensor &t) {
  static double empty;
  if (!t.defined() || t.numel() == 0)
    return &empty;
  return t.data_ptr();
}

} // namespace braid_torch
