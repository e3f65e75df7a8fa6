// Trainer: one model on this process — the forward graph plus its backward pass, parameters,
// gradients and optimizer state. A step binds caller tensors to the graph's inputs, runs forward
// and backward through the Executor and applies the optimizer. Later parallel plans wrap this
// (communication nodes in the DAG, outer optimizers around step()).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/graph.h"
#include "core/optim/optimizer.h"

namespace cohort {

// One entry of a pipeline stage's schedule (TrainerOptions::schedule): the forward or the
// backward of one chunk of this rank's graph on one micro-batch.
struct PipelineOp {
  bool forward = true;
  int chunk = 0;
  int micro_batch = 0;
};

struct TrainerOptions {
  uint64_t seed = 0;
  int num_threads = 0;  // 0: leave the process setting
  // Where parameters, gradients, optimizer state and every step's work live. kCuda: the trainer
  // refuses at construction (naming the reason) when no device can be used or an operator of the
  // model has no CUDA kernel; inputs may be host or device tensors (host ones are copied over),
  // the loss and evaluate's outputs come back to the caller's tensors.
  Device device = Device::kCpu;
  // Tensor parallelism (core/parallel/tensor_parallel.h): the graph is this rank's part of a
  // model, with collective operators over the grid axes these communicators carry and parameters
  // that are blocks of whole ones (Value::shard). Each such parameter starts as its block of the
  // whole parameter's initialisation, and the gradient norm (clipping, the NaN / Inf skip) is the
  // whole model's, summed over the "model" axis, so every rank of a model replica updates alike.
  // Host only for now (kUnsupported on the CUDA device). Every rank of the tensor axes calls
  // step and evaluate at the same points (they run collectives).
  std::shared_ptr<const CommAxes> axes{};
  bool overlap_collectives = true;  // RunOptions::overlap
  // Activation checkpointing per transformer block (build_backward's recompute, autodiff.h): the
  // blocks are blocks_by_name's (the GPT builder's "h.<l>." nodes); forward keeps only what each
  // block reads, backward recomputes a block's activations just before its gradients. The same
  // gradients, bit for bit; less activation memory for one more forward of every block. A
  // model without such blocks is refused (kInvalidPlan) rather than silently run without.
  bool activation_checkpointing = false;
  // Forward nodes (by name) that backward runs again, just before the first gradient that reads
  // them, instead of keeping their outputs from forward (build_backward's recompute_on_read):
  // sequence parallelism's token all-gathers, whose whole-sequence results would otherwise
  // outlive forward (tensor_parallel.h). Nodes inside an activation-checkpointing block are
  // recomputed with it.
  std::vector<std::string> recompute_nodes{};
  // The single-rank model the graph was rewritten from (tensor parallelism): checkpoints are
  // written in its layout — whole parameters and optimizer state, its fingerprint — so that they
  // load under another grid or on one rank. nullptr: the graph itself.
  std::shared_ptr<const Graph> whole_model{};

