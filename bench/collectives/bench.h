// Shared pieces of bench_collectives: measured cases, the anchors (gloo, ucx_perftest) and
// helpers. Timings are seconds per operation (the median of several runs, the slowest rank).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace cohort::bench {

// (op, ranks, bytes) -> seconds per operation. op: all_reduce, reduce_scatter, all_gather, lat8.
using Timings = std::map<std::tuple<std::string, int, size_t>, double>;

struct BenchOptions {
  bool quick = false;
  std::vector<int> worlds = {2, 4};
  std::vector<std::string> transports = {"shm", "shm-cma", "tcp"};
  std::vector<size_t> sizes;
  bool cma = false;
  bool anchors = true;
  bool blocking = true;  // EngineOptions::blocking_progress
  long spin_us = -1;     // EngineOptions::spin; -1: unset (picked from the host)
  long nap_us = 50;      // EngineOptions::busy_nap  // run gloo and ucx_perftest
  size_t chunk_bytes = 0;  // CommOptions::chunk_bytes (0: picked from the host)
  size_t window = 4;             // CommOptions::window
  bool shared_memory = true;     // CommOptions::shared_memory (--messages turns it off)
  bool registered = true;        // also time collectives on Communicator::allocate memory
  size_t slot_bytes = 0;         // CommOptions::shared_slot_bytes (0: default)
  size_t slots = 0;              // CommOptions::shared_slots (0: default)
  long memory_spin_us = -1;      // EngineOptions::memory_spin (-1: default)  // let shared memory use cma (faster, but a dead peer is fatal in UCX 1.13)
};

size_t iterations(size_t bytes, bool quick);  // same rule as gloo_bench.py
int free_port();
// Parses "<TAG> op ranks bytes seconds" lines.
void parse_lines(const std::string& text, const std::string& tag, Timings* out);
// Runs gloo_bench.py for `world` ranks; returns its timings (empty when torch is missing).
Timings run_gloo(int world, const BenchOptions& options);
// ucx_perftest tag_bw between two local processes with UCX_TLS=tls: GB/s (0 on failure).
double run_perftest(const std::string& tls, size_t bytes);

}  // namespace cohort::bench
