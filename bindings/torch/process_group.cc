/*
 * ProcessGroupBraid: argument checks, the mapping of torch's dtypes and
 * reduce ops onto braid's, the queue, and every operation (the runner that
 * runs them is runner.cc).
 */
#include "process_group.h"

#include "wire.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>

namespace braid_torch {

/* ---- the group: rendezvous, queue ------------------------------------ */

ProcessGroupBraid::ProcessGroupBraid(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "braid: rank ", rank,
              " of ", size, " is not a rank of the group");
  int64_t ms = timeout.count();
  timeout_ms_ = ms <= 0 ? 1 : ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
  /* Each creation of a group with this store prefix (a group destroyed and
   * made again: file:// stores keep their keys) counts `size` arrivals;
   * every member of one creation arrives before any makes the next, since
   * braid_comm_init returns only once all of them joined. */
  int64_t arrival = store->add("braid_torch/arrivals", 1);
  int64_t generation = (arrival - 1) / size;
  std::string key = "braid_torch/unique_id/" + std::to_string(generation);
  braid_unique_id id;
  char text[2 * BRAID_UNIQUE_ID_BYTES + 1];
  braid_comm *comm = nullptr;
  braid_result r;
  if (rank == 0) {
    r = braid_get_unique_id(&id);
    TORCH_CHECK(r == BRAID_SUCCESS,
                "braid: braid_get_unique_id failed: ", braid_result_string(r),
                " (BRAID_DEBUG=INFO tells more)");
    r = braid_unique_id_to_string(&id, text, sizeof text);
    TORCH_CHECK(r == BRAID_SUCCESS,
                "braid: braid_unique_id_to_string: ", braid_result_string(r));
    store->set(key, std::vector<uint8_t>(text, text + strlen(text)));
  } else {
    std::vector<uint8_t> v = store->get(key);
    std::string s(v.begin(), v.end());
    r = braid_unique_id_from_string(&id, s.c_str());
    TORCH_CHECK(r == BRAID_SUCCESS, "braid: the unique id in the store (key ",
                key, ") does not parse: ", braid_result_string(r));
  }
  name_ = "torch-g" + std::to_string(generation) + "-r" + std::to_string(rank);
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.timeout_ms = timeout_ms_;
  cfg.name = name_.c_str();
  r = braid_comm_init(&comm, size, &id, rank, &cfg);
  if (r != BRAID_SUCCESS) {
    std::string why = braid_comm_last_error(comm); /* NULL: this thread's */
    if (comm != nullptr)
      braid_comm_destroy(comm);
    TORCH_CHECK(false, "braid: braid_comm_init (rank ", rank, " of ", size,
                ", timeout ", timeout_ms_,
                " ms) failed: ", braid_result_string(r), ": ", why);
  }
  runner_ = std::make_shared<Runner>(comm, timeout_ms_);
  runner_->start();
}

ProcessGroupBraid::~ProcessGroupBraid() {
  std::vector<Op> batch;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    batch = std::move(batch_);
    batch_.clear();
  }
  if (!batch.empty())
    runner_->push(std::move(batch));
  runner_->stop();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::enqueue(Op op) {
  c10::intrusive_ptr<c10d::Work> work = op.work;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (coalescing_) {
      batch_.push_back(std::move(op));
      return work;
    }
  }
  std::vector<Op> batch;
  batch.push_back(std::move(op));
  runner_->push(std::move(batch));
  return work;
}

void ProcessGroupBraid::startCoalescing() {
  std::lock_guard<std::mutex> lk(mutex_);
  TORCH_CHECK(!coalescing_,
              "braid: startCoalescing while already coalescing (batches do "
              "not nest)");
  coalescing_ = true;
}

void ProcessGroupBraid::endCoalescing(
    std::vector<c10::intrusive_ptr<c10d::Work>> & /* reqs */) {
  std::vector<Op> batch;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    TORCH_CHECK(coalescing_, "braid: endCoalescing without startCoalescing");
    coalescing_ = false;
    batch = std::move(batch_);
    batch_.clear();
  }
  if (!batch.empty())
    runner_->push(std::move(batch));
}

/* ---- operations ------------------------------------------------------ */

