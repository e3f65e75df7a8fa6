// Layer norm over the last dim of [rows, C] on the GPU, with the semantics of kernels/cpu/norm.h
// (plus the column sum used for bias gradients):
// y = (x - mean) * rstd * gamma + beta, mean and rstd saved per row (fp32) for the backward.
// x, gamma, beta, y, dy, dx share one storage type; statistics and parameter gradients are fp32.
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

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (overwritten; may be null;
// may alias dy);
// dgamma = sum_rows dy * xhat, dbeta = sum_rows dy (fp32, overwritten; null when not wanted,
// then workspace may be null). The row sums run in an order fixed by the shape: deterministic.
void layernorm_backward(DType type, const void* x, const void* gamma, const float* mean,
                        const float* rstd, const void* dy, void* dx, float* dgamma, float* dbeta,
                        float* workspace, int64_t rows, int64_t C, cudaStream_t stream);

// out[c] = sum over rows of x[r, c] (fp32, overwritten): the bias gradient of y = x W^T + b.
// workspace: layernorm_backward_workspace(rows, C) floats. Deterministic, like dbeta above.
void sum_rows(DType type, const void* x, float* out, float* workspace, int64_t rows, int64_t C,
              cudaStream_t stream);

}  // namespace cohort::kernels::cuda
