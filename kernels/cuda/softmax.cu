// Cross-entropy kernels: one block per row of [N, V]. The log-sum-exp is computed in one pass
// with the online softmax recurrence (Milakov & Gimelshein 2018, "Online normalizer calculation
// for softmax", alg. 3): each thread keeps a running max m and sum s of e^(x - m), rescaling s
// when m grows; the block then combines (m, s) pairs. The gradient pass re-reads the row (from
// L2 for GPT-2's V = 50257 rows of 200 KB) and writes softmax - onehot.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::to_float;
constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // elements in flight per thread

// Block-wide log-sum-exp of one row. Each thread reads kUnroll elements per step before using
// any (independent loads in flight), and rescales its sum at most once per step.
template <typename T>
__device__ float row_lse(const T* x, int64_t V, float* scratch) {
  float m = -INFINITY, s = 0.0f;
  const int64_t step = blockDim.x;
  int64_t j = threadIdx.x;
  for (; j + (kUnroll - 1) * step < V; j += kUnroll * step) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = to_float(x[j + u * step]);
    float vm = v[0];
#pragma unroll
    for (int u = 1; u < kUnroll; ++u) vm = fmaxf(vm, v[u]);
    if (vm > m) {
      s *= expf(m - vm);  // m = -inf: s is 0 and stays 0
      m = vm;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) s += expf(v[u] - m);
  }
  for (; j < V; j += step) {
    const float v = to_float(x[j]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float bm = detail::block_max(m, scratch);
  // A thread that saw no element keeps s = 0 (and m = -inf): it adds nothing. A NaN element made
  // s NaN while m may still be -inf (fmaxf and `>` pass over NaN): it must reach the sum, so the
  // test is on s, not on m (a row holding NaN has lse NaN, as on the CPU).
  const float scaled = s == 0.0f ? 0.0f : s * expf(m - bm);
  const float bs = detail::block_sum(scaled, scratch);
  return bm + logf(bs);
}

// dx = (e^(x - lse) - onehot) * scale over the row; in place is safe: every element is read
// by the thread that writes it, before the write.
template <typename T>
__device__ void row_grad(const T* x, T* dx, int64_t V, float lse, int64_t label, float scale,
                         bool ignored) {
  const int64_t step = blockDim.x;
  int64_t j = threadIdx.x;
  for (; j + (kUnroll - 1) * step < V; j += kUnroll * step) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = to_float(x[j + u * step]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = j + u * step;
      const float g = ignored ? 0.0f : (expf(v[u] - lse) - (k == label ? 1.0f : 0.0f)) * scale;
      dx[k] = detail::from_float<T>(g);
    }
  }
  for (; j < V; j += step) {
    const float g =
        ignored ? 0.0f : (expf(to_float(x[j]) - lse) - (j == label ? 1.0f : 0.0f)) * scale;
    dx[j] = detail::from_float<T>(g);
  }
}

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* labels, float* loss,
                                             float* lse, T* dlogits, float scale, int64_t V,
                                             int64_t ignore_index) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* x = logits + r * V;
  const float l = row_lse(x, V, scratch);
  const int64_t label = labels[r];
  const bool ignored = label == ignore_index, bad = !ignored && (label < 0 || label >= V);
  if (threadIdx.x == 0) {
    lse[r] = l;
    loss[r] = ignored ? 0.0f : bad ? NAN : l - to_float(x[label]);
  }
  if (dlogits) {
    __syncthreads();  // x[label] is read above before an in-place gradient overwrites it
    row_grad(x, dlogits + r * V, V, l, label, scale, ignored);
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* labels,
                                              const float* lse, T* dlogits, const float* scale,
                                              int64_t V, int64_t ignore_index) {
  const int64_t r = blockIdx.x;
  const int64_t label = labels[r];
  row_grad(logits + r * V, dlogits + r * V, V, lse[r], label, *scale, label == ignore_index);
}

template <typename T>
__global__ void cross_entropy_grad_scale_kernel(const int32_t* labels, int64_t N, int64_t ignore_index,
                                                const T* dloss, bool mean, float* scale) {
  __shared__ unsigned long long count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) mine += labels[r] != ignore_index ? 1 : 0;
  atomicAdd(&count, mine);  // integers: the same total in any order
  __syncthreads();
  if (threadIdx.x == 0) {
    const double d = to_float(dloss[0]);
    *scale = static_cast<float>(!mean ? d : count > 0 ? d / static_cast<double>(count) : 0.0);
  }
}

