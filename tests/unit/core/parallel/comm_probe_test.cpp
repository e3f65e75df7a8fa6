// The communication probe (core/parallel/comm_probe.h): every operation and group size measured,
// positive finite numbers, one table on every rank, seconds not minutes; the compute stretch
// measured with the step given (or the built-in mix) and the cores per rank reported.
#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <mutex>

#include "core/base/error.h"
#include "core/parallel/comm_probe.h"
#include "tests/support/expect_error.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::parallel {
namespace {

namespace ct = transport::coll::testing;

TEST(CommProbe, MeasuresEveryOperationAndGroupSizeAlikeOnEveryRank) {
  std::mutex mutex;
  std::vector<CommTable> tables(4);
  std::vector<int> steps(4, 0);
  ct::run_ranks_shared(4, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    ProbeOptions o;
    o.max_bytes = 1 << 20;  // enough to see shared memory's bandwidth, quick on 2 cores
    o.cores = 2;            // the ranks share 2 cores
    const size_t me = static_cast<size_t>(comm->rank());
    o.step = [&steps, me] {
      ++steps[me];  // this rank's own counter
      volatile double x = 1.0;
      for (int k = 0; k < 100000; ++k) x = x * 1.0000001 + 0.5;
    };
    o.step_name = "a counting step";
    CommTable t = probe_communication(*comm, o);
    std::lock_guard<std::mutex> lock(mutex);
    tables[me] = t;
  });
  const CommTable& t = tables[0];
  // The stretch is measured with the given step, on every rank; the cores are shared 4 ways.
  for (int n : steps) EXPECT_GE(n, 6);  // a warm-up and 5 timings together
  EXPECT_GE(steps[0], steps[1]);        // rank 0 alone too
  EXPECT_TRUE(std::isfinite(t.compute_stretch) && t.compute_stretch > 0) << t.compute_stretch;
  EXPECT_EQ(t.cores_per_rank, 0.5);
  EXPECT_NE(t.source.find("a counting step together"), std::string::npos) << t.source;
  EXPECT_NE(t.source.find("0.50 cores per rank"), std::string::npos) << t.source;
  // A message's processor time: a fixed part and a part per byte, the same on every rank.
  EXPECT_TRUE(std::isfinite(t.message_compute_seconds) && t.message_compute_seconds >= 0 &&
              t.message_compute_seconds < 0.1)
      << t.message_compute_seconds;
  EXPECT_TRUE(std::isfinite(t.message_compute_seconds_per_byte) && t.message_compute_seconds_per_byte >= 0)
      << t.message_compute_seconds_per_byte;
  EXPECT_NE(t.source.find("a message takes"), std::string::npos) << t.source;
  // Groups of 2: point-to-point and the five collectives; of 4: the five collectives.
  ASSERT_EQ(t.entries.size(), 11u) << t.source;
  int pairs = 0;
  for (const CommCost& c : t.entries) {
    EXPECT_TRUE(c.ranks == 2 || c.ranks == 4);
    pairs += c.op == CommOp::kPointToPoint;
    EXPECT_TRUE(std::isfinite(c.latency_seconds) && c.latency_seconds >= 0 && c.latency_seconds < 1.0)
        << static_cast<int>(c.op) << " over " << c.ranks << ": " << c.latency_seconds;
    EXPECT_TRUE(std::isfinite(c.bytes_per_second) && c.bytes_per_second > 1e6)
        << static_cast<int>(c.op) << " over " << c.ranks << ": " << c.bytes_per_second;
    std::printf("%d over %d ranks: latency %.1f us, %.2f GB/s\n", static_cast<int>(c.op), c.ranks,
                c.latency_seconds * 1e6, c.bytes_per_second / 1e9);
  }
  EXPECT_EQ(pairs, 1);
  for (const CommTable& other : tables) {
    EXPECT_EQ(other.message_compute_seconds, t.message_compute_seconds);
    EXPECT_EQ(other.message_compute_seconds_per_byte, t.message_compute_seconds_per_byte);
    ASSERT_EQ(other.entries.size(), t.entries.size());
    for (size_t k = 0; k < t.entries.size(); ++k) {
      EXPECT_EQ(other.entries[k].latency_seconds, t.entries[k].latency_seconds);
      EXPECT_EQ(other.entries[k].bytes_per_second, t.entries[k].bytes_per_second);
    }
  }
  EXPECT_NE(t.source.find("over 4 ranks"), std::string::npos) << t.source;
  std::printf("%s\n", t.source.c_str());
}

