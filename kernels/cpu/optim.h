// Optimizer update loops on contiguous fp32 buffers (OpenMP, vectorisable). Each loop reads the
// gradient once, multiplied by grad_scale (the clipping factor), and updates in place. When
// param_bf16 is not null, param is the fp32 master copy and the rounded result is also written
// to param_bf16 in the same pass. The gradients' norm is measured before (sum_of_squares): it
// decides whether the update runs at all (NaN or Inf skip it), so it cannot be measured inside.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// PyTorch SGD (dampening 0): g = grad_scale*grad + weight_decay*p; with momentum,
// buf = momentum*buf + g and g = nesterov ? g + momentum*buf : buf; p -= lr*g.
// momentum_buf may be null when momentum == 0.
struct SgdArgs {
  float lr = 0;
  float momentum = 0;
  float weight_decay = 0;
  float grad_scale = 1;
  bool nesterov = false;
};
void sgd_update(float* param, const float* grad, float* momentum_buf, uint16_t* param_bf16, int64_t n,
                const SgdArgs& args);

// PyTorch AdamW: p *= 1 - lr*weight_decay; m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g^2;
// p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps), where the caller passes
// step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t).
struct AdamWArgs {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  float grad_scale = 1;
  float step_size = 0;
  float bias_correction2_sqrt = 1;
  // > 1: the second moment is estimated for the mean of this many ranks' gradients (local steps
  // of data parallelism: see optim.cpp); 1: plain AdamW.
  float noise_ranks = 1;
  float bias_correction1 = 1;  // 1 - beta1^t, used when noise_ranks > 1
};
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, uint16_t* param_bf16,
                  int64_t n, const AdamWArgs& args);

// Sum of x[i]^2, accumulated in double.
double sum_of_squares(const float* x, int64_t n);
double sum_of_squares_bf16(const uint16_t* x, int64_t n);

}  // namespace cohort::kernels::cpu