  // Micro-batches (gradient accumulation, and the pipeline's unit of work): the graph is one
  // micro-batch; step's inputs are micro_batches times its dim 0, cut into that many whose
  // gradients are summed and divided by their number — one step on the whole batch of a loss
  // that is a mean over it (every loss operator here is), within fp32 rounding.
  int micro_batches = 1;
  // Pipeline parallelism (core/parallel/pipeline.h): the graph holds this rank's stages, its
  // "chunks" (one; several under the interleaved schedule), which meet only through pipe_send /
  // pipe_recv, each with the name of its loss value: the model's loss in the model's last stage,
  // else the sum of the tokens its sends output. Empty: one chunk, the graph's loss. Chunks run
  // their forward and their backward separately, micro-batch by micro-batch, in `schedule`'s
  // order (every chunk and micro-batch once each way, a forward before its backward; empty: each
  // micro-batch forward then backward); a backward reads what its forward kept. The "pipe" axis
  // links the stages: the model's loss is broadcast from its last rank, so that every stage
  // returns it and skips a non-finite step alike.
  std::vector<std::string> chunk_losses{};
  std::vector<PipelineOp> schedule{};
  // Parameters held whole by several stages (a tied embedding read by the first and the last):
  // name -> the grid axis of their holders, over which the gradient is summed after the last
  // micro-batch; the holder of coordinate 0 on that axis alone counts it in the model's norm.
  std::map<std::string, std::string> tied_parameters{};
};

struct TrainerStats {
  int64_t step = 0;
  double learning_rate = 0.0;
  double grad_norm = 0.0;
  // Executor::peak_activation_bytes of the training steps: the most bytes a step held at once
  // besides parameters, gradients and optimizer state (forward's activations, backward's
  // gradients of them, recomputed ones under activation checkpointing).
  size_t peak_activation_bytes = 0;
  size_t parameter_bytes = 0;  // the sum of the three below
  size_t parameter_value_bytes = 0;  // this rank's parameters (blocks of them under tensor parallelism)
  size_t gradient_bytes = 0;         // their gradients
  size_t optimizer_state_bytes = 0;  // moments, fp32 master copies
  double last_step_seconds = 0.0;
  CollectiveStats collectives;  // of training steps (tensor parallelism)
  // Micro-batches and pipeline stages, the last step: the seconds this rank spent working (busy:
  // its forward and backward runs and the schedule's bookkeeping), and the seconds it was blocked
  // on the neighbouring stages and the step's collectives (the bubble), as a fraction of the
  // schedule's time.
  int micro_batches = 1;
  double pipeline_busy_seconds = 0.0;
  double pipeline_bubble_fraction = 0.0;
};

// Observes and extends a training step; core/parallel implements it (DDP gradient averaging,
// local SGD and CO2 outer steps). Calls happen on the thread running step(), in this order:
// begin_step once the inputs are bound, on_gradient for every parameter as backward produces its
// gradient (parameters the loss does not reach first, with zeros), on_loss once forward has
// produced the loss (before any gradient of backward; under micro-batches, after the schedule:
// each gradient is handed over as the backward bringing its last micro-batch's contribution
// produces it, averaged over them, and a tied parameter's after its sum over the stages holding
// it, after on_loss), before_update once backward is done,
// apply_update, after_update after the optimizer — also when the update was skipped for NaN or
// Inf (then the parameters are unchanged). An exception from a hook aborts the step: before
// before_update returns nothing has changed; from after_update the inner update has been applied.
class StepHook {
 public:
  virtual ~StepHook() = default;
  // A step starts (also after a previous step failed half-way): reset per-step state.
  virtual void begin_step() {}
  // grad (of parameter `index`) is final and stays valid and unmodified until before_update.
  virtual void on_gradient(size_t index, const Tensor& grad) = 0;
  // The step's loss (a scalar on the trainer's device, possibly still being computed there),
  // valid until before_update. The trainer skips the update when it is not finite; a hook whose
  // ranks must agree on that (DDP) folds it into what they reduce.
  virtual void on_loss(const Tensor& /*loss*/) {}
  // May overwrite grads in place (same shapes) — e.g. with their average over ranks.
  virtual void before_update(std::vector<Tensor>& grads) = 0;
  // Takes over the optimizer update and returns true (ZeRO: each rank steps only its shard of
  // the parameters with its own optimizer, then gathers them) — having applied it, or skipped it
  // on every rank alike because the global gradient norm is not finite (applied_grad_norm() then
  // says so) — or returns false to let the trainer's optimizer step every parameter. Called
  // between before_update and after_update.
  virtual bool apply_update(std::vector<Tensor>& /*params*/, std::vector<Tensor>& /*grads*/) { return false; }
  // The whole model's gradient norm its own update last used (when apply_update steps; NaN or
  // Inf when it skipped the update), else negative: the trainer's optimizer then has it.
  virtual double applied_grad_norm() const { return -1.0; }
  // params: after this step's optimizer update, or unchanged when the update was skipped (NaN or
  // Inf); step: steps completed (a skipped step does not count). Called for every step that
  // reached the update, so that ranks count their calls alike. May overwrite params.
  virtual void after_update(std::vector<Tensor>& params, int64_t step) = 0;

