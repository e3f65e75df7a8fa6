// Helpers for in-process collective tests: one thread per rank, each with its own UCX engine,
// joined through a MemoryStore; inputs that make exact references possible.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap/store.h"
#include "transport/coll/ucx_communicator.h"
#include "transport/coll/reduce.h"

namespace cohort::transport::coll::testing {

using std::chrono::milliseconds;
constexpr milliseconds kWait{20000};

struct RankSetup {
  std::string tls = "self,sm";
  std::chrono::milliseconds timeout{10000};
  CommOptions comm;  // algorithm thresholds, chunking
  std::function<void(int rank, CommOptions&)> per_rank;  // optional: options that differ by rank
};

// Runs fn(comm) on `world` threads with a fresh world communicator each; fails the test with
// every rank's exception text.
inline void run_ranks_shared(int world, const RankSetup& setup,
                             const std::function<void(const std::shared_ptr<UcxCommunicator>&)>& fn) {
  auto store = make_memory_store();
  std::mutex mutex;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        CommOptions options = setup.comm;
        options.timeout = setup.timeout;
        if (setup.per_rank) setup.per_rank(rank, options);
        ucx::EngineOptions engine;
        engine.tls = setup.tls;
        engine.connect_timeout = milliseconds(20000);
        auto comm = UcxCommunicator::create(store, rank, world, options, engine);
        fn(comm);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back("rank " + std::to_string(rank) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) ADD_FAILURE() << e;
}

inline void run_ranks(int world, const RankSetup& setup, const std::function<void(Communicator&)>& fn) {
  run_ranks_shared(world, setup, [&](const std::shared_ptr<UcxCommunicator>& comm) { fn(*comm); });
}

// Element i of rank r's input: small integers, so sums are exact in every dtype.
inline double input_value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((rank * 7 + i * 13 + (i >> 7)) % 17) - 8);
}

inline void store_value(void* buf, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kF32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kBF16: static_cast<uint16_t*>(buf)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DataType::kF16: static_cast<uint16_t*>(buf)[i] = float_to_f16(static_cast<float>(v)); break;
    case DataType::kI32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kI64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kU8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
  }
}

inline double load_value(const void* buf, size_t i, DataType t) {
  switch (t) {
    case DataType::kF32: return static_cast<const float*>(buf)[i];
    case DataType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kF16: return f16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kI32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kI64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kU8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// A buffer of `count` elements of rank `rank`'s input starting at element `first`.
inline std::vector<uint8_t> make_input(int rank, size_t count, DataType t, size_t first = 0) {
  std::vector<uint8_t> buf(std::max<size_t>(count * dtype_size(t), 1));
  for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, t, input_value(rank, first + i));
  return buf;
}

// The reduction of every rank's element i, as the collectives compute it.
inline double reference(int world, size_t i, ReduceOp op) {
  double acc = input_value(0, i);
  for (int r = 1; r < world; ++r) {
    double v = input_value(r, i);
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc = static_cast<float>(acc) * static_cast<float>(1.0 / world);
  return acc;
}

inline double tolerance(DataType t, double value) {
  double mag = std::abs(value) + 1;
  if (t == DataType::kBF16) return mag * 1e-2;
  if (t == DataType::kF16) return mag * 2e-3;
  return mag * 1e-6;
}

const std::vector<DataType> kAllTypes = {DataType::kF32, DataType::kBF16, DataType::kF16,
                                         DataType::kI32, DataType::kI64};
const std::vector<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

}  // namespace cohort::transport::coll::testing
