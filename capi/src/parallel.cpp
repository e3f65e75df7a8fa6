// cohort_plan_* and the data-parallel trainer entry points: a plan handle is a validated
// parallel::PlanConfig; a data-parallel trainer is an ordinary cohort_trainer whose Trainer
// carries a parallel::DataParallel step hook (so cohort_trainer_step needs no special case).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/parallel/auto_plan.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/device_comm.h"
#include "core/parallel/parallel_trainer.h"
#include "transport/bootstrap/store.h"
#include "transport/coll/communicator.h"

using namespace cohort;
using namespace cohort::capi;

struct cohort_plan {
  parallel::PlanConfig config;
};

namespace {
constexpr const char* kPlan = "plan";

// A comma-separated list (cohort_plan_options.pipeline_cuts, pipeline_keep); NULL or "" = none.
std::vector<std::string> split_list(const char* text, const char* field, const char* item) {
  std::vector<std::string> items;
  if (text == nullptr || text[0] == '\0') return items;
  const std::string all = text;
  for (size_t begin = 0;;) {
    const size_t end = all.find(',', begin);
    items.push_back(all.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    COHORT_CHECK(!items.back().empty(), Status::kInvalidPlan, "plan: ", field, " '", all, "' has an empty ", item,
                 " (cut ", items.size(), ")");
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return items;
}

std::vector<double> parse_keep(const char* text) {
  std::vector<double> keep;
  for (const std::string& item : split_list(text, "pipeline keep", "share")) {
    size_t used = 0;
    double k = 0;
    try {
      k = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    COHORT_CHECK(used == item.size(), Status::kInvalidPlan, "plan: pipeline keep '", text, "': '", item,
                 "' is not a number");
    keep.push_back(k);  // validate() checks the range and the count
  }
  return keep;
}

parallel::PlanConfig to_config(const cohort_plan_options& o) {
  const bool has_noise = o.size >= offsetof(cohort_plan_options, inner_noise_scaling) + sizeof(int32_t);
  const bool has_overlap = o.size >= offsetof(cohort_plan_options, overlap_steps) + sizeof(int64_t);
  const bool has_bits = o.size >= offsetof(cohort_plan_options, outer_bits) + sizeof(int32_t);
  const bool has_tensor = o.size >= offsetof(cohort_plan_options, tensor_overlap_off) + sizeof(int32_t);
  const bool has_checkpointing = o.size >= offsetof(cohort_plan_options, activation_checkpointing) + sizeof(int32_t);
  const bool has_sequence = o.size >= offsetof(cohort_plan_options, sequence_parallel) + sizeof(int32_t);
  const bool has_pipeline = o.size >= offsetof(cohort_plan_options, pipeline_cuts) + sizeof(const char*);
  const bool has_auto = o.size >= offsetof(cohort_plan_options, memory_limit_bytes) + sizeof(double);
  const bool has_fence = o.size >= offsetof(cohort_plan_options, pipeline_keep) + sizeof(const char*);
  const bool has_groups = o.size >= offsetof(cohort_plan_options, shard_group) + sizeof(int32_t);
  const bool has_keep = o.size >= offsetof(cohort_plan_options, grad_keep) + sizeof(double);
  const bool has_fragments = o.size >= offsetof(cohort_plan_options, outer_fragments) + sizeof(int32_t);
  const bool has_inner_state = o.size >= offsetof(cohort_plan_options, average_inner_state) + sizeof(int32_t);
  parallel::PlanConfig c;
  if (enum_int(o.preset) != COHORT_PRESET_NONE) {
    int p = enum_int(o.preset);
    COHORT_CHECK(p >= COHORT_PRESET_DDP && p <= COHORT_PRESET_CO2, Status::kInvalidArgument, "options->preset ", p,
                 " is not a cohort_plan_preset");
    c = parallel::preset(static_cast<parallel::Preset>(p - 1), o.tau);
    c.outer_as_preset = true;  // co2's is settled for the inner optimizer (settle_for_optimizer)
  } else {
    c.mode = static_cast<parallel::SyncMode>(enum_int(o.mode));
    c.outer.lr = o.outer_lr;
    c.outer.momentum = o.outer_momentum;
    c.outer.nesterov = o.outer_nesterov != 0;
    c.outer.staleness_penalty = o.staleness_penalty != 0;
    c.outer.penalty_constant = o.penalty_constant;
    c.outer.clip_threshold = o.clip_threshold;
  }
  c.tau = o.tau;
  c.data_parallel = o.data_parallel;
  c.zero_stage = o.zero_stage;
  COHORT_CHECK(o.bucket_bytes > 0, Status::kInvalidPlan, "plan: bucket_bytes = ", o.bucket_bytes, " must be > 0");
  c.bucket_bytes = static_cast<size_t>(o.bucket_bytes);
  c.inner_noise_scaling = has_noise && o.inner_noise_scaling != 0;
  if (has_overlap && o.overlap_steps == -1) c.overlap_auto = true;       // starting from 1
  else if (has_overlap && o.overlap_steps != 0) c.overlap = o.overlap_steps;  // else the default, 1
  if (has_tensor) {
    c.tensor.x = o.tensor_x;
    c.tensor.y = o.tensor_y;
    c.tensor.z = o.tensor_z;
    c.overlap_collectives = o.tensor_overlap_off == 0;
  }
  if (has_checkpointing) c.activation_checkpointing = o.activation_checkpointing != 0;
  if (has_sequence) c.sequence_parallel = static_cast<parallel::SequenceParallel>(o.sequence_parallel);  // validated
  if (has_pipeline) {
    // 0 means the default (1) for the counts; validate() names the field of a negative one.
    if (o.pipeline_stages != 0) c.pipeline.stages = o.pipeline_stages;
    if (o.pipeline_chunks != 0) c.pipeline.chunks = o.pipeline_chunks;
    if (o.micro_batches != 0) c.pipeline.micro_batches = o.micro_batches;
    c.pipeline.schedule = static_cast<parallel::PipelineSchedule>(o.pipeline_schedule);  // validated
    c.pipeline.cuts = split_list(o.pipeline_cuts, "pipeline_cuts", "name");
  }
  if (has_auto) {
    c.automatic = o.automatic != 0;
    c.auto_trials = o.auto_trials;                // validated: [0, 64]
    c.memory_limit_bytes = o.memory_limit_bytes;  // validated: >= 0
  }
  if (has_fence) {
    c.fence.enabled = o.fence != 0;
    c.fence.compression = o.fence_compression_off == 0;
    COHORT_CHECK(o.fence_min_keep >= 0 && o.fence_min_keep <= 1, Status::kInvalidPlan, "plan: fence_min_keep = ",
                 o.fence_min_keep, " must be in [0, 1] (0: the default, ", parallel::FenceConfig().min_keep, ")");
    if (o.fence_min_keep > 0) c.fence.min_keep = o.fence_min_keep;
    c.pipeline.keep = parse_keep(o.pipeline_keep);
  }
  if (has_fragments && o.outer_fragments != 0) c.outer_fragments = o.outer_fragments;  // 0: the default, 1
  if (has_groups && o.shard_group != 0) c.shard_group = o.shard_group;  // 0: the default, 1
  if (has_keep && o.grad_keep != 0) c.grad_keep = o.grad_keep;  // 0: the default, 1
  c.average_inner_state = has_inner_state && o.average_inner_state != 0;
  // 0 (or a caller built before the field): the mode's default, known once mode and shard_group are.
  c.outer_bits_as_default = !has_bits || o.outer_bits == 0;
  c.outer_bits = c.outer_bits_as_default ? parallel::default_outer_bits(c) : o.outer_bits;
  parallel::validate(c);
  return c;
}

// The inverse of to_config for the layout fields (cohort_plan_choose's result): a chosen plan's
// layout written over the caller's options; the rest of them stay as given.
void write_layout(const parallel::PlanConfig& c, cohort_plan_options& o) {
  o.data_parallel = c.data_parallel;
  o.zero_stage = c.zero_stage;
  o.tensor_x = c.tensor.x;
  o.tensor_y = c.tensor.y;
  o.tensor_z = c.tensor.z;
  o.activation_checkpointing = c.activation_checkpointing ? 1 : 0;
  o.sequence_parallel = static_cast<int32_t>(c.sequence_parallel);
  o.pipeline_stages = c.pipeline.stages;
  o.pipeline_chunks = c.pipeline.chunks;
  o.micro_batches = c.pipeline.micro_batches;
  o.pipeline_schedule = static_cast<int32_t>(c.pipeline.schedule);
  o.pipeline_cuts = nullptr;  // balanced: the planner priced the balanced cuts
  o.automatic = 0;
  if (o.size >= offsetof(cohort_plan_options, pipeline_keep) + sizeof(const char*)) {
    o.fence = 0;
    o.pipeline_keep = nullptr;
  }
  // Shard groups (the planner's under localsgd / co2 where memory needs ZeRO): a caller whose
  // options predate the field cannot hold them.
  if (o.size >= offsetof(cohort_plan_options, shard_group) + sizeof(int32_t)) {
    o.shard_group = c.shard_group;
  } else {
    COHORT_CHECK(c.shard_group <= 1, Status::kInvalidPlan, "cohort_plan_choose: the chosen layout runs ZeRO in shard "
                 "groups of ", c.shard_group, " ranks, which these options (size ", o.size, ", before shard_group) "
                 "cannot hold: build against this header, or give memory_limit_bytes room for a layout without ZeRO");
  }
}

// Text into a caller's buffer, cut to fit and NUL-terminated; *needed_out the whole size.
void copy_text_truncated(const std::string& text, char* buf, size_t buf_size, size_t* needed_out) {
  if (needed_out) *needed_out = text.size() + 1;
  if (buf == nullptr || buf_size == 0) return;
  const size_t n = std::min(text.size(), buf_size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

parallel::DataParallel& parallel_of(const cohort_trainer* t) {
  const cohort_trainer& h = *checked(t, "trainer", "trainer");
  auto* dp = dynamic_cast<parallel::DataParallel*>(h.trainer->step_hook().get());
  COHORT_CHECK(dp != nullptr, Status::kInvalidState,
               "the trainer is not data-parallel (create it with cohort_trainer_create_parallel)");
  return *dp;
}

// The caller's checkpoint values without the "parallel.*" entries of the outer state.
checkpoint::CheckpointExtra without_outer_state(checkpoint::CheckpointExtra extra) {
  auto strip = [](auto& map) {
    for (auto it = map.begin(); it != map.end();) it = it->first.rfind("parallel.", 0) == 0 ? map.erase(it) : ++it;
  };
  strip(extra.ints);
  strip(extra.blobs);
  strip(extra.tensors);
  return extra;
}

}  // namespace

namespace cohort::capi {

checkpoint::CheckpointExtra checkpoint_extra_for_save(const cohort_trainer& t) {
  checkpoint::CheckpointExtra extra = t.checkpoint_extra;  // a snapshot; never kept in the handle
  if (auto* dp = dynamic_cast<parallel::DataParallel*>(t.trainer->step_hook().get())) dp->save_state(extra);
  return extra;
}

void apply_loaded_checkpoint_extra(cohort_trainer& t, checkpoint::CheckpointExtra extra) {
  if (auto* dp = dynamic_cast<parallel::DataParallel*>(t.trainer->step_hook().get())) dp->apply_checkpoint(extra);
  t.checkpoint_extra = without_outer_state(std::move(extra));
}

}  // namespace cohort::capi

extern "C" {

COHORT_API cohort_plan_options cohort_plan_options_default(void) {
  cohort_plan_options o;
  std::memset(&o, 0, sizeof o);
  o.size = sizeof o;
  o.preset = COHORT_PRESET_NONE;
  o.mode = COHORT_SYNC_DDP;
  o.tau = 1;
  o.outer_lr = 1.0;
  o.penalty_constant = 1.0;
  o.bucket_bytes = 25 << 20;
  o.tensor_x = o.tensor_y = o.tensor_z = 1;
  o.pipeline_stages = o.pipeline_chunks = o.micro_batches = 1;
  o.pipeline_schedule = COHORT_PIPELINE_1F1B;
  o.pipeline_cuts = nullptr;
  o.pipeline_keep = nullptr;
  return o;
}

COHORT_API cohort_status cohort_plan_create(const cohort_plan_options* options, cohort_plan** plan_out) {
  return guard("cohort_plan_create", [&] {
    check_not_null(options, "options");
    check_not_null(plan_out, "plan_out");
    check_struct_size(options->size, offsetof(cohort_plan_options, bucket_bytes) + sizeof(int64_t), "options");
    parallel::PlanConfig c = to_config(*options);
    cohort_plan* h = make_handle<cohort_plan>(kPlan);
    h->config = c;
    *plan_out = h;
  });
}

COHORT_API cohort_status cohort_plan_destroy(cohort_plan* plan) {
  return guard("cohort_plan_destroy", [&] { destroy_handle(plan, kPlan, "plan"); });
}

COHORT_API cohort_status cohort_trainer_create_parallel(const cohort_graph* graph, const cohort_optimizer* optimizer,
                                                        const cohort_plan* plan, cohort_comm* comm,
                                                        const cohort_trainer_options* options,
                                                        cohort_trainer** trainer_out) {
  return guard("cohort_trainer_create_parallel", [&] {
    const optim::OptimizerConfig& oc = checked(optimizer, "optimizer", "optimizer")->config;
    const parallel::PlanConfig& pc = checked(plan, kPlan, "plan")->config;
    std::shared_ptr<transport::coll::Communicator> c = checked(comm, "comm", "comm")->comm;
    // Under pipeline stages only world rank 0 reads the graph: the others may pass none.
    const bool pipeline = pc.pipeline.stages > 1 || pc.fence.enabled;
    static const Graph kNone;
    const Graph& g = graph == nullptr && pipeline && c->rank() != 0 ? kNone : checked(graph, "graph", "graph")->graph;
    check_not_null(trainer_out, "trainer_out");
    TrainerOptions o = trainer_options_from(options);
    COHORT_CHECK(!pc.automatic, Status::kInvalidPlan,
                 "plan: automatic = 1: resolve the layout with cohort_plan_choose first (it decides each rank's share "
                 "of the batch, and so the graph this trainer is made from), then create the plan from its options");
    parallel::validate_for_world(pc, c->size());  // before any collective: nothing to undo
    // On the GPU, DDP reduces its buckets over NCCL where every rank can (device_comm.h), else
    // through host copies over `comm`; local SGD and co2 always go through the host.
    std::shared_ptr<transport::Store> store = comm->store;
    auto device_comm = [&](const Trainer& t) -> std::shared_ptr<transport::coll::Communicator> {
      if (t.device() == Device::kCpu || pc.mode != parallel::SyncMode::kSync || !store) return nullptr;
      return parallel::make_device_communicator(*c, store);
    };
    std::string stages;
    auto on_stages = [&stages](const std::string& text) { stages = text; };
    cohort_trainer* h = make_trainer_handle(parallel::make_parallel_trainer(g, oc, o, pc, c, device_comm, on_stages));
    h->pipeline_stages = std::move(stages);
    *trainer_out = h;
  });
}

COHORT_API cohort_status cohort_trainer_pipeline_stages(const cohort_trainer* trainer, char* buf, size_t buf_size,
                                                        size_t* needed_out) {
  return guard("cohort_trainer_pipeline_stages", [&] {
    parallel_of(trainer);
    const std::string& text = trainer->pipeline_stages;
    if (needed_out) *needed_out = text.size() + 1;
    COHORT_CHECK(buf != nullptr && buf_size >= text.size() + 1, Status::kInvalidArgument, "buf holds ", buf_size,
                 " bytes but the description needs ", text.size() + 1);
    std::memcpy(buf, text.c_str(), text.size() + 1);
  });
}

COHORT_API cohort_status cohort_plan_choose(const cohort_plan_options* options, const cohort_graph* global_graph,
                                            const cohort_optimizer* optimizer,
                                            const cohort_trainer_options* trainer_options, cohort_comm* comm,
                                            cohort_plan_options* chosen_out, char* report, size_t report_size,
                                            size_t* report_needed_out) {
  return guard("cohort_plan_choose", [&] {
    check_not_null(options, "options");
    check_not_null(chosen_out, "chosen_out");
    check_struct_size(options->size, offsetof(cohort_plan_options, memory_limit_bytes) + sizeof(double), "options");
    COHORT_CHECK(report != nullptr || report_size == 0, Status::kInvalidArgument, "report is NULL but report_size is ",
                 report_size);
    const Graph& g = checked(global_graph, "graph", "global_graph")->graph;
    const optim::OptimizerConfig& oc = checked(optimizer, "optimizer", "optimizer")->config;
    std::shared_ptr<transport::coll::Communicator> c = checked(comm, "comm", "comm")->comm;
    const TrainerOptions to = trainer_options_from(trainer_options);
    // Every check above and in to_config is the same on every rank: a refusal comes before the
    // first collective, on all of them alike.
    parallel::PlanConfig requested = to_config(*options);
    COHORT_CHECK(!requested.fence.enabled, Status::kInvalidPlan,
                 "plan: fence and automatic both choose the layout: a fence plan is resolved by "
                 "cohort_trainer_create_parallel (it measures the links), not by cohort_plan_choose");
    requested.automatic = true;
    std::string text;
    const parallel::PlanConfig chosen = parallel::choose_plan(g, requested, *c, oc, to, &text);
    cohort_plan_options out;
    std::memset(&out, 0, sizeof out);
    const size_t given = std::min(options->size, sizeof out);
    std::memcpy(&out, options, given);
    out.size = given;
    write_layout(chosen, out);
    *chosen_out = out;
    copy_text_truncated(c->rank() == 0 ? text : std::string(), report, report_size, report_needed_out);
  });
}

COHORT_API cohort_status cohort_trainer_get_parallel_stats(const cohort_trainer* trainer,
                                                           cohort_parallel_stats* stats_out) {
  return guard("cohort_trainer_get_parallel_stats", [&] {
    parallel::DataParallel& dp = parallel_of(trainer);
    check_not_null(stats_out, "stats_out");
    check_struct_size(stats_out->size, offsetof(cohort_parallel_stats, buckets) + sizeof(int64_t), "stats_out");
    parallel::ParallelStats s = dp.stats();
    stats_out->rounds = s.rounds;
    stats_out->compute_seconds = s.compute_seconds;
    stats_out->comm_seconds = s.comm_seconds;
    stats_out->wait_seconds = s.wait_seconds;
    stats_out->hidden_fraction = s.hidden_fraction;
    stats_out->last_staleness_scale = s.last_staleness_scale;
    stats_out->last_momentum_norm = s.last_momentum_norm;
    stats_out->buckets = s.buckets;
    // The memory fields came later: a caller built against the older struct does not have them.
    if (stats_out->size >= offsetof(cohort_parallel_stats, optimizer_state_bytes) + sizeof(int64_t)) {
      stats_out->parameter_bytes = s.parameter_bytes;
      stats_out->gradient_bytes = s.gradient_bytes;
      stats_out->optimizer_state_bytes = s.optimizer_state_bytes;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, peak_parameter_bytes) + sizeof(int64_t)) {
      stats_out->parameter_gathers = s.parameter_gathers;
      stats_out->parameter_gathers_prefetched = s.parameter_gathers_prefetched;
      stats_out->peak_parameter_bytes = s.peak_parameter_bytes;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, step_seconds) + sizeof(double)) {
      stats_out->tau = s.tau;
      stats_out->overlap_steps = s.overlap;
      stats_out->outer_comm_seconds = s.outer_comm_seconds;
      stats_out->step_seconds = s.step_seconds;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, outer_sync_bytes) + sizeof(int64_t)) {
      stats_out->outer_fragments = s.outer_fragments;
      stats_out->outer_syncs = s.outer_syncs;
      stats_out->outer_sync_bytes = s.outer_sync_bytes;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, shard_group) + sizeof(int64_t)) {
      stats_out->outer_hidden_fraction = s.outer_hidden_fraction;
      stats_out->shard_group = s.shard_group;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, grad_keep) + sizeof(double)) {
      stats_out->gradient_sync_bytes = s.gradient_sync_bytes;
      stats_out->grad_keep = s.grad_keep;
    }
    if (stats_out->size >= offsetof(cohort_parallel_stats, outer_shared_wait_seconds) + sizeof(double))
      stats_out->outer_shared_wait_seconds = s.outer_shared_wait_seconds;
  });
}

COHORT_API cohort_status cohort_trainer_save_parallel_checkpoint(cohort_trainer* trainer, const char* path) {
  return guard("cohort_trainer_save_parallel_checkpoint", [&] {
    parallel_of(trainer);
    const std::string p = checked_path(path);
    checkpoint::save_checkpoint(*trainer->trainer, p, checkpoint_extra_for_save(*trainer));
  });
}

COHORT_API cohort_status cohort_trainer_load_parallel_checkpoint(cohort_trainer* trainer, const char* path) {
  return guard("cohort_trainer_load_parallel_checkpoint", [&] {
    parallel_of(trainer);
    const std::string p = checked_path(path);
    checkpoint::CheckpointExtra extra;
    checkpoint::load_checkpoint(*trainer->trainer, p, &extra);
    apply_loaded_checkpoint_extra(*trainer, std::move(extra));
  });
}

COHORT_API cohort_status cohort_comm_probe_links(cohort_comm* comm, double* bytes_per_second_out,
                                                 double* latency_seconds_out, size_t cells, char* report,
                                                 size_t report_size, size_t* report_needed_out) {
  return guard("cohort_comm_probe_links", [&] {
    std::shared_ptr<transport::coll::Communicator> c = checked(comm, "comm", "comm")->comm;
    const size_t need = static_cast<size_t>(c->size()) * static_cast<size_t>(c->size());
    COHORT_CHECK((bytes_per_second_out == nullptr && latency_seconds_out == nullptr) || cells >= need,
                 Status::kInvalidArgument, "cells is ", cells, ", a matrix of ", c->size(), " ranks needs ", need);
    COHORT_CHECK(report != nullptr || report_size == 0, Status::kInvalidArgument, "report is NULL but report_size is ",
                 report_size);
    const parallel::LinkMatrix m = parallel::probe_links(*c);
    if (bytes_per_second_out) std::copy(m.bytes_per_second.begin(), m.bytes_per_second.end(), bytes_per_second_out);
    if (latency_seconds_out) std::copy(m.latency_seconds.begin(), m.latency_seconds.end(), latency_seconds_out);
    copy_text_truncated(m.describe(), report, report_size, report_needed_out);
  });
}

}  // extern "C"
