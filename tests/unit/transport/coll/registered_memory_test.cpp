// Memory from Communicator::allocate: collectives read and write it in place through the shared
// window (no copy), for any mix of ranks that use it and ranks that do not, and everything
// else (tcp, mismatched sizes, frees out of order, bad pointers) degrades or fails clearly.
#include <gtest/gtest.h>

#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::transport::coll::testing {
namespace {

// Small slots: a few thousand elements take many chunks and reuse every slot.
RankSetup small_slots() {
  RankSetup setup;
  setup.comm.shared_slot_bytes = 4096;
  setup.comm.shared_slots = 2;
  return setup;
}

// Which of its buffers a rank takes from allocate(): by rank, so that every mix occurs.
enum Use { kNone = 0, kInput = 1, kOutput = 2, kBoth = 3 };
Use use_of(int rank) { return static_cast<Use>(rank % 4 == 0 ? kBoth : rank % 4 == 1 ? kNone : rank % 4 == 2 ? kInput : kOutput); }

// Memory from allocate() or an ordinary vector of the same size. Every rank allocates and frees
// (collectively, in the same order), whether it uses the memory or not.
struct Buffer {
  Buffer(Communicator& c, size_t bytes, bool registered) : comm(c), owned(c.allocate(bytes)) {
    if (registered) {
      data = static_cast<uint8_t*>(owned);
    } else {
      plain.resize(bytes);
      data = plain.data();
    }
  }
  ~Buffer() { comm.deallocate(owned); }
  Communicator& comm;
  void* owned;
  uint8_t* data = nullptr;
  std::vector<uint8_t> plain;
};

TEST(RegisteredMemory, AllReduceAnyMixInPlaceAndNot) {
  for (int world : {2, 3, 4}) {
    run_ranks(world, small_slots(), [world](Communicator& c) {
      auto& u = dynamic_cast<UcxCommunicator&>(c);
      const Use use = use_of(c.rank());
      for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kI64}) {
        // Over 256 KiB in every type: smaller messages copy even from registered memory.
        const size_t count = 140003, bytes = count * dtype_size(t);
        Buffer in(c, bytes, use & kInput), out(c, bytes, use & kOutput);
        for (int round = 0; round < 3; ++round) {  // buffers reused as soon as the Work is done
          auto input = make_input(c.rank() + round, count, t);
          std::memcpy(in.data, input.data(), bytes);
          c.all_reduce(in.data, out.data, count, t, ReduceOp::kSum)->wait(kWait);
          for (size_t i = 0; i < count; ++i) {
            double want = 0;
            for (int r = 0; r < world; ++r) want += input_value(r + round, i);
            ASSERT_NEAR(load_value(out.data, i, t), want, tolerance(t, want))
                << dtype_name(t) << " world " << world << " round " << round << " element " << i;
          }
        }
        // In place, in whichever buffer this rank registered.
        Buffer& buf = (use & kOutput) ? out : in;
        auto input = make_input(c.rank(), count, t);
        std::memcpy(buf.data, input.data(), bytes);
        c.all_reduce(buf.data, count, t, ReduceOp::kMax)->wait(kWait);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(load_value(buf.data, i, t), reference(world, i, ReduceOp::kMax)) << dtype_name(t);
      }
      EXPECT_TRUE(u.uses_shared_memory());
      EXPECT_EQ(u.registered_chunks() > 0, use != kNone) << "rank " << c.rank();
      // A small message copies through the slots, with the same result.
      const uint64_t before = u.registered_chunks();
      Buffer small(c, 1001 * sizeof(int32_t), use & kInput);
      auto* v = reinterpret_cast<int32_t*>(small.data);
      for (int i = 0; i < 1001; ++i) v[i] = static_cast<int32_t>(input_value(c.rank(), static_cast<size_t>(i)));
      c.all_reduce(v, 1001, DataType::kI32, ReduceOp::kSum)->wait(kWait);
      for (size_t i = 0; i < 1001; ++i) ASSERT_EQ(v[i], reference(world, i, ReduceOp::kSum));
      EXPECT_EQ(u.registered_chunks(), before);
    });
  }
}

TEST(RegisteredMemory, ReduceScatterAndAllGather) {
  run_ranks(4, small_slots(), [](Communicator& c) {
    const int n = c.size();
    const bool registered = use_of(c.rank()) & kInput;
    const size_t count = 20001;  // 320 KB in all: in place
    const size_t bytes = static_cast<size_t>(n) * count * sizeof(float);
    Buffer all(c, bytes, registered), part(c, count * sizeof(float), registered);
    for (int round = 0; round < 2; ++round) {
      auto* v = reinterpret_cast<float*>(all.data);
      for (size_t i = 0; i < static_cast<size_t>(n) * count; ++i)
        v[i] = static_cast<float>(input_value(c.rank() + round, i));
      // Out of place, then in place (the output is this rank's block of the input).
      c.reduce_scatter(all.data, part.data, count, DataType::kF32, ReduceOp::kSum)->wait(kWait);
      auto* p = reinterpret_cast<float*>(part.data);
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += input_value(r + round, c.rank() * count + i);
        ASSERT_EQ(p[i], want) << "round " << round << " element " << i;
      }
      float* mine = v + static_cast<size_t>(c.rank()) * count;
      c.reduce_scatter(v, mine, count, DataType::kF32, ReduceOp::kSum)->wait(kWait);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(mine[i], p[i]) << "in place, element " << i;
      // Gather the blocks back: every rank ends with the whole reduction.
      c.all_gather(mine, v, count, DataType::kF32)->wait(kWait);
      for (size_t i = 0; i < static_cast<size_t>(n) * count; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += input_value(r + round, i);
        ASSERT_EQ(v[i], want) << "all_gather element " << i;
      }
    }
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).registered_chunks() > 0, registered);
  });
}

