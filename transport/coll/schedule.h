// A collective is compiled into a schedule before it runs: independent chains (one per pipelined
// chunk, or one for latency-optimal algorithms), each a sequence of stages. A stage posts its
// transfers together and, when all are done, runs its local step (a reduction, a scale). Chains
// run concurrently up to a window, which is what overlaps the reduction of chunk k with the
// transfer of chunk k+1. Peers are communicator ranks; the executor maps them to world ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/coll/work.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

struct Xfer {
  bool send = false;
  int peer = -1;      // communicator rank
  void* buf = nullptr;
  size_t bytes = 0;
  uint32_t step = 0;  // message index inside the chain; unique per (chain, peer, direction)
  ucx::Transfer transfer;
};

struct Stage {
  std::vector<Xfer> xfers;
  std::function<void()> after;  // local step once every transfer has completed (and the gate opened)
  // Optional, for steps that wait on shared memory instead of messages: polled once every
  // transfer has completed; -1 lets the stage finish, else the communicator rank it waits for.
  std::function<int()> gate = nullptr;
};

struct Chain {
  std::vector<Stage> stages;
  size_t next = 0;  // the stage in flight
  int pending = 0;  // its transfers not yet complete
  bool done = false;
};

struct Op {
  std::string name;  // "all_reduce(f32 x 1000, sum)"
  bool p2p = false;
  bool local = false;  // submitted as Executor::Order::kLocal: exchanges nothing with peers
  uint32_t seq = 0;
  size_t window = 1;  // chains in flight at once
  bool memory = false;  // stages wait on shared memory (gates): poll without waiting for events
  std::function<void()> start;   // local step before any transfer (copies)
  std::function<void()> finish;  // local step after every chain
  std::vector<Chain> chains;
  std::vector<std::vector<uint8_t>> scratch;  // owned temporary buffers
  std::shared_ptr<Work> work;
  // Executor state.
  bool begun = false;
  size_t started = 0;     // chains begun
  size_t completed = 0;   // chains done
  size_t first_live = 0;  // every chain before it is done
  Clock::time_point drain_deadline{};  // failed: its Work fails once drained or at this time

  uint8_t* new_scratch(size_t bytes) {
    scratch.emplace_back(bytes);
    return scratch.back().data();
  }
};

// Helpers for schedule builders.
inline Xfer send_to(int peer, const void* buf, size_t bytes, uint32_t step) {
  Xfer x;
  x.send = true;
  x.peer = peer;
  x.buf = const_cast<void*>(buf);
  x.bytes = bytes;
  x.step = step;
  return x;
}
inline Xfer recv_from(int peer, void* buf, size_t bytes, uint32_t step) {
  Xfer x = send_to(peer, buf, bytes, step);
  x.send = false;
  return x;
}

}  // namespace cohort::transport::coll
