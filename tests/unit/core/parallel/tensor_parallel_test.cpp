// Tensor parallelism (core/parallel/tensor_parallel.h, parallel_trainer.h): which layers the
// rewrite splits and how, the plan's checks against the world and the model (each error naming
// the field and the numbers), and training at 2 and 4 ranks — threads with their own UCX engines
// — against one process on the same global batch, within tp_reference.h's derived bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/checkpoint/checkpoint.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/models/cnn.h"
#include "core/parallel/parallel_trainer.h"
#include "core/parallel/tensor_parallel.h"
#include "tests/support/expect_error.h"
#include "tests/unit/core/parallel/tp_reference.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::parallel {
namespace {

using test::expect_error;
namespace ct = transport::coll::testing;

TEST(TensorParallel, FindsTheColumnRowPairsOfTheGptAndTheMlp) {
  const std::vector<LinearPair> gpt = find_linear_pairs(test::tp_model("gpt", 2));
  ASSERT_EQ(gpt.size(), 4u);  // two per block
  EXPECT_EQ(gpt[0].column, "h.0.attn.c_attn");
  EXPECT_EQ(gpt[0].row, "h.0.attn.c_proj");
  EXPECT_EQ(gpt[0].between, std::vector<std::string>{"h.0.attn"});
  EXPECT_EQ(gpt[1].column, "h.0.mlp.c_fc");
  EXPECT_EQ(gpt[1].row, "h.0.mlp.c_proj");  // gelu_linear: the activation fused into the row layer
  EXPECT_TRUE(gpt[1].between.empty());
  EXPECT_EQ(gpt[3].row, "h.1.mlp.c_proj");
  const std::vector<LinearPair> mlp = find_linear_pairs(test::tp_model("mlp", 2));
  ASSERT_EQ(mlp.size(), 1u);
  EXPECT_EQ(mlp[0].column, "fc1");
  EXPECT_EQ(mlp[0].row, "fc2");
  EXPECT_EQ(mlp[0].between, std::vector<std::string>{"gelu1"});
}

TEST(TensorParallel, ARanksGraphHoldsItsBlocksAndOneAllReducePerPairAndPass) {
  const Graph model = test::tp_model("gpt", 2);
  TensorGrid grid;
  grid.y = 2;
  const Graph g = shard_for_tensor_parallel(model, grid, TensorPosition{0, 1, 0}).graph;
  const Value& qkv = g.value(g.find("h.0.attn.c_attn.weight"));  // [3C, C] whole
  EXPECT_EQ(qkv.type.shape, (Shape{24, 16}));
  ASSERT_EQ(qkv.shard.size(), 1u);
  EXPECT_EQ(qkv.shard[0], (ShardCut{0, 3, 2, 1, "y"}));  // q, k, v rows of heads 2 and 3
  const Value& proj = g.value(g.find("h.0.attn.c_proj.weight"));
  EXPECT_EQ(proj.type.shape, (Shape{16, 8}));
  EXPECT_EQ(proj.shard, (std::vector<ShardCut>{{1, 1, 2, 1, "y"}}));
  EXPECT_TRUE(g.value(g.find("h.0.attn.c_proj.bias")).shard.empty());  // added once, after the sum
  EXPECT_EQ(g.value(g.find("h.0.mlp.c_fc.bias")).type.shape, (Shape{32}));
  // The tied embedding / output head cut along the vocabulary: rank 1 holds rows [16, 32).
  EXPECT_EQ(g.value(g.find("wte.weight")).shard, (std::vector<ShardCut>{{0, 1, 2, 1, "y"}}));
  EXPECT_EQ(g.value(g.find("wte.weight")).type.shape, (Shape{16, 16}));
  EXPECT_TRUE(g.value(g.find("wpe.weight")).shard.empty());
  int copies = 0, reductions = 0, gathers = 0;
  for (const Node& n : g.nodes()) {
    copies += n.op->name == "copy_to_axis";
    reductions += n.op->name == "all_reduce";
    gathers += n.op->name == "all_gather";
    if (n.op->name == "attention") {
      EXPECT_EQ(n.attrs.get_int("heads"), 2) << n.name;
    }
    if (n.op->name == "vocab_embedding" || n.op->name == "vocab_cross_entropy") {
      EXPECT_EQ(n.attrs.get_int("offset"), 16) << n.name;
      EXPECT_EQ(n.attrs.get_int("vocab"), 32) << n.name;
    }
  }
  EXPECT_EQ(copies, 5);      // before each pair's first layer, and the head's
  EXPECT_EQ(reductions, 5);  // after each pair's second layer, and the embedding's
  EXPECT_EQ(gathers, 1);     // the loss's partials: 3 floats a row
  // Training reads the logits of this rank's vocabulary only; the whole ones are an output
  // gathered for a caller that asks.
  EXPECT_EQ(g.value(g.find("logits.local")).type.shape, (Shape{2, 8, 16}));
  EXPECT_EQ(g.node(g.value(g.find("logits")).producer).op->name, "gather_from_axis");
  const Node& ce = g.node(g.value(g.loss()).producer);
  EXPECT_EQ(ce.op->name, "vocab_cross_entropy");
  EXPECT_EQ(g.value(ce.inputs[0]).name, "logits.local");
  // The values the caller names keep their names and shapes.
  EXPECT_EQ(g.value(g.find("logits")).type.shape, model.value(model.find("logits")).type.shape);
  EXPECT_EQ(g.value(g.loss()).name, "loss");
}

// AxoNN's 2D grid: the column layer's weight cut over Y along its out-features and over X along
// its in-features, the row layer's the other way round; each pair takes its input's X block
// (split_to_axis), sums the column product over X and the row product over Y, and gathers the
// output's X blocks (gather_from_axis). Z: every weight block cut once more along its rows and
// gathered before use; the other parameters summed over Z backward; the loss the mean over Z.
TEST(TensorParallel, TheTwoAndThreeDimensionalGridsCutBothFeatureAxesAndTheRows) {
  const Graph model = test::tp_model("gpt", 2);
  TensorGrid grid;
  grid.x = 2;
  grid.y = 2;
  const Graph g = shard_for_tensor_parallel(model, grid, TensorPosition{1, 0, 0}).graph;
  const Value& qkv = g.value(g.find("h.0.attn.c_attn.weight"));
  EXPECT_EQ(qkv.type.shape, (Shape{24, 8}));
  EXPECT_EQ(qkv.shard, (std::vector<ShardCut>{{0, 3, 2, 0, "y"}, {1, 1, 2, 1, "x"}}));
  const Value& proj = g.value(g.find("h.0.attn.c_proj.weight"));
  EXPECT_EQ(proj.type.shape, (Shape{8, 8}));
  EXPECT_EQ(proj.shard, (std::vector<ShardCut>{{1, 1, 2, 0, "y"}, {0, 1, 2, 1, "x"}}));
  EXPECT_EQ(g.value(g.find("h.0.attn.c_proj.bias")).shard, (std::vector<ShardCut>{{0, 1, 2, 1, "x"}}));
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) ops[n.op->name + "/" + (n.attrs.has("axis") ? n.attrs.get_string("axis") : "")]++;
  EXPECT_EQ(ops["split_to_axis/x"], 4);
  EXPECT_EQ(ops["copy_to_axis/y"], 5);  // and the vocabulary-parallel head's
  EXPECT_EQ(ops["all_reduce/x"], 4);
  EXPECT_EQ(ops["copy_to_axis/x"], 4);
  EXPECT_EQ(ops["all_reduce/y"], 5);  // and the vocabulary-parallel embedding's
  EXPECT_EQ(ops["gather_from_axis/x"], 4);
  EXPECT_EQ(g.value(g.find("logits")).type.shape, model.value(model.find("logits")).type.shape);

