// cuBLAS-backed gemm / strided batched gemm (see gemm.h for the row-major mapping). Host code
// only. cublasGemmEx routes through cuBLASLt's heuristics on CUDA 12+; the workspace lets it
// pick split-K and Hopper kernels.
#include "kernels/cuda/gemm.h"

#include "kernels/cuda/cublas_api.h"

#include <climits>

#include "core/base/error.h"

namespace cohort::kernels::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cublasHandle_t h(void* p) { return static_cast<cublasHandle_t>(p); }

int to_int(int64_t v, const char* what) {
  COHORT_CHECK(v >= 0 && v <= INT_MAX, Status::kInvalidArgument, "cuda gemm: ", what, " = ", v,
               " is outside [0, INT_MAX]");
  return static_cast<int>(v);
}

// Row-major leading dimensions must cover the stored row length.
void check_dims(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                int64_t ldb, int64_t ldc) {
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  COHORT_CHECK(lda >= (a_cols > 1 ? a_cols : 1), Status::kInvalidArgument, "cuda gemm: lda = ", lda,
               " < ", a_cols);
  COHORT_CHECK(ldb >= (b_cols > 1 ? b_cols : 1), Status::kInvalidArgument, "cuda gemm: ldb = ", ldb,
               " < ", b_cols);
  COHORT_CHECK(ldc >= (N > 1 ? N : 1), Status::kInvalidArgument, "cuda gemm: ldc = ", ldc, " < ",
               N);
}

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
Types types_for(DType type, bool allow_tf32) {
  if (type == DType::kBF16) return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  return {CUDA_R_32F, allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
}
}  // namespace

Blas::Blas(cudaStream_t stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {
  cublasHandle_t handle = nullptr;
  COHORT_CUBLAS_CHECK(cublas().create(&handle));
  handle_ = handle;
  try {
    COHORT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    COHORT_CUBLAS_CHECK(cublas().set_workspace(handle, workspace_, kWorkspaceBytes));
    COHORT_CUBLAS_CHECK(cublas().set_stream(handle, stream_));
  } catch (...) {
    if (workspace_) (void)cudaFree(workspace_);
    (void)cublas().destroy(handle);
    throw;
  }
}

Blas::~Blas() {
  if (handle_) (void)cublas().destroy(h(handle_));
  if (workspace_) (void)cudaFree(workspace_);
}

void Blas::set_stream(cudaStream_t stream) {
  COHORT_CUBLAS_CHECK(cublas().set_stream(h(handle_), stream));
  stream_ = stream;
}

void Blas::gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                void* C, int64_t ldc) {
  check_dims(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  const Types t = types_for(type, allow_tf32_);
  // Column-major view: C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M].
  COHORT_CUBLAS_CHECK(cublas().gemm_ex(h(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"),
                                   to_int(M, "M"), to_int(K, "K"), &alpha, B, t.data,
                                   to_int(ldb, "ldb"), A, t.data, to_int(lda, "lda"), &beta, C,
                                   t.data, to_int(ldc, "ldc"), t.compute, CUBLAS_GEMM_DEFAULT));
}

void Blas::gemm_batched(DType type, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                        int64_t K, float alpha, const void* A, int64_t lda, int64_t stride_a,
                        const void* B, int64_t ldb, int64_t stride_b, float beta, void* C,
                        int64_t ldc, int64_t stride_c) {
  check_dims(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  COHORT_CHECK(stride_a >= 0 && stride_b >= 0 && stride_c >= 0, Status::kInvalidArgument,
               "cuda gemm_batched: negative stride");
  if (batch == 0 || M == 0 || N == 0) return;
  const Types t = types_for(type, allow_tf32_);
  COHORT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(
      h(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B, t.data, to_int(ldb, "ldb"),
      stride_b, A, t.data, to_int(lda, "lda"), stride_a, &beta, C, t.data, to_int(ldc, "ldc"),
      stride_c, to_int(batch, "batch"), t.compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace cohort::kernels::cuda
