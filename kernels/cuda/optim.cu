// Multi-tensor optimizer kernels: one block per OptimChunk, reading its parameter's buffers from
// the table. AdamW reads grad, param, m, v once and writes param, m, v (and the bf16 copy) once —
// 16 (fp32 grad) + 12 (+2) bytes per element, the floor for this update.
#include <algorithm>

#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;

__device__ __forceinline__ float load_grad(const OptimParam& p, int64_t i) {
  return p.grad_type == DType::kBF16 ? __bfloat162float(static_cast<const bf16*>(p.grad)[i])
                                     : static_cast<const float*>(p.grad)[i];
}

// The gradient factor of this update: clip_grad_norm_'s when it clips, else the caller's.
__device__ __forceinline__ float grad_factor(const DeviceClip& clip, float grad_scale) {
  if (clip.sum_sq != nullptr && clip.clip_norm > 0) {
    const double coef = clip.clip_norm / (sqrt(*clip.sum_sq) + 1e-6);
    if (coef < 1.0) return static_cast<float>(coef);
  }
  return grad_scale;
}

// The gradients hold NaN or Inf: the update writes nothing (the CPU optimizer skips it too).
__device__ __forceinline__ bool skip_update(const DeviceClip& clip) {
  return clip.sum_sq != nullptr && !isfinite(*clip.sum_sq);
}

// This block's parameter and element range [begin, end).
struct ChunkRange {
  const OptimParam* p;
  int64_t begin, end;
};
__device__ __forceinline__ ChunkRange chunk_range(const OptimParam* params, const OptimChunk* chunks) {
  const OptimChunk c = chunks[blockIdx.x];
  const OptimParam* p = params + c.param;
  const int64_t begin = int64_t{c.index} * OptimTable::kChunk;
  return {p, begin, min(begin + OptimTable::kChunk, p->n)};
}

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (fixed tree: the same bits for the same inputs); thread 0 gets the result.
__device__ double block_sum_double(double v) {
  __shared__ double scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum_double(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0;
  return warp_sum_double(v);
}

__global__ void chunk_sum_of_squares_kernel(const OptimParam* params, const OptimChunk* chunks,
                                            double* partials) {
  const ChunkRange r = chunk_range(params, chunks);
  double acc = 0.0;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const double g = load_grad(*r.p, i);
    acc += g * g;
  }
  acc = block_sum_double(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void final_sum_kernel(const double* partials, int64_t n, double* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = block_sum_double(acc);
  if (threadIdx.x == 0) *out = acc;
}

template <bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(const OptimParam* params, const OptimChunk* chunks, SgdArgs a, DeviceClip clip) {
  if (skip_update(clip)) return;
  const ChunkRange r = chunk_range(params, chunks);
  const OptimParam p = *r.p;  // in registers: the stores below cannot alias it
  const float scale = grad_factor(clip, a.grad_scale);
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    float g = load_grad(p, i) * scale + a.weight_decay * p.param[i];
    if constexpr (kMomentum) {
      const float buf = a.momentum * p.state0[i] + g;
      p.state0[i] = buf;
      g = kNesterov ? g + a.momentum * buf : buf;
    }
    const float np = p.param[i] - a.lr * g;
    p.param[i] = np;
    if (p.param_bf16) reinterpret_cast<bf16*>(p.param_bf16)[i] = __float2bfloat16_rn(np);
  }
}

// One AdamW element as kernels/cpu/optim.cpp's adamw_element (kMean: the second moment of the
// mean of N ranks' gradients, v~ = m^2 + max(v^ - m^2, 0) / N on bias-corrected moments).
template <bool kMean>
__global__ void adamw_kernel(const OptimParam* params, const OptimChunk* chunks, AdamWArgs a, DeviceClip clip) {
  if (skip_update(clip)) return;
  const ChunkRange r = chunk_range(params, chunks);
  const OptimParam p = *r.p;  // in registers: the stores below cannot alias it
  const float scale = grad_factor(clip, a.grad_scale);
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float one_minus_beta1 = 1.0f - a.beta1, one_minus_beta2 = 1.0f - a.beta2;
  const float inv_bc1 = 1.0f / a.bias_correction1;
  const float inv_bc2 = 1.0f / (a.bias_correction2_sqrt * a.bias_correction2_sqrt);
  const float inv_n = 1.0f / a.noise_ranks;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float g = load_grad(p, i) * scale;
    const float m = a.beta1 * p.state0[i] + one_minus_beta1 * g;
    const float v = a.beta2 * p.state1[i] + one_minus_beta2 * g * g;
    p.state0[i] = m;
    p.state1[i] = v;
    float np;
    // Plain division and sqrtf (IEEE-rounded under nvcc's defaults) to track the CPU loop.
    if constexpr (kMean) {
      const float mh = m * inv_bc1, vh = v * inv_bc2;
      const float var = fmaxf(vh - mh * mh, 0.0f);
      np = p.param[i] * decay - a.lr * (mh / (sqrtf(mh * mh + var * inv_n) + a.eps));
    } else {
      const float denom = sqrtf(v) / a.bias_correction2_sqrt + a.eps;
      np = p.param[i] * decay - a.step_size * (m / denom);
    }
    p.param[i] = np;
    if (p.param_bf16) reinterpret_cast<bf16*>(p.param_bf16)[i] = __float2bfloat16_rn(np);
  }
}