  // A hook that releases parameter memory between uses (ZeRO stage 3) returns true here and
  // gets before_node / after_node around every node of a step (positions in the step's node
  // sequence of Trainer::parameter_reads: under micro-batches, every run of the schedule's, one
  // after the other), so it can make parameters whole just before they are read.
  virtual bool observes_nodes() const { return false; }
  virtual void before_node(size_t /*position*/) {}
  virtual void after_node(size_t /*position*/) {}
  // Makes every parameter whole before anything other than a step touches it (evaluate, the
  // parameter accessors, a restore). keep_values: with their current values — a collective
  // under ZeRO stage 3, so every rank calls it at the same point; false: memory only, the
  // caller overwrites every element. The parameters stay whole until the next step begins.
  virtual void materialize_parameters(std::vector<Tensor>& /*params*/, bool /*keep_values*/) {}
  // Local updating (local SGD, SlowMo, DiLoCo, co2) leaves the data-parallel replicas at
  // different parameters between synchronisations: fills `average` (tensors shaped like params,
  // on their device) with the average of every replica's current whole parameters and returns
  // true — a collective over the replicas, every rank calls it at the same point — or returns
  // false where the replicas hold the same parameters anyway (DDP, one replica).
  virtual bool average_replicas(const std::vector<Tensor>& /*params*/, std::vector<Tensor>& /*average*/) {
    return false;
  }
};

class Trainer {
 public:
  // Copies `forward` (which needs a loss), builds the backward pass, initialises parameters.
  Trainer(const Graph& forward, const optim::OptimizerConfig& config, const TrainerOptions& options);

  // inputs: graph input name -> tensor (shape and dtype exactly as declared). Returns the loss.
  // When the loss or any gradient (for DDP: the averaged gradients, which carry every rank's loss
  // too) holds NaN or Inf, the update is skipped and kNonFinite thrown naming what was not
  // finite: parameters, optimizer state and step count are as before the call (under local SGD /
  // co2 the hook still counts the call, and a round that ends with it still runs its outer step).
  float step(const std::map<std::string, Tensor>& inputs);
  // Forward in evaluation mode; fills each requested output (name -> caller tensor of the right
  // shape). Dimension 0 of the inputs may differ from the declared batch.
  void evaluate(const std::map<std::string, Tensor>& inputs, std::map<std::string, Tensor>& outputs);

