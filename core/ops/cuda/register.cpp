// Registers every CUDA kernel of core/ops/cuda with the operators, and their shared helpers.
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"

namespace cohort {

namespace cuda_ops {

kcu::DType storage_type(const Tensor& t, const char* op) {
  if (t.dtype() == DType::kF32) return kcu::DType::kF32;
  if (t.dtype() == DType::kBF16) return kcu::DType::kBF16;
  throw Error(Status::kUnsupported, str_cat(op, " on cuda: dtype ", dtype_name(t.dtype()), " (f32 or bf16 only)"));
}

void expect_f32(const Tensor& t, const char* op, const char* what) {
  COHORT_CHECK(t.dtype() == DType::kF32, Status::kUnsupported, op, " on cuda: ", what, " of dtype ",
               dtype_name(t.dtype()), " (f32 only)");
}

cudaStream_t compute_stream() { return cuda_context().compute(); }

}  // namespace cuda_ops

void register_cuda_kernels(OpRegistry& r) {
  cuda_ops::register_elementwise(r);
  cuda_ops::register_matmul(r);
  cuda_ops::register_nn(r);
  cuda_ops::register_shape_ops(r);
  cuda_ops::register_dropout(r);
  cuda_ops::register_conv(r);
  cuda_ops::register_norm(r);
}

}  // namespace cohort
