// Dropout's mask and scaling, one thread per element (grid-stride): the draw of element i is
// kernels/cpu's dropout_keeps(key, i, threshold), the same inline function compiled for the
// device, and the kept value x / (1 - p) the same IEEE fp32 division.
#include "core/base/error.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace cohort::kernels::cuda {

namespace {
constexpr int kThreads = 256;

template <typename T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint64_t key, uint64_t threshold, float keep) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = detail::to_float(x[i]);  // dropped: v * 0, so NaN and Inf stay NaN (as the CPU)
    out[i] = detail::from_float<T>(cpu::dropout_keeps(key, i, threshold) ? v / keep : v * 0.0f);
  }
}
}  // namespace

void dropout_apply(DType type, const void* x, void* out, int64_t n, float p, uint64_t key, cudaStream_t stream) {
  COHORT_CHECK(n >= 0 && p >= 0.0f && p < 1.0f, Status::kInvalidArgument, "cuda dropout_apply: n = ", n, ", p = ", p);
  if (n == 0) return;
  const uint64_t threshold = cpu::dropout_threshold(p);
  const float keep = 1.0f - p;
  if (type == DType::kF32)
    dropout_kernel<float><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<float*>(out), n, key, threshold, keep);
  else
    dropout_kernel<detail::bf16><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const detail::bf16*>(x), static_cast<detail::bf16*>(out), n, key, threshold, keep);
  COHORT_CUDA_CHECK_LAUNCH("dropout_kernel");
}

}  // namespace cohort::kernels::cuda
