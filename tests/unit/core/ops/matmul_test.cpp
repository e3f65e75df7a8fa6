// Harness cases for the matmul family (matmul, linear) with double-precision references, and
// the shape-rule errors.
#include <gtest/gtest.h>

#include "core/base/error.h"
#include <cmath>
#include <random>
#include <unordered_map>

#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "kernels/cpu/matmul.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

// Index of batch position `i` of `out_batch` into a (possibly broadcast) batch shape `s`.
int64_t batch_index(int64_t i, const Shape& s, const Shape& out_batch) {
  int64_t idx = 0, stride = 1;
  for (size_t k = 0; k < out_batch.size(); ++k) {
    int64_t c = i % out_batch[out_batch.size() - 1 - k];
    i /= out_batch[out_batch.size() - 1 - k];
    if (k < s.size()) {
      int64_t e = s[s.size() - 1 - k];
      if (e != 1) idx += c * stride;
      stride *= e;
    }
  }
  return idx;
}

std::vector<DVec> matmul_ref(const std::vector<DVec>& in, const std::vector<Shape>& sh, const Attrs& at) {
  const bool ta = at.get_int("transpose_a") != 0, tb = at.get_int("transpose_b") != 0;
  const Shape& a = sh[0];
  const Shape& b = sh[1];
  const size_t ra = a.size(), rb = b.size();
  const int64_t M = ta ? a[ra - 1] : a[ra - 2], K = ta ? a[ra - 2] : a[ra - 1], N = tb ? b[rb - 2] : b[rb - 1];
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape ob(std::max(ab.size(), bb.size()), 1);
  for (size_t k = 0; k < ob.size(); ++k) {
    int64_t da = k < ab.size() ? ab[ab.size() - 1 - k] : 1, db = k < bb.size() ? bb[bb.size() - 1 - k] : 1;
    ob[ob.size() - 1 - k] = std::max(da, db);
  }
  const int64_t batches = numel(ob);
  DVec out(static_cast<size_t>(batches * M * N), 0.0);
  for (int64_t i = 0; i < batches; ++i) {
    const double* A = in[0].data() + batch_index(i, ab, ob) * M * K;
    const double* B = in[1].data() + batch_index(i, bb, ob) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
        out[static_cast<size_t>((i * M + m) * N + n)] = s;
      }
  }
  return {out};
}

std::vector<DVec> linear_ref(const std::vector<DVec>& in, const std::vector<Shape>& sh, const Attrs&) {
  const int64_t K = sh[0].back(), N = sh[1][0], M = numel(sh[0]) / K;
  DVec out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = in.size() > 2 ? in[2][static_cast<size_t>(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += in[0][static_cast<size_t>(m * K + k)] * in[1][static_cast<size_t>(n * K + k)];
      out[static_cast<size_t>(m * N + n)] = s;
    }
  return {out};
}

// gelu_linear: y = gelu(x) W^T + b, a = gelu(x), g = gelu'(x) (tanh approximation, in double).
std::vector<DVec> gelu_linear_ref(const std::vector<DVec>& in, const std::vector<Shape>& sh, const Attrs& at) {
  const double k = std::sqrt(2.0 / M_PI);
  DVec a(in[0].size()), g(in[0].size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = in[0][i], t = std::tanh(k * (x + 0.044715 * x * x * x));
    a[i] = 0.5 * x * (1.0 + t);
    g[i] = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
  }
  std::vector<DVec> lin_in = in;
  lin_in[0] = a;
  return {linear_ref(lin_in, sh, at)[0], a, g};
}

}  // namespace

