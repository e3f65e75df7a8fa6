// Trainer: step = bind inputs, run forward+backward, optimizer update.
#include "core/exec/trainer.h"

#include <cmath>
#include <cstring>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/graph/autodiff.h"
#include "core/graph/initializer.h"
#include "core/graph/shard.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/threads.h"
#include "transport/coll/communicator.h"

namespace cohort {

Trainer::Trainer(const Graph& forward, const optim::OptimizerConfig& config, const TrainerOptions& options)
    : forward_(forward), train_(forward), options_(options) {
  COHORT_CHECK(forward_.loss() >= 0, Status::kInvalidState,
               "the graph has no loss: call set_loss before creating a trainer");
  optim::validate(config);
  param_ids_ = train_.parameters();
  COHORT_CHECK(!param_ids_.empty(), Status::kInvalidArgument, "the graph has no parameters to train");
  COHORT_CHECK(!options_.axes || options_.device == Device::kCpu, Status::kUnsupported,
               "tensor parallelism runs on the host for now: the collectives of a rank's graph have no device "
               "communicators per grid axis yet (TODO(#27))");
  std::vector<std::vector<NodeId>> blocks;
  if (options_.activation_checkpointing) {
    blocks = blocks_by_name(train_);
    COHORT_CHECK(!blocks.empty(), Status::kInvalidPlan,
                 "activation checkpointing: the model has no transformer blocks to recompute (no node is named "
                 "'h.<layer>.<name>', as the GPT builder names each block's nodes)");
  }
  std::vector<NodeId> on_read;
  for (const std::string& name : options_.recompute_nodes) {
    const ValueId v = train_.find(name);
    COHORT_CHECK(v >= 0 && train_.value(v).producer >= 0, Status::kInvalidArgument, "recompute: the graph has no node '",
                 name, "'");
    on_read.push_back(train_.value(v).producer);
  }
  grad_ids_ = build_backward(train_, train_.loss(), param_ids_, blocks, on_read);
  std::vector<ValueId> targets = {train_.loss()};
  for (ValueId g : grad_ids_) if (g >= 0) targets.push_back(g);
  // Refuses a device that cannot be used, or operators without its kernels, before allocating.
  train_exec_ = std::make_unique<Executor>(train_, targets, options_.device);
  Allocator* alloc = device_allocator(options_.device);
  for (ValueId p : param_ids_) {
    const Value& v = train_.value(p);
    COHORT_CHECK(v.shard.empty() || options_.axes, Status::kInvalidArgument, "parameter ", train_.describe(p),
                 " is a block of a sharded parameter, but the trainer has no grid axes (make it with a parallel plan)");
    Tensor t = Tensor::empty(v.type.shape, v.type.dtype);  // initialised on the host, then moved
    if (v.shard.empty()) {
      initialize_parameter(t, v.init, options_.seed, v.name);
    } else {  // the block of the whole parameter's initialisation: as if trained on one rank
      Tensor whole = Tensor::empty(shard_whole_shape(v.type.shape, v.shard), v.type.dtype);
      initialize_parameter(whole, v.init, options_.seed, v.name);
      t = take_shard(whole, v.shard);
    }
    bool counted = true;
    for (const char* axis : {"x", "y", "z"}) {
      bool cut = false;
      for (const ShardCut& c : v.shard) cut = cut || c.axis == axis;
      if (!cut && options_.axes && options_.axes->coordinate(axis) != 0) counted = false;
    }
    counts_in_norm_.push_back(counted);
    param_names_.push_back(v.name);
    params_.push_back(to_device(t, options_.device));
    grads_.push_back(Tensor::zeros(v.type.shape, v.type.dtype, alloc));
  }
  for (size_t i = 0; i < grad_ids_.size(); ++i)
    if (grad_ids_[i] >= 0) grad_index_[grad_ids_[i]] = i;
  optimizer_ = std::make_unique<optim::Optimizer>(config);
}

void Trainer::bind_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs,
                          std::unordered_map<ValueId, Tensor>& env, const char* what, bool keep) {
  for (const auto& [name, t] : inputs) {
    ValueId id = g.find(name);
    COHORT_CHECK(id >= 0, Status::kNotFound, what, ": the graph has no input named '", name, "'");
    const Value& v = g.value(id);
    COHORT_CHECK(v.kind == ValueKind::kInput, Status::kInvalidArgument, what, ": '", name,
                 "' is not an input of the graph");
    COHORT_CHECK(t.shape() == v.type.shape, Status::kShapeMismatch, what, ": input '", name, "' has shape ",
                 shape_str(t.shape()), ", expected ", shape_str(v.type.shape));
    COHORT_CHECK(t.dtype() == v.type.dtype, Status::kShapeMismatch, what, ": input '", name, "' has dtype ",
                 dtype_name(t.dtype()), ", expected ", dtype_name(v.type.dtype));
    if (t.device() == options_.device && t.is_contiguous()) {
      env[id] = t;
    } else if (keep) {
      Tensor& staged = staged_inputs_[name];
      if (!staged.defined() || staged.shape() != t.shape() || staged.dtype() != t.dtype())
        staged = Tensor::empty(t.shape(), t.dtype(), device_allocator(options_.device));
      staged.copy_from(t);  // queued after the previous step's work, which may still read it
      env[id] = staged;
    } else {
      env[id] = to_device(t, options_.device);
    }
  }
}

