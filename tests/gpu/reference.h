// Plain C++ reference loops (double accumulation) for the GPU test driver: the same functions
// as kernels/cpu, written out so the driver needs nothing but CUDA. In the CMake build,
// reference_vs_cpu.cpp checks these loops against kernels/cpu itself, so the chain GPU == here
// == CPU backend holds without a GPU in CI.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace cohort::gpu_test::ref {

// Row-major C = alpha op(A) op(B) + beta C (see kernels/cpu/matmul.h).
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, double beta, const float* C_in,
                 double* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      C[i * ldc + j] = alpha * acc + (beta != 0.0 ? beta * C_in[i * ldc + j] : 0.0);
    }
}

inline double gelu(double u) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * u * (1.0 + std::tanh(k * (u + 0.044715 * u * u * u)));
}
inline double gelu_grad(double u) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (u + 0.044715 * u * u * u));
  return 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * u * u);
}

// y, mean, rstd of layer norm over rows of [rows, C].
inline void layernorm_forward(const std::vector<float>& x, const std::vector<float>& gamma,
                              const std::vector<float>& beta, int64_t rows, int64_t C, double eps,
                              std::vector<double>& y, std::vector<double>& mean,
                              std::vector<double>& rstd) {
  y.assign(rows * C, 0.0);
  mean.assign(rows, 0.0);
  rstd.assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    const double s = 1.0 / std::sqrt(v / C + eps);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - m) * s * gamma[c] + beta[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

inline void layernorm_backward(const std::vector<float>& x, const std::vector<float>& gamma,
                               const std::vector<double>& mean, const std::vector<double>& rstd,
                               const std::vector<float>& dy, int64_t rows, int64_t C,
                               std::vector<double>& dx, std::vector<double>& dgamma,
                               std::vector<double>& dbeta) {
  dx.assign(rows * C, 0.0);
  dgamma.assign(C, 0.0);
  dbeta.assign(C, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double g = dy[r * C + c] * gamma[c], xh = (x[r * C + c] - mean[r]) * rstd[r];
      sg += g;
      sgx += g * xh;
      dgamma[c] += dy[r * C + c] * xh;
      dbeta[c] += dy[r * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[r * C + c] - mean[r]) * rstd[r];
      dx[r * C + c] = rstd[r] * (dy[r * C + c] * gamma[c] - sg / C - xh * sgx / C);
    }
  }
}

// Per-row lse and loss (0 for ignored); dlogits = (softmax - onehot) * scale.
inline void cross_entropy(const std::vector<float>& logits, const std::vector<int32_t>& labels,
                          int64_t N, int64_t V, int64_t ignore, double scale,
                          std::vector<double>& loss, std::vector<double>& lse,
                          std::vector<double>& dlogits) {
  loss.assign(N, 0.0);
  lse.assign(N, 0.0);
  dlogits.assign(N * V, 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const float* x = logits.data() + r * V;
    double mx = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(x[j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(x[j] - mx);
    lse[r] = mx + std::log(s);
    if (labels[r] == ignore) continue;
    loss[r] = lse[r] - x[labels[r]];
    for (int64_t j = 0; j < V; ++j)
      dlogits[r * V + j] = (std::exp(x[j] - lse[r]) - (j == labels[r] ? 1.0 : 0.0)) * scale;
  }
}

// Multi-head attention over qkv [B, T, 3C]; out [B, T, C], lse [B, H, T].
inline void attention(const std::vector<float>& qkv, int64_t B, int64_t T, int64_t H, int64_t D,
                      double scale, bool causal, std::vector<double>& out,
                      std::vector<double>& lse) {
  const int64_t C = H * D;
  out.assign(B * T * C, 0.0);
  lse.assign(B * H * T, 0.0);
  std::vector<double> s(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv.data() + (b * T + i) * 3 * C + h * D;
        const int64_t n = causal ? i + 1 : T;
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const float* k = qkv.data() + (b * T + j) * 3 * C + C + h * D;
          double acc = 0.0;
          for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(q[d]) * k[d];
          s[j] = acc * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - mx);
        lse[(b * H + h) * T + i] = mx + std::log(sum);
        double* o = out.data() + (b * T + i) * C + h * D;
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - mx) / sum;
          const float* v = qkv.data() + (b * T + j) * 3 * C + 2 * C + h * D;
          for (int64_t d = 0; d < D; ++d) o[d] += p * v[d];
        }
      }
}

// dqkv [B, T, 3C] of the attention above for upstream gradient dout [B, T, C], everything
// recomputed in double: dS = P (dP - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T
// dO.
inline void attention_backward(const std::vector<float>& qkv, const std::vector<float>& dout,
                               int64_t B, int64_t T, int64_t H, int64_t D, double scale,
                               bool causal, std::vector<double>& dqkv) {
  const int64_t C = H * D;
  dqkv.assign(B * T * 3 * C, 0.0);
  std::vector<double> P(T * T), o(D);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h) {
    return (b * T + t) * 3 * C + part * C + h * D;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::fill(P.begin(), P.end(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = causal ? i + 1 : T;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < D; ++d)
            acc += static_cast<double>(qkv[at(b, i, 0, h) + d]) * qkv[at(b, j, 1, h) + d];
          P[i * T + j] = acc * scale;
          mx = std::max(mx, P[i * T + j]);
        }
        for (int64_t j = 0; j < n; ++j) sum += (P[i * T + j] = std::exp(P[i * T + j] - mx));
        for (int64_t j = 0; j < n; ++j) P[i * T + j] /= sum;
      }
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = causal ? i + 1 : T;
        const float* g = dout.data() + (b * T + i) * C + h * D;
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t d = 0; d < D; ++d) o[d] += P[i * T + j] * qkv[at(b, j, 2, h) + d];
        double delta = 0.0;
        for (int64_t d = 0; d < D; ++d) delta += g[d] * o[d];
        for (int64_t j = 0; j < n; ++j) {
          double dp = 0.0;
          for (int64_t d = 0; d < D; ++d) dp += static_cast<double>(g[d]) * qkv[at(b, j, 2, h) + d];
          const double ds = P[i * T + j] * (dp - delta);
          for (int64_t d = 0; d < D; ++d) {
            dqkv[at(b, i, 0, h) + d] += scale * ds * qkv[at(b, j, 1, h) + d];
            dqkv[at(b, j, 1, h) + d] += scale * ds * qkv[at(b, i, 0, h) + d];
            dqkv[at(b, j, 2, h) + d] += P[i * T + j] * g[d];
          }
        }
      }
    }
}

}  // namespace cohort::gpu_test::ref
