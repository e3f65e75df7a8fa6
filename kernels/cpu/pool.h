// 2-D max and average pooling on NCHW fp32 buffers, forward and backward; own loops, one
// (n, c) plane per OpenMP iteration. Padding never contributes: max ignores padded cells and
// average divides by the number of real cells in the window (count_include_pad = false).
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// OH = (H + 2*pad_h - KH) / stride_h + 1 (likewise OW); callers ensure pad <= kernel / 2 so
// every window holds at least one real cell.
struct Pool2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kernel[2] = {2, 2}, stride[2] = {2, 2}, pad[2] = {0, 0};
};

// argmax[n, c, oh, ow] = h * W + w of the maximum within plane (n, c) (first one on ties).
void max_pool2d(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax);
void max_pool2d_grad(const Pool2dGeometry& g, const float* dy, const int32_t* argmax, float* dx);
void avg_pool2d(const Pool2dGeometry& g, const float* x, float* y);
void avg_pool2d_grad(const Pool2dGeometry& g, const float* dy, float* dx);

}  // namespace cohort::kernels::cpu
