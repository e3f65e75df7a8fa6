// make_grid and make_parallel_trainer: see parallel_trainer.h.
#include "core/parallel/parallel_trainer.h"

#include <algorithm>
#include <map>

#include "core/base/error.h"
#include "core/parallel/auto_plan.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/fence.h"
#include "core/parallel/stage_package.h"
#include "core/parallel/planner.h"
#include "core/parallel/workload.h"

namespace cohort::parallel {

namespace coll = transport::coll;

GridAxes make_grid(coll::Communicator& world, const PlanConfig& plan) {
  validate_for_world(plan, world.size());
  const int model = plan.model_degree();
  const std::vector<int> dims = {world.size() / model, plan.pipeline.stages, plan.tensor.x, plan.tensor.y,
                                 plan.tensor.z};
  const int position = grid_position(plan, world.rank());
  const std::vector<int> at = coll::grid_coordinates(position, dims);
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
  if (model > 1) g.axes->set("model", world.split(at[0], position, str_cat(world.name(), "/model")));
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
  cluster.run_cost = RunCost{};  // nor on the executor runs' cost
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

// The common end of every model-parallel plan: one seed per replica, the trainer of `part`, data
// parallelism over the data axis.
std::unique_ptr<Trainer> finish_model_parallel(const Graph& model, const Graph& part,
                                               const optim::OptimizerConfig& config, TrainerOptions options,
                                               const PlanConfig& plan, const GridAxes& grid, int world_rank) {
  // One seed per model replica: the blocks are cut from one initialisation, and dropout in the
  // replicated regions must draw the same masks on every tensor rank. The seed of the replica's
  // lowest world rank (world rank 0's in the first replica), wherever fence's rank order put it
  // in the grid: with ranks reordered, the first model rank's seed made a different model.
  coll::Communicator& model_axis = grid.axes->at("model", "parallel trainer");
  const int64_t mine[2] = {world_rank, static_cast<int64_t>(options.seed)};
  std::vector<int64_t> all(2 * static_cast<size_t>(model_axis.size()));
  model_axis.all_gather(mine, all.data(), 2, coll::DataType::kI64)->wait();
  size_t lowest = 0;
  for (size_t r = 1; r < all.size() / 2; ++r)
    if (all[2 * r] < all[2 * lowest]) lowest = r;
  options.seed = static_cast<uint64_t>(all[2 * lowest + 1]);
  options.axes = grid.axes;
  options.whole_model = std::make_shared<const Graph>(model);
  options.overlap_collectives = plan.overlap_collectives;
  auto trainer = std::make_unique<Trainer>(part, config, options);
  PlanConfig data_plan = plan;
  data_plan.tensor = TensorGrid{};
  data_plan.pipeline = PipelineConfig{};
  data_plan.sequence_parallel = SequenceParallel::kNone;  // the model axes' business, done above
  data_plan.data_parallel = grid.data_size;
  data_plan.rank_order.clear();  // the data axis is its own communicator
  data_plan.fence = FenceConfig{};
  DataParallel::attach(*trainer, data_plan, grid.data, nullptr);
  return trainer;
}

// World rank 0's part of a pipeline plan: the plan made concrete (fence: from the links), every
// rank's package. Throws what the model or the plan cannot take.
std::vector<StagePackage> make_stage_packages(const Graph& model, const PlanConfig& requested, int world_size,
                                              const TrainerOptions& options, const LinkMatrix* links,
                                              const std::vector<double>& compute_scales) {
  PlanConfig plan = requested;
  const Graph micro = micro_batch_model(model, plan.pipeline.micro_batches);
  // The tensor rewrite of each position (the same nodes in the same order at every position: the
  // cut is chosen on the first and holds for all).
  std::map<std::vector<int>, TensorParallelGraph> parts;
  auto part_at = [&](int x, int y, int z) -> const TensorParallelGraph& {
    const std::vector<int> key = {x, y, z};
    auto it = parts.find(key);
    if (it != parts.end()) return it->second;
    TensorParallelGraph tp;
    if (plan.tensor.degree() > 1)
      tp = shard_for_tensor_parallel(micro, plan.tensor, TensorPosition{x, y, z}, plan.sequence_parallel);
    else
      tp.graph = micro;
    return parts.emplace(key, std::move(tp)).first->second;
  };
  const Graph& first = part_at(0, 0, 0).graph;
  std::vector<double> node_seconds;  // first's, estimated once: by fence here, else before the cut
  std::string report;
  if (plan.fence.enabled) {
    node_seconds = estimate_node_seconds(first);  // first is micro: a fence plan has no tensor axes
    const FenceChoice f = choose_fence(first, node_seconds, *links, compute_scales, plan.fence);
    plan.fence.enabled = false;
    plan.data_parallel = 1;
    plan.pipeline.stages = world_size;
    plan.rank_order = f.rank_order;
    plan.pipeline.cuts.clear();
    for (size_t s = 1; s < f.stages.begin.size(); ++s) plan.pipeline.cuts.push_back(first.nodes()[f.stages.begin[s]].name);
    if (std::any_of(f.keep.begin(), f.keep.end(), [](double k) { return k < 1; })) plan.pipeline.keep = f.keep;
    report = links->describe() + f.describe(first, *links);
  }
  validate_for_world(plan, world_size);
  const PipelineConfig& pp = plan.pipeline;
  const int stage_count = pp.stages * pp.chunks;
  const std::vector<int> dims = {world_size / plan.model_degree(), pp.stages, plan.tensor.x, plan.tensor.y,
                                 plan.tensor.z};
  // Whether the model takes the stages at all, before timing anything.
  (void)cut_pipeline_stages(first, stage_count, std::vector<double>(first.nodes().size(), 1.0), pp.cuts);
  check_plan_memory(model, plan, world_size, options);
  if (node_seconds.empty()) node_seconds = estimate_node_seconds(first);
  const PipelineStages stages = cut_pipeline_stages(first, stage_count, node_seconds, pp.cuts);
  report += stages.describe(first);
  std::vector<StagePackage> out(static_cast<size_t>(world_size));
  std::map<std::vector<int>, PipelineGraph> built;  // by (pipe, x, y, z): data replicas share them
  for (int r = 0; r < world_size; ++r) {
    const std::vector<int> at = coll::grid_coordinates(grid_position(plan, r), dims);
    const std::vector<int> key = {at[1], at[2], at[3], at[4]};
    const TensorParallelGraph& tp = part_at(at[2], at[3], at[4]);
    auto it = built.find(key);
    if (it == built.end()) it = built.emplace(key, build_pipeline_graph(tp.graph, stages, pp.stages, at[1], pp.keep)).first;
    StagePackage& p = out[static_cast<size_t>(r)];
    p.world_size = world_size;
    p.world_rank = r;
    p.layout = layout_fields(plan);
    p.rank_order = plan.rank_order;
    p.pipe_index = at[1];
    p.model = model;
    p.stage = it->second;
    // The nodes backward runs again (sequence parallelism's token gathers) that are this rank's.
    for (const std::string& name : tp.recompute)
      if (p.stage.graph.find(name) >= 0) p.recompute.push_back(name);
    p.stages = report;
  }
  return out;
}

// A pipeline plan (fence included): world rank 0 makes every rank's stages and sends them; each
// rank trains from its package (stage_package.h). Only world rank 0's model is read.
std::unique_ptr<Trainer> make_pipeline_trainer(const Graph& model, const optim::OptimizerConfig& config,
                                               TrainerOptions options, const PlanConfig& plan,
                                               std::shared_ptr<coll::Communicator> world,
                                               const std::function<void(const std::string&)>& on_stages) {
  const int n = world->size();
  // fence: every rank measures (collectives), world rank 0 decides.
  LinkMatrix links;
  std::vector<double> scales;
  if (plan.fence.enabled) {
    COHORT_CHECK(n >= 2, Status::kInvalidPlan, "plan: fence needs at least 2 ranks, the world has ", n);
    links = probe_links(*world);
    scales = measure_compute_scales(*world);
  }
  std::vector<StagePackage> all;
  if (world->rank() == 0) {
    try {
      all = make_stage_packages(model, plan, n, options, &links, scales);
    } catch (const std::exception& e) {  // any failure: the other ranks wait in the exchange
      all.assign(static_cast<size_t>(n), failed_stage_package(e));
    }
  }
  StagePackage mine = exchange_stage_packages(*world, world->rank() == 0 ? &all : nullptr);
  if (world->rank() == 0 && on_stages) on_stages(mine.stages);
  PlanConfig made = with_layout(plan, mine.layout.data());
  made.fence.enabled = false;
  made.rank_order = mine.rank_order;
  validate_for_world(made, n);
  GridAxes grid = make_grid(*world, made);
  COHORT_CHECK(grid.pipe_index == mine.pipe_index, Status::kCorrupt, "stage package for world rank ", world->rank(),
               ": made for pipe rank ", mine.pipe_index, ", the grid puts this rank at ", grid.pipe_index);
  // A parameter several stages hold: an axis of its holders, over which its gradient is summed.
  coll::Communicator& pipe = grid.axes->at("pipe", "parallel trainer");
  for (const auto& [name, ranks] : mine.stage.tied_holders) {
    const bool holds = std::find(ranks.begin(), ranks.end(), grid.pipe_index) != ranks.end();
    auto comm = pipe.split(holds ? 0 : 1, grid.pipe_index, str_cat(pipe.name(), "/tied/", name));
    if (!holds) continue;
    grid.axes->set("tied." + name, comm);
    options.tied_parameters[name] = "tied." + name;
  }
  const PipelineConfig& pp = made.pipeline;
  options.micro_batches = pp.micro_batches;
  options.recompute_nodes = mine.recompute;
  options.chunk_losses = mine.stage.chunk_losses;
  options.schedule = pipeline_schedule(pp.schedule, pp.stages, pp.chunks, pp.micro_batches, grid.pipe_index);
  return finish_model_parallel(mine.model, mine.stage.graph, config, std::move(options), made, grid, world->rank());
}

}  // namespace

std::unique_ptr<Trainer> make_parallel_trainer(const Graph& model, const optim::OptimizerConfig& config,
                                               TrainerOptions options, const PlanConfig& requested,
                                               std::shared_ptr<coll::Communicator> world,
                                               const DeviceCommFactory& device_comm,
                                               const std::function<void(const std::string&)>& on_stages) {
  COHORT_CHECK(world != nullptr, Status::kInvalidArgument, "parallel trainer: no communicator");
  PlanConfig plan = requested;  // the mode's defaults settled for the inner optimizer
  settle_for_optimizer(plan, config.kind == optim::OptimizerKind::kSgd);
  COHORT_CHECK(!plan.automatic, Status::kInvalidPlan,
               "plan: automatic: choose the layout first (choose_plan, cohort_plan_choose): it decides each rank's "
               "share of the batch, and so the model this trainer is built from");
  validate_for_world(plan, world->size());  // before any collective: nothing to undo
  options.activation_checkpointing = plan.activation_checkpointing;
  if (plan.pipeline.stages > 1 || plan.fence.enabled) {
    COHORT_CHECK(options.device == Device::kCpu, Status::kUnsupported,
                 "pipeline parallelism runs on the host for now: no device communicator per grid axis (TODO(#28))");
    return make_pipeline_trainer(model, config, std::move(options), plan, world, on_stages);
  }
  const PipelineConfig& pp = plan.pipeline;
  // The model is checked (micro-batches against the batch, degrees against widths and heads)
  // before the collectives: every rank sees the same model and refuses alike.
  const Graph micro = micro_batch_model(model, pp.micro_batches);
  options.micro_batches = pp.micro_batches;
  if (plan.model_degree() == 1) {
    check_plan_memory(model, plan, world->size(), options);
    auto trainer = std::make_unique<Trainer>(micro, config, options);
    DataParallel::attach(*trainer, plan, world, device_comm ? device_comm(*trainer) : nullptr);
    return trainer;
  }
  COHORT_CHECK(options.device == Device::kCpu, Status::kUnsupported,
               "tensor parallelism runs on the host for now: no device communicator per grid axis (TODO(#27))");
  check_plan_memory(model, plan, world->size(), options);
  GridAxes grid = make_grid(*world, plan);
  TensorParallelGraph tp = shard_for_tensor_parallel(micro, plan.tensor, grid.position, plan.sequence_parallel);
  options.recompute_nodes = tp.recompute;
  return finish_model_parallel(model, tp.graph, config, std::move(options), plan, grid, world->rank());
}

}  // namespace cohort::parallel
