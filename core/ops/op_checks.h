// Run-time checks and attribute decoding that an operator's CPU and CUDA kernels share, defined
// in the operator's family file (core/ops/<family>.cpp). Tensors here are host tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/error.h"
#include "core/graph/attrs.h"
#include "core/ops/schema.h"
#include "core/tensor/tensor.h"
#include "kernels/cpu/attention.h"

namespace cohort {

// Throws kInvalidArgument naming the first id outside [0, V) and its position (host tensor).
void check_ids(const Tensor& ids, int64_t V);
// Throws kInvalidArgument naming the first label outside [0, V) that is not ignore_index.
void check_labels(const Tensor& labels, int64_t V, int64_t ignore_index);
// The errors those checks throw, for `value` at flat `position` of a tensor of `shape` (the
// CUDA kernels find the element on the device and report it later with the same words).
Error bad_id_error(const Shape& shape, int64_t position, int64_t value, int64_t V);
Error bad_label_error(const Shape& shape, int64_t position, int64_t value, int64_t V, int64_t ignore_index);
// cross_entropy: whether the loss is the mean (else the sum), and how many labels count (not
// ignore_index) for the mean.
bool mean_reduction(const Attrs& a);
int64_t counted_labels(const Tensor& labels, int64_t ignore_index);
// The shape rule of cross_entropy's inputs, which the vocabulary-parallel cross entropy shares:
// logits [N, V] or [B, T, V] (float), labels of the logits' shape without V (i32), attribute
// 'reduction' "mean" or "sum". Returns the labels' shape.
Shape cross_entropy_rows(const ShapeContext& c);
// The loss from the sum of the counted rows' losses: their mean (0 when none counts, not NaN: a
// fully padded batch must not poison the parameters) or the sum, as 'reduction' says.
double cross_entropy_reduce(const Attrs& a, double total, int64_t count);
// The scale of a (logits, labels, lse, dloss) gradient kernel: dloss, over the counted labels
// under the mean.
double cross_entropy_grad_scale(const KernelContext& k);
// The attention operators' dims from their attributes and the qkv shape [B, T, 3C].
kernels::cpu::AttentionDims attention_dims(const Attrs& a, const Shape& qkv);
// What concat and split_grad join along attrs.axis into output 0: the parts (null: zeros) and
// their extents. concat: its inputs. split_grad: the gradients present (attrs.present), zeros
// in the gaps, extents attrs.sizes.
struct ConcatParts {
  std::vector<const void*> parts;
  std::vector<int64_t> extents;
};
ConcatParts concat_parts(const KernelContext& k);
ConcatParts split_grad_parts(const KernelContext& k);

}  // namespace cohort
