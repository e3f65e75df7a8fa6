// Engine lifecycle: transport selection (with the one-time cma probe), context and worker
// creation, address exchange through the Store, endpoint creation, and an orderly shutdown in
// which ranks say goodbye so that their disconnects are not mistaken for failures.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "core/base/log.h"
#include "transport/bootstrap/env.h"
#include "transport/ucx/engine.h"
#include "transport/ucx/ucx_status.h"

namespace cohort::transport::ucx {

namespace {

// cma reads a peer's memory with process_vm_readv; containers may deny it (seccomp, ptrace).
bool cma_syscall_allowed() {
  char source = 1, target = 0;
  iovec local{&target, 1}, remote{&source, 1};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != 1) return false;
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (!f) return true;
  int scope = 0;
  bool ok = std::fscanf(f, "%d", &scope) == 1 && scope == 0;
  std::fclose(f);
  return ok;
}

// Whether a context with these transports can create an endpoint (UCX_TLS=cma alone cannot).
bool endpoints_possible(const std::string& tls) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
  ucp_config_modify(config, "TLS", tls.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return false;
  bool ok = false;
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if (ucp_worker_create(context, &wparams, &worker) == UCS_OK) {
    ucp_address_t* address = nullptr;
    size_t length = 0;
    if (ucp_worker_get_address(worker, &address, &length) == UCS_OK) {
      ucp_ep_params_t ep_params{};
      ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep_params.address = address;
      ucp_ep_h ep = nullptr;
      ok = ucp_ep_create(worker, &ep_params, &ep) == UCS_OK;
      if (ok) {
        ucp_request_param_t close{};
        close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        close.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &close);
        while (req && !UCS_PTR_IS_ERR(req) && ucp_request_check_status(req) == UCS_INPROGRESS)
          ucp_worker_progress(worker);
        if (req && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
      }
      ucp_worker_release_address(worker, address);
    }
    ucp_worker_destroy(worker);
  }
  ucp_cleanup(context);
  return ok;
}

// Whether the transport list contains one that reports dead peers in UCX 1.13 (shared memory
// does not; asking for peer error handling over it makes endpoint creation fail noisily).
bool may_detect_failures(const std::string& tls) {
  if (tls == "all" || tls.empty() || tls[0] == '^') return true;
  std::stringstream in(tls);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item != "self" && item != "sm" && item != "shm" && item != "sysv" && item != "posix" &&
        item != "cma" && item != "knem" && item != "xpmem")
      return true;
  }
  return false;
}

std::string without_cma(const std::string& tls) {
  if (tls == "all" || tls.empty()) return "^cma";
  if (tls[0] == '^') return tls + ",cma";
  std::stringstream in(tls);
  std::string item, out;
  while (std::getline(in, item, ',')) {
    if (item == "cma") continue;
    if (item == "sm" || item == "shm") item = "sysv,posix";
    out += (out.empty() ? "" : ",") + item;
  }
  return out.empty() ? "^cma" : out;
}

// Whether the transports named copy every message, so that UCX's rendezvous adds a handshake and
// saves no copy (EngineOptions::eager_copies): tcp among them, or shared memory without cma
// (self, sysv and posix alone, as without_cma leaves it).
bool copies_every_message(const std::string& tls) {
  if (tls.empty() || tls == "all" || tls[0] == '^') return false;
  std::stringstream in(tls);
  std::string item;
  bool tcp = false, copies = true;
  while (std::getline(in, item, ',')) {
    if (item == "tcp") tcp = true;
    else if (item != "self" && item != "sysv" && item != "posix") copies = false;
  }
  return tcp || copies;
}

// The transports to use: the caller's, else UCX_TLS, else shared memory + tcp; cma is probed
// once per process (per transport list) and dropped when it cannot work.
std::string resolve_tls(const std::string& requested) {
  std::string tls = requested;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env && *env ? env : "self,sm,tcp";
  }
  bool mentions_cma = tls == "all" || tls[0] == '^' || tls.find("cma") != std::string::npos ||
                      tls.find("sm") != std::string::npos;
  if (!mentions_cma) return tls;
  static std::mutex mutex;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(tls);
  if (it != cache.end()) return it->second;
  std::string chosen = tls;
  if (!cma_syscall_allowed() || !endpoints_possible(tls)) {
    chosen = without_cma(tls);
    log(LogLevel::kInfo, str_cat("ucx: cma unusable with UCX_TLS=", tls, ", using ", chosen));
  }
  cache[tls] = chosen;
  return chosen;
}

}  // namespace

