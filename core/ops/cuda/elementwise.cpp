// CUDA kernels of the element-wise operators: add and mul (same shape, or one operand
// broadcast along the leading dims, as a bias), sum_to (the reverse: sums over leading dims),
// fill_like, gelu, relu and tanh with their gradients.
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/norm.h"

namespace cohort::cuda_ops {

namespace {

// When `small` (leading 1s dropped) equals the trailing dims of `big`, the number of elements
// it repeats with (its numel, 1 for a scalar); else 0.
int64_t suffix_period(const Shape& big, const Shape& small) {
  size_t s0 = 0;
  while (s0 < small.size() && small[s0] == 1) ++s0;
  const size_t n = small.size() - s0;
  if (n > big.size()) return 0;
  for (size_t k = 0; k < n; ++k)
    if (small[s0 + k] != big[big.size() - n + k]) return 0;
  return shape_numel(small);
}

KernelFn binary_kernel(kcu::BinaryOp op, const char* name) {
  return [op, name](KernelContext& k) {
    const Tensor &a = k.inputs[0], &b = k.inputs[1], &out = k.outputs[0];
    const kcu::DType type = storage_type(out, name);
    int64_t period = a.shape() == out.shape() ? suffix_period(out.shape(), b.shape()) : 0;
    if (period > 0) {
      kcu::binary(op, type, a.raw(), out.numel(), b.raw(), period, out.raw(), compute_stream());
      return;
    }
    period = b.shape() == out.shape() ? suffix_period(out.shape(), a.shape()) : 0;  // both ops commute
    COHORT_CHECK(period > 0, Status::kUnsupported, name, " on cuda: broadcasting ", shape_str(a.shape()), " with ",
                 shape_str(b.shape()), " (only same shapes, or one operand repeating along the leading dims)");
    kcu::binary(op, type, b.raw(), out.numel(), a.raw(), period, out.raw(), compute_stream());
  };
}

}  // namespace

void register_elementwise(OpRegistry& r) {
  r.set_kernel("add", Device::kCuda, binary_kernel(kcu::BinaryOp::kAdd, "add"));
  r.set_kernel("mul", Device::kCuda, binary_kernel(kcu::BinaryOp::kMul, "mul"));

  r.set_kernel("sum_to", Device::kCuda, [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &out = k.outputs[0];
    if (out.numel() == x.numel()) {  // nothing to sum: the same elements in another shape
      COHORT_CUDA_CHECK(cudaMemcpyAsync(out.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, compute_stream()));
      return;
    }
    const int64_t C = suffix_period(x.shape(), out.shape());
    COHORT_CHECK(C > 0, Status::kUnsupported, "sum_to on cuda: ", shape_str(x.shape()), " to ",
                 shape_str(out.shape()), " (only sums over leading dims)");
    expect_f32(out, "sum_to", "output");
    const int64_t rows = x.numel() / C;
    CudaScratch ws(static_cast<size_t>(kcu::layernorm_backward_workspace(rows, C)) * sizeof(float));
    kcu::sum_rows(storage_type(x, "sum_to"), x.raw(), out.data<float>(), ws.as<float>(), rows, C, compute_stream());
  });

  r.set_kernel("fill_like", Device::kCuda, [](KernelContext& k) {
    const Tensor& out = k.outputs[0];
    kcu::fill(storage_type(out, "fill_like"), out.raw(), static_cast<float>(k.attrs.get_float("value")), out.numel(),
              compute_stream());
  });

  r.set_kernel("gelu", Device::kCuda, [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kcu::gelu_forward(storage_type(x, "gelu"), x.raw(), nullptr, k.outputs[0].raw(), x.numel(), 1, compute_stream());
  });
  r.set_kernel("gelu_grad", Device::kCuda, [](KernelContext& k) {  // (x, dy) -> dx
    const Tensor& x = k.inputs[0];
    kcu::gelu_backward(storage_type(x, "gelu_grad"), x.raw(), nullptr, k.inputs[1].raw(), k.outputs[0].raw(),
                       x.numel(), 1, compute_stream());
  });
  for (auto [name, act] : {std::pair{"relu", kcu::Activation::kRelu}, std::pair{"tanh", kcu::Activation::kTanh}}) {
    r.set_kernel(name, Device::kCuda, [name = name, act = act](KernelContext& k) {
      const Tensor& x = k.inputs[0];
      kcu::activation_forward(act, storage_type(x, name), x.raw(), k.outputs[0].raw(), x.numel(), compute_stream());
    });
    const std::string grad = std::string(name) + "_grad";
    r.set_kernel(grad, Device::kCuda, [grad, act = act](KernelContext& k) {  // (saved, dy) -> dx
      const Tensor& saved = k.inputs[0];
      kcu::activation_backward(act, storage_type(saved, grad.c_str()), saved.raw(), k.inputs[1].raw(),
                               k.outputs[0].raw(), saved.numel(), compute_stream());
    });
  }
}

}  // namespace cohort::cuda_ops
