// Pooling kernels (see pool.h): the forwards run one thread per output cell over its window, the
// backwards one thread per input cell over the windows that hold it, in the CPU's order, so no
// atomics are needed and every sum has a fixed order. 64-bit indices throughout.
#include <climits>

#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pool.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
using detail::from_float;
using detail::to_float;
constexpr int kThreads = 256;

struct Window {
  int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), clipped to the image
};

__device__ __forceinline__ Window window(const Pool2dGeometry& g, int64_t oh, int64_t ow) {
  const int64_t hs = oh * g.stride[0] - g.pad[0], ws = ow * g.stride[1] - g.pad[1];
  return {hs > 0 ? hs : 0, hs + g.kernel[0] < g.H ? hs + g.kernel[0] : g.H, ws > 0 ? ws : 0,
          ws + g.kernel[1] < g.W ? ws + g.kernel[1] : g.W};
}

// The outputs o in [*lo, *hi] (empty when *lo > *hi) whose window along one axis,
// [o * s - p, o * s - p + k), holds input position h >= 0: o * s <= h + p < o * s + k.
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t p, int64_t out, int64_t* lo,
                                         int64_t* hi) {
  const int64_t first = h + p - k + 1;  // o * s must reach this
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  const int64_t last = (h + p) / s;
  *hi = last < out - 1 ? last : out - 1;
}

template <typename T>
__global__ void max_pool_kernel(Pool2dGeometry g, const T* x, T* y, int32_t* argmax) {
  const int64_t out_plane = g.OH * g.OW;
  COHORT_GRID_STRIDE(i, g.N * g.C * out_plane) {
    const int64_t plane = i / out_plane, o = i % out_plane;
    const Window w = window(g, o / g.OW, o % g.OW);
    const T* xp = x + plane * g.H * g.W;
    float best = -INFINITY;
    int64_t at = w.h0 * g.W + w.w0;
    for (int64_t h = w.h0; h < w.h1; ++h)
      for (int64_t c = w.w0; c < w.w1; ++c) {
        const float v = to_float(xp[h * g.W + c]);
        if (v > best || isnan(v)) {  // strictly greater: the first maximum stays; NaN wins (PyTorch)
          best = v;
          at = h * g.W + c;
        }
      }
    y[i] = from_float<T>(best);
    argmax[i] = static_cast<int32_t>(at);
  }
}

template <typename T>
__global__ void max_pool_grad_kernel(Pool2dGeometry g, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  COHORT_GRID_STRIDE(i, g.N * g.C * in_plane) {
    const int64_t plane = i / in_plane, cell = i % in_plane, h = cell / g.W, w = cell % g.W;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kernel[0], g.stride[0], g.pad[0], g.OH, &oh0, &oh1);
    covering(w, g.kernel[1], g.stride[1], g.pad[1], g.OW, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t j = plane * out_plane + oh * g.OW + ow;
        if (argmax[j] == cell) s += to_float(dy[j]);
      }
    dx[i] = from_float<T>(s);
  }
}

template <typename T>
__global__ void avg_pool_kernel(Pool2dGeometry g, const T* x, T* y) {
  const int64_t out_plane = g.OH * g.OW;
  COHORT_GRID_STRIDE(i, g.N * g.C * out_plane) {
    const int64_t plane = i / out_plane, o = i % out_plane;
    const Window w = window(g, o / g.OW, o % g.OW);
    const T* xp = x + plane * g.H * g.W;
    float s = 0.0f;
    for (int64_t h = w.h0; h < w.h1; ++h)
      for (int64_t c = w.w0; c < w.w1; ++c) s += to_float(xp[h * g.W + c]);
    y[i] = from_float<T>(s / static_cast<float>((w.h1 - w.h0) * (w.w1 - w.w0)));
  }
}

