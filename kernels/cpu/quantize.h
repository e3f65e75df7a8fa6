// Loops of block-scaled low-bit messages (core/parallel/quantize.h holds the format and its
// contract): values in blocks of `block`, each block one fp32 scale (its largest magnitude over
// the largest level) and one signed level per value, 8 bits (levels -127..127) or 4 bits (levels
// -7..7 stored as level + 8). A 4-bit block of c values stores value j < h = ceil(c / 2) in the
// low nibble of its byte j and value h + j in the high nibble: the two halves of a block pack
// and unpack as two contiguous runs, which vectorises, where pairing neighbours did not.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// Bytes of the levels of n values at `bits` (8 or 4) with blocks of `block` (even) values.
inline int64_t quant_payload_bytes(int64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

// x[n] into one message: at msg the ceil(n / block) scales (fp32, native byte order), at
// msg + levels_at the quant_payload_bytes(n, bits) levels. Each value's level is the nearest to
// x / scale, ties to even. A block holding NaN or Inf gets a NaN scale (and
// zero levels), so decoding it yields NaN for the whole block rather than a wrong number.
void quant_pack(const float* x, int64_t n, int64_t block, int bits, uint8_t* msg, int64_t levels_at);

// out[i] = weight * (the sum over messages r = 0..count-1, in that order, of message r's value
// i), every message packed by quant_pack with the same n, block and bits. Message r's scales
// start at msg[r * stride] and its levels `levels_at` bytes further. One pass over out.
void quant_average(const uint8_t* msg, int64_t stride, int64_t levels_at, int count, int64_t n, int64_t block,
                   int bits, float weight, float* out);

}  // namespace cohort::kernels::cpu
