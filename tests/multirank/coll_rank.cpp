// One rank of the multi-process collective tests (started by coll_multirank_test with the
// COHORT_* environment). Modes: "smoke" checks a few collectives across processes; "kill" runs
// an all-reduce in which rank `victim` kills itself, and checks that this rank reports
// kPeerFailed/kTimeout naming the victim within the deadline; "stop" freezes the victim instead
// (SIGSTOP; a forked helper resumes it after 3 deadlines), so only the deadline can name it; "abort-leave" has the last rank
// abort a sub-communicator of its own and leave late, and checks that the others still wait for
// its goodbye (an abort is not a death: the rank may still be receiving); "leave" and
// "leave-before" have rank `victim` leave normally (as on an error) in the middle of an
// all-reduce or just before it, and check that this rank fails naming it. Prints one RESULT line.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
using namespace cohort::transport;
using namespace cohort::transport::coll;
using Ms = std::chrono::milliseconds;

namespace {

int smoke(UcxCommunicator& c) {
  const int n = c.size();
  // Every rank of this job runs on this host: each engine must count them all.
  if (c.engine()->local_ranks() != n)
    return std::printf("RESULT local_ranks %d, expected %d\n", c.engine()->local_ranks(), n), 1;
  std::vector<float> v(1000003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i + c.rank()) % 11);
  c.all_reduce(v.data(), v.size(), DataType::kF32, ReduceOp::kSum)->wait(Ms(30000));
  // Processes on one host map each other's memory whenever shared memory transports are on.
  const bool shared_expected = c.engine()->tls().find("sysv") != std::string::npos ||
                               c.engine()->tls().find("posix") != std::string::npos;
  if (c.uses_shared_memory() != shared_expected)
    return std::printf("RESULT shared window %d over UCX_TLS=%s\n", c.uses_shared_memory(),
                       c.engine()->tls().c_str()), 1;
  for (size_t i = 0; i < v.size(); ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((i + r) % 11);
    if (v[i] != want) return std::printf("RESULT bad all_reduce element %zu\n", i), 1;
  }
  // The same in memory from allocate(), which the peers' processes map and read in place.
  auto* reg = static_cast<float*>(c.allocate(v.size() * sizeof(float)));
  for (size_t i = 0; i < v.size(); ++i) reg[i] = static_cast<float>((i + c.rank()) % 11);
  c.all_reduce(reg, v.size(), DataType::kF32, ReduceOp::kSum)->wait(Ms(30000));
  for (size_t i = 0; i < v.size(); ++i)
    if (reg[i] != v[i]) return std::printf("RESULT bad all_reduce element %zu in allocated memory\n", i), 1;
  if ((c.registered_chunks() > 0) != shared_expected)
    return std::printf("RESULT %llu chunks in place over UCX_TLS=%s\n",
                       static_cast<unsigned long long>(c.registered_chunks()), c.engine()->tls().c_str()), 1;
  c.deallocate(reg);
  std::vector<int64_t> all(n);
  int64_t mine = c.rank() * 10;
  c.all_gather(&mine, all.data(), 1, DataType::kI64)->wait(Ms(30000));
  for (int r = 0; r < n; ++r)
    if (all[r] != r * 10) return std::printf("RESULT bad all_gather\n"), 1;
  c.barrier()->wait(Ms(30000));
  std::printf("RESULT ok\n");
  return 0;
}

