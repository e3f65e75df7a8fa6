// Vocabulary-parallel operators (Megatron-LM, Shoeybi et al. 2019, section 3), inserted by the
// tensor-parallel rewrite (core/parallel/tensor_parallel.h) where a model's embedding table and
// output head are cut along the vocabulary: this rank holds rows [offset, offset + V_local) of
// the whole vocabulary 'vocab'. None communicates; the rewrite puts the collectives around them.
//
//   vocab_embedding(weight [V_local, C], ids)   the rows this rank holds, zeros for the others'
//                                                (summed over the axis after: every id found once).
//   vocab_cross_entropy_partials(logits [..., V_local], labels) -> [1, rows, 3]
//                                                per row: max, sum of exp(logit - max), the label's
//                                                logit if held here (else 0). Gathered over the
//                                                axis into [parts, rows, 3].
//   vocab_cross_entropy(logits [..., V_local], labels, partials [parts, rows, 3]) -> loss [], lse [rows]
//                                                the loss of the whole vocabulary from every rank's
//                                                partials; its gradient to this rank's logits is
//                                                (softmax - onehot) over its columns, complete, so
//                                                the partials take none (nondiff).
// So the logits are never gathered whole: 3 floats a row cross the axis instead of V.
// Loops live in kernels/cpu/vocab_parallel.cpp (host only: tensor parallelism runs on the host).
#include "core/base/error.h"
#include "core/device/device.h"
#include "core/graph/graph.h"
#include "core/ops/op_checks.h"
#include "core/ops/schema.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vocab_parallel.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

std::vector<AttrSpec> vocab_attrs(bool loss) {
  std::vector<AttrSpec> a = {{"offset", AttrType::kInt, true, int64_t{0}}, {"vocab", AttrType::kInt, true, int64_t{0}}};
  if (loss) {
    a.push_back({"ignore_index", AttrType::kInt, false, int64_t{-100}});
    a.push_back({"reduction", AttrType::kString, false, std::string("mean")});
  }
  return a;
}

// offset and vocab against this rank's V_local rows (shape rules: a plan's mistake, said early).
void check_block(const ShapeContext& c, int64_t v_local) {
  const int64_t offset = c.attrs.get_int("offset"), vocab = c.attrs.get_int("vocab");
  if (offset < 0 || vocab < 1 || offset + v_local > vocab)
    throw Error(Status::kInvalidArgument, str_cat("rows [", offset, ", ", offset + v_local,
                                                  ") of the vocabulary are not inside [0, vocab = ", vocab, ")"));
}

// cross_entropy's shape rule (op_checks.h) on this rank's logits [..., V_local], and their
// block of the vocabulary.
Shape logits_rows(const ShapeContext& c) {
  const Shape rows = cross_entropy_rows(c);
  check_block(c, c.inputs[0].shape.back());
  return rows;
}

void check_host_f32(const KernelContext& k, const char* op) {
  for (const Tensor& t : k.inputs)
    COHORT_CHECK(t.device() == Device::kCpu, Status::kUnsupported, op, ": host tensors only (tensor parallelism "
                 "runs on the host), not ", device_name(t.device()));
  COHORT_CHECK(k.inputs[0].dtype() == DType::kF32, Status::kUnsupported, op, ": f32 only, not ",
               dtype_name(k.inputs[0].dtype()));
}

void register_embedding(OpRegistry& r) {
  OpSchema s;
  s.name = "vocab_embedding";
  s.inputs = {"weight", "ids"};
  s.internal = true;
  s.host_only = true;
  s.attrs = vocab_attrs(false);
  s.nondiff_inputs = {1};
  s.infer = [](const ShapeContext& c) {
    expect_float(c, 0);
    expect_rank(c, 0, 2);
    check_block(c, c.inputs[0].shape[0]);
    if (c.inputs[1].dtype != DType::kI32)
      shape_error(str_cat("input 1 has dtype ", dtype_name(c.inputs[1].dtype), ", expected i32"));
    Shape out = c.inputs[1].shape;
    out.push_back(c.inputs[0].shape[1]);
    return std::vector<TensorType>{{c.inputs[0].dtype, out}};
  };
  s.kernels[0] = [](KernelContext& k) {
    check_host_f32(k, "vocab_embedding");
    const Tensor& w = k.inputs[0];
    const Tensor& ids = k.inputs[1];
    check_ids(ids, k.attrs.get_int("vocab"));
    kc::vocab_embedding_forward(w.data<float>(), ids.data<int32_t>(), k.outputs[0].data<float>(), ids.numel(),
                                w.dim(0), k.attrs.get_int("offset"), w.dim(1));
  };
  s.backward = [](BackwardContext& b) {
    Attrs a = b.attrs();
    a.set("rows", b.input_type(0).shape[0]);
    b.set_grad_input(0, b.add1("vocab_embedding_grad", {b.input(1), b.grad_output(0)}, a));
  };
  r.add(s);

  OpSchema g;
  g.name = "vocab_embedding_grad";  // (ids, dy [..., C]) -> dweight [V_local, C]
  g.inputs = {"ids", "dy"};
  g.internal = true;
  g.host_only = true;
  g.attrs = vocab_attrs(false);
  g.attrs.push_back({"rows", AttrType::kInt, true, int64_t{0}});
  g.infer = [](const ShapeContext& c) {
    const Shape& dy = c.inputs[1].shape;
    if (dy.size() != c.inputs[0].shape.size() + 1)
      shape_error(str_cat("input 1 has shape ", shape_str(dy), ", expected ", shape_str(c.inputs[0].shape),
                          " plus a channel dim"));
    return std::vector<TensorType>{{c.inputs[1].dtype, {c.attrs.get_int("rows"), dy.back()}}};
  };
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& ids = k.inputs[0];
    Tensor& dw = k.outputs[0];
    kc::vocab_embedding_backward(ids.data<int32_t>(), k.inputs[1].data<float>(), dw.data<float>(), ids.numel(),
                                 dw.dim(0), k.attrs.get_int("offset"), dw.dim(1));
  };
  r.add(g);
}

