// Block-scaled low-bit messages (quantize.h). Every loop below is written so GCC vectorises it
// for the library's AVX2 baseline: the block's largest magnitude as an integer maximum of the
// bit patterns, rounding to the nearest level by adding and subtracting 1.5 * 2^23, the clamp as
// comparisons (no libm calls, no per-element branch on the nibble).
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {

constexpr int64_t kParallelBlocks = 64;  // fewer blocks stay on the calling thread

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The level of v = x / scale (|v| <= levels but for rounding at the edge): the nearest integer,
// ties to even (the default rounding mode), clamped to [-levels, levels]. Exact for |v| < 2^22.
inline int32_t level_of(float v, float levels) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  v = v < -levels ? -levels : v;
  v = v > levels ? levels : v;
  return static_cast<int32_t>((v + kRound) - kRound);
}

// One block of c values: its scale, and its levels into out.
float pack_block(const float* x, int64_t c, int bits, uint8_t* out) {
  uint32_t top = 0;  // |x| as bits: ordered like the magnitudes; above 0x7f800000 a NaN
  for (int64_t i = 0; i < c; ++i) top = std::max(top, bits_of(x[i]) & 0x7fffffffu);
  if (top >= 0x7f800000u) {  // Inf or NaN: the whole block decodes to NaN
    std::memset(out, 0, static_cast<size_t>(quant_payload_bytes(c, bits)));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float levels = bits == 8 ? 127.0f : 7.0f;
  const float scale = float_of(top) / levels;
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  if (bits == 8) {
    for (int64_t i = 0; i < c; ++i) out[i] = static_cast<uint8_t>(level_of(x[i] * inv, levels));
    return scale;
  }
  const int64_t h = (c + 1) / 2, pairs = c - h;  // value j low nibble, value h + j high nibble
  for (int64_t j = 0; j < pairs; ++j) {
    const int32_t lo = level_of(x[j] * inv, levels) + 8, hi = level_of(x[h + j] * inv, levels) + 8;
    out[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
  if (h > pairs) out[h - 1] = static_cast<uint8_t>(level_of(x[h - 1] * inv, levels) + 8);  // c odd
  return scale;
}

// acc[0, c) += scale * (the block's values).
void add_block(const uint8_t* in, int64_t c, int bits, float scale, float* acc) {
  if (bits == 8) {
    for (int64_t i = 0; i < c; ++i) acc[i] += static_cast<float>(static_cast<int8_t>(in[i])) * scale;
    return;
  }
  const int64_t h = (c + 1) / 2, pairs = c - h;
  float* high = acc + h;
  for (int64_t j = 0; j < h; ++j) acc[j] += static_cast<float>((in[j] & 15) - 8) * scale;
  for (int64_t j = 0; j < pairs; ++j) high[j] += static_cast<float>((in[j] >> 4) - 8) * scale;
}

// Where block b's levels start within a message's levels.
int64_t block_levels(int64_t b, int64_t block, int bits) { return quant_payload_bytes(b * block, bits); }

}  // namespace

void quant_pack(const float* x, int64_t n, int64_t block, int bits, uint8_t* msg, int64_t levels_at) {
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, blocks > kParallelBlocks, [&](int64_t b) {
    const int64_t lo = b * block, c = std::min(n, lo + block) - lo;
    const float scale = pack_block(x + lo, c, bits, msg + levels_at + block_levels(b, block, bits));
    std::memcpy(msg + b * static_cast<int64_t>(sizeof(float)), &scale, sizeof scale);
  });
}

void quant_average(const uint8_t* msg, int64_t stride, int64_t levels_at, int count, int64_t n, int64_t block,
                   int bits, float weight, float* out) {
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, blocks > kParallelBlocks, [&](int64_t b) {
    const int64_t lo = b * block, c = std::min(n, lo + block) - lo;
    float* acc = out + lo;
    std::fill(acc, acc + c, 0.0f);  // the block is in cache: zeroing it costs no pass over memory
    for (int r = 0; r < count; ++r) {
      const uint8_t* m = msg + static_cast<int64_t>(r) * stride;
      float scale;
      std::memcpy(&scale, m + b * static_cast<int64_t>(sizeof(float)), sizeof scale);
      add_block(m + levels_at + block_levels(b, block, bits), c, bits, scale, acc);
    }
    if (count > 0)  // no messages: zeros, whatever the weight
      for (int64_t i = 0; i < c; ++i) acc[i] *= weight;
  });
}

}  // namespace cohort::kernels::cpu
