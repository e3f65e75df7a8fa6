// Matrix products: matmul (batched, broadcasting, optional transposes), linear (PyTorch layout,
// y = x W^T + b), gelu_linear (a linear layer applied to gelu(x), whose backward folds the
// activation's gradient into a product), and the internal matmul_sum_batch (the gradient of an
// operand shared across a batch, without materialising per-batch products) and matmul_mul.
// Kernels: kernels/cpu/matmul.cpp (oneDNN, fp32 and native bf16).
#include <algorithm>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

kc::MatmulType matmul_type(const Tensor& t) {
  return t.dtype() == DType::kBF16 ? kc::MatmulType::kBF16 : kc::MatmulType::kF32;
}

bool flag_attr(const Attrs& a, const char* name) {
  int64_t v = a.get_int(name);
  if (v != 0 && v != 1)
    throw Error(Status::kInvalidArgument, str_cat("attribute '", name, "' is ", v, ", expected 0 or 1"));
  return v == 1;
}

void expect_min_rank(const ShapeContext& c, size_t input, size_t rank) {
  const Shape& s = c.inputs[input].shape;
  if (s.size() < rank) shape_error(str_cat("input ", input, " has shape ", shape_str(s), ", expected rank >= ", rank));
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// "[2, 300, *]": the shape operand `input` should have, with `*` for free extents.
std::string expected_str(const Shape& batch, const std::string& rows, const std::string& cols) {
  std::string out = "[";
  for (int64_t d : batch) out += str_cat(d, ", ");
  return str_cat(out, rows, ", ", cols, "]");
}

Shape broadcast_batch(const Shape& a, const Shape& b, const Shape& b_full) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1, db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      shape_error(str_cat("input 1 has shape ", shape_str(b_full), ", whose batch dims do not broadcast with ",
                          shape_str(a)));
    out[out.size() - 1 - k] = std::max(da, db);
  }
  return out;
}

std::vector<TensorType> matmul_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_same_dtype(c, 0, 1);
  expect_min_rank(c, 0, 2);
  expect_min_rank(c, 1, 2);
  const bool ta = flag_attr(c.attrs, "transpose_a"), tb = flag_attr(c.attrs, "transpose_b");
  const Shape& a = c.inputs[0].shape;
  const Shape& b = c.inputs[1].shape;
  const size_t ra = a.size(), rb = b.size();
  const int64_t M = ta ? a[ra - 1] : a[ra - 2], K = ta ? a[ra - 2] : a[ra - 1];
  const int64_t kb = tb ? b[rb - 1] : b[rb - 2], N = tb ? b[rb - 2] : b[rb - 1];
  if (kb != K)
    shape_error(str_cat("input 1 has shape ", shape_str(b), ", expected ",
                        tb ? expected_str(batch_of(b), "*", str_cat(K)) : expected_str(batch_of(b), str_cat(K), "*")));
  Shape out = broadcast_batch(batch_of(a), batch_of(b), b);
  out.push_back(M);
  out.push_back(N);
  return {{c.inputs[0].dtype, out}};
}

Attrs flags(bool ta, bool tb) {
  Attrs a;
  a.set("transpose_a", int64_t{ta});
  a.set("transpose_b", int64_t{tb});
  return a;
}

// Gradient of a matmul operand `target` = l * r (with flags), reduced to target's shape: one
// matmul when nothing was broadcast, matmul_sum_batch when target was shared by every batch,
// matmul + sum_to for partial broadcasts.
ValueId operand_grad(BackwardContext& b, size_t target, ValueId l, ValueId r, bool ta, bool tb) {
  const Shape& want = b.input_type(target).shape;
  const Shape& dy = b.output_type(0).shape;
  const Shape want_batch = batch_of(want);
  const bool full = want.size() == dy.size() && want_batch == batch_of(dy);
  if (full) return b.add1("matmul", {l, r}, flags(ta, tb));
  auto batch_numel = [](const Shape& s) { return shape_numel(batch_of(s)); };
  const ValueId other = b.input(1 - target);
  const bool shared = shape_numel(want_batch) == 1 &&
                      batch_numel(b.graph().value(other).type.shape) == batch_numel(dy);
  if (shared) {
    Attrs a = flags(ta, tb);
    a.set("rank", static_cast<int64_t>(want.size()));
    return b.add1("matmul_sum_batch", {l, r}, a);
  }
  Attrs s;
  s.set("shape", want);
  return b.add1("sum_to", {b.add1("matmul", {l, r}, flags(ta, tb))}, s);
}

