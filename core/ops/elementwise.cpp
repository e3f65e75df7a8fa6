// Element-wise operators: add, sub, mul (NumPy broadcasting), scale, relu, gelu, tanh, the
// reductions sum and mean, and the internal helpers fill_like, sum_to and the activation
// gradients. Loops live in kernels/cpu/elementwise.cpp.
#include <algorithm>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"
#include "kernels/cpu/elementwise.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      shape_error(str_cat("input 1 has shape ", shape_str(b), ", which does not broadcast with input 0's ",
                          shape_str(a)));
    out[out.size() - 1 - k] = std::max(da, db);
  }
  return out;
}

std::vector<TensorType> binary_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_same_dtype(c, 0, 1);
  return {{c.inputs[0].dtype, broadcast_shape(c.inputs[0].shape, c.inputs[1].shape)}};
}

std::vector<TensorType> same_as_input0(const ShapeContext& c) {
  expect_float(c, 0);
  return {c.inputs[0]};
}

// Gradient of a broadcast operand: reduce dy back to the operand's shape when needed.
ValueId reduce_to(BackwardContext& b, ValueId g, size_t input) {
  const Shape& want = b.input_type(input).shape;
  if (b.graph().value(g).type.shape == want) return g;
  Attrs a;
  a.set("shape", want);
  return b.add1("sum_to", {g}, a);
}

KernelFn binary_kernel(kc::BinaryOp op) {
  return [op](KernelContext& k) {
    kc::binary(op, k.inputs[0].data<float>(), k.inputs[0].shape(), k.inputs[1].data<float>(),
               k.inputs[1].shape(), k.outputs[0].data<float>(), k.outputs[0].shape());
  };
}

KernelFn unary_kernel(kc::UnaryOp op) {
  return [op](KernelContext& k) {
    kc::unary(op, k.inputs[0].data<float>(), k.outputs[0].data<float>(), k.inputs[0].numel());
  };
}

KernelFn unary_grad_kernel(kc::UnaryOp op) {
  return [op](KernelContext& k) {
    kc::unary_grad(op, k.inputs[0].data<float>(), k.inputs[1].data<float>(), k.outputs[0].data<float>(),
                   k.inputs[0].numel());
  };
}

OpSchema unary_op(const std::string& name, kc::UnaryOp op, bool grad_uses_output) {
  OpSchema s;
  s.name = name;
  s.inputs = {"x"};
  s.infer = same_as_input0;
  s.kernels[0] = unary_kernel(op);
  std::string grad_op = name + "_grad";
  s.backward = [grad_op, grad_uses_output](BackwardContext& b) {
    ValueId saved = grad_uses_output ? b.output(0) : b.input(0);
    b.set_grad_input(0, b.add1(grad_op, {saved, b.grad_output(0)}));
  };
  return s;
}

OpSchema unary_grad_op(const std::string& name, kc::UnaryOp op) {
  OpSchema s;
  s.name = name;
  s.inputs = {"x", "dy"};
  s.internal = true;
  s.infer = [](const ShapeContext& c) {
    if (c.inputs[0].shape != c.inputs[1].shape)
      shape_error(str_cat("input 1 has shape ", shape_str(c.inputs[1].shape), ", expected ",
                          shape_str(c.inputs[0].shape)));
    return std::vector<TensorType>{c.inputs[0]};
  };
  s.kernels[0] = unary_grad_kernel(op);
  return s;
}

void register_binary(OpRegistry& r) {
  OpSchema add;
  add.name = "add";
  add.inputs = {"a", "b"};
  add.infer = binary_shape;
  add.kernels[0] = binary_kernel(kc::BinaryOp::kAdd);
  add.backward = [](BackwardContext& b) {
    b.set_grad_input(0, reduce_to(b, b.grad_output(0), 0));
    b.set_grad_input(1, reduce_to(b, b.grad_output(0), 1));
  };
  r.add(add);

  OpSchema sub = add;
  sub.name = "sub";
  sub.kernels[0] = binary_kernel(kc::BinaryOp::kSub);
  sub.backward = [](BackwardContext& b) {
    b.set_grad_input(0, reduce_to(b, b.grad_output(0), 0));
    if (b.needs_grad_input(1)) {
      Attrs neg;
      neg.set("factor", -1.0);
      b.set_grad_input(1, reduce_to(b, b.add1("scale", {b.grad_output(0)}, neg), 1));
    }
  };
  r.add(sub);

  OpSchema mul = add;
  mul.name = "mul";
  mul.kernels[0] = binary_kernel(kc::BinaryOp::kMul);
  mul.backward = [](BackwardContext& b) {
    b.set_grad_input(0, reduce_to(b, b.add1("mul", {b.grad_output(0), b.input(1)}), 0));
    b.set_grad_input(1, reduce_to(b, b.add1("mul", {b.grad_output(0), b.input(0)}), 1));
  };
  r.add(mul);
}

