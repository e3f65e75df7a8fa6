// Trainer: step = bind inputs, run forward+backward, optimizer update.
#include "core/exec/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <unordered_map>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/graph/autodiff.h"
#include "core/graph/initializer.h"
#include "core/graph/shard.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/threads.h"
#include "transport/coll/communicator.h"

namespace cohort {

Trainer::Trainer(const Graph& forward, const optim::OptimizerConfig& config, const TrainerOptions& options)
    : forward_(forward), train_(forward), options_(options) {
  COHORT_CHECK(forward_.loss() >= 0 || !options_.chunk_losses.empty(), Status::kInvalidState,
               "the graph has no loss: call set_loss before creating a trainer");
  COHORT_CHECK(options_.micro_batches >= 1, Status::kInvalidArgument, "micro_batches is ", options_.micro_batches,
               ", expected >= 1");
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
  if (options_.chunk_losses.empty() && options_.micro_batches == 1) {
    grad_ids_ = build_backward(train_, train_.loss(), param_ids_, blocks, on_read);
    std::vector<ValueId> targets = {train_.loss()};
    for (ValueId g : grad_ids_) if (g >= 0) targets.push_back(g);
    // Refuses a device that cannot be used, or operators without its kernels, before allocating.
    train_exec_ = std::make_unique<Executor>(train_, targets, options_.device);
  } else {
    COHORT_CHECK(options_.device == Device::kCpu, Status::kUnsupported,
                 "micro-batches and pipeline stages run on the host for now (TODO(#28))");
    build_chunks(blocks, on_read);
  }
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
    // A parameter several pipeline stages hold: the first of them counts it.
    auto tied = options_.tied_parameters.find(v.name);
    if (tied != options_.tied_parameters.end() && options_.axes->coordinate(tied->second) != 0) counted = false;
    counts_in_norm_.push_back(counted);
    param_names_.push_back(v.name);
    params_.push_back(to_device(t, options_.device));
    grads_.push_back(Tensor::zeros(v.type.shape, v.type.dtype, alloc));
  }
  for (size_t i = 0; i < grad_ids_.size(); ++i)
    if (grad_ids_[i] >= 0) grad_index_[grad_ids_[i]] = i;
  optimizer_ = std::make_unique<optim::Optimizer>(config);
  // Pipeline stages: which stage holds each parameter of the model, agreed once (a collective
  // over the pipe axis) for the checkpoints' broadcasts.
  transport::coll::Communicator* pipe = options_.axes ? options_.axes->find("pipe") : nullptr;
  if (pipe != nullptr && pipe->size() > 1) {
    const std::vector<ValueId> model_params = model_graph().parameters();
    std::vector<int32_t> last(model_params.size());  // P - 1 - the first holder's rank, or -1
    for (size_t k = 0; k < model_params.size(); ++k)
      last[k] = local_parameter(model_graph().value(model_params[k]).name) >= 0 ? pipe->size() - 1 - pipe->rank() : -1;
    pipe->all_reduce(last.data(), last.data(), last.size(), transport::coll::DataType::kI32,
                     transport::coll::ReduceOp::kMax)
        ->wait();
    for (size_t k = 0; k < model_params.size(); ++k) {
      const std::string& name = model_graph().value(model_params[k]).name;
      COHORT_CHECK(last[k] >= 0, Status::kInvalidPlan, "pipeline: no stage holds parameter '", name, "'");
      pipe_owner_[name] = pipe->size() - 1 - last[k];
    }
  }
}

int64_t Trainer::local_parameter(const std::string& name) const {
  for (size_t i = 0; i < param_names_.size(); ++i)
    if (param_names_[i] == name) return static_cast<int64_t>(i);
  return -1;
}

