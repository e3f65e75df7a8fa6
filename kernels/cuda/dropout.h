// Inverted dropout on the GPU with the CPU's mask (kernels/cpu/dropout.h): element i is kept iff
// its counter-based draw under `key` clears p's threshold, computed on the device from the same
// inline hash, so the GPU keeps exactly the elements the CPU keeps.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// out[i] = keep(key, i) ? x[i] / (1 - p) : 0 for i < n, p in [0, 1) (fp32 math, rounded to bf16
// for kBF16 as the CPU rounds its fp32 result). key: kernels/cpu's dropout_key, computed on the
// host. Used for y (x) and dx (dy) alike; out may alias x.
void dropout_apply(DType type, const void* x, void* out, int64_t n, float p, uint64_t key, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