std::shared_ptr<Engine> Engine::create(std::shared_ptr<Store> store, int rank, int size,
                                       EngineOptions options) {
  COHORT_CHECK(store != nullptr, Status::kInvalidArgument, "ucx::Engine::create: store is null");
  COHORT_CHECK(size >= 1 && size <= kMaxWorldSize, Status::kInvalidArgument,
               "ucx::Engine::create: size ", size, " outside [1, ", kMaxWorldSize, "]");
  COHORT_CHECK(rank >= 0 && rank < size, Status::kInvalidArgument,
               "ucx::Engine::create: rank ", rank, " outside [0, ", size, ")");
  std::shared_ptr<Engine> engine(new Engine(rank, size, std::move(options)));
  engine->setup(*store);
  engine->oversubscribed_ = engine->local_ranks() > usable_cpus();
  engine->ranks_share_cores_ = engine->local_ranks() > std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  using std::chrono::microseconds;
  engine->spin_ = engine->options_.spin.value_or(microseconds(engine->oversubscribed_ ? 0 : 50));
  engine->thread_ = std::thread([e = engine.get()] { e->run(); });
  engine->started_ = true;
  return engine;
}

void Engine::setup(Store& store) {
  dead_.assign(size_, 0);
  left_.assign(size_, 0);
  left_at_.assign(size_, Clock::time_point{});
  left_after_.assign(size_, std::string());
  local_.assign(size_, 0);
  local_peers_.assign(size_, ProcessIdentity{});
  blamed_.assign(size_, 0);
  eps_.assign(size_, nullptr);
  ep_slots_.resize(size_);
  for (int i = 0; i < size_; ++i) ep_slots_[i] = EpSlot{this, i};
  create_context();
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  COHORT_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, Status::kInternal,
               "ucx::Engine: epoll_create1/eventfd failed: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  if (options_.blocking_progress && ucp_worker_get_efd(worker_, &worker_fd_) == UCS_OK) {
    ev.data.fd = worker_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker_fd_, &ev);
  } else {
    options_.blocking_progress = false;
    worker_fd_ = -1;
  }
  connect(store);
  control_in_ = std::make_unique<ControlMsg>();
  post_control_recv();
}

void Engine::create_context() {
  tls_ = resolve_tls(options_.tls);
  if (!may_detect_failures(tls_) && !options_.cma_without_failure_detection &&
      (tls_.find("cma") != std::string::npos || tls_.find("sm") != std::string::npos)) {
    // Without peer error handling a cma read from a dead peer is fatal inside UCX.
    tls_ = without_cma(tls_);
  }
  ucp_config_t* config = nullptr;
  ucs_check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucs_status_t status = ucp_config_modify(config, "TLS", tls_.c_str());
  std::string keepalive = str_cat(options_.keepalive.count(), "ms");
  if (status == UCS_OK) status = ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive.c_str());
  // Each unless the environment names it (`variable`): the user's choice. ucp_config_modify hands
  // names it does not know to the transports' own tables, whose fields carry no prefix
  // (UCX_TCP_RX_SEG_SIZE is the tcp table's RX_SEG_SIZE); no other transport of a host has these.
  auto tune = [&](const std::string& variable, const char* key, const char* value) {
    if (std::getenv(variable.c_str()) != nullptr) return false;
    ucs_status_t s = ucp_config_modify(config, key, value);
    if (s != UCS_OK)
      log(LogLevel::kDebug, str_cat("UCX ", key, "=", value, " not applied: ", ucs_status_string(s)));
    return s == UCS_OK;
  };
  if (status == UCS_OK && options_.tune_tcp && tls_.find("tcp") != std::string::npos) {
    static const char* const kTcp[][2] = {{"RX_SEG_SIZE", "256K"}, {"TX_SEG_SIZE", "64K"},
                                          {"SNDBUF", "4M"}, {"RCVBUF", "4M"}};
    for (const auto& [key, value] : kTcp) tune(str_cat("UCX_TCP_", key), key, value);
  }
  // A ucp field, so every transport of the context takes it (EngineOptions::eager_copies).
  if (status == UCS_OK && options_.eager_copies && copies_every_message(tls_))
    eager_ = tune("UCX_RNDV_THRESH", "RNDV_THRESH", "inf");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | (options_.blocking_progress ? UCP_FEATURE_WAKEUP : 0);
  params.estimated_num_eps = static_cast<size_t>(size_);
  if (status == UCS_OK) status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  ucs_check(status, "ucp_init", str_cat("UCX_TLS=", tls_));
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_check(ucp_worker_create(context_, &wparams, &worker_), "ucp_worker_create",
            str_cat("UCX_TLS=", tls_));
}

