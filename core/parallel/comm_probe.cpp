// probe_communication: see comm_probe.h.
#include "core/parallel/comm_probe.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "core/checkpoint/format.h"

namespace cohort::parallel {

namespace coll = transport::coll;

namespace {

using Clock = std::chrono::steady_clock;

// The middle element (the upper one of an even count).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One round trip of `count` floats with `peer`: the even rank of the pair sends first.
void ping_pong(coll::Communicator& comm, int peer, const float* in, float* out, size_t count) {
  if (comm.rank() % 2 == 0) {
    comm.send(in, count, coll::DataType::kF32, peer)->wait();
    comm.recv(out, count, coll::DataType::kF32, peer)->wait();
  } else {
    comm.recv(out, count, coll::DataType::kF32, peer)->wait();
    comm.send(in, count, coll::DataType::kF32, peer)->wait();
  }
}

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
      if (peer < group.size()) ping_pong(group, peer, in.data(), out.data(), count);
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
  float slowest = static_cast<float>(median(times));
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

// The probe's own step when the caller gives none: a triad over buffers larger than the caches
// (a step's memory traffic: activations, gradients, optimizer state) and a dependent chain of
// arithmetic, about 20 ms on one core here.
void builtin_step() {
  thread_local std::vector<float> a(1 << 21, 1.0f), b(1 << 21, 0.5f), c(1 << 21, 0.25f);  // 8 MiB each
  for (int pass = 0; pass < 4; ++pass)
    for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] * 0.999f + b[i] * c[i];
  volatile double x = a[a.size() / 2];
  for (int k = 0; k < 1 << 21; ++k) x = std::sqrt(x * 1.0000001 + 0.5);
}

// The slowdown of `step` run on every rank at once against world rank 0 alone (the others blocked
// in a barrier, their progress threads running as in training). Each timing runs `step` as many
// times as take rank 0 about 30 ms alone (long beside the skew of leaving a barrier). Five of each,
// alternated; the fastest of each: what else runs on the host (a launcher, another job, a
// namespace's setup) only ever adds to a window, while the ranks' sharing of cores is in every
// one (the median of 3 read 0.99, 1.64 and 1.05x for 2 ranks of 1 core each within two minutes).
// Together, the ranks' median time, not the slowest's: where ranks take turns on a core, which of
// them a window leaves last is chance, and training's steps average it out (4 ranks on 2 cores: the
// slowest rank's read 2.10-2.85x from run to run, where the plans' measured steps implied 1.6-2.1x).
double measure_compute_stretch(coll::Communicator& world, const std::function<void()>& step) {
  step();  // every rank warm: buffers allocated, primitives made
  int64_t runs = 1;
  if (world.rank() == 0) {
    const auto start = Clock::now();
    step();
    const double once = std::chrono::duration<double>(Clock::now() - start).count();
    runs = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(0.03 / std::max(once, 1e-6))), 1, 1000);
  }
  world.broadcast(&runs, 1, coll::DataType::kI64, 0)->wait();
  auto timed = [&] {
    const auto start = Clock::now();
    for (int64_t k = 0; k < runs; ++k) step();
    return static_cast<float>(std::chrono::duration<double>(Clock::now() - start).count());
  };
  std::vector<double> alone, together;
  for (int r = 0; r < 5; ++r) {
    world.barrier()->wait();
    float a = world.rank() == 0 ? timed() : 0.0f;
    world.barrier()->wait();
    float t = timed();
    world.all_reduce(&a, 1, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
    std::vector<float> each(static_cast<size_t>(world.size()), 0.0f);
    world.all_gather(&t, each.data(), 1, coll::DataType::kF32)->wait();
    alone.push_back(a);
    together.push_back(median(std::vector<double>(each.begin(), each.end())));
  }
  return *std::min_element(together.begin(), together.end()) / *std::min_element(alone.begin(), alone.end());
}

