// Element-wise kernels: broadcasting add/sub/mul, bias+GELU forward/backward, ReLU and tanh, scale, and the
// deterministic sums of reduce_sum. Memory-bound: each thread moves 16 bytes per operand per step
// (grid-stride loop) when every pointer is 16-byte aligned and the sizes are multiples of the
// vector width, else a scalar loop runs. Broadcasts other than a repeating trailing block take a
// strided kernel (strided.cuh) that decomposes each output index.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/strided.cuh"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::Vec;
constexpr int kThreads = 256;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float gelu(float u) {
  const float t = tanhf(kGeluK * (u + 0.044715f * u * u * u));
  return 0.5f * u * (1.0f + t);
}
// d/du of gelu(u) = 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 * 0.044715 u^2).
__device__ __forceinline__ float gelu_grad(float u) {
  const float t = tanhf(kGeluK * (u + 0.044715f * u * u * u));
  const float du = kGeluK * (1.0f + 3.0f * 0.044715f * u * u);
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * du;
}

// Modes of the one element-wise kernel, so that one template serves every operation.
enum Mode { kAdd, kSub, kRSub, kMul, kGeluFwd, kGeluBwd, kGeluDeriv, kReluFwd, kReluBwd, kTanhFwd, kTanhBwd };

template <int M>
__device__ __forceinline__ float apply(float a, float b, float d) {
  if constexpr (M == kAdd)
    return a + b;
  else if constexpr (M == kSub)
    return a - b;
  else if constexpr (M == kRSub)  // a - b with the operands given the other way round
    return b - a;
  else if constexpr (M == kMul)
    return a * b;
  else if constexpr (M == kGeluFwd)
    return gelu(a + b);
  else if constexpr (M == kGeluDeriv)
    return gelu_grad(a + b);
  else if constexpr (M == kGeluBwd)
    return d * gelu_grad(a + b);
  else if constexpr (M == kReluFwd)  // NaN stays NaN, as in PyTorch
    return a <= 0.0f ? 0.0f : a;
  else if constexpr (M == kReluBwd)  // a: the forward's input; dy passes where it is NaN
    return a <= 0.0f ? 0.0f : d;
  else if constexpr (M == kTanhFwd)
    return tanhf(a);
  else  // kTanhBwd, a: the forward's output
    return d * (1.0f - a * a);
}

// out[i] = f(a ? a[i] : 0, b ? b[i % b_n] : 0, d ? d[i] : 0). Vectorised: units of kN elements, and
// b_n is a multiple of kN so a vector never straddles the bias period.
template <typename T, int M, bool kVec>
__global__ void elementwise_kernel(const T* a, const T* b, int64_t b_n, const T* d, T* out,
                                   int64_t n) {
  constexpr int kN = kVec ? Vec<T>::kN : 1;
  const int64_t units = n / kN, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t u = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t i = u * kN;
    float va[kN] = {}, vb[kN] = {}, vd[kN] = {};  // absent operands read as 0
    if constexpr (kVec) {
      if (a) detail::load_vec(a + i, va);
      if (b) detail::load_vec(b + i % b_n, vb);
      if (d) detail::load_vec(d + i, vd);
    } else {
      va[0] = a ? detail::to_float(a[i]) : 0.0f;
      vb[0] = b ? detail::to_float(b[i % b_n]) : 0.0f;
      vd[0] = d ? detail::to_float(d[i]) : 0.0f;
    }
    float vo[kN];
#pragma unroll
    for (int k = 0; k < kN; ++k) vo[k] = apply<M>(va[k], vb[k], vd[k]);
    if constexpr (kVec)
      detail::store_vec(out + i, vo);
    else
      out[i] = detail::from_float<T>(vo[0]);
  }
}

