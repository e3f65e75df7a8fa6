// The operator registry (explicit: every family is listed here) and the backward-rule context.
#include <algorithm>
#include <mutex>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"

namespace cohort {

const OpRegistry& OpRegistry::global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_elementwise_ops(*r);
    register_matmul_ops(*r);
    register_norm_ops(*r);
    register_softmax_ops(*r);
    register_attention_ops(*r);
    register_embedding_ops(*r);
    register_conv_ops(*r);
    register_shape_ops(*r);
    register_dropout_ops(*r);
    register_collective_ops(*r);
    register_pipe_topk_ops(*r);
    register_vocab_parallel_ops(*r);
#ifdef COHORT_HAVE_CUDA
    register_cuda_kernels(*r);
#endif
    return r;
  }();
  return *registry;
}

void OpRegistry::add(OpSchema schema) {
  COHORT_ASSERT(find(schema.name) == nullptr, "operator registered twice: ", schema.name);
  COHORT_ASSERT(static_cast<bool>(schema.infer), "operator without a shape rule: ", schema.name);
  COHORT_ASSERT(!schema.outputs.empty() && (schema.outputs_from.empty() || schema.outputs.size() == 1),
                "operator without output names: ", schema.name);
  ops_.push_back(std::make_unique<OpSchema>(std::move(schema)));
}

void OpRegistry::set_kernel(const std::string& op, Device device, KernelFn kernel, std::string dtypes) {
  for (const auto& o : ops_)
    if (o->name == op) {
      o->kernels[static_cast<int>(device)] = std::move(kernel);
      o->kernel_dtypes[static_cast<int>(device)] = std::move(dtypes);
      return;
    }
  COHORT_ASSERT(false, "kernel for an operator that is not registered: ", op);
}

const OpSchema* OpRegistry::find(const std::string& name) const {
  for (const auto& op : ops_) if (op->name == name) return op.get();
  return nullptr;
}

std::vector<std::string> OpRegistry::names(bool include_internal) const {
  std::vector<std::string> r;
  for (const auto& op : ops_) if (include_internal || !op->internal) r.push_back(op->name);
  std::sort(r.begin(), r.end());
  return r;
}

void shape_error(const std::string& message) { throw Error(Status::kShapeMismatch, message); }

void expect_rank(const ShapeContext& c, size_t input, int64_t rank) {
  const Shape& s = c.inputs[input].shape;
  if (static_cast<int64_t>(s.size()) != rank)
    shape_error(str_cat("input ", input, " has shape ", shape_str(s), ", expected rank ", rank));
}

void expect_float(const ShapeContext& c, size_t input) {
  if (!dtype_is_float(c.inputs[input].dtype))
    throw Error(Status::kShapeMismatch, str_cat("input ", input, " has dtype ",
                                                dtype_name(c.inputs[input].dtype), ", expected a float type"));
}

void expect_same_dtype(const ShapeContext& c, size_t a, size_t b) {
  if (c.inputs[a].dtype != c.inputs[b].dtype)
    throw Error(Status::kShapeMismatch, str_cat("input ", b, " has dtype ", dtype_name(c.inputs[b].dtype),
                                                ", expected ", dtype_name(c.inputs[a].dtype),
                                                " like input ", a));
}

int64_t rows_of(const Tensor& t) { return shape_numel(Shape(t.shape().begin(), t.shape().end() - 1)); }

BackwardContext::BackwardContext(Graph& graph, const Node& node, std::vector<ValueId> grad_outputs)
    : graph_(graph), node_(node), grad_outputs_(std::move(grad_outputs)),
      grad_inputs_(node.inputs.size(), -1) {}

const Attrs& BackwardContext::attrs() const { return node_.attrs; }
ValueId BackwardContext::input(size_t i) const { return node_.inputs.at(i); }
ValueId BackwardContext::output(size_t i) const { return node_.outputs.at(i); }
const TensorType& BackwardContext::input_type(size_t i) const { return graph_.value(input(i)).type; }
const TensorType& BackwardContext::output_type(size_t i) const { return graph_.value(output(i)).type; }

std::vector<ValueId> BackwardContext::add(const std::string& op, const std::vector<ValueId>& inputs,
                                          const Attrs& attrs) {
  // Names stay unique and say which forward node they differentiate.
  std::string name = str_cat(node_.name, ".grad.", op);
  for (int k = 1; graph_.find(name) != -1; ++k) name = str_cat(node_.name, ".grad.", op, k);
  return graph_.add_op(op, name, inputs, attrs);
}

void BackwardContext::set_grad_input(size_t i, ValueId grad) {
  COHORT_ASSERT(i < grad_inputs_.size(), "grad input ", i, " of ", node_.name);
  if (grad < 0) return;
  COHORT_ASSERT(graph_.value(grad).type.shape == input_type(i).shape, "gradient of input ", i, " of '",
                node_.name, "' has shape ", shape_str(graph_.value(grad).type.shape), ", expected ",
                shape_str(input_type(i).shape));
  grad_inputs_[i] = grad;
}

void BackwardContext::set_grad_input_total(size_t i, ValueId total) {
  COHORT_ASSERT(accumulated_grad(i) >= 0, "input ", i, " of '", node_.name, "' has no accumulated gradient");
  set_grad_input(i, total);
  is_total_.resize(grad_inputs_.size(), false);
  is_total_[i] = true;
}

bool BackwardContext::needs_grad_input(size_t i) const {
  const auto& nd = node_.op->nondiff_inputs;
  if (std::find(nd.begin(), nd.end(), static_cast<int>(i)) != nd.end()) return false;
  return dtype_is_float(input_type(i).dtype);
}

}  // namespace cohort
