// The element-wise, reduction, shape and dropout operators on the GPU against the CPU, through
// the executor (tests/gpu/op_compare.h): forward outputs and input gradients. Skips without a
// visible device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "core/base/error.h"
#include "tests/gpu/op_compare.h"

namespace cohort {
namespace {

using gpu_test::expect_op_matches_cpu;
using gpu_test::OpCompare;
using gpu_test::random_tensor;


TEST(GpuOps, SoftmaxAndLogSoftmaxMatchTheCpuAlongEveryAxis) {
  COHORT_NEEDS_GPU();
  for (const char* op : {"softmax", "log_softmax"})
    for (const int64_t axis : {-1, 1, 0}) {  // rows (one block each), then columns inner apart
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      Attrs a;
      a.set("axis", axis);
      OpCompare c;
      c.tol = 2e-5;
      expect_op_matches_cpu(op, {random_tensor({3, 7, 37}, 21, -4.0f, 4.0f)}, a, c);
    }
}

TEST(GpuOps, ActivationsMatchTheCpu) {
  COHORT_NEEDS_GPU();
  for (const char* op : {"relu", "tanh", "gelu"}) {
    SCOPED_TRACE(op);
    expect_op_matches_cpu(op, {random_tensor({5, 33}, 4, -3.0f, 3.0f)}, Attrs(), OpCompare());
  }
}

// NaN goes through every operator that could hide it (ReLU, max pooling, dropout's dropped
// elements, the max-reductions of softmax and cross entropy) on the GPU exactly where it goes on
// the CPU, which keeps it as PyTorch does (issue #25).
TEST(GpuOps, NanReachesTheSameOutputsAsOnTheCpu) {
  COHORT_NEEDS_GPU();
  struct Case {
    const char* op;
    Shape shape;
    Attrs attrs;
  };
  Attrs pool, drop, none;
  pool.set("kernel", std::vector<int64_t>{2, 2});
  pool.set("stride", std::vector<int64_t>{2, 2});
  drop.set("p", 0.5);
  const Case cases[] = {{"relu", {4, 33}, none},          {"gelu", {4, 33}, none},
                        {"tanh", {4, 33}, none},          {"max_pool2d", {2, 3, 6, 6}, pool},
                        {"dropout", {4, 33}, drop},       {"softmax", {4, 33}, none}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.op);
    Tensor x = random_tensor(k.shape, 9, -2.0f, 2.0f);
    for (int64_t i = 0; i < x.numel(); i += 7) x.data<float>()[i] = std::nanf("");
    Graph g;
    const ValueId in = g.add_input("x", DType::kF32, k.shape);
    const ValueId out = g.add_op(k.op, "op", {in}, k.attrs).at(0);
    OpCompare c;
    const auto cpu = gpu_test::detail::run_op_graph(g, {out}, {}, {{in, x}}, Device::kCpu, c);
    const auto gpu = gpu_test::detail::run_op_graph(g, {out}, {}, {{in, x}}, Device::kCuda, c);
    const Tensor &a = cpu.outputs[0], &b = gpu.outputs[0];
    int64_t nans = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      nans += std::isnan(a.data<float>()[i]);
      ASSERT_EQ(std::isnan(a.data<float>()[i]), std::isnan(b.data<float>()[i])) << "element " << i;
    }
    EXPECT_GT(nans, 0) << "the CPU kept no NaN";
  }
}

TEST(GpuOps, AddAndMulWithABiasOperandMatchTheCpu) {
  COHORT_NEEDS_GPU();
  for (const char* op : {"add", "mul"}) {
    SCOPED_TRACE(op);
    expect_op_matches_cpu(op, {random_tensor({4, 3, 10}, 5), random_tensor({10}, 6)}, Attrs());
    expect_op_matches_cpu(op, {random_tensor({4, 3, 10}, 7), random_tensor({4, 3, 10}, 8)}, Attrs());
  }
}

