// kernels/cuda/gemm against the row-major reference: every transpose pair, padded leading
// dimensions, beta 0 over a poisoned C and beta != 0, and strided batches with a shared operand;
// fp32 (1e-5), TF32 (1e-3) and bf16 (1e-2). The padded leading dimensions are misaligned (rows
// off 16-byte boundaries), so the same cases run again with staging forced (Blas::Staging): whole
// operands, and chunks along M, N or K within a small budget, C copied in for beta != 0.
#include "kernels/cuda/gemm.h"

#include <cstring>

#include "kernels/cuda/shape_ops.h"

#include "tests/gpu/harness.h"
#include "tests/gpu/reference.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {
struct Case {
  bool ta, tb;
  int64_t batch, M, N, K;
  float alpha, beta;
  bool share_b;  // stride_b = 0
};

void run_case(Env& env, kc::Blas& blas, DType type, bool tf32, const Case& k, const char* tag = "",
              int64_t c_pad = 2) {
  const int64_t lda = (k.ta ? k.M : k.K) + 3, ldb = (k.tb ? k.K : k.N) + 1, ldc = k.N + c_pad;
  const int64_t a_rows = k.ta ? k.K : k.M, b_rows = k.tb ? k.N : k.K;
  const int64_t sa = a_rows * lda, sb = k.share_b ? 0 : b_rows * ldb, sc = k.M * ldc;
  const auto A = as_stored(random_vector(env.rng, k.batch * sa), type);
  const auto B = as_stored(random_vector(env.rng, (k.share_b ? 1 : k.batch) * b_rows * ldb), type);
  const auto C0 = as_stored(random_vector(env.rng, k.batch * sc), type);
  Buffers buf(*env.alloc);
  void* dA = buf.upload(A, type);
  void* dB = buf.upload(B, type);
  void* dC = k.beta != 0.0f ? buf.upload(C0, type) : buf.poisoned(C0.size(), type);
  blas.set_allow_tf32(tf32);
  if (k.batch == 1) {
    blas.gemm(type, k.ta, k.tb, k.M, k.N, k.K, k.alpha, dA, lda, dB, ldb, k.beta, dC, ldc);
  } else {
    blas.gemm_batched(type, k.ta, k.tb, k.batch, k.M, k.N, k.K, k.alpha, dA, lda, sa, dB, ldb, sb,
                      k.beta, dC, ldc, sc);
  }
  const auto C = Buffers::download(dC, C0.size(), type);
  std::vector<double> ref(C0.size());
  std::vector<float> got, want_f;
  std::vector<double> want;
  for (int64_t i = 0; i < k.batch; ++i) {
    ref::gemm(k.ta, k.tb, k.M, k.N, k.K, k.alpha, A.data() + i * sa, lda, B.data() + i * sb, ldb,
              k.beta, C0.data() + i * sc, ref.data() + i * sc, ldc);
    for (int64_t r = 0; r < k.M; ++r)
      for (int64_t j = 0; j < k.N; ++j) {
        got.push_back(C[i * sc + r * ldc + j]);
        want.push_back(ref[i * sc + r * ldc + j]);
      }
  }
  char what[128];
  std::snprintf(what, sizeof what, "%s%s %c%c b%lld %lldx%lldx%lld beta%.1f%s%s",
                kc::dtype_name(type), tf32 ? "/tf32" : "", k.ta ? 'T' : 'N', k.tb ? 'T' : 'N',
                static_cast<long long>(k.batch), static_cast<long long>(k.M),
                static_cast<long long>(k.N), static_cast<long long>(k.K), k.beta,
                k.share_b ? " sharedB" : "", tag);
  expect_close(env.ctx, what, got, want, tf32 ? kTolTf32 : tol_for(type));
}
// copy_rows against a host copy, byte for byte, with the bytes around every row checked untouched:
// rows starting on every 2-byte offset of a 16-byte segment, pitches off alignment, widths below,
// at and across segment boundaries.
void copy_rows_cases(Env& env) {
  struct Case {
    size_t width, src_off, dst_off, src_pitch, dst_pitch;
    int64_t rows;
  };
  std::vector<Case> cases = {{2, 0, 0, 2, 2, 1},        {14, 2, 0, 16, 14, 3},      {16, 0, 0, 16, 16, 5},
                             {30, 6, 10, 34, 32, 4},    {34, 14, 2, 36, 40, 7},     {126, 2, 0, 130, 128, 9},
                             {130, 0, 6, 130, 146, 11}, {1000, 10, 4, 1002, 1000, 37}, {4098, 2, 0, 4100, 4098, 3},
                             {8192, 4, 0, 100514, 8192, 5}, {8192, 0, 12, 8192, 100514, 5}};
  for (size_t so = 0; so < 16; so += 2)
    for (size_t off = 0; off < 16; off += 4) cases.push_back({96 + off, so, off, 112 + so, 114, 6});
  for (const Case& k : cases) {
    const size_t src_bytes = k.src_off + k.rows * k.src_pitch + 32, dst_bytes = k.dst_off + k.rows * k.dst_pitch + 32;
    std::vector<uint8_t> src(src_bytes), want(dst_bytes, 0xAB);
    for (auto& b : src) b = static_cast<uint8_t>(env.rng());
    for (int64_t r = 0; r < k.rows; ++r)
      std::memcpy(want.data() + k.dst_off + r * k.dst_pitch, src.data() + k.src_off + r * k.src_pitch, k.width);
    Buffers buf(*env.alloc);
    uint8_t* dsrc = buf.upload_raw(src);
    uint8_t* ddst = buf.upload_raw(std::vector<uint8_t>(dst_bytes, 0xAB));
    kc::copy_rows(ddst + k.dst_off, k.dst_pitch, dsrc + k.src_off, k.src_pitch, k.width, k.rows, nullptr);
    COHORT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(dst_bytes);
    COHORT_CUDA_CHECK(cudaMemcpy(got.data(), ddst, dst_bytes, cudaMemcpyDeviceToHost));
    char what[128];
    std::snprintf(what, sizeof what, "copy_rows width %zu rows %lld src +%zu pitch %zu dst +%zu pitch %zu", k.width,
                  static_cast<long long>(k.rows), k.src_off, k.src_pitch, k.dst_off, k.dst_pitch);
    expect_true(env.ctx, what, got == want);
  }
}
}  // namespace

