// Low-bit pseudo-gradients for co2's outer exchange (plan.h outer_bits): each rank sends its
// pseudo-gradient as 8- or 4-bit integers with one fp32 scale per block of kQuantBlock values
// (the block's largest magnitude maps to the largest level); every rank all-gathers the others'
// and averages them decoded, in fp32, in rank order — so every rank gets the same average, bit for
// bit, and nothing but the message itself is low-bit (the anchor, momentum and the average are
// fp32). The one thing to know: a value is off by at most half a level, scale / 2, where
// scale = (the block's largest magnitude) / 127 (8 bits) or / 7 (4 bits); a block holding NaN or Inf
// decodes to NaN throughout. The layout of the levels is kernels/cpu/quantize.h's. co2 adds each
// rank's rounding error to its next message (DataParallel's residual_, error feedback).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::parallel {

constexpr size_t kQuantBlock = 256;

class Quantizer {
 public:
  // bits 8 or 4; n values per message.
  Quantizer(int bits, size_t n);
  // Bytes of one message: the blocks' fp32 scales, then the levels, padded to 4 bytes.
  size_t bytes() const { return bytes_; }
  // x (n floats) into out (bytes()).
  void pack(const float* x, uint8_t* out) const;
  // out[i] = the average of the values `count` (>= 1) messages carry for i, summed in message
  // order then divided by count (n floats); message r at msgs + r * bytes(), as all_gather lays
  // them out. Every rank that averages the same messages gets the same bits.
  void average(const uint8_t* msgs, int count, float* out) const;

 private:
  size_t levels_at() const { return blocks_ * sizeof(float); }

  int bits_;
  size_t n_, blocks_, payload_, bytes_;
};

}  // namespace cohort::parallel