namespace {

/* The operations of a group run in issue order, and each reads its
 * tensors when it runs, not when it is issued: an operation issued after
 * an asynchronous one that writes its input sees what that one wrote. So
 * the staging copies below (a non-contiguous tensor's, a list's flat one)
 * are made in issue(), on the group's worker; issue() and post() share
 * them (each lambda holds its own copy of these structs). */

/* Contiguous storage for an output: the tensor itself, or a buffer made
 * when the call runs (with the tensor's values then, keep_values: an
 * in-place call's input) that post() copies back. */
struct Out {
  at::Tensor user;
  bool keep;
  std::shared_ptr<at::Tensor> buf;
  explicit Out(const at::Tensor &t, bool keep_values = false)
      : user(t), keep(keep_values),
        buf(std::make_shared<at::Tensor>(t.is_contiguous() ? t
                                                           : at::Tensor())) {}
  void *ptr() const {
    if (!buf->defined()) {
      at::NoGradGuard no_grad;
      *buf = keep ? user.contiguous() : at::empty(user.sizes(), user.options());
    }
    return data(*buf);
  }
  void back() const {
    if (buf->defined() && !buf->is_same(user)) {
      at::NoGradGuard no_grad;
      user.copy_(*buf);
    }
  }
};

/* Whether two of the users' tensors may share a byte: the span of
 * memory each one's elements lie in, strides included (views that
 * interleave without sharing count as overlapping, which only costs them
 * the group). */
bool any_overlap(const std::vector<Out> &outs) {
  std::vector<std::pair<uintptr_t, uintptr_t>> r;
  for (const Out &o : outs) {
    const at::Tensor &t = o.user;
    if (t.numel() == 0)
      continue;
    uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr()), hi = lo;
    for (int64_t d = 0; d < t.dim(); d++) {
      auto step = static_cast<intptr_t>((t.size(d) - 1) * t.stride(d) *
                                        static_cast<int64_t>(t.itemsize()));
      if (step < 0)
        lo += step;
      else
        hi += step;
    }
    r.emplace_back(lo, hi + t.itemsize());
  }
  std::sort(r.begin(), r.end());
  uintptr_t end = 0;
  for (const auto &x : r) {
    if (x.first < end)
      return true;
    end = std::max(end, x.second);
  }
  return false;
}

/* The elements of a flat buffer's block i as a tensor shaped like `like`. */
at::Tensor block(const at::Tensor &flat, int64_t offset,
                 const at::Tensor &like) {
  return flat.narrow(0, offset, like.numel()).view(like.sizes());
}

at::Tensor flat_of(const std::vector<at::Tensor> &ts, const at::Tensor &like) {
  std::vector<at::Tensor> parts;
  parts.reserve(ts.size());
  for (const at::Tensor &t : ts)
    parts.push_back(t.reshape({-1}));
  if (parts.empty())
    return at::empty({0}, like.options());
  return at::cat(parts);
}

/* An input, read when the call runs: the tensor itself when contiguous,
 * else a contiguous copy made then; a list of tensors, one flat copy made
 * then; with `copy`, a copy in any case (it shares memory with the
 * output, and the call has no in-place form). None: nothing to read (a
 * rank that sends nothing). */
struct In {
  std::vector<at::Tensor> ts;
  bool list = false, copy = false;
  at::Tensor like;
  std::shared_ptr<at::Tensor> buf = std::make_shared<at::Tensor>();
  In() = default;
  explicit In(const at::Tensor &t) : ts{t}, like(t) {}
  In(const std::vector<at::Tensor> &l, const at::Tensor &shape)
      : ts(l), list(true), like(shape) {}
  void *ptr() const {
    if (!buf->defined() && like.defined()) {
      at::NoGradGuard no_grad;
      *buf = list   ? flat_of(ts, like)
             : copy ? ts[0].clone(at::MemoryFormat::Contiguous)
                    : ts[0].contiguous();
    }
    return data(*buf);
  }
};

} // namespace