bool same_param(const OptimParam& a, const OptimParam& b) {
  return a.param == b.param && a.grad == b.grad && a.grad_type == b.grad_type && a.state0 == b.state0 &&
         a.state1 == b.state1 && a.param_bf16 == b.param_bf16 && a.n == b.n;
}

// (Re)allocates *ptr to hold `bytes` when *cap is smaller.
void reserve(DeviceAllocator& alloc, cudaStream_t stream, void** ptr, size_t* cap, size_t bytes) {
  if (*cap >= bytes) return;
  if (*ptr) alloc.free(*ptr);
  *ptr = nullptr;
  *cap = 0;
  *ptr = alloc.allocate(bytes, stream);
  *cap = bytes;
}

const OptimParam* params_of(const OptimTable& t) { return static_cast<const OptimParam*>(t.params_device()); }
const OptimChunk* chunks_of(const OptimTable& t) { return static_cast<const OptimChunk*>(t.chunks_device()); }
}  // namespace

OptimTable::~OptimTable() {
  try {
    release();
  } catch (...) {  // a sticky CUDA error at exit: the blocks are the allocator's to reclaim
  }
}

void OptimTable::release() {
  for (void** p : {&params_dev_, &chunks_dev_, &partials_dev_}) {
    if (*p) alloc_.free(*p);
    *p = nullptr;
  }
  params_cap_ = chunks_cap_ = partials_cap_ = 0;
}

