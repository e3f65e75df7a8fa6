// The executor on the GPU: one GPT training step (forward, loss, every parameter gradient) run
// on the CUDA device from the same parameters and batch as on the CPU, compared value by value.
// fp32 without TF32, so the two differ only by summation order: loss within 1e-4 relative,
// gradients within 2e-3 of each tensor's largest magnitude; and the same step in bf16. Skips
// without a visible device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "core/device/device.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/initializer.h"
#include "core/models/gpt.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

struct Step {
  float loss = 0;
  std::vector<Tensor> grads;  // host copies, in parameter order
};

Step run_step(const Graph& g, const std::vector<ValueId>& grads, const std::unordered_map<ValueId, Tensor>& host_env,
              Device device) {
  std::vector<ValueId> targets = {g.loss()};
  for (ValueId v : grads) targets.push_back(v);
  Executor ex(g, targets, device);
  std::unordered_map<ValueId, Tensor> env;
  for (const auto& [id, t] : host_env) {
    Tensor d = Tensor::empty(t.shape(), t.dtype(), device_allocator(device));
    d.copy_from(t);
    env[id] = d;
  }
  RunOptions o;
  ex.run(env, o);
  device_synchronize(device);
  Step s;
  Tensor loss = Tensor::empty({}, DType::kF32);
  loss.copy_from(env.at(g.loss()));
  s.loss = loss.data<float>()[0];
  for (ValueId v : grads) {
    const Tensor& d = env.at(v);
    Tensor h = Tensor::empty(d.shape(), DType::kF32);
    h.copy_from(d);
    s.grads.push_back(h);
  }
  return s;
}

models::GptConfig gpt_config(DType dtype) {
  models::GptConfig c;
  c.batch = 4;
  c.context = 64;
  c.vocab = 96;
  c.layers = 2;
  c.width = 128;
  c.heads = 2;
  c.dtype = dtype;
  return c;
}

// Parameters initialised on the host (in the graph's dtypes) and a random batch.
std::unordered_map<ValueId, Tensor> step_inputs(const Graph& g, const models::GptConfig& c) {
  std::unordered_map<ValueId, Tensor> env;
  for (ValueId p : g.parameters()) {
    const Value& v = g.value(p);
    Tensor f = Tensor::empty(v.type.shape, DType::kF32);
    initialize_parameter(f, v.init, 7, v.name);
    Tensor t = Tensor::empty(v.type.shape, v.type.dtype);
    t.copy_from(f);
    env[p] = t;
  }
  std::mt19937 rng(3);
  for (const char* name : {"tokens", "targets"}) {
    Tensor t = Tensor::empty({c.batch, c.context}, DType::kI32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng() % c.vocab);
    env[g.find(name)] = t;
  }
  return env;
}

// Each gradient's largest difference within tol of its largest CPU magnitude; on failure the
// worst element, both values and the bound.
void expect_gradients_close(const Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                            const Step& cpu, const Step& gpu, float tol) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (grads[i] < 0) continue;
    const Tensor &a = cpu.grads[i], &b = gpu.grads[i];
    float scale = 0, worst = -1;
    int64_t at = 0;
    for (int64_t k = 0; k < a.numel(); ++k) scale = std::max(scale, std::fabs(a.data<float>()[k]));
    for (int64_t k = 0; k < a.numel(); ++k) {
      const float d = std::fabs(a.data<float>()[k] - b.data<float>()[k]);
      if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d, at = k;
    }
    EXPECT_GT(scale, 0.0f) << g.value(params[i]).name;
    EXPECT_LE(worst, tol * scale) << "gradient of " << g.value(params[i]).name << ": worst element " << at
                                  << " gpu " << b.data<float>()[at] << " cpu " << a.data<float>()[at] << ", bound "
                                  << tol << " x largest CPU magnitude " << scale;
  }
}

TEST(GpuExecutor, GptStepMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda);
  const models::GptConfig c = gpt_config(DType::kF32);
  Graph g = models::build_gpt(c);
  const std::vector<ValueId> params = g.parameters();
  const std::vector<ValueId> grads = build_backward(g, g.loss(), params);
  const std::unordered_map<ValueId, Tensor> env = step_inputs(g, c);
  const Step cpu = run_step(g, grads, env, Device::kCpu);
  const Step gpu = run_step(g, grads, env, Device::kCuda);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * std::fabs(cpu.loss));
  EXPECT_GT(cpu.loss, 4.0f);  // about log(96) for the initial weights: a real loss, not zero
  expect_gradients_close(g, params, grads, cpu, gpu, 2e-3f);
  // TF32 products (10-bit mantissa inputs): the loss still agrees to a few parts in a thousand.
  set_cuda_allow_tf32(true);
  const Step tf32 = run_step(g, grads, env, Device::kCuda);
  set_cuda_allow_tf32(false);
  EXPECT_NEAR(tf32.loss, cpu.loss, 5e-3 * std::fabs(cpu.loss));
}

// The same step in bf16 (bf16 parameters, activations and gradients; fp32 statistics): each
// device computes every node in fp32 from the same bf16 values and rounds its outputs at the same
// points, so they differ where two fp32 results a hair apart round to neighbouring bf16 values
// (one ulp, 2^-8 of a value) and where a fused kernel rounds inside (attention's probabilities in
// bf16, as flash kernels and cuDNN do). Gradients of the first layer pass through about 25
// rounded nodes from the loss: 5e-2 of each tensor's largest magnitude; the loss (a bf16 value)
// within 2e-2.
TEST(GpuExecutor, Bf16GptStepMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda);
  const models::GptConfig c = gpt_config(DType::kBF16);
  Graph g = models::build_gpt(c);
  const std::vector<ValueId> params = g.parameters();
  const std::vector<ValueId> grads = build_backward(g, g.loss(), params);
  const std::unordered_map<ValueId, Tensor> env = step_inputs(g, c);
  const Step cpu = run_step(g, grads, env, Device::kCpu);
  const Step gpu = run_step(g, grads, env, Device::kCuda);
  EXPECT_NEAR(gpu.loss, cpu.loss, 2e-2 * std::fabs(cpu.loss));
  EXPECT_GT(cpu.loss, 4.0f);
  expect_gradients_close(g, params, grads, cpu, gpu, 5e-2f);
}

TEST(GpuExecutor, HostTensorBoundToADeviceGraphIsRefused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda);
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {4});
  ValueId y = g.add_op("gelu", "act", {x}, Attrs()).at(0);
  Executor ex(g, {y}, Device::kCuda);
  std::unordered_map<ValueId, Tensor> env = {{x, Tensor::zeros({4}, DType::kF32)}};
  test::expect_error([&] { ex.run(env, RunOptions()); }, Status::kInvalidArgument,
                     "is on cpu but the graph runs on cuda");
}

}  // namespace
}  // namespace cohort
