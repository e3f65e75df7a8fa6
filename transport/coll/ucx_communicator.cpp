// UcxCommunicator: schedule building and submission to the engine's executor, and split.
#include "transport/coll/ucx_communicator.h"

#include <algorithm>

#include "core/base/log.h"
#include "transport/coll/executor.h"
#include "transport/coll/shared_window.h"
#include "transport/ucx/tag.h"

namespace cohort::transport::coll {

std::shared_ptr<UcxCommunicator> UcxCommunicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size, CommOptions options,
                                                   ucx::EngineOptions engine_options) {
  if (engine_options.name == "world") engine_options.name = options.name;
  // A peer may be as slow as the operation timeout allows before it counts as failed; leaving
  // the job waits for it just as long.
  engine_options.leave_timeout = options.timeout;
  auto engine = ucx::Engine::create(std::move(store), rank, size, std::move(engine_options));
  return create(std::move(engine), std::move(options));
}

std::shared_ptr<UcxCommunicator> UcxCommunicator::create(std::shared_ptr<ucx::Engine> engine,
                                                   CommOptions options) {
  COHORT_CHECK(engine != nullptr, Status::kInvalidArgument, "UcxCommunicator::create: null engine");
  std::vector<int> members(static_cast<size_t>(engine->size()));
  for (size_t i = 0; i < members.size(); ++i) members[i] = static_cast<int>(i);
  int rank = engine->rank();
  return std::shared_ptr<UcxCommunicator>(
      new UcxCommunicator(std::move(engine), 0, std::move(members), rank, std::move(options)));
}

namespace {

// Chunks of 128 KiB (shared slots of 256 KiB), or 1 MiB when this host runs more of the job's
// ranks than this process may use CPUs (CommOptions::chunk_bytes, shared_slot_bytes).
CommOptions with_host_defaults(CommOptions options, const ucx::Engine& engine) {
  if (options.chunk_bytes == 0)
    options.chunk_bytes = engine.oversubscribed() ? size_t{1} << 20 : size_t{128} << 10;
  if (options.shared_slot_bytes == 0)
    options.shared_slot_bytes = engine.oversubscribed() ? size_t{1} << 20 : size_t{256} << 10;
  return options;
}

}  // namespace

UcxCommunicator::UcxCommunicator(std::shared_ptr<ucx::Engine> engine, uint32_t id, std::vector<int> members,
                                 int rank, CommOptions options)
    : Communicator(rank, static_cast<int>(members.size()), options.name),
      engine_(std::move(engine)),
      id_(id),
      members_(std::move(members)),
      options_(with_host_defaults(std::move(options), *engine_)) {
  COHORT_CHECK(options_.timeout.count() > 0, Status::kInvalidArgument,
               "Communicator: timeout must be positive");
  std::string label = str_cat("communicator '", options_.name, "' [", Communicator::rank(), "/", size(), "]");
  executor_ = std::make_shared<Executor>(engine_.get(), id_, members_, Communicator::rank(), std::move(label),
                                         options_.timeout);
  engine_->attach(executor_);
}

UcxCommunicator::~UcxCommunicator() {
  executor_->close();
  engine_->wake();
}

Plan UcxCommunicator::plan() const {
  Plan p;
  p.rank = rank();
  p.size = size();
  p.chunk_bytes = options_.chunk_bytes;
  p.window = std::max<size_t>(options_.window, 1);
  p.small_bytes = options_.small_bytes;
  return p;
}