#define BRAID_OP(type, outs, ...)                                              \
  c10::make_intrusive<WorkBraid>(rank_, c10d::OpType::type, outs, ##__VA_ARGS__)

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::broadcast(std::vector<at::Tensor> &tensors,
                             const c10d::BroadcastOptions &opts) {
  const char *op = "broadcast";
  check_count(op, "the tensor list", tensors.size(), 1);
  check_root(op, opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "braid: broadcast: rootTensor must be 0");
  check_tensor(op, "tensor", tensors[0]);
  Wire w = move_wire(tensors[0]);
  Out o(tensors[0], true);
  int root = static_cast<int>(opts.rootRank);
  Op x;
  x.name = op;
  x.work = BRAID_OP(BROADCAST, tensors);
  x.issue = [o, w, root](braid_comm *c) {
    return braid_broadcast(o.ptr(), o.ptr(), w.count, w.dt, root, c, nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allreduce(std::vector<at::Tensor> &tensors,
                             const c10d::AllreduceOptions &opts) {
  const char *op = "allreduce";
  check_count(op, "the tensor list", tensors.size(), 1);
  check_tensor(op, "tensor", tensors[0]);
  RedOp rop;
  Wire w = reduce_wire(op, tensors[0], opts.reduceOp, &rop);
  Out o(tensors[0], true);
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLREDUCE, tensors);
  x.issue = [o, w, rop](braid_comm *c) {
    CallOp bop(c, rop, w.dt);
    if (bop.result() != BRAID_SUCCESS)
      return bop.result();
    return braid_allreduce(o.ptr(), o.ptr(), w.count, w.dt, bop.op(), c,
                           nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce_coalesced(
    std::vector<at::Tensor> &tensors,
    const c10d::AllreduceCoalescedOptions &opts) {
  const char *op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "braid: ", op, ": the tensor list is empty");
  std::vector<Out> outs;
  std::vector<Wire> wires;
  RedOp rop;
  for (size_t i = 0; i < tensors.size(); i++) {
    check_tensor(op, nth("tensors", i), tensors[i]);
    wires.push_back(reduce_wire(op, tensors[i], opts.reduceOp, &rop));
    outs.emplace_back(tensors[i], true);
  }
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLREDUCE_COALESCED, tensors);
  /* One braid group, whose calls run at once, when no two buffers share
   * a byte; else (the same tensor twice, overlapping views) one call after
   * the other, as the list says. Every rank decides alike: the tensors
   * are alike on every rank. */
  bool group = !any_overlap(outs);
  x.issue = [outs, wires, rop, group](braid_comm *c) {
    /* One op per dtype (a pre-multiplied sum belongs to one), made before
     * the group and destroyed after it ran. */
    std::map<braid_dtype, std::unique_ptr<CallOp>> bops;
    for (size_t i = 0; i < wires.size(); i++) {
      std::unique_ptr<CallOp> &b = bops[wires[i].dt];
      if (!b) {
        RedOp r = rop;
        r.st = outs[i].user.scalar_type();
        b = std::make_unique<CallOp>(c, r, wires[i].dt);
      }
      if (b->result() != BRAID_SUCCESS)
        return b->result();
    }
    auto all = [&] {
      for (size_t i = 0; i < outs.size(); i++) {
        braid_result r =
            braid_allreduce(outs[i].ptr(), outs[i].ptr(), wires[i].count,
                            wires[i].dt, bops[wires[i].dt]->op(), c, nullptr);
        if (r != BRAID_SUCCESS)
          return r;
      }
      return BRAID_SUCCESS;
    };
    if (group)
      return in_group(all);
    /* One after the other: each tensor read as the ones before it left
     * it, so a non-contiguous one is copied now rather than when issued */
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < outs.size(); i++) {
      const at::Tensor &u = outs[i].user;
      at::Tensor b = u.contiguous();
      braid_result r =
          braid_allreduce(data(b), data(b), wires[i].count, wires[i].dt,
                          bops[wires[i].dt]->op(), c, nullptr);
      if (r != BRAID_SUCCESS)
        return r;
      if (!b.is_same(u))
        u.copy_(b);
    }
    return BRAID_SUCCESS;
  };
  x.post = [outs, group] {
    if (!group)
      return; /* copied back as they went */
    for (const Out &o : outs)
      o.back();
  };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::reduce(std::vector<at::Tensor> &tensors,
                          const c10d::ReduceOptions &opts) {
  const char *op = "reduce";
  check_count(op, "the tensor list", tensors.size(), 1);
  check_root(op, opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "braid: reduce: rootTensor must be 0");
  check_tensor(op, "tensor", tensors[0]);
  RedOp rop;
  Wire w = reduce_wire(op, tensors[0], opts.reduceOp, &rop);
  int root = static_cast<int>(opts.rootRank);
  bool at_root = root == rank_;
  /* Only the root's tensor receives the result; the others' stay as they
   * were (braid reads them only). */
  Out o(tensors[0], true);
  Op x;
  x.name = op;
  x.work = BRAID_OP(REDUCE, tensors);
  x.issue = [o, w, rop, root, at_root](braid_comm *c) {
    CallOp bop(c, rop, w.dt);
    if (bop.result() != BRAID_SUCCESS)
      return bop.result();
    return braid_reduce(o.ptr(), at_root ? o.ptr() : nullptr, w.count, w.dt,
                        bop.op(), root, c, nullptr);
  };
  if (at_root)
    x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs,
                             const c10d::AllgatherOptions & /* opts */) {
  const char *op = "allgather";
  check_count(op, "the input list", inputs.size(), 1);
  check_count(op, "the output list of lists", outputs.size(), 1);
  check_count(op, "the output list", outputs[0].size(), size_);
  const at::Tensor &in = inputs[0];
  check_tensor(op, "input", in);
  check_not_quantized(op, "input", in, "all_gather_into_tensor");
  for (size_t i = 0; i < outputs[0].size(); i++) {
    check_tensor(op, nth("output", i), outputs[0][i]);
    check_like(op, nth("output", i), outputs[0][i], in, in.numel());
  }
  Wire w = move_wire(in);
  In src(in);
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  std::vector<at::Tensor> outs = outputs[0];
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLGATHER, outs);
  x.issue = [src, flat, w](braid_comm *c) {
    return braid_allgather(src.ptr(), data(flat), w.count, w.dt, c, nullptr);
  };
  x.post = [flat, outs] {
    for (size_t i = 0; i < outs.size(); i++)
      outs[i].copy_(
          block(flat, static_cast<int64_t>(i) * outs[i].numel(), outs[i]));
  };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::_allgather_base(at::Tensor &output, at::Tensor &input,
                                   const c10d::AllgatherOptions & /* opts */) {
  const char *op = "_allgather_base";
  check_tensor(op, "input", input);
  check_tensor(op, "output", output);
  check_like(op, "output", output, input, input.numel() * size_);
  Wire w = move_wire(input);
  Out o(output);
  /* In place when the input is the output's block of this rank. */
  In src(input);
  Op x;
  x.name = op;
  x.work = BRAID_OP(_ALLGATHER_BASE, std::vector<at::Tensor>{output});
  x.issue = [src, o, w](braid_comm *c) {
    return braid_allgather(src.ptr(), o.ptr(), w.count, w.dt, c, nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputs,
    std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions & /* opts */) {
  const char *op = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "braid: ", op, ": the input list is empty");
  check_count(op, "the output list of lists", outputs.size(), size_);
  std::vector<In> srcs;
  std::vector<at::Tensor> flats;
  std::vector<Wire> wires;
  for (size_t j = 0; j < inputs.size(); j++) {
    check_tensor(op, nth("input", j), inputs[j]);
    check_not_quantized(op, nth("input", j), inputs[j],
                        "all_gather_into_tensor on each");
    wires.push_back(move_wire(inputs[j]));
    srcs.emplace_back(inputs[j]);
    flats.push_back(
        at::empty({inputs[j].numel() * size_}, inputs[j].options()));
  }
  std::vector<at::Tensor> all;
  for (size_t r = 0; r < outputs.size(); r++) {
    check_count(op, nth("output", r).c_str(), outputs[r].size(), inputs.size());
    for (size_t j = 0; j < inputs.size(); j++) {
      std::string what = nth("output", r) + "[" + std::to_string(j) + "]";
      check_tensor(op, what, outputs[r][j]);
      check_like(op, what, outputs[r][j], inputs[j], inputs[j].numel());
      all.push_back(outputs[r][j]);
    }
  }
  std::vector<std::vector<at::Tensor>> outs = outputs;
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLGATHER_COALESCED, all);
  /* One braid group: the outputs are buffers of their own. */
  x.issue = [srcs, flats, wires](braid_comm *c) {
    return in_group([&] {
      for (size_t j = 0; j < srcs.size(); j++) {
        braid_result r =
            braid_allgather(srcs[j].ptr(), data(flats[j]), wires[j].count,
                            wires[j].dt, c, nullptr);
        if (r != BRAID_SUCCESS)
          return r;
      }
      return BRAID_SUCCESS;
    });
  };
  x.post = [flats, outs] {
    for (size_t r = 0; r < outs.size(); r++)
      for (size_t j = 0; j < outs[r].size(); j++)
        outs[r][j].copy_(block(flats[j],
                               static_cast<int64_t>(r) * outs[r][j].numel(),
                               outs[r][j]));
  };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>> &outputs,
                          std::vector<at::Tensor> &inputs,
                          const c10d::GatherOptions &opts) {
  const char *op = "gather";
  check_root(op, opts.rootRank, size_);
  check_count(op, "the input list", inputs.size(), 1);
  const at::Tensor &in = inputs[0];
  check_tensor(op, "input", in);
  check_not_quantized(op, "input", in, "a send and receive per rank");
  int root = static_cast<int>(opts.rootRank);
  bool at_root = root == rank_;
  std::vector<at::Tensor> outs;
  if (at_root) {
    check_count(op, "the output list of lists (at the root)", outputs.size(),
                1);
    check_count(op, "the output list", outputs[0].size(), size_);
    for (size_t i = 0; i < outputs[0].size(); i++) {
      check_tensor(op, nth("output", i), outputs[0][i]);
      check_like(op, nth("output", i), outputs[0][i], in, in.numel());
    }
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "braid: gather: only the root (rank ", root,
                ") passes output tensors");
  }
  Wire w = move_wire(in);
  In src(in);
  at::Tensor flat =
      at_root ? at::empty({in.numel() * size_}, in.options()) : at::Tensor();
  Op x;
  x.name = op;
  x.work = BRAID_OP(GATHER, outs);
  x.issue = [src, flat, w, root, at_root](braid_comm *c) {
    return braid_gather(src.ptr(), at_root ? data(flat) : nullptr, w.count,
                        w.dt, root, c, nullptr);
  };
  if (at_root)
    x.post = [flat, outs] {
      for (size_t i = 0; i < outs.size(); i++)
        outs[i].copy_(
            block(flat, static_cast<int64_t>(i) * outs[i].numel(), outs[i]));
    };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::scatter(std::vector<at::Tensor> &outputs,
                           std::vector<std::vector<at::Tensor>> &inputs,
                           const c10d::ScatterOptions &opts) {
  const char *op = "scatter";
  check_root(op, opts.rootRank, size_);
  check_count(op, "the output list", outputs.size(), 1);
  const at::Tensor &out = outputs[0];
  check_tensor(op, "output", out);
  int root = static_cast<int>(opts.rootRank);
  bool at_root = root == rank_;
  In flat;
  if (at_root) {
    check_count(op, "the input list of lists (at the root)", inputs.size(), 1);
    check_count(op, "the input list", inputs[0].size(), size_);
    for (size_t i = 0; i < inputs[0].size(); i++) {
      check_tensor(op, nth("input", i), inputs[0][i]);
      check_like(op, nth("input", i), inputs[0][i], out, out.numel());
    }
    flat = In(inputs[0], out);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "braid: scatter: only the root (rank ", root,
                ") passes input tensors");
  }
  Wire w = move_wire(out);
  Out o(out);
  Op x;
  x.name = op;
  x.work = BRAID_OP(SCATTER, outputs);
  x.issue = [flat, o, w, root, at_root](braid_comm *c) {
    return braid_scatter(at_root ? flat.ptr() : nullptr, o.ptr(), w.count, w.dt,
                         root, c, nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor> &outputs,
                                  std::vector<std::vector<at::Tensor>> &inputs,
                                  const c10d::ReduceScatterOptions &opts) {
  const char *op = "reduce_scatter";
  check_count(op, "the output list", outputs.size(), 1);
  check_count(op, "the input list of lists", inputs.size(), 1);
  check_count(op, "the input list", inputs[0].size(), size_);
  const at::Tensor &out = outputs[0];
  check_tensor(op, "output", out);
  for (size_t i = 0; i < inputs[0].size(); i++) {
    check_tensor(op, nth("input", i), inputs[0][i]);
    check_like(op, nth("input", i), inputs[0][i], out, out.numel());
  }
  RedOp rop;
  Wire w = reduce_wire(op, out, opts.reduceOp, &rop);
  In flat(inputs[0], out);
  Out o(out);
  Op x;
  x.name = op;
  x.work = BRAID_OP(REDUCE_SCATTER, outputs);
  x.issue = [flat, o, w, rop](braid_comm *c) {
    CallOp bop(c, rop, w.dt);
    if (bop.result() != BRAID_SUCCESS)
      return bop.result();
    return braid_reduce_scatter(flat.ptr(), o.ptr(), w.count, w.dt, bop.op(), c,
                                nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input,
    const c10d::ReduceScatterOptions &opts) {
  const char *op = "_reduce_scatter_base";
  check_tensor(op, "input", input);
  check_tensor(op, "output", output);
  check_like(op, "input", input, output, output.numel() * size_);
  RedOp rop;
  Wire w = reduce_wire(op, output, opts.reduceOp, &rop);
  In src(input);
  Out o(output);
  Op x;
  x.name = op;
  x.work = BRAID_OP(_REDUCE_SCATTER_BASE, std::vector<at::Tensor>{output});
  x.issue = [src, o, w, rop](braid_comm *c) {
    CallOp bop(c, rop, w.dt);
    if (bop.result() != BRAID_SUCCESS)
      return bop.result();
    return braid_reduce_scatter(src.ptr(), o.ptr(), w.count, w.dt, bop.op(), c,
                                nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::alltoall_base(at::Tensor &output, at::Tensor &input,
                                 std::vector<int64_t> &output_splits,
                                 std::vector<int64_t> &input_splits,
                                 const c10d::AllToAllOptions & /* opts */) {
  const char *op = "alltoall_base";
  check_tensor(op, "input", input);
  check_tensor(op, "output", output);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid: ", op,
              ": output has dtype ", output.scalar_type(), ", the input ",
              input.scalar_type());
  Wire w = move_wire(input);
  In src(input);
  Out o(output);
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLTOALL_BASE, std::vector<at::Tensor>{output});
  /* An input in the output's memory goes from a copy (made when the call
   * runs), but for exactly the output with equal splits (braid_alltoall's
   * in-place form): braid_alltoallv has no in-place form, and other
   * overlaps are refused by both */
  bool uneven = !output_splits.empty() || !input_splits.empty();
  bool in_place = !uneven && input.is_contiguous() && output.is_contiguous() &&
                  input.data_ptr() == output.data_ptr();
  src.copy = output.numel() > 0 && input.numel() > 0 && !in_place &&
             input.storage().is_alias_of(output.storage());
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK(input.numel() % size_ == 0, "braid: ", op, ": the input's ",
                input.numel(), " elements do not split into ", size_,
                " equal blocks");
    TORCH_CHECK(output.numel() == input.numel(), "braid: ", op, ": output has ",
                output.numel(), " elements, the input ", input.numel(),
                " (equal splits)");
    size_t count = w.count / static_cast<size_t>(size_);
    x.issue = [src, o, count, w](braid_comm *c) {
      return braid_alltoall(src.ptr(), o.ptr(), count, w.dt, c, nullptr);
    };
  } else {
    Counts sc = split_counts(op, "input", input, input_splits, size_, w);
    Counts rc = split_counts(op, "output", output, output_splits, size_, w);
    TORCH_CHECK(
        sc.counts[rank_] == rc.counts[rank_], "braid: ", op, ": this rank (",
        rank_, ") sends itself ", sc.counts[rank_] / w.per,
        " elements (input_split_sizes) "
        "and receives ",
        rc.counts[rank_] / w.per, " (output_split_sizes): the two must agree");
    x.issue = [src, o, sc, rc, w](braid_comm *c) {
      return braid_alltoallv(src.ptr(), sc.counts.data(), sc.displs.data(),
                             o.ptr(), rc.counts.data(), rc.displs.data(), w.dt,
                             c, nullptr);
    };
  }
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::alltoall(std::vector<at::Tensor> &outputs,
                            std::vector<at::Tensor> &inputs,
                            const c10d::AllToAllOptions & /* opts */) {
  const char *op = "alltoall";
  check_count(op, "the input list", inputs.size(), size_);
  check_count(op, "the output list", outputs.size(), size_);
  for (size_t i = 0; i < inputs.size(); i++) {
    check_tensor(op, nth("input", i), inputs[i]);
    check_tensor(op, nth("output", i), outputs[i]);
    check_like(op, nth("input", i), inputs[i], inputs[0], inputs[i].numel());
    check_like(op, nth("output", i), outputs[i], inputs[0], outputs[i].numel());
  }
  check_not_quantized(op, "input 0", inputs[0], "all_to_all_single");
  /* the block to itself: only this rank can see it differ, so it is
   * refused here, before the peers are involved */
  TORCH_CHECK(outputs[rank_].numel() == inputs[rank_].numel(), "braid: ", op,
              ": output ", rank_, " has ", outputs[rank_].numel(),
              " elements and input ", rank_, " ", inputs[rank_].numel(),
              ": the block a rank sends itself must fit what it receives");
  Wire w = move_wire(inputs[0]);
  Counts sc = list_counts(inputs, w);
  Counts rc = list_counts(outputs, w);
  In src(inputs, inputs[0]);
  int64_t total = 0;
  for (const at::Tensor &t : outputs)
    total += t.numel();
  at::Tensor flat = at::empty({total}, inputs[0].options());
  std::vector<at::Tensor> outs = outputs;
  Op x;
  x.name = op;
  x.work = BRAID_OP(ALLTOALL, outs);
  x.issue = [src, flat, sc, rc, w](braid_comm *c) {
    return braid_alltoallv(src.ptr(), sc.counts.data(), sc.displs.data(),
                           data(flat), rc.counts.data(), rc.displs.data(), w.dt,
                           c, nullptr);
  };
  x.post = [flat, outs] {
    int64_t off = 0;
    for (const at::Tensor &t : outs) {
      t.copy_(block(flat, off, t));
      off += t.numel();
    }
  };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::send(std::vector<at::Tensor> &tensors, int dst,
                        int /* tag */) {
  const char *op = "send";
  check_count(op, "the tensor list", tensors.size(), 1);
  check_tensor(op, "tensor", tensors[0]);
  TORCH_CHECK(dst >= 0 && dst < size_, "braid: send: destination rank ", dst,
              " is not a rank of the group (0..", size_ - 1, ")");
  Wire w = move_wire(tensors[0]);
  In src(tensors[0]);
  Op x;
  x.name = op;
  x.p2p = true;
  x.work = BRAID_OP(SEND, tensors);
  x.issue = [src, w, dst](braid_comm *c) {
    return braid_send(src.ptr(), w.count, w.dt, dst, c, nullptr);
  };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::recv(std::vector<at::Tensor> &tensors, int src,
                        int /* tag */) {
  const char *op = "recv";
  check_count(op, "the tensor list", tensors.size(), 1);
  check_tensor(op, "tensor", tensors[0]);
  TORCH_CHECK(src >= 0 && src < size_, "braid: recv: source rank ", src,
              " is not a rank of the group (0..", size_ - 1, ")");
  Wire w = move_wire(tensors[0]);
  Out o(tensors[0]);
  Op x;
  x.name = op;
  x.p2p = true;
  x.work = BRAID_OP(RECV, tensors, src);
  x.issue = [o, w, src](braid_comm *c) {
    return braid_recv(o.ptr(), w.count, w.dt, src, c, nullptr);
  };
  x.post = [o] { o.back(); };
  return enqueue(std::move(x));
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::recvAnysource(std::vector<at::Tensor> & /* tensors */,
                                 int /* tag */) {
  TORCH_CHECK(false, "braid: recv from any source (recvAnysource) is not "
                     "supported: braid has no wildcard receive; pass src");
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::barrier(const c10d::BarrierOptions & /* opts */) {
  Op x;
  x.name = "barrier";
  x.work = BRAID_OP(BARRIER, std::vector<at::Tensor>{});
  x.issue = [](braid_comm *c) { return braid_barrier(c, nullptr); };
  return enqueue(std::move(x));
}

#undef BRAID_OP

} // namespace braid_torch
