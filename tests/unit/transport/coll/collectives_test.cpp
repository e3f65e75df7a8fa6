// Correctness of every collective and dtype at world sizes 1-4, counts 0, 1, odd and large
// (ring path), over shared memory and over tcp, against references computed locally.
#include <gtest/gtest.h>

#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::transport::coll::testing {
namespace {

struct Param {
  const char* tls;
  int world;
  bool messages = false;  // CommOptions::shared_memory off: rings and trees over shared memory too
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string tls = info.param.tls;
  return (tls == "tcp" ? std::string("tcp") : std::string("shm")) +
         (info.param.messages ? "_messages" : "") + "_world" + std::to_string(info.param.world);
}

// Whether the world's all-reduces go through a shared window (known after the first one).
bool expect_shared_window(const Param& p) {
  return std::string(p.tls) != "tcp" && !p.messages && p.world >= 2;
}

class CollTest : public ::testing::TestWithParam<Param> {
 protected:
  void run(const std::function<void(Communicator&)>& fn) {
    RankSetup setup;
    setup.tls = GetParam().tls;
    // Small thresholds so that modest counts cover both algorithms and many uneven chunks.
    setup.comm.small_bytes = 2048;
    setup.comm.chunk_bytes = 8192;
    setup.comm.window = 3;
    // Two slots of 4 KiB: 1001 f32 elements fill one chunk, 40003 take 40 and reuse each slot.
    setup.comm.shared_memory = !GetParam().messages;
    setup.comm.shared_slot_bytes = 4096;
    setup.comm.shared_slots = 2;
    run_ranks(GetParam().world, setup, fn);
  }
};

// With the thresholds above, 1001 elements take the ring path in a few chunks, 40003 in many.
const std::vector<size_t> kCounts = {0, 1, 7, 1001, 40003};

void check_all_reduce(Communicator& c, DataType t, ReduceOp op, size_t count, bool in_place) {
  auto in = make_input(c.rank(), count, t);
  std::vector<uint8_t> out(in.size());
  auto work = in_place ? c.all_reduce(in.data(), count, t, op)
                       : c.all_reduce(in.data(), out.data(), count, t, op);
  work->wait(kWait);
  const void* result = in_place ? in.data() : out.data();
  for (size_t i = 0; i < count; ++i) {
    double want = reference(c.size(), i, op);
    double got = load_value(result, i, t);
    ASSERT_NEAR(got, want, tolerance(t, want))
        << "all_reduce " << dtype_name(t) << " " << reduce_op_name(op) << " count " << count
        << " element " << i << " rank " << c.rank();
  }
}

TEST_P(CollTest, AllReduce) {
  run([](Communicator& c) {
    for (DataType t : kAllTypes)
      for (ReduceOp op : kAllOps)
        if (reduce_supported(t, op))
          for (size_t count : kCounts) check_all_reduce(c, t, op, count, true);
    for (size_t count : kCounts) check_all_reduce(c, DataType::kF32, ReduceOp::kSum, count, false);
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory(),
              expect_shared_window(GetParam()));
  });
}

TEST_P(CollTest, ReduceScatter) {
  run([&](Communicator& c) {
    const int n = c.size();
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (!reduce_supported(t, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{30001}}) {
          auto in = make_input(c.rank(), count * n, t);
          std::vector<uint8_t> out(std::max<size_t>(count * dtype_size(t), 1));
          c.reduce_scatter(in.data(), out.data(), count, t, op)->wait(kWait);
          for (size_t i = 0; i < count; ++i) {
            double want = reference(n, c.rank() * count + i, op);
            ASSERT_NEAR(load_value(out.data(), i, t), want, tolerance(t, want))
                << "reduce_scatter " << dtype_name(t) << " " << reduce_op_name(op) << " count "
                << count << " element " << i;
          }
        }
      }
    }
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory(),
              expect_shared_window(GetParam()));
  });
}

TEST_P(CollTest, ReduceScatterInPlace) {
  run([](Communicator& c) {
    const int n = c.size();
    // 300007: a block of 147 chunks, past kLongRing, so the doubled window runs too.
    for (size_t count : {size_t{1}, size_t{7}, size_t{30001}, size_t{300007}}) {
      auto buf = make_input(c.rank(), count * n, DataType::kF32);
      void* mine = buf.data() + c.rank() * count * 4;
      c.reduce_scatter(buf.data(), mine, count, DataType::kF32, ReduceOp::kSum)->wait(kWait);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(load_value(mine, i, DataType::kF32), reference(n, c.rank() * count + i, ReduceOp::kSum))
            << "in-place reduce_scatter count " << count << " element " << i;
    }
  });
}

TEST_P(CollTest, AllGather) {
  run([&](Communicator& c) {
    const int n = c.size();
    for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kI64}) {
      // 300007 f32: a block of 147 chunks, past kLongRing (the doubled window).
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{30001}, size_t{300007}}) {
        auto in = make_input(c.rank(), count, t);
        std::vector<uint8_t> out(std::max<size_t>(count * n * dtype_size(t), 1));
        c.all_gather(in.data(), out.data(), count, t)->wait(kWait);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(load_value(out.data(), r * count + i, t), input_value(r, i))
                << "all_gather " << dtype_name(t) << " count " << count << " block " << r;
      }
    }
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory(),
              expect_shared_window(GetParam()));
  });
}

