// Harness cases for the attention family: a direct double-precision reference of causal and
// full multi-head self-attention over a fused qkv, plus shape-rule error tests.
#include <gtest/gtest.h>

#include <cmath>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

// qkv [B, T, 3C] -> out [B, T, C], computed head by head with an explicit softmax.
std::vector<DVec> attention_ref(const std::vector<DVec>& in, const std::vector<Shape>& s,
                                const Attrs& a) {
  const int64_t B = s[0][0], T = s[0][1], C = s[0][2] / 3, H = a.get_int("heads"), D = C / H;
  const bool causal = !a.has("causal") || a.get_int("causal") != 0;  // attrs here lack defaults
  const double given = a.has("scale") ? a.get_float("scale") : 0.0;
  const double scale = given != 0.0 ? given : 1.0 / std::sqrt(static_cast<double>(D));
  const DVec& x = in[0];
  DVec out(static_cast<size_t>(B * T * C), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t col) {
    return x[static_cast<size_t>((b * T + t) * 3 * C + col)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = causal ? i + 1 : T;
        DVec sc(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, i, h * D + d) * at(b, j, C + h * D + d);
          sc[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j)
            acc += sc[static_cast<size_t>(j)] * at(b, j, 2 * C + h * D + d);
          out[static_cast<size_t>((b * T + i) * C + h * D + d)] = acc / sum;
        }
      }
  return {out, DVec()};
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& out) {
  struct Shp {
    int64_t B, T, C, heads;
  };
  // The CPU kernel cuts T into blocks of 64 tokens and batches elements in groups that fit in
  // cache: T = 130 spans three blocks (the last of 2 tokens); B = 3, T = 200, C = 32 makes
  // groups of 2 and 1 elements, each of four blocks (with two threads, one group each: see
  // for_each_group); C = 48, heads 3 gives D = 16.
  // D = 64 (C = 128, heads 2) is GPT-2's head size, the CUDA kernel's main case.
  const Shp shapes[] = {{1, 1, 4, 1},   {2, 5, 8, 2},   {1, 7, 12, 4},    {2, 3, 6, 1},
                        {1, 130, 8, 2}, {1, 37, 48, 3}, {3, 200, 32, 2}, {2, 70, 128, 2}};
  for (const Shp& sh : shapes)
    for (int causal : {1, 0}) {
      OpCase c;
      c.op = "attention";
      c.label =
          str_cat("B", sh.B, "_T", sh.T, "_C", sh.C, "_h", sh.heads, causal ? "_causal" : "_full");
      c.attrs.set("heads", sh.heads);
      c.attrs.set("causal", int64_t{causal});
      c.inputs = {{{sh.B, sh.T, 3 * sh.C}}};
      c.reference = attention_ref;
      const int64_t D = sh.C / sh.heads;
      if (D != 16 && D != 32 && D != 64 && D != 128)
        c.cuda_refuses = "the CUDA attention takes head sizes 16, 32, 64 and 128";
      c.grad_rtol = 1e-2;
      c.grad_atol = 1e-3;
      // A NaN in a later key or value reaches earlier rows of its block through weight 0, as in
      // PyTorch's unfused attention (softmax(masked scores) @ V): more NaN, never less.
      c.nan_may_spread = causal != 0;
      out.push_back(c);
    }
  OpCase c;  // explicit scale
  c.op = "attention";
  c.label = "scale_0_7";
  c.attrs.set("heads", int64_t{2});
  c.attrs.set("scale", 0.7);
  c.inputs = {{{2, 6, 12}}};
  c.reference = attention_ref;
  c.cuda_refuses = "the CUDA attention takes head sizes 16, 32, 64 and 128";
  c.grad_rtol = 1e-2;
  c.grad_atol = 1e-3;
  c.nan_may_spread = true;  // causal by default
  out.push_back(c);
}

namespace {

Error add_error(const Shape& qkv, int64_t heads) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, qkv);
  Attrs a;
  a.set("heads", heads);
  try {
    g.add_op("attention", "attn", {x}, a);
  } catch (const Error& e) {
    return e;
  }
  return Error(Status::kOk, "no error");
}

TEST(AttentionShapeRule, HeadsMustDivideC) {
  Error e = add_error({2, 5, 18}, 4);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
  EXPECT_STREQ(e.what(),
               "attention 'attn': input 0 has shape [2, 5, 18]: C = 6 is not divisible by "
               "attribute heads = 4");
}

TEST(AttentionShapeRule, LastDimMultipleOfThree) {
  Error e = add_error({2, 5, 16}, 2);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
  EXPECT_STREQ(e.what(),
               "attention 'attn': input 0 has shape [2, 5, 16], expected [B, T, 3*C] (last dim a "
               "multiple of 3)");
}

TEST(AttentionShapeRule, HeadsPositive) {
  Error e = add_error({2, 5, 12}, 0);
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_STREQ(e.what(), "attention 'attn': attribute heads is 0, expected >= 1");
}

}  // namespace
}  // namespace cohort::test
