// The fused CUDA kernels against the plain references: element-wise with bias broadcast, GELU,
// ReLU and tanh forward/backward, layer norm forward/backward (dx_add, parameter gradients in the
// storage type), cross entropy (fused and separate gradient,
// ignore_index, in place, a bad label) and the multi-tensor optimizer updates (AdamW, SGD,
// device-side clipping; fp32 and bf16 grads, bf16 parameter copy).
// Sizes include ones that are not multiples of the vector width (the scalar path).
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/softmax.h"
#include "tests/gpu/harness.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {
const DType kTypes[] = {DType::kF32, DType::kBF16};

std::string label(const char* what, DType t, int64_t a, int64_t b) {
  char s[96];
  std::snprintf(s, sizeof s, "%s %s [%lld, %lld]", what, kc::dtype_name(t),
                static_cast<long long>(a), static_cast<long long>(b));
  return s;
}

void elementwise_case(Env& env, DType t, int64_t rows, int64_t C) {
  const int64_t n = rows * C;
  const auto a = as_stored(random_vector(env.rng, n, -3, 3), t),
             bias = as_stored(random_vector(env.rng, C), t);
  const auto full = as_stored(random_vector(env.rng, n), t),
             dy = as_stored(random_vector(env.rng, n), t);
  Buffers buf(*env.alloc);
  void *da = buf.upload(a, t), *db = buf.upload(bias, t), *dfull = buf.upload(full, t),
       *ddy = buf.upload(dy, t);
  void *o1 = buf.poisoned(n, t), *o2 = buf.poisoned(n, t), *o3 = buf.poisoned(n, t),
       *o4 = buf.poisoned(n, t);
  kc::binary(kc::BinaryOp::kAdd, t, da, n, db, C, o1, nullptr);
  kc::binary(kc::BinaryOp::kMul, t, da, n, dfull, n, o2, nullptr);
  kc::gelu_forward(t, da, db, o3, n, C, nullptr);
  kc::gelu_backward(t, da, db, ddy, o4, n, C, nullptr);
  std::vector<double> r1(n), r2(n), r3(n), r4(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(a[i]) + bias[i % C];
    r1[i] = u;
    r2[i] = static_cast<double>(a[i]) * full[i];
    r3[i] = ref::gelu(u);
    r4[i] = dy[i] * ref::gelu_grad(u);
  }
  Context& c = env.ctx;
  expect_close(c, label("add bias", t, rows, C).c_str(), Buffers::download(o1, n, t), r1,
               tol_for(t));
  expect_close(c, label("mul", t, rows, C).c_str(), Buffers::download(o2, n, t), r2, tol_for(t));
  expect_close(c, label("bias+gelu fwd", t, rows, C).c_str(), Buffers::download(o3, n, t), r3,
               tol_for(t));
  expect_close(c, label("bias+gelu bwd", t, rows, C).c_str(), Buffers::download(o4, n, t), r4,
               tol_for(t));
  // ReLU and tanh: forward, and backward from what the forward saves (ReLU its input a; tanh its
  // output, here `full` in [-1, 1]).
  void *o5 = buf.poisoned(n, t), *o6 = buf.poisoned(n, t), *o7 = buf.poisoned(n, t),
       *o8 = buf.poisoned(n, t);
  kc::activation_forward(kc::Activation::kRelu, t, da, o5, n, nullptr);
  kc::activation_backward(kc::Activation::kRelu, t, da, ddy, o6, n, nullptr);
  kc::activation_forward(kc::Activation::kTanh, t, da, o7, n, nullptr);
  kc::activation_backward(kc::Activation::kTanh, t, dfull, ddy, o8, n, nullptr);
  std::vector<double> r5(n), r6(n), r7(n), r8(n);
  for (int64_t i = 0; i < n; ++i) {
    r5[i] = a[i] > 0 ? a[i] : 0.0;
    r6[i] = a[i] > 0 ? dy[i] : 0.0;
    r7[i] = std::tanh(static_cast<double>(a[i]));
    r8[i] = dy[i] * (1.0 - static_cast<double>(full[i]) * full[i]);
  }
  expect_close(c, label("relu fwd", t, rows, C).c_str(), Buffers::download(o5, n, t), r5, tol_for(t));
  expect_close(c, label("relu bwd", t, rows, C).c_str(), Buffers::download(o6, n, t), r6, tol_for(t));
  expect_close(c, label("tanh fwd", t, rows, C).c_str(), Buffers::download(o7, n, t), r7, tol_for(t));
  expect_close(c, label("tanh bwd", t, rows, C).c_str(), Buffers::download(o8, n, t), r8, tol_for(t));
}

