// Layer norm kernels (Ba, Kiros, Hinton 2016, eq. 4). Forward and dx: one warp per row, lanes
// striding over C, warp-shuffle reductions; the row's re-reads hit L1/L2. Parameter gradients:
// a column-parallel kernel sums fixed chunks of rows into a workspace, and a second kernel adds
// the chunk partials in chunk order, so dgamma/dbeta do not depend on scheduling. For fp32 rows
// that are 16-byte aligned with C <= 1024 the backward is one pass instead (layernorm_backward_fused:
// x and dy read once with 16-byte loads, kept in registers for dx, the parameter sums of 16 rows a
// block added in warp order into a partial) and a column-parallel finish: 0.46 of memcpy bandwidth
// against the two passes' 0.35 on an H200 (bf16 keeps the two passes: see layernorm_backward_typed). RMS norm
// reuses that shape; group norm (further down) reduces with whole thread blocks.
#include <cstdlib>
#include <type_traits>

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

// dx_add (may be null) is added in fp32 before the one rounding of dx; each element of dx is
// written by the lane that read its dy and dx_add, after the row's sums: dx may alias either.
template <typename T>
__global__ void layernorm_dx_kernel(const T* x, const T* gamma, const float* mean,
                                    const float* rstd, const T* dy, const T* dx_add, T* dx,
                                    int64_t rows, int C) {
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
  const T* addr = dx_add ? dx_add + row * C : nullptr;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dyr[c]) * to_float(gamma[c]);
    float d = r * (g - a - (to_float(xr[c]) - m) * r * b);
    if (addr) d = to_float(addr[c]) + d;
    dxr[c] = detail::from_float<T>(d);
  }
}

// In a (32 x 8) block, the 8 threads of a column add their sums g and b in threadIdx.y order;
// true on row 0, whose g and b then hold the column's totals. Every thread of the block calls it.
__device__ __forceinline__ bool sum_over_y(float& g, float& b) {
  __shared__ float sg[8][33], sb[8][33];
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0) return false;
  for (int k = 1; k < 8; ++k) {
    g += sg[k][threadIdx.x];
    b += sb[k][threadIdx.x];
  }
  return true;
}

// Block (32 x 8 threads) = 32 columns x one chunk of kRowChunk rows; rows split over threadIdx.y
// then combined in y order through shared memory. part: [chunks, 2, C].
// kStats false: only the dy column sums (the bias gradient of sum_rows); x, mean, rstd unused.
// mean null: RMS norm's xhat = x * rstd.
template <typename T, bool kStats>
__global__ void layernorm_param_partials(const T* x, const float* mean, const float* rstd,
                                         const T* dy, float* part, int64_t rows, int C) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < rows ? r0 + kRowChunk : rows;
  float g = 0.0f, b = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = to_float(dy[r * C + c]);
      if constexpr (kStats) g += d * (to_float(x[r * C + c]) - (mean ? mean[r] : 0.0f)) * rstd[r];
      b += d;
    }
  }
  if (sum_over_y(g, b) && c < C) {
    part[(int64_t{blockIdx.y} * 2) * C + c] = g;
    part[(int64_t{blockIdx.y} * 2 + 1) * C + c] = b;
  }
}

// P: the parameter gradients' storage type (the parameters'; fp32 for sum_rows' bias sums).
template <typename P>
__global__ void layernorm_param_finish(const float* part, P* dgamma, P* dbeta, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float g = 0.0f, b = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    g += part[(int64_t{k} * 2) * C + c];
    b += part[(int64_t{k} * 2 + 1) * C + c];
  }
  if (dgamma) dgamma[c] = detail::from_float<P>(g);
  if (dbeta) dbeta[c] = detail::from_float<P>(b);
}

