// Low-bit pseudo-gradients for co2's outer exchange (plan.h outer_bits): each rank sends its
// pseudo-gradient as 8- or 4-bit integers with one fp32 scale per block of kQuantBlock values
// (the block's largest magnitude maps to the largest level); every rank all-gathers the others'
// and sums them decoded, in fp32, in rank order — so every rank gets the same average, bit for
// bit, and nothing but the message itself is low-bit (the anchor, momentum and the average are
// fp32). The one thing to know: a value is off by at most half a level, scale / 2, where
// scale = (the block's largest magnitude) / 127 (8 bits) or / 7 (4 bits).
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
  // acc[i] += the value message `in` carries for i (n floats).
  void add_decoded(const uint8_t* in, float* acc) const;

 private:
  int bits_, levels_;
  size_t n_, blocks_, payload_, bytes_;
};

}  // namespace cohort::parallel