float Trainer::step(const std::map<std::string, Tensor>& inputs) {
  auto start = std::chrono::steady_clock::now();
  kernels::cpu::use_threads(options_.num_threads);
  std::unordered_map<ValueId, Tensor> env;
  bind_inputs(train_, inputs, env, "step", true);
  for (size_t i = 0; i < param_ids_.size(); ++i) env[param_ids_[i]] = params_[i];
  for (ValueId r : train_exec_->required_values())
    COHORT_CHECK(env.count(r), Status::kInvalidArgument, "step: input '", train_.value(r).name,
                 "' is needed by the loss but was not given");
  RunOptions ro;
  ro.step = step_;
  ro.seed = options_.seed;
  ro.training = true;
  ro.axes = options_.axes.get();
  ro.overlap = options_.overlap_collectives;
  // Last step's gradients are spent: letting go of them lets the executor reuse their buffers.
  for (size_t i = 0; i < grad_ids_.size(); ++i)
    if (grad_ids_[i] >= 0) grads_[i] = Tensor();
  if (hook_) {
    hook_->begin_step();
    // Gradients the loss does not reach are zeros, final before backward starts.
    for (size_t i = 0; i < grad_ids_.size(); ++i)
      if (grad_ids_[i] < 0) {
        grads_[i].fill(0.0f);
        hook_->on_gradient(i, grads_[i]);
      }
    ro.on_value = [this, &env](ValueId v) {
      if (v == train_.loss()) return hook_->on_loss(env.at(v));
      auto it = grad_index_.find(v);
      if (it != grad_index_.end()) hook_->on_gradient(it->second, env.at(v));
    };
    if (hook_->observes_nodes()) {
      ro.before_node = [this](size_t position) { hook_->before_node(position); };
      ro.after_node = [this](size_t position) { hook_->after_node(position); };
    }
  }
  train_exec_->run(env, ro);
  const Tensor loss_t = to_device(env.at(train_.loss()), Device::kCpu);
  float loss = loss_t.dtype() == DType::kBF16 ? bf16_to_f32(loss_t.data<uint16_t>()[0]) : loss_t.data<float>()[0];
  for (size_t i = 0; i < grad_ids_.size(); ++i) {
    if (grad_ids_[i] >= 0) grads_[i] = env.at(grad_ids_[i]);
    else grads_[i].fill(0.0f);
  }
  if (hook_) hook_->before_update(grads_);
  // NaN or Inf in the loss or the gradients: the update is skipped. The optimizer (or the ZeRO
  // hook, on the norm over every rank) decides for the gradients; a rank's own non-finite loss
  // was folded into what DDP reduces (DataParallel::on_loss), so data-parallel ranks all decide
  // alike. The hook's update is a collective: it runs even when this rank's loss is not finite.
  const bool loss_finite = std::isfinite(loss);
  bool applied = false, measured = true;  // measured: the gradient norm of this step is known
  if (hook_ && hook_->apply_update(params_, grads_)) applied = std::isfinite(hook_->applied_grad_norm());
  else if (loss_finite && options_.axes) applied = optimizer_->step(params_, grads_, model_grad_norm());
  else if (loss_finite) applied = optimizer_->step(params_, grads_);
  else {  // the loss alone decides: the norm is not measured, the stats report NaN for it
    optimizer_->step(params_, grads_, std::nan(""));
    measured = false;
  }
  COHORT_ASSERT(loss_finite || !applied, "step: an update was applied although the loss is ", loss);
  if (applied) ++step_;
  if (hook_) hook_->after_update(params_, step_);
  last_step_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!applied) throw non_finite_error(loss, measured ? std::optional<double>(stats().grad_norm) : std::nullopt);
  return loss;
}