// Parameter gradients come in the storage type: bf16 rounds each fp32 column sum once, a relative
// error of at most 2^-9 per element (so at most ~2e-3 relative L2); fp32 differs from the double
// reference only by the sums' order.
void layernorm_case(Env& env, DType t, int64_t rows, int64_t C) {
  const int64_t n = rows * C;
  const auto x = as_stored(random_vector(env.rng, n, -2, 3), t),
             dy = as_stored(random_vector(env.rng, n), t), add = as_stored(random_vector(env.rng, n), t);
  const auto gamma = as_stored(random_vector(env.rng, C, 0.5f, 1.5f), t);
  const auto beta = as_stored(random_vector(env.rng, C), t);
  Buffers buf(*env.alloc);
  void *dx_in = buf.upload(x, t), *dg = buf.upload(gamma, t), *db = buf.upload(beta, t),
       *ddy = buf.upload(dy, t), *dadd = buf.upload(add, t);
  void *y = buf.poisoned(n, t), *dx = buf.poisoned(n, t), *dx_sum = buf.poisoned(n, t);
  float *mean = buf.poisoned_f32(rows), *rstd = buf.poisoned_f32(rows);
  void *dgamma = buf.poisoned(C, t), *dbeta = buf.poisoned(C, t);
  float* ws = buf.poisoned_f32(kc::layernorm_backward_workspace(rows, C));
  kc::layernorm_forward(t, dx_in, dg, db, y, mean, rstd, rows, C, 1e-5f, nullptr);
  kc::layernorm_backward(t, dx_in, dg, mean, rstd, ddy, nullptr, dx, dgamma, dbeta, ws, rows, C, nullptr);
  std::vector<double> ry, rm, rr, rdx, rdg, rdb;
  ref::layernorm_forward(x, gamma, beta, rows, C, 1e-5, ry, rm, rr);
  ref::layernorm_backward(x, gamma, rm, rr, dy, rows, C, rdx, rdg, rdb);
  Context& c = env.ctx;
  const double tol = tol_for(t), param_tol = t == DType::kF32 ? 1e-5 : 2.5e-3;
  expect_close(c, label("layernorm y", t, rows, C).c_str(), Buffers::download(y, n, t), ry, tol);
  expect_close(c, label("layernorm rstd", t, rows, C).c_str(),
               Buffers::download(rstd, rows, DType::kF32), rr, 1e-5);
  expect_close(c, label("layernorm dx", t, rows, C).c_str(), Buffers::download(dx, n, t), rdx, tol);
  expect_close(c, label("layernorm dgamma", t, rows, C).c_str(), Buffers::download(dgamma, C, t), rdg,
               param_tol);
  expect_close(c, label("layernorm dbeta", t, rows, C).c_str(), Buffers::download(dbeta, C, t), rdb,
               param_tol);
  // dx_add summed in before the one rounding; parameter gradients not asked for.
  kc::layernorm_backward(t, dx_in, dg, mean, rstd, ddy, dadd, dx_sum, nullptr, nullptr, nullptr, rows, C, nullptr);
  std::vector<double> rsum(rdx);
  for (int64_t i = 0; i < n; ++i) rsum[i] += add[i];
  expect_close(c, label("layernorm dx + dx_add", t, rows, C).c_str(), Buffers::download(dx_sum, n, t), rsum, tol);
  // dx_add with the parameter sums (the one-pass kernel where it applies).
  kc::layernorm_backward(t, dx_in, dg, mean, rstd, ddy, dadd, dx_sum, dgamma, dbeta, ws, rows, C, nullptr);
  expect_close(c, label("layernorm dx + dx_add with dgamma", t, rows, C).c_str(), Buffers::download(dx_sum, n, t),
               rsum, tol);
  expect_close(c, label("layernorm dbeta with dx_add", t, rows, C).c_str(), Buffers::download(dbeta, C, t), rdb,
               param_tol);
  // In place: dx over dy gives the same dx and parameter sums.
  kc::layernorm_backward(t, dx_in, dg, mean, rstd, ddy, nullptr, ddy, dgamma, dbeta, ws, rows, C, nullptr);
  expect_close(c, label("layernorm dx in place", t, rows, C).c_str(), Buffers::download(ddy, n, t),
               rdx, tol);
  expect_close(c, label("layernorm dgamma in place", t, rows, C).c_str(), Buffers::download(dgamma, C, t), rdg,
               param_tol);
}

