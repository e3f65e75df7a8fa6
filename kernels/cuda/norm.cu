// Layer norm kernels (Ba, Kiros, Hinton 2016, eq. 4). Forward and dx: one warp per row, lanes
// striding over C, warp-shuffle reductions; the row's re-reads hit L1/L2. Parameter gradients:
// a column-parallel kernel sums fixed chunks of rows into a workspace, and a second kernel adds
// the chunk partials in chunk order, so dgamma/dbeta do not depend on scheduling.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::to_float;
constexpr int kWarpsPerBlock = 8;
constexpr int kRowChunk = 256;  // rows per dgamma/dbeta partial

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean, float* rstd, int64_t rows, int C, float eps) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += to_float(xr[c]);
  const float m = detail::warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(xr[c]) - m;
    v += d * d;
  }
  const float r = rsqrtf(detail::warp_sum(v) / C + eps);
  T* yr = y + row * C;
  for (int c = lane; c < C; c += 32)
    yr[c] =
        detail::from_float<T>((to_float(xr[c]) - m) * r * to_float(gamma[c]) + to_float(beta[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename T>
__global__ void layernorm_dx_kernel(const T* x, const T* gamma, const float* mean,
                                    const float* rstd, const T* dy, T* dx, int64_t rows, int C) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dyr[c]) * to_float(gamma[c]);
    sum_g += g;
    sum_gx += g * (to_float(xr[c]) - m) * r;
  }
  const float a = detail::warp_sum(sum_g) / C, b = detail::warp_sum(sum_gx) / C;
  T* dxr = dx + row * C;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dyr[c]) * to_float(gamma[c]);
    dxr[c] = detail::from_float<T>(r * (g - a - (to_float(xr[c]) - m) * r * b));
  }
}

// Block (32 x 8 threads) = 32 columns x one chunk of kRowChunk rows; rows split over threadIdx.y
// then combined in y order through shared memory. part: [chunks, 2, C].
// kStats false: only the dy column sums (the bias gradient of sum_rows); x, mean, rstd unused.
template <typename T, bool kStats>
__global__ void layernorm_param_partials(const T* x, const float* mean, const float* rstd,
                                         const T* dy, float* part, int64_t rows, int C) {
  __shared__ float sg[8][33], sb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < rows ? r0 + kRowChunk : rows;
  float g = 0.0f, b = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = to_float(dy[r * C + c]);
      if constexpr (kStats) g += d * (to_float(x[r * C + c]) - mean[r]) * rstd[r];
      b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    part[(int64_t{blockIdx.y} * 2) * C + c] = g;
    part[(int64_t{blockIdx.y} * 2 + 1) * C + c] = b;
  }
}

__global__ void layernorm_param_finish(const float* part, float* dgamma, float* dbeta, int chunks,
                                       int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float g = 0.0f, b = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    g += part[(int64_t{k} * 2) * C + c];
    b += part[(int64_t{k} * 2 + 1) * C + c];
  }
  if (dgamma) dgamma[c] = g;
  if (dbeta) dbeta[c] = b;
}

void check_shape(const char* fn, int64_t rows, int64_t C) {
  COHORT_CHECK(rows >= 0 && C > 0 && C <= (int64_t{1} << 30), Status::kInvalidArgument, fn,
               ": rows = ", rows, ", C = ", C);
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
}  // namespace

void layernorm_forward(DType type, const void* x, const void* gamma, const void* beta, void* y,
                       float* mean, float* rstd, int64_t rows, int64_t C, float eps,
                       cudaStream_t stream) {
  check_shape("cuda layernorm_forward", rows, C);
  if (rows == 0) return;
  const int c = static_cast<int>(C);
  if (type == DType::kF32) {
    layernorm_forward_kernel<float><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const float*>(x), static_cast<const float*>(gamma),
        static_cast<const float*>(beta), static_cast<float*>(y), mean, rstd, rows, c, eps);
  } else {
    layernorm_forward_kernel<bf16><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(gamma),
        static_cast<const bf16*>(beta), static_cast<bf16*>(y), mean, rstd, rows, c, eps);
  }
  COHORT_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

