// Communicator: a group of ranks with asynchronous collectives, whichever backend carries them
// (UCX over host memory: ucx_communicator.h; NCCL over device memory: transport/nccl). Every call
// returns a Work at once; operations run in issue order while the caller computes: a collective
// starts after everything issued before it has finished (so it may consume the previous one's
// output); consecutive send/recv calls run concurrently. Buffers are owned by the caller, live
// where memory() says, and must stay valid and untouched until the Work completes.
//
// Failure: a dead peer, a peer's report, or an operation that makes no progress for timeout()
// sets a sticky error (kPeerFailed or kTimeout naming the rank); every pending and later Work
// then fails at once with it. Recover by destroying the communicator (and its engine). A rank
// that leaves early (an error: it destroys its communicators and engine) costs its peers no
// deadline: destroying a communicator with an operation unfinished tells the peers as abort()
// does, and an operation still waiting for a rank 2 s (or timeout(), if shorter) after that
// rank's engine said goodbye fails naming it (kPeerFailed).
//
// Issue operations on one communicator from one thread at a time, in the same order on every
// rank. Destroying a communicator (or a failure) fails its pending Works; a backend may still
// touch their buffers afterwards (keep_alive, and each backend's header, say how long).
// Arguments are checked here, identically for every backend; a backend implements start_*.
// A thin C wrapper maps each method to one cohort_comm_* entry point.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/coll/types.h"
#include "transport/coll/work.h"

namespace cohort::transport::coll {

struct CommOptions {
  std::string name = "world";               // used in error messages and store keys
  std::chrono::milliseconds timeout{60000};  // no-progress limit per operation
  // Pipelining unit of large messages (UCX rings); 0 picks it from the host. Small enough that
  // the chunks in flight (window x chunk) stay in L2 while they are reduced: 128 KiB measured
  // best for a 64 MiB all-reduce at 2 ranks on 2 cores (shm 4.1 GB/s against 3.1 with 1 MiB;
  // tcp 2.0 against 1.3). With more ranks on the host than CPUs, every chunk costs the progress
  // threads a turn on a shared core, and 1 MiB wins instead (4 ranks on 2 cores: shm 1.56 GB/s
  // against 1.14, tcp 0.59 against 0.57).
  size_t chunk_bytes = 0;
  size_t window = 4;                         // chunks in flight per operation
  // At or below: latency-optimal algorithms (an all-reduce by recursive doubling, log2(n) steps
  // of the whole message, where the ring takes 2(n - 1) steps of 1/n of it). Where it pays
  // depends on the link: by latency a and time per byte b the two cross at about 8 a / b for 4
  // ranks, ~60-75 KB at 1 Gbit/s and hundreds of KB at 10 Gbit/s. Over links shaped in network
  // namespaces (netns_bw, 4 ranks, 2026-11-28) 128 KiB took 2.8 ms at 1 Gbit/s and 20.3 ms at
  // 100 Mbit/s, 16 bytes more (the ring) 1.9 and 15.9 ms. Choosing by the measured link is open.
  size_t small_bytes = 128 << 10;
  // When every rank runs on one host and UCX can map their memory into each other (shared
  // memory transports enabled), all-reduce, reduce-scatter and all-gather go through a shared
  // window (shared_window.h) instead of messages. false keeps messages (rings, recursive
  // doubling) throughout.
  bool shared_memory = true;
  // One chunk of a shared-window collective; 0 picks it from the host: 256 KiB, or 1 MiB when
  // the host runs more ranks than CPUs (64 MiB all-reduce, 4 ranks on 2 cores: 2.8 GB/s
  // against 2.0; at 2 ranks both 4.6-4.9, and 256 KiB pipelines 64 KiB-1 MiB messages better).
  size_t shared_slot_bytes = 0;
  size_t shared_slots = 4;  // chunks in flight through the window (each rank maps slots x slot)
};

using WorkPtr = std::shared_ptr<Work>;

enum class Backend : int { kUcx = 0, kNccl = 1 };
// Where a communicator's buffers must live.
enum class BufferMemory : int { kHost = 0, kCuda = 1 };
const char* backend_name(Backend b);

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  virtual Backend backend() const = 0;
  virtual BufferMemory memory() const = 0;

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

  // Memory for this communicator's buffers, like NCCL's registered buffers. Collective: every
  // rank calls it with the same size, in the same order among its other operations. Where a
  // communicator's ranks share a host and map each other's memory (UCX over shared memory), a
  // collective reads and writes buffers inside it in place instead of copying them through its
  // shared window; elsewhere it is ordinary memory, so callers need not know. 64-byte aligned,
  // valid until deallocate() or until the communicator is destroyed. Throws cohort::Error
  // (kOutOfMemory; kUnsupported for backends without it).
  virtual void* allocate(size_t bytes);
  // Gives memory from allocate() back once the operations issued before have finished; in the
  // same order on every rank (a peer's collective must not use memory this rank has freed).
  // Throws kInvalidArgument for a pointer allocate() did not return.
  virtual void deallocate(void* p);

  // Collective over this communicator: ranks with equal color form a new communicator (same
  // backend) ordered by (key, rank). color < 0 takes part but gets nullptr.
  virtual std::shared_ptr<Communicator> split(int color, int key, const std::string& name = "") = 0;

  void set_timeout(std::chrono::milliseconds timeout);
  virtual std::chrono::milliseconds timeout() const = 0;
  // kOk, or the sticky error; `message` and `failed_rank` (communicator rank or -1) if given.
  virtual Status status(std::string* message = nullptr, int* failed_rank = nullptr) const = 0;
  // Fails every pending and future Work and tells the peers; always returns at once (a Work
  // already transferring fails once its transfers are cancelled: work.h).
  virtual void abort(const std::string& reason = "abort() called") = 0;
  // Keeps `buffers` alive until every failed operation of this communicator has let go of its
  // transfers (work.h: a send to a frozen rank may outlive its Work). An owner that frees
  // buffers after a failure hands them here instead; released at once when nothing is pending.
  virtual void keep_alive(std::shared_ptr<void> buffers) = 0;

 protected:
  Communicator(int rank, int size, std::string name);

  // The backend's half of each call; arguments are already checked. `peer` and `root` are
  // ranks of this communicator.
  virtual WorkPtr start_all_reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) = 0;
  virtual WorkPtr start_reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) = 0;
  virtual WorkPtr start_all_gather(const void* in, void* out, size_t count, DataType type) = 0;
  virtual WorkPtr start_broadcast(void* buf, size_t count, DataType type, int root) = 0;
  virtual WorkPtr start_all_to_all(const void* in, void* out, size_t count, DataType type) = 0;
  virtual WorkPtr start_barrier() = 0;
  virtual WorkPtr start_send(const void* buf, size_t count, DataType type, int peer) = 0;
  virtual WorkPtr start_recv(void* buf, size_t count, DataType type, int peer) = 0;
  virtual void apply_timeout(std::chrono::milliseconds timeout) = 0;

 private:
  void check_buffer(const char* call, const void* p, size_t count, DataType type) const;
  void check_reduce(const char* call, DataType type, ReduceOp op) const;
  void check_peer(const char* call, int peer) const;

  const int rank_;
  const int size_;
  const std::string name_;
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
