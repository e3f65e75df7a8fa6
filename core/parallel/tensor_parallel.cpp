// The tensor-parallel rewrite: finding column/row-parallel pairs of linear layers and writing a
// rank's graph with its parameter blocks and collectives. See tensor_parallel.h.
#include "core/parallel/tensor_parallel.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/base/error.h"
#include "core/ops/collective.h"

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

// The output head and the embeddings that can be cut along the vocabulary (Megatron's
// vocabulary parallelism): the loss is cross_entropy of logits made by a head whose [V, C] weight
// only it and embedding lookups read — matmul(x, W^T) (a GPT with tied weights), or
// reshape(linear(x, W)) — and which feed nothing else. None when the loss is made otherwise.
struct VocabHead {
  NodeId loss = -1, head = -1, linear = -1;  // cross_entropy; matmul or reshape; the reshape's linear
  NodeId embedding = -1;                     // an embedding reading the same weight (tied), or -1
  ValueId weight = -1, bias = -1, logits = -1;
  int64_t vocab = 0;
};

VocabHead find_vocab_head(const Graph& g, const std::vector<Pair>& pairs) {
  VocabHead h;
  if (g.loss() < 0) return h;
  const Uses u = uses_of(g);
  const Node& ce = g.node(g.value(g.loss()).producer);
  if (ce.op->name != "cross_entropy") return h;
  const ValueId logits = ce.inputs[0];
  for (NodeId r : u.readers[static_cast<size_t>(logits)])
    if (r != ce.id) return h;
  std::set<NodeId> in_pairs;
  for (const Pair& p : pairs) in_pairs.insert({p.column, p.row});
  const Node& head = g.node(g.value(logits).producer);
  const Node* product = &head;
  if (head.op->name == "reshape") {
    const ValueId flat = head.inputs[0];
    if (u.readers[static_cast<size_t>(flat)].size() != 1 || u.outputs.count(flat)) return h;
    product = &g.node(g.value(flat).producer);
    if (product->op->name != "linear") return h;
    h.linear = product->id;
    if (product->inputs.size() > 2) h.bias = product->inputs[2];
  } else if (head.op->name != "matmul" || !head.attrs.has("transpose_b") || head.attrs.get_int("transpose_b") == 0 ||
             (head.attrs.has("transpose_a") && head.attrs.get_int("transpose_a") != 0)) {
    return h;
  }
  if (in_pairs.count(product->id) || product->inputs.size() < 2) return h;
  const ValueId w = product->inputs[1];
  const Value& wv = g.value(w);
  if (wv.kind != ValueKind::kParameter || wv.type.shape.size() != 2 || wv.type.shape[0] != g.value(logits).type.shape.back())
    return h;
  if (h.bias >= 0 && (g.value(h.bias).kind != ValueKind::kParameter || u.readers[static_cast<size_t>(h.bias)].size() != 1))
    return h;
  for (NodeId r : u.readers[static_cast<size_t>(w)]) {
    if (r == product->id) continue;
    const Node& e = g.node(r);
    if (e.op->name != "embedding" || e.inputs[0] != w || h.embedding >= 0) return h;  // read otherwise: stays whole
    h.embedding = r;
  }
  h.loss = ce.id;
  h.head = head.id;
  h.weight = w;
  h.logits = logits;
  h.vocab = wv.type.shape[0];
  return h;
}

// How a pair's column layer cuts its out-features: 3 groups when attention (q|k|v) follows.
int64_t feature_groups(const Graph& g, const Pair& p) {
  for (NodeId n : p.between)
    if (g.node(n).op->name == "attention") return 3;
  return 1;
}