// One pass of the layer-norm backward: a warp per row (kFusedRowsPerWarp rows each), every lane
// holding kVecs 16-byte vectors of the row (columns (lane + 32 j) * N .. + N), so x and dy are read
// once. dgamma/dbeta: each lane sums its columns over its warp's rows, the block adds its warps in
// warp order through shared memory and writes one partial per block to part [blocks, 2, C], which
// layernorm_param_finish_wide adds in block order: deterministic. dx may alias dy or dx_add (each
// element is read before the lane that read it writes it).
constexpr int kFusedWarps = 8, kFusedRowsPerWarp = 2, kFusedRows = kFusedWarps * kFusedRowsPerWarp;
constexpr int kFusedMaxC = 1024;

template <typename T, int kVecs>
__global__ void __launch_bounds__(kFusedWarps * 32)
    layernorm_backward_fused(const T* x, const T* gamma, const float* mean, const float* rstd, const T* dy,
                             const T* dx_add, T* dx, float* part, int64_t rows, int C) {
  constexpr int N = detail::Vec<T>::kN;
  __shared__ float red[2][kFusedMaxC];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nvec = C / N;
  float accg[kVecs][N], accb[kVecs][N];
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int k = 0; k < N; ++k) accg[j][k] = accb[j][k] = 0.0f;
  const int64_t first = int64_t{blockIdx.x} * kFusedRows + warp * kFusedRowsPerWarp;
  for (int i = 0; i < kFusedRowsPerWarp; ++i) {
    const int64_t row = first + i;
    if (row >= rows) break;
    const float m = mean[row], r = rstd[row];
    float xh[kVecs][N], g[kVecs][N];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int v = lane + 32 * j;
      if (v >= nvec) continue;
      float xv[N], dv[N], gv[N];
      detail::load_vec(x + row * C + v * N, xv);
      detail::load_vec(dy + row * C + v * N, dv);
      detail::load_vec(gamma + v * N, gv);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        xh[j][k] = (xv[k] - m) * r;
        g[j][k] = dv[k] * gv[k];
        sum_g += g[j][k];
        sum_gx += g[j][k] * xh[j][k];
        accg[j][k] += dv[k] * xh[j][k];
        accb[j][k] += dv[k];
      }
    }
    const float a = detail::warp_sum(sum_g) / C, b = detail::warp_sum(sum_gx) / C;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int v = lane + 32 * j;
      if (v >= nvec) continue;
      float d[N];
#pragma unroll
      for (int k = 0; k < N; ++k) d[k] = r * (g[j][k] - a - xh[j][k] * b);
      if (dx_add) {
        float add[N];
        detail::load_vec(dx_add + row * C + v * N, add);
#pragma unroll
        for (int k = 0; k < N; ++k) d[k] = add[k] + d[k];
      }
      detail::store_vec(dx + row * C + v * N, d);
    }
  }
  for (int w = 0; w < kFusedWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int v = lane + 32 * j;
        if (v >= nvec) continue;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const int c = v * N + k;
          red[0][c] = w == 0 ? accg[j][k] : red[0][c] + accg[j][k];
          red[1][c] = w == 0 ? accb[j][k] : red[1][c] + accb[j][k];
        }
      }
    }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    part[(int64_t{blockIdx.x} * 2) * C + c] = red[0][c];
    part[(int64_t{blockIdx.x} * 2 + 1) * C + c] = red[1][c];
  }
}

// dgamma / dbeta from part [chunks, 2, C]: block (32 x 8) = 32 columns, the chunks split over
// threadIdx.y (chunk y, y + 8, ...) and the 8 sums added in y order.
template <typename P>
__global__ void layernorm_param_finish_wide(const float* part, P* dgamma, P* dbeta, int chunks, int C) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  float g = 0.0f, b = 0.0f;
  if (c < C) {
    for (int k = threadIdx.y; k < chunks; k += 8) {
      g += part[(int64_t{k} * 2) * C + c];
      b += part[(int64_t{k} * 2 + 1) * C + c];
    }
  }
  if (sum_over_y(g, b) && c < C) {
    if (dgamma) dgamma[c] = detail::from_float<P>(g);
    if (dbeta) dbeta[c] = detail::from_float<P>(b);
  }
}

