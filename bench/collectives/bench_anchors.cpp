// The anchors of bench_collectives: torch.distributed gloo through gloo_bench.py, and the
// ucx_perftest tag_bw limit of the transport cohort used. Both run as child processes.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "bench/collectives/bench.h"

namespace cohort::bench {

size_t iterations(size_t bytes, bool quick) {
  size_t budget = quick ? (64u << 20) : (256u << 20);
  size_t lo = quick ? 2 : 3, hi = quick ? 200 : 500;
  return std::max(lo, std::min(hi, budget / std::max<size_t>(bytes, 1)));
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

void parse_lines(const std::string& text, const std::string& tag, Timings* out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string t, op, seconds;
    int world = 0;
    size_t bytes = 0;
    if (fields >> t >> op >> world >> bytes >> seconds && t == tag)
      (*out)[{op, world, bytes}] = std::strtod(seconds.c_str(), nullptr);
  }
}

namespace {
std::string capture(const std::string& command) {
  std::string text;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
  pclose(pipe);
  return text;
}
}  // namespace

Timings run_gloo(int world, const BenchOptions& options) {
  std::string sizes;
  for (size_t s : options.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  sizes += ",8";
  std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 " GLOO_BENCH_SCRIPT " --world " +
                    std::to_string(world) + " --port " + std::to_string(free_port()) +
                    " --sizes " + sizes + (options.quick ? " --quick" : "") + " 2>/dev/null";
  Timings timings;
  parse_lines(capture(cmd), "GLOO", &timings);
  return timings;
}

double run_perftest(const std::string& tls, size_t bytes) {
  const std::string port = std::to_string(free_port());
  const std::string args = " -p " + port + " -t tag_bw -s " + std::to_string(bytes) + " -n " +
                           std::to_string(std::max<size_t>(10, (512u << 20) / bytes));
  pid_t server = fork();
  if (server == 0) {
    setenv("UCX_TLS", tls.c_str(), 1);
    std::string cmd = "exec ucx_perftest" + args + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  double best = 0;
  for (int attempt = 0; attempt < 5 && best == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server starts listening
    std::string out = capture("UCX_TLS=" + tls + " timeout 60 ucx_perftest 127.0.0.1" + args + " 2>&1");
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Final:", 0) != 0) continue;
      std::istringstream f(line.substr(6));
      double v[6] = {};
      for (double& x : v) f >> x;
      best = v[4] * 1048576.0 / 1e9;  // "MB/s" of ucx_perftest are MiB/s
    }
  }
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  return best;
}

}  // namespace cohort::bench