template <typename T, int M>
void launch_typed(const void* a, const void* b, int64_t b_n, const void* d, void* out, int64_t n,
                  cudaStream_t stream) {
  constexpr int kN = Vec<T>::kN;
  const bool vec = n % kN == 0 && (!b || b_n % kN == 0) && detail::aligned16(a) &&
                   detail::aligned16(out) && (!b || detail::aligned16(b)) &&
                   (!d || detail::aligned16(d));
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  const auto* pd = static_cast<const T*>(d);
  auto* po = static_cast<T*>(out);
  if (vec) {
    elementwise_kernel<T, M, true>
        <<<detail::grid_for(n / kN, kThreads), kThreads, 0, stream>>>(pa, pb, b_n, pd, po, n);
  } else {
    elementwise_kernel<T, M, false>
        <<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, b_n, pd, po, n);
  }
  COHORT_CUDA_CHECK_LAUNCH("elementwise_kernel");
}

template <int M>
void launch(DType type, const void* a, const void* b, int64_t b_n, const void* d, void* out,
            int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda elementwise: n = ", n);
  if (n == 0) return;
  if (b)
    COHORT_CHECK(b_n > 0 && n % b_n == 0, Status::kInvalidArgument, "cuda elementwise: n = ", n,
                 " is not a multiple of the broadcast length ", b_n);
  if (type == DType::kF32)
    launch_typed<float, M>(a, b, b_n, d, out, n, stream);
  else
    launch_typed<bf16, M>(a, b, b_n, d, out, n, stream);
}
template <typename T>
__global__ void fill_kernel(T* out, float value, int64_t n) {
  const T v = detail::from_float<T>(value);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = v;
}

// The flat kernel for a broadcast where `full` has the output's elements and `rep` repeats with
// period rep_n; `swapped` when rep is the left operand (only sub cares).
void launch_flat(BinaryOp op, bool swapped, DType type, const void* full, const void* rep, int64_t rep_n,
                 void* out, int64_t n, cudaStream_t stream) {
  if (op == BinaryOp::kAdd)
    launch<kAdd>(type, full, rep, rep_n, nullptr, out, n, stream);
  else if (op == BinaryOp::kMul)
    launch<kMul>(type, full, rep, rep_n, nullptr, out, n, stream);
  else if (swapped)
    launch<kRSub>(type, full, rep, rep_n, nullptr, out, n, stream);
  else
    launch<kSub>(type, full, rep, rep_n, nullptr, out, n, stream);
}

// out[i] = a[ia] op b[ib] with the operands' offsets from their broadcast strides; a null a
// reads as 0.
template <typename T>
__global__ void binary_strided_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n,
                                      detail::StridedDims<2> dims) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2];
    detail::offsets_at(dims, i, off);
    const float va = a ? detail::to_float(a[off[0]]) : 0.0f, vb = detail::to_float(b[off[1]]);
    const float r = op == BinaryOp::kAdd ? va + vb : op == BinaryOp::kSub ? va - vb : va * vb;
    out[i] = detail::from_float<T>(r);
  }
}

// True when `shape` (leading 1s dropped) equals the trailing dims of `out`: it then repeats
// with period numel(shape) along out's leading dims (kernels/cpu's is_suffix).
bool is_suffix(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  size_t lead = 0;
  while (lead < shape.size() && shape[lead] == 1) ++lead;
  const size_t n = shape.size() - lead;
  if (n > out.size()) return false;
  for (size_t k = 0; k < n; ++k)
    if (shape[lead + k] != out[out.size() - n + k]) return false;
  return true;
}

// Throws kInvalidArgument unless `shape` broadcasts to `out` (NumPy rules).
void expect_broadcasts(const std::vector<int64_t>& shape, const std::vector<int64_t>& out, const char* fn) {
  bool ok = shape.size() <= out.size();
  for (size_t k = 0; ok && k < shape.size(); ++k) {
    const int64_t e = shape[shape.size() - 1 - k];
    ok = e == 1 || e == out[out.size() - 1 - k];
  }
  if (ok) return;
  std::string s = "[", o = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += str_cat(k ? ", " : "", shape[k]);
  for (size_t k = 0; k < out.size(); ++k) o += str_cat(k ? ", " : "", out[k]);
  throw Error(Status::kInvalidArgument, str_cat(fn, ": shape ", s, "] does not broadcast to ", o, "]"));
}

