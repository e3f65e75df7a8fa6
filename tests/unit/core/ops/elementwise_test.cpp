// Harness cases for the element-wise family, with double-precision references.
#include <cmath>

#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {

namespace {

// Broadcast index of flat output position i into an operand of shape `s` within `out`.
int64_t bcast_index(int64_t i, const Shape& s, const Shape& out) {
  int64_t idx = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    size_t od = out.size() - 1 - k;
    int64_t c = i % out[od];
    i /= out[od];
    if (k < s.size()) {
      int64_t e = s[s.size() - 1 - k];
      if (e != 1) idx += c * stride;
      stride *= e;
    }
  }
  return idx;
}

Shape bshape(const Shape& a, const Shape& b) {
  Shape o(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < o.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1, db = k < b.size() ? b[b.size() - 1 - k] : 1;
    o[o.size() - 1 - k] = std::max(da, db);
  }
  return o;
}

template <typename F>
Reference binary_ref(F f) {
  return [f](const std::vector<DVec>& in, const std::vector<Shape>& s, const Attrs&) {
    Shape o = bshape(s[0], s[1]);
    DVec out(static_cast<size_t>(numel(o)));
    for (int64_t i = 0; i < numel(o); ++i)
      out[static_cast<size_t>(i)] = f(in[0][static_cast<size_t>(bcast_index(i, s[0], o))],
                                      in[1][static_cast<size_t>(bcast_index(i, s[1], o))]);
    return std::vector<DVec>{out};
  };
}

template <typename F>
Reference unary_ref(F f) {
  return [f](const std::vector<DVec>& in, const std::vector<Shape>&, const Attrs& a) {
    DVec out(in[0].size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(in[0][i], a);
    return std::vector<DVec>{out};
  };
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

void add_elementwise_cases(std::vector<OpCase>& out) {
  const std::vector<std::pair<std::string, std::vector<Shape>>> shapes = {
      {"same", {{3, 5}, {3, 5}}},
      {"bias", {{4, 6}, {6}}},
      {"rows", {{2, 3, 4}, {2, 1, 4}}},
      {"lhs_bcast", {{1, 7}, {5, 7}}},
  };
  struct Bin { const char* name; double (*f)(double, double); };
  const Bin bins[] = {{"add", [](double a, double b) { return a + b; }},
                      {"sub", [](double a, double b) { return a - b; }},
                      {"mul", [](double a, double b) { return a * b; }}};
  for (const auto& bin : bins)
    for (const auto& [label, sh] : shapes) {
      OpCase c;
      c.op = bin.name;
      c.label = label;
      c.inputs = {{sh[0]}, {sh[1]}};
      c.reference = binary_ref(bin.f);
      out.push_back(c);
    }
  for (Shape s : {Shape{7}, Shape{3, 4, 5}}) {
    OpCase c;
    c.op = "scale";
    c.label = shape_str(s);
    c.attrs.set("factor", -2.5);
    c.inputs = {{s}};
    c.reference = unary_ref([](double x, const Attrs& a) { return x * a.get_float("factor"); });
    out.push_back(c);

    c.op = "relu";
    c.attrs = Attrs();
    c.reference = unary_ref([](double x, const Attrs&) { return x <= 0 ? 0 : x; });  // NaN stays NaN
    out.push_back(c);

    c.op = "gelu";
    c.inputs = {{s, DType::kF32, -3, 3}};
    c.reference = unary_ref([](double x, const Attrs&) { return gelu(x); });
    out.push_back(c);

    c.op = "tanh";
    c.reference = unary_ref([](double x, const Attrs&) { return std::tanh(x); });
    out.push_back(c);

    c.op = "sum";
    c.inputs = {{s}};
    c.reference = [](const std::vector<DVec>& in, const std::vector<Shape>&, const Attrs&) {
      double t = 0;
      for (double x : in[0]) t += x;
      return std::vector<DVec>{{t}};
    };
    out.push_back(c);

    c.op = "mean";
    c.reference = [](const std::vector<DVec>& in, const std::vector<Shape>&, const Attrs&) {
      double t = 0;
      for (double x : in[0]) t += x;
      return std::vector<DVec>{{t / static_cast<double>(in[0].size())}};
    };
    out.push_back(c);
  }
}

}  // namespace cohort::test
