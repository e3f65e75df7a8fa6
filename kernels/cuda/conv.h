// The pieces of a 2-D convolution on the GPU that are not matrix products: im2col (the input's
// receptive fields laid out as the columns of a matrix, so the convolution is a gemm), col2im
// (its adjoint: column gradients summed back onto the input), the bias broadcast and the bias
// gradient, and the dtype conversions the fp32 gradient path needs. The products themselves go
// through kernels/cuda/gemm.h (core/ops/cuda/conv.cpp puts the two together).
//
// Layouts as in kernels/cpu/conv.h: x [N, C, H, W], weight [O, C/groups, KH, KW], y [N, O, OH, OW].
// A column row is k = (c * KH + kh) * KW + kw (K = C * KH * KW rows, the weight's row order per
// group) and a column is p = oh * OW + ow (P = OH * OW); its value is
//   x[n, c, oh * stride_h - pad_h + kh * dilation_h, ow * stride_w - pad_w + kw * dilation_w]
// or 0 where that falls in the padding.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

struct Conv2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t O = 0, KH = 0, KW = 0, OH = 0, OW = 0;
  int64_t groups = 1;
  int64_t stride[2] = {1, 1}, pad[2] = {0, 0}, dilation[2] = {1, 1};
};

// The columns of samples n0 .. n0 + nb - 1: element (k, n, p) goes to col[k * ld_k + n * ld_n + p]
// (n counted from n0), so [nb, K, P] (ld_k = P, ld_n = K * P) and [K, nb * P] (ld_k = nb * P,
// ld_n = P) are both one call. x has storage type `x_type`; col has `col_type`, which is x_type or
// kF32 (bf16 widens exactly; fp32 never narrows).
void im2col(const Conv2dGeometry& g, DType x_type, const void* x, DType col_type, void* col, int64_t n0,
            int64_t nb, int64_t ld_k, int64_t ld_n, cudaStream_t stream);

// The adjoint of im2col for samples n0 .. n0 + nb - 1: dx[n0 + n, c, h, w] = the sum over the taps
// (kh, kw) that read (h, w) of col[k * ld_k + n * ld_n + p] (fp32 columns). dx (storage type
// dx_type) is overwritten; a cell no tap reads gets 0. The taps are summed in (kh, kw) order by
// one thread per cell: deterministic, no atomics.
void col2im(const Conv2dGeometry& g, const float* col, int64_t ld_k, int64_t ld_n, DType dx_type, void* dx,
            int64_t n0, int64_t nb, cudaStream_t stream);

// y[n, o, p] = bias[o] (0 where bias is null) for n < N, o < O, p < P: the start a gemm with
// beta = 1 adds the products to, so the bias is added in fp32 before y is rounded once.
void conv_bias_fill(DType type, const void* bias, void* y, int64_t N, int64_t O, int64_t P, cudaStream_t stream);

// db[o] = sum over n < N and p < P of dy[n, o, p]; one block per channel, fp32 partial sums in a
// fixed order (deterministic), rounded once to the storage type.
void conv_bias_grad(DType type, const void* dy, void* db, int64_t N, int64_t O, int64_t P, cudaStream_t stream);

// out[o, n, p] = in[n0 + n, o, p] in fp32 for n < nb: an activation gradient [N, O, P] regrouped by
// channel, [O, nb * P], so the weight gradient of a whole chunk of samples is one product.
void gather_channels(DType type, const void* in, float* out, int64_t n0, int64_t nb, int64_t O, int64_t P,
                     cudaStream_t stream);

// out[i] = in[i] converted: widen_to_f32 from the storage type (exact), narrow_from_f32 to it
// (round to nearest even for bf16; a copy for fp32).
void widen_to_f32(DType type, const void* in, float* out, int64_t n, cudaStream_t stream);
void narrow_from_f32(DType type, const float* in, void* out, int64_t n, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
