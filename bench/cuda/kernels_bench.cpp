// bench_cuda_kernels: cuBLAS gemm TFLOP/s (bf16, TF32, fp32) at 4096^3 and GPT-2-small shapes
// (B*T = 8192, C = 768), the fused kernels' achieved bandwidth, and attention TFLOP/s, each printed
// as a ratio against an anchor measured in the same run: the card's dense bf16 peak given on the
// command line (default 989 TFLOP/s, H100 SXM) and a device-to-device cudaMemcpy (bytes read +
// written). Attention (causal, GPT-2 small's heads, T 1024/2048/4096 at 8192 tokens) is timed for
// bf16 through cuDNN's fused SDPA and through cohort's kernel, and for fp32 (cohort's kernel); its
// lines start with "attention " so that torch_anchor.py can run `bench_cuda_kernels --attention`
// and print the ratios to PyTorch's scaled_dot_product_attention on the same shapes.
// Times are the median of 20 event-timed repetitions after 3 warm-ups, on random inputs.
// Usage: bench_cuda_kernels [peak_bf16_tflops] [--attention (attention rows only)]
//        [--gemm (the GPT-2 output head's products only, gemm staging off and on)]
//        [--quick (the head's products and the fused kernels' bandwidth)]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/base/log.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cudnn_api.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/softmax.h"

namespace kc = cohort::kernels::cuda;
using kc::DType;

