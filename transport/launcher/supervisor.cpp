// cohort-run's supervisor loop. Signals reach the loop through a self-pipe, so everything —
// child output, child exits, forwarded signals, the SIGTERM->SIGKILL grace period — is handled
// by one poll() with a bounded timeout. Each rank runs in its own process group (signals reach
// its children too) and dies with cohort-run (PR_SET_PDEATHSIG).
#include "transport/launcher/supervisor.h"

#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>

namespace cohort::transport::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxLine = 64 * 1024;  // a longer line is cut into pieces of this size
constexpr auto kDrainTime = std::chrono::seconds(2);  // output still read after the last exit
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

int g_signal_pipe = -1;

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe, &byte, 1);
  (void)ignored;
  errno = saved;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1000);
    } else if (!(n < 0 && errno == EINTR)) {
      return;  // our own output is gone (EPIPE): nothing left to tell
    }
  }
}

void say(const std::string& message) { write_all(2, "cohort-run: " + message + "\n"); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (SIG" +
           (name ? name : "?") + ")";
  }
  return "stopped with status " + std::to_string(status);
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
};

struct Stream {
  int fd = -1;
  int rank = 0;
  int out_fd = 1;
  std::string partial;
};

class Supervisor {
 public:
  explicit Supervisor(const SuperviseConfig& config) : config_(config) {}
  int run();

 private:
  void install_signals();
  bool spawn(const RankSpec& spec);
  [[noreturn]] void exec_child(const RankSpec& spec, int out_w, int err_w, pid_t parent);
  bool pump(Stream& s);
  void emit(Stream& s, bool eof);
  void on_signals();
  void reap();
  void on_exit(Child& c, int status);
  void begin_stop(Clock::time_point now);
  void signal_all(int sig);
  void check_deadlines(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;

  const SuperviseConfig& config_;
  int signal_read_ = -1;
  sigset_t saved_mask_{};
  std::vector<Child> children_;
  std::list<Stream> streams_;
  int live_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point stop_deadline_{};
  Clock::time_point drain_deadline_{};
  int interrupted_by_ = 0;
  int failed_rank_ = -1;
  int failed_status_ = 0;
};

void Supervisor::install_signals() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    say(std::string("pipe2 failed: ") + std::strerror(errno));
    return;
  }
  signal_read_ = fds[0];
  g_signal_pipe = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwarded) sigaction(sig, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool Supervisor::spawn(const RankSpec& spec) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    say("cannot create pipes for rank " + std::to_string(spec.rank) + ": " + std::strerror(errno));
    return false;
  }
  // Signals stay blocked across fork so a child never runs our handler before it execs.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &saved_mask_);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) exec_child(spec, out[1], err[1], parent);
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    say("cannot start rank " + std::to_string(spec.rank) + ": fork: " + std::strerror(fork_errno));
    return false;
  }
  setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
  children_.push_back({spec.rank, pid, true});
  ++live_;
  streams_.push_back({out[0], spec.rank, 1, {}});
  streams_.push_back({err[0], spec.rank, 2, {}});
  return true;
}

void Supervisor::exec_child(const RankSpec& spec, int out_w, int err_w, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // cohort-run died before prctl took effect
  for (int sig : kForwarded) signal(sig, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
  if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) _exit(127);
  for (const auto& [name, value] : spec.env) setenv(name.c_str(), value.c_str(), 1);
  if (!spec.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : spec.cpus) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)  // not fatal: the rank runs unbound
      dprintf(2, "cohort-run: rank %d runs unbound: sched_setaffinity: %s\n", spec.rank, std::strerror(errno));
  }
  std::vector<char*> argv;
  for (const std::string& a : config_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  dprintf(2, "cohort-run: cannot execute '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Reads what the stream has; returns false at end of file.
bool Supervisor::pump(Stream& s) {
  char buf[65536];
  ssize_t n = read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    emit(s, true);
    return false;
  }
  s.partial.append(buf, static_cast<size_t>(n));
  emit(s, false);
  return true;
}

// Writes every complete line of the stream with its prefix, in one write so lines of
// different ranks never mix.
void Supervisor::emit(Stream& s, bool eof) {
  std::string prefix = "[rank " + std::to_string(s.rank) + "] ";
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos && s.partial.size() - start >= kMaxLine) nl = start + kMaxLine - 1;
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(s.partial, start, nl - start);
    out += '\n';
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (eof && !s.partial.empty()) {
    out += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) write_all(s.out_fd, out);
}

