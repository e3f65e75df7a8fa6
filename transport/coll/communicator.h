// Communicator: a group of ranks with asynchronous collectives. Every call returns a Work at
// once; operations run on the engine's progress thread in issue order while the caller
// computes: a collective starts after everything issued before it has finished (so it may
// consume the previous one's output); consecutive send/recv calls run concurrently. Buffers are host memory, owned by the
// caller, and must stay valid and untouched until the Work completes.
//
// Failure: a dead peer, a peer's report, or an operation that makes no progress for timeout()
// sets a sticky error (kPeerFailed or kTimeout naming the rank); every pending and later Work
// then fails at once with it. Recover by destroying the communicator (and its engine).
//
// Issue operations on one communicator from one thread at a time, in the same order on every
// rank. Destroying a communicator (or a failure) fails its pending Works, but UCX may still
// touch their buffers until the engine — the last communicator sharing it — is destroyed.
// A thin C wrapper maps each method to one cohort_comm_* entry point.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap/store.h"
#include "transport/coll/algorithms.h"
#include "transport/coll/types.h"
#include "transport/coll/work.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

class Executor;

struct CommOptions {
  std::string name = "world";               // used in error messages and store keys
  std::chrono::milliseconds timeout{60000};  // no-progress limit per operation
  // Pipelining unit of large messages; 0 picks it from the host. Small enough that the chunks
  // in flight (window x chunk) stay in L2 while they are reduced: 128 KiB measured best for a
  // 64 MiB all-reduce at 2 ranks on 2 cores (shm 4.1 GB/s against 3.1 with 1 MiB; tcp 2.0
  // against 1.3). With more ranks on the host than CPUs, every chunk costs the progress threads
  // a turn on a shared core, and 1 MiB wins instead (4 ranks on 2 cores: shm 1.56 GB/s against
  // 1.14, tcp 0.59 against 0.57).
  size_t chunk_bytes = 0;
  size_t window = 4;                         // chunks in flight per operation
  size_t small_bytes = 128 << 10;            // at or below: latency-optimal algorithms
};

using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  // The world communicator of `size` ranks: creates the UCX engine (context, worker, endpoints)
  // and exchanges addresses through `store`. Collective; throws cohort::Error.
  static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              CommOptions options = {},
                                              ucx::EngineOptions engine_options = {});
  // A world communicator over an existing engine (at most one per engine).
  static std::shared_ptr<Communicator> create(std::shared_ptr<ucx::Engine> engine,
                                              CommOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  int world_rank(int rank) const { return members_.at(static_cast<size_t>(rank)); }
  uint32_t id() const { return id_; }
  const std::string& name() const { return options_.name; }
  const std::shared_ptr<ucx::Engine>& engine() const { return engine_; }

  // Collectives. Counts are elements. `in` may equal `out` where noted.
  WorkPtr all_reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  WorkPtr all_reduce(void* buf, size_t count, DataType type, ReduceOp op);  // in place
  // in: size() * count; out: count (rank i gets block i of the reduction). out may be
  // in + rank() * count (in place).
  WorkPtr reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  // in: count; out: size() * count. in may be out + rank() * count.
  WorkPtr all_gather(const void* in, void* out, size_t count, DataType type);
  WorkPtr broadcast(void* buf, size_t count, DataType type, int root);
  // in, out: size() * count each, distinct.
  WorkPtr all_to_all(const void* in, void* out, size_t count, DataType type);
  WorkPtr barrier();
  // Point to point; matched in issue order per (sender, receiver) pair. Consecutive sends and
  // receives run concurrently, so posting receives before sends in a ring is fine.
  WorkPtr send(const void* buf, size_t count, DataType type, int peer);
  WorkPtr recv(void* buf, size_t count, DataType type, int peer);

  // Collective over this communicator: ranks with equal color form a new communicator ordered
  // by (key, rank). color < 0 takes part but gets nullptr.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name = "");

  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;
  // kOk, or the sticky error; `message` and `failed_rank` (communicator rank or -1) if given.
  Status status(std::string* message = nullptr, int* failed_rank = nullptr) const;
  // Fails every pending and future Work and tells the peers; always returns at once (a Work
  // already transferring fails once its transfers are cancelled: work.h).
  void abort(const std::string& reason = "abort() called");
  // Keeps `buffers` alive until every failed operation of this communicator has let go of its
  // transfers (work.h: a send to a frozen rank may outlive its Work). An owner that frees
  // buffers after a failure hands them here instead; released at once when nothing is pending.
  void keep_alive(std::shared_ptr<void> buffers);

 private:
  Communicator(std::shared_ptr<ucx::Engine> engine, uint32_t id, std::vector<int> members,
               int rank, CommOptions options);
  Plan plan() const;
  void check_buffer(const char* call, const void* p, size_t count, DataType type) const;

  std::shared_ptr<ucx::Engine> engine_;
  const uint32_t id_;
  const std::vector<int> members_;
  const int rank_;
  const CommOptions options_;
  std::shared_ptr<Executor> executor_;
};

// The axes of an N-D process grid over `comm` (size must equal the product of dims). Ranks are
// laid out row-major: the last dimension varies fastest. Returns, for this rank, one
// communicator per axis: axes[a] holds the ranks that differ only in coordinate a, ordered by it.
// Collective over comm. Example: dims {data, tensor, pipeline}, or AxoNN's {4, 4, 4}.
std::vector<std::shared_ptr<Communicator>> make_grid_axes(Communicator& comm,
                                                          const std::vector<int>& dims);
// This rank's coordinates in that grid.
std::vector<int> grid_coordinates(int rank, const std::vector<int>& dims);

}  // namespace cohort::transport::coll
