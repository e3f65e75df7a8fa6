// Normalisation loops. Statistics use two passes over the row (mean, then centred variance),
// which stays accurate where E[x^2] - E[x]^2 would cancel. Rows run in parallel; parameter
// gradients are reduced in an order fixed by the shape alone (deterministic for any thread count).
//
// Layer norm: Ba, Kiros, Hinton, "Layer Normalization" (2016), eq. 4. RMS norm: Zhang, Sennrich,
// "Root Mean Square Layer Normalization" (2019), eq. 4. Group norm: Wu, He, "Group
// Normalization" (2018), eq. 1-3. The input gradient of all three is the standard
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma, xhat = normalised x
// (RMS norm drops the mean(g) term and has xhat = x * rstd).
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
constexpr int64_t kMaxChunks = 64;         // row chunks for parameter-gradient partial sums

void row_stats(const float* x, int64_t n, float eps, float* mean_out, float* rstd_out) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const float m = s / static_cast<float>(n);
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < n; ++i) v += (x[i] - m) * (x[i] - m);
  *mean_out = m;
  *rstd_out = 1.0f / std::sqrt(v / static_cast<float>(n) + eps);
}

// dx of one row, with xhat = (x - m) * r; centred (layer norm) subtracts mean(g), RMS norm not.
void row_dx(const float* x, const float* gamma, const float* dy, const float* dx_add, float* dx, int64_t C,
            float m, float r, bool centred) {
  float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < C; ++c) {
    const float g = dy[c] * gamma[c];
    sum_g += g;
    sum_gx += g * (x[c] - m) * r;
  }
  const float a = centred ? sum_g / static_cast<float>(C) : 0.0f, b = sum_gx / static_cast<float>(C);
  if (dx_add) {
    for (int64_t c = 0; c < C; ++c) dx[c] = dx_add[c] + r * (dy[c] * gamma[c] - a - (x[c] - m) * r * b);
  } else {
    for (int64_t c = 0; c < C; ++c) dx[c] = r * (dy[c] * gamma[c] - a - (x[c] - m) * r * b);
  }
}

// Backward of a last-dim norm (mean null: RMS norm). Parameter gradients are summed per fixed
// chunk of rows in the same pass as dx, then the chunk partials are added in chunk order: the
// chunking depends only on `rows`, so the result is the same for every thread count, and memory
// is read row by row instead of column by column.
void rows_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                   const float* dx_add, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t C) {
  const bool params = dgamma || dbeta;
  const int64_t chunk = (rows + kMaxChunks - 1) / kMaxChunks, chunks = (rows + chunk - 1) / chunk;
  std::vector<float> part(params ? static_cast<size_t>(chunks * 2 * C) : 0, 0.0f);
  parallel_for(chunks, rows * C > kParallelMin, [&](int64_t k) {
    float* pg = params ? part.data() + k * 2 * C : nullptr;
    float* pb = params ? pg + C : nullptr;
    for (int64_t r = k * chunk; r < std::min(rows, (k + 1) * chunk); ++r) {
      const float* xr = x + r * C;
      const float* dyr = dy + r * C;
      const float m = mean ? mean[r] : 0.0f, s = rstd[r];
      if (dx) row_dx(xr, gamma, dyr, dx_add ? dx_add + r * C : nullptr, dx + r * C, C, m, s, mean != nullptr);
      if (!params) continue;
      for (int64_t c = 0; c < C; ++c) {
        pg[c] += dyr[c] * (xr[c] - m) * s;
        pb[c] += dyr[c];
      }
    }
  });
  if (!params) return;
  parallel_for(C, chunks * C > kParallelMin, [&](int64_t c) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      sg += part[static_cast<size_t>(k * 2 * C + c)];
      sb += part[static_cast<size_t>(k * 2 * C + C + c)];
    }
    if (dgamma) dgamma[c] = sg;
    if (dbeta) dbeta[c] = sb;
  });
}

