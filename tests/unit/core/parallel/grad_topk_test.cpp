// core/parallel/grad_topk: top-k gradient compression with error feedback on simulated ranks —
// what is sent plus what stays behind is what was owed, nothing is lost across steps, keep 1 is
// the plain average, a skipped step leaves the residual alone, bad messages are refused by rank
// — and the plan's checks of grad_keep.
#include "core/parallel/grad_topk.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/ops/pipe_topk.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/plan.h"
#include "tests/support/expect_error.h"
#include "tests/support/world_of_one.h"
#include "tests/unit/core/parallel/dp_reference.h"

namespace cohort::parallel {
namespace {

// W ranks' exchanges of one bucket of n elements.
struct Ranks {
  Ranks(int world, int64_t n, double keep) : n(n) {
    for (int r = 0; r < world; ++r) topk.emplace_back(n, keep);
    messages.assign(topk[0].message_bytes() * static_cast<size_t>(world), 0);
    a.assign(static_cast<size_t>(world), std::vector<float>(static_cast<size_t>(n)));
  }
  // Encodes every rank's gradient g[r]; returns the average rank 0 computes.
  std::vector<float> exchange(const std::vector<std::vector<float>>& g) {
    for (size_t r = 0; r < topk.size(); ++r) {
      a[r] = g[r];
      topk[r].encode(a[r].data(), messages.data() + r * topk[r].message_bytes());
    }
    std::vector<float> out(static_cast<size_t>(n));
    topk[0].average(messages.data(), static_cast<int>(topk.size()), out.data(), "test");
    return out;
  }
  int64_t n;
  std::vector<GradTopk> topk;
  std::vector<uint8_t> messages;
  std::vector<std::vector<float>> a;
};

std::vector<std::vector<float>> random_gradients(std::mt19937& rng, int world, int64_t n) {
  std::normal_distribution<float> d;
  std::vector<std::vector<float>> g(static_cast<size_t>(world), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : g)
    for (float& x : v) x = d(rng);
  return g;
}

TEST(GradTopk, MessagesTakeTheSmallerIndexForm) {
  for (double keep : {0.01, 0.25, 1.0}) {
    GradTopk t(1000, keep);
    EXPECT_EQ(t.kept(), topk_count(1000, keep));
    EXPECT_EQ(t.message_bytes(), topk_message_bytes(1000, keep, DType::kF32)) << keep;
  }
  EXPECT_EQ(GradTopk(1000, 0.01).message_bytes(), 10u * 4 + 10u * 4);        // 10 int32 indices
  EXPECT_EQ(GradTopk(1000, 0.25).message_bytes(), 32u * 4 + 250u * 4);       // a 32-word bitmap
}

// Per step, for each rank: a = g + e_before, and after settle a is exactly split between the
// sent entries (e = 0 there) and the residual (e = a elsewhere); the k sent entries are a's
// largest. Over the steps: sum of all gradients = W sum of the averages + sum of the residuals.
TEST(GradTopk, NothingIsLostOnlyDelayed) {
  constexpr int kWorld = 3;
  constexpr int64_t kN = 200;
  std::mt19937 rng(5);
  Ranks ranks(kWorld, kN, 0.05);
  std::vector<double> owed(kN, 0.0), applied(kN, 0.0);
  for (int step = 0; step < 12; ++step) {
    const auto g = random_gradients(rng, kWorld, kN);
    std::vector<std::vector<float>> before;
    for (const GradTopk& t : ranks.topk) before.push_back(t.residual());
    const std::vector<float> avg = ranks.exchange(g);
    for (size_t r = 0; r < kWorld; ++r) {
      ranks.topk[r].settle(ranks.a[r].data(), true);
      const std::vector<float>& e = ranks.topk[r].residual();
      int sent = 0;
      float smallest_sent = INFINITY, largest_kept = 0;
      for (int64_t i = 0; i < kN; ++i) {
        EXPECT_EQ(ranks.a[r][i], g[r][i] + before[r][i]);
        if (e[i] == 0.0f && ranks.a[r][i] != 0.0f) {
          ++sent;
          smallest_sent = std::min(smallest_sent, std::fabs(ranks.a[r][i]));
        } else {
          EXPECT_EQ(e[i], ranks.a[r][i]);
          largest_kept = std::max(largest_kept, std::fabs(e[i]));
        }
        owed[i] += g[r][i];
      }
      EXPECT_EQ(sent, ranks.topk[r].kept());
      EXPECT_GE(smallest_sent, largest_kept);
    }
    for (int64_t i = 0; i < kN; ++i) applied[i] += static_cast<double>(kWorld) * avg[i];
  }
  double worst = 0, largest_residual = 0;
  for (int64_t i = 0; i < kN; ++i) {
    double left = 0;
    for (const GradTopk& t : ranks.topk) left += t.residual()[i];
    worst = std::max(worst, std::fabs(owed[i] - applied[i] - left));
    largest_residual = std::max(largest_residual, std::fabs(left));
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(largest_residual, 0.5);  // much is still owed at 5%: the check above is not vacuous
}

TEST(GradTopk, KeepingEverythingIsThePlainAverage) {
  std::mt19937 rng(7);
  Ranks ranks(4, 50, 1.0);
  const auto g = random_gradients(rng, 4, 50);
  const std::vector<float> avg = ranks.exchange(g);
  for (int64_t i = 0; i < 50; ++i) {
    float sum = 0;
    for (int r = 0; r < 4; ++r) sum += g[r][i];
    EXPECT_EQ(avg[i], sum * 0.25f);
  }
  ranks.topk[2].settle(ranks.a[2].data(), true);
  for (float e : ranks.topk[2].residual()) EXPECT_EQ(e, 0.0f);
}

// A rank's NaN is among what it sends, so the average is not finite on every rank; the step is
// skipped and every residual stays as it was, never holding the NaN.
TEST(GradTopk, ANonFiniteGradientReachesTheAverageAndASkippedStepKeepsTheResiduals) {
  std::mt19937 rng(9);
  Ranks ranks(2, 64, 0.1);
  ranks.exchange(random_gradients(rng, 2, 64));
  for (size_t r = 0; r < 2; ++r) ranks.topk[r].settle(ranks.a[r].data(), true);
  std::vector<std::vector<float>> before = {ranks.topk[0].residual(), ranks.topk[1].residual()};
  auto g = random_gradients(rng, 2, 64);
  g[1][40] = std::nanf("");
  const std::vector<float> avg = ranks.exchange(g);
  EXPECT_TRUE(std::isnan(avg[40]));
  for (size_t r = 0; r < 2; ++r) {
    ranks.topk[r].settle(ranks.a[r].data(), false);
    EXPECT_EQ(ranks.topk[r].residual(), before[r]);
  }
}

TEST(GradTopk, ACorruptMessageIsRefusedNamingItsRank) {
  for (double keep : {0.02, 0.5}) {  // int32 indices, then a bitmap
    std::mt19937 rng(3);
    Ranks ranks(3, 100, keep);
    ranks.exchange(random_gradients(rng, 3, 100));
    uint8_t* second = ranks.messages.data() + ranks.topk[0].message_bytes();
    if (keep < 0.1) {
      int32_t bad[2] = {7, 7};  // not strictly ascending
      std::memcpy(second, bad, sizeof bad);
    } else {
      second[12] = 0xff;  // word 3 covers entries 96..127: bits past entry 99
    }
    std::vector<float> out(100);
    test::expect_error([&] { ranks.topk[0].average(ranks.messages.data(), 3, out.data(), "bucket 0"); },
                       Status::kCorrupt, {"bucket 0: the message of rank 1"});
  }
}

TEST(GradTopk, ThePlanChecksGradKeep) {
  auto check = [](PlanConfig p, Status status, const std::string& part) {
    test::expect_error([&] { validate(p); }, status, part);
  };
  PlanConfig p;
  p.grad_keep = 0;
  check(p, Status::kInvalidPlan, "grad_keep = 0 must be in (0, 1]");
  p.grad_keep = 1.5;
  check(p, Status::kInvalidPlan, "grad_keep = 1.5 must be in (0, 1]");
  p = preset(Preset::kCo2, 4);
  p.grad_keep = 0.1;
  check(p, Status::kUnsupported, "grad_keep = 0.1 compresses the sync mode's gradients; co2");
  p = PlanConfig();
  p.grad_keep = 0.1;
  p.zero_stage = 1;  // the average all-gathered whole, each rank stepping its block of it
  EXPECT_NO_THROW(validate(p));
  p.zero_stage = 2;
  check(p, Status::kUnsupported, "it has zero_stage 2");
  p.zero_stage = 0;
  p.tensor.y = 2;
  check(p, Status::kUnsupported, "it has model degree 2");
  p.tensor.y = 1;
  EXPECT_NO_THROW(validate(p));
}

// The residuals in a checkpoint: resumed as saved; from another world (another rank's unsent
// gradient), or by a plan without top-k, dropped with a warning; a residual sized for another
// model refused.
TEST(GradTopk, ResidualsInACheckpoint) {
  auto comm = test::world_of_one().comm;
  PlanConfig plan = preset(Preset::kDdp, 1);
  plan.grad_keep = 0.1;
  auto run = [&](const PlanConfig& p, const checkpoint::CheckpointExtra* from, checkpoint::CheckpointExtra* to) {
    TrainerOptions o;
    o.seed = 1;
    o.num_threads = 1;
    Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    auto dp = DataParallel::attach(t, p, comm);
    if (from) dp->load_state(*from);
    for (int64_t s = 0; s < 3; ++s) t.step(test::dp_batch(s, 0, test::kShard));
    if (to) dp->save_state(*to);
    return test::dp_flat(t);
  };
  checkpoint::CheckpointExtra saved, again;
  run(plan, nullptr, &saved);
  ASSERT_EQ(saved.tensors.count("parallel.topk.residual"), 1u);
  double owed = 0;
  for (int64_t i = 0; i < saved.tensors["parallel.topk.residual"].numel(); ++i)
    owed += std::fabs(saved.tensors["parallel.topk.residual"].data<float>()[i]);
  EXPECT_GT(owed, 0.0);
  // Resumed with and without the residual: different runs.
  const std::vector<float> with = run(plan, &saved, &again);
  checkpoint::CheckpointExtra other = saved;
  other.ints["parallel.topk.world"] = 2;
  const std::vector<float> without = run(plan, &other, nullptr);
  EXPECT_NE(with, without);
  EXPECT_NO_THROW(run(preset(Preset::kDdp, 1), &saved, nullptr));
  checkpoint::CheckpointExtra bad = saved;
  bad.tensors["parallel.topk.residual"] = Tensor::zeros({5}, DType::kF32);
  test::expect_error([&] { run(plan, &bad, nullptr); }, Status::kInvalidArgument,
                     {"'parallel.topk.residual' has 5 elements"});
}

}  // namespace
}  // namespace cohort::parallel
