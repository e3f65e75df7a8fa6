// Harness cases for the softmax family (softmax, log_softmax, cross_entropy) with
// double-precision references, plus shape-rule and run-time label error tests.
#include <gtest/gtest.h>

#include <cmath>
#include <unordered_map>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/graph.h"
#include "kernels/cpu/softmax.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

Reference softmax_ref(bool log) {
  return [log](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
    const int64_t r = static_cast<int64_t>(s[0].size());
    const int64_t axis = a.has("axis") ? (a.get_int("axis") + r) % r : r - 1;
    int64_t outer = 1, n = s[0][static_cast<size_t>(axis)], inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= s[0][static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < r; ++d) inner *= s[0][static_cast<size_t>(d)];
    DVec y(in[0].size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return static_cast<size_t>((o * n + j) * inner + i); };
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, in[0][at(j)]);
        for (int64_t j = 0; j < n; ++j) sum += std::exp(in[0][at(j)] - m);
        for (int64_t j = 0; j < n; ++j)
          y[at(j)] = log ? in[0][at(j)] - m - std::log(sum) : std::exp(in[0][at(j)] - m) / sum;
      }
    return std::vector<DVec>{y};
  };
}

std::vector<DVec> cross_entropy_ref(const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
  const int64_t V = s[0].back(), rows = numel(s[0]) / V;
  const int64_t ignore = a.has("ignore_index") ? a.get_int("ignore_index") : -100;
  const bool mean = !a.has("reduction") || a.get_string("reduction") == "mean";
  double total = 0;
  int64_t count = 0;
  DVec lse(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = in[0].data() + r * V;
    double m = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, x[v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(x[v] - m);
    lse[static_cast<size_t>(r)] = m + std::log(sum);
    const int64_t label = static_cast<int64_t>(in[1][static_cast<size_t>(r)]);
    if (label == ignore) continue;
    total += lse[static_cast<size_t>(r)] - x[label];
    ++count;
  }
  if (mean) total = count > 0 ? total / static_cast<double>(count) : 0.0;
  return {{total}, lse};
}

}  // namespace

void add_softmax_cases(std::vector<OpCase>& out) {
  struct Variant { Shape shape; int64_t axis; bool set_axis; double low, high; };
  const std::vector<Variant> variants = {
      {{3, 5}, -1, false, -2, 2},     {{1, 17}, -1, true, -2, 2},   {{2, 3, 4}, 1, true, -2, 2},
      {{4, 6}, 0, true, -2, 2},       {{2, 3, 4}, -3, true, -2, 2}, {{7}, 0, true, -3, 3},
      // Logits near 100 overflow exp() in fp32 without the max subtraction.
      {{3, 6}, -1, false, 100, 104},
      // Large enough for the threaded paths.
      {{40, 500}, -1, false, -4, 4},  {{300, 60}, 0, true, -4, 4},
  };
  for (const char* op : {"softmax", "log_softmax"})
    for (const auto& v : variants) {
      OpCase c;
      c.op = op;
      c.label = str_cat(shape_str(v.shape), v.set_axis ? str_cat("_axis", v.axis) : "", "_", v.low);
      if (v.set_axis) c.attrs.set("axis", v.axis);
      c.inputs = {{v.shape, DType::kF32, v.low, v.high}};
      c.reference = softmax_ref(std::string(op) == "log_softmax");
      out.push_back(c);
    }

  struct Ce { Shape logits; int64_t ignore; std::string reduction; double high_label; };
  const std::vector<Ce> ces = {
      {{6, 5}, -100, "", 5},        {{2, 3, 7}, -100, "", 7},   {{4, 9}, -100, "sum", 9},
      {{8, 4}, 1, "", 4},           {{2, 5, 3}, 0, "sum", 3},   {{1, 1, 11}, -100, "mean", 11},
      {{3, 40, 200}, 7, "", 200},  // large enough for the threaded paths
  };
  for (const auto& ce : ces) {
    OpCase c;
    c.op = "cross_entropy";
    c.label = str_cat(shape_str(ce.logits), "_ignore", ce.ignore, "_", ce.reduction);
    if (ce.ignore != -100) c.attrs.set("ignore_index", ce.ignore);
    if (!ce.reduction.empty()) c.attrs.set("reduction", ce.reduction);
    Shape labels(ce.logits.begin(), ce.logits.end() - 1);
    c.inputs = {{ce.logits, DType::kF32, -3, 3}, {labels, DType::kI32, 0, ce.high_label}};
    c.reference = cross_entropy_ref;
    out.push_back(c);
  }
}

