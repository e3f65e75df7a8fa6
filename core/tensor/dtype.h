// Element types and devices. bf16 is stored as the upper 16 bits of an fp32 (round to nearest
// even on the way down); CPU math on bf16 accumulates in fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace cohort {

// Numbers equal the C ABI's cohort_dtype.
enum class DType : int { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3, kF16 = 4 };
enum class Device : int { kCpu = 0, kCuda = 1 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool dtype_is_float(DType t);
bool dtype_from_int(int value, DType* out);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void bf16_to_f32_n(const uint16_t* in, float* out, size_t n);
void f32_to_bf16_n(const float* in, uint16_t* out, size_t n);

}  // namespace cohort
