// cohort-run end to end: ranks get the COHORT_* environment and prefixed output, join the TCP
// store, a failing rank stops the job (named, bounded), SIGTERM is forwarded, and bad command
// lines exit with 2. Every wait has a deadline; a stuck cohort-run is killed by the harness.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// cohort-run running with its stdout and stderr captured.
class Launch {
 public:
  explicit Launch(std::vector<std::string> args) {
    int out[2], err[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      std::vector<char*> argv{const_cast<char*>(COHORT_RUN_BIN)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(COHORT_RUN_BIN, argv.data());
      _exit(126);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Launch() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_fd_);
    close(err_fd_);
  }

  // Reads output until pred(out) holds or the deadline passes; returns pred's last value.
  bool read_until(const std::function<bool(const std::string&)>& pred, Clock::duration limit) {
    auto deadline = Clock::now() + limit;
    while (!pred(out_)) {
      if (!read_some(deadline)) return pred(out_);
    }
    return true;
  }

  // Reads everything until both pipes close and cohort-run exits; returns its exit code, or -1
  // when that does not happen within `limit`.
  int finish(Clock::duration limit) {
    auto deadline = Clock::now() + limit;
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (!read_some(deadline)) return -1;
    }
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(2ms);  // the pipes are closed: the exit is imminent
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  bool read_some(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) return false;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (ms.count() <= 0 || poll(fds.data(), fds.size(), static_cast<int>(ms.count())) <= 0) {
      return false;
    }
    for (const pollfd& p : fds) {
      if (!p.revents) continue;
      char buf[4096];
      ssize_t n = read(p.fd, buf, sizeof(buf));
      std::string& sink = p.fd == out_fd_ ? out_ : err_;
      if (n > 0) {
        sink.append(buf, static_cast<size_t>(n));
      } else {
        close(p.fd);
        (p.fd == out_fd_ ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  std::string out_;
  std::string err_;
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::vector<int> pids_in(const std::string& text) {
  std::vector<int> pids;
  std::regex re("pid=([0-9]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// A port that was free a moment ago.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(CohortRun, ThreeRanksGetPrefixesAndEnvironment) {
  Launch run({"-n", "3", "--", RANK_PROBE_BIN, "env"});
  ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
  std::regex line(R"(\[rank (\d)\] rank=(\d) world=3 local_rank=(\d) local_world=3 )"
                  R"(master=127\.0\.0\.1:(\d+) token_len=32\n)");
  int matched = 0;
  for (std::sregex_iterator it(run.out().begin(), run.out().end(), line), end; it != end; ++it) {
    EXPECT_EQ((*it)[1], (*it)[2]);  // the prefix names the rank the program saw
    EXPECT_EQ((*it)[2], (*it)[3]);  // one node: local rank = rank
    EXPECT_GT(std::stoi((*it)[4]), 0);
    ++matched;
  }
  EXPECT_EQ(matched, 3) << run.out();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(count_of(run.err(), "[rank " + std::to_string(r) + "] stderr line of rank " +
                                      std::to_string(r) + "\n"),
              1)
        << run.err();
  }
}

// The CPUs of each rank's "cpus=..." line, by rank.
std::vector<std::vector<int>> cpus_by_rank(const std::string& out, int ranks, std::vector<std::string>* waits) {
  std::vector<std::vector<int>> cpus(static_cast<size_t>(ranks));
  waits->assign(static_cast<size_t>(ranks), "");
  std::regex line(R"(\[rank (\d+)\] cpus=([0-9,]*) wait=(\w+)\n)");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    const size_t r = std::stoul((*it)[1]);
    if (r >= cpus.size()) continue;
    std::string list = (*it)[2];
    for (size_t pos = 0; pos < list.size();) {
      const size_t comma = list.find(',', pos);
      cpus[r].push_back(std::stoi(list.substr(pos, comma - pos)));
      pos = comma == std::string::npos ? list.size() : comma + 1;
    }
    (*waits)[r] = (*it)[3];
  }
  return cpus;
}

std::vector<int> my_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// --bind cores (the default): the ranks split the launcher's CPUs between them, each its own
// share, so OpenMP's default thread count (the affinity's size) adds up to the cores; with more
// ranks than CPUs each gets one, shared, and waits passively. --bind none: every rank all of them.
TEST(CohortRun, RanksRunOnTheirOwnShareOfTheCores) {
  const std::vector<int> all = my_cpus();
  ASSERT_FALSE(all.empty());
  // The user's own OMP_WAIT_POLICY is kept (checked last); these runs start without one (dev.sh
  // exports one for the whole test suite).
  const char* given = std::getenv("OMP_WAIT_POLICY");
  const std::string saved = given ? given : "";
  unsetenv("OMP_WAIT_POLICY");
  const int n = static_cast<int>(std::min<size_t>(all.size(), 4));
  std::vector<std::string> waits;
  {
    Launch run({"-n", std::to_string(n), "--", RANK_PROBE_BIN, "cpus"});
    ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
    const auto cpus = cpus_by_rank(run.out(), n, &waits);
    std::vector<int> seen;
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(cpus[static_cast<size_t>(r)].empty()) << run.out();
      EXPECT_EQ(waits[static_cast<size_t>(r)], "unset") << "ranks that do not share a CPU may spin";
      seen.insert(seen.end(), cpus[static_cast<size_t>(r)].begin(), cpus[static_cast<size_t>(r)].end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, all) << "the shares split the launcher's CPUs, each CPU once:\n" << run.out();
  }
  {
    const int many = static_cast<int>(all.size()) + 1;
    Launch run({"-n", std::to_string(many), "--", RANK_PROBE_BIN, "cpus"});
    ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
    const auto cpus = cpus_by_rank(run.out(), many, &waits);
    for (int r = 0; r < many; ++r) {
      EXPECT_EQ(cpus[static_cast<size_t>(r)].size(), 1u) << run.out();
      EXPECT_EQ(waits[static_cast<size_t>(r)], "PASSIVE") << run.out();
    }
  }
  {
    Launch run({"--bind", "none", "-n", "2", "--", RANK_PROBE_BIN, "cpus"});
    ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
    const auto cpus = cpus_by_rank(run.out(), 2, &waits);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(cpus[static_cast<size_t>(r)], all) << run.out();
  }
  {
    setenv("OMP_WAIT_POLICY", "active", 1);
    const int many = static_cast<int>(all.size()) + 1;
    Launch run({"-n", std::to_string(many), "--", RANK_PROBE_BIN, "cpus"});
    ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
    cpus_by_rank(run.out(), many, &waits);
    for (int r = 0; r < many; ++r) EXPECT_EQ(waits[static_cast<size_t>(r)], "active") << run.out();
  }
  if (given) setenv("OMP_WAIT_POLICY", saved.c_str(), 1);
  else unsetenv("OMP_WAIT_POLICY");
}

TEST(CohortRun, RanksJoinTheStoreOfRankZero) {
  Launch run({"-n", "3", "--token", "given-token", "--", RANK_PROBE_BIN, "store"});
  ASSERT_EQ(run.finish(30s), 0) << run.out() << run.err();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(
        count_of(run.out(), "[rank " + std::to_string(r) + "] store ok rank=" + std::to_string(r)),
        1)
        << run.out();
  }
}

TEST(CohortRun, LinesAreNeverMixedMidLine) {
  constexpr int kLines = 500;
  Launch run({"-n", "3", "--", RANK_PROBE_BIN, "lines", std::to_string(kLines)});
  ASSERT_EQ(run.finish(30s), 0) << run.err();
  std::regex line(R"(\[rank (\d)\] line (\d+) of rank (\d))");
  std::vector<int> next(3, 0);
  size_t start = 0;
  for (size_t nl = run.out().find('\n'); nl != std::string::npos;
       start = nl + 1, nl = run.out().find('\n', start)) {
    std::smatch m;
    std::string text = run.out().substr(start, nl - start);
    ASSERT_TRUE(std::regex_match(text, m, line)) << "mixed line: " << text;
    ASSERT_EQ(m[1], m[3]) << text;
    int r = std::stoi(m[1]);
    EXPECT_EQ(std::stoi(m[2]), next[r]++) << text;  // each rank's lines stay in order
  }
  EXPECT_EQ(next, std::vector<int>(3, kLines));
}

TEST(CohortRun, TwoNodesFormOneJob) {
  int port = free_port();
  std::string master = "127.0.0.1:" + std::to_string(port);
  Launch node1({"-n", "2", "--nnodes", "2", "--node-rank", "1", "--master", master, "--token",
                "shared", "--", RANK_PROBE_BIN, "store"});
  Launch node0({"-n", "2", "--nnodes", "2", "--node-rank", "0", "--master", master, "--token",
                "shared", "--", RANK_PROBE_BIN, "store"});
  ASSERT_EQ(node0.finish(30s), 0) << node0.out() << node0.err();
  ASSERT_EQ(node1.finish(30s), 0) << node1.out() << node1.err();
  EXPECT_EQ(count_of(node0.out(), "[rank 0] store ok rank=0"), 1) << node0.out();
  EXPECT_EQ(count_of(node0.out(), "[rank 1] store ok rank=1"), 1) << node0.out();
  EXPECT_EQ(count_of(node1.out(), "[rank 2] store ok rank=2"), 1) << node1.out();
  EXPECT_EQ(count_of(node1.out(), "[rank 3] store ok rank=3"), 1) << node1.out();
}

TEST(CohortRun, FailingRankStopsTheOthersAndIsNamed) {
  auto start = Clock::now();
  Launch run({"-n", "3", "--grace", "2", "--", RANK_PROBE_BIN, "fail", "1", "3"});
  int code = run.finish(20s);
  EXPECT_EQ(code, 3) << run.out() << run.err();
  EXPECT_LT(Clock::now() - start, 10s);  // the others were stopped, not waited for (30 s)
  EXPECT_NE(run.err().find("cohort-run: rank 1 exited with code 3"), std::string::npos)
      << run.err();
  EXPECT_EQ(run.out().find("never stopped"), std::string::npos);
  std::vector<int> pids = pids_in(run.out());
  EXPECT_EQ(pids.size(), 3u) << run.out();
  for (int pid : pids) EXPECT_NE(kill(pid, 0), 0) << "rank process " << pid << " still alive";
}

TEST(CohortRun, SigtermIsForwardedToEveryRank) {
  Launch run({"-n", "3", "--", RANK_PROBE_BIN, "trap"});
  ASSERT_TRUE(
      run.read_until([](const std::string& out) { return count_of(out, "ready") == 3; }, 20s))
      << run.out() << run.err();
  auto start = Clock::now();
  kill(run.pid(), SIGTERM);
  int code = run.finish(10s);
  EXPECT_EQ(code, 128 + SIGTERM) << run.out() << run.err();
  EXPECT_LT(Clock::now() - start, 5s);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(count_of(run.out(),
                       "[rank " + std::to_string(r) + "] got SIGTERM rank=" + std::to_string(r)),
              1)
        << run.out();
  }
}

TEST(CohortRun, MissingProgramFailsNamingTheRank) {
  Launch run({"-n", "2", "--", "/nonexistent/program"});
  EXPECT_EQ(run.finish(20s), 127) << run.err();
  EXPECT_NE(run.err().find("cannot execute '/nonexistent/program'"), std::string::npos);
  EXPECT_NE(run.err().find("exited with code 127"), std::string::npos) << run.err();
}

TEST(CohortRun, HelpExitsWithZero) {
  Launch run({"--help"});
  EXPECT_EQ(run.finish(10s), 0);
  EXPECT_NE(run.out().find("usage: cohort-run"), std::string::npos);
}

TEST(CohortRun, BadCommandLinesExitWithTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"-n", "0", "--", "true"},
      {"-n", "x", "--", "true"},
      {"-n", "2"},
      {"-n", "2", "--bogus", "--", "true"},
      {"-n", "2", "--nnodes", "2", "--", "true"},
      {"-n", "2", "--nnodes", "2", "--node-rank", "2", "--master", "h:1", "--token", "t", "--",
       "true"},
      {"-n", "2", "--master", "nohostport", "--", "true"},
      {"-n", "2", "--bind", "sockets", "--", "true"},
  };
  for (const auto& args : bad) {
    Launch run(args);
    EXPECT_EQ(run.finish(10s), 2) << run.err();
    EXPECT_EQ(count_of(run.err(), "\n"), 1) << run.err();
    EXPECT_NE(run.err().find("usage: cohort-run"), std::string::npos) << run.err();
  }
}

}  // namespace
