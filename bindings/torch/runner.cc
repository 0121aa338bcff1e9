/*
 * The group's runner (runner.h): the queue, the worker thread, the waiter
 * that runs its own operation, and WorkBraid.
 */
#include "runner.h"

#include <Python.h>

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace braid_torch {

namespace {

/* Future values are lists of tensors, as DDP's communication hooks want
 * (one type for all: making it is an allocation per operation). */
c10::intrusive_ptr<c10::ivalue::Future> make_future() {
  static const c10::TypePtr list =
      c10::ListType::create(c10::TensorType::get());
  return c10::make_intrusive<c10::ivalue::Future>(list);
}

/* A result of braid as the exception the Work carries. A timeout says
 * "Timed out", as torch's own backends do (tools match on it). */
std::exception_ptr braid_error(const char *what, braid_result r,
                               braid_comm *comm, int timeout_ms) {
  std::string why = r == BRAID_ERR_TIMEOUT
                        ? "Timed out (the group's timeout is " +
                              std::to_string(timeout_ms) + " ms)"
                        : std::string(braid_result_string(r));
  std::string msg = std::string("braid: ") + what + " failed: " + why + ": " +
                    braid_comm_last_error(comm);
  return std::make_exception_ptr(std::runtime_error(msg));
}

/* How long a waiter polls while another thread runs its operation:
 * BRAID_YIELD_US, the budget of braid's own yielding waits (0 to 1 s,
 * default 2000 us). */
std::chrono::microseconds poll_budget() {
  long us = 2000;
  const char *s = std::getenv("BRAID_YIELD_US");
  if (s != nullptr && *s != '\0') {
    char *end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && v >= 0 && v <= 1000000)
      us = v;
  }
  return std::chrono::microseconds(us);
}

/* The group whose worker or spare this thread is, and the group whose
 * futures' callbacks it is running now (nullptr: none). */
thread_local const Runner *tl_worker_of = nullptr;
thread_local const Runner *tl_spare_of = nullptr;
thread_local const Runner *tl_callbacks_of = nullptr;

} // namespace

/* ---- WorkBraid ------------------------------------------------------ */

WorkBraid::WorkBraid(int rank, c10d::OpType type,
                     std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(make_future()), source_rank_(source_rank) {}

WorkBraid::~WorkBraid() = default;

bool WorkBraid::wait(std::chrono::milliseconds timeout) {
  std::shared_ptr<Runner> r = runner_.lock();
  if (!done()) {
    if (r && timeout == ::kNoTimeout)
      r->help(*this);
    else if (r)
      r->kick(); /* blocks below: the worker runs it */
  }
  bool ok = c10d::Work::wait(timeout);
  /* Done; its future may still be queued behind earlier callbacks: a
   * caller that waited reads get_future().value() next. Not inside this
   * group's callbacks, which that queue may be waiting for. */
  if (timeout == ::kNoTimeout && !(r && r->inCallbacks()))
    future_->wait();
  return ok;
}

bool WorkBraid::isCompleted() {
  if (!done()) {
    std::shared_ptr<Runner> r = runner_.lock();
    if (r)
      r->kick();
  }
  return c10d::Work::isCompleted();
}

std::vector<at::Tensor> WorkBraid::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> WorkBraid::getFuture() {
  std::shared_ptr<Runner> r = runner_.lock();
  if (r && r->inCallbacks() && !future_claimed_.load()) {
    /* asked for inside a callback, which may wait on it: its completion
     * must not queue behind that callback */
    urgent_.store(true);
    if (done())
      completeFuture();
  }
  if (!done() && r) /* whoever waits on the future does not run it */
    r->kick();
  return future_;
}

int WorkBraid::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0,
              "braid: sourceRank() is only defined for a receive");
  return source_rank_;
}

void WorkBraid::finishRun(const std::exception_ptr &e) {
  error_ = e;
  finish(e);
  done_.store(true);
}

