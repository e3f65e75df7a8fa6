// CommBuffer: registered memory for buffers large enough to go in place, ordinary memory
// otherwise; moves and swaps keep ownership; freeing is the communicator's deallocate, skipped
// after a failure (the communicator frees the memory when destroyed).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/unit/transport/coll/coll_test_util.h"
#include "transport/coll/comm_buffer.h"

namespace cohort::transport::coll::testing {
namespace {

constexpr size_t kLarge = kRegisteredInPlaceBytes / sizeof(float) + 1001;  // registered
constexpr size_t kSmall = 1000;                                            // ordinary

// deallocate() of a pointer the communicator no longer knows is kInvalidArgument at once
// (nothing is submitted): how a test sees that a CommBuffer gave its memory back.
bool communicator_knows(Communicator& c, void* p) {
  try {
    c.deallocate(p);
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    return false;
  }
}

TEST(CommBuffer, LargeBuffersAreRegisteredAndReducedInPlace) {
  run_ranks_shared(2, RankSetup{}, [](const std::shared_ptr<UcxCommunicator>& comm) {
    CommBuffer large(comm, kLarge, 1.5f), small(comm, kSmall, 2.0f), plain(nullptr, kLarge);
    EXPECT_TRUE(large.registered());
    EXPECT_FALSE(small.registered());
    EXPECT_FALSE(plain.registered());
    ASSERT_EQ(large.size(), kLarge);
    ASSERT_EQ(small.size(), kSmall);
    for (float v : large) ASSERT_EQ(v, 1.5f);
    for (float v : small) ASSERT_EQ(v, 2.0f);
    for (float v : plain) ASSERT_EQ(v, 0.0f);
    for (size_t i = 0; i < kLarge; ++i) large[i] = static_cast<float>(input_value(comm->rank(), i));
    comm->all_reduce(large.data(), kLarge, DataType::kF32, ReduceOp::kSum)->wait(kWait);
    for (size_t i = 0; i < kLarge; ++i) ASSERT_EQ(large[i], reference(2, i, ReduceOp::kSum)) << i;
    EXPECT_TRUE(comm->uses_shared_memory());
    EXPECT_GT(comm->registered_chunks(), 0u);
  });
}

TEST(CommBuffer, MovesAndSwapsKeepOneOwnerAndFreeOnce) {
  run_ranks_shared(2, RankSetup{}, [](const std::shared_ptr<UcxCommunicator>& comm) {
    CommBuffer a(comm, kLarge, 1.0f);
    float* pa = a.data();
    CommBuffer b = std::move(a);  // b owns the registration, a is empty
    EXPECT_TRUE(a.empty());
    EXPECT_FALSE(a.registered());
    EXPECT_EQ(b.data(), pa);
    EXPECT_TRUE(b.registered());
    CommBuffer c(comm, kSmall, 3.0f);
    float* pc = c.data();
    swap(b, c);
    EXPECT_EQ(b.data(), pc);
    EXPECT_FALSE(b.registered());
    EXPECT_EQ(c.data(), pa);
    EXPECT_TRUE(c.registered());
    EXPECT_EQ(c[0], 1.0f);
    EXPECT_EQ(b[0], 3.0f);
    // Assigning over a registered buffer frees it; so does reset(); so does the destructor.
    float* pd = nullptr;
    {
      CommBuffer d(comm, kLarge);
      pd = d.data();
      c = std::move(d);
      EXPECT_EQ(c.data(), pd);
    }
    EXPECT_FALSE(communicator_knows(*comm, pa));
    c.reset();
    EXPECT_TRUE(c.empty());
    EXPECT_FALSE(communicator_knows(*comm, pd));
    float* pe = nullptr;
    {
      CommBuffer e(comm, kLarge);
      pe = e.data();
    }
    EXPECT_FALSE(communicator_knows(*comm, pe));
  });
}

TEST(CommBuffer, OverTcpTheMemoryIsTheRanksOwn) {
  RankSetup tcp;
  tcp.tls = "tcp";
  run_ranks_shared(2, tcp, [](const std::shared_ptr<UcxCommunicator>& comm) {
    CommBuffer large(comm, kLarge);
    for (size_t i = 0; i < kLarge; ++i) large[i] = static_cast<float>(input_value(comm->rank(), i));
    comm->all_reduce(large.data(), kLarge, DataType::kF32, ReduceOp::kMax)->wait(kWait);
    for (size_t i = 0; i < kLarge; ++i) ASSERT_EQ(large[i], reference(2, i, ReduceOp::kMax)) << i;
    EXPECT_FALSE(comm->uses_shared_memory());
    EXPECT_EQ(comm->registered_chunks(), 0u);
  });
}

TEST(CommBuffer, AfterAFailureTheMemoryIsLeftToTheCommunicator) {
  run_ranks_shared(2, RankSetup{}, [](const std::shared_ptr<UcxCommunicator>& comm) {
    CommBuffer large(comm, kLarge);
    float* p = large.data();
    // Both ranks hold their buffer before the failure (the allocation maps the peers' regions: a
    // rank still allocating when the other aborted saw that abort instead). Rank 0 fails; rank 1
    // learns it from its peer (bounded wait). Rank 0 leaves the barrier once rank 1 entered it,
    // so its abort can overtake the barrier's end on rank 1: that is the failure made here.
    try {
      comm->barrier()->wait();
    } catch (const Error&) {
      EXPECT_EQ(comm->rank(), 1);
    }
    if (comm->rank() == 0) comm->abort("test: failing on purpose");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (comm->status() == Status::kOk && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_NE(comm->status(), Status::kOk);
    large.reset();  // no deallocate on a failed communicator, and no throw
    EXPECT_TRUE(large.empty());
    EXPECT_TRUE(communicator_knows(*comm, p));  // still the communicator's, valid until it goes
  });
}

}  // namespace
}  // namespace cohort::transport::coll::testing
