// Embedding gather and scatter-add: one warp per looked-up row, lanes striding over C (coalesced
// row copies). The gradient uses fp32 atomicAdd (red.global.add.f32) into dweight.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void embedding_forward_kernel(const T* weight, const int32_t* ids, T* out, int64_t n,
                                         int64_t V, int64_t C) {
  const int64_t i = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = ids[i];
  const bool bad = id < 0 || id >= V;
  T* o = out + i * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32)
    o[c] = bad ? detail::from_float<T>(NAN) : weight[id * C + c];
}

template <typename T>
__global__ void embedding_backward_kernel(const int32_t* ids, const T* dy, float* dweight,
                                          int64_t n, int64_t V, int64_t C) {
  const int64_t i = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = ids[i];
  if (id < 0 || id >= V) return;
  const T* g = dy + i * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32)
    atomicAdd(dweight + id * C + c, detail::to_float(g[c]));
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

void check_args(const char* fn, int64_t n, int64_t V, int64_t C) {
  COHORT_CHECK(
      n >= 0 && V > 0 && C > 0 && (n + kWarpsPerBlock - 1) / kWarpsPerBlock < (int64_t{1} << 31),
      Status::kInvalidArgument, fn, ": n = ", n, ", V = ", V, ", C = ", C);
}
}  // namespace

void embedding_forward(DType type, const void* weight, const int32_t* ids, void* out, int64_t n,
                       int64_t V, int64_t C, cudaStream_t stream) {
  check_args("cuda embedding_forward", n, V, C);
  if (n == 0) return;
  if (type == DType::kF32) {
    embedding_forward_kernel<float><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const float*>(weight), ids, static_cast<float*>(out), n, V, C);
  } else {
    embedding_forward_kernel<bf16><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const bf16*>(weight), ids, static_cast<bf16*>(out), n, V, C);
  }
  COHORT_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(DType type, const int32_t* ids, const void* dy, float* dweight, int64_t n,
                        int64_t V, int64_t C, cudaStream_t stream) {
  check_args("cuda embedding_backward", n, V, C);
  if (n == 0) return;
  if (type == DType::kF32) {
    embedding_backward_kernel<float><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        ids, static_cast<const float*>(dy), dweight, n, V, C);
  } else {
    embedding_backward_kernel<bf16><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        ids, static_cast<const bf16*>(dy), dweight, n, V, C);
  }
  COHORT_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

}  // namespace cohort::kernels::cuda
