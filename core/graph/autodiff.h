// Reverse-mode automatic differentiation that writes the backward pass into the same graph, so
// communication nodes inserted later by parallel plans are differentiated like any operator.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph/graph.h"

namespace cohort {

// Appends the nodes that compute d(loss)/d(v) for every v in wrt (parameters or inputs) and
// returns, for each, the id of its gradient value (same shape and dtype as v), or -1 when the
// loss does not depend on it. Throws kUnsupported naming the operator if a needed backward
// rule is missing.
//
// Activation checkpointing (Chen et al., "Training deep nets with sublinear memory cost", 2016):
// `recompute` lists blocks, each a set of forward nodes (ascending ids, no node in two blocks).
// Backward reads none of a block's values: just before the backward nodes of a block (when
// autodiff reaches its last node), a copy of the block's forward nodes is appended that
// recomputes them from what the block reads from outside (its input, the parameters), and the
// block's backward rules read the copies. So forward's values inside a block die within forward
// (the executor frees a value after its last reader) and only one block's are alive again at a
// time in backward. The copies run the same kernels on the same inputs in the same order, so
// they reproduce forward's values bit for bit — dropout too: its copy applies the mask of the
// forward node (dropout_grad with that node's id, the kernel dropout's backward uses). Throws
// kInvalidArgument for a block holding a backward node, a node twice or an unknown node.
//
// `recompute_on_read` lists single forward nodes whose outputs backward reads from a copy of the
// node added just before the first backward rule that reads them (sequence parallelism's token
// all-gathers: the whole sequence is gathered again for the layer's gradients instead of kept
// through forward). A node inside a `recompute` block is recomputed with its block.
std::vector<ValueId> build_backward(Graph& graph, ValueId loss, const std::vector<ValueId>& wrt,
                                    const std::vector<std::vector<NodeId>>& recompute = {},
                                    const std::vector<NodeId>& recompute_on_read = {});

// The transformer blocks of a graph by node name, for activation checkpointing: the forward
// nodes named "<prefix><l>.<rest>" (l a decimal layer number) form block l, in order of l. The
// GPT builder names every node of layer l "h.<l>...." (core/models/gpt.h), and tensor parallelism
// (core/parallel/tensor_parallel.h) names the nodes it inserts after the node they serve, so its
// rank graphs keep the blocks. Empty when no node is named so.
std::vector<std::vector<NodeId>> blocks_by_name(const Graph& graph, const std::string& prefix = "h.");

}  // namespace cohort