// Without a step, the built-in mix is timed; without given cores, the ranks of one host (these
// threads share a host name) share the union of their affinities: this process's.
TEST(CommProbe, WithoutAStepTheBuiltInMixIsTimed) {
  std::mutex mutex;
  CommTable t;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    ProbeOptions o;
    o.max_bytes = 1 << 20;
    CommTable mine = probe_communication(*comm, o);
    std::lock_guard<std::mutex> lock(mutex);
    if (comm->rank() == 0) t = mine;
  });
  EXPECT_TRUE(std::isfinite(t.compute_stretch) && t.compute_stretch > 0) << t.compute_stretch;
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(t.cores_per_rank, CPU_COUNT(&set) / 2.0) << t.source;  // 2 ranks on this host
  EXPECT_NE(t.source.find("the built-in mix together"), std::string::npos) << t.source;
}

// Ranks that do not share cores but keep a thread busy (2 ranks on 2 cores: a training thread and
// a progress thread each) also get the tensor axes' collectives measured with the caller waiting
// and no busy thread beside it (CommCost::caller_waits); ranks sharing cores, or measured without
// a busy thread, get one kind only.
TEST(CommProbe, CollectivesACallerWaitsForAreMeasuredWhereTheRanksDoNotShareCores) {
  struct Case {
    int cores, busy;
    bool expect_caller_waits;
  };
  for (const Case& k : {Case{2, -1, true}, Case{1, -1, false}, Case{2, 0, false}}) {
    std::mutex mutex;
    CommTable t;
    ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      ProbeOptions o;
      o.max_bytes = 1 << 20;
      o.cores = k.cores;
      o.busy = k.busy;
      o.passes = 1;
      o.step = [] {
        volatile double x = 1.0;
        for (int r = 0; r < 20000; ++r) x = x * 1.0000001 + 0.5;
      };
      CommTable mine = probe_communication(*comm, o);
      std::lock_guard<std::mutex> lock(mutex);
      if (comm->rank() == 0) t = mine;
    });
    SCOPED_TRACE(str_cat("cores ", k.cores, ", busy ", k.busy, ": ", t.source));
    std::vector<CommOp> waited;
    for (const CommCost& c : t.entries) {
      EXPECT_TRUE(std::isfinite(c.latency_seconds) && c.latency_seconds >= 0 && c.bytes_per_second > 1e6);
      if (c.caller_waits) waited.push_back(c.op);
    }
    // Groups of 2: point-to-point and the five collectives, then the three a tensor axis uses.
    ASSERT_EQ(t.entries.size(), k.expect_caller_waits ? 9u : 6u);
    if (k.expect_caller_waits) {
      EXPECT_EQ(waited, (std::vector<CommOp>{CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter}));
      EXPECT_NE(t.source.find("the tensor axes' collectives also without"), std::string::npos);
    }
  }
}

TEST(CommProbe, OneRankMeasuresNothingAndBadSizesAreRefused) {
  ct::run_ranks_shared(1, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    EXPECT_TRUE(probe_communication(*comm).entries.empty());
    ProbeOptions o;
    o.first_large_bytes = o.small_bytes;
    test::expect_error([&] { probe_communication(*comm, o); }, Status::kInvalidArgument,
                       "communication probe: sizes must grow");
    ProbeOptions few;
    few.small_repetitions = 0;
    test::expect_error([&] { probe_communication(*comm, few); }, Status::kInvalidArgument, "small 0");
    ProbeOptions once;
    once.passes = 0;
    test::expect_error([&] { probe_communication(*comm, once); }, Status::kInvalidArgument, "passes 0");
  });
}

}  // namespace
}  // namespace cohort::parallel
