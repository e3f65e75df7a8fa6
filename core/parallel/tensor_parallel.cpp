// The tensor-parallel rewrite: finding column/row-parallel pairs of linear layers and writing a
// rank's graph with its parameter blocks and collectives. See tensor_parallel.h.
#include "core/parallel/tensor_parallel.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/base/error.h"

namespace cohort::parallel {

namespace {

constexpr int kMaxDegree = 1 << 16;

// Operators a pair may have between its two layers: each works on a slice of the features
// alone, given the slice's own parameters (none here) — so a rank can run it on its slice.
bool is_slice_local(const std::string& op) {
  return op == "relu" || op == "gelu" || op == "tanh" || op == "attention";
}

bool is_linear(const std::string& op) { return op == "linear" || op == "gelu_linear"; }

struct Uses {
  std::vector<std::vector<NodeId>> readers;  // value -> nodes reading it
  std::set<ValueId> outputs;                 // graph outputs and the loss
};

Uses uses_of(const Graph& g) {
  Uses u;
  u.readers.resize(g.values().size());
  for (const Node& n : g.nodes())
    for (ValueId i : n.inputs) u.readers[static_cast<size_t>(i)].push_back(n.id);
  u.outputs.insert(g.outputs().begin(), g.outputs().end());
  if (g.loss() >= 0) u.outputs.insert(g.loss());
  return u;
}

// The linear node's weight and bias are parameters that only it reads.
bool owns_parameters(const Graph& g, const Uses& u, const Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const ValueId p = n.inputs[i];
    if (g.value(p).kind != ValueKind::kParameter || u.readers[static_cast<size_t>(p)].size() != 1) return false;
  }
  return true;
}

// The only node reading output 0 of n (and nothing else reads n's other outputs), or -1.
NodeId sole_reader(const Graph& g, const Uses& u, const Node& n) {
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (!u.readers[static_cast<size_t>(n.outputs[k])].empty()) return -1;
  const ValueId v = n.outputs[0];
  const auto& r = u.readers[static_cast<size_t>(v)];
  if (r.size() != 1 || u.outputs.count(v)) return -1;
  const Node& next = g.node(r[0]);
  // Read once, as the first input (an activation's x, attention's qkv, a linear layer's x).
  if (next.inputs.empty() || next.inputs[0] != v ||
      std::count(next.inputs.begin(), next.inputs.end(), v) != 1)
    return -1;
  return next.id;
}

struct Pair {
  NodeId column, row;
  std::vector<NodeId> between;
};

std::vector<Pair> find_pairs(const Graph& g) {
  const Uses u = uses_of(g);
  std::vector<Pair> pairs;
  std::set<NodeId> taken;
  for (const Node& a : g.nodes()) {
    if (a.op->name != "linear" || taken.count(a.id) || !owns_parameters(g, u, a)) continue;
    Pair p{a.id, -1, {}};
    NodeId next = sole_reader(g, u, a);
    while (next >= 0 && is_slice_local(g.node(next).op->name)) {
      p.between.push_back(next);
      next = sole_reader(g, u, g.node(next));
    }
    if (next < 0 || !is_linear(g.node(next).op->name) || taken.count(next) || !owns_parameters(g, u, g.node(next)))
      continue;
    p.row = next;
    taken.insert(a.id);
    taken.insert(next);
    pairs.push_back(p);
  }
  return pairs;
}

// How a pair's column layer cuts its out-features: 3 groups when attention (q|k|v) follows.
int64_t feature_groups(const Graph& g, const Pair& p) {
  for (NodeId n : p.between)
    if (g.node(n).op->name == "attention") return 3;
  return 1;
}

// kInvalidPlan unless `degree` divides what the pair cuts.
void check_divides(const Graph& g, const Pair& p, int degree, const char* field) {
  const Node& col = g.node(p.column);
  const int64_t out = g.value(col.inputs[1]).type.shape[0];
  const int64_t groups = feature_groups(g, p);
  COHORT_CHECK(out % (groups * degree) == 0, Status::kInvalidPlan, "plan: ", field, " = ", degree,
               " does not divide the ", out / groups, " out-features", groups > 1 ? " per q/k/v group" : "", " of linear '",
               col.name, "'");
  const Node& row = g.node(p.row);
  const int64_t in = g.value(row.inputs[1]).type.shape[1];
  COHORT_CHECK(in % degree == 0, Status::kInvalidPlan, "plan: ", field, " = ", degree, " does not divide the ", in,
               " in-features of ", row.op->name, " '", row.name, "'");
  for (NodeId n : p.between) {
    const Node& b = g.node(n);
    if (b.op->name != "attention") continue;
    const int64_t heads = b.attrs.get_int("heads");
    COHORT_CHECK(heads % degree == 0, Status::kInvalidPlan, "plan: ", field, " = ", degree, " does not divide the ",
                 heads, " heads of attention '", b.name, "'");
  }
}

// Writes a rank's graph: parameters first (in the model's order, blocks where a pair cuts them),
// then every node, with the pairs' collectives around them.
class Rewriter {
 public:
  Rewriter(const Graph& model, const std::vector<Pair>& pairs, int degree, int index, std::string axis)
      : m_(model), degree_(degree), index_(index), axis_(std::move(axis)), map_(model.values().size(), -1) {
    for (const Pair& p : pairs) {
      column_[p.column] = feature_groups(model, p);
      row_.insert(p.row);
      for (NodeId n : p.between) between_.insert(n);
    }
  }