Attrs attrs_of(std::initializer_list<std::pair<const char*, AttrValue>> list) {
  Attrs a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

OpCompare with_tol(double tol) {
  OpCompare c;
  c.tol = tol;
  return c;
}

// bf16 stores 8 bits of mantissa: one rounding step is 2^-8 of a value, and sums rounded after
// adding in another order may land one step apart.
constexpr double kBf16Tol = 1e-2;

TEST(GpuOps, AddSubMulBroadcastLikeTheCpu) {
  COHORT_NEEDS_GPU();
  // Same shapes, a bias on either side (sub is not symmetric), scalars, and general patterns
  // that take the strided kernel (and sum_to's general reductions in the gradients).
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 3, 10}, {4, 3, 10}}, {{4, 8, 16}, {16}},      {{16}, {4, 8, 16}},     {{7, 13}, {13}},
      {{13}, {7, 13}},          {{}, {5, 7}},            {{5, 7}, {}},           {{}, {}},
      {{4, 1, 5}, {3, 1}},      {{3, 1}, {1, 4}},        {{2, 3, 4}, {2, 1, 4}}, {{2, 1, 4, 1}, {1, 3, 1, 5}},
      {{1}, {6, 1}},            {{6, 5, 1}, {6, 1, 33}}, {{1, 1, 7}, {3, 7}}};
  for (const char* op : {"add", "sub", "mul"}) {
    for (const auto& [sa, sb] : cases) {
      SCOPED_TRACE(str_cat(op, " ", shape_str(sa), " ", shape_str(sb)));
      expect_op_matches_cpu(op, {random_tensor(sa, 21), random_tensor(sb, 22)}, Attrs());
    }
    for (const auto& [sa, sb] : {std::pair<Shape, Shape>{{4, 8, 16}, {16}}, {{3}, {5, 3}}, {{4, 1, 5}, {3, 1}}}) {
      SCOPED_TRACE(str_cat(op, " bf16 ", shape_str(sa), " ", shape_str(sb)));
      expect_op_matches_cpu(
          op, {random_tensor(sa, 23, -1, 1, DType::kBF16), random_tensor(sb, 24, -1, 1, DType::kBF16)}, Attrs(),
          with_tol(kBf16Tol));
    }
  }
}

TEST(GpuOps, ScaleMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  for (const double factor : {2.5, -1.0, 1e-3}) {
    SCOPED_TRACE(factor);
    expect_op_matches_cpu("scale", {random_tensor({5, 33}, 31)}, attrs_of({{"factor", factor}}));
    expect_op_matches_cpu("scale", {random_tensor({}, 32)}, attrs_of({{"factor", factor}}));
    expect_op_matches_cpu("scale", {random_tensor({9, 7}, 33, -1, 1, DType::kBF16)}, attrs_of({{"factor", factor}}),
                          with_tol(kBf16Tol));
  }
}

TEST(GpuOps, SumAndMeanMatchTheCpu) {
  COHORT_NEEDS_GPU();
  // [] copies, few terms add in one thread, many in fixed chunks (300000: 147 chunks). The
  // values are positive so the sums do not cancel; the CPU adds in one sequence, whose rounding
  // drifts by about 1e-5 of the total over 300000 terms: hence 1e-4.
  for (const char* op : {"sum", "mean"}) {
    for (const Shape& s : {Shape{}, Shape{5}, Shape{3, 1, 2}, Shape{1000, 37}, Shape{300000}}) {
      SCOPED_TRACE(str_cat(op, " ", shape_str(s)));
      expect_op_matches_cpu(op, {random_tensor(s, 41, 0.0f, 1.0f)}, Attrs(), with_tol(1e-4));
      expect_op_matches_cpu(op, {random_tensor(s, 42, 0.0f, 1.0f, DType::kBF16)}, Attrs(), with_tol(kBf16Tol));
    }
  }
}

TEST(GpuOps, SumToAndBroadcastToMatchTheCpu) {
  COHORT_NEEDS_GPU();
  // Each path of the reduction: sum_rows ([64, 300] to [300]), a thread per output (few terms,
  // or 70000 outputs), fixed chunks (trailing and middle dims summed), and a plain copy.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{64, 300}, {300}},        {{64, 300}, {1, 300}}, {{300, 64}, {300, 1}},  {{70000, 40}, {70000, 1}},
      {{40, 3, 50}, {1, 3, 1}},  {{4, 3, 5}, {3, 1}},   {{4, 3, 5}, {4, 1, 5}}, {{1, 2, 3}, {2, 3}},
      {{5, 1, 7}, {1, 7}},       {{6, 33}, {}}};
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(str_cat(shape_str(from), " to ", shape_str(to)));
    expect_op_matches_cpu("sum_to", {random_tensor(from, 51, 0.0f, 1.0f)}, attrs_of({{"shape", to}}), with_tol(1e-5));
    expect_op_matches_cpu("sum_to", {random_tensor(from, 52, 0.0f, 1.0f, DType::kBF16)}, attrs_of({{"shape", to}}),
                          with_tol(kBf16Tol));
  }
  for (const auto& [from, to] : std::vector<std::pair<Shape, Shape>>{
           {{}, {5, 3}}, {{3, 1}, {2, 3, 4}}, {{4}, {3, 4}}, {{1, 5, 1}, {2, 5, 3}}, {{2, 3}, {2, 3}}}) {
    SCOPED_TRACE(str_cat("broadcast_to ", shape_str(from), " to ", shape_str(to)));
    expect_op_matches_cpu("broadcast_to", {random_tensor(from, 53)}, attrs_of({{"shape", to}}));
    expect_op_matches_cpu("broadcast_to", {random_tensor(from, 54, -1, 1, DType::kBF16)}, attrs_of({{"shape", to}}),
                          with_tol(kBf16Tol));
  }
}