void WorkBraid::completeFuture() {
  if (future_claimed_.exchange(true))
    return;
  /* The future's callbacks (DDP's hooks, .then chains) run here; one that
   * throws fails its own child future, not this. */
  try {
    if (error_)
      future_->setError(error_);
    else
      future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {
  }
}

/* ---- Runner ----------------------------------------------------------- */

Runner::Runner(braid_comm *comm, int timeout_ms)
    : comm_(comm), timeout_ms_(timeout_ms), poll_(poll_budget()) {}

Runner::~Runner() = default;

void Runner::start() {
  thread_ = std::thread([this] { worker(); });
}

void Runner::push(std::vector<Op> batch) {
  std::shared_ptr<Runner> self = shared_from_this();
  for (Op &op : batch)
    op.work->runner_ = self;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    queue_.push_back(std::move(batch));
    last_push_ = std::chrono::steady_clock::now();
    /* A thread that runs a batch wakes the worker when it is done; a
     * napping worker finds the batch when it wakes. */
    if (asleep_ && !running_) {
      asleep_ = false;
      wake = true;
    }
    spareIfNeeded(); /* the worker may be inside callbacks */
  }
  if (wake)
    cv_.notify_one();
}

void Runner::kick() {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if ((asleep_ || napping_) && !running_ && !queue_.empty()) {
      asleep_ = napping_ = false;
      wake = true;
    }
    spareIfNeeded();
  }
  if (wake)
    cv_.notify_one();
}

void Runner::help(const WorkBraid &w) {
  using clock = std::chrono::steady_clock;
  clock::time_point until = clock::now() + poll_;
  std::unique_lock<std::mutex> lk(mutex_);
  while (!w.done()) {
    if (!running_ && !queue_.empty()) {
      /* Nobody runs: the front batch is w's or one issued before it. */
      runFront(lk);
      continue;
    }
    if (!running_)
      return; /* w is not queued (a coalesced batch not ended yet) */
    lk.unlock();
    /* Another thread runs: poll a while (its end is a store we see at
     * once), then block on the Work. */
    while (!w.done() && clock::now() < until)
      sched_yield();
    if (w.done() || clock::now() >= until)
      return;
    lk.lock();
  }
}

bool Runner::inCallbacks() const { return tl_callbacks_of == this; }

template <typename F>
void Runner::runCallbacks(std::unique_lock<std::mutex> &lk, F fn) {
  bool worker = tl_worker_of == this, spare = tl_spare_of == this;
  worker_in_callbacks_ += worker;
  spares_active_ -= spare;
  spareIfNeeded();
  const Runner *was = tl_callbacks_of;
  tl_callbacks_of = this;
  lk.unlock();
  fn();
  lk.lock();
  tl_callbacks_of = was;
  worker_in_callbacks_ -= worker;
  spares_active_ += spare;
}

void Runner::completeFutures(std::unique_lock<std::mutex> &lk) {
  if (completing_) { /* in order, by the thread at it */
    spareIfNeeded(); /* which may be the worker, waiting on them */
    return takeOverIfStalled(lk);
  }
  completing_ = true;
  while (!ran_.empty()) {
    completing_since_ = std::chrono::steady_clock::now();
    completeFront(lk);
  }
  completing_ = false;
}

void Runner::completeFront(std::unique_lock<std::mutex> &lk) {
  std::vector<c10::intrusive_ptr<WorkBraid>> works = std::move(ran_.front());
  ran_.pop_front();
  runCallbacks(lk, [&] {
    for (auto &w : works)
      w->completeFuture();
    works.clear();
  });
}

void Runner::takeOverIfStalled(std::unique_lock<std::mutex> &lk) {
  while (futuresWait() &&
         std::chrono::steady_clock::now() - completing_since_ >= kCallbackStall)
    completeFront(lk);
}

void Runner::spareIfNeeded() {
  bool waiting = (!running_ && !queue_.empty()) || futuresWait();
  if (worker_in_callbacks_ == 0 || spares_active_ > 0 || !waiting || stop_)
    return;
  spares_active_++; /* counted now: the next check makes no second */
  if (spares_idle_ > spare_turns_) {
    spare_turns_++;
    spare_cv_.notify_one();
  } else {
    spares_.emplace_back([this] { spare(); });
  }
}

void Runner::spare() {
  tl_spare_of = this;
  std::unique_lock<std::mutex> lk(mutex_);
  for (;;) {
    /* at work (counted in spares_active_) while the worker is in
     * callbacks */
    while (worker_in_callbacks_ > 0 && !stop_) {
      if (!running_ && !queue_.empty()) {
        runFront(lk);
      } else if (futuresWait()) {
        spare_cv_.wait_for(lk, kCallbackStall);
        takeOverIfStalled(lk);
      } else {
        break;
      }
    }
    spares_active_--;
    if (stop_)
      return;
    spares_idle_++;
    spare_cv_.wait(lk, [&] { return spare_turns_ > 0 || stop_; });
    spares_idle_--;
    if (spare_turns_ == 0)
      return; /* stopping */
    spare_turns_--;
  }
}