// kInvalidPlan unless the grid's degrees divide what the pair cuts: Y the column layer's
// out-features (per q/k/v group), the row layer's in-features and attention's heads; X the column
// layer's in-features and the row layer's out-features; Z the rows of both weights' blocks.
void check_divides(const Graph& g, const Pair& p, const TensorGrid& grid) {
  const Node& col = g.node(p.column);
  const Shape& w1 = g.value(col.inputs[1]).type.shape;
  const int64_t groups = feature_groups(g, p);
  COHORT_CHECK(w1[0] % (groups * grid.y) == 0, Status::kInvalidPlan, "plan: tensor_y = ", grid.y,
               " does not divide the ", w1[0] / groups, " out-features", groups > 1 ? " per q/k/v group" : "",
               " of linear '", col.name, "'");
  COHORT_CHECK(w1[1] % grid.x == 0, Status::kInvalidPlan, "plan: tensor_x = ", grid.x, " does not divide the ", w1[1],
               " in-features of linear '", col.name, "'");
  const Node& row = g.node(p.row);
  const Shape& w2 = g.value(row.inputs[1]).type.shape;
  COHORT_CHECK(w2[1] % grid.y == 0, Status::kInvalidPlan, "plan: tensor_y = ", grid.y, " does not divide the ", w2[1],
               " in-features of ", row.op->name, " '", row.name, "'");
  COHORT_CHECK(w2[0] % grid.x == 0, Status::kInvalidPlan, "plan: tensor_x = ", grid.x, " does not divide the ", w2[0],
               " out-features of ", row.op->name, " '", row.name, "'");
  const std::pair<const Node*, int64_t> blocks[] = {{&col, w1[0] / grid.y}, {&row, w2[0] / grid.x}};
  for (const auto& [n, rows] : blocks)
    COHORT_CHECK(rows % grid.z == 0, Status::kInvalidPlan, "plan: tensor_z = ", grid.z, " does not divide the ", rows,
                 " rows of the weight block of ", n->op->name, " '", n->name, "' (its out-features / ",
                 n == &col ? "tensor_y" : "tensor_x", ")");
  for (NodeId n : p.between) {
    const Node& b = g.node(n);
    if (b.op->name != "attention") continue;
    const int64_t heads = b.attrs.get_int("heads");
    COHORT_CHECK(heads % grid.y == 0, Status::kInvalidPlan, "plan: tensor_y = ", grid.y, " does not divide the ",
                 heads, " heads of attention '", b.name, "'");
  }
}

void check_vocab_divides(const Graph& g, const VocabHead& h, const TensorGrid& grid) {
  if (h.loss < 0) return;
  COHORT_CHECK(h.vocab % grid.y == 0, Status::kInvalidPlan, "plan: tensor_y = ", grid.y, " does not divide the ",
               "vocabulary (", h.vocab, " rows of '", g.value(h.weight).name, "') that the output head '",
               g.node(h.head).name, "' is cut along");
}

// Writes a rank's graph: parameters first (in the model's order, blocks where a pair cuts them,
// each Z block gathered right after), then every node, with the pairs' collectives around them.
// A collective over an axis of one rank is left out, so Megatron's 1D (only Y) is the general
// rewrite with X = Z = 1.
class Rewriter {
 public:
  // sequence_tokens: Megatron's sequence parallelism over Y (0: off). all_to_all_parts: instead,
  // the all-to-all kind over that many ranks of Y (the grid given then has Y = 1: nothing is cut
  // by features; every region holds its tokens' block and attention exchanges heads for tokens).
  Rewriter(const Graph& model, const std::vector<Pair>& pairs, const VocabHead& vocab, const TensorGrid& grid,
           const TensorPosition& at, int64_t sequence_tokens, int all_to_all_parts = 0)
      : m_(model), grid_(grid), at_(at), vocab_(grid.y > 1 ? vocab : VocabHead{}), tokens_(sequence_tokens),
        a2a_parts_(all_to_all_parts), seq_parts_(all_to_all_parts > 0 ? all_to_all_parts : grid.y),
        map_(model.values().size(), -1) {
    for (const Pair& p : pairs) {
      if (a2a_parts_ > 0) {  // nothing cut by features: the pairs' weights only cut over Z
        z_weights_.push_back(model.node(p.column).inputs[1]);
        z_weights_.push_back(model.node(p.row).inputs[1]);
        continue;
      }
      column_[p.column] = feature_groups(model, p);
      row_.insert(p.row);
      for (NodeId n : p.between) between_.insert(n);
    }
  }

  // After run(): the nodes backward runs again rather than keeping (TensorParallelGraph::recompute).
  const std::vector<std::string>& recompute() const { return recompute_; }

