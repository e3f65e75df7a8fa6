// bench_collectives: bus bandwidth (nccl-tests formula) of cohort's all-reduce, reduce-scatter
// and all-gather at 2 and 4 local ranks over shared memory and tcp, next to torch.distributed
// gloo and the ucx_perftest tag_bw limit of the same transport, as ratios; plus the latency of
// an 8-byte all-reduce. Ranks are forked processes joined through the TCP store. Transports:
// shm (sysv/posix: robust, failures found by timeout), shm-cma (adds cma: faster, but a dead
// peer is fatal inside UCX 1.13), tcp (UCX reports dead peers).
//   bench_collectives [--quick] [--ranks 2,4] [--transports shm,tcp] [--cma] [--sizes B,..]
//                     [--chunk BYTES] [--window N] [--no-anchors] [--busy-poll] [--spin-us N]
//                     [--nap-us N] [--messages] [--slot-bytes B] [--slots N]
//                     [--memory-spin-us N] [--no-registered]
// --messages keeps every collective on messages (no shared window between local ranks).
// Rows "op+reg" run the same collectives on memory from Communicator::allocate (the window
// reads and writes it in place, like NCCL's registered buffers); --no-registered skips them.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/collectives/bench.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

namespace cohort::bench {
namespace {

using namespace cohort::transport;
using namespace cohort::transport::coll;
using Ms = std::chrono::milliseconds;

const char* kOps[] = {"all_reduce", "reduce_scatter", "all_gather"};

// Seconds per operation on the slowest rank, median of `repeats` measurements.
double time_op(Communicator& c, const std::function<WorkPtr()>& op, size_t iters, int repeats) {
  op()->wait(Ms(120000));  // warm-up
  std::vector<double> times;
  for (int rep = 0; rep < repeats; ++rep) {
    c.barrier()->wait(Ms(120000));
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < iters; ++i) op()->wait(Ms(120000));
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0).count();
    c.all_reduce(&ns, 1, DataType::kI64, ReduceOp::kMax)->wait(Ms(120000));
    times.push_back(static_cast<double>(ns) / 1e9 / static_cast<double>(iters));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void rank_main(int rank, int world, int port, const std::string& transport,
               const BenchOptions& o, FILE* out) {
  const std::string tls = transport == "tcp" ? "tcp" : "self,sm";
  JobEnv env;
  env.rank = env.local_rank = rank;
  env.world = env.local_world = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.token = "bench-collectives-" + std::to_string(port) + "-" + std::to_string(getppid());
  auto store = connect_job_store(env, Ms(30000));
  ucx::EngineOptions engine;
  engine.tls = tls;
  engine.cma_without_failure_detection = o.cma || transport == "shm-cma";
  engine.blocking_progress = o.blocking;
  if (o.spin_us >= 0) engine.spin = std::chrono::microseconds(o.spin_us);
  engine.busy_nap = std::chrono::microseconds(o.nap_us);
  CommOptions options;
  options.chunk_bytes = o.chunk_bytes;
  options.window = o.window;
  options.shared_memory = o.shared_memory;
  if (o.slot_bytes) options.shared_slot_bytes = o.slot_bytes;
  if (o.slots) options.shared_slots = o.slots;
  if (o.memory_spin_us >= 0) engine.memory_spin = std::chrono::microseconds(o.memory_spin_us);
  auto comm = UcxCommunicator::create(store, rank, world, options, engine);
  if (rank == 0) std::fprintf(out, "TLS %s\n", comm->engine()->tls().c_str());
  const size_t max_bytes = o.sizes.back();
  std::vector<float> in(max_bytes / 4 + world), res(max_bytes / 4 + world);
  std::fill(in.begin(), in.end(), 1.0f);
  const int repeats = o.quick ? 3 : 5;
  // Caller buffers, then (where the ranks share a window) the same buffers taken from
  // Communicator::allocate, which the window reads and writes in place: rows "op+reg".
  auto run_ops = [&](float* a, float* b, const char* suffix) {
    for (const char* op : kOps) {
      for (size_t bytes : o.sizes) {
        size_t count = std::max<size_t>(bytes / 4 / world, 1) * world;  // whole buffer, elements
        std::string name = op;
        auto run = [&]() -> WorkPtr {
          if (name == "all_reduce") return comm->all_reduce(a, count, DataType::kF32, ReduceOp::kSum);
          if (name == "reduce_scatter")
            return comm->reduce_scatter(a, b, count / world, DataType::kF32, ReduceOp::kSum);
          return comm->all_gather(a, b, count / world, DataType::kF32);
        };
        double t = time_op(*comm, run, iterations(bytes, o.quick), repeats);
        if (rank == 0) std::fprintf(out, "COHORT %s%s %d %zu %.9f\n", op, suffix, world, bytes, t);
      }
    }
  };
  run_ops(in.data(), res.data(), "");
  if (comm->uses_shared_memory() && o.registered) {
    const size_t bytes = in.size() * sizeof(float);
    auto* a = static_cast<float*>(comm->allocate(bytes));
    auto* b = static_cast<float*>(comm->allocate(bytes));
    std::fill(a, a + in.size(), 1.0f);
    run_ops(a, b, "+reg");
    comm->deallocate(b);
    comm->deallocate(a);
  }
  auto lat = [&] { return comm->all_reduce(in.data(), 2, DataType::kF32, ReduceOp::kSum); };
  double t = time_op(*comm, lat, 300, repeats);
  if (rank == 0) std::fprintf(out, "COHORT lat8 %d 8 %.9f\n", world, t);
  std::fflush(out);
}

// Forks `world` ranks; returns what rank 0 reported.
std::string run_cohort(int world, const std::string& transport, const BenchOptions& o) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      FILE* out = fdopen(fds[1], "w");
      int rc = 0;
      try {
        rank_main(r, world, port, transport, o, out);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_collectives: rank %d: %s\n", r, e.what());
        rc = 1;
      }
      std::fflush(out);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  return text;
}

std::string human(size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// "all_reduce+reg" is all_reduce on registered memory: same formula, compared with gloo's
// all_reduce.
std::string base_op(const std::string& op) { return op.substr(0, op.find('+')); }

double bus_factor(const std::string& op, int n) {
  return base_op(op) == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

void report(const std::string& transport, const std::string& tls, int world,
            const Timings& ours, const Timings& gloo, double perftest) {
  std::printf("\n== %s (UCX_TLS=%s), %d ranks; ucx_perftest tag_bw limit %.2f GB/s ==\n",
              transport.c_str(), tls.c_str(), world, perftest);
  std::printf("%-17s %9s %13s %12s %9s %11s\n", "op", "size", "cohort GB/s", "gloo GB/s",
              "x gloo", "% perftest");
  for (auto& [key, seconds] : ours) {
    auto& [op, n, bytes] = key;
    if (n != world || op == "lat8") continue;
    double bus = static_cast<double>(bytes) / seconds * bus_factor(op, n) / 1e9;
    auto g = gloo.find({base_op(op), n, bytes});
    double gbus = g != gloo.end() && g->second > 0
                      ? static_cast<double>(bytes) / g->second * bus_factor(op, n) / 1e9 : 0;
    char ratio[32] = "n/a";
    if (gbus > 0) std::snprintf(ratio, sizeof(ratio), "%.2f", bus / gbus);
    std::printf("%-17s %9s %13.3f %12.3f %9s %10.0f%%\n", op.c_str(), human(bytes).c_str(), bus,
                gbus, ratio, perftest > 0 ? 100 * bus / perftest : 0.0);
  }
  auto lat = ours.find({"lat8", world, 8});
  auto glat = gloo.find({"lat8", world, 8});
  if (lat != ours.end()) {
    double g = glat != gloo.end() ? glat->second : 0;
    std::printf("8-byte all_reduce latency: cohort %.1f us, gloo %.1f us (gloo / cohort %.2f)\n",
                lat->second * 1e6, g * 1e6, g > 0 ? g / lat->second : 0.0);
  }
}

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  auto list = [](const char* s) {
    std::vector<std::string> out;
    std::string cur;
    for (const char* p = s;; ++p) {
      if (*p == ',' || *p == 0) {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
        if (!*p) break;
      } else {
        cur += *p;
      }
    }
    return out;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") o.quick = true;
    if (a == "--cma") o.cma = true;
    if (a == "--no-anchors") o.anchors = false;
    if (a == "--busy-poll") o.blocking = false;
    if (a == "--spin-us" && i + 1 < argc) o.spin_us = std::stol(argv[++i]);
    if (a == "--nap-us" && i + 1 < argc) o.nap_us = std::stol(argv[++i]);
    if (a == "--ranks" && i + 1 < argc) {
      o.worlds.clear();
      for (auto& s : list(argv[++i])) o.worlds.push_back(std::stoi(s));
    }
    if (a == "--transports" && i + 1 < argc) o.transports = list(argv[++i]);
    if (a == "--chunk" && i + 1 < argc) o.chunk_bytes = std::stoul(argv[++i]);
    if (a == "--window" && i + 1 < argc) o.window = std::stoul(argv[++i]);
    if (a == "--messages") o.shared_memory = false;
    if (a == "--no-registered") o.registered = false;
    if (a == "--slot-bytes" && i + 1 < argc) o.slot_bytes = std::stoul(argv[++i]);
    if (a == "--slots" && i + 1 < argc) o.slots = std::stoul(argv[++i]);
    if (a == "--memory-spin-us" && i + 1 < argc) o.memory_spin_us = std::stol(argv[++i]);
    if (a == "--sizes" && i + 1 < argc) {
      for (auto& s : list(argv[++i])) o.sizes.push_back(std::stoul(s));
    }
  }
  if (!o.sizes.empty()) {
    std::sort(o.sizes.begin(), o.sizes.end());
  } else if (o.quick) {
    o.sizes = {1u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  } else {
    for (size_t s = 1u << 10; s <= (256u << 20); s *= 4) o.sizes.push_back(s);
  }
  return o;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) {
  using namespace cohort::bench;
  BenchOptions o = parse(argc, argv);
  std::printf("bench_collectives%s: bus bandwidth = algbw x 2(n-1)/n (all_reduce), "
              "x (n-1)/n (reduce_scatter, all_gather); sizes are whole buffers\n",
              o.quick ? " --quick" : "");
  // Each world size: gloo first, then cohort on every transport right after, so that the
  // ratios compare runs made under the same load on this shared machine.
  for (int world : o.worlds) {
    Timings gloo = o.anchors ? run_gloo(world, o) : Timings{};
    for (const std::string& transport : o.transports) {
      std::string text = run_cohort(world, transport, o);
      std::string tls = "?";
      auto at = text.find("TLS ");
      if (at != std::string::npos) tls = text.substr(at + 4, text.find('\n', at) - at - 4);
      Timings ours;
      parse_lines(text, "COHORT", &ours);
      double limit = o.anchors ? run_perftest(tls, 64u << 20) : 0;
      report(transport, tls, world, ours, gloo, limit);
    }
  }
  return 0;
}