void Runner::runFront(std::unique_lock<std::mutex> &lk) {
  std::vector<Op> batch = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lk.unlock();
  runBatch(batch); /* the works are done, in issue order */
  std::vector<c10::intrusive_ptr<WorkBraid>> works;
  works.reserve(batch.size());
  for (Op &op : batch)
    works.push_back(op.work);
  batch.clear(); /* the closures' tensors go now, outside the lock */
  lk.lock();
  running_ = false;
  if ((asleep_ || napping_) && (!queue_.empty() || stop_)) {
    asleep_ = napping_ = false;
    cv_.notify_one();
  }
  /* Futures asked for inside a callback first, then the rest in order. */
  bool urgent = false;
  for (auto &w : works)
    urgent = urgent || w->urgent_.load();
  if (urgent)
    runCallbacks(lk, [&] {
      for (auto &w : works)
        if (w->urgent_.load())
          w->completeFuture();
    });
  ran_.push_back(std::move(works));
  completeFutures(lk);
}

void Runner::worker() {
  tl_worker_of = this;
  std::unique_lock<std::mutex> lk(mutex_);
  bool napped = false; /* this pass follows a nap that ran out */
  for (;;) {
    if (!running_ && !queue_.empty()) {
      if (napped)
        nap_ = kRunnerNap; /* nobody ran it: look often again */
      napped = false;
      runFront(lk);
      continue;
    }
    if (napped)
      nap_ = std::min(nap_ * 2, kRunnerNapMax);
    napped = false;
    if (stop_ && !running_)
      return; /* and the queue is empty */
    if (std::chrono::steady_clock::now() - last_push_ < kRunnerHot) {
      napping_ = true;
      napped = cv_.wait_for(lk, nap_) == std::cv_status::timeout;
      napping_ = false;
    } else if (futuresWait()) { /* behind a callback: look again */
      asleep_ = true;
      cv_.wait_for(lk, kCallbackStall);
      asleep_ = false;
    } else {
      asleep_ = true;
      cv_.wait(lk);
      asleep_ = false;
    }
    takeOverIfStalled(lk);
  }
}

void Runner::join(std::thread &t) {
  if (!t.joinable())
    return;
  /* The thread may be completing a future whose Python callback wants
   * the GIL: let it have it while we wait. */
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState *st = PyEval_SaveThread();
    t.join();
    PyEval_RestoreThread(st);
  } else {
    t.join();
  }
}

void Runner::stop() {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    stop_ = true;
    asleep_ = false;
  }
  cv_.notify_one();
  spare_cv_.notify_all();
  join(thread_);
  std::vector<std::thread> spares;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    spares.swap(spares_); /* none is made once stop_ is set */
  }
  for (std::thread &t : spares)
    join(t);
  /* The worker left with the queue empty and nobody running; no batch
   * comes after (the group is going). Local: never waits for the peers (a
   * finalize would, for the whole timeout if one of them is gone). */
  if (comm_ != nullptr)
    braid_comm_destroy(comm_);
  comm_ = nullptr;
}

void Runner::runBatch(std::vector<Op> &batch) {
  std::exception_ptr err;
  try {
    braid_result r = BRAID_SUCCESS;
    const char *failed = batch.front().name;
    bool p2p = true;
    for (const Op &op : batch)
      p2p = p2p && op.p2p;
    if (batch.size() == 1 || !p2p) {
      /* One operation, or a batch with collectives in it: in issue order,
       * one after the other, as every rank issues them. */
      for (Op &op : batch) {
        r = op.issue(comm_);
        if (r != BRAID_SUCCESS) {
          failed = op.name;
          break;
        }
      }
    } else {
      /* A coalesced batch of sends and receives (batch_isend_irecv): one
       * braid group, so that they run together and cannot deadlock. */
      r = in_group([&] {
        for (Op &op : batch) {
          braid_result e = op.issue(comm_);
          if (e != BRAID_SUCCESS) {
            failed = op.name;
            return e;
          }
        }
        return BRAID_SUCCESS;
      });
    }
    if (r != BRAID_SUCCESS) {
      err = braid_error(failed, r, comm_, timeout_ms_);
    } else {
      at::NoGradGuard no_grad;
      for (Op &op : batch)
        if (op.post)
          op.post();
    }
  } catch (...) {
    err = std::current_exception();
  }
  for (Op &op : batch)
    op.work->finishRun(err);
}

} // namespace braid_torch