  Graph run() {
    plan_parameter_cuts();
    for (const Value& v : m_.values()) {
      if (v.kind == ValueKind::kInput) {
        map_[static_cast<size_t>(v.id)] = g_.add_input(v.name, v.type.dtype, v.type.shape);
        // All-to-all sequence parallelism: an input with the tokens (ids, targets) is read by
        // this rank's block of them.
        if (a2a_parts_ > 0 && v.type.shape.size() >= 2 && v.type.shape[1] == tokens_)
          map_[static_cast<size_t>(v.id)] = g_.add_op("split_to_axis", v.name + ".split_tokens_y", {mapped(v.id)},
                                                      dim_attrs("y", 1, a2a_parts_)).at(0);
      }
      if (v.kind != ValueKind::kParameter) continue;
      auto cut = cuts_.find(v.id);
      const std::vector<ShardCut> cuts = cut == cuts_.end() ? std::vector<ShardCut>{} : cut->second;
      Shape shape = v.type.shape;
      for (const ShardCut& c : cuts) shape[static_cast<size_t>(c.dim)] /= c.parts;
      const ValueId id = g_.add_parameter(v.name, v.type.dtype, shape, v.init);
      if (!cuts.empty()) g_.set_shard(id, cuts);
      map_[static_cast<size_t>(v.id)] = id;
      if (grid_.z == 1) continue;
      // Z: the ranks of the axis train on different rows. A block cut over Z is gathered whole
      // before use (its gradient reduce-scattered: summed over the rows of every Z rank); any
      // other parameter is replicated over Z and its gradient summed there (copy_to_axis).
      // The node is added at the parameter's first read (mapped), not here: a collective reading
      // only a parameter runs where it stands in the graph, so here every gathered block would
      // be held from the start of the step, and under ZeRO 3 every bucket gathered at once.
      const bool over_z = !cuts.empty() && cuts.back().axis == "z";
      // Gathered again in backward rather than kept through forward (as FSDP does).
      if (over_z) recompute_.push_back(v.name + ".gather_z");
      z_pending_[v.id] = over_z;
    }
    for (const Node& n : m_.nodes()) add_node(n);
    for (ValueId o : m_.outputs()) {
      // The whole logits, for a caller that asks (evaluation); training never gathers them.
      if (o == vocab_.logits)
        g_.mark_output(g_.add_op("gather_from_axis", m_.node(vocab_.head).name, {mapped(o)},
                                 dim_attrs("y", last_dim(mapped(o)), grid_.y)).at(0));
      else if (gathered_output(m_.node(m_.value(o).producer)))  // every token, for a caller that asks
        g_.mark_output(g_.add_op("gather_from_axis", m_.node(m_.value(o).producer).name, {mapped(o)},
                                 dim_attrs("y", 1, a2a_parts_)).at(0));
      else
        g_.mark_output(mapped(o));
    }
    if (m_.loss() >= 0) {
      ValueId loss = mapped(m_.loss());
      // The mean over every Z rank's rows (and, under all-to-all sequence parallelism, every Y
      // rank's tokens): each rank's mean / (Z Y), summed.
      const int64_t shares = static_cast<int64_t>(grid_.z) * std::max(a2a_parts_, 1);
      if (shares > 1) {
        Attrs f;
        f.set("factor", 1.0 / static_cast<double>(shares));
        const std::string& name = m_.node(m_.value(m_.loss()).producer).name;
        loss = g_.add_op("scale", name + ".share", {loss}, f).at(0);
        if (grid_.z > 1) loss = g_.add_op("all_reduce", a2a_parts_ > 0 ? name + ".sum_z" : name, {loss}, axis_attr("z")).at(0);
        if (a2a_parts_ > 0) loss = g_.add_op("all_reduce", name, {loss}, axis_attr("y")).at(0);
      }
      g_.set_loss(loss);
    }
    return std::move(g_);
  }

 private:
  ValueId mapped(ValueId v) {
    auto it = z_pending_.find(v);
    if (it != z_pending_.end()) {  // a parameter's Z node (run), just before its first reader
      const bool over_z = it->second;
      z_pending_.erase(it);
      const ValueId id = map_[static_cast<size_t>(v)];
      const std::string& name = m_.value(v).name;
      map_[static_cast<size_t>(v)] =
          over_z ? g_.add_op("all_gather", name + ".gather_z", {id}, dim_attrs("z", 0, grid_.z)).at(0)
                 : g_.add_op("copy_to_axis", name + ".copy_to_z", {id}, axis_attr("z")).at(0);
    }
    return map_[static_cast<size_t>(v)];
  }
  std::vector<ValueId> mapped(const std::vector<ValueId>& vs) {
    std::vector<ValueId> r;
    for (ValueId v : vs) r.push_back(mapped(v));
    return r;
  }
  static Attrs axis_attr(const std::string& axis) {
    Attrs a;
    a.set("axis", axis);
    return a;
  }
  static Attrs dim_attrs(const std::string& axis, int64_t dim, int64_t parts) {
    Attrs a = axis_attr(axis);
    a.set("dim", dim);
    a.set("parts", parts);
    return a;
  }
  // The collective `op` over `axis` on x, or x itself when the axis has one rank.
  ValueId over(const std::string& op, const std::string& name, ValueId x, const std::string& axis, int degree,
               int64_t dim = -1) {
    if (degree == 1) return x;
    const Attrs a = dim < 0 ? axis_attr(axis) : dim_attrs(axis, dim, degree);
    return g_.add_op(op, name, {x}, a).at(0);
  }
  // All-to-all sequence parallelism: a graph output (not the loss) with the tokens, made by n. The
  // rank's graph gathers it under n's name, for a caller that asks; n's own node is n.local.
  bool gathered_output(const Node& n) const {
    if (a2a_parts_ == 0 || n.outputs.size() != 1) return false;
    const ValueId o = n.outputs[0];
    const Shape& s = m_.value(o).type.shape;
    return o != m_.loss() && s.size() >= 2 && s[1] == tokens_ &&
           std::count(m_.outputs().begin(), m_.outputs().end(), o) > 0;
  }
  int64_t last_dim(ValueId v) const { return static_cast<int64_t>(g_.value(v).type.shape.size()) - 1; }

