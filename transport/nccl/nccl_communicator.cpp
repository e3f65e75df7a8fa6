// NcclCommunicator: NCCL calls in non-blocking mode under one lock, completion events on the
// communicator's stream, and a watchdog thread that finishes Works, enforces the timeout and
// aborts on asynchronous errors (see the header for the contract).
#include "transport/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/base/error.h"
#include "transport/nccl/nccl_api.h"

namespace cohort::transport::nccl {

using Clock = std::chrono::steady_clock;
using coll::DataType;
using coll::ReduceOp;
using coll::WorkPtr;

namespace {

std::string cuda_text(cudaError_t e) { return str_cat(cudaGetErrorName(e), ": ", cudaGetErrorString(e)); }

void check_cuda(cudaError_t e, const std::string& label, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error
  throw Error(e == cudaErrorMemoryAllocation ? Status::kOutOfMemory : Status::kInternal,
              str_cat(label, ": ", call, " failed: ", cuda_text(e)));
}

Status status_of(ncclResult_t r) {
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError: return Status::kPeerFailed;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return Status::kInvalidArgument;
    default: return Status::kInternal;
  }
}

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  const char* last = nccl_api().ncclGetLastError(comm);
  return str_cat(nccl_api().ncclGetErrorString(r), last && *last ? str_cat(" (", last, ")") : std::string());
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kF32: return ncclFloat32;
    case DataType::kBF16: return ncclBfloat16;
    case DataType::kF16: return ncclFloat16;
    case DataType::kI32: return ncclInt32;
    case DataType::kI64: return ncclInt64;
    case DataType::kU8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

// Makes `device` current for the scope and restores the caller's device after.
class DeviceScope {
 public:
  DeviceScope(int device, const std::string& label) {
    check_cuda(cudaGetDevice(&previous_), label, "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), label, "cudaSetDevice");
  }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// An event shared by the Works of one launch (a group of sends and receives has one).
struct Event {
  cudaEvent_t e = nullptr;
  ~Event() {
    if (e) (void)cudaEventDestroy(e);
  }
};

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// World communicators of one name made so far by this process, so each gets its own store key.
std::mutex g_generation_mu;
std::unordered_map<std::string, int> g_generation;

}  // namespace

bool available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    if (why) *why = e != cudaSuccess ? str_cat("no CUDA device visible (", cuda_text(e), ")") : "no CUDA device visible";
    return false;
  }
  return nccl_loadable(why);
}

struct NcclCommunicator::State {
  struct Pending {
    WorkPtr work;
    std::shared_ptr<Event> done;
    Clock::time_point issued;
  };
  struct Held {  // a send or receive waiting for its group
    bool send;
    void* buf;
    size_t count;
    ncclDataType_t type;
    int peer;
    WorkPtr work;
  };

  int device = 0;
  std::string label;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int* scratch = nullptr;  // one device int for barrier()
  cudaStream_t compute = nullptr;

  mutable std::mutex mu;  // everything below, and every NCCL call on comm
  std::condition_variable cv;
  std::chrono::milliseconds timeout{60000};
  std::deque<Pending> pending;
  std::vector<Held> held;
  Status error = Status::kOk;
  std::string message;
  std::vector<std::shared_ptr<void>> kept;
  bool stopping = false;
  std::thread watchdog;

