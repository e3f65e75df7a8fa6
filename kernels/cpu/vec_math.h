// Vectorisable elementary functions for our loops: the compiler turns these into SIMD code,
// where calls into libm (std::exp, std::tanh) stay scalar and dominated GELU's cost.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// A loop marked COHORT_VECTOR_CLONES is compiled twice: for x86-64-v4 (512-bit vectors) and for
// the library's baseline (x86-64-v3, AVX2); the dynamic loader picks one per CPU at start-up, so
// the library still runs on AVX2-only machines. Marked are the memory-light loops whose time is
// arithmetic (GELU, the optimizer, softmax rows): 16 lanes instead of 8 cut GELU's cost ~30%.
// GCC refuses the attribute on templates and lambdas: mark a plain function per loop.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COHORT_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define COHORT_VECTOR_CLONES
#endif

namespace cohort::kernels::cpu {

// bf16 is the upper half of an fp32: widening is exact; narrowing rounds to nearest even and
// keeps a NaN a NaN (a quiet one). The kernels' own copy of core/tensor's conversions (kernels
// sit below core and do not include it).
inline float widen_bf16(uint16_t v) {
  const uint32_t bits = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t round_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// e^x for x <= 88 (softmax only ever needs x <= 0): 2^n * e^r with r = x - n ln2 in
// [-ln2/2, ln2/2] and a degree-6 Taylor polynomial for e^r (relative error < 3e-7 on [-87, 0]);
// x < -87 (including -inf) gives exactly 0; NaN stays NaN. Unlike std::exp it vectorises: the
// clamp is an integer min on the bit pattern, which GCC if-converts even under -ftrapping-math.
inline float exp_approx(float x) {
  uint32_t xb;
  std::memcpy(&xb, &x, sizeof xb);
  const uint32_t kLow = 0xC2AE0000u;       // bits of -87.0f; larger unsigned = more negative float
  const bool under = xb > kLow;  // also true for NaNs with the sign bit: patched up at the end
  // Every NaN must stay NaN (those without the sign bit flow through the polynomial as NaN).
  const uint32_t nan_bits =
      static_cast<uint32_t>(-static_cast<int32_t>((xb & 0x7FFFFFFFu) > 0x7F800000u)) & 0x7FC00000u;
  xb = under ? kLow : xb;
  std::memcpy(&x, &xb, sizeof x);
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float t = x * 1.44269504088896341f + kRound;  // n = round(x / ln2) in t's low mantissa bits
  const float n = t - kRound;
  const float r = x - n * 0.693145751953125f - n * 1.42860682030941723212e-6f;  // ln2 split hi + lo
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as a float's exponent field, taken from t's bits in unsigned arithmetic: no float-to-int
  // conversion, which would be undefined for the NaN a NaN input carries this far.
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  uint32_t bits = (tb - 0x4B400000u + 127u) << 23;
  bits = under ? 0u : bits;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  uint32_t yb;
  std::memcpy(&yb, &y, sizeof yb);
  yb |= nan_bits;
  std::memcpy(&y, &yb, sizeof y);
  return y;
}

// tanh(x) = sign(x) (1 - e^(-2|x|)) / (1 + e^(-2|x|)); |x| is clamped at 9, where tanh is 1 to
// float precision. Absolute error < 1e-7 (relative error grows near 0, where tanh(x) ~ x is tiny
// and only the absolute error matters to GELU). NaN stays NaN.
inline float tanh_approx(float x) {
  // Branch-free so loops over it vectorise: float compares and selects stay branches under
  // -ftrapping-math, so |x|, the clamp, the sign and the NaN case work on the bit patterns.
  uint32_t xb;
  std::memcpy(&xb, &x, sizeof xb);
  const uint32_t ab = xb & 0x7FFFFFFFu;
  const uint32_t kNine = 0x41100000u;  // bits of 9.0f; for non-negative floats bits order as values
  const uint32_t cb = ab > kNine ? kNine : ab;
  float c;
  std::memcpy(&c, &cb, sizeof c);
  const float t = exp_approx(-2.0f * c);
  const float y = (1.0f - t) / (1.0f + t);
  uint32_t yb;
  std::memcpy(&yb, &y, sizeof yb);
  yb |= xb & 0x80000000u;                 // the sign of x
  yb = ab > 0x7F800000u ? xb : yb;        // NaN stays NaN
  float out;
  std::memcpy(&out, &yb, sizeof out);
  return out;
}

}  // namespace cohort::kernels::cpu