int kill_test(Communicator& c, int victim, Ms timeout, bool stop) {
  c.barrier()->wait(Ms(30000));  // everyone connected before the failure
  float one = 1;  // the first all-reduce sets up the shared window: fail inside the real one
  c.all_reduce(&one, 1, DataType::kF32, ReduceOp::kSum)->wait(Ms(30000));
  auto buffer = std::make_shared<std::vector<float>>((16u << 20) / 4, 1.0f);
  std::vector<float>& v = *buffer;
  auto start = std::chrono::steady_clock::now();
  auto work = c.all_reduce(v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
  if (c.rank() == victim) {
    // Die (or freeze) with the transfers just started: one poll, no wait. A 2 ms wait here let
    // the whole 16 MiB all-reduce finish first on a loaded machine now and then (the others
    // then had nothing to report and the test failed).
    try {
      (void)work->test();
    } catch (const Error&) {
    }
    if (!stop) raise(SIGKILL);
    pid_t self = getpid();
    if (fork() == 0) {  // only async-signal-safe calls in the child of a threaded process
      usleep(static_cast<useconds_t>(timeout.count()) * 3000u);
      kill(self, SIGCONT);
      _exit(0);
    }
    raise(SIGSTOP);
    // Resumed: the others have given up on this rank; its own all-reduce must fail, not hang.
    try {
      work->wait(timeout * 4 + Ms(5000));
      std::printf("RESULT the frozen rank's all_reduce finished\n");
      return 1;
    } catch (const Error& e) {
      std::printf("RESULT frozen rank resumed: %s\n", e.what());
      return 0;
    }
  }
  try {
    work->wait(timeout * 4 + Ms(5000));
    std::printf("RESULT all_reduce finished without the victim\n");
    return 1;
  } catch (const Error& e) {
    // A send to a frozen victim may outlive the Work (work.h): the communicator keeps the
    // buffer from here on, and this rank lets go of it (a resumed victim would read it).
    c.keep_alive(std::move(buffer));
    auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start).count();
    int failed = -1;
    c.status(nullptr, &failed);
    std::string what = e.what();
    bool named = failed == victim && what.find("rank " + std::to_string(victim)) != std::string::npos;
    bool status_ok = e.status() == Status::kPeerFailed || e.status() == Status::kTimeout;
    bool in_time = ms <= timeout.count() + 1500;
    std::printf("RESULT status=%s failed_rank=%d elapsed_ms=%lld named=%d in_time=%d msg=%s\n",
                status_name(e.status()), failed, static_cast<long long>(ms), named, in_time,
                what.c_str());
    return named && status_ok && in_time ? 0 : 1;
  }
}

// Rank `victim` leaves as a rank that hit an error does: it drops its communicator (and engine)
// and exits normally, saying goodbye; "leave" in the middle of a 16 MiB all-reduce the others
// are inside, "leave-before" just before it (the others enter it without the victim). Either
// way the others must fail naming it, and leave, long before the deadline.
int leave_test(std::shared_ptr<Communicator> comm, int victim, Ms timeout, bool before) {
  comm->barrier()->wait(Ms(30000));
  float one = 1;
  comm->all_reduce(&one, 1, DataType::kF32, ReduceOp::kSum)->wait(Ms(30000));
  auto buffer = std::make_shared<std::vector<float>>((16u << 20) / 4, 1.0f);
  auto start = std::chrono::steady_clock::now();
  if (comm->rank() == victim) {
    if (!before) {
      auto work = comm->all_reduce(buffer->data(), buffer->size(), DataType::kF32, ReduceOp::kSum);
      try {
        (void)work->test();  // one poll: the transfers have started
      } catch (const Error&) {
      }
      comm->keep_alive(buffer);
    }
    comm.reset();  // the communicator and its engine go: goodbye to the peers
    auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start).count();
    std::printf("RESULT left %s the all-reduce; teardown took %lld ms\n", before ? "before" : "in the middle of",
                static_cast<long long>(ms));
    return 0;
  }
  auto work = comm->all_reduce(buffer->data(), buffer->size(), DataType::kF32, ReduceOp::kSum);
  try {
    work->wait(timeout * 4 + Ms(5000));
    std::printf("RESULT all_reduce finished without the leaver\n");
    return 1;
  } catch (const Error& e) {
    comm->keep_alive(std::move(buffer));
    auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start).count();
    int failed = -1;
    comm->status(nullptr, &failed);
    std::string what = e.what();
    bool named = failed == victim && what.find("rank " + std::to_string(victim)) != std::string::npos;
    bool status_ok = e.status() == Status::kPeerFailed || e.status() == Status::kTimeout;
    std::printf("RESULT status=%s failed_rank=%d elapsed_ms=%lld named=%d msg=%s\n",
                status_name(e.status()), failed, static_cast<long long>(ms), named, what.c_str());
    std::fflush(stdout);
    return named && status_ok ? 0 : 1;
  }
}

