// A tiny check helper for the GPU test driver (no GoogleTest: the driver must build on a GPU
// machine with nothing but the CUDA toolkit). Comparisons use the relative L2 error
// ||out - ref|| / ||ref|| (NaN never passes); failures are counted and printed with the seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cohort::gpu_test {

struct Context {
  uint64_t seed = 0;
  int checks = 0;
  int failures = 0;
  std::string test;  // current test name
};

inline double rel_l2(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Records one comparison; prints every check so the device log reads as a table.
inline bool expect_close(Context& c, const char* what, const std::vector<float>& out,
                         const std::vector<double>& ref, double tol) {
  const double err = rel_l2(out, ref);
  const bool ok = err <= tol;  // false for NaN
  ++c.checks;
  if (!ok) ++c.failures;
  std::printf("  %-4s %-28s %-34s rel_l2 %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", c.test.c_str(),
              what, err, tol);
  return ok;
}

inline bool expect_true(Context& c, const char* what, bool cond) {
  ++c.checks;
  if (!cond) ++c.failures;
  std::printf("  %-4s %-28s %s\n", cond ? "ok" : "FAIL", c.test.c_str(), what);
  return cond;
}

// Uniform random floats in [lo, hi) from the context's generator.
inline std::vector<float> random_vector(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// bf16 round to nearest even (as kernels/cpu and __float2bfloat16_rn do) and back.
inline uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float from_bf16(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = from_bf16(to_bf16(x));
  return v;
}
inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace cohort::gpu_test