double Trainer::model_grad_norm() {
  // Each block counted once over the tensor axes (counts_in_norm_), summed there in f32: the
  // transport has no f64, and the clipping factor needs no more (a NaN or Inf survives the sum).
  double local = 0.0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!counts_in_norm_[i]) continue;
    const Tensor g = grads_[i].contiguous();
    local += g.dtype() == DType::kBF16 ? kernels::cpu::sum_of_squares_bf16(g.data<uint16_t>(), g.numel())
                                       : kernels::cpu::sum_of_squares(g.data<float>(), g.numel());
  }
  transport::coll::Communicator* tensor = options_.axes->find("tensor");
  if (tensor == nullptr || tensor->size() == 1) return std::sqrt(local);
  float sum = static_cast<float>(local);
  tensor->all_reduce(&sum, 1, transport::coll::DataType::kF32, transport::coll::ReduceOp::kSum)->wait();
  return std::sqrt(static_cast<double>(sum));
}

Error Trainer::non_finite_error(float loss, std::optional<double> grad_norm) const {
  // Which gradients hold NaN or Inf (read from the device on this error path only).
  std::string where;
  int64_t others = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!grads_[i].defined()) continue;
    const Tensor g = to_device(grads_[i], Device::kCpu);
    int64_t bad = 0;
    for (int64_t k = 0; k < g.numel(); ++k) {
      const float v = g.dtype() == DType::kBF16 ? bf16_to_f32(g.data<uint16_t>()[k]) : g.data<float>()[k];
      bad += !std::isfinite(v);
    }
    if (bad == 0) continue;
    if (where.empty()) where = str_cat(bad, " of ", g.numel(), " elements of the gradient of '", param_names_[i],
                                       "' are NaN or Inf");
    else ++others;
  }
  if (others > 0) where += str_cat(" (and the gradients of ", others, " more parameters hold some)");
  std::string what = str_cat("the loss is ", loss);
  if (grad_norm) what += str_cat(", the gradient norm ", *grad_norm);
  if (!where.empty()) what += str_cat("; ", where);
  else if (grad_norm && !std::isfinite(*grad_norm) && hook_)
    what += " (from another rank: the gradients averaged over the ranks carry its NaN or Inf)";
  return Error(Status::kNonFinite,
               str_cat("step: non-finite values (", what, "): the update was skipped; parameters, optimizer state "
                       "and the step count are unchanged; skip this batch and go on"));
}