WorkPtr UcxCommunicator::submit_collective(
    std::string name, SharedPattern pattern, size_t count, DataType type,
    std::function<std::unique_ptr<Op>()> messages,
    std::function<std::unique_ptr<Op>(const SharedWindow&, uint64_t first)> through_window) {
  const int n = size();
  if (count == 0 || n < 2 || n > kMaxSharedRanks)
    return executor_->submit(messages(), Executor::Order::kCollective);
  // The first such collective sets the shared window up (steps issued before it). Which
  // algorithm runs is decided when the operation starts, on the progress thread, once that is
  // settled the same way on every rank; only that schedule is built (with its scratch buffers).
  if (!window_) issue_shared_window_setup();
  auto op = std::make_unique<Op>();
  op->name = std::move(name);
  Op* self = op.get();
  SharedWindow* window = window_.get();
  op->start = [=] {
    std::unique_ptr<Op> built =
        window->ready()
            ? through_window(*window, window->take(shared_chunk_count(*window, count, type, pattern)))
            : messages();
    self->chains = std::move(built->chains);
    self->scratch = std::move(built->scratch);
    self->window = built->window;
    self->memory = built->memory;
    self->finish = std::move(built->finish);
    if (built->start) built->start();
  };
  return executor_->submit(std::move(op), Executor::Order::kCollective);
}

WorkPtr UcxCommunicator::start_all_reduce(const void* in, void* out, size_t count, DataType type,
                                 ReduceOp op) {
  Plan p = plan();
  return submit_collective(
      op_name("all_reduce", count, type, op), SharedPattern::kAllReduce, count, type,
      [=] { return build_all_reduce(p, in, out, count, type, op); },
      [=](const SharedWindow& w, uint64_t first) {
        return build_shared_all_reduce(w, first, in, out, count, type, op);
      });
}

WorkPtr UcxCommunicator::start_reduce_scatter(const void* in, void* out, size_t count, DataType type,
                                     ReduceOp op) {
  Plan p = plan();
  return submit_collective(
      op_name("reduce_scatter", count, type, op), SharedPattern::kReduceScatter, count, type,
      [=] { return build_reduce_scatter(p, in, out, count, type, op); },
      [=](const SharedWindow& w, uint64_t first) {
        return build_shared_reduce_scatter(w, first, in, out, count, type, op);
      });
}

WorkPtr UcxCommunicator::start_all_gather(const void* in, void* out, size_t count, DataType type) {
  Plan p = plan();
  return submit_collective(
      op_name("all_gather", count, type), SharedPattern::kAllGather, count, type,
      [=] { return build_all_gather(p, in, out, count, type); },
      [=](const SharedWindow& w, uint64_t first) {
        return build_shared_all_gather(w, first, in, out, count, type);
      });
}

WorkPtr UcxCommunicator::start_broadcast(void* buf, size_t count, DataType type, int root) {
  return executor_->submit(build_broadcast(plan(), buf, count, type, root),
                           Executor::Order::kCollective);
}

WorkPtr UcxCommunicator::start_all_to_all(const void* in, void* out, size_t count, DataType type) {
  return executor_->submit(build_all_to_all(plan(), in, out, count, type),
                           Executor::Order::kCollective);
}

WorkPtr UcxCommunicator::start_barrier() {
  return executor_->submit(build_barrier(plan()), Executor::Order::kCollective);
}

WorkPtr UcxCommunicator::start_send(const void* buf, size_t count, DataType type, int peer) {
  return executor_->submit(build_send(plan(), buf, count * dtype_size(type), peer),
                           Executor::Order::kSend, peer);
}

WorkPtr UcxCommunicator::start_recv(void* buf, size_t count, DataType type, int peer) {
  return executor_->submit(build_recv(plan(), buf, count * dtype_size(type), peer),
                           Executor::Order::kRecv, peer);
}