int64_t layernorm_backward_workspace(int64_t rows, int64_t C) {
  return (rows + kRowChunk - 1) / kRowChunk * 2 * C;
}

template <typename T>
static void layernorm_backward_typed(const T* x, const T* gamma, const float* mean,
                                     const float* rstd, const T* dy, T* dx, float* dgamma,
                                     float* dbeta, float* workspace, int64_t rows, int C,
                                     cudaStream_t stream) {
  // Parameter sums first: they read dy, which dx may overwrite.
  if (dgamma || dbeta) {
    const int chunks = static_cast<int>((rows + kRowChunk - 1) / kRowChunk);
    if (chunks > 0) {
      layernorm_param_partials<T, true><<<dim3((C + 31) / 32, chunks), dim3(32, 8), 0, stream>>>(
          x, mean, rstd, dy, workspace, rows, C);
      COHORT_CUDA_CHECK_LAUNCH("layernorm_param_partials");
    }
    layernorm_param_finish<<<(C + 255) / 256, 256, 0, stream>>>(workspace, dgamma, dbeta, chunks,
                                                                C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish");
  }
  if (dx && rows > 0) {
    layernorm_dx_kernel<T><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        x, gamma, mean, rstd, dy, dx, rows, C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_dx_kernel");
  }
}

void layernorm_backward(DType type, const void* x, const void* gamma, const float* mean,
                        const float* rstd, const void* dy, void* dx, float* dgamma, float* dbeta,
                        float* workspace, int64_t rows, int64_t C, cudaStream_t stream) {
  check_shape("cuda layernorm_backward", rows, C);
  COHORT_CHECK(workspace || (!dgamma && !dbeta), Status::kInvalidArgument,
               "cuda layernorm_backward: dgamma/dbeta requested without a workspace");
  COHORT_CHECK(rows / kRowChunk < 65535, Status::kInvalidArgument,
               "cuda layernorm_backward: rows = ", rows, " exceeds the partial-sum grid");
  const int c = static_cast<int>(C);
  if (type == DType::kF32) {
    layernorm_backward_typed<float>(static_cast<const float*>(x), static_cast<const float*>(gamma),
                                    mean, rstd, static_cast<const float*>(dy),
                                    static_cast<float*>(dx), dgamma, dbeta, workspace, rows, c,
                                    stream);
  } else {
    layernorm_backward_typed<bf16>(static_cast<const bf16*>(x), static_cast<const bf16*>(gamma),
                                   mean, rstd, static_cast<const bf16*>(dy), static_cast<bf16*>(dx),
                                   dgamma, dbeta, workspace, rows, c, stream);
  }
}

void sum_rows(DType type, const void* x, float* out, float* workspace, int64_t rows, int64_t C,
              cudaStream_t stream) {
  check_shape("cuda sum_rows", rows, C);
  COHORT_CHECK(workspace && rows / kRowChunk < 65535, Status::kInvalidArgument,
               "cuda sum_rows: null workspace or rows = ", rows, " exceeds the partial-sum grid");
  const int c = static_cast<int>(C), chunks = static_cast<int>((rows + kRowChunk - 1) / kRowChunk);
  if (chunks > 0) {
    const dim3 grid((c + 31) / 32, chunks), block(32, 8);
    if (type == DType::kF32) {
      layernorm_param_partials<float, false><<<grid, block, 0, stream>>>(
          nullptr, nullptr, nullptr, static_cast<const float*>(x), workspace, rows, c);
    } else {
      layernorm_param_partials<bf16, false><<<grid, block, 0, stream>>>(
          nullptr, nullptr, nullptr, static_cast<const bf16*>(x), workspace, rows, c);
    }
    COHORT_CUDA_CHECK_LAUNCH("layernorm_param_partials");
  }
  layernorm_param_finish<<<(c + 255) / 256, 256, 0, stream>>>(workspace, nullptr, out, chunks, c);
  COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish");
}

}  // namespace cohort::kernels::cuda
