/*
 * ProcessGroupBraid: torch.distributed's c10d::ProcessGroup over braid.h.
 *
 * Every operation checks its arguments in the calling thread (a bad one
 * throws there, and nothing is queued), then queues a closure on the
 * group's worker thread and returns a WorkBraid at once. The worker runs
 * the closures in issue order with braid's blocking calls (a communicator
 * takes calls from one thread at a time) and completes each Work and its
 * future: with the output tensors, or with the error braid reported.
 */
#ifndef BRAID_TORCH_PROCESS_GROUP_H
#define BRAID_TORCH_PROCESS_GROUP_H

#include <braid.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid_torch {

/* One operation's handle: wait(), isCompleted(), exception(), result() and
 * getFuture() concern this operation only. */
class WorkBraid : public c10d::Work {
public:
  WorkBraid(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
            int source_rank = -1);
  ~WorkBraid() override;

  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  int sourceRank() const override;

  /* Marks the work done (e == nullptr) or failed, then completes the
   * future; called once, by the worker thread. */
  void complete(const std::exception_ptr &e);

private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_;
};

/* One operation as the worker runs it: issue() makes braid's calls (inside
 * braid_group_start/end when the operation is part of a coalesced batch),
 * then, once they all succeeded, post() copies results where the caller
 * wants them. */
struct Op {
  const char *name = "";
  bool p2p = false; /* a send or a receive */
  c10::intrusive_ptr<WorkBraid> work;
  std::function<braid_result(braid_comm *)> issue;
  std::function<void()> post;
};

class ProcessGroupBraid : public c10d::ProcessGroup {
public:
  /* Collective over the group's members: rank 0 makes braid's unique id and
   * publishes it in `store`, the others read it there; `timeout` becomes the
   * communicator's timeout. */
  ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                    int size, std::chrono::milliseconds timeout);
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }

  void startCoalescing() override;
  void
  endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>> &reqs) override;

  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor> &tensors,
            const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor> &tensors,
            const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  reduce(std::vector<at::Tensor> &tensors,
         const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allgather(std::vector<std::vector<at::Tensor>> &outputs,
            std::vector<at::Tensor> &inputs,
            const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor &output, at::Tensor &input,
                  const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                      std::vector<at::Tensor> &inputs,
                      const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  gather(std::vector<std::vector<at::Tensor>> &outputs,
         std::vector<at::Tensor> &inputs,
         const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  scatter(std::vector<at::Tensor> &outputs,
          std::vector<std::vector<at::Tensor>> &inputs,
          const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter(std::vector<at::Tensor> &outputs,
                 std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                       const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  alltoall_base(at::Tensor &output, at::Tensor &input,
                std::vector<int64_t> &output_splits,
                std::vector<int64_t> &input_splits,
                const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
           const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work>
  barrier(const c10d::BarrierOptions &opts) override;

  /* The communicator's timeout in milliseconds. */
  int timeoutMs() const { return timeout_ms_; }

private:
  c10::intrusive_ptr<c10d::Work> enqueue(Op op);
  void worker();
  void runBatch(std::vector<Op> &batch);

  braid_comm *comm_ = nullptr;
  int timeout_ms_ = 0;
  std::string name_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::vector<Op>> queue_;
  bool stop_ = false;
  bool coalescing_ = false;
  std::vector<Op> batch_; /* operations issued while coalescing */
  std::thread thread_;

  /* Set by the worker after an error that leaves the communicator unusable
   * (a peer gone, a timeout): later operations fail at once with it. */
  std::string broken_;
};

} // namespace braid_torch

#endif
