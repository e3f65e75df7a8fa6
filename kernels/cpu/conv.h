// 2-D convolution (NCHW activations, OIHW weights, optional groups) through oneDNN's forward,
// backward-data and backward-weights primitives on plain layouts, plus the bias gradient loop.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// x [N, C, H, W], weight [O, C/groups, KH, KW], y [N, O, OH, OW] with
// OH = (H + 2*pad_h - dilation_h*(KH-1) - 1) / stride_h + 1 (likewise OW). dilation 1 = dense.
struct Conv2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t O = 0, KH = 0, KW = 0, OH = 0, OW = 0;
  int64_t groups = 1;
  int64_t stride[2] = {1, 1}, pad[2] = {0, 0}, dilation[2] = {1, 1};
};

// bias may be null.
void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias, float* y);
// dx = the transposed convolution of dy with weight.
void conv2d_backward_data(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx);
// dweight = correlation of x with dy over the batch.
void conv2d_backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, float* dweight);
// db[o] = sum over n and the OH*OW plane of dy[n, o].
void conv2d_bias_grad(const float* dy, int64_t N, int64_t O, int64_t plane, float* db);

}  // namespace cohort::kernels::cpu
