// Convolution and pooling on NCHW: conv2d (oneDNN; groups, stride, padding, dilation),
// max_pool2d / avg_pool2d (own loops), and their internal backward ops. Average pooling
// excludes padding from the divisor (PyTorch's count_include_pad=False); max pooling returns
// the argmax as a second (i32) output so its backward is a scatter.
#include <algorithm>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

// A two-element attribute (h, w); `empty_default` stands in for an empty list (pool stride).
std::vector<int64_t> pair_attr(const Attrs& a, const char* name, int64_t min,
                               const std::vector<int64_t>* empty_default = nullptr) {
  std::vector<int64_t> v = a.get_ints(name);
  if (v.empty() && empty_default) v = *empty_default;
  if (v.size() != 2 || v[0] < min || v[1] < min)
    throw Error(Status::kInvalidArgument, str_cat("attribute '", name, "' is ", shape_str(v),
                                                  ", expected two values >= ", min));
  return v;
}

const std::vector<AttrSpec>& conv_attrs() {
  static const std::vector<AttrSpec> a = {{"stride", AttrType::kInts, false, std::vector<int64_t>{1, 1}},
                                          {"padding", AttrType::kInts, false, std::vector<int64_t>{0, 0}},
                                          {"dilation", AttrType::kInts, false, std::vector<int64_t>{1, 1}},
                                          {"groups", AttrType::kInt, false, int64_t{1}}};
  return a;
}

// Geometry from x's and weight's shapes and the attributes; output extents may be < 1 here.
kc::Conv2dGeometry conv_geometry(const Shape& x, const Shape& w, const Attrs& a) {
  kc::Conv2dGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.O = w[0], g.KH = w[2], g.KW = w[3];
  g.groups = a.get_int("groups");
  auto s = pair_attr(a, "stride", 1), p = pair_attr(a, "padding", 0), d = pair_attr(a, "dilation", 1);
  for (int i = 0; i < 2; ++i) g.stride[i] = s[static_cast<size_t>(i)], g.pad[i] = p[static_cast<size_t>(i)],
                               g.dilation[i] = d[static_cast<size_t>(i)];
  g.OH = (g.H + 2 * g.pad[0] - g.dilation[0] * (g.KH - 1) - 1) / g.stride[0] + 1;
  g.OW = (g.W + 2 * g.pad[1] - g.dilation[1] * (g.KW - 1) - 1) / g.stride[1] + 1;
  if (g.H + 2 * g.pad[0] < g.dilation[0] * (g.KH - 1) + 1) g.OH = 0;  // C++ division rounds toward 0
  if (g.W + 2 * g.pad[1] < g.dilation[1] * (g.KW - 1) + 1) g.OW = 0;
  return g;
}

std::vector<TensorType> conv2d_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_same_dtype(c, 0, 1);
  expect_rank(c, 0, 4);
  expect_rank(c, 1, 4);
  const Shape& x = c.inputs[0].shape;
  const Shape& w = c.inputs[1].shape;
  const int64_t groups = c.attrs.get_int("groups");
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0)
    throw Error(Status::kInvalidArgument, str_cat("attribute 'groups' is ", groups, ", expected >= 1 dividing ",
                                                  x[1], " input channels and ", w[0], " output channels"));
  if (w[1] != x[1] / groups)
    shape_error(str_cat("input 1 has shape ", shape_str(w), ", expected [*, ", x[1] / groups, ", *, *]"));
  if (c.inputs.size() > 2) {
    expect_same_dtype(c, 0, 2);
    if (c.inputs[2].shape != Shape{w[0]})
      shape_error(str_cat("input 2 has shape ", shape_str(c.inputs[2].shape), ", expected [", w[0], "]"));
  }
  kc::Conv2dGeometry g = conv_geometry(x, w, c.attrs);
  if (g.OH < 1 || g.OW < 1 || w[2] < 1 || w[3] < 1)
    shape_error(str_cat("input 0 has shape ", shape_str(x), ", too small for a ", w[2], "x", w[3],
                        " kernel with this padding and dilation (output ", g.OH, "x", g.OW, ")"));
  return {{c.inputs[0].dtype, {g.N, g.O, g.OH, g.OW}}};
}

Attrs with_shape(const Attrs& a, const char* name, const Shape& s) {
  Attrs out = a;
  out.set(name, s);
  return out;
}