TEST(GpuOps, TransposeMatchesTheCpuExactly) {
  COHORT_NEEDS_GPU();
  // Row gathers, batched 2-D tiles (odd sizes cross tile edges), full reversal, the identity.
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{2, 3, 4, 5}, {0, 2, 1, 3}}, {{2, 3, 4, 5}, {1, 0, 2, 3}}, {{2, 3, 4, 5}, {3, 2, 1, 0}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}}, {{2, 3, 4, 5}, {2, 3, 0, 1}}, {{2, 3, 4, 5}, {0, 1, 2, 3}},
      {{33, 65}, {1, 0}},           {{3, 37, 41}, {0, 2, 1}},     {{1, 5, 1, 7}, {3, 1, 0, 2}},
      {{}, {}}};
  for (const auto& [shape, perm] : cases) {
    SCOPED_TRACE(str_cat(shape_str(shape), " perm ", shape_str(perm)));
    const Attrs a = attrs_of({{"perm", perm}});
    expect_op_matches_cpu("transpose", {random_tensor(shape, 61)}, a, with_tol(0.0));
    expect_op_matches_cpu("transpose", {random_tensor(shape, 62, -1, 1, DType::kBF16)}, a, with_tol(0.0));
  }
}

TEST(GpuOps, ConcatAndSplitMatchTheCpuExactly) {
  COHORT_NEEDS_GPU();
  // First, middle and last axes with unequal parts (concat's gradient is split and split's is
  // concat); bf16 rows of 10 and 2 bytes take the 2-byte copy, f32 rows of 16 bytes the
  // 16-byte one.
  struct Case {
    std::vector<Shape> parts;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{{2, 3, 4}, {5, 3, 4}}, 0},
                                   {{{2, 1, 4}, {2, 5, 4}, {2, 2, 4}}, 1},
                                   {{{2, 3, 1}, {2, 3, 7}}, -1},
                                   {{{2, 3, 1}, {2, 3, 7}, {2, 3, 2}}, 2},
                                   {{{3, 5}, {3, 1}}, 1},
                                   {{{4, 4}, {4, 4}}, 1}};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Case& c : cases) {
      std::vector<Tensor> in;
      std::vector<int64_t> sizes;
      for (const Shape& s : c.parts)
        in.push_back(random_tensor(s, 71 + static_cast<uint32_t>(in.size()), -1, 1, dtype));
      const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.parts[0].size()) : c.axis;
      Shape whole = c.parts[0];
      whole[static_cast<size_t>(axis)] = 0;
      for (const Shape& s : c.parts) {
        sizes.push_back(s[static_cast<size_t>(axis)]);
        whole[static_cast<size_t>(axis)] += sizes.back();
      }
      SCOPED_TRACE(str_cat(dtype_name(dtype), " ", shape_str(whole), " axis ", c.axis, " sizes ", shape_str(sizes)));
      expect_op_matches_cpu("concat", in, attrs_of({{"axis", c.axis}}), with_tol(0.0));
      expect_op_matches_cpu("split", {random_tensor(whole, 79, -1, 1, dtype)},
                            attrs_of({{"axis", c.axis}, {"sizes", sizes}}), with_tol(0.0));
    }
  }
  // 16 parts, the most a concat takes.
  std::vector<Tensor> many;
  for (uint32_t k = 0; k < 16; ++k) many.push_back(random_tensor({3, 1 + k % 3}, 80 + k));
  expect_op_matches_cpu("concat", many, attrs_of({{"axis", int64_t{1}}}), with_tol(0.0));
}