std::shared_ptr<Communicator> UcxCommunicator::split(int color, int key, const std::string& name) {
  const size_t n = members_.size();
  int64_t mine[3] = {color, key, static_cast<int64_t>(engine_->next_comm_id())};
  std::vector<int64_t> all(3 * n);
  all_gather(mine, all.data(), 3, DataType::kI64)->wait();
  int64_t id = 0;
  for (size_t i = 0; i < n; ++i) id = std::max(id, all[3 * i + 2]);
  COHORT_CHECK(id <= static_cast<int64_t>(ucx::kMaxCommId), Status::kUnsupported,
               "split: more than ", ucx::kMaxCommId, " communicators created");
  engine_->reserve_comm_ids(static_cast<uint32_t>(id + 1));
  if (color < 0) return nullptr;
  std::vector<std::pair<int64_t, int>> group;
  for (size_t i = 0; i < n; ++i)
    if (all[3 * i] == color) group.emplace_back(all[3 * i + 1], static_cast<int>(i));
  std::sort(group.begin(), group.end());
  std::vector<int> members;
  int new_rank = -1;
  for (auto& [k, r] : group) {
    if (r == rank()) new_rank = static_cast<int>(members.size());
    members.push_back(members_[static_cast<size_t>(r)]);
  }
  CommOptions options = options_;
  options.name = name.empty() ? str_cat(options_.name, "/", color) : name;
  options.timeout = timeout();
  return std::shared_ptr<UcxCommunicator>(new UcxCommunicator(
      engine_, static_cast<uint32_t>(id), std::move(members), new_rank, std::move(options)));
}

namespace {

// A step of this communicator that runs on the progress thread, in issue order.
std::unique_ptr<Op> local_step(const std::string& name, std::function<void()> fn) {
  auto op = std::make_unique<Op>();
  op->name = name;
  op->start = std::move(fn);
  return op;
}

// What the steps that exchange region keys (the window's, an allocation's) share until the
// last one has run.
struct RegionSetup {
  explicit RegionSetup(int n)
      : mine(SharedWindow::kKeyBytes, 0),
        keys(SharedWindow::kKeyBytes * static_cast<size_t>(n), 0),
        verdicts(static_cast<size_t>(n), 0) {}
  bool ok = false;
  std::string why;
  std::vector<uint8_t> mine, keys;
  int32_t verdict = 0;
  std::vector<int32_t> verdicts;
  uint8_t* data = nullptr;  // an allocation's memory once settled
};

// Submits one of those steps; it holds the shared state, since a failed exchange may still be
// receiving into it.
WorkPtr submit_setup_step(Executor& executor, const std::shared_ptr<RegionSetup>& setup,
                          std::unique_ptr<Op> op) {
  op->finish = [setup, finish = std::move(op->finish)] {
    if (finish) finish();
  };
  return executor.submit(std::move(op), Executor::Order::kCollective);
}

}  // namespace

void UcxCommunicator::issue_shared_window_setup() {
  const int n = size();
  // Every rank takes part, even one that cannot offer a region, so that all agree.
  bool local = options_.shared_memory && options_.shared_slots > 0 &&
               options_.shared_slot_bytes >= 4096 && options_.shared_slot_bytes % 64 == 0;
  for (int world : members_) local = local && engine_->peer_local(world);
  window_ = std::make_shared<SharedWindow>(rank(), n, options_.shared_slots, options_.shared_slot_bytes);
  auto setup = std::make_shared<RegionSetup>(n);
  setup->ok = local;
  setup->why = local ? "" : "not every rank runs on this host, or shared_memory is off";
  ucx::Engine* engine = engine_.get();
  std::shared_ptr<SharedWindow> window = window_;
  const std::vector<int>* members = &members_;
  Executor* executor = executor_.get();
  auto submit = [&](std::unique_ptr<Op> op) { return submit_setup_step(*executor_, setup, std::move(op)); };
  submit(local_step("shared window: map", [=] {
    executor->set_window(window);  // from here on the executor releases the regions
    if (setup->ok) setup->ok = window->map(*engine, setup->mine.data(), &setup->why);
  }));
  submit(build_all_gather(plan(), setup->mine.data(), setup->keys.data(), SharedWindow::kKeyBytes,
                          DataType::kU8));
  submit(local_step("shared window: attach", [=] {
    if (setup->ok) setup->ok = window->attach(*engine, *members, setup->keys.data(), &setup->why);
    setup->verdict = setup->ok ? 1 : 0;
  }));
  submit(build_all_gather(plan(), &setup->verdict, setup->verdicts.data(), 1, DataType::kI32));
  std::string name = options_.name;
  submit(local_step("shared window: settle", [=] {
    for (int j = 0; j < n && setup->ok; ++j) {
      if (setup->verdicts[static_cast<size_t>(j)] == 0) {
        setup->ok = false;
        setup->why = str_cat("rank ", j, " could not map the shared window");
      }
    }
    if (setup->ok) {
      window->set_ready();
    } else {
      window->release();
      log(LogLevel::kDebug, str_cat("communicator '", name, "': collectives use messages: ", setup->why));
    }
  }));
}