Tensor Trainer::whole_model_tensor(const std::string& name, const Tensor& t) const {
  const int64_t i = local_parameter(name);
  Tensor whole;
  if (i >= 0) whole = whole_of(static_cast<size_t>(i), t);
  auto owner = pipe_owner_.find(name);
  if (owner == pipe_owner_.end()) {
    COHORT_CHECK(i >= 0, Status::kNotFound, "the model has no parameter named '", name, "'");
    return whole;
  }
  const ValueId v = model_graph().find(name);
  const TensorType& type = model_graph().value(v).type;
  if (i < 0) {
    // Laid out like the parameter: its whole shape; a state entry of another dtype than the
    // parameter's (an fp32 master of a bf16 one) follows this rank's entries of the same name.
    whole = Tensor::empty(type.shape, t.defined() ? t.dtype() : type.dtype);
  }
  COHORT_CHECK(whole.dtype() == DType::kF32 || whole.dtype() == DType::kBF16, Status::kUnsupported, "parameter '",
               name, "': pipeline stages broadcast f32 or bf16 tensors, not ", dtype_name(whole.dtype()));
  transport::coll::Communicator& pipe = options_.axes->at("pipe", "whole model tensor");
  pipe.broadcast(whole.raw(), static_cast<size_t>(whole.numel()),
                 whole.dtype() == DType::kF32 ? transport::coll::DataType::kF32 : transport::coll::DataType::kBF16,
                 owner->second)
      ->wait();
  return whole;
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
  replica_average_.clear();  // the step goes on from this rank's own parameters
  kernels::cpu::use_threads(options_.num_threads);
  RunOptions ro;
  ro.step = step_;
  ro.seed = options_.seed;
  ro.training = true;
  ro.axes = options_.axes.get();
  ro.overlap = options_.overlap_collectives;
  // Last step's gradients are spent: letting go of them lets the executor reuse their buffers
  // (under micro-batches they are the trainer's own, reused by run_schedule).
  for (size_t i = 0; i < grad_ids_.size() && chunks_.empty(); ++i)
    if (grad_ids_[i] >= 0) grads_[i] = Tensor();
  if (hook_) hook_->begin_step();
  float loss = 0.0f;
  if (chunks_.empty()) {
    std::unordered_map<ValueId, Tensor> env;
    loss = run_whole(inputs, env, ro);
  } else {
    loss = run_schedule(inputs, ro);
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

float Trainer::run_whole(const std::map<std::string, Tensor>& inputs, std::unordered_map<ValueId, Tensor>& env,
                         RunOptions& ro) {
  bind_inputs(train_, inputs, env, "step", true);
  for (size_t i = 0; i < param_ids_.size(); ++i) env[param_ids_[i]] = params_[i];
  for (ValueId r : train_exec_->required_values())
    COHORT_CHECK(env.count(r), Status::kInvalidArgument, "step: input '", train_.value(r).name,
                 "' is needed by the loss but was not given");
  if (hook_) {
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
  return loss;
}

void Trainer::build_chunks(const std::vector<std::vector<NodeId>>& blocks, const std::vector<NodeId>& on_read) {
  std::vector<std::string> losses = options_.chunk_losses;
  if (losses.empty()) losses.push_back(train_.value(train_.loss()).name);
  grad_ids_.assign(param_ids_.size(), -1);  // >= 0: some chunk's loss reaches the parameter
  const size_t forward_nodes = train_.nodes().size();
  for (const std::string& name : losses) {
    const ValueId loss = train_.find(name);
    COHORT_CHECK(loss >= 0 && train_.value(loss).producer >= 0 && train_.value(loss).producer < static_cast<NodeId>(forward_nodes),
                 Status::kInvalidArgument, "chunk loss '", name, "' is not a value of the forward graph");
    COHORT_CHECK(shape_numel(train_.value(loss).type.shape) == 1 && train_.value(loss).type.dtype == DType::kF32,
                 Status::kInvalidArgument, "chunk loss ", train_.describe(loss), " is not an f32 scalar");
    // The chunk's forward nodes: those its loss depends on. Its recomputed blocks are among them.
    std::vector<bool> in_chunk(forward_nodes, false);
    std::vector<bool> need(train_.values().size(), false);
    need[static_cast<size_t>(loss)] = true;
    for (size_t k = forward_nodes; k-- > 0;) {
      const Node& n = train_.nodes()[k];
      bool needed = false;
      for (ValueId o : n.outputs) needed = needed || need[static_cast<size_t>(o)];
      if (!needed) continue;
      in_chunk[k] = true;
      for (ValueId i : n.inputs) need[static_cast<size_t>(i)] = true;
    }
    std::vector<std::vector<NodeId>> chunk_blocks;
    for (const auto& b : blocks)
      if (!b.empty() && in_chunk[static_cast<size_t>(b.front())]) chunk_blocks.push_back(b);
    std::vector<NodeId> chunk_on_read;
    for (NodeId n : on_read)
      if (in_chunk[static_cast<size_t>(n)]) chunk_on_read.push_back(n);
    const size_t before = train_.nodes().size();
    const std::vector<ValueId> grads = build_backward(train_, loss, param_ids_, chunk_blocks, chunk_on_read);
    Chunk chunk;
    chunk.loss = loss;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i] >= 0) {
        chunk.grads.emplace_back(i, grads[i]);
        grad_ids_[i] = grads[i];
      }
    // What the backward reads of the forward (kept between them), and the sends it makes.
    std::vector<ValueId> backward_targets, sends;
    std::vector<bool> kept(train_.values().size(), false);
    for (size_t k = before; k < train_.nodes().size(); ++k) {
      const Node& n = train_.nodes()[k];
      if (n.op->send) sends.push_back(n.outputs[0]);
      for (ValueId i : n.inputs) {
        const NodeId producer = train_.value(i).producer;
        if (producer >= 0 && !train_.node(producer).backward) kept[static_cast<size_t>(i)] = true;
      }
    }
    for (size_t v = 0; v < kept.size(); ++v)
      if (kept[v]) chunk.kept.push_back(static_cast<ValueId>(v));
    std::vector<ValueId> forward_targets = {loss};
    for (ValueId v : chunk.kept)
      if (v != loss) forward_targets.push_back(v);
    for (const auto& [i, g] : chunk.grads) backward_targets.push_back(g);
    backward_targets.insert(backward_targets.end(), sends.begin(), sends.end());
    chunk.forward = std::make_unique<Executor>(train_, forward_targets, options_.device);
    chunk.backward = std::make_unique<Executor>(train_, backward_targets, options_.device, chunk.kept);
    chunks_.push_back(std::move(chunk));
  }
  for (size_t i = 0; i < grad_ids_.size(); ++i)
    if (grad_ids_[i] >= 0) grad_index_[grad_ids_[i]] = i;
}

float Trainer::run_schedule(const std::map<std::string, Tensor>& inputs, RunOptions& ro) {
  const int m_count = options_.micro_batches;
  // The inputs cut into micro-batches along dim 0 (views of one contiguous host copy).
  std::vector<std::unordered_map<ValueId, Tensor>> base(static_cast<size_t>(m_count));
  for (const auto& [name, given] : inputs) {
    const ValueId id = train_.find(name);
    COHORT_CHECK(id >= 0 && train_.value(id).kind == ValueKind::kInput, Status::kNotFound,
                 "step: the graph has no input named '", name, "'");
    const TensorType& want = train_.value(id).type;
    Shape whole = want.shape;
    COHORT_CHECK(!whole.empty(), Status::kInvalidArgument, "step: input '", name,
                 "' has rank 0 and cannot be cut into micro-batches");
    whole[0] *= m_count;
    COHORT_CHECK(given.shape() == whole, Status::kShapeMismatch, "step: input '", name, "' has shape ",
                 shape_str(given.shape()), ", expected ", shape_str(whole), " (", m_count, " micro-batches of ",
                 shape_str(want.shape), ")");
    COHORT_CHECK(given.dtype() == want.dtype, Status::kShapeMismatch, "step: input '", name, "' has dtype ",
                 dtype_name(given.dtype()), ", expected ", dtype_name(want.dtype));
    const Tensor t = to_device(given, Device::kCpu).contiguous();
    const size_t offset = static_cast<size_t>(static_cast<const char*>(t.raw()) -
                                              static_cast<const char*>(t.storage()->data()));
    const size_t bytes = t.nbytes() / static_cast<size_t>(m_count);
    for (int m = 0; m < m_count; ++m)
      base[static_cast<size_t>(m)][id] = Tensor::view_of(t.storage(), offset + static_cast<size_t>(m) * bytes, want.shape, want.dtype);
  }
  for (const Chunk& c : chunks_)
    for (const Executor* e : {c.forward.get(), c.backward.get()})
      for (ValueId r : e->required_values())
        COHORT_CHECK(train_.value(r).kind != ValueKind::kInput || base[0].count(r), Status::kInvalidArgument,
                     "step: input '", train_.value(r).name, "' is needed by the loss but was not given");
  for (auto& env : base)
    for (size_t i = 0; i < param_ids_.size(); ++i) env[param_ids_[i]] = params_[i];

  const std::vector<PipelineOp> schedule = step_schedule();
  // Every parameter's contributions: one per micro-batch of each chunk that reaches it.
  std::vector<int> expected(params_.size(), 0), got(params_.size(), 0);
  for (const Chunk& c : chunks_)
    for (const auto& [i, g] : c.grads) expected[i] += m_count;
  // Tied parameters (held by several stages) are final only once summed over their holders,
  // after the schedule; every other one as soon as its last contribution is in.
  std::vector<bool> tied(params_.size(), false);
  for (const auto& [name, axis] : options_.tied_parameters) tied[parameter_index(name)] = true;
  for (size_t i = 0; i < params_.size(); ++i)
    if (expected[i] == 0) {  // not reached on this rank: zeros, final before the schedule starts
      grads_[i].fill(0.0f);
      if (hook_) hook_->on_gradient(i, grads_[i]);
    }
  // Adds one micro-batch's gradient of parameter i into grads_[i]; the last one averages them
  // and hands the result to the hook at once, while the rest of that backward runs — so DDP
  // reduces a bucket behind the schedule's last backward of its layers, as it does behind
  // backward without micro-batches (the planner prices the overlap so; planner.cpp).
  auto accumulate = [&](size_t i, const Tensor& t) {
    COHORT_CHECK(t.dtype() == DType::kF32, Status::kUnsupported, "micro-batches: the gradient of '", param_names_[i],
                 "' is ", dtype_name(t.dtype()), "; only f32 gradients are accumulated");
    if (got[i]++ == 0) {
      // Last step's buffer when nothing else holds it (the gradients' memory is the trainer's
      // between steps under micro-batches), else a new one.
      Tensor& acc = grads_[i];
      if (!acc.defined() || acc.shape() != t.shape() || acc.dtype() != DType::kF32 || acc.storage().use_count() > 1)
        acc = Tensor::empty(t.shape(), DType::kF32);
      acc.copy_from(t);
    } else {
      const Tensor s = t.contiguous();
      kernels::cpu::binary(kernels::cpu::BinaryOp::kAdd, grads_[i].data<float>(), grads_[i].shape(), s.data<float>(),
                           s.shape(), grads_[i].data<float>(), grads_[i].shape());
    }
    if (got[i] != expected[i]) return;
    if (m_count > 1)
      kernels::cpu::scale(grads_[i].data<float>(), 1.0f / static_cast<float>(m_count), grads_[i].data<float>(),
                          grads_[i].numel());
    if (hook_ && !tied[i]) hook_->on_gradient(i, grads_[i]);
  };
  int loss_chunk = -1;
  for (size_t c = 0; c < chunks_.size(); ++c)
    if (chunks_[c].loss == train_.loss()) loss_chunk = static_cast<int>(c);
  double loss_sum = 0.0;
  std::map<std::pair<int, int>, std::unordered_map<ValueId, Tensor>> kept;  // (chunk, micro-batch)
  size_t kept_bytes = 0, peak = 0;
  double idle = 0.0;  // blocked on the neighbouring stages (and the step's collectives): the bubble
  const auto begin = std::chrono::steady_clock::now();
  ro.unfinished_sends = &unfinished_sends_;
  try {
    size_t offset = 0;  // of this run's positions in the step's (parameter_reads)
    for (const PipelineOp& op : schedule) {
      Chunk& chunk = chunks_[static_cast<size_t>(op.chunk)];
      const auto key = std::make_pair(op.chunk, op.micro_batch);
      std::unordered_map<ValueId, Tensor> env = base[static_cast<size_t>(op.micro_batch)];
      Executor& exec = op.forward ? *chunk.forward : *chunk.backward;
      if (!op.forward) {
        auto it = kept.find(key);
        COHORT_CHECK(it != kept.end(), Status::kInvalidArgument, "schedule: the backward of chunk ", op.chunk,
                     " micro-batch ", op.micro_batch, " comes before its forward");
        for (auto& [v, t] : it->second) {
          kept_bytes -= t.nbytes();
          env[v] = std::move(t);
        }
        kept.erase(it);
      } else {
        COHORT_CHECK(!kept.count(key), Status::kInvalidArgument, "schedule: chunk ", op.chunk, " micro-batch ",
                     op.micro_batch, " runs forward twice");
      }
      ro.micro_batch = op.micro_batch;
      if (hook_ && hook_->observes_nodes()) {
        ro.before_node = [this, offset](size_t position) { hook_->before_node(offset + position); };
        ro.after_node = [this, offset](size_t position) { hook_->after_node(offset + position); };
      }
      offset += exec.order().size();
      // A backward bringing some parameter's last contribution accumulates each gradient as it is
      // produced (so that the final ones are handed over at once); the others after the run.
      const bool early = !op.forward && hook_ &&
                         std::any_of(chunk.grads.begin(), chunk.grads.end(),
                                     [&](const auto& ig) { return got[ig.first] + 1 == expected[ig.first]; });
      std::unordered_map<ValueId, size_t> grad_of;  // gradient value -> parameter, until accumulated
      if (early) {
        for (const auto& [i, g] : chunk.grads) grad_of[g] = i;
        ro.on_value = [&](ValueId v) {
          const auto it = grad_of.find(v);
          if (it == grad_of.end()) return;
          const size_t i = it->second;
          grad_of.erase(it);
          accumulate(i, env.at(v));
        };
      }
      const double waited = exec.collective_stats().wait_seconds;
      exec.run(env, ro);
      ro.on_value = nullptr;
      idle += exec.collective_stats().wait_seconds - waited;
      peak = std::max(peak, kept_bytes + exec.last_activation_bytes());
      if (op.forward) {
        auto& keep = kept[key];
        for (ValueId v : chunk.kept) {
          keep[v] = env.at(v);
          kept_bytes += env.at(v).nbytes();
        }
        if (op.chunk == loss_chunk) loss_sum += env.at(chunk.loss).data<float>()[0];
        continue;
      }
      for (const auto& [i, g] : chunk.grads)
        if (!early || grad_of.count(g)) accumulate(i, env.at(g));  // not reported by the run: now
    }
    COHORT_CHECK(kept.empty(), Status::kInvalidArgument, "schedule: ", kept.size(),
                 " forward(s) have no backward (every chunk and micro-batch runs once each way)");
    for (size_t i = 0; i < params_.size(); ++i)
      COHORT_CHECK(got[i] == expected[i], Status::kInvalidArgument, "schedule: parameter '", param_names_[i], "' got ",
                   got[i], " of ", expected[i], " micro-batch gradients");
    if (!unfinished_sends_.empty()) {  // the last sends' receivers
      const auto sends = std::chrono::steady_clock::now();
      finish_sends(false);
      idle += std::chrono::duration<double>(std::chrono::steady_clock::now() - sends).count();
    }
  } catch (...) {
    finish_sends(true);
    throw;
  }
  ro.unfinished_sends = nullptr;
  const double schedule_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  // Busy is everything but the waiting: the stages' work and the schedule's own bookkeeping
  // (accumulating gradients, keeping activations), which is work, not bubble.
  pipeline_busy_seconds_ = std::max(0.0, schedule_seconds - idle);
  pipeline_bubble_fraction_ = schedule_seconds > 0 ? std::min(1.0, idle / schedule_seconds) : 0.0;
  schedule_peak_bytes_ = std::max(schedule_peak_bytes_, peak);
  // The model's loss, from the last stage to every stage; and the tied parameters: every holder's
  // gradient is the sum of theirs. Issued together: they run on different communicators, so a
  // step pays the latency of the links between stages once for both, not twice (a link's latency
  // is what it costs: the loss is 4 bytes). The loss is waited for first and handed over before
  // the tied sums end, as the hook may hold its last gradients back for it (DataParallel marks a
  // non-finite loss into the last bucket it reduces).
  float loss = loss_chunk >= 0 ? static_cast<float>(loss_sum / m_count) : std::nanf("");
  transport::coll::Communicator* pipe = options_.axes ? options_.axes->find("pipe") : nullptr;
  const bool stages = pipe != nullptr && pipe->size() > 1;
  std::vector<std::shared_ptr<transport::coll::Work>> loss_work, tied_work;
  if (stages) loss_work.push_back(pipe->broadcast(&loss, 1, transport::coll::DataType::kF32, pipe->size() - 1));
  for (const auto& [name, axis] : options_.tied_parameters) {
    const size_t i = parameter_index(name);
    transport::coll::Communicator& comm = options_.axes->at(axis, str_cat("tied parameter '", name, "'"));
    tied_work.push_back(comm.all_reduce(grads_[i].raw(), grads_[i].raw(), static_cast<size_t>(grads_[i].numel()),
                                        transport::coll::DataType::kF32, transport::coll::ReduceOp::kSum));
  }
  std::exception_ptr failure;
  try {
    transport::coll::wait_all(loss_work);  // a lost peer, a timeout: thrown naming it
    if (!stages)
      COHORT_CHECK(loss_chunk >= 0, Status::kInvalidState, "step: no chunk of this rank computes the model's loss");
    if (hook_) {
      Tensor loss_t = Tensor::empty({}, DType::kF32);
      loss_t.data<float>()[0] = loss;
      hook_->on_loss(loss_t);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  try {
    transport::coll::wait_all(tied_work);  // every buffer released before anything is thrown
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  if (failure) std::rethrow_exception(failure);
  if (hook_)
    for (size_t i = 0; i < params_.size(); ++i)
      if (tied[i]) hook_->on_gradient(i, grads_[i]);
  return loss;
}

void Trainer::finish_sends(bool quietly) {
  std::vector<UnfinishedSend> sends = std::move(unfinished_sends_);
  unfinished_sends_.clear();
  std::vector<std::shared_ptr<transport::coll::Work>> works;
  for (UnfinishedSend& s : sends) works.push_back(s.work);
  try {
    transport::coll::wait_all(works);  // a lost peer, a timeout: thrown naming it
  } catch (...) {
    if (!quietly) throw;
  }
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
  transport::coll::Communicator* model = options_.axes->find("model");
  if (model == nullptr || model->size() == 1) return std::sqrt(local);
  float sum = static_cast<float>(local);
  model->all_reduce(&sum, 1, transport::coll::DataType::kF32, transport::coll::ReduceOp::kSum)->wait();
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
  // A pipeline stage runs its part whatever is asked of it: the next stage waits for its sends.
  for (const Node& n : plan.graph.nodes())
    if (n.op->send) targets.push_back(n.outputs[0]);
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
  // Pipeline stages: an output is computed by the stage holding it and broadcast to the others
  // (owner: its rank on the "pipe" axis).
  transport::coll::Communicator* pipe = options_.axes ? options_.axes->find("pipe") : nullptr;
  if (pipe != nullptr && pipe->size() == 1) pipe = nullptr;
  std::vector<std::string> names;
  std::vector<int64_t> owner;
  for (const auto& kv : outputs) {
    const bool here = forward_.find(kv.first) >= 0;
    if (here || pipe == nullptr) names.push_back(kv.first);
    owner.push_back(here ? pipe != nullptr ? pipe->rank() : 0 : -1);
  }
  if (pipe != nullptr) {
    pipe->all_reduce(owner.data(), owner.data(), owner.size(), transport::coll::DataType::kI64,
                     transport::coll::ReduceOp::kMax)
        ->wait();
    size_t k = 0;
    for (const auto& kv : outputs)
      COHORT_CHECK(owner[k++] >= 0, Status::kNotFound, "evaluate: no pipeline stage has a value named '", kv.first, "'");
  }
  EvalPlan& plan = eval_plan(batch, names);
  gather_parameters();
  std::unordered_map<ValueId, Tensor> env;
  bind_inputs(plan.graph, inputs, env, "evaluate", false);
  for (size_t i = 0; i < param_names_.size(); ++i) env[plan.graph.find(param_names_[i])] = read_values()[i];
  for (ValueId r : plan.executor->required_values())
    COHORT_CHECK(env.count(r), Status::kInvalidArgument, "evaluate: input '", plan.graph.value(r).name,
                 "' is needed for the requested outputs but was not given");
  for (auto& [name, dst] : outputs) {
    if (plan.graph.find(name) < 0) continue;  // another stage's (checked there)
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
  size_t k = 0;
  for (auto& [name, dst] : outputs) {
    const ValueId v = plan.graph.find(name);
    if (v >= 0) dst.copy_from(env.at(v));
    if (pipe == nullptr) continue;
    // The owner's values to every stage, through a host buffer of the caller's dtype.
    Tensor staged = Tensor::empty(dst.shape(), dst.dtype());
    if (v >= 0) staged.copy_from(dst);
    COHORT_CHECK(dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16, Status::kUnsupported,
                 "evaluate: pipeline stages broadcast f32 or bf16 outputs, '", name, "' is ", dtype_name(dst.dtype()));
    pipe->broadcast(staged.raw(), static_cast<size_t>(staged.numel()),
                    dst.dtype() == DType::kF32 ? transport::coll::DataType::kF32 : transport::coll::DataType::kBF16,
                    static_cast<int>(owner[k++]))
        ->wait();
    dst.copy_from(staged);
  }
}

Tensor& Trainer::parameter(const std::string& name) {
  const size_t i = parameter_index(name);
  gather_parameters();
  replica_average_.clear();  // the caller may write this rank's own parameter
  return params_[i];
}

const Tensor& Trainer::parameter_value(const std::string& name) {
  const size_t i = parameter_index(name);
  gather_parameters();
  return read_values()[i];
}

bool Trainer::average_replicas() {
  gather_parameters();
  std::vector<Tensor> average;
  if (!hook_ || !hook_->average_replicas(params_, average)) return false;
  COHORT_CHECK(average.size() == params_.size(), Status::kInternal, "average_replicas: the hook gave ", average.size(),
               " tensors for ", params_.size(), " parameters");
  replica_average_ = std::move(average);
  return true;
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
  return whole_of(i, read_values()[i]);
}

void Trainer::set_whole_parameter(const std::string& name, const Tensor& whole) {
  const size_t i = parameter_index(name);
  gather_parameters();
  replica_average_.clear();
  const Shape want = whole_shape(i);
  COHORT_CHECK(whole.shape() == want, Status::kShapeMismatch, "parameter '", name, "' has whole shape ",
               shape_str(want), ", the tensor ", shape_str(whole.shape()));
  params_[i].copy_from(block_of(i, whole));
}

void Trainer::gather_parameters() {
  if (hook_) hook_->materialize_parameters(params_, true);
}

namespace {
// Appends to reads[i] the positions (offset + s) of the nodes of `order` that read parameter i
// (owner: parameter values and their views -> parameter index).
void add_parameter_reads(const Graph& g, const std::vector<NodeId>& order, size_t offset,
                         const std::unordered_map<ValueId, size_t>& owner, std::vector<std::vector<size_t>>& reads) {
  // A collective reading a parameter (the all-gather of a weight's Z blocks) holds it until the
  // executor waits for its result: before the first node that reads one of its outputs, or at
  // the end of the run when none does. Its read lasts until that position.
  std::unordered_map<ValueId, size_t> first_read;
  for (size_t s = 0; s < order.size(); ++s)
    for (ValueId v : g.node(order[s]).inputs) first_read.emplace(v, s);
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.node(order[s]);
    size_t held_until = s;
    if (n.op->collective) {
      held_until = order.size() - 1;
      for (ValueId o : n.outputs) {
        auto it = first_read.find(o);
        if (it != first_read.end() && it->second > s) held_until = std::min(held_until, it->second);
      }
    }
    for (ValueId v : n.inputs) {
      auto it = owner.find(v);
      if (it == owner.end()) continue;
      std::vector<size_t>& r = reads[it->second];
      r.push_back(offset + s);
      if (held_until != s) r.push_back(offset + held_until);
    }
  }
}
}  // namespace

std::vector<PipelineOp> Trainer::step_schedule() const {
  std::vector<PipelineOp> schedule = options_.schedule;
  if (schedule.empty())
    for (int m = 0; m < options_.micro_batches; ++m) {
      for (int c = 0; c < static_cast<int>(chunks_.size()); ++c) schedule.push_back({true, c, m});
      for (int c = static_cast<int>(chunks_.size()); c-- > 0;) schedule.push_back({false, c, m});
    }
  for (const PipelineOp& op : schedule)
    COHORT_CHECK(op.chunk >= 0 && op.chunk < static_cast<int>(chunks_.size()) && op.micro_batch >= 0 &&
                     op.micro_batch < options_.micro_batches,
                 Status::kInvalidArgument, "schedule: chunk ", op.chunk, " micro-batch ", op.micro_batch,
                 " is outside the ", chunks_.size(), " chunks and ", options_.micro_batches, " micro-batches");
  return schedule;
}

std::vector<const Executor*> Trainer::step_executors() const {
  if (train_exec_) return {train_exec_.get()};
  std::vector<const Executor*> runs;
  for (const PipelineOp& op : step_schedule()) {
    const Chunk& c = chunks_[static_cast<size_t>(op.chunk)];
    runs.push_back(op.forward ? c.forward.get() : c.backward.get());
  }
  return runs;
}

std::vector<std::vector<size_t>> Trainer::parameter_reads() const {
  // A view (an alias op's output) of a parameter reads it wherever the view is read — also in a
  // backward that binds it as kept from its forward. Node ids are in topological order.
  std::unordered_map<ValueId, size_t> owner;
  for (size_t i = 0; i < param_ids_.size(); ++i) owner[param_ids_[i]] = i;
  for (const Node& n : train_.nodes())
    if (n.op->alias_input0 && !n.inputs.empty()) {
      auto it = owner.find(n.inputs[0]);
      if (it != owner.end()) owner[n.outputs[0]] = it->second;
    }
  std::vector<std::vector<size_t>> reads(param_ids_.size());
  size_t offset = 0;
  for (const Executor* e : step_executors()) {
    add_parameter_reads(train_, e->order(), offset, owner, reads);
    offset += e->order().size();
  }
  for (std::vector<size_t>& r : reads) {
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  return reads;
}

std::vector<size_t> Trainer::step_segments() const {
  if (train_exec_) {
    // build_backward appends backward's nodes after the forward ones (node ids in order).
    const std::vector<NodeId>& order = train_exec_->order();
    const NodeId first_backward = static_cast<NodeId>(forward_.nodes().size());
    size_t s = 0;
    while (s < order.size() && order[s] < first_backward) ++s;
    return {0, s};
  }
  std::vector<size_t> begins;
  size_t offset = 0;
  for (const Executor* e : step_executors()) {
    begins.push_back(offset);
    offset += e->order().size();
  }
  return begins;
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
  replica_average_.clear();
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
  s.peak_activation_bytes = train_exec_ ? train_exec_->peak_activation_bytes() : schedule_peak_bytes_;
  for (size_t i = 0; i < params_.size(); ++i) s.parameter_value_bytes += params_[i].nbytes();
  s.gradient_bytes = s.parameter_value_bytes;  // one gradient per parameter, of its shape and dtype
  s.optimizer_state_bytes = optimizer_->state_bytes();
  s.parameter_bytes = s.parameter_value_bytes + s.gradient_bytes + s.optimizer_state_bytes;
  s.last_step_seconds = last_step_seconds_;
  if (train_exec_) {
    s.collectives = train_exec_->collective_stats();
  } else {
    for (const Chunk& c : chunks_)
      for (const Executor* e : {c.forward.get(), c.backward.get()}) {
        s.collectives.started += e->collective_stats().started;
        s.collectives.complete_when_needed += e->collective_stats().complete_when_needed;
        s.collectives.wait_seconds += e->collective_stats().wait_seconds;
      }
  }
  s.micro_batches = options_.micro_batches;
  s.pipeline_busy_seconds = pipeline_busy_seconds_;
  s.pipeline_bubble_fraction = pipeline_bubble_fraction_;
  return s;
}

}  // namespace cohort
