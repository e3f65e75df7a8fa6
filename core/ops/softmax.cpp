// Softmax family: softmax and log_softmax along one axis, and cross_entropy (log-softmax fused
// with the negative log likelihood of int32 labels). Backward ops read the saved forward output
// (softmax / log_softmax) or the saved per-row logsumexp (cross_entropy) instead of recomputing.
// A label outside [0, V) can only be seen at run time: the kernel throws kInvalidArgument.
// Loops live in kernels/cpu/softmax.cpp.
#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/op_checks.h"
#include "core/ops/schema.h"
#include "kernels/cpu/softmax.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

// The "axis" attribute resolved against rank (negative counts from the end).
int64_t resolve_axis(const Attrs& a, size_t rank) {
  const int64_t axis = a.get_int("axis"), r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw Error(Status::kInvalidArgument,
                str_cat("attribute 'axis' is ", axis, ", expected in [", -r, ", ", r, ") for rank ", r));
  return axis < 0 ? axis + r : axis;
}

struct Split { int64_t outer = 1, n = 1, inner = 1; };

Split split_at(const Shape& s, int64_t axis) {
  Split p;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis) p.outer *= s[static_cast<size_t>(d)];
    else if (d == axis) p.n = s[static_cast<size_t>(d)];
    else p.inner *= s[static_cast<size_t>(d)];
  }
  return p;
}

void register_softmax_like(OpRegistry& r, const std::string& name, bool log) {
  OpSchema s;
  s.name = name;
  s.inputs = {"x"};
  s.attrs = {{"axis", AttrType::kInt, false, int64_t{-1}}};
  s.infer = [](const ShapeContext& c) {
    expect_float(c, 0);
    if (c.inputs[0].shape.empty()) shape_error("input 0 has shape [], expected at least one dimension");
    resolve_axis(c.attrs, c.inputs[0].shape.size());
    return std::vector<TensorType>{c.inputs[0]};
  };
  s.kernels[0] = [log](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    Split p = split_at(x.shape(), resolve_axis(k.attrs, x.shape().size()));
    kc::softmax_forward(x.data<float>(), k.outputs[0].data<float>(), p.outer, p.n, p.inner, log);
  };
  const std::string grad_op = name + "_grad";
  s.backward = [grad_op](BackwardContext& b) {
    b.set_grad_input(0, b.add1(grad_op, {b.output(0), b.grad_output(0)}, b.attrs()));
  };
  r.add(s);

  OpSchema g;
  g.name = grad_op;  // (y, dy) -> dx, with y the forward output
  g.inputs = {"y", "dy"};
  g.internal = true;
  g.attrs = s.attrs;
  g.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
  g.kernels[0] = [log](KernelContext& k) {
    const Tensor& y = k.inputs[0];
    Split p = split_at(y.shape(), resolve_axis(k.attrs, y.shape().size()));
    kc::softmax_backward(y.data<float>(), k.inputs[1].data<float>(), k.outputs[0].data<float>(), p.outer, p.n,
                         p.inner, log);
  };
  r.add(g);
}

}  // namespace

// Declared in core/ops/op_checks.h (shared with the CUDA kernels and vocab_parallel.cpp).
bool mean_reduction(const Attrs& a) { return a.get_string("reduction") == "mean"; }

Shape cross_entropy_rows(const ShapeContext& c) {
  expect_float(c, 0);
  const Shape& x = c.inputs[0].shape;
  const Shape& labels = c.inputs[1].shape;
  if (x.size() != 2 && x.size() != 3)
    shape_error(str_cat("input 0 has shape ", shape_str(x), ", expected [N, V] or [B, T, V]"));
  const Shape rows(x.begin(), x.end() - 1);
  if (labels != rows)
    shape_error(str_cat("input 1 has shape ", shape_str(labels), ", expected ", shape_str(rows),
                        " (the logits' shape without V)"));
  if (c.inputs[1].dtype != DType::kI32)
    shape_error(str_cat("input 1 has dtype ", dtype_name(c.inputs[1].dtype), ", expected i32"));
  const std::string& red = c.attrs.get_string("reduction");
  if (red != "mean" && red != "sum")
    throw Error(Status::kInvalidArgument,
                str_cat("attribute 'reduction' is \"", red, "\", expected \"mean\" or \"sum\""));
  return rows;
}

