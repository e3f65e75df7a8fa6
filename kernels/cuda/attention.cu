// Attention forward. Two kernels:
// - D 64 and 128 with bf16, or fp32 when TF32 is allowed: the tensor-core kernel of
//   attention_flash.cuh (FlashAttention-2 tiles on mma.sync; fp32 products in TF32).
// - Otherwise (D 16 and 32, or fp32 with exact products): a tiled kernel with fp32 CUDA-core
//   math. A block of 128 threads owns a tile of query rows of one (b, h); each row is split
//   over P = D / 16 adjacent lanes holding 16 dims of q and of the output accumulator in
//   registers. Keys and values stream through shared memory 32 at a time; per tile each row
//   computes its 32 scores (partial dots joined by xor shuffles inside the P lanes), then one
//   online-softmax rescale:
//     m' = max(m, max_j s_j), l' = l e^(m - m') + sum_j e^(s_j - m'), o' = o e^(m - m') + sum_j
//     e^(s_j - m') v_j
//   (Milakov & Gimelshein 2018; Dao et al. 2022 alg. 1). With a causal mask a block stops at
//   its last row's key.
#include "core/base/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_mma.cuh"
// The primitives above come first: attention_flash*.cuh are written against them.
#include "kernels/cuda/attention_flash.cuh"
#include "kernels/cuda/attention_flash_backward.cuh"  // its configs: the shared memory to check

namespace cohort::kernels::cuda {

namespace {
using detail::AttnShape;
using detail::bf16;
using detail::kAttnThreads;
using detail::kDpt;
using detail::kTile;

template <typename T>
__global__ void attention_forward_kernel(const T* qkv, T* out, float* lse, AttnShape s) {
  extern __shared__ float4 smem4[];
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kTile * s.D;
  const int rows = kAttnThreads / s.P, bh = blockIdx.y, b = bh / s.H, h = bh - b * s.H;
  // Causal blocks late in the sequence see the most keys: schedule them first (less tail).
  const int i0 = (gridDim.x - 1 - blockIdx.x) * rows, local = threadIdx.x / s.P,
            part = threadIdx.x - local * s.P;
  const bool valid = i0 + local < s.T;
  const int i = valid ? i0 + local : s.T - 1;  // padding rows compute row T-1 and write nothing
  const int C = s.H * s.D;
  const int64_t ld = 3 * int64_t{C};
  const T* base = qkv + int64_t{b} * s.T * ld;
  float q[kDpt], o[kDpt] = {};
  detail::load16(base + i * ld + h * s.D + part * kDpt, q, s.scale);
  float m = -INFINITY, l = 0.0f;
  const int row_last = s.causal ? i : s.T - 1;
  const int block_last = s.causal ? min(i0 + rows, s.T) - 1 : s.T - 1;
  for (int k0 = 0; k0 <= block_last; k0 += kTile) {
    __syncthreads();
    detail::load_rows_tile(base + C + h * s.D, ld, k0, s.T, s.D, sK);
    detail::load_rows_tile(base + 2 * C + h * s.D, ld, k0, s.T, s.D, sV);
    __syncthreads();
    float sc[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float acc = detail::group_sum(detail::dot16(q, sK + j * s.D + part * kDpt), s.P);
      sc[j] = k0 + j <= row_last ? acc : -INFINITY;
      tile_max = fmaxf(tile_max, sc[j]);
    }
    const float m_new = fmaxf(m, tile_max);  // finite: key 0 is in every row's first tile
    const float corr = expf(m - m_new);
    l *= corr;
#pragma unroll
    for (int t = 0; t < kDpt; ++t) o[t] *= corr;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float p = expf(sc[j] - m_new);
      l += p;
      detail::axpy16(o, p, sV + j * s.D + part * kDpt);
    }
    m = m_new;
  }
  if (!valid) return;
  const float inv = 1.0f / l;
  T* orow = out + (int64_t{b} * s.T + i) * C + h * s.D + part * kDpt;
#pragma unroll
  for (int t = 0; t < kDpt; ++t) orow[t] = detail::from_float<T>(o[t] * inv);
  if (part == 0) lse[(int64_t{b} * s.H + h) * s.T + i] = m + logf(l);
}

namespace flash = detail::flash;

// Causal: the last query tiles see the most keys; blockIdx.y 0 takes the last (a shorter tail).
template <typename T, int D>
__global__ void __launch_bounds__(flash::kThreads, (flash::ForwardConfig<T, D>::kMinBlocks))
    attention_flash_forward_kernel(const flash::ForwardArgs a) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  flash::forward_block<T, D>(a, static_cast<int>(blockIdx.x),
                             static_cast<int>(gridDim.y - 1 - blockIdx.y),
                             static_cast<int>(threadIdx.x), reinterpret_cast<T*>(flash_smem));
}