void add_matmul_cases(std::vector<OpCase>& out) {
  struct MM { const char* label; Shape a, b; int ta, tb; };
  const MM cases[] = {
      {"2d", {3, 5}, {5, 4}, 0, 0},
      {"2d_odd", {7, 13}, {13, 1}, 0, 0},
      {"ta", {5, 3}, {5, 4}, 1, 0},
      {"tb", {3, 5}, {4, 5}, 0, 1},
      {"ta_tb", {6, 3}, {7, 6}, 1, 1},
      {"batch_equal", {2, 3, 4}, {2, 4, 5}, 0, 0},
      {"batch_b2d", {2, 3, 4, 5}, {5, 3}, 0, 0},
      {"batch_b2d_tb", {2, 3, 5}, {6, 5}, 0, 1},
      {"batch_b2d_ta", {2, 5, 3}, {5, 6}, 1, 0},
      {"batch_a2d", {3, 4}, {2, 4, 5}, 0, 0},
      {"batch_bcast", {2, 1, 3, 4}, {1, 3, 4, 2}, 0, 0},
      {"batch_tb_heads", {2, 3, 5, 4}, {2, 3, 5, 4}, 0, 1},
      {"batch_ta_tb", {3, 4, 2}, {3, 5, 4}, 1, 1},
  };
  for (const MM& m : cases) {
    OpCase c;
    c.op = "matmul";
    c.label = m.label;
    c.attrs.set("transpose_a", int64_t{m.ta});
    c.attrs.set("transpose_b", int64_t{m.tb});
    c.inputs = {{m.a}, {m.b}};
    c.reference = [](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
      return matmul_ref(in, s, a);
    };
    out.push_back(c);
  }
  struct Lin { const char* label; Shape x; int64_t N; bool bias; };
  const Lin lins[] = {
      {"2d", {4, 6}, 5, true}, {"odd", {7, 13}, 3, true}, {"nobias", {3, 5}, 4, false},
      {"3d", {2, 3, 8}, 6, true}, {"3d_nobias", {2, 5, 3}, 1, false},
      {"expand", {2, 3, 4}, 17, true},  // out >= 4 in: dW formed transposed, then transposed back
  };
  for (const Lin& l : lins) {
    OpCase c;
    c.op = "linear";
    c.label = l.label;
    c.inputs = {{l.x}, {{l.N, l.x.back()}}};
    if (l.bias) c.inputs.push_back({{l.N}});
    c.reference = linear_ref;
    out.push_back(c);
  }
  // gelu_linear: outputs checked {0} use the fused backward (matmul_mul); {0, 1} the path where
  // gelu(x) feeds something else too; the last case compares the saved a and gelu'(x) themselves.
  // recompute = 1: backward keeps x and recomputes gelu(x) and gelu'(x) (matmul_gelu_grad).
  struct GeluLin { const char* label; Shape x; int64_t N; bool bias; std::vector<int> checked; bool grad; int recompute; };
  const GeluLin gls[] = {
      {"2d", {5, 6}, 4, true, {0}, true, 0},
      {"3d_nobias", {2, 3, 7}, 5, false, {0}, true, 0},
      {"also_uses_gelu", {4, 5}, 3, true, {0, 1}, true, 0},
      {"saved_outputs", {3, 9}, 2, true, {0, 1, 2}, false, 0},
      {"recompute_2d", {5, 6}, 4, true, {0}, true, 1},
      {"recompute_3d_nobias", {2, 3, 7}, 5, false, {0}, true, 1},
      {"recompute_also_uses_gelu", {4, 5}, 3, true, {0, 1}, true, 1},
  };
  for (const GeluLin& l : gls) {
    OpCase c;
    c.op = "gelu_linear";
    c.label = l.label;
    if (l.recompute) c.attrs.set("recompute", int64_t{1});
    c.inputs = {{l.x, DType::kF32, -4.0, 4.0}, {{l.N, l.x.back()}}};
    if (l.bias) c.inputs.push_back({{l.N}});
    c.reference = gelu_linear_ref;
    c.checked_outputs = l.checked;
    c.check_grad = l.grad;
    out.push_back(c);
  }
}

