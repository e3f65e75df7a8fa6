// CUDA kernels of the shape operators transpose, concat, split and split_grad (reshape is a view
// and needs none), over kernels/cuda/shape_ops.h. Like their CPU kernels they move raw elements
// of any dtype (f32, bf16, i32, ...), nothing converted.
#include "core/base/error.h"
#include "core/ops/cuda/cuda_ops.h"
#include "core/ops/op_checks.h"
#include "kernels/cuda/shape_ops.h"

namespace cohort::cuda_ops {

namespace {

// Joins `parts` (null: zeros) of the given extents along attrs.axis into output 0.
void run_concat(KernelContext& k, const std::vector<const void*>& parts, const std::vector<int64_t>& extents) {
  Tensor& out = k.outputs[0];
  const int64_t axis = normalize_axis(k.attrs.get_int("axis"), out.rank(), "axis");
  kcu::concat(parts, extents, outer_numel(out.shape(), axis), inner_numel(out.shape(), axis), dtype_size(out.dtype()),
              out.raw(), compute_stream());
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  set_cuda_kernel(r, "transpose", "A>A", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    kcu::transpose(x.raw(), x.shape(), k.attrs.get_ints("perm"), dtype_size(x.dtype()), k.outputs[0].raw(),
                   compute_stream());
  });

  set_cuda_kernel(r, "concat", "A*>A", [](KernelContext& k) {
    ConcatParts p = concat_parts(k);
    run_concat(k, p.parts, p.extents);
  });

  set_cuda_kernel(r, "split", "A>A*", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const int64_t axis = normalize_axis(k.attrs.get_int("axis"), x.rank(), "axis");
    std::vector<void*> parts;
    for (Tensor& t : k.outputs) parts.push_back(t.raw());
    kcu::split(x.raw(), k.attrs.get_ints("sizes"), outer_numel(x.shape(), axis), inner_numel(x.shape(), axis),
               dtype_size(x.dtype()), parts, compute_stream());
  });

  // The gradients that exist, concatenated, with zeros where present[i] == 0.
  set_cuda_kernel(r, "split_grad", "A*>A", [](KernelContext& k) {
    ConcatParts p = split_grad_parts(k);
    run_concat(k, p.parts, p.extents);
  });
}

}  // namespace cohort::cuda_ops
