// Embedding gather and its deterministic gradient (repeated ids, a bad id, one id everywhere, no
// ids, GPT-2's shapes) and the column sum behind bias gradients, against plain loops.
#include "kernels/cuda/embedding.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/norm.h"
#include "tests/gpu/harness.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {

// The first position where a and b differ bit for bit (-1 when none): fp32 values compared as
// stored (bf16 ones are exact in fp32 after download).
int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return -1;
}

// One gather and one gradient of n ids drawn from [0, id_range) (plus one bad id when n > 5),
// checked against plain loops. The gradient must equal, bit for bit, an fp32 loop adding the dy
// rows in ascending position (the CPU's order), rounded once to the storage type, and two runs
// must agree bit for bit: the kernel is deterministic.
void embedding_case(Env& env, DType t, int64_t n, int64_t V, int64_t C, int64_t id_range) {
  char what[96];
  std::snprintf(what, sizeof what, "%s n %lld V %lld C %lld ids < %lld", kc::dtype_name(t),
                static_cast<long long>(n), static_cast<long long>(V), static_cast<long long>(C),
                static_cast<long long>(id_range));
  const auto weight = as_stored(random_vector(env.rng, V * C), t), dy = as_stored(random_vector(env.rng, n * C), t);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(env.rng() % static_cast<uint64_t>(id_range));
  const int64_t bad = n > 5 ? 5 : -1;
  if (bad >= 0) ids[bad] = static_cast<int32_t>(V);
  Buffers buf(*env.alloc);
  int32_t* did = n > 0 ? buf.upload_raw(ids) : nullptr;
  void* ddy = n > 0 ? buf.upload(dy, t) : nullptr;
  void* out = n > 0 ? buf.poisoned(n * C, t) : nullptr;
  void *dw = buf.poisoned(V * C, t), *dw2 = buf.poisoned(V * C, t);
  const size_t ws_bytes = kc::embedding_backward_workspace(n, V);
  void* ws = ws_bytes ? buf.raw(ws_bytes) : nullptr;
  if (n > 0) kc::embedding_forward(t, buf.upload(weight, t), did, out, n, V, C, nullptr);
  kc::embedding_backward(t, did, ddy, dw, n, V, C, ws, ws_bytes, nullptr);
  if (ws_bytes) COHORT_CUDA_CHECK(cudaMemset(ws, 0xFF, ws_bytes));  // a second run from a dirty workspace
  kc::embedding_backward(t, did, ddy, dw2, n, V, C, ws, ws_bytes, nullptr);
  std::vector<float> rdw(static_cast<size_t>(V * C), 0.0f);
  std::vector<double> rout(static_cast<size_t>(n * C), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (i == bad) continue;
    for (int64_t c = 0; c < C; ++c) {
      rout[i * C + c] = weight[ids[i] * C + c];
      rdw[ids[i] * C + c] += dy[i * C + c];
    }
  }
  if (t == DType::kBF16) rdw = round_bf16(rdw);
  const auto got_dw = Buffers::download(dw, V * C, t), got_dw2 = Buffers::download(dw2, V * C, t);
  const int64_t diff = first_bit_difference(got_dw, rdw), rerun = first_bit_difference(got_dw, got_dw2);
  const std::string s = std::string(" ") + what;
  if (diff >= 0)
    std::printf("  embedding backward %s: first difference at [%lld, %lld]: %.9g, reference %.9g\n", what,
                static_cast<long long>(diff / C), static_cast<long long>(diff % C), got_dw[diff], rdw[diff]);
  expect_true(env.ctx, ("embedding backward = ordered fp32 sums" + s).c_str(), diff < 0);
  expect_true(env.ctx, ("embedding backward twice, same bits" + s).c_str(), rerun < 0);
  if (n == 0) return;
  auto got = Buffers::download(out, n * C, t);
  if (bad >= 0) {
    expect_true(env.ctx, ("embedding bad id -> NaN row" + s).c_str(),
                std::isnan(got[bad * C]) && std::isnan(got[bad * C + C - 1]));
    for (int64_t c = 0; c < C; ++c) got[bad * C + c] = 0.0f;  // checked above
  }
  expect_close(env.ctx, ("embedding forward" + s).c_str(), got, rout, 0.0);
}

}  // namespace

void test_embedding(Env& env) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    embedding_case(env, t, 777, 1000, 96, 50);         // many repeats, most rows empty
    embedding_case(env, t, 8192, 50257, 768, 50257);   // GPT-2's shapes: 16-bit keys
    embedding_case(env, t, 4096, 300, 33, 1);          // one id everywhere: one long run
    embedding_case(env, t, 0, 17, 8, 17);              // no ids: the gradient is all zeros
  }
}

void test_sum_rows(Env& env) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int64_t rows : {int64_t{1}, int64_t{300}, int64_t{8192}}) {
      const int64_t C = 77;
      const auto x = as_stored(random_vector(env.rng, rows * C), t);
      Buffers buf(*env.alloc);
      float* out = buf.poisoned_f32(C);
      float* ws = buf.poisoned_f32(kc::layernorm_backward_workspace(rows, C));
      kc::sum_rows(t, buf.upload(x, t), out, ws, rows, C, nullptr);
      std::vector<double> ref(C, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < C; ++c) ref[c] += x[r * C + c];
      char what[64];
      std::snprintf(what, sizeof what, "sum_rows %s [%lld, 77]", kc::dtype_name(t),
                    static_cast<long long>(rows));
      expect_close(env.ctx, what, Buffers::download(out, C, DType::kF32), ref, 1e-5);
    }
  }
}

}  // namespace cohort::gpu_test
