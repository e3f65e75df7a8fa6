// The tensor-core attention kernels' block bodies (kernels/cuda/attention_flash.cuh) run on the
// host warp emulator (warp_emulator.h) against the double-precision reference (reference.h):
// forward out and lse, then the backward from the emulated forward's out and lse, for fp32
// (TF32 products) and bf16, head sizes 64 and 128, causal and not, T = 1, T not a multiple of
// any tile, and T long enough for three or more tiles through both pipelines. No GPU needed:
// this is where fragment layouts, masks, tails and the cp.async pipeline are checked before the
// kernels meet a device (the same code then runs there in gpu_kernels_test).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/warp_emulator.h"
// The emulation above supplies the primitives the bodies are written against.
#include "kernels/cuda/attention_flash_backward.cuh"
#include "tests/gpu/attention_check.h"
#include "tests/gpu/check.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {
namespace {

namespace fl = kernels::cuda::detail::flash;
using bf16_t = __nv_bfloat16;

template <typename T>
std::vector<T> encode(const std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = to_bf16(v[i]);
      std::memcpy(static_cast<void*>(&out[i]), &b, 2);
    }
    return out;
  }
}

template <typename T>
std::vector<float> decode(const std::vector<T>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, static_cast<const void*>(&v[i]), 2);
      out[i] = from_bf16(b);
    }
    return out;
  }
}

template <typename T>
std::vector<T> poisoned(size_t n) {  // NaN bytes, as the GPU test's buffers
  std::vector<T> v(n);
  std::memset(static_cast<void*>(v.data()), 0xFF, n * sizeof(T));
  return v;
}

struct Case {
  int B, T, H;
  bool causal;
};

std::string name(const char* type, int D, const Case& c) {
  return std::string(type) + " D" + std::to_string(D) + " B" + std::to_string(c.B) + " T" +
         std::to_string(c.T) + " H" + std::to_string(c.H) + (c.causal ? " causal" : "");
}

// `err` is e.rel_l2 or e.rms_abs, whichever the tolerance is for.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& ref, double err, double tol,
                  const std::string& where_worst, const ErrorStats& e) {
  std::printf("  %-4s %-44s %s\n", err <= tol ? "ok" : "FAIL", what.c_str(),
              describe(e, got, ref, where_worst).c_str());
  EXPECT_LE(err, tol) << what << ": " << describe(e, got, ref, where_worst);
}

