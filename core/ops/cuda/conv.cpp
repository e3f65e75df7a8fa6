// CUDA kernels of conv2d and its gradients and of max_pool2d / avg_pool2d and theirs, with the
// CPU kernels' semantics (core/ops/conv.cpp): groups, stride, padding and dilation as there.
// Convolutions are im2col (kernels/cuda/conv.h) plus cuBLAS products, one per group, batched over
// the samples of a chunk (or over the groups, when there are more of them); columns are made for a
// chunk of samples at a time so their scratch stays bounded.
//   forward:      y(n, grp) [Og, P] = W(grp) [Og, Kg] col(n, grp) [Kg, P] + bias, in the storage
//                 type: the bias is put in y first and the product added to it (beta = 1), so y
//                 is rounded once, as the CPU rounds its fp32 result.
//   grad input:   dcol(n, grp) = W(grp)^T dy(n, grp), then col2im sums the taps onto dx.
//   grad weight:  dW(grp) = sum over the chunk's samples of dy(n, grp) col(n, grp)^T, one product
//                 per chunk with the samples side by side ([K, nb * P] columns, dy regrouped to
//                 [O, nb * P]); chunks accumulate with beta = 1 in a fixed order (deterministic).
// The gradients compute in fp32 whatever the storage type: bf16 operands are widened (exactly)
// into fp32 scratch and the result rounded once, which is what the CPU does with bf16 tensors
// (TODO(#7): bf16 products for the gradients, at the cost of a rounding of dcol / per chunk).
// P = OH * OW, K = C * KH * KW, Kg = K / groups, Og = O / groups.
#include <algorithm>

#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/pool.h"

namespace cohort::cuda_ops {

namespace {

// Column elements made per chunk of samples (128 MiB of fp32); a chunk holds at least one sample.
constexpr int64_t kColumnBudget = int64_t{1} << 25;

// A two-element attribute, `fallback` standing in for an empty list (pool stride). The shape
// rule has validated the values; a bad one here means a graph built around it.
std::vector<int64_t> pair_attr(const Attrs& a, const char* name, const std::vector<int64_t>* fallback = nullptr) {
  std::vector<int64_t> v = a.get_ints(name);
  if (v.empty() && fallback) v = *fallback;
  COHORT_CHECK(v.size() == 2, Status::kInvalidArgument, "attribute '", name, "' is ", shape_str(v),
               ", expected two values");
  return v;
}

// As core/ops/conv.cpp's conv_geometry (the CPU kernels' geometry) from x's and weight's shapes.
kcu::Conv2dGeometry conv_geometry(const Shape& x, const Shape& w, const Attrs& a) {
  COHORT_CHECK(x.size() == 4 && w.size() == 4, Status::kInvalidArgument, "conv2d on cuda: shapes ", shape_str(x),
               " and ", shape_str(w), ", expected rank 4");
  kcu::Conv2dGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.O = w[0], g.KH = w[2], g.KW = w[3];
  g.groups = a.get_int("groups");
  const auto s = pair_attr(a, "stride"), p = pair_attr(a, "padding"), d = pair_attr(a, "dilation");
  for (size_t i = 0; i < 2; ++i) g.stride[i] = s[i], g.pad[i] = p[i], g.dilation[i] = d[i];
  const int64_t span_h = g.dilation[0] * (g.KH - 1) + 1, span_w = g.dilation[1] * (g.KW - 1) + 1;
  g.OH = g.H + 2 * g.pad[0] < span_h ? 0 : (g.H + 2 * g.pad[0] - span_h) / g.stride[0] + 1;
  g.OW = g.W + 2 * g.pad[1] < span_w ? 0 : (g.W + 2 * g.pad[1] - span_w) / g.stride[1] + 1;
  COHORT_CHECK(g.groups >= 1 && g.C % g.groups == 0 && g.O % g.groups == 0 && w[1] == g.C / g.groups,
               Status::kInvalidArgument, "conv2d on cuda: groups ", g.groups, " do not fit ", shape_str(x), " and ",
               shape_str(w));
  return g;
}

// As core/ops/conv.cpp's pool_geometry.
kcu::Pool2dGeometry pool_geometry(const Shape& x, const Attrs& a) {
  COHORT_CHECK(x.size() == 4, Status::kInvalidArgument, "pooling on cuda: shape ", shape_str(x),
               ", expected rank 4");
  kcu::Pool2dGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  const auto k = pair_attr(a, "kernel");
  const auto s = pair_attr(a, "stride", &k), p = pair_attr(a, "padding");
  for (size_t i = 0; i < 2; ++i) g.kernel[i] = k[i], g.stride[i] = s[i], g.pad[i] = p[i];
  g.OH = g.H + 2 * g.pad[0] < g.kernel[0] ? 0 : (g.H + 2 * g.pad[0] - g.kernel[0]) / g.stride[0] + 1;
  g.OW = g.W + 2 * g.pad[1] < g.kernel[1] ? 0 : (g.W + 2 * g.pad[1] - g.kernel[1]) / g.stride[1] + 1;
  return g;
}

const void* offset(const void* p, int64_t elements, kcu::DType type) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(kcu::dtype_size(type));
}
void* offset(void* p, int64_t elements, kcu::DType type) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(kcu::dtype_size(type));
}

