// An operator's definition: inputs, typed attributes with defaults, the shape rule, one kernel
// per device, and the backward rule that adds gradient nodes to the same graph. Operators are
// registered explicitly (registry.cpp lists every family) — never by static initialisers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/attrs.h"
#include "core/tensor/tensor.h"

namespace cohort {

namespace transport::coll {
class Work;
}
class CommAxes;  // core/ops/collective.h
class Graph;
struct Node;
using ValueId = int32_t;
using NodeId = int32_t;

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
};

// Shape rule input. Throw Error(kShapeMismatch or kInvalidArgument) with a message such as
// "input 1 has shape [64, 300], expected [300, *]"; the graph prefixes "<op> '<node name>': ".
struct ShapeContext {
  const std::vector<TensorType>& inputs;
  const Attrs& attrs;  // defaults already filled in
};
using ShapeFn = std::function<std::vector<TensorType>(const ShapeContext&)>;

// What a kernel sees. Outputs are allocated (contiguous, declared shape) before the call.
struct KernelContext {
  const Attrs& attrs;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  int64_t step = 0;        // training step, for seeded randomness (dropout)
  uint64_t seed = 0;       // run seed
  bool training = true;    // false during evaluation (dropout is the identity)
  int32_t node_id = 0;
  int num_threads = 1;
  int micro_batch = 0;     // within the step (TrainerOptions::micro_batches), for dropout's masks
  // Collective operators (OpSchema::collective): the communicators of the run's grid axes
  // (nullptr when the run has none), and what the kernel leaves in flight: `pending`, the
  // collective it started, and `on_complete`, run on the executor's thread once pending has
  // finished (e.g. moving gathered blocks into place). Until then the executor keeps the node's
  // inputs and outputs alive and lets no node read its outputs.
  const CommAxes* axes = nullptr;
  std::shared_ptr<transport::coll::Work> pending{};
  std::function<void()> on_complete{};
};
using KernelFn = std::function<void(KernelContext&)>;

// What a backward rule sees; it adds nodes and reports one gradient per input.
class BackwardContext {
 public:
  BackwardContext(Graph& graph, const Node& node, std::vector<ValueId> grad_outputs);
  Graph& graph() { return graph_; }
  const Node& node() const { return node_; }
  const Attrs& attrs() const;
  ValueId input(size_t i) const;
  ValueId output(size_t i) const;
  const TensorType& input_type(size_t i) const;
  const TensorType& output_type(size_t i) const;
  // Gradient flowing into output i, or -1 when nothing depends on that output.
  ValueId grad_output(size_t i) const { return grad_outputs_[i]; }
  // Adds an operator to the graph as part of the backward pass (named after the node).
  std::vector<ValueId> add(const std::string& op, const std::vector<ValueId>& inputs,
                           const Attrs& attrs = Attrs());
  ValueId add1(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs = Attrs()) {
    return add(op, inputs, attrs).at(0);
  }
  void set_grad_input(size_t i, ValueId grad);
  bool needs_grad_input(size_t i) const;
  const std::vector<ValueId>& grad_inputs() const { return grad_inputs_; }

  // The gradient of input i summed so far from the nodes that read it later (-1 when none yet).
  // A rule whose kernel can add it while writing its own result (saving autodiff's separate
  // "add" pass) passes it as an input and reports the total with set_grad_input_total.
  ValueId accumulated_grad(size_t i) const { return i < accumulated_.size() ? accumulated_[i] : -1; }
  void set_accumulated_grads(std::vector<ValueId> accumulated) { accumulated_ = std::move(accumulated); }
  void set_grad_input_total(size_t i, ValueId total);
  bool grad_input_is_total(size_t i) const { return i < is_total_.size() && is_total_[i]; }

 private:
  Graph& graph_;
  const Node& node_;
  std::vector<ValueId> grad_outputs_;
  std::vector<ValueId> grad_inputs_;
  std::vector<ValueId> accumulated_;
  std::vector<bool> is_total_;
};
using BackwardFn = std::function<void(BackwardContext&)>;

struct AttrSpec {
  std::string name;
  AttrType type;
  bool required = false;
  AttrValue default_value = int64_t{0};
};

