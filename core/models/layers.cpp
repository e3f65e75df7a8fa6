// Shared layer builders for the model zoo; see layers.h.
#include "core/models/layers.h"

#include <cmath>

namespace cohort::models {

Initializer torch_default_weight_init() {
  Initializer i;
  i.kind = InitKind::kKaimingUniform;
  i.a = 1.0 / std::sqrt(3.0);  // gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in)
  return i;
}

Initializer torch_default_bias_init(int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  Initializer i;
  i.kind = InitKind::kUniform;
  i.a = -bound;
  i.b = bound;
  return i;
}

Initializer normal_init(double std) {
  Initializer i;
  i.kind = InitKind::kNormal;
  i.a = 0.0;
  i.b = std;
  return i;
}

Initializer constant_init(double value) {
  Initializer i;
  i.kind = value == 0.0 ? InitKind::kZeros : (value == 1.0 ? InitKind::kOnes : InitKind::kConstant);
  i.a = value;
  return i;
}

namespace {
// Parameters take the dtype of the activations they act on (bf16 models have bf16 weights).
DType param_dtype(const Graph& g, ValueId x) {
  const DType t = g.value(x).type.dtype;
  return t == DType::kBF16 ? DType::kBF16 : DType::kF32;
}
}  // namespace

ValueId add_linear(Graph& g, const std::string& prefix, ValueId x, int64_t in, int64_t out, bool bias,
                   const LinearInit& init, const std::string& op, const Attrs& attrs) {
  ValueId w = g.add_parameter(prefix + ".weight", param_dtype(g, x), {out, in}, init.weight);
  std::vector<ValueId> inputs = {x, w};
  if (bias) {
    Initializer b = init.torch_bias ? torch_default_bias_init(in) : init.bias;
    inputs.push_back(g.add_parameter(prefix + ".bias", param_dtype(g, x), {out}, b));
  }
  return g.add_op(op, prefix, inputs, attrs).at(0);
}

ValueId add_conv(Graph& g, const std::string& prefix, ValueId x, int64_t in, int64_t out, int64_t kernel,
                 int64_t stride, int64_t padding) {
  ValueId w = g.add_parameter(prefix + ".weight", param_dtype(g, x), {out, in, kernel, kernel},
                              torch_default_weight_init());
  Attrs a;
  a.set("stride", std::vector<int64_t>{stride, stride});
  a.set("padding", std::vector<int64_t>{padding, padding});
  return g.add_op("conv2d", prefix, {x, w}, a).at(0);
}

ValueId add_layernorm(Graph& g, const std::string& prefix, ValueId x, int64_t channels, double eps) {
  ValueId gamma = g.add_parameter(prefix + ".weight", param_dtype(g, x), {channels}, constant_init(1.0));
  ValueId beta = g.add_parameter(prefix + ".bias", param_dtype(g, x), {channels}, constant_init(0.0));
  Attrs a;
  a.set("eps", eps);
  return g.add_op("layernorm", prefix, {x, gamma, beta}, a).at(0);
}

ValueId add_groupnorm(Graph& g, const std::string& prefix, ValueId x, int64_t channels, int64_t groups,
                      double eps) {
  ValueId gamma = g.add_parameter(prefix + ".weight", param_dtype(g, x), {channels}, constant_init(1.0));
  ValueId beta = g.add_parameter(prefix + ".bias", param_dtype(g, x), {channels}, constant_init(0.0));
  Attrs a;
  a.set("groups", groups);
  a.set("eps", eps);
  return g.add_op("groupnorm", prefix, {x, gamma, beta}, a).at(0);
}

ValueId add_unary(Graph& g, const std::string& op, const std::string& name, ValueId x) {
  return g.add_op(op, name, {x}, Attrs()).at(0);
}

ValueId add_binary(Graph& g, const std::string& op, const std::string& name, ValueId a, ValueId b) {
  return g.add_op(op, name, {a, b}, Attrs()).at(0);
}

ValueId add_classification_loss(Graph& g, ValueId logits, ValueId labels) {
  ValueId loss = g.add_op("cross_entropy", "loss", {logits, labels}, Attrs()).at(0);
  g.mark_output(logits);
  g.set_loss(loss);
  return loss;
}

}  // namespace cohort::models
