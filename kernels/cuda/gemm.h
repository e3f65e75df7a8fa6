// Matrix products through cuBLAS, with the semantics of kernels/cpu/matmul.h's gemm and
// gemm_batched (row-major, same argument order and meaning), so the backends are interchangeable:
//   C[M, N] = alpha * op(A) * op(B) + beta * C
// op(A) is [M, K]: A stored [M, K] (lda >= K) or, when trans_a, [K, M] (lda >= M); likewise
// op(B) is [K, N]: B stored [K, N] (ldb >= N) or, when trans_b, [N, K] (ldb >= K); C [M, N]
// (ldc >= N). beta == 0 ignores C's previous contents. A, B and C share one storage type: kF32
// (fp32 math, or TF32 tensor cores when allowed) or kBF16 (bf16 in and out, fp32 accumulation).
// Row-major is mapped onto column-major cuBLAS as C^T = op(B)^T op(A)^T: the operands swap and
// each keeps its own transpose flag.
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
  void* handle_ = nullptr;  // cublasHandle_t
  void* workspace_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool allow_tf32_ = false;
};

}  // namespace cohort::kernels::cuda
