// Devices on a machine without a GPU (and in builds without CUDA): the CUDA device is refused
// with its reason before anything runs, host copies go through device_copy, and, in a CUDA
// build, every operator of a GPT training step (f32 or bf16) has a CUDA kernel that takes its
// dtypes (so the GPU executor accepts it; tests/gpu runs it against the CPU where a GPU is
// visible).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/device/device.h"
#include "core/exec/executor.h"
#include "core/exec/trainer.h"
#include "core/graph/autodiff.h"
#include "core/models/cnn.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "core/ops/kernel_dtypes.h"
#include "core/ops/schema.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

using ::cohort::test::expect_error;

models::GptConfig small_gpt_config(double dropout = 0.0, DType dtype = DType::kF32, bool tie = true) {
  models::GptConfig c;
  c.dtype = dtype;
  c.tie_weights = tie;
  c.batch = 2;
  c.context = 16;
  c.vocab = 32;
  c.layers = 2;
  c.width = 64;
  c.heads = 2;
  c.dropout = dropout;
  return c;
}

// The forward and backward graph of a small GPT.
Graph small_gpt(double dropout = 0.0, DType dtype = DType::kF32, bool tie = true) {
  Graph g = models::build_gpt(small_gpt_config(dropout, dtype, tie));
  build_backward(g, g.loss(), g.parameters());
  return g;
}

TEST(Device, CudaDeviceIsRefusedWithItsReasonWhenUnavailable) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: tests/gpu covers it";
  const std::string why = device_unavailable_reason(Device::kCuda);
  EXPECT_NE(why.find(cuda_built() ? "no CUDA device visible" : "no CUDA backend"), std::string::npos) << why;
  EXPECT_EQ(device_unavailable_reason(Device::kCpu), "");
  expect_error([] { device_allocator(Device::kCuda); }, Status::kUnsupported, "the CUDA device cannot be used");
  expect_error([] { Tensor::empty({4}, DType::kF32, device_allocator(Device::kCuda)); }, Status::kUnsupported,
               why);
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {4});
  ValueId y = g.add_op("relu", "r", {x}, Attrs()).at(0);
  expect_error([&] { Executor ex(g, {y}, Device::kCuda); }, Status::kUnsupported, "cannot run on cuda: " + why);
  float a[3] = {1, 2, 3}, b[3] = {};
  expect_error([&] { device_copy(b, Device::kCuda, a, Device::kCpu, sizeof(a)); }, Status::kUnsupported,
               "the CUDA device cannot be used");
}

TEST(Device, TrainerOnCudaIsRefusedWithItsReasonWhenUnavailable) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: tests/gpu covers it";
  TrainerOptions o;
  o.device = Device::kCuda;
  expect_error([&] { Trainer t(models::build_gpt(small_gpt_config()), optim::OptimizerConfig{}, o); }, Status::kUnsupported,
               "cannot run on cuda: " + device_unavailable_reason(Device::kCuda));
}

TEST(Device, ToDeviceOnTheHostKeepsContiguousTensorsAndCopiesViews) {
  Tensor t = Tensor::empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(to_device(t, Device::kCpu).raw(), t.raw());  // already there: no copy
  const Tensor v = t.permuted({1, 0});
  const Tensor c = to_device(v, Device::kCpu);
  ASSERT_TRUE(c.is_contiguous());
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(c.data<float>()[1], 3.0f);  // element (0, 1) of the transpose = t(1, 0)
  if (cuda_device_count() == 0)
    expect_error([&] { to_device(t, Device::kCuda); }, Status::kUnsupported, "the CUDA device cannot be used");
}

TEST(Device, HostToHostCopyAndSynchronize) {
  float a[3] = {1, 2, 3}, b[3] = {};
  device_copy(b, Device::kCpu, a, Device::kCpu, sizeof(a));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[2], 3.0f);
  device_synchronize(Device::kCpu);
  EXPECT_STREQ(device_name(Device::kCuda), "cuda");
  EXPECT_EQ(device_allocator(Device::kCpu), cpu_allocator());
  if (cuda_device_count() == 0) {  // without a device the TF32 switch has nothing to set
    EXPECT_NO_THROW(set_cuda_allow_tf32(true));
    EXPECT_NO_THROW(set_cuda_allow_tf32(false));
  }
}

// The operators of g (a training graph) without a CUDA kernel that takes their nodes' dtypes
// (each with the reason), and how many have one.
std::pair<std::set<std::string>, size_t> cuda_coverage(const Graph& g) {
  std::set<std::string> missing, covered;
  for (const Node& n : g.nodes()) {
    if (n.op->alias_input0) continue;
    const int cuda = static_cast<int>(Device::kCuda);
    std::vector<DType> in, out;
    for (ValueId v : n.inputs) in.push_back(g.value(v).type.dtype);
    for (ValueId v : n.outputs) out.push_back(g.value(v).type.dtype);
    const std::string why = !n.op->kernels[cuda]            ? "no kernel"
                            : n.op->kernel_dtypes[cuda].empty() ? "no dtypes declared"
                                                                : kernel_dtype_mismatch(n.op->kernel_dtypes[cuda], in, out);
    if (why.empty()) covered.insert(n.op->name);
    else missing.insert(n.op->name + " (" + why + ")");
  }
  return {missing, covered.size()};
}