template <typename T, int kVecs>
void launch_layernorm_backward_fused(const T* x, const T* gamma, const float* mean, const float* rstd,
                                     const T* dy, const T* dx_add, T* dx, T* dgamma, T* dbeta, float* workspace,
                                     int64_t rows, int C, cudaStream_t stream) {
  const int64_t blocks = (rows + kFusedRows - 1) / kFusedRows;
  layernorm_backward_fused<T, kVecs><<<static_cast<unsigned>(blocks), kFusedWarps * 32, 0, stream>>>(
      x, gamma, mean, rstd, dy, dx_add, dx, workspace, rows, C);
  COHORT_CUDA_CHECK_LAUNCH("layernorm_backward_fused");
  if (dgamma || dbeta) {
    layernorm_param_finish_wide<T><<<(C + 31) / 32, dim3(32, 8), 0, stream>>>(workspace, dgamma, dbeta,
                                                                               static_cast<int>(blocks), C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish_wide");
  }
}

// Launches the one pass with kVecs = vecs (16-byte vectors a lane, kFirst .. 8); false past 8.
template <int kFirst, typename T>
bool launch_layernorm_backward_fused_for(int vecs, const T* x, const T* gamma, const float* mean, const float* rstd,
                                         const T* dy, const T* dx_add, T* dx, T* dgamma, T* dbeta, float* workspace,
                                         int64_t rows, int C, cudaStream_t stream) {
  if (vecs == kFirst) {
    launch_layernorm_backward_fused<T, kFirst>(x, gamma, mean, rstd, dy, dx_add, dx, dgamma, dbeta, workspace, rows,
                                               C, stream);
    return true;
  }
  if constexpr (kFirst < 8) {
    return launch_layernorm_backward_fused_for<kFirst + 1>(vecs, x, gamma, mean, rstd, dy, dx_add, dx, dgamma, dbeta,
                                                           workspace, rows, C, stream);
  }
  return false;
}

// The fused pass applies: every row 16-byte aligned, C within the registers' reach, and both
// gradients wanted with a workspace (the GPT's case; other calls keep the two-pass kernels).
template <typename T>
bool layernorm_backward_fits(const T* x, const T* gamma, const T* dy, const T* dx_add, const T* dx,
                             const float* workspace, int64_t rows, int C) {
  constexpr int N = detail::Vec<T>::kN;
  auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return dx && workspace && rows > 0 && C % N == 0 && C <= kFusedMaxC && aligned(x) && aligned(gamma) &&
         aligned(dy) && aligned(dx_add) && aligned(dx) && (rows + kFusedRows - 1) / kFusedRows < (int64_t{1} << 31);
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
  // The two-pass kernels' chunk partials, or the fused pass's block partials (more of them:
  // at most rows / 8 KiB of floats) where it may run.
  const int64_t blocks = (rows + kFusedRows - 1) / kFusedRows;
  return C <= kFusedMaxC ? blocks * 2 * C : row_sums_workspace(rows, C);
}

int64_t row_sums_workspace(int64_t rows, int64_t C) { return (rows + kRowChunk - 1) / kRowChunk * 2 * C; }

template <typename T>
static void layernorm_backward_typed(const T* x, const T* gamma, const float* mean,
                                     const float* rstd, const T* dy, const T* dx_add, T* dx,
                                     T* dgamma, T* dbeta, float* workspace, int64_t rows, int C,
                                     cudaStream_t stream) {
  // COHORT_LAYERNORM_ONE_PASS=0 keeps the two passes (for comparisons).
  static const bool one_pass = [] {
    const char* v = std::getenv("COHORT_LAYERNORM_ONE_PASS");
    return !(v && v[0] == '0' && v[1] == 0);
  }();
  // fp32 only: on an H200 at [32768, 768] the one pass took 0.155 ms against the two passes'
  // 0.204 in fp32, but 0.145 against 0.118 in bf16 (2048 blocks, each ending in a block-wide
  // reduction of 2 C floats: bound by that, not by bandwidth). TODO(#26): fewer blocks walking
  // more rows each, measured on a device, before bf16 takes it.
  if constexpr (std::is_same_v<T, float>) {
    if (one_pass && layernorm_backward_fits(x, gamma, dy, dx_add, dx, workspace, rows, C) &&
        launch_layernorm_backward_fused_for<1>((C / detail::Vec<T>::kN + 31) / 32, x, gamma, mean, rstd, dy, dx_add,
                                               dx, dgamma, dbeta, workspace, rows, C, stream))
      return;
  }
  // Parameter sums first: they read dy, which dx may overwrite.
  if (dgamma || dbeta) {
    const int chunks = static_cast<int>((rows + kRowChunk - 1) / kRowChunk);
    if (chunks > 0) {
      layernorm_param_partials<T, true><<<dim3((C + 31) / 32, chunks), dim3(32, 8), 0, stream>>>(
          x, mean, rstd, dy, workspace, rows, C);
      COHORT_CUDA_CHECK_LAUNCH("layernorm_param_partials");
    }
    layernorm_param_finish<T><<<(C + 255) / 256, 256, 0, stream>>>(workspace, dgamma, dbeta,
                                                                   chunks, C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish");
  }
  if (dx && rows > 0) {
    layernorm_dx_kernel<T><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        x, gamma, mean, rstd, dy, dx_add, dx, rows, C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_dx_kernel");
  }
}

void layernorm_backward(DType type, const void* x, const void* gamma, const float* mean,
                        const float* rstd, const void* dy, const void* dx_add, void* dx,
                        void* dgamma, void* dbeta, float* workspace, int64_t rows, int64_t C,
                        cudaStream_t stream) {
  check_shape("cuda layernorm_backward", rows, C);
  COHORT_CHECK(workspace || (!dgamma && !dbeta), Status::kInvalidArgument,
               "cuda layernorm_backward: dgamma/dbeta requested without a workspace");
  COHORT_CHECK(rows / kRowChunk < 65535, Status::kInvalidArgument,
               "cuda layernorm_backward: rows = ", rows, " exceeds the partial-sum grid");
  const int c = static_cast<int>(C);
  if (type == DType::kF32) {
    layernorm_backward_typed<float>(
        static_cast<const float*>(x), static_cast<const float*>(gamma), mean, rstd,
        static_cast<const float*>(dy), static_cast<const float*>(dx_add), static_cast<float*>(dx),
        static_cast<float*>(dgamma), static_cast<float*>(dbeta), workspace, rows, c, stream);
  } else {
    layernorm_backward_typed<bf16>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(gamma), mean, rstd,
        static_cast<const bf16*>(dy), static_cast<const bf16*>(dx_add), static_cast<bf16*>(dx),
        static_cast<bf16*>(dgamma), static_cast<bf16*>(dbeta), workspace, rows, c, stream);
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
  layernorm_param_finish<float><<<(c + 255) / 256, 256, 0, stream>>>(workspace, nullptr, out, chunks, c);
  COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish");
}


// RMS norm (Zhang, Sennrich 2019, eq. 4): the layer-norm kernels' shape without the mean. One
// warp per row; rstd = 1 / sqrt(mean(x^2) + eps) with IEEE sqrt and division, as on the CPU.
namespace {
template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* gamma, T* y, float* rstd, int64_t rows, int C,
                                       float eps) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_float(xr[c]);
    ss += v * v;
  }
  const float r = 1.0f / sqrtf(detail::warp_sum(ss) / static_cast<float>(C) + eps);
  T* yr = y + row * C;
  for (int c = lane; c < C; c += 32) yr[c] = detail::from_float<T>(to_float(xr[c]) * r * to_float(gamma[c]));
  if (lane == 0) rstd[row] = r;
}

