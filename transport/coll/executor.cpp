// Executor: runs a communicator's schedules on the progress thread, in issue order, with a
// no-progress deadline, and turns transfer errors, peer deaths and peers' reports into the
// communicator's sticky error.
#include "transport/coll/executor.h"

#include <algorithm>

#include "transport/coll/shared_window.h"
#include "transport/ucx/tag.h"
#include "transport/ucx/ucx_status.h"

namespace cohort::transport::coll {

namespace {
// Whether `op` needs other ranks (a local step, such as deallocate's, does not) and its Work is
// still pending. Reads only what submit() fixed and the Work: safe from the caller's thread
// under the executor's mutex (the progress thread builds some ops' chains as they start).
bool unfinished_with_peers(const Op& op) {
  return !op.local && op.work && op.work->status() == Status::kInvalidState;
}
}  // namespace

Executor::Executor(ucx::Engine* engine, uint32_t comm_id, std::vector<int> members, int rank,
                   std::string name, std::chrono::milliseconds timeout)
    : engine_(engine),
      comm_id_(comm_id),
      members_(std::move(members)),
      rank_(rank),
      name_(std::move(name)),
      timeout_ms_(timeout.count()),
      send_seq_(members_.size(), 0),
      recv_seq_(members_.size(), 0) {}

std::shared_ptr<Work> Executor::submit(std::unique_ptr<Op> op, Order order, int peer) {
  auto work = std::make_shared<Work>(str_cat(name_, ": ", op->name));
  work->count_blocked_callers_in(engine_->blocked_callers());
  op->work = work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != Status::kOk) {
      work->fail(status_, message_);
      return work;
    }
    if (order == Order::kCollective) op->seq = next_seq_++;
    if (order == Order::kSend) op->seq = send_seq_[peer]++;
    if (order == Order::kRecv) op->seq = recv_seq_[peer]++;
    op->p2p = order == Order::kSend || order == Order::kRecv;
    op->local = order == Order::kLocal;
    queue_.push_back(std::move(op));
  }
  engine_->wake();
  return work;
}

bool Executor::set_error(Status status, const std::string& message, int culprit_world) {
  std::deque<std::unique_ptr<Op>> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != Status::kOk) return false;
    status_ = status;
    message_ = message;
    culprit_ = culprit_world;
    failed_.store(true);
    queued.swap(queue_);
  }
  // Running operations fail on the progress thread once their transfers are drained (poll), so
  // that a caller woken by the failure may free the buffers.
  for (auto& op : queued) op->work->fail(status, message);
  engine_->wake();
  return true;
}

void Executor::give_up(Status status, const std::string& message) {
  if (set_error(status, message, -1)) report_abort_.store(true);
  engine_->wake();
}

void Executor::abort(const std::string& reason) {
  give_up(Status::kInvalidState, str_cat(name_, ": aborted: ", reason));
}

void Executor::close() {
  closed_.store(true);
  // Destroyed with an operation that needs its peers unfinished (the owner is leaving on an
  // error): the peers inside that operation would wait for this rank until their deadline, so
  // they are told, as by abort(). A communicator destroyed idle tells nobody: at the end of a
  // run the peers may not have destroyed theirs yet.
  std::string unfinished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& op : active_)
      if (unfinished.empty() && unfinished_with_peers(*op)) unfinished = op->name;
    for (const auto& op : queue_)
      if (unfinished.empty() && unfinished_with_peers(*op)) unfinished = op->name;
  }
  if (unfinished.empty()) {
    set_error(Status::kInvalidState, str_cat(name_, ": communicator destroyed"), -1);
  } else {
    give_up(Status::kInvalidState,
            str_cat(name_, ": communicator destroyed (its rank left) with ", unfinished, " unfinished"));
  }
}

void Executor::keep_alive(std::shared_ptr<void> buffers) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.push_back(std::move(buffers));
    has_kept_.store(true, std::memory_order_release);
  }
  engine_->wake();  // poll() lets go of them once nothing drains
}

Status Executor::error(std::string* message, int* culprit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (message) *message = message_;
  if (culprit) *culprit = culprit_ >= 0 ? comm_rank_of(culprit_) : -1;
  return status_;
}

int Executor::comm_rank_of(int world) const {
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i] == world) return static_cast<int>(i);
  return -1;
}