void register_cross_entropy(OpRegistry& r) {
  OpSchema p;
  p.name = "vocab_cross_entropy_partials";
  p.inputs = {"logits", "labels"};
  p.internal = true;
  p.host_only = true;
  p.attrs = vocab_attrs(true);
  p.nondiff_inputs = {0, 1};
  p.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{{DType::kF32, {1, shape_numel(logits_rows(c)), 3}}};
  };
  p.kernels[0] = [](KernelContext& k) {
    check_host_f32(k, "vocab_cross_entropy_partials");
    const Tensor& x = k.inputs[0];
    const int64_t v_local = x.shape().back();
    check_labels(k.inputs[1], k.attrs.get_int("vocab"), k.attrs.get_int("ignore_index"));
    kc::vocab_cross_entropy_partials(x.data<float>(), k.inputs[1].data<int32_t>(), k.outputs[0].data<float>(),
                                     x.numel() / v_local, v_local, k.attrs.get_int("offset"),
                                     k.attrs.get_int("ignore_index"));
  };
  r.add(p);

  OpSchema s;
  s.name = "vocab_cross_entropy";  // (logits, labels, partials) -> loss [], lse [rows]
  s.inputs = {"logits", "labels", "partials"};
  s.outputs = {"loss", "lse"};
  s.internal = true;
  s.host_only = true;
  s.attrs = vocab_attrs(true);
  s.nondiff_inputs = {1, 2};
  s.infer = [](const ShapeContext& c) {
    const Shape rows = logits_rows(c);
    const int64_t n = shape_numel(rows);
    const Shape& parts = c.inputs[2].shape;
    if (parts.size() != 3 || parts[1] != n || parts[2] != 3)
      shape_error(str_cat("input 2 has shape ", shape_str(parts), ", expected [parts, ", n, ", 3]"));
    return std::vector<TensorType>{{c.inputs[0].dtype, {}}, {DType::kF32, rows}};
  };
  s.kernels[0] = [](KernelContext& k) {
    check_host_f32(k, "vocab_cross_entropy");
    const Tensor& parts = k.inputs[2];
    int64_t count = 0;
    double total = kc::vocab_cross_entropy_combine(parts.data<float>(), k.inputs[1].data<int32_t>(),
                                                   k.outputs[1].data<float>(), parts.dim(0), parts.dim(1),
                                                   k.attrs.get_int("ignore_index"), &count);
    k.outputs[0].data<float>()[0] = static_cast<float>(cross_entropy_reduce(k.attrs, total, count));
  };
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;
    b.set_grad_input(0, b.add1("vocab_cross_entropy_grad", {b.input(0), b.input(1), b.output(1), b.grad_output(0)},
                               b.attrs()));
  };
  r.add(s);

  OpSchema g;
  g.name = "vocab_cross_entropy_grad";  // (logits, labels, lse, dloss) -> dlogits
  g.inputs = {"logits", "labels", "lse", "dloss"};
  g.internal = true;
  g.host_only = true;
  g.attrs = vocab_attrs(true);
  g.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
  g.kernels[0] = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const int64_t v_local = x.shape().back(), ignore = k.attrs.get_int("ignore_index");
    const double scale = cross_entropy_grad_scale(k);
    kc::vocab_cross_entropy_backward(x.data<float>(), k.inputs[1].data<int32_t>(), k.inputs[2].data<float>(),
                                     static_cast<float>(scale), k.outputs[0].data<float>(), x.numel() / v_local,
                                     v_local, k.attrs.get_int("offset"), ignore);
  };
  r.add(g);
}

}  // namespace

void register_vocab_parallel_ops(OpRegistry& r) {
  register_embedding(r);
  register_cross_entropy(r);
}

}  // namespace cohort
