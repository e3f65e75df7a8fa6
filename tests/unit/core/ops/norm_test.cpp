// Harness cases for the norm family (layernorm, rmsnorm, groupnorm) with double-precision
// references, plus shape-rule error tests.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <random>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/threads.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

// Normalises each of `blocks` contiguous blocks of `n` elements: returns xhat, mean, rstd.
void normalise_blocks(const DVec& x, int64_t blocks, int64_t n, double eps, bool centre, DVec& xhat, DVec& mean,
                      DVec& rstd) {
  xhat.assign(x.size(), 0.0);
  mean.assign(static_cast<size_t>(blocks), 0.0);
  rstd.assign(static_cast<size_t>(blocks), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[static_cast<size_t>(b * n + i)];
    m = centre ? m / static_cast<double>(n) : 0.0;
    for (int64_t i = 0; i < n; ++i) v += std::pow(x[static_cast<size_t>(b * n + i)] - m, 2);
    const double r = 1.0 / std::sqrt(v / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      xhat[static_cast<size_t>(b * n + i)] = (x[static_cast<size_t>(b * n + i)] - m) * r;
    mean[static_cast<size_t>(b)] = m;
    rstd[static_cast<size_t>(b)] = r;
  }
}

// layernorm (centre) and rmsnorm (no centre, no beta) over the last dim.
Reference last_dim_ref(bool centre) {
  return [centre](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
    const int64_t C = s[0].back(), rows = numel(s[0]) / C;
    DVec xhat, mean, rstd;
    normalise_blocks(in[0], rows, C, a.get_float("eps"), centre, xhat, mean, rstd);
    DVec y(xhat.size());
    for (size_t i = 0; i < y.size(); ++i) {
      const size_t c = i % static_cast<size_t>(C);
      y[i] = xhat[i] * in[1][c] + (centre ? in[2][c] : 0.0);
    }
    if (!centre) return std::vector<DVec>{y, rstd};
    return std::vector<DVec>{y, mean, rstd};
  };
}

std::vector<DVec> groupnorm_ref(const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
  const int64_t N = s[0][0], C = s[0][1], HW = s[0][2] * s[0][3], G = a.get_int("groups");
  DVec xhat, mean, rstd;
  normalise_blocks(in[0], N * G, C / G * HW, a.get_float("eps"), true, xhat, mean, rstd);
  DVec y(xhat.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t c = (i / static_cast<size_t>(HW)) % static_cast<size_t>(C);
    y[i] = xhat[i] * in[1][c] + in[2][c];
  }
  return {y, mean, rstd};
}

}  // namespace

void add_norm_cases(std::vector<OpCase>& out) {
  // gamma away from 0 so every path of the gradient is exercised with weight.
  for (auto [shape, eps] : std::vector<std::pair<Shape, double>>{
           {{4, 7}, 1e-5}, {{2, 3, 16}, 1e-5}, {{1, 33}, 1e-3}, {{5}, 1e-5},
           {{64, 300}, 1e-5}}) {  // the last one is large enough for the threaded paths
    const int64_t C = shape.back();
    OpCase ln;
    ln.op = "layernorm";
    ln.label = str_cat(shape_str(shape), "_eps", eps);
    ln.attrs.set("eps", eps);
    ln.inputs = {{shape}, {{C}, DType::kF32, 0.5, 1.5}, {{C}}};
    ln.reference = last_dim_ref(true);
    out.push_back(ln);

    OpCase rms = ln;
    rms.op = "rmsnorm";
    rms.attrs.set("eps", eps == 1e-5 ? 1e-6 : 0.1);
    rms.label = str_cat(shape_str(shape), "_eps", rms.attrs.get_float("eps"));
    rms.inputs = {{shape}, {{C}, DType::kF32, 0.5, 1.5}};
    rms.reference = last_dim_ref(false);
    out.push_back(rms);
  }
  OpCase rms_default;
  rms_default.op = "rmsnorm";
  rms_default.label = "3x9_default_eps";
  rms_default.inputs = {{{3, 9}}, {{9}, DType::kF32, 0.5, 1.5}};
  rms_default.reference = [](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
    Attrs with_default = a;
    with_default.set("eps", 1e-6);
    return last_dim_ref(false)(in, s, with_default);
  };
  out.push_back(rms_default);

  for (auto [shape, groups, eps] : std::vector<std::tuple<Shape, int64_t, double>>{
           {{2, 6, 3, 3}, 3, 1e-5}, {{1, 4, 5, 2}, 1, 1e-5}, {{3, 8, 2, 2}, 4, 1e-5}, {{2, 5, 3, 1}, 5, 1e-2},
           {{4, 32, 16, 16}, 8, 1e-5}}) {  // the last one is large enough for the threaded paths
    OpCase gn;
    gn.op = "groupnorm";
    gn.label = str_cat(shape_str(shape), "_g", groups, "_eps", eps);
    gn.attrs.set("groups", groups);
    gn.attrs.set("eps", eps);
    gn.inputs = {{shape}, {{shape[1]}, DType::kF32, 0.5, 1.5}, {{shape[1]}}};
    gn.reference = groupnorm_ref;
    out.push_back(gn);
  }
}

namespace {

TEST(NormShapeRules, LayernormGammaMustMatchLastDim) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {4, 7});
  ValueId gamma = g.add_input("gamma", DType::kF32, {5});
  ValueId beta = g.add_input("beta", DType::kF32, {7});
  try {
    g.add_op("layernorm", "ln", {x, gamma, beta}, Attrs());
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_STREQ(e.what(), "layernorm 'ln': input 1 has shape [5], expected [7]");
  }
}