struct OpSchema {
  std::string name;
  std::vector<std::string> inputs;  // names, for messages; optional trailing inputs below
  int optional_inputs = 0;          // how many trailing inputs may be omitted (e.g. bias)
  std::vector<AttrSpec> attrs;
  // Output names, for descriptions (cohort_op_describe): output 0 is the result, later ones hold
  // what the backward pass needs. When outputs_from names a list attribute, there is one output
  // per entry of it, all under the one name here (split).
  std::vector<std::string> outputs = {"y"};
  std::string outputs_from;
  ShapeFn infer;
  KernelFn kernels[2];              // indexed by Device: cpu, cuda (empty = not available)
  std::string kernel_dtypes[2];     // the dtypes each kernel takes (kernel_dtypes.h); "" = undeclared
  BackwardFn backward;              // empty = not differentiable
  std::vector<int> nondiff_inputs;  // inputs that never get a gradient (labels, indices)
  bool internal = false;            // used only by backward rules; exempt from the public list
  bool bf16_kernel = false;         // the kernel handles bf16 itself; else the executor converts
  bool alias_input0 = false;        // output 0 is a view of input 0 (reshape): no copy, no kernel
  // A collective over a grid axis (core/ops/collective.h): its kernel starts a collective on the
  // communicator of the node's 'axis' and returns; the executor waits for it before a node reads
  // the result. One kernel serves every device whose buffers the axis communicator takes; on the
  // CUDA device that needs an NCCL communicator per axis, which no plan makes yet, so the CUDA
  // slot stays empty: a declared refusal (the executor names the operator before a run).
  bool collective = false;
  // A point-to-point send (pipe_send): with RunOptions::unfinished_sends a run may return while
  // it is still in flight (the peer receives it later in its own schedule).
  bool send = false;
  // Its backward rule runs whenever the loss depends on its outputs, though no input needs a
  // gradient (pipe_recv sends its output's gradient back to the stage the value came from).
  bool source_of_gradient = false;
  // Runs on the host only (the tensor-parallel rewrite's split_to_axis and vocabulary-parallel
  // operators: tensor parallelism runs on the host): no CUDA kernel, the slot a declared refusal.
  bool host_only = false;
  // An operator whose output shape is an attribute (pipe_recv) rewrites it for another batch
  // size, dim 0 of the graph's inputs (Graph::with_batch). Empty: the shape rule derives it.
  std::function<void(Attrs& attrs, int64_t batch)> rebatch;

  int max_inputs() const { return static_cast<int>(inputs.size()); }
  int min_inputs() const { return max_inputs() - optional_inputs; }
};

class OpRegistry {
 public:
  // The process-wide registry, filled with every built-in operator on first use.
  static const OpRegistry& global();
  void add(OpSchema schema);  // throws on a duplicate name
  // Gives operator `op` (already added) its kernel for `device`; a backend adds its kernels so,
  // with the dtypes the kernel takes (a signature of core/ops/kernel_dtypes.h, or "").
  void set_kernel(const std::string& op, Device device, KernelFn kernel, std::string dtypes = "");
  const OpSchema* find(const std::string& name) const;  // nullptr when unknown
  std::vector<std::string> names(bool include_internal) const;

 private:
  std::vector<std::unique_ptr<OpSchema>> ops_;
};

// Families, each defined in core/ops/<family>.cpp; registry.cpp calls them all.
void register_elementwise_ops(OpRegistry& r);
void register_matmul_ops(OpRegistry& r);
void register_norm_ops(OpRegistry& r);
void register_softmax_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
// The CUDA kernels of the operators that have one (core/ops/cuda), in builds with CUDA.
void register_cuda_kernels(OpRegistry& r);
void register_embedding_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);
void register_dropout_ops(OpRegistry& r);
void register_collective_ops(OpRegistry& r);
void register_pipe_topk_ops(OpRegistry& r);
void register_vocab_parallel_ops(OpRegistry& r);

// Shape-rule helpers shared by the families.
[[noreturn]] void shape_error(const std::string& message);
void expect_rank(const ShapeContext& c, size_t input, int64_t rank);
void expect_float(const ShapeContext& c, size_t input);
void expect_same_dtype(const ShapeContext& c, size_t a, size_t b);
// Rows of a [..., C] tensor for a kernel that works row by row: the product of all dims but the
// last (also when C is 0).
int64_t rows_of(const Tensor& t);

}  // namespace cohort