// Rank 3 of 4 is killed in the middle of an all-reduce on the pair {2, 3} while rank 0 is inside
// one with rank 2 on {0, 2} and rank 1 one with rank 3 on {1, 3}: ranks 1 and 2 must fail
// naming world rank 3; rank 2 then leaves (as on an error) and rank 0, which shares no
// communicator with the dead rank but waits for the one that left, must fail naming world rank 2.
int kill_grid(std::shared_ptr<Communicator> comm) {
  const int rank = comm->rank();
  if (comm->size() != 4) return std::printf("RESULT kill-grid needs 4 ranks\n"), 1;
  auto pair = comm->split(rank / 2, rank, "pair");    // {0, 1}, {2, 3}
  auto cross = comm->split(rank % 2, rank, "cross");  // {0, 2}, {1, 3}
  float one = 1;
  for (auto* c : {pair.get(), cross.get()}) c->all_reduce(&one, 1, DataType::kF32, ReduceOp::kSum)->wait(Ms(30000));
  comm->barrier()->wait(Ms(30000));
  auto buffer = std::make_shared<std::vector<float>>((16u << 20) / 4, 1.0f);
  Communicator& mine = rank >= 2 ? *pair : *cross;
  auto start = std::chrono::steady_clock::now();
  auto work = mine.all_reduce(buffer->data(), buffer->size(), DataType::kF32, ReduceOp::kSum);
  if (rank == 3) {
    try {
      (void)work->test();
    } catch (const Error&) {
    }
    raise(SIGKILL);
  }
  const int want = rank == 0 ? 2 : 3;
  try {
    work->wait(Ms(120000));
    std::printf("RESULT all_reduce finished without world rank %d\n", want);
    return 1;
  } catch (const Error& e) {
    mine.keep_alive(std::move(buffer));
    auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start).count();
    std::string what = e.what();
    bool named = what.find("world rank " + std::to_string(want) + ")") != std::string::npos;
    std::printf("RESULT status=%s elapsed_ms=%lld named_world_rank_%d=%d msg=%s\n", status_name(e.status()),
                static_cast<long long>(ms), want, named, what.c_str());
    std::fflush(stdout);
    return named ? 0 : 1;
  }
}

// The last rank aborts its own one-rank sub-communicator, then everyone meets on the world;
// the last rank leaves kLateMs later than the others, whose communicator teardown must wait for
// it rather than count it failed.
int abort_leave(std::shared_ptr<Communicator> comm) {
  constexpr int kLateMs = 1500;
  const int rank = comm->rank(), last = comm->size() - 1;
  auto mine = comm->split(rank, 0);
  if (rank == last) mine->abort();
  comm->barrier()->wait(Ms(30000));
  int failed = -1;
  if (comm->status(nullptr, &failed) != Status::kOk)
    return std::printf("RESULT the world failed after a sub-communicator abort (rank %d)\n", failed), 1;
  mine.reset();
  if (rank == last) {
    std::this_thread::sleep_for(Ms(kLateMs));
    comm.reset();
    return std::printf("RESULT ok\n"), 0;
  }
  auto start = std::chrono::steady_clock::now();
  comm.reset();
  auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start).count();
  bool waited = ms >= kLateMs / 2;
  std::printf("RESULT %s: teardown took %lld ms while the aborting rank left %d ms late\n",
              waited ? "ok" : "left without waiting", static_cast<long long>(ms), kLateMs);
  return waited ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: coll_rank smoke|kill|stop|abort-leave|leave|leave-before|kill-grid TLS TIMEOUT_MS [VICTIM]\n");
    return 2;
  }
  std::string mode = argv[1];
  Ms timeout(std::atoi(argv[3]));
  int rc = 1;
  try {
    JobEnv env = detect_job_env();
    auto store = connect_job_store(env, Ms(30000));
    CommOptions options;
    options.timeout = timeout;
    ucx::EngineOptions engine;
    engine.tls = argv[2];
    engine.keepalive = Ms(500);
    auto comm = UcxCommunicator::create(store, env.rank, env.world, options, engine);
    const int victim = argc > 4 ? std::atoi(argv[4]) : 1;
    rc = mode == "kill"          ? kill_test(*comm, victim, timeout, false)
         : mode == "stop"        ? kill_test(*comm, victim, timeout, true)
         : mode == "abort-leave" ? abort_leave(std::move(comm))
         : mode == "leave"       ? leave_test(std::move(comm), victim, timeout, false)
         : mode == "leave-before" ? leave_test(std::move(comm), victim, timeout, true)
         : mode == "kill-grid"   ? kill_grid(std::move(comm))
                                 : smoke(*comm);
  } catch (const std::exception& e) {
    std::printf("RESULT error: %s\n", e.what());
    rc = 1;
  }
  std::fflush(stdout);
  return rc;
}
