// Runs every OpCase: forward vs reference, gradients vs finite differences, bf16 forward; the same
// on the CUDA device where one is visible (and bf16 gradients against the CPU's); and, without a
// device, the CUDA kernels' declared dtypes against every case's graph.
#include "tests/unit/core/ops/op_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <unordered_map>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "core/ops/kernel_dtypes.h"

namespace cohort::test {

int64_t numel(const Shape& s) { return shape_numel(s); }

std::vector<OpCase> all_cases() {
  std::vector<OpCase> c;
  add_elementwise_cases(c);
  add_matmul_cases(c);
  add_norm_cases(c);
  add_softmax_cases(c);
  add_attention_cases(c);
  add_embedding_cases(c);
  add_conv_cases(c);
  add_shape_cases(c);
  add_dropout_cases(c);
  return c;
}

namespace {

struct Built {
  Graph graph;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::vector<ValueId> grads;
  ValueId loss = -1;
};

std::vector<DVec> make_inputs(const OpCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<DVec> in;
  for (const auto& spec : c.inputs) {
    DVec v(static_cast<size_t>(numel(spec.shape)));
    for (auto& x : v) {
      if (spec.dtype == DType::kI32) {
        std::uniform_int_distribution<int> d(static_cast<int>(spec.low), static_cast<int>(spec.high) - 1);
        x = d(rng);
      } else {
        std::uniform_real_distribution<float> d(static_cast<float>(spec.low), static_cast<float>(spec.high));
        x = d(rng);
      }
    }
    in.push_back(v);
  }
  return in;
}

DVec round_bf16(const DVec& v) {
  DVec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(v[i])));
  return r;
}

// Graph: inputs -> op -> loss = sum_k sum(out_k * w_k); weights w_k are graph inputs too.
Built build(const OpCase& c, DType float_dtype, bool with_backward) {
  Built b;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    DType t = c.inputs[i].dtype == DType::kI32 ? DType::kI32 : float_dtype;
    b.inputs.push_back(b.graph.add_input(str_cat("in", i), t, c.inputs[i].shape));
  }
  b.outputs = b.graph.add_op(c.op, "op", b.inputs, c.attrs);
  if (!with_backward) return b;
  ValueId total = -1;
  for (int k : c.checked_outputs) {
    ValueId out = b.outputs[static_cast<size_t>(k)];
    ValueId w = b.graph.add_input(str_cat("w", k), float_dtype, b.graph.value(out).type.shape);
    ValueId prod = b.graph.add_op("mul", str_cat("wmul", k), {out, w}, Attrs())[0];
    ValueId s = b.graph.add_op("sum", str_cat("wsum", k), {prod}, Attrs())[0];
    total = total < 0 ? s : b.graph.add_op("add", str_cat("wadd", k), {total, s}, Attrs())[0];
  }
  b.loss = total;
  b.graph.set_loss(total);
  std::vector<ValueId> wrt;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].dtype != DType::kI32) wrt.push_back(b.inputs[i]);
  b.grads = build_backward(b.graph, total, wrt);
  return b;
}

Tensor to_tensor(const DVec& v, const Shape& shape, DType dtype) {
  Tensor f = Tensor::empty(shape, dtype == DType::kI32 ? DType::kI32 : DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kI32) f.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else f.data<float>()[i] = static_cast<float>(v[i]);
  }
  if (dtype != DType::kBF16) return f;
  Tensor h = Tensor::empty(shape, DType::kBF16);
  h.copy_from(f);
  return h;
}

DVec to_dvec(const Tensor& t) {
  Tensor f = t;
  if (t.dtype() == DType::kBF16) {
    f = Tensor::empty(t.shape(), DType::kF32);
    f.copy_from(t);
  }
  DVec v(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f.data<float>()[i];
  return v;
}

double weighted_loss(const OpCase& c, const std::vector<DVec>& in, const std::vector<Shape>& shapes,
                     const std::vector<DVec>& w) {
  std::vector<DVec> out = c.reference(in, shapes, c.attrs);
  double l = 0;
  for (size_t k = 0; k < c.checked_outputs.size(); ++k) {
    const DVec& o = out[static_cast<size_t>(c.checked_outputs[k])];
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * w[k][i];
  }
  return l;
}

void expect_close(const DVec& got, const DVec& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]) && std::isfinite(got[i])) continue;
    ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", reference " << want[i];
    ++bad;
  }
}

