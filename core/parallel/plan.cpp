// Plan presets and validation.
#include "core/parallel/plan.h"

#include <algorithm>
#include <cmath>

#include "core/base/error.h"
#include "core/parallel/tensor_parallel.h"

namespace cohort::parallel {

PlanConfig preset(Preset p, int64_t tau) {
  PlanConfig c;
  c.tau = tau;
  switch (p) {
    case Preset::kDdp: c.mode = SyncMode::kSync; c.tau = 1; return c;
    case Preset::kLocalSgd: c.mode = SyncMode::kLocalSgd; return c;
    case Preset::kSlowMo:
      c.mode = SyncMode::kLocalSgd;
      c.outer.momentum = 0.5;
      return c;
    case Preset::kDiLoCo:
      c.mode = SyncMode::kLocalSgd;
      c.outer.lr = 0.7;
      c.outer.momentum = 0.9;
      c.outer.nesterov = true;
      return c;
    case Preset::kCo2:
      // DiLoCo's outer optimizer: co2's outer recursion is blocking DiLoCo's, only the first
      // `overlap` steps of each round are taken before the average arrives (end_round_co2).
      // Measured in README (data-parallel accuracy): the penalty and clipping are off.
      c.mode = SyncMode::kCo2;
      c.outer.lr = 0.7;
      c.outer.momentum = 0.9;
      c.outer.nesterov = true;
      c.outer.staleness_penalty = false;
      c.outer.penalty_constant = 1.0;
      c.outer.clip_threshold = 0.0;
      c.overlap = 1;
      return c;
  }
  throw Error(Status::kInvalidPlan, str_cat("plan: unknown preset ", static_cast<int>(p)));
}

void settle_for_optimizer(PlanConfig& plan, bool sgd) {
  if (plan.mode != SyncMode::kCo2 || !sgd) return;
  if (plan.outer_as_preset) {
    plan.outer.lr = 1.0;
    plan.outer.momentum = 0.0;
    plan.outer.nesterov = false;
  }
  if (plan.outer_bits_as_default) plan.outer_bits = default_outer_bits(plan, sgd);
}

RoundShape choose_round_shape(double comm_seconds, double step_seconds, int64_t overlap, int64_t tau_floor,
                              int64_t round_pos, int fragments) {
  constexpr int64_t kMaxOverlap = 1 << 16;
  // Rounds per overlap: half of each round after its merge, or F merges one after another.
  const int64_t per_overlap = std::max<int64_t>(2, fragments);
  // The round now running must not end behind itself, nor (F > 1) put fragment 1's end behind.
  const int64_t reached = fragments > 1 ? fragments * round_pos : round_pos + 1;
  RoundShape r;
  r.overlap = overlap;
  if (comm_seconds > 0 && step_seconds > 0)
    r.overlap = static_cast<int64_t>(std::ceil(std::min(1.5 * comm_seconds / step_seconds, double{kMaxOverlap})));
  const int64_t tau_cap = std::max(kMaxTauGrowth * tau_floor, reached);
  r.overlap = std::clamp<int64_t>(r.overlap, 1, std::max<int64_t>(1, std::min(kMaxOverlap, tau_cap / per_overlap)));
  r.tau = std::min(std::max({tau_floor, per_overlap * r.overlap, reached}), tau_cap);
  return r;
}

std::vector<size_t> outer_fragment_cuts(const std::vector<int64_t>& numel, int fragments) {
  const size_t n = numel.size(), f_count = static_cast<size_t>(fragments);
  COHORT_CHECK(fragments >= 1 && f_count <= n, Status::kInvalidPlan, "plan: outer_fragments = ", fragments,
               " must be in [1, ", n, "]: the model has ", n, " parameter(s) and a fragment holds at least one");
  std::vector<double> prefix(n + 1, 0.0);  // elements before parameter i
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(numel[i]);
  std::vector<size_t> cuts(f_count + 1, 0);
  cuts[f_count] = n;
  for (size_t f = 1; f < f_count; ++f) {
    const double target = prefix[n] * static_cast<double>(f) / static_cast<double>(f_count);
    size_t best = cuts[f - 1] + 1;  // at least one parameter per fragment, before and after
    for (size_t c = best; c + (f_count - f) <= n; ++c)
      if (std::fabs(prefix[c] - target) < std::fabs(prefix[best] - target)) best = c;
    cuts[f] = best;
  }
  return cuts;
}

const char* mode_name(SyncMode mode) {
  switch (mode) {
    case SyncMode::kSync: return "sync";
    case SyncMode::kLocalSgd: return "localsgd";
    case SyncMode::kCo2: return "co2";
  }
  return "unknown";
}

int default_outer_bits(const PlanConfig& plan, bool sgd) {
  if (plan.mode != SyncMode::kCo2) return 32;
  return sgd ? 8 : 4;
}

void validate(const PlanConfig& p) {
  int mode = static_cast<int>(p.mode);
  COHORT_CHECK(mode >= 0 && mode <= 2, Status::kInvalidPlan, "plan: unknown sync mode ", mode);
  COHORT_CHECK(p.data_parallel >= 0, Status::kInvalidPlan, "plan: data_parallel = ", p.data_parallel,
               " must be >= 0 (0 = the whole world)");
  COHORT_CHECK(p.tau >= 1, Status::kInvalidPlan, "plan: tau = ", p.tau, " must be >= 1");
  COHORT_CHECK(p.mode != SyncMode::kCo2 || (p.overlap >= 1 && p.overlap <= p.tau), Status::kInvalidPlan,
               "plan: overlap = ", p.overlap, " must be in [1, tau = ", p.tau,
               "]: co2 merges each round's average that many steps into the next round");
  COHORT_CHECK(p.outer_bits == 32 || ((p.outer_bits == 8 || p.outer_bits == 4) && p.mode == SyncMode::kCo2),
               Status::kInvalidPlan, "plan: outer bits = ", p.outer_bits, " (32, or 8 or 4 under co2)");
  COHORT_CHECK(!p.overlap_auto || p.mode == SyncMode::kCo2, Status::kInvalidPlan,
               "plan: overlap auto applies to co2 (", mode_name(p.mode), " has no overlap)");
  COHORT_CHECK(p.outer.lr >= 0, Status::kInvalidPlan, "plan: outer lr = ", p.outer.lr, " must be >= 0");
  COHORT_CHECK(p.outer.momentum >= 0 && p.outer.momentum < 1, Status::kInvalidPlan, "plan: outer momentum = ",
               p.outer.momentum, " is not in [0, 1)");
  COHORT_CHECK(p.outer.penalty_constant >= 0, Status::kInvalidPlan, "plan: penalty constant = ",
               p.outer.penalty_constant, " must be >= 0");
  COHORT_CHECK(p.outer.clip_threshold >= 0, Status::kInvalidPlan, "plan: clip threshold = ", p.outer.clip_threshold,
               " must be >= 0 (0 = off)");
  COHORT_CHECK(p.bucket_bytes > 0, Status::kInvalidPlan, "plan: bucket_bytes must be > 0");
  COHORT_CHECK(p.grad_keep > 0 && p.grad_keep <= 1, Status::kInvalidPlan, "plan: grad_keep = ", p.grad_keep,
               " must be in (0, 1] (the fraction of each gradient bucket sent a step; 1: all of it, uncompressed)");
  if (p.grad_keep < 1) {
    COHORT_CHECK(p.mode == SyncMode::kSync, Status::kUnsupported, "plan: grad_keep = ", p.grad_keep,
                 " compresses the sync mode's gradients; ", mode_name(p.mode),
                 " synchronises parameters every tau steps (outer_bits compresses co2's)");
    COHORT_CHECK(p.zero_stage <= 1 && p.model_degree() == 1 && !p.automatic, Status::kUnsupported,
                 "plan: grad_keep = ", p.grad_keep,
                 " is not implemented with ZeRO stage 2 or 3 (their gradients are reduce-scattered), tensor / "
                 "pipeline axes or an automatic layout yet (TODO(#29)); it has ",
                 p.zero_stage != 0 ? str_cat("zero_stage ", p.zero_stage)
                 : p.automatic     ? std::string("automatic")
                                   : str_cat("model degree ", p.model_degree()));
  }
  COHORT_CHECK(!p.inner_noise_scaling || p.mode != SyncMode::kSync, Status::kInvalidPlan,
               "plan: inner_noise_scaling applies to local steps (localsgd, co2); sync averages the gradients "
               "before the optimizer sees them");
  // co2 with the state averaged through its merge (each rank's own carried over, as for the
  // parameters) measured no gain (README, #30); sync's replicas share their state already.
  COHORT_CHECK(!p.average_inner_state || p.mode == SyncMode::kLocalSgd, Status::kInvalidPlan,
               "plan: average_inner_state applies to localsgd's blocking round ends (the localsgd, slowmo and diloco "
               "presets); it is ", mode_name(p.mode));
  COHORT_CHECK(!p.average_inner_state || p.shard_group == 1, Status::kUnsupported,
               "plan: average_inner_state is not implemented with shard_group > 1 yet (each rank's inner state is "
               "its ZeRO shard); it has shard_group ", p.shard_group);
  COHORT_CHECK(p.zero_stage >= 0 && p.zero_stage <= 3, Status::kInvalidPlan, "plan: unknown ZeRO stage ",
               p.zero_stage, " (0..3)");
  COHORT_CHECK(p.shard_group >= 1, Status::kInvalidPlan, "plan: shard_group = ", p.shard_group,
               " must be >= 1 (1: every data-parallel rank its own replica)");
  if (p.shard_group > 1) {
    // Shard groups: ZeRO inside each replica's S ranks (the sync path over a communicator of S),
    // the outer rule between replicas on each rank's shard (data_parallel.h).
    COHORT_CHECK(p.mode != SyncMode::kSync, Status::kUnsupported, "plan: shard_group = ", p.shard_group,
                 " applies to localsgd / co2 (replicas of S ranks between outer syncs); sync shards over the whole "
                 "data-parallel group with zero_stage alone");
    COHORT_CHECK(p.zero_stage >= 1, Status::kInvalidPlan, "plan: shard_group = ", p.shard_group,
                 " runs ZeRO over each replica's ranks: zero_stage must be 1, 2 or 3 (it is 0)");
    // Under tensor / pipeline axes the shard groups split each model position's data axis (every
    // rank of a replica's position holds the same part of the model).
    COHORT_CHECK(!p.automatic, Status::kInvalidPlan, "plan: shard_group = ", p.shard_group,
                 " with an automatic layout: the planner chooses the shard groups with the ZeRO stage (for "
                 "localsgd / co2 where memory needs them); leave shard_group 1");
  } else {
    // Local steps need every rank's whole parameters, gradients and inner optimizer state: under
    // local SGD only the outer optimizer's state can be sharded (stage 1).
    COHORT_CHECK(p.zero_stage <= 1 || p.mode == SyncMode::kSync, Status::kUnsupported, "ZeRO stage ", p.zero_stage,
                 " needs the sync (DDP) mode: ", mode_name(p.mode),
                 "'s local steps need every rank's whole gradients and parameters (stage 1 shards localsgd's outer "
                 "state; shard_group > 1 runs stages 1-3 inside replicas of several ranks)");
    // co2's guess (data_parallel.cpp) needs the whole anchor and outer momentum on every rank, and
    // its own guess besides: blocks of them would be kept next to the whole copies, not instead.
    COHORT_CHECK(p.zero_stage == 0 || p.mode != SyncMode::kCo2, Status::kUnsupported, "ZeRO stage ", p.zero_stage,
                 " of co2's outer state would save nothing: every rank's guess needs the whole anchor and outer "
                 "momentum (use stage 0, diloco with stage 1, or shard_group > 1)");
  }
  COHORT_CHECK(p.outer_fragments >= 1, Status::kInvalidPlan, "plan: outer_fragments = ", p.outer_fragments,
               " must be >= 1 (1: the whole model synchronised at once)");
  if (p.outer_fragments > 1) {
    COHORT_CHECK(p.mode != SyncMode::kSync, Status::kUnsupported, "plan: outer_fragments = ", p.outer_fragments,
                 " applies to the outer synchronisation of localsgd / co2; sync averages gradients every step");
    COHORT_CHECK(p.outer_fragments <= p.tau, Status::kInvalidPlan, "plan: outer_fragments = ", p.outer_fragments,
                 " must be <= tau = ", p.tau, ": fragment f is synchronised f * tau / F steps into each round, "
                 "so each fragment needs a step of its own");
    // Overlap auto merges each fragment's average before the next fragment's round end
    // (choose_round_shape): it starts that way.
    COHORT_CHECK(!p.overlap_auto || p.overlap * p.outer_fragments <= p.tau, Status::kInvalidPlan,
                 "plan: overlap auto over outer_fragments = ", p.outer_fragments, " starts from overlap = ", p.overlap,
                 ", which must be <= tau / outer_fragments = ", p.tau / p.outer_fragments,
                 ": each fragment's average is merged before the next fragment's round end");
    // Tensor / pipeline axes take fragments cut by the whole model's parameters (data_parallel.cpp,
    // build_fragments); ZeRO 1 of the outer state shards each fragment (outer_shard.cpp); shard
    // groups run each fragment on its pieces of every rank's shard (shard_group.cpp).
  }
  validate_tensor_grid(p);
  COHORT_CHECK(p.auto_trials >= 0 && p.auto_trials <= 64, Status::kInvalidPlan, "plan: auto_trials = ", p.auto_trials,
               " must be in [0, 64]");
  COHORT_CHECK(p.memory_limit_bytes >= 0, Status::kInvalidPlan, "plan: memory_limit_bytes = ", p.memory_limit_bytes,
               " must be >= 0 (0: the host's memory shared by its ranks)");
  const PipelineConfig& pp = p.pipeline;
  COHORT_CHECK(pp.stages >= 1 && pp.stages <= 65536, Status::kInvalidPlan, "plan: pipeline_stages = ", pp.stages,
               " must be in [1, 65536]");
  COHORT_CHECK(pp.chunks >= 1 && pp.chunks <= 1024, Status::kInvalidPlan, "plan: pipeline_chunks = ", pp.chunks,
               " must be in [1, 1024]");
  COHORT_CHECK(pp.micro_batches >= 1, Status::kInvalidPlan, "plan: micro_batches = ", pp.micro_batches,
               " must be >= 1");
  const int kind = static_cast<int>(pp.schedule);
  COHORT_CHECK(kind >= 0 && kind <= 2, Status::kInvalidPlan, "plan: unknown pipeline_schedule ", kind);
  COHORT_CHECK(pp.chunks == 1 || pp.schedule == PipelineSchedule::kInterleaved, Status::kInvalidPlan,
               "plan: pipeline_chunks = ", pp.chunks, " needs the interleaved schedule (", schedule_name(pp.schedule),
               " runs one stage per rank)");
  COHORT_CHECK(pp.schedule != PipelineSchedule::kInterleaved || pp.micro_batches % pp.stages == 0,
               Status::kInvalidPlan, "plan: the interleaved schedule needs micro_batches (", pp.micro_batches,
               ") to be a multiple of pipeline_stages (", pp.stages, ")");
  COHORT_CHECK(pp.cuts.empty() || pp.cuts.size() + 1 == static_cast<size_t>(pp.stages * pp.chunks),
               Status::kInvalidPlan, "plan: pipeline_cuts names ", pp.cuts.size(), " node(s); ",
               pp.stages * pp.chunks, " stages need ", pp.stages * pp.chunks - 1);
  COHORT_CHECK(pp.keep.empty() || pp.keep.size() + 1 == static_cast<size_t>(pp.stages * pp.chunks),
               Status::kInvalidPlan, "plan: pipeline keep gives ", pp.keep.size(), " ratio(s); ",
               pp.stages * pp.chunks, " stages have ", pp.stages * pp.chunks - 1, " cut(s)");
  for (size_t c = 0; c < pp.keep.size(); ++c)
    COHORT_CHECK(pp.keep[c] > 0 && pp.keep[c] <= 1, Status::kInvalidPlan, "plan: pipeline keep of cut ", c, " is ",
                 pp.keep[c], ", expected (0, 1]");
  const FenceConfig& f = p.fence;
  COHORT_CHECK(f.min_keep > 0 && f.min_keep <= 1, Status::kInvalidPlan, "plan: fence_min_keep = ", f.min_keep,
               " must be in (0, 1]");
  COHORT_CHECK(f.cluster_ratio >= 1, Status::kInvalidPlan, "plan: fence cluster ratio = ", f.cluster_ratio,
               " must be >= 1");
  if (f.enabled) {
    COHORT_CHECK(!p.automatic, Status::kInvalidPlan,
                 "plan: fence and automatic both choose the layout: ask for one of them");
    COHORT_CHECK(p.tensor.degree() == 1 && p.data_parallel <= 1, Status::kUnsupported,
                 "plan: fence makes the whole world one pipeline: tensor_x/y/z and data_parallel must be 1 (they are ",
                 p.tensor.x, ", ", p.tensor.y, ", ", p.tensor.z, " and ", p.data_parallel, ")");
    COHORT_CHECK(pp.chunks == 1 && pp.cuts.empty() && pp.keep.empty(), Status::kInvalidPlan,
                 "plan: fence chooses the stages, their cuts and compression itself: pipeline_chunks must be 1 and "
                 "pipeline_cuts and the keep ratios empty");
  }
  // ZeRO stage 3 runs with pipeline stages and micro-batches: each bucket is gathered per schedule
  // slot that reads it (zero.cpp).
}

int grid_position(const PlanConfig& plan, int world_rank) {
  if (plan.rank_order.empty()) return world_rank;
  return static_cast<int>(std::find(plan.rank_order.begin(), plan.rank_order.end(), world_rank) -
                          plan.rank_order.begin());
}

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::kOneFOneB: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "unknown";
}