  // Polls NCCL until the last call has left ncclInProgress, within the timeout; an error or the
  // deadline fails the communicator and throws.
  void settle_locked(ncclComm_t c, const char* call) {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = nccl_api().ncclCommGetAsyncError(c, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        fail_locked(status_of(state), str_cat(label, ": ", call, " failed: ", nccl_text(state, c)));
        throw Error(error, message);
      }
      if (Clock::now() > deadline) {
        fail_locked(Status::kTimeout, str_cat(label, ": ", call, " did not complete within ", timeout.count(),
                                              " ms (a rank did not take part)"));
        throw Error(error, message);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void check_call_locked(ncclResult_t r, ncclComm_t c, const char* call) {
    if (r == ncclSuccess || r == ncclInProgress) return settle_locked(c, call);
    fail_locked(status_of(r), str_cat(label, ": ", call, " failed: ", nccl_text(r, c)));
    throw Error(error, message);
  }

  // The sticky error: NCCL is aborted (its kernels stop, so no buffer is touched after), and
  // every pending and held Work fails with it.
  void fail_locked(Status s, const std::string& why) {
    if (error == Status::kOk) {
      error = s;
      message = why;
    }
    if (comm) {
      (void)nccl_api().ncclCommAbort(comm);
      comm = nullptr;
    }
    for (Pending& p : pending) p.work->fail(error, message);
    for (Held& h : held) h.work->fail(error, message);
    pending.clear();
    held.clear();
    kept.clear();
  }

  WorkPtr failed_work(const char* what) const {
    auto w = std::make_shared<coll::Work>(what);
    w->fail(error, message);
    return w;
  }

  // Records a completion event for `works` on the stream and hands them to the watchdog.
  void track_locked(const std::vector<WorkPtr>& works) {
    auto ev = std::make_shared<Event>();
    check_cuda(cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming), label, "cudaEventCreate");
    check_cuda(cudaEventRecord(ev->e, stream), label, "cudaEventRecord");
    for (const WorkPtr& w : works) pending.push_back({w, ev, Clock::now()});
    cv.notify_all();
  }

  // The stream waits for what was issued on the compute stream so far.
  void after_compute_locked() {
    if (!compute) return;
    Event ev;
    check_cuda(cudaEventCreateWithFlags(&ev.e, cudaEventDisableTiming), label, "cudaEventCreate");
    check_cuda(cudaEventRecord(ev.e, compute), label, "cudaEventRecord (compute stream)");
    check_cuda(cudaStreamWaitEvent(stream, ev.e, 0), label, "cudaStreamWaitEvent");
  }

  // Enqueues `ops` as one NCCL group on the stream (a send and its matching receive must share
  // one to run concurrently); their `work` fields are not used here.
  void group_locked(const std::vector<Held>& ops) {
    check_call_locked(nccl_api().ncclGroupStart(), comm, "ncclGroupStart");
    for (const Held& h : ops) {
      ncclResult_t r = h.send ? nccl_api().ncclSend(h.buf, h.count, h.type, h.peer, comm, stream)
                              : nccl_api().ncclRecv(h.buf, h.count, h.type, h.peer, comm, stream);
      if (r != ncclSuccess && r != ncclInProgress) {
        (void)nccl_api().ncclGroupEnd();
        check_call_locked(r, comm, h.send ? "ncclSend" : "ncclRecv");
      }
    }
    check_call_locked(nccl_api().ncclGroupEnd(), comm, "ncclGroupEnd");
  }

  // Launches the held sends and receives as one NCCL group.
  void flush_locked() {
    if (held.empty() || error != Status::kOk) return;
    DeviceScope scope(device, label);
    after_compute_locked();
    std::vector<Held> group;
    group.swap(held);
    try {
      group_locked(group);
      std::vector<WorkPtr> works;
      for (const Held& h : group) works.push_back(h.work);
      track_locked(works);
    } catch (const Error&) {
      for (const Held& h : group) h.work->fail(error == Status::kOk ? Status::kInternal : error, message);
      throw;
    }
  }

  // One operation: held sends and receives go first (issue order), then `launch` on the stream.
  template <typename F>
  WorkPtr run(const char* what, F&& launch) {
    std::lock_guard<std::mutex> lock(mu);
    if (error != Status::kOk) return failed_work(what);
    flush_locked();
    DeviceScope scope(device, label);
    after_compute_locked();
    auto w = std::make_shared<coll::Work>(what);
    launch();
    track_locked({w});
    return w;
  }

  WorkPtr hold(const char* what, bool send, const void* buf, size_t count, DataType type, int peer,
               const std::shared_ptr<State>& self) {
    std::lock_guard<std::mutex> lock(mu);
    if (error != Status::kOk) return failed_work(what);
    auto w = std::make_shared<coll::Work>(what);
    std::weak_ptr<State> weak = self;
    w->set_before_first_wait([weak] {
      if (auto s = weak.lock()) {
        std::lock_guard<std::mutex> l(s->mu);
        try {
          s->flush_locked();
        } catch (const Error&) {  // the Works of the group carry the failure
        }
      }
    });
    held.push_back({send, const_cast<void*>(buf), count, nccl_type(type), peer, w});
    return w;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      if (pending.empty()) {
        cv.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
      if (comm) {
        ncclResult_t state = ncclSuccess;
        if (nccl_api().ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        if (state != ncclSuccess && state != ncclInProgress) {
          fail_locked(status_of(state), str_cat(label, ": NCCL reported an asynchronous error: ", nccl_text(state, comm),
                                                "; a peer may have failed (NCCL does not say which)"));
          continue;
        }
      }
      while (!pending.empty()) {
        Pending& p = pending.front();
        cudaError_t q = cudaEventQuery(p.done->e);
        if (q == cudaSuccess) {
          p.work->finish();
          pending.pop_front();
          continue;
        }
        if (q != cudaErrorNotReady) {
          (void)cudaGetLastError();
          fail_locked(Status::kInternal, str_cat(label, ": ", p.work->what(), ": ", cuda_text(q)));
        } else if (Clock::now() - p.issued > timeout) {
          fail_locked(Status::kTimeout, str_cat(label, ": ", p.work->what(), " made no progress for ", timeout.count(),
                                                " ms; a peer stopped answering (NCCL does not say which)"));
        }
        break;
      }
      if (pending.empty() && !kept.empty()) kept.clear();
      cv.wait_for(lock, std::chrono::microseconds(200));
    }
  }

  // The thread runs until close() (or the destructor) stops and joins it, before State goes.
  void start_watchdog() {
    watchdog = std::thread([this] { watch(); });
  }

  ~State() {
    if (watchdog.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stopping = true;
        cv.notify_all();
      }
      watchdog.join();
    }
    if (comm) (void)nccl_api().ncclCommAbort(comm);
  }

  // Stops the watchdog; waits (up to the timeout) for pending operations, then releases NCCL.
  void close() {
    {
      std::unique_lock<std::mutex> lock(mu);
      try {
        flush_locked();
      } catch (const Error&) {
      }
      const Clock::time_point deadline = Clock::now() + timeout;
      while (!pending.empty() && error == Status::kOk && Clock::now() < deadline) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock.lock();
      }
      if (!pending.empty() && error == Status::kOk)
        fail_locked(Status::kTimeout, str_cat(label, ": destroyed with operations still pending"));
      stopping = true;
      cv.notify_all();
    }
    if (watchdog.joinable()) watchdog.join();
    std::lock_guard<std::mutex> lock(mu);
    if (comm) {
      // Finalize flushes NCCL's own pending work; in non-blocking mode it is polled like a call.
      try {
        check_call_locked(nccl_api().ncclCommFinalize(comm), comm, "ncclCommFinalize");
      } catch (const Error&) {
      }
      if (comm) (void)nccl_api().ncclCommDestroy(comm);
      comm = nullptr;
    }
    for (Held& h : held) h.work->fail(Status::kInvalidState, str_cat(label, ": communicator destroyed"));
    held.clear();
    if (scratch) (void)cudaFree(scratch);
    if (stream) (void)cudaStreamDestroy(stream);
    scratch = nullptr;
    stream = nullptr;
  }

