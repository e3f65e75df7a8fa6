// Element-wise loops on contiguous fp32 buffers: broadcasting binary ops, activations and their
// derivatives, and reduction of a broadcast result back to an operand's shape.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::kernels::cpu {

enum class BinaryOp { kAdd, kSub, kMul };
enum class UnaryOp { kRelu, kGelu, kTanh };

// out[i] = a[ia] op b[ib] with NumPy broadcasting: shapes are aligned at their last dimension;
// an extent of 1 (or a missing leading dim) repeats. out_shape is the broadcast shape.
void binary(BinaryOp op, const float* a, const std::vector<int64_t>& a_shape, const float* b,
            const std::vector<int64_t>& b_shape, float* out, const std::vector<int64_t>& out_shape);

void scale(const float* x, float factor, float* out, int64_t n);
void unary(UnaryOp op, const float* x, float* out, int64_t n);
// dx = dy * f'(x) (relu, gelu) or dy * (1 - y^2) (tanh, given y = tanh(x)).
void unary_grad(UnaryOp op, const float* x_or_y, const float* dy, float* dx, int64_t n);
// y = gelu(x) (tanh approximation) and dydx = gelu'(x) in one pass, for a backward pass that
// multiplies by the saved derivative instead of recomputing it from x.
void gelu_with_grad(const float* x, float* y, float* dydx, int64_t n);

// Sums x (shape in_shape) into out (shape out_shape, broadcast-compatible with in_shape).
void reduce_to_shape(const float* x, const std::vector<int64_t>& in_shape, float* out,
                     const std::vector<int64_t>& out_shape);
void fill(float* out, float value, int64_t n);

}  // namespace cohort::kernels::cpu