template <typename T, int D>
void run_case(const Case& c, uint64_t seed, const AttentionTolerance& tol) {
  const char* type = std::is_same_v<T, float> ? "fp32" : "bf16";
  const std::string what = name(type, D, c);
  SCOPED_TRACE(what + " seed " + std::to_string(seed));
  const int C = c.H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::mt19937_64 rng(seed);
  auto stored = [](std::vector<float> v) {
    return std::is_same_v<T, float> ? v : round_bf16(std::move(v));
  };
  const std::vector<float> qkv_f = stored(random_vector(rng, size_t(c.B) * c.T * 3 * C, -2, 2));
  const std::vector<float> dout_f = stored(random_vector(rng, size_t(c.B) * c.T * C));
  const std::vector<T> qkv = encode<T>(qkv_f), dout = encode<T>(dout_f);
  std::vector<T> out = poisoned<T>(size_t(c.B) * c.T * C), dqkv = poisoned<T>(qkv.size());
  std::vector<float> lse = poisoned<float>(size_t(c.B) * c.H * c.T);
  std::vector<float> delta(lse.size());
  emu::clear_globals();
  emu::register_global(qkv.data(), qkv.size() * sizeof(T));
  emu::register_global(dout.data(), dout.size() * sizeof(T));
  emu::register_global(out.data(), out.size() * sizeof(T));
  emu::register_global(dqkv.data(), dqkv.size() * sizeof(T));
  emu::register_global(lse.data(), lse.size() * 4);
  emu::register_global(delta.data(), delta.size() * 4);

  // Forward, with the launch geometry of attention.cu.
  const fl::ForwardArgs fa{qkv.data(), out.data(), lse.data(),         c.T,
                           c.H,        C,          scale * fl::kLog2e, c.causal};
  using Fwd = fl::ForwardConfig<T, D>;
  emu::Launch launch{c.B * c.H, Fwd::tiles(c.T), fl::kThreads, Fwd::kSmemBytes, seed};
  emu::run(launch, [&](int bx, int by, int tid, unsigned char* smem) {
    fl::forward_block<T, D>(fa, bx, launch.grid_y - 1 - by, tid, reinterpret_cast<T*>(smem));
  });
  std::vector<double> rout, rlse, rdqkv;
  ref::attention(qkv_f, c.B, c.T, c.H, D, scale, c.causal, rout, rlse);
  const std::vector<float> got_out = decode(out);
  ErrorStats e = error_stats(got_out, rout);
  expect_close(what + " out", got_out, rout, e.rel_l2, tol.out, where_btc(e.worst, c.T, c.H, D, 1),
               e);
  e = error_stats(lse, rlse);
  expect_close(what + " lse (rms)", lse, rlse, e.rms_abs, tol.lse_rms, where_bht(e.worst, c.H, c.T),
               e);

  // delta = rowsum(dO * O) in fp32, as attention_backward's delta kernel computes it.
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < c.H; ++h) {
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) {
          const size_t i = (size_t(b) * c.T + t) * C + size_t(h) * D + d;
          acc += got_out[i] * dout_f[i];
        }
        delta[(size_t(b) * c.H + h) * c.T + t] = acc;
      }
  const fl::BackwardArgs ba{qkv.data(), dout.data(), lse.data(), delta.data(), dqkv.data(),
                            c.T,        c.H,         C,          scale,        scale * fl::kLog2e,
                            c.causal};
  using Dq = fl::DqConfig<T, D>;
  emu::Launch dq{c.B * c.H, Dq::tiles(c.T), fl::kThreads, Dq::kSmemBytes, seed + 1};
  emu::run(dq, [&](int bx, int by, int tid, unsigned char* smem) {
    fl::dq_block<T, D>(ba, bx, dq.grid_y - 1 - by, tid, reinterpret_cast<T*>(smem));
  });
  using Dkv = fl::DkvConfig<T, D>;
  emu::Launch dkv{c.B * c.H, Dkv::tiles(c.T), fl::kThreads, Dkv::kSmemBytes, seed + 2};
  emu::run(dkv, [&](int bx, int by, int tid, unsigned char* smem) {
    fl::dkv_block<T, D>(ba, bx, by, tid, reinterpret_cast<T*>(smem));
  });
  emu::clear_globals();
  ref::attention_backward(qkv_f, dout_f, c.B, c.T, c.H, D, scale, c.causal, rdqkv);
  const std::vector<float> got_dqkv = decode(dqkv);
  e = error_stats(got_dqkv, rdqkv);
  expect_close(what + " dqkv", got_dqkv, rdqkv, e.rel_l2, tol.dqkv,
               where_btc(e.worst, c.T, c.H, D, 3), e);
}

// Derived in attention_check.h.
constexpr const AttentionTolerance& kTf32 = kAttnTolTf32;
constexpr const AttentionTolerance& kBf16 = kAttnTolBf16;

TEST(AttentionEmulated, Fp32HeadSize64) {
  run_case<float, 64>({1, 77, 2, true}, 11, kTf32);
  run_case<float, 64>({2, 1, 1, true}, 12, kTf32);
  run_case<float, 64>({1, 64, 1, false}, 13, kTf32);
  run_case<float, 64>({1, 200, 1, true}, 14, kTf32);  // 4 query blocks, up to 4 key tiles
  run_case<float, 64>({1, 130, 1, false}, 15, kTf32);
}

TEST(AttentionEmulated, Fp32HeadSize128) {
  run_case<float, 128>({1, 100, 1, true}, 21, kTf32);  // one-stage dq/dkv pipelines, 4 key tiles
  run_case<float, 128>({1, 33, 2, false}, 22, kTf32);
  run_case<float, 128>({1, 1, 1, false}, 23, kTf32);
}

TEST(AttentionEmulated, Bf16HeadSize64) {
  run_case<bf16_t, 64>({1, 77, 2, true}, 31, kBf16);
  run_case<bf16_t, 64>({1, 150, 1, false}, 32, kBf16);
  run_case<bf16_t, 64>({1, 1, 1, true}, 33, kBf16);
}

TEST(AttentionEmulated, Bf16HeadSize128) {
  run_case<bf16_t, 128>({1, 100, 1, true}, 41, kBf16);
  run_case<bf16_t, 128>({1, 20, 1, false}, 42, kBf16);
}

}  // namespace
}  // namespace cohort::gpu_test
