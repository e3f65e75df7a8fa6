// Work: the handle of one asynchronous operation. The progress thread finishes or fails it; any
// thread may test or wait. After a failure the Work carries the communicator's sticky error.
// A failed Work is reported only after its transfers are cancelled or complete, so the caller
// may free its buffers then. The exception is a transfer with the rank blamed for the failure
// that UCX cannot cancel (a send to a frozen or dead rank over shared memory): the Work fails
// after a grace period of min(timeout, 2 s) regardless, and that buffer must stay valid until
// the communicator is destroyed, since a frozen rank that wakes up may still read it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/error.h"

namespace cohort::transport::coll {

class Work {
 public:
  explicit Work(std::string what) : what_(std::move(what)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once finished; throws the failure (cohort::Error) if it failed. Never blocks.
  bool test();
  // Blocks until finished; throws on failure. The communicator's timeout bounds the wait: a
  // stalled operation fails with kTimeout or kPeerFailed.
  void wait();
  // Like wait(), but throws Status::kTimeout if still pending after `timeout` (the operation
  // itself continues; waiting again is allowed).
  void wait(std::chrono::milliseconds timeout);
  // Non-throwing: kOk when finished, the failure status, or kInvalidState while pending.
  Status status() const;
  std::string error_message() const;
  const std::string& what() const { return what_; }

  // Producer side (the communicator). The first outcome wins.
  void finish();
  void fail(Status status, const std::string& message);
  // Runs `hook` once, on the thread that first tests or waits for this Work, before it looks at
  // the state (NCCL launches held sends and receives there). Set before handing the Work out.
  void set_before_first_wait(std::function<void()> hook) { before_first_wait_ = std::move(hook); }
  // While a thread blocks in wait() on this Work, `counter` is one higher (the UCX engine's
  // count of callers blocked on its operations: ucx::Engine::blocked_callers). Set before
  // handing the Work out.
  void count_blocked_callers_in(std::shared_ptr<std::atomic<int>> counter) { blocked_callers_ = std::move(counter); }

 private:
  void throw_if_failed() const;  // requires mutex_
  void run_before_first_wait();

  std::function<void()> before_first_wait_;
  std::once_flag before_first_wait_once_;
  std::shared_ptr<std::atomic<int>> blocked_callers_;

  const std::string what_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_ = Status::kOk;
  std::string message_;
};

// While one lives on a thread, that thread's waits are not counted as blocked callers
// (Work::count_blocked_callers_in): the engine's progress thread waits as it does beside a rank's
// compute, instead of polling on the caller's core. The communication probe measures the
// processor time a message takes from a computing stage this way (core/parallel/comm_probe.cpp).
class WaitsAsIfComputing {
 public:
  WaitsAsIfComputing();
  ~WaitsAsIfComputing();
  WaitsAsIfComputing(const WaitsAsIfComputing&) = delete;
  WaitsAsIfComputing& operator=(const WaitsAsIfComputing&) = delete;
  static bool active();  // on this thread
};

// Waits for every Work of `works` (null ones skipped), then throws the first failure among them,
// if any: a caller whose buffers several operations use may free them once this returns or throws.
void wait_all(const std::vector<std::shared_ptr<Work>>& works);

}  // namespace cohort::transport::coll
