// CUDA kernels of the matrix products, through cuBLAS (kernels/cuda/gemm.h): matmul (one
// operand shared by the batch or equal batches in one batched call; other broadcasts one product
// per output batch entry), matmul_sum_batch, linear, gelu_linear, matmul_mul and
// matmul_gelu_grad. fp32 products use TF32 tensor cores only when the Blas allows it.
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.h"

namespace cohort::cuda_ops {

namespace {

struct Operands {
  bool ta, tb;
  int64_t M, N, K;
  int64_t batch_a, batch_b;  // numel of the batch dims
  int64_t lda, ldb;
};

Operands operands(const KernelContext& k) {
  const Shape &a = k.inputs[0].shape(), &b = k.inputs[1].shape();
  Operands o;
  o.ta = k.attrs.get_int("transpose_a") != 0;
  o.tb = k.attrs.get_int("transpose_b") != 0;
  const size_t ra = a.size(), rb = b.size();
  o.M = o.ta ? a[ra - 1] : a[ra - 2];
  o.K = o.ta ? a[ra - 2] : a[ra - 1];
  o.N = o.tb ? b[rb - 2] : b[rb - 1];
  o.batch_a = shape_numel(Shape(a.begin(), a.end() - 2));
  o.batch_b = shape_numel(Shape(b.begin(), b.end() - 2));
  o.lda = o.ta ? o.M : o.K;
  o.ldb = o.tb ? o.K : o.N;
  return o;
}

// The entry of batch shape `s` (broadcast against `out`, aligned at the last dim) that output
// batch entry `i` reads.
int64_t broadcast_index(int64_t i, const Shape& s, const Shape& out) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t extent = out[out.size() - 1 - k], at = i % extent;
    i /= extent;
    if (k >= s.size()) continue;
    const int64_t own = s[s.size() - 1 - k];
    if (own != 1) index += at * stride;
    stride *= own;
  }
  return index;
}

void matmul_kernel(KernelContext& k) {
  const Tensor &a = k.inputs[0], &b = k.inputs[1], &c = k.outputs[0];
  const kcu::DType type = storage_type(a, "matmul");
  const Operands o = operands(k);
  const int64_t batch_c = shape_numel(Shape(c.shape().begin(), c.shape().end() - 2));
  if (c.numel() == 0) return;
  kcu::Blas& blas = cuda_context().blas;
  if (o.K == 0) {  // an empty sum: zeros
    kcu::fill(type, c.raw(), 0.0f, c.numel(), compute_stream());
    return;
  }
  if (o.batch_b == 1 && !o.ta) {  // b shared: the batch of a is just more rows
    blas.gemm(type, false, o.tb, o.batch_a * o.M, o.N, o.K, 1.0f, a.raw(), o.lda, b.raw(), o.ldb, 0.0f, c.raw(), o.N);
    return;
  }
  const bool a_full = o.batch_a == batch_c, b_full = o.batch_b == batch_c;
  if ((a_full || o.batch_a == 1) && (b_full || o.batch_b == 1)) {
    blas.gemm_batched(type, o.ta, o.tb, batch_c, o.M, o.N, o.K, 1.0f, a.raw(), o.lda, a_full ? o.M * o.K : 0,
                      b.raw(), o.ldb, b_full ? o.K * o.N : 0, 0.0f, c.raw(), o.N, o.M * o.N);
    return;
  }
  // Batch dims broadcast partially (a [2, 1, ...] with b [1, 3, ...]): one product per output
  // batch entry, each operand's entry found as NumPy broadcasting finds it.
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2),
      cb(c.shape().begin(), c.shape().end() - 2);
  const size_t esize = dtype_size(a.dtype());
  for (int64_t i = 0; i < batch_c; ++i) {
    const int64_t ia = broadcast_index(i, ab, cb), ib = broadcast_index(i, bb, cb);
    blas.gemm(type, o.ta, o.tb, o.M, o.N, o.K, 1.0f, static_cast<const char*>(a.raw()) + ia * o.M * o.K * esize,
              o.lda, static_cast<const char*>(b.raw()) + ib * o.K * o.N * esize, o.ldb, 0.0f,
              static_cast<char*>(c.raw()) + i * o.M * o.N * esize, o.N);
  }
}

