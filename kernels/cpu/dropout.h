// Dropout mask from a counter-based hash: element i of a tensor is kept iff
// hash(key, i) >= p, where key mixes (attribute seed, run seed, step, forward node id). The mask
// is a pure function of those numbers, so the backward pass regenerates it instead of storing it.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

uint64_t dropout_key(uint64_t attr_seed, uint64_t run_seed, int64_t step, int64_t node_id);
// out[i] = keep(key, i) ? x[i] / (1 - p) : 0, for p in [0, 1). Used for y (x) and dx (dy) alike.
void dropout_apply(const float* x, float* out, int64_t n, float p, uint64_t key);

}  // namespace cohort::kernels::cpu