  // Gathers the parameters first (gather_parameters). On the trainer's device (copy_from moves
  // values in and out of it from either device). parameter() is the writable one and ends the
  // replicas' average (average_replicas); parameter_value() reads it while it lasts.
  Tensor& parameter(const std::string& name);
  const Tensor& parameter_value(const std::string& name);
  // Tensor parallelism: a parameter this rank holds a block of (Value::shard) has a whole shape
  // besides its own. whole_parameter gathers the whole one from every rank of its grid axis into
  // a new host tensor — a collective on that axis: each of its ranks calls it at the same point;
  // a parameter held whole is copied. set_whole_parameter keeps this rank's block of `whole`
  // (whole shape, host; no collective). kNotFound for an unknown name, kShapeMismatch for a
  // tensor of another shape.
  Shape whole_parameter_shape(const std::string& name) const;
  Tensor whole_parameter(const std::string& name);
  void set_whole_parameter(const std::string& name, const Tensor& whole);
  // The same by parameter index, for any tensor laid out like parameter i's block (its optimizer
  // state): whole_of gathers (a collective on the parameter's grid axis when it is sharded, else a
  // host copy); block_of cuts this rank's block out of a whole host tensor (else returns it).
  bool is_sharded(size_t i) const;
  Tensor whole_of(size_t i, const Tensor& block) const;
  Tensor block_of(size_t i, const Tensor& whole) const;
  Shape whole_shape(size_t i) const;
  // The model checkpoints describe: TrainerOptions::whole_model, else the forward graph.
  const Graph& model_graph() const { return options_.whole_model ? *options_.whole_model : forward_; }
  // The index of model_graph()'s parameter `name` among this rank's, or -1 where this rank holds
  // no part of it (another pipeline stage does).
  int64_t local_parameter(const std::string& name) const;
  // The whole of `t`, a tensor laid out like this rank's part of model parameter `name` (its value
  // or an optimizer state entry), on every rank of the model axes, in host memory: gathered over
  // its tensor axes (whole_of) by the ranks holding it, then broadcast over the pipe axis from the
  // first stage holding it. A collective over the model axes: every rank calls it for the same
  // names in the same order; `t` is not read where this rank holds no part of the parameter.
  Tensor whole_model_tensor(const std::string& name, const Tensor& t) const;
  Device device() const { return options_.device; }
  // Makes every parameter whole for the caller to read or write; a no-op unless the step hook
  // shards parameters between steps (ZeRO stage 3), where it is a collective: every rank calls
  // it at the same point. evaluate() and parameter() call it themselves.
  void gather_parameters();
  // Under local updating the data-parallel replicas train apart between synchronisations; the
  // model they stand for is their average (what a round end of plain averaging makes; for co2
  // with an average in flight, where its merge will put the anchor plus the replicas' mean
  // progress). Makes evaluate(), parameter_value() and whole_parameter() read that average
  // until the next step, a write of a parameter or a restore — this rank's own parameters stay
  // as they are and training goes on from them, so calling it changes nothing in the run;
  // checkpoints keep the own ones too. A collective over the data-parallel ranks (and ZeRO 3's
  // gather first): every rank calls it at the same point. Returns false, doing nothing, where the
  // replicas hold the same parameters anyway (no step hook, DDP, one replica).
  bool average_replicas();
  // For each parameter, the positions in a step's node sequence of the nodes that read it
  // (directly or through a view of it), ascending. The sequence is the step's executor orders in
  // the order it runs them: one order (forward then backward), or under micro-batches each
  // schedule slot's (a chunk's forward or backward on one micro-batch), the slots' positions
  // following one another. step_segments: the first position of each part — forward and
  // backward of the one order, or each slot — ascending, the first 0.
  std::vector<std::vector<size_t>> parameter_reads() const;
  std::vector<size_t> step_segments() const;
  const std::vector<std::string>& parameter_names() const { return param_names_; }
  const Graph& forward_graph() const { return forward_; }
  TrainerStats stats() const;
  optim::Optimizer& optimizer() { return *optimizer_; }
  // Installs (or with nullptr removes) the step hook; the trainer shares its ownership.
  void set_step_hook(std::shared_ptr<StepHook> hook) { hook_ = std::move(hook); }
  const std::shared_ptr<StepHook>& step_hook() const { return hook_; }
  // Tensor parallelism: the grid axes (nullptr without), and whether this rank counts parameter i
  // in the whole model's norms (it holds a block no other tensor rank holds, or is the first
  // holder of a replicated one) — for hooks whose norms must be the model's too.
  const std::shared_ptr<const CommAxes>& axes() const { return options_.axes; }
  const std::vector<bool>& counts_in_norm() const { return counts_in_norm_; }
  // Mutable parameters (parameter_names() order) for hooks that set them, e.g. a broadcast.
  std::vector<Tensor>& mutable_parameters() { return params_; }

  // Checkpoint support (core/checkpoint): read access to the training state, and one call that
  // replaces it. Under ZeRO stage 3 parameters() may be released between steps (their data
  // throws kInvalidState) until gather_parameters(). The RNG state is (seed, step): dropout masks are counter-based on both.
  const std::vector<Tensor>& parameters() const { return params_; }  // in parameter_names() order
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  int64_t step_count() const { return step_; }
  uint64_t seed() const { return options_.seed; }
  // Copies params[i] into parameter i and takes `optimizer` (made for these parameters), then
  // sets the step and the seed. Throws kShapeMismatch / kInvalidArgument before anything
  // changed when a dtype, shape or count differs or step < 0; params and the optimizer's state
  // may be on either device (they are moved to the trainer's, which may fail for memory before
  // anything changed); nothing after that throws (a device copy fails only with the device).
  void restore_state(const std::vector<Tensor>& params, std::unique_ptr<optim::Optimizer> optimizer,
                     int64_t step, uint64_t seed);

