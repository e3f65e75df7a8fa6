// bf16 attention through cuDNN's fused SDPA (kernels/cuda/attention_cudnn), reached through the
// public attention_forward / attention_backward: out, lse and dqkv against the double-precision
// reference and against cohort's own kernels on the same inputs, cohort's backward fed cuDNN's
// forward (the lse conventions must agree), a shape cuDNN declines (cohort's kernel takes over),
// and plan reuse. Each case prints cuDNN's first-call time (plan build) and its
// cached-plan times; a failed comparison prints the worst element and where it is.
// Tolerances (relative L2), from bf16's unit roundoff u = 2^-9 ~ 2e-3: the forward rounds P and
// the output to bf16 (~2 u, ~4e-3 expected) -> 1e-2; the backward also rounds dS and uses the
// bf16 O in rowsum(dO * O) (~4-5 u) -> 2e-2, as for cohort's bf16 kernels; lse is fp32 math on
// bf16 inputs (D-term fp32 dot products, exp/log: ~1e-6) -> 2e-5; cuDNN against cohort's kernels
// is bounded by the sum of both errors -> 2e-2 forward, 4e-2 backward.
#include "kernels/cuda/attention_cudnn.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "core/base/error.h"
#include "core/base/log.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cudnn_api.h"
#include "tests/gpu/harness.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {

constexpr double kTolOut = 1e-2, kTolLse = 2e-5, kTolGrad = 2e-2;

using Where = std::function<std::string(size_t)>;

// expect_close, and on failure the element with the largest absolute error.
bool check(Env& env, const std::string& what, const std::vector<float>& out,
           const std::vector<double>& ref, double tol, const Where& where) {
  if (expect_close(env.ctx, what.c_str(), out, ref, tol)) return true;
  size_t at = 0;
  double worst = -1.0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double e = std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) : INFINITY;
    if (e > worst) worst = e, at = i;
  }
  if (worst >= 0.0)
    std::printf("       worst |err| %.3e at %s: got %.6g, want %.6g\n", worst, where(at).c_str(),
                out[at], ref[at]);
  return false;
}

struct Case {
  int64_t B, T, H, D;
  bool causal;
  bool must_take;  // false: cuDNN may decline this head size (then cohort's kernel is checked)
};

std::string name_of(const Case& c) {
  char s[64];
  std::snprintf(s, sizeof s, "B%lld T%lld H%lld D%lld%s", static_cast<long long>(c.B),
                static_cast<long long>(c.T), static_cast<long long>(c.H),
                static_cast<long long>(c.D), c.causal ? " causal" : "");
  return s;
}

// Milliseconds of one call on the legacy stream (event-timed, cached plan).
double time_ms(const std::function<void()>& f) {
  kc::Event a(true), b(true);
  a.record(nullptr);
  f();
  b.record(nullptr);
  b.synchronize();
  return b.elapsed_ms(a);
}