  // A State around a joined (or joining) NCCL communicator: polls it ready, then makes the stream,
  // the scratch int and the watchdog.
  static std::shared_ptr<State> make(int device, std::string label, ncclComm_t joining, std::chrono::milliseconds timeout) {
    auto s = std::make_shared<State>();
    s->device = device;
    s->label = std::move(label);
    s->timeout = timeout;
    std::lock_guard<std::mutex> lock(s->mu);
    s->comm = joining;
    s->settle_locked(joining, "joining the NCCL communicator");
    DeviceScope scope(device, s->label);
    check_cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), s->label, "cudaStreamCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&s->scratch), sizeof(int)), s->label, "cudaMalloc");
    s->start_watchdog();
    return s;
  }
};

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                           int device, coll::CommOptions options) {
  COHORT_CHECK(store != nullptr, Status::kInvalidArgument, "NcclCommunicator::create: null store");
  COHORT_CHECK(size > 0 && rank >= 0 && rank < size, Status::kInvalidArgument, "NcclCommunicator::create: rank ",
               rank, " outside [0, ", size, ")");
  COHORT_CHECK(options.timeout.count() > 0, Status::kInvalidArgument, "NcclCommunicator::create: timeout must be positive");
  std::string why;
  COHORT_CHECK(available(&why), Status::kUnsupported, "NcclCommunicator::create: ", why);
  int devices = 0;
  (void)cudaGetDeviceCount(&devices);
  COHORT_CHECK(device >= 0 && device < devices, Status::kInvalidArgument, "NcclCommunicator::create: device ",
               device, " outside the ", devices, " visible CUDA devices");
  const std::string label = str_cat("communicator '", options.name, "' [", rank, "/", size, "] (nccl)");
  int generation = 0;
  {
    std::lock_guard<std::mutex> lock(g_generation_mu);
    generation = g_generation[options.name]++;
  }
  const std::string key = str_cat("nccl/", options.name, "/", generation, "/id");
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = nccl_api().ncclGetUniqueId(&id);
    COHORT_CHECK(r == ncclSuccess, status_of(r), label, ": ncclGetUniqueId failed: ", nccl_text(r, nullptr));
    store->set(key, Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
  } else {
    Bytes b = store->get(key, options.timeout);
    COHORT_CHECK(b.size() == sizeof(id), Status::kInternal, label, ": NCCL id in the store has ", b.size(),
                 " bytes, expected ", sizeof(id));
    std::memcpy(&id, b.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  {
    DeviceScope scope(device, label);
    ncclConfig_t config = nonblocking_config();
    ncclResult_t r = nccl_api().ncclCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm) (void)nccl_api().ncclCommAbort(comm);
      throw Error(status_of(r), str_cat(label, ": ncclCommInitRankConfig failed: ", nccl_text(r, nullptr)));
    }
  }
  auto state = State::make(device, label, comm, options.timeout);
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state), rank, size, options.name));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state, int rank, int size, std::string name)
    : Communicator(rank, size, std::move(name)), state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() { state_->close(); }

