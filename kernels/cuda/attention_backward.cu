// Attention backward (Dao et al. 2022, FlashAttention, alg. 4, without atomics). Every output
// element has one writer, so the result is deterministic. The probabilities are recomputed from
// the saved lse, P_ij = exp(scale q_i.k_j - lse_i):
//   delta_i = sum_d dO_id O_id
//   dS_ij = P_ij (dP_ij - delta_i), dP_ij = dO_i.v_j
//   dQ_i = scale sum_j dS_ij k_j               (one pass over the keys per block of queries)
//   dK_j = scale sum_i dS_ij q_i, dV_j = sum_i P_ij dO_i   (one pass over the queries per block
//                                                            of keys)
// Scores are computed twice (once per side) — the price of no atomics. As the forward: D 64 and
// 128 with bf16, or fp32 when TF32 is allowed, run on tensor cores (attention_flash.cuh, with a
// 16-byte vector delta kernel); otherwise fp32 CUDA-core kernels, one row per query
// (attention_dq_kernel: keys streamed through shared memory) and one row per key
// (attention_dkv_kernel: queries streamed).
#include <algorithm>

#include "core/base/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_mma.cuh"
// The primitives above come first: attention_flash*.cuh are written against them.
#include "kernels/cuda/attention_flash_backward.cuh"

namespace cohort::kernels::cuda {

namespace {
using detail::AttnShape;
using detail::bf16;
using detail::kAttnThreads;
using detail::kDpt;
using detail::kTile;

// delta [B, H, T]; one thread per (b, t, h).
template <typename T>
__global__ void attention_delta_kernel(const T* out, const T* dout, float* delta, int64_t rows,
                                       AttnShape s) {
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= rows * s.H) return;
  const int64_t bt = idx / s.H;
  const int h = static_cast<int>(idx - bt * s.H);
  const int64_t off = bt * s.H * s.D + h * s.D;
  float acc = 0.0f;
  for (int d = 0; d < s.D; ++d)
    acc += detail::to_float(out[off + d]) * detail::to_float(dout[off + d]);
  const int64_t b = bt / s.T, t = bt - b * s.T;
  delta[(b * s.H + h) * s.T + t] = acc;
}

template <typename T>
__global__ void attention_dq_kernel(const T* qkv, const T* dout, const float* lse,
                                    const float* delta, T* dqkv, AttnShape s) {
  extern __shared__ float4 smem4[];
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kTile * s.D;
  const int rows = kAttnThreads / s.P, bh = blockIdx.y, b = bh / s.H, h = bh - b * s.H;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * rows, local = threadIdx.x / s.P,
            part = threadIdx.x - local * s.P;
  const bool valid = i0 + local < s.T;
  const int i = valid ? i0 + local : s.T - 1;
  const int C = s.H * s.D;
  const int64_t ld = 3 * int64_t{C};
  const T* base = qkv + int64_t{b} * s.T * ld;
  float q[kDpt], g[kDpt], dq[kDpt] = {};
  detail::load16(base + i * ld + h * s.D + part * kDpt, q, s.scale);
  detail::load16(dout + (int64_t{b} * s.T + i) * C + h * s.D + part * kDpt, g);
  const int64_t stat = (int64_t{b} * s.H + h) * s.T + i;
  const float lse_i = lse[stat], delta_i = delta[stat];
  const int row_last = s.causal ? i : s.T - 1;
  const int block_last = s.causal ? min(i0 + rows, s.T) - 1 : s.T - 1;
  for (int k0 = 0; k0 <= block_last; k0 += kTile) {
    __syncthreads();
    detail::load_rows_tile(base + C + h * s.D, ld, k0, s.T, s.D, sK);
    detail::load_rows_tile(base + 2 * C + h * s.D, ld, k0, s.T, s.D, sV);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kTile; ++j) {
      const float* kj = sK + j * s.D + part * kDpt;
      const float qk = detail::group_sum(detail::dot16(q, kj), s.P);
      const float dp = detail::group_sum(detail::dot16(g, sV + j * s.D + part * kDpt), s.P);
      const float p = k0 + j <= row_last ? expf(qk - lse_i) : 0.0f;
      detail::axpy16(dq, p * (dp - delta_i), kj);
    }
  }
  if (!valid) return;
  T* row = dqkv + (int64_t{b} * s.T + i) * ld + h * s.D + part * kDpt;
#pragma unroll
  for (int t = 0; t < kDpt; ++t) row[t] = detail::from_float<T>(dq[t] * s.scale);
}