void OptimTable::set(const std::vector<OptimParam>& params) {
  if (params.size() == params_host_.size() &&
      std::equal(params.begin(), params.end(), params_host_.begin(), same_param))
    return;
  std::vector<OptimChunk> chunks;
  for (size_t i = 0; i < params.size(); ++i) {
    const OptimParam& p = params[i];
    COHORT_CHECK(p.n >= 0, Status::kInvalidArgument, "cuda optimizer: parameter ", i, " has ", p.n, " elements");
    if (p.n == 0) continue;
    COHORT_CHECK(p.param != nullptr && p.grad != nullptr, Status::kInvalidArgument, "cuda optimizer: parameter ",
                 i, " has no parameter or gradient buffer");
    const int64_t count = (p.n + kChunk - 1) / kChunk;
    COHORT_CHECK(count < (int64_t{1} << 31) && i < (size_t{1} << 31), Status::kInvalidArgument,
                 "cuda optimizer: parameter ", i, " is too large for one table");
    for (int64_t c = 0; c < count; ++c) chunks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c)});
  }
  params_host_.clear();  // until the upload succeeded, nothing matches
  chunk_host_.clear();
  const size_t pbytes = std::max<size_t>(params.size(), 1) * sizeof(OptimParam);
  const size_t cbytes = std::max<size_t>(chunks.size(), 1) * sizeof(OptimChunk);
  reserve(alloc_, stream_, &params_dev_, &params_cap_, pbytes);
  reserve(alloc_, stream_, &chunks_dev_, &chunks_cap_, cbytes);
  reserve(alloc_, stream_, &partials_dev_, &partials_cap_, std::max<size_t>(chunks.size(), 1) * sizeof(double));
  // From pageable memory: each call returns once the bytes are staged, so the vectors may change.
  if (!params.empty())
    COHORT_CUDA_CHECK(cudaMemcpyAsync(params_dev_, params.data(), params.size() * sizeof(OptimParam),
                                      cudaMemcpyHostToDevice, stream_));
  if (!chunks.empty())
    COHORT_CUDA_CHECK(cudaMemcpyAsync(chunks_dev_, chunks.data(), chunks.size() * sizeof(OptimChunk),
                                      cudaMemcpyHostToDevice, stream_));
  params_host_ = params;
  chunk_host_ = std::move(chunks);
}

void grad_sum_of_squares(const OptimTable& t, double* sum_sq) {
  COHORT_CHECK(sum_sq != nullptr, Status::kInvalidArgument, "cuda grad_sum_of_squares: no output");
  if (t.chunks() > 0) {
    chunk_sum_of_squares_kernel<<<static_cast<unsigned>(t.chunks()), kThreads, 0, t.stream()>>>(
        params_of(t), chunks_of(t), t.partials_device());
    COHORT_CUDA_CHECK_LAUNCH("chunk_sum_of_squares_kernel");
  }
  final_sum_kernel<<<1, kFinalThreads, 0, t.stream()>>>(t.partials_device(), t.chunks(), sum_sq);
  COHORT_CUDA_CHECK_LAUNCH("final_sum_kernel");
}

void sgd_update(const OptimTable& t, const SgdArgs& a, const DeviceClip& clip) {
  for (size_t i = 0; i < t.params().size(); ++i)
    COHORT_CHECK(a.momentum == 0.0f || t.params()[i].n == 0 || t.params()[i].state0 != nullptr,
                 Status::kInvalidArgument, "cuda sgd_update: parameter ", i, " has no momentum buffer");
  if (t.chunks() == 0) return;
  const unsigned grid = static_cast<unsigned>(t.chunks());
  if (a.momentum == 0.0f) {
    sgd_kernel<false, false><<<grid, kThreads, 0, t.stream()>>>(params_of(t), chunks_of(t), a, clip);
  } else if (a.nesterov) {
    sgd_kernel<true, true><<<grid, kThreads, 0, t.stream()>>>(params_of(t), chunks_of(t), a, clip);
  } else {
    sgd_kernel<true, false><<<grid, kThreads, 0, t.stream()>>>(params_of(t), chunks_of(t), a, clip);
  }
  COHORT_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void adamw_update(const OptimTable& t, const AdamWArgs& a, const DeviceClip& clip) {
  for (size_t i = 0; i < t.params().size(); ++i) {
    const OptimParam& p = t.params()[i];
    COHORT_CHECK(p.n == 0 || (p.state0 != nullptr && p.state1 != nullptr), Status::kInvalidArgument,
                 "cuda adamw_update: parameter ", i, " has no exp_avg / exp_avg_sq buffer");
  }
  if (t.chunks() == 0) return;
  const unsigned grid = static_cast<unsigned>(t.chunks());
  if (a.noise_ranks > 1.0f) {
    adamw_kernel<true><<<grid, kThreads, 0, t.stream()>>>(params_of(t), chunks_of(t), a, clip);
  } else {
    adamw_kernel<false><<<grid, kThreads, 0, t.stream()>>>(params_of(t), chunks_of(t), a, clip);
  }
  COHORT_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace cohort::kernels::cuda
