// The command line of cohort-run, parsed and checked. Parsing never exits: a bad command line
// becomes a UsageError whose message is the one line cohort-run prints before exiting with 2.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::transport::launcher {

struct RunOptions {
  int nproc = 0;            // ranks on this node (-n)
  int nnodes = 1;           // nodes in the job
  int node_rank = 0;        // this node's index
  std::string master_host;  // empty: 127.0.0.1 with a free port (single node only)
  int master_port = 0;
  std::string token;     // empty: generated (single node only)
  double grace_s = 3.0;  // from SIGTERM to SIGKILL when stopping ranks
  // --bind cores (default): each local rank runs on its own share of the cores cohort-run may use
  // (its CPU affinity), so a rank's math threads (OpenMP's default follows the affinity) never
  // oversubscribe them; --bind none leaves every rank the launcher's whole affinity.
  bool bind_cores = true;
  bool help = false;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

extern const char* const kUsage;

// Parses argv (argv[0] skipped). Throws UsageError naming the offending argument.
RunOptions parse_run_options(int argc, char** argv);

}  // namespace cohort::transport::launcher
