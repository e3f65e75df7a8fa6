// Harness cases for dropout (evaluation mode and p = 0, where it is the identity) and a
// training-mode test of the mask: kept fraction, scaling, reproducibility per (seed, step), and
// that the gradient regenerates the forward mask.
#include <gtest/gtest.h>

#include <cmath>
#include <unordered_map>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

void add_dropout_cases(std::vector<OpCase>& out) {
  auto identity = [](const std::vector<DVec>& in, const std::vector<Shape>&, const Attrs&) {
    return std::vector<DVec>{in[0]};
  };
  for (Shape s : {Shape{5, 7}, Shape{3, 4, 5}, Shape{1}}) {
    OpCase c;
    c.op = "dropout";
    c.label = str_cat(shape_str(s), "_eval");
    c.inputs = {{s}};
    c.reference = identity;
    c.training = false;
    out.push_back(c);

    c.label = str_cat(shape_str(s), "_eval_p0.5_seed3");
    c.attrs.set("p", 0.5);
    c.attrs.set("seed", int64_t{3});
    out.push_back(c);

    c.label = str_cat(shape_str(s), "_train_p0");
    c.attrs = Attrs();
    c.attrs.set("p", 0.0);
    c.training = true;
    out.push_back(c);
  }
}

namespace {

struct DropoutRun {
  std::vector<float> y, dx;
};

// y = dropout(x), loss = sum(y): dx is then the mask scaled by 1 / (1 - p).
DropoutRun run_dropout(const std::vector<float>& x, double p, int64_t attr_seed, uint64_t run_seed, int64_t step,
                       bool training) {
  Graph g;
  const Shape shape = {static_cast<int64_t>(x.size())};
  ValueId in = g.add_input("x", DType::kF32, shape);
  Attrs a;
  a.set("p", p);
  a.set("seed", attr_seed);
  ValueId y = g.add_op("dropout", "drop", {in}, a)[0];
  ValueId loss = g.add_op("sum", "loss", {y}, Attrs())[0];
  g.set_loss(loss);
  ValueId dx = build_backward(g, loss, {in})[0];
  Executor ex(g, {y, dx});
  std::unordered_map<ValueId, Tensor> env;
  env[in] = Tensor::empty(shape, DType::kF32);
  std::copy(x.begin(), x.end(), env[in].data<float>());
  RunOptions ro;
  ro.seed = run_seed;
  ro.step = step;
  ro.training = training;
  ex.run(env, ro);
  DropoutRun r;
  r.y.assign(env.at(y).data<float>(), env.at(y).data<float>() + x.size());
  r.dx.assign(env.at(dx).data<float>(), env.at(dx).data<float>() + x.size());
  return r;
}

// A dropped NaN or Inf stays non-finite (x * 0 is NaN), as with PyTorch's x * mask: dropout must
// not hide a NaN that would otherwise reach the loss (issue #25).
TEST(DropoutTraining, DroppedNanAndInfStayNonFinite) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? INFINITY : std::nanf("");
  const DropoutRun r = run_dropout(x, 0.5, 7, 42, 5, true);
  size_t dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_FALSE(std::isfinite(r.y[i])) << "element " << i << " became " << r.y[i];
    dropped += r.dx[i] == 0.0f;
  }
  EXPECT_GT(dropped, 400u);  // the mask did drop about half of them
}

TEST(DropoutTraining, MaskStatisticsScalingAndReproducibility) {
  const size_t n = 200000;
  const double p = 0.3;
  const float keep = 1.0f - static_cast<float>(p);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 1.0f + static_cast<float>(i % 1000) / 1000.0f;  // never 0

  DropoutRun a = run_dropout(x, p, 7, 42, 5, true);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (a.y[i] != 0.0f) {
      ++kept;
      ASSERT_EQ(a.y[i], x[i] / keep) << "element " << i;
      ASSERT_EQ(a.dx[i], 1.0f / keep) << "element " << i;
    } else {
      ASSERT_EQ(a.dx[i], 0.0f) << "gradient mask differs from forward mask at element " << i;
    }
  }
  // Binomial std of the kept fraction is sqrt(p (1-p) / n) ~ 0.001; 0.01 is ~10 sigma.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);

  DropoutRun same = run_dropout(x, p, 7, 42, 5, true);
  EXPECT_EQ(same.y, a.y) << "same seed and step must give the same mask";

  size_t differ = 0;
  DropoutRun next = run_dropout(x, p, 7, 42, 6, true);
  for (size_t i = 0; i < n; ++i) differ += (next.y[i] == 0.0f) != (a.y[i] == 0.0f);
  // Independent masks disagree on 2 p (1 - p) = 42% of elements.
  EXPECT_NEAR(static_cast<double>(differ) / n, 2 * p * (1 - p), 0.01) << "a new step must give a new mask";

  DropoutRun other_seed = run_dropout(x, p, 8, 42, 5, true);
  EXPECT_NE(other_seed.y, a.y) << "a different attribute seed must give a different mask";

  DropoutRun eval = run_dropout(x, p, 7, 42, 5, false);
  EXPECT_EQ(eval.y, x);
  EXPECT_EQ(eval.dx, std::vector<float>(n, 1.0f));
}

TEST(DropoutShapeRules, ProbabilityRange) {
  for (double p : {1.0, -0.1, 1.5}) {
    Graph g;
    ValueId x = g.add_input("x", DType::kF32, {4});
    Attrs a;
    a.set("p", p);
    try {
      g.add_op("dropout", "drop", {x}, a);
      FAIL() << "expected an attribute error for p = " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_STREQ(e.what(), str_cat("dropout 'drop': attribute 'p' is ", p, ", expected in [0, 1)").c_str());
    }
  }
}

}  // namespace
}  // namespace cohort::test