int NcclCommunicator::device() const { return state_->device; }
cudaStream_t NcclCommunicator::stream() const { return state_->stream; }

void NcclCommunicator::set_compute_stream(cudaStream_t compute) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->compute = compute;
}

void NcclCommunicator::order_after(const WorkPtr& work, cudaStream_t stream) {
  COHORT_CHECK(work != nullptr, Status::kInvalidArgument, "order_after: null work");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->flush_locked();
  for (const State::Pending& p : state_->pending)
    if (p.work == work) {
      check_cuda(cudaStreamWaitEvent(stream, p.done->e, 0), state_->label, "cudaStreamWaitEvent");
      return;
    }
  // Not pending: finished (nothing to wait for) or failed (the Work itself reports that).
}

WorkPtr NcclCommunicator::start_all_reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  State& s = *state_;
  return s.run("all_reduce", [&] {
    s.check_call_locked(nccl_api().ncclAllReduce(in, out, count, nccl_type(type), nccl_op(op), s.comm, s.stream), s.comm,
                        "ncclAllReduce");
  });
}

WorkPtr NcclCommunicator::start_reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  State& s = *state_;
  return s.run("reduce_scatter", [&] {
    s.check_call_locked(nccl_api().ncclReduceScatter(in, out, count, nccl_type(type), nccl_op(op), s.comm, s.stream), s.comm,
                        "ncclReduceScatter");
  });
}

WorkPtr NcclCommunicator::start_all_gather(const void* in, void* out, size_t count, DataType type) {
  State& s = *state_;
  return s.run("all_gather", [&] {
    s.check_call_locked(nccl_api().ncclAllGather(in, out, count, nccl_type(type), s.comm, s.stream), s.comm, "ncclAllGather");
  });
}

