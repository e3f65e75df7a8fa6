// Harness cases for the conv family (conv2d, max_pool2d, avg_pool2d) with direct-loop double
// references, and the shape-rule errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

std::vector<int64_t> ints_or(const Attrs& a, const char* name, std::vector<int64_t> dflt) {
  return a.has(name) && !a.get_ints(name).empty() ? a.get_ints(name) : dflt;
}

std::vector<DVec> conv2d_ref(const std::vector<DVec>& in, const std::vector<Shape>& sh, const Attrs& a) {
  const Shape& x = sh[0];
  const Shape& w = sh[1];
  auto st = ints_or(a, "stride", {1, 1}), pd = ints_or(a, "padding", {0, 0}), dl = ints_or(a, "dilation", {1, 1});
  const int64_t G = a.has("groups") ? a.get_int("groups") : 1;
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], O = w[0], Cg = w[1], KH = w[2], KW = w[3];
  const int64_t OH = (H + 2 * pd[0] - dl[0] * (KH - 1) - 1) / st[0] + 1;
  const int64_t OW = (W + 2 * pd[1] - dl[1] * (KW - 1) - 1) / st[1] + 1;
  const int64_t Og = O / G;
  DVec y(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = in.size() > 2 ? in[2][static_cast<size_t>(o)] : 0.0;
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t h = oh * st[0] - pd[0] + kh * dl[0], ww = ow * st[1] - pd[1] + kw * dl[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                int64_t c = (o / Og) * Cg + cg;
                s += in[0][static_cast<size_t>(((n * C + c) * H + h) * W + ww)] *
                     in[1][static_cast<size_t>(((o * Cg + cg) * KH + kh) * KW + kw)];
              }
          y[static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow)] = s;
        }
  return {y};
}

// Pooling reference; max returns the argmax too (as doubles) to mirror the op's outputs.
std::vector<DVec> pool_ref(bool is_max, const std::vector<DVec>& in, const std::vector<Shape>& sh, const Attrs& a) {
  const Shape& x = sh[0];
  auto k = ints_or(a, "kernel", {2, 2}), st = ints_or(a, "stride", k), pd = ints_or(a, "padding", {0, 0});
  const int64_t NC = x[0] * x[1], H = x[2], W = x[3];
  const int64_t OH = (H + 2 * pd[0] - k[0]) / st[0] + 1, OW = (W + 2 * pd[1] - k[1]) / st[1] + 1;
  DVec y(static_cast<size_t>(NC * OH * OW)), arg(y.size());
  for (int64_t p = 0; p < NC; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t count = 0, at = 0;
        for (int64_t h = oh * st[0] - pd[0]; h < oh * st[0] - pd[0] + k[0]; ++h)
          for (int64_t w = ow * st[1] - pd[1]; w < ow * st[1] - pd[1] + k[1]; ++w) {
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = in[0][static_cast<size_t>((p * H + h) * W + w)];
            if (v > best || std::isnan(v)) best = v, at = h * W + w;  // NaN is the maximum (PyTorch)
            sum += v;
            ++count;
          }
        size_t i = static_cast<size_t>((p * OH + oh) * OW + ow);
        y[i] = is_max ? best : sum / static_cast<double>(count);
        arg[i] = static_cast<double>(at);
      }
  if (is_max) return {y, arg};
  return {y};
}

}  // namespace

