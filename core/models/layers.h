// Building blocks shared by the model builders (mlp, cnn, gpt): each adds its parameters, named
// like PyTorch's state_dict ("<prefix>.weight", "<prefix>.bias"), and its operator nodes to a
// Graph, and returns the output value. Initialisers follow PyTorch's module defaults unless the
// caller passes others (GPT-2 uses normal(0, 0.02)). Parameters take the dtype of the input they
// act on: bf16 activations get bf16 parameters, anything else f32.
#pragma once

#include <cstdint>
#include <string>

#include "core/graph/graph.h"

namespace cohort::models {

// PyTorch's nn.Linear / nn.Conv2d default for weights: kaiming_uniform(a = sqrt(5)), which is
// uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)); Kaiming-uniform with gain 1/sqrt(3) gives exactly that.
Initializer torch_default_weight_init();
// PyTorch's default for biases: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Initializer torch_default_bias_init(int64_t fan_in);
Initializer normal_init(double std);
Initializer constant_init(double value);

struct LinearInit {
  Initializer weight = torch_default_weight_init();
  bool torch_bias = true;                 // uniform(+-1/sqrt(in)) when true, else `bias`
  Initializer bias = constant_init(0.0);
};

// y = x W^T + b with W "<prefix>.weight" [out, in] and, when `bias`, b "<prefix>.bias" [out].
// op "gelu_linear" makes it y = gelu(x) W^T + b in one operator (a transformer MLP's activation and
// down-projection, whose backward is cheaper fused); `attrs` go to the operator.
ValueId add_linear(Graph& g, const std::string& prefix, ValueId x, int64_t in, int64_t out, bool bias,
                   const LinearInit& init = LinearInit(), const std::string& op = "linear",
                   const Attrs& attrs = Attrs());

// 2-D convolution, weight "<prefix>.weight" [out, in, k, k], PyTorch default init, no bias.
ValueId add_conv(Graph& g, const std::string& prefix, ValueId x, int64_t in, int64_t out, int64_t kernel,
                 int64_t stride, int64_t padding);

// Normalisations with gamma "<prefix>.weight" = 1 and beta "<prefix>.bias" = 0 over `channels`.
ValueId add_layernorm(Graph& g, const std::string& prefix, ValueId x, int64_t channels, double eps);
ValueId add_groupnorm(Graph& g, const std::string& prefix, ValueId x, int64_t channels, int64_t groups,
                      double eps);

// A one-input operator (relu, gelu, tanh, ...) named `name`.
ValueId add_unary(Graph& g, const std::string& op, const std::string& name, ValueId x);
ValueId add_binary(Graph& g, const std::string& op, const std::string& name, ValueId a, ValueId b);

// cross_entropy(logits, labels) named "loss", set as the graph's loss; logits marked as output.
ValueId add_classification_loss(Graph& g, ValueId logits, ValueId labels);

}  // namespace cohort::models
