// Executor: the per-communicator queue of operations, run by the engine's progress thread in
// issue order. A collective runs alone, after everything issued before it (so it may consume
// the previous operation's output, and collectives complete in issue order); point-to-point
// operations issued back to back run together. It owns the communicator's sticky error: once
// set, every running, queued and future Work fails with it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/coll/schedule.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

class SharedWindow;

class Executor : public ucx::Client {
 public:
  Executor(ucx::Engine* engine, uint32_t comm_id, std::vector<int> members, int rank,
           std::string name, std::chrono::milliseconds timeout);

  // Which sequence numbers an op consumes. kLocal runs where a collective would (after
  // everything before it, before everything after) but sends nothing, so that a step only
  // some ranks take (freeing memory) leaves the collectives' numbering the same on every rank.
  enum class Order { kCollective, kSend, kRecv, kLocal };

  // Caller threads.
  std::shared_ptr<Work> submit(std::unique_ptr<Op> op, Order order, int peer = -1);
  void abort(const std::string& reason);  // fails everything (running ops once drained); returns at once
  void close();                           // the communicator is gone
  void keep_alive(std::shared_ptr<void> buffers);  // until nothing drains (Communicator)
  void set_timeout(std::chrono::milliseconds t) { timeout_ms_.store(t.count()); }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }
  Status error(std::string* message, int* culprit) const;

  // Progress thread (an op's step): the communicator's shared window, whose regions this
  // executor releases once the communicator is closed and nothing runs.
  void set_window(std::shared_ptr<SharedWindow> window);

  // Progress thread (ucx::Client).
  ucx::PollResult poll(Clock::time_point now) override;
  void on_failure(uint32_t comm, int culprit, Status status, const std::string& why) override;
  void on_suspect(uint32_t comm, int reporter, int culprit) override;
  bool finished() const override;
  void release_ucx_resources() override;

 private:
  void start_ready_ops();
  void retire(size_t index);
  bool advance(Op& op, Clock::time_point now);
  bool advance_chain(Op& op, size_t index, Clock::time_point now);
  void start_stage(Op& op, size_t index);
  bool check_stage(Op& op, Stage& stage);
  void check_deadline(Clock::time_point now);
  int waiting_for() const;  // comm rank the running op waits for (a receive first), or -1
  // Comm rank of a peer that said goodbye at least kLeftGrace ago (or timeout(), if shorter)
  // which a running op (set in *op), stalled as long, still waits for; or -1.
  int waiting_for_left(Clock::time_point now, const Op** op) const;
  static constexpr std::chrono::milliseconds kLeftGrace{2000};
  void cancel_transfers(Op& op);
  // Records the sticky error (first one wins) and fails every queued Work; running ones fail
  // in poll() once drained. Any thread.
  bool set_error(Status status, const std::string& message, int culprit_world);
  // set_error for a failure of this rank's own (abort, an operation that threw): its peers,
  // which would otherwise wait for it until their deadline, are told on the progress thread.
  void give_up(Status status, const std::string& message);
  int comm_rank_of(int world) const;

  ucx::Engine* engine_;
  const uint32_t comm_id_;
  const std::vector<int> members_;  // comm rank -> world rank
  const int rank_;
  const std::string name_;
  std::atomic<int64_t> timeout_ms_;

  mutable std::mutex mutex_;
  std::deque<std::unique_ptr<Op>> queue_;
  uint32_t next_seq_ = 0;
  std::vector<uint32_t> send_seq_, recv_seq_;
  Status status_ = Status::kOk;
  std::string message_;
  int culprit_ = -1;  // world rank blamed for the failure
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};

  // Progress thread only.
  std::atomic<bool> report_abort_{false};  // tell peers on the progress thread
  // Running ops: one collective, or any number of point-to-point ops (which do not wait for
  // each other, so that receives posted before sends cannot deadlock a ring).
  std::vector<std::unique_ptr<Op>> active_;
  std::vector<std::unique_ptr<Op>> draining_;  // failed ops whose transfers are being cancelled
  std::vector<std::shared_ptr<void>> kept_;     // guarded by mutex_: freed once draining_ empties
  std::atomic<bool> has_kept_{false};          // kept_ is not empty (poll looks without the lock)
  Clock::time_point last_progress_{};
  bool progressed_ = false;  // a stage finished during this poll
  std::shared_ptr<SharedWindow> window_;  // set before use; released here (poll)
  // A stalled operation first tells the others whom it waits for and listens for a grace
  // period, so that every rank can follow the chain of waits to the rank that is really stuck.
  bool suspecting_ = false;
  Clock::time_point verdict_at_{};
  std::vector<int> waits_for_;  // world rank -> world rank it reported waiting for, or -1
  bool asked_ = false;          // another rank reported waiting for this one
  Clock::time_point answered_for_{};  // the stall (last_progress_) last answered
};

}  // namespace cohort::transport::coll