void register_reductions(OpRegistry& r) {
  OpSchema sum;
  sum.name = "sum";  // sum of all elements -> shape []
  sum.inputs = {"x"};
  sum.infer = [](const ShapeContext& c) {
    expect_float(c, 0);
    return std::vector<TensorType>{{c.inputs[0].dtype, {}}};
  };
  sum.kernels[0] = [](KernelContext& k) {
    kc::reduce_to_shape(k.inputs[0].data<float>(), k.inputs[0].shape(), k.outputs[0].data<float>(), {});
  };
  sum.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("shape", b.input_type(0).shape);
    b.set_grad_input(0, b.add1("broadcast_to", {b.grad_output(0)}, a));
  };
  r.add(sum);

  OpSchema mean = sum;
  mean.name = "mean";
  mean.kernels[0] = [](KernelContext& k) {
    float* out = k.outputs[0].data<float>();
    kc::reduce_to_shape(k.inputs[0].data<float>(), k.inputs[0].shape(), out, {});
    out[0] /= static_cast<float>(k.inputs[0].numel());
  };
  mean.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("shape", b.input_type(0).shape);
    Attrs f;
    f.set("factor", 1.0 / static_cast<double>(shape_numel(b.input_type(0).shape)));
    b.set_grad_input(0, b.add1("broadcast_to", {b.add1("scale", {b.grad_output(0)}, f)}, a));
  };
  r.add(mean);

  OpSchema sum_to;
  sum_to.name = "sum_to";  // reduces a broadcast result back to an operand's shape
  sum_to.inputs = {"x"};
  sum_to.internal = true;
  sum_to.attrs = {{"shape", AttrType::kInts, true, std::vector<int64_t>{}}};
  sum_to.infer = [](const ShapeContext& c) {
    Shape want = c.attrs.get_ints("shape");
    broadcast_shape(want, c.inputs[0].shape);
    return std::vector<TensorType>{{c.inputs[0].dtype, want}};
  };
  sum_to.kernels[0] = [](KernelContext& k) {
    kc::reduce_to_shape(k.inputs[0].data<float>(), k.inputs[0].shape(), k.outputs[0].data<float>(),
                        k.outputs[0].shape());
  };
  sum_to.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("shape", b.input_type(0).shape);
    b.set_grad_input(0, b.add1("broadcast_to", {b.grad_output(0)}, a));
  };
  r.add(sum_to);

  OpSchema bcast;
  bcast.name = "broadcast_to";
  bcast.inputs = {"x"};
  bcast.internal = true;
  bcast.attrs = {{"shape", AttrType::kInts, true, std::vector<int64_t>{}}};
  bcast.infer = [](const ShapeContext& c) {
    Shape want = c.attrs.get_ints("shape");
    if (broadcast_shape(want, c.inputs[0].shape) != want)
      shape_error(str_cat("input 0 has shape ", shape_str(c.inputs[0].shape), ", which does not broadcast to ",
                          shape_str(want)));
    return std::vector<TensorType>{{c.inputs[0].dtype, want}};
  };
  bcast.kernels[0] = [](KernelContext& k) {
    const int64_t n = k.outputs[0].numel();
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    kc::binary(kc::BinaryOp::kAdd, zeros.data(), k.outputs[0].shape(), k.inputs[0].data<float>(),
               k.inputs[0].shape(), k.outputs[0].data<float>(), k.outputs[0].shape());
  };
  bcast.backward = [](BackwardContext& b) { b.set_grad_input(0, reduce_to(b, b.grad_output(0), 0)); };
  r.add(bcast);
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  register_binary(r);
  register_reductions(r);

  OpSchema scale;
  scale.name = "scale";
  scale.inputs = {"x"};
  scale.attrs = {{"factor", AttrType::kFloat, true, 1.0}};
  scale.infer = same_as_input0;
  scale.kernels[0] = [](KernelContext& k) {
    kc::scale(k.inputs[0].data<float>(), static_cast<float>(k.attrs.get_float("factor")),
              k.outputs[0].data<float>(), k.inputs[0].numel());
  };
  scale.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("factor", b.attrs().get_float("factor"));
    b.set_grad_input(0, b.add1("scale", {b.grad_output(0)}, a));
  };
  r.add(scale);

  r.add(unary_op("relu", kc::UnaryOp::kRelu, false));
  r.add(unary_op("gelu", kc::UnaryOp::kGelu, false));
  r.add(unary_op("tanh", kc::UnaryOp::kTanh, true));
  r.add(unary_grad_op("relu_grad", kc::UnaryOp::kRelu));
  r.add(unary_grad_op("gelu_grad", kc::UnaryOp::kGelu));
  r.add(unary_grad_op("tanh_grad", kc::UnaryOp::kTanh));

  OpSchema fill;
  fill.name = "fill_like";  // a tensor of x's shape filled with `value` (seeds autodiff)
  fill.inputs = {"x"};
  fill.internal = true;
  fill.attrs = {{"value", AttrType::kFloat, false, 0.0}};
  fill.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
  fill.nondiff_inputs = {0};
  fill.kernels[0] = [](KernelContext& k) {
    kc::fill(k.outputs[0].data<float>(), static_cast<float>(k.attrs.get_float("value")), k.outputs[0].numel());
  };
  r.add(fill);
}

}  // namespace cohort