void cross_entropy_case(Env& env, DType t, int64_t N, int64_t V) {
  const int64_t ignore = -100;
  const auto logits = as_stored(random_vector(env.rng, N * V, -4, 4), t);
  std::vector<int32_t> labels(N);
  for (int64_t r = 0; r < N; ++r)
    labels[r] = r % 5 == 3 ? ignore : static_cast<int32_t>(env.rng() % V);
  int64_t count = 0;
  for (auto l : labels) count += l != ignore;
  const double scale = 1.0 / count;
  std::vector<double> rloss, rlse, rgrad;
  ref::cross_entropy(logits, labels, N, V, ignore, scale, rloss, rlse, rgrad);
  Buffers buf(*env.alloc);
  void* dl = buf.upload(logits, t);
  int32_t* dlab = buf.upload_raw(labels);
  float *loss = buf.poisoned_f32(N), *lse = buf.poisoned_f32(N), *sum = buf.poisoned_f32(2);
  void* grad = buf.poisoned(N * V, t);
  kc::cross_entropy_forward(t, dl, dlab, loss, lse, nullptr, 0.0f, N, V, ignore, nullptr);
  // The mean's scale from dloss = 1 and the label count, on the device.
  float* dloss = static_cast<float*>(buf.upload(std::vector<float>{1.0f}, DType::kF32));
  float* dscale = buf.poisoned_f32(1);
  kc::cross_entropy_grad_scale(dlab, N, ignore, dloss, DType::kF32, true, dscale, nullptr);
  kc::cross_entropy_backward(t, dl, dlab, lse, dscale, grad, N, V, ignore, nullptr);
  kc::cross_entropy_reduce(loss, dlab, N, ignore, sum, nullptr);
  float* mean = buf.poisoned_f32(1);
  kc::cross_entropy_loss(sum, true, DType::kF32, mean, nullptr);
  Context& c = env.ctx;
  expect_close(c, label("xent grad scale", t, N, V).c_str(), Buffers::download(dscale, 1, DType::kF32),
               {scale}, 1e-7);
  expect_close(c, label("xent loss", t, N, V).c_str(), Buffers::download(loss, N, DType::kF32),
               rloss, 1e-5);
  expect_close(c, label("xent lse", t, N, V).c_str(), Buffers::download(lse, N, DType::kF32), rlse,
               1e-5);
  expect_close(c, label("xent dlogits", t, N, V).c_str(), Buffers::download(grad, N * V, t), rgrad,
               tol_for(t));
  double rsum = 0;
  for (double l : rloss) rsum += l;
  expect_close(c, label("xent sum,count", t, N, V).c_str(), Buffers::download(sum, 2, DType::kF32),
               {rsum, static_cast<double>(count)}, 1e-5);
  expect_close(c, label("xent mean loss", t, N, V).c_str(), Buffers::download(mean, 1, DType::kF32),
               {rsum / static_cast<double>(count)}, 1e-5);
  // Bad labels: the first one outside [0, V) that is not ignore_index, by position.
  std::vector<int32_t> bad = labels;
  bad[static_cast<size_t>(N - 1)] = static_cast<int32_t>(V);
  if (N > 2) bad[static_cast<size_t>(N / 2)] = -7;
  const int64_t first = N > 2 ? N / 2 : N - 1;
  uint64_t* slot = static_cast<uint64_t*>(buf.raw(sizeof(uint64_t)));
  for (const auto& [values, want] : {std::pair{labels, kc::kNoBadIndex},
                                     std::pair{bad, (static_cast<uint64_t>(first) << 32) |
                                                        static_cast<uint32_t>(bad[static_cast<size_t>(first)])}}) {
    COHORT_CUDA_CHECK(cudaMemset(slot, 0xFF, sizeof(uint64_t)));
    kc::find_bad_index(buf.upload_raw(values), N, V, ignore, slot, nullptr);
    uint64_t got = 0;
    COHORT_CUDA_CHECK(cudaMemcpy(&got, slot, sizeof got, cudaMemcpyDeviceToHost));
    expect_true(c, label("bad label slot", t, N, V).c_str(), got == want);
  }
  // Fused and in place: the gradient overwrites the logits.
  kc::cross_entropy_forward(t, dl, dlab, loss, lse, dl, static_cast<float>(scale), N, V, ignore,
                            nullptr);
  expect_close(c, label("xent fused in-place grad", t, N, V).c_str(),
               Buffers::download(dl, N * V, t), rgrad, tol_for(t));
  expect_close(c, label("xent fused loss", t, N, V).c_str(),
               Buffers::download(loss, N, DType::kF32), rloss, 1e-5);
}
}  // namespace

