// Activation checkpointing in autodiff (build_backward's recompute, blocks_by_name): a small GPT
// differentiated with its blocks recomputed gives the same gradients, bit for bit, as without —
// dropout on, so its masks must be drawn again alike — while the executor's measured peak of
// activation bytes drops; the blocks are found by the builder's names; bad blocks are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/exec/trainer.h"
#include "core/graph/autodiff.h"
#include "core/graph/initializer.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

using ::cohort::test::expect_error;

models::GptConfig small_gpt() {
  models::GptConfig c;
  c.batch = 2;
  c.context = 32;
  c.vocab = 64;
  c.layers = 4;
  c.width = 64;
  c.heads = 4;
  c.dropout = 0.1;
  return c;
}

struct Differentiated {
  Graph graph;
  std::vector<ValueId> params, grads;
  std::vector<Tensor> grad_values;
  size_t peak = 0;
};

// One training-mode forward + backward of `c` with the given blocks recomputed (or none).
Differentiated run_step(const models::GptConfig& c, bool checkpointing) {
  Differentiated d;
  d.graph = models::build_gpt(c);
  d.params = d.graph.parameters();
  const std::vector<std::vector<NodeId>> blocks = checkpointing ? blocks_by_name(d.graph) : std::vector<std::vector<NodeId>>{};
  d.grads = build_backward(d.graph, d.graph.loss(), d.params, blocks);
  std::vector<ValueId> targets = {d.graph.loss()};
  for (ValueId g : d.grads) targets.push_back(g);
  Executor ex(d.graph, targets);
  std::unordered_map<ValueId, Tensor> env;
  for (ValueId p : d.params) {
    const Value& v = d.graph.value(p);
    Tensor t = Tensor::empty(v.type.shape, v.type.dtype);
    initialize_parameter(t, v.init, 7, v.name);
    env[p] = t;
  }
  for (const char* name : {"tokens", "targets"}) {
    Tensor t = Tensor::empty({c.batch, c.context}, DType::kI32);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<int32_t>()[i] = static_cast<int32_t>((i * (name[0] == 't' && name[1] == 'o' ? 7 : 3) + 1) % c.vocab);
    env[d.graph.find(name)] = t;
  }
  RunOptions o;
  o.seed = 11;
  o.step = 3;
  ex.run(env, o);
  for (ValueId g : d.grads) d.grad_values.push_back(env.at(g));
  d.peak = ex.last_activation_bytes();
  return d;
}

TEST(ActivationCheckpointing, GptGradientsAreBitIdenticalAndPeakActivationsDrop) {
  const models::GptConfig c = small_gpt();
  const Differentiated off = run_step(c, false);
  const Differentiated on = run_step(c, true);
  ASSERT_EQ(off.grads.size(), on.grads.size());
  for (size_t i = 0; i < off.grads.size(); ++i) {
    const Tensor& a = off.grad_values[i];
    const Tensor& b = on.grad_values[i];
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0)
        << "gradient of " << off.graph.value(off.params[i]).name << " differs";
  }
  // B T C = 2 x 32 x 64 floats = 16 KiB per residual-stream tensor. Without checkpointing the
  // peak (the start of backward) holds every block's activations: about 14 B T C each (ln_1, qkv
  // 3, attention and its statistics, c_proj, dropout, residual, ln_2, c_fc 4, gelu_linear's
  // saved input, c_proj, dropout, residual) times 4 layers. With it, forward keeps each block's
  // input (1 B T C) and backward holds one block's again: about (4 + 14) / 56 of that, plus what
  // both hold alike (the head, logits B T V, gradients in flight). Asserted: below 60%.
  EXPECT_LT(on.peak, off.peak * 6 / 10) << "checkpointed peak " << on.peak << " B, without " << off.peak << " B";
  std::printf("peak activation bytes: %zu without checkpointing, %zu with (%.2f)\n", off.peak, on.peak,
              static_cast<double>(on.peak) / static_cast<double>(off.peak));
  // The recomputed nodes are in the graph, named after the nodes they repeat.
  EXPECT_GE(on.graph.find("h.0.attn.dropout.recompute"), 0);
  EXPECT_LT(off.graph.find("h.0.attn.dropout.recompute"), 0);
}

