// oneDNN convolution on plain NCHW / (G)OIHW buffers. Plain layouts let us hand our tensors to
// oneDNN without reorders; oneDNN then picks its gemm-based implementation. Its primitive cache
// makes the per-call primitive construction cheap next to a convolution's work.
#include "kernels/cpu/conv.h"

#include <vector>

#include "kernels/cpu/dnnl_util.h"

namespace cohort::kernels::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct ConvDescs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs describe(const Conv2dGeometry& g, bool with_bias) {
  ConvDescs d;
  d.src = memory::desc({g.N, g.C, g.H, g.W}, dt::f32, tag::nchw);
  d.dst = memory::desc({g.N, g.O, g.OH, g.OW}, dt::f32, tag::nchw);
  if (g.groups == 1)
    d.weights = memory::desc({g.O, g.C, g.KH, g.KW}, dt::f32, tag::oihw);
  else  // [O, C/G, KH, KW] is goihw's memory order with O split as [G, O/G]
    d.weights = memory::desc({g.groups, g.O / g.groups, g.C / g.groups, g.KH, g.KW}, dt::f32, tag::goihw);
  if (with_bias) d.bias = memory::desc({g.O}, dt::f32, tag::x);
  d.strides = {g.stride[0], g.stride[1]};
  d.dilates = {g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts the gaps
  d.pad_l = {g.pad[0], g.pad[1]};
  d.pad_r = {g.pad[0], g.pad[1]};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, bool with_bias) {
  auto& eng = dnnl_engine();
  if (with_bias)
    return {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src, d.weights, d.bias,
             d.dst, d.strides, d.dilates, d.pad_l, d.pad_r},
            eng};
  return {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
           d.strides, d.dilates, d.pad_l, d.pad_r},
          eng};
}

memory wrap(const memory::desc& md, const void* p) { return memory(md, dnnl_engine(), const_cast<void*>(p)); }

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias, float* y) {
  dnnl_call("convolution forward", [&] {
    ConvDescs d = describe(g, bias != nullptr);
    auto pd = forward_pd(d, bias != nullptr);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, wrap(d.src, x)}, {DNNL_ARG_WEIGHTS, wrap(d.weights, weight)}, {DNNL_ARG_DST, wrap(d.dst, y)}};
    if (bias) args[DNNL_ARG_BIAS] = wrap(d.bias, bias);
    dnnl::convolution_forward(pd).execute(dnnl_stream(), args);
    dnnl_stream().wait();
  });
}

void conv2d_backward_data(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx) {
  dnnl_call("convolution backward data", [&] {
    ConvDescs d = describe(g, false);
    auto hint = forward_pd(d, false);
    dnnl::convolution_backward_data::primitive_desc pd(
        {dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r},
        dnnl_engine(), hint);
    dnnl::convolution_backward_data(pd).execute(
        dnnl_stream(),
        {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)}, {DNNL_ARG_WEIGHTS, wrap(d.weights, weight)},
         {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)}});
    dnnl_stream().wait();
  });
}

void conv2d_backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, float* dweight) {
  dnnl_call("convolution backward weights", [&] {
    ConvDescs d = describe(g, false);
    auto hint = forward_pd(d, false);
    dnnl::convolution_backward_weights::primitive_desc pd(
        {dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r},
        dnnl_engine(), hint);
    dnnl::convolution_backward_weights(pd).execute(
        dnnl_stream(),
        {{DNNL_ARG_SRC, wrap(d.src, x)}, {DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
         {DNNL_ARG_DIFF_WEIGHTS, wrap(d.weights, dweight)}});
    dnnl_stream().wait();
  });
}

void conv2d_bias_grad(const float* dy, int64_t N, int64_t O, int64_t plane, float* db) {
#pragma omp parallel for if (O * N * plane > 32768)
  for (int64_t o = 0; o < O; ++o) {
    double s = 0;  // planes can be long; a double keeps the sum order-insensitive enough
    for (int64_t n = 0; n < N; ++n) {
      const float* p = dy + (n * O + o) * plane;
      float part = 0;
      for (int64_t i = 0; i < plane; ++i) part += p[i];
      s += part;
    }
    db[o] = static_cast<float>(s);
  }
}

}  // namespace cohort::kernels::cpu
