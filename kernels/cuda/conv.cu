// im2col / col2im and the convolution's small kernels (see conv.h). One thread per element in
// grid-stride loops with 64-bit indices throughout; nothing is atomic: col2im gathers each input
// cell's taps itself, and the bias gradient is one block per channel with a fixed reduction order.
#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::from_float;
using detail::to_float;
constexpr int kThreads = 256;

template <typename Tx, typename Tc>
__global__ void im2col_kernel(Conv2dGeometry g, const Tx* x, Tc* col, int64_t n0, int64_t nb, int64_t ld_k,
                              int64_t ld_n) {
  const int64_t P = g.OH * g.OW, K = g.C * g.KH * g.KW;
  COHORT_GRID_STRIDE(i, K * nb * P) {
    const int64_t p = i % P, t = i / P, n = t % nb, k = t / nb;
    const int64_t kw = k % g.KW, kh = (k / g.KW) % g.KH, c = k / (g.KW * g.KH);
    const int64_t h = (p / g.OW) * g.stride[0] - g.pad[0] + kh * g.dilation[0];
    const int64_t w = (p % g.OW) * g.stride[1] - g.pad[1] + kw * g.dilation[1];
    float v = 0.0f;
    if (h >= 0 && h < g.H && w >= 0 && w < g.W) v = to_float(x[(((n0 + n) * g.C + c) * g.H + h) * g.W + w]);
    col[k * ld_k + n * ld_n + p] = from_float<Tc>(v);
  }
}

// One thread per input cell (n, c, h, w) of the chunk; the taps reading it are those with
// h + pad_h - kh * dilation_h = oh * stride_h for some 0 <= oh < OH (likewise w).
template <typename T>
__global__ void col2im_kernel(Conv2dGeometry g, const float* col, int64_t ld_k, int64_t ld_n, T* dx, int64_t n0,
                              int64_t nb) {
  const int64_t cells = g.C * g.H * g.W;
  COHORT_GRID_STRIDE(i, nb * cells) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C, n = i / cells;
    float s = 0.0f;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t th = h + g.pad[0] - kh * g.dilation[0];
      if (th < 0 || th % g.stride[0] != 0 || th / g.stride[0] >= g.OH) continue;  // sign first: % of < 0
      const int64_t oh = th / g.stride[0];
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t tw = w + g.pad[1] - kw * g.dilation[1];
        if (tw < 0 || tw % g.stride[1] != 0 || tw / g.stride[1] >= g.OW) continue;
        const int64_t k = (c * g.KH + kh) * g.KW + kw;
        s += col[k * ld_k + n * ld_n + oh * g.OW + tw / g.stride[1]];
      }
    }
    dx[n0 * cells + i] = from_float<T>(s);
  }
}

template <typename T>
__global__ void bias_fill_kernel(const T* bias, T* y, int64_t N, int64_t O, int64_t P) {
  COHORT_GRID_STRIDE(i, N * O * P) y[i] = bias ? bias[(i / P) % O] : from_float<T>(0.0f);
}

// Block o sums dy[n, o, :] over n; each thread keeps a double over its strided share (the CPU
// sums planes in double too), then one block reduction in a fixed order.
template <typename T>
__global__ void bias_grad_kernel(const T* dy, T* db, int64_t N, int64_t O, int64_t P) {
  __shared__ float scratch[32];
  const int64_t o = blockIdx.x;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < N * P; j += blockDim.x) {
    const int64_t n = j / P, p = j % P;
    s += to_float(dy[(n * O + o) * P + p]);
  }
  const float total = detail::block_sum(static_cast<float>(s), scratch);
  if (threadIdx.x == 0) db[o] = from_float<T>(total);
}

template <typename T>
__global__ void gather_channels_kernel(const T* in, float* out, int64_t n0, int64_t nb, int64_t O, int64_t P) {
  COHORT_GRID_STRIDE(i, O * nb * P) {
    const int64_t p = i % P, n = (i / P) % nb, o = i / (P * nb);
    out[i] = to_float(in[((n0 + n) * O + o) * P + p]);
  }
}

template <typename Tin, typename Tout>
__global__ void convert_kernel(const Tin* in, Tout* out, int64_t n) {
  COHORT_GRID_STRIDE(i, n) out[i] = from_float<Tout>(to_float(in[i]));
}


void check_geometry(const char* fn, const Conv2dGeometry& g, int64_t n0, int64_t nb) {
  const bool ok = g.N >= 0 && g.C >= 0 && g.H >= 0 && g.W >= 0 && g.O >= 0 && g.KH >= 1 && g.KW >= 1 &&
                  g.OH >= 0 && g.OW >= 0 && g.stride[0] >= 1 && g.stride[1] >= 1 && g.pad[0] >= 0 &&
                  g.pad[1] >= 0 && g.dilation[0] >= 1 && g.dilation[1] >= 1 && n0 >= 0 && nb >= 0 &&
                  n0 + nb <= g.N;
  COHORT_CHECK(ok, Status::kInvalidArgument, fn, ": bad geometry or samples [", n0, ", ", n0 + nb, ") of ",
               g.N);
}
}  // namespace