namespace {

Status add_status(const std::string& op, const Shape& a, const Shape& b, const Attrs& attrs, std::string* msg) {
  Graph g;
  ValueId va = g.add_input("a", DType::kF32, a), vb = g.add_input("b", DType::kF32, b);
  try {
    g.add_op(op, "fc2", {va, vb}, attrs);
  } catch (const Error& e) {
    *msg = e.what();
    return e.status();
  }
  return Status::kOk;
}

TEST(MatmulShapeRule, RejectsInnerDimMismatch) {
  std::string msg;
  EXPECT_EQ(add_status("matmul", {8, 64}, {64, 300}, Attrs(), &msg), Status::kOk);
  EXPECT_EQ(add_status("matmul", {8, 64}, {300, 64}, Attrs(), &msg), Status::kShapeMismatch);
  EXPECT_NE(msg.find("matmul 'fc2': input 1 has shape [300, 64], expected [64, *]"), std::string::npos) << msg;
  Attrs t;
  t.set("transpose_b", int64_t{1});
  EXPECT_EQ(add_status("matmul", {8, 64}, {64, 300}, t, &msg), Status::kShapeMismatch);
  EXPECT_NE(msg.find("input 1 has shape [64, 300], expected [*, 64]"), std::string::npos) << msg;
  EXPECT_EQ(add_status("matmul", {2, 8, 64}, {3, 64, 5}, Attrs(), &msg), Status::kShapeMismatch);
  EXPECT_NE(msg.find("batch dims do not broadcast"), std::string::npos) << msg;
  t.set("transpose_b", int64_t{2});
  EXPECT_EQ(add_status("matmul", {8, 64}, {300, 64}, t, &msg), Status::kInvalidArgument);
  EXPECT_NE(msg.find("'transpose_b'"), std::string::npos) << msg;
}

TEST(MatmulShapeRule, LinearRejectsWeightAndBias) {
  std::string msg;
  EXPECT_EQ(add_status("linear", {8, 64}, {300, 32}, Attrs(), &msg), Status::kShapeMismatch);
  EXPECT_NE(msg.find("linear 'fc2': input 1 has shape [300, 32], expected [*, 64]"), std::string::npos) << msg;
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {8, 64}), w = g.add_input("w", DType::kF32, {300, 64}),
          bias = g.add_input("b", DType::kF32, {64});
  try {
    g.add_op("linear", "fc2", {x, w, bias}, Attrs());
    ADD_FAILURE() << "accepted a bias of the wrong size";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("input 2 has shape [64], expected [300]"), std::string::npos) << e.what();
  }
}


// gemm_batched on strided operands: heads interleaved in [T, H, D] rows (lda = H*D, head stride
// D), a shared B (stride 0), alpha and beta, checked against plain loops.
TEST(GemmHelpers, StridedBatchesAlphaBeta) {
  const int64_t T = 5, H = 3, D = 4;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(T * H * D), k(T * H * D), w(D * 7), s(H * T * T), s2(H * T * 7);
  for (auto* v : {&q, &k, &w, &s2}) for (float& x : *v) x = u(rng);
  std::vector<float> s2_old = s2;
  kernels::cpu::gemm_batched(false, true, H, T, T, D, 0.5f, q.data(), H * D, D, k.data(), H * D, D, 0.0f, s.data(),
                             T, T * T);
  kernels::cpu::gemm_batched(false, false, H, T, 7, D, 1.0f, q.data(), H * D, D, w.data(), 7, 0, 2.0f, s2.data(), 7,
                             T * 7);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = 0; j < T; ++j) {
        double r = 0;
        for (int64_t d = 0; d < D; ++d) r += q[(i * H + h) * D + d] * k[(j * H + h) * D + d];
        EXPECT_NEAR(s[(h * T + i) * T + j], 0.5 * r, 1e-5);
      }
      for (int64_t j = 0; j < 7; ++j) {
        double r = 0;
        for (int64_t d = 0; d < D; ++d) r += q[(i * H + h) * D + d] * w[d * 7 + j];
        EXPECT_NEAR(s2[(h * T + i) * 7 + j], r + 2.0 * s2_old[(h * T + i) * 7 + j], 1e-5);
      }
    }
  std::vector<float> c(4, 1.0f), a(6), b(6);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  kernels::cpu::gemm(true, true, 2, 2, 3, 1.0f, a.data(), 2, b.data(), 3, 0.0f, c.data(), 2);  // a [3,2], b [2,3]
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double r = 0;
      for (int64_t kk = 0; kk < 3; ++kk) r += a[kk * 2 + i] * b[j * 3 + kk];
      EXPECT_NEAR(c[i * 2 + j], r, 1e-5);
    }
}

