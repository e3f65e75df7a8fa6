// Schedule builders, one per collective. Each returns an Op whose chains the executor runs;
// buffers are the caller's and must stay valid until the Work completes. Large messages use
// rings pipelined in chunks (bandwidth-optimal), small ones recursive doubling or binomial
// trees (latency-optimal). Counts of 0, 1 and counts not divisible by the size are fine.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "transport/coll/schedule.h"
#include "transport/coll/types.h"

namespace cohort::transport::coll {

class SharedWindow;

struct Plan {
  int rank = 0;
  int size = 1;
  size_t chunk_bytes = 128 << 10;  // pipelining unit of rings and chains (CommOptions)
  size_t window = 4;             // chunks in flight per operation
  size_t small_bytes = 128 << 10;  // at or below: latency-optimal algorithms
};

// The names operations carry into their Works and errors: "all_gather(f32 x 10)",
// "all_reduce(f32 x 1000, sum)".
std::string op_name(const char* what, size_t count, DataType type);
std::string op_name(const char* what, size_t count, DataType type, ReduceOp op);

// Near-equal partition of `total` items into `parts`: the first total % parts get one more.
inline size_t part_count(size_t total, size_t parts, size_t i) {
  return total / parts + (i < total % parts ? 1 : 0);
}
inline size_t part_offset(size_t total, size_t parts, size_t i) {
  return i * (total / parts) + (i < total % parts ? i : total % parts);
}
// Chunks to cut `bytes` into so that each is about plan.chunk_bytes (at least 1).
size_t chunk_count(const Plan& plan, size_t bytes);
// Chains in flight for a reduce-scatter or all-gather ring, whose chains have half the stages
// of an all-reduce's: twice plan.window once a rank's block has at least kLongRing chunks (16
// MiB at 128 KiB; 2 ranks over shm: reduce-scatter of 32 and 64 MiB 1.5-1.6 -> 2.1-2.2 GB/s,
// all-gather of 32 MiB 3.3-3.5 -> 3.6-3.9), plan.window below it (doubling there cost the
// reduce-scatter: 16 MiB 2.7-3.2 -> 1.8-2.0, 4 MiB 2.1 -> 1.3).
constexpr size_t kLongRing = 128;
size_t single_pass_window(const Plan& plan, size_t chunks);

std::unique_ptr<Op> build_all_reduce(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type, ReduceOp op);
// in: size * count elements; out: count elements (this rank's block of the reduction).
std::unique_ptr<Op> build_reduce_scatter(const Plan& plan, const void* in, void* out,
                                         size_t count, DataType type, ReduceOp op);
// in: count elements; out: size * count elements, rank i's block at i * count.
std::unique_ptr<Op> build_all_gather(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type);
std::unique_ptr<Op> build_broadcast(const Plan& plan, void* buf, size_t count, DataType type,
                                    int root);
// in and out: size * count elements; block j of in goes to rank j, block i of out came from i.
std::unique_ptr<Op> build_all_to_all(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type);
std::unique_ptr<Op> build_barrier(const Plan& plan);

// Over a SharedWindow (algo_shared.cpp): every rank on one host. first_seq: the window's
// sequence number of the operation's first chunk (SharedWindow::take of shared_chunk_count).
constexpr int kMaxSharedRanks = 64;
// Messages at least this large are written to the output with non-temporal stores.
constexpr size_t kStreamBytes = size_t{4} << 20;
enum class SharedPattern { kAllReduce, kReduceScatter, kAllGather };
// Chunks (window sequence numbers) an operation of `count` elements takes: count is the whole
// buffer (all-reduce) or one rank's block (reduce-scatter, all-gather).
size_t shared_chunk_count(const SharedWindow& window, size_t count, DataType type,
                          SharedPattern pattern);
std::unique_ptr<Op> build_shared_all_reduce(const SharedWindow& window, uint64_t first_seq,
                                            const void* in, void* out, size_t count,
                                            DataType type, ReduceOp op);
// Arguments as build_reduce_scatter / build_all_gather.
std::unique_ptr<Op> build_shared_reduce_scatter(const SharedWindow& window, uint64_t first_seq,
                                                const void* in, void* out, size_t count,
                                                DataType type, ReduceOp op);
std::unique_ptr<Op> build_shared_all_gather(const SharedWindow& window, uint64_t first_seq,
                                            const void* in, void* out, size_t count,
                                            DataType type);
std::unique_ptr<Op> build_send(const Plan& plan, const void* buf, size_t bytes, int peer);
std::unique_ptr<Op> build_recv(const Plan& plan, void* buf, size_t bytes, int peer);

}  // namespace cohort::transport::coll