// Over tcp there is no window: allocate() still gives memory, and collectives copy.
TEST(RegisteredMemory, WithoutSharedMemoryIsOrdinaryMemory) {
  RankSetup setup;
  setup.tls = "tcp";
  run_ranks(2, setup, [](Communicator& c) {
    auto* v = static_cast<float*>(c.allocate(1000 * sizeof(float)));
    for (int i = 0; i < 1000; ++i) v[i] = static_cast<float>(i + c.rank());
    c.all_reduce(v, 1000, DataType::kF32, ReduceOp::kSum)->wait(kWait);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[i], static_cast<float>(2 * i + 1));
    auto& u = dynamic_cast<UcxCommunicator&>(c);
    EXPECT_FALSE(u.uses_shared_memory());
    EXPECT_EQ(u.registered_chunks(), 0u);
    c.deallocate(v);
  });
}

// Ranks that ask for different sizes each get their own memory, which no peer maps: the
// collectives copy, with the right results.
TEST(RegisteredMemory, MismatchedSizesStayLocal) {
  run_ranks(3, small_slots(), [](Communicator& c) {
    const size_t used = 100000;  // large enough to be read in place if it were shared
    const size_t count = used + static_cast<size_t>(c.rank()) * 1024;
    auto* v = static_cast<float*>(c.allocate(count * sizeof(float)));
    for (size_t i = 0; i < used; ++i) v[i] = static_cast<float>(input_value(c.rank(), i));
    c.all_reduce(v, used, DataType::kF32, ReduceOp::kSum)->wait(kWait);
    for (size_t i = 0; i < used; ++i) ASSERT_EQ(v[i], reference(3, i, ReduceOp::kSum));
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(c).registered_chunks(), 0u);
    c.deallocate(v);
  });
}

TEST(RegisteredMemory, BadCallsAreRejected) {
  run_ranks(2, {}, [](Communicator& c) {
    auto status_of = [](const std::function<void()>& fn) {
      try {
        fn();
      } catch (const Error& e) {
        return e.status();
      }
      return Status::kOk;
    };
    EXPECT_EQ(status_of([&] { c.allocate(0); }), Status::kInvalidArgument);
    float local = 0;
    EXPECT_EQ(status_of([&] { c.deallocate(&local); }), Status::kInvalidArgument);
    void* p = c.allocate(100);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    c.deallocate(p);
    EXPECT_EQ(status_of([&] { c.deallocate(p); }), Status::kInvalidArgument);
    // Memory of one communicator is ordinary memory to another (here a copy of the world).
    auto other = c.split(0, c.rank());
    const int count = 100000;  // large enough to be read in place where it is registered
    auto* v = static_cast<int32_t*>(c.allocate(count * sizeof(int32_t)));
    for (int i = 0; i < count; ++i) v[i] = i;
    other->all_reduce(v, count, DataType::kI32, ReduceOp::kSum)->wait(kWait);
    for (int i = 0; i < count; ++i) ASSERT_EQ(v[i], 2 * i);
    EXPECT_EQ(dynamic_cast<UcxCommunicator&>(*other).registered_chunks(), 0u);
    c.deallocate(v);
  });
}

// A rank that frees memory its peer still uses in a collective fails that collective with a
// message that says so; its peer fails too (by the deadline at the latest), nothing hangs.
TEST(RegisteredMemory, FreeOutOfOrderFailsClearly) {
  RankSetup setup = small_slots();
  setup.timeout = std::chrono::milliseconds(3000);
  run_ranks(2, setup, [](Communicator& c) {
    const size_t count = 100000;  // in place (over 256 KiB)
    auto* v = static_cast<float*>(c.allocate(count * sizeof(float)));
    std::vector<float> plain(count, 1.0f);
    float* buf = v;
    if (c.rank() == 0) {
      c.deallocate(v);  // rank 1 still uses its memory of this allocation below
      buf = plain.data();
    } else {
      std::fill(v, v + count, 1.0f);
    }
    const auto start = std::chrono::steady_clock::now();
    auto work = c.all_reduce(buf, count, DataType::kF32, ReduceOp::kSum);
    try {
      work->wait(kWait);
      ADD_FAILURE() << "rank " << c.rank() << ": no error";
    } catch (const Error& e) {
      // Rank 0 finds the fault; rank 1 hears of it from rank 0, not from its own deadline.
      EXPECT_EQ(e.status(), c.rank() == 0 ? Status::kInvalidArgument : Status::kPeerFailed) << e.what();
      EXPECT_NE(std::string(e.what()).find("freed"), std::string::npos) << e.what();
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500)) << e.what();
    }
    if (c.rank() == 1) c.deallocate(v);
  });
}

}  // namespace
}  // namespace cohort::transport::coll::testing
