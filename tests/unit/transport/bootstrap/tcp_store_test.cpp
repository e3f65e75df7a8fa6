// TcpStore: set/get/add through the server across threads and forked processes, deadlines, the
// job token, and server loss turning into kPeerFailed within the deadline.
#include "transport/bootstrap/tcp_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/base/error.h"
#include "transport/bootstrap/net.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

TcpStoreOptions client_options(int port, const std::string& token = "secret") {
  TcpStoreOptions o;
  o.port = port;
  o.token = token;
  o.connect_timeout = 5s;
  o.reply_timeout = 5s;
  return o;
}

// Waits for a child process up to the deadline; kills it if it is still running then.
int wait_child(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);  // bounded polling of the child's state, not a sync point
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Status status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::kOk;
}

TEST(TcpStore, SetGetAddAcrossThreads) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  ASSERT_GT(server.port(), 0);
  auto shared = connect_tcp_store(client_options(server.port()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto own = connect_tcp_store(client_options(server.port()));
      for (int i = 0; i < 50; ++i) (t % 2 ? own : shared)->add("count", 1);
      own->set("thread/" + std::to_string(t), bytes_of(std::to_string(t)));
      for (int other = 0; other < 4; ++other) {
        EXPECT_EQ(shared->get("thread/" + std::to_string(other), 10s),
                  bytes_of(std::to_string(other)));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared->add("count", 0), 200);
  EXPECT_EQ(shared->get("count", 0ms), bytes_of("200"));
}

TEST(TcpStore, LargeValuesAndOverwrite) {
  auto store = host_tcp_store(client_options(0));
  Bytes big(16 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31);
  store->set("big", big);
  EXPECT_EQ(store->get("big", 1s), big);
  store->set("big", {});
  EXPECT_TRUE(store->get("big", 1s).empty());
  EXPECT_EQ(status_of([&] { store->set("huge", Bytes((64 << 20) + 1)); }),
            Status::kInvalidArgument);
  EXPECT_EQ(status_of([&] { store->set(std::string(1025, 'k'), {}); }), Status::kInvalidArgument);
}

TEST(TcpStore, GetTimesOutNamingTheKey) {
  int port = 0;
  auto store = host_tcp_store(client_options(0), &port);
  auto start = steady_clock::now();
  try {
    store->get("missing/key", 100ms);
    FAIL() << "get returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'missing/key'"), std::string::npos) << e.what();
  }
  EXPECT_GE(steady_clock::now() - start, 100ms);
  EXPECT_LT(steady_clock::now() - start, 5s);
  store->set("missing/key", bytes_of("now"));  // the connection is still usable
  EXPECT_EQ(store->get("missing/key", 0ms), bytes_of("now"));
}

TEST(TcpStore, AddOnNonCounterIsAnErrorAndTheConnectionSurvives) {
  auto store = host_tcp_store(client_options(0));
  store->set("text", bytes_of("abc"));
  EXPECT_EQ(status_of([&] { store->add("text", 1); }), Status::kInvalidArgument);
  EXPECT_EQ(store->add("n", 5), 5);
}

TEST(TcpStore, AcrossForkedProcesses) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  constexpr int kRanks = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        auto store = connect_tcp_store(client_options(server.port()));
        store->set("rank/" + std::to_string(r), bytes_of("hello from " + std::to_string(r)));
        store->add("arrived", 1);
        for (int other = 0; other < kRanks; ++other) {
          Bytes v = store->get("rank/" + std::to_string(other), 10s);
          if (v != bytes_of("hello from " + std::to_string(other))) code = 1;
        }
      } catch (...) {
        code = 2;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) EXPECT_EQ(wait_child(pid, 20s), 0);
  auto store = connect_tcp_store(client_options(server.port()));
  EXPECT_EQ(store->add("arrived", 0), kRanks);
}

TEST(TcpStore, ConnectGivesUpAtTheDeadlineWhenNoServer) {
  int port = 0;
  { net::listen_tcp("127.0.0.1", 0, 1, &port); }  // a port that is now closed
  TcpStoreOptions o = client_options(port);
  o.connect_timeout = 300ms;
  auto start = steady_clock::now();
  EXPECT_EQ(status_of([&] { connect_tcp_store(o); }), Status::kTimeout);
  EXPECT_LT(steady_clock::now() - start, 5s);
}

TEST(TcpStore, ClientWaitingWhenServerStopsGetsPeerFailed) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  auto store = connect_tcp_store(client_options(server.port()));
  store->set("k", bytes_of("v"));
  Status waiter = Status::kOk;
  auto start = steady_clock::now();
  std::thread t([&] { waiter = status_of([&] { store->get("never", 20s); }); });
  server.stop();  // whether the get is parked yet or not, it must fail, not hang
  t.join();
  EXPECT_EQ(waiter, Status::kPeerFailed);
  EXPECT_LT(steady_clock::now() - start, 5s);
  EXPECT_EQ(status_of([&] { store->set("k", bytes_of("again")); }), Status::kPeerFailed);
  server.stop();  // idempotent
}

TEST(TcpStore, ServerProcessDeathGivesPeerFailedWithinTheDeadline) {
  int port_pipe[2], hold_pipe[2];
  ASSERT_EQ(pipe(port_pipe), 0);
  ASSERT_EQ(pipe(hold_pipe), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the server process: serves until killed (or 30 s)
    close(hold_pipe[1]);
    TcpStoreServer server("127.0.0.1", 0, "secret");
    int port = server.port();
    if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
    pollfd p{hold_pipe[0], POLLIN, 0};
    poll(&p, 1, 30000);
    _exit(0);
  }
  close(hold_pipe[0]);
  int port = 0;
  ASSERT_EQ(read(port_pipe[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  auto store = connect_tcp_store(client_options(port));
  store->set("k", bytes_of("v"));
  Status waiter = Status::kOk;
  auto start = steady_clock::now();
  std::thread t([&] { waiter = status_of([&] { store->get("never", 20s); }); });
  kill(pid, SIGKILL);
  t.join();
  EXPECT_EQ(waiter, Status::kPeerFailed);
  EXPECT_LT(steady_clock::now() - start, 5s);
  EXPECT_EQ(status_of([&] { store->get("k", 1s); }), Status::kPeerFailed);
  EXPECT_EQ(wait_child(pid, 5s), 128 + SIGKILL);
  close(port_pipe[0]);
  close(port_pipe[1]);
  close(hold_pipe[1]);
}

}  // namespace
}  // namespace cohort::transport