// C = op(A) op(B): dop(A) = dC op(B)^T and dop(B) = op(A)^T dC, transposed back when stored so.
void matmul_backward(BackwardContext& b) {
  const bool ta = b.attrs().get_int("transpose_a") != 0, tb = b.attrs().get_int("transpose_b") != 0;
  const ValueId A = b.input(0), B = b.input(1), dC = b.grad_output(0);
  if (b.needs_grad_input(0))
    b.set_grad_input(0, ta ? operand_grad(b, 0, B, dC, tb, true) : operand_grad(b, 0, dC, B, false, !tb));
  if (b.needs_grad_input(1))
    b.set_grad_input(1, tb ? operand_grad(b, 1, dC, A, true, ta) : operand_grad(b, 1, A, dC, !ta, false));
}

OpSchema matmul_schema() {
  OpSchema s;
  s.name = "matmul";
  s.inputs = {"a", "b"};
  s.attrs = {{"transpose_a", AttrType::kInt, false, int64_t{0}}, {"transpose_b", AttrType::kInt, false, int64_t{0}}};
  s.infer = matmul_shape;
  s.bf16_kernel = true;
  s.kernels[0] = [](KernelContext& k) {
    kc::matmul(matmul_type(k.inputs[0]), k.inputs[0].raw(), k.inputs[0].shape(), k.attrs.get_int("transpose_a") != 0,
               k.inputs[1].raw(), k.inputs[1].shape(), k.attrs.get_int("transpose_b") != 0, k.outputs[0].raw(),
               k.outputs[0].shape());
  };
  s.backward = matmul_backward;
  return s;
}

OpSchema matmul_sum_batch_schema() {
  OpSchema s;
  s.name = "matmul_sum_batch";  // [1.., M, N] = sum over the batch of op(a_i) op(b_i)
  s.inputs = {"a", "b"};
  s.internal = true;
  s.attrs = {{"transpose_a", AttrType::kInt, false, int64_t{0}},
             {"transpose_b", AttrType::kInt, false, int64_t{0}},
             {"rank", AttrType::kInt, false, int64_t{2}}};
  s.infer = [](const ShapeContext& c) {
    std::vector<TensorType> t = matmul_shape(c);
    const Shape& out = t[0].shape;
    if (shape_numel(batch_of(c.inputs[0].shape)) != shape_numel(batch_of(c.inputs[1].shape)))
      shape_error(str_cat("input 1 has shape ", shape_str(c.inputs[1].shape), ", expected as many batches as ",
                          shape_str(c.inputs[0].shape)));
    int64_t rank = c.attrs.get_int("rank");
    if (rank < 2) throw Error(Status::kInvalidArgument, str_cat("attribute 'rank' is ", rank, ", expected >= 2"));
    Shape r(static_cast<size_t>(rank - 2), 1);
    r.push_back(out[out.size() - 2]);
    r.push_back(out[out.size() - 1]);
    return std::vector<TensorType>{{t[0].dtype, r}};
  };
  s.bf16_kernel = true;
  s.kernels[0] = [](KernelContext& k) {
    kc::matmul_sum_batch(matmul_type(k.inputs[0]), k.inputs[0].raw(), k.inputs[0].shape(),
                         k.attrs.get_int("transpose_a") != 0, k.inputs[1].raw(), k.inputs[1].shape(),
                         k.attrs.get_int("transpose_b") != 0, k.outputs[0].raw());
  };
  return s;
}

