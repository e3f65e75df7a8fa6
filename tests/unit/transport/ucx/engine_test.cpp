// transport/ucx: the status wrapper, the tag layout, and engines of in-process ranks exchanging
// tagged messages (small ones complete at once and return NULL; large ones eagerly where every
// message is copied anyway, else by rendezvous) over shared memory and tcp, including the
// fallback when UCX_TLS=cma cannot create endpoints, the progress thread's spin picked from the
// host, and how it waits between looks.
#include <gtest/gtest.h>
#include <sched.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include "transport/bootstrap/env.h"
#include "transport/ucx/engine.h"
#include "transport/ucx/tag.h"
#include "transport/ucx/ucx_status.h"

namespace cohort::transport::ucx {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(UcxStatus, NamesCallAndCarriesUcxText) {
  try {
    ucs_check(UCS_ERR_CONNECTION_RESET, "ucp_tag_send_nbx", "rank 3");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kPeerFailed);
    std::string what = e.what();
    EXPECT_NE(what.find("ucp_tag_send_nbx"), std::string::npos);
    EXPECT_NE(what.find(ucs_status_string(UCS_ERR_CONNECTION_RESET)), std::string::npos);
    EXPECT_NE(what.find("rank 3"), std::string::npos);
  }
  EXPECT_NO_THROW(ucs_check(UCS_OK, "x"));
  EXPECT_EQ(status_from_ucs(UCS_ERR_TIMED_OUT), Status::kTimeout);
}

TEST(UcxTag, FieldsDoNotOverlap) {
  uint64_t t = make_tag(kMaxCommId, kMaxWorldSize - 1, true, kSeqMask, message_index(kMaxChunks - 1, kMaxSteps - 1));
  EXPECT_EQ(tag_comm(t), kMaxCommId);
  EXPECT_EQ(tag_src(t), static_cast<uint32_t>(kMaxWorldSize - 1));
  EXPECT_EQ(t & ~kMatchComm, make_tag(0, kMaxWorldSize - 1, true, kSeqMask, 0xFFFFFF));
  EXPECT_NE(make_tag(1, 2, false, 3, 4), make_tag(1, 2, true, 3, 4));
  EXPECT_NE(make_tag(1, 2, false, 3, 4), make_tag(1, 3, false, 3, 4));
  EXPECT_EQ(tag_comm(make_tag(kControlComm, 0, false, 0, 0)), kControlComm);
}

// Sends `bytes` to the next rank and receives from the previous one, from the progress thread.
class RingClient : public Client {
 public:
  RingClient(Engine* engine, size_t bytes) : engine_(engine), out_(bytes), in_(bytes) {
    for (size_t i = 0; i < bytes; ++i) out_[i] = static_cast<char>(engine->rank() * 31 + i);
  }
  PollResult poll(Clock::time_point) override {
    if (!posted_) {
      posted_ = true;
      int n = engine_->size(), me = engine_->rank();
      int next = (me + 1) % n, prev = (me + n - 1) % n;
      engine_->recv(prev, in_.data(), in_.size(), make_tag(0, prev, false, 0, 0), &recv_);
      engine_->send(next, out_.data(), out_.size(), make_tag(0, me, false, 0, 0), &send_);
    }
    if (!reported_ && send_.done && recv_.done) {
      reported_ = true;
      ok_ = send_.status == UCS_OK && recv_.status == UCS_OK;
      for (size_t i = 0; ok_ && i < in_.size(); ++i) {
        int prev = (engine_->rank() + engine_->size() - 1) % engine_->size();
        ok_ = in_[i] == static_cast<char>(prev * 31 + i);
      }
      done_.set_value(ok_);
    }
    return PollResult{!reported_, false, false};
  }
  void on_failure(uint32_t, int, Status, const std::string& why) override { failure_ = why; }
  bool finished() const override { return reported_ && released_.load(); }
  std::future<bool> result() { return done_.get_future(); }
  void release() { released_.store(true); }

 private:
  Engine* engine_;
  std::vector<char> out_, in_;
  Transfer send_, recv_;
  bool posted_ = false, reported_ = false, ok_ = false;
  std::atomic<bool> released_{false};
  std::string failure_;
  std::promise<bool> done_;
};

