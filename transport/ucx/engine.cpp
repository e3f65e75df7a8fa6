// Engine runtime: tagged transfers, the progress loop, failure dispatch and control messages.
// Runs on the progress thread only (except attach/wake, which are thread-safe).
#include "transport/ucx/engine.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/base/log.h"
#include "transport/ucx/ucx_status.h"

namespace cohort::transport::ucx {

namespace {

void complete(Transfer* t, ucs_status_t status) noexcept {
  if (t->done) return;
  t->done = true;
  t->status = status;
  t->request = nullptr;
  if (t->counter) --*t->counter;
}

void on_send_done(void* request, ucs_status_t status, void* user) noexcept {
  complete(static_cast<Transfer*>(user), status);
  ucp_request_free(request);
}

void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                  void* user) noexcept {
  auto* t = static_cast<Transfer*>(user);
  if (status == UCS_OK && info && info->length != t->bytes) status = UCS_ERR_MESSAGE_TRUNCATED;
  complete(t, status);
  ucp_request_free(request);
}

// Starts tracking `t`; a NULL request means the operation completed at once (no callback).
void track(Transfer* t, ucs_status_ptr_t request) noexcept {
  if (request == nullptr) {
    complete(t, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    complete(t, UCS_PTR_STATUS(request));
  } else if (!t->done) {
    t->request = request;
  }
}

}  // namespace

Engine::Engine(int rank, int size, EngineOptions options)
    : rank_(rank), size_(size), options_(std::move(options)) {}

void Engine::attach(std::shared_ptr<Client> client) {
  {
    std::lock_guard<std::mutex> lock(clients_mutex_);
    new_clients_.push_back(std::move(client));
  }
  wake();
}

void Engine::wake() {
  posts_.fetch_add(1, std::memory_order_seq_cst);
  if (wake_fd_ < 0 || !sleeping_.load(std::memory_order_seq_cst)) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void Engine::reserve_comm_ids(uint32_t end) {
  uint32_t cur = next_comm_id_.load();
  while (cur < end && !next_comm_id_.compare_exchange_weak(cur, end)) {
  }
}

void Engine::send(int peer, const void* buf, size_t bytes, uint64_t tag, Transfer* t) {
  *t = Transfer{nullptr, peer, bytes, true, false, UCS_OK, t->counter};
  if (dead_[peer] || !eps_[peer]) return complete(t, UCS_ERR_CONNECTION_RESET);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_done;
  param.user_data = t;
  track(t, ucp_tag_send_nbx(eps_[peer], buf, bytes, tag, &param));
}

void Engine::recv(int peer, void* buf, size_t bytes, uint64_t tag, Transfer* t) {
  *t = Transfer{nullptr, peer, bytes, true, false, UCS_OK, t->counter};
  if (peer >= 0 && dead_[peer]) return complete(t, UCS_ERR_CONNECTION_RESET);
  ucp_request_param_t param{};  // no RECV_INFO: completion always goes through the callback
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv = on_recv_done;
  param.user_data = t;
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, buf, bytes, tag, kMatchAll, &param);
  track(t, request);
}

void Engine::cancel(Transfer* t) {
  if (t->in_flight() && t->request) ucp_request_cancel(worker_, t->request);
}

void Engine::report_failure(uint32_t comm, int culprit, Status status, const std::string& why) {
  const bool abort = culprit == rank_;
  if (culprit >= 0 && culprit < size_ && !abort) blamed_[culprit] = 1;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !dead_[peer] && !left_[peer]) {  // a silent culprit learns it too
      send_control(peer, abort ? kControlAbort : kControlFailure, comm, culprit, status, why);
    }
  }
}

void Engine::report_suspect(uint32_t comm, int culprit) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !dead_[peer] && !left_[peer])
      send_control(peer, kControlSuspect, comm, culprit, Status::kTimeout, str_cat(rank_));
  }
}

void Engine::send_control(int peer, uint32_t kind, uint32_t comm, int culprit, Status status,
                          const std::string& why) noexcept {
  control_out_.emplace_back();
  ControlSend& out = control_out_.back();
  out.msg.kind = kind;
  out.msg.comm = comm;
  out.msg.culprit = culprit;
  out.msg.status = static_cast<int32_t>(status);
  std::strncpy(out.msg.text, why.c_str(), sizeof(out.msg.text) - 1);
  send(peer, &out.msg, sizeof(out.msg), make_tag(kControlComm, rank_, false, 0, 0), &out.transfer);
}