// c = sum over the batch of op(a_i) op(b_i).
void matmul_sum_batch_kernel(KernelContext& k) {
  const Tensor &a = k.inputs[0], &b = k.inputs[1], &c = k.outputs[0];
  const kcu::DType type = storage_type(a, "matmul_sum_batch");
  const Operands o = operands(k);
  if (c.numel() == 0) return;
  kcu::Blas& blas = cuda_context().blas;
  if (o.K == 0 || o.batch_a == 0) {
    kcu::fill(type, c.raw(), 0.0f, c.numel(), compute_stream());
    return;
  }
  if (o.ta && !o.tb) {  // rows contracted: the batches stacked are one taller product
    blas.gemm(type, true, false, o.M, o.N, o.batch_a * o.K, 1.0f, a.raw(), o.lda, b.raw(), o.ldb, 0.0f, c.raw(), o.N);
    return;
  }
  const size_t esize = dtype_size(a.dtype());
  for (int64_t i = 0; i < o.batch_a; ++i)
    blas.gemm(type, o.ta, o.tb, o.M, o.N, o.K, 1.0f, static_cast<const char*>(a.raw()) + i * o.M * o.K * esize, o.lda,
              static_cast<const char*>(b.raw()) + i * o.K * o.N * esize, o.ldb, i == 0 ? 0.0f : 1.0f, c.raw(), o.N);
}

// y[M, N] = x[M, K] W[N, K]^T (+ bias[N]). With a bias, y starts as the bias in every row and
// the product is added to it (beta = 1): y is rounded once, as the CPU rounds its fp32 result
// (a separate add would round a bf16 y twice), for the same passes over y.
void linear_into(kcu::DType type, const void* x, const Tensor& w, const Tensor* bias, void* y, int64_t M) {
  const int64_t N = w.dim(0), K = w.dim(1);
  if (M * N == 0) return;
  if (bias) kcu::broadcast_to(type, bias->raw(), {N}, y, {M, N}, compute_stream());
  else if (K == 0) kcu::fill(type, y, 0.0f, M * N, compute_stream());
  if (K > 0) cuda_context().blas.gemm(type, false, true, M, N, K, 1.0f, x, K, w.raw(), K, bias ? 1.0f : 0.0f, y, N);
}

// (a [..., K], b [K, N], third [..., N]) -> c = a b, then `then(type, third, c)` in place: the
// shared shape of matmul_mul and matmul_gelu_grad.
template <typename Then>
void product_then(KernelContext& k, const char* name, Then then) {
  const Tensor &a = k.inputs[0], &b = k.inputs[1];
  Tensor& c = k.outputs[0];
  const kcu::DType type = storage_type(a, name);
  const int64_t K = a.shape().back(), N = b.dim(1), M = rows_of(a);
  if (c.numel() == 0) return;
  if (K == 0) {
    kcu::fill(type, c.raw(), 0.0f, c.numel(), compute_stream());
    return;
  }
  cuda_context().blas.gemm(type, false, false, M, N, K, 1.0f, a.raw(), K, b.raw(), N, 0.0f, c.raw(), N);
  then(type, k.inputs[2], c);
}

}  // namespace

void register_matmul(OpRegistry& r) {
  set_cuda_kernel(r, "matmul", "TT>T", matmul_kernel);
  set_cuda_kernel(r, "matmul_sum_batch", "TT>T", matmul_sum_batch_kernel);

  set_cuda_kernel(r, "linear", "TTT>T", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    linear_into(storage_type(x, "linear"), x.raw(), k.inputs[1], k.inputs.size() > 2 ? &k.inputs[2] : nullptr,
                k.outputs[0].raw(), rows_of(x));
  });

  // (x, W[, b]) -> y = gelu(x) W^T + b, a = gelu(x), g = gelu'(x).
  set_cuda_kernel(r, "gelu_linear", "TTT>TTT", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const kcu::DType type = storage_type(x, "gelu_linear");
    void *a = k.outputs[1].raw(), *g = k.outputs[2].raw();
    kcu::gelu_forward(type, x.raw(), nullptr, a, x.numel(), 1, compute_stream());
    kcu::gelu_derivative(type, x.raw(), nullptr, g, x.numel(), 1, compute_stream());
    linear_into(type, a, k.inputs[1], k.inputs.size() > 2 ? &k.inputs[2] : nullptr, k.outputs[0].raw(), rows_of(x));
  });

  // (a [..., K], b [K, N], m [..., N]) -> (a b) * m.
  set_cuda_kernel(r, "matmul_mul", "TTT>T", [](KernelContext& k) {
    product_then(k, "matmul_mul", [](kcu::DType type, const Tensor& m, Tensor& c) {
      kcu::binary(kcu::BinaryOp::kMul, type, c.raw(), c.numel(), m.raw(), c.numel(), c.raw(), compute_stream());
    });
  });

  // (a [..., K], b [K, N], x [..., N]) -> (a b) * gelu'(x): gelu_linear's input gradient when
  // backward recomputes instead of keeping gelu'(x).
  set_cuda_kernel(r, "matmul_gelu_grad", "TTT>T", [](KernelContext& k) {
    product_then(k, "matmul_gelu_grad", [](kcu::DType type, const Tensor& x, Tensor& c) {
      kcu::gelu_backward(type, x.raw(), nullptr, c.raw(), c.raw(), c.numel(), 1, compute_stream());
    });
  });
}

}  // namespace cohort::cuda_ops
