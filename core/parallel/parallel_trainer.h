// One entry point that makes a rank's trainer for a parallel plan: the grid's axes split from the
// world, the model rewritten for this rank's tensor position (tensor_parallel.h), and data
// parallelism (data_parallel.h) attached over the data axis in the plan's mode — sync DDP, local
// SGD or CO2, whose outer step then takes its norms over the whole model (the tensor axis).
#pragma once

#include <functional>
#include <memory>

#include "core/exec/trainer.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/plan.h"
#include "core/parallel/tensor_parallel.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

// The axes of this rank in the plan's grid (data x pipe x X x Y x Z, row-major: z fastest).
struct GridAxes {
  // "data"; "model" (every rank of this model replica: pipeline stages x tensor grid) when it
  // has more than one; "pipe" and "pipe_grad" (two communicators of the same ranks: activations
  // and gradients) with more than one stage; each tensor axis of size > 1.
  std::shared_ptr<CommAxes> axes;
  std::shared_ptr<transport::coll::Communicator> data;
  int data_index = 0, data_size = 1;  // this rank's coordinate on the data axis, and its size
  int pipe_index = 0;                 // and on the pipe axis
  TensorPosition position;
};

// Splits `world` into the plan's axes (collective over world: every rank calls it in the same
// order). The plan must fit the world (validate_for_world).
GridAxes make_grid(transport::coll::Communicator& world, const PlanConfig& plan);

// Validates the plan against the world (kInvalidPlan / kUnsupported, before any collective) and
// the model (kInvalidPlan naming the node), then builds this rank's trainer: the model at the
// micro-batch size, rewritten for its tensor position when the plan's tensor degree is above 1,
// cut into pipeline stages when it has more than one (world rank 0 chooses the cuts and
// `on_stages`, when given, is called there with them, to print), its parameters the blocks of the
// single-rank initialisation, data parallelism attached over the data axis (rank 0 of each
// data group broadcasts its parameters). Collective over world. device_comm, when given, is
// called once the trainer exists (it has refused a device it cannot use by then) for
// DataParallel::attach's device communicator; tensor parallelism runs on the host only. What the
// plan leaves to the mode's defaults is first settled for config's optimizer (settle_for_optimizer).
using DeviceCommFactory = std::function<std::shared_ptr<transport::coll::Communicator>(const Trainer&)>;
std::unique_ptr<Trainer> make_parallel_trainer(const Graph& model, const optim::OptimizerConfig& config,
                                               TrainerOptions options, const PlanConfig& plan,
                                               std::shared_ptr<transport::coll::Communicator> world,
                                               const DeviceCommFactory& device_comm = nullptr,
                                               const std::function<void(const std::string&)>& on_stages = nullptr);

}  // namespace cohort::parallel