TEST(Device, EveryOperatorOfAnMlpTrainingStepHasACudaKernel) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  for (const char* act : {"relu", "tanh", "gelu"}) {
    models::MlpConfig c;
    c.hidden = {32, 16};
    c.activation = act;
    Graph g = models::build_mlp(c);
    build_backward(g, g.loss(), g.parameters());
    const auto [missing, covered] = cuda_coverage(g);
    std::string list;
    for (const std::string& m : missing) list += m + " ";
    EXPECT_TRUE(missing.empty()) << act << ": no CUDA kernel for: " << list;
    EXPECT_GE(covered, 5u);  // linear, the activation and its gradient, cross_entropy and its gradient, ...
  }
}

// In f32 and in bf16 (bf16 parameters, their gradients and activations), tied or not.
TEST(Device, EveryOperatorOfAGptTrainingStepHasACudaKernel) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  struct Variant {
    DType dtype;
    bool tie;
    double dropout;
  };
  for (const Variant& v : {Variant{DType::kF32, true, 0.0}, Variant{DType::kF32, false, 0.1},
                           Variant{DType::kBF16, true, 0.0}, Variant{DType::kBF16, false, 0.1}}) {
    SCOPED_TRACE(str_cat(dtype_name(v.dtype), v.tie ? " tied" : " untied", " dropout ", v.dropout));
    const Graph g = small_gpt(v.dropout, v.dtype, v.tie);
    const auto [missing, covered] = cuda_coverage(g);
    std::string list;
    for (const std::string& m : missing) list += m + " ";
    EXPECT_TRUE(missing.empty()) << "no CUDA kernel for: " << list;
    EXPECT_GE(covered, 12u);  // embedding, layernorm, linear, attention, ..., and their gradients
    std::set<std::string> ops;
    for (const Node& n : g.nodes()) ops.insert(n.op->name);
    EXPECT_EQ(ops.count("dropout") + ops.count("dropout_grad"), v.dropout > 0.0 ? 2u : 0u);
  }
}

TEST(Device, EveryOperatorOfACnnTrainingStepHasACudaKernel) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  models::CnnConfig c;  // two stages: the second starts with a stride-2 block and its shortcut
  c.batch = 2;
  c.height = c.width = 8;
  c.widths = {8, 16};
  c.groups = 4;
  Graph g = models::build_cnn(c);
  build_backward(g, g.loss(), g.parameters());
  const auto [missing, covered] = cuda_coverage(g);
  std::string list;
  for (const std::string& m : missing) list += m + " ";
  EXPECT_TRUE(missing.empty()) << "no CUDA kernel for: " << list;
  EXPECT_GE(covered, 10u);  // conv2d, groupnorm, relu, add, avg_pool2d, linear, ..., and their gradients
}

// The whole engine core, not only the built-in models: every registered operator, public or
// internal (gradients), runs on the GPU — except views, which need no kernel, and collectives
// (OpSchema::collective), whose CUDA slot is a declared refusal until the grid axes get device
// communicators (and the test's own host-only operator below, which this list never sees before
// it is registered).
TEST(Device, EveryRegisteredOperatorHasACudaKernel) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  std::string missing;
  size_t covered = 0;
  for (const std::string& name : OpRegistry::global().names(true)) {
    const OpSchema* op = OpRegistry::global().find(name);
    // Collectives and host-only operators (tensor parallelism runs on the host) declare their
    // CUDA slot a refusal (OpSchema::collective, host_only).
    if (op->alias_input0 || op->collective || op->host_only || name.rfind("test.", 0) == 0) continue;
    if (op->kernels[static_cast<int>(Device::kCuda)]) ++covered;
    else missing += name + " ";
  }
  EXPECT_TRUE(missing.empty()) << "no CUDA kernel for: " << missing;
  EXPECT_GE(covered, 40u);
}

// An internal test-only operator with a CPU kernel (the identity) and no CUDA kernel, registered
// once into the process registry: every built-in operator of the models has a CUDA kernel.
const char* host_only_op() {
  static const char* name = [] {
    auto& registry = const_cast<OpRegistry&>(OpRegistry::global());  // created non-const (registry.cpp)
    const char* n = "test.host_only";
    if (!registry.find(n)) {
      OpSchema s;
      s.name = n;
      s.inputs = {"x"};
      s.internal = true;
      s.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
      s.kernels[static_cast<int>(Device::kCpu)] = [](KernelContext& k) { k.outputs[0].copy_from(k.inputs[0]); };
      registry.add(s);
    }
    return n;
  }();
  return name;
}

TEST(Device, OperatorsWithoutACudaKernelAreNamedBeforeARun) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  if (cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device (the device check comes first)";
  Graph g;  // relu (which has a CUDA kernel) between two host-only nodes
  const ValueId x = g.add_input("x", DType::kF32, {4});
  const ValueId h = g.add_op(host_only_op(), "h1", {x}, Attrs()).at(0);
  const ValueId r = g.add_op("relu", "r", {h}, Attrs()).at(0);
  const ValueId y = g.add_op(host_only_op(), "h2", {r}, Attrs()).at(0);
  expect_error([&] { Executor ex(g, {y}, Device::kCuda); }, Status::kUnsupported,
               str_cat("cannot run on cuda: no cuda kernel for operator(s) ", host_only_op()));
  EXPECT_NO_THROW(Executor(g, {y}, Device::kCpu));
}

}  // namespace
}  // namespace cohort
