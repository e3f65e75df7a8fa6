// kernels/cuda/attention forward and backward against the double-precision reference, through
// each of its kernels: the tensor-core ones (D 64 and 128; fp32 with TF32 allowed, and bf16)
// and the CUDA-core ones (D 16 and 32, fp32 with exact products, and a misaligned tensor, which
// falls back to them). Causal and full, T = 1, T not a multiple of any tile, T spanning several
// tiles, B * H past the 65535 a grid dimension holds. The backward runs twice and must be
// bitwise identical (no atomics). Every case prints its times; a failing comparison prints the
// largest error, where it is (b, t, q/k/v, h, d) and the value against the reference.
// Tolerances: attention_check.h (TF32 and bf16 derived there; lse by its RMS absolute error).
#include "kernels/cuda/attention.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/base/error.h"
#include "tests/gpu/attention_check.h"
#include "tests/gpu/harness.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {

// Which kernel family a case means to reach.
enum class Path { kTf32, kExact, kBf16 };

struct Case {
  Path path;
  int64_t B, T, H, D;
  bool causal;
  bool misaligned = false;  // tensors offset by one element from 16-byte alignment
};

std::string case_name(const Case& c, bool tensor_cores) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s B%lld T%lld H%lld D%lld%s%s [%s]",
                c.path == Path::kBf16 ? "bf16" : (c.path == Path::kTf32 ? "tf32" : "fp32"),
                static_cast<long long>(c.B), static_cast<long long>(c.T),
                static_cast<long long>(c.H), static_cast<long long>(c.D), c.causal ? " causal" : "",
                c.misaligned ? " misaligned" : "", tensor_cores ? "mma" : "cuda cores");
  return buf;
}

// Records the comparison in the driver's table; on failure also prints where the largest error
// sits and what the values are.
void check(Env& env, const std::string& what, const std::vector<float>& got,
           const std::vector<double>& ref, double tol, const std::string& where,
           const ErrorStats& e) {
  if (!expect_close(env.ctx, what.c_str(), got, ref, tol))
    std::printf("       %s\n", describe(e, got, ref, where).c_str());
}

// lse: the RMS of its absolute error (attention_check.h says why), in the same table.
void check_rms(Env& env, const std::string& what, const std::vector<float>& got,
               const std::vector<double>& ref, double tol, const std::string& where,
               const ErrorStats& e) {
  const bool ok = e.rms_abs <= tol;  // false for NaN
  ++env.ctx.checks;
  if (!ok) ++env.ctx.failures;
  std::printf("  %-4s %-28s %-34s rms |err| %.3e (tol %.0e)\n", ok ? "ok" : "FAIL",
              env.ctx.test.c_str(), what.c_str(), e.rms_abs, tol);
  if (!ok) std::printf("       %s\n", describe(e, got, ref, where).c_str());
}

// A device buffer of n elements of t, poisoned (NaN bytes), optionally one element past a
// 16-byte boundary.
void* poisoned_at(Buffers& buf, size_t n, DType t, bool misaligned) {
  auto* p = static_cast<unsigned char*>(buf.poisoned(n + 8, t));
  return p + (misaligned ? kc::dtype_size(t) : 0);
}