  Graph run() {
    plan_parameter_cuts();
    for (const Value& v : m_.values()) {
      if (v.kind == ValueKind::kInput) map_[static_cast<size_t>(v.id)] = g_.add_input(v.name, v.type.dtype, v.type.shape);
      if (v.kind != ValueKind::kParameter) continue;
      auto cut = cuts_.find(v.id);
      Shape shape = v.type.shape;
      if (cut != cuts_.end()) shape[static_cast<size_t>(cut->second.dim)] /= degree_;
      const ValueId id = g_.add_parameter(v.name, v.type.dtype, shape, v.init);
      if (cut != cuts_.end()) g_.set_shard(id, {cut->second});
      map_[static_cast<size_t>(v.id)] = id;
    }
    for (const Node& n : m_.nodes()) add_node(n);
    for (ValueId o : m_.outputs()) g_.mark_output(mapped(o));
    if (m_.loss() >= 0) g_.set_loss(mapped(m_.loss()));
    return std::move(g_);
  }

 private:
  ValueId mapped(ValueId v) const { return map_[static_cast<size_t>(v)]; }
  std::vector<ValueId> mapped(const std::vector<ValueId>& vs) const {
    std::vector<ValueId> r;
    for (ValueId v : vs) r.push_back(mapped(v));
    return r;
  }
  Attrs axis_attr() const {
    Attrs a;
    a.set("axis", axis_);
    return a;
  }

  void plan_parameter_cuts() {
    for (const auto& [node, groups] : column_) {
      const Node& n = m_.node(node);
      for (size_t i = 1; i < n.inputs.size(); ++i)  // weight [out, in] and bias [out]: out-features
        cuts_[n.inputs[i]] = ShardCut{0, groups, degree_, index_, axis_};
    }
    for (NodeId node : row_) {  // weight [out, in]: in-features; the bias stays whole
      const Node& n = m_.node(node);
      cuts_[n.inputs[1]] = ShardCut{1, 1, degree_, index_, axis_};
    }
  }

  void add_node(const Node& n) {
    std::vector<ValueId> in = mapped(n.inputs);
    std::vector<ValueId> out;
    if (column_.count(n.id)) {
      // f: the identity forward, the sum of the ranks' input gradients backward.
      in[0] = g_.add_op("copy_to_axis", n.name + ".copy_to_" + axis_, {in[0]}, axis_attr()).at(0);
      out = g_.add_op(n.op->name, n.name, in, n.attrs);
    } else if (row_.count(n.id)) {
      // The partial product of this rank's in-features; g: summed over the axis; then the bias.
      const bool bias = in.size() > 2;
      const ValueId bias_value = bias ? in[2] : -1;
      if (bias) in.pop_back();
      out = g_.add_op(n.op->name, n.name + ".partial", in, n.attrs);
      ValueId y = g_.add_op("all_reduce", bias ? n.name + ".all_reduce" : n.name, {out[0]}, axis_attr()).at(0);
      if (bias) y = g_.add_op("add", n.name, {y, bias_value}, Attrs()).at(0);
      out[0] = y;
    } else if (between_.count(n.id) && n.op->name == "attention") {
      Attrs a = n.attrs;
      a.set("heads", n.attrs.get_int("heads") / degree_);
      out = g_.add_op(n.op->name, n.name, in, a);
    } else {
      out = g_.add_op(n.op->name, n.name, in, n.attrs);
    }
    COHORT_ASSERT(out.size() == n.outputs.size(), n.name, ": the rewrite changed the number of outputs");
    for (size_t k = 0; k < out.size(); ++k) map_[static_cast<size_t>(n.outputs[k])] = out[k];
  }

