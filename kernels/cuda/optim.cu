// Fused AdamW kernel: reads grad, param, m, v once and writes param, m, v (and the bf16 copy)
// once — 16 (fp32 grad) + 12 (+2) bytes per element, the floor for this update.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
constexpr int kThreads = 256;

template <typename G>
__global__ void adamw_kernel(float* param, const G* grad, float* exp_avg, float* exp_avg_sq,
                             bf16* param_bf16, int64_t n, AdamWArgs a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float one_minus_beta1 = 1.0f - a.beta1, one_minus_beta2 = 1.0f - a.beta2;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = detail::to_float(grad[i]) * a.grad_scale;
    const float m = a.beta1 * exp_avg[i] + one_minus_beta1 * g;
    const float v = a.beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    // Plain division and sqrtf (IEEE-rounded under nvcc's defaults) to track the CPU loop.
    const float denom = sqrtf(v) / a.bias_correction2_sqrt + a.eps;
    const float p = param[i] * decay - a.step_size * (m / denom);
    param[i] = p;
    if (param_bf16) param_bf16[i] = __float2bfloat16_rn(p);
  }
}
}  // namespace

void adamw_update(float* param, const void* grad, DType grad_type, float* exp_avg,
                  float* exp_avg_sq, uint16_t* param_bf16, int64_t n, const AdamWArgs& args,
                  cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda adamw_update: n = ", n);
  if (n == 0) return;
  auto* pb = reinterpret_cast<bf16*>(param_bf16);
  const unsigned grid = detail::grid_for(n, kThreads);
  if (grad_type == DType::kF32) {
    adamw_kernel<float><<<grid, kThreads, 0, stream>>>(param, static_cast<const float*>(grad),
                                                       exp_avg, exp_avg_sq, pb, n, args);
  } else {
    adamw_kernel<bf16><<<grid, kThreads, 0, stream>>>(param, static_cast<const bf16*>(grad),
                                                      exp_avg, exp_avg_sq, pb, n, args);
  }
  COHORT_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace cohort::kernels::cuda
