// find_bad_index: a grid-stride scan; bad elements are rare, so each does its own atomicMin.
#include <algorithm>

#include "core/base/error.h"
#include "kernels/cuda/index_check.h"

namespace cohort::kernels::cuda {

namespace {

__global__ void find_bad_index_kernel(const int32_t* v, int64_t n, int64_t V, int64_t skip,
                                      unsigned long long* slot) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t x = v[i];
    if (x == skip || (x >= 0 && x < V)) continue;
    const unsigned long long packed =
        (static_cast<unsigned long long>(i) << 32) | static_cast<uint32_t>(static_cast<int32_t>(x));
    atomicMin(slot, packed);
  }
}

}  // namespace

void find_bad_index(const int32_t* v, int64_t n, int64_t V, int64_t skip, uint64_t* slot,
                    cudaStream_t stream) {
  COHORT_CHECK(n >= 0 && n < (int64_t{1} << 32), Status::kInvalidArgument,
               "cuda find_bad_index: n = ", n, " (below 2^32)");
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "64-bit slots");
  find_bad_index_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      v, n, V, skip, reinterpret_cast<unsigned long long*>(slot));
  COHORT_CUDA_CHECK_LAUNCH("find_bad_index_kernel");
}

}  // namespace cohort::kernels::cuda
