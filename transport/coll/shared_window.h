// SharedWindow: the slots through which the ranks of one communicator that all run on one host
// exchange data in shared memory instead of messages. Each rank owns a region (mapped by UCX:
// transport/ucx/shared_memory.h) of `slots` data slots and, per slot, three counters that only
// its owner writes and every rank reads: filled (the owner copied its input chunk in), reduced
// (the owner wrote its part of the result into its slot) and read (the owner has taken what it
// needs from every rank's slot). Chunks of the communicator's operations take sequence numbers
// in issue order, the same on every rank; chunk s uses slot s % slots, and a counter holds s + 1
// of the last chunk that reached it, so a waiter compares with >=.
//
// Set up collectively before a communicator's first all-reduce, reduce-scatter or all-gather
// (ucx_communicator.cpp): a rank maps its region, the ranks exchange keys, each maps every
// peer's region, and the window is used only if every rank succeeded. Everything but ready() runs on the progress thread, where
// the regions are also released (release()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/ucx/shared_memory.h"

namespace cohort::transport::ucx {
class Engine;
}

namespace cohort::transport::coll {

class SharedWindow {
 public:
  enum Counter : int { kFilled = 0, kReduced = 1, kRead = 2 };
  static constexpr size_t kKeyBytes = 1024;  // one rank's encoded key in the setup exchange

  SharedWindow(int rank, int size, size_t slots, size_t slot_bytes);
  ~SharedWindow();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slots() const { return slots_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // Setup, progress thread. map() writes this rank's encoded key (kKeyBytes) into `key`;
  // attach() maps every peer's region from all ranks' keys (size() * kKeyBytes, communicator
  // order; members maps communicator ranks to world ranks). Both false with `why` on failure.
  bool map(ucx::Engine& engine, uint8_t* key, std::string* why);
  bool attach(ucx::Engine& engine, const std::vector<int>& members, const uint8_t* keys,
              std::string* why);
  // Unmaps everything (progress thread); the window must no longer be used.
  void release();
  // Whether setup succeeded on every rank (set on the progress thread, read anywhere).
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  void set_ready() { ready_.store(true, std::memory_order_release); }

  // After setup.
  std::atomic<uint64_t>& counter(int rank, size_t slot, Counter c) const;
  uint8_t* data(int rank, size_t slot) const;
  // Reserves `chunks` consecutive sequence numbers for one operation and returns the first
  // (progress thread, as operations start: in issue order).
  uint64_t take(size_t chunks) {
    uint64_t first = next_;
    next_ += chunks;
    return first;
  }

 private:
  size_t counters_bytes() const;
  size_t region_bytes() const;

  const int rank_;
  const int size_;
  const size_t slots_;
  const size_t slot_bytes_;
  std::unique_ptr<ucx::LocalRegion> mine_;
  std::vector<std::unique_ptr<ucx::PeerRegion>> peers_;
  std::vector<uint8_t*> bases_;  // communicator rank -> its region as mapped here
  std::atomic<bool> ready_{false};
  uint64_t next_ = 0;
};

}  // namespace cohort::transport::coll
