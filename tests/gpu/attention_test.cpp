// kernels/cuda/attention forward and backward against the double-precision reference: causal
// and full, every supported head size, T not a multiple of the tiles, fp32 and bf16; an
// unsupported head size throws kUnsupported. bf16 backward gets 2e-2, not 1e-2: its
// delta = rowsum(dO * O) uses the forward's bf16-rounded O.
#include "kernels/cuda/attention.h"

#include <cmath>

#include "core/base/error.h"
#include "tests/gpu/harness.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {
void attention_case(Env& env, DType t, int64_t B, int64_t T, int64_t H, int64_t D, bool causal) {
  kc::AttentionDims d;
  d.B = B;
  d.T = T;
  d.H = H;
  d.D = D;
  d.causal = causal;
  d.scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t C = H * D;
  const auto qkv = as_stored(random_vector(env.rng, B * T * 3 * C, -2, 2), t);
  Buffers buf(*env.alloc);
  void* out = buf.poisoned(B * T * C, t);
  float* lse = buf.poisoned_f32(B * H * T);
  kc::attention_forward(t, d, buf.upload(qkv, t), out, lse, nullptr);
  std::vector<double> rout, rlse;
  ref::attention(qkv, B, T, H, D, d.scale, causal, rout, rlse);
  char what[96];
  std::snprintf(what, sizeof what, "%s B%lld T%lld H%lld D%lld%s", kc::dtype_name(t),
                static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
                static_cast<long long>(D), causal ? " causal" : "");
  expect_close(env.ctx, (std::string("attn out ") + what).c_str(),
               Buffers::download(out, B * T * C, t), rout, tol_for(t));
  expect_close(env.ctx, (std::string("attn lse ") + what).c_str(),
               Buffers::download(lse, B * H * T, DType::kF32), rlse, 1e-5);
  // Backward from the GPU forward's out and lse.
  const auto dout = as_stored(random_vector(env.rng, B * T * C), t);
  void* dqkv = buf.poisoned(B * T * 3 * C, t);
  float* ws = buf.poisoned_f32(kc::attention_backward_workspace(d));
  kc::attention_backward(t, d, buf.upload(qkv, t), out, lse, buf.upload(dout, t), dqkv, ws,
                         nullptr);
  std::vector<double> rdqkv;
  ref::attention_backward(qkv, dout, B, T, H, D, d.scale, causal, rdqkv);
  expect_close(env.ctx, (std::string("attn dqkv ") + what).c_str(),
               Buffers::download(dqkv, B * T * 3 * C, t), rdqkv, t == DType::kF32 ? 1e-5 : 2e-2);
}
}  // namespace

void test_attention(Env& env) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    attention_case(env, t, 2, 77, 3, 64, true);
    attention_case(env, t, 1, 130, 2, 128, true);
    attention_case(env, t, 2, 45, 2, 16, false);
    attention_case(env, t, 1, 64, 4, 32, true);
  }
  attention_case(env, DType::kBF16, 2, 256, 12, 64, true);  // GPT-2 head layout
  bool threw = false;
  try {
    kc::AttentionDims d;
    d.B = 1;
    d.T = 4;
    d.H = 1;
    d.D = 48;
    kc::attention_forward(DType::kF32, d, nullptr, nullptr, nullptr, nullptr);
  } catch (const Error& e) {
    threw = e.status() == Status::kUnsupported;
  }
  expect_true(env.ctx, "attn head size 48 -> kUnsupported", threw);
}

}  // namespace cohort::gpu_test
