// 2-D max and average pooling on the GPU, forward and backward, with the semantics of
// kernels/cpu/pool.h: NCHW, padding never contributes (max ignores padded cells, average divides
// by the real cells of its window), max pooling saves argmax = h * W + w within the plane (the
// first maximum in row-major window order on ties; NaN never wins) and its gradient routes dy
// through it. Storage type fp32 or bf16 (fp32 math); argmax is int32.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// OH = (H + 2 * pad_h - kernel_h) / stride_h + 1 (likewise OW); callers ensure pad <= kernel / 2,
// so every window holds at least one real cell.
struct Pool2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kernel[2] = {2, 2}, stride[2] = {2, 2}, pad[2] = {0, 0};
};

void max_pool2d(const Pool2dGeometry& g, DType type, const void* x, void* y, int32_t* argmax, cudaStream_t stream);
// dx (overwritten) = the sum of dy over the outputs whose argmax is that cell, added in output
// order like the CPU's scatter: one thread per input cell gathers, so no atomics.
void max_pool2d_grad(const Pool2dGeometry& g, DType type, const void* dy, const int32_t* argmax, void* dx,
                     cudaStream_t stream);
void avg_pool2d(const Pool2dGeometry& g, DType type, const void* x, void* y, cudaStream_t stream);
// dx (overwritten) = the sum of dy / (real cells of the window) over the windows holding the cell.
void avg_pool2d_grad(const Pool2dGeometry& g, DType type, const void* dy, void* dx, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
