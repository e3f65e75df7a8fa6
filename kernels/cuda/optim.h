// Fused AdamW on the GPU, the same update as kernels/cpu/optim.h's adamw_update (PyTorch's
// operation order; the argument struct is shared so the two backends take identical settings).
#pragma once

#include <cstdint>

#include "kernels/cpu/optim.h"
#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

using AdamWArgs = cpu::AdamWArgs;

// One pass per element (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization",
// alg. 2, with PyTorch's bias correction):
//   g = grad * grad_scale; p *= 1 - lr * weight_decay;
//   m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//   p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
// with step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t) from the
// caller. param, exp_avg, exp_avg_sq are fp32 (param is the master copy); grad is grad_type;
// when param_bf16 is not null the rounded parameter is written there in the same pass.
void adamw_update(float* param, const void* grad, DType grad_type, float* exp_avg,
                  float* exp_avg_sq, uint16_t* param_bf16, int64_t n, const AdamWArgs& args,
                  cudaStream_t stream);

}  // namespace cohort::kernels::cuda
