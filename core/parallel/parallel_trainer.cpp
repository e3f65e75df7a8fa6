// make_grid and make_parallel_trainer: see parallel_trainer.h.
#include "core/parallel/parallel_trainer.h"

#include "core/base/error.h"
#include "core/parallel/auto_plan.h"
#include "core/parallel/planner.h"
#include "core/parallel/workload.h"

namespace cohort::parallel {

namespace coll = transport::coll;

GridAxes make_grid(coll::Communicator& world, const PlanConfig& plan) {
  validate_for_world(plan, world.size());
  const int model = plan.model_degree();
  const std::vector<int> dims = {world.size() / model, plan.pipeline.stages, plan.tensor.x, plan.tensor.y,
                                 plan.tensor.z};
  const std::vector<int> at = coll::grid_coordinates(world.rank(), dims);
  const char* names[] = {"data", "pipe", "x", "y", "z"};
  GridAxes g;
  g.axes = std::make_shared<CommAxes>();
  g.data_index = at[0];
  g.data_size = dims[0];
  g.pipe_index = at[1];
  g.position = TensorPosition{at[2], at[3], at[4]};
  // One split per axis: ranks that differ only in that coordinate, ordered by it. Axes of one
  // rank are skipped (every rank skips the same ones, so the splits stay matched).
  for (size_t a = 0; a < dims.size(); ++a) {
    if (a > 0 && dims[a] == 1) continue;
    int color = 0;
    for (size_t b = 0; b < dims.size(); ++b) color = color * dims[b] + (b == a ? 0 : at[b]);
    auto comm = world.split(color, at[a], str_cat(world.name(), "/", names[a]));
    g.axes->set(names[a], comm);
    if (a == 0) g.data = comm;
    // The gradients' way back between stages: the same ranks, a second communicator, so that
    // the two directions between one pair of ranks never share an order.
    if (a == 1) g.axes->set("pipe_grad", world.split(color, at[a], str_cat(world.name(), "/pipe_grad")));
  }
  // Every rank of this model replica: where the model's gradient norm is summed.
  if (model > 1) g.axes->set("model", world.split(at[0], world.rank(), str_cat(world.name(), "/model")));
  return g;
}

namespace {

// The model at the micro-batch size: the batch (dim 0 of its inputs) cut into micro_batches.
Graph micro_batch_model(const Graph& model, int micro_batches) {
  if (micro_batches == 1) return model;
  const std::vector<ValueId> inputs = model.inputs();
  COHORT_CHECK(!inputs.empty() && !model.value(inputs[0]).type.shape.empty(), Status::kInvalidPlan,
               "plan: micro_batches = ", micro_batches, " but the model has no batched input");
  const int64_t batch = model.value(inputs[0]).type.shape[0];
  COHORT_CHECK(batch % micro_batches == 0, Status::kInvalidPlan, "plan: micro_batches = ", micro_batches,
               " does not divide the batch ", batch);
  return model.with_batch(batch / micro_batches);
}

// A plan the planner predicts not to fit a rank's memory is refused here, before any rank starts
// (every rank predicts alike: the same model and plan, no timing). The planner prices the model
// at the global batch: this rank's rows times the replicas and the Z slices. On the CUDA device
// only when the plan gives a limit (the default is the host's memory); a plan the planner cannot
// price (all-to-all sequence parallelism) or the model cannot take is left to the builders.
void check_plan_memory(const Graph& model, const PlanConfig& plan, int world_size, const TrainerOptions& options) {
  if (options.device != Device::kCpu && plan.memory_limit_bytes <= 0) return;
  const std::vector<ValueId> inputs = model.inputs();
  if (inputs.empty() || model.value(inputs[0]).type.shape.empty()) return;
  const int64_t rows = model.value(inputs[0]).type.shape[0];
  const int64_t global = rows * (world_size / plan.model_degree()) * plan.tensor.z;
  ClusterSpec cluster;
  cluster.world = world_size;
  cluster.ranks_per_node = world_size;
  cluster.memory_bytes_per_rank = memory_limit_per_rank(plan, world_size);
  // Memory does not depend on the links: a nominal table for the prediction's time, unused here.
  cluster.comm = ring_comm_table(LinkSpec{1e9, 1e-5}, LinkSpec{1e9, 1e-5}, "nominal");
  WorkloadOptions w;
  w.measure = false;
  PlanPrediction p;
  try {
    p = predict_plan(model.with_batch(global), cluster, plan, w);
  } catch (const Error& e) {
    // A plan the model cannot take: the builders below refuse it in their own words.
    if (e.status() == Status::kUnsupported || e.status() == Status::kInvalidPlan) return;
    throw;
  }
  COHORT_CHECK(p.fits, Status::kInvalidPlan, "plan: ", p.describe(), " is predicted to need ", p.memory_bytes / (1 << 20),
               " MiB per rank (parameters, gradients, optimizer state and activations in flight), above the ",
               cluster.memory_bytes_per_rank / (1 << 20), " MiB a rank may use (memory_limit_bytes",
               plan.memory_limit_bytes > 0 ? "" : "; 0: the host's memory shared by the world's ranks",
               "): use ZeRO, activation checkpointing, more stages or tensor ranks, or fewer micro-batches in flight");
}

}  // namespace

std::unique_ptr<Trainer> make_parallel_trainer(const Graph& model, const optim::OptimizerConfig& config,
                                               TrainerOptions options, const PlanConfig& plan,
                                               std::shared_ptr<coll::Communicator> world,
                                               const DeviceCommFactory& device_comm,
                                               const std::function<void(const std::string&)>& on_stages) {
  COHORT_CHECK(world != nullptr, Status::kInvalidArgument, "parallel trainer: no communicator");
  COHORT_CHECK(!plan.automatic, Status::kInvalidPlan,
               "plan: automatic: choose the layout first (choose_plan, cohort_plan_choose): it decides each rank's "
               "share of the batch, and so the model this trainer is built from");
  validate_for_world(plan, world->size());  // before any collective: nothing to undo
  options.activation_checkpointing = plan.activation_checkpointing;
  const PipelineConfig& pp = plan.pipeline;
  // The model is checked (micro-batches against the batch, degrees against widths and heads,
  // stages against cut points) before the collectives too: every rank sees the same model and
  // refuses alike.
  const Graph micro = micro_batch_model(model, pp.micro_batches);
  options.micro_batches = pp.micro_batches;
  if (plan.model_degree() == 1) {
    check_plan_memory(model, plan, world->size(), options);
    auto trainer = std::make_unique<Trainer>(micro, config, options);
    DataParallel::attach(*trainer, plan, world, device_comm ? device_comm(*trainer) : nullptr);
    return trainer;
  }
  COHORT_CHECK(options.device == Device::kCpu, Status::kUnsupported,
               "tensor and pipeline parallelism run on the host for now: no device communicator per grid axis "
               "(TODO(#27), TODO(#28))");
  // The stages are checked on the graph they will cut (the tensor rewrite's, alike at every
  // position) with uniform costs: whether the model takes them does not depend on the costs, so
  // world rank 0's timed cut below cannot fail where the others would not.
  const Graph first_part = plan.tensor.degree() > 1
                               ? shard_for_tensor_parallel(micro, plan.tensor, TensorPosition{}, plan.sequence_parallel).graph
                               : Graph();
  const int stage_count = pp.stages * pp.chunks;
  if (pp.stages > 1) {
    const Graph& g = plan.tensor.degree() > 1 ? first_part : micro;
    (void)cut_pipeline_stages(g, stage_count, std::vector<double>(g.nodes().size(), 1.0), pp.cuts);
  }
  check_plan_memory(model, plan, world->size(), options);
  GridAxes grid = make_grid(*world, plan);
  Graph part = micro;
  if (plan.tensor.degree() > 1) {
    TensorParallelGraph tp = shard_for_tensor_parallel(micro, plan.tensor, grid.position, plan.sequence_parallel);
    part = std::move(tp.graph);
    options.recompute_nodes = tp.recompute;
  }
  if (pp.stages > 1) {
    // World rank 0 chooses the cuts (its workload estimate; the tensor rewrite gives every rank
    // the same nodes in the same order), everyone takes them.
    std::vector<int64_t> begin(static_cast<size_t>(stage_count), 0);
    std::string failure;  // world rank 0's, sent as begin[0] = -1: every rank fails, none waits
    if (world->rank() == 0) {
      try {
        const PipelineStages stages = cut_pipeline_stages(part, stage_count, estimate_node_seconds(part), pp.cuts);
        for (size_t s = 0; s < begin.size(); ++s) begin[s] = static_cast<int64_t>(stages.begin[s]);
        if (on_stages) on_stages(stages.describe(part));
      } catch (const std::exception& e) {
        failure = e.what();
        begin[0] = -1;
      }
    }
    world->broadcast(begin.data(), begin.size(), coll::DataType::kI64, 0)->wait();
    COHORT_CHECK(begin[0] == 0, Status::kInvalidPlan, "pipeline: world rank 0 could not cut the stages",
                 failure.empty() ? std::string() : ": " + failure);
    PipelineStages stages;
    for (int64_t b : begin) stages.begin.push_back(static_cast<size_t>(b));
    PipelineGraph pg = build_pipeline_graph(part, stages, pp.stages, grid.pipe_index);
    // A parameter several stages hold: an axis of its holders, over which its gradient is summed.
    coll::Communicator& pipe = grid.axes->at("pipe", "parallel trainer");
    for (const auto& [name, ranks] : pg.tied_holders) {
      const bool holds = std::find(ranks.begin(), ranks.end(), grid.pipe_index) != ranks.end();
      auto comm = pipe.split(holds ? 0 : 1, grid.pipe_index, str_cat(pipe.name(), "/tied/", name));
      if (!holds) continue;
      grid.axes->set("tied." + name, comm);
      options.tied_parameters[name] = "tied." + name;
    }
    // The nodes backward runs again (sequence parallelism's token gathers) that are this rank's.
    std::vector<std::string> recompute;
    for (const std::string& name : options.recompute_nodes)
      if (pg.graph.find(name) >= 0) recompute.push_back(name);
    options.recompute_nodes = recompute;
    options.chunk_losses = pg.chunk_losses;
    options.schedule = pipeline_schedule(pp.schedule, pp.stages, pp.chunks, pp.micro_batches, grid.pipe_index);
    part = std::move(pg.graph);
  }
  // One seed per model replica: the blocks are cut from one initialisation, and dropout in the
  // replicated regions must draw the same masks on every tensor rank. The first model rank's.
  int64_t seed = static_cast<int64_t>(options.seed);
  grid.axes->at("model", "parallel trainer").broadcast(&seed, 1, coll::DataType::kI64, 0)->wait();
  options.seed = static_cast<uint64_t>(seed);
  options.axes = grid.axes;
  options.whole_model = std::make_shared<const Graph>(model);
  options.overlap_collectives = plan.overlap_collectives;
  auto trainer = std::make_unique<Trainer>(part, config, options);
  PlanConfig data_plan = plan;
  data_plan.tensor = TensorGrid{};
  data_plan.pipeline = PipelineConfig{};
  data_plan.sequence_parallel = SequenceParallel::kNone;  // the model axes' business, done above
  data_plan.data_parallel = grid.data_size;
  DataParallel::attach(*trainer, data_plan, grid.data, nullptr);
  return trainer;
}

}  // namespace cohort::parallel
