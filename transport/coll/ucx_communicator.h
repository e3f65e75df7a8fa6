// UcxCommunicator: the Communicator over cohort's UCX engine, for host buffers. Collectives are
// schedules (ring, recursive doubling, trees: algorithms.h) that the engine's progress thread
// runs through the Executor while the caller computes; split communicators share the engine.
// After a failure, UCX may still touch a pending Work's buffers until the engine (the last
// communicator sharing it) is destroyed: work.h says which.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/bootstrap/store.h"
#include "transport/coll/algorithms.h"
#include "transport/coll/communicator.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

class Executor;
class SharedWindow;

class UcxCommunicator final : public Communicator {
 public:
  // The world communicator of `size` ranks: creates the UCX engine (context, worker, endpoints)
  // and exchanges addresses through `store`. Collective; throws cohort::Error.
  static std::shared_ptr<UcxCommunicator> create(std::shared_ptr<Store> store, int rank, int size,
                                                 CommOptions options = {},
                                                 ucx::EngineOptions engine_options = {});
  // A world communicator over an existing engine (at most one per engine).
  static std::shared_ptr<UcxCommunicator> create(std::shared_ptr<ucx::Engine> engine,
                                                 CommOptions options = {});
  ~UcxCommunicator() override;

  Backend backend() const override { return Backend::kUcx; }
  BufferMemory memory() const override { return BufferMemory::kHost; }
  int world_rank(int rank) const { return members_.at(static_cast<size_t>(rank)); }
  uint32_t id() const { return id_; }
  const std::shared_ptr<ucx::Engine>& engine() const { return engine_; }
  // Whether all-reduce, reduce-scatter and all-gather go through shared memory
  // (CommOptions::shared_memory, and it worked); known once the first of them has started.
  bool uses_shared_memory() const;
  // Chunks of this rank's collectives that used memory from allocate() in place (no copy).
  uint64_t registered_chunks() const;

  // Regions mapped by every rank through UCX where the shared window is used, else this
  // rank's region only (Communicator::allocate).
  void* allocate(size_t bytes) override;
  void deallocate(void* p) override;

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name = "") override;
  std::chrono::milliseconds timeout() const override;
  Status status(std::string* message = nullptr, int* failed_rank = nullptr) const override;
  void abort(const std::string& reason = "abort() called") override;
  void keep_alive(std::shared_ptr<void> buffers) override;

 protected:
  WorkPtr start_all_reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override;
  WorkPtr start_reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override;
  WorkPtr start_all_gather(const void* in, void* out, size_t count, DataType type) override;
  WorkPtr start_broadcast(void* buf, size_t count, DataType type, int root) override;
  WorkPtr start_all_to_all(const void* in, void* out, size_t count, DataType type) override;
  WorkPtr start_barrier() override;
  WorkPtr start_send(const void* buf, size_t count, DataType type, int peer) override;
  WorkPtr start_recv(void* buf, size_t count, DataType type, int peer) override;
  void apply_timeout(std::chrono::milliseconds timeout) override;

 private:
  UcxCommunicator(std::shared_ptr<ucx::Engine> engine, uint32_t id, std::vector<int> members, int rank,
                  CommOptions options);
  Plan plan() const;
  // Issues the steps that set the shared window up (before the first all-reduce, reduce-scatter
  // or all-gather, in issue order on every rank): map this rank's region where every rank is on
  // this host, exchange keys, map the peers' regions, and agree; if any rank fails to, every
  // rank keeps to messages (the reason is logged at debug level).
  void issue_shared_window_setup();
  // Submits a collective named `name` that runs the schedule messages() builds, or, when the
  // shared window is ready as it starts, through_window(window, its first sequence number).
  WorkPtr submit_collective(
      std::string name, SharedPattern pattern, size_t count, DataType type,
      std::function<std::unique_ptr<Op>()> messages,
      std::function<std::unique_ptr<Op>(const SharedWindow&, uint64_t first)> through_window);

  std::shared_ptr<ucx::Engine> engine_;
  const uint32_t id_;
  const std::vector<int> members_;
  const CommOptions options_;
  std::shared_ptr<Executor> executor_;
  std::shared_ptr<SharedWindow> window_;  // set up by the first collective using it (may end unused)
  std::mutex allocations_mutex_;
  std::map<void*, uint64_t> allocations_;  // allocate()'s pointers -> SharedWindow allocation ids
  uint64_t next_allocation_ = 0;
};

}  // namespace cohort::transport::coll
