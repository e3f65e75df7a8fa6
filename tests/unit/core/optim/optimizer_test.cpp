// Optimizer tests: each rule against a double-precision reference written out here, against
// torch.optim trajectories (constants below), the schedule, clipping, bf16 master copies, state
// round trips and validation messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/optim/optimizer.h"
#include "kernels/cpu/optim.h"

namespace cohort::optim {
namespace {

const std::vector<double> kP0 = {0.5, -1.2, 2.0, 0.3, -0.7};
constexpr int kSteps = 5;

// The gradient of element i at step t; torch_reference.py uses the same formula.
double grad_at(int t, size_t i) {
  return std::sin(0.7 * static_cast<double>(i + 1) + 1.3 * t) * (1.0 + 0.1 * static_cast<double>(i));
}

Tensor make(const std::vector<double>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  c.copy_from(t);
  return c;
}

std::vector<double> grads_at(int t) {
  std::vector<double> g(kP0.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(t, i);
  return g;
}

// Double-precision references of the update rules, written from the PyTorch documentation.
struct Ref {
  OptimizerConfig c;
  std::vector<double> p, buf, m, v;
  int t = 0;
  int noise_ranks = 1;  // AdamW: > 1 estimates the second moment of the mean of this many ranks
  void step(std::vector<double> g, double lr) {
    ++t;
    if (buf.empty()) buf = m = v = std::vector<double>(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      if (c.kind == OptimizerKind::kSgd) {
        double d = g[i] + c.weight_decay * p[i];
        if (c.momentum > 0) {
          buf[i] = c.momentum * buf[i] + d;
          d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
        }
        p[i] -= lr * d;
      } else {
        p[i] *= 1.0 - lr * c.weight_decay;
        m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
        v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
        double mhat = m[i] / (1 - std::pow(c.beta1, t)), vhat = v[i] / (1 - std::pow(c.beta2, t));
        // The mean of N independent gradients keeps the squared mean and 1/N of the variance.
        if (noise_ranks > 1) vhat = mhat * mhat + std::max(vhat - mhat * mhat, 0.0) / noise_ranks;
        p[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
      }
    }
  }
};

// Runs kSteps of both the optimizer and the reference and compares after every step.
void check_against_reference(const OptimizerConfig& c, double tol, int noise_ranks = 1) {
  Optimizer opt(c);
  opt.set_noise_ranks(noise_ranks);
  Ref ref{c, kP0, {}, {}, {}, 0, noise_ranks};
  std::vector<Tensor> params = {make(kP0)};
  for (int t = 0; t < kSteps; ++t) {
    std::vector<Tensor> grads = {make(grads_at(t))};
    opt.step(params, grads);
    ref.step(grads_at(t), c.lr);
    for (size_t i = 0; i < kP0.size(); ++i)
      EXPECT_NEAR(params[0].data<float>()[i], ref.p[i], tol * (1 + std::fabs(ref.p[i]))) << "step " << t << " i " << i;
  }
  EXPECT_EQ(opt.step_count(), kSteps);
}

OptimizerConfig sgd(double lr, double momentum = 0, bool nesterov = false, double wd = 0) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.lr = lr;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

OptimizerConfig adamw(double lr, double wd) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdamW;
  c.lr = lr;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.eps = 1e-8;
  c.weight_decay = wd;
  return c;
}

TEST(Optimizer, SgdPlain) { check_against_reference(sgd(0.1), 1e-6); }
TEST(Optimizer, SgdMomentum) { check_against_reference(sgd(0.1, 0.9), 1e-6); }
TEST(Optimizer, SgdNesterov) { check_against_reference(sgd(0.1, 0.9, true), 1e-6); }
TEST(Optimizer, SgdWeightDecay) { check_against_reference(sgd(0.1, 0.5, false, 0.05), 1e-6); }
TEST(Optimizer, AdamWBiasCorrection) { check_against_reference(adamw(0.01, 0.0), 1e-6); }
TEST(Optimizer, AdamWDecoupledDecay) { check_against_reference(adamw(0.01, 0.1), 1e-6); }
TEST(Optimizer, AdamWNormalisedForTheMeanOfRanks) {
  check_against_reference(adamw(0.01, 0.1), 1e-6, 4);
  check_against_reference(adamw(0.01, 0.0), 1e-6, 2);
  // Same gradients, so the same moments: every step is at least as long as plain AdamW's (the
  // denominator only loses variance), and longer once the gradients have varied.
  OptimizerConfig c = adamw(0.01, 0.0);
  Optimizer plain(c), mean(c);
  mean.set_noise_ranks(4);
  std::vector<Tensor> a = {make(kP0)}, b = {make(kP0)};
  bool longer = false;
  for (int t = 0; t < kSteps; ++t) {
    std::vector<float> a0(a[0].data<float>(), a[0].data<float>() + kP0.size());
    std::vector<float> b0(b[0].data<float>(), b[0].data<float>() + kP0.size());
    std::vector<Tensor> g1 = {make(grads_at(t))}, g2 = {make(grads_at(t))};
    plain.step(a, g1);
    mean.step(b, g2);
    for (size_t i = 0; i < kP0.size(); ++i) {
      const float da = std::fabs(a[0].data<float>()[i] - a0[i]), db = std::fabs(b[0].data<float>()[i] - b0[i]);
      EXPECT_GE(db, da * (1 - 1e-5f)) << "step " << t << " i " << i;
      longer = longer || db > da * 1.01f;
    }
  }
  EXPECT_TRUE(longer);
  EXPECT_EQ(mean.noise_ranks(), 4);
  mean.set_noise_ranks(0);
  EXPECT_EQ(mean.noise_ranks(), 1);
}

TEST(Optimizer, AdamWDecayIsDecoupledFromTheGradient) {
  // With zero gradients Adam's step is 0/(0+eps) = 0: only p *= 1 - lr*wd remains.
  Optimizer opt(adamw(0.1, 0.5));
  std::vector<Tensor> params = {make({2.0, -4.0})};
  std::vector<Tensor> grads = {make({0.0, 0.0})};
  opt.step(params, grads);
  EXPECT_FLOAT_EQ(params[0].data<float>()[0], 2.0f * 0.95f);
  EXPECT_FLOAT_EQ(params[0].data<float>()[1], -4.0f * 0.95f);
}

// Produced by tests/unit/core/optim/torch_reference.py with Debian's python3-torch 1.13.0a0
// (/usr/bin/python3 torch_reference.py): float32 parameters kP0 after kSteps steps of grad_at().
constexpr float kTorchSgdMomentum[] = {1.876271218e-01f, -1.422691107e+00f, 1.942879558e+00f, 5.266465545e-01f, -2.749303281e-01f};
constexpr float kTorchSgdNesterov[] = {2.155051231e-01f, -1.407572508e+00f, 1.917864323e+00f, 4.834954143e-01f, -3.209866285e-01f};
constexpr float kTorchAdamW[] = {4.717490971e-01f, -1.213142514e+00f, 1.980901599e+00f, 3.016974926e-01f, -6.691691279e-01f};
constexpr float kTorchAdamWClip[] = {4.717074633e-01f, -1.212888479e+00f, 1.980094075e+00f, 3.009562194e-01f, -6.687297225e-01f};

void check_against_torch(OptimizerConfig c, const float* expected) {
  Optimizer opt(c);
  std::vector<Tensor> params = {make(kP0)};
  for (int t = 0; t < kSteps; ++t) {
    std::vector<Tensor> grads = {make(grads_at(t))};
    opt.step(params, grads);
  }
  for (size_t i = 0; i < kP0.size(); ++i) EXPECT_NEAR(params[0].data<float>()[i], expected[i], 2e-6) << i;
}

TEST(Optimizer, MatchesTorchSgdMomentum) { check_against_torch(sgd(0.1, 0.9, false, 0.01), kTorchSgdMomentum); }
TEST(Optimizer, MatchesTorchSgdNesterov) { check_against_torch(sgd(0.1, 0.9, true, 0.01), kTorchSgdNesterov); }
TEST(Optimizer, MatchesTorchAdamW) { check_against_torch(adamw(0.01, 0.1), kTorchAdamW); }
TEST(Optimizer, MatchesTorchAdamWWithClipGradNorm) {
  OptimizerConfig c = adamw(0.01, 0.1);
  c.clip_norm = 0.5;
  check_against_torch(c, kTorchAdamWClip);
}

// ZeRO (core/parallel/zero.cpp) steps disjoint shards with separate optimizers and the norm of
// the whole gradient: that must equal one optimizer over the whole, clipping included.
TEST(Optimizer, ShardsGivenTheGlobalNormStepLikeTheWhole) {
  for (OptimizerConfig c : {adamw(0.01, 0.1), sgd(0.1, 0.9, false, 0.05)}) {
    c.clip_norm = 0.5;
    Optimizer whole(c), first(c), second(c);
    std::vector<Tensor> p{make(kP0)};
    std::vector<Tensor> p1{make({kP0[0], kP0[1]})}, p2{make({kP0[2], kP0[3], kP0[4]})};
    for (int t = 0; t < kSteps; ++t) {
      std::vector<double> g = grads_at(t);
      std::vector<Tensor> gw{make(g)}, g1{make({g[0], g[1]})}, g2{make({g[2], g[3], g[4]})};
      whole.step(p, gw);
      first.step(p1, g1, whole.last_grad_norm());
      second.step(p2, g2, whole.last_grad_norm());
    }
    const float* w = p[0].data<float>();
    for (int i = 0; i < 2; ++i) EXPECT_FLOAT_EQ(p1[0].data<float>()[i], w[i]);
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(p2[0].data<float>()[i], w[2 + i]);
    EXPECT_EQ(first.state_bytes() + second.state_bytes(), whole.state_bytes());
  }
}

TEST(Optimizer, WarmupCosineSchedule) {
  OptimizerConfig c = sgd(1.0);
  c.schedule = ScheduleKind::kWarmupCosine;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr = 0.1;
  Optimizer opt(c);
  EXPECT_DOUBLE_EQ(opt.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(opt.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(opt.lr_at(10), 1.0);
  EXPECT_NEAR(opt.lr_at(60), 0.55, 1e-12);  // halfway down the cosine: (lr + min_lr) / 2
  EXPECT_NEAR(opt.lr_at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_DOUBLE_EQ(opt.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(opt.lr_at(1000), 0.1);
  OptimizerConfig k = sgd(0.3);
  EXPECT_DOUBLE_EQ(Optimizer(k).lr_at(12345), 0.3);
}

TEST(Optimizer, ScheduleDrivesTheUpdate) {
  OptimizerConfig c = sgd(1.0);
  c.schedule = ScheduleKind::kWarmupCosine;
  c.warmup_steps = 2;
  c.total_steps = 4;
  Optimizer opt(c);
  std::vector<Tensor> params = {make({0.0})};
  const double expected_lr[] = {0.0, 0.5, 1.0, 0.5};
  double p = 0.0;
  for (double lr : expected_lr) {
    std::vector<Tensor> grads = {make({1.0})};
    opt.step(params, grads);
    p -= lr;
    EXPECT_NEAR(params[0].data<float>()[0], p, 1e-6);
  }
}

TEST(Optimizer, ClipAboveThreshold) {
  OptimizerConfig c = sgd(1.0);
  c.clip_norm = 1.0;
  Optimizer opt(c);
  std::vector<Tensor> params = {make({0.0, 0.0}), make({0.0})};
  std::vector<Tensor> grads = {make({3.0, 0.0}), make({4.0})};  // global norm 5
  opt.step(params, grads);
  EXPECT_DOUBLE_EQ(opt.last_grad_norm(), 5.0);
  const double scale = 1.0 / (5.0 + 1e-6);
  EXPECT_NEAR(params[0].data<float>()[0], -3.0 * scale, 1e-6);
  EXPECT_NEAR(params[1].data<float>()[0], -4.0 * scale, 1e-6);
  EXPECT_FLOAT_EQ(grads[0].data<float>()[0], 3.0f);  // gradients are not modified
}

TEST(Optimizer, NoClipBelowThreshold) {
  OptimizerConfig c = sgd(1.0);
  c.clip_norm = 10.0;
  Optimizer opt(c);
  std::vector<Tensor> params = {make({0.0, 0.0})};
  std::vector<Tensor> grads = {make({3.0, 4.0})};
  opt.step(params, grads);
  EXPECT_DOUBLE_EQ(opt.last_grad_norm(), 5.0);
  EXPECT_FLOAT_EQ(params[0].data<float>()[0], -3.0f);
  EXPECT_FLOAT_EQ(params[0].data<float>()[1], -4.0f);
}

TEST(Optimizer, WithoutClippingTheNormIsStillMeasured) {
  // Without clipping the norm is still measured before the update (it decides whether the update
  // runs; on the OpenMP path for the large tensor): the norm must be the gradients' and the
  // updates those of a clipping optimizer whose threshold is never reached.
  for (const OptimizerConfig& base : {sgd(0.1, 0.9), adamw(0.01, 0.1)}) {
    OptimizerConfig measured = base, clipped = base;
    clipped.clip_norm = 1e30;
    Optimizer a(measured), b(clipped);
    const int64_t n = 300001;  // several blocks and a ragged tail
    std::vector<Tensor> pa = {Tensor::empty({n}, DType::kF32), make({0.5, -2.0, 7.0})}, pb, ga, gb;
    double expect = 0.0;
    for (int64_t i = 0; i < n; ++i) pa[0].data<float>()[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
    for (int t = 0; t < 3; ++t) {
      ga = {Tensor::empty({n}, DType::kF32), make({3.0 + t, -4.0, 0.25})};
      expect = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const float g = static_cast<float>(std::cos(0.003 * static_cast<double>(i) + t));
        ga[0].data<float>()[i] = g;
        expect += static_cast<double>(g) * g;
      }
      for (int i = 0; i < 3; ++i) expect += static_cast<double>(ga[1].data<float>()[i]) * ga[1].data<float>()[i];
      if (t == 0) pb = {copy_of(pa[0]), copy_of(pa[1])};
      gb = {copy_of(ga[0]), copy_of(ga[1])};
      a.step(pa, ga);
      b.step(pb, gb);
      EXPECT_NEAR(a.last_grad_norm(), std::sqrt(expect), 1e-9 * std::sqrt(expect));
      EXPECT_NEAR(a.last_grad_norm(), b.last_grad_norm(), 1e-12 * b.last_grad_norm());  // summed in another order
      for (size_t k = 0; k < pa.size(); ++k)
        for (int64_t i = 0; i < pa[k].numel(); ++i)
          ASSERT_EQ(pa[k].data<float>()[i], pb[k].data<float>()[i]) << "parameter " << k << " element " << i;
    }
  }
}

// Issue #25: a NaN or Inf in any gradient — here in the last element of the last tensor, after
// every other parameter would already have been updated by a loop that only noticed it on the
// way — skips the whole update: parameters, state and step count stay bit for bit as they were.
TEST(Optimizer, NonFiniteGradientsSkipTheWholeUpdate) {
  auto bits = [](const Tensor& t) {
    const auto* b = static_cast<const uint8_t*>(t.raw());
    return std::vector<uint8_t>(b, b + t.nbytes());
  };
  OptimizerConfig clipped_adamw = adamw(0.01, 0.1);
  clipped_adamw.clip_norm = 1.0;
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (const OptimizerConfig& c : {sgd(0.1, 0.9), adamw(0.01, 0.1), clipped_adamw})
      for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " kind " << static_cast<int>(c.kind) << " clip "
                                          << c.clip_norm << " bad " << bad);
        auto tensor = [&](const std::vector<double>& v) {
          Tensor f = make(v), t = Tensor::empty(f.shape(), dtype);
          t.copy_from(f);
          return t;
        };
        Optimizer opt(c);
        std::vector<Tensor> params = {tensor({0.5, -1.2, 2.0}), tensor({0.3, -0.7})};
        std::vector<Tensor> grads = {tensor({0.1, 0.2, -0.3}), tensor({0.4, -0.5})};
        ASSERT_TRUE(opt.step(params, grads));
        std::vector<std::vector<uint8_t>> before;
        for (const Tensor& p : params) before.push_back(bits(p));
        for (size_t i = 0; i < params.size(); ++i)
          for (const auto& [name, t] : opt.state(i)) before.push_back(bits(t));
        auto unchanged = [&] {
          size_t k = 0;
          for (const Tensor& p : params) EXPECT_EQ(bits(p), before[k++]) << "a parameter changed";
          for (size_t i = 0; i < params.size(); ++i)
            for (const auto& [name, t] : opt.state(i)) EXPECT_EQ(bits(t), before[k++]) << "state '" << name << "' changed";
          EXPECT_EQ(opt.step_count(), 1);
        };
        std::vector<Tensor> poisoned = {tensor({0.1, 0.2, -0.3}), tensor({0.4, bad})};
        EXPECT_FALSE(opt.step(params, poisoned));
        EXPECT_FALSE(std::isfinite(opt.last_grad_norm()));
        unchanged();
        // The same for a norm the caller gives (ZeRO: the norm over every rank's shard).
        EXPECT_FALSE(opt.step(params, grads, static_cast<double>(bad)));
        unchanged();
        EXPECT_TRUE(opt.step(params, grads));
        EXPECT_EQ(opt.step_count(), 2);
        EXPECT_NE(bits(params[0]), before[0]);
      }
}

TEST(Optimizer, Bf16ParametersKeepAnFp32Master) {
  // 1 - 1e-3 rounds back to 1 in bf16: without a master copy every update would be lost.
  Optimizer opt(sgd(1e-3));
  Tensor p = Tensor::empty({3}, DType::kBF16);
  Tensor g = Tensor::empty({3}, DType::kBF16);
  for (int i = 0; i < 3; ++i) {
    p.data<uint16_t>()[i] = f32_to_bf16(1.0f);
    g.data<uint16_t>()[i] = f32_to_bf16(1.0f);
  }
  std::vector<Tensor> params = {p}, grads = {g};
  for (int s = 0; s < 10; ++s) opt.step(params, grads);
  auto state = opt.state(0);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "master");
  EXPECT_NEAR(state[0].second.data<float>()[0], 0.99f, 1e-6);
  EXPECT_EQ(p.data<uint16_t>()[0], f32_to_bf16(state[0].second.data<float>()[0]));
  EXPECT_LT(bf16_to_f32(p.data<uint16_t>()[0]), 1.0f);
}

TEST(Optimizer, StateRoundTripContinuesTheTrajectory) {
  OptimizerConfig c = adamw(0.01, 0.1);
  Optimizer a(c);
  std::vector<Tensor> pa = {make(kP0)};
  for (int t = 0; t < kSteps; ++t) {
    std::vector<Tensor> g = {make(grads_at(t))};
    a.step(pa, g);
    if (t != 2) continue;
    // Checkpoint after step 2 into a fresh optimizer b, then both continue.
    Optimizer b(c);
    std::vector<Tensor> pb = {make(kP0)};
    pb[0].copy_from(pa[0]);
    b.init_state(pb);
    auto sa = a.state(0), sb = b.state(0);
    ASSERT_EQ(sa.size(), 2u);
    EXPECT_EQ(sa[0].first, "exp_avg");
    EXPECT_EQ(sa[1].first, "exp_avg_sq");
    for (size_t k = 0; k < sa.size(); ++k) sb[k].second.copy_from(sa[k].second);
    b.set_step_count(a.step_count());
    for (int u = t + 1; u < kSteps; ++u) {
      std::vector<Tensor> ga = {make(grads_at(u))}, gb = {make(grads_at(u))};
      a.step(pa, ga);
      b.step(pb, gb);
    }
    for (size_t i = 0; i < kP0.size(); ++i) EXPECT_EQ(pa[0].data<float>()[i], pb[0].data<float>()[i]);
    return;
  }
}

TEST(Optimizer, StateNamesAndErrors) {
  Optimizer opt(sgd(0.1, 0.9));
  try {
    opt.state(0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidState);
  }
  std::vector<Tensor> params = {make({1.0, 2.0})};
  opt.init_state(params);
  EXPECT_EQ(opt.state(0).at(0).first, "momentum");
  EXPECT_GT(opt.state_bytes(), 0u);
  try {
    opt.state(1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("index 1"), std::string::npos) << e.what();
  }
  std::vector<Tensor> bad = {make({1.0, 2.0, 3.0})};
  try {
    opt.step(params, bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("gradient 0"), std::string::npos) << e.what();
  }
  EXPECT_FLOAT_EQ(params[0].data<float>()[0], 1.0f);  // nothing was updated
}

void expect_invalid(const OptimizerConfig& c, const std::string& field) {
  try {
    validate(c);
    ADD_FAILURE() << "accepted a bad " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << field;
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Optimizer, ValidationNamesTheField) {
  EXPECT_NO_THROW(validate(sgd(0.1)));
  EXPECT_NO_THROW(validate(adamw(0.1, 0.01)));
  expect_invalid(sgd(-0.1), "lr");
  expect_invalid(sgd(NAN), "lr");
  expect_invalid(sgd(0.1, -0.5), "momentum");
  expect_invalid(sgd(0.1, 0.0, true), "nesterov");
  expect_invalid(sgd(0.1, 0.0, false, -1.0), "weight_decay");
  OptimizerConfig c = adamw(0.1, 0.0);
  c.beta1 = 1.0;
  expect_invalid(c, "beta1");
  c = adamw(0.1, 0.0);
  c.beta2 = -0.1;
  expect_invalid(c, "beta2");
  c = adamw(0.1, 0.0);
  c.eps = 0.0;
  expect_invalid(c, "eps");
  c = sgd(0.1);
  c.clip_norm = -1.0;
  expect_invalid(c, "clip_norm");
  c = sgd(0.1);
  c.schedule = ScheduleKind::kWarmupCosine;
  c.warmup_steps = 20;
  c.total_steps = 10;
  expect_invalid(c, "warmup_steps");
  c.warmup_steps = 0;
  c.total_steps = 0;
  expect_invalid(c, "total_steps");
  c.total_steps = 10;
  c.min_lr = 1.0;
  expect_invalid(c, "min_lr");
  EXPECT_THROW(Optimizer(sgd(-1.0)), Error);
}

TEST(OptimKernels, ParallelLoopsMatchTheFormula) {
  // Large enough to take the OpenMP path.
  const int64_t n = 200000;
  std::vector<float> p(n), g(n), buf(n, 0.5f), p2, buf2;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i)));
    g[i] = static_cast<float>(std::cos(0.003 * static_cast<double>(i)));
  }
  double expect = 0;
  for (float x : g) expect += static_cast<double>(x) * x;
  EXPECT_NEAR(kernels::cpu::sum_of_squares(g.data(), n), expect, 1e-9 * expect);
  p2 = p;
  buf2 = buf;
  kernels::cpu::SgdArgs a;
  a.lr = 0.1f;
  a.momentum = 0.9f;
  a.weight_decay = 0.01f;
  a.grad_scale = 0.5f;
  kernels::cpu::sgd_update(p.data(), g.data(), buf.data(), nullptr, n, a);
  for (int64_t i = 0; i < n; i += 997) {
    float d = g[i] * 0.5f + 0.01f * p2[i];
    float b = 0.9f * buf2[i] + d;
    EXPECT_NEAR(buf[i], b, 1e-6);
    EXPECT_NEAR(p[i], p2[i] - 0.1f * b, 1e-6);
  }
  // AdamW with a bf16 copy written in the same pass.
  std::vector<float> m(n, 0.1f), v(n, 0.2f);
  std::vector<uint16_t> p16(n);
  p2 = p;
  kernels::cpu::AdamWArgs w;
  w.lr = 0.01f;
  w.weight_decay = 0.1f;
  w.step_size = 0.01f / 0.1f;
  w.bias_correction2_sqrt = std::sqrt(1.0f - 0.999f);
  kernels::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), p16.data(), n, w);
  for (int64_t i = 0; i < n; i += 997) {
    double mi = 0.9 * 0.1 + 0.1 * g[i], vi = 0.999 * 0.2 + 0.001 * double(g[i]) * g[i];
    double want = p2[i] * (1 - 0.001) - 0.1 * mi / (std::sqrt(vi) / std::sqrt(0.001) + 1e-8);
    EXPECT_NEAR(m[i], mi, 1e-6);
    EXPECT_NEAR(v[i], vi, 1e-6);
    EXPECT_NEAR(p[i], want, 1e-5);
    EXPECT_EQ(p16[i], f32_to_bf16(p[i]));
  }
  // Normalised for the mean of 4 ranks: the pass with a bf16 copy follows the same rule.
  w.noise_ranks = 4;
  w.bias_correction1 = 0.1f;
  std::vector<float> pa = p2, pb = p2, ma(n, 0.1f), mb(n, 0.1f), va(n, 0.2f), vb(n, 0.2f);
  kernels::cpu::adamw_update(pa.data(), g.data(), ma.data(), va.data(), nullptr, n, w);
  kernels::cpu::adamw_update(pb.data(), g.data(), mb.data(), vb.data(), p16.data(), n, w);
  for (int64_t i = 0; i < n; i += 997) {
    double mh = (0.9 * 0.1 + 0.1 * g[i]) / 0.1, vh = (0.999 * 0.2 + 0.001 * double(g[i]) * g[i]) / 0.001;
    double want = p2[i] * (1 - 0.001) - 0.01 * mh / (std::sqrt(mh * mh + std::max(vh - mh * mh, 0.0) / 4) + 1e-8);
    EXPECT_NEAR(pa[i], want, 1e-5);
    EXPECT_NEAR(pb[i], pa[i], 1e-6);
    EXPECT_EQ(p16[i], f32_to_bf16(pb[i]));
  }
}

}  // namespace
}  // namespace cohort::optim
