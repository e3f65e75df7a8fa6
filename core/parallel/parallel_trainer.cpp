// make_grid and make_parallel_trainer: see parallel_trainer.h.
#include "core/parallel/parallel_trainer.h"

#include "core/base/error.h"

namespace cohort::parallel {

namespace coll = transport::coll;

GridAxes make_grid(coll::Communicator& world, const PlanConfig& plan) {
  validate_for_world(plan, world.size());
  const int tensor = plan.tensor.degree();
  const std::vector<int> dims = {world.size() / tensor, plan.tensor.x, plan.tensor.y, plan.tensor.z};
  const std::vector<int> at = coll::grid_coordinates(world.rank(), dims);
  const char* names[] = {"data", "x", "y", "z"};
  GridAxes g;
  g.axes = std::make_shared<CommAxes>();
  g.data_index = at[0];
  g.data_size = dims[0];
  g.position = TensorPosition{at[1], at[2], at[3]};
  // One split per axis: ranks that differ only in that coordinate, ordered by it. Axes of one
  // rank are skipped (every rank skips the same ones, so the splits stay matched).
  for (size_t a = 0; a < dims.size(); ++a) {
    if (a > 0 && dims[a] == 1) continue;
    int color = 0;
    for (size_t b = 0; b < dims.size(); ++b) color = color * dims[b] + (b == a ? 0 : at[b]);
    auto comm = world.split(color, at[a], str_cat(world.name(), "/", names[a]));
    g.axes->set(names[a], comm);
    if (a == 0) g.data = comm;
  }
  // Every tensor rank of this data replica: where the model's gradient norm is summed.
  if (tensor > 1) g.axes->set("tensor", world.split(at[0], world.rank(), str_cat(world.name(), "/tensor")));
  return g;
}

std::unique_ptr<Trainer> make_parallel_trainer(const Graph& model, const optim::OptimizerConfig& config,
                                               TrainerOptions options, const PlanConfig& plan,
                                               std::shared_ptr<coll::Communicator> world,
                                               const DeviceCommFactory& device_comm) {
  COHORT_CHECK(world != nullptr, Status::kInvalidArgument, "parallel trainer: no communicator");
  validate_for_world(plan, world->size());  // before any collective: nothing to undo
  options.activation_checkpointing = plan.activation_checkpointing;
  if (plan.tensor.degree() == 1) {
    auto trainer = std::make_unique<Trainer>(model, config, options);
    DataParallel::attach(*trainer, plan, world, device_comm ? device_comm(*trainer) : nullptr);
    return trainer;
  }
  COHORT_CHECK(options.device == Device::kCpu, Status::kUnsupported,
               "tensor parallelism runs on the host for now: no device communicator per grid axis (TODO(#27))");
  // The model is checked (degrees against widths and heads) before the collectives too: every
  // rank sees the same model and refuses alike.
  (void)shard_for_tensor_parallel(model, plan.tensor, TensorPosition{}, plan.sequence_parallel);
  GridAxes grid = make_grid(*world, plan);
  TensorParallelGraph part = shard_for_tensor_parallel(model, plan.tensor, grid.position, plan.sequence_parallel);
  // One seed per model replica: the blocks are cut from one initialisation, and dropout in the
  // replicated regions must draw the same masks on every tensor rank. The first tensor rank's.
  int64_t seed = static_cast<int64_t>(options.seed);
  grid.axes->at("tensor", "parallel trainer").broadcast(&seed, 1, coll::DataType::kI64, 0)->wait();
  options.seed = static_cast<uint64_t>(seed);
  options.axes = grid.axes;
  options.whole_model = std::make_shared<const Graph>(model);
  options.recompute_nodes = part.recompute;
  options.overlap_collectives = plan.overlap_collectives;
  auto trainer = std::make_unique<Trainer>(part.graph, config, options);
  PlanConfig data_plan = plan;
  data_plan.tensor = TensorGrid{};
  data_plan.sequence_parallel = SequenceParallel::kNone;  // the tensor axes' business, done above
  data_plan.data_parallel = grid.data_size;
  DataParallel::attach(*trainer, data_plan, grid.data, nullptr);
  return trainer;
}

}  // namespace cohort::parallel