void attention_case(Env& env, const Case& c) {
  const DType t = c.path == Path::kBf16 ? DType::kBF16 : DType::kF32;
  const bool tf32 = c.path == Path::kTf32;
  kc::AttentionDims d;
  d.B = c.B;
  d.T = c.T;
  d.H = c.H;
  d.D = c.D;
  d.causal = c.causal;
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  const bool mma = kc::attention_uses_tensor_cores(t, d, tf32) && !c.misaligned;
  const AttentionTolerance tol =
      t == DType::kBF16 ? kAttnTolBf16 : (mma ? kAttnTolTf32 : kAttnTolFp32);
  const std::string name = case_name(c, mma);
  const int64_t C = c.H * c.D, n_qkv = c.B * c.T * 3 * C, n_out = c.B * c.T * C;
  const auto qkv = as_stored(random_vector(env.rng, n_qkv, -2, 2), t);
  const auto dout = as_stored(random_vector(env.rng, n_out), t);
  Buffers buf(*env.alloc);
  void* x = poisoned_at(buf, n_qkv, t, c.misaligned);
  Buffers::copy_in(x, qkv, t);
  void* out = poisoned_at(buf, n_out, t, c.misaligned);
  void* g = poisoned_at(buf, n_out, t, c.misaligned);
  Buffers::copy_in(g, dout, t);
  void* dqkv = poisoned_at(buf, n_qkv, t, c.misaligned);
  float* lse = buf.poisoned_f32(c.B * c.H * c.T);
  float* ws = buf.poisoned_f32(kc::attention_backward_workspace(d));

  kc::Event e0(true), e1(true), e2(true);
  e0.record(nullptr);
  kc::attention_forward(t, d, x, out, lse, nullptr, tf32);
  e1.record(nullptr);
  kc::attention_backward(t, d, x, out, lse, g, dqkv, ws, nullptr, tf32);
  e2.record(nullptr);
  e2.synchronize();
  std::printf("       %-52s forward %.3f ms, backward %.3f ms (first calls)\n", name.c_str(),
              e1.elapsed_ms(e0), e2.elapsed_ms(e1));

  std::vector<double> rout, rlse, rdqkv;
  ref::attention(qkv, c.B, c.T, c.H, c.D, d.scale, c.causal, rout, rlse);
  const auto got_out = Buffers::download(out, n_out, t);
  const auto got_lse = Buffers::download(lse, c.B * c.H * c.T, DType::kF32);
  ErrorStats es = error_stats(got_out, rout);
  check(env, "out " + name, got_out, rout, tol.out, where_btc(es.worst, c.T, c.H, c.D, 1), es);
  es = error_stats(got_lse, rlse);
  check_rms(env, "lse " + name, got_lse, rlse, tol.lse_rms, where_bht(es.worst, c.H, c.T), es);

  // Backward from the GPU forward's out and lse, against the reference's own forward.
  ref::attention_backward(qkv, dout, c.B, c.T, c.H, c.D, d.scale, c.causal, rdqkv);
  const auto got_dqkv = Buffers::download(dqkv, n_qkv, t);
  es = error_stats(got_dqkv, rdqkv);
  check(env, "dqkv " + name, got_dqkv, rdqkv, tol.dqkv, where_btc(es.worst, c.T, c.H, c.D, 3), es);
  // Deterministic: a second backward into a freshly poisoned buffer gives the same bits.
  COHORT_CUDA_CHECK(cudaMemset(dqkv, 0xFF, n_qkv * kc::dtype_size(t)));
  kc::attention_backward(t, d, x, out, lse, g, dqkv, ws, nullptr, tf32);
  const auto again = Buffers::download(dqkv, n_qkv, t);
  const bool same = std::memcmp(again.data(), got_dqkv.data(), again.size() * sizeof(float)) == 0;
  expect_true(env.ctx, ("dqkv bitwise repeatable " + name).c_str(), same);
}

bool throws_unsupported(const kc::AttentionDims& d, bool tf32) {
  try {
    kc::attention_forward(DType::kF32, d, nullptr, nullptr, nullptr, nullptr, tf32);
  } catch (const Error& e) {
    return e.status() == Status::kUnsupported;
  }
  return false;
}
}  // namespace

void test_attention(Env& env) {
  // COHORT_GPU_TEST_QUICK=1: the small tensor-core cases only, for compute-sanitizer's racecheck,
  // under which the CUDA-core kernels and the large grids take minutes.
  if (const char* q = std::getenv("COHORT_GPU_TEST_QUICK"); q && *q == '1') {
    for (Path p : {Path::kTf32, Path::kBf16}) {
      attention_case(env, {p, 2, 77, 3, 64, true});
      attention_case(env, {p, 1, 130, 2, 128, true});
      attention_case(env, {p, 1, 200, 2, 64, false});
    }
    return;
  }
  for (Path p : {Path::kTf32, Path::kBf16, Path::kExact}) {
    attention_case(env, {p, 2, 77, 3, 64, true});    // T not a multiple of any tile
    attention_case(env, {p, 1, 130, 2, 128, true});  // D128: single-stage backward pipelines
    attention_case(env, {p, 2, 45, 2, 16, false});   // CUDA-core kernels
    attention_case(env, {p, 1, 64, 4, 32, true});
  }
  for (Path p : {Path::kTf32, Path::kBf16}) {
    attention_case(env, {p, 2, 1, 2, 64, true});  // one token
    attention_case(env, {p, 1, 1, 1, 128, false});
    attention_case(env, {p, 2, 64, 2, 64, false});   // exactly one tile
    attention_case(env, {p, 1, 200, 2, 64, false});  // several tiles, tail of 8
    attention_case(env, {p, 1, 333, 1, 128, true});  // several tiles, both pipelines deep
    attention_case(env, {p, 2, 33, 2, 128, false});
    attention_case(env, {p, 2, 256, 12, 64, true});   // GPT-2 head layout
    attention_case(env, {p, 2, 3, 33000, 64, true});  // B * H = 66000 blocks on grid x
  }
  attention_case(env, {Path::kTf32, 1, 70, 2, 64, true, true});  // misaligned: CUDA cores
  attention_case(env, {Path::kBf16, 1, 70, 2, 128, false, true});

  kc::AttentionDims d;
  d.B = 1;
  d.T = 4;
  d.H = 1;
  d.D = 48;
  expect_true(env.ctx, "attn head size 48 -> kUnsupported", throws_unsupported(d, true));
  // Exact fp32 products run on the CUDA-core kernel, whose grid holds B * H < 65536.
  d.B = 2;
  d.H = 33000;
  d.D = 64;
  expect_true(env.ctx, "attn fp32 exact B * H = 66000 -> kUnsupported",
              throws_unsupported(d, false));
}

}  // namespace cohort::gpu_test