void Engine::connect(Store& store) {
  peer_failure_detection_ = may_detect_failures(tls_);
  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_check(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address");
  auto* bytes = reinterpret_cast<const uint8_t*>(address);
  Bytes mine(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);
  const ProcessIdentity self = this_process();
  store.set(str_cat(options_.name, "/ucx/process/", rank_), encode(self));  // before the address
  store.set(str_cat(options_.name, "/ucx/addr/", rank_), mine);
  for (int i = 1; i < size_; ++i) {
    int peer = (rank_ + i) % size_;
    Bytes theirs = store.get(str_cat(options_.name, "/ucx/addr/", peer), options_.connect_timeout);
    if (auto process = decode(store.get(str_cat(options_.name, "/ucx/process/", peer),
                                        options_.connect_timeout));
        process && checkable_from(self, *process) && !process_ended(*process)) {
      // (A peer that seems ended already is one this process cannot see, e.g. /proc mounted
      // with hidepid: its liveness is left to the deadlines, never judged from here.)
      local_peers_[peer] = *process;
      local_[peer] = 1;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (peer_failure_detection_) {
      params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      params.err_handler.cb = &Engine::on_ep_error;
      params.err_handler.arg = &ep_slots_[peer];
    }
    ucs_status_t status = ucp_ep_create(worker_, &params, &eps_[peer]);
    if (status == UCS_ERR_UNREACHABLE && peer_failure_detection_ &&
        !options_.require_peer_failure_detection) {
      // UCX 1.13's shared-memory transports have no peer failure handler: keep them and rely
      // on the no-progress deadline (and the peers' reports) to detect failures.
      log(LogLevel::kInfo, str_cat("ucx: UCX_TLS=", tls_, " cannot detect peer failures; ",
                                   "falling back to timeouts"));
      peer_failure_detection_ = false;
      --i;
      continue;
    }
    ucs_check(status, "ucp_ep_create",
              str_cat("rank ", rank_, " to rank ", peer, ", UCX_TLS=", tls_));
  }
}

int Engine::local_ranks() const {
  int n = 1;
  for (char local : local_) n += local ? 1 : 0;
  return n;
}

Engine::~Engine() {
  stop_.store(true, std::memory_order_release);
  wake();
  if (thread_.joinable()) thread_.join();
  shutdown();
}

void Engine::progress_until(Clock::time_point deadline, const std::function<bool()>& done) {
  while (!done() && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) {
      if (options_.blocking_progress && peer_failure_detection_) {
        wait_for_events(std::chrono::microseconds(1000), true, posts_.load(std::memory_order_seq_cst));
      } else {
        std::this_thread::yield();
      }
    }
    handle_ep_errors();
    check_local_peers(Clock::now());
    control_out_.remove_if([](const ControlSend& s) { return s.transfer.done; });
  }
}

// Tells every live peer that this rank leaves and waits (bounded) for theirs, so that neither
// side takes the other's disconnect for a failure, nor cuts off messages still in flight. The
// goodbye carries the first failure this rank heard of, if any: a peer still waiting for this
// rank learns why it may have left.
void Engine::say_goodbye(Clock::time_point deadline) {
  const std::string after = failures_.empty() ? std::string() : failures_.front().why;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && !dead_[peer]) send_control(peer, kControlGoodbye, 0, rank_, Status::kOk, after);
  progress_until(deadline, [&] {
    handle_control();
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_ && !dead_[peer] && !left_[peer] && !blamed_[peer]) return false;
    return true;
  });
  progress_until(deadline, [&] { return control_out_.empty(); });
}

void Engine::close_endpoints(Clock::time_point deadline) {
  cancel(&control_recv_);
  std::vector<void*> closing;
  for (int peer = 0; peer < size_; ++peer) {
    ucp_ep_h& ep = eps_[peer];
    if (!ep) continue;
    if (!peer_failure_detection_ && (dead_[peer] || blamed_[peer]) && !left_[peer]) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (req && !UCS_PTR_IS_ERR(req)) closing.push_back(req);
    ep = nullptr;
  }
  progress_until(deadline, [&] {
    for (void* r : closing)
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    return true;
  });
  for (void* r : closing) ucp_request_free(r);
}

void Engine::shutdown() noexcept {
  if (worker_) {
    // Failed operations may hold sends to dead peers that never complete: wait briefly only.
    progress_until(Clock::now() + std::chrono::milliseconds(300),
                   [&] { return poll_clients(Clock::now()), clients_.empty(); });
    // A live peer may still be receiving what this rank sent last (a send completes locally
    // before it is delivered): wait for every live peer's goodbye, up to the leave timeout.
    if (started_) say_goodbye(Clock::now() + options_.leave_timeout);  // a failed setup has no peers
    for (auto& client : clients_) client->release_ucx_resources();
    close_endpoints(Clock::now() + std::min(options_.connect_timeout, std::chrono::milliseconds(5000)));
    if (lost_peer_without_detection()) {
      // Over shared memory UCX 1.13 keeps sends and wireup messages to a dead peer pending,
      // and destroying the worker then trips an assertion inside UCX that ends the process.
      // The worker and context are left to the process instead (a bounded leak, once per
      // engine that lost a peer), which is the only teardown that cannot crash.
      log(LogLevel::kInfo, str_cat("ucx: '", options_.name, "' lost a peer over UCX_TLS=", tls_,
                                   "; its UCX worker is left to the process"));
      // Held on purpose, reachable from a global (so leak checkers see it as kept, not lost).
      static std::mutex abandoned_mutex;
      static auto* abandoned = new std::vector<std::pair<ucp_worker_h, ucp_context_h>>();
      {
        std::lock_guard<std::mutex> lock(abandoned_mutex);
        abandoned->emplace_back(worker_, context_);
      }
      worker_ = nullptr;
      context_ = nullptr;
    } else {
      ucp_worker_destroy(worker_);
      worker_ = nullptr;
    }
  }
  if (context_) ucp_cleanup(context_);
  context_ = nullptr;
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  wake_fd_ = epoll_fd_ = -1;
}

}  // namespace cohort::transport::ucx
