// Communicator behaviour beyond data correctness: split and grid axes, argument errors, and
// failures (a silent peer, abort) turning into sticky errors that name the rank, in time.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::transport::coll::testing {
namespace {

TEST(CommTest, SplitEvenOdd) {
  run_ranks(4, {}, [](Communicator& c) {
    auto sub = c.split(c.rank() % 2, -c.rank());  // reversed order inside each group
    ASSERT_NE(sub, nullptr);
    ASSERT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), c.rank() < 2 ? 1 : 0);
    int32_t v = c.rank();
    sub->all_reduce(&v, 1, DataType::kI32, ReduceOp::kSum)->wait(kWait);
    EXPECT_EQ(v, c.rank() % 2 ? 1 + 3 : 0 + 2);
    auto none = c.split(c.rank() == 0 ? 0 : -1, 0);
    EXPECT_EQ(none != nullptr, c.rank() == 0);
    // The parent still works after and alongside its children.
    int32_t w = 1;
    auto a = c.all_reduce(&w, 1, DataType::kI32, ReduceOp::kSum);
    int32_t x = 1;
    auto b = sub->all_reduce(&x, 1, DataType::kI32, ReduceOp::kSum);
    a->wait(kWait);
    b->wait(kWait);
    EXPECT_EQ(w, 4);
    EXPECT_EQ(x, 2);
  });
}

// Communicators progress independently: ranks may issue on two of them in different orders.
TEST(CommTest, CommunicatorsProgressIndependently) {
  run_ranks(4, {}, [](Communicator& c) {
    auto sub = c.split(c.rank() % 2, c.rank());
    std::vector<float> a(100000, 1.0f), b(100000, 1.0f);
    WorkPtr wa, wb;
    if (c.rank() < 2) {
      wa = c.all_reduce(a.data(), a.size(), DataType::kF32, ReduceOp::kSum);
      wb = sub->all_reduce(b.data(), b.size(), DataType::kF32, ReduceOp::kSum);
    } else {
      wb = sub->all_reduce(b.data(), b.size(), DataType::kF32, ReduceOp::kSum);
      wa = c.all_reduce(a.data(), a.size(), DataType::kF32, ReduceOp::kSum);
    }
    wa->wait(kWait);
    wb->wait(kWait);
    EXPECT_EQ(a[12345], 4.0f);
    EXPECT_EQ(b[12345], 2.0f);
  });
}

TEST(CommTest, GridAxes) {
  run_ranks(4, {}, [](Communicator& c) {
    auto axes = make_grid_axes(c, {2, 2});  // rank = 2 * row + col
    ASSERT_EQ(axes.size(), 2u);
    auto coords = grid_coordinates(c.rank(), {2, 2});
    EXPECT_EQ(axes[0]->rank(), coords[0]);
    EXPECT_EQ(axes[1]->rank(), coords[1]);
    int32_t col_sum = c.rank(), row_sum = c.rank();
    axes[0]->all_reduce(&col_sum, 1, DataType::kI32, ReduceOp::kSum)->wait(kWait);
    axes[1]->all_reduce(&row_sum, 1, DataType::kI32, ReduceOp::kSum)->wait(kWait);
    EXPECT_EQ(col_sum, coords[1] + (2 + coords[1]));  // ranks col and 2 + col
    EXPECT_EQ(row_sum, 2 * coords[0] + 2 * coords[0] + 1);
    auto cube = make_grid_axes(c, {1, 4, 1});
    EXPECT_EQ(cube[0]->size(), 1);
    EXPECT_EQ(cube[1]->size(), 4);
    EXPECT_THROW(make_grid_axes(c, {3, 2}), Error);
  });
}

