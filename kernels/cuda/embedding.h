// Embedding lookup and its gradient on the GPU, with the semantics of kernels/cpu/embedding.h:
// weight [V, C] of `type`, ids int32 [n], dweight fp32 [V, C].
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// out[i, :] = weight[ids[i], :]; a row whose id is outside [0, V) is filled with NaN (instead of
// reading out of bounds), so a bad id shows up in the loss.
void embedding_forward(DType type, const void* weight, const int32_t* ids, void* out, int64_t n,
                       int64_t V, int64_t C, cudaStream_t stream);

// dweight[ids[i], :] += dy[i, :] for every i with a valid id (dweight is accumulated into: zero
// it first for a plain gradient). fp32 atomics: the order of additions to one row varies, so the
// last bits can differ between runs (TODO: a sorted, deterministic variant like the CPU's).
void embedding_backward(DType type, const int32_t* ids, const void* dy, float* dweight, int64_t n,
                        int64_t V, int64_t C, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