// Binds `env` (host tensors) on `device`, runs `targets` there and brings them back to the host.
void run_on(const Graph& g, const std::vector<ValueId>& targets, std::unordered_map<ValueId, Tensor>& env,
            const RunOptions& ro, Device device) {
  Executor ex(g, targets, device);
  if (device == Device::kCpu) {
    ex.run(env, ro);
    return;
  }
  std::unordered_map<ValueId, Tensor> on_device;
  for (const auto& [id, t] : env) on_device[id] = to_device(t, device);
  ex.run(on_device, ro);
  for (ValueId v : targets) env[v] = to_device(on_device.at(v), Device::kCpu);
}

void run_case(const OpCase& c, uint32_t seed, Device device = Device::kCpu) {
  SCOPED_TRACE(str_cat(c.op, " ", c.label, " seed ", seed, " on ", device_name(device)));
  std::vector<DVec> in = make_inputs(c, seed);
  std::vector<Shape> shapes;
  for (const auto& s : c.inputs) shapes.push_back(s.shape);
  std::vector<DVec> ref = c.reference(in, shapes, c.attrs);

  Built b = build(c, DType::kF32, c.check_grad);
  std::mt19937 rng(seed * 7 + 1);
  std::uniform_real_distribution<double> wd(-1.0, 1.0);
  std::vector<DVec> w;
  std::unordered_map<ValueId, Tensor> env;
  for (size_t i = 0; i < in.size(); ++i) env[b.inputs[i]] = to_tensor(in[i], shapes[i], c.inputs[i].dtype);
  std::vector<ValueId> targets = b.outputs;
  if (c.check_grad) {
    for (int k : c.checked_outputs) {
      ValueId wv = b.graph.find(str_cat("w", k));
      DVec wk(static_cast<size_t>(shape_numel(b.graph.value(wv).type.shape)));
      for (auto& x : wk) x = static_cast<float>(wd(rng));
      env[wv] = to_tensor(wk, b.graph.value(wv).type.shape, DType::kF32);
      w.push_back(wk);
    }
    for (ValueId g : b.grads) if (g >= 0) targets.push_back(g);
  }
  RunOptions ro;
  ro.seed = seed;
  ro.training = c.training;
  run_on(b.graph, targets, env, ro, device);
  for (int k : c.checked_outputs)
    expect_close(to_dvec(env.at(b.outputs[static_cast<size_t>(k)])), ref[static_cast<size_t>(k)], c.fwd_rtol,
                 c.fwd_atol, str_cat("forward output ", k));
  if (!c.check_grad) return;
  size_t gi = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (c.inputs[i].dtype == DType::kI32) continue;
    ValueId g = b.grads[gi++];
    DVec got = g >= 0 ? to_dvec(env.at(g)) : DVec(in[i].size(), 0.0);
    std::vector<size_t> picks(in[i].size());
    for (size_t j = 0; j < picks.size(); ++j) picks[j] = j;
    std::shuffle(picks.begin(), picks.end(), rng);
    if (picks.size() > static_cast<size_t>(c.max_grad_elements)) picks.resize(static_cast<size_t>(c.max_grad_elements));
    DVec g_got, g_fd;
    for (size_t j : picks) {
      std::vector<DVec> xp = in, xm = in;
      double eps = 1e-4 * std::max(1.0, std::fabs(in[i][j]));
      xp[i][j] += eps;
      xm[i][j] -= eps;
      g_fd.push_back((weighted_loss(c, xp, shapes, w) - weighted_loss(c, xm, shapes, w)) / (2 * eps));
      g_got.push_back(got[j]);
    }
    expect_close(g_got, g_fd, c.grad_rtol, c.grad_atol, str_cat("gradient of input ", i));
  }
}