void add_conv_cases(std::vector<OpCase>& out) {
  struct Conv { const char* label; Shape x, w; bool bias; std::vector<int64_t> stride, pad, dil; int64_t groups; };
  const Conv convs[] = {
      {"basic", {2, 3, 5, 5}, {4, 3, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, 1},
      {"nobias_odd", {1, 2, 7, 6}, {3, 2, 2, 3}, false, {1, 1}, {0, 0}, {1, 1}, 1},
      {"stride2_pad1", {2, 3, 7, 8}, {5, 3, 3, 3}, true, {2, 2}, {1, 1}, {1, 1}, 1},
      {"stride_hw", {1, 2, 9, 7}, {3, 2, 3, 2}, true, {2, 3}, {1, 0}, {1, 1}, 1},
      {"dilation2", {1, 2, 9, 9}, {2, 2, 3, 3}, false, {1, 1}, {2, 2}, {2, 2}, 1},
      {"groups2", {2, 4, 6, 5}, {6, 2, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 2},
      {"depthwise", {1, 3, 6, 6}, {3, 1, 3, 3}, false, {2, 2}, {1, 1}, {1, 1}, 3},
      {"1x1", {3, 5, 4, 3}, {2, 5, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1},
  };
  for (const Conv& cv : convs) {
    OpCase c;
    c.op = "conv2d";
    c.label = cv.label;
    c.attrs.set("stride", cv.stride);
    c.attrs.set("padding", cv.pad);
    c.attrs.set("dilation", cv.dil);
    c.attrs.set("groups", cv.groups);
    c.inputs = {{cv.x}, {cv.w}};
    if (cv.bias) c.inputs.push_back({{cv.w[0]}});
    c.reference = conv2d_ref;
    // oneDNN multiplies the zero padding by the weights too (0 * NaN is NaN), as PyTorch's
    // convolution does: a NaN weight reaches the border outputs the reference leaves out.
    c.nan_may_spread = cv.pad[0] > 0 || cv.pad[1] > 0;
    out.push_back(c);
  }
  struct Pool { const char* label; Shape x; std::vector<int64_t> kernel, stride, pad; };
  const Pool pools[] = {
      {"2x2", {2, 3, 4, 6}, {2, 2}, {}, {0, 0}},
      {"odd_floor", {1, 2, 7, 5}, {2, 2}, {}, {0, 0}},
      {"3x3_s2_pad1", {2, 2, 7, 8}, {3, 3}, {2, 2}, {1, 1}},
      {"overlap_s1", {1, 3, 5, 5}, {3, 2}, {1, 1}, {1, 0}},
      {"rect_stride", {1, 2, 9, 6}, {2, 3}, {3, 2}, {0, 1}},
  };
  for (bool is_max : {true, false})
    for (const Pool& pl : pools) {
      OpCase c;
      c.op = is_max ? "max_pool2d" : "avg_pool2d";
      c.label = pl.label;
      c.attrs.set("kernel", pl.kernel);
      c.attrs.set("stride", pl.stride);
      c.attrs.set("padding", pl.pad);
      c.inputs = {{pl.x}};
      c.reference = [is_max](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs& a) {
        return pool_ref(is_max, in, s, a);
      };
      out.push_back(c);
    }
}

namespace {

std::string add_error(const std::string& op, const std::vector<Shape>& shapes, const Attrs& attrs, Status* st) {
  Graph g;
  std::vector<ValueId> in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(g.add_input(str_cat("in", i), DType::kF32, shapes[i]));
  try {
    g.add_op(op, "c1", in, attrs);
  } catch (const Error& e) {
    *st = e.status();
    return e.what();
  }
  *st = Status::kOk;
  return "";
}

TEST(ConvShapeRule, RejectsChannelsSizesAndAttributes) {
  Status st;
  std::string msg = add_error("conv2d", {{2, 3, 8, 8}, {4, 5, 3, 3}}, Attrs(), &st);
  EXPECT_EQ(st, Status::kShapeMismatch);
  EXPECT_NE(msg.find("conv2d 'c1': input 1 has shape [4, 5, 3, 3], expected [*, 3, *, *]"), std::string::npos) << msg;
  msg = add_error("conv2d", {{2, 3, 2, 8}, {4, 3, 3, 3}}, Attrs(), &st);
  EXPECT_EQ(st, Status::kShapeMismatch);
  EXPECT_NE(msg.find("too small for a 3x3 kernel"), std::string::npos) << msg;
  Attrs bad;
  bad.set("stride", std::vector<int64_t>{0, 1});
  msg = add_error("conv2d", {{2, 3, 8, 8}, {4, 3, 3, 3}}, bad, &st);
  EXPECT_EQ(st, Status::kInvalidArgument);
  EXPECT_NE(msg.find("attribute 'stride' is [0, 1]"), std::string::npos) << msg;
  msg = add_error("conv2d", {{2, 3, 8, 8}, {4, 3, 3, 3}, {3}}, Attrs(), &st);
  EXPECT_NE(msg.find("input 2 has shape [3], expected [4]"), std::string::npos) << msg;
}

TEST(ConvShapeRule, PoolRejectsSmallInputAndWidePadding) {
  Status st;
  std::string msg = add_error("max_pool2d", {{1, 1, 1, 4}}, Attrs(), &st);
  EXPECT_EQ(st, Status::kShapeMismatch);
  EXPECT_NE(msg.find("max_pool2d 'c1': input 0 has shape [1, 1, 1, 4], smaller than the 2x2"), std::string::npos)
      << msg;
  Attrs pad;
  pad.set("padding", std::vector<int64_t>{2, 0});
  msg = add_error("avg_pool2d", {{1, 1, 8, 8}}, pad, &st);
  EXPECT_EQ(st, Status::kInvalidArgument);
  EXPECT_NE(msg.find("attribute 'padding'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cohort::test