void Supervisor::on_signals() {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = read(signal_read_, sigs, sizeof(sigs))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int sig = sigs[i];
      if (sig == SIGCHLD) continue;  // reap() runs after every wake-up
      if (!interrupted_by_) interrupted_by_ = sig;
      const char* name = sigabbrev_np(sig);
      say(std::string("received SIG") + (name ? name : "?") + ", forwarding it to the ranks");
      signal_all(sig);
      if (!stopping_) {
        stopping_ = true;
        stop_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(config_.grace_s));
      }
    }
  }
}

void Supervisor::reap() {
  for (Child& c : children_) {
    if (!c.running) continue;
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) on_exit(c, status);
  }
}

void Supervisor::on_exit(Child& c, int status) {
  c.running = false;
  if (--live_ == 0) drain_deadline_ = Clock::now() + kDrainTime;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || stopping_) return;
  failed_rank_ = c.rank;
  failed_status_ = status;
  say("rank " + std::to_string(c.rank) + " " + describe_status(status) +
      (live_ > 0 ? "; stopping the other ranks" : ""));
  begin_stop(Clock::now());
}

void Supervisor::begin_stop(Clock::time_point now) {
  stopping_ = true;
  stop_deadline_ = now + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(config_.grace_s));
  signal_all(SIGTERM);
}

void Supervisor::signal_all(int sig) {
  for (const Child& c : children_) {
    // The rank leads its own process group unless it moved itself elsewhere (setsid).
    if (c.running && kill(-c.pid, sig) != 0) kill(c.pid, sig);
  }
}

void Supervisor::check_deadlines(Clock::time_point now) {
  if (stopping_ && !killed_ && live_ > 0 && now >= stop_deadline_) {
    say(std::to_string(live_) + " rank(s) still running " + std::to_string(config_.grace_s) +
        " s after SIGTERM; sending SIGKILL");
    signal_all(SIGKILL);
    killed_ = true;
  }
  if (live_ == 0 && now >= drain_deadline_) {
    // Something the rank started still holds its output open: stop reading it.
    for (Stream& s : streams_) {
      emit(s, true);
      close(s.fd);
    }
    streams_.clear();
  }
}

int Supervisor::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);  // reap even if a SIGCHLD was lost
  if (stopping_ && !killed_) next = std::min(next, stop_deadline_);
  if (live_ == 0) next = std::min(next, drain_deadline_);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
  return static_cast<int>(std::max<int64_t>(ms, 0));
}

int Supervisor::run() {
  install_signals();
  if (signal_read_ < 0) return 1;
  for (const RankSpec& spec : config_.ranks) {
    if (!spawn(spec)) {
      failed_rank_ = spec.rank;
      failed_status_ = 1 << 8;  // as if it exited with code 1
      begin_stop(Clock::now());
      break;
    }
  }
  while (live_ > 0 || !streams_.empty()) {
    std::vector<pollfd> fds{{signal_read_, POLLIN, 0}};
    for (const Stream& s : streams_) fds.push_back({s.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (fds[0].revents) on_signals();
    size_t i = 1;
    for (auto it = streams_.begin(); it != streams_.end(); ++i) {
      bool open = !fds[i].revents || pump(*it);
      if (!open) close(it->fd);
      it = open ? std::next(it) : streams_.erase(it);
    }
    reap();
    check_deadlines(Clock::now());
  }
  if (interrupted_by_) return 128 + interrupted_by_;
  if (failed_rank_ < 0) return 0;
  if (WIFEXITED(failed_status_)) return WEXITSTATUS(failed_status_);
  return WIFSIGNALED(failed_status_) ? 128 + WTERMSIG(failed_status_) : 1;
}

}  // namespace

int supervise(const SuperviseConfig& config) { return Supervisor(config).run(); }

}  // namespace cohort::transport::launcher
