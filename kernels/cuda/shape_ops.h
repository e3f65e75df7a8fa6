// Data movement of the shape operators on the GPU (transpose, concat, split), with the semantics
// of kernels/cpu/shape_ops.h: elements are copied as raw words of elem_size bytes (2, 4 or 8:
// bf16, f32, i32, i64 alike), nothing is converted. Contiguous device buffers; every launch goes
// on the given stream and is checked; nothing synchronizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// out = x with dimensions permuted: out.shape[k] = in_shape[perm[k]]; out is contiguous and does
// not overlap x. Dimensions that stay adjacent are merged first; a batched 2-D transpose (the
// last two merged dimensions swapped) goes through shared-memory tiles, a permutation that keeps
// the order a copy, anything else a strided gather.
void transpose(const void* x, const std::vector<int64_t>& in_shape, const std::vector<int64_t>& perm,
               size_t elem_size, void* out, cudaStream_t stream);

// At most this many parts per concat or split (core/ops/shape_ops.cpp's kMaxParts).
constexpr int kMaxShapeParts = 16;

// Joins parts along one axis: the tensors are viewed as [outer, extent_i, inner]; part i gives
// extents[i] * inner contiguous elements to each of the `outer` rows of out. A null part writes
// zeros (a missing gradient in split's backward). One launch.
void concat(const std::vector<const void*>& parts, const std::vector<int64_t>& extents, int64_t outer,
            int64_t inner, size_t elem_size, void* out, cudaStream_t stream);

// The inverse of concat: x [outer, sum(extents), inner] -> parts [outer, extents[i], inner]. One
// launch.
void split(const void* x, const std::vector<int64_t>& extents, int64_t outer, int64_t inner,
           size_t elem_size, const std::vector<void*>& parts, cudaStream_t stream);

// Copies `rows` rows of `width` bytes from src (rows `src_pitch` bytes apart) to dst (`dst_pitch`
// apart), for rows that start anywhere on a 2-byte boundary (every address, pitch and width a
// multiple of 2; the regions do not overlap). Each 16-byte-aligned segment of a dst row is
// gathered from src with two aligned 16-byte loads, so misaligned rows copy near the bandwidth
// of aligned ones (cudaMemcpy2DAsync moved 4096-column blocks of 50257-wide bf16 rows at 1.6 TB/s
// on an H200); a row's unaligned ends go 2 bytes at a time. kernels/cuda/gemm.h stages operands
// with it.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, int64_t rows,
               cudaStream_t stream);

}  // namespace cohort::kernels::cuda
