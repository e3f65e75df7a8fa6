// The rank supervisor of cohort-run: starts the local ranks with fork/exec, prefixes every line
// they print with "[rank R] ", forwards SIGINT/SIGTERM/SIGHUP, and when one rank fails stops
// the others (SIGTERM, then SIGKILL after the grace period). Single-threaded; one poll() loop.
#pragma once

#include <string>
#include <vector>

namespace cohort::transport::launcher {

struct RankSpec {
  int rank;
  std::vector<std::pair<std::string, std::string>> env;  // added to the inherited environment
  std::vector<int> cpus;  // the CPUs the rank may run on (sched_setaffinity); empty: inherited
};

struct SuperviseConfig {
  std::vector<std::string> command;
  std::vector<RankSpec> ranks;
  double grace_s = 3.0;
};

// Runs the ranks to completion. Returns the launcher's exit code: 0 when every rank exited 0;
// the first failing rank's code (128+signal when killed); 128+signal when cohort-run itself was
// interrupted. Messages about failures go to stderr, prefixed "cohort-run: ".
int supervise(const SuperviseConfig& config);

}  // namespace cohort::transport::launcher