// bf16 parameters and activations (fp32 math inside the kernels, rounded to bf16 between
// them): the recomputed values round alike, so the gradients are the same bits too.
TEST(ActivationCheckpointing, Bf16GptGradientsAreBitIdentical) {
  models::GptConfig c = small_gpt();
  c.dtype = DType::kBF16;
  const Differentiated off = run_step(c, false);
  const Differentiated on = run_step(c, true);
  ASSERT_EQ(off.grads.size(), on.grads.size());
  for (size_t i = 0; i < off.grads.size(); ++i) {
    ASSERT_EQ(off.grad_values[i].dtype(), DType::kBF16);
    EXPECT_EQ(std::memcmp(off.grad_values[i].raw(), on.grad_values[i].raw(),
                          off.grad_values[i].nbytes()), 0)
        << "gradient of " << off.graph.value(off.params[i]).name << " differs";
  }
  EXPECT_LT(on.peak, off.peak * 6 / 10);
}

TEST(ActivationCheckpointing, BlocksByNameFollowTheBuilderNames) {
  models::GptConfig c = small_gpt();
  c.layers = 3;
  const Graph g = models::build_gpt(c);
  const std::vector<std::vector<NodeId>> blocks = blocks_by_name(g);
  ASSERT_EQ(blocks.size(), 3u);
  for (size_t l = 0; l < blocks.size(); ++l)
    for (NodeId n : blocks[l]) EXPECT_EQ(g.node(n).name.rfind("h." + std::to_string(l) + ".", 0), 0u) << g.node(n).name;
  EXPECT_EQ(g.node(blocks[2].back()).name, "h.2.residual_2");
  // Names that only look alike are no block: "h.x.", "h.12" without a dot, "hh.0.".
  Graph other;
  ValueId x = other.add_input("x", DType::kF32, {4});
  x = other.add_op("relu", "h.x.relu", {x}, Attrs()).at(0);
  x = other.add_op("relu", "h.12", {x}, Attrs()).at(0);
  x = other.add_op("relu", "hh.0.relu", {x}, Attrs()).at(0);
  EXPECT_TRUE(blocks_by_name(other).empty());
  // An MLP has none: a trainer asked to checkpoint it refuses, saying why.
  models::MlpConfig m;
  m.batch = 4;
  m.in_features = 6;
  m.hidden = {8};
  m.classes = 3;
  TrainerOptions to;
  to.activation_checkpointing = true;
  expect_error([&] { Trainer t(models::build_mlp(m), optim::OptimizerConfig{}, to); }, Status::kInvalidPlan,
               "activation checkpointing: the model has no transformer blocks to recompute");
}

TEST(ActivationCheckpointing, BadBlocksAreRefused) {
  Graph g = models::build_gpt(small_gpt());
  const std::vector<std::vector<NodeId>> blocks = blocks_by_name(g);
  const std::vector<ValueId> params = g.parameters();
  Graph twice = g;
  expect_error([&] { build_backward(twice, twice.loss(), params, {blocks[0], {blocks[0][1]}}); },
               Status::kInvalidArgument, {"activation checkpointing: node 'h.0.", "' is in block 0 and block 1"});
  Graph unknown = g;
  expect_error([&] { build_backward(unknown, unknown.loss(), params, {{static_cast<NodeId>(100000)}}); },
               Status::kInvalidArgument, "activation checkpointing: block 0 names node 100000");
  Graph empty = g;
  expect_error([&] { build_backward(empty, empty.loss(), params, {{}}); }, Status::kInvalidArgument,
               "activation checkpointing: block 0 is empty");
}

}  // namespace
}  // namespace cohort