template <typename T>
__global__ void avg_pool_grad_kernel(Pool2dGeometry g, const T* dy, T* dx) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  COHORT_GRID_STRIDE(i, g.N * g.C * in_plane) {
    const int64_t plane = i / in_plane, cell = i % in_plane, h = cell / g.W, w = cell % g.W;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kernel[0], g.stride[0], g.pad[0], g.OH, &oh0, &oh1);
    covering(w, g.kernel[1], g.stride[1], g.pad[1], g.OW, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Window win = window(g, oh, ow);
        s += to_float(dy[plane * out_plane + oh * g.OW + ow]) /
             static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
      }
    dx[i] = from_float<T>(s);
  }
}


void check_geometry(const char* fn, const Pool2dGeometry& g) {
  const bool ok = g.N >= 0 && g.C >= 0 && g.H >= 0 && g.W >= 0 && g.OH >= 0 && g.OW >= 0 && g.kernel[0] >= 1 &&
                  g.kernel[1] >= 1 && g.stride[0] >= 1 && g.stride[1] >= 1 && g.pad[0] >= 0 && g.pad[1] >= 0;
  COHORT_CHECK(ok, Status::kInvalidArgument, fn, ": bad geometry");
  // argmax is an int32 index within a plane (as on the CPU).
  COHORT_CHECK(g.H * g.W <= INT32_MAX, Status::kInvalidArgument, fn, ": a ", g.H, "x", g.W,
               " plane does not fit int32 argmax indices");
}

template <typename T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* out(void* p) {
  return static_cast<T*>(p);
}
}  // namespace

void max_pool2d(const Pool2dGeometry& g, DType type, const void* x, void* y, int32_t* argmax, cudaStream_t stream) {
  check_geometry("cuda max_pool2d", g);
  const int64_t total = g.N * g.C * g.OH * g.OW;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    max_pool_kernel<float><<<grid, kThreads, 0, stream>>>(g, in<float>(x), out<float>(y), argmax);
  else
    max_pool_kernel<bf16><<<grid, kThreads, 0, stream>>>(g, in<bf16>(x), out<bf16>(y), argmax);
  COHORT_CUDA_CHECK_LAUNCH("max_pool_kernel");
}

void max_pool2d_grad(const Pool2dGeometry& g, DType type, const void* dy, const int32_t* argmax, void* dx,
                     cudaStream_t stream) {
  check_geometry("cuda max_pool2d_grad", g);
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    max_pool_grad_kernel<float><<<grid, kThreads, 0, stream>>>(g, in<float>(dy), argmax, out<float>(dx));
  else
    max_pool_grad_kernel<bf16><<<grid, kThreads, 0, stream>>>(g, in<bf16>(dy), argmax, out<bf16>(dx));
  COHORT_CUDA_CHECK_LAUNCH("max_pool_grad_kernel");
}

void avg_pool2d(const Pool2dGeometry& g, DType type, const void* x, void* y, cudaStream_t stream) {
  check_geometry("cuda avg_pool2d", g);
  const int64_t total = g.N * g.C * g.OH * g.OW;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    avg_pool_kernel<float><<<grid, kThreads, 0, stream>>>(g, in<float>(x), out<float>(y));
  else
    avg_pool_kernel<bf16><<<grid, kThreads, 0, stream>>>(g, in<bf16>(x), out<bf16>(y));
  COHORT_CUDA_CHECK_LAUNCH("avg_pool_kernel");
}

void avg_pool2d_grad(const Pool2dGeometry& g, DType type, const void* dy, void* dx, cudaStream_t stream) {
  check_geometry("cuda avg_pool2d_grad", g);
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return;
  const unsigned grid = detail::grid_for(total, kThreads);
  if (type == DType::kF32)
    avg_pool_grad_kernel<float><<<grid, kThreads, 0, stream>>>(g, in<float>(dy), out<float>(dx));
  else
    avg_pool_grad_kernel<bf16><<<grid, kThreads, 0, stream>>>(g, in<bf16>(dy), out<bf16>(dx));
  COHORT_CUDA_CHECK_LAUNCH("avg_pool_grad_kernel");
}

}  // namespace cohort::kernels::cuda