// Samples per chunk when each needs `per_sample` scratch elements.
int64_t chunk_samples(int64_t N, int64_t per_sample) {
  return std::max<int64_t>(1, std::min(N, kColumnBudget / std::max<int64_t>(per_sample, 1)));
}

size_t floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// Operand (n, grp) of a family of products is at base + n * per_sample + grp * per_group
// (elements), with leading dimension ld.
struct Operand {
  const void* base;
  int64_t ld, per_sample, per_group;
};
struct Output {
  void* base;
  int64_t ld, per_sample, per_group;
};

// C(n, grp) = op(A(n, grp)) op(B(n, grp)) + beta C(n, grp) for n < samples, grp < groups (each
// [M, Nc], inner dimension K), as strided batched products over the longer index, looping over the
// other.
void grouped_gemm(kcu::DType type, bool ta, bool tb, int64_t samples, int64_t groups, int64_t M, int64_t Nc,
                  int64_t K, const Operand& A, const Operand& B, float beta, const Output& C) {
  kcu::Blas& blas = cuda_context().blas;
  if (samples >= groups) {
    for (int64_t grp = 0; grp < groups; ++grp)
      blas.gemm_batched(type, ta, tb, samples, M, Nc, K, 1.0f, offset(A.base, grp * A.per_group, type), A.ld,
                        A.per_sample, offset(B.base, grp * B.per_group, type), B.ld, B.per_sample, beta,
                        offset(C.base, grp * C.per_group, type), C.ld, C.per_sample);
  } else {
    for (int64_t n = 0; n < samples; ++n)
      blas.gemm_batched(type, ta, tb, groups, M, Nc, K, 1.0f, offset(A.base, n * A.per_sample, type), A.ld,
                        A.per_group, offset(B.base, n * B.per_sample, type), B.ld, B.per_group, beta,
                        offset(C.base, n * C.per_sample, type), C.ld, C.per_group);
  }
}

struct ConvDims {
  int64_t P, K, Kg, Og;
};
ConvDims conv_dims(const kcu::Conv2dGeometry& g) {
  const int64_t K = g.C * g.KH * g.KW;
  return {g.OH * g.OW, K, K / g.groups, g.O / g.groups};
}

