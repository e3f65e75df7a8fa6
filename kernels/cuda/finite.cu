// poison_if_not_finite: one thread reads the scalar and writes dst only when it is not finite.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/finite.h"

namespace cohort::kernels::cuda {

namespace {

template <typename T>
__global__ void poison_if_not_finite_kernel(float* dst, const T* value) {
  if (!isfinite(detail::to_float(*value))) *dst = __int_as_float(0x7fc00000);  // a quiet NaN
}

}  // namespace

void poison_if_not_finite(float* dst, const void* value, DType type, cudaStream_t stream) {
  COHORT_CHECK(dst != nullptr && value != nullptr, Status::kInvalidArgument,
               "cuda poison_if_not_finite: a null pointer");
  if (type == DType::kF32)
    poison_if_not_finite_kernel<<<1, 1, 0, stream>>>(dst, static_cast<const float*>(value));
  else
    poison_if_not_finite_kernel<<<1, 1, 0, stream>>>(dst, static_cast<const detail::bf16*>(value));
  COHORT_CUDA_CHECK_LAUNCH("poison_if_not_finite_kernel");
}

}  // namespace cohort::kernels::cuda
