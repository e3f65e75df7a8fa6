// Optimizer: validation, the learning-rate schedule, global-norm clipping and the per-parameter
// dispatch to the update loops in kernels/cpu/optim.h.
#include "core/optim/optimizer.h"

#include <cmath>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/optim/device_update.h"
#include "kernels/cpu/optim.h"

namespace cohort::optim {

namespace kc = kernels::cpu;

namespace {
constexpr double kPi = 3.14159265358979323846;

void check_field(bool ok, const char* field, double value, const char* rule) {
  COHORT_CHECK(ok, Status::kInvalidArgument, "optimizer: ", field, " = ", value, " ", rule);
}
}  // namespace

void validate(const OptimizerConfig& c) {
  COHORT_CHECK(c.kind == OptimizerKind::kSgd || c.kind == OptimizerKind::kAdamW, Status::kInvalidArgument,
               "optimizer: unknown kind ", static_cast<int>(c.kind));
  check_field(std::isfinite(c.lr) && c.lr >= 0, "lr", c.lr, "must be finite and >= 0");
  check_field(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay", c.weight_decay,
              "must be finite and >= 0");
  check_field(std::isfinite(c.clip_norm) && c.clip_norm >= 0, "clip_norm", c.clip_norm,
              "must be finite and >= 0 (0 turns clipping off)");
  if (c.kind == OptimizerKind::kSgd) {
    check_field(std::isfinite(c.momentum) && c.momentum >= 0, "momentum", c.momentum, "must be finite and >= 0");
    COHORT_CHECK(!c.nesterov || c.momentum > 0, Status::kInvalidArgument,
                 "optimizer: nesterov needs momentum > 0");
  } else {
    check_field(c.beta1 >= 0 && c.beta1 < 1, "beta1", c.beta1, "is not in [0, 1)");
    check_field(c.beta2 >= 0 && c.beta2 < 1, "beta2", c.beta2, "is not in [0, 1)");
    check_field(std::isfinite(c.eps) && c.eps > 0, "eps", c.eps, "must be > 0");
  }
  COHORT_CHECK(c.schedule == ScheduleKind::kConstant || c.schedule == ScheduleKind::kWarmupCosine,
               Status::kInvalidArgument, "optimizer: unknown schedule ", static_cast<int>(c.schedule));
  if (c.schedule == ScheduleKind::kWarmupCosine) {
    check_field(c.warmup_steps >= 0, "warmup_steps", static_cast<double>(c.warmup_steps), "must be >= 0");
    check_field(c.total_steps > 0, "total_steps", static_cast<double>(c.total_steps), "must be > 0");
    COHORT_CHECK(c.warmup_steps <= c.total_steps, Status::kInvalidArgument, "optimizer: warmup_steps = ",
                 c.warmup_steps, " exceeds total_steps = ", c.total_steps);
    check_field(std::isfinite(c.min_lr) && c.min_lr >= 0 && c.min_lr <= c.lr, "min_lr", c.min_lr,
                "is not in [0, lr]");
  }
}

Optimizer::Optimizer(OptimizerConfig config) : config_(std::move(config)) { validate(config_); }
Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

double Optimizer::lr_at(int64_t step) const {
  const OptimizerConfig& c = config_;
  if (c.schedule == ScheduleKind::kConstant) return c.lr;
  if (step < 0) step = 0;
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  if (step >= c.total_steps) return c.min_lr;
  const double progress = static_cast<double>(step - c.warmup_steps) /
                          static_cast<double>(c.total_steps - c.warmup_steps);
  return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(kPi * progress));
}

void Optimizer::set_step_count(int64_t count) {
  COHORT_CHECK(count >= 0, Status::kInvalidArgument, "optimizer: step count ", count, " is negative");
  step_count_ = count;
}

void Optimizer::init_state(const std::vector<Tensor>& params) {
  std::vector<Slot> slots(params.size());
  const Device device = params.empty() || !params[0].defined() ? Device::kCpu : params[0].device();
  Allocator* alloc = device_allocator(device);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    COHORT_CHECK(p.defined() && p.device() == device, Status::kInvalidArgument, "optimizer: parameter ", i,
                 " is not a defined tensor on ", device_name(device), " (the device of parameter 0)");
    COHORT_CHECK(p.dtype() == DType::kF32 || p.dtype() == DType::kBF16, Status::kInvalidArgument,
                 "optimizer: parameter ", i, " has dtype ", dtype_name(p.dtype()), ", expected f32 or bf16");
    Slot& s = slots[i];
    if (p.dtype() == DType::kBF16) {
      s.master = Tensor::empty(p.shape(), DType::kF32, alloc);
      s.master.copy_from(p);
    }
    if (config_.kind == OptimizerKind::kSgd && config_.momentum > 0)
      s.momentum = Tensor::zeros(p.shape(), DType::kF32, alloc);
    if (config_.kind == OptimizerKind::kAdamW) {
      s.exp_avg = Tensor::zeros(p.shape(), DType::kF32, alloc);
      s.exp_avg_sq = Tensor::zeros(p.shape(), DType::kF32, alloc);
    }
  }
  slots_ = std::move(slots);
  device_ = device;
  initialized_ = true;
}

