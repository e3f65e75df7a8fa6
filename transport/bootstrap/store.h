// The rendezvous store: a small key-value service through which ranks exchange what they need
// to connect (UCX worker addresses, NCCL unique ids). Rank 0 serves it over TCP (tcp_store.h);
// tests inside one process use MemoryStore. Every wait has a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cohort::transport {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

class Store {
 public:
  virtual ~Store() = default;
  // Publishes value under key (overwrites). Throws cohort::Error on failure.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until key exists, then returns its value. Throws cohort::Error with Status::kTimeout
  // naming the key when `timeout` passes first, or kPeerFailed when the store is gone.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
};

// A store shared by threads of one process (tests, single-process multi-rank simulation).
std::shared_ptr<Store> make_memory_store();

}  // namespace cohort::transport