// (x, weight[, bias]) -> y
void conv2d_kernel(KernelContext& k) {
  const Tensor &x = k.inputs[0], &w = k.inputs[1];
  const Tensor* bias = k.inputs.size() > 2 ? &k.inputs[2] : nullptr;
  Tensor& y = k.outputs[0];
  const kcu::DType type = storage_type(x, "conv2d");
  const kcu::Conv2dGeometry g = conv_geometry(x.shape(), w.shape(), k.attrs);
  if (y.numel() == 0) return;
  const ConvDims d = conv_dims(g);
  const cudaStream_t stream = compute_stream();
  const bool prefilled = bias || d.K == 0;  // an empty sum (no input channels) leaves the bias or 0
  if (prefilled) kcu::conv_bias_fill(type, bias ? bias->raw() : nullptr, y.raw(), g.N, g.O, d.P, stream);
  if (d.K == 0) return;
  const int64_t nb = chunk_samples(g.N, d.K * d.P);
  CudaScratch col(static_cast<size_t>(nb * d.K * d.P) * kcu::dtype_size(type));
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t b = std::min(nb, g.N - n0);
    kcu::im2col(g, type, x.raw(), type, col.as<void>(), n0, b, d.P, d.K * d.P, stream);
    // y(n, grp) [Og, P] (+)= W(grp) [Og, Kg] col(n, grp) [Kg, P]
    grouped_gemm(type, false, false, b, g.groups, d.Og, d.P, d.Kg, {w.raw(), d.Kg, 0, d.Og * d.Kg},
                 {col.as<void>(), d.P, d.K * d.P, d.Kg * d.P}, prefilled ? 1.0f : 0.0f,
                 {offset(y.raw(), n0 * g.O * d.P, type), d.P, g.O * d.P, d.Og * d.P});
  }
}

// (dy, weight) -> dx of shape input_shape
void conv2d_grad_input_kernel(KernelContext& k) {
  const Tensor &dy = k.inputs[0], &w = k.inputs[1];
  Tensor& dx = k.outputs[0];
  const kcu::DType type = storage_type(dy, "conv2d_grad_input");
  const kcu::Conv2dGeometry g = conv_geometry(k.attrs.get_ints("input_shape"), w.shape(), k.attrs);
  if (dx.numel() == 0) return;
  const ConvDims d = conv_dims(g);
  const cudaStream_t stream = compute_stream();
  if (d.Og == 0 || d.P == 0) {  // no output reads the input: a zero gradient
    kcu::fill(type, dx.raw(), 0.0f, dx.numel(), stream);
    return;
  }
  const bool widen = type != kcu::DType::kF32;
  CudaScratch w32(widen ? floats(w.numel()) : 0);
  if (widen) kcu::widen_to_f32(type, w.raw(), w32.as<float>(), w.numel(), stream);
  const float* wf = widen ? w32.as<float>() : w.data<float>();
  const int64_t nb = chunk_samples(g.N, d.K * d.P + (widen ? g.O * d.P : 0));
  CudaScratch dcol(floats(nb * d.K * d.P)), dy32(widen ? floats(nb * g.O * d.P) : 0);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t b = std::min(nb, g.N - n0);
    const float* dyf = dy.data<float>() + n0 * g.O * d.P;
    if (widen) {
      kcu::widen_to_f32(type, offset(dy.raw(), n0 * g.O * d.P, type), dy32.as<float>(), b * g.O * d.P, stream);
      dyf = dy32.as<float>();
    }
    // dcol(n, grp) [Kg, P] = W(grp)^T [Kg, Og] dy(n, grp) [Og, P]
    grouped_gemm(kcu::DType::kF32, true, false, b, g.groups, d.Kg, d.P, d.Og, {wf, d.Kg, 0, d.Og * d.Kg},
                 {dyf, d.P, g.O * d.P, d.Og * d.P}, 0.0f, {dcol.as<float>(), d.P, d.K * d.P, d.Kg * d.P});
    kcu::col2im(g, dcol.as<float>(), d.P, d.K * d.P, type, dx.raw(), n0, b, stream);
  }
}

