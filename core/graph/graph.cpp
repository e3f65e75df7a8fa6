// Graph construction with shape inference and attribute validation at insertion time.
#include "core/graph/graph.h"

#include "core/base/error.h"

namespace cohort {

namespace {
bool valid_name(const std::string& s) { return !s.empty() && s.size() <= 256; }

void check_shape(const Shape& shape, const std::string& what) {
  COHORT_CHECK(shape.size() <= 8, Status::kInvalidArgument, what, ": rank ", shape.size(),
               " exceeds the maximum of 8");
  for (int64_t d : shape)
    COHORT_CHECK(d > 0, Status::kInvalidArgument, what, ": shape ", shape_str(shape),
                 " has a non-positive extent");
}

// Validates attrs against the schema and fills in defaults.
Attrs resolve_attrs(const OpSchema& op, const Attrs& given, const std::string& where) {
  Attrs out;
  for (const auto& [name, v] : given.all()) {
    const AttrSpec* spec = nullptr;
    for (const auto& s : op.attrs) if (s.name == name) spec = &s;
    COHORT_CHECK(spec, Status::kInvalidArgument, where, ": unknown attribute '", name, "'");
    AttrType t = attr_type_of(v);
    bool ok = t == spec->type || (spec->type == AttrType::kFloat && t == AttrType::kInt) ||
              (spec->type == AttrType::kFloats && t == AttrType::kInts);
    COHORT_CHECK(ok, Status::kInvalidArgument, where, ": attribute '", name, "' is ",
                 attr_type_name(t), ", expected ", attr_type_name(spec->type));
    out.set(name, v);
  }
  for (const auto& s : op.attrs) {
    if (out.has(s.name)) continue;
    COHORT_CHECK(!s.required, Status::kInvalidArgument, where, ": missing required attribute '",
                 s.name, "'");
    out.set(s.name, s.default_value);
  }
  return out;
}
}  // namespace

ValueId Graph::new_value(const std::string& name, const TensorType& type, ValueKind kind) {
  COHORT_CHECK(by_name_.count(name) == 0, Status::kInvalidArgument, "the name '", name,
               "' is already used by another value");
  Value v;
  v.id = static_cast<ValueId>(values_.size());
  v.name = name;
  v.type = type;
  v.kind = kind;
  values_.push_back(v);
  by_name_[name] = v.id;
  return v.id;
}

ValueId Graph::add_input(const std::string& name, DType dtype, const Shape& shape) {
  COHORT_CHECK(valid_name(name), Status::kInvalidArgument, "input name must be 1 to 256 characters");
  check_shape(shape, str_cat("input '", name, "'"));
  return new_value(name, TensorType{dtype, shape}, ValueKind::kInput);
}

ValueId Graph::add_parameter(const std::string& name, DType dtype, const Shape& shape,
                             const Initializer& init) {
  COHORT_CHECK(valid_name(name), Status::kInvalidArgument, "parameter name must be 1 to 256 characters");
  check_shape(shape, str_cat("parameter '", name, "'"));
  COHORT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, Status::kShapeMismatch, "parameter '",
               name, "': dtype ", dtype_name(dtype), " is not a float type");
  int k = static_cast<int>(init.kind);
  COHORT_CHECK(k >= 0 && k <= static_cast<int>(InitKind::kKaimingNormal), Status::kInvalidArgument,
               "parameter '", name, "': unknown initializer kind ", k);
  if (init.kind == InitKind::kUniform)
    COHORT_CHECK(init.a <= init.b, Status::kInvalidArgument, "parameter '", name,
                 "': uniform initializer needs low <= high, got [", init.a, ", ", init.b, "]");
  if (init.kind == InitKind::kNormal)
    COHORT_CHECK(init.b >= 0, Status::kInvalidArgument, "parameter '", name,
                 "': normal initializer needs std >= 0, got ", init.b);
  ValueId id = new_value(name, TensorType{dtype, shape}, ValueKind::kParameter);
  values_[static_cast<size_t>(id)].init = init;
  return id;
}

