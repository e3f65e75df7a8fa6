// Device-side helpers shared by the .cu kernels: fp32 <-> bf16 conversion (round to nearest
// even, as kernels/cpu rounds), warp and block reductions, and 16-byte vector loads/stores of
// either storage type. Kernels are templated on the storage type T in {float, __nv_bfloat16}
// only; the math is always fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

// 16 bytes of T: 4 floats or 8 bf16.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[Vec<T>::kN]) {
  const Vec<T> x = *reinterpret_cast<const Vec<T>*>(p);
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) out[i] = to_float(x.v[i]);
}
template <typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[Vec<T>::kN]) {
  Vec<T> x;
#pragma unroll
  for (int i = 0; i < Vec<T>::kN; ++i) x.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Vec<T>*>(p) = x;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// for (int64_t i = first index of this thread; i < total; i += every thread of the grid): a
// grid-stride loop, for kernels launched with fewer threads than elements.
#define COHORT_GRID_STRIDE(i, total)                                              \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (total); \
       i += int64_t{gridDim.x} * blockDim.x)

// Sum over a block of up to 1024 threads; every thread gets the result. `scratch` holds 32
// floats of shared memory; the call ends with a barrier so scratch can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline unsigned grid_for(int64_t work, int threads, int64_t max_blocks = 132 * 32) {
  int64_t b = (work + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

}  // namespace cohort::kernels::cuda::detail
