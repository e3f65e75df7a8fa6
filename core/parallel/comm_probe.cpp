// probe_communication: see comm_probe.h.
#include "core/parallel/comm_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <cstdio>
#include <vector>

#include "core/base/error.h"

namespace cohort::parallel {

namespace coll = transport::coll;

namespace {

using Clock = std::chrono::steady_clock;

// One run of `op` with each rank's input of `bytes` over `group` (buffers large enough for the
// group's outputs), timed from a barrier to this rank's completion.
double run_once(coll::Communicator& group, CommOp op, size_t bytes, std::vector<float>& in, std::vector<float>& out) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  group.barrier()->wait();
  const auto start = Clock::now();
  switch (op) {
    case CommOp::kPointToPoint: {
      // Ping-pong with the neighbour (ranks 2k and 2k + 1): the round trip, halved below.
      const int peer = group.rank() ^ 1;
      if (peer >= group.size()) break;
      if (group.rank() % 2 == 0) {
        group.send(in.data(), count, coll::DataType::kF32, peer)->wait();
        group.recv(out.data(), count, coll::DataType::kF32, peer)->wait();
      } else {
        group.recv(out.data(), count, coll::DataType::kF32, peer)->wait();
        group.send(in.data(), count, coll::DataType::kF32, peer)->wait();
      }
      break;
    }
    case CommOp::kAllReduce:
      group.all_reduce(in.data(), out.data(), count, coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
      break;
    case CommOp::kAllGather:
      group.all_gather(in.data(), out.data(), count, coll::DataType::kF32)->wait();
      break;
    case CommOp::kReduceScatter:  // each rank's input of `bytes`: blocks of bytes / size
      group.reduce_scatter(in.data(), out.data(), std::max<size_t>(1, count / static_cast<size_t>(group.size())),
                           coll::DataType::kF32, coll::ReduceOp::kSum)
          ->wait();
      break;
    case CommOp::kBroadcast:
      group.broadcast(in.data(), count, coll::DataType::kF32, 0)->wait();
      break;
    case CommOp::kAllToAll:
      group.all_to_all(in.data(), out.data(), std::max<size_t>(1, count / static_cast<size_t>(group.size())),
                       coll::DataType::kF32)
          ->wait();
      break;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return op == CommOp::kPointToPoint ? seconds / 2 : seconds;
}

// The slowest rank of the world's median of `repetitions` runs (after a warm-up).
double measure(coll::Communicator& world, coll::Communicator& group, CommOp op, size_t bytes, int repetitions,
               std::vector<float>& in, std::vector<float>& out) {
  run_once(group, op, bytes, in, out);
  std::vector<double> times;
  for (int r = 0; r < repetitions; ++r) times.push_back(run_once(group, op, bytes, in, out));
  std::sort(times.begin(), times.end());
  float slowest = static_cast<float>(times[times.size() / 2]);
  world.all_reduce(&slowest, 1, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
  return slowest;
}

// A fixed amount of arithmetic (about 40 ms on one core here: long beside the skew of leaving a
// barrier), timed.
double compute_once() {
  const auto start = Clock::now();
  volatile double x = 1.0;
  for (int k = 0; k < 1 << 23; ++k) x = std::sqrt(x * 1.0000001 + 0.5);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The slowdown of computing on every rank at once against world rank 0 alone (the others
// blocked in a barrier, their progress threads running as in training): the median of 3 of each.
double measure_compute_stretch(coll::Communicator& world) {
  std::vector<double> alone, together;
  for (int r = 0; r < 3; ++r) {
    world.barrier()->wait();
    float a = world.rank() == 0 ? static_cast<float>(compute_once()) : 0.0f;
    world.barrier()->wait();
    float t = static_cast<float>(compute_once());
    world.all_reduce(&a, 1, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
    world.all_reduce(&t, 1, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
    alone.push_back(a);
    together.push_back(t);
  }
  std::sort(alone.begin(), alone.end());
  std::sort(together.begin(), together.end());
  return together[1] / alone[1];
}

}  // namespace

BusyThread::BusyThread(bool yield)
    : thread_([this, yield] {
        volatile double x = 1.0;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 4096; ++k) x = std::sqrt(x * 1.0000001 + 0.5);
          if (yield) std::this_thread::yield();
        }
      }) {}

BusyThread::~BusyThread() {
  stop_ = true;
  thread_.join();
}

CommTable probe_communication(coll::Communicator& world, const ProbeOptions& options) {
  COHORT_CHECK(options.small_bytes >= 4 && options.first_large_bytes > options.small_bytes &&
                   options.max_bytes >= options.first_large_bytes && options.repetitions >= 1,
               Status::kInvalidArgument, "communication probe: sizes must grow (small ", options.small_bytes,
               " < first large ", options.first_large_bytes, " <= max ", options.max_bytes, ") and repetitions >= 1");
  CommTable table;
  const auto start = Clock::now();
  const int n = world.size();
  if (n == 1) {
    table.source = "one rank: nothing to measure";
    return table;
  }
  table.compute_stretch = measure_compute_stretch(world);  // before any busy thread starts
  const int host_ranks = options.ranks_on_host > 0 ? options.ranks_on_host : n;
  const bool busy = options.busy >= 0 ? options.busy > 0
                                      : host_ranks * 2 > static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::unique_ptr<BusyThread> spinner;
  if (busy) spinner = std::make_unique<BusyThread>(true);
  // Room for the largest output: an all_gather of max_bytes from each of n ranks.
  std::vector<float> in(options.max_bytes / sizeof(float) * static_cast<size_t>(n), 1.0f);
  std::vector<float> out(in.size(), 0.0f);
  for (int g = 2; g <= n; ++g) {
    if (n % g != 0) continue;
    auto group = world.split(world.rank() / g, world.rank(), str_cat(world.name(), "/probe", g));
    for (CommOp op : {CommOp::kPointToPoint, CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                      CommOp::kBroadcast, CommOp::kAllToAll}) {
      if (op == CommOp::kPointToPoint && g != 2) continue;  // one pair is a message's cost
      const double small = measure(world, *group, op, options.small_bytes, options.repetitions, in, out);
      size_t large_bytes = options.first_large_bytes;
      double large = measure(world, *group, op, large_bytes, options.repetitions, in, out);
      while (large < 0.02 && large_bytes * 4 <= options.max_bytes) {
        large_bytes *= 4;
        large = measure(world, *group, op, large_bytes, options.repetitions, in, out);
      }
      CommCost c;
      c.op = op;
      c.ranks = g;
      const double extra = static_cast<double>(large_bytes - options.small_bytes);
      // Noise can make the large message look no slower: then the link is faster than this
      // probe resolves, and the bandwidth is bounded by what the large message showed.
      c.bytes_per_second = large > small ? extra / (large - small) : static_cast<double>(large_bytes) / large;
      c.latency_seconds = std::max(0.0, small - static_cast<double>(options.small_bytes) / c.bytes_per_second);
      table.entries.push_back(c);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  char text[160];
  std::snprintf(text, sizeof text, "measured in %.2f s over %d ranks%s; computing together %.2fx as slow as alone",
                seconds, n, busy ? ", each keeping a thread busy" : "", table.compute_stretch);
  table.source = text;
  return table;
}

}  // namespace cohort::parallel