TEST(CommTest, ArgumentErrors) {
  run_ranks(2, {}, [](Communicator& c) {
    int32_t v = 0;
    auto expect_status = [](Status s, const std::function<void()>& fn) {
      try {
        fn();
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), s) << e.what();
      }
    };
    expect_status(Status::kUnsupported, [&] { c.all_reduce(&v, 1, DataType::kI32, ReduceOp::kAvg); });
    expect_status(Status::kInvalidArgument, [&] { c.all_reduce(nullptr, 4, DataType::kF32, ReduceOp::kSum); });
    expect_status(Status::kInvalidArgument, [&] { c.broadcast(&v, 1, DataType::kI32, 2); });
    expect_status(Status::kInvalidArgument, [&] { c.send(&v, 1, DataType::kI32, c.rank()); });
    c.barrier()->wait(kWait);  // nothing was queued by the failed calls
  });
}

// A backend sees only calls that passed the interface's checks, so every backend (UCX here, NCCL
// on GPUs) refuses the same mistakes with the same messages. Recorder is a backend that records.
class Recorder final : public Communicator {
 public:
  Recorder() : Communicator(1, 3, "recorder") {}
  std::vector<std::string> calls;
  Backend backend() const override { return Backend::kNccl; }
  BufferMemory memory() const override { return BufferMemory::kCuda; }
  std::shared_ptr<Communicator> split(int, int, const std::string&) override { return nullptr; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Status status(std::string*, int*) const override { return Status::kOk; }
  void abort(const std::string&) override {}
  void keep_alive(std::shared_ptr<void>) override {}

 protected:
  WorkPtr record(const std::string& what) {
    calls.push_back(what);
    auto w = std::make_shared<Work>(what);
    w->finish();
    return w;
  }
  WorkPtr start_all_reduce(const void*, void*, size_t, DataType, ReduceOp) override { return record("all_reduce"); }
  WorkPtr start_reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override {
    return record("reduce_scatter");
  }
  WorkPtr start_all_gather(const void*, void*, size_t, DataType) override { return record("all_gather"); }
  WorkPtr start_broadcast(void*, size_t, DataType, int root) override {
    return record("broadcast from " + std::to_string(root));
  }
  WorkPtr start_all_to_all(const void*, void*, size_t, DataType) override { return record("all_to_all"); }
  WorkPtr start_barrier() override { return record("barrier"); }
  WorkPtr start_send(const void*, size_t, DataType, int peer) override { return record("send to " + std::to_string(peer)); }
  WorkPtr start_recv(void*, size_t, DataType, int peer) override { return record("recv from " + std::to_string(peer)); }
  void apply_timeout(std::chrono::milliseconds t) override { timeout_ = t; }

 private:
  std::chrono::milliseconds timeout_{60000};
};

TEST(CommTest, EveryBackendGetsCheckedArguments) {
  Recorder r;
  Communicator& c = r;
  float f[6] = {};
  int32_t i = 0;
  auto refused = [&](Status want, const char* message, const std::function<void()>& fn) {
    try {
      fn();
      ADD_FAILURE() << "no error for: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), want) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused(Status::kUnsupported, "all_reduce: avg is not defined for i32",
          [&] { c.all_reduce(&i, 1, DataType::kI32, ReduceOp::kAvg); });
  refused(Status::kInvalidArgument, "reduce_scatter: null buffer for 2 elements",
          [&] { c.reduce_scatter(f, nullptr, 2, DataType::kF32, ReduceOp::kSum); });
  refused(Status::kInvalidArgument, "all_gather: unknown data type 9",
          [&] { c.all_gather(f, f, 1, static_cast<DataType>(9)); });
  refused(Status::kInvalidArgument, "broadcast: root 3 outside [0, 3)", [&] { c.broadcast(f, 1, DataType::kF32, 3); });
  refused(Status::kInvalidArgument, "all_to_all: in and out must be distinct",
          [&] { c.all_to_all(f, f, 2, DataType::kF32); });
  refused(Status::kInvalidArgument, "send: peer 1 is not another rank", [&] { c.send(f, 1, DataType::kF32, 1); });
  refused(Status::kInvalidArgument, "recv: peer -1 is not another rank", [&] { c.recv(f, 1, DataType::kF32, -1); });
  refused(Status::kInvalidArgument, "set_timeout: must be positive", [&] { c.set_timeout(std::chrono::milliseconds(0)); });
  EXPECT_TRUE(r.calls.empty()) << r.calls.front();
  // Calls that pass reach the backend as given; the in-place all-reduce is the two-buffer one.
  c.all_reduce(f, 6, DataType::kF32, ReduceOp::kMax)->wait();
  c.reduce_scatter(f, f + 2, 2, DataType::kBF16, ReduceOp::kAvg)->wait();
  c.broadcast(nullptr, 0, DataType::kU8, 2)->wait();
  c.send(f, 1, DataType::kF32, 0)->wait();
  c.recv(f, 1, DataType::kF32, 2)->wait();
  c.barrier()->wait();
  c.set_timeout(std::chrono::milliseconds(5));
  EXPECT_EQ(r.calls, (std::vector<std::string>{"all_reduce", "reduce_scatter", "broadcast from 2", "send to 0",
                                               "recv from 2", "barrier"}));
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(5));
  EXPECT_STREQ(backend_name(c.backend()), "nccl");
}

// Rank 2 never joins the all-reduce (it is busy elsewhere): ranks 0 and 1 fail with kTimeout
// naming rank 2 within the timeout (plus the grace period), later operations fail at once, and
// rank 2 learns it too.
TEST(CommTest, SilentPeerTimesOut) {
  RankSetup setup;
  setup.timeout = milliseconds(1000);
  std::promise<void> others_done[2];
  run_ranks(3, setup, [&](Communicator& c) {
    float v = 1;
    if (c.rank() == 2) {
      for (auto& p : others_done) ASSERT_EQ(p.get_future().wait_for(kWait), std::future_status::ready);
      auto w = c.barrier();  // the others reported this rank: fails at once or shortly
      EXPECT_THROW(w->wait(milliseconds(10000)), Error);
      EXPECT_NE(c.status(), Status::kOk);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    auto w = c.all_reduce(&v, 1, DataType::kF32, ReduceOp::kSum);
    try {
      w->wait(milliseconds(10000));
      ADD_FAILURE() << "all_reduce finished without rank 2";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
    int failed = -1;
    EXPECT_EQ(c.status(nullptr, &failed), Status::kTimeout);
    EXPECT_EQ(failed, 2);
    auto later = c.all_reduce(&v, 1, DataType::kF32, ReduceOp::kSum);
    EXPECT_EQ(later->status(), Status::kTimeout);  // failed at once
    others_done[c.rank()].set_value();
  });
}

// abort() returns at once, fails the caller's pending work and makes the peers fail fast.
TEST(CommTest, AbortReachesPeers) {
  run_ranks(3, {}, [](Communicator& c) {
    float v = 1;
    if (c.rank() == 0) {
      auto w = c.recv(&v, 1, DataType::kF32, 1);  // never sent
      c.abort("test");
      EXPECT_EQ(w->status(), Status::kInvalidState);
      EXPECT_THROW(w->wait(), Error);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    auto w = c.all_reduce(&v, 1, DataType::kF32, ReduceOp::kSum);
    try {
      w->wait(milliseconds(8000));
      ADD_FAILURE() << "all_reduce finished without rank 0";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kPeerFailed) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  });
}

TEST(CommTest, WaitDeadlineLeavesWorkPending) {
  std::promise<void> timed_out;
  auto timed_out_future = timed_out.get_future();
  run_ranks(2, {}, [&](Communicator& c) {
    float v = 1;
    if (c.rank() == 0) {
      auto w = c.recv(&v, 1, DataType::kF32, 1);
      EXPECT_THROW(w->wait(milliseconds(50)), Error);
      EXPECT_EQ(w->status(), Status::kInvalidState);  // still pending
      timed_out.set_value();
      c.barrier()->wait(kWait);  // queued behind the recv: completes once it does
      EXPECT_TRUE(w->test());
      EXPECT_EQ(v, 2.0f);
    } else {
      float two = 2;
      ASSERT_EQ(timed_out_future.wait_for(kWait), std::future_status::ready);
      auto s = c.send(&two, 1, DataType::kF32, 0);
      c.barrier()->wait(kWait);
      EXPECT_TRUE(s->test());
    }
  });
}

// A caller blocked in wait() is counted by the engine (ucx::Engine::blocked_callers: its progress
// thread then keeps polling on the caller's core), for as long as it blocks, through either wait;
// a Work already finished is not waited for, nor is a thread under WaitsAsIfComputing counted.
TEST(CommTest, BlockedCallersAreCounted) {
  auto counter = std::make_shared<std::atomic<int>>(0);
  Work work("test op");
  work.count_blocked_callers_in(counter);
  std::thread waiter([&] { work.wait(); });
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (counter->load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(counter->load(), 1);
  work.finish();
  waiter.join();
  EXPECT_EQ(counter->load(), 0);
  work.wait();  // finished: returns at once, uncounted
  EXPECT_EQ(counter->load(), 0);
  Work pending("pending op");
  pending.count_blocked_callers_in(counter);
  EXPECT_THROW(pending.wait(milliseconds(20)), Error);
  EXPECT_EQ(counter->load(), 0);
  // A thread that waits as if it computed is not counted; others still are.
  Work beside("op beside compute");
  beside.count_blocked_callers_in(counter);
  std::thread computing([&] {
    const WaitsAsIfComputing as_if;
    EXPECT_TRUE(WaitsAsIfComputing::active());
    beside.wait();
  });
  std::thread plain([&] { beside.wait(); });
  const auto until_plain = std::chrono::steady_clock::now() + kWait;
  while (counter->load() == 0 && std::chrono::steady_clock::now() < until_plain) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(20));  // the computing thread has reached its wait too
  EXPECT_EQ(counter->load(), 1);
  beside.finish();
  computing.join();
  plain.join();
  EXPECT_EQ(counter->load(), 0);
  EXPECT_FALSE(WaitsAsIfComputing::active());

  // Through a communicator: rank 0's receive is counted by its engine while it blocks; rank 1
  // sends once it sees that.
  std::promise<std::shared_ptr<std::atomic<int>>> engine0;
  auto engine0_future = engine0.get_future();
  run_ranks_shared(2, {}, [&](const std::shared_ptr<UcxCommunicator>& c) {
    float v = 0;
    if (c->rank() == 0) {
      auto w = c->recv(&v, 1, DataType::kF32, 1);
      engine0.set_value(c->engine()->blocked_callers());
      w->wait(kWait);
      EXPECT_EQ(v, 3.0f);
      EXPECT_EQ(c->engine()->blocked_callers()->load(), 0);
    } else {
      ASSERT_EQ(engine0_future.wait_for(kWait), std::future_status::ready);
      const std::shared_ptr<std::atomic<int>> blocked = engine0_future.get();
      const auto until = std::chrono::steady_clock::now() + kWait;
      while (blocked->load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      EXPECT_EQ(blocked->load(), 1);
      float three = 3;
      c->send(&three, 1, DataType::kF32, 0)->wait(kWait);
    }
  });
}

// wait_all waits for every Work before it throws the first failure: a caller may free the buffers
// of all of them once it returns or throws.
TEST(CommTest, WaitAllWaitsForEveryWorkBeforeThrowing) {
  auto failed = std::make_shared<Work>("first");
  auto slow = std::make_shared<Work>("second");
  auto done = std::make_shared<Work>("third");
  failed->fail(Status::kPeerFailed, "rank 1 failed");
  done->finish();
  std::atomic<bool> finished_slow{false};
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(50));
    finished_slow = true;
    slow->finish();
  });
  try {
    wait_all({failed, nullptr, slow, done});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kPeerFailed);
    EXPECT_TRUE(finished_slow.load());  // thrown only once the slow one had finished
  }
  finisher.join();
  wait_all({done, slow});  // all finished: returns
}

// Buffers handed to keep_alive are let go at once when no failed operation still drains.
TEST(CommTest, KeepAliveReleasesWhenNothingDrains) {
  run_ranks(2, {}, [](Communicator& c) {
    auto buffer = std::make_shared<std::vector<float>>(1024, 1.0f);
    std::weak_ptr<std::vector<float>> watch = buffer;
    c.all_reduce(buffer->data(), buffer->size(), DataType::kF32, ReduceOp::kSum)->wait(kWait);
    c.keep_alive(std::move(buffer));
    auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
    while (!watch.expired() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
    EXPECT_TRUE(watch.expired());
  });
}

// The shared window is all or nothing: ranks whose options cannot agree (one rank without
// shared memory, or with other slots) all keep to messages, and the results are the same.
TEST(CommTest, SharedWindowNeedsEveryRank) {
  for (int variant = 0; variant < 2; ++variant) {
    RankSetup setup;
    setup.per_rank = [variant](int rank, CommOptions& o) {
      if (rank != 1) return;
      if (variant == 0) o.shared_memory = false;
      if (variant == 1) o.shared_slot_bytes = 8192;
    };
    run_ranks(3, setup, [](Communicator& c) {
      std::vector<float> v(100003);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(input_value(c.rank(), i));
      c.all_reduce(v.data(), v.size(), DataType::kF32, ReduceOp::kSum)->wait(kWait);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], reference(3, i, ReduceOp::kSum));
      EXPECT_FALSE(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory());
    });
  }
}