std::vector<TensorType> linear_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_same_dtype(c, 0, 1);
  expect_min_rank(c, 0, 2);
  expect_rank(c, 1, 2);
  const Shape& x = c.inputs[0].shape;
  const Shape& w = c.inputs[1].shape;
  if (w[1] != x.back())
    shape_error(str_cat("input 1 has shape ", shape_str(w), ", expected [*, ", x.back(), "]"));
  if (c.inputs.size() > 2) {
    expect_same_dtype(c, 0, 2);
    if (c.inputs[2].shape != Shape{w[0]})
      shape_error(str_cat("input 2 has shape ", shape_str(c.inputs[2].shape), ", expected [", w[0], "]"));
  }
  Shape out = x;
  out.back() = w[0];
  return {{c.inputs[0].dtype, out}};
}

// Gradients of a linear layer's weight (dy^T x_in over all rows, one gemm) and bias (dy summed
// over rows), where x_in is what multiplied the weight.
void weight_and_bias_grads(BackwardContext& b, ValueId dy, ValueId x_in) {
  if (b.needs_grad_input(1)) b.set_grad_input(1, b.add1("matmul_sum_batch", {dy, x_in}, flags(true, false)));
  if (b.node().inputs.size() > 2 && b.needs_grad_input(2)) {
    Attrs s;
    s.set("shape", b.input_type(2).shape);
    b.set_grad_input(2, b.add1("sum_to", {dy}, s));
  }
}

// y = x W^T + b: dx = dy W, dW = dy^T x over all rows (one gemm), db = dy summed over rows.
void linear_backward(BackwardContext& b) {
  const ValueId dy = b.grad_output(0);
  if (b.needs_grad_input(0)) b.set_grad_input(0, b.add1("matmul", {dy, b.input(1)}));
  weight_and_bias_grads(b, dy, b.input(0));
}

OpSchema linear_schema() {
  OpSchema s;
  s.name = "linear";
  s.inputs = {"x", "weight", "bias"};
  s.optional_inputs = 1;
  s.infer = linear_shape;
  s.bf16_kernel = true;
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const int64_t K = x.shape().back(), N = k.inputs[1].dim(0);
    kc::linear(matmul_type(x), x.raw(), k.inputs[1].raw(), k.inputs.size() > 2 ? k.inputs[2].raw() : nullptr,
               k.outputs[0].raw(), x.numel() / std::max<int64_t>(K, 1), N, K);
  };
  s.backward = linear_backward;
  return s;
}

// gelu_linear: y = gelu(x) W^T + b, the second layer of a transformer MLP with its activation.
// Outputs 1 and 2 are a = gelu(x) and g = gelu'(x), written in the same pass. By default they are
// kept for backward: dW = dy^T a and dx = (dy W) * g (matmul_mul), so backward never reads x again
// nor recomputes the activation's derivative. With attr recompute = 1 backward keeps x instead
// (one [rows, K] tensor instead of two) and recomputes: a = gelu(x) for dW, and
// dx = (dy W) * gelu'(x) in one operator (matmul_gelu_grad) — the choice for a GPU, where the
// passes are cheap and memory is not (a GPT-2 small step at batch 8 keeps 0.6 GB less).
void gelu_linear_backward(BackwardContext& b) {
  COHORT_CHECK(b.grad_output(2) < 0, Status::kUnsupported, "gelu_linear '", b.node().name,
               "': output 2 (gelu'(x)) has no gradient rule");
  const ValueId dy = b.grad_output(0), x = b.input(0);
  const bool recompute = b.attrs().get_int("recompute") != 0;
  if (b.needs_grad_input(0)) {
    if (dy >= 0 && b.grad_output(1) < 0) {
      b.set_grad_input(0, recompute ? b.add1("matmul_gelu_grad", {dy, b.input(1), x})
                                    : b.add1("matmul_mul", {dy, b.input(1), b.output(2)}));
    } else {  // a is also used elsewhere: da = dy W + (gradient of a), then through gelu'(x)
      ValueId da = b.grad_output(1);
      if (dy >= 0) da = b.add1("add", {b.add1("matmul", {dy, b.input(1)}), da});
      b.set_grad_input(0, recompute ? b.add1("gelu_grad", {x, da}) : b.add1("mul", {da, b.output(2)}));
    }
  }
  if (dy >= 0) weight_and_bias_grads(b, dy, recompute ? b.add1("gelu", {x}) : b.output(1));
}