TEST_P(CollTest, Broadcast) {
  run([](Communicator& c) {
    for (int root = 0; root < c.size(); ++root) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{300007}}) {
        auto buf = make_input(c.rank(), count, DataType::kF32);
        c.broadcast(buf.data(), count, DataType::kF32, root)->wait(kWait);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(load_value(buf.data(), i, DataType::kF32), input_value(root, i))
              << "broadcast root " << root << " count " << count << " element " << i;
      }
    }
  });
}

TEST_P(CollTest, AllToAll) {
  run([](Communicator& c) {
    const int n = c.size();
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{5001}}) {
      auto in = make_input(c.rank(), count * n, DataType::kI32);
      std::vector<uint8_t> out(in.size());
      c.all_to_all(in.data(), out.data(), count, DataType::kI32)->wait(kWait);
      for (int src = 0; src < n; ++src)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(load_value(out.data(), src * count + i, DataType::kI32),
                    input_value(src, c.rank() * count + i))
              << "all_to_all count " << count << " from " << src;
    }
  });
}

TEST_P(CollTest, SendRecvAndBarrier) {
  run([](Communicator& c) {
    const int n = c.size();
    c.barrier()->wait(kWait);
    if (n == 1) return;
    const int right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;
    for (size_t count : {size_t{0}, size_t{1}, size_t{262147}}) {
      auto out = make_input(c.rank(), count, DataType::kF32);
      auto out2 = make_input(c.rank(), count, DataType::kF32, 5);
      std::vector<uint8_t> in(out.size()), in2(out.size());
      auto r1 = c.recv(in.data(), count, DataType::kF32, left);
      auto r2 = c.recv(in2.data(), count, DataType::kF32, left);
      auto s1 = c.send(out.data(), count, DataType::kF32, right);
      auto s2 = c.send(out2.data(), count, DataType::kF32, right);
      for (auto& w : {r1, r2, s1, s2}) w->wait(kWait);
      EXPECT_EQ(std::memcmp(in.data(), make_input(left, count, DataType::kF32).data(), count * 4), 0);
      EXPECT_EQ(std::memcmp(in2.data(), make_input(left, count, DataType::kF32, 5).data(), count * 4), 0);
    }
    c.barrier()->wait(kWait);
  });
}

// Several operations in flight on one communicator complete in issue order; an operation may
// consume the previous one's output.
TEST_P(CollTest, ManyInFlight) {
  run([](Communicator& c) {
    const int n = c.size();
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < 6; ++k) {
      size_t count = k % 2 ? 50001 : 3 + k;
      bufs.push_back(make_input(c.rank(), count, DataType::kF32));
      works.push_back(c.all_reduce(bufs.back().data(), count, DataType::kF32, ReduceOp::kSum));
    }
    // The sum of all ranks, broadcast from the last rank, then all-reduced again: n * sum.
    auto chained = make_input(c.rank(), 1001, DataType::kF32);
    works.push_back(c.all_reduce(chained.data(), 1001, DataType::kF32, ReduceOp::kSum));
    works.push_back(c.broadcast(chained.data(), 1001, DataType::kF32, n - 1));
    works.push_back(c.all_reduce(chained.data(), 1001, DataType::kF32, ReduceOp::kSum));
    works.back()->wait(kWait);
    for (auto& w : works) EXPECT_TRUE(w->test()) << w->what();
    for (size_t k = 0; k < 6; ++k) {
      size_t count = k % 2 ? 50001 : 3 + k;
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(load_value(bufs[k].data(), i, DataType::kF32), reference(n, i, ReduceOp::kSum));
    }
    for (size_t i = 0; i < 1001; ++i)
      ASSERT_EQ(load_value(chained.data(), i, DataType::kF32), n * reference(n, i, ReduceOp::kSum));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollTest,
                         ::testing::Values(Param{"self,sm", 1}, Param{"self,sm", 2},
                                           Param{"self,sm", 3}, Param{"self,sm", 4},
                                           Param{"self,sm", 2, true}, Param{"self,sm", 3, true},
                                           Param{"self,sm", 4, true}, Param{"tcp", 2},
                                           Param{"tcp", 3}, Param{"tcp", 4}),
                         param_name);

// One 64 MiB all-reduce per transport at four ranks (over shared memory both through the
// shared window and with messages).
TEST(CollLarge, AllReduce64MiB) {
  for (int variant = 0; variant < 3; ++variant) {
    const char* tls = variant == 2 ? "tcp" : "self,sm";
    RankSetup setup;
    setup.tls = tls;
    setup.comm.shared_memory = variant == 0;
    run_ranks(4, setup, [&](Communicator& c) {
      const size_t count = (64u << 20) / 4;
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(input_value(c.rank(), i));
      c.all_reduce(buf.data(), count, DataType::kF32, ReduceOp::kSum)->wait(milliseconds(60000));
      for (size_t i = 0; i < count; i += 997)
        ASSERT_EQ(buf[i], reference(4, i, ReduceOp::kSum)) << tls << " element " << i;
      ASSERT_EQ(buf[count - 1], reference(4, count - 1, ReduceOp::kSum));
      EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).uses_shared_memory(), variant == 0);
    });
  }
}

}  // namespace
}  // namespace cohort::transport::coll::testing
