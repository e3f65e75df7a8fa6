// Index checks done on the GPU without a host round trip: a kernel looks for the first element
// of an int32 tensor outside [0, V) (an allowed `skip` value aside, e.g. ignore_index) and
// records it in a 64-bit slot in device memory as (position << 32 | value), keeping the smallest,
// so the first bad position wins whatever the thread order. The caller reads the slot later,
// together with other checks (core/device: DeferredChecks).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// The slot's value when nothing bad was found (what it must be set to beforehand).
constexpr uint64_t kNoBadIndex = ~uint64_t{0};

// Records into *slot (device memory) the first v[i] outside [0, V) that is not `skip` (pass a
// value outside [0, V) that cannot occur, e.g. INT64_MIN, for none). n < 2^32.
void find_bad_index(const int32_t* v, int64_t n, int64_t V, int64_t skip, uint64_t* slot,
                    cudaStream_t stream);

// The position and value a slot recorded (only meaningful when it is not kNoBadIndex).
inline int64_t bad_index_position(uint64_t slot) { return static_cast<int64_t>(slot >> 32); }
inline int32_t bad_index_value(uint64_t slot) {
  return static_cast<int32_t>(static_cast<uint32_t>(slot & 0xFFFFFFFFu));
}

}  // namespace cohort::kernels::cuda