void Optimizer::move_state_to(Device device) {
  if (device == device_) return;
  std::vector<Slot> slots(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& from = slots_[i];
    Slot& to = slots[i];
    for (auto [src, dst] : {std::pair{&from.master, &to.master}, std::pair{&from.momentum, &to.momentum},
                            std::pair{&from.exp_avg, &to.exp_avg}, std::pair{&from.exp_avg_sq, &to.exp_avg_sq}})
      if (src->defined()) *dst = to_device(*src, device);
  }
  slots_ = std::move(slots);
  device_ = device;
  device_update_.reset();
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state(size_t i) {
  COHORT_CHECK(initialized_, Status::kInvalidState, "optimizer: no state yet (call step or init_state first)");
  COHORT_CHECK(i < slots_.size(), Status::kInvalidArgument, "optimizer: parameter index ", i,
               " is out of range (", slots_.size(), " parameters)");
  std::vector<std::pair<std::string, Tensor>> r;
  const Slot& s = slots_[i];
  if (s.momentum.defined()) r.emplace_back("momentum", s.momentum);
  if (s.exp_avg.defined()) r.emplace_back("exp_avg", s.exp_avg);
  if (s.exp_avg_sq.defined()) r.emplace_back("exp_avg_sq", s.exp_avg_sq);
  if (s.master.defined()) r.emplace_back("master", s.master);
  return r;
}

size_t Optimizer::state_bytes() const {
  size_t bytes = 0;
  for (const Slot& s : slots_)
    for (const Tensor* t : {&s.master, &s.momentum, &s.exp_avg, &s.exp_avg_sq})
      if (t->defined()) bytes += t->nbytes();
  return bytes;
}

void Optimizer::check_args(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) const {
  COHORT_CHECK(params.size() == grads.size(), Status::kInvalidArgument, "optimizer step: ", params.size(),
               " parameters but ", grads.size(), " gradients");
  COHORT_CHECK(params.size() == slots_.size(), Status::kInvalidArgument, "optimizer step: ", params.size(),
               " parameters, but the state was made for ", slots_.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const Tensor& g = grads[i];
    COHORT_CHECK(p.defined() && p.device() == device_ && g.defined() && g.device() == device_,
                 Status::kInvalidArgument, "optimizer step: parameter ", i, " or its gradient is not a defined ",
                 device_name(device_), " tensor (the device the state was made on)");
    COHORT_CHECK(p.is_contiguous() && g.is_contiguous(), Status::kInvalidArgument, "optimizer step: parameter ",
                 i, " or its gradient is not contiguous");
    COHORT_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), Status::kShapeMismatch,
                 "optimizer step: gradient ", i, " is ", shape_str(g.shape()), " ", dtype_name(g.dtype()),
                 ", parameter is ", shape_str(p.shape()), " ", dtype_name(p.dtype()));
    const bool bf16 = p.dtype() == DType::kBF16;
    COHORT_CHECK(bf16 == slots_[i].master.defined() && (!bf16 || slots_[i].master.shape() == p.shape()),
                 Status::kShapeMismatch, "optimizer step: parameter ", i, " changed dtype or shape since the state was made");
  }
}

double Optimizer::grad_norm(const std::vector<Tensor>& grads) const {
  double total = 0.0;
  for (const Tensor& g : grads)
    total += g.dtype() == DType::kBF16 ? kc::sum_of_squares_bf16(g.data<uint16_t>(), g.numel())
                                       : kc::sum_of_squares(g.data<float>(), g.numel());
  return std::sqrt(total);
}

kc::SgdArgs Optimizer::sgd_args(double lr, float grad_scale) const {
  kc::SgdArgs a;
  a.lr = static_cast<float>(lr);
  a.momentum = static_cast<float>(config_.momentum);
  a.weight_decay = static_cast<float>(config_.weight_decay);
  a.grad_scale = grad_scale;
  a.nesterov = config_.nesterov;
  return a;
}

kc::AdamWArgs Optimizer::adamw_args(double lr, float grad_scale) const {
  const OptimizerConfig& c = config_;
  const double t = static_cast<double>(step_count_ + 1);
  kc::AdamWArgs a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(c.beta1);
  a.beta2 = static_cast<float>(c.beta2);
  a.eps = static_cast<float>(c.eps);
  a.weight_decay = static_cast<float>(c.weight_decay);
  a.grad_scale = grad_scale;
  a.step_size = static_cast<float>(lr / (1.0 - std::pow(c.beta1, t)));
  a.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c.beta2, t)));
  a.bias_correction1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
  a.noise_ranks = static_cast<float>(noise_ranks_);
  return a;
}

