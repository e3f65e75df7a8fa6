// Reverse-mode autodiff over the OP-DAG. Nodes are visited in reverse id order (ids are
// topological); contributions to one value are summed with "add" nodes, unless the rule of the
// node visited last adds the sum so far itself (BackwardContext::accumulated_grad). A node of a
// recomputed block (activation checkpointing) runs its rule on a copy of itself whose inputs and
// outputs are the recomputed values; gradients stay keyed by the forward values.
#include "core/graph/autodiff.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/base/error.h"

namespace cohort {

namespace {
// Marks values on a path from any wrt value to the loss: only those need gradients.
std::vector<bool> relevant_values(const Graph& g, ValueId loss, const std::vector<ValueId>& wrt) {
  const size_t nv = g.values().size();
  std::vector<bool> from_wrt(nv, false), to_loss(nv, false);
  for (ValueId v : wrt) from_wrt[static_cast<size_t>(v)] = true;
  for (const Node& n : g.nodes()) {
    bool any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const auto& nd = n.op->nondiff_inputs;
      bool nondiff = std::find(nd.begin(), nd.end(), static_cast<int>(i)) != nd.end();
      if (!nondiff && from_wrt[static_cast<size_t>(n.inputs[i])]) any = true;
    }
    // A node that hands its outputs' gradient on although it has no input to differentiate
    // (pipe_recv: to the stage its output came from) starts a path of its own.
    if (any || n.op->source_of_gradient) for (ValueId o : n.outputs) from_wrt[static_cast<size_t>(o)] = true;
  }
  to_loss[static_cast<size_t>(loss)] = true;
  for (size_t k = g.nodes().size(); k-- > 0;) {
    const Node& n = g.nodes()[k];
    bool any = false;
    for (ValueId o : n.outputs) if (to_loss[static_cast<size_t>(o)]) any = true;
    if (any) for (ValueId i : n.inputs) to_loss[static_cast<size_t>(i)] = true;
  }
  std::vector<bool> r(nv);
  for (size_t i = 0; i < nv; ++i) r[i] = from_wrt[i] && to_loss[i];
  return r;
}

// The blocks to recompute, checked: block_of[node] = its block or -1.
std::vector<int> block_index(const Graph& g, const std::vector<std::vector<NodeId>>& recompute) {
  std::vector<int> block_of(g.nodes().size(), -1);
  for (size_t b = 0; b < recompute.size(); ++b) {
    COHORT_CHECK(!recompute[b].empty(), Status::kInvalidArgument, "activation checkpointing: block ", b, " is empty");
    for (NodeId n : recompute[b]) {
      COHORT_CHECK(n >= 0 && static_cast<size_t>(n) < g.nodes().size(), Status::kInvalidArgument,
                   "activation checkpointing: block ", b, " names node ", n, ", the graph has ", g.nodes().size());
      const Node& node = g.node(n);
      COHORT_CHECK(!node.backward, Status::kInvalidArgument, "activation checkpointing: block ", b,
                   " holds backward node '", node.name, "'");
      COHORT_CHECK(block_of[static_cast<size_t>(n)] < 0, Status::kInvalidArgument, "activation checkpointing: node '",
                   node.name, "' is in block ", block_of[static_cast<size_t>(n)], " and block ", b);
      block_of[static_cast<size_t>(n)] = static_cast<int>(b);
    }
  }
  return block_of;
}

// Appends the copy of a block's forward nodes (ascending ids), reading the copies of values the
// block produced: remap[v] = v's recomputed value.
void add_recomputation(Graph& g, std::vector<NodeId> nodes, std::unordered_map<ValueId, ValueId>& remap) {
  std::sort(nodes.begin(), nodes.end());
  for (NodeId id : nodes) {
    const Node node = g.node(id);  // copy: adding nodes may reallocate the vector
    std::vector<ValueId> inputs;
    for (ValueId i : node.inputs) {
      auto it = remap.find(i);
      inputs.push_back(it == remap.end() ? i : it->second);
    }
    std::vector<ValueId> outputs;
    if (node.op->name == "dropout") {
      // The same mask: the kernel keys it on the forward node's id (core/ops/dropout.cpp).
      Attrs a = node.attrs;
      a.set("node", static_cast<int64_t>(node.id));
      outputs = g.add_op("dropout_grad", node.name + ".recompute", inputs, a);
    } else {
      outputs = g.add_op(node.op->name, node.name + ".recompute", inputs, node.attrs);
    }
    for (size_t k = 0; k < outputs.size(); ++k) remap[node.outputs[k]] = outputs[k];
  }
}
}  // namespace

std::vector<std::vector<NodeId>> blocks_by_name(const Graph& g, const std::string& prefix) {
  std::map<int64_t, std::vector<NodeId>> blocks;
  for (const Node& n : g.nodes()) {
    if (n.backward || n.name.compare(0, prefix.size(), prefix) != 0) continue;
    size_t end = prefix.size();
    while (end < n.name.size() && std::isdigit(static_cast<unsigned char>(n.name[end]))) ++end;
    if (end == prefix.size() || end - prefix.size() > 9 || end >= n.name.size() || n.name[end] != '.') continue;
    blocks[std::stoll(n.name.substr(prefix.size(), end - prefix.size()))].push_back(n.id);
  }
  std::vector<std::vector<NodeId>> out;
  for (auto& [layer, nodes] : blocks) out.push_back(std::move(nodes));
  return out;
}

