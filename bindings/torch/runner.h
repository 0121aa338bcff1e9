/*
 * The group's runner: the queue of operations, the worker thread that runs
 * them, and a waiting caller's share of the work.
 *
 * Operations run in issue order, one batch at a time (a communicator takes
 * calls from one thread at a time), by whichever thread comes first:
 *  - the worker thread, so that an operation nobody waits for
 *    (async_op=True, DDP's buckets, a future's .then chain) progresses on
 *    its own. Waking it costs the issuing thread a system call and, on a
 *    machine with few cores, a core the ranks want (dist.all_reduce of 8
 *    bytes took 6 to 30 us with a wake-up per call, 3 us without): so
 *    while operations come often (a push in the last kRunnerHot) the
 *    worker naps instead of sleeping, and a push leaves it to find the
 *    batch when it wakes, unless a waiter has run it by then. A nap that
 *    finds nothing doubles the next, from kRunnerNap up to kRunnerNapMax
 *    (a nap wakes the worker on a core a rank wants: a blocking 1 MiB
 *    broadcast took 83 to 96 us with 200 us naps, 68 to 72 us with a
 *    wake-up per push); one that finds a batch nobody ran goes back to
 *    kRunnerNap. So an operation nobody looks at starts within
 *    kRunnerNapMax; getFuture(), isCompleted() and a wait with a timeout
 *    wake the worker at once (DDP takes every bucket's future as it
 *    issues it). After kRunnerHot without a push it sleeps until the next
 *    push wakes it;
 *  - a thread in Work::wait() without a timeout: while its operation is
 *    queued and nobody runs, it runs the batches up to its own itself
 *    (dist.all_reduce(t) is allreduce() then wait(): the call then costs no
 *    hand-off to the worker and back, two thread wake-ups). When another
 *    thread runs, the waiter polls with sched_yield for BRAID_YIELD_US
 *    (default 2000 us, as braid's own waits) before it sleeps.
 *
 * An operation completes in two parts. Its Work is done (wait() returns,
 * isCompleted() is true) as soon as its batch has run, in issue order.
 * Its future completes after, outside the run, so that the future's
 * callbacks may issue operations on this group and wait for them
 * (DDP's PowerSGD hook waits on a second all_reduce inside the first
 * one's callback): the futures of the batches that have run go through
 * one queue, and one thread at a time (the one that ran the batch, if
 * nobody else is at it) completes them, so callbacks too run in issue
 * order. Two things keep a callback that waits from waiting forever:
 *  - the future of an operation issued from inside a callback (its
 *    getFuture() called there) completes at once when its batch has run,
 *    ahead of the queue that the waiting callback holds up;
 *  - while the worker thread is inside callbacks, a spare thread runs the
 *    queued batches (another if that one is inside callbacks too), made
 *    the first time one is needed;
 *  - a callback that has run for kCallbackStall holds up the queue no
 *    longer: the worker, a spare, or the next thread that runs a batch
 *    completes the futures waiting behind it (a callback may wait on a
 *    future taken before it began).
 */
#ifndef BRAID_TORCH_RUNNER_H
#define BRAID_TORCH_RUNNER_H

#include <braid.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace braid_torch {

class Runner;

/* One operation's handle: wait(), isCompleted(), exception(), result() and
 * getFuture() concern this operation only. */
class WorkBraid : public c10d::Work {
public:
  WorkBraid(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
            int source_rank = -1);
  ~WorkBraid() override;

  /* Without a timeout: runs the group's queued operations up to this one
   * in the calling thread when nobody else runs them, polls a while when
   * someone does, then blocks. With one: blocks, as torch's Work does. */
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  int sourceRank() const override;

  /* Not done yet: wakes the worker (Runner::kick) so that it runs now. */
  bool isCompleted() override;

  /* Marks the work done (e == nullptr) or failed; called once, by the
   * thread that ran the operation. */
  void finishRun(const std::exception_ptr &e);
  /* Completes the future (its callbacks run here) with the outcome
   * finishRun recorded, unless that was done already: returns at once
   * then. */
  void completeFuture();

  /* Set once the work is complete (after torch's own flag). */
  bool done() const { return done_.load(std::memory_order_acquire); }

private:
  friend class Runner;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;                /* set by finishRun */
  std::atomic<bool> future_claimed_{false}; /* completeFuture began */
  std::atomic<bool> urgent_{false};         /* its future was asked for inside a
                                               callback: complete it at once */
  std::weak_ptr<Runner> runner_;            /* set when queued */
};

/* One operation as it runs: issue() makes braid's calls (inside
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

/* braid_group_start ... braid_group_end around `body`, ended whatever
 * body returned (groups nest: an operation of a coalesced batch may make
 * its own). */
