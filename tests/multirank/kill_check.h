// The check a survivor makes after the last rank died mid-run (dp_rank's and tp_rank's -kill
// modes): its step's failure must be kPeerFailed or kTimeout, name the dead rank as `want` says
// ("rank 3", "world rank 3"), and come within 30 s of `start`. Prints one line; returns the exit
// code (0: as expected).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/base/error.h"

namespace cohort::test {

inline int check_kill_failure(int rank, int64_t step, const Error& e, const std::string& want,
                              std::chrono::steady_clock::time_point start) {
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool ok = (e.status() == Status::kPeerFailed || e.status() == Status::kTimeout) &&
                  std::string(e.what()).find(want) != std::string::npos && took < 30;
  std::printf("rank %d: step %lld failed after %.1f s with status %d: %s (%s)\n", rank, static_cast<long long>(step),
              took, static_cast<int>(e.status()), e.what(), ok ? "expected" : "UNEXPECTED");
  return ok ? 0 : 1;
}

}  // namespace cohort::test