namespace {
kc::DeviceAllocator* g_alloc = nullptr;

double median_ms(const std::function<void()>& f, int reps = 20) {
  for (int i = 0; i < 3; ++i) f();
  kc::Event a(true), b(true);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    a.record(nullptr);
    f();
    b.record(nullptr);
    b.synchronize();
    t.push_back(b.elapsed_ms(a));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Device buffer of n elements of `type` with uniform random values in [-1, 1).
void* random_buffer(size_t n, DType type, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  void* p = g_alloc->allocate(n * kc::dtype_size(type));
  if (type == DType::kF32) {
    std::vector<float> h(n);
    for (auto& x : h) x = u(rng);
    COHORT_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> h(n);
    for (auto& x : h) {
      const float f = u(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    }
    COHORT_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
  return p;
}

void bench_gemm(kc::Blas& blas, const char* mode, DType type, bool tf32, int64_t M, int64_t N,
                int64_t K, double peak) {
  void* A = random_buffer(M * K, type, 1);
  void* B = random_buffer(K * N, type, 2);
  void* C = random_buffer(M * N, type, 3);
  blas.set_allow_tf32(tf32);
  const double ms =
      median_ms([&] { blas.gemm(type, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N); });
  const double tflops = 2.0 * M * N * K / (ms * 1e-3) / 1e12;
  std::printf(
      "gemm %-5s [%5lld x %5lld] x [%5lld x %5lld]  %8.3f ms  %7.1f TFLOP/s  %.3f of bf16 peak\n",
      mode, (long long)M, (long long)K, (long long)K, (long long)N, ms, tflops, tflops / peak);
  g_alloc->free(A);
  g_alloc->free(B);
  g_alloc->free(C);
}

// The GPT-2 output head's three products at [8192 tokens, 768] x a 50257-row vocabulary, laid out
// as the graph issues them (forward logits = h wte^T, dh = dlogits wte, dwte = dlogits^T h): rows
// of 50257 bf16 values are off 16-byte boundaries, so cuBLAS alone runs slow kernels; printed with
// gemm staging off and on (kernels/cuda/gemm.h), and at a 50304 vocabulary (aligned) as the floor.
void bench_head_gemms(DType type, bool tf32, double peak) {
  const int64_t T = 8192, C = 768;
  for (const int64_t V : {int64_t{50257}, int64_t{50304}}) {
    void* h = random_buffer(T * C, type, 1);
    void* w = random_buffer(V * C, type, 2);
    void* logits = random_buffer(T * V, type, 3);
    void* out = random_buffer(V * C, type, 4);
    struct Product {
      const char* name;
      std::function<void(kc::Blas&)> run;
    };
    const Product products[] = {
        {"fwd  h wte^T", [&](kc::Blas& b) { b.gemm(type, false, true, T, V, C, 1.0f, h, C, w, C, 0.0f, logits, V); }},
        {"dh   dlogits wte", [&](kc::Blas& b) { b.gemm(type, false, false, T, C, V, 1.0f, logits, V, w, C, 0.0f, out, C); }},
        {"dwte dlogits^T h", [&](kc::Blas& b) { b.gemm(type, true, false, V, C, T, 1.0f, logits, V, h, C, 0.0f, out, C); }},
    };
    for (const Product& p : products) {
      double ms[2];
      for (int staged = 0; staged < 2; ++staged) {
        kc::Blas blas;
        blas.set_allow_tf32(tf32);
        if (!staged) blas.set_staging({0.0, 0.0, 0});
        ms[staged] = median_ms([&] { p.run(blas); });
      }
      const double tf = 2.0 * T * V * C / 1e12;
      std::printf("head gemm %-4s V %5lld %-17s unstaged %7.3f ms %6.1f TFLOP/s  staged %7.3f ms %6.1f TFLOP/s  %.2fx\n",
                  tf32 ? "tf32" : kc::dtype_name(type), (long long)V, p.name, ms[0], tf / (ms[0] * 1e-3), ms[1],
                  tf / (ms[1] * 1e-3), ms[0] / ms[1]);
    }
    g_alloc->free(h);
    g_alloc->free(w);
    g_alloc->free(logits);
    g_alloc->free(out);
  }
  (void)peak;
}

void report_bw(const char* name, double ms, double bytes, double copy_gbs) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-44s %8.3f ms  %7.0f GB/s  %.2f of memcpy\n", name, ms, gbs, gbs / copy_gbs);
}
}  // namespace

void bench_fused(double copy_gbs);  // below
void bench_attention();             // below
void bench_attention_tf32();        // below

int main(int argc, char** argv) {
  double peak = 989.0;
  bool attention_only = false, gemm_only = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--attention") == 0) attention_only = true;
    else if (std::strcmp(argv[i], "--gemm") == 0) gemm_only = true;
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else peak = std::atof(argv[i]);
  }
  if (kc::device_count() == 0) {
    std::printf("no CUDA device visible: skipped (%s)\n", kc::no_device_reason().c_str());
    return 0;
  }
  const auto info = kc::device_info(0);
  std::printf("device: %s, %d SMs, L2 %zu MB; anchor bf16 dense peak %.0f TFLOP/s\n",
              info.name.c_str(), info.multiprocessors, info.l2_bytes >> 20, peak);
  kc::DeviceAllocator alloc;
  g_alloc = &alloc;
  if (attention_only) {
    bench_attention();
    return 0;
  }
  if (gemm_only) {  // the output head's products only (a quick device check of gemm staging)
    bench_head_gemms(DType::kBF16, false, peak);
    bench_head_gemms(DType::kF32, true, peak);
    return 0;
  }
  const size_t copy_bytes = size_t{1} << 30;
  void* src = alloc.allocate(copy_bytes);
  void* dst = alloc.allocate(copy_bytes);
  COHORT_CUDA_CHECK(cudaMemset(src, 1, copy_bytes));
  const double copy_ms = median_ms(
      [&] { COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("anchor: device-to-device memcpy 1 GiB: %.0f GB/s (read + write)\n", copy_gbs);
  alloc.free(src);
  alloc.free(dst);
  alloc.release_all();

  if (quick) {  // the output head's products and the fused kernels' bandwidth, nothing else
    bench_head_gemms(DType::kBF16, false, peak);
    bench_head_gemms(DType::kF32, true, peak);
    alloc.release_all();
    bench_fused(copy_gbs);
    return 0;
  }
  kc::Blas blas;
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {
      {4096, 4096, 4096}, {8192, 2304, 768}, {8192, 3072, 768}, {8192, 768, 3072}};
  for (const Shape& s : shapes) {
    bench_gemm(blas, "bf16", DType::kBF16, false, s.M, s.N, s.K, peak);
    bench_gemm(blas, "tf32", DType::kF32, true, s.M, s.N, s.K, peak);
  }
  bench_gemm(blas, "fp32", DType::kF32, false, 4096, 4096, 4096, peak);
  alloc.release_all();
  bench_head_gemms(DType::kBF16, false, peak);
  bench_head_gemms(DType::kF32, true, peak);
  alloc.release_all();
  bench_fused(copy_gbs);
  alloc.release_all();
  bench_attention();
  alloc.release_all();
  bench_attention_tf32();
  return 0;
}

void bench_fused(double copy_gbs) {
  const int64_t BT = 8192, C = 768, C4 = 4 * C, V = 50257;
  for (DType t : {DType::kBF16, DType::kF32}) {
    const double es = static_cast<double>(kc::dtype_size(t));
    const char* tn = kc::dtype_name(t);
    char name[96];
    void* x = random_buffer(BT * C4, t, 4);
    void* dy = random_buffer(BT * C4, t, 5);
    void* y = random_buffer(BT * C4, t, 6);
    void* bias = random_buffer(C4, t, 7);
    std::snprintf(name, sizeof name, "add bias [8192, 3072] %s", tn);
    report_bw(name, median_ms([&] {
                kc::binary(kc::BinaryOp::kAdd, t, x, BT * C4, bias, C4, y, nullptr);
              }),
              2.0 * BT * C4 * es, copy_gbs);
    std::snprintf(name, sizeof name, "bias+gelu fwd [8192, 3072] %s", tn);
    report_bw(name, median_ms([&] { kc::gelu_forward(t, x, bias, y, BT * C4, C4, nullptr); }),
              2.0 * BT * C4 * es, copy_gbs);
    std::snprintf(name, sizeof name, "bias+gelu bwd [8192, 3072] %s", tn);
    report_bw(name, median_ms([&] { kc::gelu_backward(t, x, bias, dy, y, BT * C4, C4, nullptr); }),
              3.0 * BT * C4 * es, copy_gbs);
    // Layer norm over [32768, 768]: x, dy, y hold exactly 8192 x 3072 elements; in + out > L2.
    const int64_t LR = 4 * BT;
    float* mean = static_cast<float*>(g_alloc->allocate(LR * 4));
    float* rstd = static_cast<float*>(g_alloc->allocate(LR * 4));
    float* dg = static_cast<float*>(g_alloc->allocate(C * 4));
    float* db = static_cast<float*>(g_alloc->allocate(C * 4));
    float* ws = static_cast<float*>(g_alloc->allocate(kc::layernorm_backward_workspace(LR, C) * 4));
    std::snprintf(name, sizeof name, "layernorm fwd [32768, 768] %s", tn);
    report_bw(name, median_ms([&] {
                kc::layernorm_forward(t, x, bias, bias, y, mean, rstd, LR, C, 1e-5f, nullptr);
              }),
              2.0 * LR * C * es, copy_gbs);
    std::snprintf(name, sizeof name, "layernorm bwd [32768, 768] %s", tn);
    report_bw(name, median_ms([&] {
                kc::layernorm_backward(t, x, bias, mean, rstd, dy, nullptr, y, dg, db, ws, LR, C, nullptr);
              }),
              3.0 * LR * C * es, copy_gbs);
    for (void* p : {x, dy, y, bias}) g_alloc->free(p);
    for (float* p : {mean, rstd, dg, db, ws}) g_alloc->free(p);

    void* logits = random_buffer(BT * V, t, 8);
    std::vector<int32_t> hl(BT);
    for (int64_t i = 0; i < BT; ++i) hl[i] = static_cast<int32_t>((i * 7919) % V);
    auto* labels = static_cast<int32_t*>(g_alloc->allocate(BT * 4));
    COHORT_CUDA_CHECK(cudaMemcpy(labels, hl.data(), BT * 4, cudaMemcpyHostToDevice));
    float* loss = static_cast<float*>(g_alloc->allocate(BT * 4));
    float* lse = static_cast<float*>(g_alloc->allocate(BT * 4));
    std::snprintf(name, sizeof name, "xent fused fwd+bwd in place [8192, 50257] %s", tn);
    report_bw(name, median_ms([&] {
                kc::cross_entropy_forward(t, logits, labels, loss, lse, logits, 1.0f / BT, BT, V,
                                          -100, nullptr);
              }),
              2.0 * BT * V * es, copy_gbs);
    for (void* p :
         {logits, static_cast<void*>(labels), static_cast<void*>(loss), static_cast<void*>(lse)})
      g_alloc->free(p);
    g_alloc->release_all();
  }
  const int64_t n = 124'000'000;  // GPT-2 small's parameters
  float* p = static_cast<float*>(random_buffer(n, DType::kF32, 9));
  float* m = static_cast<float*>(random_buffer(n, DType::kF32, 10));
  float* v = static_cast<float*>(random_buffer(n, DType::kF32, 11));
  void* g = random_buffer(n, DType::kF32, 12);
  auto* pb = static_cast<uint16_t*>(g_alloc->allocate(n * 2));
  COHORT_CUDA_CHECK(cudaMemset(v, 0, n * 4));  // v must be >= 0
  kc::AdamWArgs a;
  a.lr = 1e-4f;
  a.step_size = 1e-3f;
  {
    // As GPT-2 small's optimizer sees it: one table of 124M elements (one tensor here).
    kc::OptimParam q;
    q.param = p;
    q.grad = g;
    q.state0 = m;
    q.state1 = v;
    q.param_bf16 = pb;
    q.n = n;
    kc::OptimTable table(*g_alloc, nullptr);
    table.set({q});
    report_bw("adamw 124M params, fp32 grad, bf16 copy",
              median_ms([&] { kc::adamw_update(table, a, kc::DeviceClip{}); }), 30.0 * n, copy_gbs);
    double* sum_sq = static_cast<double*>(g_alloc->allocate(sizeof(double)));
    report_bw("gradient sum of squares 124M fp32", median_ms([&] { kc::grad_sum_of_squares(table, sum_sq); }),
              4.0 * n, copy_gbs);
    g_alloc->free(sum_sq);
  }
  for (void* q : {static_cast<void*>(p), static_cast<void*>(m), static_cast<void*>(v), g,
                  static_cast<void*>(pb)})
    g_alloc->free(q);
}

namespace {
// Relative L2 distance of two device buffers of n elements of `type`.
double rel_l2(const void* a, const void* b, size_t n, DType type) {
  auto host = [&](const void* p) {
    std::vector<float> out(n);
    if (type == DType::kF32) {
      COHORT_CUDA_CHECK(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost));
      return out;
    }
    std::vector<uint16_t> h(n);
    COHORT_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
    return out;
  };
  const auto x = host(a), y = host(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// One implementation of attention at one shape: forward and backward, median ms and TFLOP/s.
// `impl` is "cudnn" or "cohort"; outputs go to out/lse/dqkv.
void attention_row(const char* impl, DType t, const kc::AttentionDims& d, void* qkv, void* dout,
                   void* out, float* lse, void* dqkv) {
  const bool cudnn = std::strcmp(impl, "cudnn") == 0;
  // "tf32": fp32 storage with TF32 products on the tensor-core kernels, the fp32 training step's
  // path when TF32 is allowed (as it is by default); "cohort" with f32 is the exact fp32 path.
  const bool tf32 = std::strcmp(impl, "tf32") == 0;
  kc::attention_cudnn_set_mode(cudnn ? kc::CudnnAttention::kOn : kc::CudnnAttention::kOff);
  float* ws = static_cast<float*>(g_alloc->allocate(kc::attention_backward_workspace(d) * 4));
  const auto before = kc::attention_cudnn_stats();
  const double fms = median_ms([&] { kc::attention_forward(t, d, qkv, out, lse, nullptr, tf32); });
  const double bms =
      median_ms([&] { kc::attention_backward(t, d, qkv, out, lse, dout, dqkv, ws, nullptr, tf32); });
  const auto after = kc::attention_cudnn_stats();
  g_alloc->free(ws);
  char shape[64];
  std::snprintf(shape, sizeof shape, "B%lld T%lld H%lld D%lld %s", (long long)d.B, (long long)d.T,
                (long long)d.H, (long long)d.D, d.causal ? "causal" : "full");
  if (cudnn && (after.forward_calls == before.forward_calls ||
                after.backward_calls == before.backward_calls)) {
    std::printf("attention %s %s %-26s unavailable: %s\n", kc::dtype_name(t), impl, shape,
                after.last_refusal.c_str());
    return;
  }
  // Useful flops as FlashAttention counts them: the forward's two products are 4 B H T^2 D, half
  // of it under a causal mask; the backward's five are 2.5x the forward.
  const double fwd_flops = (d.causal ? 2.0 : 4.0) * d.B * d.H * d.T * d.T * d.D;
  const char* row = "attention %s %-4s %-6s %-26s %8.3f ms  %7.1f TFLOP/s\n";
  std::printf(row, "fwd", kc::dtype_name(t), impl, shape, fms, fwd_flops / (fms * 1e-3) / 1e12);
  const double bwd_flops = 2.5 * fwd_flops;
  std::printf(row, "bwd", kc::dtype_name(t), impl, shape, bms, bwd_flops / (bms * 1e-3) / 1e12);
}
}  // namespace

void bench_attention() {
  cohort::set_log_level(cohort::LogLevel::kInfo);  // each cuDNN plan's engine and build time
  std::string why;
  const kc::cudnn::Api* api = kc::cudnn::api_or_null(&why);
  if (api)
    std::printf("attention: cuDNN %zu (libcudnn.so.9)\n", api->version);
  else
    std::printf("attention: no cuDNN (%s)\n", why.c_str());
  for (const int64_t T : {1024, 2048, 4096}) {
    kc::AttentionDims d;
    d.B = 8192 / T;  // 8192 tokens, as GPT-2 small's B8 T1024
    d.T = T;
    d.H = 12;
    d.D = 64;
    d.scale = 0.125f;
    const int64_t C = d.H * d.D;
    for (DType t : {DType::kBF16, DType::kF32}) {
      const size_t es = kc::dtype_size(t);
      void* qkv = random_buffer(d.B * d.T * 3 * C, t, 13);
      void* dout = random_buffer(d.B * d.T * C, t, 14);
      void* out[2] = {g_alloc->allocate(d.B * d.T * C * es), g_alloc->allocate(d.B * d.T * C * es)};
      void* dqkv[2] = {g_alloc->allocate(d.B * d.T * 3 * C * es),
                       g_alloc->allocate(d.B * d.T * 3 * C * es)};
      float* lse = static_cast<float*>(g_alloc->allocate(d.B * d.H * d.T * 4));
      attention_row("cohort", t, d, qkv, dout, out[0], lse, dqkv[0]);
      if (t == DType::kF32) attention_row("tf32", t, d, qkv, dout, out[1], lse, dqkv[1]);
      if (t == DType::kBF16) {
        attention_row("cudnn", t, d, qkv, dout, out[1], lse, dqkv[1]);
        std::printf("attention check bf16 cudnn vs cohort T%lld: out rel_l2 %.2e, dqkv %.2e\n",
                    (long long)T, rel_l2(out[1], out[0], d.B * d.T * C, t),
                    rel_l2(dqkv[1], dqkv[0], d.B * d.T * 3 * C, t));
      }
      for (void* p : {qkv, dout, out[0], out[1], dqkv[0], dqkv[1], static_cast<void*>(lse)})
        g_alloc->free(p);
      g_alloc->release_all();
    }
  }
  kc::attention_cudnn_set_mode(kc::CudnnAttention::kEnvironment);
  cohort::set_log_level(cohort::LogLevel::kWarn);
}

// Attention with fp32 storage on the tensor-core kernels (TF32 products, allow_tf32 = true):
// the path of the fp32 training step when TF32 is allowed. The fp32 rows above time the exact
// CUDA-core path. Anchor: torch_anchor.py's sdpa fp32 rows (the same shapes). FLOPs counted as
// FlashAttention does: forward 4 B H T^2 D (half when causal), backward 2.5x the forward.
void bench_attention_tf32() {
  struct Shape {
    int64_t B, T, H, D;
    bool causal;
  };
  const Shape shapes[] = {{8, 1024, 12, 64, true}, {8, 1024, 12, 64, false}, {8, 1024, 6, 128, true}};
  for (const Shape& s : shapes) {
    kc::AttentionDims d;
    d.B = s.B;
    d.T = s.T;
    d.H = s.H;
    d.D = s.D;
    d.causal = s.causal;
    d.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    const int64_t C = s.H * s.D;
    void* qkv = random_buffer(s.B * s.T * 3 * C, DType::kF32, 21);
    void* dout = random_buffer(s.B * s.T * C, DType::kF32, 22);
    void* out = g_alloc->allocate(s.B * s.T * C * 4);
    void* dqkv = g_alloc->allocate(s.B * s.T * 3 * C * 4);
    float* lse = static_cast<float*>(g_alloc->allocate(s.B * s.H * s.T * 4));
    float* ws = static_cast<float*>(g_alloc->allocate(kc::attention_backward_workspace(d) * 4));
    const double fwd = median_ms(
        [&] { kc::attention_forward(DType::kF32, d, qkv, out, lse, nullptr, /*allow_tf32=*/true); });
    const double bwd = median_ms([&] {
      kc::attention_backward(DType::kF32, d, qkv, out, lse, dout, dqkv, ws, nullptr, true);
    });
    const double flops = 4.0 * s.B * s.H * s.T * s.T * s.D * (s.causal ? 0.5 : 1.0);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%s B%lld T%lld H%lld D%lld", s.causal ? "causal" : "full",
                  (long long)s.B, (long long)s.T, (long long)s.H, (long long)s.D);
    std::printf("attention fwd %-28s tf32 %8.3f ms  %7.1f TFLOP/s%s\n", shape, fwd,
                flops / (fwd * 1e-3) / 1e12,
                kc::attention_uses_tensor_cores(DType::kF32, d, true) ? "" : " (CUDA cores!)");
    std::printf("attention bwd %-28s tf32 %8.3f ms  %7.1f TFLOP/s\n", shape, bwd,
                2.5 * flops / (bwd * 1e-3) / 1e12);
    for (void* q : {qkv, dout, out, dqkv, static_cast<void*>(lse), static_cast<void*>(ws)})
      g_alloc->free(q);
  }
}