// row_dx for a group-norm block: Cg channels of HW elements, gamma per channel.
void groupnorm_dx(const float* x, const float* dy, float* dx, const float* gamma, int64_t Cg, int64_t HW,
                  float m, float r) {
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t k = 0; k < Cg; ++k) {
    float pg = 0.0f, pgx = 0.0f;
#pragma omp simd reduction(+ : pg, pgx)
    for (int64_t i = 0; i < HW; ++i) {
      pg += dy[k * HW + i];
      pgx += dy[k * HW + i] * (x[k * HW + i] - m);
    }
    sum_g += pg * gamma[k];
    sum_gx += pgx * gamma[k] * r;
  }
  const float n = static_cast<float>(Cg * HW);
  const float a = sum_g / n, b = sum_gx / n;
  for (int64_t k = 0; k < Cg; ++k)
    for (int64_t i = 0; i < HW; ++i)
      dx[k * HW + i] = r * (dy[k * HW + i] * gamma[k] - a - (x[k * HW + i] - m) * r * b);
}
}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t C, float eps) {
  parallel_for(rows, rows * C > kParallelMin, [&](int64_t r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    row_stats(xr, C, eps, &mean[r], &rstd[r]);
    const float m = mean[r], s = rstd[r];
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
  });
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t C,
                        const float* dx_add) {
  rows_backward(x, gamma, mean, rstd, dy, dx_add, dx, dgamma, dbeta, rows, C);
}

void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t C,
                     float eps) {
  parallel_for(rows, rows * C > kParallelMin, [&](int64_t r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float s = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    rstd[r] = s;
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s * gamma[c];
  });
}

void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                      float* dgamma, int64_t rows, int64_t C, const float* dx_add) {
  rows_backward(x, gamma, nullptr, rstd, dy, dx_add, dx, dgamma, nullptr, rows, C);
}

void groupnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t N, int64_t C, int64_t HW, int64_t groups, float eps) {
  const int64_t Cg = C / groups, block = Cg * HW;
  parallel_for(N * groups, N * C * HW > kParallelMin, [&](int64_t ng) {
    // (n, group) blocks are contiguous in NCHW: channels g*Cg .. g*Cg+Cg-1 of sample n.
    const float* xb = x + ng * block;
    float* yb = y + ng * block;
    row_stats(xb, block, eps, &mean[ng], &rstd[ng]);
    const float m = mean[ng], s = rstd[ng];
    const int64_t c0 = (ng % groups) * Cg;
    for (int64_t k = 0; k < Cg; ++k) {
      const float a = s * gamma[c0 + k], b = beta[c0 + k] - m * a;
      for (int64_t i = 0; i < HW; ++i) yb[k * HW + i] = xb[k * HW + i] * a + b;
    }
  });
}

void groupnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t N, int64_t C,
                        int64_t HW, int64_t groups) {
  const int64_t Cg = C / groups, block = Cg * HW;
  if (dx) {
    parallel_for(N * groups, N * C * HW > kParallelMin, [&](int64_t ng) {
      groupnorm_dx(x + ng * block, dy + ng * block, dx + ng * block, gamma + (ng % groups) * Cg, Cg, HW,
                   mean[ng], rstd[ng]);
    });
  }
  if (!dgamma && !dbeta) return;
  parallel_for(C, N * C * HW > kParallelMin, [&](int64_t c) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t ng = n * groups + c / Cg;
      const float* xr = x + (n * C + c) * HW;
      const float* dyr = dy + (n * C + c) * HW;
      float pg = 0.0f, pb = 0.0f;
#pragma omp simd reduction(+ : pg, pb)
      for (int64_t i = 0; i < HW; ++i) {
        pg += dyr[i] * (xr[i] - mean[ng]);
        pb += dyr[i];
      }
      sg += pg * rstd[ng];
      sb += pb;
    }
    if (dgamma) dgamma[c] = sg;
    if (dbeta) dbeta[c] = sb;
  });
}

}  // namespace cohort::kernels::cpu
