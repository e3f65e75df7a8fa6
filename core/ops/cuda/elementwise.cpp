// CUDA kernels of the element-wise operators: add, sub and mul with every NumPy broadcast the CPU
// accepts, scale, the reductions sum, mean and sum_to (deterministic, fp32 sums), broadcast_to,
// fill_like, gelu, relu and tanh with their gradients. f32 and bf16 (fp32 math, rounded as the
// CPU rounds the results of its widened fp32 kernels).
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.h"

namespace cohort::cuda_ops {

namespace {

KernelFn binary_kernel(kcu::BinaryOp op, const char* name) {
  return [op, name](KernelContext& k) {
    const Tensor &a = k.inputs[0], &b = k.inputs[1], &out = k.outputs[0];
    kcu::binary_broadcast(op, storage_type(out, name), a.raw(), a.shape(), b.raw(), b.shape(), out.raw(),
                          out.shape(), compute_stream());
  };
}

// out = sum of x down to out's shape, divided by `divisor` (sum, mean, sum_to).
void reduce(const Tensor& x, Tensor& out, float divisor, const char* name) {
  CudaScratch ws(static_cast<size_t>(kcu::reduce_sum_workspace(x.shape(), out.shape())) * sizeof(float));
  kcu::reduce_sum(storage_type(x, name), x.raw(), x.shape(), out.raw(), out.shape(), divisor, ws.as<float>(),
                  compute_stream());
}

}  // namespace

void register_elementwise(OpRegistry& r) {
  set_cuda_kernel(r, "add", "TT>T", binary_kernel(kcu::BinaryOp::kAdd, "add"));
  set_cuda_kernel(r, "sub", "TT>T", binary_kernel(kcu::BinaryOp::kSub, "sub"));
  set_cuda_kernel(r, "mul", "TT>T", binary_kernel(kcu::BinaryOp::kMul, "mul"));

  set_cuda_kernel(r, "scale", "T>T", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kcu::scale(storage_type(x, "scale"), x.raw(), static_cast<float>(k.attrs.get_float("factor")), k.outputs[0].raw(),
               x.numel(), compute_stream());
  });

  set_cuda_kernel(r, "sum", "T>T", [](KernelContext& k) { reduce(k.inputs[0], k.outputs[0], 1.0f, "sum"); });
  set_cuda_kernel(r, "mean", "T>T", [](KernelContext& k) {  // the fp32 sum divided by the count, as on the CPU
    reduce(k.inputs[0], k.outputs[0], static_cast<float>(k.inputs[0].numel()), "mean");
  });
  set_cuda_kernel(r, "sum_to", "T>T", [](KernelContext& k) { reduce(k.inputs[0], k.outputs[0], 1.0f, "sum_to"); });

  set_cuda_kernel(r, "broadcast_to", "T>T", [](KernelContext& k) {  // 0 + x, as on the CPU
    const Tensor &x = k.inputs[0], &out = k.outputs[0];
    kcu::broadcast_to(storage_type(out, "broadcast_to"), x.raw(), x.shape(), out.raw(), out.shape(),
                      compute_stream());
  });

  set_cuda_kernel(r, "fill_like", "T>T", [](KernelContext& k) {
    const Tensor& out = k.outputs[0];
    kcu::fill(storage_type(out, "fill_like"), out.raw(), static_cast<float>(k.attrs.get_float("value")), out.numel(),
              compute_stream());
  });

  set_cuda_kernel(r, "gelu", "T>T", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kcu::gelu_forward(storage_type(x, "gelu"), x.raw(), nullptr, k.outputs[0].raw(), x.numel(), 1, compute_stream());
  });
  set_cuda_kernel(r, "gelu_grad", "TT>T", [](KernelContext& k) {  // (x, dy) -> dx
    const Tensor& x = k.inputs[0];
    kcu::gelu_backward(storage_type(x, "gelu_grad"), x.raw(), nullptr, k.inputs[1].raw(), k.outputs[0].raw(),
                       x.numel(), 1, compute_stream());
  });
  for (auto [name, act] : {std::pair{"relu", kcu::Activation::kRelu}, std::pair{"tanh", kcu::Activation::kTanh}}) {
    set_cuda_kernel(r, name, "T>T", [name = name, act = act](KernelContext& k) {
      const Tensor& x = k.inputs[0];
      kcu::activation_forward(act, storage_type(x, name), x.raw(), k.outputs[0].raw(), x.numel(), compute_stream());
    });
    const std::string grad = std::string(name) + "_grad";
    set_cuda_kernel(r, grad, "TT>T", [grad, act = act](KernelContext& k) {  // (saved, dy) -> dx
      const Tensor& saved = k.inputs[0];
      kcu::activation_backward(act, storage_type(saved, grad.c_str()), saved.raw(), k.inputs[1].raw(),
                               k.outputs[0].raw(), saved.numel(), compute_stream());
    });
  }
}

}  // namespace cohort::cuda_ops
