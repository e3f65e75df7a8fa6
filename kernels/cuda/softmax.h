// Fused softmax + cross entropy over rows of [N, V] logits with int32 labels on the GPU, with the
// semantics of kernels/cpu/softmax.h's cross_entropy_forward / cross_entropy_backward.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// Per row r: lse[r] = logsumexp(logits[r, :]) and loss[r] = lse[r] - logits[r, label[r]];
// loss[r] = 0 when label[r] == ignore_index, NaN when the label is outside [0, V) (a bad label
// shows up in the loss instead of reading out of bounds). fp32 outputs.
// When dlogits is not null the same kernel also writes the gradient in a second pass over the
// row, (softmax(logits[r]) - onehot(label[r])) * grad_scale, zero rows for ignored labels; it may
// alias logits (in place, saving a [N, V] buffer). grad_scale is usually dloss / count.
void cross_entropy_forward(DType type, const void* logits, const int32_t* labels, float* loss,
                           float* lse, void* dlogits, float grad_scale, int64_t N, int64_t V,
                           int64_t ignore_index, cudaStream_t stream);

// The gradient alone from a saved lse (same formula as above), grad_scale read from device
// memory (cross_entropy_grad_scale), so nothing waits on the host. dlogits may alias logits.
void cross_entropy_backward(DType type, const void* logits, const int32_t* labels, const float* lse,
                            const float* grad_scale, void* dlogits, int64_t N, int64_t V,
                            int64_t ignore_index, cudaStream_t stream);

// *scale = dloss[0] / (labels not ignore_index) when `mean` (0 when there are none), else
// dloss[0]; dloss of `dloss_type`. One block; the count is an integer sum (deterministic).
void cross_entropy_grad_scale(const int32_t* labels, int64_t N, int64_t ignore_index,
                              const void* dloss, DType dloss_type, bool mean, float* scale,
                              cudaStream_t stream);

// out[0] = sum of loss[r] over rows whose label is not ignore_index, out[1] = their count
// (as a float). One block, fixed order: deterministic. out is device memory.
void cross_entropy_reduce(const float* loss, const int32_t* labels, int64_t N, int64_t ignore_index,
                          float* out, cudaStream_t stream);

// y = softmax(x) (log_softmax when `log`) over the middle dim of [outer, n, inner], as
// kernels/cpu/softmax.h: one block per row when inner == 1, else one thread per (outer, inner)
// column walking n. fp32 math.
void softmax_forward(DType type, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool log,
                     cudaStream_t stream);
// From the forward output y: softmax dx = y * (dy - sum(dy * y)); log_softmax dx = dy - exp(y) * sum(dy).
void softmax_backward(DType type, const void* y, const void* dy, void* dx, int64_t outer, int64_t n, int64_t inner,
                      bool log, cudaStream_t stream);

// The loss from cross_entropy_reduce's sums, written to device memory as `loss_type`: the sum,
// or with `mean` the sum over the count (0 when nothing counts, as on the CPU).
void cross_entropy_loss(const float* sums, bool mean, DType loss_type, void* loss, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