// The processor time a message costs its rank (CommTable::message_compute_*): the transport's
// progress thread, the kernel's network stack, the wake-ups of the thread waiting for it. Each
// pair of neighbours (ranks 2k and 2k + 1; an odd last rank sits out) exchanges `round_trips`
// round trips of a small message and of a larger one whose transfer takes about a millisecond on
// the measured link, every pair at once; this process's processor time per message sent or
// received (2 a round trip), the least of 3 tries, the ranks' median; the two sizes give a fixed
// part and a part per byte. Measured without compute beside it: timing the messages inside
// windows of a step's compute (their processor time less the plain windows') read 76 and 168 us a
// message for the same 2 ranks a few minutes apart, where the difference of two 30 ms windows is
// as large as the messages' share; training's own processor time (4 ranks, 1 Gbit/s, a pipeline
// of 4 stages at 4 and 8 micro-batches, 1F1B and interleaved) put 50-100 us on a message.
// The ranks wait as if they computed (coll::WaitsAsIfComputing): a caller blocked in a wait lends
// its core to the engine's progress thread, which then polls — processor time a computing stage
// would not give, that read as the message's own (23 us a message against 43 this way: 2 ranks
// over shared memory, 2026-11-29).
struct MessageCompute {
  double seconds = 0, seconds_per_byte = 0;
};

double process_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

MessageCompute measure_message_compute(coll::Communicator& world, double bytes_per_second, size_t small_bytes,
                                       int round_trips = 30) {
  const size_t large_bytes =
      std::clamp<size_t>(static_cast<size_t>(bytes_per_second * 1e-3), 4 * small_bytes, size_t{1} << 20);
  std::vector<float> buf(large_bytes / sizeof(float) + 1, 1.0f);
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size();
  const coll::WaitsAsIfComputing computing;
  auto per_message = [&](size_t bytes) {
    const size_t count = paired ? bytes / sizeof(float) : 0;
    world.barrier()->wait();
    const double start = process_seconds();
    for (int k = 0; count > 0 && k < round_trips; ++k) ping_pong(world, peer, buf.data(), buf.data(), count);
    float t = paired ? static_cast<float>((process_seconds() - start) / (2.0 * round_trips)) : 0.0f;
    std::vector<float> each(static_cast<size_t>(world.size()), 0.0f);
    world.all_gather(&t, each.data(), 1, coll::DataType::kF32)->wait();
    std::vector<double> timed;
    for (int r = 0; r < world.size(); ++r)
      if ((r ^ 1) < world.size()) timed.push_back(each[static_cast<size_t>(r)]);
    return median(timed);
  };
  per_message(small_bytes);  // warm-up: the pairs' connections made
  double small = std::numeric_limits<double>::infinity(), large = small;
  for (int r = 0; r < 3; ++r) {
    small = std::min(small, per_message(small_bytes));
    large = std::min(large, per_message(large_bytes));
  }
  MessageCompute m;
  m.seconds_per_byte = std::max(0.0, (large - small) / static_cast<double>(large_bytes - small_bytes));
  m.seconds = std::max(0.0, small - m.seconds_per_byte * static_cast<double>(small_bytes));
  return m;
}

// The ranks that share this rank's machine and the cores they may run on together. Every rank
// sends its host name's hash and its affinity mask (the cores online where it has none); the
// ranks with this rank's name are its host's, and their cores the union of their masks. A
// launcher that binds each local rank to its share of the cores (cohort-run, mpirun --bind-to)
// gives each a part of the union, an unbound one the whole machine to every rank: either way
// cores / ranks is what each rank has. Ranks in network namespaces of one machine keep its name:
// they do share its cores. A collective: every rank calls it alike.
struct HostShare {
  int ranks = 1;
  int cores = 1;
};

HostShare host_share(coll::Communicator& world) {
  constexpr size_t kMaskWords = 16;  // 1024 cores
  std::vector<uint64_t> mine(1 + kMaskWords, 0);
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const uint64_t hash = checkpoint::hash64(name, std::strlen(name));  // the same on every rank, whatever its build
  mine[0] = hash;
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool bound = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0;
  const long online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  for (size_t cpu = 0; cpu < kMaskWords * 64; ++cpu)
    if (bound ? (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set)) : static_cast<long>(cpu) < online)
      mine[1 + cpu / 64] |= uint64_t{1} << (cpu % 64);
  const size_t n = static_cast<size_t>(world.size()), words = mine.size();
  std::vector<uint64_t> all(words * n, 0);
  world.all_gather(mine.data(), all.data(), words * sizeof(uint64_t), coll::DataType::kU8)->wait();
  HostShare share;
  share.ranks = 0;
  std::vector<uint64_t> cores(kMaskWords, 0);
  for (size_t r = 0; r < n; ++r) {
    if (all[r * words] != hash) continue;
    ++share.ranks;
    for (size_t w = 0; w < kMaskWords; ++w) cores[w] |= all[r * words + 1 + w];
  }
  share.cores = 0;
  for (uint64_t w : cores) share.cores += __builtin_popcountll(w);
  share.ranks = std::max(share.ranks, 1);
  share.cores = std::max(share.cores, 1);
  return share;
}