  TensorGrid deep;
  deep.y = 2;
  deep.z = 2;
  const Graph d = shard_for_tensor_parallel(model, deep, TensorPosition{0, 1, 1}).graph;
  EXPECT_EQ(d.value(d.find("h.0.attn.c_attn.weight")).shard,
            (std::vector<ShardCut>{{0, 3, 2, 1, "y"}, {0, 1, 2, 1, "z"}}));
  EXPECT_EQ(d.value(d.find("h.0.attn.c_attn.weight")).type.shape, (Shape{12, 16}));  // 3C / Y / Z rows
  ops.clear();
  for (const Node& n : d.nodes()) ops[n.op->name + "/" + (n.attrs.has("axis") ? n.attrs.get_string("axis") : "")]++;
  EXPECT_EQ(ops["all_gather/z"], 8);  // the 8 weights of the 4 pairs
  EXPECT_EQ(static_cast<size_t>(ops["copy_to_axis/z"]) + 8, d.parameters().size());
  EXPECT_EQ(ops["all_reduce/z"], 1);  // the loss
  EXPECT_EQ(d.node(d.value(d.loss()).producer).op->name, "all_reduce");
  EXPECT_EQ(d.value(d.loss()).name, "loss");
}

// Megatron's sequence parallelism: each pair's f and g become an all_gather and a reduce_scatter
// of the tokens (dim 1), the embedding's sum a reduce_scatter, the head gathers the tokens back;
// the whole parameters of the token-split regions have their gradients summed over Y
// (copy_to_axis), the position table is read by token blocks. What it does not fit is named.
TEST(TensorParallel, SequenceParallelismSplitsTheRegionsBetweenPairsAlongTheTokens) {
  const Graph model = test::tp_model("gpt", 2);
  TensorGrid grid;
  grid.y = 2;
  const Graph g = shard_for_tensor_parallel(model, grid, TensorPosition{0, 1, 0}, SequenceParallel::kMegatron).graph;
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) {
    ops[n.op->name]++;
    if (n.op->name == "all_gather" || n.op->name == "reduce_scatter") {
      EXPECT_EQ(n.attrs.get_string("axis"), "y") << n.name;
    }
  }
  EXPECT_EQ(ops["all_gather"], 4 + 1 + 1);      // before each pair, the head, the loss's partials
  EXPECT_EQ(ops["reduce_scatter"], 4 + 1);      // after each pair, the embedding
  EXPECT_EQ(ops["all_reduce"], 0);
  EXPECT_EQ(ops["split_to_axis"], 1);           // wpe's rows of this rank's tokens
  EXPECT_EQ(g.value(g.find("wpe.weight.split_tokens_y")).type.shape, (Shape{4, 16}));
  EXPECT_EQ(g.value(g.find("h.0.ln_1")).type.shape, (Shape{2, 4, 16}));  // [B, T / 2, C]
  EXPECT_EQ(g.value(g.find("logits")).type.shape, (Shape{2, 8, 32}));
  EXPECT_TRUE(g.find("h.0.ln_1.weight.copy_to_y") >= 0);
  EXPECT_TRUE(g.find("h.0.attn.c_proj.bias.copy_to_y") >= 0);

  expect_error([&] { shard_for_tensor_parallel(model, TensorGrid{}, {}, SequenceParallel::kMegatron); }, Status::kInvalidPlan,
               "plan: sequence parallelism splits the tokens over tensor_y, which is 1");
  expect_error([&] { shard_for_tensor_parallel(test::tp_model("mlp", 2), grid, {}, SequenceParallel::kMegatron); }, Status::kInvalidPlan,
               "plan: sequence parallelism splits [batch, tokens, features] activations along the tokens, but "
               "linear 'fc1' reads [2, 12]");
  models::GptConfig odd = test::tp_gpt_config(2);
  odd.context = 6;
  TensorGrid four;
  four.y = 4;
  expect_error([&] { shard_for_tensor_parallel(models::build_gpt(odd), four, {}, SequenceParallel::kMegatron); }, Status::kInvalidPlan,
               "plan: sequence parallelism: tensor_y = 4 does not divide the 6 tokens of the context");
}

// On the 2D grid X x Y the regions hold [B, T / Y, C], whole over X: a pair takes its X block of
// the features, then gathers the tokens over Y; the column product is summed over X on every
// token; the row product's tokens are reduce-scattered over Y, then the X blocks gathered back
// (the derivation above shard_for_tensor_parallel). Nothing is all-reduced over Y.
TEST(TensorParallel, SequenceParallelismOnTheTwoDimensionalGridSplitsFeaturesOverXBeforeGatheringTokensOverY) {
  const Graph model = test::tp_model("gpt", 2);
  TensorGrid grid;
  grid.x = 2;
  grid.y = 2;
  const Graph g = shard_for_tensor_parallel(model, grid, TensorPosition{1, 0, 0}, SequenceParallel::kMegatron).graph;
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) ops[n.op->name + "/" + (n.attrs.has("axis") ? n.attrs.get_string("axis") : "")]++;
  EXPECT_EQ(ops["split_to_axis/x"], 4);      // before each pair
  EXPECT_EQ(ops["all_gather/y"], 4 + 1 + 1);  // each pair's tokens, the head's, the loss's partials
  EXPECT_EQ(ops["all_reduce/x"], 4);          // each column product
  EXPECT_EQ(ops["reduce_scatter/y"], 4 + 1);  // each row product's tokens, the embedding's
  EXPECT_EQ(ops["gather_from_axis/x"], 4);    // each pair's output
  EXPECT_EQ(ops["split_to_axis/y"], 1);       // wpe's rows of this rank's tokens
  EXPECT_EQ(ops["all_reduce/y"], 0);
  // [B, T / Y, C] in the regions; [B, T / Y, C / X] split, then [B, T, C / X] gathered.
  EXPECT_EQ(g.value(g.find("h.0.ln_1")).type.shape, (Shape{2, 4, 16}));
  EXPECT_EQ(g.value(g.find("h.0.attn.c_attn.split_x")).type.shape, (Shape{2, 4, 8}));
  EXPECT_EQ(g.value(g.find("h.0.attn.c_attn.gather_tokens_y")).type.shape, (Shape{2, 8, 8}));
  EXPECT_EQ(g.node(g.value(g.find("h.0.attn.c_attn.gather_tokens_y")).producer).inputs[0],
            g.find("h.0.attn.c_attn.split_x"));
  EXPECT_EQ(g.value(g.find("h.0.attn.c_attn")).type.shape, (Shape{2, 8, 24}));  // [B, T, 3C / Y]
  EXPECT_EQ(g.value(g.find("h.0.attn.c_proj.all_reduce_y")).type.shape, (Shape{2, 4, 8}));
  EXPECT_EQ(g.node(g.value(g.find("h.0.attn.c_proj.all_reduce_y")).producer).op->name, "reduce_scatter");
  EXPECT_EQ(g.value(g.find("h.0.attn.c_proj")).type.shape, (Shape{2, 4, 16}));
  // The row bias: this rank's X block, its gradient summed over Y (the tokens), not over X.
  EXPECT_EQ(g.value(g.find("h.0.attn.c_proj.bias")).shard, (std::vector<ShardCut>{{0, 1, 2, 1, "x"}}));
  EXPECT_TRUE(g.find("h.0.attn.c_proj.bias.copy_to_y") >= 0);
  EXPECT_TRUE(g.find("h.0.ln_1.weight.copy_to_y") >= 0);
  EXPECT_EQ(ops["copy_to_axis/x"], 4);  // f over X before each row layer, nothing else over X
  EXPECT_EQ(g.value(g.find("logits")).type.shape, (Shape{2, 8, 32}));
}

