// Harness cases for embedding (row gather; repeated ids exercise the scatter-add gradient), plus
// shape-rule and run-time id error tests.
#include <gtest/gtest.h>

#include <omp.h>

#include <random>
#include <unordered_map>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/graph.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/threads.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

void add_embedding_cases(std::vector<OpCase>& out) {
  struct Variant { int64_t V, C; Shape ids; };
  // Few rows against many ids forces repeats, i.e. real accumulation in the gradient.
  for (const auto& v : std::vector<Variant>{{10, 4, {6}}, {5, 3, {2, 3}}, {3, 1, {7}}, {7, 9, {2, 2, 2}},
                                                    {50, 400, {64}}}) {  // threaded paths
    OpCase c;
    c.op = "embedding";
    c.label = str_cat("V", v.V, "_C", v.C, "_ids", shape_str(v.ids));
    c.inputs = {{{v.V, v.C}}, {v.ids, DType::kI32, 0, static_cast<double>(v.V)}};
    c.reference = [](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs&) {
      const int64_t C = s[0][1];
      DVec y;
      for (double id : in[1])
        for (int64_t k = 0; k < C; ++k) y.push_back(in[0][static_cast<size_t>(static_cast<int64_t>(id) * C + k)]);
      return std::vector<DVec>{y};
    };
    c.max_grad_elements = 64;
    out.push_back(c);
  }
}

namespace {

TEST(EmbeddingShapeRules, IdsMustBeI32) {
  Graph g;
  ValueId w = g.add_input("w", DType::kF32, {10, 4});
  ValueId ids = g.add_input("ids", DType::kF32, {3});
  try {
    g.add_op("embedding", "emb", {w, ids}, Attrs());
    FAIL() << "expected a dtype error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_STREQ(e.what(), "embedding 'emb': input 1 has dtype f32, expected i32");
  }
}

TEST(EmbeddingRunTime, IdOutOfRange) {
  Graph g;
  ValueId w = g.add_input("w", DType::kF32, {10, 4});
  ValueId ids = g.add_input("ids", DType::kI32, {2, 2});
  ValueId y = g.add_op("embedding", "emb", {w, ids}, Attrs())[0];
  Executor ex(g, {y});
  std::unordered_map<ValueId, Tensor> env;
  env[w] = Tensor::zeros({10, 4}, DType::kF32);
  env[ids] = Tensor::zeros({2, 2}, DType::kI32);
  env[ids].data<int32_t>()[2] = 10;
  try {
    ex.run(env, RunOptions());
    FAIL() << "expected an id error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(), "embedding: id 10 at position [1, 0] is outside [0, 10)");
  }
}

// The scatter-add must not depend on thread timing (no atomics): same bits for any thread count.
TEST(EmbeddingKernels, GradientIsBitIdenticalForAnyThreadCount) {
  const int64_t V = 97, C = 300, n = 5000;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V) - 1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<int32_t> ids(n);
  std::vector<float> dy(n * C);
  for (auto& i : ids) i = id(rng);
  for (auto& e : dy) e = d(rng);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    kernels::cpu::set_num_threads(threads);
    std::vector<float> dw(V * C);
    kernels::cpu::embedding_backward(ids.data(), dy.data(), dw.data(), n, V, C);
    results.push_back(dw);
  }
  kernels::cpu::set_num_threads(before);
  EXPECT_TRUE(results[0] == results[1]);
}

}  // namespace
}  // namespace cohort::test
