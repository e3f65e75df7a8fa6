// One operator on the GPU against the same operator on the CPU: a graph of the operator alone,
// loss = sum over its float outputs of sum(out * w) with fixed random weights w (so every output
// element gets its own gradient), differentiated for every float input, run by the executor on
// both devices from the same host inputs. Outputs and input gradients are compared per tensor:
// the largest difference must stay within `tol` times the tensor's largest CPU magnitude (and
// that magnitude must be non-zero where `expect_nonzero` says so, so an all-zero pair cannot
// pass). Header-only; callers skip without a visible device first.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device/device.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"

// At the top of a test: skips it, with the reason, without a usable device.
#define COHORT_NEEDS_GPU() \
  if (::cohort::cuda_device_count() == 0)    \
  GTEST_SKIP() << ::cohort::device_unavailable_reason(::cohort::Device::kCuda)

namespace cohort::gpu_test {

// A host tensor of `dtype` (f32 or bf16) with values uniform in [lo, hi).
inline Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f,
                            DType dtype = DType::kF32) {
  Tensor f = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = u(rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from(f);
  return t;
}

struct OpCompare {
  double tol = 1e-5;         // of each tensor's largest CPU magnitude
  bool gradients = true;     // also compare the gradients of every float input
  bool training = true;      // RunOptions::training (dropout)
  int64_t step = 3;          // RunOptions::step and seed, so masks are not the step-0 ones
  uint64_t seed = 11;
  bool expect_nonzero = true;
};

namespace detail {

inline Tensor host_f32(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::kF32);
  h.copy_from(t);
  return h;
}

struct OpRun {
  std::vector<Tensor> outputs, grads;  // host f32 copies
};

inline OpRun run_op_graph(const Graph& g, const std::vector<ValueId>& outputs, const std::vector<ValueId>& grads,
                          const std::unordered_map<ValueId, Tensor>& host_env, Device device, const OpCompare& c) {
  std::vector<ValueId> targets = outputs;
  for (ValueId v : grads)
    if (v >= 0) targets.push_back(v);
  Executor ex(g, targets, device);
  std::unordered_map<ValueId, Tensor> env;
  for (const auto& [id, t] : host_env) env[id] = to_device(t, device);
  RunOptions o;
  o.training = c.training;
  o.step = c.step;
  o.seed = c.seed;
  ex.run(env, o);
  device_synchronize(device);
  OpRun r;
  for (ValueId v : outputs) r.outputs.push_back(host_f32(env.at(v)));
  for (ValueId v : grads) r.grads.push_back(v >= 0 ? host_f32(env.at(v)) : Tensor());
  return r;
}

inline void expect_close(const Tensor& cpu, const Tensor& gpu, double tol, bool nonzero, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  double scale = 0, worst = 0;
  for (int64_t k = 0; k < cpu.numel(); ++k) {
    const double a = cpu.data<float>()[k], b = gpu.data<float>()[k];
    scale = std::max(scale, std::fabs(a));
    worst = std::isfinite(b) ? std::max(worst, std::fabs(a - b)) : INFINITY;
  }
  if (nonzero && cpu.numel() > 0) {
    EXPECT_GT(scale, 0.0) << what << ": all zero on the CPU";
  }
  EXPECT_LE(worst, tol * std::max(scale, 1e-30)) << what << " (largest CPU magnitude " << scale << ")";
}

}  // namespace detail

// Runs `op` with `attrs` on `inputs` (host tensors; integer ones are passed through and not
// differentiated) on the CPU and on CUDA, and compares its float outputs and the float inputs'
// gradients as described above.
inline void expect_op_matches_cpu(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                  const OpCompare& c = {}) {
  Graph g;
  std::unordered_map<ValueId, Tensor> env;
  std::vector<ValueId> ins, wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueId v = g.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape());
    ins.push_back(v);
    env[v] = inputs[i];
    if (inputs[i].dtype() == DType::kF32 || inputs[i].dtype() == DType::kBF16) wrt.push_back(v);
  }
  const std::vector<ValueId> outs = g.add_op(op, "op", ins, attrs);
  std::vector<ValueId> float_outs;
  for (ValueId v : outs) {
    const DType t = g.value(v).type.dtype;
    if (t == DType::kF32 || t == DType::kBF16) float_outs.push_back(v);
  }
  std::vector<ValueId> grads;
  if (c.gradients && !wrt.empty() && !float_outs.empty()) {
    ValueId loss = -1;
    for (size_t k = 0; k < float_outs.size(); ++k) {
      const TensorType& t = g.value(float_outs[k]).type;
      const ValueId w = g.add_input("w" + std::to_string(k), t.dtype, t.shape);
      env[w] = random_tensor(t.shape, 100 + static_cast<uint32_t>(k), -1.0f, 1.0f, t.dtype);
      const ValueId prod = g.add_op("mul", "", {float_outs[k], w}, Attrs()).at(0);
      const ValueId s = g.add_op("sum", "", {prod}, Attrs()).at(0);
      loss = loss < 0 ? s : g.add_op("add", "", {loss, s}, Attrs()).at(0);
    }
    g.set_loss(loss);
    grads = build_backward(g, loss, wrt);
  }
  const detail::OpRun cpu = detail::run_op_graph(g, float_outs, grads, env, Device::kCpu, c);
  const detail::OpRun gpu = detail::run_op_graph(g, float_outs, grads, env, Device::kCuda, c);
  for (size_t k = 0; k < float_outs.size(); ++k)
    detail::expect_close(cpu.outputs[k], gpu.outputs[k], c.tol, c.expect_nonzero,
                         op + " output " + std::to_string(k));
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] < 0) continue;
    detail::expect_close(cpu.grads[k], gpu.grads[k], c.tol, c.expect_nonzero,
                         op + " gradient of input " + std::to_string(k));
  }
}

}  // namespace cohort::gpu_test
