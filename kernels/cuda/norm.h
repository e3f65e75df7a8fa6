// Layer norm and RMS norm over the last dim of [rows, C] and group norm over [N, C, HW] on the
// GPU, with the semantics of kernels/cpu/norm.h (plus the column sum used for bias gradients).
// Layer norm: y = (x - mean) * rstd * gamma + beta, mean and rstd saved per row (fp32) for the
// backward. x, gamma, beta, y, dy, dx and the parameter gradients share one storage type (a bf16
// model's parameters are bf16, and so are their gradients); statistics are fp32.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// One warp per row, two passes over the row (mean, then centred variance) as on the CPU.
void layernorm_forward(DType type, const void* x, const void* gamma, const void* beta, void* y,
                       float* mean, float* rstd, int64_t rows, int64_t C, float eps,
                       cudaStream_t stream);

// Floats of workspace layernorm_backward needs for dgamma/dbeta partial sums.
int64_t layernorm_backward_workspace(int64_t rows, int64_t C);
// Floats of workspace the column sums of sum_rows and rmsnorm_backward need (their chunk partials:
// no more than layernorm_backward_workspace, which may hold the one-pass kernel's partials).
int64_t row_sums_workspace(int64_t rows, int64_t C);

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dx_add, g = dy * gamma (overwritten; may
// be null; may alias dy or dx_add; dx_add may be null: nothing added, else added in fp32 before
// dx is rounded once, as the CPU does);
// dgamma = sum_rows dy * xhat, dbeta = sum_rows dy (in the storage type, overwritten; null when
// not wanted, then workspace may be null). The row sums run in an order fixed by the shape:
// deterministic.
void layernorm_backward(DType type, const void* x, const void* gamma, const float* mean,
                        const float* rstd, const void* dy, const void* dx_add, void* dx,
                        void* dgamma, void* dbeta, float* workspace, int64_t rows, int64_t C,
                        cudaStream_t stream);

// out[c] = sum over rows of x[r, c] (fp32, overwritten): the bias gradient of y = x W^T + b.
// workspace: row_sums_workspace(rows, C) floats. Deterministic, like dbeta above.
void sum_rows(DType type, const void* x, float* out, float* workspace, int64_t rows, int64_t C,
              cudaStream_t stream);

// RMS norm: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps) saved per row (fp32). One
// warp per row. C may be 0 (rstd is then NaN, as on the CPU).
void rmsnorm_forward(DType type, const void* x, const void* gamma, void* y, float* rstd, int64_t rows,
                     int64_t C, float eps, cudaStream_t stream);

// dx = rstd * (g - xhat * mean(g * xhat)) + dx_add, g = dy * gamma, xhat = x * rstd (dx_add may
// be null: then nothing is added; it is added in fp32 before dx is rounded); dgamma = sum_rows
// dy * xhat in the storage type. workspace: row_sums_workspace(rows, C) floats.
// Deterministic like layer norm's.
void rmsnorm_backward(DType type, const void* x, const void* gamma, const float* rstd, const void* dy,
                      const void* dx_add, void* dx, void* dgamma, float* workspace, int64_t rows,
                      int64_t C, cudaStream_t stream);

// Group norm, groups dividing C: mean and rstd per (n, group) over its C/groups channels x HW
// (fp32, [N, groups], two passes as on the CPU); y = (x - mean) * rstd * gamma[c] + beta[c].
// One block per (n, group).
void groupnorm_forward(DType type, const void* x, const void* gamma, const void* beta, void* y,
                       float* mean, float* rstd, int64_t N, int64_t C, int64_t HW, int64_t groups,
                       float eps, cudaStream_t stream);

// dx as layer norm's over each (n, group) block; dgamma[c] = sum over n and HW of
// dy * (x - mean) * rstd, dbeta[c] = sum of dy, in the storage type (one block per channel, fixed
// reduction order: deterministic, no workspace).
void groupnorm_backward(DType type, const void* x, const void* gamma, const float* mean,
                        const float* rstd, const void* dy, void* dx, void* dgamma, void* dbeta,
                        int64_t N, int64_t C, int64_t HW, int64_t groups, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
