// Normalisation operators: layernorm and rmsnorm over the last dim, groupnorm over NCHW groups
// (chosen over batch norm for CNNs: no running state, same result in training and evaluation).
// Each forward also returns its statistics (mean/rstd, always f32 so bf16 runs keep precise
// saved values) as extra outputs, which the internal *_grad ops read instead of recomputing.
// Loops live in kernels/cpu/norm.cpp.
#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"
#include "kernels/cpu/norm.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

float eps_attr(const Attrs& a) { return static_cast<float>(a.get_float("eps")); }

void check_eps(const ShapeContext& c) {
  const double eps = c.attrs.get_float("eps");
  if (!(eps >= 0.0))
    throw Error(Status::kInvalidArgument, str_cat("attribute 'eps' is ", eps, ", expected >= 0"));
}

// Input `i` must be a vector of C elements with input 0's dtype (gamma, beta).
void expect_channel_vector(const ShapeContext& c, size_t i, int64_t C) {
  const Shape& s = c.inputs[i].shape;
  if (s != Shape{C}) shape_error(str_cat("input ", i, " has shape ", shape_str(s), ", expected [", C, "]"));
  expect_same_dtype(c, 0, i);
}

// Checks x[..., C] plus its channel vectors; returns the statistics' shape x.shape[:-1].
Shape last_dim_norm_checks(const ShapeContext& c, size_t vectors) {
  expect_float(c, 0);
  const Shape& x = c.inputs[0].shape;
  if (x.empty()) shape_error("input 0 has shape [], expected [..., C]");
  for (size_t i = 1; i <= vectors; ++i) expect_channel_vector(c, i, x.back());
  check_eps(c);
  return Shape(x.begin(), x.end() - 1);
}

// Backward rules: one *_grad node whose outputs are the gradients of inputs 0..n-1. With
// `accumulates`, the gradient already summed for x (a residual stream's, in a pre-norm block)
// is a last input that the kernel adds to dx.
BackwardFn grad_rule(const std::string& grad_op, std::vector<size_t> saved_outputs, size_t n_grads,
                     bool accumulates) {
  return [grad_op, saved_outputs, n_grads, accumulates](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;  // only the statistics are used: they carry no gradient
    std::vector<ValueId> in = {b.input(0), b.input(1)};
    for (size_t o : saved_outputs) in.push_back(b.output(o));
    in.push_back(b.grad_output(0));
    const ValueId acc = accumulates ? b.accumulated_grad(0) : -1;
    if (acc >= 0) in.push_back(acc);
    std::vector<ValueId> g = b.add(grad_op, in, b.attrs());
    if (acc >= 0) b.set_grad_input_total(0, g[0]);
    else b.set_grad_input(0, g[0]);
    for (size_t i = 1; i < n_grads; ++i) b.set_grad_input(i, g[i]);
  };
}

const float* dx_add_of(const KernelContext& k, size_t index) {
  return k.inputs.size() > index ? k.inputs[index].data<float>() : nullptr;
}

// Grad op shapes: dx like input 0, then one gradient like input 1 (gamma) per parameter; the
// optional dx_add input (at index dx_add) must be shaped like x.
ShapeFn grad_shapes(size_t n_params, size_t dx_add = 0) {
  return [n_params, dx_add](const ShapeContext& c) {
    if (dx_add > 0 && c.inputs.size() > dx_add && !(c.inputs[dx_add] == c.inputs[0]))
      shape_error(str_cat("input ", dx_add, " (dx_add) has shape ", shape_str(c.inputs[dx_add].shape), ", expected ",
                          shape_str(c.inputs[0].shape)));
    std::vector<TensorType> out = {c.inputs[0]};
    for (size_t i = 0; i < n_params; ++i) out.push_back(c.inputs[1]);
    return out;
  };
}

void register_layernorm(OpRegistry& r) {
  OpSchema s;
  s.name = "layernorm";
  s.inputs = {"x", "gamma", "beta"};
  s.outputs = {"y", "mean", "rstd"};
  s.attrs = {{"eps", AttrType::kFloat, false, 1e-5}};
  s.infer = [](const ShapeContext& c) {
    Shape stats = last_dim_norm_checks(c, 2);
    return std::vector<TensorType>{c.inputs[0], {DType::kF32, stats}, {DType::kF32, stats}};
  };
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::layernorm_forward(x.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(),
                          k.outputs[0].data<float>(), k.outputs[1].data<float>(), k.outputs[2].data<float>(),
                          rows_of(x), x.shape().back(), eps_attr(k.attrs));
  };
  s.backward = grad_rule("layernorm_grad", {1, 2}, 3, true);
  r.add(s);

  OpSchema g;
  g.name = "layernorm_grad";  // (x, gamma, mean, rstd, dy[, dx_add]) -> dx (+ dx_add), dgamma, dbeta
  g.inputs = {"x", "gamma", "mean", "rstd", "dy", "dx_add"};
  g.optional_inputs = 1;
  g.internal = true;
  g.attrs = s.attrs;
  g.infer = grad_shapes(2, 5);
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::layernorm_backward(x.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(),
                           k.inputs[3].data<float>(), k.inputs[4].data<float>(), k.outputs[0].data<float>(),
                           k.outputs[1].data<float>(), k.outputs[2].data<float>(), rows_of(x), x.shape().back(),
                           dx_add_of(k, 5));
  };
  r.add(g);
}