Trainer::EvalPlan& Trainer::eval_plan(int64_t batch, const std::vector<std::string>& outputs) {
  std::string key = str_cat(batch);
  for (const auto& o : outputs) key += "|" + o;
  auto it = eval_plans_.find(key);
  if (it != eval_plans_.end()) return it->second;
  EvalPlan plan;
  plan.graph = forward_.with_batch(batch);
  std::vector<ValueId> targets;
  for (const auto& o : outputs) {
    ValueId id = plan.graph.find(o);
    COHORT_CHECK(id >= 0, Status::kNotFound, "evaluate: the graph has no value named '", o, "'");
    targets.push_back(id);
  }
  if (eval_plans_.size() > 16) eval_plans_.clear();  // bounded cache of shapes
  auto& slot = eval_plans_[key];
  slot.graph = std::move(plan.graph);
  slot.executor = std::make_unique<Executor>(slot.graph, targets, options_.device);
  return slot;
}

void Trainer::evaluate(const std::map<std::string, Tensor>& inputs, std::map<std::string, Tensor>& outputs) {
  kernels::cpu::use_threads(options_.num_threads);
  COHORT_CHECK(!outputs.empty(), Status::kInvalidArgument, "evaluate: no outputs requested");
  int64_t batch = -1;
  for (const auto& [name, t] : inputs) {
    ValueId id = forward_.find(name);
    COHORT_CHECK(id >= 0 && forward_.value(id).kind == ValueKind::kInput, Status::kNotFound,
                 "evaluate: the graph has no input named '", name, "'");
    COHORT_CHECK(t.rank() >= 1, Status::kShapeMismatch, "evaluate: input '", name, "' has rank 0");
    if (batch < 0) batch = t.dim(0);
    COHORT_CHECK(t.dim(0) == batch, Status::kShapeMismatch, "evaluate: input '", name, "' has batch ",
                 t.dim(0), " but another input has ", batch);
  }
  COHORT_CHECK(batch > 0, Status::kInvalidArgument, "evaluate: no inputs given");
  std::vector<std::string> names;
  for (const auto& kv : outputs) names.push_back(kv.first);
  EvalPlan& plan = eval_plan(batch, names);
  gather_parameters();
  std::unordered_map<ValueId, Tensor> env;
  bind_inputs(plan.graph, inputs, env, "evaluate", false);
  for (size_t i = 0; i < param_names_.size(); ++i) env[plan.graph.find(param_names_[i])] = params_[i];
  for (ValueId r : plan.executor->required_values())
    COHORT_CHECK(env.count(r), Status::kInvalidArgument, "evaluate: input '", plan.graph.value(r).name,
                 "' is needed for the requested outputs but was not given");
  for (auto& [name, dst] : outputs) {
    const TensorType& t = plan.graph.value(plan.graph.find(name)).type;
    COHORT_CHECK(dst.shape() == t.shape, Status::kShapeMismatch, "evaluate: output '", name,
                 "' buffer has shape ", shape_str(dst.shape()), ", expected ", shape_str(t.shape));
    // Checked before running: copy_from converts only between f32 and bf16.
    auto f32_or_bf16 = [](DType d) { return d == DType::kF32 || d == DType::kBF16; };
    COHORT_CHECK(dst.dtype() == t.dtype || (f32_or_bf16(dst.dtype()) && f32_or_bf16(t.dtype)), Status::kShapeMismatch, "evaluate: output '", name, "' is ", dtype_name(t.dtype),
                 ", but the buffer has dtype ", dtype_name(dst.dtype()));
  }
  RunOptions ro;
  ro.step = step_;
  ro.seed = options_.seed;
  ro.training = false;
  ro.axes = options_.axes.get();
  ro.overlap = options_.overlap_collectives;
  plan.executor->run(env, ro);
  for (auto& [name, dst] : outputs) dst.copy_from(env.at(plan.graph.find(name)));
}

Tensor& Trainer::parameter(const std::string& name) {
  for (size_t i = 0; i < param_names_.size(); ++i)
    if (param_names_[i] == name) {
      gather_parameters();
      return params_[i];
    }
  throw Error(Status::kNotFound, str_cat("the graph has no parameter named '", name, "'"));
}