// The bf16 backward (bf16 matmul / matmul_sum_batch nodes) agrees with the fp32 one.
TEST(MatmulBf16, LinearBackwardMatchesF32) {
  auto grads = [](DType dt) {
    Graph g;
    ValueId x = g.add_input("x", dt, {2, 3, 8}), w = g.add_input("w", dt, {5, 8}), b = g.add_input("b", dt, {5});
    ValueId y = g.add_op("linear", "fc", {x, w, b}, Attrs())[0];
    ValueId a2 = g.add_input("a2", dt, {8, 5});
    ValueId z = g.add_op("matmul", "mm", {x, a2}, Attrs())[0];
    ValueId c2 = g.add_input("c2", dt, {3, 3});  // shared left operand: the per-batch loop path
    ValueId q = g.add_op("matmul", "mq", {c2, x}, Attrs())[0];
    y = g.add_op("add", "yq", {y, g.add_op("sum", "sq2", {q}, Attrs())[0]}, Attrs())[0];
    ValueId sy = g.add_op("sum", "s1", {y}, Attrs())[0];
    ValueId zz = g.add_op("mul", "sq", {z, z}, Attrs())[0];
    ValueId l = g.add_op("add", "l0", {sy, g.add_op("sum", "s2", {zz}, Attrs())[0]}, Attrs())[0];
    g.set_loss(l);
    std::vector<ValueId> gr = build_backward(g, l, {x, w, b, a2, c2});
    std::unordered_map<ValueId, Tensor> env;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (ValueId v : {x, w, b, a2, c2}) {
      Tensor f = Tensor::empty(g.value(v).type.shape, DType::kF32);
      for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = bf16_to_f32(f32_to_bf16(u(rng)));
      Tensor t = Tensor::empty(f.shape(), dt);
      t.copy_from(f);
      env[v] = t;
    }
    Executor ex(g, gr);
    ex.run(env, RunOptions());
    std::vector<Tensor> out;
    for (ValueId v : gr) {
      Tensor f = Tensor::empty(env.at(v).shape(), DType::kF32);
      f.copy_from(env.at(v));
      out.push_back(f);
    }
    return out;
  };
  std::vector<Tensor> f = grads(DType::kF32), h = grads(DType::kBF16);
  for (size_t i = 0; i < f.size(); ++i)
    for (int64_t j = 0; j < f[i].numel(); ++j)
      EXPECT_NEAR(h[i].data<float>()[j], f[i].data<float>()[j], 3e-2 * std::max(1.0f, std::fabs(f[i].data<float>()[j])))
          << "gradient " << i << " element " << j;
}

// Sizes past oneDNN's register blocks and tails (the harness shapes are tiny), fp32 and bf16. The
// last two are single products large enough that b is first repacked into oneDNN's layout (from
// row-major, then from transposed, the scratch growing between them).
TEST(MatmulKernel, ModerateShapesMatchLoops) {
  struct Case { Shape a, b; int ta, tb; };
  const Case cases[] = {{{3, 67, 129}, {129, 75}, 0, 0}, {{2, 129, 33}, {2, 45, 129}, 1, 1},
                        {{4, 1, 31, 70}, {1, 3, 70, 50}, 0, 0}, {{130, 257}, {257, 17}, 0, 0},
                        {{520, 200}, {190, 200}, 0, 1}, {{2, 300, 261}, {261, 230}, 0, 0}};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Case& cs : cases)
    for (kernels::cpu::MatmulType type : {kernels::cpu::MatmulType::kF32, kernels::cpu::MatmulType::kBF16}) {
      const bool bf = type == kernels::cpu::MatmulType::kBF16;
      std::vector<DVec> in(2);
      std::vector<std::vector<float>> f(2);
      std::vector<std::vector<uint16_t>> h(2);
      for (int i = 0; i < 2; ++i)
        for (int64_t j = 0; j < numel(i == 0 ? cs.a : cs.b); ++j) {
          float v = bf16_to_f32(f32_to_bf16(u(rng)));
          in[i].push_back(v);
          f[i].push_back(v);
          h[i].push_back(f32_to_bf16(v));
        }
      Attrs at;
      at.set("transpose_a", int64_t{cs.ta});
      at.set("transpose_b", int64_t{cs.tb});
      DVec want = matmul_ref(in, {cs.a, cs.b}, at)[0];
      Shape c_shape = cs.a.size() == 4 ? Shape{4, 3, 31, 50} : Shape{};
      if (c_shape.empty()) {
        c_shape = cs.a;
        c_shape[c_shape.size() - 2] = cs.ta ? cs.a.back() : cs.a[cs.a.size() - 2];
        c_shape.back() = cs.tb ? cs.b[cs.b.size() - 2] : cs.b.back();
      }
      ASSERT_EQ(numel(c_shape), static_cast<int64_t>(want.size()));
      std::vector<float> got(want.size());
      std::vector<uint16_t> got_h(want.size());
      kernels::cpu::matmul(type, bf ? static_cast<const void*>(h[0].data()) : f[0].data(), cs.a, cs.ta != 0,
                           bf ? static_cast<const void*>(h[1].data()) : f[1].data(), cs.b, cs.tb != 0,
                           bf ? static_cast<void*>(got_h.data()) : got.data(), c_shape);
      for (size_t j = 0; j < want.size(); ++j) {
        double g = bf ? bf16_to_f32(got_h[j]) : got[j];
        ASSERT_NEAR(g, want[j], (bf ? 1e-2 : 2e-5) * std::max(1.0, std::fabs(want[j])))
            << shape_str(cs.a) << " x " << shape_str(cs.b) << (bf ? " bf16" : " f32") << " element " << j;
      }
    }
}

