// Element-wise CUDA kernels on contiguous device buffers of one storage type (fp32 or bf16;
// fp32 math). Every launch goes on the given stream and is checked; nothing synchronizes.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

enum class BinaryOp { kAdd, kSub, kMul };

// out[i] = a[i] op b[i % b_n] for i < n: b_n == n is the same-shape case, b_n == C with
// n = rows * C broadcasts a bias row over the rows. n must be a multiple of b_n. out may alias a.
void binary(BinaryOp op, DType type, const void* a, int64_t n, const void* b, int64_t b_n,
            void* out, cudaStream_t stream);

// out = a op b with NumPy broadcasting, as kernels/cpu's binary: the shapes are aligned at their
// last dimension and an extent of 1 (or a missing leading dimension) repeats; out_shape is the
// broadcast shape. Same shapes and an operand repeating along the leading dims (a bias, a
// scalar) take the flat kernel, every other pattern a strided one. out must not overlap a or b
// unless it equals one of the same shape.
void binary_broadcast(BinaryOp op, DType type, const void* a, const std::vector<int64_t>& a_shape,
                      const void* b, const std::vector<int64_t>& b_shape, void* out,
                      const std::vector<int64_t>& out_shape, cudaStream_t stream);
// out = 0 + x broadcast to out_shape (as the CPU's broadcast_to, which adds x to zeros: a -0
// becomes +0).
void broadcast_to(DType type, const void* x, const std::vector<int64_t>& x_shape, void* out,
                  const std::vector<int64_t>& out_shape, cudaStream_t stream);

// out[i] = x[i] * factor (fp32 product, as kernels/cpu's scale). out may alias x.
void scale(DType type, const void* x, float factor, void* out, int64_t n, cudaStream_t stream);

// out = (sum of x over the dimensions where out_shape has extent 1 or no dimension) / divisor:
// the reduction of a broadcast result back to an operand's shape (sum_to; sum and mean with
// out_shape []), as kernels/cpu's reduce_to_shape followed by the division. x and out share one
// storage type; the sums are fp32 and run in an order fixed by the shapes (deterministic): when
// each output sums at most a few elements, or there are many outputs, one thread adds its
// elements in the CPU's order; leading-dim sums go through sum_rows (norm.h); other cases add
// fixed chunks in blocks and the chunk sums in chunk order. An empty x gives 0 / divisor, and
// out_shape == x's element count a copy (divided when divisor != 1).
// workspace: reduce_sum_workspace(...) floats (may be null when that is 0).
int64_t reduce_sum_workspace(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& out_shape);
void reduce_sum(DType type, const void* x, const std::vector<int64_t>& x_shape, void* out,
                const std::vector<int64_t>& out_shape, float divisor, float* workspace,
                cudaStream_t stream);

// y = gelu(x + bias[i % C]) with the tanh approximation (Hendrycks & Gimpel 2016, as in
// kernels/cpu/elementwise.cpp): gelu(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))).
// bias may be null (then C is ignored); y may alias x.
void gelu_forward(DType type, const void* x, const void* bias, void* y, int64_t n, int64_t C,
                  cudaStream_t stream);
// dx = dy * gelu'(x + bias[i % C]); x is the forward's input (before the bias). dx may alias dy.
void gelu_backward(DType type, const void* x, const void* bias, const void* dy, void* dx, int64_t n,
                   int64_t C, cudaStream_t stream);

// g = gelu'(x + bias[i % C]) alone, for a backward that multiplies by it later (the CPU's
// gelu_with_grad is gelu_forward plus this). g may alias x.
void gelu_derivative(DType type, const void* x, const void* bias, void* g, int64_t n, int64_t C,
                     cudaStream_t stream);
// y = relu(x) or tanh(x) (y may alias x), and the gradient dx = dy * act'(.) (dx may alias dy)
// from what the forward saved, as kernels/cpu's unary_grad: ReLU its input (dy where x > 0, else
// 0), tanh its output y (dy (1 - y^2)).
enum class Activation { kRelu, kTanh };
void activation_forward(Activation act, DType type, const void* x, void* y, int64_t n, cudaStream_t stream);
void activation_backward(Activation act, DType type, const void* saved, const void* dy, void* dx, int64_t n,
                         cudaStream_t stream);

// out[i] = value for i < n (rounded to bf16 for kBF16).
void fill(DType type, void* out, float value, int64_t n, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
