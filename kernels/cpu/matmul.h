// Matrix products through oneDNN's matmul primitive: BLAS-style gemm / strided batched gemm for
// other kernels (attention), and the N-d broadcasting product behind the matmul and linear ops.
// All matrices are row-major. fp32 is the main path; bf16 inputs accumulate in fp32 (oneDNN's bf16
// kernels need AVX-512; on other CPUs bf16 operands are widened to fp32 and the result rounded once).
// Primitives are kept, with their argument memory objects, in a small shape-keyed cache per
// thread: oneDNN's own cache still pays for a primitive_desc per call, which dominates small
// products (see bench/gemm). Each call runs on
// omp_get_max_threads() OpenMP threads (one inside an enclosing parallel region) and is
// thread-safe; it returns when C is written.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::kernels::cpu {

// C[M, N] = alpha * op(A) * op(B) + beta * C, all row-major, no aliasing between C and A/B.
//   op(A) is [M, K]: A is stored [M, K] with row stride lda (>= K), or, when trans_a, [K, M]
//   with row stride lda (>= M). Likewise op(B) is [K, N]: B stored [K, N] (ldb >= N), or, when
//   trans_b, [N, K] (ldb >= K). C is [M, N] with row stride ldc (>= N).
//   beta == 0 ignores C's previous contents (NaNs included).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// `batch` independent products C_i = alpha * op(A_i) op(B_i) + beta * C_i where
// A_i = A + i * stride_a (elements), B_i = B + i * stride_b, C_i = C + i * stride_c; leading
// dimensions as in gemm. stride_a or stride_b == 0 shares that operand across the batch.
// Example, attention scores S = Q K^T for Q, K stored [B*H, T, D] contiguous:
//   gemm_batched(false, true, B*H, T, T, D, 1/sqrt(D), Q, D, T*D, K, D, T*D, 0, S, T, T*T);
// and for heads interleaved in [B, T, H, D] rows (head h at column offset h*D), pass
// lda = ldb = H*D and call once per batch element b with stride_a = stride_b = D over H heads.
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c);

enum class MatmulType { kF32, kBF16 };  // bf16: inputs and output bf16, accumulation fp32

// The matmul operator: c[batch..., M, N] = op(a) op(b) with a [..., M, K] (or [..., K, M] when
// trans_a) and b [..., K, N] (or [..., N, K]); batch dims broadcast NumPy-style (c_shape is the
// broadcast result). Contiguous buffers of the given type.
void matmul(MatmulType type, const void* a, const std::vector<int64_t>& a_shape, bool trans_a,
            const void* b, const std::vector<int64_t>& b_shape, bool trans_b, void* c,
            const std::vector<int64_t>& c_shape);

// c[M, N] = sum over the batch of op(a_i) op(b_i); a and b have equal batch dims. Used for the
// gradient of an operand that was shared across the batch (it is one gemm when the rows of a
// and b are contracted, e.g. dW = dy^T x).
void matmul_sum_batch(MatmulType type, const void* a, const std::vector<int64_t>& a_shape,
                      bool trans_a, const void* b, const std::vector<int64_t>& b_shape, bool trans_b,
                      void* c);

// y[M, N] = x[M, K] W[N, K]^T + bias[N] (bias may be null; same type as x).
void linear(MatmulType type, const void* x, const void* weight, const void* bias, void* y, int64_t M,
            int64_t N, int64_t K);

// c[M, N] = (a[M, K] b[K, N]) * m[M, N] element-wise, all row-major fp32, e.g. the input gradient
// through an activation, dh = (dy W) * gelu'(h), when gelu'(h) was saved.
void matmul_mul(const float* a, const float* b, const float* m, float* c, int64_t M, int64_t N, int64_t K);

// Primitive cache switch, for bench/gemm's comparison only (on by default).
void set_matmul_cache_enabled(bool on);

// Whether oneDNN has bf16 matmul kernels for this CPU (AVX-512 and up). Without them bf16 products
// are computed by widening the operands to fp32; tests force that path everywhere with
// set_matmul_bf16_widening(true) (off by default).
bool matmul_bf16_native();
void set_matmul_bf16_widening(bool force);

}  // namespace cohort::kernels::cpu