template <typename F> braid_result in_group(F body) {
  braid_result r = braid_group_start();
  if (r != BRAID_SUCCESS)
    return r;
  r = body();
  braid_result e = braid_group_end();
  return r != BRAID_SUCCESS ? r : e;
}

/* The worker's naps while operations come often: the first, and the
 * longest (each nap that finds nothing to run doubles the next; one that
 * runs a batch goes back to the first), and how long after the last push
 * it keeps napping (runner.h's top comment). */
constexpr std::chrono::microseconds kRunnerNap{200};
constexpr std::chrono::microseconds kRunnerNapMax{5000};
constexpr std::chrono::milliseconds kRunnerHot{20};
/* How long a future's callbacks may hold up the futures after it. */
constexpr std::chrono::milliseconds kCallbackStall{20};

class Runner : public std::enable_shared_from_this<Runner> {
public:
  /* Takes the communicator; the worker starts with start(). */
  Runner(braid_comm *comm, int timeout_ms);
  ~Runner();
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;

  void start();
  /* Queues a batch (run as one, in issue order after those before it) and
   * wakes the worker if it sleeps. */
  void push(std::vector<Op> batch);
  /* Someone looks for a result without running it: wakes the worker when
   * it naps or sleeps with batches queued and nobody running them. */
  void kick();
  /* The waiting side of WorkBraid::wait: returns once `w` is done, or once
   * it is worth blocking (someone else runs and the polling budget is
   * spent, or w is not queued). */
  void help(const WorkBraid &w);
  /* Runs what is queued, stops the worker, waits for a waiter that runs a
   * batch, then destroys the communicator (locally: no peer is waited
   * for). Called once, by the group's destructor. */
  void stop();

  /* 1 if the calling thread is inside callbacks of this group's futures
   * (completeFutures). */
  bool inCallbacks() const;

private:
  void worker();
  void spare();
  /* Pops the front batch and runs it with `lk` released, then completes
   * the futures that are due (completeFutures); lk held on entry and on
   * return. */
  void runFront(std::unique_lock<std::mutex> &lk);
  void runBatch(std::vector<Op> &batch);
  /* Completes the futures of the batches that have run, in issue order,
   * unless another thread is at it; lk held on entry and on return. */
  void completeFutures(std::unique_lock<std::mutex> &lk);
  /* Pops the oldest batch that has run and completes its futures; lk held
   * on entry and on return. */
  void completeFront(std::unique_lock<std::mutex> &lk);
  /* Under the lock: wakes or makes a spare thread when the worker is
   * inside callbacks, batches or futures wait, and no spare is at work. */
  void spareIfNeeded();
  /* Runs fn (which completes futures) with lk released, counted as this
   * thread being inside callbacks. */
  template <typename F>
  void runCallbacks(std::unique_lock<std::mutex> &lk, F fn);
  /* When the thread completing futures has been in one batch's callbacks
   * for kCallbackStall: completes the futures queued behind it here. */
  void takeOverIfStalled(std::unique_lock<std::mutex> &lk);
  /* 1 if futures wait behind a thread in callbacks (then a sleeper
   * should look again within kCallbackStall). */
  bool futuresWait() const { return completing_ && !ran_.empty(); }
  /* Joins t, letting a Python callback in it have the GIL meanwhile. */
  static void join(std::thread &t);

  braid_comm *comm_;
  int timeout_ms_;
  std::chrono::microseconds poll_;

  std::mutex mutex_;
  std::condition_variable cv_; /* the worker sleeps here */
  std::deque<std::vector<Op>> queue_;
  bool running_ = false; /* a thread runs a batch */
  bool asleep_ = false;  /* the worker sleeps on cv_ until woken */
  bool napping_ = false; /* the worker naps on cv_ for nap_ */
  std::chrono::microseconds nap_{kRunnerNap};
  std::chrono::steady_clock::time_point last_push_{};
  bool stop_ = false;
  std::thread thread_;

  /* the futures of the batches that have run, to complete in order */
  std::deque<std::vector<c10::intrusive_ptr<WorkBraid>>> ran_;
  bool completing_ = false; /* a thread completes them */
  /* when that thread began its current batch's callbacks */
  std::chrono::steady_clock::time_point completing_since_{};
  int worker_in_callbacks_ = 0;
  /* the spare threads: those running batches (or about to), those
   * waiting for a turn, and the turns given */
  std::vector<std::thread> spares_;
  int spares_active_ = 0, spares_idle_ = 0, spare_turns_ = 0;
  std::condition_variable spare_cv_;
};

} // namespace braid_torch

#endif