// binary_broadcast, and broadcast_to as 0 + x with a null `a` (zeros of out_shape).
void broadcast_binary(BinaryOp op, DType type, const void* a, const std::vector<int64_t>& a_shape,
                      const void* b, const std::vector<int64_t>& b_shape, void* out,
                      const std::vector<int64_t>& out_shape, cudaStream_t stream) {
  const int64_t n = detail::numel_of(out_shape);
  const int64_t na = a ? detail::numel_of(a_shape) : n, nb = detail::numel_of(b_shape);
  // An operand with every output element is laid out as out (its shape differs at most by
  // leading 1s); the other then repeats with its own period when it is a suffix of out.
  if (na == n && is_suffix(b_shape, out_shape)) {
    launch_flat(op, false, type, a, b, nb, out, n, stream);
    return;
  }
  if (a && nb == n && is_suffix(a_shape, out_shape)) {
    launch_flat(op, true, type, b, a, na, out, n, stream);
    return;
  }
  const size_t rank = out_shape.size();
  const std::vector<int64_t> strides[2] = {
      a ? detail::broadcast_strides(a_shape, rank) : std::vector<int64_t>(rank, 0),
      detail::broadcast_strides(b_shape, rank)};
  const detail::StridedDims<2> dims = detail::merge_dims<2>(out_shape, strides, "binary_broadcast");
  if (type == DType::kF32)
    binary_strided_kernel<float><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(out), n, dims);
  else
    binary_strided_kernel<bf16><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const bf16*>(a), static_cast<const bf16*>(b), static_cast<bf16*>(out), n, dims);
  COHORT_CUDA_CHECK_LAUNCH("binary_strided_kernel");
}

template <typename T>
__global__ void scale_kernel(const T* x, float factor, T* out, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = detail::from_float<T>(detail::to_float(x[i]) * factor);
}

// ---- reduce_sum ----

constexpr int kSerialMax = 32;              // at most this many terms per output: one thread each
constexpr int64_t kManyOutputs = 1 << 16;   // this many outputs fill the GPU with a thread each
constexpr int kChunkPerThread = 8;          // chunked path: terms per thread per chunk
constexpr int64_t kChunk = int64_t{kThreads} * kChunkPerThread;

// How reduce_sum goes about one pair of shapes. x is walked as kept dims (one output each, in
// the output's order) and reduced dims (the terms of one output), each merged.
struct ReducePlan {
  enum Kind { kNothing, kFill, kCopy, kRows, kSerial, kChunked } kind = kNothing;
  int64_t M = 0, R = 0, chunks = 0;  // outputs, terms per output, chunks per output
  int64_t workspace = 0;             // floats
  detail::StridedDims<1> kept, red;
};

