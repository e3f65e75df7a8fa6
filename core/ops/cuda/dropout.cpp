// CUDA kernels of dropout and dropout_grad with the CPU's mask: the key is kernels/cpu's
// dropout_key of (attribute seed, run seed, step, forward node id), computed here on the host,
// and the device draws each element from it with the CPU's hash. The identity (a copy) in
// evaluation and for p == 0, as on the CPU; dropout_grad applies the mask of node attrs.node.
#include "core/base/error.h"
#include "core/ops/cuda/cuda_ops.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/dropout.h"

namespace cohort::cuda_ops {

namespace {

// Applies the mask of forward node `node_id` to input 0 (x forward, dy backward).
void run_dropout(KernelContext& k, int64_t node_id, const char* name) {
  const Tensor& x = k.inputs[0];
  Tensor& out = k.outputs[0];
  const kcu::DType type = storage_type(x, name);
  const double p = k.attrs.get_float("p");
  if (!k.training || p == 0.0) {
    if (x.nbytes() > 0)
      COHORT_CUDA_CHECK(cudaMemcpyAsync(out.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  const uint64_t key = kernels::cpu::dropout_key(static_cast<uint64_t>(k.attrs.get_int("seed")), k.seed, k.step,
                                                 node_id + (static_cast<int64_t>(k.micro_batch) << 32));
  kcu::dropout_apply(type, x.raw(), out.raw(), x.numel(), static_cast<float>(p), key, compute_stream());
}

}  // namespace

void register_dropout(OpRegistry& r) {
  set_cuda_kernel(r, "dropout", "T>T", [](KernelContext& k) { run_dropout(k, k.node_id, "dropout"); });
  set_cuda_kernel(r, "dropout_grad", "T>T",
               [](KernelContext& k) { run_dropout(k, k.attrs.get_int("node"), "dropout_grad"); });
}

}  // namespace cohort::cuda_ops