void test_gemm(Env& env) {
  copy_rows_cases(env);
  kc::Blas blas;
  struct Mode {
    DType type;
    bool tf32;
  };
  const Mode modes[] = {{DType::kF32, false}, {DType::kF32, true}, {DType::kBF16, false}};
  for (const Mode& m : modes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run_case(env, blas, m.type, m.tf32, {ta, tb, 1, 67, 45, 33, 0.7f, 0.0f, false});
      run_case(env, blas, m.type, m.tf32, {ta, tb, 3, 19, 40, 72, 1.0f, 0.5f, false});
    }
    run_case(env, blas, m.type, m.tf32, {false, true, 4, 64, 48, 80, 0.125f, 0.0f, true});
    run_case(env, blas, m.type, m.tf32, {false, false, 1, 256, 384, 512, 1.0f, 0.0f, false});
  }

  // Staging forced: every misaligned product is copied through padded buffers.
  struct Forced {
    size_t budget;
    const char* tag;
  };
  const Forced forced[] = {{size_t{1} << 20, " staged whole"}, {size_t{32} << 10, " staged in chunks"}};
  for (const Forced& f : forced) {
    kc::Blas staged;
    staged.set_staging({0.0, 0.0, f.budget});
    for (const Mode& m : modes) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const uint64_t before = staged.staged_products();
        run_case(env, staged, m.type, m.tf32, {ta, tb, 1, 67, 45, 33, 0.7f, 0.0f, false}, f.tag);
        run_case(env, staged, m.type, m.tf32, {ta, tb, 1, 70, 90, 41, 1.0f, 0.5f, false}, f.tag);
        // M and N too small to cut: chunks along K add into C (fp32 C copied in for beta 0.5; a bf16
        // one would round at every chunk, so K is cut there only as below, and this product, too
        // large to stage whole in 32 KiB, runs unstaged).
        run_case(env, staged, m.type, m.tf32, {ta, tb, 1, 12, 10, 1400, 1.0f, 0.5f, false}, f.tag);
        // bf16 chunks along K adding up in fp32 (beta 0, C contiguous and aligned: [12, 8]).
        run_case(env, staged, m.type, m.tf32, {ta, tb, 1, 12, 8, 700, 1.0f, 0.0f, false}, f.tag, 0);
        const bool chunks = f.budget < (size_t{1} << 20);
        const uint64_t want = chunks && m.type == DType::kBF16 ? 3 : 4;
        char what[96];
        std::snprintf(what, sizeof what, "gemm%s %s %c%c: %llu of 4 products went through staging", f.tag,
                      kc::dtype_name(m.type), ta ? 'T' : 'N', tb ? 'T' : 'N', static_cast<unsigned long long>(want));
        expect_true(env.ctx, what, staged.staged_products() == before + want);
      }
    }
  }
}

}  // namespace cohort::gpu_test
