// Element-wise reduction kernels used by the collectives: out = a (op) b, with bf16/f16 widened
// to fp32 for the arithmetic and rounded to nearest-even on the way back.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/coll/types.h"

namespace cohort::transport::coll {

// out[i] = a[i] op b[i] for i < count; out may alias a or b. kAvg adds (scale() divides later).
void reduce(void* out, const void* a, const void* b, size_t count, DataType type, ReduceOp op);
// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], in that order; dst may alias any
// source. kAvg divides by n. (f32 sum and avg in one pass; other types pair by pair.)
void reduce_many(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                 ReduceOp op);
// memcpy, with non-temporal stores when `stream` (a destination that will not be read again
// while it could still be in cache: the result of a large collective), fenced before return.
void stream_copy(void* dst, const void* src, size_t bytes, bool stream);
// Whether `bytes` (all the buffers the ranks of a host touch in one collective) exceed half of
// the last-level cache, so that lines written now are evicted before anyone reads them: such
// results go out with non-temporal stores even in place. (4 ranks on 2 cores, 480 MiB L3,
// in-place all-reduce on registered memory: 64 MiB each 4.3-4.6 GB/s streamed against
// 3.8-4.0; 16 MiB each 5.8 cached against 4.1-4.5 streamed.)
bool outgrows_cache(size_t bytes);
// buf[i] *= factor (floating types only).
void scale(void* buf, size_t count, DataType type, double factor);

float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float v);
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float v);

}  // namespace cohort::transport::coll
