// Matrix products through cuBLAS, with the semantics of kernels/cpu/matmul.h's gemm and
// gemm_batched (row-major, same argument order and meaning), so the backends are interchangeable:
//   C[M, N] = alpha * op(A) * op(B) + beta * C
// op(A) is [M, K]: A stored [M, K] (lda >= K) or, when trans_a, [K, M] (lda >= M); likewise
// op(B) is [K, N]: B stored [K, N] (ldb >= N) or, when trans_b, [N, K] (ldb >= K); C [M, N]
// (ldc >= N). beta == 0 ignores C's previous contents. A, B and C share one storage type: kF32
// (fp32 math, or TF32 tensor cores when allowed) or kBF16 (bf16 in and out, fp32 accumulation).
// Row-major is mapped onto column-major cuBLAS as C^T = op(B)^T op(A)^T: the operands swap and
// each keeps its own transpose flag.
//
// Misaligned operands are staged. cuBLAS runs its tensor-core kernels (TMA on Hopper) only on
// matrices whose rows start on 16-byte boundaries; a leading dimension such as a vocabulary of
// 50257 bf16 values sends it to kernels several times slower (a GPT-2 step's three output-head
// products took 20 of its 39 ms on an H200). gemm() therefore copies a misaligned operand into a
// padded buffer (copy_rows, shape_ops.h) when the product is large enough to pay for the copy, in
// chunks along M, N or K (gemm_staging.h chooses) so the buffer stays within a budget (64 MiB by
// default, kept like the workspace), and copies a staged C back; chunks along K of a bf16 product
// add up in an fp32 buffer and C is rounded once. The results equal an unstaged product's up to the order of the K-chunk sums.
// COHORT_GEMM_STAGING=0 in the environment turns staging off.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// One cuBLAS handle bound to a stream, with a 32 MiB workspace (what NVIDIA recommends for
// Hopper) from cudaMalloc. Not thread-safe: one Blas per thread/stream.
class Blas {
 public:
  explicit Blas(cudaStream_t stream = nullptr, bool allow_tf32 = false);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  void set_stream(cudaStream_t stream);
  // fp32 products may round inputs to TF32 (10-bit mantissa) on the tensor cores: ~1e-3 relative.
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }
  bool allow_tf32() const { return allow_tf32_; }

  // When gemm() stages misaligned operands: products of at least `min_flops` (2 M N K) whose
  // flops are at least `flops_per_byte` times the bytes copied, through at most `budget_bytes` of
  // staging memory (chunks of at least 16 rows or columns; a budget too small for that, or 0,
  // turns staging off). Tests set small values to make every case stage.
  struct Staging {
    double min_flops = 6.7e7;
    double flops_per_byte = 128;
    size_t budget_bytes = size_t{64} << 20;
  };
  void set_staging(const Staging& staging) { staging_ = staging; }
  // Products that went through staging since construction (for tests and benchmarks).
  uint64_t staged_products() const { return staged_products_; }

  void gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
            int64_t ldc);

  // `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i with X_i = X + i * stride_x
  // (elements); stride_a or stride_b == 0 shares that operand across the batch.
  void gemm_batched(DType type, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                    int64_t K, float alpha, const void* A, int64_t lda, int64_t stride_a,
                    const void* B, int64_t ldb, int64_t stride_b, float beta, void* C, int64_t ldc,
                    int64_t stride_c);

 private:
  // c_f32: C is fp32 whatever `type` is (bf16 A and B with fp32 sums, staging's K chunks).
  void raw_gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                int64_t ldc, bool c_f32 = false);
  // Runs the product through staged copies; false when the staging budget cannot hold a chunk.
  // only_row_length: nothing is misaligned but C's row length (N), which staging mends only by
  // cutting N into aligned chunks (else it runs unstaged).
  bool staged_gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const void* A, int64_t lda, bool stage_a, const void* B, int64_t ldb,
                   bool stage_b, float beta, void* C, int64_t ldc, bool stage_c, bool only_row_length);
  void* staging_buffer(size_t bytes);

  void* handle_ = nullptr;  // cublasHandle_t
  void* workspace_ = nullptr;
  void* stage_ = nullptr;  // staging memory, grown on demand up to the budget
  size_t stage_bytes_ = 0;
  Staging staging_;
  uint64_t staged_products_ = 0;
  cudaStream_t stream_ = nullptr;
  bool allow_tf32_ = false;
};

}  // namespace cohort::kernels::cuda