// dx = rstd * (g - xhat * mean(g * xhat)) (+ dx_add), g = dy * gamma, xhat = x * rstd.
template <typename T>
__global__ void rmsnorm_dx_kernel(const T* x, const T* gamma, const float* rstd, const T* dy, const T* dx_add,
                                  T* dx, int64_t rows, int C) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const float r = rstd[row];
  float sum_gx = 0.0f;
  for (int c = lane; c < C; c += 32) sum_gx += to_float(dyr[c]) * to_float(gamma[c]) * to_float(xr[c]) * r;
  const float b = detail::warp_sum(sum_gx) / static_cast<float>(C);
  T* dxr = dx + row * C;
  const T* addr = dx_add ? dx_add + row * C : nullptr;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dyr[c]) * to_float(gamma[c]);
    float d = r * (g - to_float(xr[c]) * r * b);
    if (addr) d = to_float(addr[c]) + d;
    dxr[c] = detail::from_float<T>(d);
  }
}

template <typename T>
void rmsnorm_backward_typed(const T* x, const T* gamma, const float* rstd, const T* dy, const T* dx_add, T* dx,
                            T* dgamma, float* workspace, int64_t rows, int C, cudaStream_t stream) {
  if (C == 0) return;  // nothing to write
  // dgamma first, as in layer norm (dx is a separate buffer here, but keep the one order).
  const int chunks = static_cast<int>((rows + kRowChunk - 1) / kRowChunk);
  if (chunks > 0) {
    layernorm_param_partials<T, true><<<dim3((C + 31) / 32, chunks), dim3(32, 8), 0, stream>>>(
        x, nullptr, rstd, dy, workspace, rows, C);
    COHORT_CUDA_CHECK_LAUNCH("layernorm_param_partials");
  }
  layernorm_param_finish<T><<<(C + 255) / 256, 256, 0, stream>>>(workspace, dgamma, nullptr, chunks, C);
  COHORT_CUDA_CHECK_LAUNCH("layernorm_param_finish");
  if (rows > 0) {
    rmsnorm_dx_kernel<T><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(x, gamma, rstd, dy, dx_add, dx,
                                                                               rows, C);
    COHORT_CUDA_CHECK_LAUNCH("rmsnorm_dx_kernel");
  }
}

