// Data-movement loops for the shape operators (transpose, concat, split). They only copy
// elements, so they take an element size in bytes and work for f32, bf16 and i32 alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::kernels::cpu {

// out = x with dimensions permuted: out.shape[k] = in_shape[perm[k]]; out is contiguous.
void transpose(const void* x, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& perm, size_t elem_size, void* out);

// Joins parts along one axis. The tensors are viewed as [outer, extent_i, inner]; part i
// contributes extents[i] * inner contiguous elements to each of the `outer` rows of out.
// A null part writes zeros (a missing gradient in split's backward).
void concat(const std::vector<const void*>& parts, const std::vector<int64_t>& extents,
            int64_t outer, int64_t inner, size_t elem_size, void* out);

// The inverse of concat: x [outer, sum(extents), inner] -> parts [outer, extents[i], inner].
void split(const void* x, const std::vector<int64_t>& extents, int64_t outer, int64_t inner,
           size_t elem_size, const std::vector<void*>& parts);

}  // namespace cohort::kernels::cpu