void Executor::on_failure(uint32_t comm, int culprit, Status status, const std::string& why) {
  if (comm != ucx::kAnyComm && comm != comm_id_) return;
  int r = comm_rank_of(culprit);
  if (r < 0 || (r == rank_ && comm == ucx::kAnyComm)) return;
  set_error(status, str_cat(name_, ": rank ", r, " (world rank ", culprit, ") lost: ", why),
            culprit);
}

bool Executor::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // (An abort not yet reported keeps the executor: its peers must still hear of it.)
  return closed_.load() && active_.empty() && draining_.empty() && queue_.empty() && !window_ &&
         !report_abort_.load();
}

void Executor::cancel_transfers(Op& op) {
  for (size_t i = op.first_live; i < op.started; ++i) {
    Chain& ch = op.chains[i];
    if (ch.done) continue;
    for (Xfer& x : ch.stages[ch.next].xfers) engine_->cancel(&x.transfer);
  }
}

namespace {
bool has_transfers_in_flight(const Op& op) {
  for (size_t i = op.first_live; i < op.started; ++i) {
    const Chain& ch = op.chains[i];
    if (ch.done) continue;
    for (const Xfer& x : ch.stages[ch.next].xfers)
      if (x.transfer.in_flight()) return true;
  }
  return false;
}
}  // namespace

// A collective starts once everything before it has finished (it may read their output); a
// point-to-point op starts once the collectives before it have.
void Executor::start_ready_ops() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!queue_.empty()) {
    bool collective_running = std::any_of(active_.begin(), active_.end(),
                                          [](const std::unique_ptr<Op>& op) { return !op->p2p; });
    if (queue_.front()->p2p ? collective_running : !active_.empty()) break;
    active_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

void Executor::retire(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(index));
}