// The table's entries for `ops` over each of `groups` (each a split of `world`, every rank in
// one): per (group, op) the least time of every pass at the small size and at the large one,
// whose size the first pass chooses (growing x4 while a run stays under 20 ms); latency and
// bandwidth from the two. Point-to-point over groups of 2 only (one pair is a message's cost).
std::vector<CommCost> measure_entries(coll::Communicator& world,
                                      const std::vector<std::shared_ptr<coll::Communicator>>& groups,
                                      const std::vector<CommOp>& ops, const ProbeOptions& options,
                                      std::vector<float>& in, std::vector<float>& out) {
  struct Timed {
    int ranks;
    CommOp op;
    size_t large_bytes;
    double small, large;
  };
  std::vector<Timed> timed;
  for (int pass = 0; pass < options.passes; ++pass) {
    size_t k = 0;
    for (auto& group : groups) {
      const int g = group->size();
      for (CommOp op : ops) {
        if (op == CommOp::kPointToPoint && g != 2) continue;
        const double small = measure(world, *group, op, options.small_bytes, options.small_repetitions, in, out);
        if (pass == 0) {
          size_t large_bytes = options.first_large_bytes;
          double large = measure(world, *group, op, large_bytes, options.repetitions, in, out);
          while (large < 0.02 && large_bytes * 4 <= options.max_bytes) {
            large_bytes *= 4;
            large = measure(world, *group, op, large_bytes, options.repetitions, in, out);
          }
          timed.push_back({g, op, large_bytes, small, large});
        } else {
          Timed& t = timed[k];
          t.small = std::min(t.small, small);
          t.large = std::min(t.large, measure(world, *group, op, t.large_bytes, options.repetitions, in, out));
        }
        ++k;
      }
    }
  }
  std::vector<CommCost> entries;
  for (const Timed& t : timed) {
    CommCost c;
    c.op = t.op;
    c.ranks = t.ranks;
    const double extra = static_cast<double>(t.large_bytes - options.small_bytes);
    // Noise can make the large message look no slower: then the link is faster than this
    // probe resolves, and the bandwidth is bounded by what the large message showed.
    c.bytes_per_second =
        t.large > t.small ? extra / (t.large - t.small) : static_cast<double>(t.large_bytes) / t.large;
    c.latency_seconds = std::max(0.0, t.small - static_cast<double>(options.small_bytes) / c.bytes_per_second);
    entries.push_back(c);
  }
  return entries;
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
                   options.max_bytes >= options.first_large_bytes && options.repetitions >= 1 &&
                   options.small_repetitions >= 1 && options.passes >= 1,
               Status::kInvalidArgument, "communication probe: sizes must grow (small ", options.small_bytes,
               " < first large ", options.first_large_bytes, " <= max ", options.max_bytes,
               ") and repetitions, passes >= 1 (", options.repetitions, ", small ", options.small_repetitions, ", passes ",
               options.passes, ")");
  CommTable table;
  const auto start = Clock::now();
  const int n = world.size();
  if (n == 1) {
    table.source = "one rank: nothing to measure";
    return table;
  }
  // Before any busy thread starts.
  table.compute_stretch = measure_compute_stretch(world, options.step ? options.step : builtin_step);
  const HostShare share = host_share(world);  // a collective, so taken whatever the options say
  const int host_ranks = options.ranks_on_host > 0 ? options.ranks_on_host : share.ranks;
  const int cores = options.cores > 0 ? options.cores : share.cores;
  table.cores_per_rank = static_cast<double>(cores) / host_ranks;
  const bool busy = options.busy >= 0 ? options.busy > 0 : host_ranks * 2 > cores;
  std::unique_ptr<BusyThread> spinner;
  if (busy) spinner = std::make_unique<BusyThread>(true);
  // Room for the largest output: an all_gather of max_bytes from each of n ranks.
  std::vector<float> in(options.max_bytes / sizeof(float) * static_cast<size_t>(n), 1.0f);
  std::vector<float> out(in.size(), 0.0f);
  std::vector<std::shared_ptr<coll::Communicator>> groups;
  for (int g = 2; g <= n; ++g)
    if (n % g == 0) groups.push_back(world.split(world.rank() / g, world.rank(), str_cat(world.name(), "/probe", g)));
  const std::vector<CommOp> every_op = {CommOp::kPointToPoint, CommOp::kAllReduce, CommOp::kAllGather,
                                        CommOp::kReduceScatter, CommOp::kBroadcast, CommOp::kAllToAll};
  table.entries = measure_entries(world, groups, every_op, options, in, out);
  spinner.reset();
  // The collectives a tensor-parallel step waits for, again with no thread busy beside them,
  // where the host's ranks do not share cores: there a rank whose caller blocks on a collective
  // has its core to itself (the engine's progress thread keeps it: ucx::Engine::blocked_callers),
  // which the busy thread above, standing for the training thread's compute beside an overlapped
  // reduction, would hide (2 ranks on 2 cores: an all-reduce's latency 142 us under the busy
  // thread, 38 us without it; a tensor-parallel step's all-reduces of 128 KiB waited 56-70 us).
  const bool caller_waits_set = busy && host_ranks <= cores;
  if (caller_waits_set) {
    for (CommCost c : measure_entries(world, groups,
                                      {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter},
                                      options, in, out)) {
      c.caller_waits = true;
      table.entries.push_back(c);
    }
  }
  // Processor time: no busy thread beside it.
  double p2p_bytes_per_second = 0;
  for (const CommCost& c : table.entries)
    if (c.op == CommOp::kPointToPoint) p2p_bytes_per_second = c.bytes_per_second;
  const MessageCompute mc = measure_message_compute(world, p2p_bytes_per_second, options.small_bytes);
  table.message_compute_seconds = mc.seconds;
  table.message_compute_seconds_per_byte = mc.seconds_per_byte;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  char text[192];
  std::snprintf(text, sizeof text, "measured in %.2f s over %d ranks%s", seconds, n,
                !busy              ? ""
                : caller_waits_set ? ", each keeping a thread busy (the tensor axes' collectives also without)"
                                   : ", each keeping a thread busy");
  char stretch[224];
  std::snprintf(stretch, sizeof stretch,
                " together %.2fx as slow as alone; %.2f cores per rank; a message takes %.1f us + %.2f us per KiB "
                "of processor time",
                table.compute_stretch, table.cores_per_rank, table.message_compute_seconds * 1e6,
                table.message_compute_seconds_per_byte * 1024 * 1e6);
  table.source = str_cat(text, "; ", options.step ? options.step_name : "the built-in mix", stretch);
  return table;
}