// dW-like products c = sum_i a_i^T b_i at sizes past the register blocks, the fourth large enough
// that b is repacked; in the last three, rows of a (4 KiB apart in fp32, 2 KiB in bf16), then of b
// (2 KiB in fp32), are first copied into longer rows (kernels/cpu/matmul.cpp, pad_rows), and in
// the last a's 1024 rows of 16 KiB are copied and multiplied in two chunks of 512 (kPadChunkBytes).
TEST(MatmulKernel, SumBatchTransposedMatchesLoops) {
  struct Case { Shape a, b; };
  const Case cases[] = {{{2, 70, 130}, {2, 70, 31}}, {{3, 40, 50}, {3, 40, 45}}, {{1, 9, 64}, {1, 9, 16}},
                        {{2, 300, 250}, {2, 300, 120}}, {{2, 64, 1024}, {2, 64, 256}},
                        {{1, 128, 256}, {1, 128, 512}}, {{1, 1024, 4096}, {1, 1024, 8}}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Case& cs : cases)
    for (kernels::cpu::MatmulType type : {kernels::cpu::MatmulType::kF32, kernels::cpu::MatmulType::kBF16}) {
      const bool bf = type == kernels::cpu::MatmulType::kBF16;
      const int64_t batch = cs.a[0], K = cs.a[1], M = cs.a[2], N = cs.b[2];
      std::vector<float> f[2];
      std::vector<uint16_t> h[2];
      for (int i = 0; i < 2; ++i)
        for (int64_t j = 0; j < numel(i == 0 ? cs.a : cs.b); ++j) {
          const float v = bf16_to_f32(f32_to_bf16(u(rng)));
          f[i].push_back(v);
          h[i].push_back(f32_to_bf16(v));
        }
      std::vector<float> got(static_cast<size_t>(M * N));
      std::vector<uint16_t> got_h(got.size());
      kernels::cpu::matmul_sum_batch(type, bf ? static_cast<const void*>(h[0].data()) : f[0].data(), cs.a, true,
                                     bf ? static_cast<const void*>(h[1].data()) : f[1].data(), cs.b, false,
                                     bf ? static_cast<void*>(got_h.data()) : got.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0;
          for (int64_t i = 0; i < batch; ++i)
            for (int64_t k = 0; k < K; ++k)
              want += static_cast<double>(f[0][static_cast<size_t>((i * K + k) * M + m)]) * f[1][static_cast<size_t>((i * K + k) * N + n)];
          const double g = bf ? bf16_to_f32(got_h[static_cast<size_t>(m * N + n)]) : got[static_cast<size_t>(m * N + n)];
          ASSERT_NEAR(g, want, (bf ? 1e-2 : 2e-5) * std::max(1.0, std::fabs(want)))
              << shape_str(cs.a) << " x " << shape_str(cs.b) << (bf ? " bf16" : " f32") << " at " << m << ", " << n;
        }
    }
}


