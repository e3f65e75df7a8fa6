// Graph construction errors (names, operators, inputs, attributes, loss) and autodiff: gradient
// accumulation, unused parameters, and gradients computed through the Executor against ones
// derived by hand.
#include <gtest/gtest.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

using ::cohort::test::expect_error;

Attrs factor(AttrValue v) {
  Attrs a;
  a.set("factor", std::move(v));
  return a;
}

Tensor make(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

TEST(Graph, DuplicateNames) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {3});
  expect_error([&] { g.add_input("x", DType::kF32, {3}); }, Status::kInvalidArgument, "'x' is already used");
  expect_error([&] { g.add_parameter("x", DType::kF32, {3}, Initializer{}); }, Status::kInvalidArgument,
               "'x' is already used");
  g.add_op("relu", "r", {x}, Attrs());
  expect_error([&] { g.add_op("tanh", "r", {x}, Attrs()); }, Status::kInvalidArgument,
               "tanh 'r': another node already has this name");
  EXPECT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.values().size(), 2u);
}

TEST(Graph, UnknownOpAndWrongInputs) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId y = g.add_input("y", DType::kF32, {4});
  expect_error([&] { g.add_op("no_such_op", "n", {x}, Attrs()); }, Status::kNotFound, "unknown operator 'no_such_op'");
  expect_error([&] { g.add_op("relu", "r", {x, x}, Attrs()); }, Status::kInvalidArgument, "relu 'r': takes 1 inputs, got 2");
  expect_error([&] { g.add_op("add", "a", {x}, Attrs()); }, Status::kInvalidArgument, "add 'a': takes 2 inputs, got 1");
  expect_error([&] { g.add_op("relu", "r", {42}, Attrs()); }, Status::kInvalidArgument, "refers to value 42");
  expect_error([&] { g.add_op("add", "a", {x, y}, Attrs()); }, Status::kShapeMismatch, "add 'a': ");
  EXPECT_TRUE(g.nodes().empty());
}

TEST(Graph, Attributes) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {3});
  Attrs extra;
  extra.set("alpha", 0.1);
  expect_error([&] { g.add_op("relu", "r", {x}, extra); }, Status::kInvalidArgument, "relu 'r': unknown attribute 'alpha'");
  expect_error([&] { g.add_op("scale", "s", {x}, factor(std::string("two"))); }, Status::kInvalidArgument,
               "attribute 'factor' is string, expected float");
  expect_error([&] { g.add_op("scale", "s", {x}, Attrs()); }, Status::kInvalidArgument,
               "missing required attribute 'factor'");
  // An int is accepted where a float is expected; the getter converts it.
  ValueId s = g.add_op("scale", "s", {x}, factor(int64_t{3})).at(0);
  EXPECT_EQ(g.node(g.value(s).producer).attrs.get_float("factor"), 3.0);
  expect_error([&] { g.node(0).attrs.get_string("factor"); }, Status::kInvalidArgument,
               "attribute 'factor' is int, expected string");
}

TEST(Graph, BadLoss) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId i = g.add_input("i", DType::kI32, {1});
  expect_error([&] { g.set_loss(x); }, Status::kShapeMismatch, "loss 'x' [2, 3] f32 must be a float scalar");
  expect_error([&] { g.set_loss(i); }, Status::kShapeMismatch, "must be a float scalar");
  expect_error([&] { g.set_loss(17); }, Status::kInvalidArgument, "loss refers to value 17");
  EXPECT_EQ(g.loss(), -1);
  Graph empty;
  expect_error([&] { build_backward(empty, empty.loss(), {}); }, Status::kInvalidState, "no loss");
}

TEST(Autodiff, ValueUsedTwiceAccumulates) {
  // loss = sum(w * w)  ->  dloss/dw = 2w, from two contributions summed by an "add" node.
  Graph g;
  ValueId w = g.add_parameter("w", DType::kF32, {3}, Initializer{});
  ValueId sq = g.add_op("mul", "sq", {w, w}, Attrs()).at(0);
  ValueId loss = g.add_op("sum", "loss", {sq}, Attrs()).at(0);
  g.set_loss(loss);
  ValueId gw = build_backward(g, loss, {w}).at(0);
  ASSERT_GE(gw, 0);
  const Node& acc = g.node(g.value(gw).producer);
  EXPECT_EQ(acc.op->name, "add");
  EXPECT_TRUE(acc.backward);
  Executor ex(g, {loss, gw});
  std::unordered_map<ValueId, Tensor> env = {{w, make({1.0f, -2.0f, 0.5f})}};
  ex.run(env, RunOptions());
  EXPECT_FLOAT_EQ(env.at(loss).data<float>()[0], 1 + 4 + 0.25f);
  EXPECT_FLOAT_EQ(env.at(gw).data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(env.at(gw).data<float>()[1], -4.0f);
  EXPECT_FLOAT_EQ(env.at(gw).data<float>()[2], 1.0f);
}

TEST(Autodiff, UnusedParameterHasNoGradient) {
  Graph g;
  ValueId w = g.add_parameter("w", DType::kF32, {3}, Initializer{});
  ValueId unused = g.add_parameter("unused", DType::kF32, {3}, Initializer{});
  ValueId side = g.add_op("relu", "side", {unused}, Attrs()).at(0);  // not on the loss path
  (void)side;
  ValueId loss = g.add_op("mean", "loss", {w}, Attrs()).at(0);
  std::vector<ValueId> grads = build_backward(g, loss, {w, unused});
  EXPECT_GE(grads[0], 0);
  EXPECT_EQ(grads[1], -1);
}

TEST(Autodiff, ReluMulChainMatchesHandGradients) {
  // loss = sum(scale(relu(x * w), 3)): dloss/dw = 3 x [xw > 0], dloss/dx = 3 w [xw > 0].
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {4});
  ValueId w = g.add_parameter("w", DType::kF32, {4}, Initializer{});
  ValueId h = g.add_op("mul", "h", {x, w}, Attrs()).at(0);
  ValueId r = g.add_op("relu", "r", {h}, Attrs()).at(0);
  ValueId s = g.add_op("scale", "s", {r}, factor(3.0)).at(0);
  ValueId loss = g.add_op("sum", "loss", {s}, Attrs()).at(0);
  g.set_loss(loss);
  std::vector<ValueId> grads = build_backward(g, loss, {w, x});
  const std::vector<float> xv = {1.0f, -2.0f, 3.0f, 0.5f}, wv = {2.0f, 1.0f, -1.0f, 4.0f};
  Executor ex(g, {loss, grads[0], grads[1]});
  std::unordered_map<ValueId, Tensor> env = {{x, make(xv)}, {w, make(wv)}};
  ex.run(env, RunOptions());
  float want_loss = 0;
  for (size_t i = 0; i < 4; ++i) {
    const bool on = xv[i] * wv[i] > 0;
    want_loss += on ? 3 * xv[i] * wv[i] : 0;
    EXPECT_FLOAT_EQ(env.at(grads[0]).data<float>()[i], on ? 3 * xv[i] : 0.0f) << i;
    EXPECT_FLOAT_EQ(env.at(grads[1]).data<float>()[i], on ? 3 * wv[i] : 0.0f) << i;
  }
  EXPECT_FLOAT_EQ(env.at(loss).data<float>()[0], want_loss);
}

}  // namespace
}  // namespace cohort