template <typename T>
__global__ void attention_dkv_kernel(const T* qkv, const T* dout, const float* lse,
                                     const float* delta, T* dqkv, AttnShape s) {
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sG = sQ + kTile * s.D;  // dO rows
  float* sL = sG + kTile * s.D;  // lse of the tile's queries
  float* sD = sL + kTile;        // delta of the tile's queries
  const int rows = kAttnThreads / s.P, bh = blockIdx.y, b = bh / s.H, h = bh - b * s.H;
  const int j0 = blockIdx.x * rows, local = threadIdx.x / s.P, part = threadIdx.x - local * s.P;
  const bool valid = j0 + local < s.T;
  const int j = valid ? j0 + local : s.T - 1;
  const int C = s.H * s.D;
  const int64_t ld = 3 * int64_t{C};
  const T* base = qkv + int64_t{b} * s.T * ld;
  float k[kDpt], v[kDpt], dk[kDpt] = {}, dv[kDpt] = {};
  detail::load16(base + j * ld + C + h * s.D + part * kDpt, k, s.scale);
  detail::load16(base + j * ld + 2 * C + h * s.D + part * kDpt, v);
  const float* lse_bh = lse + (int64_t{b} * s.H + h) * s.T;
  const float* delta_bh = delta + (int64_t{b} * s.H + h) * s.T;
  for (int q0 = s.causal ? j0 : 0; q0 < s.T; q0 += kTile) {  // causal: queries i >= j only
    __syncthreads();
    detail::load_rows_tile(base + h * s.D, ld, q0, s.T, s.D, sQ);
    detail::load_rows_tile(dout + int64_t{b} * s.T * C + h * s.D, C, q0, s.T, s.D, sG);
    if (threadIdx.x < kTile) {
      const int qi = q0 + threadIdx.x;
      sL[threadIdx.x] = qi < s.T ? lse_bh[qi] : 0.0f;
      sD[threadIdx.x] = qi < s.T ? delta_bh[qi] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kTile; ++r) {
      const int qi = q0 + r;
      const float* qr = sQ + r * s.D + part * kDpt;
      const float* gr = sG + r * s.D + part * kDpt;
      const float qk = detail::group_sum(detail::dot16(k, qr), s.P);  // k carries the scale
      const float dp = detail::group_sum(detail::dot16(v, gr), s.P);
      const bool live = qi < s.T && (!s.causal || qi >= j);
      const float p = live ? expf(qk - sL[r]) : 0.0f;
      detail::axpy16(dv, p, gr);
      detail::axpy16(dk, p * (dp - sD[r]), qr);
    }
  }
  if (!valid) return;
  T* row = dqkv + (int64_t{b} * s.T + j) * ld + h * s.D + part * kDpt;
#pragma unroll
  for (int t = 0; t < kDpt; ++t) {
    row[C + t] = detail::from_float<T>(dk[t] * s.scale);
    row[2 * C + t] = detail::from_float<T>(dv[t]);
  }
}