void Engine::post_control_recv() noexcept {
  control_recv_.counter = nullptr;
  control_recv_ = Transfer{nullptr, -1, sizeof(ControlMsg), true, false, UCS_OK, nullptr};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv = on_recv_done;
  param.user_data = &control_recv_;
  track(&control_recv_, ucp_tag_recv_nbx(worker_, control_in_.get(), sizeof(ControlMsg),
                                         make_tag(kControlComm, 0, false, 0, 0), kMatchComm,
                                         &param));
}

void Engine::handle_control() noexcept {
  control_out_.remove_if([](const ControlSend& s) { return s.transfer.done; });
  while (control_recv_.done) {
    if (control_recv_.status != UCS_OK) return;  // cancelled at shutdown
    ControlMsg msg = *control_in_;
    msg.text[sizeof(msg.text) - 1] = 0;
    post_control_recv();
    if (msg.kind == kControlSuspect && msg.culprit >= 0 && msg.culprit < size_) {
      int reporter = std::atoi(msg.text);
      for (auto& client : clients_) client->on_suspect(msg.comm, reporter, msg.culprit);
    } else if (msg.kind == kControlGoodbye && msg.culprit >= 0 && msg.culprit < size_) {
      if (!left_[msg.culprit]) {
        left_[msg.culprit] = 1;
        left_at_[msg.culprit] = Clock::now();
        left_after_[msg.culprit] = msg.text;
        ++peers_left_;
      }
    } else if ((msg.kind == kControlFailure || msg.kind == kControlAbort) && msg.culprit >= 0 &&
               msg.culprit < size_) {
      if (msg.kind == kControlFailure) {  // an abort comes from a live rank: still awaited at shutdown
        if (msg.comm == kAnyComm) dead_[msg.culprit] = 1;
        blamed_[msg.culprit] = 1;
      }
      dispatch(msg.comm, msg.culprit, static_cast<Status>(msg.status), msg.text);
    }
  }
}

void Engine::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) noexcept {
  auto* slot = static_cast<EpSlot*>(arg);
  std::lock_guard<std::mutex> lock(slot->engine->ep_errors_mutex_);
  slot->engine->ep_errors_.emplace_back(slot->peer, status);
}

void Engine::handle_ep_errors() noexcept {
  std::vector<std::pair<int, ucs_status_t>> errors;
  {
    std::lock_guard<std::mutex> lock(ep_errors_mutex_);
    errors.swap(ep_errors_);
  }
  for (auto [peer, status] : errors)
    mark_dead(peer, str_cat("rank ", peer, " failed: ", ucs_status_string(status)));
}

void Engine::mark_dead(int peer, const std::string& why) noexcept {
  if (dead_[peer]) return;
  dead_[peer] = 1;
  if (peer_failure_detection_ && eps_[peer]) {
    // Without peer error handling (shared memory) a forced close is undefined in UCX: the
    // endpoint stays, unused (send() refuses dead peers), until the engine goes.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(eps_[peer], &param);
    if (req && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
    eps_[peer] = nullptr;
  }
  if (left_[peer]) return;  // it said goodbye: a normal disconnect
  log(LogLevel::kWarn, why);
  dispatch(kAnyComm, peer, Status::kPeerFailed, why);
  report_failure(kAnyComm, peer, Status::kPeerFailed, why);
}

void Engine::check_local_peers(Clock::time_point now) noexcept {
  if (options_.liveness_interval.count() <= 0 || now < next_liveness_check_) return;
  next_liveness_check_ = now + options_.liveness_interval;
  for (int peer = 0; peer < size_; ++peer) {
    if (!local_[peer] || dead_[peer] || left_[peer] || !process_ended(local_peers_[peer])) continue;
    // Its goodbye may sit unread in the worker: a rank that said goodbye and exited is no failure.
    while (ucp_worker_progress(worker_) != 0) {
    }
    handle_control();
    if (left_[peer]) continue;
    mark_dead(peer, str_cat("rank ", peer, " failed: its process (pid ", local_peers_[peer].pid,
                            ") on this host has ended"));
  }
}

bool Engine::lost_peer_without_detection() const noexcept {
  if (peer_failure_detection_) return false;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && (dead_[peer] || blamed_[peer]) && !left_[peer]) return true;
  return false;
}

void Engine::dispatch(uint32_t comm, int culprit, Status status, const std::string& why) noexcept {
  if (failures_.size() < 1024) failures_.push_back(Failure{comm, culprit, status, why});
  for (auto& client : clients_) client->on_failure(comm, culprit, status, why);
}

