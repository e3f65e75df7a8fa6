// The normalisation, convolution and pooling families on the GPU against the CPU, through the
// executor (tests/gpu/op_compare.h): forward outputs and input gradients, fp32 without TF32 unless
// a test says otherwise, and bf16. Skips without a visible device.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/gpu/op_compare.h"

namespace cohort {
namespace {

using gpu_test::expect_op_matches_cpu;
using gpu_test::OpCompare;
using gpu_test::random_tensor;


// bf16 storage, fp32 math on both devices: each rounds its fp32 result once, and results a hair
// apart in fp32 may round to neighbouring bf16 values, one ulp = 2^-8 of the value. 1e-2 of the
// largest magnitude allows that and still catches a wrong element (off by O(1)).
constexpr double kBf16Tol = 1e-2;

// A host f32 tensor of values drawn from {-1, 0, 0.5, 1}: pooling windows hold ties of their
// maximum, so the tie rule (the first maximum in row-major window order) decides the gradient.
Tensor tied_tensor(const Shape& shape, uint32_t seed) {
  static const float kValues[] = {-1.0f, 0.0f, 0.5f, 1.0f};
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = kValues[pick(rng)];
  return t;
}

Tensor constant_tensor(const Shape& shape, float value) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value;
  return t;
}

Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  out.copy_from(t);
  return out;
}

// expect_op_matches_cpu for an operator whose outputs mix dtypes (a bf16 result beside its fp32
// statistics, which op_compare's one summed loss cannot add up): the loss weighs output 0 alone;
// every output and every input's gradient is compared as there. All inputs must be float.
void expect_mixed_op_matches_cpu(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                 const OpCompare& c) {
  Graph g;
  std::unordered_map<ValueId, Tensor> env;
  std::vector<ValueId> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(g.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
    env[ins.back()] = inputs[i];
  }
  const std::vector<ValueId> outs = g.add_op(op, "op", ins, attrs);
  const TensorType& t = g.value(outs[0]).type;
  const ValueId w = g.add_input("w", t.dtype, t.shape);
  env[w] = random_tensor(t.shape, 100, -1.0f, 1.0f, t.dtype);
  const ValueId prod = g.add_op("mul", "", {outs[0], w}, Attrs()).at(0);
  g.set_loss(g.add_op("sum", "", {prod}, Attrs()).at(0));
  const std::vector<ValueId> grads = build_backward(g, g.loss(), ins);
  const auto cpu = gpu_test::detail::run_op_graph(g, outs, grads, env, Device::kCpu, c);
  const auto gpu = gpu_test::detail::run_op_graph(g, outs, grads, env, Device::kCuda, c);
  for (size_t k = 0; k < outs.size(); ++k)
    gpu_test::detail::expect_close(cpu.outputs[k], gpu.outputs[k], c.tol, c.expect_nonzero,
                                   op + " output " + std::to_string(k));
  for (size_t k = 0; k < grads.size(); ++k)
    gpu_test::detail::expect_close(cpu.grads[k], gpu.grads[k], c.tol, c.expect_nonzero,
                                   op + " gradient of input " + std::to_string(k));
}

struct ConvCase {
  const char* what;
  Shape x, w;
  bool bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

// Every attribute conv2d has (groups, stride, padding, dilation), odd channel counts, batches > 1.
const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"3x3, padding 1, bias, odd channels", {2, 3, 7, 6}, {5, 3, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1},
      {"stride 2, no bias", {3, 5, 9, 8}, {3, 5, 3, 3}, false, {2, 2}, {1, 1}, {1, 1}, 1},
      {"non-square kernel, stride (2, 1), padding (1, 0)", {2, 3, 8, 9}, {7, 3, 3, 2}, true, {2, 1}, {1, 0}, {1, 1}, 1},
      {"groups 2, dilation 2", {2, 4, 9, 7}, {6, 2, 3, 3}, true, {1, 1}, {2, 2}, {2, 2}, 2},
      {"depthwise: groups = channels > batch", {1, 6, 5, 5}, {6, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 6},
      {"1x1, stride 2 (a shortcut)", {4, 3, 6, 6}, {5, 3, 1, 1}, false, {2, 2}, {0, 0}, {1, 1}, 1},
      {"padding wider than the image", {2, 3, 2, 2}, {2, 3, 3, 3}, true, {1, 1}, {2, 2}, {1, 1}, 1},
  };
  return cases;
}