template <typename T>
void launch_backward(const AttentionDims& d, const AttnShape& s, const void* qkv, const void* out,
                     const float* lse, const void* dout, void* dqkv, float* delta,
                     cudaStream_t stream) {
  const auto* x = static_cast<const T*>(qkv);
  const auto* g = static_cast<const T*>(dout);
  auto* dx = static_cast<T*>(dqkv);
  const int64_t rows = d.B * d.T;
  attention_delta_kernel<T><<<detail::grid_for(rows * d.H, 256, INT32_MAX), 256, 0, stream>>>(
      static_cast<const T*>(out), g, delta, rows, s);
  COHORT_CUDA_CHECK_LAUNCH("attention_delta_kernel");
  const int per_block = kAttnThreads / s.P;
  const dim3 grid(static_cast<unsigned>((d.T + per_block - 1) / per_block),
                  static_cast<unsigned>(d.B * d.H));
  const size_t smem = 2 * kTile * static_cast<size_t>(d.D) * sizeof(float);
  attention_dq_kernel<T><<<grid, kAttnThreads, smem, stream>>>(x, g, lse, delta, dx, s);
  COHORT_CUDA_CHECK_LAUNCH("attention_dq_kernel");
  attention_dkv_kernel<T>
      <<<grid, kAttnThreads, smem + 2 * kTile * sizeof(float), stream>>>(x, g, lse, delta, dx, s);
  COHORT_CUDA_CHECK_LAUNCH("attention_dkv_kernel");
}

namespace flash = detail::flash;

// delta [B, H, T] with one thread per 16 bytes of out and dout: the G = D / kN threads of a
// head's row are adjacent lanes (G divides 32) and join their sums by xor shuffles.
template <typename T, int G>
__global__ void attention_delta_vec_kernel(const T* out, const T* dout, float* delta,
                                           int64_t chunks, int T_, int H, int D) {
  constexpr int kN = detail::Vec<T>::kN;
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const bool valid = idx < chunks;
  float acc = 0.0f;
  if (valid) {
    float o[kN], g[kN];
    detail::load_vec(out + idx * kN, o);
    detail::load_vec(dout + idx * kN, g);
#pragma unroll
    for (int i = 0; i < kN; ++i) acc += o[i] * g[i];
  }
#pragma unroll
  for (int off = G / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (valid && idx % G == 0) {
    const int64_t e = idx * kN, C = int64_t{H} * D, row = e / C, b = row / T_;
    const int64_t h = (e - row * C) / D, t = row - b * T_;
    delta[(b * H + h) * T_ + t] = acc;
  }
}

// dQ: blockIdx.y 0 takes the last query tile (with a causal mask the longest).
template <typename T, int D>
__global__ void __launch_bounds__(flash::kThreads, (flash::DqConfig<T, D>::kMinBlocks))
    attention_flash_dq_kernel(const flash::BackwardArgs a) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  flash::dq_block<T, D>(a, static_cast<int>(blockIdx.x),
                        static_cast<int>(gridDim.y - 1 - blockIdx.y), static_cast<int>(threadIdx.x),
                        reinterpret_cast<T*>(flash_smem));
}

// dK, dV: blockIdx.y 0 takes the first key block (with a causal mask the longest).
template <typename T, int D>
__global__ void __launch_bounds__(flash::kThreads, (flash::DkvConfig<T, D>::kMinBlocks))
    attention_flash_dkv_kernel(const flash::BackwardArgs a) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  flash::dkv_block<T, D>(a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                         static_cast<int>(threadIdx.x), reinterpret_cast<T*>(flash_smem));
}

template <typename Kernel>
void launch_flash(Kernel* kernel, const char* name, const AttentionDims& d, int tiles, int smem,
                  const flash::BackwardArgs& a, cudaStream_t stream) {
  COHORT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>(d.B * d.H), static_cast<unsigned>(tiles));
  kernel<<<grid, flash::kThreads, smem, stream>>>(a);
  COHORT_CUDA_CHECK_LAUNCH(name);
}