ucx::PollResult Executor::poll(Clock::time_point now) {
  progressed_ = false;
  if (report_abort_.exchange(false)) {
    // The peers prefix it with this communicator and rank: send the reason alone (the report
    // holds a few hundred bytes).
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      why = message_.rfind(name_ + ": ", 0) == 0 ? message_.substr(name_.size() + 2) : message_;
    }
    engine_->report_failure(comm_id_, members_[rank_], Status::kPeerFailed, why);
  }
  if (!failed_.load()) start_ready_ops();
  for (size_t i = 0; i < active_.size() && !failed_.load();) {
    Op& op = *active_[i];
    bool done = false;
    try {
      done = advance(op, now);
    } catch (const Error& e) {
      give_up(e.status(), str_cat(name_, ": ", op.name, ": ", e.what()));
    } catch (const std::exception& e) {
      give_up(Status::kInternal, str_cat(name_, ": ", op.name, ": ", e.what()));
    }
    if (!done) {
      ++i;
      continue;
    }
    op.work->finish();
    retire(i);
    if (!failed_.load()) start_ready_ops();
  }
  if (failed_.load() && !active_.empty()) {
    // Receives are cancelled; sends to live peers complete or fail with them. A transfer with a
    // dead peer over shared memory may never complete: past a grace period the Work fails
    // anyway (that peer writes nothing more) and the op drains until the communicator goes.
    const auto grace = std::min(timeout(), std::chrono::milliseconds(2000));
    for (auto& op : active_) {
      cancel_transfers(*op);
      op->drain_deadline = now + grace;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& op : active_) draining_.push_back(std::move(op));
    active_.clear();
  }
  if (!draining_.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < draining_.size();) {
      Op& op = *draining_[i];
      bool drained = !has_transfers_in_flight(op);
      if (drained || now >= op.drain_deadline) op.work->fail(status_, message_);
      if (drained) {
        draining_.erase(draining_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  std::vector<std::shared_ptr<void>> release;
  if (has_kept_.load(std::memory_order_acquire) && draining_.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    release.swap(kept_);
    has_kept_.store(false, std::memory_order_release);
  }
  if (!active_.empty()) check_deadline(now);
  if (window_ && closed_.load() && active_.empty() && draining_.empty()) {
    // Nothing can use the shared regions any more (queued operations failed when the
    // communicator closed); peers that still map them keep their own mappings.
    release_ucx_resources();
  }
  ucx::PollResult result;
  result.busy = !active_.empty() || !draining_.empty();
  result.progressed = progressed_;
  for (auto& op : active_) result.memory_waits |= op->memory;
  return result;
}

void Executor::set_window(std::shared_ptr<SharedWindow> window) { window_ = std::move(window); }

void Executor::release_ucx_resources() {
  if (!window_) return;
  window_->release();
  window_.reset();
}

bool Executor::advance(Op& op, Clock::time_point now) {
  if (!op.begun) {
    op.begun = true;
    last_progress_ = now;
    if (op.start) op.start();
  }
  bool progressed = true;
  while (progressed && !failed_.load()) {
    progressed = false;
    while (op.started < op.chains.size() && op.started < op.first_live + op.window) {
      size_t i = op.started++;
      progressed = true;
      if (op.chains[i].stages.empty()) {
        op.chains[i].done = true;
        ++op.completed;
      } else {
        start_stage(op, i);
      }
    }
    for (size_t i = op.first_live; i < op.started && !failed_.load(); ++i)
      progressed |= advance_chain(op, i, now);
    while (op.first_live < op.started && op.chains[op.first_live].done) ++op.first_live;
  }
  if (failed_.load() || op.completed < op.chains.size()) return false;
  if (op.finish) op.finish();
  return true;
}

bool Executor::advance_chain(Op& op, size_t index, Clock::time_point now) {
  Chain& ch = op.chains[index];
  bool moved = false;
  while (!ch.done && ch.pending == 0) {
    Stage& stage = ch.stages[ch.next];
    if (!check_stage(op, stage)) return false;
    if (stage.gate && stage.gate() >= 0) return moved;
    if (stage.after) stage.after();
    moved = true;
    progressed_ = true;
    last_progress_ = now;
    if (++ch.next == ch.stages.size()) {
      ch.done = true;
      ++op.completed;
    } else {
      start_stage(op, index);
    }
  }
  return moved;
}

void Executor::start_stage(Op& op, size_t index) {
  Chain& ch = op.chains[index];
  Stage& stage = ch.stages[ch.next];
  const uint32_t me = static_cast<uint32_t>(members_[rank_]);
  ch.pending = 0;
  for (Xfer& x : stage.xfers) {
    x.transfer.counter = &ch.pending;
    ++ch.pending;
    uint32_t sub = ucx::message_index(static_cast<uint32_t>(index), x.step);
    int world = members_[x.peer];
    if (x.send) {
      engine_->send(world, x.buf, x.bytes, ucx::make_tag(comm_id_, me, op.p2p, op.seq, sub),
                    &x.transfer);
    } else {
      engine_->recv(world, x.buf, x.bytes,
                    ucx::make_tag(comm_id_, static_cast<uint32_t>(world), op.p2p, op.seq, sub),
                    &x.transfer);
    }
  }
}

bool Executor::check_stage(Op& op, Stage& stage) {
  for (Xfer& x : stage.xfers) {
    if (x.transfer.status == UCS_OK) continue;
    int world = members_[x.peer];
    // A transfer to or from one peer that fails means that peer is gone, unless the message
    // itself was wrong (a size mismatch: the ranks issued different collectives).
    Status status = x.transfer.status == UCS_ERR_MESSAGE_TRUNCATED ? Status::kInvalidState
                                                                    : Status::kPeerFailed;
    std::string why = str_cat(name_, ": ", op.name, ": ", x.send ? "send to" : "receive from",
                              " rank ", x.peer, " (world rank ", world, ") failed: ",
                              ucs_status_string(x.transfer.status));
    if (set_error(status, why, world)) engine_->report_failure(comm_id_, world, status, why);
    return false;
  }
  return true;
}

void Executor::on_suspect(uint32_t comm, int reporter, int culprit) {
  if (comm != comm_id_ || reporter < 0) return;
  if (waits_for_.empty()) waits_for_.assign(static_cast<size_t>(engine_->size()), -1);
  if (static_cast<size_t>(reporter) < waits_for_.size()) waits_for_[reporter] = culprit;
  if (culprit == members_[rank_]) asked_ = true;
}

int Executor::waiting_for() const {
  int waiting_for = -1;
  for (auto& running : active_) {
    for (size_t i = running->first_live; i < running->started && waiting_for < 0; ++i) {
      const Chain& ch = running->chains[i];
      if (ch.done) continue;
      const Stage& stage = ch.stages[ch.next];
      for (const Xfer& x : stage.xfers) {
        if (x.transfer.in_flight() && (waiting_for < 0 || !x.send)) waiting_for = x.peer;
      }
      if (waiting_for < 0 && ch.pending == 0 && stage.gate) waiting_for = stage.gate();
    }
  }
  return waiting_for;
}

int Executor::waiting_for_left(Clock::time_point now, const Op** op) const {
  const auto grace = std::min<std::chrono::milliseconds>(timeout(), kLeftGrace);
  if (now - last_progress_ < grace) return -1;
  auto gone = [&](int peer) {
    const int world = members_[peer];
    return engine_->peer_left(world) && now - engine_->left_at(world) >= grace;
  };
  for (auto& running : active_) {
    for (size_t i = running->first_live; i < running->started; ++i) {
      const Chain& ch = running->chains[i];
      if (ch.done) continue;
      const Stage& stage = ch.stages[ch.next];
      *op = running.get();
      for (const Xfer& x : stage.xfers)
        if (x.transfer.in_flight() && gone(x.peer)) return x.peer;
      if (ch.pending == 0 && stage.gate) {
        const int peer = stage.gate();
        if (peer >= 0 && gone(peer)) return peer;
      }
    }
  }
  return -1;
}

void Executor::check_deadline(Clock::time_point now) {
  auto limit = timeout();
  if (engine_->peers_left() > 0) {
    // A rank that said goodbye posts nothing more, and all it had sent arrived before its
    // goodbye: an operation that still waits for it a grace period later never completes.
    const Op* op = nullptr;
    const int left = waiting_for_left(now, &op);
    if (left >= 0) {
      const int world = members_[left];
      std::string why = str_cat(name_, ": ", op->name, ": rank ", left, " (world rank ", world,
                                ") left the job (said goodbye) while this operation waits for it");
      if (!engine_->left_after(world).empty()) why += str_cat("; it had heard: ", engine_->left_after(world));
      if (set_error(Status::kPeerFailed, why, world))
        engine_->report_failure(comm_id_, world, Status::kPeerFailed, why);
      return;
    }
  }
  const auto grace = std::min<std::chrono::milliseconds>(limit / 4, std::chrono::milliseconds(1000));
  if (asked_ && now - last_progress_ >= grace && answered_for_ != last_progress_) {
    // Another rank suspects this one: if this one is stalled too, say at once whom it waits
    // for, so that rank follows the chain further instead of blaming a rank whose own
    // deadline has simply not come yet.
    asked_ = false;
    answered_for_ = last_progress_;
    int peer = waiting_for();
    if (peer >= 0) engine_->report_suspect(comm_id_, members_[peer]);
  }
  if (now - last_progress_ < limit) {
    suspecting_ = false;
    return;
  }
  Op& op = *active_.front();
  int waiting_for = this->waiting_for();
  int world = waiting_for >= 0 ? members_[waiting_for] : -1;
  if (!suspecting_) {
    suspecting_ = true;
    verdict_at_ = now + grace;
    if (world >= 0) engine_->report_suspect(comm_id_, world);
    return;
  }
  if (now < verdict_at_) return;
  // Follow the chain of waits: the rank at its end waits for nobody, so it is the stuck one.
  int stuck = world;
  for (size_t hops = 0; stuck >= 0 && static_cast<size_t>(stuck) < waits_for_.size() &&
                        waits_for_[stuck] >= 0 && hops < waits_for_.size(); ++hops) {
    stuck = waits_for_[stuck];
  }
  if (stuck == members_[rank_]) stuck = world;  // a cycle back to us: blame whom we wait for
  int stuck_rank = stuck >= 0 ? comm_rank_of(stuck) : -1;
  Status status = stuck >= 0 && engine_->peer_dead(stuck) ? Status::kPeerFailed : Status::kTimeout;
  std::string why = str_cat(name_, ": ", op.name, ": no progress for ", limit.count(),
                            " ms; rank ", stuck_rank, " (world rank ", stuck, ") is not responding");
  if (stuck != world) why += str_cat(" (this rank waits for rank ", waiting_for, ")");
  if (set_error(status, why, stuck)) engine_->report_failure(comm_id_, stuck, status, why);
}

}  // namespace cohort::transport::coll