size_t Trainer::parameter_index(const std::string& name) const {
  for (size_t i = 0; i < param_names_.size(); ++i)
    if (param_names_[i] == name) return i;
  throw Error(Status::kNotFound, str_cat("the graph has no parameter named '", name, "'"));
}

bool Trainer::is_sharded(size_t i) const { return !train_.value(param_ids_.at(i)).shard.empty(); }

Shape Trainer::whole_shape(size_t i) const {
  return shard_whole_shape(params_.at(i).shape(), train_.value(param_ids_[i]).shard);
}

Shape Trainer::whole_parameter_shape(const std::string& name) const { return whole_shape(parameter_index(name)); }

Tensor Trainer::whole_of(size_t i, const Tensor& t) const {
  const Tensor block = to_device(t, Device::kCpu).contiguous();
  if (!is_sharded(i)) {
    Tensor copy = Tensor::empty(block.shape(), block.dtype());
    copy.copy_from(block);
    return copy;
  }
  const std::string& name = param_names_[i];
  const std::vector<ShardCut>& cuts = train_.value(param_ids_[i]).shard;
  COHORT_CHECK(block.shape() == params_[i].shape(), Status::kShapeMismatch, "a tensor of shape ",
               shape_str(block.shape()), " is not laid out like parameter '", name, "' (", shape_str(params_[i].shape()),
               ")");
  COHORT_CHECK(block.dtype() == DType::kF32 || block.dtype() == DType::kBF16, Status::kUnsupported, "parameter '",
               name, "': only f32 and bf16 blocks are gathered, not ", dtype_name(block.dtype()));
  // The cuts undone last to first: each gathers the blocks of its axis into the block the cuts
  // before it made (the ranks of that axis hold the same earlier cuts' blocks).
  Tensor whole = block;
  for (size_t k = cuts.size(); k-- > 0;) {
    const ShardCut& cut = cuts[k];
    transport::coll::Communicator& axis = options_.axes->at(cut.axis, str_cat("whole parameter '", name, "'"));
    COHORT_ASSERT(axis.size() == cut.parts && axis.rank() == cut.index, "parameter '", name, "': block ", cut.index,
                  " of ", cut.parts, " but rank ", axis.rank(), " of ", axis.size(), " on axis '", cut.axis, "'");
    const Tensor part_of = whole;
    Tensor gathered = Tensor::empty({cut.parts, part_of.numel()}, part_of.dtype());
    axis.all_gather(part_of.raw(), gathered.raw(), static_cast<size_t>(part_of.numel()),
                    part_of.dtype() == DType::kF32 ? transport::coll::DataType::kF32 : transport::coll::DataType::kBF16)
        ->wait();
    whole = Tensor::empty(shard_whole_shape(part_of.shape(), {cut}), part_of.dtype());
    Tensor part = Tensor::empty(part_of.shape(), part_of.dtype());
    for (int64_t p = 0; p < cut.parts; ++p) {  // rank p's block into its place
      std::memcpy(part.raw(), static_cast<const char*>(gathered.raw()) + static_cast<size_t>(p) * part_of.nbytes(),
                  part_of.nbytes());
      ShardCut at = cut;
      at.index = p;
      put_shard(whole, part, {at});
    }
  }
  return whole;
}

Tensor Trainer::block_of(size_t i, const Tensor& whole) const {
  if (!is_sharded(i)) return whole;
  return take_shard(to_device(whole, Device::kCpu).contiguous(), train_.value(param_ids_[i]).shard);
}

Tensor Trainer::whole_parameter(const std::string& name) {
  const size_t i = parameter_index(name);
  gather_parameters();
  return whole_of(i, params_[i]);
}

void Trainer::set_whole_parameter(const std::string& name, const Tensor& whole) {
  const size_t i = parameter_index(name);
  gather_parameters();
  const Shape want = whole_shape(i);
  COHORT_CHECK(whole.shape() == want, Status::kShapeMismatch, "parameter '", name, "' has whole shape ",
               shape_str(want), ", the tensor ", shape_str(whole.shape()));
  params_[i].copy_from(block_of(i, whole));
}