TEST(NormShapeRules, GroupnormGroupsMustDivideChannels) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 6, 3, 3});
  ValueId gamma = g.add_input("gamma", DType::kF32, {6});
  ValueId beta = g.add_input("beta", DType::kF32, {6});
  Attrs a;
  a.set("groups", int64_t{4});
  try {
    g.add_op("groupnorm", "gn", {x, gamma, beta}, a);
    FAIL() << "expected an attribute error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "groupnorm 'gn': attribute 'groups' is 4, expected a positive divisor of the 6 channels of "
                 "input 0 [2, 6, 3, 3]");
  }
}

TEST(NormShapeRules, GroupnormNeedsRank4) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 6, 9});
  ValueId gamma = g.add_input("gamma", DType::kF32, {6});
  Attrs a;
  a.set("groups", int64_t{2});
  try {
    g.add_op("groupnorm", "gn", {x, gamma, gamma}, a);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_STREQ(e.what(), "groupnorm 'gn': input 0 has shape [2, 6, 9], expected rank 4");
  }
}

// A pre-norm residual block, y = x + norm(x): the norm is x's earliest reader, so autodiff offers
// it the gradient already summed from the residual and its *_grad node adds it to dx. The same
// gradient through the plain path (the residual read first, so nothing is summed yet when the norm
// is differentiated, and an add node sums the two) must agree, and the fused graph has no add.
TEST(NormBackward, AddsTheResidualGradientItself) {
  for (const char* op : {"layernorm", "rmsnorm"}) {
    auto run = [op](bool residual_first, int* adds, int* fused) {
      Graph g;
      const Shape shape = {3, 5, 8};
      ValueId x = g.add_input("x", DType::kF32, shape), gamma = g.add_input("gamma", DType::kF32, {8});
      ValueId w = g.add_input("w", DType::kF32, shape);
      Attrs two;
      two.set("factor", 2.0);  // the residual branch, scaled so both paths differ visibly
      ValueId skip = residual_first ? g.add_op("scale", "skip", {x}, two).at(0) : -1;
      std::vector<ValueId> in = {x, gamma};
      ValueId beta = -1;
      if (std::string(op) == "layernorm") {
        beta = g.add_input("beta", DType::kF32, {8});
        in.push_back(beta);
      }
      ValueId n = g.add_op(op, "norm", in, Attrs()).at(0);
      if (!residual_first) skip = g.add_op("scale", "skip", {x}, two).at(0);
      ValueId y = g.add_op("add", "y", {n, skip}, Attrs()).at(0);
      ValueId l = g.add_op("sum", "l", {g.add_op("mul", "wy", {y, w}, Attrs()).at(0)}, Attrs()).at(0);
      g.set_loss(l);
      std::vector<ValueId> grads = build_backward(g, l, {x, gamma});
      *adds = 0;
      *fused = 0;
      for (const Node& node : g.nodes()) {
        if (node.backward && node.op->name == "add") ++*adds;
        if (node.op->name == std::string(op) + "_grad" && node.inputs.size() == node.op->inputs.size()) ++*fused;
      }
      std::unordered_map<ValueId, Tensor> env;
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> u(-1, 1);
      for (ValueId v : {x, gamma, w, beta}) {
        if (v < 0) continue;
        Tensor t = Tensor::empty(g.value(v).type.shape, DType::kF32);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
        env[v] = t;
      }
      Executor ex(g, grads);
      ex.run(env, RunOptions());
      return std::vector<Tensor>{env.at(grads[0]), env.at(grads[1])};
    };
    int adds_fused = 0, fused = 0, adds_plain = 0, fused_plain = 0;
    std::vector<Tensor> a = run(false, &adds_fused, &fused), b = run(true, &adds_plain, &fused_plain);
    EXPECT_EQ(fused, 1) << op;
    EXPECT_EQ(adds_fused, 0) << op << ": x's two gradients were summed by a separate add";
    EXPECT_EQ(fused_plain, 0) << op;
    EXPECT_GE(adds_plain, 1) << op;
    for (size_t k = 0; k < a.size(); ++k)
      for (int64_t i = 0; i < a[k].numel(); ++i)
        ASSERT_NEAR(a[k].data<float>()[i], b[k].data<float>()[i], 1e-5) << op << " gradient " << k << " element " << i;
  }
}

// dgamma/dbeta are reductions over rows: their order must not depend on the thread count.
TEST(NormKernels, LayernormBackwardIsBitIdenticalForAnyThreadCount) {
  const int64_t rows = 333, C = 257;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(rows * C), dy(rows * C), gamma(C), beta(C), y(rows * C), mean(rows), rstd(rows);
  for (auto* v : {&x, &dy, &gamma, &beta})
    for (float& e : *v) e = d(rng);
  kernels::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                                  C, 1e-5f);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    kernels::cpu::set_num_threads(threads);
    std::vector<float> dx(rows * C), dg(C), db(C);
    kernels::cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                                     dg.data(), db.data(), rows, C);
    dx.insert(dx.end(), dg.begin(), dg.end());
    dx.insert(dx.end(), db.begin(), db.end());
    results.push_back(dx);
  }
  kernels::cpu::set_num_threads(before);
  EXPECT_TRUE(results[0] == results[1]);
}

}  // namespace
}  // namespace cohort::test