ReducePlan plan_reduce(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& out_shape) {
  const char* fn = "cuda reduce_sum";
  std::vector<int64_t> o = out_shape;  // padded (or trimmed of leading 1s) to x's rank
  while (o.size() > x_shape.size()) {
    COHORT_CHECK(o.front() == 1, Status::kInvalidArgument, fn, ": output has more dimensions than its input");
    o.erase(o.begin());
  }
  expect_broadcasts(o, x_shape, fn);
  o.insert(o.begin(), x_shape.size() - o.size(), 1);
  ReducePlan p;
  const int64_t N = detail::numel_of(x_shape);
  p.M = detail::numel_of(o);
  if (p.M == 0) return p;
  if (N == 0) {
    p.kind = ReducePlan::kFill;
    return p;
  }
  if (p.M == N) {
    p.kind = ReducePlan::kCopy;
    return p;
  }
  p.R = N / p.M;
  std::vector<int64_t> kept_ext, red_ext, kept_st[1], red_st[1];
  int64_t stride = 1;
  for (size_t d = x_shape.size(); d-- > 0;) {
    if (x_shape[d] != 1) {
      if (o[d] == 1) {
        red_ext.insert(red_ext.begin(), x_shape[d]);
        red_st[0].insert(red_st[0].begin(), stride);
      } else {
        kept_ext.insert(kept_ext.begin(), x_shape[d]);
        kept_st[0].insert(kept_st[0].begin(), stride);
      }
    }
    stride *= x_shape[d];
  }
  p.kept = detail::merge_dims<1>(kept_ext, kept_st, "sum");
  p.red = detail::merge_dims<1>(red_ext, red_st, "sum");
  // x is [R, M] with the sums down its columns: the bias-gradient layout sum_rows covers (fp32
  // results, staged in the first M floats when the output needs a division or rounding).
  const bool rows = p.red.rank == 1 && p.kept.rank == 1 && p.kept.stride[0][0] == 1 &&
                    p.red.stride[0][0] == p.M && p.M <= (int64_t{1} << 30) && p.R / 256 < 65535;
  if (p.R <= kSerialMax) {
    p.kind = ReducePlan::kSerial;
  } else if (rows) {
    p.kind = ReducePlan::kRows;
    p.workspace = p.M + row_sums_workspace(p.R, p.M);
  } else if (p.M >= kManyOutputs) {
    p.kind = ReducePlan::kSerial;
  } else {
    p.kind = ReducePlan::kChunked;
    p.chunks = (p.R + kChunk - 1) / kChunk;
    p.workspace = p.M * p.chunks;
  }
  return p;
}

// out[j] = (sum over r of x[kept(j) + red(r)], added in r order from 0 as kernels/cpu does) / divisor.
template <typename T>
__global__ void reduce_serial_kernel(const T* x, T* out, int64_t M, int64_t R, detail::StridedDims<1> kept,
                                     detail::StridedDims<1> red, float divisor) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < M; j += stride) {
    int64_t base[1];
    detail::offsets_at(kept, j, base);
    float acc = 0.0f;
    for (int64_t r = 0; r < R; ++r) {
      int64_t off[1];
      detail::offsets_at(red, r, off);
      acc += detail::to_float(x[base[0] + off[0]]);
    }
    out[j] = detail::from_float<T>(acc / divisor);
  }
}

// Block b = (output j, chunk c) sums terms [c * kChunk, (c + 1) * kChunk) of output j: each
// thread its kChunkPerThread terms in order, then the block's fixed tree; partial[b] = the sum.
template <typename T>
__global__ void reduce_chunks_kernel(const T* x, float* partial, int64_t M, int64_t R, int64_t chunks,
                                     detail::StridedDims<1> kept, detail::StridedDims<1> red) {
  __shared__ float scratch[32];
  const int64_t blocks = M * chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {  // the same b for the whole block
    const int64_t j = b / chunks, c = b - j * chunks;
    int64_t base[1];
    detail::offsets_at(kept, j, base);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kChunkPerThread; ++k) {
      const int64_t r = c * kChunk + int64_t{k} * kThreads + threadIdx.x;
      if (r < R) {
        int64_t off[1];
        detail::offsets_at(red, r, off);
        acc += detail::to_float(x[base[0] + off[0]]);
      }
    }
    acc = detail::block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}

// out[j] = (sum of partial[j * chunks .. (j + 1) * chunks), each thread its strided share in
// order, then the block's fixed tree) / divisor; one block per output.
template <typename T>
__global__ void reduce_finish_kernel(const float* partial, T* out, int64_t M, int64_t chunks, float divisor) {
  __shared__ float scratch[32];
  for (int64_t j = blockIdx.x; j < M; j += gridDim.x) {
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += partial[j * chunks + c];
    acc = detail::block_sum(acc, scratch);
    if (threadIdx.x == 0) out[j] = detail::from_float<T>(acc / divisor);
  }
}