 private:
  struct EvalPlan {
    Graph graph;
    std::unique_ptr<Executor> executor;
  };
  // Checks each input against g and binds it into env, on the trainer's device: host inputs of a
  // device trainer are copied, into staged_inputs_ (reused step after step) when `keep`.
  void bind_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs,
                   std::unordered_map<ValueId, Tensor>& env, const char* what, bool keep);
  EvalPlan& eval_plan(int64_t batch, const std::vector<std::string>& outputs);
  // One chunk of the graph under micro-batches (TrainerOptions::chunk_losses): its forward and
  // backward run separately, the backward binding what the forward kept.
  struct Chunk {
    ValueId loss = -1;                // in train_
    std::unique_ptr<Executor> forward, backward;
    std::vector<ValueId> kept;        // forward values its backward reads
    std::vector<std::pair<size_t, ValueId>> grads;  // (parameter index, gradient value)
  };
  void build_chunks(const std::vector<std::vector<NodeId>>& blocks, const std::vector<NodeId>& on_read);
  // step() over one whole batch (one chunk, one micro-batch), and over micro-batches and chunks:
  // each fills grads_ and returns the loss.
  float run_whole(const std::map<std::string, Tensor>& inputs, std::unordered_map<ValueId, Tensor>& env,
                  RunOptions& ro);
  float run_schedule(const std::map<std::string, Tensor>& inputs, RunOptions& ro);
  // Under micro-batches: the schedule a step runs (TrainerOptions::schedule, or each micro-batch
  // forward then backward), checked against the chunks and micro-batches; and the executor of
  // each of its slots (one order, train_exec_, without micro-batches).
  std::vector<PipelineOp> step_schedule() const;
  std::vector<const Executor*> step_executors() const;
  // Waits for the sends the schedule left in flight (all of them when the step fails, quietly).
  void finish_sends(bool quietly);
  // The whole model's gradient L2 norm from this rank's blocks (options_.axes): a collective
  // over the "model" axis, the same on every rank of it.
  double model_grad_norm();
  size_t parameter_index(const std::string& name) const;  // kNotFound naming it
  // The kNonFinite error of a skipped step: the loss, the norm, the gradients holding NaN or Inf.
  // grad_norm: this step's, when it reached the optimizer.
  Error non_finite_error(float loss, std::optional<double> grad_norm) const;

  Graph forward_;
  Graph train_;  // forward + backward
  TrainerOptions options_;
  std::vector<std::string> param_names_;
  std::vector<ValueId> param_ids_;  // in train_
  std::vector<ValueId> grad_ids_;   // in train_ (-1: the loss does not depend on it)
  std::vector<Tensor> params_;
  std::vector<Tensor> replica_average_;  // average_replicas() until the next step or write; else empty
  // What evaluate() and the parameter readers see: the replicas' average while it lasts, else params_.
  const std::vector<Tensor>& read_values() const { return replica_average_.empty() ? params_ : replica_average_; }
  std::vector<Tensor> grads_;
  std::unique_ptr<Executor> train_exec_;
  std::map<std::string, EvalPlan> eval_plans_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  int64_t step_ = 0;
  double last_step_seconds_ = 0.0;
  std::shared_ptr<StepHook> hook_;
  std::unordered_map<ValueId, size_t> grad_index_;  // gradient value in train_ -> parameter index
  std::map<std::string, Tensor> staged_inputs_;      // device copies of step()'s host inputs
  // Tensor parallelism: whether this rank counts parameter i in the model's gradient norm (it
  // holds a block no other rank of the tensor axes holds, or is the first holder of a copy).
  std::vector<bool> counts_in_norm_;
  std::vector<Chunk> chunks_;  // empty: one executor runs the whole step (train_exec_)
  // Pipeline stages: model_graph()'s parameter -> the first pipe rank holding it.
  std::map<std::string, int> pipe_owner_;
  std::vector<UnfinishedSend> unfinished_sends_;
  double pipeline_busy_seconds_ = 0.0, pipeline_bubble_fraction_ = 0.0;
  size_t schedule_peak_bytes_ = 0;  // activations held at once under micro-batches: kept + running
};

}  // namespace cohort