void check_rms_shape(const char* fn, int64_t rows, int64_t C) {
  COHORT_CHECK(rows >= 0 && C >= 0 && C <= (int64_t{1} << 30), Status::kInvalidArgument, fn, ": rows = ", rows,
               ", C = ", C);
}
}  // namespace

void rmsnorm_forward(DType type, const void* x, const void* gamma, void* y, float* rstd, int64_t rows, int64_t C,
                     float eps, cudaStream_t stream) {
  check_rms_shape("cuda rmsnorm_forward", rows, C);
  if (rows == 0) return;
  const int c = static_cast<int>(C);
  if (type == DType::kF32) {
    rmsnorm_forward_kernel<float><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const float*>(x), static_cast<const float*>(gamma), static_cast<float*>(y), rstd, rows, c, eps);
  } else {
    rmsnorm_forward_kernel<bf16><<<row_blocks(rows), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(gamma), static_cast<bf16*>(y), rstd, rows, c, eps);
  }
  COHORT_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void rmsnorm_backward(DType type, const void* x, const void* gamma, const float* rstd, const void* dy,
                      const void* dx_add, void* dx, void* dgamma, float* workspace, int64_t rows, int64_t C,
                      cudaStream_t stream) {
  check_rms_shape("cuda rmsnorm_backward", rows, C);
  COHORT_CHECK(workspace || rows == 0 || C == 0, Status::kInvalidArgument, "cuda rmsnorm_backward: no workspace");
  COHORT_CHECK(rows / kRowChunk < 65535, Status::kInvalidArgument, "cuda rmsnorm_backward: rows = ", rows,
               " exceeds the partial-sum grid");
  const int c = static_cast<int>(C);
  if (type == DType::kF32) {
    rmsnorm_backward_typed<float>(static_cast<const float*>(x), static_cast<const float*>(gamma), rstd,
                                  static_cast<const float*>(dy), static_cast<const float*>(dx_add),
                                  static_cast<float*>(dx), static_cast<float*>(dgamma), workspace, rows, c, stream);
  } else {
    rmsnorm_backward_typed<bf16>(static_cast<const bf16*>(x), static_cast<const bf16*>(gamma), rstd,
                                 static_cast<const bf16*>(dy), static_cast<const bf16*>(dx_add),
                                 static_cast<bf16*>(dx), static_cast<bf16*>(dgamma), workspace, rows, c, stream);
  }
}

