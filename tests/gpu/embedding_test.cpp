// Embedding gather / scatter-add (with repeated ids and a bad id) and the column sum behind bias
// gradients, against plain loops.
#include "kernels/cuda/embedding.h"

#include <cmath>

#include "kernels/cuda/norm.h"
#include "tests/gpu/harness.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

void test_embedding(Env& env) {
  const int64_t V = 1000, C = 96, n = 777;
  for (DType t : {DType::kF32, DType::kBF16}) {
    const auto weight = as_stored(random_vector(env.rng, V * C), t),
               dy = as_stored(random_vector(env.rng, n * C), t);
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(env.rng() % 50);  // many repeats
    ids[5] = static_cast<int32_t>(V);                                               // bad id
    Buffers buf(*env.alloc);
    int32_t* did = buf.upload_raw(ids);
    void* out = buf.poisoned(n * C, t);
    float* dw = static_cast<float*>(buf.raw(V * C * 4));
    COHORT_CUDA_CHECK(cudaMemset(dw, 0, V * C * 4));
    kc::embedding_forward(t, buf.upload(weight, t), did, out, n, V, C, nullptr);
    kc::embedding_backward(t, did, buf.upload(dy, t), dw, n, V, C, nullptr);
    auto got = Buffers::download(out, n * C, t);
    const bool bad_row_nan = std::isnan(got[5 * C]) && std::isnan(got[6 * C - 1]);
    std::vector<double> rout(n * C), rdw(V * C, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) {
        if (i == 5) {
          got[i * C + c] = 0.0f;  // checked above
          continue;
        }
        rout[i * C + c] = weight[ids[i] * C + c];
        rdw[ids[i] * C + c] += dy[i * C + c];
      }
    const std::string s = std::string(" ") + kc::dtype_name(t);
    expect_close(env.ctx, ("embedding forward" + s).c_str(), got, rout, 0.0);
    expect_true(env.ctx, ("embedding bad id -> NaN row" + s).c_str(), bad_row_nan);
    expect_close(env.ctx, ("embedding backward" + s).c_str(),
                 Buffers::download(dw, V * C, DType::kF32), rdw, 1e-5);
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
