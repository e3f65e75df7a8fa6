// Multi-head self-attention over a fused qkv projection (GPT-2): attention(qkv [B, T, 3C]) ->
// (out [B, T, C], lse [B, H, T]). lse, the per-row log-sum-exp of the scaled scores, is saved
// for backward instead of the probabilities: the [B, H, T, T] probabilities would cost
// T times more memory (48 MiB per sample and layer at T = 1024, H = 12), while recomputing
// Q K^T in backward costs one extra T x T x D product per head. lse is always f32.
// Loops live in kernels/cpu/attention.cpp.
#include "kernels/cpu/attention.h"

#include <cmath>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/op_checks.h"
#include "core/ops/schema.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

std::vector<AttrSpec> attention_attrs() {
  return {{"heads", AttrType::kInt, true, int64_t{1}},
          {"causal", AttrType::kInt, false, int64_t{1}},
          {"scale", AttrType::kFloat, false, 0.0}};
}

// Validates qkv [B, T, 3C] against the attributes; returns C.
int64_t check_qkv(const ShapeContext& c) {
  expect_rank(c, 0, 3);
  expect_float(c, 0);
  const Shape& s = c.inputs[0].shape;
  const int64_t heads = c.attrs.get_int("heads");
  if (heads <= 0)
    throw Error(Status::kInvalidArgument, str_cat("attribute heads is ", heads, ", expected >= 1"));
  const int64_t causal = c.attrs.get_int("causal");
  if (causal != 0 && causal != 1)
    throw Error(Status::kInvalidArgument,
                str_cat("attribute causal is ", causal, ", expected 0 or 1"));
  if (!std::isfinite(c.attrs.get_float("scale")))
    throw Error(Status::kInvalidArgument, "attribute scale is not finite");
  if (s[2] % 3 != 0)
    shape_error(str_cat("input 0 has shape ", shape_str(s),
                        ", expected [B, T, 3*C] (last dim a multiple of 3)"));
  const int64_t C = s[2] / 3;
  if (C % heads != 0)
    shape_error(str_cat("input 0 has shape ", shape_str(s), ": C = ", C,
                        " is not divisible by attribute heads = ", heads));
  return C;
}

}  // namespace

// Declared in core/ops/op_checks.h (shared with the CUDA kernels).
kc::AttentionDims attention_dims(const Attrs& a, const Shape& qkv) {
  kc::AttentionDims d;
  d.B = qkv[0];
  d.T = qkv[1];
  d.H = a.get_int("heads");
  d.D = qkv[2] / 3 / d.H;
  d.causal = a.get_int("causal") != 0;
  const double scale = a.get_float("scale");
  d.scale = static_cast<float>(scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(d.D)));
  return d;
}

namespace {

OpSchema attention_op() {
  OpSchema s;
  s.name = "attention";
  s.inputs = {"qkv"};
  s.outputs = {"out", "lse"};
  s.attrs = attention_attrs();
  s.infer = [](const ShapeContext& c) {
    const int64_t C = check_qkv(c);
    const Shape& q = c.inputs[0].shape;
    const int64_t heads = c.attrs.get_int("heads");
    return std::vector<TensorType>{{c.inputs[0].dtype, {q[0], q[1], C}},
                                   {DType::kF32, {q[0], heads, q[1]}}};
  };
  s.kernels[0] = [](KernelContext& k) {
    kc::attention_forward(attention_dims(k.attrs, k.inputs[0].shape()), k.inputs[0].data<float>(),
                          k.outputs[0].data<float>(), k.outputs[1].data<float>());
  };
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;  // lse is a saved statistic, not differentiated
    Attrs a = b.attrs();
    b.set_grad_input(
        0, b.add1("attention_grad", {b.input(0), b.output(0), b.output(1), b.grad_output(0)}, a));
  };
  return s;
}

// dqkv from (qkv, out, lse, dout): the probabilities are recomputed from qkv and lse.
OpSchema attention_grad_op() {
  OpSchema s;
  s.name = "attention_grad";
  s.inputs = {"qkv", "out", "lse", "dout"};
  s.attrs = attention_attrs();
  s.internal = true;
  s.infer = [](const ShapeContext& c) {
    const int64_t C = check_qkv(c);
    const Shape& q = c.inputs[0].shape;
    const Shape want_out = {q[0], q[1], C};
    const Shape want_lse = {q[0], c.attrs.get_int("heads"), q[1]};
    for (size_t i : {size_t{1}, size_t{3}})
      if (c.inputs[i].shape != want_out)
        shape_error(str_cat("input ", i, " has shape ", shape_str(c.inputs[i].shape), ", expected ",
                            shape_str(want_out)));
    if (c.inputs[2].shape != want_lse)
      shape_error(str_cat("input 2 has shape ", shape_str(c.inputs[2].shape), ", expected ",
                          shape_str(want_lse)));
    return std::vector<TensorType>{c.inputs[0]};
  };
  s.kernels[0] = [](KernelContext& k) {
    // out (input 1) is for kernels that sum dO * O; this one sums P * dP from its tiles
    kc::attention_backward(attention_dims(k.attrs, k.inputs[0].shape()), k.inputs[0].data<float>(),
                           k.inputs[2].data<float>(), k.inputs[3].data<float>(), k.outputs[0].data<float>());
  };
  return s;
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  r.add(attention_op());
  r.add(attention_grad_op());
}

}  // namespace cohort