// The all-to-all kind: Y cuts nothing by features; the token inputs are split, every parameter
// is whole (its gradient summed over Y), and attention is wrapped in two all_to_all nodes over H
// / Y heads; the loss the mean of the ranks'. What it does not fit is named.
TEST(TensorParallel, AllToAllSequenceParallelismExchangesTokensForHeadsAroundAttention) {
  const Graph model = test::tp_model("gpt", 2);
  TensorGrid grid;
  grid.y = 2;
  const Graph g = shard_for_tensor_parallel(model, grid, TensorPosition{0, 1, 0}, SequenceParallel::kAllToAll).graph;
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) {
    ops[n.op->name]++;
    if (n.op->name == "attention") {
      EXPECT_EQ(n.attrs.get_int("heads"), 2) << n.name;
    }
  }
  for (ValueId p : g.parameters()) EXPECT_TRUE(g.value(p).shard.empty()) << g.value(p).name;
  EXPECT_EQ(ops["all_to_all"], 4);     // two around each block's attention
  EXPECT_EQ(ops["split_to_axis"], 3);  // tokens, targets, the position table's rows
  EXPECT_EQ(ops["all_reduce"], 1);     // the loss
  EXPECT_EQ(g.value(g.find("h.0.attn.heads_for_tokens")).type.shape, (Shape{2, 8, 24}));  // [B, T, 3C / 2]
  EXPECT_EQ(g.value(g.find("h.0.attn")).type.shape, (Shape{2, 4, 16}));                   // [B, T / 2, C]
  EXPECT_EQ(g.value(g.find("logits")).type.shape, (Shape{2, 8, 32}));                     // gathered
  EXPECT_EQ(g.node(g.value(g.loss()).producer).op->name, "all_reduce");

  expect_error([&] { shard_for_tensor_parallel(test::tp_model("mlp", 2), grid, {}, SequenceParallel::kAllToAll); },
               Status::kInvalidPlan, "plan: all-to-all sequence parallelism exchanges attention's heads for tokens, "
               "but the model has no attention");
  TensorGrid x2y2 = grid;
  x2y2.x = 2;
  expect_error([&] { shard_for_tensor_parallel(model, x2y2, {}, SequenceParallel::kAllToAll); }, Status::kUnsupported,
               "plan: all-to-all sequence parallelism with tensor_x = 2: X would cut the features it keeps whole");
  // With Z: each pair's weights cut along their rows over Z and gathered before use, then, like
  // every parameter, summed over Y in backward (copy_to_axis after the gather); the loss the mean
  // over Z and Y. Z must divide the rows.
  TensorGrid y2z2 = grid;
  y2z2.z = 2;
  const TensorParallelGraph gz = shard_for_tensor_parallel(model, y2z2, TensorPosition{0, 1, 1}, SequenceParallel::kAllToAll);
  int cut_over_z = 0;
  for (ValueId p : gz.graph.parameters()) {
    const std::vector<ShardCut>& cuts = gz.graph.value(p).shard;
    if (cuts.empty()) continue;
    ++cut_over_z;
    EXPECT_TRUE(cuts.size() == 1 && cuts[0].axis == "z" && cuts[0].dim == 0) << gz.graph.value(p).name;
  }
  EXPECT_EQ(cut_over_z, 8);  // 2 blocks x (c_attn, c_proj, c_fc, mlp c_proj)
  EXPECT_EQ(gz.graph.value(gz.graph.find("h.0.attn.c_attn.weight.gather_z")).type.shape, (Shape{48, 16}));
  const Node& copy = gz.graph.node(gz.graph.value(gz.graph.find("h.0.attn.c_attn.weight.copy_to_y")).producer);
  EXPECT_EQ(gz.graph.value(copy.inputs[0]).name, "h.0.attn.c_attn.weight.gather_z");
  EXPECT_EQ(gz.recompute.size(), 8u);  // the Z gathers, again in backward
  EXPECT_TRUE(gz.graph.find("loss.sum_z") >= 0);
  TensorGrid y2z32 = grid;
  y2z32.z = 32;
  expect_error([&] { shard_for_tensor_parallel(model, y2z32, {}, SequenceParallel::kAllToAll); }, Status::kInvalidPlan,
               "plan: tensor_z = 32 does not divide the 48 rows of the weight block of linear 'h.0.attn.c_attn'");
  models::GptConfig odd = test::tp_gpt_config(2);
  odd.heads = 2;
  TensorGrid four;
  four.y = 4;
  expect_error([&] { shard_for_tensor_parallel(models::build_gpt(odd), four, {}, SequenceParallel::kAllToAll); },
               Status::kInvalidPlan, "plan: all-to-all sequence parallelism: tensor_y = 4 does not divide the 2 heads "
               "of attention 'h.0.attn'");
}

// Per rank, sequence parallelism holds less activation memory than the same grid without it (the
// layernorm, residual and dropout regions by Y), with the same numbers within the reference bound
// (MatchesOneProcessOnTheGlobalBatch's sequence cases): 0.90 here, where keeping each pair's
// gathered input for its weight gradient instead of gathering it again in backward
// (TrainerOptions::recompute_nodes) gave 0.96. Attention's inputs and the [B, T, 4C / Y] hidden
// layer are not token-split, so the peak does not halve.
TEST(TensorParallel, SequenceParallelismShrinksThePeakOfActivations) {
  std::mutex mutex;
  std::map<bool, size_t> peak;
  for (bool sequence : {false, true}) {
    ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      PlanConfig plan = preset(Preset::kDdp, 1);
      plan.tensor.y = 2;
      plan.sequence_parallel = sequence ? SequenceParallel::kMegatron : SequenceParallel::kNone;
      TrainerOptions o;
      o.seed = 3;
      o.num_threads = 1;
      models::GptConfig c = test::tp_gpt_config(4);
      c.context = 16;
      c.width = 64;  // the token-split regions weigh more than attention's scores
      auto t = make_parallel_trainer(models::build_gpt(c), test::tp_optimizer(), o, plan, comm);
      Tensor tokens = Tensor::zeros({4, 16}, DType::kI32), targets = Tensor::zeros({4, 16}, DType::kI32);
      for (int64_t i = 0; i < tokens.numel(); ++i) {
        tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 32);
        targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % 32);
      }
      t->step({{"tokens", tokens}, {"targets", targets}});
      std::lock_guard<std::mutex> lock(mutex);
      peak[sequence] = std::max(peak[sequence], static_cast<size_t>(t->stats().peak_activation_bytes));
    });
  }
  std::printf("peak activation bytes per rank at tensor_y 2: %zu, with sequence parallelism %zu (%.2f)\n", peak[false],
              peak[true], static_cast<double>(peak[true]) / static_cast<double>(peak[false]));
  EXPECT_LT(peak[true], peak[false] * 19 / 20);
}

// Z's gathered weights are gathered again in backward rather than kept through forward (as FSDP
// does), so a rank's peak stays near that of a data-parallel rank on the same rows, which holds
// no gathered weights at all: measured 1.10x (701,184 against 634,880 bytes; 1.08x while each
// weight's gather stood at the start of the graph rather than before its first reader, which
// under ZeRO 3 gathered every bucket at once); keeping them made it 1.62x.
TEST(TensorParallel, TheZAxisGathersWeightsAgainInBackwardRatherThanKeepingThem) {
  std::mutex mutex;
  std::map<int, size_t> peak;
  for (int z : {1, 2}) {  // z 1: the 2 ranks are the data axis
    ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      PlanConfig plan = preset(Preset::kDdp, 1);
      plan.tensor.z = z;
      TrainerOptions o;
      o.seed = 3;
      o.num_threads = 1;
      models::GptConfig c = test::tp_gpt_config(4);
      c.context = 16;
      c.width = 64;
      auto t = make_parallel_trainer(models::build_gpt(c), test::tp_optimizer(), o, plan, comm);
      t->step({{"tokens", Tensor::zeros({4, 16}, DType::kI32)}, {"targets", Tensor::zeros({4, 16}, DType::kI32)}});
      std::lock_guard<std::mutex> lock(mutex);
      peak[z] = std::max(peak[z], static_cast<size_t>(t->stats().peak_activation_bytes));
    });
  }
  std::printf("peak activation bytes per rank: data 2 %zu, tensor_z 2 %zu (%.2f)\n", peak[1], peak[2],
              static_cast<double>(peak[2]) / static_cast<double>(peak[1]));
  EXPECT_LT(peak[2], peak[1] * 5 / 4);
}