template <typename T>
__global__ void cross_entropy_loss_kernel(const float* sums, bool mean, T* loss) {
  const double total = sums[0];
  loss[0] = detail::from_float<T>(
      static_cast<float>(!mean ? total : sums[1] > 0.0f ? total / static_cast<double>(sums[1]) : 0.0));
}

__global__ void cross_entropy_reduce_kernel(const float* loss, const int32_t* labels, int64_t N,
                                            int64_t ignore_index, float* out) {
  __shared__ float scratch[32];
  float s = 0.0f, c = 0.0f;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    if (labels[r] == ignore_index) continue;
    s += loss[r];
    c += 1.0f;
  }
  s = detail::block_sum(s, scratch);
  c = detail::block_sum(c, scratch);
  if (threadIdx.x == 0) {
    out[0] = s;
    out[1] = c;
  }
}

// One block per row of n (inner == 1).
template <typename T>
__global__ void softmax_row_kernel(const T* x, T* y, int64_t n, bool log) {
  __shared__ float scratch[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  const float l = row_lse(xr, n, scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = to_float(xr[j]) - l;
    yr[j] = detail::from_float<T>(log ? v : expf(v));
  }
}

template <typename T>
__global__ void softmax_row_backward_kernel(const T* y, const T* dy, T* dx, int64_t n, bool log) {
  __shared__ float scratch[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += log ? to_float(dy[off + j]) : to_float(dy[off + j]) * to_float(y[off + j]);
  acc = detail::block_sum(acc, scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float yj = to_float(y[off + j]), dyj = to_float(dy[off + j]);
    dx[off + j] = detail::from_float<T>(log ? dyj - expf(yj) * acc : yj * (dyj - acc));
  }
}

// One thread per (outer, inner) column (inner > 1): the column's n elements are inner apart.
template <typename T>
__global__ void softmax_column_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * n * inner + c % inner;
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = fmaxf(m, to_float(x[base + j * inner]));
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) s += expf(to_float(x[base + j * inner]) - m);
  const float l = m + logf(s);
  for (int64_t j = 0; j < n; ++j) {
    const float v = to_float(x[base + j * inner]) - l;
    y[base + j * inner] = detail::from_float<T>(log ? v : expf(v));
  }
}

template <typename T>
__global__ void softmax_column_backward_kernel(const T* y, const T* dy, T* dx, int64_t outer, int64_t n,
                                               int64_t inner, bool log) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * n * inner + c % inner;
  float acc = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = base + j * inner;
    acc += log ? to_float(dy[k]) : to_float(dy[k]) * to_float(y[k]);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = base + j * inner;
    const float yk = to_float(y[k]), dyk = to_float(dy[k]);
    dx[k] = detail::from_float<T>(log ? dyk - expf(yk) * acc : yk * (dyk - acc));
  }
}

template <typename T>
void softmax_launch(const void* x, const void* dy, void* out, int64_t outer, int64_t n, int64_t inner, bool log,
                    cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  T* o = static_cast<T*>(out);
  if (inner == 1) {
    COHORT_CHECK(outer < (int64_t{1} << 31), Status::kInvalidArgument, "cuda softmax: ", outer, " rows");
    const auto grid = static_cast<unsigned>(outer);
    if (dy) softmax_row_backward_kernel<T><<<grid, 256, 0, stream>>>(xt, static_cast<const T*>(dy), o, n, log);
    else softmax_row_kernel<T><<<grid, 256, 0, stream>>>(xt, o, n, log);
  } else {
    const int64_t columns = outer * inner;
    const auto grid = static_cast<unsigned>((columns + 255) / 256);
    if (dy)
      softmax_column_backward_kernel<T><<<grid, 256, 0, stream>>>(xt, static_cast<const T*>(dy), o, outer, n,
                                                                  inner, log);
    else
      softmax_column_kernel<T><<<grid, 256, 0, stream>>>(xt, o, outer, n, inner, log);
  }
}

void check_shape(const char* fn, int64_t N, int64_t V) {
  COHORT_CHECK(N >= 0 && N < (int64_t{1} << 31) && V > 0, Status::kInvalidArgument, fn, ": N = ", N,
               ", V = ", V);
}
}  // namespace

void cross_entropy_forward(DType type, const void* logits, const int32_t* labels, float* loss,
                           float* lse, void* dlogits, float grad_scale, int64_t N, int64_t V,
                           int64_t ignore_index, cudaStream_t stream) {
  check_shape("cuda cross_entropy_forward", N, V);
  if (N == 0) return;
  const auto grid = static_cast<unsigned>(N);
  if (type == DType::kF32) {
    cross_entropy_forward_kernel<float>
        <<<grid, kThreads, 0, stream>>>(static_cast<const float*>(logits), labels, loss, lse,
                                        static_cast<float*>(dlogits), grad_scale, V, ignore_index);
  } else {
    cross_entropy_forward_kernel<bf16>
        <<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(logits), labels, loss, lse,
                                        static_cast<bf16*>(dlogits), grad_scale, V, ignore_index);
  }
  COHORT_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