void run_bf16_case(const OpCase& c, uint32_t seed) {
  SCOPED_TRACE(str_cat(c.op, " ", c.label, " bf16 seed ", seed));
  std::vector<DVec> in = make_inputs(c, seed);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < in.size(); ++i) {
    shapes.push_back(c.inputs[i].shape);
    if (c.inputs[i].dtype != DType::kI32) in[i] = round_bf16(in[i]);
  }
  std::vector<DVec> ref = c.reference(in, shapes, c.attrs);
  Built b = build(c, DType::kBF16, false);
  std::unordered_map<ValueId, Tensor> env;
  for (size_t i = 0; i < in.size(); ++i)
    env[b.inputs[i]] = to_tensor(in[i], shapes[i], c.inputs[i].dtype == DType::kI32 ? DType::kI32 : DType::kBF16);
  Executor ex(b.graph, b.outputs);
  RunOptions ro;
  ro.seed = seed;
  ro.training = c.training;
  ex.run(env, ro);
  for (int k : c.checked_outputs) {
    DVec r = ref[static_cast<size_t>(k)];
    double scale = 0;
    for (double x : r) scale = std::max(scale, std::fabs(x));
    expect_close(to_dvec(env.at(b.outputs[static_cast<size_t>(k)])), r, 2e-2, 2e-2 * std::max(1.0, scale),
                 str_cat("bf16 forward output ", k));
  }
}

// |got - want| <= tol * max |want| over the tensor; on failure the worst element, both values
// and the bound.
void expect_close_to_largest(const DVec& got, const DVec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0, worst = -1.0;
  size_t at = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::isfinite(got[i]) ? std::fabs(got[i] - want[i]) : INFINITY;
    if (d > worst) worst = d, at = i;
  }
  if (got.empty()) return;
  EXPECT_LE(worst, tol * scale) << what << ": worst element " << at << " got " << got[at] << ", CPU " << want[at]
                                << ", bound " << tol << " x largest CPU magnitude " << scale;
}

// bf16 on the GPU: the forward against the reference as run_bf16_case checks the CPU's, and the
// gradient of every float input against the CPU's bf16 gradient of the same graph. Both devices
// compute each node in fp32 from the same bf16 values and round its outputs once (the GPU's
// linear and gelu_linear twice: product, then bias); fp32 results a hair apart may round to
// neighbouring bf16 values, one ulp = 2^-8 of a value, and a harness graph chains at most four
// rounded nodes between an input and its gradient: 2e-2 of the largest magnitude bounds that.
void run_bf16_cuda_case(const OpCase& c, uint32_t seed) {
  SCOPED_TRACE(str_cat(c.op, " ", c.label, " bf16 seed ", seed, " on cuda"));
  std::vector<DVec> in = make_inputs(c, seed);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < in.size(); ++i) {
    shapes.push_back(c.inputs[i].shape);
    if (c.inputs[i].dtype != DType::kI32) in[i] = round_bf16(in[i]);
  }
  std::vector<DVec> ref = c.reference(in, shapes, c.attrs);
  Built b = build(c, DType::kBF16, c.check_grad);
  std::unordered_map<ValueId, Tensor> env;
  for (size_t i = 0; i < in.size(); ++i)
    env[b.inputs[i]] = to_tensor(in[i], shapes[i], c.inputs[i].dtype == DType::kI32 ? DType::kI32 : DType::kBF16);
  std::vector<ValueId> targets = b.outputs;
  if (c.check_grad) {
    std::mt19937 rng(seed * 7 + 1);
    std::uniform_real_distribution<double> wd(-1.0, 1.0);
    for (int k : c.checked_outputs) {
      const ValueId wv = b.graph.find(str_cat("w", k));
      DVec wk(static_cast<size_t>(shape_numel(b.graph.value(wv).type.shape)));
      for (auto& x : wk) x = wd(rng);
      env[wv] = to_tensor(wk, b.graph.value(wv).type.shape, DType::kBF16);
    }
    for (ValueId g : b.grads)
      if (g >= 0) targets.push_back(g);
  }
  RunOptions ro;
  ro.seed = seed;
  ro.training = c.training;
  std::unordered_map<ValueId, Tensor> on_cpu = env, on_gpu = env;
  run_on(b.graph, targets, on_gpu, ro, Device::kCuda);
  for (int k : c.checked_outputs) {
    const DVec& r = ref[static_cast<size_t>(k)];
    double scale = 0;
    for (double x : r) scale = std::max(scale, std::fabs(x));
    expect_close(to_dvec(on_gpu.at(b.outputs[static_cast<size_t>(k)])), r, 2e-2, 2e-2 * std::max(1.0, scale),
                 str_cat("bf16 forward output ", k, " on cuda"));
  }
  if (!c.check_grad) return;
  run_on(b.graph, targets, on_cpu, ro, Device::kCpu);
  for (size_t i = 0, gi = 0; i < in.size(); ++i) {
    if (c.inputs[i].dtype == DType::kI32) continue;
    const ValueId g = b.grads[gi++];
    if (g < 0) continue;
    expect_close_to_largest(to_dvec(on_gpu.at(g)), to_dvec(on_cpu.at(g)), 2e-2,
                            str_cat("bf16 gradient of input ", i, " on cuda vs cpu"));
  }
}