double wall_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  COHORT_CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void cudnn_case(Env& env, const Case& c) {
  const DType t = DType::kBF16;
  kc::AttentionDims d;
  d.B = c.B, d.T = c.T, d.H = c.H, d.D = c.D, d.causal = c.causal;
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  const int64_t B = c.B, T = c.T, H = c.H, D = c.D, C = H * D;
  const std::string name = name_of(c);
  const Where at_qkv = [=](size_t i) {
    const int64_t col = static_cast<int64_t>(i) % (3 * C);
    return str_cat("b", static_cast<int64_t>(i) / (T * 3 * C), " t",
                   static_cast<int64_t>(i) / (3 * C) % T, " ", "qkv"[col / C], " h", col % C / D,
                   " d", col % D);
  };
  const Where at_out = [=](size_t i) {
    return str_cat("b", static_cast<int64_t>(i) / (T * C), " t", static_cast<int64_t>(i) / C % T,
                   " h", static_cast<int64_t>(i) % C / D, " d", static_cast<int64_t>(i) % D);
  };
  const Where at_lse = [=](size_t i) {
    return str_cat("b", static_cast<int64_t>(i) / (H * T), " h", static_cast<int64_t>(i) / T % H,
                   " t", static_cast<int64_t>(i) % T);
  };
  const auto qkv = as_stored(random_vector(env.rng, B * T * 3 * C, -2, 2), t);
  const auto dout = as_stored(random_vector(env.rng, B * T * C), t);
  std::vector<double> rout, rlse, rdqkv;
  ref::attention(qkv, B, T, H, D, d.scale, c.causal, rout, rlse);
  ref::attention_backward(qkv, dout, B, T, H, D, d.scale, c.causal, rdqkv);
  Buffers buf(*env.alloc);
  void* dqkv_in = buf.upload(qkv, t);
  void* dout_in = buf.upload(dout, t);

  // cuDNN: the first calls build the plans.
  kc::attention_cudnn_set_mode(kc::CudnnAttention::kOn);
  void* out = buf.poisoned(B * T * C, t);
  float* lse = buf.poisoned_f32(B * H * T);
  void* dqkv = buf.poisoned(B * T * 3 * C, t);
  float* ws = buf.poisoned_f32(kc::attention_backward_workspace(d));
  const auto s0 = kc::attention_cudnn_stats();
  const double first_fwd =
      wall_ms([&] { kc::attention_forward(t, d, dqkv_in, out, lse, nullptr); });
  const auto s1 = kc::attention_cudnn_stats();
  const double first_bwd =
      wall_ms([&] { kc::attention_backward(t, d, dqkv_in, out, lse, dout_in, dqkv, ws, nullptr); });
  const auto s2 = kc::attention_cudnn_stats();
  const bool took_fwd = s1.forward_calls == s0.forward_calls + 1;
  const bool took_bwd = s2.backward_calls == s1.backward_calls + 1;
  if (c.must_take || took_fwd) {
    if (!expect_true(env.ctx, ("cuDNN ran forward " + name).c_str(), took_fwd))
      std::printf("       cuDNN declined: %s\n", s1.last_refusal.c_str());
  } else {
    std::printf("  note %-28s cuDNN declined %s (checked cohort's kernel instead): %s\n",
                env.ctx.test.c_str(), name.c_str(), s1.last_refusal.c_str());
  }
  // Older cuDNN runs the backward only at T % 128 == 0 (seen: 9.14 declines T = 77, 130, 45, 200).
  const kc::cudnn::Api* api = kc::cudnn::api_or_null();
  const bool bwd_must = c.must_take && api && kc::attention_cudnn_backward_takes_length(api->version, c.T);
  if (bwd_must || took_bwd) {
    if (!expect_true(env.ctx, ("cuDNN ran backward " + name).c_str(), took_bwd))
      std::printf("       cuDNN declined: %s\n", s2.last_refusal.c_str());
  } else {
    std::printf("  note %-28s cuDNN declined the backward of %s (checked cohort's kernel instead): %s\n",
                env.ctx.test.c_str(), name.c_str(), s2.last_refusal.c_str());
  }
  const auto got_out = Buffers::download(out, B * T * C, t);
  const auto got_lse = Buffers::download(lse, B * H * T, DType::kF32);
  const auto got_dqkv = Buffers::download(dqkv, B * T * 3 * C, t);
  check(env, "cudnn out " + name, got_out, rout, kTolOut, at_out);
  check(env, "cudnn lse " + name, got_lse, rlse, kTolLse, at_lse);
  check(env, "cudnn dqkv " + name, got_dqkv, rdqkv, kTolGrad, at_qkv);

  // Cached plans: the same shape again builds nothing and runs at full speed.
  const double fwd_ms = time_ms([&] { kc::attention_forward(t, d, dqkv_in, out, lse, nullptr); });
  const double bwd_ms =
      time_ms([&] { kc::attention_backward(t, d, dqkv_in, out, lse, dout_in, dqkv, ws, nullptr); });
  const auto s3 = kc::attention_cudnn_stats();
  expect_true(env.ctx, ("cuDNN plans reused " + name).c_str(), s3.plans_built == s2.plans_built);
  std::printf(
      "       %s: first forward %.0f ms, first backward %.0f ms (plan builds); cached %.3f / %.3f "
      "ms\n",
      name.c_str(), first_fwd, first_bwd, fwd_ms, bwd_ms);
  // The repeated backward ran again into the same buffers: still right (dQ's fp32 accumulator
  // is zeroed by cuDNN on every call, not only the first).
  check(env, "cudnn dqkv again " + name, Buffers::download(dqkv, B * T * 3 * C, t), rdqkv, kTolGrad,
        at_qkv);

  // cohort's kernels on the same inputs, and cohort's backward fed cuDNN's out and lse.
  kc::attention_cudnn_set_mode(kc::CudnnAttention::kOff);
  void* own_out = buf.poisoned(B * T * C, t);
  float* own_lse = buf.poisoned_f32(B * H * T);
  void* own_dqkv = buf.poisoned(B * T * 3 * C, t);
  void* mixed_dqkv = buf.poisoned(B * T * 3 * C, t);
  float* own_ws = buf.poisoned_f32(kc::attention_backward_workspace(d));
  kc::attention_forward(t, d, dqkv_in, own_out, own_lse, nullptr);
  kc::attention_backward(t, d, dqkv_in, own_out, own_lse, dout_in, own_dqkv, own_ws, nullptr);
  kc::attention_backward(t, d, dqkv_in, out, lse, dout_in, mixed_dqkv, own_ws, nullptr);
  check(env, "cudnn vs cohort out " + name, got_out,
        widen(Buffers::download(own_out, B * T * C, t)), 2 * kTolOut, at_out);
  check(env, "cudnn vs cohort dqkv " + name, got_dqkv,
        widen(Buffers::download(own_dqkv, B * T * 3 * C, t)), 2 * kTolGrad, at_qkv);
  check(env, "cohort bwd of cudnn fwd " + name, Buffers::download(mixed_dqkv, B * T * 3 * C, t),
        rdqkv, kTolGrad, at_qkv);
}

