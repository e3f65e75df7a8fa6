// Optimizer update loops. One pass per parameter: read grad, update state and param in place.
// The expressions follow PyTorch's operation order so that fp32 results track torch.optim.
#include "kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/vec_math.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

namespace {
// Branch-free bodies per configuration, so that every instance vectorises.
template <bool kMomentum, bool kNesterov, bool kBf16>
void sgd_loop(float* param, const float* grad, float* momentum_buf, uint16_t* param_bf16, int64_t n,
              const SgdArgs a) {
  parallel_for_simd(n, n > kParallelMin, [&](int64_t i) {
    float g = grad[i] * a.grad_scale + a.weight_decay * param[i];
    if constexpr (kMomentum) {
      const float buf = a.momentum * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      g = kNesterov ? g + a.momentum * buf : buf;
    }
    const float p = param[i] - a.lr * g;
    param[i] = p;
    if constexpr (kBf16) param_bf16[i] = round_bf16(p);
  });
}

// The per-call constants of an AdamW step.
struct AdamWCoeffs {
  explicit AdamWCoeffs(const AdamWArgs& a)
      : decay(1.0f - a.lr * a.weight_decay),
        one_minus_beta1(1.0f - a.beta1),
        one_minus_beta2(1.0f - a.beta2),
        inv_bc1(1.0f / a.bias_correction1),
        inv_bc2(1.0f / (a.bias_correction2_sqrt * a.bias_correction2_sqrt)),
        inv_n(1.0f / a.noise_ranks) {}
  float decay, one_minus_beta1, one_minus_beta2, inv_bc1, inv_bc2, inv_n;
};

// One AdamW element (vectorises under the kernels' -fno-math-errno: sqrt has no errno branch);
// returns the new parameter. kMean: the denominator estimates the second moment of the mean of
// N ranks' gradients, for ranks that step on their own gradients between averages (local SGD,
// CO2): with bias-corrected m^ and v^, v~ = m^2 + max(v^ - m^2, 0) / N, the noise variance
// shrunk as averaging N independent gradients shrinks it; p -= lr m^ / (sqrt(v~) + eps).
template <bool kMean>
inline float adamw_element(float& param, float grad, float& exp_avg, float& exp_avg_sq, const AdamWArgs& a,
                           const AdamWCoeffs& k) {
  const float g = grad * a.grad_scale;
  const float m = a.beta1 * exp_avg + k.one_minus_beta1 * g;
  const float v = a.beta2 * exp_avg_sq + k.one_minus_beta2 * g * g;
  exp_avg = m;
  exp_avg_sq = v;
  float p;
  if constexpr (kMean) {
    const float mh = m * k.inv_bc1, vh = v * k.inv_bc2;
    const float var = std::max(vh - mh * mh, 0.0f);
    p = param * k.decay - a.lr * (mh / (std::sqrt(mh * mh + var * k.inv_n) + a.eps));
  } else {
    const float denom = std::sqrt(v) / a.bias_correction2_sqrt + a.eps;
    p = param * k.decay - a.step_size * (m / denom);
  }
  param = p;
  return p;
}

// fp32 parameters (the common case): one span per thread through the widest vectors the CPU has.
COHORT_VECTOR_CLONES void adamw_span(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                                     int64_t n, const AdamWArgs a) {
  const AdamWCoeffs k(a);
  for (int64_t i = 0; i < n; ++i) adamw_element<false>(param[i], grad[i], exp_avg[i], exp_avg_sq[i], a, k);
}
COHORT_VECTOR_CLONES void adamw_mean_span(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                                          int64_t n, const AdamWArgs a) {
  const AdamWCoeffs k(a);
  for (int64_t i = 0; i < n; ++i) adamw_element<true>(param[i], grad[i], exp_avg[i], exp_avg_sq[i], a, k);
}

// Sum of squares of a span in double. kLanes independent partial sums: a single vector
// accumulator makes every add wait for the previous one (4 cycles each), which left this loop at a
// third of the speed at which memory delivers the floats.
COHORT_VECTOR_CLONES double sum_of_squares_span(const float* x, int64_t n) {
  constexpr int64_t kLanes = 32;
  double part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) part[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  }
  double acc = 0.0;
  for (; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int64_t j = 0; j < kLanes; ++j) acc += part[j];
  return acc;
}

// With a bf16 copy of the parameters kept beside the fp32 master.
template <bool kMean>
void adamw_loop_bf16(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, uint16_t* param_bf16,
                     int64_t n, const AdamWArgs a) {
  const AdamWCoeffs k(a);
  parallel_for_simd(n, n > kParallelMin, [&](int64_t i) {
    param_bf16[i] = round_bf16(adamw_element<kMean>(param[i], grad[i], exp_avg[i], exp_avg_sq[i], a, k));
  });
}
}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buf, uint16_t* param_bf16, int64_t n,
                const SgdArgs& a) {
  const bool momentum = a.momentum != 0.0f, bf16 = param_bf16 != nullptr;
  if (!momentum) {
    (bf16 ? sgd_loop<false, false, true> : sgd_loop<false, false, false>)(param, grad, nullptr, param_bf16, n, a);
  } else if (a.nesterov) {
    (bf16 ? sgd_loop<true, true, true> : sgd_loop<true, true, false>)(param, grad, momentum_buf, param_bf16, n, a);
  } else {
    (bf16 ? sgd_loop<true, false, true> : sgd_loop<true, false, false>)(param, grad, momentum_buf, param_bf16, n, a);
  }
}

void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, uint16_t* param_bf16,
                  int64_t n, const AdamWArgs& a) {
  const bool mean = a.noise_ranks > 1;
  if (param_bf16) {
    (mean ? adamw_loop_bf16<true> : adamw_loop_bf16<false>)(param, grad, exp_avg, exp_avg_sq, param_bf16, n, a);
    return;
  }
  const auto update = mean ? adamw_mean_span : adamw_span;
  parallel_spans(n, kParallelMin, [&](int64_t b, int64_t e) {
    update(param + b, grad + b, exp_avg + b, exp_avg_sq + b, e - b, a);
  });
}

double sum_of_squares(const float* x, int64_t n) {
  return parallel_span_sum(n, kParallelMin, [&](int64_t b, int64_t e) { return sum_of_squares_span(x + b, e - b); });
}

double sum_of_squares_bf16(const uint16_t* x, int64_t n) {
  return parallel_span_sum(n, kParallelMin, [&](int64_t b, int64_t e) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = b; i < e; ++i) {
      const double v = widen_bf16(x[i]);
      acc += v * v;
    }
    return acc;
  });
}

}  // namespace cohort::kernels::cpu
