/*
 * ProcessGroupBraid: torch.distributed's c10d::ProcessGroup over braid.h.
 *
 * Every operation checks its arguments in the calling thread (a bad one
 * throws there, and nothing is queued), then queues a closure on the
 * group's runner (runner.h) and returns a WorkBraid at once. The runner
 * runs the closures in issue order with braid's blocking calls (a
 * communicator takes calls from one thread at a time), in its worker
 * thread or in the thread that waits for the operation, and completes
 * each Work and its future: with the output tensors, or with the error
 * braid reported.
 */
#ifndef BRAID_TORCH_PROCESS_GROUP_H
#define BRAID_TORCH_PROCESS_GROUP_H

#include "runner.h"

#include <braid.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace braid_torch {

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

  int timeout_ms_ = 0;
  std::string name_;
  std::shared_ptr<Runner> runner_; /* owns the communicator */

  std::mutex mutex_;
  bool coalescing_ = false;
  std::vector<Op> batch_; /* operations issued while coalescing */
};

} // namespace braid_torch

#endif
