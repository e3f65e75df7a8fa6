// CUDA kernels of rmsnorm and groupnorm and their gradients, over kernels/cuda/norm.h, with the
// CPU kernels' semantics (core/ops/norm.cpp): statistics are fp32 outputs in every storage type,
// parameter gradients have the parameters' type, and rmsnorm_grad adds its optional dx_add (the
// gradient already summed for x) while writing dx, so a bf16 dx is rounded once.
#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cuda/norm.h"

namespace cohort::cuda_ops {

namespace {

float eps_attr(const Attrs& a) { return static_cast<float>(a.get_float("eps")); }

void register_rmsnorm(OpRegistry& r) {
  set_cuda_kernel(r, "rmsnorm", "TT>TF", [](KernelContext& k) {  // (x, gamma) -> y, rstd
    const Tensor &x = k.inputs[0], &gamma = k.inputs[1];
    const kcu::DType type = storage_type(x, "rmsnorm");
    kcu::rmsnorm_forward(type, x.raw(), gamma.raw(), k.outputs[0].raw(), k.outputs[1].data<float>(), rows_of(x),
                         x.shape().back(), eps_attr(k.attrs), compute_stream());
  });
  // (x, gamma, rstd, dy[, dx_add]) -> dx (+ dx_add), dgamma
  set_cuda_kernel(r, "rmsnorm_grad", "TTFTT>TT", [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &gamma = k.inputs[1], &rstd = k.inputs[2], &dy = k.inputs[3];
    const Tensor* dx_add = k.inputs.size() > 4 ? &k.inputs[4] : nullptr;
    Tensor &dx = k.outputs[0], &dgamma = k.outputs[1];
    const kcu::DType type = storage_type(x, "rmsnorm_grad");
    const int64_t rows = rows_of(x), C = x.shape().back();
    CudaScratch ws(static_cast<size_t>(kcu::row_sums_workspace(rows, C)) * sizeof(float));
    kcu::rmsnorm_backward(type, x.raw(), gamma.raw(), rstd.data<float>(), dy.raw(), dx_add ? dx_add->raw() : nullptr,
                          dx.raw(), dgamma.raw(), ws.as<float>(), rows, C, compute_stream());
  });
}

void register_groupnorm(OpRegistry& r) {
  set_cuda_kernel(r, "groupnorm", "TTT>TFF", [](KernelContext& k) {  // (x, gamma, beta) -> y, mean, rstd
    const Tensor& x = k.inputs[0];
    const kcu::DType type = storage_type(x, "groupnorm");
    kcu::groupnorm_forward(type, x.raw(), k.inputs[1].raw(), k.inputs[2].raw(), k.outputs[0].raw(),
                           k.outputs[1].data<float>(), k.outputs[2].data<float>(), x.dim(0), x.dim(1),
                           x.dim(2) * x.dim(3), k.attrs.get_int("groups"), eps_attr(k.attrs), compute_stream());
  });
  // (x, gamma, mean, rstd, dy) -> dx, dgamma, dbeta
  set_cuda_kernel(r, "groupnorm_grad", "TTFFT>TTT", [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &gamma = k.inputs[1], &dy = k.inputs[4];
    const kcu::DType type = storage_type(x, "groupnorm_grad");
    kcu::groupnorm_backward(type, x.raw(), gamma.raw(), k.inputs[2].data<float>(), k.inputs[3].data<float>(),
                            dy.raw(), k.outputs[0].raw(), k.outputs[1].raw(), k.outputs[2].raw(), x.dim(0),
                            x.dim(1), x.dim(2) * x.dim(3), k.attrs.get_int("groups"), compute_stream());
  });
}

}  // namespace

void register_norm(OpRegistry& r) {
  register_rmsnorm(r);
  register_groupnorm(r);
}

}  // namespace cohort::cuda_ops