void expect_conv_matches_cpu(const ConvCase& k, DType dtype, const OpCompare& c) {
  SCOPED_TRACE(k.what);
  Attrs a;
  a.set("stride", k.stride);
  a.set("padding", k.padding);
  a.set("dilation", k.dilation);
  a.set("groups", k.groups);
  std::vector<Tensor> in = {random_tensor(k.x, 21, -1.0f, 1.0f, dtype), random_tensor(k.w, 22, -1.0f, 1.0f, dtype)};
  if (k.bias) in.push_back(random_tensor({k.w[0]}, 23, -1.0f, 1.0f, dtype));
  expect_op_matches_cpu("conv2d", in, a, c);
}

struct PoolCase {
  const char* what;
  Shape x;
  std::vector<int64_t> kernel, stride, padding;  // stride empty: the default (= kernel)
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {"2x2, default stride, odd size (a partial window dropped)", {2, 3, 7, 6}, {2, 2}, {}, {0, 0}},
      {"3x3, stride 2, padding 1 (overlapping windows)", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}},
      {"3x2, stride (1, 2), padding (1, 1)", {1, 2, 9, 5}, {3, 2}, {1, 2}, {1, 1}},
      {"3x3, stride 1, padding (1, 0)", {2, 1, 5, 5}, {3, 3}, {1, 1}, {1, 0}},
      {"global (kernel = image)", {3, 4, 4, 5}, {4, 5}, {}, {0, 0}},
  };
  return cases;
}

Attrs pool_attrs(const PoolCase& p) {
  Attrs a;
  a.set("kernel", p.kernel);
  if (!p.stride.empty()) a.set("stride", p.stride);
  a.set("padding", p.padding);
  return a;
}

TEST(GpuOps, LayernormMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  Attrs a;
  a.set("eps", 1e-5);
  OpCompare c;
  c.tol = 2e-5;
  // Rows of an odd width, so no vector path covers the whole row.
  expect_op_matches_cpu("layernorm", {random_tensor({6, 37}, 1), random_tensor({37}, 2, 0.5f, 1.5f),
                                      random_tensor({37}, 3)}, a, c);
}

// fp32 products without TF32 (the default), so the GPU's sums differ from oneDNN's only in their
// order: ~1e-6 of the largest magnitude at these sizes (sums of at most a few hundred terms).
// 2e-5 leaves room for that and still catches a wrong tap or a misplaced group (errors of O(1)).
TEST(GpuOps, Conv2dMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  OpCompare c;
  c.tol = 2e-5;
  for (const ConvCase& k : conv_cases()) expect_conv_matches_cpu(k, DType::kF32, c);
}

TEST(GpuOps, Conv2dInBf16MatchesTheCpu) {
  COHORT_NEEDS_GPU();
  OpCompare c;
  c.tol = kBf16Tol;
  for (const ConvCase& k : conv_cases()) expect_conv_matches_cpu(k, DType::kBF16, c);
}

// The pooling kernels do the CPU's float operations in the CPU's order (window sums row-major,
// gradient contributions in output order), so results agree to the last bit in fp32 and bf16
// alike; 1e-6 only keeps the check from hinging on that. Each case runs on random inputs, on
// inputs full of ties and on a constant input (every window one tie).
TEST(GpuOps, PoolingMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  OpCompare c;
  c.tol = 1e-6;
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    SCOPED_TRACE(op);
    for (const PoolCase& p : pool_cases()) {
      SCOPED_TRACE(p.what);
      const Attrs a = pool_attrs(p);
      expect_op_matches_cpu(op, {random_tensor(p.x, 31)}, a, c);
      {
        SCOPED_TRACE("ties");
        expect_op_matches_cpu(op, {tied_tensor(p.x, 32)}, a, c);
      }
      {
        SCOPED_TRACE("constant");
        expect_op_matches_cpu(op, {constant_tensor(p.x, 0.5f)}, a, c);
      }
      {
        SCOPED_TRACE("bf16 ties");
        expect_op_matches_cpu(op, {as_dtype(tied_tensor(p.x, 33), DType::kBF16)}, a, c);
      }
    }
  }
}