void validate_for_world(const PlanConfig& p, int world_size) {
  validate(p);
  COHORT_CHECK(world_size >= 1, Status::kInvalidPlan, "plan: world size ", world_size, " must be >= 1");
  if (!p.rank_order.empty()) {
    COHORT_CHECK(p.rank_order.size() == static_cast<size_t>(world_size), Status::kInvalidPlan, "plan: rank_order lists ",
                 p.rank_order.size(), " rank(s) for a world of ", world_size);
    std::vector<bool> seen(static_cast<size_t>(world_size), false);
    for (int r : p.rank_order) {
      COHORT_CHECK(r >= 0 && r < world_size && !seen[static_cast<size_t>(r)], Status::kInvalidPlan,
                   "plan: rank_order is not a permutation of the world's ranks 0..", world_size - 1, " (", r,
                   r >= 0 && r < world_size ? " twice)" : " is out of range)");
      seen[static_cast<size_t>(r)] = true;
    }
  }
  // fence: the world is the pipeline, whatever pipeline_stages says (make_parallel_trainer).
  if (p.fence.enabled) {
    PlanConfig q = p;
    q.fence.enabled = false;
    q.pipeline.stages = world_size;
    q.data_parallel = 1;
    return validate_for_world(q, world_size);
  }
  const int model = p.model_degree();
  // The model axes as named in the messages: the pipeline only when it has stages.
  const std::string stages = p.pipeline.stages > 1 ? str_cat("pipeline_stages ", p.pipeline.stages, " x ") : "";
  COHORT_CHECK(world_size % model == 0, Status::kInvalidPlan, "plan: ", stages, "the tensor grid tensor_x ", p.tensor.x,
               " x tensor_y ", p.tensor.y, " x tensor_z ", p.tensor.z, " = ", model,
               " ranks does not divide the world size ", world_size);
  int degree = p.data_parallel == 0 ? world_size / model : p.data_parallel;
  COHORT_CHECK(world_size % degree == 0, Status::kInvalidPlan, "plan: data-parallel degree ", degree,
               " does not divide the world size ", world_size);
  COHORT_CHECK(degree * model <= world_size, Status::kInvalidPlan, "plan: data_parallel ", degree, " x ", stages,
               "the tensor grid's ", p.tensor.degree(), " ranks = ", degree * model, " ranks, the world has ", world_size);
  COHORT_CHECK(degree * model == world_size, Status::kUnsupported, "plan: data-parallel degree ", degree, " x ", stages,
               "tensor degree ", p.tensor.degree(), " < world size ", world_size,
               " needs another parallel axis, which does not exist");
  COHORT_CHECK(degree % p.shard_group == 0, Status::kInvalidPlan, "plan: shard_group ", p.shard_group,
               " does not divide the data-parallel degree ", degree, " (a replica is shard_group ranks)");
}

}  // namespace cohort::parallel
