// CMake build only: checks the driver's plain reference loops (reference.h) against the CPU
// backend (kernels/cpu) on random inputs, so the GPU == reference == CPU chain holds and the
// references are exercised in CI even where no GPU is visible.
#include <cmath>
#include <cstdio>
#include <random>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/softmax.h"
#include "tests/gpu/check.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace {
void check_gemm(Context& c, std::mt19937_64& rng) {
  const int64_t M = 33, N = 21, K = 17;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const auto A = random_vector(rng, M * K), B = random_vector(rng, K * N),
               C0 = random_vector(rng, M * N);
    std::vector<float> C = C0;
    std::vector<double> R(M * N);
    kernels::cpu::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
    ref::gemm(ta, tb, M, N, K, 0.5, A.data(), lda, B.data(), ldb, 0.25, C0.data(), R.data(), N);
    expect_close(c, ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"), C, R, 1e-5);
  }
}

void check_elementwise_norm(Context& c, std::mt19937_64& rng) {
  const int64_t rows = 19, C = 40, n = rows * C;
  const auto x = random_vector(rng, n, -3, 3), dy = random_vector(rng, n);
  std::vector<float> y(n), dx(n);
  kernels::cpu::unary(kernels::cpu::UnaryOp::kGelu, x.data(), y.data(), n);
  kernels::cpu::unary_grad(kernels::cpu::UnaryOp::kGelu, x.data(), dy.data(), dx.data(), n);
  std::vector<double> ry(n), rdx(n);
  for (int64_t i = 0; i < n; ++i) {
    ry[i] = ref::gelu(x[i]);
    rdx[i] = dy[i] * ref::gelu_grad(x[i]);
  }
  expect_close(c, "gelu", y, ry, 1e-5);
  expect_close(c, "gelu grad", dx, rdx, 1e-5);
  const auto gamma = random_vector(rng, C, 0.5f, 1.5f), beta = random_vector(rng, C);
  std::vector<float> mean(rows), rstd(rows), dgamma(C), dbeta(C);
  kernels::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                                  rstd.data(), rows, C, 1e-5f);
  kernels::cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                                   dx.data(), dgamma.data(), dbeta.data(), rows, C);
  std::vector<double> rm, rr, rdg, rdb;
  ref::layernorm_forward(x, gamma, beta, rows, C, 1e-5, ry, rm, rr);
  ref::layernorm_backward(x, gamma, rm, rr, dy, rows, C, rdx, rdg, rdb);
  expect_close(c, "layernorm y", y, ry, 1e-5);
  expect_close(c, "layernorm dx", dx, rdx, 1e-5);
  expect_close(c, "layernorm dgamma", dgamma, rdg, 1e-5);
  expect_close(c, "layernorm dbeta", dbeta, rdb, 1e-5);
}

void check_cross_entropy_attention(Context& c, std::mt19937_64& rng) {
  const int64_t N = 12, V = 37, ignore = -100;
  const auto logits = random_vector(rng, N * V, -4, 4);
  std::vector<int32_t> labels(N);
  for (int64_t r = 0; r < N; ++r) labels[r] = r == 5 ? ignore : static_cast<int32_t>(rng() % V);
  std::vector<float> lse(N), grad(N * V);
  int64_t count = 0;
  const double sum = kernels::cpu::cross_entropy_forward(logits.data(), labels.data(), lse.data(),
                                                         N, V, ignore, &count);
  kernels::cpu::cross_entropy_backward(logits.data(), labels.data(), lse.data(), 0.5f, grad.data(),
                                       N, V, ignore);
  std::vector<double> rloss, rlse, rgrad;
  ref::cross_entropy(logits, labels, N, V, ignore, 0.5, rloss, rlse, rgrad);
  double rsum = 0;
  for (double l : rloss) rsum += l;
  expect_close(c, "xent lse", lse, rlse, 1e-5);
  expect_close(c, "xent grad", grad, rgrad, 1e-5);
  expect_close(c, "xent sum,count", {static_cast<float>(sum), static_cast<float>(count)},
               {rsum, N - 1.0}, 1e-5);
  kernels::cpu::AttentionDims d;
  d.B = 2;
  d.T = 9;
  d.H = 2;
  d.D = 16;
  d.scale = 0.25f;
  const auto qkv = random_vector(rng, d.B * d.T * 3 * d.H * d.D);
  std::vector<float> out(d.B * d.T * d.H * d.D), alse(d.B * d.H * d.T);
  kernels::cpu::attention_forward(d, qkv.data(), out.data(), alse.data());
  std::vector<double> rout, ralse;
  ref::attention(qkv, d.B, d.T, d.H, d.D, d.scale, true, rout, ralse);
  expect_close(c, "attention out", out, rout, 1e-5);
  expect_close(c, "attention lse", alse, ralse, 1e-5);
  const auto dout = random_vector(rng, out.size());
  std::vector<float> dqkv(qkv.size());
  kernels::cpu::attention_backward(d, qkv.data(), alse.data(), dout.data(),
                                   dqkv.data());
  std::vector<double> rdqkv;
  ref::attention_backward(qkv, dout, d.B, d.T, d.H, d.D, d.scale, true, rdqkv);
  expect_close(c, "attention dqkv", dqkv, rdqkv, 1e-5);
}
}  // namespace

int check_references_against_cpu(uint64_t seed) {
  Context c;
  c.test = "reference vs kernels/cpu";
  std::mt19937_64 rng(seed);
  check_gemm(c, rng);
  check_elementwise_norm(c, rng);
  check_cross_entropy_attention(c, rng);
  return c.failures;
}

}  // namespace cohort::gpu_test
