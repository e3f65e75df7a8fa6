// Work handle: completion state shared between the progress thread and callers.
#include "transport/coll/work.h"

#include <exception>

namespace cohort::transport::coll {

void Work::throw_if_failed() const {
  if (status_ != Status::kOk) throw Error(status_, message_);
}

void Work::run_before_first_wait() {
  if (before_first_wait_) std::call_once(before_first_wait_once_, before_first_wait_);
}

bool Work::test() {
  run_before_first_wait();
  std::lock_guard<std::mutex> lock(mutex_);
  throw_if_failed();
  return done_;
}

namespace {
thread_local int waits_as_if_computing = 0;

// One caller blocked on a Work, counted for as long as it blocks (Work::count_blocked_callers_in).
class BlockedCaller {
 public:
  explicit BlockedCaller(std::atomic<int>* counter)
      : counter_(WaitsAsIfComputing::active() ? nullptr : counter) {
    if (counter_) counter_->fetch_add(1, std::memory_order_relaxed);
  }
  ~BlockedCaller() {
    if (counter_) counter_->fetch_sub(1, std::memory_order_relaxed);
  }
  BlockedCaller(const BlockedCaller&) = delete;
  BlockedCaller& operator=(const BlockedCaller&) = delete;

 private:
  std::atomic<int>* counter_;
};
}  // namespace

WaitsAsIfComputing::WaitsAsIfComputing() { ++waits_as_if_computing; }
WaitsAsIfComputing::~WaitsAsIfComputing() { --waits_as_if_computing; }
bool WaitsAsIfComputing::active() { return waits_as_if_computing > 0; }

void Work::wait() {
  run_before_first_wait();
  std::unique_lock<std::mutex> lock(mutex_);
  BlockedCaller blocked(done_ ? nullptr : blocked_callers_.get());
  cv_.wait(lock, [&] { return done_; });
  throw_if_failed();
}

void Work::wait(std::chrono::milliseconds timeout) {
  run_before_first_wait();
  std::unique_lock<std::mutex> lock(mutex_);
  BlockedCaller blocked(done_ ? nullptr : blocked_callers_.get());
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw Error(Status::kTimeout,
                str_cat(what_, ": still pending after waiting ", timeout.count(), " ms"));
  }
  throw_if_failed();
}

Status Work::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ ? status_ : Status::kInvalidState;
}

std::string Work::error_message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

void Work::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
  }
  cv_.notify_all();
}

void Work::fail(Status status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    status_ = status;
    message_ = message;
  }
  cv_.notify_all();
}

void wait_all(const std::vector<std::shared_ptr<Work>>& works) {
  std::exception_ptr failure;
  for (const std::shared_ptr<Work>& w : works) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
      // The others are still waited for (the transport may be using their buffers); a
      // communicator's error is sticky, so they end quickly.
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cohort::transport::coll