void test_elementwise(Env& env) {
  for (DType t : kTypes) {
    elementwise_case(env, t, 512, 768);  // vector path
    elementwise_case(env, t, 37, 13);    // scalar path
  }
}

void test_layernorm(Env& env) {
  for (DType t : kTypes) {
    // fp32 takes the one-pass kernel where C fits it (vectors of 4 floats a lane: 6, 4, 8, 2); bf16
    // the two passes.
    layernorm_case(env, t, 1000, 768);
    layernorm_case(env, t, 7, 50);      // C off the vector width: two passes
    layernorm_case(env, t, 300, 512);
    layernorm_case(env, t, 13, 1024);   // the one pass at its widest
    layernorm_case(env, t, 5, 1032);    // past the one pass's width: two passes
    layernorm_case(env, t, 33, 136);    // lanes past the row's last vector idle
  }
}

void test_cross_entropy(Env& env) {
  for (DType t : kTypes) {
    cross_entropy_case(env, t, 64, 50257);
    cross_entropy_case(env, t, 33, 10);
  }
  // A label outside [0, V) shows up as a NaN loss instead of an out-of-bounds read.
  Buffers buf(*env.alloc);
  const std::vector<float> logits(2 * 8, 0.5f);
  const std::vector<int32_t> labels = {3, 8};
  float *loss = buf.poisoned_f32(2), *lse = buf.poisoned_f32(2);
  kc::cross_entropy_forward(DType::kF32, buf.upload(logits, DType::kF32), buf.upload_raw(labels),
                            loss, lse, nullptr, 0.0f, 2, 8, -100, nullptr);
  const auto l = Buffers::download(loss, 2, DType::kF32);
  expect_true(env.ctx, "xent bad label -> NaN loss, good row finite",
              std::isnan(l[1]) && std::isfinite(l[0]));
}