// Split communicators get windows of their own; the world's and theirs run side by side.
TEST(CommTest, SharedWindowPerCommunicator) {
  run_ranks(4, {}, [](Communicator& c) {
    auto half = c.split(c.rank() % 2, c.rank());
    std::vector<float> a(300000, 1.0f), b(300000, static_cast<float>(c.rank()));
    auto w1 = half->all_reduce(a.data(), a.size(), DataType::kF32, ReduceOp::kSum);
    auto w2 = c.all_reduce(b.data(), b.size(), DataType::kF32, ReduceOp::kAvg);
    w1->wait(kWait);
    w2->wait(kWait);
    for (size_t i = 0; i < a.size(); i += 101) ASSERT_EQ(a[i], 2.0f);
    for (size_t i = 0; i < b.size(); i += 101) ASSERT_EQ(b[i], 1.5f);
    EXPECT_TRUE(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory());
    EXPECT_TRUE(dynamic_cast<UcxCommunicator&>(*half).uses_shared_memory());
  });
}

TEST(ReduceKernels, ReduceManyMatchesPairwiseInOrder) {
  const size_t count = 3000;  // more than one block of the f32 path
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (!reduce_supported(t, op)) continue;
      std::vector<std::vector<uint8_t>> src;
      for (int j = 0; j < 3; ++j) src.push_back(make_input(j, count, t));
      const void* srcs[3] = {src[0].data(), src[1].data(), src[2].data()};
      std::vector<uint8_t> out(src[0].size());
      reduce_many(out.data(), srcs, 3, count, t, op);
      for (size_t i = 0; i < count; ++i)
        ASSERT_NEAR(load_value(out.data(), i, t), reference(3, i, op), tolerance(t, reference(3, i, op)))
            << dtype_name(t) << " " << reduce_op_name(op) << " element " << i;
      // In place over the middle source, as the shared window reduces.
      reduce_many(src[1].data(), srcs, 3, count, t, op);
      ASSERT_EQ(std::memcmp(src[1].data(), out.data(), out.size()), 0) << dtype_name(t);
    }
  }
}

TEST(ReduceKernels, StreamCopyAnyAlignmentAndLength) {
  std::vector<uint8_t> src(5000), dst(5100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t offset : {0, 1, 7, 16, 33}) {
    for (size_t len : {0, 1, 255, 256, 1000, 4999}) {
      std::fill(dst.begin(), dst.end(), 0xAB);
      stream_copy(dst.data() + offset, src.data(), len, true);
      ASSERT_EQ(std::memcmp(dst.data() + offset, src.data(), len), 0) << offset << " " << len;
      for (size_t i = 0; i < offset; ++i) ASSERT_EQ(dst[i], 0xAB);
      for (size_t i = offset + len; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB);
    }
  }
}

}  // namespace
}  // namespace cohort::transport::coll::testing