template <typename T, int D>
void launch_flash_backward(const AttentionDims& d, const void* qkv, const void* out,
                           const float* lse, const void* dout, void* dqkv, float* delta,
                           cudaStream_t stream) {
  constexpr int kN = detail::Vec<T>::kN;
  const int64_t chunks = d.B * d.T * d.H * D / kN;
  attention_delta_vec_kernel<T, D / kN>
      <<<static_cast<unsigned>((chunks + 255) / 256), 256, 0, stream>>>(
          static_cast<const T*>(out), static_cast<const T*>(dout), delta, chunks,
          static_cast<int>(d.T), static_cast<int>(d.H), D);
  COHORT_CUDA_CHECK_LAUNCH("attention_delta_vec_kernel");
  const flash::BackwardArgs a{qkv,
                              dout,
                              lse,
                              delta,
                              dqkv,
                              static_cast<int>(d.T),
                              static_cast<int>(d.H),
                              static_cast<int>(d.H * D),
                              d.scale,
                              d.scale * flash::kLog2e,
                              d.causal};
  const int T_ = static_cast<int>(d.T);
  using Dq = flash::DqConfig<T, D>;
  using Dkv = flash::DkvConfig<T, D>;
  launch_flash(attention_flash_dq_kernel<T, D>, "attention_flash_dq_kernel", d, Dq::tiles(T_),
               Dq::kSmemBytes, a, stream);
  launch_flash(attention_flash_dkv_kernel<T, D>, "attention_flash_dkv_kernel", d, Dkv::tiles(T_),
               Dkv::kSmemBytes, a, stream);
}

template <typename T>
void launch_flash_backward(const AttentionDims& d, const void* qkv, const void* out,
                           const float* lse, const void* dout, void* dqkv, float* delta,
                           cudaStream_t stream) {
  if (d.D == 64)
    launch_flash_backward<T, 64>(d, qkv, out, lse, dout, dqkv, delta, stream);
  else
    launch_flash_backward<T, 128>(d, qkv, out, lse, dout, dqkv, delta, stream);
}
}  // namespace

int64_t attention_backward_workspace(const AttentionDims& d) {
  return std::max(d.B * d.H * d.T, attention_cudnn_backward_workspace(d));  // cuDNN's when it may run
}

void attention_backward(DType type, const AttentionDims& d, const void* qkv, const void* out,
                        const float* lse, const void* dout, void* dqkv, float* workspace,
                        cudaStream_t stream, bool allow_tf32) {
  COHORT_CHECK(d.B >= 0 && d.T >= 0 && d.H > 0 && d.T < (int64_t{1} << 30),
               Status::kInvalidArgument, "cuda attention_backward: B = ", d.B, ", T = ", d.T,
               ", H = ", d.H);
  COHORT_CHECK(attention_supports_head_size(d.D), Status::kUnsupported,
               "cuda attention_backward: head size D = ", d.D, " (supported: 16, 32, 64, 128)");
  COHORT_CHECK(workspace != nullptr, Status::kInvalidArgument,
               "cuda attention_backward: null workspace");
  if (d.B == 0 || d.T == 0) return;
  if (attention_cudnn_backward(type, d, qkv, out, lse, dout, dqkv, workspace, stream)) return;
  if (attention_uses_tensor_cores(type, d, allow_tf32) && detail::aligned16(qkv) &&
      detail::aligned16(out) && detail::aligned16(dout) && detail::aligned16(dqkv)) {
    if (type == DType::kF32)
      launch_flash_backward<float>(d, qkv, out, lse, dout, dqkv, workspace, stream);
    else
      launch_flash_backward<bf16>(d, qkv, out, lse, dout, dqkv, workspace, stream);
    return;
  }
  COHORT_CHECK(
      d.B * d.H < 65536, Status::kUnsupported, "cuda attention_backward: B * H = ", d.B * d.H,
      " needs the tensor-core kernels (D 64 or 128, bf16 or TF32 allowed, 16-byte aligned)");
  const AttnShape s{static_cast<int>(d.T),
                    static_cast<int>(d.H),
                    static_cast<int>(d.D),
                    static_cast<int>(d.D / kDpt),
                    d.scale,
                    d.causal};
  if (type == DType::kF32)
    launch_backward<float>(d, s, qkv, out, lse, dout, dqkv, workspace, stream);
  else
    launch_backward<bf16>(d, s, qkv, out, lse, dout, dqkv, workspace, stream);
}

}  // namespace cohort::kernels::cuda
