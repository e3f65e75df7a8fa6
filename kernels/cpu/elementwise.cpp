// Element-wise loops. Fast paths for equal shapes and for a trailing-suffix operand (bias-like);
// a general strided path otherwise.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/threads.h"
#include "kernels/cpu/vec_math.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

template <typename F>
void binary_apply(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd: f([](float x, float y) { return x + y; }); break;
    case BinaryOp::kSub: f([](float x, float y) { return x - y; }); break;
    case BinaryOp::kMul: f([](float x, float y) { return x * y; }); break;
  }
}

// Element strides of `shape` laid against out_shape's dimensions; 0 where broadcast.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    size_t i = shape.size() - 1 - k;
    size_t o = out.size() - 1 - k;
    st[o] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return st;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// True when `shape` equals the trailing dims of `out` (after dropping leading 1s).
bool is_suffix(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  size_t lead = 0;
  while (lead < shape.size() && shape[lead] == 1) ++lead;
  size_t n = shape.size() - lead;
  if (n > out.size()) return false;
  for (size_t k = 0; k < n; ++k)
    if (shape[lead + k] != out[out.size() - n + k]) return false;
  return true;
}
}  // namespace

void binary(BinaryOp op, const float* a, const std::vector<int64_t>& a_shape, const float* b,
            const std::vector<int64_t>& b_shape, float* out, const std::vector<int64_t>& out_shape) {
  const int64_t n = numel(out_shape);
  const int64_t na = numel(a_shape), nb = numel(b_shape);
  binary_apply(op, [&](auto f) {
    if (na == n && nb == n) {
      parallel_for(n, n > kParallelMin, [&](int64_t i) { out[i] = f(a[i], b[i]); });
    } else if (na == n && is_suffix(b_shape, out_shape)) {
      parallel_for(n, n > kParallelMin, [&](int64_t i) { out[i] = f(a[i], b[i % nb]); });
    } else if (nb == n && is_suffix(a_shape, out_shape)) {
      parallel_for(n, n > kParallelMin, [&](int64_t i) { out[i] = f(a[i % na], b[i]); });
    } else {
      const auto sa = broadcast_strides(a_shape, out_shape), sb = broadcast_strides(b_shape, out_shape);
      const size_t r = out_shape.size();
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, ia = 0, ib = 0;
        for (size_t d = r; d-- > 0;) {
          int64_t c = rem % out_shape[d];
          rem /= out_shape[d];
          ia += c * sa[d];
          ib += c * sb[d];
        }
        out[i] = f(a[ia], b[ib]);
      }
    }
  });
}

void scale(const float* x, float factor, float* out, int64_t n) {
  parallel_for(n, n > kParallelMin, [&](int64_t i) { out[i] = x[i] * factor; });
}