void im2col(const Conv2dGeometry& g, DType x_type, const void* x, DType col_type, void* col, int64_t n0,
            int64_t nb, int64_t ld_k, int64_t ld_n, cudaStream_t stream) {
  check_geometry("cuda im2col", g, n0, nb);
  COHORT_CHECK(col_type == x_type || col_type == DType::kF32, Status::kInvalidArgument,
               "cuda im2col: fp32 input into bf16 columns");
  const int64_t total = g.C * g.KH * g.KW * nb * g.OH * g.OW;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (x_type == DType::kF32) {
    im2col_kernel<float, float><<<grid, kThreads, 0, stream>>>(g, static_cast<const float*>(x),
                                                               static_cast<float*>(col), n0, nb, ld_k, ld_n);
  } else if (col_type == DType::kF32) {
    im2col_kernel<bf16, float><<<grid, kThreads, 0, stream>>>(g, static_cast<const bf16*>(x),
                                                              static_cast<float*>(col), n0, nb, ld_k, ld_n);
  } else {
    im2col_kernel<bf16, bf16><<<grid, kThreads, 0, stream>>>(g, static_cast<const bf16*>(x),
                                                             static_cast<bf16*>(col), n0, nb, ld_k, ld_n);
  }
  COHORT_CUDA_CHECK_LAUNCH("im2col_kernel");
}

void col2im(const Conv2dGeometry& g, const float* col, int64_t ld_k, int64_t ld_n, DType dx_type, void* dx,
            int64_t n0, int64_t nb, cudaStream_t stream) {
  check_geometry("cuda col2im", g, n0, nb);
  const int64_t total = nb * g.C * g.H * g.W;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (dx_type == DType::kF32)
    col2im_kernel<float><<<grid, kThreads, 0, stream>>>(g, col, ld_k, ld_n, static_cast<float*>(dx), n0, nb);
  else
    col2im_kernel<bf16><<<grid, kThreads, 0, stream>>>(g, col, ld_k, ld_n, static_cast<bf16*>(dx), n0, nb);
  COHORT_CUDA_CHECK_LAUNCH("col2im_kernel");
}

void conv_bias_fill(DType type, const void* bias, void* y, int64_t N, int64_t O, int64_t P, cudaStream_t stream) {
  COHORT_CHECK(N >= 0 && O >= 0 && P >= 0, Status::kInvalidArgument, "cuda conv_bias_fill: N = ", N, ", O = ", O,
               ", P = ", P);
  const int64_t total = N * O * P;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    bias_fill_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(bias), static_cast<float*>(y),
                                                           N, O, P);
  else
    bias_fill_kernel<bf16><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(bias), static_cast<bf16*>(y), N,
                                                          O, P);
  COHORT_CUDA_CHECK_LAUNCH("bias_fill_kernel");
}

void conv_bias_grad(DType type, const void* dy, void* db, int64_t N, int64_t O, int64_t P, cudaStream_t stream) {
  COHORT_CHECK(N >= 0 && O >= 0 && O <= 0x7fffffff && P >= 0, Status::kInvalidArgument,
               "cuda conv_bias_grad: N = ", N, ", O = ", O, ", P = ", P);
  if (O == 0) return;
  const unsigned grid = static_cast<unsigned>(O);
  if (type == DType::kF32)
    bias_grad_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(dy), static_cast<float*>(db),
                                                           N, O, P);
  else
    bias_grad_kernel<bf16><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(dy), static_cast<bf16*>(db), N,
                                                          O, P);
  COHORT_CUDA_CHECK_LAUNCH("bias_grad_kernel");
}

void gather_channels(DType type, const void* in, float* out, int64_t n0, int64_t nb, int64_t O, int64_t P,
                     cudaStream_t stream) {
  COHORT_CHECK(n0 >= 0 && nb >= 0 && O >= 0 && P >= 0, Status::kInvalidArgument, "cuda gather_channels: n0 = ",
               n0, ", nb = ", nb, ", O = ", O, ", P = ", P);
  const int64_t total = O * nb * P;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    gather_channels_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(in), out, n0, nb, O, P);
  else
    gather_channels_kernel<bf16><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(in), out, n0, nb, O, P);
  COHORT_CUDA_CHECK_LAUNCH("gather_channels_kernel");
}

void widen_to_f32(DType type, const void* in, float* out, int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda widen_to_f32: n = ", n);
  if (n == 0) return;
  const unsigned grid = detail::grid_for(n, kThreads);
  if (type == DType::kF32)
    convert_kernel<float, float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(in), out, n);
  else
    convert_kernel<bf16, float><<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(in), out, n);
  COHORT_CUDA_CHECK_LAUNCH("convert_kernel");
}

void narrow_from_f32(DType type, const float* in, void* out, int64_t n, cudaStream_t stream) {
  COHORT_CHECK(n >= 0, Status::kInvalidArgument, "cuda narrow_from_f32: n = ", n);
  if (n == 0) return;
  const unsigned grid = detail::grid_for(n, kThreads);
  if (type == DType::kF32)
    convert_kernel<float, float><<<grid, kThreads, 0, stream>>>(in, static_cast<float*>(out), n);
  else
    convert_kernel<float, bf16><<<grid, kThreads, 0, stream>>>(in, static_cast<bf16*>(out), n);
  COHORT_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace cohort::kernels::cuda
