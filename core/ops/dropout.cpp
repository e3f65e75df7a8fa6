// dropout(x; p, seed): in training, zero each element with probability p and scale the rest by
// 1 / (1 - p) (inverted dropout, Srivastava et al., JMLR 2014); the identity in evaluation.
// The mask is regenerated, not stored: dropout_grad carries the forward node's id as an
// attribute and hashes the same (seed, run seed, step, node, index) tuple. Loops live in
// kernels/cpu/dropout.cpp.
#include <cstring>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/schema.h"
#include "kernels/cpu/dropout.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

// Applies the mask of forward node `node_id` to input 0 (x forward, dy backward).
void run_dropout(KernelContext& k, int64_t node_id) {
  const Tensor& x = k.inputs[0];
  float* out = k.outputs[0].data<float>();
  const double p = k.attrs.get_float("p");
  if (!k.training || p == 0.0) {
    std::memcpy(out, x.data<float>(), static_cast<size_t>(x.numel()) * sizeof(float));
    return;
  }
  // Micro-batches of one step draw different masks: the micro-batch number is mixed into the
  // node's (0 for a step without them, so its masks are as they were).
  const uint64_t key = kc::dropout_key(static_cast<uint64_t>(k.attrs.get_int("seed")), k.seed, k.step,
                                       node_id + (static_cast<int64_t>(k.micro_batch) << 32));
  kc::dropout_apply(x.data<float>(), out, x.numel(), static_cast<float>(p), key);
}

std::vector<TensorType> dropout_shape(const ShapeContext& c) {
  expect_float(c, 0);
  const double p = c.attrs.get_float("p");
  if (!(p >= 0.0 && p < 1.0))
    throw Error(Status::kInvalidArgument, str_cat("attribute 'p' is ", p, ", expected in [0, 1)"));
  return {c.inputs[0]};
}

}  // namespace

void register_dropout_ops(OpRegistry& r) {
  OpSchema s;
  s.name = "dropout";
  s.inputs = {"x"};
  s.attrs = {{"p", AttrType::kFloat, false, 0.1}, {"seed", AttrType::kInt, false, int64_t{0}}};
  s.infer = dropout_shape;
  s.kernels[0] = [](KernelContext& k) { run_dropout(k, k.node_id); };
  s.backward = [](BackwardContext& b) {
    Attrs a = b.attrs();
    a.set("node", static_cast<int64_t>(b.node().id));
    b.set_grad_input(0, b.add1("dropout_grad", {b.grad_output(0)}, a));
  };
  r.add(s);

  OpSchema g;
  g.name = "dropout_grad";  // dy -> dx with the mask of forward node `node`
  g.inputs = {"dy"};
  g.internal = true;
  g.attrs = s.attrs;
  g.attrs.push_back({"node", AttrType::kInt, true, int64_t{0}});
  g.infer = dropout_shape;
  g.kernels[0] = [](KernelContext& k) { run_dropout(k, k.attrs.get_int("node")); };
  r.add(g);
}

}  // namespace cohort