// A Z-cut weight is read by its all-gather, which stays in flight until the product that reads the
// gathered weight waits for it: ZeRO 3 must keep the weight's bucket whole until then, so the
// trainer counts the gather's read up to that product's position — two positions in forward and
// two in backward (the weight gathered again there), not one each. The forward gather stands
// just before that product, not at the start of the graph (where every gather would hold its
// weight, and under ZeRO 3 every bucket, from the step's first node on).
TEST(TensorParallel, AnInFlightGatherOfAWeightReadsItUntilItsResultIsRead) {
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.tensor.z = 2;
    TrainerOptions o;
    o.num_threads = 1;
    auto t = make_parallel_trainer(test::tp_model("gpt", 4), test::tp_optimizer(), o, plan, comm);
    const std::vector<std::vector<size_t>> reads = t->parameter_reads();
    const Graph& g = t->forward_graph();
    int z_cut = 0;
    for (size_t i = 0; i < reads.size(); ++i) {
      const std::vector<ShardCut>& cuts = g.value(g.find(t->parameter_names()[i])).shard;
      if (std::none_of(cuts.begin(), cuts.end(), [](const ShardCut& c) { return c.axis == "z"; })) continue;
      ++z_cut;
      const size_t backward = t->step_segments().at(1);  // forward, then backward
      const auto forward = std::count_if(reads[i].begin(), reads[i].end(), [&](size_t p) { return p < backward; });
      ASSERT_EQ(forward, 2) << t->parameter_names()[i];
      // Only the layer's bias's Z node may stand between (it is the product's next input).
      EXPECT_LE(reads[i][1] - reads[i][0], 2u) << t->parameter_names()[i];
      EXPECT_EQ(static_cast<int64_t>(reads[i].size()) - forward, 2) << t->parameter_names()[i];
      EXPECT_TRUE(std::is_sorted(reads[i].begin(), reads[i].end())) << t->parameter_names()[i];
    }
    EXPECT_GT(z_cut, 0);
  });
}

// In backward, the all-reduce of a column-parallel layer's input gradient starts as soon as that
// gradient exists, and the layer's weight-gradient product runs while it is in flight (the
// executor starts collectives early, executor.h); the reduced gradient is read only after.
TEST(TensorParallel, TheInputGradientsAllReduceOverlapsTheWeightGradient) {
  TensorGrid grid;
  grid.y = 2;
  Graph g = shard_for_tensor_parallel(test::tp_model("gpt", 2), grid, TensorPosition{}).graph;
  std::vector<ValueId> grads = build_backward(g, g.loss(), g.parameters());
  std::vector<ValueId> targets = {g.loss()};
  for (ValueId v : grads) targets.push_back(v);
  Executor ex(g, targets);
  auto position = [&](const std::string& node) {
    for (size_t s = 0; s < ex.order().size(); ++s)
      if (g.node(ex.order()[s]).name == node) return s;
    ADD_FAILURE() << "no node " << node;
    return size_t{0};
  };
  for (const char* layer : {"h.0.attn.c_attn", "h.1.mlp.c_fc"}) {
    const std::string l = layer;
    const size_t dx = position(l + ".grad.matmul"), reduce = position(l + ".copy_to_y.grad.all_reduce"),
                 dw = position(l + ".grad.matmul_sum_batch");
    EXPECT_EQ(reduce, dx + 1) << l << ": the all-reduce starts right after the input gradient";
    EXPECT_LT(reduce, dw) << l << ": the weight gradient is computed while the all-reduce is in flight";
    const ValueId reduced = g.find(l + ".copy_to_y.grad.all_reduce");
    for (size_t s = reduce + 1; s <= dw; ++s)
      for (ValueId in : g.node(ex.order()[s]).inputs) EXPECT_NE(in, reduced) << l;
  }
}

TEST(TensorParallel, APlanThatDoesNotFitTheModelNamesTheNodeAndTheNumbers) {
  TensorGrid three;
  three.y = 3;
  models::GptConfig c = test::tp_gpt_config(2);
  c.width = 24;  // 3 divides the widths but not the 4 heads
  expect_error([&] { shard_for_tensor_parallel(models::build_gpt(c), three, {}); }, Status::kInvalidPlan,
               "plan: tensor_y = 3 does not divide the 4 heads of attention 'h.0.attn'");
  TensorGrid four;
  four.y = 4;
  models::MlpConfig m = test::tp_mlp_config(2);
  m.hidden = {10};
  expect_error([&] { shard_for_tensor_parallel(models::build_mlp(m), four, {}); }, Status::kInvalidPlan,
               "plan: tensor_y = 4 does not divide the 10 out-features of linear 'fc1'");
  models::GptConfig v = test::tp_gpt_config(2);
  v.width = 24;
  v.heads = 6;  // 3 divides the widths and the heads, not the 32 rows of the vocabulary
  expect_error([&] { shard_for_tensor_parallel(models::build_gpt(v), three, {}); }, Status::kInvalidPlan,
               "plan: tensor_y = 3 does not divide the vocabulary (32 rows of 'wte.weight') that the output head "
               "'logits' is cut along");
  TensorGrid x3;
  x3.x = 3;
  expect_error([&] { shard_for_tensor_parallel(models::build_mlp(test::tp_mlp_config(2)), x3, {}); },
               Status::kInvalidPlan, "plan: tensor_x = 3 does not divide the 4 out-features of linear 'fc2'");
  TensorGrid z3;
  z3.z = 3;
  expect_error([&] { shard_for_tensor_parallel(models::build_mlp(test::tp_mlp_config(2)), z3, {}); },
               Status::kInvalidPlan, "plan: tensor_z = 3 does not divide the 16 rows of the weight block of linear 'fc1'");
  models::CnnConfig cnn;
  cnn.batch = 2;
  TensorGrid two;
  two.y = 2;
  expect_error([&] { shard_for_tensor_parallel(models::build_cnn(cnn), two, {}); }, Status::kInvalidPlan,
               "plan: tensor_y = 2 but the model has no pair of linear layers to split");
}

TEST(TensorParallel, APlanThatDoesNotFitTheWorldNamesTheFields) {
  PlanConfig p;
  p.tensor.y = 3;
  expect_error([&] { validate_for_world(p, 4); }, Status::kInvalidPlan,
               "plan: the tensor grid tensor_x 1 x tensor_y 3 x tensor_z 1 = 3 ranks does not divide the world size 4");
  p.tensor.y = 4;
  p.data_parallel = 2;
  expect_error([&] { validate_for_world(p, 4); }, Status::kInvalidPlan,
               "plan: data_parallel 2 x the tensor grid's 4 ranks = 8 ranks, the world has 4");
  p.tensor.y = 2;
  p.data_parallel = 1;
  expect_error([&] { validate_for_world(p, 4); }, Status::kUnsupported, "needs another parallel axis");
  p.data_parallel = 0;
  EXPECT_NO_THROW(validate_for_world(p, 4));  // data 2 x tensor 2
  p.tensor.y = 0;
  expect_error([&] { validate(p); }, Status::kInvalidPlan, "plan: tensor_y = 0 must be in 1..65536");
  p.tensor.y = 2;
  p.tensor.x = 2;
  p.tensor.z = 2;
  expect_error([&] { validate_for_world(p, 4); }, Status::kInvalidPlan,
               "plan: the tensor grid tensor_x 2 x tensor_y 2 x tensor_z 2 = 8 ranks does not divide the world size 4");
  p.tensor.z = 1;
  EXPECT_NO_THROW(validate_for_world(p, 4));  // AxoNN's 2D grid
  p.tensor.x = 1;
  p.zero_stage = 3;  // over the data axis (zero.cpp derives why its gathers cannot deadlock)
  p.data_parallel = 0;
  EXPECT_NO_THROW(validate_for_world(p, 4));  // data 2 x tensor 2
}

struct GridCase {
  std::string model;
  int world;
  TensorGrid grid;
  bool overlap;
  std::string label;
  SequenceParallel sequence_parallel = SequenceParallel::kNone;
  int zero_stage = 0;  // over the data axis
};

TensorGrid grid_of(int x, int y, int z) {
  TensorGrid g;
  g.x = x;
  g.y = y;
  g.z = z;
  return g;
}

// Every rank (a thread) trains its part for kSteps steps on its own rows of the global batch
// (each data replica's Z ranks take consecutive slices); each must match the reference's loss
// and its blocks of the reference's parameters.
class TensorParallelTraining : public ::testing::TestWithParam<GridCase> {};