void ring_exchange(const std::string& tls, int world, size_t bytes, std::string* used_tls = nullptr,
                   bool eager = true) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        EngineOptions options;
        options.tls = tls;
        options.connect_timeout = milliseconds(20000);
        options.eager_copies = eager;
        auto engine = Engine::create(store, rank, world, options);
        if (rank == 0 && used_tls) *used_tls = engine->tls();
        if (!eager) {
          EXPECT_FALSE(engine->eager());
        }
        EXPECT_EQ(engine->local_ranks(), world);  // in-process ranks share this host too
        auto client = std::make_shared<RingClient>(engine.get(), bytes);
        auto result = client->result();
        engine->attach(client);
        if (result.wait_for(milliseconds(20000)) == std::future_status::ready && result.get())
          ++good;
        client->release();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), world) << "UCX_TLS=" << tls << " bytes " << bytes;
}

TEST(UcxEngine, RingExchangeSharedMemory) {
  for (size_t bytes : {size_t{8}, size_t{4} << 20}) ring_exchange("self,sm", 3, bytes);
  ring_exchange("self,sm", 3, size_t{4} << 20, nullptr, false);  // UCX's rendezvous
}

TEST(UcxEngine, RingExchangeTcp) {
  for (size_t bytes : {size_t{8}, size_t{4} << 20}) ring_exchange("tcp", 3, bytes);
}

TEST(UcxEngine, CmaAloneFallsBack) {
  std::string used;
  ring_exchange("cma", 2, 1024, &used);
  EXPECT_NE(used, "cma");
}

// Spins of `world` engines created together, each from a thread pinned to `cpus` CPUs (0: not
// pinned) with the given option.
std::vector<long> spins(int world, int cpus, std::optional<microseconds> option) {
  auto store = make_memory_store();
  std::vector<long> out(static_cast<size_t>(world), -1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      if (cpus > 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < cpus; ++c) CPU_SET(c, &set);
        ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
      }
      EngineOptions options;
      options.tls = "tcp";
      options.spin = option;
      options.connect_timeout = milliseconds(20000);
      auto engine = Engine::create(store, rank, world, options);
      out[static_cast<size_t>(rank)] = static_cast<long>(engine->spin().count());
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// A progress thread busy-polls only when the host has a CPU for each of the job's local ranks;
// an explicit setting is kept either way.
TEST(UcxEngine, SpinsOnlyWhenTheHostHasACpuPerRank) {
  EXPECT_EQ(spins(1, 0, std::nullopt), std::vector<long>({50}));
  EXPECT_EQ(spins(2, 1, std::nullopt), std::vector<long>({0, 0}));  // 2 ranks, 1 CPU
  EXPECT_EQ(spins(2, 1, microseconds(20)), std::vector<long>({20, 20}));
  if (usable_cpus() >= 2) {
    EXPECT_EQ(spins(2, 0, std::nullopt), std::vector<long>({50, 50}));
  }
}

// Whether an engine of one rank over `tls` sends every message eagerly; the transports it uses.
bool eager_over(const std::string& tls, bool cma_without_failure_detection = false, std::string* used = nullptr) {
  EngineOptions options;
  options.tls = tls;
  options.cma_without_failure_detection = cma_without_failure_detection;
  auto engine = Engine::create(make_memory_store(), 0, 1, options);
  if (used) *used = engine->tls();
  return engine->eager();
}

// UCX_RNDV_THRESH=inf where the transports copy every message anyway (tcp among them, or shared
// memory once cma is dropped for want of failure detection); UCX's threshold where a transport
// moves large messages without a copy (cma kept), or where the environment names one.
TEST(UcxEngine, SendsEagerlyWhereEveryMessageIsCopied) {
  EXPECT_TRUE(eager_over("self,sm"));  // cma dropped: sysv and posix copy every message
  EXPECT_TRUE(eager_over("self,sysv"));
  EXPECT_TRUE(eager_over("tcp"));
  EXPECT_TRUE(eager_over("self,sm,tcp"));  // tcp's handshakes wait behind the link's data
  // cma kept (where this host lets processes read each other's memory): its rendezvous reads
  // without a copy.
  std::string used;
  const bool eager = eager_over("self,sm", true, &used);
  EXPECT_EQ(eager, used.find("sm") == std::string::npos && used.find("cma") == std::string::npos) << used;
  ASSERT_EQ(setenv("UCX_RNDV_THRESH", "64k", 1), 0);
  EXPECT_FALSE(eager_over("self,sm"));  // the user's choice
  ASSERT_EQ(unsetenv("UCX_RNDV_THRESH"), 0);
}

// How the progress thread waits between looks (progress_wait): a caller blocked on one of the
// engine's operations leaves the rank's core to the progress thread, which then keeps looking
// whatever it waits for (a message over the worker's events included); without one it sleeps
// on the worker's events, or naps where shared memory raises none.
TEST(UcxEngine, ProgressThreadKeepsLookingWhileACallerBlocks) {
  EngineOptions options;  // memory_spin 200 us
  const microseconds spin(50);
  ProgressState s;
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kIdle);
  s.caller_blocked = true;  // (nothing pending: no operation to block on)
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kIdle);
  s = ProgressState{};
  s.busy = true;
  s.since_event = microseconds(10);
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kPoll);
  s.since_event = milliseconds(5);
  s.worker_events = true;  // a receive over tcp, or over shared memory's tag messages
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kEvent);
  s.caller_blocked = true;
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kYield);
  s.worker_events = false;
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kYield);
  s.caller_blocked = false;
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kNap);
  s.memory_waits = true;  // a collective over the shared window
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kNap);  // past memory_spin
  s.caller_blocked = true;
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kYield);
  s.caller_blocked = false;
  s.since_event = microseconds(100);  // within memory_spin
  EXPECT_EQ(progress_wait(s, spin, options), ProgressWait::kYield);
  EXPECT_EQ(progress_wait(s, microseconds(0), options), ProgressWait::kYield);
}

