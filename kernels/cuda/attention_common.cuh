// Pieces shared by the attention forward and backward kernels: the thread layout (a row of D
// head dims split over P = D / 16 adjacent lanes), tile sizes, the group reduction over those
// lanes, and the cooperative load of a tile of rows into shared memory as fp32.
#pragma once

#include "kernels/cuda/common.cuh"

namespace cohort::kernels::cuda::detail {

constexpr int kAttnThreads = 128;
constexpr int kDpt = 16;   // head dims per thread
constexpr int kTile = 32;  // rows (keys or queries) per shared-memory tile

struct AttnShape {
  int T, H, D, P;  // P = D / kDpt lanes per row, a power of two <= 8
  float scale;
  bool causal;
};

// Sum over the P adjacent lanes that share a row (P divides 32; every lane must call this).
__device__ __forceinline__ float group_sum(float v, int P) {
  for (int off = P / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// This lane's 16-dim slice of the dot product with a shared-memory row.
__device__ __forceinline__ float dot16(const float (&a)[kDpt], const float* row) {
  const float4* r = reinterpret_cast<const float4*>(row);
  float acc = 0.0f;
#pragma unroll
  for (int t = 0; t < kDpt / 4; ++t) {
    const float4 x = r[t];
    acc += a[4 * t] * x.x + a[4 * t + 1] * x.y + a[4 * t + 2] * x.z + a[4 * t + 3] * x.w;
  }
  return acc;
}

// acc += w * row (this lane's 16 dims).
__device__ __forceinline__ void axpy16(float (&acc)[kDpt], float w, const float* row) {
  const float4* r = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int t = 0; t < kDpt / 4; ++t) {
    const float4 x = r[t];
    acc[4 * t] += w * x.x;
    acc[4 * t + 1] += w * x.y;
    acc[4 * t + 2] += w * x.z;
    acc[4 * t + 3] += w * x.w;
  }
}

// dst[r][d] = src[(row0 + r) * ld + d] for r < kTile, d < D, zeros past T; src points at the
// head's first column. All threads of the block call it.
template <typename T>
__device__ void load_rows_tile(const T* src, int64_t ld, int row0, int rows_total, int D,
                               float* dst) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kAttnThreads) {
    const int r = idx / D, d = idx - r * D;
    dst[idx] = row0 + r < rows_total ? to_float(src[(row0 + r) * ld + d]) : 0.0f;
  }
}

// Loads this lane's 16 dims of a global row into registers as fp32.
template <typename T>
__device__ __forceinline__ void load16(const T* src, float (&dst)[kDpt], float scale = 1.0f) {
#pragma unroll
  for (int t = 0; t < kDpt; ++t) dst[t] = to_float(src[t]) * scale;
}

}  // namespace cohort::kernels::cuda::detail
