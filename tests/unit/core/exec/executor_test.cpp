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

// The peak is counted from the buffers as they are held, with a known answer: y1 and y2 are both
// read by y3, so all three are alive when y3 is written (3 buffers); then y1 and y2 die, and the
// target (out, the caller's) does not count. A second target kept alive beside them (t1, read
// by nothing) does not count either. Bytes are exact: every buffer has the same size.
TEST(Executor, PeakActivationBytesCountTheLiveSetWithoutTargets) {
  constexpr int64_t kN = 256;
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {kN});
  ValueId y1 = g.add_op("relu", "y1", {x}, Attrs()).at(0);
  ValueId t1 = g.add_op("tanh", "t1", {y1}, Attrs()).at(0);
  ValueId y2 = g.add_op("relu", "y2", {y1}, Attrs()).at(0);
  ValueId y3 = g.add_op("add", "y3", {y1, y2}, Attrs()).at(0);
  ValueId out = g.add_op("relu", "out", {y3}, Attrs()).at(0);
  Executor ex(g, {out, t1});
  const size_t buffer = kN * sizeof(float);
  for (int run = 0; run < 2; ++run) {  // the second run takes its buffers from the pool
    std::unordered_map<ValueId, Tensor> env = {{x, Tensor::zeros({kN}, DType::kF32)}};
    ex.run(env, RunOptions());
    EXPECT_EQ(ex.last_activation_bytes(), 3 * buffer) << "run " << run;
    EXPECT_EQ(ex.peak_activation_bytes(), 3 * buffer) << "run " << run;
    EXPECT_TRUE(env.count(out) && env.count(t1) && !env.count(y3));
  }
  // Without the target t1 the same nodes run (out still needs y1): the peak is the same.
  Executor only_out(g, {out});
  std::unordered_map<ValueId, Tensor> env = {{x, Tensor::zeros({kN}, DType::kF32)}};
  only_out.run(env, RunOptions());
  EXPECT_EQ(only_out.last_activation_bytes(), 3 * buffer);
  // With y3 a target, only y1 and y2 count while it is written.
  Executor y3_kept(g, {y3});
  env = {{x, Tensor::zeros({kN}, DType::kF32)}};
  y3_kept.run(env, RunOptions());
  EXPECT_EQ(y3_kept.last_activation_bytes(), 2 * buffer);
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
