// Block-scaled 8- and 4-bit messages for co2's outer exchange (quantize.h).
#include "core/parallel/quantize.h"

#include <cstring>

#include "core/base/error.h"
#include "kernels/cpu/quantize.h"

namespace cohort::parallel {

Quantizer::Quantizer(int bits, size_t n) : bits_(bits), n_(n) {
  COHORT_ASSERT(bits == 8 || bits == 4, "quantizer: ", bits, " bits (8 or 4)");
  blocks_ = (n + kQuantBlock - 1) / kQuantBlock;
  payload_ = static_cast<size_t>(kernels::cpu::quant_payload_bytes(static_cast<int64_t>(n), bits));
  bytes_ = (blocks_ * sizeof(float) + payload_ + 3) / 4 * 4;
}

void Quantizer::pack(const float* x, uint8_t* out) const {
  if (bytes_ > levels_at() + payload_) std::memset(out + levels_at() + payload_, 0, bytes_ - levels_at() - payload_);
  kernels::cpu::quant_pack(x, static_cast<int64_t>(n_), kQuantBlock, bits_, out, static_cast<int64_t>(levels_at()));
}

void Quantizer::average(const uint8_t* msgs, int count, float* out) const {
  COHORT_ASSERT(count >= 1, "quantizer: an average of ", count, " messages");
  kernels::cpu::quant_average(msgs, static_cast<int64_t>(bytes_), static_cast<int64_t>(levels_at()), count,
                              static_cast<int64_t>(n_), kQuantBlock, bits_, 1.0f / static_cast<float>(count), out);
}

}  // namespace cohort::parallel
