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
// peer's region, and the window is used only if every rank succeeded. Everything but ready()
// runs on the progress thread, where the regions are also released (release()).
//
// Registered memory: buffers the caller allocated through the communicator
// (UcxCommunicator::allocate) are mapped by every rank the same way, one region per allocation
// and rank, numbered in allocation order (the same on every rank). A rank whose input or output
// lies in such memory does not copy through its slot: with each chunk it publishes where its
// input and its result are (a Place per slot, written before `filled`), and its peers read them
// there. Each rank decides for its own buffers; ranks that do not register keep copying.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
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
  // Where a chunk's bytes are: in the owner's slot (alloc 0), or at `offset` of the owner's
  // registered allocation `alloc`.
  struct Place {
    uint64_t alloc = 0;
    uint64_t offset = 0;
    bool in_slot() const { return alloc == 0; }
  };
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
  // Registered memory (progress thread). add_allocation() maps `bytes` for allocation `id` and
  // writes its encoded key; attach_allocation() maps every peer's region of it (as attach());
  // settle_allocation() keeps the peers' mappings when every rank attached (`shared`), else
  // drops them and the allocation is this rank's memory only. free_allocation() unmaps this
  // rank's region and its mappings of the peers'. allocation_data(): this rank's pointer.
  bool add_allocation(ucx::Engine& engine, uint64_t id, size_t bytes, uint8_t* key, std::string* why);
  bool attach_allocation(ucx::Engine& engine, const std::vector<int>& members, uint64_t id,
                         const uint8_t* keys, std::string* why);
  void settle_allocation(uint64_t id, bool shared);
  void free_allocation(uint64_t id);
  uint8_t* allocation_data(uint64_t id) const;
  // Where [p, p + bytes) lies if it is inside one of this rank's allocations that every rank
  // maps, else the slot (a Place with alloc 0).
  Place locate(const void* p, size_t bytes) const;
  // This rank's chunk in `slot`: where its input and its result are (before `filled`).
  void publish(size_t slot, Place input, Place result) const;
  // Rank `rank`'s input or result for the chunk in `slot` (after its filled / reduced): its
  // slot's data, or the published place in its registered memory, which must hold `bytes`.
  // Throws cohort::Error when that allocation is not mapped here (freed out of order).
  const uint8_t* input(int rank, size_t slot, size_t bytes) const;
  const uint8_t* result(int rank, size_t slot, size_t bytes) const;
  bool input_in_slot(int rank, size_t slot) const;
  // Chunks this rank published with its input or result in registered memory (tests, bench).
  uint64_t registered_chunks() const { return registered_chunks_.load(std::memory_order_relaxed); }

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
  const uint8_t* placed(int rank, size_t slot, int which, size_t bytes) const;
  std::atomic<uint64_t>* place_words(int rank, size_t slot) const;

  std::atomic<bool> ready_{false};
  uint64_t next_ = 0;
  struct Allocation {
    std::unique_ptr<ucx::LocalRegion> mine;
    std::vector<std::unique_ptr<ucx::PeerRegion>> peers;  // communicator rank -> mapping
    bool shared = false;
  };
  std::map<uint64_t, Allocation> allocations_;
  mutable std::atomic<uint64_t> registered_chunks_{0};
};

}  // namespace cohort::transport::coll
