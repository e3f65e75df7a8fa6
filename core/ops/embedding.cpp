// embedding(weight [V, C], ids i32 [...]) -> [..., C], a row gather. An id outside [0, V) can
// only be seen at run time: the kernel throws kInvalidArgument naming the id and its position.
// The gradient (internal embedding_grad) is a deterministic scatter-add into [V, C].
// Loops live in kernels/cpu/embedding.cpp.
#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/op_checks.h"
#include "core/ops/schema.h"
#include "kernels/cpu/embedding.h"

namespace cohort {

namespace kc = kernels::cpu;

// Declared in core/ops/op_checks.h (shared with the CUDA kernels).
Error bad_id_error(const Shape& shape, int64_t position, int64_t value, int64_t V) {
  return Error(Status::kInvalidArgument, str_cat("embedding: id ", value, " at position ",
                                                 shape_str(unravel_index(shape, position)), " is outside [0, ", V, ")"));
}

void check_ids(const Tensor& ids, int64_t V) {
  const int64_t bad = kc::find_bad_id(ids.data<int32_t>(), ids.numel(), V);
  if (bad >= 0) throw bad_id_error(ids.shape(), bad, ids.data<int32_t>()[bad], V);
}

namespace {

std::vector<TensorType> embedding_shape(const ShapeContext& c) {
  expect_float(c, 0);
  expect_rank(c, 0, 2);
  if (c.inputs[1].dtype != DType::kI32)
    shape_error(str_cat("input 1 has dtype ", dtype_name(c.inputs[1].dtype), ", expected i32"));
  Shape out = c.inputs[1].shape;
  out.push_back(c.inputs[0].shape[1]);
  return {{c.inputs[0].dtype, out}};
}

}  // namespace

void register_embedding_ops(OpRegistry& r) {
  OpSchema s;
  s.name = "embedding";
  s.inputs = {"weight", "ids"};
  s.nondiff_inputs = {1};
  s.infer = embedding_shape;
  s.kernels[0] = [](KernelContext& k) {
    const Tensor& w = k.inputs[0];
    const Tensor& ids = k.inputs[1];
    check_ids(ids, w.dim(0));
    kc::embedding_forward(w.data<float>(), ids.data<int32_t>(), k.outputs[0].data<float>(), ids.numel(), w.dim(1));
  };
  s.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("vocab", b.input_type(0).shape[0]);
    b.set_grad_input(0, b.add1("embedding_grad", {b.input(1), b.grad_output(0)}, a));
  };
  r.add(s);

  OpSchema g;
  g.name = "embedding_grad";  // (ids, dy [..., C]) -> dweight [vocab, C]
  g.inputs = {"ids", "dy"};
  g.internal = true;
  g.attrs = {{"vocab", AttrType::kInt, true, int64_t{0}}};
  g.infer = [](const ShapeContext& c) {
    const Shape& dy = c.inputs[1].shape;
    if (dy.size() != c.inputs[0].shape.size() + 1)
      shape_error(str_cat("input 1 has shape ", shape_str(dy), ", expected ", shape_str(c.inputs[0].shape),
                          " plus a channel dim"));
    return std::vector<TensorType>{{c.inputs[1].dtype, {c.attrs.get_int("vocab"), dy.back()}}};
  };
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& ids = k.inputs[0];
    const Tensor& dw = k.outputs[0];
    kc::embedding_backward(ids.data<int32_t>(), k.inputs[1].data<float>(), dw.data<float>(), ids.numel(),
                           dw.dim(0), dw.dim(1));
  };
  r.add(g);
}

}  // namespace cohort