// Statistics over a few hundred elements, summed in another order than on the CPU: as layernorm,
// 2e-5 of the largest magnitude. x is offset from 0 so the saved means (also compared) are not
// tiny next to their rounding. bf16 goes through expect_mixed_op_matches_cpu (fp32 statistics).
TEST(GpuOps, GroupnormMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  struct Case {
    Shape x;
    int64_t groups;
  };
  const Case cases[] = {{{2, 6, 5, 3}, 3}, {{3, 5, 7, 1}, 5}, {{1, 4, 9, 9}, 1}, {{2, 9, 3, 5}, 3}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    OpCompare c;
    c.tol = dtype == DType::kF32 ? 2e-5 : kBf16Tol;
    for (const Case& k : cases) {
      SCOPED_TRACE(shape_str(k.x) + " groups " + std::to_string(k.groups) + " " + dtype_name(dtype));
      Attrs a;
      a.set("groups", k.groups);
      a.set("eps", 1e-5);
      const int64_t C = k.x[1];
      const std::vector<Tensor> in = {random_tensor(k.x, 41, -1.0f, 2.0f, dtype),
                                      random_tensor({C}, 42, 0.5f, 1.5f, dtype),
                                      random_tensor({C}, 43, -1.0f, 1.0f, dtype)};
      if (dtype == DType::kF32) expect_op_matches_cpu("groupnorm", in, a, c);
      else expect_mixed_op_matches_cpu("groupnorm", in, a, c);
    }
  }
}

// As layernorm: 2e-5 of the largest magnitude in fp32. Odd widths (no vector path covers a row),
// a width below a warp, and rank 3; bf16 as groupnorm's.
TEST(GpuOps, RmsnormMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  const Shape shapes[] = {{6, 37}, {5, 3}, {2, 3, 33}, {3, 130}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    OpCompare c;
    c.tol = dtype == DType::kF32 ? 2e-5 : kBf16Tol;
    for (const Shape& s : shapes) {
      SCOPED_TRACE(shape_str(s) + " " + dtype_name(dtype));
      Attrs a;
      a.set("eps", 1e-6);
      const std::vector<Tensor> in = {random_tensor(s, 51, -1.0f, 2.0f, dtype),
                                      random_tensor({s.back()}, 52, 0.5f, 1.5f, dtype)};
      if (dtype == DType::kF32) expect_op_matches_cpu("rmsnorm", in, a, c);
      else expect_mixed_op_matches_cpu("rmsnorm", in, a, c);
    }
  }
}

// z = rmsnorm(x) + x: autodiff hands rmsnorm_grad the gradient x already has from the add
// (dx_add), which the kernel adds while writing dx. Compared like the one-operator tests.
TEST(GpuOps, RmsnormInAResidualBlockAddsTheSummedGradient) {
  COHORT_NEEDS_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape s = {5, 37};
    Graph g;
    const ValueId x = g.add_input("x", dtype, s), gamma = g.add_input("gamma", dtype, {s.back()});
    const ValueId w = g.add_input("w", dtype, s);
    Attrs a;
    a.set("eps", 1e-6);
    const ValueId h = g.add_op("rmsnorm", "norm", {x, gamma}, a).at(0);
    const ValueId z = g.add_op("add", "residual", {h, x}, Attrs()).at(0);
    const ValueId prod = g.add_op("mul", "", {z, w}, Attrs()).at(0);
    g.set_loss(g.add_op("sum", "", {prod}, Attrs()).at(0));
    const std::vector<ValueId> grads = build_backward(g, g.loss(), {x, gamma});
    bool fused = false;
    for (const Node& n : g.nodes()) fused = fused || (n.op->name == "rmsnorm_grad" && n.inputs.size() == 5);
    EXPECT_TRUE(fused) << "rmsnorm_grad was not given dx_add";
    const std::unordered_map<ValueId, Tensor> env = {{x, random_tensor(s, 61, -1.0f, 2.0f, dtype)},
                                                     {gamma, random_tensor({s.back()}, 62, 0.5f, 1.5f, dtype)},
                                                     {w, random_tensor(s, 63, -1.0f, 1.0f, dtype)}};
    OpCompare c;
    c.tol = dtype == DType::kF32 ? 2e-5 : kBf16Tol;
    const auto cpu = gpu_test::detail::run_op_graph(g, {z}, grads, env, Device::kCpu, c);
    const auto gpu = gpu_test::detail::run_op_graph(g, {z}, grads, env, Device::kCuda, c);
    gpu_test::detail::expect_close(cpu.outputs[0], gpu.outputs[0], c.tol, true, "z");
    gpu_test::detail::expect_close(cpu.grads[0], gpu.grads[0], c.tol, true, "dx");
    gpu_test::detail::expect_close(cpu.grads[1], gpu.grads[1], c.tol, true, "dgamma");
  }
}

}  // namespace
}  // namespace cohort