void conv2d_backward(BackwardContext& b) {
  const ValueId dy = b.grad_output(0);
  if (b.needs_grad_input(0))
    b.set_grad_input(0, b.add1("conv2d_grad_input", {dy, b.input(1)},
                               with_shape(b.attrs(), "input_shape", b.input_type(0).shape)));
  if (b.needs_grad_input(1))
    b.set_grad_input(1, b.add1("conv2d_grad_weight", {b.input(0), dy},
                               with_shape(b.attrs(), "weight_shape", b.input_type(1).shape)));
  if (b.node().inputs.size() > 2 && b.needs_grad_input(2)) b.set_grad_input(2, b.add1("conv2d_grad_bias", {dy}));
}

void register_conv2d(OpRegistry& r) {
  OpSchema s;
  s.name = "conv2d";
  s.inputs = {"x", "weight", "bias"};
  s.optional_inputs = 1;
  s.attrs = conv_attrs();
  s.infer = conv2d_shape;
  s.kernels[0] = [](KernelContext& k) {
    kc::Conv2dGeometry g = conv_geometry(k.inputs[0].shape(), k.inputs[1].shape(), k.attrs);
    kc::conv2d_forward(g, k.inputs[0].data<float>(), k.inputs[1].data<float>(),
                       k.inputs.size() > 2 ? k.inputs[2].data<float>() : nullptr, k.outputs[0].data<float>());
  };
  s.backward = conv2d_backward;
  r.add(s);
}

void register_conv2d_grads(OpRegistry& r) {
  OpSchema gi;
  gi.name = "conv2d_grad_input";  // (dy, weight) -> dx of shape input_shape
  gi.inputs = {"dy", "weight"};
  gi.internal = true;
  gi.attrs = conv_attrs();
  gi.attrs.push_back({"input_shape", AttrType::kInts, true, std::vector<int64_t>{}});
  gi.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{{c.inputs[0].dtype, c.attrs.get_ints("input_shape")}};
  };
  gi.kernels[0] = [](KernelContext& k) {
    kc::Conv2dGeometry g = conv_geometry(k.attrs.get_ints("input_shape"), k.inputs[1].shape(), k.attrs);
    kc::conv2d_backward_data(g, k.inputs[0].data<float>(), k.inputs[1].data<float>(), k.outputs[0].data<float>());
  };
  r.add(gi);

  OpSchema gw;
  gw.name = "conv2d_grad_weight";  // (x, dy) -> dweight of shape weight_shape
  gw.inputs = {"x", "dy"};
  gw.internal = true;
  gw.attrs = conv_attrs();
  gw.attrs.push_back({"weight_shape", AttrType::kInts, true, std::vector<int64_t>{}});
  gw.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{{c.inputs[0].dtype, c.attrs.get_ints("weight_shape")}};
  };
  gw.kernels[0] = [](KernelContext& k) {
    kc::Conv2dGeometry g = conv_geometry(k.inputs[0].shape(), k.attrs.get_ints("weight_shape"), k.attrs);
    kc::conv2d_backward_weights(g, k.inputs[0].data<float>(), k.inputs[1].data<float>(), k.outputs[0].data<float>());
  };
  r.add(gw);

  OpSchema gb;
  gb.name = "conv2d_grad_bias";  // dy [N, O, OH, OW] -> [O]
  gb.inputs = {"dy"};
  gb.internal = true;
  gb.infer = [](const ShapeContext& c) {
    expect_rank(c, 0, 4);
    return std::vector<TensorType>{{c.inputs[0].dtype, {c.inputs[0].shape[1]}}};
  };
  gb.kernels[0] = [](KernelContext& k) {
    const Shape& dy = k.inputs[0].shape();
    kc::conv2d_bias_grad(k.inputs[0].data<float>(), dy[0], dy[1], dy[2] * dy[3], k.outputs[0].data<float>());
  };
  r.add(gb);
}

const std::vector<AttrSpec>& pool_attrs() {
  static const std::vector<AttrSpec> a = {{"kernel", AttrType::kInts, false, std::vector<int64_t>{2, 2}},
                                          {"stride", AttrType::kInts, false, std::vector<int64_t>{}},
                                          {"padding", AttrType::kInts, false, std::vector<int64_t>{0, 0}}};
  return a;
}

