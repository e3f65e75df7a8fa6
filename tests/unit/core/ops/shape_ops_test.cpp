// Harness cases for the shape family (reshape, transpose, concat, split) with index-arithmetic
// references, plus shape-rule error tests.
#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

int64_t norm_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

std::vector<DVec> identity_ref(const std::vector<DVec>& in, const std::vector<Shape>&,
                               const Attrs&) {
  return {in[0]};
}

std::vector<DVec> transpose_ref(const std::vector<DVec>& in, const std::vector<Shape>& s,
                                const Attrs& a) {
  const auto& perm = a.get_ints("perm");
  const Shape in_st = strides_of(s[0]);
  Shape out_shape;
  for (int64_t p : perm) out_shape.push_back(s[0][static_cast<size_t>(p)]);
  DVec out(in[0].size());
  for (int64_t i = 0; i < numel(out_shape); ++i) {
    int64_t rem = i, src = 0;
    for (size_t k = out_shape.size(); k-- > 0;) {
      src += (rem % out_shape[k]) * in_st[static_cast<size_t>(perm[k])];
      rem /= out_shape[k];
    }
    out[static_cast<size_t>(i)] = in[0][static_cast<size_t>(src)];
  }
  return {out};
}

// Views a tensor as [outer, extent, inner] around axis.
void around(const Shape& s, int64_t axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t d = 0; d < axis; ++d) *outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) *inner *= s[d];
}

std::vector<DVec> concat_ref(const std::vector<DVec>& in, const std::vector<Shape>& s,
                             const Attrs& a) {
  const int64_t axis = norm_axis(a.get_int("axis"), s[0].size());
  int64_t outer, inner;
  around(s[0], axis, &outer, &inner);
  DVec out;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t len = s[i][static_cast<size_t>(axis)] * inner;
      for (int64_t e = 0; e < len; ++e) out.push_back(in[i][static_cast<size_t>(o * len + e)]);
    }
  return {out};
}

std::vector<DVec> split_ref(const std::vector<DVec>& in, const std::vector<Shape>& s,
                            const Attrs& a) {
  const int64_t axis = norm_axis(a.get_int("axis"), s[0].size());
  const auto& sizes = a.get_ints("sizes");
  int64_t outer, inner;
  around(s[0], axis, &outer, &inner);
  std::vector<DVec> out(sizes.size());
  const int64_t row = s[0][static_cast<size_t>(axis)] * inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t start = o * row;
    for (size_t i = 0; i < sizes.size(); ++i)
      for (int64_t e = 0; e < sizes[i] * inner; ++e)
        out[i].push_back(in[0][static_cast<size_t>(start++)]);
  }
  return out;
}

void add_reshape_cases(std::vector<OpCase>& out) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{2, 3, 4}, {6, 4}},
                                                                     {{2, 3, 4}, {-1, 3}},
                                                                     {{5, 7}, {35}},
                                                                     {{6}, {1, 2, -1}},
                                                                     {{3, 1, 5}, {5, -1, 1}}};
  for (const auto& [in, shape] : cases) {
    OpCase c;
    c.op = "reshape";
    c.label = str_cat(shape_str(in), "_to_", shape);
    c.attrs.set("shape", shape);
    c.inputs = {{in}};
    c.reference = identity_ref;
    out.push_back(c);
  }
}

void add_transpose_cases(std::vector<OpCase>& out) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 5}, {1, 0}},              // 2-D
      {{2, 3, 5}, {0, 2, 1}},        // last two dims
      {{2, 5, 3, 4}, {0, 2, 1, 3}},  // [B, T, H, D] -> [B, H, T, D]
      {{2, 3, 4, 5}, {3, 1, 0, 2}},  // generic
      {{2, 3, 4, 5}, {0, 1, 3, 2}},  // last two of four
      {{1, 3, 1, 4}, {2, 3, 0, 1}},  // extent-1 dims
      {{4, 3, 2}, {2, 1, 0}},        // reversal
      {{40, 37}, {1, 0}},            // several 32x32 tiles, ragged
      {{3, 4}, {0, 1}}};             // identity
  for (const auto& [in, perm] : cases) {
    OpCase c;
    c.op = "transpose";
    c.label = str_cat(shape_str(in), "_perm", perm);
    c.attrs.set("perm", perm);
    c.inputs = {{in}};
    c.reference = transpose_ref;
    out.push_back(c);
  }
}

