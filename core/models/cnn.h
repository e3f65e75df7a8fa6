// A small ResNet-style classifier for images [B, C, H, W] (Fashion-MNIST: [B, 1, 28, 28]).
//   stem:   conv3x3(C -> widths[0]) - groupnorm - relu                 "stem.conv", "stem.norm"
//   stages: for s in widths, blocks_per_stage residual blocks           "layer<s+1>.<b>.*"
//           block: conv3x3 - gn - relu - conv3x3 - gn, + shortcut, relu ("conv1", "norm1", ...)
//           the first block of every stage after the first halves H and W (stride 2) and its
//           shortcut is conv1x1(stride 2) - gn ("shortcut.conv", "shortcut.norm"); others identity
//   head:   global average pool - linear(widths.back() -> classes)     "head"
// Convolutions have no bias (a norm follows each); weights use PyTorch's Conv2d default init.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/graph.h"

namespace cohort::models {

struct CnnConfig {
  int64_t batch = 32;
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;
  std::vector<int64_t> widths = {16, 32, 64};  // channels of each stage
  int64_t blocks_per_stage = 1;
  int64_t groups = 8;  // groupnorm groups; must divide every entry of widths
  double eps = 1e-5;
};

// Throws kInvalidArgument naming the first bad field ("cnn: groups (8) must divide widths[0] (12)").
void validate(const CnnConfig& config);

// Inputs "x" f32 [batch, channels, height, width] and "y" i32 [batch]; output "logits"
// [batch, classes]; loss "loss".
Graph build_cnn(const CnnConfig& config);

}  // namespace cohort::models