kc::Pool2dGeometry pool_geometry(const Shape& x, const Attrs& a) {
  kc::Pool2dGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  auto k = pair_attr(a, "kernel", 1);
  auto s = pair_attr(a, "stride", 1, &k), p = pair_attr(a, "padding", 0);
  for (size_t i = 0; i < 2; ++i) {
    if (p[i] > k[i] / 2)
      throw Error(Status::kInvalidArgument, str_cat("attribute 'padding' is ", shape_str(p),
                                                    ", expected at most half the kernel ", shape_str(k)));
    g.kernel[i] = k[i], g.stride[i] = s[i], g.pad[i] = p[i];
  }
  g.OH = g.H + 2 * g.pad[0] < g.kernel[0] ? 0 : (g.H + 2 * g.pad[0] - g.kernel[0]) / g.stride[0] + 1;
  g.OW = g.W + 2 * g.pad[1] < g.kernel[1] ? 0 : (g.W + 2 * g.pad[1] - g.kernel[1]) / g.stride[1] + 1;
  return g;
}

Shape pool_out_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_rank(c, 0, 4);
  kc::Pool2dGeometry g = pool_geometry(c.inputs[0].shape, c.attrs);
  if (g.OH < 1 || g.OW < 1)
    shape_error(str_cat("input 0 has shape ", shape_str(c.inputs[0].shape), ", smaller than the ",
                        g.kernel[0], "x", g.kernel[1], " pooling window"));
  return {g.N, g.C, g.OH, g.OW};
}

OpSchema pool_grad_op(const std::string& name, std::vector<std::string> inputs) {
  OpSchema s;
  s.name = name;
  s.inputs = std::move(inputs);
  s.internal = true;
  s.attrs = pool_attrs();
  s.attrs.push_back({"input_shape", AttrType::kInts, true, std::vector<int64_t>{}});
  s.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{{c.inputs[0].dtype, c.attrs.get_ints("input_shape")}};
  };
  return s;
}

void register_pools(OpRegistry& r) {
  OpSchema mp;
  mp.name = "max_pool2d";  // outputs: y, argmax (i32, h * W + w within each plane)
  mp.inputs = {"x"};
  mp.outputs = {"y", "argmax"};
  mp.attrs = pool_attrs();
  mp.infer = [](const ShapeContext& c) {
    Shape out = pool_out_shape(c);
    return std::vector<TensorType>{{c.inputs[0].dtype, out}, {DType::kI32, out}};
  };
  mp.kernels[0] = [](KernelContext& k) {
    kc::max_pool2d(pool_geometry(k.inputs[0].shape(), k.attrs), k.inputs[0].data<float>(),
                   k.outputs[0].data<float>(), k.outputs[1].data<int32_t>());
  };
  mp.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("max_pool2d_grad", {b.grad_output(0), b.output(1)},
                               with_shape(b.attrs(), "input_shape", b.input_type(0).shape)));
  };
  r.add(mp);

  OpSchema mg = pool_grad_op("max_pool2d_grad", {"dy", "argmax"});
  mg.nondiff_inputs = {1};
  mg.kernels[0] = [](KernelContext& k) {
    kc::max_pool2d_grad(pool_geometry(k.attrs.get_ints("input_shape"), k.attrs), k.inputs[0].data<float>(),
                        k.inputs[1].data<int32_t>(), k.outputs[0].data<float>());
  };
  r.add(mg);

  OpSchema ap;
  ap.name = "avg_pool2d";
  ap.inputs = {"x"};
  ap.attrs = pool_attrs();
  ap.infer = [](const ShapeContext& c) { return std::vector<TensorType>{{c.inputs[0].dtype, pool_out_shape(c)}}; };
  ap.kernels[0] = [](KernelContext& k) {
    kc::avg_pool2d(pool_geometry(k.inputs[0].shape(), k.attrs), k.inputs[0].data<float>(), k.outputs[0].data<float>());
  };
  ap.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("avg_pool2d_grad", {b.grad_output(0)},
                               with_shape(b.attrs(), "input_shape", b.input_type(0).shape)));
  };
  r.add(ap);

  OpSchema ag = pool_grad_op("avg_pool2d_grad", {"dy"});
  ag.kernels[0] = [](KernelContext& k) {
    kc::avg_pool2d_grad(pool_geometry(k.attrs.get_ints("input_shape"), k.attrs), k.inputs[0].data<float>(),
                        k.outputs[0].data<float>());
  };
  r.add(ag);
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  register_conv2d(r);
  register_conv2d_grads(r);
  register_pools(r);
}

}  // namespace cohort