// (x, dy) -> dweight of shape weight_shape
void conv2d_grad_weight_kernel(KernelContext& k) {
  const Tensor &x = k.inputs[0], &dy = k.inputs[1];
  Tensor& dw = k.outputs[0];
  const kcu::DType type = storage_type(x, "conv2d_grad_weight");
  const kcu::Conv2dGeometry g = conv_geometry(x.shape(), k.attrs.get_ints("weight_shape"), k.attrs);
  if (dw.numel() == 0) return;
  const ConvDims d = conv_dims(g);
  const cudaStream_t stream = compute_stream();
  if (g.N == 0 || d.P == 0) {  // an empty sum over the batch
    kcu::fill(type, dw.raw(), 0.0f, dw.numel(), stream);
    return;
  }
  const bool widen = type != kcu::DType::kF32;
  CudaScratch acc32(widen ? floats(dw.numel()) : 0);
  float* acc = widen ? acc32.as<float>() : dw.data<float>();
  const int64_t nb = chunk_samples(g.N, (d.K + g.O) * d.P);
  CudaScratch col(floats(nb * d.K * d.P)), dyt(floats(nb * g.O * d.P));
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t b = std::min(nb, g.N - n0), span = b * d.P;  // the chunk's samples side by side
    kcu::im2col(g, type, x.raw(), kcu::DType::kF32, col.as<void>(), n0, b, span, d.P, stream);
    kcu::gather_channels(type, dy.raw(), dyt.as<float>(), n0, b, g.O, d.P, stream);
    // dW(grp) [Og, Kg] (+)= dyt(grp) [Og, span] col(grp)^T [span, Kg]
    grouped_gemm(kcu::DType::kF32, false, true, 1, g.groups, d.Og, d.Kg, span,
                 {dyt.as<float>(), span, 0, d.Og * span}, {col.as<float>(), span, 0, d.Kg * span},
                 n0 == 0 ? 0.0f : 1.0f, {acc, d.Kg, 0, d.Og * d.Kg});
  }
  if (widen) kcu::narrow_from_f32(type, acc, dw.raw(), dw.numel(), stream);
}

// dy [N, O, OH, OW] -> db [O]
void conv2d_grad_bias_kernel(KernelContext& k) {
  const Tensor& dy = k.inputs[0];
  Tensor& db = k.outputs[0];
  const kcu::DType type = storage_type(dy, "conv2d_grad_bias");
  kcu::conv_bias_grad(type, dy.raw(), db.raw(), dy.dim(0), dy.dim(1), dy.dim(2) * dy.dim(3), compute_stream());
}

}  // namespace

void register_conv(OpRegistry& r) {
  set_cuda_kernel(r, "conv2d", "TTT>T", conv2d_kernel);
  set_cuda_kernel(r, "conv2d_grad_input", "TT>T", conv2d_grad_input_kernel);
  set_cuda_kernel(r, "conv2d_grad_weight", "TT>T", conv2d_grad_weight_kernel);
  set_cuda_kernel(r, "conv2d_grad_bias", "T>T", conv2d_grad_bias_kernel);

  set_cuda_kernel(r, "max_pool2d", "T>TI", [](KernelContext& k) {  // x -> y, argmax (i32)
    const Tensor& x = k.inputs[0];
    kcu::max_pool2d(pool_geometry(x.shape(), k.attrs), storage_type(x, "max_pool2d"), x.raw(), k.outputs[0].raw(),
                    k.outputs[1].data<int32_t>(), compute_stream());
  });
  set_cuda_kernel(r, "max_pool2d_grad", "TI>T", [](KernelContext& k) {  // (dy, argmax) -> dx
    const Tensor& dy = k.inputs[0];
    kcu::max_pool2d_grad(pool_geometry(k.attrs.get_ints("input_shape"), k.attrs),
                         storage_type(dy, "max_pool2d_grad"), dy.raw(), k.inputs[1].data<int32_t>(),
                         k.outputs[0].raw(), compute_stream());
  });
  set_cuda_kernel(r, "avg_pool2d", "T>T", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kcu::avg_pool2d(pool_geometry(x.shape(), k.attrs), storage_type(x, "avg_pool2d"), x.raw(), k.outputs[0].raw(),
                    compute_stream());
  });
  set_cuda_kernel(r, "avg_pool2d_grad", "T>T", [](KernelContext& k) {  // dy -> dx
    const Tensor& dy = k.inputs[0];
    kcu::avg_pool2d_grad(pool_geometry(k.attrs.get_ints("input_shape"), k.attrs),
                         storage_type(dy, "avg_pool2d_grad"), dy.raw(), k.outputs[0].raw(), compute_stream());
  });
}

}  // namespace cohort::cuda_ops