PollResult Engine::poll_clients(Clock::time_point now) noexcept {
  {
    std::lock_guard<std::mutex> lock(clients_mutex_);
    for (auto& c : new_clients_) {
      for (auto& f : failures_) c->on_failure(f.comm, f.culprit, f.status, f.why);
      clients_.push_back(std::move(c));
    }
    new_clients_.clear();
  }
  PollResult all;
  for (auto& client : clients_) {
    PollResult one = client->poll(now);
    all.busy |= one.busy;
    all.progressed |= one.progressed;
    all.memory_waits |= one.memory_waits;
  }
  clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                [](const std::shared_ptr<Client>& c) { return c->finished(); }),
                 clients_.end());
  return all;
}

// Sleeps until the worker's event fd (when `worker_events`), the wake-up fd, or the timeout.
void Engine::wait_for_events(std::chrono::microseconds timeout, bool worker_events, uint64_t posts_seen) noexcept {
  int fd = wake_fd_;
  if (worker_events && options_.blocking_progress && worker_fd_ >= 0) {
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;
    fd = epoll_fd_;
  }
  sleeping_.store(true, std::memory_order_seq_cst);
  if (posts_.load(std::memory_order_seq_cst) != posts_seen) {  // new work since: no sleep (posts_)
    sleeping_.store(false, std::memory_order_relaxed);
    return;
  }
  pollfd pfd{fd, POLLIN, 0};
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  const int ready = ppoll(&pfd, 1, &ts, nullptr);
  sleeping_.store(false, std::memory_order_relaxed);
  if (ready <= 0) return;
  uint64_t value;
  (void)!::read(wake_fd_, &value, sizeof(value));  // non-blocking; clears a wake-up
}

ProgressWait progress_wait(const ProgressState& s, std::chrono::microseconds spin, const EngineOptions& o) {
  if (!s.busy) return ProgressWait::kIdle;
  if (s.since_event < spin) return ProgressWait::kPoll;
  // The rank's core is free while its caller blocks: look again as soon as nobody else wants it.
  if (s.caller_blocked) return ProgressWait::kYield;
  // A peer's write to shared memory raises no event: give the core to whoever is about to make
  // it (ranks sharing cores), then look again; past memory_spin, nap.
  if (s.memory_waits) return s.since_event < o.memory_spin ? ProgressWait::kYield : ProgressWait::kNap;
  if (s.worker_events) return ProgressWait::kEvent;
  // A shared-memory sender waiting for FIFO space gets no event: nap briefly instead of
  // spinning, so that ranks sharing a core (and the caller's compute) get the CPU.
  return ProgressWait::kNap;
}

std::chrono::microseconds nap_length(const ProgressState& s, const EngineOptions& o) {
  if (!s.ranks_share_cores || o.nap_growth <= 0) return o.busy_nap;
  const auto grown = std::chrono::duration_cast<std::chrono::microseconds>(s.since_event / o.nap_growth);
  return std::clamp(grown, o.busy_nap, std::max(o.busy_nap, o.longest_nap));
}

void Engine::run() noexcept {
  auto last_event = Clock::now();
  for (;;) {
    // Before anything wake() announces is looked at, stop_ included (posts_).
    const uint64_t posts = posts_.load(std::memory_order_seq_cst);
    if (stop_.load(std::memory_order_acquire)) break;
    unsigned events = 0;
    while (ucp_worker_progress(worker_) != 0) ++events;
    handle_ep_errors();
    handle_control();
    auto now = Clock::now();
    check_local_peers(now);
    PollResult polled = poll_clients(now);
    if (events || polled.progressed) last_event = now;
    ProgressState state;
    state.busy = polled.busy;
    state.memory_waits = polled.memory_waits;
    state.since_event = now - last_event;
    state.ranks_share_cores = ranks_share_cores_;
    state.caller_blocked = !ranks_share_cores_ && blocked_callers_->load(std::memory_order_relaxed) > 0;
    state.worker_events = options_.blocking_progress && peer_failure_detection_;
    using std::chrono::microseconds;
    switch (progress_wait(state, spin_, options_)) {
      case ProgressWait::kPoll:
        break;
      case ProgressWait::kYield:
        std::this_thread::yield();
        break;
      case ProgressWait::kNap:
        wait_for_events(nap_length(state, options_), false, posts);
        break;
      case ProgressWait::kEvent:
        wait_for_events(microseconds(1000), true, posts);
        break;
      case ProgressWait::kIdle:
        wait_for_events(microseconds(50000), true, posts);
        break;
    }
  }
}

}  // namespace cohort::transport::ucx