// out[i] = x[i] / divisor in out's storage type.
template <typename S, typename T>
__global__ void divide_kernel(const S* x, T* out, int64_t n, float divisor) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = detail::from_float<T>(detail::to_float(x[i]) / divisor);
}

template <typename T>
void reduce_typed(const ReducePlan& p, const T* x, T* out, float divisor, float* ws, cudaStream_t stream) {
  switch (p.kind) {
    case ReducePlan::kNothing:
    case ReducePlan::kFill:  // handled by the caller
      return;
    case ReducePlan::kCopy:
      if (divisor == 1.0f) {  // the CPU copies too (a -0 stays -0)
        COHORT_CUDA_CHECK(cudaMemcpyAsync(out, x, static_cast<size_t>(p.M) * sizeof(T), cudaMemcpyDeviceToDevice,
                                          stream));
        return;
      }
      divide_kernel<T, T><<<detail::grid_for(p.M, kThreads), kThreads, 0, stream>>>(x, out, p.M, divisor);
      COHORT_CUDA_CHECK_LAUNCH("divide_kernel");
      return;
    case ReducePlan::kRows: {
      constexpr bool kF32 = sizeof(T) == sizeof(float);
      float* sums = kF32 && divisor == 1.0f ? reinterpret_cast<float*>(out) : ws;
      sum_rows(kF32 ? DType::kF32 : DType::kBF16, x, sums, ws + p.M, p.R, p.M, stream);
      if (sums == ws) {
        divide_kernel<float, T><<<detail::grid_for(p.M, kThreads), kThreads, 0, stream>>>(ws, out, p.M, divisor);
        COHORT_CUDA_CHECK_LAUNCH("divide_kernel");
      }
      return;
    }
    case ReducePlan::kSerial:
      reduce_serial_kernel<T><<<detail::grid_for(p.M, kThreads), kThreads, 0, stream>>>(x, out, p.M, p.R, p.kept,
                                                                                        p.red, divisor);
      COHORT_CUDA_CHECK_LAUNCH("reduce_serial_kernel");
      return;
    case ReducePlan::kChunked:
      reduce_chunks_kernel<T><<<detail::grid_for(p.M * p.chunks, 1, int64_t{1} << 20), kThreads, 0, stream>>>(
          x, ws, p.M, p.R, p.chunks, p.kept, p.red);
      COHORT_CUDA_CHECK_LAUNCH("reduce_chunks_kernel");
      reduce_finish_kernel<T><<<detail::grid_for(p.M, 1, int64_t{1} << 20), kThreads, 0, stream>>>(ws, out, p.M,
                                                                                                   p.chunks, divisor);
      COHORT_CUDA_CHECK_LAUNCH("reduce_finish_kernel");
      return;
  }
}
}  // namespace

void binary(BinaryOp op, DType type, const void* a, int64_t n, const void* b, int64_t b_n,
            void* out, cudaStream_t stream) {
  COHORT_CHECK(b != nullptr, Status::kInvalidArgument, "cuda binary: b is null");
  launch_flat(op, false, type, a, b, b_n, out, n, stream);
}

void binary_broadcast(BinaryOp op, DType type, const void* a, const std::vector<int64_t>& a_shape,
                      const void* b, const std::vector<int64_t>& b_shape, void* out,
                      const std::vector<int64_t>& out_shape, cudaStream_t stream) {
  const char* fn = "cuda binary_broadcast";
  expect_broadcasts(a_shape, out_shape, fn);
  expect_broadcasts(b_shape, out_shape, fn);
  if (detail::numel_of(out_shape) == 0) return;
  COHORT_CHECK(a != nullptr && b != nullptr, Status::kInvalidArgument, fn, ": null operand");
  broadcast_binary(op, type, a, a_shape, b, b_shape, out, out_shape, stream);
}