template <typename T, int D>
void launch_flash_forward(const AttentionDims& d, const void* qkv, void* out, float* lse,
                          cudaStream_t stream) {
  using Cfg = flash::ForwardConfig<T, D>;
  const flash::ForwardArgs a{qkv,
                             out,
                             lse,
                             static_cast<int>(d.T),
                             static_cast<int>(d.H),
                             static_cast<int>(d.H * d.D),
                             d.scale * flash::kLog2e,
                             d.causal};
  auto* kernel = attention_flash_forward_kernel<T, D>;
  COHORT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(d.B * d.H),
                  static_cast<unsigned>(Cfg::tiles(static_cast<int>(d.T))));
  kernel<<<grid, flash::kThreads, Cfg::kSmemBytes, stream>>>(a);
  COHORT_CUDA_CHECK_LAUNCH("attention_flash_forward_kernel");
}

template <typename T>
void launch_flash_forward(const AttentionDims& d, const void* qkv, void* out, float* lse,
                          cudaStream_t stream) {
  if (d.D == 64)
    launch_flash_forward<T, 64>(d, qkv, out, lse, stream);
  else
    launch_flash_forward<T, 128>(d, qkv, out, lse, stream);
}
}  // namespace

namespace {
// The most shared memory any of the three tensor-core kernels of (type, D) asks for.
template <typename T, int D>
int flash_smem_bytes() {
  const int fwd = flash::ForwardConfig<T, D>::kSmemBytes, dq = flash::DqConfig<T, D>::kSmemBytes,
            dkv = flash::DkvConfig<T, D>::kSmemBytes;
  return fwd > dq ? (fwd > dkv ? fwd : dkv) : (dq > dkv ? dq : dkv);
}
}  // namespace

bool attention_uses_tensor_cores(DType type, const AttentionDims& d, bool allow_tf32) {
  if (!((d.D == 64 || d.D == 128) && (type == DType::kBF16 || allow_tf32) &&
        d.T <= int64_t{65535} * 64 && d.H * d.D < (int64_t{1} << 30) &&
        d.B * d.H < (int64_t{1} << 31)))
    return false;
  // Up to 99.3 KB a block: more than some GPUs allow (sm_86 opts in to 99 KB).
  const int need =
      type == DType::kF32
          ? (d.D == 64 ? flash_smem_bytes<float, 64>() : flash_smem_bytes<float, 128>())
          : (d.D == 64 ? flash_smem_bytes<bf16, 64>() : flash_smem_bytes<bf16, 128>());
  int device = 0, optin = 0;
  COHORT_CUDA_CHECK(cudaGetDevice(&device));
  COHORT_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return need <= optin;
}

bool attention_supports_head_size(int64_t D) { return D == 16 || D == 32 || D == 64 || D == 128; }

void attention_forward(DType type, const AttentionDims& d, const void* qkv, void* out, float* lse,
                       cudaStream_t stream, bool allow_tf32) {
  COHORT_CHECK(d.B >= 0 && d.T >= 0 && d.H > 0 && d.T < (int64_t{1} << 30),
               Status::kInvalidArgument, "cuda attention_forward: B = ", d.B, ", T = ", d.T,
               ", H = ", d.H);
  COHORT_CHECK(attention_supports_head_size(d.D), Status::kUnsupported,
               "cuda attention_forward: head size D = ", d.D, " (supported: 16, 32, 64, 128)");
  if (d.B == 0 || d.T == 0) return;
  if (attention_cudnn_forward(type, d, qkv, out, lse, stream)) return;  // bf16 where cuDNN takes it
  if (attention_uses_tensor_cores(type, d, allow_tf32) && detail::aligned16(qkv) &&
      detail::aligned16(out)) {
    if (type == DType::kF32)
      launch_flash_forward<float>(d, qkv, out, lse, stream);
    else
      launch_flash_forward<bf16>(d, qkv, out, lse, stream);
    return;
  }
  COHORT_CHECK(
      d.B * d.H < 65536, Status::kUnsupported, "cuda attention_forward: B * H = ", d.B * d.H,
      " needs the tensor-core kernel (D 64 or 128, bf16 or TF32 allowed, 16-byte aligned)");
  detail::AttnShape s{static_cast<int>(d.T),
                      static_cast<int>(d.H),
                      static_cast<int>(d.D),
                      static_cast<int>(d.D / kDpt),
                      d.scale,
                      d.causal};
  const int rows = kAttnThreads / s.P;
  const dim3 grid(static_cast<unsigned>((d.T + rows - 1) / rows), static_cast<unsigned>(d.B * d.H));
  const size_t smem = 2 * kTile * static_cast<size_t>(d.D) * sizeof(float);  // <= 32 KB
  if (type == DType::kF32) {
    attention_forward_kernel<float><<<grid, kAttnThreads, smem, stream>>>(
        static_cast<const float*>(qkv), static_cast<float*>(out), lse, s);
  } else {
    attention_forward_kernel<bf16><<<grid, kAttnThreads, smem, stream>>>(
        static_cast<const bf16*>(qkv), static_cast<bf16*>(out), lse, s);
  }
  COHORT_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

}  // namespace cohort::kernels::cuda
