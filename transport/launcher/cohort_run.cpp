// cohort-run: starts N local ranks of a program, like torchrun. It gives each rank the
// COHORT_* variables that detect_job_env() reads (a fresh random job token and a free master
// port unless given), prefixes their output with "[rank R] ", binds each to its share of the
// cores (unless --bind none), and stops the whole job when one rank fails. Exit codes: 0 all ranks
// succeeded, 2 bad command line, else the failure's code.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>
#include <exception>
#include <string>

#include "core/base/error.h"
#include "transport/bootstrap/net.h"
#include "transport/launcher/run_options.h"
#include "transport/launcher/supervisor.h"

namespace launcher = cohort::transport::launcher;
namespace net = cohort::transport::net;

namespace {

// 128 random bits from /dev/urandom as hex; throws when the kernel cannot provide them.
std::string random_token() {
  net::Fd fd(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  unsigned char bytes[16];
  size_t got = 0;
  while (fd.valid() && got < sizeof(bytes)) {
    ssize_t n = read(fd.get(), bytes + got, sizeof(bytes) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  COHORT_CHECK(got == sizeof(bytes), cohort::Status::kIo, "cannot read /dev/urandom");
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

// A port that was free a moment ago: bind to port 0, read it, release it. Rank 0 binds it
// right after; the small window for a race is the same one torchrun accepts.
int free_port(const std::string& host) {
  int port = 0;
  net::listen_tcp(host, 0, 1, &port);
  return port;
}

// The CPUs this process may run on, ascending (empty when the kernel will not say).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Local rank `local` of `n`: a contiguous share of `cpus` (sizes differing by at most one), or,
// with more ranks than CPUs, one CPU shared round robin.
std::vector<int> share_of(const std::vector<int>& cpus, int local, int n) {
  const int c = static_cast<int>(cpus.size());
  if (c == 0) return {};
  if (n >= c) return {cpus[static_cast<size_t>(local % c)]};
  const int begin = local * c / n, end = (local + 1) * c / n;
  return std::vector<int>(cpus.begin() + begin, cpus.begin() + end);
}

launcher::SuperviseConfig make_config(launcher::RunOptions& o) {
  if (o.master_host.empty()) o.master_host = "127.0.0.1";
  if (o.master_port == 0) o.master_port = free_port(o.master_host);
  if (o.token.empty()) o.token = random_token();
  launcher::SuperviseConfig config;
  config.command = o.command;
  config.grace_s = o.grace_s;
  const std::vector<int> cpus = o.bind_cores ? allowed_cpus() : std::vector<int>();
  // Ranks sharing a CPU wait for work passively: a spinning OpenMP thread would take the CPU from
  // the rank it shares it with (the user's own OMP_WAIT_POLICY stays).
  const bool shared = !cpus.empty() && o.nproc > static_cast<int>(cpus.size()) && !std::getenv("OMP_WAIT_POLICY");
  for (int local = 0; local < o.nproc; ++local) {
    int rank = o.node_rank * o.nproc + local;
    config.ranks.push_back({rank,
                            {{"COHORT_RANK", std::to_string(rank)},
                             {"COHORT_WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
                             {"COHORT_LOCAL_RANK", std::to_string(local)},
                             {"COHORT_LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                             {"COHORT_NODE_RANK", std::to_string(o.node_rank)},
                             {"COHORT_NNODES", std::to_string(o.nnodes)},
                             {"COHORT_MASTER_ADDR", o.master_host},
                             {"COHORT_MASTER_PORT", std::to_string(o.master_port)},
                             {"COHORT_JOB_TOKEN", o.token}},
                            share_of(cpus, local, o.nproc)});
    if (shared) config.ranks.back().env.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  launcher::RunOptions options;
  try {
    options = launcher::parse_run_options(argc, argv);
  } catch (const launcher::UsageError& e) {
    std::fprintf(stderr, "cohort-run: %s (%s)\n", e.what(), launcher::kUsage);
    return 2;
  }
  if (options.help) {
    std::printf("%s\n", launcher::kUsage);
    return 0;
  }
  try {
    return launcher::supervise(make_config(options));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-run: %s\n", e.what());
    return 1;
  }
}
