// Strided index arithmetic shared by the broadcasting, reducing and permuting kernels: a walk
// over a row-major shape in which each operand has its own element stride per dimension (0 where
// it repeats). The host merges the shape first (extent-1 dimensions dropped, neighbours that
// every operand steps through contiguously joined), so a kernel decomposes each linear index
// over as few dimensions as the layout allows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/error.h"

namespace cohort::kernels::cuda::detail {

constexpr int kMaxDims = 16;  // merged dimensions a kernel walks (passed by value)

// A shape of `rank` dimensions and kOps operands' strides over it, in elements.
template <int kOps>
struct StridedDims {
  int rank = 0;
  int64_t extent[kMaxDims] = {};
  int64_t stride[kOps][kMaxDims] = {};
};

// The merged form of a shape (extents) and kOps operands' strides along it (strides[k][d]).
// Throws kUnsupported naming `what` when more than kMaxDims dimensions remain.
template <int kOps>
StridedDims<kOps> merge_dims(const std::vector<int64_t>& extents,
                             const std::vector<int64_t> (&strides)[kOps], const char* what) {
  StridedDims<kOps> m;
  std::vector<int64_t> ext;
  std::vector<int64_t> st[kOps];
  for (size_t d = 0; d < extents.size(); ++d) {
    if (extents[d] == 1) continue;
    bool joins = !ext.empty();
    for (int k = 0; k < kOps && joins; ++k)
      joins = st[k].back() == strides[k][d] * extents[d];
    if (joins) {  // dimension d continues the previous one for every operand
      ext.back() *= extents[d];
      for (int k = 0; k < kOps; ++k) st[k].back() = strides[k][d];
      continue;
    }
    ext.push_back(extents[d]);
    for (int k = 0; k < kOps; ++k) st[k].push_back(strides[k][d]);
  }
  COHORT_CHECK(ext.size() <= static_cast<size_t>(kMaxDims), Status::kUnsupported, what, " on cuda: ",
               ext.size(), " dimensions after merging (at most ", kMaxDims, ")");
  m.rank = static_cast<int>(ext.size());
  for (int d = 0; d < m.rank; ++d) {
    m.extent[d] = ext[static_cast<size_t>(d)];
    for (int k = 0; k < kOps; ++k) m.stride[k][d] = st[k][static_cast<size_t>(d)];
  }
  return m;
}

// Element strides of a contiguous `shape` laid against the last shape.size() dimensions of an
// `out_rank`-dimensional shape it broadcasts to: 0 where its extent is 1 and for the missing
// leading dimensions (NumPy broadcasting, as kernels/cpu's broadcast_strides).
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape, size_t out_rank) {
  std::vector<int64_t> st(out_rank, 0);
  int64_t acc = 1;
  for (size_t k = 0; k < shape.size() && k < out_rank; ++k) {
    const size_t i = shape.size() - 1 - k, o = out_rank - 1 - k;
    st[o] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return st;
}

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Each operand's element offset at linear (row-major) index i of the merged shape.
template <int kOps>
__device__ __forceinline__ void offsets_at(const StridedDims<kOps>& s, int64_t i, int64_t (&off)[kOps]) {
#pragma unroll
  for (int k = 0; k < kOps; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t e = s.extent[d], c = i % e;
    i /= e;
#pragma unroll
    for (int k = 0; k < kOps; ++k) off[k] += c * s.stride[k][d];
  }
}

}  // namespace cohort::kernels::cuda::detail