void Trainer::gather_parameters() {
  if (hook_) hook_->materialize_parameters(params_, true);
}

std::vector<std::vector<size_t>> Trainer::parameter_reads() const {
  // A view (an alias op's output) of a parameter reads it wherever the view is read.
  std::unordered_map<ValueId, size_t> owner;
  for (size_t i = 0; i < param_ids_.size(); ++i) owner[param_ids_[i]] = i;
  std::vector<std::vector<size_t>> reads(param_ids_.size());
  const std::vector<NodeId>& order = train_exec_->order();
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& n = train_.node(order[s]);
    for (ValueId v : n.inputs) {
      auto it = owner.find(v);
      if (it == owner.end()) continue;
      std::vector<size_t>& r = reads[it->second];
      if (r.empty() || r.back() != s) r.push_back(s);
    }
    if (n.op->alias_input0 && !n.inputs.empty()) {
      auto it = owner.find(n.inputs[0]);
      if (it != owner.end()) owner[n.outputs[0]] = it->second;
    }
  }
  return reads;
}

size_t Trainer::backward_begin() const {
  // build_backward appends backward's nodes after the forward ones (node ids in order).
  const std::vector<NodeId>& order = train_exec_->order();
  const NodeId first_backward = static_cast<NodeId>(forward_.nodes().size());
  size_t s = 0;
  while (s < order.size() && order[s] < first_backward) ++s;
  return s;
}

void Trainer::restore_state(const std::vector<Tensor>& params, std::unique_ptr<optim::Optimizer> optimizer,
                            int64_t step, uint64_t seed) {
  COHORT_CHECK(params.size() == params_.size(), Status::kInvalidArgument, "restore: ", params.size(),
               " parameters given, the trainer has ", params_.size());
  COHORT_CHECK(optimizer != nullptr && step >= 0, Status::kInvalidArgument, "restore: no optimizer or step ", step,
               " < 0");
  for (size_t i = 0; i < params.size(); ++i)
    COHORT_CHECK(params[i].defined() && params[i].is_contiguous() && params[i].shape() == params_[i].shape() &&
                     params[i].dtype() == params_[i].dtype(),
                 Status::kShapeMismatch, "restore: parameter '", param_names_[i], "' is ",
                 shape_str(params_[i].shape()), " ", dtype_name(params_[i].dtype()), ", the given tensor is not");
  // The state onto this trainer's device first: the one step here that may fail (memory).
  optimizer->move_state_to(options_.device);
  // Copy into the existing storage: tensors handed out by parameter() keep aliasing it.
  if (hook_) hook_->materialize_parameters(params_, false);
  for (size_t i = 0; i < params.size(); ++i)
    device_copy(params_[i].raw(), params_[i].device(), params[i].raw(), params[i].device(), params_[i].nbytes());
  optimizer_ = std::move(optimizer);
  step_ = step;
  options_.seed = seed;
}

TrainerStats Trainer::stats() const {
  TrainerStats s;
  s.step = step_;
  s.learning_rate = optimizer_->lr_at(step_ > 0 ? step_ - 1 : 0);
  const double hook_norm = hook_ ? hook_->applied_grad_norm() : -1.0;
  s.grad_norm = !(hook_norm < 0) ? hook_norm : optimizer_->last_grad_norm();  // NaN: the hook skipped a step
  s.peak_activation_bytes = train_exec_->peak_activation_bytes();
  for (size_t i = 0; i < params_.size(); ++i) s.parameter_value_bytes += params_[i].nbytes();
  s.gradient_bytes = s.parameter_value_bytes;  // one gradient per parameter, of its shape and dtype
  s.optimizer_state_bytes = optimizer_->state_bytes();
  s.parameter_bytes = s.parameter_value_bytes + s.gradient_bytes + s.optimizer_state_bytes;
  s.last_step_seconds = last_step_seconds_;
  s.collectives = train_exec_->collective_stats();
  return s;
}

}  // namespace cohort