// Group norm (Wu, He 2018, eq. 1-3). An (n, group) block, Cg = C / groups channels of HW
// elements, is contiguous in NCHW; one thread block per (n, group) reduces it with block_sum
// (two passes: mean, then centred variance, as the CPU). Parameter gradients: one thread block
// per channel over its N x HW elements. Every reduction order is fixed by the shape.
namespace {
constexpr int kGroupThreads = 256;

template <typename T>
__global__ void groupnorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                                         float* rstd, int64_t Cg, int64_t HW, int64_t groups, float eps) {
  __shared__ float scratch[32];
  const int64_t ng = blockIdx.x, block = Cg * HW, c0 = (ng % groups) * Cg;
  const T* xb = x + ng * block;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < block; j += blockDim.x) s += to_float(xb[j]);
  const float m = detail::block_sum(s, scratch) / static_cast<float>(block);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < block; j += blockDim.x) {
    const float d = to_float(xb[j]) - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(detail::block_sum(v, scratch) / static_cast<float>(block) + eps);
  T* yb = y + ng * block;
  for (int64_t j = threadIdx.x; j < block; j += blockDim.x) {
    const int64_t c = c0 + j / HW;
    const float a = r * to_float(gamma[c]), b = to_float(beta[c]) - m * a;
    yb[j] = detail::from_float<T>(to_float(xb[j]) * a + b);
  }
  if (threadIdx.x == 0) {
    mean[ng] = m;
    rstd[ng] = r;
  }
}

template <typename T>
__global__ void groupnorm_dx_kernel(const T* x, const T* gamma, const float* mean, const float* rstd, const T* dy,
                                    T* dx, int64_t Cg, int64_t HW, int64_t groups) {
  __shared__ float scratch[32];
  const int64_t ng = blockIdx.x, block = Cg * HW, c0 = (ng % groups) * Cg;
  const T* xb = x + ng * block;
  const T* dyb = dy + ng * block;
  const float m = mean[ng], r = rstd[ng];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < block; j += blockDim.x) {
    const float g = to_float(dyb[j]) * to_float(gamma[c0 + j / HW]);
    sum_g += g;
    sum_gx += g * (to_float(xb[j]) - m);
  }
  const float n = static_cast<float>(block);
  const float a = detail::block_sum(sum_g, scratch) / n, b = detail::block_sum(sum_gx, scratch) * r / n;
  T* dxb = dx + ng * block;
  for (int64_t j = threadIdx.x; j < block; j += blockDim.x) {
    const float g = to_float(dyb[j]) * to_float(gamma[c0 + j / HW]);
    dxb[j] = detail::from_float<T>(r * (g - a - (to_float(xb[j]) - m) * r * b));
  }
}