TEST_P(TensorParallelTraining, MatchesOneProcessOnTheGlobalBatch) {
  const GridCase& c = GetParam();
  constexpr int64_t kSteps = 4, kRows = 4;  // rows per rank and step
  const int tensor = c.grid.degree(), data = c.world / tensor;
  const int64_t global = kRows * data * c.grid.z;
  const test::TpReference ref = test::tp_reference(c.model, global, kSteps, 1);
  std::mutex mutex;
  ct::run_ranks_shared(c.world, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.tensor = c.grid;
    plan.overlap_collectives = c.overlap;
    plan.sequence_parallel = c.sequence_parallel;
    plan.zero_stage = c.zero_stage;
    if (c.zero_stage == 3) plan.bucket_bytes = 256;  // several buckets: gathered and released one by one
    TrainerOptions o;
    o.seed = 1 + static_cast<uint64_t>(comm->rank());  // the data axis broadcasts rank 0's blocks
    o.num_threads = 1;
    auto trainer = make_parallel_trainer(test::tp_model(c.model, kRows), test::tp_optimizer(), o, plan, comm);
    const int slice = comm->rank() / tensor * c.grid.z + comm->rank() % c.grid.z;  // z varies fastest
    double worst_loss = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const float loss = trainer->step(test::tp_batch(c.model, s, slice * kRows, kRows));
      // A replica's loss is the mean over its own rows (its Z ranks' together); with one
      // replica it is the global one (with several, the parameters carry the comparison).
      if (data == 1) {
        const double rel = std::fabs(loss - ref.losses[static_cast<size_t>(s)]) / std::fabs(ref.losses[static_cast<size_t>(s)]);
        worst_loss = std::max(worst_loss, rel / static_cast<double>(s + 1));
      }
    }
    if (c.zero_stage == 3) {  // the shard between steps, never the GPT's buckets all whole at once (tp_reference.h)
      const test::Zero3Memory zm = test::zero3_memory(*trainer, data, c.model == "gpt");
      EXPECT_TRUE(zm.ok) << c.label << ": " << zm.describe();
    }
    trainer->gather_parameters();  // ZeRO 3 keeps only shards between steps (a collective; elsewhere a no-op)
    const test::TpDiff diff = test::tp_parameter_diff(*trainer, ref);
    // Every parameter whole (blocks gathered over the tensor axes: every rank, same order) matches
    // the reference's within the same bound; a whole one written keeps this rank's block of it.
    double whole_diff = 0;
    for (const std::string& name : trainer->parameter_names()) {
      const Tensor whole = trainer->whole_parameter(name), &want = ref.parameters.at(name);
      ASSERT_EQ(whole.shape(), want.shape()) << name;
      for (int64_t k = 0; k < whole.numel(); ++k)
        whole_diff = std::max(whole_diff, static_cast<double>(std::fabs(whole.data<float>()[k] - want.data<float>()[k])));
    }
    EXPECT_LE(whole_diff, ref.parameter_bound()) << c.label;
    const std::string split = c.model == "gpt" ? "h.0.attn.c_attn.weight" : "fc1.weight";
    trainer->set_whole_parameter(split, ref.parameters.at(split));
    const Graph& g = trainer->forward_graph();
    const Tensor block = take_shard(ref.parameters.at(split), g.value(g.find(split)).shard);
    const Tensor& mine = trainer->parameter(split);
    ASSERT_EQ(mine.shape(), block.shape());
    EXPECT_EQ(std::memcmp(mine.raw(), block.raw(), block.nbytes()), 0) << c.label << ": set_whole_parameter";
    std::lock_guard<std::mutex> lock(mutex);
    std::printf("%s rank %d: max |param - reference| %.3g (%s), bound %.3g (control %.3g); loss rel. diff per step "
                "%.3g (bound %.3g); %d blocks, %lld collectives\n",
                c.label.c_str(), comm->rank(), diff.max_abs, diff.worst.c_str(), ref.parameter_bound(), ref.control_diff,
                worst_loss, ref.loss_relative_per_step, diff.blocks,
                static_cast<long long>(trainer->stats().collectives.started));
    if (c.sequence_parallel == SequenceParallel::kAllToAll) {
      EXPECT_EQ(diff.blocks > 0, c.grid.z > 1);  // nothing cut by features: blocks only over Z
    } else {
      EXPECT_GT(diff.blocks, 0);
    }
    EXPECT_LE(diff.max_abs, ref.parameter_bound()) << c.label << " rank " << comm->rank() << ": parameter " << diff.worst;
    EXPECT_LE(worst_loss, ref.loss_relative_per_step) << c.label << " rank " << comm->rank();
  });
}

INSTANTIATE_TEST_SUITE_P(
    Grids, TensorParallelTraining,
    ::testing::Values(GridCase{"gpt", 2, grid_of(1, 2, 1), true, "gpt_y2"},
                      GridCase{"gpt", 4, grid_of(1, 4, 1), true, "gpt_y4"},
                      GridCase{"gpt", 2, grid_of(1, 2, 1), false, "gpt_y2_no_overlap"},
                      GridCase{"mlp", 2, grid_of(1, 2, 1), true, "mlp_y2"},
                      GridCase{"mlp", 4, grid_of(1, 4, 1), true, "mlp_y4"},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), true, "gpt_data2_y2"},
                      GridCase{"mlp", 4, grid_of(1, 2, 1), true, "mlp_data2_y2"},
                      GridCase{"gpt", 2, grid_of(2, 1, 1), true, "gpt_x2"},
                      GridCase{"gpt", 4, grid_of(2, 2, 1), true, "gpt_x2_y2"},
                      GridCase{"mlp", 4, grid_of(2, 2, 1), true, "mlp_x2_y2"},
                      GridCase{"gpt", 4, grid_of(2, 2, 1), false, "gpt_x2_y2_no_overlap"},
                      GridCase{"gpt", 2, grid_of(1, 1, 2), true, "gpt_z2"},
                      GridCase{"mlp", 2, grid_of(1, 1, 2), true, "mlp_z2"},
                      GridCase{"gpt", 4, grid_of(1, 2, 2), true, "gpt_y2_z2"},
                      GridCase{"mlp", 4, grid_of(2, 1, 2), true, "mlp_x2_z2"},
                      GridCase{"gpt", 4, grid_of(2, 1, 1), true, "gpt_data2_x2"},
                      GridCase{"gpt", 2, grid_of(1, 2, 1), true, "gpt_y2_sequence", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(1, 4, 1), true, "gpt_y4_sequence", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(1, 2, 2), true, "gpt_y2_z2_sequence", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), false, "gpt_data2_y2_sequence_no_overlap", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(2, 2, 1), true, "gpt_x2_y2_sequence", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(2, 2, 1), false, "gpt_x2_y2_sequence_no_overlap", SequenceParallel::kMegatron},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), true, "gpt_data2_y2_zero1", SequenceParallel::kNone, 1},
                      GridCase{"mlp", 4, grid_of(2, 1, 1), true, "mlp_data2_x2_zero2", SequenceParallel::kNone, 2},
                      GridCase{"gpt", 4, grid_of(1, 1, 2), true, "gpt_data2_z2_zero2", SequenceParallel::kNone, 2},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), true, "gpt_data2_y2_zero3", SequenceParallel::kNone, 3},
                      GridCase{"mlp", 4, grid_of(1, 2, 1), true, "mlp_data2_y2_zero3", SequenceParallel::kNone, 3},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), false, "gpt_data2_y2_zero3_no_overlap", SequenceParallel::kNone, 3},
                      GridCase{"gpt", 4, grid_of(1, 1, 2), true, "gpt_data2_z2_zero3", SequenceParallel::kNone, 3},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), true, "gpt_data2_y2_sequence_zero3", SequenceParallel::kMegatron, 3},
                      GridCase{"gpt", 2, grid_of(1, 2, 1), true, "gpt_y2_all_to_all", SequenceParallel::kAllToAll},
                      GridCase{"gpt", 4, grid_of(1, 4, 1), true, "gpt_y4_all_to_all", SequenceParallel::kAllToAll},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), false, "gpt_data2_y2_all_to_all_no_overlap",
                               SequenceParallel::kAllToAll},
                      GridCase{"gpt", 4, grid_of(1, 2, 2), true, "gpt_y2_z2_all_to_all", SequenceParallel::kAllToAll},
                      GridCase{"gpt", 4, grid_of(1, 2, 2), false, "gpt_y2_z2_all_to_all_no_overlap",
                               SequenceParallel::kAllToAll},
                      GridCase{"gpt", 4, grid_of(1, 2, 1), true, "gpt_data2_y2_all_to_all_zero3",
                               SequenceParallel::kAllToAll, 3}),
    [](const ::testing::TestParamInfo<GridCase>& i) { return i.param.label; });

