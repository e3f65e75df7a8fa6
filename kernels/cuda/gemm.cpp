// cuBLAS-backed gemm / strided batched gemm (see gemm.h for the row-major mapping). Host code
// only. cublasGemmEx routes through cuBLASLt's heuristics on CUDA 12+; the workspace lets it
// pick split-K and Hopper kernels.
#include "kernels/cuda/gemm.h"

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/gemm_staging.h"
#include "kernels/cuda/shape_ops.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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

// Every row of a stored matrix starts on a 16-byte boundary (one row: only its start counts).
bool rows_aligned(const void* p, int64_t ld, int64_t rows, size_t es) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return rows <= 1 || (static_cast<size_t>(ld) * es) % 16 == 0;
}

}  // namespace

Blas::Blas(cudaStream_t stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {
  // COHORT_GEMM_STAGING=0 turns staging off (for comparisons, as bench_gpu_gpt's figures were).
  if (const char* v = std::getenv("COHORT_GEMM_STAGING"); v && std::strcmp(v, "0") == 0) staging_.budget_bytes = 0;
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
  if (stage_) (void)cudaFree(stage_);
}

void Blas::set_stream(cudaStream_t stream) {
  // The staging buffer is ordered on one stream: let the old one finish with it first.
  if (stage_ && stream != stream_) COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  COHORT_CUBLAS_CHECK(cublas().set_stream(h(handle_), stream));
  stream_ = stream;
}

void* Blas::staging_buffer(size_t bytes) {
  if (bytes <= stage_bytes_) return stage_;
  if (stage_) {
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    COHORT_CUDA_CHECK(cudaFree(stage_));
    stage_ = nullptr;
    stage_bytes_ = 0;
  }
  if (cudaMalloc(&stage_, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // out of memory: the product runs unstaged
    stage_ = nullptr;
    return nullptr;
  }
  stage_bytes_ = bytes;
  return stage_;
}

void Blas::gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                void* C, int64_t ldc) {
  check_dims(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K > 0 && staging_.budget_bytes > 0) {
    const size_t es = dtype_size(type);
    const bool stage_a = !rows_aligned(A, lda, trans_a ? K : M, es);
    const bool stage_b = !rows_aligned(B, ldb, trans_b ? N : K, es);
    // An output row length off 16 bytes is slow even at an aligned ldc (cuBLAS's contiguous
    // extent: [8192, 50257] bf16 logits took 8.3 ms staged whole rows at a padded ldc on an H200,
    // 0.87 ms at 50304 columns): such a C is staged too, and cut along N below.
    const bool c_misaligned = !rows_aligned(C, ldc, M, es);
    const bool odd_rows = (static_cast<size_t>(N) * es) % 16 != 0;
    const bool stage_c = c_misaligned || odd_rows;
    if (stage_a || stage_b || stage_c) {
      const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
      const double copied = static_cast<double>(es) *
                            ((stage_a ? static_cast<double>(M) * K : 0.0) + (stage_b ? static_cast<double>(K) * N : 0.0) +
                             (stage_c ? static_cast<double>(M) * N * (beta != 0.0f ? 2 : 1) : 0.0));
      if (flops >= staging_.min_flops && flops >= staging_.flops_per_byte * copied &&
          staged_gemm(type, trans_a, trans_b, M, N, K, alpha, A, lda, stage_a, B, ldb, stage_b, beta, C, ldc,
                      stage_c, !(stage_a || stage_b || c_misaligned))) {
        ++staged_products_;
        return;
      }
    }
  }
  raw_gemm(type, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool Blas::staged_gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const void* A, int64_t lda, bool stage_a, const void* B,
                       int64_t ldb, bool stage_b, float beta, void* C, int64_t ldc, bool stage_c,
                       bool only_row_length) {
  namespace st = staging;
  const size_t es = dtype_size(type);
  st::Operand ops[3];
  st::make_operands(trans_a, trans_b, stage_a, stage_b, stage_c, ops);
  const st::Plan plan = st::plan(M, N, K, es, ops, beta, ldc, staging_.budget_bytes);
  if (plan.dim < 0) return false;
  // Staged only for C's row length: worth it only where the chunks along N come out aligned.
  if (only_row_length && !(plan.dim == 1 && plan.len < N)) return false;
  char* stage = static_cast<char*>(staging_buffer(plan.bytes));
  if (!stage) return false;

  const char* base[3] = {static_cast<const char*>(A), static_cast<const char*>(B), static_cast<const char*>(C)};
  const int64_t lds[3] = {lda, ldb, ldc};
  // Operand i's stored block op(X)[p0 .., q0 ..].
  auto at = [&](int i, int64_t p0, int64_t q0) {
    const int64_t r = ops[i].trans ? q0 : p0, c = ops[i].trans ? p0 : q0;
    return base[i] + (r * lds[i] + c) * static_cast<int64_t>(es);
  };
  auto copy = [&](void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t rows, int64_t cols) {
    copy_rows(dst, static_cast<size_t>(dst_ld) * es, src, static_cast<size_t>(src_ld) * es,
              static_cast<size_t>(cols) * es, rows, stream_);
  };
  const int64_t extent[3] = {M, N, K}, e = extent[plan.dim];
  for (int64_t d0 = 0; d0 < e; d0 += plan.len) {
    const int64_t len = std::min(plan.len, e - d0);
    int64_t start[3] = {0, 0, 0}, size[3] = {M, N, K};
    start[plan.dim] = d0;
    size[plan.dim] = len;
    const bool first = d0 == 0, last = d0 + len >= e;
    const float chunk_beta = plan.dim == 2 && !first ? 1.0f : beta;
    const void* ptr[3];
    int64_t ld[3];
    for (int i = 0; i < 3; ++i) {
      const st::Operand& o = ops[i];
      const int64_t pn = size[o.dp], qn = size[o.dq];
      const char* src = at(i, start[o.dp], start[o.dq]);
      if (!o.staged) {
        ptr[i] = src;
        ld[i] = lds[i];
        continue;
      }
      const bool chunked = o.dp == plan.dim || o.dq == plan.dim;  // else the whole operand, staged once
      const int64_t rows = o.rows(pn, qn), cols = o.cols(pn, qn);
      ptr[i] = stage + plan.offset[i];
      ld[i] = st::padded_ld(cols, es);
      const bool copy_in = i == 2 ? (beta != 0.0f && (chunked || first)) : (chunked || first);
      if (copy_in) copy(stage + plan.offset[i], ld[i], src, lds[i], rows, cols);
    }
    if (plan.f32_sums) {
      raw_gemm(type, trans_a, trans_b, size[0], size[1], size[2], alpha, ptr[0], ld[0], ptr[1], ld[1], chunk_beta,
               stage + plan.f32_offset, N, /*c_f32=*/true);
      if (last) narrow_from_f32(type, reinterpret_cast<const float*>(stage + plan.f32_offset), C, M * N, stream_);
      continue;
    }
    raw_gemm(type, trans_a, trans_b, size[0], size[1], size[2], alpha, ptr[0], ld[0], ptr[1], ld[1], chunk_beta,
             const_cast<void*>(ptr[2]), ld[2]);
    if (ops[2].staged && (plan.dim != 2 || last))
      copy(const_cast<char*>(at(2, start[0], start[1])), ldc, ptr[2], ld[2], size[0], size[1]);
  }
  return true;
}

void Blas::raw_gemm(DType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                    void* C, int64_t ldc, bool c_f32) {
  const Types t = types_for(type, allow_tf32_);
  const cudaDataType_t c_type = c_f32 ? CUDA_R_32F : t.data;
  // Column-major view: C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M].
  COHORT_CUBLAS_CHECK(cublas().gemm_ex(h(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"),
                                   to_int(M, "M"), to_int(K, "K"), &alpha, B, t.data,
                                   to_int(ldb, "ldb"), A, t.data, to_int(lda, "lda"), &beta, C,
                                   c_type, to_int(ldc, "ldc"), t.compute, CUBLAS_GEMM_DEFAULT));
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