  // Where replicated data enters per-rank computation over Y: f (copy_to_axis), or under
  // sequence parallelism the tokens' blocks gathered (all_gather: the gradient reduce-scattered).
  ValueId enter_y(const std::string& name, ValueId x) {
    if (tokens_ == 0) return g_.add_op("copy_to_axis", name + ".copy_to_y", {x}, axis_attr("y")).at(0);
    recompute_.push_back(name + ".gather_tokens_y");  // gathered again in backward, not kept
    return g_.add_op("all_gather", name + ".gather_tokens_y", {x}, dim_attrs("y", 1, grid_.y)).at(0);
  }
  // Where partial sums over Y leave: g (all_reduce), or under sequence parallelism each rank's
  // block of the tokens of the sum (reduce_scatter: the gradient all-gathered).
  ValueId leave_y(const std::string& name, ValueId x) {
    if (tokens_ == 0) return g_.add_op("all_reduce", name, {x}, axis_attr("y")).at(0);
    return g_.add_op("reduce_scatter", name, {x}, dim_attrs("y", 1, grid_.y)).at(0);
  }
  // A whole parameter read in a token-split region: each rank's gradient covers its tokens only,
  // so it is summed over Y (copy_to_axis) — except a [T, C] table added to the tokens (the
  // position embedding), of which each rank reads its tokens' rows (split_to_axis: the rows'
  // gradients gathered whole).
  ValueId sequence_param(const Node& n, ValueId model_value) {
    auto it = sequence_params_.find(model_value);
    if (it != sequence_params_.end()) return it->second;
    const Value& v = m_.value(model_value);
    const bool per_token = n.op->name == "add" && v.type.shape.size() == 2 && v.type.shape[0] == tokens_;
    const ValueId r = per_token ? g_.add_op("split_to_axis", v.name + ".split_tokens_y", {mapped(model_value)},
                                            dim_attrs("y", 0, seq_parts_)).at(0)
                                : g_.add_op("copy_to_axis", v.name + ".copy_to_y", {mapped(model_value)},
                                            axis_attr("y")).at(0);
    return sequence_params_[model_value] = r;
  }

  // Column layer: weight [out, in] cut over Y along out (in q/k/v groups), over X along in; the
  // bias over Y. Row layer: weight cut over Y along in, over X along out; the bias over X. Both
  // weights' blocks then cut over Z along their rows.
  void plan_parameter_cuts() {
    for (const auto& [node, groups] : column_) {
      const Node& n = m_.node(node);
      add_cut(n.inputs[1], ShardCut{0, groups, grid_.y, at_.y, "y"});
      add_cut(n.inputs[1], ShardCut{1, 1, grid_.x, at_.x, "x"});
      add_cut(n.inputs[1], ShardCut{0, 1, grid_.z, at_.z, "z"});
      if (n.inputs.size() > 2) add_cut(n.inputs[2], ShardCut{0, groups, grid_.y, at_.y, "y"});
    }
    for (NodeId node : row_) {
      const Node& n = m_.node(node);
      add_cut(n.inputs[1], ShardCut{1, 1, grid_.y, at_.y, "y"});
      add_cut(n.inputs[1], ShardCut{0, 1, grid_.x, at_.x, "x"});
      add_cut(n.inputs[1], ShardCut{0, 1, grid_.z, at_.z, "z"});
      if (n.inputs.size() > 2) add_cut(n.inputs[2], ShardCut{0, 1, grid_.x, at_.x, "x"});
    }
    for (ValueId w : z_weights_) add_cut(w, ShardCut{0, 1, grid_.z, at_.z, "z"});
    if (vocab_.loss >= 0) {  // the head's weight (and bias) along the vocabulary, over Y
      add_cut(vocab_.weight, ShardCut{0, 1, grid_.y, at_.y, "y"});
      if (vocab_.bias >= 0) add_cut(vocab_.bias, ShardCut{0, 1, grid_.y, at_.y, "y"});
    }
  }
  int64_t vocab_offset() const { return at_.y * (vocab_.vocab / grid_.y); }
  Attrs vocab_attrs(const Attrs& from) const {
    Attrs a = from;
    a.set("offset", vocab_offset());
    a.set("vocab", vocab_.vocab);
    return a;
  }
  void add_cut(ValueId v, const ShardCut& c) {
    if (c.parts > 1) cuts_[v].push_back(c);
  }

