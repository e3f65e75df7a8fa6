// Tensor parallelism as a rewrite of the OP-DAG: the single-rank forward graph of a model becomes
// each rank's part of it — parameters cut into blocks (Value::shard), collective operators
// (core/ops/collective.h) inserted as ordinary nodes — and autodiff then differentiates the
// rank's graph, collectives included. Every rank rewrites the same model the same way, so no rank
// needs another's graph.
//
// What is split (Megatron-LM, Shoeybi et al. 2019, section 3): pairs of linear layers where the
// first one's output reaches the second only through operators that work on each slice of the
// features alone — elementwise activations, or attention, whose heads are independent. The first
// layer is column-parallel (its out-features cut over the axis: rank r computes its slice of the
// hidden features, or its heads), the second row-parallel (its in-features cut: rank r multiplies
// its slice and the partial products are summed by one all_reduce). copy_to_axis before the first
// layer sums the input gradient in backward. So a pair costs one all-reduce forward and one
// backward, and nothing else moves: in a GPT block, c_attn -> attention -> attn.c_proj and
// mlp.c_fc -> gelu -> mlp.c_proj; in the MLP, fc1 -> relu -> fc2. Layernorms and position
// embeddings stay whole on every rank.
//
// The vocabulary (Megatron's section 3 too): when the loss is cross_entropy of an output head
// whose [V, C] weight nothing else reads but embedding lookups (the GPT's tied wte), that weight
// is cut along V over Y. The lookup takes this rank's rows (zeros for others' ids) and sums over
// Y; the head makes the logits of this rank's rows only, and the loss comes from 3 floats a row
// gathered over Y (core/ops/vocab_parallel.cpp): the [B, T, V] logits are never gathered whole in
// training (the model's 'logits' output is, for a caller that asks for it).
//
// The one thing to know: a fused q|k|v projection is cut as 3 groups (shard.h), so rank r holds
// the q, k and v rows of heads [r H/T, (r+1) H/T) and attention runs on H/T heads unchanged. A
// row-parallel layer's bias is added once, after the all-reduce. Every block starts as the block
// of the single-rank initialisation, so a run matches single-rank training from step 0.
//
// Grid (plan.h, TensorGrid; AxoNN, Singh et al. 2024, after Agarwal's 3D matrix product): the
// first layer of a pair cuts its out-features over Y and its in-features over X, the second the
// other way round, so the first one's output blocks (over Y) are the second one's input blocks
// and nothing is re-laid out between them. Around a pair: the input's X block is taken
// (split_to_axis), the first product summed over X (all_reduce) and the second over Y, and the
// output's X blocks gathered (gather_from_axis); copy_to_axis before each layer sums its input
// gradient over the axis that cuts its out-features. Z cuts every weight block once more along its
// rows; a block is gathered before use (all_gather: the gradient reduce-scattered), in forward and
// again in backward rather than kept between them, as FSDP does (TensorParallelGraph::recompute).
// The Z ranks of a replica step on their own rows, so every other parameter's gradient is summed
// over Z (copy_to_axis) and the loss is the mean of theirs (all_reduce of each rank's loss / Z).
// Megatron's 1D is Y alone: a collective over an axis of one rank is left out.
#pragma once

#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/parallel/plan.h"

namespace cohort::parallel {

// Throws kInvalidPlan naming the field for a degree < 1 or > 65536 (or a product above it), and
// kUnsupported for what is not implemented yet (ZeRO stage 3 with a tensor degree > 1; stages 1
// and 2 shard over the data axis). Called by validate().
void validate_tensor_grid(const PlanConfig& plan);

// This rank's coordinates on the tensor axes.
struct TensorPosition {
  int x = 0, y = 0, z = 0;
};

// One column-parallel / row-parallel pair found in a model (node names of the single-rank graph).
struct LinearPair {
  std::string column, row;
  std::vector<std::string> between;  // the nodes from one to the other (activation, attention)
};

struct TensorParallelGraph {
  Graph graph;  // this rank's forward graph (with the model's inputs, outputs and loss names)
  std::vector<LinearPair> pairs;
  // Nodes the trainer runs again in backward rather than keeping (TrainerOptions::recompute_nodes):
  // the all-gathers of the tokens under sequence parallelism, as Megatron gathers them again, and
  // of the weight blocks over Z, as FSDP does.
  std::vector<std::string> recompute;
};

// The pairs the rewrite would split in `model` (a forward graph), in graph order.
std::vector<LinearPair> find_linear_pairs(const Graph& model);

// This rank's part of `model` (a single-rank forward graph with a loss; under Z, of this rank's
// rows) under `grid`. Throws kInvalidPlan naming the node and the numbers when a degree does not
// divide what it cuts (features of a split layer, the heads of attention, the rows of a weight
// block), or when the model has no pair to split; kUnsupported for grids validate_tensor_grid
// refuses.
//
// sequence_parallel (Megatron-LM's, Korthikanti et al. 2022): the regions between the pairs
// (layernorms, residual adds, dropout, the embeddings) hold [B, T / Y, C], each rank its block of
// the tokens, so their activations shrink by Y too: a pair's entry f becomes an all_gather of the
// tokens and its exit g a reduce_scatter of them (the same bytes as the all_reduce they replace);
// the whole parameters read there have their gradients summed over Y, and the position table is
// read by token blocks. With X > 1 the regions are whole over X (each X rank of a Y block holds
// the same tokens) and a pair takes its X block of the features before gathering the tokens and
// gathers the X blocks after scattering them (derived at shard_for_tensor_parallel); Z is as
// without it. Needs Y > 1, [B, T, C] activations, T divisible by Y and the vocabulary-parallel
// head (kInvalidPlan naming what is missing).
//
// SequenceParallel::kAllToAll (DeepSpeed-Ulysses') instead cuts nothing by features: Y's ranks
// each hold their block of the tokens everywhere (the inputs with a token axis split, every
// parameter whole with its gradient summed over Y, the position table read by token blocks),
// and around attention an all_to_all exchanges them for every token of H / Y heads and back. The
// loss is the mean of the ranks' (all_reduce of each one's / Y). Needs Y > 1 dividing the heads
// and the tokens, and X = Z = 1 (kUnsupported otherwise).
TensorParallelGraph shard_for_tensor_parallel(const Graph& model, const TensorGrid& grid,
                                              const TensorPosition& position,
                                              SequenceParallel sequence = SequenceParallel::kNone);

}  // namespace cohort::parallel
