// A multi-layer perceptron classifier: x [B, in] -> (linear, activation) per hidden size ->
// linear -> logits [B, classes]; loss = cross_entropy(logits, y). Parameters "fc1.weight",
// "fc1.bias", ... "fc<n+1>.weight" (PyTorch nn.Linear layout [out, in] and default init).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace cohort::models {

struct MlpConfig {
  int64_t batch = 32;
  int64_t in_features = 784;
  std::vector<int64_t> hidden = {128};
  int64_t classes = 10;
  std::string activation = "relu";  // relu | gelu | tanh
};

// Throws kInvalidArgument naming the first bad field ("mlp: hidden[1] (0) must be >= 1").
void validate(const MlpConfig& config);

// Inputs "x" f32 [batch, in_features] and "y" i32 [batch]; output "logits"; loss "loss".
Graph build_mlp(const MlpConfig& config);

}  // namespace cohort::models