// The multi-tensor optimizer kernels on two parameters of several chunks each (an fp32 gradient;
// a bf16 gradient with a bf16 parameter copy), against the update in double: the gradient norm,
// AdamW (plain and the N-rank mean variant) and SGD (plain; Nesterov momentum), with clipping
// applied on the device from that norm.
void test_adamw(Env& env) {
  const int64_t sizes[2] = {100003, 70001};
  const DType gtypes[2] = {DType::kF32, DType::kBF16};
  struct Host {
    std::vector<float> p, g, m, v;
  } h[2];
  for (int k = 0; k < 2; ++k) {
    h[k].p = random_vector(env.rng, sizes[k]);
    h[k].g = as_stored(random_vector(env.rng, sizes[k]), gtypes[k]);
    h[k].m = random_vector(env.rng, sizes[k], -0.1f, 0.1f);
    h[k].v = random_vector(env.rng, sizes[k], 0.0f, 0.01f);
  }
  double ref_sum_sq = 0.0;
  for (const Host& x : h)
    for (float g : x.g) ref_sum_sq += static_cast<double>(g) * g;
  const double clip_norm = 0.5 * std::sqrt(ref_sum_sq);
  const double coef = clip_norm / (std::sqrt(ref_sum_sq) + 1e-6);

  enum Variant { kAdamW, kAdamWMean, kSgd, kSgdNesterov };
  for (Variant var : {kAdamW, kAdamWMean, kSgd, kSgdNesterov}) {
    const bool adam = var == kAdamW || var == kAdamWMean, clip = var == kAdamW || var == kSgdNesterov;
    kc::AdamWArgs a;
    a.lr = 1e-3f;
    a.weight_decay = 0.1f;
    a.grad_scale = clip ? 1.0f : 0.5f;
    const int t_step = 3;
    a.step_size = a.lr / (1.0f - std::pow(a.beta1, t_step));
    a.bias_correction2_sqrt = std::sqrt(1.0f - std::pow(a.beta2, t_step));
    a.bias_correction1 = 1.0f - std::pow(a.beta1, t_step);
    a.noise_ranks = var == kAdamWMean ? 4.0f : 1.0f;
    kc::SgdArgs s;
    s.lr = 0.05f;
    s.weight_decay = 0.01f;
    s.grad_scale = a.grad_scale;
    s.momentum = var == kSgdNesterov ? 0.9f : 0.0f;
    s.nesterov = var == kSgdNesterov;
    const double scale = clip ? coef : a.grad_scale;

    Buffers buf(*env.alloc);
    std::vector<kc::OptimParam> params(2);
    for (int k = 0; k < 2; ++k) {
      kc::OptimParam& q = params[k];
      q.n = sizes[k];
      q.param = static_cast<float*>(buf.upload(h[k].p, DType::kF32));
      q.grad = buf.upload(h[k].g, gtypes[k]);
      q.grad_type = gtypes[k];
      if (adam || s.momentum != 0) q.state0 = static_cast<float*>(buf.upload(h[k].m, DType::kF32));
      if (adam) q.state1 = static_cast<float*>(buf.upload(h[k].v, DType::kF32));
      if (k == 1) q.param_bf16 = static_cast<uint16_t*>(buf.poisoned(sizes[k], DType::kBF16));
    }
    double* sum_sq = static_cast<double*>(buf.raw(sizeof(double)));
    kc::OptimTable table(*env.alloc, nullptr);
    table.set(params);
    kc::grad_sum_of_squares(table, sum_sq);
    kc::DeviceClip dc;
    if (clip) {
      dc.sum_sq = sum_sq;
      dc.clip_norm = clip_norm;
    }
    if (adam) kc::adamw_update(table, a, dc);
    else kc::sgd_update(table, s, dc);
    double got_sum_sq = 0.0;
    COHORT_CUDA_CHECK(cudaMemcpy(&got_sum_sq, sum_sq, sizeof(double), cudaMemcpyDeviceToHost));
    const char* name = var == kAdamW ? "adamw (clipped)" : var == kAdamWMean ? "adamw mean of 4"
                       : var == kSgd ? "sgd" : "sgd nesterov (clipped)";
    expect_true(env.ctx, (std::string(name) + ": gradient sum of squares").c_str(),
                std::fabs(got_sum_sq - ref_sum_sq) <= 1e-9 * ref_sum_sq);

    for (int k = 0; k < 2; ++k) {
      const int64_t n = sizes[k];
      const Host& x = h[k];
      std::vector<double> rdelta(n), rm(n), rv(n), rp(n);
      for (int64_t i = 0; i < n; ++i) {  // the update in double
        const double gi = static_cast<double>(x.g[i]) * scale, pi = x.p[i];
        if (adam) {
          rm[i] = a.beta1 * static_cast<double>(x.m[i]) + (1.0 - a.beta1) * gi;
          rv[i] = a.beta2 * static_cast<double>(x.v[i]) + (1.0 - a.beta2) * gi * gi;
          const double decayed = pi * (1.0 - double(a.lr) * a.weight_decay);
          if (var == kAdamWMean) {
            const double mh = rm[i] / a.bias_correction1,
                         vh = rv[i] / (double(a.bias_correction2_sqrt) * a.bias_correction2_sqrt);
            const double var_n = std::max(vh - mh * mh, 0.0) / a.noise_ranks;
            rp[i] = decayed - a.lr * mh / (std::sqrt(mh * mh + var_n) + a.eps);
          } else {
            rp[i] = decayed - a.step_size * rm[i] / (std::sqrt(rv[i]) / a.bias_correction2_sqrt + a.eps);
          }
        } else {
          double g = gi + s.weight_decay * pi;
          if (s.momentum != 0) {
            rm[i] = s.momentum * static_cast<double>(x.m[i]) + g;
            g = g + s.momentum * rm[i];  // Nesterov
          }
          rp[i] = pi - s.lr * g;
        }
        rdelta[i] = rp[i] - pi;
      }
      const auto np = Buffers::download(params[k].param, n, DType::kF32);
      std::vector<float> delta(n);
      for (int64_t i = 0; i < n; ++i) delta[i] = np[i] - x.p[i];
      const std::string w = std::string(name) + " param " + std::to_string(k) + " grad " + kc::dtype_name(gtypes[k]);
      // The update is a difference of two fp32 values near 1: its rounding alone is ~6e-8 / 1e-3.
      expect_close(env.ctx, (w + ": update").c_str(), delta, rdelta, 2e-4);
      if (params[k].state0)
        expect_close(env.ctx, (w + (adam ? ": exp_avg" : ": momentum")).c_str(),
                     Buffers::download(params[k].state0, n, DType::kF32), rm, 1e-5);
      if (adam)
        expect_close(env.ctx, (w + ": exp_avg_sq").c_str(), Buffers::download(params[k].state1, n, DType::kF32),
                     rv, 1e-5);
      if (params[k].param_bf16)
        expect_close(env.ctx, (w + ": bf16 param copy").c_str(),
                     Buffers::download(params[k].param_bf16, n, DType::kBF16), rp, 1e-2);
    }
  }
}

}  // namespace cohort::gpu_test
