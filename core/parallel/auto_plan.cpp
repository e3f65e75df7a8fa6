// choose_plan: see auto_plan.h.
#include "core/parallel/auto_plan.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/base/error.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/parallel_trainer.h"
#include "core/parallel/planner.h"

namespace cohort::parallel {

namespace coll = transport::coll;

std::vector<int64_t> layout_fields(const PlanConfig& p) {
  return {p.data_parallel,  p.pipeline.stages, p.pipeline.chunks, p.pipeline.micro_batches,
          static_cast<int64_t>(p.pipeline.schedule), p.tensor.x, p.tensor.y, p.tensor.z, p.zero_stage,
          p.activation_checkpointing ? 1 : 0, static_cast<int64_t>(p.sequence_parallel), p.shard_group};
}

PlanConfig with_layout(const PlanConfig& base, const int64_t* f) {
  PlanConfig p = base;
  p.data_parallel = static_cast<int>(f[0]);
  p.pipeline.stages = static_cast<int>(f[1]);
  p.pipeline.chunks = static_cast<int>(f[2]);
  p.pipeline.micro_batches = static_cast<int>(f[3]);
  p.pipeline.schedule = static_cast<PipelineSchedule>(f[4]);
  p.pipeline.cuts.clear();
  p.tensor.x = static_cast<int>(f[5]);
  p.tensor.y = static_cast<int>(f[6]);
  p.tensor.z = static_cast<int>(f[7]);
  p.zero_stage = static_cast<int>(f[8]);
  p.activation_checkpointing = f[9] != 0;
  p.sequence_parallel = static_cast<SequenceParallel>(f[10]);
  p.shard_group = static_cast<int>(f[11]);
  p.automatic = false;  // every layout field is set: a concrete plan
  return p;
}

ProbeOptions probe_options_for(const Graph& global_model, int world_size, int num_threads) {
  const int64_t batch = global_model.value(global_model.inputs().at(0)).type.shape.at(0);
  const int64_t rows = std::max<int64_t>(1, batch / std::max(1, world_size));
  ProbeOptions o;
  o.step = make_step_runner(rows == batch ? global_model : global_model.with_batch(rows), num_threads);
  o.step_name = str_cat("the model's forward and backward (", rows, rows == 1 ? " row)" : " rows)");
  return o;
}

double memory_limit_per_rank(const PlanConfig& plan, int world_size) {
  if (plan.memory_limit_bytes > 0) return plan.memory_limit_bytes;
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  return pages > 0 && page > 0 ? pages * page / std::max(1, world_size) : 0.0;
}

namespace {

std::string bytes_text(double bytes) {
  char out[32];
  if (bytes >= (1 << 20)) std::snprintf(out, sizeof out, "%.1f MiB", bytes / (1 << 20));
  else std::snprintf(out, sizeof out, "%.0f bytes", bytes);
  return out;
}

// The median of 3 steps (after one) of the slowest rank, under `plan`, on zeros.
double time_trial(const Graph& global_model, const PlanConfig& plan, coll::Communicator& world,
                  const std::shared_ptr<coll::Communicator>& comm, const optim::OptimizerConfig& config,
                  const TrainerOptions& options) {
  const int64_t batch = global_model.value(global_model.inputs().at(0)).type.shape.at(0);
  const int data = world.size() / plan.model_degree();
  const Graph rank_model = global_model.with_batch(batch / (data * plan.tensor.z));
  auto trainer = make_parallel_trainer(rank_model, config, options, plan, comm);
  std::map<std::string, Tensor> zeros;
  for (ValueId v : rank_model.inputs()) {
    const Value& x = rank_model.value(v);
    zeros[x.name] = Tensor::zeros(x.type.shape, x.type.dtype);
  }
  std::vector<double> times;
  for (int s = 0; s < 4; ++s) {
    world.barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    try {
      trainer->step(zeros);
    } catch (const Error& e) {
      if (e.status() != Status::kNonFinite) throw;  // a skipped step is still a step's time
    }
    float seconds = static_cast<float>(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    world.all_reduce(&seconds, 1, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
    if (s > 0) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

PlanConfig choose_plan(const Graph& global_model, const PlanConfig& requested, coll::Communicator& world,
                       const optim::OptimizerConfig& config, const TrainerOptions& options, std::string* report) {
  validate(requested);
  COHORT_CHECK(!global_model.inputs().empty() && !global_model.value(global_model.inputs()[0]).type.shape.empty(),
               Status::kInvalidPlan, "auto plan: the model has no batched input");
  const CommTable table = probe_communication(world, probe_options_for(global_model, world.size(), options.num_threads));
  ClusterSpec cluster;
  cluster.world = world.size();
  cluster.ranks_per_node = world.size();  // one host: the probe measured its links
  cluster.memory_bytes_per_rank = memory_limit_per_rank(requested, world.size());
  cluster.cores_per_node = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cluster.threads_per_rank = options.num_threads > 0 ? options.num_threads : 1;
  cluster.comm = table;
  const size_t wanted = static_cast<size_t>(std::max(1, requested.auto_trials));
  std::vector<int64_t> fields;
  std::vector<double> predicted;
  double least_memory = INFINITY;
  std::string text;
  if (world.rank() == 0) {
    WorkloadOptions w;
    w.num_threads = options.num_threads;
    // Every layout priced under the requested data-parallel mode (its shard groups the planner's).
    const std::vector<PlanPrediction> ranked = rank_plans(global_model, cluster, w, requested);
    for (const PlanPrediction& p : ranked) {
      least_memory = std::min(least_memory, p.memory_bytes);
      if (!p.fits || predicted.size() >= wanted) continue;
      const std::vector<int64_t> f = layout_fields(p.plan);
      try {  // the requested mode may refuse a layout's ZeRO stage
        validate_for_world(with_layout(requested, f.data()), world.size());
      } catch (const Error&) {
        continue;
      }
      fields.insert(fields.end(), f.begin(), f.end());
      predicted.push_back(p.step_seconds());
    }
    text = str_cat("auto plan: communication ", table.source, "\n", format_plan_table(ranked, 12));
  }
  // Every rank gets the candidates (and, when there is none, the numbers for the same error).
  int64_t head[2] = {static_cast<int64_t>(predicted.size()),
                     std::isfinite(least_memory) ? static_cast<int64_t>(least_memory) : int64_t{-1}};
  world.broadcast(head, 2, coll::DataType::kI64, 0)->wait();
  COHORT_CHECK(head[0] > 0, Status::kInvalidPlan, "auto plan: no layout of the model fits ", world.size(),
               " ranks with ", bytes_text(cluster.memory_bytes_per_rank), " each (memory_limit_bytes) under mode ",
               mode_name(requested.mode),
               head[1] >= 0 ? str_cat(" (the smallest needs ", bytes_text(static_cast<double>(head[1])), " per rank)") : "");
  fields.resize(static_cast<size_t>(head[0]) * kLayoutFields);
  world.broadcast(fields.data(), fields.size(), coll::DataType::kI64, 0)->wait();
  size_t best = 0;
  if (requested.auto_trials > 0 && head[0] > 1) {
    // Each candidate's trainer is built and timed by every rank: a sub-communicator of the
    // world per trial (the trainer's axes are split from it and go with it).
    double fastest = INFINITY;
    for (size_t k = 0; k < static_cast<size_t>(head[0]); ++k) {
      const PlanConfig plan = with_layout(requested, fields.data() + k * kLayoutFields);
      auto comm = world.split(0, world.rank(), str_cat(world.name(), "/trial", k));
      const double measured = time_trial(global_model, plan, world, comm, config, options);
      if (measured < fastest) {
        fastest = measured;
        best = k;
      }
      if (world.rank() == 0) {
        char line[160];
        std::snprintf(line, sizeof line, "auto plan: trial %zu: predicted %.1f ms, measured %.1f ms\n", k + 1,
                      predicted[k] * 1e3, measured * 1e3);
        text += line;
      }
    }
  }
  PlanConfig chosen = with_layout(requested, fields.data() + best * kLayoutFields);
  chosen.automatic = false;
  if (world.rank() == 0 && report != nullptr) {
    char line[96];
    std::snprintf(line, sizeof line, " (predicted %.1f ms a step)", predicted[best] * 1e3);
    PlanPrediction named;
    named.plan = chosen;
    *report = text + "auto plan: chose " + named.describe() + line + "\n";
  }
  return chosen;
}

}  // namespace cohort::parallel
