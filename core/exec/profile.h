// Opt-in time per operator: with COHORT_PROFILE=1 in the environment every executor adds the
// wall time of each node to its operator's total, and the process prints the table (to stderr,
// largest first) when it exits. Off, the cost is one predictable branch per node.
#pragma once

#include <chrono>
#include <string>

namespace cohort {

class OpProfile {
 public:
  static bool enabled();
  // Adds one run of `op` that took `seconds`.
  static void add(const std::string& op, double seconds);
  // Forgets what was recorded so far (a benchmark's warm-up steps).
  static void reset();
  // The table as text ("" when nothing was recorded).
  static std::string report();
};

}  // namespace cohort
