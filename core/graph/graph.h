// The OP-DAG: nodes are operators, edges are tensor values. Values are created in topological
// order (an operator's inputs must exist before it), so ids order the graph. Shape and dtype
// rules run when a node is added: a mismatch is reported then, never at run time. The backward
// pass is appended to the same graph (autodiff.h), and later parallel plans add communication
// nodes the same way.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph/attrs.h"
#include "core/ops/schema.h"

namespace cohort {

enum class ValueKind : int { kInput = 0, kParameter = 1, kActivation = 2 };

// Numbers equal the C ABI's cohort_init_kind.
enum class InitKind : int {
  kZeros = 0, kOnes = 1, kConstant = 2, kUniform = 3, kNormal = 4,
  kXavierUniform = 5, kKaimingUniform = 6, kKaimingNormal = 7,
};

// How a parameter gets its first values: uniform(a, b), normal(mean a, std b), constant a;
// the fan-based kinds use fan_in = product of all dims but the first, fan_out = dim 0, gain a.
struct Initializer {
  InitKind kind = InitKind::kZeros;
  double a = 0.0;
  double b = 0.0;
  uint64_t seed = 0;
};

// One cut of a parameter that the ranks of a grid axis hold in pieces (tensor parallelism,
// core/parallel/tensor_parallel.h): along `dim` the extent is `groups` equal groups (a fused
// q|k|v weight has 3), each cut into `parts` equal blocks, and this value holds block `index` of
// every group, the groups kept in order. A value with several cuts applies them in order, each to
// what the ones before left (core/graph/shard.h moves tensors between the two layouts).
struct ShardCut {
  int dim = 0;
  int64_t groups = 1;
  int64_t parts = 1;
  int64_t index = 0;
  std::string axis;  // the grid axis whose ranks hold the parts: "x", "y" or "z"
  bool operator==(const ShardCut& o) const {
    return dim == o.dim && groups == o.groups && parts == o.parts && index == o.index && axis == o.axis;
  }
};

struct Value {
  ValueId id = -1;
  std::string name;
  TensorType type;  // for a sharded parameter: this rank's block
  ValueKind kind = ValueKind::kActivation;
  NodeId producer = -1;
  int output_index = 0;
  Initializer init;  // parameters only; describes the whole parameter when it is sharded
  std::vector<ShardCut> shard;  // parameters only: empty = this value is the whole parameter
};

struct Node {
  NodeId id = -1;
  std::string name;
  const OpSchema* op = nullptr;
  Attrs attrs;  // with defaults filled in
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  bool backward = false;  // added by autodiff
};

class Graph {
 public:
  ValueId add_input(const std::string& name, DType dtype, const Shape& shape);
  ValueId add_parameter(const std::string& name, DType dtype, const Shape& shape, const Initializer& init);
  // Adds an operator; name may be empty (then "<op>_<n>"). Throws kNotFound for an unknown op,
  // kShapeMismatch / kInvalidArgument with "<op> '<name>': ..." for bad inputs or attributes.
  std::vector<ValueId> add_op(const std::string& op, const std::string& name,
                              const std::vector<ValueId>& inputs, const Attrs& attrs);
  // Declares parameter v to be a block of a larger whole parameter (tensor parallelism): its
  // initializer then describes the whole one, whose shape is shard_whole_shape(v). Throws
  // kInvalidArgument naming the parameter for a bad cut (dim out of range, index >= parts, an
  // extent not divisible by groups) or a value that is not a parameter.
  void set_shard(ValueId v, std::vector<ShardCut> cuts);
  void mark_output(ValueId v);
  void set_loss(ValueId v);  // must be a float scalar (shape [] or [1])

  const Value& value(ValueId v) const;
  const Node& node(NodeId n) const;
  ValueId find(const std::string& name) const;  // -1 when absent
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  ValueId loss() const { return loss_; }
  std::vector<ValueId> inputs() const;
  std::vector<ValueId> parameters() const;
  // Marks subsequently added nodes as part of the backward pass.
  void set_backward_mode(bool on) { backward_mode_ = on; }
  // The forward part of this graph replayed with dimension 0 of every input set to `batch`
  // (evaluation on another batch size). Shape rules run again: a reshape that hard-codes the
  // batch fails with its message; use -1 there.
  Graph with_batch(int64_t batch) const;
  // A one-line description of a value for messages: "'fc1.w' [300, 784] f32".
  std::string describe(ValueId v) const;

 private:
  ValueId new_value(const std::string& name, const TensorType& type, ValueKind kind);
  void check_value(ValueId v, const char* what) const;

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;
  ValueId loss_ = -1;
  std::unordered_map<std::string, ValueId> by_name_;
  std::unordered_map<std::string, int> node_names_;
  bool backward_mode_ = false;
};

}  // namespace cohort