void register_rmsnorm(OpRegistry& r) {
  OpSchema s;
  s.name = "rmsnorm";
  s.inputs = {"x", "gamma"};
  s.outputs = {"y", "rstd"};
  s.attrs = {{"eps", AttrType::kFloat, false, 1e-6}};
  s.infer = [](const ShapeContext& c) {
    Shape stats = last_dim_norm_checks(c, 1);
    return std::vector<TensorType>{c.inputs[0], {DType::kF32, stats}};
  };
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::rmsnorm_forward(x.data<float>(), k.inputs[1].data<float>(), k.outputs[0].data<float>(),
                        k.outputs[1].data<float>(), rows_of(x), x.shape().back(), eps_attr(k.attrs));
  };
  s.backward = grad_rule("rmsnorm_grad", {1}, 2, true);
  r.add(s);

  OpSchema g;
  g.name = "rmsnorm_grad";  // (x, gamma, rstd, dy[, dx_add]) -> dx (+ dx_add), dgamma
  g.inputs = {"x", "gamma", "rstd", "dy", "dx_add"};
  g.optional_inputs = 1;
  g.internal = true;
  g.attrs = s.attrs;
  g.infer = grad_shapes(1, 4);
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::rmsnorm_backward(x.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(),
                         k.inputs[3].data<float>(), k.outputs[0].data<float>(), k.outputs[1].data<float>(),
                         rows_of(x), x.shape().back(), dx_add_of(k, 4));
  };
  r.add(g);
}

void register_groupnorm(OpRegistry& r) {
  OpSchema s;
  s.name = "groupnorm";
  s.inputs = {"x", "gamma", "beta"};
  s.outputs = {"y", "mean", "rstd"};
  s.attrs = {{"groups", AttrType::kInt, true, int64_t{1}}, {"eps", AttrType::kFloat, false, 1e-5}};
  s.infer = [](const ShapeContext& c) {
    expect_float(c, 0);
    expect_rank(c, 0, 4);
    const Shape& x = c.inputs[0].shape;
    const int64_t groups = c.attrs.get_int("groups");
    if (groups < 1 || x[1] % groups != 0)
      throw Error(Status::kInvalidArgument, str_cat("attribute 'groups' is ", groups,
                                                    ", expected a positive divisor of the ", x[1],
                                                    " channels of input 0 ", shape_str(x)));
    expect_channel_vector(c, 1, x[1]);
    expect_channel_vector(c, 2, x[1]);
    check_eps(c);
    Shape stats = {x[0], groups};
    return std::vector<TensorType>{c.inputs[0], {DType::kF32, stats}, {DType::kF32, stats}};
  };
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::groupnorm_forward(x.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(),
                          k.outputs[0].data<float>(), k.outputs[1].data<float>(), k.outputs[2].data<float>(),
                          x.dim(0), x.dim(1), x.dim(2) * x.dim(3), k.attrs.get_int("groups"), eps_attr(k.attrs));
  };
  s.backward = grad_rule("groupnorm_grad", {1, 2}, 3, false);
  r.add(s);

  OpSchema g;
  g.name = "groupnorm_grad";  // (x, gamma, mean, rstd, dy) -> dx, dgamma, dbeta
  g.inputs = {"x", "gamma", "mean", "rstd", "dy"};
  g.internal = true;
  g.attrs = s.attrs;
  g.infer = grad_shapes(2);
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kc::groupnorm_backward(x.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(),
                           k.inputs[3].data<float>(), k.inputs[4].data<float>(), k.outputs[0].data<float>(),
                           k.outputs[1].data<float>(), k.outputs[2].data<float>(), x.dim(0), x.dim(1),
                           x.dim(2) * x.dim(3), k.attrs.get_int("groups"));
  };
  r.add(g);
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  register_layernorm(r);
  register_rmsnorm(r);
  register_groupnorm(r);
}

}  // namespace cohort