// A NaN placed in a float input shows in every checked output exactly where the reference puts it
// (PyTorch's semantics: relu, max pooling, max-reductions keep NaN): no kernel hides a NaN, which
// would let a training step report a finite loss while its gradients are NaN (issue #25).
void run_nan_case(const OpCase& c, uint32_t seed) {
  const std::vector<DVec> clean = make_inputs(c, seed);
  std::vector<Shape> shapes;
  for (const auto& s : c.inputs) shapes.push_back(s.shape);
  for (size_t i = 0; i < clean.size(); ++i) {
    if (c.inputs[i].dtype == DType::kI32) continue;
    for (size_t pos : {size_t{0}, clean[i].size() / 2, clean[i].size() - 1}) {
      SCOPED_TRACE(str_cat(c.op, " ", c.label, " seed ", seed, ": NaN at element ", pos, " of input ", i));
      std::vector<DVec> in = clean;
      in[i][pos] = std::numeric_limits<double>::quiet_NaN();
      const std::vector<DVec> ref = c.reference(in, shapes, c.attrs);
      Built b = build(c, DType::kF32, false);
      std::unordered_map<ValueId, Tensor> env;
      for (size_t j = 0; j < in.size(); ++j) env[b.inputs[j]] = to_tensor(in[j], shapes[j], c.inputs[j].dtype);
      Executor ex(b.graph, b.outputs);
      RunOptions ro;
      ro.seed = seed;
      ro.training = c.training;
      ex.run(env, ro);
      for (int k : c.checked_outputs) {
        const DVec got = to_dvec(env.at(b.outputs[static_cast<size_t>(k)]));
        const DVec& want = ref[static_cast<size_t>(k)];
        ASSERT_EQ(got.size(), want.size());
        int bad = 0;
        for (size_t e = 0; e < got.size() && bad < 5; ++e) {
          if (std::isnan(got[e]) == std::isnan(want[e]) || (c.nan_may_spread && std::isnan(got[e]))) continue;
          ADD_FAILURE() << "output " << k << " element " << e << ": got " << got[e] << ", reference " << want[e];
          ++bad;
        }
      }
    }
  }
}

class OpHarness : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpHarness, NanPropagatesAsInTheReference) { run_nan_case(GetParam(), 5); }

TEST_P(OpHarness, ForwardAndGradient) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    run_case(GetParam(), seed);
    if (HasFatalFailure()) return;
  }
}

TEST_P(OpHarness, Bf16Forward) {
  if (!GetParam().check_bf16) GTEST_SKIP() << "bf16 not checked for this case";
  run_bf16_case(GetParam(), 11);
}

