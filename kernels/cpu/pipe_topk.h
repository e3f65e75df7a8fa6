// Loops of the top-k pipeline operators (core/ops/pipe_topk.cpp): choosing the k entries of
// largest magnitude, gathering values at chosen indices and scattering them back into a dense
// buffer. Elements are f32 or bf16 (2 or 4 bytes, moved as raw bits, never rounded); indices are
// flat int32 positions, strictly ascending.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::kernels::cpu {

// The k (1 <= k <= n) entries of x[n] of largest magnitude: their flat indices, ascending, to
// idx[k] and their values (x's element type) to values[k]. x holds f32 (elem_bytes 4) or bf16
// (elem_bytes 2). O(n): std::nth_element on the magnitudes (a scratch buffer per thread, kept
// between calls), then one scan in index order. Ties at the k-th magnitude go to the lowest
// indices; NaN counts as larger than every number (so it crosses the cut and shows).
void topk_select(const void* x, size_t elem_bytes, int64_t n, int64_t k, int32_t* idx, void* values);

// dst[j] = src[idx[j]] for j < k.
void gather_at(const void* src, size_t elem_bytes, const int32_t* idx, int64_t k, void* dst);

// dense[n] = zeros except dense[idx[j]] = values[j].
void scatter_at(const void* values, size_t elem_bytes, const int32_t* idx, int64_t k, void* dense, int64_t n);

// The same scatter in place: on entry the last k elements of dense[n] hold the values, in the
// order of idx; on return dense is zeros except dense[idx[j]] = that value. Safe because idx is
// strictly ascending: idx[j] <= n - k + j, so writing position idx[j] never overwrites a value
// not yet moved (the one of j' > j sits at n - k + j' > idx[j]).
void scatter_from_tail(void* dense, size_t elem_bytes, const int32_t* idx, int64_t k, int64_t n);

// The bitmap of n entries (ceil(n / 32) words, entry i at bit i % 32 of word i / 32) marking the
// k strictly ascending idx, and back: bitmap_to_indices writes the marked entries, ascending, to
// idx (at most k of them) and returns how many are marked, or -1 when a bit past entry n - 1 is
// set (a corrupt message).
void indices_to_bitmap(const int32_t* idx, int64_t k, int64_t n, uint32_t* words);
int64_t bitmap_to_indices(const uint32_t* words, int64_t n, int32_t* idx, int64_t k);

// The first position j at which idx is not strictly ascending within [0, n), or -1 when it is.
int64_t first_bad_index(const int32_t* idx, int64_t k, int64_t n);

}  // namespace cohort::kernels::cpu