// Dropout in the replicated regions (embeddings, residual branches) draws the same masks on
// every tensor rank — the ranks start from different seeds and the trainer takes the first
// tensor rank's — so the replicated parameters stay bit-identical across the tensor group and
// every rank reports the same loss. (Masks are keyed by node, so they are not the one-process
// run's: no comparison with it here.)
TEST(TensorParallel, DropoutMasksAgreeAcrossTheTensorGroup) {
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> losses(kWorld);
  std::vector<Tensor> wpe(kWorld), ln(kWorld);
  ct::run_ranks_shared(kWorld, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    models::GptConfig config = test::tp_gpt_config(4);
    config.dropout = 0.2;
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.tensor.y = kWorld;
    TrainerOptions o;
    o.seed = 7 + static_cast<uint64_t>(comm->rank());
    o.num_threads = 1;
    auto t = make_parallel_trainer(models::build_gpt(config), test::tp_optimizer(), o, plan, comm);
    const size_t r = static_cast<size_t>(comm->rank());
    for (int64_t s = 0; s < 3; ++s) losses[r].push_back(t->step(test::tp_batch("gpt", s, 0, 4)));
    wpe[r] = t->parameter("wpe.weight");
    ln[r] = t->parameter("h.1.ln_2.weight");
  });
  EXPECT_EQ(losses[0], losses[1]);
  for (const auto* p : {&wpe, &ln}) {
    ASSERT_EQ((*p)[0].nbytes(), (*p)[1].nbytes());
    EXPECT_EQ(std::memcmp((*p)[0].raw(), (*p)[1].raw(), (*p)[0].nbytes()), 0);
  }
}

// Checkpoints are written in the model's layout: a grid saves whole parameters and optimizer state
// (each rank the same file; a weight cut over X and Y gathered over both), which one process
// loads — its parameters then equal the ranks' gathered blocks bit for bit — and another grid
// loads too, each rank keeping exactly its blocks of the parameters and the optimizer state; both
// then take the same next step within fp32 rounding (the loading grid's Z ranks fed the same rows,
// so their mean loss is the one process's).
void expect_checkpoint_moves(const TensorGrid& saved_grid, SequenceParallel saved_sequence,
                             const TensorGrid& loaded_grid, SequenceParallel loaded_sequence, const std::string& label) {
  constexpr int64_t kRows = 4;
  const std::string dir = ::testing::TempDir();
  auto path = [&](int rank) { return dir + "tp_checkpoint_" + label + ".rank" + std::to_string(rank); };
  auto make = [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm, const TensorGrid& grid,
                  SequenceParallel sequence) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.tensor = grid;
    plan.sequence_parallel = sequence;
    TrainerOptions o;
    o.seed = 5;
    o.num_threads = 1;
    return make_parallel_trainer(test::tp_model("gpt", kRows), test::tp_optimizer(), o, plan, comm);
  };
  std::map<std::string, Tensor> gathered;  // rank 0's whole parameters at the save
  ct::run_ranks_shared(saved_grid.degree(), ct::RankSetup(),
                       [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, saved_grid, saved_sequence);
    for (int64_t s = 0; s < 3; ++s) t->step(test::tp_batch("gpt", s, 0, kRows));
    checkpoint::save_checkpoint(*t, path(comm->rank()), {});
    std::map<std::string, Tensor> whole;
    for (const std::string& name : t->parameter_names()) whole[name] = t->whole_parameter(name);
    if (comm->rank() == 0) gathered = whole;
  });
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  // One process.
  TrainerOptions o;
  o.seed = 99;  // the checkpoint's seed replaces it
  o.num_threads = 1;
  Trainer alone(test::tp_model("gpt", kRows), test::tp_optimizer(), o);
  checkpoint::load_checkpoint(alone, path(saved_grid.degree() - 1), nullptr);
  ASSERT_EQ(gathered.size(), alone.parameters().size()) << label;
  for (size_t i = 0; i < alone.parameters().size(); ++i)
    EXPECT_TRUE(same_bits(alone.parameters()[i], gathered.at(alone.parameter_names()[i])))
        << label << ": " << alone.parameter_names()[i];
  EXPECT_EQ(alone.step_count(), 3) << label;
  const float alone_loss = alone.step(test::tp_batch("gpt", 3, 0, kRows));
  // Another grid: blocks of what one process loaded, parameters and optimizer state.
  Trainer fresh(test::tp_model("gpt", kRows), test::tp_optimizer(), o);
  checkpoint::load_checkpoint(fresh, path(0), nullptr);
  std::mutex mutex;
  ct::run_ranks_shared(loaded_grid.degree(), ct::RankSetup(),
                       [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, loaded_grid, loaded_sequence);
    checkpoint::load_checkpoint(*t, path(0), nullptr);
    int blocks = 0;
    for (size_t i = 0; i < t->parameters().size(); ++i) {
      const std::string& name = t->parameter_names()[i];
      EXPECT_TRUE(same_bits(t->parameters()[i], t->block_of(i, fresh.parameters()[i]))) << label << ": " << name;
      auto mine = t->optimizer().state(i), want = fresh.optimizer().state(i);
      ASSERT_EQ(mine.size(), want.size());
      for (size_t k = 0; k < mine.size(); ++k)
        EXPECT_TRUE(same_bits(mine[k].second, t->block_of(i, want[k].second)))
            << label << ": " << name << "/" << mine[k].first;
      blocks += t->is_sharded(i);
    }
    EXPECT_EQ(t->step_count(), 3);
    const float loss = t->step(test::tp_batch("gpt", 3, 0, kRows));
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_GT(blocks, 0);
    EXPECT_NEAR(loss, alone_loss, std::fabs(alone_loss) * test::tp_longest_sum("gpt", kRows) * test::kUnitRoundoff)
        << label << " rank " << comm->rank();
  });
}

TEST(TensorParallel, CheckpointsLoadUnderAnotherGridOrOnOneRank) {
  expect_checkpoint_moves(grid_of(2, 2, 1), SequenceParallel::kNone, grid_of(1, 2, 2), SequenceParallel::kNone,
                          "x2_y2_to_y2_z2");
}

// The same for Megatron's sequence parallelism on the 2D grid: saved under 2 x 2 x 1 with it, the
// checkpoint resumes on one process and under 1 x 2 x 2 with it.
TEST(TensorParallel, CheckpointsOfSequenceParallelismOnTheTwoDimensionalGridLoadOnOneRank) {
  expect_checkpoint_moves(grid_of(2, 2, 1), SequenceParallel::kMegatron, grid_of(1, 2, 2), SequenceParallel::kMegatron,
                          "x2_y2_sequence_to_y2_z2_sequence");
}

// Local SGD and co2 over the data axis of a tensor-parallel or pipelined model: data 2 x
// tensor_y 2 (or x pipeline_stages 2) must
// train like the same mode over 2 replicated ranks (each data replica against the reference rank
// of the same index), within the bound of tp_reference.h measured on the reference itself (a run
// from parameters moved by one ulp). The outer clip is set to bind and co2's staleness penalty is
// on, so a norm taken over a rank's blocks instead of the whole model fails the comparison
// (under ZeRO 1 of the outer state too: each rank's blocks of its part of the model).
struct OuterCase {
  std::string model;
  Preset preset;
  double clip;
  bool penalty;
  std::string label;
  bool pipeline = false;  // the model over 2 pipeline stages (2 micro-batches) instead of tensor_y 2
  // plan.outer_fragments: cut by the whole model's parameters, so the replicated reference's
  // fragments are the same parameters. empty_fragment: a stage holds none of one (the MLP's
  // fragment 0 is its first weight alone), so it sends fewer averages than the reference's ranks.
  int fragments = 1;
  bool empty_fragment = false;
  int zero_stage = 0;  // 1: ZeRO 1 of the outer state (localsgd / diloco), each fragment's blocks
  // plan.shard_group (with zero_stage 1-3): 4 data ranks in 2 replicas of 2, against the same
  // groups of replicated ranks — the replica's sums then span its positions and the model axis.
  int shard_group = 1;
};