TEST(GpuOps, SplitGradFillsTheMissingPartsWithZeros) {
  COHORT_NEEDS_GPU();
  // split_grad has no gradient of its own: outputs only. Parts 1 and 3 of four had none.
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    OpCompare c = with_tol(0.0);
    c.gradients = false;
    expect_op_matches_cpu(
        "split_grad", {random_tensor({2, 2, 3}, 91, -1, 1, dtype), random_tensor({2, 4, 3}, 92, -1, 1, dtype)},
        attrs_of({{"axis", int64_t{1}}, {"sizes", std::vector<int64_t>{2, 1, 4, 5}},
                  {"present", std::vector<int64_t>{1, 0, 1, 0}}}),
        c);
  }
}

TEST(GpuOps, DropoutDrawsTheCpuMaskExactly) {
  COHORT_NEEDS_GPU();
  // Training: the same elements kept and scaled (tolerance 0), in the output and in dropout_grad
  // (which regenerates the forward node's mask); 1.5M elements run the grid-stride loop more
  // than once. p = 0 and evaluation: the identity.
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const double p : {0.1, 0.3, 0.77}) {
      for (const int64_t step : {int64_t{0}, int64_t{3}, int64_t{12345}}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " p ", p, " step ", step));
        OpCompare c = with_tol(0.0);
        c.step = step;
        expect_op_matches_cpu("dropout", {random_tensor({37, 129}, 101, -1, 1, dtype)},
                              attrs_of({{"p", p}, {"seed", int64_t{5}}}), c);
      }
    }
    SCOPED_TRACE(dtype_name(dtype));
    expect_op_matches_cpu("dropout", {random_tensor({1500, 1001}, 102, -1, 1, dtype)},
                          attrs_of({{"p", 0.5}, {"seed", int64_t{9}}}), with_tol(0.0));
    expect_op_matches_cpu("dropout", {random_tensor({1}, 103, -1, 1, dtype)}, attrs_of({{"p", 0.5}}), with_tol(0.0));
    expect_op_matches_cpu("dropout", {random_tensor({5, 7}, 104, -1, 1, dtype)}, attrs_of({{"p", 0.0}}),
                          with_tol(0.0));
    OpCompare eval = with_tol(0.0);
    eval.training = false;
    expect_op_matches_cpu("dropout", {random_tensor({5, 7}, 105, -1, 1, dtype)}, attrs_of({{"p", 0.5}}), eval);
  }
}

// Runs `op` alone on both devices and compares its outputs byte for byte: the shape operators
// move i32 and i64 elements too, which op_compare (float outputs only) does not look at.
void expect_same_bytes(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  Graph g;
  std::vector<ValueId> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(g.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
  const std::vector<ValueId> outs = g.add_op(op, "op", ins, attrs);
  std::vector<std::vector<Tensor>> results;
  for (const Device device : {Device::kCpu, Device::kCuda}) {
    Executor ex(g, outs, device);
    std::unordered_map<ValueId, Tensor> env;
    for (size_t i = 0; i < inputs.size(); ++i) env[ins[i]] = to_device(inputs[i], device);
    ex.run(env, RunOptions());
    device_synchronize(device);
    results.emplace_back();
    for (ValueId v : outs) results.back().push_back(to_device(env.at(v), Device::kCpu));
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor &cpu = results[0][k], &gpu = results[1][k];
    ASSERT_EQ(cpu.shape(), gpu.shape());
    ASSERT_EQ(cpu.nbytes(), gpu.nbytes());
    EXPECT_EQ(std::memcmp(cpu.raw(), gpu.raw(), cpu.nbytes()), 0) << op << " output " << k;
  }
}

Tensor counting_tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kI32)
      t.data<int32_t>()[i] = static_cast<int32_t>(i * 7 - 100);
    else
      t.data<int64_t>()[i] = (int64_t{1} << 40) + i * 3;
  }
  return t;
}

TEST(GpuOps, ShapeOperatorsMoveIntegerElements) {
  COHORT_NEEDS_GPU();
  for (const DType dtype : {DType::kI32, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_same_bytes("transpose", {counting_tensor({3, 37, 41}, dtype)},
                      attrs_of({{"perm", std::vector<int64_t>{0, 2, 1}}}));
    expect_same_bytes("transpose", {counting_tensor({2, 3, 4, 5}, dtype)},
                      attrs_of({{"perm", std::vector<int64_t>{2, 0, 3, 1}}}));
    expect_same_bytes("concat", {counting_tensor({2, 3}, dtype), counting_tensor({2, 5}, dtype)},
                      attrs_of({{"axis", int64_t{1}}}));
    expect_same_bytes("split", {counting_tensor({7, 3}, dtype)},
                      attrs_of({{"axis", int64_t{0}}, {"sizes", std::vector<int64_t>{2, 5}}}));
  }
}

}  // namespace
}  // namespace cohort
