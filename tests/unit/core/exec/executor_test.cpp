// Executor tests: buffer reuse bounds peak activation memory, and bound inputs are checked
// (missing -> kInvalidArgument, wrong shape -> kShapeMismatch, both naming the value).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <unordered_map>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

using ::cohort::test::expect_error;

TEST(Executor, LongChainReusesBuffers) {
  constexpr int64_t kN = 1024;  // 4 KiB per activation
  constexpr int kLength = 60;
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {kN});
  ValueId v = x;
  const char* ops[] = {"relu", "tanh", "gelu", "scale"};
  for (int k = 0; k < kLength; ++k) {
    Attrs a;
    if (k % 4 == 3) a.set("factor", 1.5);
    v = g.add_op(ops[k % 4], "n" + std::to_string(k), {v}, a).at(0);
  }
  Executor ex(g, {v});
  Tensor in = Tensor::empty({kN}, DType::kF32);
  for (int64_t i = 0; i < kN; ++i) in.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  std::unordered_map<ValueId, Tensor> env = {{x, in}};
  ex.run(env, RunOptions());
  const size_t buffer = kN * sizeof(float);
  EXPECT_LE(ex.peak_activation_bytes(), 3 * buffer) << "the sum would be " << kLength * buffer;
  EXPECT_GE(ex.peak_activation_bytes(), buffer);
  // The result is right: follow one element through the chain.
  double y = in.data<float>()[5];
  for (int k = 0; k < kLength; ++k) {
    switch (k % 4) {
      case 0: y = y > 0 ? y : 0; break;
      case 1: y = std::tanh(y); break;
      case 2: y = 0.5 * y * (1 + std::tanh(0.7978845608028654 * (y + 0.044715 * y * y * y))); break;
      default: y *= 1.5;
    }
  }
  EXPECT_NEAR(env.at(v).data<float>()[5], y, 1e-3 * (1 + std::fabs(y)));
  // A second run reuses the pool and stays within the same bound.
  env = {{x, in}};
  ex.run(env, RunOptions());
  EXPECT_LE(ex.last_activation_bytes(), 3 * buffer);
}

TEST(Executor, TargetBuffersComeBackOnceTheCallerLetsGo) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {256});
  ValueId y = g.add_op("relu", "r", {x}, Attrs()).at(0);
  Executor ex(g, {y});
  Tensor in = Tensor::zeros({256}, DType::kF32);
  std::unordered_map<ValueId, Tensor> env = {{x, in}};
  ex.run(env, RunOptions());
  Tensor kept = env.at(y);
  const Storage* first = kept.storage().get();
  // Still held by the caller: the next run must not write into it.
  env = {{x, in}};
  ex.run(env, RunOptions());
  EXPECT_NE(env.at(y).storage().get(), first);
  // Released by the caller (env is replaced): the run after takes that buffer back instead of
  // allocating. A buffer the caller kept past a run is not tracked any longer.
  // (A weak reference: it neither keeps the buffer alive nor could match a new allocation that
  // happens to reuse the freed address.)
  std::weak_ptr<Storage> second = env.at(y).storage();
  env = {{x, in}};
  ex.run(env, RunOptions());
  EXPECT_EQ(env.at(y).storage(), second.lock());
}

TEST(Executor, MissingBoundInputIsNamed) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId w = g.add_parameter("weights", DType::kF32, {2, 3}, Initializer{});
  ValueId y = g.add_op("mul", "y", {x, w}, Attrs()).at(0);
  Executor ex(g, {y});
  std::unordered_map<ValueId, Tensor> env = {{x, Tensor::zeros({2, 3}, DType::kF32)}};
  expect_error([&] { ex.run(env, RunOptions()); }, Status::kInvalidArgument, "'weights'");
}

TEST(Executor, WrongShapeBoundIsRejected) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId y = g.add_op("relu", "y", {x}, Attrs()).at(0);
  Executor ex(g, {y});
  std::unordered_map<ValueId, Tensor> env = {{x, Tensor::zeros({3, 2}, DType::kF32)}};
  expect_error([&] { ex.run(env, RunOptions()); }, Status::kShapeMismatch, "'x' [2, 3] f32 has shape [3, 2]");
  env = {{x, Tensor::zeros({2, 3}, DType::kI32)}};
  expect_error([&] { ex.run(env, RunOptions()); }, Status::kShapeMismatch, "'x'");
}

}  // namespace
}  // namespace cohort