void add_concat_split_cases(std::vector<OpCase>& out) {
  const std::vector<std::tuple<std::vector<Shape>, int64_t>> concats = {
      {{{2, 3}, {4, 3}}, 0},          {{{2, 3}, {2, 5}}, 1},
      {{{2, 3}, {2, 1}, {2, 4}}, -1}, {{{2, 1, 4}, {2, 3, 4}, {2, 2, 4}}, 1},
      {{{1, 3, 2}, {2, 3, 2}}, 0},    {{{3, 2, 2}, {3, 2, 5}, {3, 2, 1}}, 2}};
  for (const auto& [shapes, axis] : concats) {
    OpCase c;
    c.op = "concat";
    c.label = str_cat(shapes.size(), "in_axis", axis, "_", shape_str(shapes[0]));
    c.attrs.set("axis", axis);
    for (const Shape& s : shapes) c.inputs.push_back({s});
    c.reference = concat_ref;
    out.push_back(c);
  }
  struct Split {
    Shape in;
    int64_t axis;
    std::vector<int64_t> sizes;
    std::vector<int> checked;
  };
  const Split splits[] = {
      {{7, 3}, 0, {2, 5}, {0, 1}},
      {{2, 9}, 1, {1, 3, 5}, {0, 1, 2}},
      {{2, 4, 3}, 1, {3, 1}, {0, 1}},
      {{3, 2, 5}, -1, {2, 2, 1}, {0, 2}},  // output 1 gets no gradient: zeros in its place
      {{4, 6}, 1, {2, 4}, {1}},            // only the last output is used
      {{5, 2}, 0, {5}, {0}}};              // a single part
  for (const Split& sp : splits) {
    OpCase c;
    c.op = "split";
    c.label =
        str_cat(shape_str(sp.in), "_axis", sp.axis, "_sizes", sp.sizes, "_used", sp.checked.size());
    c.attrs.set("axis", sp.axis);
    c.attrs.set("sizes", sp.sizes);
    c.inputs = {{sp.in}};
    c.reference = split_ref;
    c.checked_outputs = sp.checked;
    out.push_back(c);
  }
}

Error add_error(const std::string& op, const std::vector<Shape>& shapes, const Attrs& a) {
  Graph g;
  std::vector<ValueId> in;
  for (size_t i = 0; i < shapes.size(); ++i)
    in.push_back(g.add_input(str_cat("x", i), DType::kF32, shapes[i]));
  try {
    g.add_op(op, "n", in, a);
  } catch (const Error& e) {
    return e;
  }
  return Error(Status::kOk, "no error");
}

TEST(ShapeOpsShapeRule, ReshapeCountMismatch) {
  Attrs a;
  a.set("shape", std::vector<int64_t>{4, 4});
  Error e = add_error("reshape", {{3, 5}}, a);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
  EXPECT_STREQ(e.what(),
               "reshape 'n': input 0 has shape [3, 5] (15 elements), which cannot be reshaped to "
               "[4, 4] (16 elements)");
  a.set("shape", std::vector<int64_t>{-1, -1});
  e = add_error("reshape", {{3, 5}}, a);
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_STREQ(e.what(), "reshape 'n': attribute shape [-1, -1] has more than one -1");
  a.set("shape", std::vector<int64_t>{4, -1});
  e = add_error("reshape", {{3, 5}}, a);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
}

TEST(ShapeOpsShapeRule, TransposeNeedsPermutation) {
  Attrs a;
  a.set("perm", std::vector<int64_t>{0, 0, 1});
  Error e = add_error("transpose", {{2, 3, 4}}, a);
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_STREQ(
      e.what(),
      "transpose 'n': attribute perm [0, 0, 1] is not a permutation of the 3 dimensions 0..2");
}

TEST(ShapeOpsShapeRule, ConcatMismatchedDims) {
  Attrs a;
  a.set("axis", int64_t{1});
  Error e = add_error("concat", {{2, 3}, {4, 5}}, a);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
  EXPECT_STREQ(e.what(), "concat 'n': input 1 has shape [4, 5], expected [2, *]");
}

TEST(ShapeOpsShapeRule, SplitSizesMustSum) {
  Attrs a;
  a.set("axis", int64_t{1});
  a.set("sizes", std::vector<int64_t>{2, 2});
  Error e = add_error("split", {{3, 5}}, a);
  EXPECT_EQ(e.status(), Status::kShapeMismatch);
  EXPECT_STREQ(e.what(),
               "split 'n': input 0 has shape [3, 5], but attribute sizes [2, 2] sum to 4, expected "
               "5 (dimension 1)");
}

}  // namespace

void add_shape_cases(std::vector<OpCase>& out) {
  add_reshape_cases(out);
  add_transpose_cases(out);
  add_concat_split_cases(out);
}

}  // namespace cohort::test