  void add_node(const Node& n) {
    std::vector<ValueId> in = mapped(n.inputs);
    std::vector<ValueId> out;
    const bool bias = in.size() > 2;
    // Under Z (or all-to-all sequence parallelism) the loss is this rank's rows' (tokens') part;
    // the mean over the ranks takes its name.
    const bool local_loss =
        (grid_.z > 1 || a2a_parts_ > 0) && std::count(n.outputs.begin(), n.outputs.end(), m_.loss()) > 0;
    if (vocab_.loss >= 0 && n.id == vocab_.embedding) {
      // This rank's rows of the table, zeros for the others' ids: summed over Y.
      Attrs a = vocab_attrs(Attrs());
      const ValueId part = g_.add_op("vocab_embedding", n.name + ".partial", in, a).at(0);
      out = {leave_y(n.name, part)};
    } else if (vocab_.loss >= 0 && (n.id == vocab_.linear || (vocab_.linear < 0 && n.id == vocab_.head))) {
      // The logits of this rank's vocabulary rows; f over Y (the input gradient is partial).
      in[0] = enter_y(n.name, in[0]);
      out = g_.add_op(n.op->name, n.id == vocab_.head ? n.name + ".local" : n.name, in, n.attrs);
    } else if (vocab_.loss >= 0 && vocab_.linear >= 0 && n.id == vocab_.head) {
      Attrs a = n.attrs;
      std::vector<int64_t> shape = a.get_ints("shape");
      shape.back() = vocab_.vocab / grid_.y;
      a.set("shape", shape);
      out = g_.add_op(n.op->name, n.name + ".local", in, a);
    } else if (vocab_.loss >= 0 && n.id == vocab_.loss) {
      // Each rank's 3 floats a row (max, sum of exp, the label's logit) gathered over Y; the loss
      // of the whole vocabulary from them. The logits never cross the axis.
      const Attrs a = vocab_attrs(n.attrs);
      const ValueId partials = g_.add_op("vocab_cross_entropy_partials", n.name + ".partials", in, a).at(0);
      const ValueId all = g_.add_op("all_gather", n.name + ".partials_y", {partials}, dim_attrs("y", 0, grid_.y)).at(0);
      out = g_.add_op("vocab_cross_entropy", local_loss ? n.name + ".local" : n.name, {in[0], in[1], all}, a);
    } else if (column_.count(n.id)) {
      // The input: this rank's X block of its features; f over Y (the ranks' input gradients,
      // partial over the out-features, summed backward). The product is partial over X (summed
      // forward), the bias added after.
      in[0] = over("split_to_axis", n.name + ".split_x", in[0], "x", grid_.x, last_dim(in[0]));
      if (grid_.y > 1) in[0] = enter_y(n.name, in[0]);
      if (grid_.x == 1) {
        out = g_.add_op(n.op->name, n.name, in, n.attrs);
      } else {
        const ValueId bias_value = bias ? in[2] : -1;
        if (bias) in.pop_back();
        out = g_.add_op(n.op->name, n.name + ".partial", in, n.attrs);
        ValueId y = g_.add_op("all_reduce", bias ? n.name + ".all_reduce_x" : n.name, {out[0]}, axis_attr("x")).at(0);
        if (bias) y = g_.add_op("add", n.name, {y, bias_value}, Attrs()).at(0);
        out[0] = y;
      }
    } else if (row_.count(n.id)) {
      // f over X (the input gradients are partial over the X blocks of the out-features); the
      // product partial over Y (summed: g); the bias; the X blocks of the output gathered whole.
      ValueId bias_value = bias ? in[2] : -1;
      if (bias) in.pop_back();
      in[0] = over("copy_to_axis", n.name + ".copy_to_x", in[0], "x", grid_.x);
      const bool reduce = grid_.y > 1, gather = grid_.x > 1;
      // The last operator of the chain takes the layer's name.
      out = g_.add_op(n.op->name, reduce || bias || gather ? n.name + ".partial" : n.name, in, n.attrs);
      ValueId y = out[0];
      if (reduce) y = leave_y(bias || gather ? n.name + ".all_reduce_y" : n.name, y);
      if (tokens_ > 0 && bias) bias_value = sequence_param(n, n.inputs[2]);
      if (bias) y = g_.add_op("add", gather ? n.name + ".bias" : n.name, {y, bias_value}, Attrs()).at(0);
      if (gather) y = g_.add_op("gather_from_axis", n.name, {y}, dim_attrs("x", last_dim(y), grid_.x)).at(0);
      out[0] = y;
    } else if (a2a_parts_ > 0 && n.op->name == "attention") {
      // Heads for tokens: [B, T / P, 3C] -> every token of this rank's heads (q, k, v alike)
      // [B, T, 3C / P]; attention over them; [B, T, C / P] -> this rank's tokens of every head.
      const int64_t p = a2a_parts_;
      const ValueId qkv = g_.add_op("all_to_all", n.name + ".heads_for_tokens", {in[0]},
                                    all_to_all_attrs("y", p, 2, 3, 1, 1)).at(0);
      Attrs a = n.attrs;
      a.set("heads", n.attrs.get_int("heads") / p);
      out = g_.add_op(n.op->name, n.name + ".heads", {qkv}, a);  // y, and what backward saves (per head)
      out[0] = g_.add_op("all_to_all", n.name, {out[0]}, all_to_all_attrs("y", p, 1, 1, 2, 1)).at(0);
    } else if (between_.count(n.id) && n.op->name == "attention") {
      Attrs a = n.attrs;
      a.set("heads", n.attrs.get_int("heads") / grid_.y);
      out = g_.add_op(n.op->name, n.name, in, a);
    } else {
      // A token-split region (layernorms, residual adds, dropout, embeddings; under all-to-all
      // every layer, its Z-gathered weights included: each rank's gradient covers its tokens).
      if (tokens_ > 0)
        for (size_t i = 0; i < in.size(); ++i)
          if (m_.value(n.inputs[i]).kind == ValueKind::kParameter && (a2a_parts_ > 0 || !cuts_.count(n.inputs[i])))
            in[i] = sequence_param(n, n.inputs[i]);
      out = g_.add_op(n.op->name, local_loss || gathered_output(n) ? n.name + ".local" : n.name, in, n.attrs);
    }
    COHORT_ASSERT(out.size() == n.outputs.size(), n.name, ": the rewrite changed the number of outputs");
    for (size_t k = 0; k < out.size(); ++k) map_[static_cast<size_t>(n.outputs[k])] = out[k];
  }

