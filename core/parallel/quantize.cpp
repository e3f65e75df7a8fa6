// Block-scaled 8- and 4-bit messages for co2's outer exchange (quantize.h).
#include "core/parallel/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/error.h"

namespace cohort::parallel {

Quantizer::Quantizer(int bits, size_t n) : bits_(bits), levels_(bits == 8 ? 127 : 7), n_(n) {
  COHORT_ASSERT(bits == 8 || bits == 4, "quantizer: ", bits, " bits (8 or 4)");
  blocks_ = (n + kQuantBlock - 1) / kQuantBlock;
  payload_ = bits == 8 ? n : (n + 1) / 2;
  bytes_ = (blocks_ * sizeof(float) + payload_ + 3) / 4 * 4;
}

void Quantizer::pack(const float* x, uint8_t* out) const {
  std::memset(out, 0, bytes_);
  uint8_t* levels = out + blocks_ * sizeof(float);
  for (size_t b = 0; b < blocks_; ++b) {
    const size_t lo = b * kQuantBlock, hi = std::min(n_, lo + kQuantBlock);
    float amax = 0;
    for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / static_cast<float>(levels_);
    std::memcpy(out + b * sizeof(float), &scale, sizeof(float));
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (size_t i = lo; i < hi; ++i) {
      // Nearest level, ties to even; |x| <= amax keeps it in range but for rounding at the edge.
      const long q = std::clamp(std::lrint(x[i] * inv), -static_cast<long>(levels_), static_cast<long>(levels_));
      if (bits_ == 8) {
        levels[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {  // 4 bits: q + 8 in 1..15, two per byte, the even index in the low nibble
        const uint8_t nibble = static_cast<uint8_t>(q + 8);
        levels[i / 2] |= static_cast<uint8_t>(i % 2 ? nibble << 4 : nibble);
      }
    }
  }
}

void Quantizer::add_decoded(const uint8_t* in, float* acc) const {
  const uint8_t* levels = in + blocks_ * sizeof(float);
  for (size_t b = 0; b < blocks_; ++b) {
    float scale;
    std::memcpy(&scale, in + b * sizeof(float), sizeof(float));
    const size_t lo = b * kQuantBlock, hi = std::min(n_, lo + kQuantBlock);
    for (size_t i = lo; i < hi; ++i) {
      const int q = bits_ == 8 ? static_cast<int8_t>(levels[i]) : ((levels[i / 2] >> (i % 2 ? 4 : 0)) & 15) - 8;
      acc[i] += static_cast<float>(q) * scale;
    }
  }
}

}  // namespace cohort::parallel
