// The executor runs collectives asynchronously: a collective starts right after its input is
// produced and is waited for only by the first node reading its result, so independent compute
// runs while it is in flight — shown here without timing: one rank holds back its half of an
// all-reduce until the other has run its independent nodes, which it can only do if it did not
// block on the collective. With overlap off it waits right away. Ranks are threads with their
// own UCX engines (tests/unit/transport/coll/coll_test_util.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/exec/executor.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort {
namespace {

namespace ct = transport::coll::testing;

// x -> scale "a" -> all_reduce "ar"; y -> tanh "c1" -> "c2" -> "c3" (independent of ar);
// out = ar + c3. The all-reduce node is added after the chain, so only the executor's
// reordering can start it before the chain runs.
struct OverlapGraph {
  Graph g;
  ValueId x, y, out;
  OverlapGraph() {
    x = g.add_input("x", DType::kF32, {64});
    y = g.add_input("y", DType::kF32, {64});
    Attrs two;
    two.set("factor", 2.0);
    ValueId a = g.add_op("scale", "a", {x}, two).at(0);
    ValueId c = y;
    for (const char* n : {"c1", "c2", "c3"}) c = g.add_op("tanh", n, {c}, Attrs()).at(0);
    Attrs axis;
    axis.set("axis", std::string("t"));
    ValueId ar = g.add_op("all_reduce", "ar", {a}, axis).at(0);
    out = g.add_op("add", "out", {ar, c}, Attrs()).at(0);
  }
  size_t position(const Executor& ex, const std::string& node) const {
    const auto& order = ex.order();
    for (size_t s = 0; s < order.size(); ++s)
      if (g.node(order[s]).name == node) return s;
    return order.size();
  }
};

TEST(ExecutorOverlap, ACollectiveStartsRightAfterItsInputIsProduced) {
  OverlapGraph m;
  Executor ex(m.g, {m.out});
  std::vector<std::string> order;
  for (NodeId n : ex.order()) order.push_back(m.g.node(n).name);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "ar", "c1", "c2", "c3", "out"}));
}

// Rank 0 reports each event; rank 1 starts its half of the all-reduce only once rank 0 has run
// c1 (with overlap on), so rank 0 must have left its all-reduce in flight to get there.
void run_overlap(bool overlap, std::vector<std::string>* rank0_events) {
  std::promise<void> computed;
  std::shared_future<void> computed_seen = computed.get_future().share();
  std::mutex mutex;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    OverlapGraph m;
    Executor ex(m.g, {m.out});
    CommAxes axes;
    axes.set("t", comm);
    const size_t ar = m.position(ex, "ar"), c1 = m.position(ex, "c1");
    const int rank = comm->rank();
    RunOptions ro;
    ro.axes = &axes;
    ro.overlap = overlap;
    ro.before_node = [&](size_t s) {
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mutex);
        rank0_events->push_back(m.g.node(ex.order()[s]).name);
        if (s == c1 && overlap) computed.set_value();
      } else if (s == ar && overlap) {
        ASSERT_EQ(computed_seen.wait_for(std::chrono::seconds(20)), std::future_status::ready)
            << "rank 0 never ran c1: it blocked on its all-reduce instead of computing";
      }
    };
    ro.on_value = [&](ValueId v) {
      if (rank != 0 || m.g.value(v).name != "ar") return;
      std::lock_guard<std::mutex> lock(mutex);
      rank0_events->push_back("ar complete");
    };
    Tensor tx = Tensor::empty({64}, DType::kF32), ty = Tensor::empty({64}, DType::kF32);
    for (int64_t i = 0; i < 64; ++i) {
      tx.data<float>()[i] = static_cast<float>(rank + 1);
      ty.data<float>()[i] = 0.01f * static_cast<float>(i);
    }
    std::unordered_map<ValueId, Tensor> env = {{m.x, tx}, {m.y, ty}};
    ex.run(env, ro);
    // ar = 2 * (1 + 2) on both ranks, plus tanh^3 of y.
    const float want = 6.0f + std::tanh(std::tanh(std::tanh(0.01f * 5)));
    EXPECT_NEAR(env.at(m.out).data<float>()[5], want, 1e-5);
    EXPECT_EQ(ex.collective_stats().started, 1);
  });
}

TEST(ExecutorOverlap, IndependentComputeRunsWhileTheCollectiveIsInFlight) {
  std::vector<std::string> events;
  run_overlap(true, &events);
  // Rank 0 started ar, ran the chain (rank 1 joined only after c1), and learnt of ar's
  // completion only when "out" needed it.
  const auto at = [&](const std::string& e) { return std::find(events.begin(), events.end(), e) - events.begin(); };
  ASSERT_EQ(events.size(), 7u);
  EXPECT_LT(at("ar"), at("c1"));
  EXPECT_LT(at("c3"), at("ar complete"));
  EXPECT_LT(at("ar complete"), at("out"));
}

TEST(ExecutorOverlap, WithOverlapOffTheCollectiveIsWaitedForAtOnce) {
  std::vector<std::string> events;
  run_overlap(false, &events);
  const auto at = [&](const std::string& e) { return std::find(events.begin(), events.end(), e) - events.begin(); };
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(at("ar complete"), at("ar") + 1);
  EXPECT_LT(at("ar complete"), at("c1"));
}

}  // namespace
}  // namespace cohort
