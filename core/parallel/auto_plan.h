// `auto` plans: the layout chosen at start-up from measurements of this job — the communication
// probe (comm_probe.h), the workload estimator (workload.h) and the planner's model (planner.h)
// — and, optionally, a few timed steps of the best predicted layouts. A collective over the
// world: every rank calls it at the same point with the same model, and every rank gets the same
// plan (world rank 0 decides and broadcasts it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/exec/trainer.h"
#include "core/graph/graph.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/plan.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

// The plan to train `global_model` (a single-rank forward graph with a loss, at the global
// batch: every replica's rows together) over `world`: `requested` with its layout fields replaced
// by the fastest predicted layout that fits memory and the requested mode (auto_trials > 0: the
// fastest measured of that many of the best predicted; the trial steps run on zeros with
// `config` and `options`, and leave nothing behind). The result has automatic = false. report,
// when given, receives on world rank 0 the probe's table, the ranked plans and the choice
// (predicted, and measured for the trials). kInvalidPlan when no layout fits (the smallest
// predicted memory named against the limit).
PlanConfig choose_plan(const Graph& global_model, const PlanConfig& requested, transport::coll::Communicator& world,
                       const optim::OptimizerConfig& config, const TrainerOptions& options,
                       std::string* report = nullptr);

// The layout fields of a plan (data_parallel, the pipeline's stages, chunks, micro-batches and
// schedule, tensor x, y, z, zero_stage, activation_checkpointing, sequence_parallel, shard_group) as integers,
// to broadcast; with_layout puts them onto `base` (its pipeline cuts cleared: balanced; automatic
// false: the result is concrete).
constexpr size_t kLayoutFields = 12;
std::vector<int64_t> layout_fields(const PlanConfig& plan);
PlanConfig with_layout(const PlanConfig& base, const int64_t* fields);

// The communication probe's options for training `global_model` (at the global batch B) over
// `world_size` ranks of `num_threads` threads each (0: the process setting): the compute stretch
// measured with the model's own forward and backward at a data-parallel rank's rows (B / world,
// at least 1), as make_step_runner (workload.h) runs them.
ProbeOptions probe_options_for(const Graph& global_model, int world_size, int num_threads);

// A rank's memory limit under `plan` over a world of `world_size` ranks: the plan's
// memory_limit_bytes, else the host's physical memory / world_size.
double memory_limit_per_rank(const PlanConfig& plan, int world_size);

}  // namespace cohort::parallel
