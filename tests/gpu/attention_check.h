// Error statistics for the attention tests (the GPU driver's attention_test.cpp and the host
// emulation's attention_emulated_test.cpp): relative L2 error, the largest absolute error and
// where it sits, named in the tensor's own coordinates, so a failure in a device log says which
// batch, token, head, dim (and q/k/v third) went wrong without a rerun; and the tolerances both
// tests share.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cohort::gpu_test {

// Tolerances of attention against the double-precision reference: out and dqkv as relative L2
// errors; lse as the RMS of its absolute error, since lse is a log (an absolute error e is a
// relative error e of exp(lse)) and can sit near 0, where a relative error means nothing.
struct AttentionTolerance {
  double out, lse_rms, dqkv;
};
// fp32 storage, TF32 products (the tensor-core kernels): each product's inputs are rounded to
// a 10-bit mantissa, unit roundoff u = 2^-11 = 4.9e-4, so a score carries an absolute error of
// about u * scale * sqrt(D) * |q_d k_d| (~5e-4 here) and the output a relative one of about u;
// the backward's dS = P (dP - delta) adds no amplification at these magnitudes. Seen on the
// host emulation (fresh random inputs in [-2, 2), D 64 and 128): out 1.8e-4..3.9e-4, dqkv
// 2.0e-4..4.9e-4, lse RMS 7.9e-5..4.7e-4 (the most at T = 1, a single score). Tolerances are
// 4-8x the worst seen, and still 5x under the smallest error a wrong layout, mask or pipeline
// gave there (>= 1.7e-2 relative).
constexpr AttentionTolerance kAttnTolTf32{2e-3, 2e-3, 4e-3};
// bf16 storage: u = 2^-8 = 3.9e-3; products of bf16 are exact in fp32, so lse is fp32-accurate
// (RMS 2e-7 seen); out and dqkv carry the bf16 rounding of P, dS and the result (1.8e-3..2.7e-3).
constexpr AttentionTolerance kAttnTolBf16{1e-2, 2e-5, 2e-2};
// fp32 storage, fp32 products (the CUDA-core kernels: other head sizes, or TF32 not allowed).
constexpr AttentionTolerance kAttnTolFp32{1e-5, 2e-5, 1e-5};

struct ErrorStats {
  double rel_l2 = 0.0;    // ||got - ref|| / ||ref|| (infinite when a value is not finite)
  double max_abs = 0.0;   // largest |got - ref|
  size_t worst = 0;       // its index
  size_t nonfinite = 0;   // elements that are NaN or inf where the reference is finite
  double ref_norm = 0.0;  // ||ref|| / sqrt(n): the typical magnitude
  double rms_abs = 0.0;   // ||got - ref|| / sqrt(n) (infinite when a value is not finite)
};

inline ErrorStats error_stats(const std::vector<float>& got, const std::vector<double>& ref) {
  ErrorStats e;
  if (got.size() != ref.size()) {
    e.rel_l2 = INFINITY;
    return e;
  }
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
      if (e.nonfinite++ == 0) e.worst = i;
      e.max_abs = INFINITY;
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (e.nonfinite == 0 && d > e.max_abs) {
      e.max_abs = d;
      e.worst = i;
    }
    num += d * d;
    den += ref[i] * ref[i];
  }
  e.ref_norm = ref.empty() ? 0.0 : std::sqrt(den / static_cast<double>(ref.size()));
  e.rel_l2 = e.nonfinite ? INFINITY : (den == 0.0 ? std::sqrt(num) : std::sqrt(num / den));
  e.rms_abs = e.nonfinite ? INFINITY : (ref.empty() ? 0.0 : std::sqrt(num / ref.size()));
  return e;
}

// Flat index i of a [B, T, parts * H * D] tensor (parts 3: qkv, 1: out) as "b 0 t 37 k h 2 d 5".
inline std::string where_btc(size_t i, int64_t T, int64_t H, int64_t D, int parts) {
  const int64_t C = H * D, row = static_cast<int64_t>(i) / (parts * C);
  const int64_t col = static_cast<int64_t>(i) - row * parts * C, part = col / C;
  const int64_t h = (col - part * C) / D, d = col - part * C - h * D;
  char buf[96];
  std::snprintf(buf, sizeof buf, "b %lld t %lld%s h %lld d %lld", static_cast<long long>(row / T),
                static_cast<long long>(row % T),
                parts == 1 ? "" : (part == 0 ? " q" : (part == 1 ? " k" : " v")),
                static_cast<long long>(h), static_cast<long long>(d));
  return buf;
}

// Flat index i of a [B, H, T] tensor (lse, delta).
inline std::string where_bht(size_t i, int64_t H, int64_t T) {
  const int64_t bh = static_cast<int64_t>(i) / T;
  char buf[64];
  std::snprintf(buf, sizeof buf, "b %lld h %lld t %lld", static_cast<long long>(bh / H),
                static_cast<long long>(bh % H),
                static_cast<long long>(static_cast<int64_t>(i) % T));
  return buf;
}

// One line: "rel_l2 1.2e-04, rms |err| 5.0e-05, max |err| 3.1e-03 at b 0 t 37 k h 2 d 5 (got
// 0.1234, want 0.1265), typical |ref| 0.41"; non-finite outputs are counted first.
inline std::string describe(const ErrorStats& e, const std::vector<float>& got,
                            const std::vector<double>& ref, const std::string& where) {
  char buf[320];
  if (e.nonfinite)
    std::snprintf(buf, sizeof buf, "%zu non-finite outputs, first at %s (got %g, want %.6g)",
                  e.nonfinite, where.c_str(), static_cast<double>(got[e.worst]), ref[e.worst]);
  else
    std::snprintf(buf, sizeof buf,
                  "rel_l2 %.3e, rms |err| %.3e, max |err| %.3e at %s (got %.7g, want %.7g), "
                  "typical |ref| %.3g",
                  e.rel_l2, e.rms_abs, e.max_abs, where.c_str(), static_cast<double>(got[e.worst]),
                  ref[e.worst], e.ref_norm);
  return buf;
}

}  // namespace cohort::gpu_test