double cross_entropy_reduce(const Attrs& a, double total, int64_t count) {
  if (!mean_reduction(a)) return total;
  return count > 0 ? total / static_cast<double>(count) : 0.0;
}

double cross_entropy_grad_scale(const KernelContext& k) {
  const double dloss = k.inputs[3].data<float>()[0];
  if (!mean_reduction(k.attrs)) return dloss;
  const int64_t count = counted_labels(k.inputs[1], k.attrs.get_int("ignore_index"));
  return count > 0 ? dloss / static_cast<double>(count) : 0.0;
}

int64_t counted_labels(const Tensor& labels, int64_t ignore_index) {
  int64_t count = 0;
  const int32_t* l = labels.data<int32_t>();
  for (int64_t r = 0; r < labels.numel(); ++r) count += l[r] != ignore_index;
  return count;
}

Error bad_label_error(const Shape& shape, int64_t position, int64_t value, int64_t V, int64_t ignore_index) {
  return Error(Status::kInvalidArgument,
               str_cat("cross_entropy: label ", value, " at position ", shape_str(unravel_index(shape, position)),
                       " is outside [0, ", V, ") and is not ignore_index (", ignore_index, ")"));
}

void check_labels(const Tensor& labels, int64_t V, int64_t ignore_index) {
  const int64_t bad = kc::find_bad_label(labels.data<int32_t>(), labels.numel(), V, ignore_index);
  if (bad >= 0) throw bad_label_error(labels.shape(), bad, labels.data<int32_t>()[bad], V, ignore_index);
}

namespace {

std::vector<TensorType> cross_entropy_shape(const ShapeContext& c) {
  return {{c.inputs[0].dtype, {}}, {DType::kF32, cross_entropy_rows(c)}};
}

void cross_entropy_kernel(KernelContext& k) {
  const Tensor& x = k.inputs[0];
  const int64_t V = x.shape().back(), rows = x.numel() / V, ignore = k.attrs.get_int("ignore_index");
  check_labels(k.inputs[1], V, ignore);
  int64_t count = 0;
  double total = kc::cross_entropy_forward(x.data<float>(), k.inputs[1].data<int32_t>(),
                                           k.outputs[1].data<float>(), rows, V, ignore, &count);
  k.outputs[0].data<float>()[0] = static_cast<float>(cross_entropy_reduce(k.attrs, total, count));
}

void cross_entropy_grad_kernel(KernelContext& k) {
  const Tensor& x = k.inputs[0];
  const int64_t V = x.shape().back(), rows = x.numel() / V, ignore = k.attrs.get_int("ignore_index");
  const int32_t* labels = k.inputs[1].data<int32_t>();
  const double scale = cross_entropy_grad_scale(k);
  kc::cross_entropy_backward(x.data<float>(), labels, k.inputs[2].data<float>(), static_cast<float>(scale),
                             k.outputs[0].data<float>(), rows, V, ignore);
}

void register_cross_entropy(OpRegistry& r) {
  OpSchema s;
  s.name = "cross_entropy";  // (logits, labels) -> loss [], lse [rows] (saved for backward)
  s.inputs = {"logits", "labels"};
  s.outputs = {"loss", "lse"};
  s.attrs = {{"ignore_index", AttrType::kInt, false, int64_t{-100}},
             {"reduction", AttrType::kString, false, std::string("mean")}};
  s.nondiff_inputs = {1};
  s.infer = cross_entropy_shape;
  s.kernels[0] = cross_entropy_kernel;
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;
    b.set_grad_input(0, b.add1("cross_entropy_grad", {b.input(0), b.input(1), b.output(1), b.grad_output(0)},
                               b.attrs()));
  };
  r.add(s);

  OpSchema g;
  g.name = "cross_entropy_grad";  // (logits, labels, lse, dloss) -> dlogits
  g.inputs = {"logits", "labels", "lse", "dloss"};
  g.internal = true;
  g.attrs = s.attrs;
  g.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
  g.kernels[0] = cross_entropy_grad_kernel;
  r.add(g);
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  register_softmax_like(r, "softmax", false);
  register_softmax_like(r, "log_softmax", true);
  register_cross_entropy(r);
}

}  // namespace cohort