namespace {

TEST(SoftmaxShapeRules, AxisOutOfRange) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  Attrs a;
  a.set("axis", int64_t{2});
  try {
    g.add_op("softmax", "sm", {x}, a);
    FAIL() << "expected an attribute error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(), "softmax 'sm': attribute 'axis' is 2, expected in [-2, 2) for rank 2");
  }
}

TEST(SoftmaxShapeRules, CrossEntropyLabelsShape) {
  Graph g;
  ValueId x = g.add_input("logits", DType::kF32, {4, 10});
  ValueId y = g.add_input("labels", DType::kI32, {5});
  try {
    g.add_op("cross_entropy", "ce", {x, y}, Attrs());
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_STREQ(e.what(), "cross_entropy 'ce': input 1 has shape [5], expected [4] (the logits' shape without V)");
  }
}

TEST(SoftmaxShapeRules, CrossEntropyReduction) {
  Graph g;
  ValueId x = g.add_input("logits", DType::kF32, {4, 10});
  ValueId y = g.add_input("labels", DType::kI32, {4});
  Attrs a;
  a.set("reduction", std::string("max"));
  try {
    g.add_op("cross_entropy", "ce", {x, y}, a);
    FAIL() << "expected an attribute error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(), "cross_entropy 'ce': attribute 'reduction' is \"max\", expected \"mean\" or \"sum\"");
  }
}

TEST(SoftmaxRunTime, CrossEntropyLabelOutOfRange) {
  Graph g;
  ValueId x = g.add_input("logits", DType::kF32, {2, 3, 5});
  ValueId y = g.add_input("labels", DType::kI32, {2, 3});
  ValueId loss = g.add_op("cross_entropy", "ce", {x, y}, Attrs())[0];
  Executor ex(g, {loss});
  std::unordered_map<ValueId, Tensor> env;
  env[x] = Tensor::zeros({2, 3, 5}, DType::kF32);
  env[y] = Tensor::zeros({2, 3}, DType::kI32);
  env[y].data<int32_t>()[1] = -100;  // ignored: fine
  env[y].data<int32_t>()[4] = 5;
  try {
    ex.run(env, RunOptions());
    FAIL() << "expected a label error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "cross_entropy: label 5 at position [1, 1] is outside [0, 5) and is not ignore_index (-100)");
  }
}

TEST(SoftmaxRunTime, CrossEntropyAllIgnoredIsZero) {
  Graph g;
  ValueId x = g.add_input("logits", DType::kF32, {3, 4});
  ValueId y = g.add_input("labels", DType::kI32, {3});
  ValueId loss = g.add_op("cross_entropy", "ce", {x, y}, Attrs())[0];
  Executor ex(g, {loss});
  std::unordered_map<ValueId, Tensor> env;
  env[x] = Tensor::zeros({3, 4}, DType::kF32);
  env[y] = Tensor::zeros({3}, DType::kI32);
  for (int i = 0; i < 3; ++i) env[y].data<int32_t>()[i] = -100;
  ex.run(env, RunOptions());
  EXPECT_EQ(env.at(loss).data<float>()[0], 0.0f);
}

// The vectorised exp must keep softmax's edge cases: masked (-inf) logits give exactly 0, and a
// NaN of either sign poisons its row instead of vanishing.
TEST(SoftmaxKernels, MaskedAndNanLogits) {
  std::vector<float> x = {1.0f, -INFINITY, 2.0f, -1000.0f}, y(4);
  kernels::cpu::softmax_forward(x.data(), y.data(), 1, 4, 1, false);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_NEAR(y[0], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  for (float nan : {NAN, -NAN}) {
    std::vector<float> z = {1.0f, nan, 2.0f};
    std::vector<float> out(3);
    kernels::cpu::softmax_forward(z.data(), out.data(), 1, 3, 1, false);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[2]));
  }
}

}  // namespace
}  // namespace cohort::test