void Optimizer::update_one(Tensor& param, const Tensor& grad, Slot& slot, double lr, float grad_scale) {
  const int64_t n = param.numel();
  const bool bf16 = param.dtype() == DType::kBF16;
  float* p = bf16 ? slot.master.data<float>() : param.data<float>();
  uint16_t* p16 = bf16 ? param.data<uint16_t>() : nullptr;
  const float* g = grad.data<float>();
  if (bf16) {
    scratch_.resize(static_cast<size_t>(n));
    bf16_to_f32_n(grad.data<uint16_t>(), scratch_.data(), static_cast<size_t>(n));
    g = scratch_.data();
  }
  if (config_.kind == OptimizerKind::kSgd) {
    kc::sgd_update(p, g, slot.momentum.defined() ? slot.momentum.data<float>() : nullptr, p16, n,
                   sgd_args(lr, grad_scale));
    return;
  }
  kc::adamw_update(p, g, slot.exp_avg.data<float>(), slot.exp_avg_sq.data<float>(), p16, n,
                   adamw_args(lr, grad_scale));
}

bool Optimizer::apply_on_device(std::vector<Tensor>& params, std::vector<Tensor>& grads, double lr,
                                float grad_scale, std::optional<double> norm) {
  if (!device_update_) device_update_ = std::make_unique<DeviceUpdate>();
  std::vector<DeviceParamRefs> refs(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Slot& s = slots_[i];
    const bool adam = config_.kind == OptimizerKind::kAdamW;
    refs[i] = {&params[i], &grads[i], &s.master, adam ? &s.exp_avg : &s.momentum, &s.exp_avg_sq};
  }
  if (config_.kind == OptimizerKind::kSgd) {
    const kc::SgdArgs a = sgd_args(lr, grad_scale);
    last_grad_norm_ = device_update_->apply(refs, &a, nullptr, config_.clip_norm, norm);
  } else {
    const kc::AdamWArgs a = adamw_args(lr, grad_scale);
    last_grad_norm_ = device_update_->apply(refs, nullptr, &a, config_.clip_norm, norm);
  }
  return std::isfinite(last_grad_norm_);  // the device skipped the update otherwise
}

void Optimizer::prepare(std::vector<Tensor>& params, std::vector<Tensor>& grads) {
  if (!initialized_) {
    COHORT_CHECK(params.size() == grads.size(), Status::kInvalidArgument, "optimizer step: ", params.size(),
                 " parameters but ", grads.size(), " gradients");
    init_state(params);
  }
  check_args(params, grads);
}

bool Optimizer::step(std::vector<Tensor>& params, std::vector<Tensor>& grads) {
  const bool had_state = initialized_;
  prepare(params, grads);
  // The norm comes first on every step, one vectorised pass over the gradients: it says whether
  // they are finite before anything is written, and clipping needs it. On the device the norm is
  // measured (and clipping applied, and a non-finite norm obeyed) there, in the same queue.
  const bool applied = apply(params, grads, device_ == Device::kCpu ? std::optional(grad_norm(grads)) : std::nullopt);
  if (!applied && !had_state) forget_state();
  return applied;
}

bool Optimizer::step(std::vector<Tensor>& params, std::vector<Tensor>& grads, double global_grad_norm) {
  const bool had_state = initialized_;
  prepare(params, grads);
  const bool applied = apply(params, grads, global_grad_norm);
  if (!applied && !had_state) forget_state();
  return applied;
}

void Optimizer::forget_state() {
  slots_.clear();
  initialized_ = false;
}

bool Optimizer::apply(std::vector<Tensor>& params, std::vector<Tensor>& grads, std::optional<double> norm) {
  if (norm && !std::isfinite(*norm)) {  // NaN or Inf in some gradient: nothing is touched
    last_grad_norm_ = *norm;
    return false;
  }
  float grad_scale = 1.0f;
  if (norm && config_.clip_norm > 0) {
    // As torch.nn.utils.clip_grad_norm_: the factor is applied only when it is below 1.
    const double coef = config_.clip_norm / (*norm + 1e-6);
    if (coef < 1.0) grad_scale = static_cast<float>(coef);
  }
  const double lr = lr_at(step_count_);
  if (device_ != Device::kCpu) {
    if (!apply_on_device(params, grads, lr, grad_scale, norm)) return false;
    ++step_count_;
    return true;
  }
  COHORT_ASSERT(norm.has_value(), "optimizer: a CPU update without the gradient norm");
  for (size_t i = 0; i < params.size(); ++i) update_one(params[i], grads[i], slots_[i], lr, grad_scale);
  last_grad_norm_ = *norm;
  ++step_count_;
  return true;
}

}  // namespace cohort::optim