// A single token (cuDNN's graph needs T >= 2): cuDNN declines, cohort's kernel runs, right
// answer. (Misaligned buffers decline the same way; cudnn_offline_test checks that without a GPU,
// since cohort's kernels may not read misaligned rows either.)
void declined_case(Env& env) {
  const DType t = DType::kBF16;
  kc::AttentionDims d;
  d.B = 2, d.T = 1, d.H = 2, d.D = 64, d.causal = true, d.scale = 0.125f;
  const int64_t C = d.H * d.D;
  const auto qkv = as_stored(random_vector(env.rng, d.B * d.T * 3 * C, -2, 2), t);
  std::vector<double> rout, rlse;
  ref::attention(qkv, d.B, d.T, d.H, d.D, d.scale, true, rout, rlse);
  Buffers buf(*env.alloc);
  void* in = buf.upload(qkv, t);
  void* out = buf.poisoned(d.B * d.T * C, t);
  float* lse = buf.poisoned_f32(d.B * d.H * d.T);
  kc::attention_cudnn_set_mode(kc::CudnnAttention::kOn);
  const auto before = kc::attention_cudnn_stats();
  kc::attention_forward(t, d, in, out, lse, nullptr);
  const auto after = kc::attention_cudnn_stats();
  expect_true(env.ctx, "T = 1: cuDNN declined", after.forward_calls == before.forward_calls);
  if (!expect_true(env.ctx, "T = 1: the reason names T",
                   after.last_refusal.find("T = 1") != std::string::npos))
    std::printf("       reason: %s\n", after.last_refusal.c_str());
  expect_close(env.ctx, "T = 1: cohort out", Buffers::download(out, d.B * d.T * C, t), rout,
               kTolOut);
  expect_close(env.ctx, "T = 1: cohort lse", Buffers::download(lse, d.B * d.H * d.T, DType::kF32),
               rlse, kTolLse);
}

}  // namespace

void test_attention_cudnn(Env& env) {
  struct Restore {
    ~Restore() {
      kc::attention_cudnn_set_mode(kc::CudnnAttention::kOff);  // the driver's default
      set_log_level(LogLevel::kWarn);
    }
  } restore;
  set_log_level(LogLevel::kInfo);  // cuDNN's version and each plan's engine and build time
  std::string why;
  const kc::cudnn::Api* api = kc::cudnn::api_or_null(&why);
  std::printf("       cuDNN: %s\n",
              api ? str_cat(api->version, " (libcudnn.so.9)").c_str() : why.c_str());
  const Case cases[] = {
      {2, 77, 3, 64, true, true},     // T not a multiple of any tile
      {1, 130, 2, 128, true, true},   // D 128
      {2, 45, 2, 64, false, true},    // full (non-causal) attention
      {2, 256, 12, 64, true, true},   // GPT-2 small's head layout
      {1, 200, 2, 128, false, true},  // D 128, full
      {1, 64, 4, 32, true, false},    // D 32: cuDNN may decline
  };
  for (const Case& c : cases) cudnn_case(env, c);
  declined_case(env);
  const auto s = kc::attention_cudnn_stats();
  std::printf(
      "       cuDNN attention: %lld forward and %lld backward calls, %lld plans built, %lld "
      "refusals\n",
      static_cast<long long>(s.forward_calls), static_cast<long long>(s.backward_calls),
      static_cast<long long>(s.plans_built), static_cast<long long>(s.refusals));
}

}  // namespace cohort::gpu_test