  const Graph& m_;
  const TensorGrid grid_;
  const TensorPosition at_;
  const VocabHead vocab_;  // none (loss -1) when Y is 1 or the model's loss is made otherwise
  const int64_t tokens_;   // sequence parallelism: the tokens T cut over Y (dim 1 of [B, T, C]); 0 = off
  const int a2a_parts_;    // all-to-all sequence parallelism: the ranks of Y; 0 = Megatron's or none
  const int seq_parts_;    // the ranks the tokens are cut over
  Graph g_;
  std::map<ValueId, bool> z_pending_;            // model parameter -> cut over Z: its Z node not added yet
  std::map<ValueId, ValueId> sequence_params_;  // model parameter -> its read in the token-split regions
  std::vector<std::string> recompute_;          // nodes backward runs again (TensorParallelGraph::recompute)
  std::vector<ValueId> map_;                          // model value -> rank graph value
  std::vector<ValueId> z_weights_;                    // all-to-all: the pairs' weights, cut over Z alone
  std::map<NodeId, int64_t> column_;                  // column-parallel node -> its feature groups
  std::set<NodeId> row_, between_;
  std::map<ValueId, std::vector<ShardCut>> cuts_;     // model parameter -> its cuts, in order
};

}  // namespace

void validate_tensor_grid(const PlanConfig& p) {
  const std::pair<const char*, int> fields[] = {{"tensor_x", p.tensor.x}, {"tensor_y", p.tensor.y},
                                                {"tensor_z", p.tensor.z}};
  for (const auto& [field, v] : fields)
    COHORT_CHECK(v >= 1 && v <= kMaxDegree, Status::kInvalidPlan, "plan: ", field, " = ", v, " must be in 1..",
                 kMaxDegree);
  COHORT_CHECK(p.tensor.degree() <= kMaxDegree, Status::kInvalidPlan, "plan: the tensor degree tensor_x x tensor_y x "
               "tensor_z = ", p.tensor.x, " x ", p.tensor.y, " x ", p.tensor.z, " must be at most ", kMaxDegree);
  const int sequence = static_cast<int>(p.sequence_parallel);
  COHORT_CHECK(sequence >= 0 && sequence <= 2, Status::kInvalidPlan, "plan: sequence_parallel = ", sequence,
               " (0 none, 1 Megatron's, 2 all-to-all)");
  COHORT_CHECK(p.sequence_parallel == SequenceParallel::kNone || p.tensor.y > 1, Status::kInvalidPlan,
               "plan: sequence parallelism splits the tokens over tensor_y, which is ", p.tensor.y);
  // ZeRO stages 1-3 all shard over the data axis of a tensor grid: why stage 3's parameter
  // gathers and the tensor axes' collectives cannot deadlock is derived in zero.cpp's header.
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

namespace {

// All-to-all sequence parallelism over Y (shard_for_tensor_parallel's kAllToAll): checks what it
// needs, then the Rewriter with nothing cut by features. Z composes as everywhere: the pairs'
// weights cut along their rows over Z and gathered before use, the Z ranks on their own rows (the
// loss their mean, as the Y ranks' tokens'); a weight's gradient, gathered over Z, is summed over
// Y (each Y rank's covers its tokens) and reduce-scattered over Z. X would cut the features that
// all-to-all keeps whole per head: not combined.
TensorParallelGraph shard_all_to_all(const Graph& model, const TensorGrid& grid, const TensorPosition& position,
                                     const std::vector<Pair>& pairs) {
  COHORT_CHECK(grid.x == 1, Status::kUnsupported, "plan: all-to-all sequence parallelism with tensor_x = ", grid.x,
               ": X would cut the features it keeps whole per head; use Megatron's sequence parallelism on the X x Y "
               "grid, or all-to-all over Y with Z");
  TensorGrid z_only;
  z_only.z = grid.z;
  for (const Pair& p : pairs) check_divides(model, p, z_only);
  int64_t tokens = 0;
  for (const Node& n : model.nodes()) {
    if (n.op->name != "attention") continue;
    const Shape& qkv = model.value(n.inputs[0]).type.shape;
    const int64_t heads = n.attrs.get_int("heads");
    COHORT_CHECK(heads % grid.y == 0, Status::kInvalidPlan, "plan: all-to-all sequence parallelism: tensor_y = ",
                 grid.y, " does not divide the ", heads, " heads of attention '", n.name, "'");
    COHORT_CHECK(tokens == 0 || tokens == qkv[1], Status::kInvalidPlan, "plan: all-to-all sequence parallelism: "
                 "attention '", n.name, "' reads ", qkv[1], " tokens where another reads ", tokens);
    tokens = qkv[1];
  }
  COHORT_CHECK(tokens > 0, Status::kInvalidPlan, "plan: all-to-all sequence parallelism exchanges attention's heads "
               "for tokens, but the model has no attention");
  COHORT_CHECK(tokens % grid.y == 0, Status::kInvalidPlan, "plan: all-to-all sequence parallelism: tensor_y = ",
               grid.y, " does not divide the ", tokens, " tokens of the context");
  TensorParallelGraph r;
  r.pairs = find_linear_pairs(model);
  Rewriter rewriter(model, pairs, VocabHead{}, z_only, position, tokens, grid.y);
  r.graph = rewriter.run();
  r.recompute = rewriter.recompute();  // the Z gathers
  return r;
}

}  // namespace

TensorParallelGraph shard_for_tensor_parallel(const Graph& model, const TensorGrid& grid,
                                              const TensorPosition& position, SequenceParallel sequence) {
  PlanConfig check;
  check.tensor = grid;
  check.sequence_parallel = sequence;
  validate_tensor_grid(check);
  COHORT_CHECK(model.loss() >= 0, Status::kInvalidState, "tensor parallelism: the model has no loss");
  for (const Node& n : model.nodes())
    COHORT_CHECK(!n.backward, Status::kInvalidArgument, "tensor parallelism: the model holds backward node '", n.name,
                 "': rewrite the forward graph, then differentiate");
  const std::pair<int, int> coords[] = {{position.x, grid.x}, {position.y, grid.y}, {position.z, grid.z}};
  for (size_t a = 0; a < 3; ++a)
    COHORT_CHECK(coords[a].first >= 0 && coords[a].first < coords[a].second, Status::kInvalidArgument,
                 "tensor parallelism: ", "xyz"[a], " coordinate ", coords[a].first, " is outside the grid's ",
                 coords[a].second);
  const std::vector<Pair> pairs = find_pairs(model);
  TensorParallelGraph r;
  r.pairs = find_linear_pairs(model);
  if (grid.degree() == 1) {
    r.graph = model;
    return r;
  }
  if (sequence == SequenceParallel::kAllToAll) return shard_all_to_all(model, grid, position, pairs);
  COHORT_CHECK(!pairs.empty(), Status::kInvalidPlan, "plan: ",
               grid.x == 1 && grid.z == 1 ? str_cat("tensor_y = ", grid.y)
                                          : str_cat("tensor_x x tensor_y x tensor_z = ", grid.x, " x ", grid.y, " x ", grid.z),
               " but the model has no pair of linear layers to split (a linear layer whose output reaches another "
               "only through relu, gelu, tanh or attention)");
  for (const Pair& p : pairs) check_divides(model, p, grid);
  const VocabHead vocab = find_vocab_head(model, pairs);
  if (grid.y > 1) check_vocab_divides(model, vocab, grid);
  int64_t tokens = 0;
  // Megatron's sequence parallelism on the grid X x Y x Z. A region between pairs holds, on rank
  // (x, y, z), h_y = [B, T / Y, C]: the tokens of block y, every feature, the same on each X rank
  // of (y, z) (computed alike, as every region is without sequence parallelism). The token split
  // (dim 1, over Y) and the X blocks (the features, dim 2) are cut on different dimensions over
  // different axes, so a split or gather over one commutes with the other; a pair:
  //   1. split_to_axis over X: h_y[.., C block x], [B, T / Y, C / X]. Backward: the X blocks of
  //      the input gradient gathered whole.
  //   2. all_gather of the tokens over Y: [B, T, C / X], every token of feature block x (the Y
  //      ranks of (x, z) took the same block in 1). Backward: reduce_scatter over Y — the Y ranks'
  //      input gradients, each partial over its out-features, summed (the f of the whole case)
  //      and each left its tokens. Splitting before gathering moves C / X features, not C.
  //   3. the column product [B, T, N / Y], partial over X: all_reduce over X, every token (W1's
  //      block holds out-features of block y alone, so each Y rank needs every token: the gather
  //      in 2 precedes it). Then attention / the activation on [B, T, N / Y], unchanged.
  //   4. the row product [B, T, C / X] (f over X before it), partial over Y: reduce_scatter of
  //      the tokens over Y, [B, T / Y, C / X] (the all_reduce's sum, each rank keeping block y).
  //   5. the bias's X block, on this rank's tokens: its gradient covers them alone, so it is
  //      summed over Y (copy_to_axis), not over X (each X rank holds another block).
  //   6. gather_from_axis over X: [B, T / Y, C] = h_y's layout again. Backward: block x taken.
  // So a pair ends in the layout it began with (the swap of X and Y roles is inside it), the
  // whole parameters of the regions have their gradients summed over Y only (the X ranks' are
  // equal), and the vocabulary-parallel head gathers the tokens over Y as at X = 1. Against X x Y
  // without it, per pair and pass: the Y all-reduce of [B, T, C / X] becomes an all-gather and a
  // reduce-scatter of it (the same bytes), the X gather moves [B, T / Y, C / X] blocks (Y times
  // fewer), and the regions' activations shrink by Y (not X Y: they are whole over X). Z cuts
  // weight rows and the batch rows, neither of which this touches.
  if (sequence == SequenceParallel::kMegatron) {
    const Node& first = model.node(pairs.front().column);
    const Shape& x = model.value(first.inputs[0]).type.shape;
    COHORT_CHECK(x.size() == 3, Status::kInvalidPlan, "plan: sequence parallelism splits [batch, tokens, features] "
                 "activations along the tokens, but linear '", first.name, "' reads ", shape_str(x));
    COHORT_CHECK(vocab.loss >= 0, Status::kInvalidPlan, "plan: sequence parallelism needs the loss to be the cross "
                 "entropy of an output head cut along the vocabulary (the GPT's), which gathers the tokens back");
    tokens = x[1];
    COHORT_CHECK(tokens % grid.y == 0, Status::kInvalidPlan, "plan: sequence parallelism: tensor_y = ", grid.y,
                 " does not divide the ", tokens, " tokens of the context");
  }
  Rewriter rewriter(model, pairs, vocab, grid, position, tokens);
  r.graph = rewriter.run();
  r.recompute = rewriter.recompute();
  return r;
}

}  // namespace cohort::parallel
