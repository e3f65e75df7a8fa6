// CUDA kernels of layernorm, cross_entropy, softmax / log_softmax, attention and embedding (and
// their gradients), over the fused kernels of kernels/cuda, in f32 and bf16 (parameters and
// their gradients in the parameters' type). Nothing here waits for the device: labels and ids
// are checked on it and reported at the end of the run with the CPU's error; the loss and the
// gradient's scale are computed there too.
#include <cmath>
#include <limits>

#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/ops/cuda/cuda_ops.h"
#include "core/ops/op_checks.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/softmax.h"

namespace cohort::cuda_ops {

namespace {

// Ids and labels are checked on the device; the executor reads the result at the end of the run
// (DeferredChecks) and throws the CPU's error. Meanwhile the kernels never read out of bounds.
void check_ids_later(const Tensor& ids, int64_t V) {
  uint64_t* slot = cuda_context().checks.add(
      [shape = ids.shape(), V](int64_t position, int32_t value) { return bad_id_error(shape, position, value, V); });
  kcu::find_bad_index(ids.data<int32_t>(), ids.numel(), V, std::numeric_limits<int64_t>::min(), slot,
                      compute_stream());
}

void check_labels_later(const Tensor& labels, int64_t V, int64_t ignore) {
  uint64_t* slot = cuda_context().checks.add([shape = labels.shape(), V, ignore](int64_t position, int32_t value) {
    return bad_label_error(shape, position, value, V, ignore);
  });
  kcu::find_bad_index(labels.data<int32_t>(), labels.numel(), V, ignore, slot, compute_stream());
}

void register_layernorm(OpRegistry& r) {
  set_cuda_kernel(r, "layernorm", "TTT>TFF", [](KernelContext& k) {  // (x, gamma, beta) -> y, mean, rstd
    const Tensor& x = k.inputs[0];
    kcu::layernorm_forward(storage_type(x, "layernorm"), x.raw(), k.inputs[1].raw(), k.inputs[2].raw(),
                           k.outputs[0].raw(), k.outputs[1].data<float>(), k.outputs[2].data<float>(), rows_of(x),
                           x.shape().back(), static_cast<float>(k.attrs.get_float("eps")), compute_stream());
  });
  // (x, gamma, mean, rstd, dy[, dx_add]) -> dx (+ dx_add), dgamma, dbeta: the parameter
  // gradients in the parameters' type, dx_add added before dx is rounded (as on the CPU).
  set_cuda_kernel(r, "layernorm_grad", "TTFFTT>TTT", [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const int64_t rows = rows_of(x), C = x.shape().back();
    CudaScratch ws(static_cast<size_t>(kcu::layernorm_backward_workspace(rows, C)) * sizeof(float));
    kcu::layernorm_backward(storage_type(x, "layernorm_grad"), x.raw(), k.inputs[1].raw(), k.inputs[2].data<float>(),
                            k.inputs[3].data<float>(), k.inputs[4].raw(),
                            k.inputs.size() > 5 ? k.inputs[5].raw() : nullptr, k.outputs[0].raw(),
                            k.outputs[1].raw(), k.outputs[2].raw(), ws.as<float>(), rows, C, compute_stream());
  });
}

void register_cross_entropy(OpRegistry& r) {
  // (logits, labels) -> loss [], lse [rows]
  set_cuda_kernel(r, "cross_entropy", "TI>TF", [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &labels = k.inputs[1];
    const int64_t V = x.shape().back(), N = rows_of(x);
    const int64_t ignore = k.attrs.get_int("ignore_index");
    check_labels_later(labels, V, ignore);
    CudaScratch rows(static_cast<size_t>(N) * sizeof(float)), sums(2 * sizeof(float));
    kcu::cross_entropy_forward(storage_type(x, "cross_entropy"), x.raw(), labels.data<int32_t>(), rows.as<float>(),
                               k.outputs[1].data<float>(), nullptr, 0.0f, N, V, ignore, compute_stream());
    kcu::cross_entropy_reduce(rows.as<float>(), labels.data<int32_t>(), N, ignore, sums.as<float>(), compute_stream());
    // The sum, or the mean over the counted labels (0 when none counts, not NaN, as on the CPU).
    kcu::cross_entropy_loss(sums.as<float>(), mean_reduction(k.attrs), storage_type(k.outputs[0], "cross_entropy"),
                            k.outputs[0].raw(), compute_stream());
  });
  // (logits, labels, lse, dloss) -> dlogits
  set_cuda_kernel(r, "cross_entropy_grad", "TIFT>T", [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &labels = k.inputs[1];
    const int64_t V = x.shape().back(), N = rows_of(x);
    const int64_t ignore = k.attrs.get_int("ignore_index");
    // dloss, over the counted labels for the mean: computed where it is used.
    CudaScratch scale(sizeof(float));
    kcu::cross_entropy_grad_scale(labels.data<int32_t>(), N, ignore, k.inputs[3].raw(),
                                  storage_type(k.inputs[3], "cross_entropy_grad"), mean_reduction(k.attrs),
                                  scale.as<float>(), compute_stream());
    kcu::cross_entropy_backward(storage_type(x, "cross_entropy_grad"), x.raw(), labels.data<int32_t>(),
                                k.inputs[2].data<float>(), scale.as<float>(), k.outputs[0].raw(), N, V, ignore,
                                compute_stream());
  });
}

// softmax / log_softmax along "axis": the tensor seen as [outer, n, inner], n the axis.
void register_softmax(OpRegistry& r) {
  struct Split {
    int64_t outer = 1, n = 1, inner = 1;
  };
  auto split = [](const Tensor& t, const Attrs& a) {
    const Shape& s = t.shape();
    const int64_t axis = normalize_axis(a.get_int("axis"), static_cast<int64_t>(s.size()), "softmax axis");
    return Split{outer_numel(s, axis), s[static_cast<size_t>(axis)], inner_numel(s, axis)};
  };
  for (const bool log : {false, true}) {
    const std::string name = log ? "log_softmax" : "softmax", grad = name + "_grad";
    set_cuda_kernel(r, name, "T>T", [name, log, split](KernelContext& k) {  // x -> y
      const Tensor& x = k.inputs[0];
      const Split p = split(x, k.attrs);
      kcu::softmax_forward(storage_type(x, name.c_str()), x.raw(), k.outputs[0].raw(), p.outer, p.n, p.inner, log,
                           compute_stream());
    });
    set_cuda_kernel(r, grad, "TT>T", [grad, log, split](KernelContext& k) {  // (y, dy) -> dx
      const Tensor& y = k.inputs[0];
      const Split p = split(y, k.attrs);
      kcu::softmax_backward(storage_type(y, grad.c_str()), y.raw(), k.inputs[1].raw(), k.outputs[0].raw(), p.outer,
                            p.n, p.inner, log, compute_stream());
    });
  }
}

void register_attention(OpRegistry& r) {
  set_cuda_kernel(r, "attention", "T>TF", [](KernelContext& k) {  // qkv -> out, lse
    const Tensor& qkv = k.inputs[0];
    kcu::attention_forward(storage_type(qkv, "attention"), attention_dims(k.attrs, qkv.shape()), qkv.raw(),
                           k.outputs[0].raw(), k.outputs[1].data<float>(), compute_stream(),
                           cuda_context().blas.allow_tf32());
  });
  set_cuda_kernel(r, "attention_grad", "TTFT>T", [](KernelContext& k) {  // (qkv, out, lse, dout) -> dqkv
    const Tensor& qkv = k.inputs[0];
    const kcu::AttentionDims d = attention_dims(k.attrs, qkv.shape());
    CudaScratch ws(static_cast<size_t>(kcu::attention_backward_workspace(d)) * sizeof(float));
    kcu::attention_backward(storage_type(qkv, "attention_grad"), d, qkv.raw(), k.inputs[1].raw(),
                            k.inputs[2].data<float>(), k.inputs[3].raw(), k.outputs[0].raw(), ws.as<float>(),
                            compute_stream(), cuda_context().blas.allow_tf32());
  });
}

void register_embedding(OpRegistry& r) {
  set_cuda_kernel(r, "embedding", "TI>T", [](KernelContext& k) {  // (weight [V, C], ids) -> out
    const Tensor &w = k.inputs[0], &ids = k.inputs[1];
    check_ids_later(ids, w.dim(0));
    kcu::embedding_forward(storage_type(w, "embedding"), w.raw(), ids.data<int32_t>(), k.outputs[0].raw(),
                           ids.numel(), w.dim(0), w.dim(1), compute_stream());
  });
  // (ids, dy) -> dweight [V, C] in dy's type: deterministic (kernels/cuda/embedding.h).
  set_cuda_kernel(r, "embedding_grad", "IT>T", [](KernelContext& k) {
    const Tensor &ids = k.inputs[0], &dy = k.inputs[1];
    Tensor& dw = k.outputs[0];
    const size_t bytes = kcu::embedding_backward_workspace(ids.numel(), dw.dim(0));
    CudaScratch ws(bytes);
    kcu::embedding_backward(storage_type(dy, "embedding_grad"), ids.data<int32_t>(), dy.raw(), dw.raw(), ids.numel(),
                            dw.dim(0), dw.dim(1), ws.as<void>(), bytes, compute_stream());
  });
}

}  // namespace

void register_nn(OpRegistry& r) {
  register_layernorm(r);
  register_cross_entropy(r);
  register_softmax(r);
  register_attention(r);
  register_embedding(r);
}

}  // namespace cohort::cuda_ops
