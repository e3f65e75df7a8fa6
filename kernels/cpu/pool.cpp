// Pooling loops. Windows are clipped to the real image once per output cell, so the inner
// loops carry no padding tests. The max gradient scatters through the saved argmax, which keeps
// the backward exact even where the forward had ties. A NaN in a window is its maximum (as in
// PyTorch), so max pooling never hides a NaN.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {

struct Window {
  int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), clipped to the image
};

Window window(const Pool2dGeometry& g, int64_t oh, int64_t ow) {
  int64_t hs = oh * g.stride[0] - g.pad[0], ws = ow * g.stride[1] - g.pad[1];
  return {std::max<int64_t>(hs, 0), std::min(hs + g.kernel[0], g.H), std::max<int64_t>(ws, 0),
          std::min(ws + g.kernel[1], g.W)};
}

bool parallel(const Pool2dGeometry& g) { return g.N * g.C * g.H * g.W > 16384; }

}  // namespace

void max_pool2d(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax) {
  const int64_t planes = g.N * g.C, in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  parallel_for(planes, parallel(g), [&](int64_t p) {
    const float* xp = x + p * in_plane;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        Window w = window(g, oh, ow);
        float best = -std::numeric_limits<float>::infinity();
        int64_t at = w.h0 * g.W + w.w0;
        for (int64_t h = w.h0; h < w.h1; ++h)
          for (int64_t c = w.w0; c < w.w1; ++c)
            if (xp[h * g.W + c] > best || std::isnan(xp[h * g.W + c])) {  // NaN wins, as in PyTorch
              best = xp[h * g.W + c];
              at = h * g.W + c;
            }
        y[p * out_plane + oh * g.OW + ow] = best;
        argmax[p * out_plane + oh * g.OW + ow] = static_cast<int32_t>(at);
      }
  });
}

void max_pool2d_grad(const Pool2dGeometry& g, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t planes = g.N * g.C, in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  parallel_for(planes, parallel(g), [&](int64_t p) {
    float* dxp = dx + p * in_plane;
    std::memset(dxp, 0, static_cast<size_t>(in_plane) * sizeof(float));
    for (int64_t i = 0; i < out_plane; ++i) dxp[argmax[p * out_plane + i]] += dy[p * out_plane + i];
  });
}

void avg_pool2d(const Pool2dGeometry& g, const float* x, float* y) {
  const int64_t planes = g.N * g.C, in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  parallel_for(planes, parallel(g), [&](int64_t p) {
    const float* xp = x + p * in_plane;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        Window w = window(g, oh, ow);
        float s = 0;
        for (int64_t h = w.h0; h < w.h1; ++h)
          for (int64_t c = w.w0; c < w.w1; ++c) s += xp[h * g.W + c];
        y[p * out_plane + oh * g.OW + ow] = s / static_cast<float>((w.h1 - w.h0) * (w.w1 - w.w0));
      }
  });
}

void avg_pool2d_grad(const Pool2dGeometry& g, const float* dy, float* dx) {
  const int64_t planes = g.N * g.C, in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  parallel_for(planes, parallel(g), [&](int64_t p) {
    float* dxp = dx + p * in_plane;
    std::memset(dxp, 0, static_cast<size_t>(in_plane) * sizeof(float));
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        Window w = window(g, oh, ow);
        const float share = dy[p * out_plane + oh * g.OW + ow] / static_cast<float>((w.h1 - w.h0) * (w.w1 - w.w0));
        for (int64_t h = w.h0; h < w.h1; ++h)
          for (int64_t c = w.w0; c < w.w1; ++c) dxp[h * g.W + c] += share;
      }
  });
}

}  // namespace cohort::kernels::cpu