template <typename T>
__global__ void groupnorm_param_kernel(const T* x, const float* mean, const float* rstd, const T* dy, T* dgamma,
                                       T* dbeta, int64_t N, int64_t C, int64_t HW, int64_t groups) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, group = c / (C / groups);
  float sg = 0.0f, sb = 0.0f;
  for (int64_t j = threadIdx.x; j < N * HW; j += blockDim.x) {
    const int64_t n = j / HW, at = (n * C + c) * HW + j % HW, ng = n * groups + group;
    const float d = to_float(dy[at]);
    sg += d * (to_float(x[at]) - mean[ng]) * rstd[ng];
    sb += d;
  }
  sg = detail::block_sum(sg, scratch);
  sb = detail::block_sum(sb, scratch);
  if (threadIdx.x == 0) {
    dgamma[c] = detail::from_float<T>(sg);
    dbeta[c] = detail::from_float<T>(sb);
  }
}

void check_group_shape(const char* fn, int64_t N, int64_t C, int64_t HW, int64_t groups) {
  COHORT_CHECK(N >= 0 && C >= 0 && HW >= 0 && groups >= 1 && C % groups == 0 && N * groups <= 0x7fffffff &&
                   C <= 0x7fffffff,
               Status::kInvalidArgument, fn, ": N = ", N, ", C = ", C, ", HW = ", HW, ", groups = ", groups);
}

template <typename T>
void groupnorm_backward_typed(const T* x, const T* gamma, const float* mean, const float* rstd, const T* dy, T* dx,
                              T* dgamma, T* dbeta, int64_t N, int64_t C, int64_t HW, int64_t groups,
                              cudaStream_t stream) {
  if (C == 0) return;  // every output is empty
  groupnorm_param_kernel<T><<<static_cast<unsigned>(C), kGroupThreads, 0, stream>>>(x, mean, rstd, dy, dgamma,
                                                                                    dbeta, N, C, HW, groups);
  COHORT_CUDA_CHECK_LAUNCH("groupnorm_param_kernel");
  if (N > 0) {
    groupnorm_dx_kernel<T><<<static_cast<unsigned>(N * groups), kGroupThreads, 0, stream>>>(
        x, gamma, mean, rstd, dy, dx, C / groups, HW, groups);
    COHORT_CUDA_CHECK_LAUNCH("groupnorm_dx_kernel");
  }
}
}  // namespace

void groupnorm_forward(DType type, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int64_t N, int64_t C, int64_t HW, int64_t groups, float eps,
                       cudaStream_t stream) {
  check_group_shape("cuda groupnorm_forward", N, C, HW, groups);
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>(N * groups);
  if (type == DType::kF32) {
    groupnorm_forward_kernel<float><<<blocks, kGroupThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<const float*>(gamma), static_cast<const float*>(beta),
        static_cast<float*>(y), mean, rstd, C / groups, HW, groups, eps);
  } else {
    groupnorm_forward_kernel<bf16><<<blocks, kGroupThreads, 0, stream>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(gamma), static_cast<const bf16*>(beta),
        static_cast<bf16*>(y), mean, rstd, C / groups, HW, groups, eps);
  }
  COHORT_CUDA_CHECK_LAUNCH("groupnorm_forward_kernel");
}

void groupnorm_backward(DType type, const void* x, const void* gamma, const float* mean, const float* rstd,
                        const void* dy, void* dx, void* dgamma, void* dbeta, int64_t N, int64_t C, int64_t HW,
                        int64_t groups, cudaStream_t stream) {
  check_group_shape("cuda groupnorm_backward", N, C, HW, groups);
  if (type == DType::kF32) {
    groupnorm_backward_typed<float>(static_cast<const float*>(x), static_cast<const float*>(gamma), mean, rstd,
                                    static_cast<const float*>(dy), static_cast<float*>(dx),
                                    static_cast<float*>(dgamma), static_cast<float*>(dbeta), N, C, HW, groups,
                                    stream);
  } else {
    groupnorm_backward_typed<bf16>(static_cast<const bf16*>(x), static_cast<const bf16*>(gamma), mean, rstd,
                                   static_cast<const bf16*>(dy), static_cast<bf16*>(dx), static_cast<bf16*>(dgamma),
                                   static_cast<bf16*>(dbeta), N, C, HW, groups, stream);
  }
}

}  // namespace cohort::kernels::cuda