void broadcast_to(DType type, const void* x, const std::vector<int64_t>& x_shape, void* out,
                  const std::vector<int64_t>& out_shape, cudaStream_t stream) {
  const char* fn = "cuda broadcast_to";
  expect_broadcasts(x_shape, out_shape, fn);
  if (detail::numel_of(out_shape) == 0) return;
  COHORT_CHECK(x != nullptr, Status::kInvalidArgument, fn, ": null input");
  broadcast_binary(BinaryOp::kAdd, type, nullptr, out_shape, x, x_shape, out, out_shape, stream);
}

void scale(DType type, const void* x, float factor, void* out, int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda scale: n = ", n);
  if (n == 0) return;
  if (type == DType::kF32)
    scale_kernel<float><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(x), factor, static_cast<float*>(out), n);
  else
    scale_kernel<bf16><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(x), factor, static_cast<bf16*>(out), n);
  COHORT_CUDA_CHECK_LAUNCH("scale_kernel");
}

int64_t reduce_sum_workspace(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& out_shape) {
  return plan_reduce(x_shape, out_shape).workspace;
}

void reduce_sum(DType type, const void* x, const std::vector<int64_t>& x_shape, void* out,
                const std::vector<int64_t>& out_shape, float divisor, float* workspace,
                cudaStream_t stream) {
  const ReducePlan p = plan_reduce(x_shape, out_shape);
  COHORT_CHECK(workspace || p.workspace == 0, Status::kInvalidArgument, "cuda reduce_sum: null workspace (",
               p.workspace, " floats needed)");
  if (p.kind == ReducePlan::kFill) {  // no terms: 0, divided as the CPU divides (0 / 0 is NaN)
    fill(type, out, 0.0f / divisor, p.M, stream);
    return;
  }
  if (type == DType::kF32)
    reduce_typed<float>(p, static_cast<const float*>(x), static_cast<float*>(out), divisor, workspace, stream);
  else
    reduce_typed<bf16>(p, static_cast<const bf16*>(x), static_cast<bf16*>(out), divisor, workspace, stream);
}

void gelu_forward(DType type, const void* x, const void* bias, void* y, int64_t n, int64_t C,
                  cudaStream_t stream) {
  launch<kGeluFwd>(type, x, bias, bias ? C : 1, nullptr, y, n, stream);
}

void gelu_backward(DType type, const void* x, const void* bias, const void* dy, void* dx, int64_t n,
                   int64_t C, cudaStream_t stream) {
  COHORT_CHECK(dy != nullptr, Status::kInvalidArgument, "cuda gelu_backward: dy is null");
  launch<kGeluBwd>(type, x, bias, bias ? C : 1, dy, dx, n, stream);
}

void gelu_derivative(DType type, const void* x, const void* bias, void* g, int64_t n, int64_t C,
                     cudaStream_t stream) {
  launch<kGeluDeriv>(type, x, bias, bias ? C : 1, nullptr, g, n, stream);
}

void activation_forward(Activation act, DType type, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (act == Activation::kRelu)
    launch<kReluFwd>(type, x, nullptr, 1, nullptr, y, n, stream);
  else
    launch<kTanhFwd>(type, x, nullptr, 1, nullptr, y, n, stream);
}

void activation_backward(Activation act, DType type, const void* saved, const void* dy, void* dx, int64_t n,
                         cudaStream_t stream) {
  COHORT_CHECK(dy != nullptr, Status::kInvalidArgument, "cuda activation_backward: dy is null");
  if (act == Activation::kRelu)
    launch<kReluBwd>(type, saved, nullptr, 1, dy, dx, n, stream);
  else
    launch<kTanhBwd>(type, saved, nullptr, 1, dy, dx, n, stream);
}

void fill(DType type, void* out, float value, int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda fill: n = ", n);
  if (n == 0) return;
  if (value == 0.0f) {  // all-zero bits are +0.0 in both storage types (-0.0 fills as +0.0)
    COHORT_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * dtype_size(type), stream));
    return;
  }
  if (type == DType::kF32)
    fill_kernel<float><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<float*>(out), value, n);
  else
    fill_kernel<bf16><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<bf16*>(out), value, n);
  COHORT_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace cohort::kernels::cuda
