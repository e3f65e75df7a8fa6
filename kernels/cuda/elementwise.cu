// Element-wise kernels: broadcasting add/mul, bias+GELU forward/backward, ReLU and tanh. Memory-bound: each
// thread moves 16 bytes per operand per step (grid-stride loop) when every pointer is 16-byte
// aligned and the sizes are multiples of the vector width, else a scalar loop runs.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::Vec;
constexpr int kThreads = 256;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float gelu(float u) {
  const float t = tanhf(kGeluK * (u + 0.044715f * u * u * u));
  return 0.5f * u * (1.0f + t);
}
// d/du of gelu(u) = 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 * 0.044715 u^2).
__device__ __forceinline__ float gelu_grad(float u) {
  const float t = tanhf(kGeluK * (u + 0.044715f * u * u * u));
  const float du = kGeluK * (1.0f + 3.0f * 0.044715f * u * u);
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * du;
}

// Modes of the one element-wise kernel, so that one template serves every operation.
enum Mode { kAdd, kMul, kGeluFwd, kGeluBwd, kGeluDeriv, kReluFwd, kReluBwd, kTanhFwd, kTanhBwd };

template <int M>
__device__ __forceinline__ float apply(float a, float b, float d) {
  if constexpr (M == kAdd)
    return a + b;
  else if constexpr (M == kMul)
    return a * b;
  else if constexpr (M == kGeluFwd)
    return gelu(a + b);
  else if constexpr (M == kGeluDeriv)
    return gelu_grad(a + b);
  else if constexpr (M == kGeluBwd)
    return d * gelu_grad(a + b);
  else if constexpr (M == kReluFwd)
    return a > 0.0f ? a : 0.0f;
  else if constexpr (M == kReluBwd)  // a: the forward's input
    return a > 0.0f ? d : 0.0f;
  else if constexpr (M == kTanhFwd)
    return tanhf(a);
  else  // kTanhBwd, a: the forward's output
    return d * (1.0f - a * a);
}

// out[i] = f(a[i], b ? b[i % b_n] : 0, d ? d[i] : 0). Vectorised: units of kN elements, and
// b_n is a multiple of kN so a vector never straddles the bias period.
template <typename T, int M, bool kVec>
__global__ void elementwise_kernel(const T* a, const T* b, int64_t b_n, const T* d, T* out,
                                   int64_t n) {
  constexpr int kN = kVec ? Vec<T>::kN : 1;
  const int64_t units = n / kN, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t u = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t i = u * kN;
    float va[kN], vb[kN] = {}, vd[kN] = {};  // absent operands read as 0
    if constexpr (kVec) {
      detail::load_vec(a + i, va);
      if (b) detail::load_vec(b + i % b_n, vb);
      if (d) detail::load_vec(d + i, vd);
    } else {
      va[0] = detail::to_float(a[i]);
      vb[0] = b ? detail::to_float(b[i % b_n]) : 0.0f;
      vd[0] = d ? detail::to_float(d[i]) : 0.0f;
    }
    float vo[kN];
#pragma unroll
    for (int k = 0; k < kN; ++k) vo[k] = apply<M>(va[k], vb[k], vd[k]);
    if constexpr (kVec)
      detail::store_vec(out + i, vo);
    else
      out[i] = detail::from_float<T>(vo[0]);
  }
}

template <typename T, int M>
void launch_typed(const void* a, const void* b, int64_t b_n, const void* d, void* out, int64_t n,
                  cudaStream_t stream) {
  constexpr int kN = Vec<T>::kN;
  const bool vec = n % kN == 0 && (!b || b_n % kN == 0) && detail::aligned16(a) &&
                   detail::aligned16(out) && (!b || detail::aligned16(b)) &&
                   (!d || detail::aligned16(d));
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  const auto* pd = static_cast<const T*>(d);
  auto* po = static_cast<T*>(out);
  if (vec) {
    elementwise_kernel<T, M, true>
        <<<detail::grid_for(n / kN, kThreads), kThreads, 0, stream>>>(pa, pb, b_n, pd, po, n);
  } else {
    elementwise_kernel<T, M, false>
        <<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, b_n, pd, po, n);
  }
  COHORT_CUDA_CHECK_LAUNCH("elementwise_kernel");
}

template <int M>
void launch(DType type, const void* a, const void* b, int64_t b_n, const void* d, void* out,
            int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda elementwise: n = ", n);
  if (n == 0) return;
  if (b)
    COHORT_CHECK(b_n > 0 && n % b_n == 0, Status::kInvalidArgument, "cuda elementwise: n = ", n,
                 " is not a multiple of the broadcast length ", b_n);
  if (type == DType::kF32)
    launch_typed<float, M>(a, b, b_n, d, out, n, stream);
  else
    launch_typed<bf16, M>(a, b, b_n, d, out, n, stream);
}
template <typename T>
__global__ void fill_kernel(T* out, float value, int64_t n) {
  const T v = detail::from_float<T>(value);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = v;
}
}  // namespace

void binary(BinaryOp op, DType type, const void* a, int64_t n, const void* b, int64_t b_n,
            void* out, cudaStream_t stream) {
  COHORT_CHECK(b != nullptr, Status::kInvalidArgument, "cuda binary: b is null");
  if (op == BinaryOp::kAdd)
    launch<kAdd>(type, a, b, b_n, nullptr, out, n, stream);
  else
    launch<kMul>(type, a, b, b_n, nullptr, out, n, stream);
}

void gelu_forward(DType type, const void* x, const void* bias, void* y, int64_t n, int64_t C,
                  cudaStream_t stream) {
  launch<kGeluFwd>(type, x, bias, bias ? C : 1, nullptr, y, n, stream);
}

void gelu_backward(DType type, const void* x, const void* bias, const void* dy, void* dx, int64_t n,
                   int64_t C, cudaStream_t stream) {
  COHORT_CHECK(dy != nullptr, Status::kInvalidArgument, "cuda gelu_backward: dy is null");
  launch<kGeluBwd>(type, x, bias, bias ? C : 1, dy, dx, n, stream);
}

void gelu_derivative(DType type, const void* x, const void* bias, void* g, int64_t n, int64_t C,
                     cudaStream_t stream) {
  launch<kGeluDeriv>(type, x, bias, bias ? C : 1, nullptr, g, n, stream);
}

void activation_forward(Activation act, DType type, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (act == Activation::kRelu)
    launch<kReluFwd>(type, x, nullptr, 1, nullptr, y, n, stream);
  else
    launch<kTanhFwd>(type, x, nullptr, 1, nullptr, y, n, stream);
}

void activation_backward(Activation act, DType type, const void* saved, const void* dy, void* dx, int64_t n,
                         cudaStream_t stream) {
  COHORT_CHECK(dy != nullptr, Status::kInvalidArgument, "cuda activation_backward: dy is null");
  if (act == Activation::kRelu)
    launch<kReluBwd>(type, saved, nullptr, 1, dy, dx, n, stream);
  else
    launch<kTanhBwd>(type, saved, nullptr, 1, dy, dx, n, stream);
}

void fill(DType type, void* out, float value, int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda fill: n = ", n);
  if (n == 0) return;
  if (value == 0.0f) {  // all-zero bits are +0.0 in both storage types (-0.0 fills as +0.0)
    COHORT_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * dtype_size(type), stream));
    return;
  }
  if (type == DType::kF32)
    fill_kernel<float><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<float*>(out), value, n);
  else
    fill_kernel<bf16><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<bf16*>(out), value, n);
  COHORT_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace cohort::kernels::cuda