class TensorParallelOuter : public ::testing::TestWithParam<OuterCase> {
 protected:
  static constexpr int64_t kSteps = 6, kRows = 4, kTau = 2;
  // Data-parallel ranks: 2, or 2 replicas of the shard group.
  static int data_ranks() { return GetParam().shard_group > 1 ? 2 * GetParam().shard_group : 2; }

  // The case's plan with `degree` model ranks a replica: tensor_y, or pipeline stages.
  PlanConfig plan_for(int degree) const {
    const OuterCase& c = GetParam();
    PlanConfig p = preset(c.preset, kTau);
    p.outer.clip_threshold = c.clip;
    p.outer.staleness_penalty = c.penalty;
    p.outer_fragments = c.fragments;
    p.zero_stage = c.zero_stage;
    p.shard_group = c.shard_group;
    if (c.pipeline) {
      p.pipeline.stages = degree;
      p.pipeline.micro_batches = degree;
    } else {
      p.tensor.y = degree;
    }
    return p;
  }
  std::unique_ptr<Trainer> make(const std::shared_ptr<transport::coll::UcxCommunicator>& comm, int degree) const {
    TrainerOptions o;
    o.seed = 1;
    o.num_threads = 1;
    return make_parallel_trainer(test::tp_model(GetParam().model, kRows), test::tp_optimizer(), o, plan_for(degree),
                                 comm);
  }
  // Steps [from, to) of the replica's rows.
  void train(Trainer& t, int replica, int64_t from, int64_t to) const {
    for (int64_t s = from; s < to; ++s) t.step(test::tp_batch(GetParam().model, s, replica * kRows, kRows));
  }
  // The mode over data_ranks() replicated ranks, plain and from parameters moved by one ulp: each data
  // rank's final parameters, with the bound the perturbed run measures (tp_reference.h).
  std::vector<test::TpReference> replicated_reference(ParallelStats* rank0_stats = nullptr) const {
    std::mutex mutex;
    const int data = data_ranks();
    std::vector<test::TpReference> ref(static_cast<size_t>(data));
    std::vector<std::map<std::string, Tensor>> control(static_cast<size_t>(data));
    for (bool perturb : {false, true})
      ct::run_ranks_shared(data, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
        auto t = make(comm, 1);
        if (perturb) test::perturb_by_one_ulp(*t);
        train(*t, comm->rank(), 0, kSteps);
        if (GetParam().zero_stage == 3) t->gather_parameters();  // released between steps
        std::lock_guard<std::mutex> lock(mutex);
        auto& out = perturb ? control[static_cast<size_t>(comm->rank())] : ref[static_cast<size_t>(comm->rank())].parameters;
        for (size_t i = 0; i < t->parameters().size(); ++i) {  // copies: ZeRO 3's live in its buckets
          Tensor copy = Tensor::empty(t->parameters()[i].shape(), t->parameters()[i].dtype());
          copy.copy_from(t->parameters()[i]);
          out[t->parameter_names()[i]] = copy;
        }
        if (!perturb && comm->rank() == 0 && rank0_stats) *rank0_stats = dynamic_cast<DataParallel&>(*t->step_hook()).stats();
      });
    double control_diff = 0;
    for (int r = 0; r < data; ++r)
      for (const auto& [name, p] : ref[static_cast<size_t>(r)].parameters) {
        const Tensor& q = control[static_cast<size_t>(r)].at(name);
        for (int64_t k = 0; k < p.numel(); ++k)
          control_diff = std::max(control_diff, static_cast<double>(std::fabs(p.data<float>()[k] - q.data<float>()[k])));
      }
    for (test::TpReference& r : ref) {
      r.control_diff = control_diff;
      r.longest_sum = test::tp_longest_sum(GetParam().model, kRows);
    }
    return ref;
  }
};

TEST_P(TensorParallelOuter, MatchesTheModeOverReplicatedRanks) {
  const OuterCase& c = GetParam();
  std::mutex mutex;
  ParallelStats ref_stats;
  const std::vector<test::TpReference> ref = replicated_reference(&ref_stats);
  // The reference exercises what is under test: the clip binds, the penalty scales.
  EXPECT_GT(ref_stats.last_momentum_norm, c.clip) << c.label << ": the outer clip never binds";
  if (c.penalty) {
    EXPECT_LT(ref_stats.last_staleness_scale, 1.0) << c.label << ": the penalty does nothing";
  }
  int64_t fewest_syncs = ref_stats.outer_syncs;
  ct::run_ranks_shared(2 * data_ranks(), ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, 2);
    train(*t, comm->rank() / 2, 0, kSteps);
    if (c.zero_stage == 3) t->gather_parameters();  // released between steps
    const test::TpReference& want = ref[static_cast<size_t>(comm->rank() / 2)];
    const test::TpDiff d = test::tp_parameter_diff(*t, want);
    const ParallelStats st = dynamic_cast<DataParallel&>(*t->step_hook()).stats();
    std::lock_guard<std::mutex> lock(mutex);
    std::printf("%s rank %d: max |param - reference| %.3g (%s), bound %.3g (control %.3g); %d blocks; %lld outer "
                "all-reduces (reference rank 0: %lld)\n",
                c.label.c_str(), comm->rank(), d.max_abs, d.worst.c_str(), want.parameter_bound(), want.control_diff,
                d.blocks, static_cast<long long>(st.outer_syncs), static_cast<long long>(ref_stats.outer_syncs));
    EXPECT_EQ(st.outer_fragments, c.fragments);
    fewest_syncs = std::min(fewest_syncs, st.outer_syncs);
    EXPECT_EQ(d.blocks > 0, !c.pipeline);
    EXPECT_LE(d.max_abs, want.parameter_bound()) << c.label << " rank " << comm->rank() << ": parameter " << d.worst;
  });
  EXPECT_EQ(fewest_syncs < ref_stats.outer_syncs, c.empty_fragment) << c.label;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The outer state is written in the whole model's layout: saved mid-round (after the first