double LinkMatrix::transfer_seconds(int i, int j, double bytes) const {
  if (i == j) return 0.0;
  const double bw = bandwidth(i, j);
  return latency(i, j) + (bw > 0 ? bytes / bw : std::numeric_limits<double>::infinity());
}

std::string LinkMatrix::describe() const {
  std::string out = "links, Mbit/s (latency ms):\n      ";
  char cell[48];
  for (int j = 0; j < ranks; ++j) {
    std::snprintf(cell, sizeof cell, "%18d", j);
    out += cell;
  }
  out += "\n";
  for (int i = 0; i < ranks; ++i) {
    std::snprintf(cell, sizeof cell, "rank %-2d", i);
    out += cell;
    for (int j = 0; j < ranks; ++j) {
      if (i == j)
        std::snprintf(cell, sizeof cell, "%18s", "-");
      else
        std::snprintf(cell, sizeof cell, "%9.1f (%6.3f)", bandwidth(i, j) * 8e-6, latency(i, j) * 1e3);
      out += cell;
    }
    out += "\n";
  }
  std::snprintf(cell, sizeof cell, "measured in %.2f s", seconds);
  return out + cell + "\n";
}

namespace {

// The round-trip time of `count` bytes with `peer`, led by this rank (the peer echoes).
double round_trip(coll::Communicator& world, int peer, std::vector<uint8_t>& buf, size_t bytes) {
  const auto start = Clock::now();
  world.send(buf.data(), bytes, coll::DataType::kU8, peer)->wait();
  world.recv(buf.data(), bytes, coll::DataType::kU8, peer)->wait();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Messages of a bandwidth stream, and the first of them left out of the rate: a shaped link (a
// token bucket) lets a burst through at line rate after an idle spell — and a ping-pong idles each
// direction half the time, so round trips measured an 8 Mbit/s link behind a 256 KiB bucket at
// 15-45 Mbit/s. The later messages of a back-to-back stream arrive at the sustained rate.
constexpr int kStreamMessages = 6;
constexpr int kStreamSkipped = 2;

// The leader's side of one pair: {latency, bandwidth}. Each exchange starts with a header {bytes,
// messages}: one message is echoed back (a round trip); several are streamed to the peer, which
// answers the rate it saw them arrive at; bytes < 0 ends.
std::pair<double, double> lead_pair(coll::Communicator& world, int peer, const LinkProbeOptions& o,
                                    std::vector<uint8_t>& buf, Clock::time_point deadline) {
  auto header = [&](int64_t bytes, int64_t messages) {
    int64_t h[2] = {bytes, messages};
    world.send(h, 2, coll::DataType::kI64, peer)->wait();
  };
  auto exchange = [&](size_t bytes) {
    header(static_cast<int64_t>(bytes), 1);
    return round_trip(world, peer, buf, bytes);
  };
  exchange(o.small_bytes);  // warm-up: connection set-up
  std::vector<double> small;
  for (int r = 0; r < o.repetitions; ++r) small.push_back(exchange(o.small_bytes));
  const double latency = median(small) / 2;
  // The size at which a round trip takes target_seconds: the stream's whole length.
  size_t bytes = o.first_large_bytes;
  double rtt = exchange(bytes);
  while (rtt < o.target_seconds && bytes * 4 <= o.max_bytes && Clock::now() < deadline) {
    bytes *= 4;
    rtt = exchange(bytes);
  }
  const size_t piece = std::max<size_t>(o.small_bytes, bytes / 4);
  header(static_cast<int64_t>(piece), kStreamMessages);
  std::vector<coll::WorkPtr> sends;
  for (int m = 0; m < kStreamMessages; ++m)
    sends.push_back(world.send(buf.data() + static_cast<size_t>(m) * piece, piece, coll::DataType::kU8, peer));
  for (auto& w : sends) w->wait();
  double bw = 0;
  world.recv(&bw, sizeof bw, coll::DataType::kU8, peer)->wait();
  header(-1, 0);
  // The round trip's rate is too high behind a token bucket, the stream's too high where the
  // peer's completions come in a bunch (a fast link, the peer's thread waiting for a core: on
  // this host's veths the stream alone read 1-27 Tbit/s): the lower of the two.
  const double round_trip_bw = static_cast<double>(bytes) / std::max(rtt / 2 - latency, 1e-9);
  bw = bw > 0 ? std::min(bw, round_trip_bw) : round_trip_bw;
  return {latency, bw};
}

void echo_pair(coll::Communicator& world, int peer, std::vector<uint8_t>& buf) {
  for (int k = 0; k < 1000; ++k) {  // bounded: the leader sends at most 5 + log4(max/first) headers
    int64_t h[2] = {0, 0};
    world.recv(h, 2, coll::DataType::kI64, peer)->wait();
    const int64_t bytes = h[0], messages = h[1];
    if (bytes < 0) return;
    COHORT_CHECK(messages >= 1 && messages <= kStreamMessages &&
                     static_cast<size_t>(bytes) * static_cast<size_t>(messages) <= buf.size(),
                 Status::kInternal, "link probe: rank ", peer, " asked for ", messages, " x ", bytes, " bytes");
    const size_t n = static_cast<size_t>(bytes);
    if (messages == 1) {
      world.recv(buf.data(), n, coll::DataType::kU8, peer)->wait();
      world.send(buf.data(), n, coll::DataType::kU8, peer)->wait();
      continue;
    }
    // Every receive posted at once, each timed as it completes (in order: one pair's messages
    // are matched in issue order).
    std::vector<coll::WorkPtr> recvs;
    for (int64_t m = 0; m < messages; ++m)
      recvs.push_back(world.recv(buf.data() + static_cast<size_t>(m) * n, n, coll::DataType::kU8, peer));
    std::vector<Clock::time_point> at;
    for (auto& w : recvs) {
      w->wait();
      at.push_back(Clock::now());
    }
    const double span = std::chrono::duration<double>(at.back() - at[kStreamSkipped]).count();
    double bw = span > 0 ? static_cast<double>(n) * static_cast<double>(messages - 1 - kStreamSkipped) / span : 0.0;
    world.send(&bw, sizeof bw, coll::DataType::kU8, peer)->wait();
  }
  throw Error(Status::kInternal, str_cat("link probe: rank ", peer, " never ended its exchanges"));
}

}  // namespace

LinkMatrix probe_links(coll::Communicator& world, const LinkProbeOptions& options) {
  COHORT_CHECK(options.small_bytes >= 1 && options.first_large_bytes > options.small_bytes &&
                   options.max_bytes >= options.first_large_bytes && options.repetitions >= 1 &&
                   options.target_seconds > 0 && options.budget_seconds > 0,
               Status::kInvalidArgument, "link probe: sizes must grow (small ", options.small_bytes, " < first large ",
               options.first_large_bytes, " <= max ", options.max_bytes,
               "), repetitions >= 1, target and budget seconds > 0");
  const auto start = Clock::now();
  const int n = world.size(), me = world.rank();
  LinkMatrix m;
  m.ranks = n;
  const size_t cells = static_cast<size_t>(n) * static_cast<size_t>(n);
  m.latency_seconds.assign(cells, 0.0);
  m.bytes_per_second.assign(cells, 0.0);
  if (n == 1) return m;
  // Each pair's budget: an equal share of the whole, round by round.
  const int slots = n % 2 == 0 ? n : n + 1;  // the circle method; slot n is the bye when n is odd
  const int rounds = slots - 1;
  std::vector<uint8_t> buf(options.max_bytes * 2, 0);  // a stream: kStreamMessages quarters of max_bytes
  std::vector<float> mine(2 * cells, 0.0f);  // latency then bandwidth of the pairs this rank led
  world.barrier()->wait();
  for (int r = 0; r < rounds; ++r) {
    // Slot 0 stays; the others rotate. Slot s plays slot slots - 1 - s.
    auto rank_at = [&](int slot) { return slot == 0 ? 0 : 1 + (slot - 1 + r) % (slots - 1); };
    int peer = -1;
    for (int s = 0; s < slots / 2; ++s) {
      const int a = rank_at(s), b = rank_at(slots - 1 - s);
      if (a >= n || b >= n) continue;
      if (a == me) peer = b;
      if (b == me) peer = a;
    }
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options.budget_seconds * (r + 1) / rounds));
    if (peer >= 0 && me < peer) {
      const auto [lat, bw] = lead_pair(world, peer, options, buf, deadline);
      mine[static_cast<size_t>(me * n + peer)] = static_cast<float>(lat);
      mine[cells + static_cast<size_t>(me * n + peer)] = static_cast<float>(bw);
    } else if (peer >= 0) {
      echo_pair(world, peer, buf);
    }
    world.barrier()->wait();  // pairs of the next round must not share a rank's time with this one's
  }
  std::vector<float> all(mine.size(), 0.0f);
  world.all_reduce(mine.data(), all.data(), mine.size(), coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const int a = std::min(i, j), b = std::max(i, j);
      m.latency_seconds[static_cast<size_t>(i * n + j)] = all[static_cast<size_t>(a * n + b)];
      m.bytes_per_second[static_cast<size_t>(i * n + j)] = all[cells + static_cast<size_t>(a * n + b)];
    }
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return m;
}

std::vector<double> measure_compute_scales(coll::Communicator& world) {
  const int n = world.size();
  // World rank 0 alone (the others wait in the barrier), then every rank at once.
  float alone = 0;
  world.barrier()->wait();
  if (world.rank() == 0) {
    std::vector<double> t;
    for (int k = 0; k < 3; ++k) t.push_back(compute_once());
    alone = static_cast<float>(median(t));
  }
  world.broadcast(&alone, 1, coll::DataType::kF32, 0)->wait();
  std::vector<float> together(static_cast<size_t>(n), 0.0f);
  world.barrier()->wait();
  std::vector<double> t;
  for (int k = 0; k < 3; ++k) t.push_back(compute_once());
  together[static_cast<size_t>(world.rank())] = static_cast<float>(median(t));
  std::vector<float> all(together.size(), 0.0f);
  world.all_reduce(together.data(), all.data(), together.size(), coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  std::vector<double> scales;
  for (float x : all) scales.push_back(alone > 0 ? x / alone : 1.0);
  return scales;
}

}  // namespace cohort::parallel