void* UcxCommunicator::allocate(size_t bytes) {
  COHORT_CHECK(bytes > 0, Status::kInvalidArgument, "allocate: 0 bytes");
  COHORT_CHECK(bytes <= (size_t{1} << 46), Status::kInvalidArgument, "allocate: ", bytes,
               " bytes is more than any host has");
  const int n = size();
  if (!window_) issue_shared_window_setup();
  const uint64_t id = ++next_allocation_;
  auto setup = std::make_shared<RegionSetup>(n);
  ucx::Engine* engine = engine_.get();
  std::shared_ptr<SharedWindow> window = window_;
  const std::vector<int>* members = &members_;
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  auto submit = [&](std::unique_ptr<Op> op) { return submit_setup_step(*executor_, setup, std::move(op)); };
  // This rank's region always (ordinary memory where the window is not used); the peers'
  // mappings only where every rank maps them. A rank that cannot allocate fails alone: its
  // peers keep theirs as local memory.
  submit(local_step("allocate: map", [=] {
    setup->ok = window->add_allocation(*engine, id, rounded, setup->mine.data(), &setup->why);
  }));
  submit(build_all_gather(plan(), setup->mine.data(), setup->keys.data(), SharedWindow::kKeyBytes,
                          DataType::kU8));
  submit(local_step("allocate: attach", [=] {
    std::string why;
    setup->verdict = setup->ok && window->ready() &&
                     window->attach_allocation(*engine, *members, id, setup->keys.data(), &why);
    if (setup->ok && window->ready() && !setup->verdict)
      log(LogLevel::kDebug, str_cat("allocate: memory is not shared: ", why));
  }));
  submit(build_all_gather(plan(), &setup->verdict, setup->verdicts.data(), 1, DataType::kI32));
  WorkPtr last = submit(local_step("allocate: settle", [=] {
    bool shared = true;
    for (int32_t v : setup->verdicts) shared = shared && v != 0;
    window->settle_allocation(id, shared);
    setup->data = window->allocation_data(id);
  }));
  last->wait();
  COHORT_CHECK(setup->data != nullptr, Status::kOutOfMemory, "allocate: ", bytes, " bytes: ", setup->why);
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  allocations_[setup->data] = id;
  return setup->data;
}

void UcxCommunicator::deallocate(void* p) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    auto it = allocations_.find(p);
    COHORT_CHECK(it != allocations_.end(), Status::kInvalidArgument,
                 "deallocate: the pointer was not returned by allocate() of communicator '", name(),
                 "', or was freed already");
    id = it->second;
    allocations_.erase(it);
  }
  std::shared_ptr<SharedWindow> window = window_;
  executor_->submit(local_step("deallocate", [window, id] { window->free_allocation(id); }),
                    Executor::Order::kLocal);
}

bool UcxCommunicator::uses_shared_memory() const { return window_ && window_->ready(); }

uint64_t UcxCommunicator::registered_chunks() const { return window_ ? window_->registered_chunks() : 0; }

void UcxCommunicator::apply_timeout(std::chrono::milliseconds timeout) { executor_->set_timeout(timeout); }

std::chrono::milliseconds UcxCommunicator::timeout() const { return executor_->timeout(); }

Status UcxCommunicator::status(std::string* message, int* failed_rank) const {
  return executor_->error(message, failed_rank);
}

void UcxCommunicator::abort(const std::string& reason) { executor_->abort(reason); }

void UcxCommunicator::keep_alive(std::shared_ptr<void> buffers) { executor_->keep_alive(std::move(buffers)); }

}  // namespace cohort::transport::coll