// round's end, its average in flight: co2's merge pending) by the replicated ranks, it resumes
// under 2 model ranks a replica (tensor_y 2, or 2 pipeline stages), each rank from its replica's
// file; there the parameters and every outer vector, saved again, are the file's bit for bit,
// and the rest of the run matches the uninterrupted replicated one within the reference's bound.
// Then the other way: saved by the 2-rank replicas at the same step, resumed by replicated ranks.
// A rank handed another replica's file, or a file of another replica count, is refused.
TEST_P(TensorParallelOuter, OuterStateResumesUnderAnotherLayout) {
  const OuterCase& c = GetParam();
  if (c.zero_stage > 0)
    GTEST_SKIP() << "ZeRO 1 saves each rank's blocks of the outer state (parallel.zero.*): they load under the same "
                    "world, rank and layout only (dp_rank diloco-zero1-f4-resume resumes them bit for bit)";
  constexpr int64_t kStop = kTau;
  const std::vector<test::TpReference> ref = replicated_reference();
  const std::string dir = ::testing::TempDir();
  auto path = [&](const char* from, int rank) {
    return dir + "tp_outer_" + c.label + "_" + from + ".rank" + std::to_string(rank);
  };
  std::mutex mutex;
  constexpr int kData = 2;  // no shard groups here (ZeRO skipped above)
  std::vector<std::map<std::string, Tensor>> at_save(kData);  // each replica's whole parameters
  // Saves after kStop steps under `degree` model ranks a replica; each rank its own file.
  auto save = [&](int degree, const char* from) {
    ct::run_ranks_shared(kData * degree, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      auto t = make(comm, degree);
      train(*t, comm->rank() / degree, 0, kStop);
      checkpoint::CheckpointExtra extra;
      dynamic_cast<DataParallel&>(*t->step_hook()).save_state(extra);
      checkpoint::save_checkpoint(*t, path(from, comm->rank()), extra);
      std::map<std::string, Tensor> whole = test::tp_whole_model(*t);
      std::lock_guard<std::mutex> lock(mutex);
      if (comm->rank() % degree == 0) at_save[static_cast<size_t>(comm->rank() / degree)] = std::move(whole);
    });
  };
  // Resumes under `degree` model ranks a replica from files saved under `saved_degree`.
  auto resume = [&](int degree, int saved_degree, const char* from) {
    ct::run_ranks_shared(kData * degree, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      const int replica = comm->rank() / degree;
      auto t = make(comm, degree);
      auto& dp = dynamic_cast<DataParallel&>(*t->step_hook());
      checkpoint::CheckpointExtra file;
      // Replica 1 takes its last rank's file: under 2 stages, one holding none of a fragment.
      checkpoint::load_checkpoint(*t, path(from, replica * saved_degree + (replica == 1 ? saved_degree - 1 : 0)), &file);
      dp.load_state(file);
      checkpoint::CheckpointExtra again;
      dp.save_state(again);
      const std::map<std::string, Tensor> whole = test::tp_whole_model(*t);
      int outer = 0, differ = 0;
      for (const auto& [name, v] : again.tensors) {
        if (name.rfind("parallel.", 0) != 0 || name.find('/') == std::string::npos) continue;
        ++outer;
        differ += file.tensors.count(name) == 0 || !same_bits(v, file.tensors.at(name));
      }
      for (const auto& [name, p] : whole) differ += !same_bits(p, at_save[static_cast<size_t>(replica)].at(name));
      train(*t, replica, kStop, kSteps);
      const test::TpReference& want = ref[static_cast<size_t>(replica)];
      const test::TpDiff d = test::tp_parameter_diff(*t, want);
      std::lock_guard<std::mutex> lock(mutex);
      std::printf("%s %s -> %d model ranks, rank %d: %d outer vectors and %zu parameters, %d differ from the file; "
                  "then max |param - reference| %.3g (%s), bound %.3g\n",
                  c.label.c_str(), from, degree, comm->rank(), outer, whole.size(), differ, d.max_abs, d.worst.c_str(),
                  want.parameter_bound());
      EXPECT_EQ(outer, 4 * static_cast<int>(whole.size())) << c.label << " rank " << comm->rank();
      EXPECT_EQ(differ, 0) << c.label << " rank " << comm->rank();
      if (c.preset == Preset::kCo2) {  // the save came with the round's average still to merge
        EXPECT_EQ(file.ints.at("parallel.have_reduced"), 1) << c.label << " rank " << comm->rank();
      }
      EXPECT_LE(d.max_abs, want.parameter_bound()) << c.label << " rank " << comm->rank() << ": parameter " << d.worst;
    });
  };
  save(1, "replicated");
  resume(2, 1, "replicated");
  save(2, "split");
  resume(1, 2, "split");
  // Replica 1's file on replica 0's rank; a file of one replica among two on a world of one.
  ct::run_ranks_shared(kData, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, 1);
    checkpoint::CheckpointExtra file;
    checkpoint::load_checkpoint(*t, path("split", 2 * (1 - comm->rank())), &file);
    expect_error([&] { dynamic_cast<DataParallel&>(*t->step_hook()).load_state(file); }, Status::kInvalidArgument,
                 "load a file saved by a rank of replica");
  });
  ct::run_ranks_shared(1, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, 1);
    checkpoint::CheckpointExtra file;
    checkpoint::load_checkpoint(*t, path("split", 0), &file);
    expect_error([&] { dynamic_cast<DataParallel&>(*t->step_hook()).load_state(file); }, Status::kInvalidArgument,
                 "one of 2 data-parallel replicas; the plan has 1");
  });
  for (const char* from : {"replicated", "split"})
    for (int r = 0; r < 2 * kData; ++r) std::remove(path(from, r).c_str());
}

// Shard groups under model axes keep each rank's shard of the inner and outer state
// (parallel.zero.*, the outer vectors as the shard): saved mid-run (co2: the round's average
// still to merge) by every rank, each rank resumes from its own file under the same layout and
// ends bit for bit where the uninterrupted run ended.
TEST_P(TensorParallelOuter, ShardGroupsResumeUnderTheSameLayoutBitForBit) {
  const OuterCase& c = GetParam();
  if (c.shard_group == 1) GTEST_SKIP() << "no shard groups (OuterStateResumesUnderAnotherLayout)";
  constexpr int64_t kStop = kTau;  // the first round just ended: co2's average still to merge
  const int world = 2 * data_ranks();
  const std::string dir = ::testing::TempDir();
  auto path = [&](int rank) { return dir + "tp_groups_" + c.label + ".rank" + std::to_string(rank); };
  std::mutex mutex;
  std::vector<std::vector<Tensor>> whole_run(static_cast<size_t>(world));
  ct::run_ranks_shared(world, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, 2);
    train(*t, comm->rank() / 2, 0, kStop);
    checkpoint::CheckpointExtra extra;
    dynamic_cast<DataParallel&>(*t->step_hook()).save_state(extra);
    checkpoint::save_checkpoint(*t, path(comm->rank()), extra);
    train(*t, comm->rank() / 2, kStop, kSteps);
    if (c.zero_stage == 3) t->gather_parameters();
    std::lock_guard<std::mutex> lock(mutex);
    for (const Tensor& p : t->parameters()) {
      Tensor copy = Tensor::empty(p.shape(), p.dtype());
      copy.copy_from(p);
      whole_run[static_cast<size_t>(comm->rank())].push_back(copy);
    }
  });
  ct::run_ranks_shared(world, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    auto t = make(comm, 2);
    checkpoint::CheckpointExtra file;
    checkpoint::load_checkpoint(*t, path(comm->rank()), &file);
    dynamic_cast<DataParallel&>(*t->step_hook()).load_state(file);
    train(*t, comm->rank() / 2, kStop, kSteps);
    if (c.zero_stage == 3) t->gather_parameters();
    int differ = 0;
    const std::vector<Tensor>& want = whole_run[static_cast<size_t>(comm->rank())];
    for (size_t i = 0; i < t->parameters().size(); ++i) differ += !same_bits(t->parameters()[i], want[i]);
    std::lock_guard<std::mutex> lock(mutex);
    std::printf("%s rank %d: resumed at step %lld, %d of %zu parameters differ from the uninterrupted run\n",
                c.label.c_str(), comm->rank(), static_cast<long long>(kStop), differ, want.size());
    EXPECT_EQ(file.ints.at("parallel.shard_group"), c.shard_group) << c.label;
    if (c.preset == Preset::kCo2) {
      EXPECT_EQ(file.ints.at("parallel.have_reduced"), 1) << c.label << " rank " << comm->rank();
    }
    EXPECT_EQ(differ, 0) << c.label << " rank " << comm->rank();
  });
  for (int r = 0; r < world; ++r) std::remove(path(r).c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Modes, TensorParallelOuter,
    ::testing::Values(OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2"},
                      OuterCase{"mlp", Preset::kCo2, 0.02, true, "mlp_co2"},
                      OuterCase{"gpt", Preset::kSlowMo, 0.02, false, "gpt_slowmo"},
                      OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2_pipeline", true},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_pipeline", true},
                      OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2_f2", false, 2},
                      OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2_pipeline_f2", true, 2},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_pipeline_f2", true, 2},
                      OuterCase{"mlp", Preset::kCo2, 0.02, true, "mlp_co2_pipeline_f2", true, 2, true},
                      OuterCase{"mlp", Preset::kDiLoCo, 0.02, false, "mlp_diloco_pipeline_f2", true, 2, true},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_zero1", false, 1, false, 1},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_zero1_f2", false, 2, false, 1},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_pipeline_zero1_f2", true, 2, false, 1},
                      OuterCase{"mlp", Preset::kDiLoCo, 0.02, false, "mlp_diloco_pipeline_zero1_f2", true, 2, true, 1},
                      OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2_zero2_g2", false, 1, false, 2, 2},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_zero3_g2", false, 1, false, 3, 2},
                      OuterCase{"mlp", Preset::kCo2, 0.02, true, "mlp_co2_zero1_g2", false, 1, false, 1, 2},
                      OuterCase{"gpt", Preset::kDiLoCo, 0.02, false, "gpt_diloco_pipeline_zero3_g2", true, 1, false, 3, 2},
                      OuterCase{"gpt", Preset::kCo2, 0.02, true, "gpt_co2_pipeline_zero2_g2_f2", true, 2, true, 2, 2},
                      OuterCase{"mlp", Preset::kLocalSgd, 0.02, false, "mlp_localsgd_pipeline_zero3_g2_f2", true, 2, true, 3, 2}),
    [](const ::testing::TestParamInfo<OuterCase>& i) { return i.param.label; });

}  // namespace
}  // namespace cohort::parallel