// The bf16 path of CPUs without oneDNN's bf16 kernels (AVX2 and older): operands widened to fp32,
// one rounding of the result. Forced here on every CPU, over transposes, broadcast batches, a
// bias, the batch sum with accumulation (c in fp32, beta 1) and the contracted-rows sum. Where
// the CPU has native bf16 kernels, the widened results are within one bf16 ulp of theirs (both
// round an fp32-accumulated sum of exact bf16 products; only the summation order differs);
// everywhere they match a double loop to bf16 precision.
TEST(MatmulKernel, Bf16WidenedToF32MatchesNativeAndLoops) {
  namespace kc = kernels::cpu;
  struct Case { Shape a, b, c; int ta, tb; };
  const Case cases[] = {{{3, 67, 129}, {129, 75}, {3, 67, 75}, 0, 0}, {{2, 129, 33}, {2, 45, 129}, {2, 33, 45}, 1, 1},
                        {{4, 1, 31, 70}, {1, 3, 70, 50}, {4, 3, 31, 50}, 0, 0}, {{5, 7}, {9, 7}, {5, 9}, 0, 1}};
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1, 1);
  auto bf16_vec = [&](int64_t n, std::vector<float>& f) {
    std::vector<uint16_t> h;
    for (int64_t j = 0; j < n; ++j) {
      h.push_back(f32_to_bf16(u(rng)));
      f.push_back(bf16_to_f32(h.back()));
    }
    return h;
  };
  struct Widening {
    explicit Widening(bool on) { kc::set_matmul_bf16_widening(on); }
    ~Widening() { kc::set_matmul_bf16_widening(false); }
  };
  for (const Case& cs : cases) {
    std::vector<float> fa, fb;
    const std::vector<uint16_t> a = bf16_vec(numel(cs.a), fa), b = bf16_vec(numel(cs.b), fb);
    Attrs at;
    at.set("transpose_a", int64_t{cs.ta});
    at.set("transpose_b", int64_t{cs.tb});
    const DVec want = matmul_ref({DVec(fa.begin(), fa.end()), DVec(fb.begin(), fb.end())}, {cs.a, cs.b}, at)[0];
    std::vector<uint16_t> widened(want.size()), native(want.size());
    {
      Widening w(true);
      kc::matmul(kc::MatmulType::kBF16, a.data(), cs.a, cs.ta != 0, b.data(), cs.b, cs.tb != 0, widened.data(), cs.c);
    }
    if (kc::matmul_bf16_native())
      kc::matmul(kc::MatmulType::kBF16, a.data(), cs.a, cs.ta != 0, b.data(), cs.b, cs.tb != 0, native.data(), cs.c);
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_NEAR(bf16_to_f32(widened[j]), want[j], 1e-2 * std::max(1.0, std::fabs(want[j])))
          << shape_str(cs.a) << " x " << shape_str(cs.b) << " element " << j;
      if (kc::matmul_bf16_native()) {
        ASSERT_LE(std::abs(int{widened[j]} - int{native[j]}), 1) << shape_str(cs.a) << " element " << j;
      }
    }
  }
  // linear with a bias: y = x W^T + b.
  const int64_t M = 13, N = 11, K = 17;
  std::vector<float> fx, fw, fbias;
  const std::vector<uint16_t> x = bf16_vec(M * K, fx), w = bf16_vec(N * K, fw), bias = bf16_vec(N, fbias);
  std::vector<uint16_t> y(static_cast<size_t>(M * N));
  {
    Widening wide(true);
    kc::linear(kc::MatmulType::kBF16, x.data(), w.data(), bias.data(), y.data(), M, N, K);
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = fbias[static_cast<size_t>(n)];
      for (int64_t k = 0; k < K; ++k) want += double{fx[static_cast<size_t>(m * K + k)]} * fw[static_cast<size_t>(n * K + k)];
      ASSERT_NEAR(bf16_to_f32(y[static_cast<size_t>(m * N + n)]), want, 1e-2 * std::max(1.0, std::fabs(want)))
          << "linear at " << m << ", " << n;
    }
  // Sum over a batch, both branches: rows contracted (one product) and batch by batch (fp32
  // accumulation with beta = 1 into an fp32 buffer).
  for (bool ta : {true, false}) {
    const Shape as = ta ? Shape{3, 9, 8} : Shape{3, 8, 9}, bs = {3, 9, 6};
    std::vector<float> f0, f1;
    const std::vector<uint16_t> a = bf16_vec(numel(as), f0), b = bf16_vec(numel(bs), f1);
    std::vector<uint16_t> c(8 * 6);
    {
      Widening wide(true);
      kc::matmul_sum_batch(kc::MatmulType::kBF16, a.data(), as, ta, b.data(), bs, false, c.data());
    }
    for (int64_t m = 0; m < 8; ++m)
      for (int64_t n = 0; n < 6; ++n) {
        double want = 0;
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t k = 0; k < 9; ++k) {
            const double av = ta ? f0[static_cast<size_t>((i * 9 + k) * 8 + m)] : f0[static_cast<size_t>((i * 8 + m) * 9 + k)];
            want += av * f1[static_cast<size_t>((i * 9 + k) * 6 + n)];
          }
        ASSERT_NEAR(bf16_to_f32(c[static_cast<size_t>(m * 6 + n)]), want, 1e-2 * std::max(1.0, std::fabs(want)))
            << (ta ? "contracted rows" : "batch by batch") << " at " << m << ", " << n;
      }
  }
}

}  // namespace
}  // namespace cohort::test
