// Optimizers over a list of parameter tensors: SGD (momentum, Nesterov, L2 weight decay) and
// AdamW (decoupled weight decay), with a learning-rate schedule and global-norm gradient
// clipping, matching torch.optim.SGD / torch.optim.AdamW / clip_grad_norm_. bf16 parameters are
// updated through an fp32 master copy kept in the optimizer state and written back rounded.
// Parameters on the CUDA device are updated there (core/optim/device_update.h: one launch for all
// of them, the norm and clipping on the device); the state lives on the parameters' device.
//
// The one thing to know: every step measures the global gradient norm before it updates anything,
// and a norm that is not finite (a NaN or an Inf in any gradient) skips the whole update —
// parameters, state and step count stay exactly as they were, and step() returns false.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "kernels/cpu/optim.h"

namespace cohort::optim {

enum class OptimizerKind : int { kSgd = 0, kAdamW = 1 };
enum class ScheduleKind : int { kConstant = 0, kWarmupCosine = 1 };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 1e-3;
  // SGD.
  double momentum = 0.0;
  bool nesterov = false;
  // AdamW.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // SGD: L2, added to the gradient. AdamW: decoupled, p -= lr * weight_decay * p.
  double weight_decay = 0.0;
  // kWarmupCosine: lr rises linearly from 0 over warmup_steps, then follows a cosine from lr
  // down to min_lr at total_steps, and stays at min_lr after.
  ScheduleKind schedule = ScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0.0;
  // > 0: scale all gradients by clip_norm / (norm + 1e-6) when their global L2 norm exceeds it.
  double clip_norm = 0.0;
};

// Throws kInvalidArgument naming the first bad field ("optimizer: beta1 = 1 is not in [0, 1)").
void validate(const OptimizerConfig& config);

class DeviceUpdate;

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config);  // validates
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;

  // One update of params from grads (same count, shapes; contiguous; fp32 or bf16 params with
  // grads of the same dtype; all on one device, the one the state was made on). Allocates the
  // state on the first call (or after init_state). grads are read, not modified: clipping is
  // applied as a factor inside the update. Returns true when the update was applied, false when
  // the gradients' global norm is not finite: then nothing changed (parameters, state, step
  // count) and last_grad_norm() is that norm. On the CUDA device the norm is measured and the
  // update skipped there; the norm comes back to the host as before.
  // Throws kInvalidArgument / kShapeMismatch naming the parameter index; nothing is updated then.
  bool step(std::vector<Tensor>& params, std::vector<Tensor>& grads);
  // The same update with the global gradient L2 norm given by the caller: when params/grads are
  // one shard of a model (ZeRO, core/parallel), clipping must use the norm over every shard,
  // sqrt(sum over ranks of the shard sums of squares), which only the caller can reduce. A
  // non-finite global_grad_norm skips the update as above (returns false).
  bool step(std::vector<Tensor>& params, std::vector<Tensor>& grads, double global_grad_norm);

  // Allocates zeroed state (and the fp32 master copy of bf16 params) on the parameters' device
  // without stepping, so that a checkpoint can be restored into state() before the first step.
  void init_state(const std::vector<Tensor>& params);
  // Moves the state (if any) to `device`, e.g. after a checkpoint was read into host tensors;
  // throws before anything changed when the device cannot hold it.
  void move_state_to(Device device);
  // The device of the parameters the state was made for (the host before it exists).
  Device device() const { return device_; }

  // The learning rate used by the update with 0-based index `step`.
  double lr_at(int64_t step) const;
  // Global L2 norm of the gradients of the last step, before clipping (0 before any step; NaN or
  // Inf when that step was skipped for it).
  double last_grad_norm() const { return last_grad_norm_; }
  // AdamW only: > 1 normalises each step by the second moment expected of the mean of this many
  // ranks' gradients (kernels/cpu/optim.cpp, adamw_mean_span); 1 (default) is plain AdamW. Set by
  // data parallelism with local steps (PlanConfig::inner_noise_scaling).
  void set_noise_ranks(int n) { noise_ranks_ = n < 1 ? 1 : n; }
  int noise_ranks() const { return noise_ranks_; }

  // Named state tensors of parameter i ("momentum"; "exp_avg", "exp_avg_sq"; "master" for bf16
  // params), on device(). They share storage with the optimizer: writing into them restores a
  // checkpoint.
  // Throws kInvalidState before the state exists, kInvalidArgument for a bad index.
  std::vector<std::pair<std::string, Tensor>> state(size_t param_index);
  size_t num_params() const { return slots_.size(); }
  bool has_state() const { return initialized_; }
  // Bytes held by the state tensors (0 before the state exists).
  size_t state_bytes() const;
  // Steps taken; the next update uses lr_at(step_count()) and AdamW bias correction t = count + 1.
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t count);
  const OptimizerConfig& config() const { return config_; }

 private:
  struct Slot {
    Tensor master;      // fp32 copy of a bf16 parameter
    Tensor momentum;    // SGD with momentum
    Tensor exp_avg;     // AdamW
    Tensor exp_avg_sq;  // AdamW
  };
  void check_args(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) const;
  void prepare(std::vector<Tensor>& params, std::vector<Tensor>& grads);  // state, then checks
  // Drops the state a skipped first step made, so that a skip leaves no trace.
  void forget_state();
  // The update of checked args with the global gradient norm (skipped when it is not finite), or
  // without it on the CUDA device (nullopt: measured there). Returns whether it was applied.
  bool apply(std::vector<Tensor>& params, std::vector<Tensor>& grads, std::optional<double> norm);
  double grad_norm(const std::vector<Tensor>& grads) const;
  // One parameter's update.
  void update_one(Tensor& param, const Tensor& grad, Slot& slot, double lr, float grad_scale);
  // The update of parameters on the CUDA device (norm: as apply's); returns whether it was
  // applied (the norm measured there is finite).
  bool apply_on_device(std::vector<Tensor>& params, std::vector<Tensor>& grads, double lr, float grad_scale,
                       std::optional<double> norm);
  // The kernels' arguments of this step's update.
  kernels::cpu::SgdArgs sgd_args(double lr, float grad_scale) const;
  kernels::cpu::AdamWArgs adamw_args(double lr, float grad_scale) const;

  OptimizerConfig config_;
  std::vector<Slot> slots_;
  bool initialized_ = false;
  int64_t step_count_ = 0;
  double last_grad_norm_ = 0.0;
  int noise_ranks_ = 1;
  std::vector<float> scratch_;  // bf16 gradients widened to fp32
  Device device_ = Device::kCpu;
  std::unique_ptr<DeviceUpdate> device_update_;  // made at the first update on the CUDA device
};

}  // namespace cohort::optim
