// Normalisation loops on contiguous fp32 buffers: layer norm and RMS norm over the last dim of
// [rows, C], group norm over [N, C, HW]. Forward passes save per-row (per-group) statistics so
// the backward passes never recompute them. Parameter gradients (dgamma, dbeta) are reduced in
// a fixed order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// y = (x - mean) * rstd * gamma + beta per row; mean/rstd: [rows].
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t C, float eps);
// dgamma/dbeta may be null when not wanted. When dx_add is not null, dx = dx_add + d(norm)/dx: a
// gradient already summed for x is added as dx is written (no separate pass).
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t C,
                        const float* dx_add = nullptr);

// y = x * rstd * gamma with rstd = 1 / sqrt(mean(x^2) + eps) per row; rstd: [rows].
void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t C,
                     float eps);
void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                      float* dgamma, int64_t rows, int64_t C, const float* dx_add = nullptr);

// x: [N, C, HW]; statistics per (n, group) over C/groups channels x HW: mean/rstd [N, groups].
void groupnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t N, int64_t C, int64_t HW, int64_t groups, float eps);
void groupnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t N, int64_t C,
                        int64_t HW, int64_t groups);

}  // namespace cohort::kernels::cpu
