// Embedding lookup and its gradient on contiguous buffers: weight [V, C] fp32, ids int32 [n].
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// Index of the first id outside [0, V), or -1.
int64_t find_bad_id(const int32_t* ids, int64_t n, int64_t V);
// out[i, :] = weight[ids[i], :]. Ids must have passed find_bad_id.
void embedding_forward(const float* weight, const int32_t* ids, float* out, int64_t n, int64_t C);
// dweight = zeros([V, C]); dweight[ids[i], :] += dy[i, :] for i in order. Deterministic: rows
// are bucketed by id first, then each vocabulary row sums its own positions, in parallel over V.
void embedding_backward(const int32_t* ids, const float* dy, float* dweight, int64_t n, int64_t V, int64_t C);

}  // namespace cohort::kernels::cpu