std::vector<ValueId> build_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt,
                                    const std::vector<std::vector<NodeId>>& recompute,
                                    const std::vector<NodeId>& recompute_on_read) {
  COHORT_CHECK(loss >= 0, Status::kInvalidState, "the graph has no loss");
  const TensorType& lt = g.value(loss).type;
  COHORT_CHECK(dtype_is_float(lt.dtype) && shape_numel(lt.shape) == 1, Status::kShapeMismatch,
               "loss ", g.describe(loss), " must be a float scalar");
  for (ValueId v : wrt) (void)g.value(v);
  std::vector<bool> relevant = relevant_values(g, loss, wrt);
  const std::vector<int> block_of = block_index(g, recompute);
  std::vector<bool> recomputed(recompute.size(), false);
  std::unordered_map<ValueId, ValueId> remap;  // forward value of a block -> its recomputed copy
  const size_t forward_nodes = g.nodes().size();
  std::vector<bool> on_read(forward_nodes, false);
  for (NodeId n : recompute_on_read) {
    COHORT_CHECK(n >= 0 && static_cast<size_t>(n) < forward_nodes && !g.node(n).backward, Status::kInvalidArgument,
                 "recompute on read: ", n, " is not a forward node");
    on_read[static_cast<size_t>(n)] = block_of[static_cast<size_t>(n)] < 0;  // a block recomputes it already
  }
  std::unordered_map<ValueId, ValueId> reread;  // forward value of an on-read node -> its copy
  std::vector<ValueId> grad(g.values().size(), -1);

  g.set_backward_mode(true);
  struct Restore { Graph& g; ~Restore() { g.set_backward_mode(false); } } restore{g};
  Attrs seed;
  seed.set("value", 1.0);
  grad[static_cast<size_t>(loss)] =
      g.add_op("fill_like", str_cat(g.value(loss).name, ".grad"), {loss}, seed).at(0);
  grad.resize(g.values().size(), -1);

  for (size_t k = forward_nodes; k-- > 0;) {
    const Node node = g.nodes()[k];  // copy: adding nodes may reallocate the vector
    std::vector<ValueId> gout;
    bool any = false;
    for (ValueId o : node.outputs) {
      ValueId go = relevant[static_cast<size_t>(o)] ? grad[static_cast<size_t>(o)] : -1;
      gout.push_back(go);
      any = any || go >= 0;
    }
    if (!any) continue;
    bool needs_input_grad = false;
    for (ValueId i : node.inputs) needs_input_grad = needs_input_grad || relevant[static_cast<size_t>(i)];
    if (!needs_input_grad && !node.op->source_of_gradient) continue;
    COHORT_CHECK(static_cast<bool>(node.op->backward), Status::kUnsupported, node.op->name, " '",
                 node.name, "' has no backward rule but the loss needs its gradient");
    Node reads = node;  // what the rule reads: the recomputed values inside a checkpointed block
    if (const int b = block_of[k]; b >= 0) {
      if (!recomputed[static_cast<size_t>(b)]) {
        add_recomputation(g, recompute[static_cast<size_t>(b)], remap);
        recomputed[static_cast<size_t>(b)] = true;
        grad.resize(g.values().size(), -1);
      }
      for (ValueId& v : reads.inputs) v = remap.count(v) ? remap.at(v) : v;
      for (ValueId& v : reads.outputs) v = remap.at(v);
    }
    for (ValueId& v : reads.inputs) {
      const NodeId p = g.value(v).producer;
      if (p < 0 || static_cast<size_t>(p) >= forward_nodes || !on_read[static_cast<size_t>(p)]) continue;
      if (!reread.count(v)) {  // the node's copy, just before the first rule that reads it
        add_recomputation(g, {p}, reread);
        grad.resize(g.values().size(), -1);
      }
      v = reread.at(v);
    }
    BackwardContext ctx(g, reads, gout);
    // Gradients summed so far, offered to the rule for inputs the node reads once.
    std::vector<ValueId> so_far(node.inputs.size(), -1);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (relevant[static_cast<size_t>(node.inputs[i])] &&
          std::count(node.inputs.begin(), node.inputs.end(), node.inputs[i]) == 1)
        so_far[i] = grad[static_cast<size_t>(node.inputs[i])];
    ctx.set_accumulated_grads(std::move(so_far));
    node.op->backward(ctx);
    grad.resize(g.values().size(), -1);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId in = node.inputs[i];
      ValueId gi = ctx.grad_inputs()[i];
      if (gi < 0 || !relevant[static_cast<size_t>(in)]) continue;
      ValueId& acc = grad[static_cast<size_t>(in)];
      if (acc < 0 || ctx.grad_input_is_total(i)) {
        acc = gi;
      } else {
        ValueId sum = g.add_op("add", str_cat(g.value(in).name, ".grad_acc", g.nodes().size()), {acc, gi}, Attrs()).at(0);
        grad.resize(g.values().size(), -1);
        grad[static_cast<size_t>(in)] = sum;
      }
    }
  }
  std::vector<ValueId> result;
  for (ValueId v : wrt) result.push_back(grad[static_cast<size_t>(v)]);
  return result;
}

}  // namespace cohort