// Where the host's ranks share cores a nap grows with the wait it is part of: an eighth of the
// time since the last progress, between busy_nap and longest_nap; with nap_growth 0, or where each
// rank has its cores, it stays busy_nap.
TEST(UcxEngine, NapsGrowWithTheWait) {
  EngineOptions o;  // busy_nap 50 us, nap_growth 8, longest_nap 1 ms
  ProgressState s;
  s.ranks_share_cores = true;
  auto after = [&](std::chrono::nanoseconds waited) {
    s.since_event = waited;
    return nap_length(s, o);
  };
  EXPECT_EQ(after(microseconds(100)), microseconds(50));
  EXPECT_EQ(after(microseconds(800)), microseconds(100));
  EXPECT_EQ(after(milliseconds(4)), microseconds(500));
  EXPECT_EQ(after(milliseconds(100)), microseconds(1000));
  s.ranks_share_cores = false;
  EXPECT_EQ(after(milliseconds(100)), microseconds(50));
  s.ranks_share_cores = true;
  o.nap_growth = 0;
  EXPECT_EQ(after(milliseconds(100)), microseconds(50));
  o.nap_growth = 8;
  o.longest_nap = microseconds(10);  // below busy_nap: busy_nap
  EXPECT_EQ(after(milliseconds(100)), microseconds(50));
}

// A client attached while the progress thread sleeps (idle: up to 50 ms on its events) is looked
// at within milliseconds: wake() writes the wake-up only while the thread sleeps or is about to
// (Engine::posts_, sleeping_), and a wake-up lost between its look at the work and its sleep would
// leave the client until the sleep ends (25 ms on average).
class FirstPoll : public Client {
 public:
  PollResult poll(Clock::time_point) override {
    if (!seen_.exchange(true)) done_.set_value(Clock::now());
    return PollResult{};
  }
  void on_failure(uint32_t, int, Status, const std::string&) override {}
  bool finished() const override { return seen_.load(); }
  std::future<Clock::time_point> seen() { return done_.get_future(); }

 private:
  std::atomic<bool> seen_{false};
  std::promise<Clock::time_point> done_;
};

TEST(UcxEngine, AClientAttachedToASleepingEngineIsSeenAtOnce) {
  EngineOptions options;
  options.tls = "self,sm";
  auto engine = Engine::create(make_memory_store(), 0, 1, options);
  std::vector<double> ms;
  for (int k = 0; k < 15; ++k) {
    std::this_thread::sleep_for(milliseconds(60));  // the thread idles into its longest sleep
    auto client = std::make_shared<FirstPoll>();
    auto seen = client->seen();
    const auto start = Clock::now();
    engine->attach(client);
    ASSERT_EQ(seen.wait_for(milliseconds(5000)), std::future_status::ready);
    ms.push_back(std::chrono::duration<double, std::milli>(seen.get() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 10.0) << "median of " << ms.size() << " attaches, fastest " << ms.front()
                                     << " ms, slowest " << ms.back() << " ms";
}

TEST(UcxEngine, RejectsBadArguments) {
  auto store = make_memory_store();
  EXPECT_THROW(Engine::create(store, 2, 2), Error);
  EXPECT_THROW(Engine::create(nullptr, 0, 1), Error);
}

}  // namespace
}  // namespace cohort::transport::ucx
