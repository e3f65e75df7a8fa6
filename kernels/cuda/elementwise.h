// Element-wise CUDA kernels on contiguous device buffers of one storage type (fp32 or bf16;
// fp32 math). Every launch goes on the given stream and is checked; nothing synchronizes.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

enum class BinaryOp { kAdd, kMul };

// out[i] = a[i] op b[i % b_n] for i < n: b_n == n is the same-shape case, b_n == C with
// n = rows * C broadcasts a bias row over the rows. n must be a multiple of b_n. out may alias a.
void binary(BinaryOp op, DType type, const void* a, int64_t n, const void* b, int64_t b_n,
            void* out, cudaStream_t stream);

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