void cross_entropy_backward(DType type, const void* logits, const int32_t* labels, const float* lse,
                            const float* grad_scale, void* dlogits, int64_t N, int64_t V,
                            int64_t ignore_index, cudaStream_t stream) {
  check_shape("cuda cross_entropy_backward", N, V);
  if (N == 0) return;
  const auto grid = static_cast<unsigned>(N);
  if (type == DType::kF32) {
    cross_entropy_backward_kernel<float>
        <<<grid, kThreads, 0, stream>>>(static_cast<const float*>(logits), labels, lse,
                                        static_cast<float*>(dlogits), grad_scale, V, ignore_index);
  } else {
    cross_entropy_backward_kernel<bf16>
        <<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(logits), labels, lse,
                                        static_cast<bf16*>(dlogits), grad_scale, V, ignore_index);
  }
  COHORT_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

void cross_entropy_reduce(const float* loss, const int32_t* labels, int64_t N, int64_t ignore_index,
                          float* out, cudaStream_t stream) {
  COHORT_CHECK(N >= 0, Status::kInvalidArgument, "cuda cross_entropy_reduce: N = ", N);
  cross_entropy_reduce_kernel<<<1, 1024, 0, stream>>>(loss, labels, N, ignore_index, out);
  COHORT_CUDA_CHECK_LAUNCH("cross_entropy_reduce_kernel");
}

void softmax_forward(DType type, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool log,
                     cudaStream_t stream) {
  COHORT_CHECK(outer >= 0 && n >= 0 && inner >= 0, Status::kInvalidArgument, "cuda softmax_forward: outer = ", outer,
               ", n = ", n, ", inner = ", inner);
  if (outer * n * inner == 0) return;
  if (type == DType::kF32) softmax_launch<float>(x, nullptr, y, outer, n, inner, log, stream);
  else softmax_launch<bf16>(x, nullptr, y, outer, n, inner, log, stream);
  COHORT_CUDA_CHECK_LAUNCH("softmax_forward");
}

void softmax_backward(DType type, const void* y, const void* dy, void* dx, int64_t outer, int64_t n, int64_t inner,
                      bool log, cudaStream_t stream) {
  COHORT_CHECK(outer >= 0 && n >= 0 && inner >= 0, Status::kInvalidArgument, "cuda softmax_backward: outer = ",
               outer, ", n = ", n, ", inner = ", inner);
  if (outer * n * inner == 0) return;
  if (type == DType::kF32) softmax_launch<float>(y, dy, dx, outer, n, inner, log, stream);
  else softmax_launch<bf16>(y, dy, dx, outer, n, inner, log, stream);
  COHORT_CUDA_CHECK_LAUNCH("softmax_backward");
}

void cross_entropy_grad_scale(const int32_t* labels, int64_t N, int64_t ignore_index,
                              const void* dloss, DType dloss_type, bool mean, float* scale,
                              cudaStream_t stream) {
  COHORT_CHECK(N >= 0, Status::kInvalidArgument, "cuda cross_entropy_grad_scale: N = ", N);
  if (dloss_type == DType::kF32)
    cross_entropy_grad_scale_kernel<float><<<1, 1024, 0, stream>>>(
        labels, N, ignore_index, static_cast<const float*>(dloss), mean, scale);
  else
    cross_entropy_grad_scale_kernel<bf16><<<1, 1024, 0, stream>>>(
        labels, N, ignore_index, static_cast<const bf16*>(dloss), mean, scale);
  COHORT_CUDA_CHECK_LAUNCH("cross_entropy_grad_scale_kernel");
}

void cross_entropy_loss(const float* sums, bool mean, DType loss_type, void* loss, cudaStream_t stream) {
  if (loss_type == DType::kF32)
    cross_entropy_loss_kernel<float><<<1, 1, 0, stream>>>(sums, mean, static_cast<float*>(loss));
  else
    cross_entropy_loss_kernel<bf16><<<1, 1, 0, stream>>>(sums, mean, static_cast<bf16*>(loss));
  COHORT_CUDA_CHECK_LAUNCH("cross_entropy_loss_kernel");
}

}  // namespace cohort::kernels::cuda
