// The operators' CUDA kernels (built only with the CUDA backend). Each family file gives the
// operators it covers their kernels[Device::kCuda], with the CPU kernel's semantics, on contiguous
// device tensors, queued on the compute stream of core/device/cuda_context.h, together with the
// dtypes each kernel takes (kernel_dtypes[Device::kCuda], a signature of core/ops/kernel_dtypes.h:
// float data in f32 or bf16 alike, bf16 parameters and their gradients included). Every call is
// checked against that signature before the kernel runs; a case a kernel does not cover (a
// broadcast pattern, a dtype) throws kUnsupported naming it; an operator with no CUDA kernel at
// all is refused by the executor before a run.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/ops/schema.h"
#include "core/tensor/tensor.h"
#include "kernels/cuda/runtime.h"

namespace cohort::cuda_ops {

namespace kcu = kernels::cuda;

// The kernels' storage type of a float tensor (f32 or bf16); kUnsupported for others.
kcu::DType storage_type(const Tensor& t, const char* op);
// The compute stream.
cudaStream_t compute_stream();

// r.set_kernel(op, kCuda, ...) with `dtypes` (a kernel_dtypes.h signature) declared and checked
// first at every call: a call whose tensors do not fit throws kUnsupported "<op> on cuda: input 1
// has dtype ...", so no kernel ever reads a buffer as the wrong type.
void set_cuda_kernel(OpRegistry& r, const std::string& op, const char* dtypes, KernelFn kernel);

void register_elementwise(OpRegistry& r);
void register_matmul(OpRegistry& r);
void register_nn(OpRegistry& r);  // layernorm, cross_entropy, softmax, attention, embedding
void register_shape_ops(OpRegistry& r);  // transpose, concat, split, split_grad
void register_dropout(OpRegistry& r);  // dropout, dropout_grad
void register_conv(OpRegistry& r);  // conv2d and its gradients, max_pool2d, avg_pool2d
void register_norm(OpRegistry& r);  // rmsnorm, groupnorm

}  // namespace cohort::cuda_ops