  const Graph& m_;
  const int degree_, index_;
  const std::string axis_;
  Graph g_;
  std::vector<ValueId> map_;                   // model value -> rank graph value
  std::map<NodeId, int64_t> column_;           // column-parallel node -> its feature groups
  std::set<NodeId> row_, between_;
  std::map<ValueId, ShardCut> cuts_;           // model parameter -> its cut
};

}  // namespace

void validate_tensor_grid(const PlanConfig& p) {
  const std::pair<const char*, int> fields[] = {{"tensor_x", p.tensor.x}, {"tensor_y", p.tensor.y},
                                                {"tensor_z", p.tensor.z}};
  for (const auto& [field, v] : fields)
    COHORT_CHECK(v >= 1 && v <= kMaxDegree, Status::kInvalidPlan, "plan: ", field, " = ", v, " must be in 1..",
                 kMaxDegree);
  COHORT_CHECK(p.tensor.x == 1 && p.tensor.z == 1, Status::kUnsupported, "plan: tensor_x = ", p.tensor.x,
               ", tensor_z = ", p.tensor.z,
               ": the 2D and 3D tensor grids (AxoNN's X and Z axes) are not implemented yet; Megatron's 1D tensor "
               "parallelism is tensor_y (TODO(#27))");
  COHORT_CHECK(p.tensor.degree() == 1 || p.zero_stage == 0, Status::kUnsupported, "plan: ZeRO stage ", p.zero_stage,
               " with tensor parallelism (tensor_y = ", p.tensor.y,
               ") is not implemented yet: ZeRO's gradient norm would miss the tensor axes (TODO(#27))");
}

std::vector<LinearPair> find_linear_pairs(const Graph& model) {
  std::vector<LinearPair> out;
  for (const Pair& p : find_pairs(model)) {
    LinearPair l{model.node(p.column).name, model.node(p.row).name, {}};
    for (NodeId n : p.between) l.between.push_back(model.node(n).name);
    out.push_back(l);
  }
  return out;
}

TensorParallelGraph shard_for_tensor_parallel(const Graph& model, const TensorGrid& grid,
                                              const TensorPosition& position) {
  PlanConfig check;
  check.tensor = grid;
  validate_tensor_grid(check);
  COHORT_CHECK(model.loss() >= 0, Status::kInvalidState, "tensor parallelism: the model has no loss");
  for (const Node& n : model.nodes())
    COHORT_CHECK(!n.backward, Status::kInvalidArgument, "tensor parallelism: the model holds backward node '", n.name,
                 "': rewrite the forward graph, then differentiate");
  COHORT_CHECK(position.y >= 0 && position.y < grid.y, Status::kInvalidArgument, "tensor parallelism: y coordinate ",
               position.y, " is outside the grid's ", grid.y);
  const std::vector<Pair> pairs = find_pairs(model);
  TensorParallelGraph r;
  r.pairs = find_linear_pairs(model);
  if (grid.y == 1) {
    r.graph = model;
    return r;
  }
  COHORT_CHECK(!pairs.empty(), Status::kInvalidPlan, "plan: tensor_y = ", grid.y,
               " but the model has no pair of linear layers to split (a linear layer whose output reaches another "
               "only through relu, gelu, tanh or attention)");
  for (const Pair& p : pairs) check_divides(model, p, grid.y, "tensor_y");
  r.graph = Rewriter(model, pairs, grid.y, position.y, "y").run();
  return r;
}

}  // namespace cohort::parallel