namespace {
// GELU, tanh approximation (Hendrycks & Gimpel 2016): 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3).
// Forward uses the identity 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)): one exponential and one
// division, where tanh costs those plus its sign and clamp. e^(-2u) is taken at no more than 88
// (e^88 is finite), which gives -0 for large negative x as GELU does; NaN stays NaN.
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline float gelu_u(float x) { return kGeluK * (x + 0.044715f * x * x * x); }
inline float gelu_du(float x) { return kGeluK * (1.0f + 3.0f * 0.044715f * x * x); }
inline float gelu_exp(float u) { return exp_approx(std::min(-2.0f * u, 88.0f)); }  // e^(-2u), capped
inline float gelu(float x) { return x / (1.0f + gelu_exp(gelu_u(x))); }
// The derivative keeps tanh: its saturation to exactly +-1 makes the (1 - t^2) term exactly 0 for
// large |x|, where the logistic form would multiply a tiny tail by a huge x^2.
inline float gelu_grad(float x) {
  const float t = tanh_approx(gelu_u(x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * gelu_du(x);
}

// GELU and its derivative from one exponential, for a backward pass that multiplies by the saved
// derivative. With s = 1 / (1 + e^(-2u)) = (1 + tanh u) / 2: gelu = x s and, since
// 1 - tanh^2 u = 4 s (1 - s), gelu' = s + 2 x s (1 - s) u'. s (1 - s) is exactly 0 where s
// saturates to 1, and for very negative x the product is taken only where it is not 0, so a
// huge x u' never meets s (1 - s) = 0 (that would be a NaN where tanh's form gives 0 too).
inline void gelu_and_grad(float x, float& y, float& dydx) {
  const float s = 1.0f / (1.0f + gelu_exp(gelu_u(x)));
  const float q = s * (1.0f - s);
  y = x * s;
  dydx = s + (q == 0.0f ? 0.0f : 2.0f * x * gelu_du(x) * q);
}

COHORT_VECTOR_CLONES void gelu_and_grad_span(const float* x, float* y, float* dydx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gelu_and_grad(x[i], y[i], dydx[i]);
}
COHORT_VECTOR_CLONES void gelu_span(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(x[i]);
}
COHORT_VECTOR_CLONES void gelu_grad_span(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
}
COHORT_VECTOR_CLONES void tanh_span(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = tanh_approx(x[i]);
}
}  // namespace

void unary(UnaryOp op, const float* x, float* out, int64_t n) {
  switch (op) {
    case UnaryOp::kRelu:  // NaN stays NaN, as in PyTorch: `x > 0 ? x : 0` would hide it as 0
      parallel_for(n, n > kParallelMin, [&](int64_t i) { out[i] = x[i] <= 0.0f ? 0.0f : x[i]; });
      break;
    case UnaryOp::kGelu:
      parallel_spans(n, kParallelMin, [&](int64_t b, int64_t e) { gelu_span(x + b, out + b, e - b); });
      break;
    case UnaryOp::kTanh:
      parallel_spans(n, kParallelMin, [&](int64_t b, int64_t e) { tanh_span(x + b, out + b, e - b); });
      break;
  }
}

void gelu_with_grad(const float* x, float* y, float* dydx, int64_t n) {
  parallel_spans(n, kParallelMin, [&](int64_t b, int64_t e) { gelu_and_grad_span(x + b, y + b, dydx + b, e - b); });
}

void unary_grad(UnaryOp op, const float* x, const float* dy, float* dx, int64_t n) {
  switch (op) {
    case UnaryOp::kRelu:  // as PyTorch's threshold_backward: dy passes where x is NaN
      parallel_for(n, n > kParallelMin, [&](int64_t i) { dx[i] = x[i] <= 0.0f ? 0.0f : dy[i]; });
      break;
    case UnaryOp::kGelu:
      parallel_spans(n, kParallelMin, [&](int64_t b, int64_t e) { gelu_grad_span(x + b, dy + b, dx + b, e - b); });
      break;
    case UnaryOp::kTanh:  // x holds y = tanh(input)
      parallel_for(n, n > kParallelMin, [&](int64_t i) { dx[i] = dy[i] * (1.0f - x[i] * x[i]); });
      break;
  }
}

namespace {
// out[j] += sum over rows of x[r * m + j]: four rows per pass over out, so out is read and
// written a quarter as often as the rows are read.
COHORT_VECTOR_CLONES void sum_rows(const float* x, int64_t rows, int64_t m, float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *a = x + r * m, *b = a + m, *c = b + m, *d = c + m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) out[j] += (a[j] + b[j]) + (c[j] + d[j]);
  }
  for (; r < rows; ++r) {
    const float* a = x + r * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) out[j] += a[j];
  }
}
}  // namespace

void reduce_to_shape(const float* x, const std::vector<int64_t>& in_shape, float* out,
                     const std::vector<int64_t>& out_shape) {
  const int64_t n = numel(in_shape), m = numel(out_shape);
  for (int64_t j = 0; j < m; ++j) out[j] = 0.0f;
  if (m == n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
    return;
  }
  if (is_suffix(out_shape, in_shape)) {  // bias gradient: sum over leading rows
    sum_rows(x, n / m, m, out);
    return;
  }
  const auto so = broadcast_strides(out_shape, in_shape);
  const size_t r = in_shape.size();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, io = 0;
    for (size_t d = r; d-- > 0;) {
      int64_t c = rem % in_shape[d];
      rem /= in_shape[d];
      io += c * so[d];
    }
    out[io] += x[i];
  }
}

void fill(float* out, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

}  // namespace cohort::kernels::cpu
