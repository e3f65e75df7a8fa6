// The optimizer's update of parameters that live on the CUDA device: every parameter in one
// multi-tensor launch of kernels/cuda/optim.h, queued on the compute stream, with the same
// arithmetic as the CPU loops. Used by Optimizer (optimizer.cpp) only; needs no CUDA headers.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/tensor/tensor.h"
#include "kernels/cpu/optim.h"

namespace cohort::optim {

// One parameter's tensors, all on the CUDA device (undefined where the rule keeps no such state).
struct DeviceParamRefs {
  const Tensor* param = nullptr;   // the parameter (f32, or bf16 with `master`)
  const Tensor* grad = nullptr;    // same shape and dtype as param
  const Tensor* master = nullptr;  // fp32 master copy of a bf16 parameter, else undefined
  const Tensor* state0 = nullptr;  // SGD momentum / AdamW exp_avg
  const Tensor* state1 = nullptr;  // AdamW exp_avg_sq
};

class DeviceUpdate {
 public:
  // Throws kUnsupported naming the reason when the CUDA device cannot be used.
  DeviceUpdate();
  ~DeviceUpdate();
  DeviceUpdate(const DeviceUpdate&) = delete;
  DeviceUpdate& operator=(const DeviceUpdate&) = delete;

  // One update of every parameter (SGD with `sgd`, else AdamW with `adamw`). given_norm: the
  // global gradient norm from the caller (clipping, if any, already folded into the args'
  // grad_scale; the caller skips a non-finite one); nullopt: the norm is measured on the device
  // and, when clip_norm > 0, clipping applied from it there, and when it is not finite the
  // kernels write nothing (decided on the device: no host wait between norm and update).
  // Returns the norm used or measured (waiting for the device); not finite: nothing changed.
  double apply(const std::vector<DeviceParamRefs>& params, const kernels::cpu::SgdArgs* sgd,
               const kernels::cpu::AdamWArgs* adamw, double clip_norm, std::optional<double> given_norm);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::optim