OpSchema gelu_linear_schema() {
  OpSchema s;
  s.name = "gelu_linear";
  s.inputs = {"x", "weight", "bias"};
  s.outputs = {"y", "gelu", "gelu_grad"};  // linear(gelu(x)), gelu(x), gelu'(x)
  s.optional_inputs = 1;
  s.attrs = {{"recompute", AttrType::kInt, false, int64_t{0}}};
  s.infer = [](const ShapeContext& c) {
    std::vector<TensorType> t = linear_shape(c);
    t.push_back(c.inputs[0]);
    t.push_back(c.inputs[0]);
    return t;
  };
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const int64_t K = x.shape().back(), N = k.inputs[1].dim(0);
    float* a = k.outputs[1].data<float>();
    kc::gelu_with_grad(x.data<float>(), a, k.outputs[2].data<float>(), x.numel());
    kc::linear(kc::MatmulType::kF32, a, k.inputs[1].raw(), k.inputs.size() > 2 ? k.inputs[2].raw() : nullptr,
               k.outputs[0].raw(), x.numel() / std::max<int64_t>(K, 1), N, K);
  };
  s.backward = gelu_linear_backward;
  return s;
}

OpSchema matmul_mul_schema() {
  OpSchema s;
  s.name = "matmul_mul";  // (a [..., K], b [K, N], m [..., N]) -> (a b) * m
  s.inputs = {"a", "b", "m"};
  s.internal = true;
  s.infer = [](const ShapeContext& c) {
    expect_float(c, 0);
    expect_same_dtype(c, 0, 1);
    expect_same_dtype(c, 0, 2);
    expect_min_rank(c, 0, 1);
    expect_rank(c, 1, 2);
    const Shape& a = c.inputs[0].shape;
    const Shape& b = c.inputs[1].shape;
    if (b[0] != a.back()) shape_error(str_cat("input 1 has shape ", shape_str(b), ", expected [", a.back(), ", *]"));
    Shape out = a;
    out.back() = b[1];
    if (c.inputs[2].shape != out)
      shape_error(str_cat("input 2 has shape ", shape_str(c.inputs[2].shape), ", expected ", shape_str(out)));
    return std::vector<TensorType>{{c.inputs[0].dtype, out}};
  };
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& a = k.inputs[0];
    const int64_t K = a.shape().back(), N = k.inputs[1].dim(1);
    kc::matmul_mul(a.data<float>(), k.inputs[1].data<float>(), k.inputs[2].data<float>(), k.outputs[0].data<float>(),
                   a.numel() / std::max<int64_t>(K, 1), N, K);
  };
  return s;
}

OpSchema matmul_gelu_grad_schema() {
  OpSchema s = matmul_mul_schema();
  s.name = "matmul_gelu_grad";  // (a [..., K], b [K, N], x [..., N]) -> (a b) * gelu'(x)
  s.inputs = {"a", "b", "x"};
  s.kernels[0] = [](KernelContext& k) {
    const Tensor &a = k.inputs[0], &c = k.outputs[0];
    kc::matmul(kc::MatmulType::kF32, a.raw(), a.shape(), false, k.inputs[1].raw(), k.inputs[1].shape(), false,
               c.raw(), c.shape());
    kc::unary_grad(kc::UnaryOp::kGelu, k.inputs[2].data<float>(), c.data<float>(), c.data<float>(), c.numel());
  };
  return s;
}

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add(matmul_schema());
  r.add(matmul_sum_batch_schema());
  r.add(linear_schema());
  r.add(gelu_linear_schema());
  r.add(matmul_mul_schema());
  r.add(matmul_gelu_grad_schema());
}

}  // namespace cohort
