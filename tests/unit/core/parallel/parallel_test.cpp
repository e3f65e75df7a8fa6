// core/parallel: plan validation, the outer rule (sign, momentum, Nesterov, clipping, staleness
// penalty) on hand-checked numbers, and a world-1 DataParallel against the simulated reference.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/base/error.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/quantize.h"
#include "tests/support/expect_error.h"
#include "tests/support/world_of_one.h"
#include "tests/unit/core/parallel/dp_reference.h"

namespace cohort::parallel {
namespace {

void expect_plan_error(const PlanConfig& p, Status status, const std::string& fragment, int world = 4) {
  try {
    validate_for_world(p, world);
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Plan, RejectsWhatDoesNotFit) {
  PlanConfig p;
  p.data_parallel = 3;
  expect_plan_error(p, Status::kInvalidPlan, "data-parallel degree 3 does not divide the world size 4");
  p = preset(Preset::kCo2, 0);
  expect_plan_error(p, Status::kInvalidPlan, "tau = 0 must be >= 1");
  p = PlanConfig();
  p.mode = static_cast<SyncMode>(7);
  expect_plan_error(p, Status::kInvalidPlan, "unknown sync mode 7");
  p = PlanConfig();
  p.outer.lr = -1;
  expect_plan_error(p, Status::kInvalidPlan, "outer lr = -1 must be >= 0");
  p = PlanConfig();
  p.outer.momentum = -0.1;
  expect_plan_error(p, Status::kInvalidPlan, "outer momentum = -0.1 is not in [0, 1)");
  p = PlanConfig();
  p.outer.clip_threshold = -2;
  expect_plan_error(p, Status::kInvalidPlan, "clip threshold = -2 must be >= 0");
  p = PlanConfig();
  p.zero_stage = 4;
  expect_plan_error(p, Status::kInvalidPlan, "unknown ZeRO stage 4");
  p = preset(Preset::kCo2, 4);
  p.zero_stage = 2;
  expect_plan_error(p, Status::kUnsupported, "ZeRO stage 2 needs the sync (DDP) mode: co2's local steps");
  p.zero_stage = 1;
  expect_plan_error(p, Status::kUnsupported, "ZeRO stage 1 of co2's outer state would save nothing");
  p = preset(Preset::kLocalSgd, 4);
  p.zero_stage = 3;
  expect_plan_error(p, Status::kUnsupported, "ZeRO stage 3 needs the sync (DDP) mode: localsgd's local steps");
  p.zero_stage = 1;  // the outer state sharded
  EXPECT_NO_THROW(validate_for_world(p, 4));
  for (int stage : {1, 2, 3}) {
    p = PlanConfig();
    p.zero_stage = stage;
    EXPECT_NO_THROW(validate_for_world(p, 4));
  }
  p = PlanConfig();
  p.data_parallel = 2;
  expect_plan_error(p, Status::kUnsupported, "needs another parallel axis");
  EXPECT_NO_THROW(validate_for_world(preset(Preset::kDiLoCo, 4), 4));
  p = PlanConfig();
  p.inner_noise_scaling = true;
  expect_plan_error(p, Status::kInvalidPlan, "inner_noise_scaling applies to local steps (localsgd, co2)");
  p = preset(Preset::kCo2, 4);
  p.inner_noise_scaling = true;
  EXPECT_NO_THROW(validate_for_world(p, 4));
  // The inner state averaged at round ends: local SGD's blocking rounds only, not in shard groups.
  for (Preset local : {Preset::kLocalSgd, Preset::kSlowMo, Preset::kDiLoCo}) {
    PlanConfig a = preset(local, 4);
    a.average_inner_state = true;
    EXPECT_NO_THROW(validate_for_world(a, 4));
    a.zero_stage = 1;
    EXPECT_NO_THROW(validate_for_world(a, 4));
    a.shard_group = 2;
    expect_plan_error(a, Status::kUnsupported, "average_inner_state is not implemented with shard_group > 1");
  }
  for (Preset other : {Preset::kCo2, Preset::kDdp}) {
    PlanConfig a = preset(other, other == Preset::kDdp ? 1 : 4);
    a.average_inner_state = true;
    expect_plan_error(a, Status::kInvalidPlan, "average_inner_state applies to localsgd's blocking round ends");
  }
  p.overlap = 5;
  expect_plan_error(p, Status::kInvalidPlan, "plan: overlap = 5 must be in [1, tau = 4]");
  p.overlap = 0;
  expect_plan_error(p, Status::kInvalidPlan, "plan: overlap = 0 must be in [1, tau = 4]");
  p.overlap = 4;
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p = preset(Preset::kCo2, 4);
  p.outer_bits = 16;
  expect_plan_error(p, Status::kInvalidPlan, "plan: outer bits = 16 (32, or 8 or 4 under co2)");
  p.outer_bits = 4;
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p = preset(Preset::kDiLoCo, 4);
  p.outer_bits = 8;
  expect_plan_error(p, Status::kInvalidPlan, "plan: outer bits = 8 (32, or 8 or 4 under co2)");
  p.outer_bits = 32;
  p.overlap_auto = true;
  expect_plan_error(p, Status::kInvalidPlan, "plan: overlap auto applies to co2 (localsgd has no overlap)");
}

TEST(Plan, OuterFragmentsFitTauAndTheMode) {
  PlanConfig p = preset(Preset::kCo2, 4);
  p.outer_fragments = 0;
  expect_plan_error(p, Status::kInvalidPlan, "plan: outer_fragments = 0 must be >= 1");
  p.outer_fragments = 5;
  expect_plan_error(p, Status::kInvalidPlan, "plan: outer_fragments = 5 must be <= tau = 4");
  p.outer_fragments = 4;
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p = preset(Preset::kDiLoCo, 8);
  p.outer_fragments = 3;  // offsets 0, 2, 5
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p = preset(Preset::kDdp, 1);
  p.outer_fragments = 2;
  expect_plan_error(p, Status::kUnsupported, "plan: outer_fragments = 2 applies to the outer synchronisation");
  p = preset(Preset::kCo2, 4);
  p.outer_fragments = 2;
  p.overlap_auto = true;  // each fragment's average merged before the next fragment's round end
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.overlap = 2;  // 2 x 2 fragments = tau: still one average in flight at a time
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.outer_fragments = 4;
  expect_plan_error(p, Status::kInvalidPlan, "plan: overlap auto over outer_fragments = 4 starts from overlap = 2, "
                    "which must be <= tau / outer_fragments = 1");
  p.overlap_auto = false;  // a fixed overlap may leave several fragments' averages in flight
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.outer_fragments = 2;
  p.overlap = 1;
  p.outer_bits = 8;  // each fragment's message its own low-bit packing
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p = preset(Preset::kDiLoCo, 4);
  p.outer_fragments = 2;
  p.zero_stage = 1;  // the outer state's blocks per fragment
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.zero_stage = 0;
  p.tensor.y = 2;  // fragments cut by the whole model's parameters, each rank taking its blocks
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.tensor.y = 1;
  p.pipeline.stages = 2;  // a stage may hold none of a fragment
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.shard_group = 2;  // each fragment on its pieces of every rank's shard
  p.zero_stage = 1;
  p.pipeline.stages = 1;
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.mode = SyncMode::kCo2;
  p.zero_stage = 3;
  p.overlap_auto = true;
  EXPECT_NO_THROW(validate_for_world(p, 4));
}

TEST(Plan, OuterFragmentsAreContiguousAndBalancedByBytes) {
  // Fragment f holds parameters [cuts[f], cuts[f + 1]): each non-empty, in order.
  EXPECT_EQ(outer_fragment_cuts({10, 10, 10, 10}, 1), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(outer_fragment_cuts({10, 10, 10, 10}, 2), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(outer_fragment_cuts({10, 10, 10, 10}, 4), (std::vector<size_t>{0, 1, 2, 3, 4}));
  // By bytes, not by count: one large parameter is a fragment of its own.
  EXPECT_EQ(outer_fragment_cuts({1, 1, 100, 1, 1, 1}, 2), (std::vector<size_t>{0, 3, 6}));
  EXPECT_EQ(outer_fragment_cuts({100, 1, 1, 1}, 2), (std::vector<size_t>{0, 1, 4}));
  // Every fragment keeps at least one parameter even when the bytes would put two cuts together.
  EXPECT_EQ(outer_fragment_cuts({1, 100, 1}, 3), (std::vector<size_t>{0, 1, 2, 3}));
  // The MLP of the tests (fc1 weight 192, bias 16, fc2 weight 64, bias 4 elements).
  EXPECT_EQ(outer_fragment_cuts({192, 16, 64, 4}, 2), (std::vector<size_t>{0, 1, 4}));
  // 100 equal parameters in 7 fragments: sizes 14 or 15.
  const std::vector<size_t> c = outer_fragment_cuts(std::vector<int64_t>(100, 3), 7);
  for (size_t f = 0; f + 1 < c.size(); ++f) {
    EXPECT_GE(c[f + 1] - c[f], 14u);
    EXPECT_LE(c[f + 1] - c[f], 15u);
  }
  try {
    outer_fragment_cuts({1, 2, 3}, 4);
    ADD_FAILURE() << "4 fragments of 3 parameters";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidPlan);
    EXPECT_NE(std::string(e.what()).find("plan: outer_fragments = 4 must be in [1, 3]: the model has 3 parameter(s)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(outer_fragment_offset(0, 4, 8), 0);
  EXPECT_EQ(outer_fragment_offset(3, 4, 8), 6);
  EXPECT_EQ(outer_fragment_offset(2, 3, 8), 5);
}

TEST(Plan, PresetsAreOneRuleWithDifferentConstants) {
  PlanConfig l = preset(Preset::kLocalSgd, 5), s = preset(Preset::kSlowMo, 5), d = preset(Preset::kDiLoCo, 5),
             c = preset(Preset::kCo2, 5);
  EXPECT_EQ(l.mode, SyncMode::kLocalSgd);
  EXPECT_EQ(l.outer.lr, 1.0);
  EXPECT_EQ(l.outer.momentum, 0.0);
  EXPECT_EQ(s.outer.momentum, 0.5);
  EXPECT_TRUE(d.outer.nesterov);
  EXPECT_EQ(c.mode, SyncMode::kCo2);
  EXPECT_EQ(c.outer.lr, d.outer.lr);  // DiLoCo's outer optimizer, merged one step into each round
  EXPECT_EQ(c.outer.momentum, d.outer.momentum);
  EXPECT_TRUE(c.outer.nesterov);
  EXPECT_EQ(c.overlap, 1);
  EXPECT_FALSE(c.outer.staleness_penalty);
  EXPECT_EQ(c.outer.penalty_constant, 1.0);
  EXPECT_EQ(c.outer.clip_threshold, 0.0);
  EXPECT_EQ(c.tau, 5);
}

TEST(Plan, Co2RoundShapeHidesTheMeasuredAllReduce) {
  // An average taking 2.5 steps to arrive: merged after ceil(1.5 * 2.5) = 4 steps; tau stays at
  // the floor of 8 (= 2 * 4).
  RoundShape r = choose_round_shape(0.25, 0.1, 1, 8, 1);
  EXPECT_EQ(r.overlap, 4);
  EXPECT_EQ(r.tau, 8);
  // The link slows fourfold: 15 steps, and tau raised to 30 to keep half the round after them.
  r = choose_round_shape(1.0, 0.1, 4, 8, 4);
  EXPECT_EQ(r.overlap, 15);
  EXPECT_EQ(r.tau, 30);
  // Tenfold: 38 steps would hide it, but tau stops at 4 x 8 = 32 and the merge at 16 (it waits).
  r = choose_round_shape(2.5, 0.1, 4, 8, 4);
  EXPECT_EQ(r.overlap, 16);
  EXPECT_EQ(r.tau, 32);
  // Fast again: back to 1 step, but the round now 30 steps in ends no earlier than step 31.
  r = choose_round_shape(0.01, 0.1, 15, 8, 30);
  EXPECT_EQ(r.overlap, 1);
  EXPECT_EQ(r.tau, 31);
  // A round already past the cap (a checkpoint of a longer round) ends where it is.
  r = choose_round_shape(2.5, 0.1, 4, 8, 40);
  EXPECT_EQ(r.overlap, 20);
  EXPECT_EQ(r.tau, 41);
  // Nothing measured yet: the overlap stays as it was.
  r = choose_round_shape(0.0, 0.1, 4, 8, 4);
  EXPECT_EQ(r.overlap, 4);
  EXPECT_EQ(r.tau, 8);
}

TEST(Plan, Co2RoundShapeOverFragmentsMergesEachBeforeTheNext) {
  // comm is one fragment's travel; a step takes 0.1 s and tau's floor is 8.
  struct Case {
    double comm;
    int64_t overlap, round_pos;
    int fragments;
    int64_t want_overlap, want_tau;
    const char* why;
  };
  const Case cases[] = {
      {0.25, 1, 1, 4, 4, 16, "2.5 steps: merged after 4; tau 4 x 4, each merge by the next round end (0, 4, 8, 12)"},
      {0.01, 1, 1, 4, 1, 8, "quick: tau at its floor, offsets 0, 2, 4, 6 leave 2 >= 1 between syncs"},
      {2.5, 4, 4, 4, 8, 32, "past the cap: the overlap stops at 4 x 8 / 4, tau at 32"},
      {0.01, 8, 8, 4, 1, 32, "fast again 8 steps in: fragment 1 ends at floor(tau / 4) >= 8, not at step 2 of 9"},
      {0.12, 3, 3, 2, 2, 8, "two fragments 3 steps in: tau at its floor, fragment 1 at 4, ahead"},
  };
  for (const Case& c : cases) {
    const RoundShape r = choose_round_shape(c.comm, 0.1, c.overlap, 8, c.round_pos, c.fragments);
    EXPECT_EQ(r.overlap, c.want_overlap) << c.why;
    EXPECT_EQ(r.tau, c.want_tau) << c.why;
  }
  // One fragment is the rule of the test above, bit for bit.
  for (double comm : {0.0, 0.01, 0.25, 1.0, 2.5})
    for (int64_t pos : {1, 4, 30, 40}) {
      const RoundShape a = choose_round_shape(comm, 0.1, 4, 8, pos), b = choose_round_shape(comm, 0.1, 4, 8, pos, 1);
      EXPECT_EQ(a.overlap, b.overlap);
      EXPECT_EQ(a.tau, b.tau);
    }
}

TEST(Quantizer, EveryValueWithinHalfALevel) {
  // 601 values: a full block of magnitude 2, an all-zero block, a block of magnitude 0.01 and
  // 89 more (odd: the last 4-bit byte holds one nibble). Each value decodes within half a level
  // of its block's scale; a zero block decodes to zeros.
  std::vector<float> x(601, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    if (i < 256 || i >= 512) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 256 ? 2.0f : 0.01f);
  for (int bits : {8, 4}) {
    Quantizer q(bits, x.size());
    const size_t scales = 3 * sizeof(float), payload = bits == 8 ? 601 : 301;
    EXPECT_EQ(q.bytes(), (scales + payload + 3) / 4 * 4);
    std::vector<uint8_t> msg(q.bytes(), 0xAB);
    q.pack(x.data(), msg.data());
    std::vector<float> y(x.size(), 1.0f);
    q.average(msg.data(), 1, y.data());
    const float levels = bits == 8 ? 127.0f : 7.0f;
    for (size_t i = 0; i < x.size(); ++i) {
      float amax = 0;
      for (size_t j = i / kQuantBlock * kQuantBlock; j < std::min(x.size(), (i / kQuantBlock + 1) * kQuantBlock); ++j)
        amax = std::max(amax, std::fabs(x[j]));
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * amax / levels + 1e-6f) << bits << " bits, value " << i;
      if (amax == 0) {
        EXPECT_EQ(y[i], 0.0f);
      }
    }
    // Packing writes every byte of the message (the padding too): the same values give the same
    // message whatever the buffer held before.
    std::vector<uint8_t> again(q.bytes(), 0x5C);
    q.pack(x.data(), again.data());
    EXPECT_EQ(msg, again) << bits << " bits";
  }
}

TEST(Quantizer, LevelsRoundToNearestEvenAndLandExactly) {
  // One block of 7 values (odd) whose largest magnitude is the largest level, so the scale is 1:
  // every level decodes exactly and the halves round to the even level (in both nibbles at 4 bits).
  const std::vector<float> v = {7.0f, -7.0f, 2.5f, 3.5f, -2.5f, 0.49f, -0.5f};
  const std::vector<float> want = {7.0f, -7.0f, 2.0f, 4.0f, -2.0f, 0.0f, -0.0f};
  Quantizer q(4, v.size());
  std::vector<uint8_t> msg(q.bytes());
  q.pack(v.data(), msg.data());
  std::vector<float> y(v.size());
  q.average(msg.data(), 1, y.data());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(y[i], want[i]) << "value " << i;
  const std::vector<float> v8 = {127.0f, -127.0f, 40.5f, 41.5f, -40.5f, 0.49f, -0.5f};
  const std::vector<float> want8 = {127.0f, -127.0f, 40.0f, 42.0f, -40.0f, 0.0f, -0.0f};
  Quantizer q8(8, v8.size());
  std::vector<uint8_t> msg8(q8.bytes());
  q8.pack(v8.data(), msg8.data());
  q8.average(msg8.data(), 1, y.data());
  for (size_t i = 0; i < v8.size(); ++i) EXPECT_EQ(y[i], want8[i]) << "8 bits, value " << i;
}

TEST(Quantizer, AveragesMessagesInRankOrderAndKeepsNaNVisible) {
  // Three messages of 300 values (two blocks): the average is (m0 + m1 + m2) / 3 of the decoded
  // messages, each within half a level; a block holding a NaN decodes to NaN throughout, the
  // other block untouched by it.
  const size_t n = 300;
  std::vector<std::vector<float>> xs(3, std::vector<float>(n));
  for (size_t r = 0; r < 3; ++r)
    for (size_t i = 0; i < n; ++i) xs[r][i] = std::cos(0.11f * static_cast<float>(i * (r + 1))) * (1.0f + r);
  for (int bits : {8, 4}) {
    Quantizer q(bits, n);
    std::vector<uint8_t> all(3 * q.bytes());
    std::vector<std::vector<float>> single(3, std::vector<float>(n));
    for (size_t r = 0; r < 3; ++r) {
      q.pack(xs[r].data(), all.data() + r * q.bytes());
      q.average(all.data() + r * q.bytes(), 1, single[r].data());
    }
    std::vector<float> avg(n);
    q.average(all.data(), 3, avg.data());
    const float levels = bits == 8 ? 127.0f : 7.0f;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(avg[i], (single[0][i] + single[1][i] + single[2][i]) / 3.0f, 1e-5f) << bits << " bits, " << i;
      EXPECT_NEAR(avg[i], (xs[0][i] + xs[1][i] + xs[2][i]) / 3.0f, 0.5f * 3.0f / levels + 1e-5f) << i;
    }
    std::vector<float> bad = xs[1];
    bad[260] = std::nanf("");
    q.pack(bad.data(), all.data() + q.bytes());
    q.average(all.data(), 3, avg.data());
    for (size_t i = 0; i < n; ++i) {
      if (i >= kQuantBlock) {
        EXPECT_TRUE(std::isnan(avg[i])) << bits << " bits, value " << i;
      } else {
        EXPECT_FALSE(std::isnan(avg[i])) << bits << " bits, value " << i;
      }
    }
  }
}

TEST(Outer, PseudoGradientSignLandsOnTheAverage) {
  // anchor 1, ranks ended at 0.5 and 1.5 -> average 1.0... use 0.2 and 0.6 -> average 0.4.
  std::vector<float> anchor = {1.0f, -2.0f};
  float avg[2] = {0.4f, -1.0f};
  float d[2] = {anchor[0] - avg[0], anchor[1] - avg[1]};  // d = anchor - params
  OuterOptimizer o(preset(Preset::kLocalSgd, 1).outer);
  o.step(anchor, d, 1.0);
  EXPECT_FLOAT_EQ(anchor[0], 0.4f);  // a wrong sign would give 1.6
  EXPECT_FLOAT_EQ(anchor[1], -1.0f);
}

TEST(Outer, MomentumNesterovAndClipping) {
  OuterConfig c;
  c.lr = 0.5;
  c.momentum = 0.5;
  c.nesterov = true;
  OuterOptimizer o(c);
  std::vector<float> a = {0.0f};
  float d[1] = {2.0f};
  o.step(a, d, 1.0);  // m = 2, u = 2 + 0.5 * 2 = 3, a = -1.5
  EXPECT_FLOAT_EQ(a[0], -1.5f);
  o.step(a, d, 1.0);  // m = 1 + 2 = 3, u = 2 + 1.5 = 3.5, a = -3.25
  EXPECT_FLOAT_EQ(a[0], -3.25f);
  c.nesterov = false;
  c.clip_threshold = 1.0;
  OuterOptimizer clip(c);
  std::vector<float> b = {0.0f, 0.0f};
  float e[2] = {3.0f, 4.0f};  // ||m|| = 5 -> clipped to 1: m = (0.6, 0.8), and kept
  EXPECT_DOUBLE_EQ(clip.step(b, e, 1.0), 5.0);
  EXPECT_FLOAT_EQ(clip.momentum()[0], 0.6f);
  EXPECT_FLOAT_EQ(b[1], -0.4f);
}

TEST(Outer, StalenessPenalty) {
  OuterConfig c;
  c.staleness_penalty = true;
  c.penalty_constant = 2.0;
  OuterOptimizer o(c);
  // gap 5, progress 10: s = 1 / (1 + 2 * 0.5) = 0.5
  EXPECT_NEAR(o.staleness_scale_from(25.0, 100.0), 0.5, 1e-9);
  c.staleness_penalty = false;
  EXPECT_EQ(OuterOptimizer(c).staleness_scale_from(25.0, 100.0), 1.0);
}

TEST(Outer, Co2GuessIsTheOuterStepWithTheRanksOwnAverage) {
  // Heavy-ball: m = 1, e = 0.2: m' = 0.5 + 0.2 = 0.7, anchor 0.5 - 0.5 * 0.7 = 0.15, and the
  // momentum is left as it was.
  OuterConfig c;
  c.lr = 0.5;
  c.momentum = 0.5;
  EXPECT_FLOAT_EQ(OuterOptimizer(c).guess(0.5f, 1.0f, 0.2f), 0.15f);
  // Nesterov: u = e + beta m' = 0.2 + 0.35 = 0.55, anchor 0.5 - 0.275 = 0.225.
  c.nesterov = true;
  EXPECT_FLOAT_EQ(OuterOptimizer(c).guess(0.5f, 1.0f, 0.2f), 0.225f);
  // It is where step() goes when the average is e.
  OuterOptimizer o(c);
  std::vector<float> a = {0.5f};
  o.momentum() = {1.0f};
  float e[1] = {0.2f};
  const float g = o.guess(a[0], o.momentum()[0], e[0]);
  o.step(a, e, 1.0);
  EXPECT_FLOAT_EQ(a[0], g);
}

TEST(Plan, ShardGroupsDivideTheDataDegreeAndTakeZeroInside) {
  PlanConfig p = preset(Preset::kDiLoCo, 4);
  p.shard_group = 0;
  expect_plan_error(p, Status::kInvalidPlan, "plan: shard_group = 0 must be >= 1");
  p.shard_group = 2;
  expect_plan_error(p, Status::kInvalidPlan, "plan: shard_group = 2 runs ZeRO over each replica's ranks: zero_stage "
                                             "must be 1, 2 or 3 (it is 0)");
  for (int stage : {1, 2, 3})
    for (Preset pr : {Preset::kLocalSgd, Preset::kDiLoCo, Preset::kCo2}) {
      p = preset(pr, 4);
      p.shard_group = 2;
      p.zero_stage = stage;
      EXPECT_NO_THROW(validate_for_world(p, 4)) << stage;  // 2 replicas of 2
      EXPECT_NO_THROW(validate_for_world(p, 2)) << stage;  // 1 replica of 2
    }
  p = preset(Preset::kCo2, 4);
  p.zero_stage = 2;
  p.shard_group = 4;
  expect_plan_error(p, Status::kInvalidPlan, "plan: shard_group 4 does not divide the data-parallel degree 6", 6);
  p.shard_group = 3;
  EXPECT_NO_THROW(validate_for_world(p, 6));
  p = preset(Preset::kDdp, 1);
  p.zero_stage = 3;
  p.shard_group = 2;
  expect_plan_error(p, Status::kUnsupported, "plan: shard_group = 2 applies to localsgd / co2");
  p = preset(Preset::kCo2, 4);
  p.zero_stage = 3;
  p.shard_group = 2;
  for (int bits : {8, 4}) {  // each rank's low-bit message of its shard
    p.outer_bits = bits;
    EXPECT_NO_THROW(validate_for_world(p, 4));
  }
  EXPECT_EQ(default_outer_bits(p), 4);
  EXPECT_EQ(default_outer_bits(p, true), 8);
  p.outer_bits = 32;
  p.inner_noise_scaling = true;  // over the replicas
  EXPECT_NO_THROW(validate_for_world(p, 4));
  p.inner_noise_scaling = false;
  p.tensor.y = 2;  // groups over the data axis of each tensor position
  EXPECT_NO_THROW(validate_for_world(p, 8));
  expect_plan_error(p, Status::kInvalidPlan, "shard_group", 6);  // a data axis of 3 ranks
  p.tensor.y = 1;
  p.automatic = true;
  expect_plan_error(p, Status::kInvalidPlan, "with an automatic layout: the planner chooses the shard groups");
  p.automatic = false;
  p.outer_fragments = 2;  // streamed: each fragment on its pieces of the shard
  EXPECT_NO_THROW(validate_for_world(p, 4));
}

TEST(DataParallel, WorldOfOneMatchesTheReferenceForEveryPreset) {
  auto comm = test::world_of_one().comm;
  for (Preset pr : {Preset::kLocalSgd, Preset::kSlowMo, Preset::kDiLoCo, Preset::kCo2}) {
    PlanConfig plan = preset(pr, 2);
    TrainerOptions o;
    o.seed = 1;
    o.num_threads = 1;
    Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    auto dp = DataParallel::attach(t, plan, comm);
    test::DpSimulation sim(1, plan, 1);
    for (int64_t s = 0; s < 7; ++s) {
      t.step(test::dp_batch(s, 0, test::kShard));
      sim.step(s);
    }
    EXPECT_LE(test::dp_max_diff(test::dp_flat(t), test::dp_flat(sim.rank(0))), 1e-6) << static_cast<int>(pr);
    EXPECT_EQ(dp->stats().rounds, 3);
    t.set_step_hook(nullptr);
  }
}

// A trainer's options for a test against the reference: one thread, the reference's seed.
TrainerOptions one_thread(uint64_t seed) {
  TrainerOptions o;
  o.seed = seed;
  o.num_threads = 1;
  return o;
}

TEST(DataParallel, WorldOfOneMatchesTheFragmentedReference) {
  // Streaming synchronisation at world 1 (the multi-rank runs are multirank.dp.*-f2 / -f4):
  // DiLoCo and co2 (overlap 1 and 3 of tau 4: several fragments' averages in flight at once),
  // 2 and 4 fragments, clipping on (its norm couples the fragments), against the reference.
  auto comm = test::world_of_one().comm;
  for (Preset pr : {Preset::kDiLoCo, Preset::kCo2})
    for (int fragments : {2, 4})
      for (int64_t overlap : {1, 3}) {
        if (pr == Preset::kDiLoCo && overlap != 1) continue;
        PlanConfig plan = preset(pr, 4);
        plan.outer_fragments = fragments;
        plan.overlap = overlap;
        plan.outer.clip_threshold = 0.05;
        Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), one_thread(4));
        auto dp = DataParallel::attach(t, plan, comm);
        test::DpSimulation sim(1, plan, 4);
        for (int64_t s = 0; s < 11; ++s) {
          t.step(test::dp_batch(s, 0, test::kShard));
          sim.step(s);
        }
        const std::string what = str_cat(mode_name(plan.mode), " F ", fragments, " overlap ", overlap);
        EXPECT_LE(test::dp_max_diff(test::dp_flat(t), test::dp_flat(sim.rank(0))), 1e-6) << what;
        const ParallelStats st = dp->stats();
        EXPECT_EQ(st.rounds, 2) << what;  // fragment 0's round ends: steps 4 and 8
        EXPECT_EQ(st.outer_fragments, fragments) << what;
        // Fragment f's syncs at steps f tau / F (mod 4) of 11: F = 2 at 2, 4, 6, 8, 10; F = 4 at 1..11.
        EXPECT_EQ(st.outer_syncs, fragments == 2 ? 5 : 11) << what;
        EXPECT_EQ(st.outer_sync_bytes, 192 * 4) << what;  // the largest fragment: fc1's weight alone
        EXPECT_GT(st.last_momentum_norm, plan.outer.clip_threshold) << what;  // the clip binds
        t.set_step_hook(nullptr);
      }
}

TEST(DataParallel, OverlapAutoOverFragmentsMatchesTheReference) {
  // co2 under overlap auto over 2 and 4 fragments, against the reference given the round shapes
  // the engine chose after each step (DpSimulation::shape): every fragment's round end and merge
  // must fall where that shape puts them. At world 1 the travel is short and the shape moves
  // little (tau 4 to 12 here), so the run is saved at the first round end from step 8 on and resumed with the shape
  // a slow link would have left, tau 16 and fragment 0's average merged after 16 / F steps (the
  // most tau allows): the fragments' offsets follow the loaded tau (fragment 1 at 16 / F, not
  // 4 / F), fragment 0's merge re-chooses the shape with fragment 1's end still ahead (tau stays
  // >= F x 16 / F), and a later merge brings tau back mid-round as the measured times say.
  auto comm = test::world_of_one().comm;
  constexpr int64_t kSteps = 48;
  for (int fragments : {2, 4}) {
    PlanConfig plan = preset(Preset::kCo2, 4);
    plan.outer_fragments = fragments;
    plan.overlap_auto = true;
    plan.outer.clip_threshold = 0.05;
    const TrainerOptions o = one_thread(4);
    const std::string path = ::testing::TempDir() + "cohort_auto_fragments_" + std::to_string(fragments);
    auto t = std::make_unique<Trainer>(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    auto dp = DataParallel::attach(*t, plan, comm);
    std::vector<RoundShape> shapes;
    int64_t round_begin = 0, lengthened = -1;
    const std::string what = str_cat("F ", fragments);
    for (int64_t s = 0; s < kSteps; ++s) {
      t->step(test::dp_batch(s, 0, test::kShard));
      const ParallelStats st = dp->stats();
      shapes.push_back({st.overlap, st.tau});
      EXPECT_GE(st.overlap, 1) << what;
      EXPECT_GE(st.tau, fragments * st.overlap) << what << " step " << s;  // one average in flight at a time
      if (s + 1 - round_begin != st.tau) continue;
      round_begin = s + 1;  // fragment 0's round ended
      if (lengthened >= 0 || s + 1 < 8) continue;
      checkpoint::CheckpointExtra extra;
      dp->save_state(extra);
      ASSERT_EQ(extra.ints.at("parallel.co2.round_pos"), 0) << what;
      extra.ints["parallel.co2.round_tau"] = 16;
      extra.ints["parallel.co2.merge_overlap"] = 16 / fragments;
      shapes.back().overlap = 16 / fragments;  // the overlap fragment 0's average was launched with
      checkpoint::save_checkpoint(*t, path, extra);
      t->set_step_hook(nullptr);
      t = std::make_unique<Trainer>(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
      dp = DataParallel::attach(*t, plan, comm);
      checkpoint::CheckpointExtra loaded;
      checkpoint::load_checkpoint(*t, path, &loaded);
      dp->load_state(loaded);
      std::remove(path.c_str());
      EXPECT_EQ(dp->stats().tau, 16) << what;
      lengthened = s + 1;
    }
    ASSERT_GE(lengthened, 8) << what;
    test::DpSimulation sim(1, plan, 4);
    sim.shape = [&shapes](int64_t s) { return shapes.at(static_cast<size_t>(s)); };
    for (int64_t s = 0; s < kSteps; ++s) sim.step(s);
    const double diff = test::dp_max_diff(test::dp_flat(*t), test::dp_flat(sim.rank(0)));
    EXPECT_LE(diff, 1e-6) << what;
    // Fragment 0's merge 16 / F steps into the loaded round kept tau at 16.
    EXPECT_EQ(shapes.at(static_cast<size_t>(lengthened + 16 / fragments - 1)).tau, 16) << what;
    std::string seen;
    for (size_t s = 0; s < shapes.size(); ++s)
      if (s == 0 || shapes[s].tau != shapes[s - 1].tau || shapes[s].overlap != shapes[s - 1].overlap)
        seen += str_cat(" step ", s + 1, ": (", shapes[s].overlap, ", ", shapes[s].tau, ")");
    std::printf("co2 overlap auto over %d fragments, resumed at step %lld; (overlap, tau):%s; max |param - "
                "reference| = %.3g\n",
                fragments, static_cast<long long>(lengthened), seen.c_str(), diff);
    t->set_step_hook(nullptr);
  }
}

TEST(DataParallel, OuterStateOfOtherFragmentsIsRefused) {
  // The outer state in memory (no file): saved mid-round by co2 over 2 fragments, it loads into
  // the same plan, and is refused by name under 1 or 4 fragments.
  auto comm = test::world_of_one().comm;
  TrainerOptions o;
  o.num_threads = 1;
  PlanConfig plan = preset(Preset::kCo2, 4);
  plan.outer_fragments = 2;
  Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  auto dp = DataParallel::attach(t, plan, comm);
  for (int64_t s = 0; s < 6; ++s) t.step(test::dp_batch(s, 0, test::kShard));  // fragment 1 ended its round at 6
  checkpoint::CheckpointExtra extra;
  dp->save_state(extra);
  EXPECT_EQ(extra.ints.at("parallel.fragments"), 2);
  EXPECT_EQ(extra.ints.at("parallel.fragment_reduced.0"), 0);
  EXPECT_EQ(extra.ints.at("parallel.fragment_reduced.1"), 1);
  t.set_step_hook(nullptr);
  for (int fragments : {2, 1, 4}) {
    Trainer u(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    plan.outer_fragments = fragments;
    auto other = DataParallel::attach(u, plan, comm);
    if (fragments == 2) {
      EXPECT_NO_THROW(other->load_state(extra));
    } else {
      try {
        other->load_state(extra);
        ADD_FAILURE() << "loaded 2 fragments' state under " << fragments;
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(str_cat("cut into 2 fragment(s), the plan's outer_fragments = ", fragments)),
                  std::string::npos)
            << e.what();
      }
    }
    u.set_step_hook(nullptr);
  }
}

TEST(DataParallel, OneFragmentPerParameterAtMost) {
  auto comm = test::world_of_one().comm;
  TrainerOptions o;
  Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  PlanConfig p = preset(Preset::kCo2, 8);
  p.outer_fragments = 5;  // the MLP has 4 parameters
  try {
    DataParallel::attach(t, p, comm);
    ADD_FAILURE() << "5 fragments of 4 parameters";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidPlan);
    EXPECT_NE(std::string(e.what()).find("outer_fragments = 5 must be in [1, 4]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.step_hook(), nullptr);
}

TEST(DataParallel, Co2AveragingAtWorldOneIsPlainTraining) {
  // With lr 1 and no momentum the guess is the rank's own parameters and the merge puts them
  // back where they were, at any overlap: one rank trains as if alone (up to rounding).
  auto comm = test::world_of_one().comm;
  for (int64_t overlap : {1, 2, 3}) {
    PlanConfig plan = preset(Preset::kCo2, 3);
    plan.outer.lr = 1;
    plan.outer.momentum = 0;
    plan.outer.nesterov = false;
    plan.overlap = overlap;
    TrainerOptions o;
    o.seed = 2;
    o.num_threads = 1;
    Trainer plain(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    Trainer co2(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    auto dp = DataParallel::attach(co2, plan, comm);
    for (int64_t s = 0; s < 10; ++s) {
      plain.step(test::dp_batch(s, 0, test::kShard));
      co2.step(test::dp_batch(s, 0, test::kShard));
    }
    EXPECT_LE(test::dp_max_diff(test::dp_flat(plain), test::dp_flat(co2)), 1e-6) << "overlap " << overlap;
    EXPECT_EQ(dp->stats().rounds, 3);
    co2.set_step_hook(nullptr);
  }
}

TEST(DataParallel, DdpAtWorldOneIsPlainTrainingWithSeveralBuckets) {
  auto comm = test::world_of_one().comm;
  TrainerOptions o;
  o.seed = 3;
  o.num_threads = 1;
  Trainer plain(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  Trainer ddp(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  PlanConfig plan = preset(Preset::kDdp, 1);
  plan.bucket_bytes = 128;
  auto dp = DataParallel::attach(ddp, plan, comm);
  for (int64_t s = 0; s < 4; ++s) {
    plain.step(test::dp_batch(s, 0, test::kShard));
    ddp.step(test::dp_batch(s, 0, test::kShard));
  }
  EXPECT_EQ(test::dp_max_diff(test::dp_flat(plain), test::dp_flat(ddp)), 0.0);
  ParallelStats st = dp->stats();
  EXPECT_EQ(st.buckets, 2);  // {fc2.bias, fc2.weight}, {fc1.bias, fc1.weight}: 128-byte buckets
  EXPECT_EQ(st.rounds, 4);
  EXPECT_GE(st.hidden_fraction, 0.0);
  EXPECT_LE(st.hidden_fraction, 1.0);
}

TEST(DataParallel, PausesBetweenStepsAreNotTrainingTime) {
  // co2 under overlap auto with 150 ms between steps (an evaluation, say): the step time it
  // measures, and its compute time, leave the pauses out (with them, each step would read
  // >= 0.15 s). The round shape it picks is not checked: at world 1 on a loaded machine the
  // all-reduce's completion can lag a step, which is a true travel time.
  auto comm = test::world_of_one().comm;
  TrainerOptions o;
  o.num_threads = 1;
  Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  PlanConfig plan = preset(Preset::kCo2, 4);
  plan.overlap_auto = true;
  auto dp = DataParallel::attach(t, plan, comm);
  for (int64_t s = 0; s < 12; ++s) {
    t.step(test::dp_batch(s, 0, test::kShard));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  const ParallelStats st = dp->stats();
  EXPECT_LT(st.compute_seconds, 0.5) << "12 steps of a tiny model, 1.8 s of pauses";
  EXPECT_GT(st.step_seconds, 0.0);
  EXPECT_LT(st.step_seconds, 0.05);
  t.set_step_hook(nullptr);
}

TEST(DataParallel, NoiseScalingSetsTheInnerOptimizer) {
  auto comm = test::world_of_one().comm;
  for (bool on : {false, true}) {
    TrainerOptions o;
    Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
    PlanConfig plan = preset(Preset::kCo2, 2);
    plan.inner_noise_scaling = on;
    auto dp = DataParallel::attach(t, plan, comm);
    EXPECT_EQ(t.optimizer().noise_ranks(), on ? comm->size() : 1);
    t.set_step_hook(nullptr);
  }
}

TEST(DataParallel, RejectsAPlanThatDoesNotFitAtAttach) {
  auto comm = test::world_of_one().comm;
  TrainerOptions o;
  Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  PlanConfig p;
  p.data_parallel = 2;
  EXPECT_THROW(DataParallel::attach(t, p, comm), Error);
  EXPECT_EQ(t.step_hook(), nullptr);
}

}  // namespace
}  // namespace cohort::parallel