void Graph::check_value(ValueId v, const char* what) const {
  COHORT_CHECK(v >= 0 && static_cast<size_t>(v) < values_.size(), Status::kInvalidArgument, what,
               " refers to value ", v, ", which does not exist (the graph has ", values_.size(),
               " values)");
}

std::vector<ValueId> Graph::add_op(const std::string& op_name, const std::string& name,
                                   const std::vector<ValueId>& inputs, const Attrs& attrs) {
  const OpSchema* op = OpRegistry::global().find(op_name);
  COHORT_CHECK(op, Status::kNotFound, "unknown operator '", op_name, "'");
  std::string node_name = name;
  if (node_name.empty()) node_name = str_cat(op_name, "_", nodes_.size());
  COHORT_CHECK(node_name.size() <= 256, Status::kInvalidArgument, "node name longer than 256 characters");
  COHORT_CHECK(node_names_.count(node_name) == 0, Status::kInvalidArgument, op_name, " '", node_name,
               "': another node already has this name");
  const std::string where = str_cat(op_name, " '", node_name, "'");
  const int n = static_cast<int>(inputs.size());
  COHORT_CHECK(n >= op->min_inputs() && n <= op->max_inputs(), Status::kInvalidArgument, where,
               ": takes ", op->min_inputs() == op->max_inputs() ? str_cat(op->max_inputs())
                                                                  : str_cat(op->min_inputs(), " to ", op->max_inputs()),
               " inputs, got ", n);
  std::vector<TensorType> types;
  for (int i = 0; i < n; ++i) {
    ValueId v = inputs[static_cast<size_t>(i)];
    COHORT_CHECK(v >= 0 && static_cast<size_t>(v) < values_.size(), Status::kInvalidArgument, where,
                 ": input ", i, " (", op->inputs[static_cast<size_t>(i)], ") refers to value ", v,
                 ", which does not exist");
    types.push_back(values_[static_cast<size_t>(v)].type);
  }
  Node node;
  node.attrs = resolve_attrs(*op, attrs, where);
  std::vector<TensorType> out_types;
  try {
    out_types = op->infer(ShapeContext{types, node.attrs});
  } catch (const Error& e) {
    throw Error(e.status(), str_cat(where, ": ", e.what()));
  }
  node.id = static_cast<NodeId>(nodes_.size());
  node.name = node_name;
  node.op = op;
  node.inputs = inputs;
  node.backward = backward_mode_;
  for (size_t k = 0; k < out_types.size(); ++k) {
    std::string vname = k == 0 ? node_name : str_cat(node_name, ":", k);
    if (by_name_.count(vname)) vname = str_cat(node_name, ":out", k);
    ValueId id = new_value(vname, out_types[k], ValueKind::kActivation);
    values_[static_cast<size_t>(id)].producer = node.id;
    values_[static_cast<size_t>(id)].output_index = static_cast<int>(k);
    node.outputs.push_back(id);
  }
  node_names_[node_name] = node.id;
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

void Graph::set_shard(ValueId v, std::vector<ShardCut> cuts) {
  check_value(v, "shard");
  Value& x = values_[static_cast<size_t>(v)];
  COHORT_CHECK(x.kind == ValueKind::kParameter, Status::kInvalidArgument, describe(v),
               " is not a parameter: only parameters are sharded");
  for (const ShardCut& c : cuts) {
    const int64_t rank = static_cast<int64_t>(x.type.shape.size());
    COHORT_CHECK(c.dim >= 0 && c.dim < rank, Status::kInvalidArgument, "parameter ", describe(v), ": shard dim ",
                 c.dim, " is out of range");
    COHORT_CHECK(c.groups >= 1 && c.parts >= 1 && c.index >= 0 && c.index < c.parts, Status::kInvalidArgument,
                 "parameter ", describe(v), ": shard cut over axis '", c.axis, "' has groups ", c.groups,
                 ", parts ", c.parts, ", index ", c.index, " (need groups >= 1, 0 <= index < parts)");
    COHORT_CHECK(x.type.shape[static_cast<size_t>(c.dim)] % c.groups == 0, Status::kInvalidArgument,
                 "parameter ", describe(v), ": extent ", x.type.shape[static_cast<size_t>(c.dim)], " of dim ", c.dim,
                 " is not a multiple of the ", c.groups, " groups of its shard cut");
    COHORT_CHECK(!c.axis.empty(), Status::kInvalidArgument, "parameter ", describe(v),
                 ": a shard cut needs the name of its grid axis");
  }
  x.shard = std::move(cuts);
}

void Graph::mark_output(ValueId v) {
  check_value(v, "output");
  for (ValueId o : outputs_) if (o == v) return;
  outputs_.push_back(v);
}

void Graph::set_loss(ValueId v) {
  check_value(v, "loss");
  const TensorType& t = values_[static_cast<size_t>(v)].type;
  COHORT_CHECK(dtype_is_float(t.dtype) && shape_numel(t.shape) == 1 && t.shape.size() <= 1,
               Status::kShapeMismatch, "loss ", describe(v), " must be a float scalar");
  loss_ = v;
}

const Value& Graph::value(ValueId v) const {
  check_value(v, "lookup");
  return values_[static_cast<size_t>(v)];
}

const Node& Graph::node(NodeId n) const {
  COHORT_ASSERT(n >= 0 && static_cast<size_t>(n) < nodes_.size(), "node ", n);
  return nodes_[static_cast<size_t>(n)];
}

ValueId Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

std::vector<ValueId> Graph::inputs() const {
  std::vector<ValueId> r;
  for (const auto& v : values_) if (v.kind == ValueKind::kInput) r.push_back(v.id);
  return r;
}

std::vector<ValueId> Graph::parameters() const {
  std::vector<ValueId> r;
  for (const auto& v : values_) if (v.kind == ValueKind::kParameter) r.push_back(v.id);
  return r;
}

Graph Graph::with_batch(int64_t batch) const {
  COHORT_CHECK(batch >= 1, Status::kInvalidArgument, "batch size must be >= 1, got ", batch);
  Graph g;
  std::vector<ValueId> map(values_.size(), -1);
  for (const Value& v : values_) {
    if (v.kind == ValueKind::kInput) {
      Shape s = v.type.shape;
      if (!s.empty()) s[0] = batch;
      map[static_cast<size_t>(v.id)] = g.add_input(v.name, v.type.dtype, s);
    } else if (v.kind == ValueKind::kParameter) {
      map[static_cast<size_t>(v.id)] = g.add_parameter(v.name, v.type.dtype, v.type.shape, v.init);
      if (!v.shard.empty()) g.set_shard(map[static_cast<size_t>(v.id)], v.shard);
    }
  }
  for (const Node& n : nodes_) {
    if (n.backward) continue;
    std::vector<ValueId> in;
    for (ValueId i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
    std::vector<ValueId> out;
    Attrs attrs = n.attrs;
    if (n.op->rebatch) n.op->rebatch(attrs, batch);
    try {
      out = g.add_op(n.op->name, n.name, in, attrs);
    } catch (const Error& e) {
      throw Error(e.status(), str_cat("with batch ", batch, ": ", e.what()));
    }
    for (size_t k = 0; k < out.size(); ++k) map[static_cast<size_t>(n.outputs[k])] = out[k];
  }
  for (ValueId o : outputs_) g.mark_output(map[static_cast<size_t>(o)]);
  if (loss_ >= 0) g.set_loss(map[static_cast<size_t>(loss_)]);
  return g;
}

std::string Graph::describe(ValueId v) const {
  const Value& x = value(v);
  return str_cat("'", x.name, "' ", shape_str(x.type.shape), " ", dtype_name(x.type.dtype));
}

}  // namespace cohort