WorkPtr NcclCommunicator::start_broadcast(void* buf, size_t count, DataType type, int root) {
  State& s = *state_;
  return s.run("broadcast", [&] {
    s.check_call_locked(nccl_api().ncclBroadcast(buf, buf, count, nccl_type(type), root, s.comm, s.stream), s.comm,
                        "ncclBroadcast");
  });
}

WorkPtr NcclCommunicator::start_all_to_all(const void* in, void* out, size_t count, DataType type) {
  State& s = *state_;
  const size_t bytes = count * coll::dtype_size(type);
  const int me = rank(), n = size();
  return s.run("all_to_all", [&] {
    auto at = [&](const void* base, int block) {
      return const_cast<char*>(static_cast<const char*>(base)) + static_cast<size_t>(block) * bytes;
    };
    check_cuda(cudaMemcpyAsync(at(out, me), at(in, me), bytes, cudaMemcpyDeviceToDevice, s.stream), s.label,
               "cudaMemcpyAsync");
    std::vector<State::Held> ops;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      ops.push_back({true, at(in, p), count, nccl_type(type), p, nullptr});
      ops.push_back({false, at(out, p), count, nccl_type(type), p, nullptr});
    }
    s.group_locked(ops);
  });
}

WorkPtr NcclCommunicator::start_barrier() {
  State& s = *state_;
  return s.run("barrier", [&] {
    s.check_call_locked(nccl_api().ncclAllReduce(s.scratch, s.scratch, 1, ncclInt32, ncclSum, s.comm, s.stream), s.comm,
                        "ncclAllReduce (barrier)");
  });
}

WorkPtr NcclCommunicator::start_send(const void* buf, size_t count, DataType type, int peer) {
  return state_->hold("send", true, buf, count, type, peer, state_);
}

WorkPtr NcclCommunicator::start_recv(void* buf, size_t count, DataType type, int peer) {
  return state_->hold("recv", false, buf, count, type, peer, state_);
}

std::shared_ptr<coll::Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  State& s = *state_;
  ncclComm_t child = nullptr;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.error != Status::kOk) throw Error(s.error, s.message);
    s.flush_locked();
    DeviceScope scope(s.device, s.label);
    ncclConfig_t config = nonblocking_config();
    s.check_call_locked(nccl_api().ncclCommSplit(s.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config), s.comm,
                        "ncclCommSplit");
    timeout = s.timeout;
  }
  if (color < 0 || child == nullptr) return nullptr;
  int child_rank = 0, child_size = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.settle_locked(child, "ncclCommSplit");
  }
  COHORT_CHECK(nccl_api().ncclCommUserRank(child, &child_rank) == ncclSuccess && nccl_api().ncclCommCount(child, &child_size) == ncclSuccess,
               Status::kInternal, s.label, ": querying the split communicator failed");
  const std::string child_name = name.empty() ? str_cat(this->name(), "/", color) : name;
  auto state = State::make(s.device, str_cat("communicator '", child_name, "' [", child_rank, "/", child_size, "] (nccl)"),
                           child, timeout);
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state), child_rank, child_size, child_name));
}

void NcclCommunicator::apply_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->timeout = timeout;
}

std::chrono::milliseconds NcclCommunicator::timeout() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->timeout;
}

Status NcclCommunicator::status(std::string* message, int* failed_rank) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (message) *message = state_->message;
  if (failed_rank) *failed_rank = -1;
  return state_->error;
}

void NcclCommunicator::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->fail_locked(Status::kInvalidState, str_cat(state_->label, ": aborted: ", reason));
}

void NcclCommunicator::keep_alive(std::shared_ptr<void> buffers) {
  std::lock_guard<std::mutex> lock(state_->mu);
  // After a failure NCCL is aborted and touches nothing; otherwise hold until nothing is pending.
  if (state_->error == Status::kOk && !state_->pending.empty()) state_->kept.push_back(std::move(buffers));
}

}  // namespace cohort::transport::nccl
