// Registers every CUDA kernel of core/ops/cuda with the operators, and their shared helpers (the
// dtype guard every kernel runs behind).
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "core/ops/kernel_dtypes.h"

namespace cohort {

namespace cuda_ops {

kcu::DType storage_type(const Tensor& t, const char* op) {
  if (t.dtype() == DType::kF32) return kcu::DType::kF32;
  if (t.dtype() == DType::kBF16) return kcu::DType::kBF16;
  throw Error(Status::kUnsupported, str_cat(op, " on cuda: dtype ", dtype_name(t.dtype()), " (f32 or bf16 only)"));
}

cudaStream_t compute_stream() { return cuda_context().compute(); }

void set_cuda_kernel(OpRegistry& r, const std::string& op, const char* dtypes, KernelFn kernel) {
  KernelFn guarded = [op, dtypes = std::string(dtypes), kernel = std::move(kernel)](KernelContext& k) {
    std::vector<DType> in, out;
    in.reserve(k.inputs.size());
    out.reserve(k.outputs.size());
    for (const Tensor& t : k.inputs) in.push_back(t.dtype());
    for (const Tensor& t : k.outputs) out.push_back(t.dtype());
    const std::string why = kernel_dtype_mismatch(dtypes, in, out);
    COHORT_CHECK(why.empty(), Status::kUnsupported, op, " on cuda: ", why);
    kernel(k);
  };
  r.set_kernel(op, Device::kCuda, std::move(guarded), dtypes);
}

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