// The same checks on the CUDA device (fp32 products without TF32): the forward against the
// double reference and the gradients against finite differences with the case's tolerances, as
// on the CPU; in bf16 as run_bf16_cuda_case says. Skips without a visible device.
// A case the CUDA kernel is declared to refuse must be refused (kUnsupported), not run.
TEST_P(OpHarness, CudaMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda);
  set_cuda_allow_tf32(false);
  if (!GetParam().cuda_refuses.empty()) {
    std::string refused;
    try {
      run_case(GetParam(), 1, Device::kCuda);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kUnsupported) << e.what();
      refused = e.what();
    }
    ASSERT_FALSE(refused.empty()) << "declared refused on cuda (" << GetParam().cuda_refuses << ") but it ran";
    GTEST_SKIP() << "refused on cuda as declared: " << refused;
  }
  run_case(GetParam(), 1, Device::kCuda);
  if (HasFatalFailure() || !GetParam().check_bf16) return;
  run_bf16_cuda_case(GetParam(), 11);
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string n = str_cat(info.param.op, "_", info.param.label, "_", info.index);
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(All, OpHarness, ::testing::ValuesIn(all_cases()), case_name);

// Without a device: the dtypes every CUDA kernel declares (core/ops/kernel_dtypes.h, checked by
// the kernel's guard at every call) against every node of every case's graph, forward and
// backward, in f32 and in bf16 — so each operator the CPU runs in a dtype, gradients included,
// has a CUDA kernel that takes that dtype. (That the kernel also computes the CPU's values is
// CudaMatchesTheCpu's part, on a GPU.)
TEST(OpHarnessCompleteness, EveryCudaKernelTakesTheDtypesOfEveryCase) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  std::set<std::string> reported, reached;
  for (const OpCase& c : all_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Built b = build(c, dtype, c.check_grad);
      for (const Node& n : b.graph.nodes()) {
        const OpSchema& op = *n.op;
        if (op.alias_input0) continue;
        reached.insert(op.name);
        std::vector<DType> in, out;
        for (ValueId v : n.inputs) in.push_back(b.graph.value(v).type.dtype);
        for (ValueId v : n.outputs) out.push_back(b.graph.value(v).type.dtype);
        const std::string& signature = op.kernel_dtypes[static_cast<int>(Device::kCuda)];
        const std::string why = signature.empty() ? std::string("no CUDA kernel dtypes declared")
                                                  : kernel_dtype_mismatch(signature, in, out);
        if (why.empty() || !reported.insert(str_cat(op.name, why)).second) continue;
        ADD_FAILURE() << op.name << " (in case " << c.op << " " << c.label << ", " << dtype_name(dtype)
                      << ") on cuda: " << why << " (signature '" << signature << "')";
      }
    }
  }
  // Every operator, internal ones included, is reached by some case's graph (so the check above
  // saw it) and declares its CUDA kernel's dtypes. Collectives run between ranks, so no
  // single-process case reaches them: collective_test.cpp checks them at 2 and 4 ranks, and
  // their CUDA slot is a declared refusal (OpSchema::collective), as is the host-only operators'
  // (OpSchema::host_only: collective_test.cpp and vocab_parallel_test.cpp check those).
  for (const std::string& name : OpRegistry::global().names(true)) {
    const OpSchema* op = OpRegistry::global().find(name);
    if (op->alias_input0 || op->collective || op->host_only || name.rfind("test.", 0) == 0) continue;
    EXPECT_TRUE(reached.count(name)) << "no case's graph reaches operator '" << name << "'";
    EXPECT_FALSE(op->kernel_dtypes[static_cast<int>(Device::kCuda)].empty())
        << "operator '" << name << "' declares no CUDA kernel dtypes";
  }
}

TEST(OpHarnessCompleteness, EveryPublicOperatorHasCases) {
  std::set<std::string> covered;
  for (const auto& c : all_cases()) covered.insert(c.op);
  for (const auto& name : OpRegistry::global().names(false))
    EXPECT_TRUE(covered.count(name)) << "operator '" << name << "' has no harness cases";
}

}  // namespace
}  // namespace cohort::test
