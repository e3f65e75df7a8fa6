// Parallel plan: how a model is spread over the ranks of a communicator. Today this is data
// parallelism only — synchronous DDP, local SGD (with the SlowMo/DiLoCo outer optimizers) and
// CO2 — with ZeRO stages 1-3 for DDP (zero.cpp), stage 1 of the outer state for local SGD
// (outer_shard.cpp), and shard groups (shard_group below): ZeRO 1-3 inside each replica of
// several ranks, local SGD or CO2 between the replicas on each rank's shard.
//
// The one thing to know: local SGD, SlowMo, DiLoCo and CO2 share ONE outer-optimizer rule
// (core/parallel/outer.h); the presets below only choose its constants and the sync mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::parallel {

enum class SyncMode : int {
  kSync = 0,      // DDP: gradients averaged every step, in buckets overlapping backward
  kLocalSgd = 1,  // tau inner steps, then a blocking outer step on the averaged pseudo-gradient
  kCo2 = 2,       // tau inner steps; round k's average is merged `overlap` steps into round k+1
};

enum class Preset : int { kDdp = 0, kLocalSgd = 1, kSlowMo = 2, kDiLoCo = 3, kCo2 = 4 };

// The outer optimizer, applied to the averaged pseudo-gradient d = anchor - params (see outer.h).
struct OuterConfig {
  double lr = 1.0;        // alpha
  double momentum = 0.0;  // beta
  bool nesterov = false;
  bool staleness_penalty = false;  // CO2 only: scale the progress made before a merge by its gap
  double penalty_constant = 1.0;   // lambda in the gap penalty (>= 0)
  double clip_threshold = 0.0;     // phi: outer momentum L2-norm clip; 0 = off
};

// The tensor axes of the grid data x X x Y x Z (AxoNN, Singh et al. 2024): a linear layer's
// weight is cut over X along its in-features and over Y along its out-features, and consecutive
// layers swap the two roles. Megatron-LM's 1D tensor parallelism (a column-parallel layer, then a
// row-parallel one) is the grid with only Y > 1. core/parallel/tensor_parallel.h.
struct TensorGrid {
  int x = 1, y = 1, z = 1;
  int degree() const { return x * y * z; }
};

// Sequence parallelism over the Y axis: none; Megatron-LM's (Korthikanti et al. 2022: the
// regions between tensor-split layers hold each rank's block of the tokens); or the all-to-all
// kind (DeepSpeed-Ulysses, Jacobs et al. 2023: every layer holds its tokens' block, nothing is
// cut by features, attention exchanges heads for tokens). Values as cohort_plan_options'.
enum class SequenceParallel { kNone = 0, kMegatron = 1, kAllToAll = 2 };

// Pipeline parallelism (core/parallel/pipeline.h): the model cut into stages * chunks contiguous
// stages over `stages` ranks; values as cohort_plan_options'.
enum class PipelineSchedule { kGPipe = 0, kOneFOneB = 1, kInterleaved = 2 };
struct PipelineConfig {
  int stages = 1;         // ranks on the pipe axis
  int chunks = 1;         // stages per rank (virtual stages; > 1: the interleaved schedule)
  // The batch is cut into this many micro-batches (1..batch, dividing it); with one stage this is
  // gradient accumulation.
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  // The first node of stages 1..S-1 (pipeline_cut_points lists where a stage may begin); empty:
  // balanced by the workload estimator.
  std::vector<std::string> cuts;
  // Per cut (stages * chunks - 1 entries, or empty: none compressed): the share of each crossing
  // activation's entries sent (its top-k by magnitude, 0 < keep <= 1; the gradients come back at
  // the same entries, so the way back is exact for what went forward). fence.h chooses them from
  // the measured links; 1 sends the whole tensor.
  std::vector<double> keep;
};

// OP-Fence (FusionLLM, geo-distributed training; core/parallel/fence.h): the world becomes one
// pipeline whose stages, cuts, rank order and per-cut compression are chosen from the links and
// compute measured at start-up, so that only the thinnest cuts cross the slowest links.
struct FenceConfig {
  bool enabled = false;
  bool compression = true;   // top-k on cuts whose transfer would be the pipeline's bottleneck
  // The smallest share of an activation a cut may send. Measured (README, geo): the CNN trained 100
  // steps through a cut keeping 0.1 of its entries ends within 0.4 points of the whole cut's
  // accuracy, at 0.05 5 points below; below the floor the cut stays slower than the stages.
  double min_keep = 0.1;
  // Ranks are one cluster while every link between them is at least 1 / cluster_ratio of the
  // fastest link among them.
  double cluster_ratio = 4.0;
};
const char* schedule_name(PipelineSchedule schedule);

struct PlanConfig {
  int data_parallel = 0;  // ranks in the data-parallel group; 0 = the whole world
  SyncMode mode = SyncMode::kSync;
  int64_t tau = 1;  // inner steps per round (localsgd, co2)
  // co2: inner steps of the next round during which a round's average travels; it is merged
  // after them (1..tau; the all-reduce is hidden when it takes no longer than these steps).
  int64_t overlap = 1;
  // co2: re-choose overlap at every merge as the fewest steps that hide the measured all-reduce,
  // and raise tau (never below the plan's) to keep at least half of each round after the merge
  // (data_parallel.cpp, choose_round_shape). `overlap` is where it starts.
  bool overlap_auto = false;
  // co2: bits per value of the pseudo-gradient each rank sends: 32 (fp32, all-reduced) or 8 / 4
  // (block-scaled integers, all-gathered and averaged in fp32 by every rank: quantize.h).
  int outer_bits = 32;
  // localsgd, co2: streaming outer synchronisation (after Streaming DiLoCo, Douillard et al.
  // 2025, arXiv 2501.18512). The whole model's parameters are cut, in graph order, into this many
  // contiguous fragments of about equal bytes (outer_fragment_cuts; the same cut under every
  // tensor grid and pipeline, each rank taking its parts of them); fragment f runs its own rounds of tau
  // steps, offset f * tau / F steps into each round (outer_fragment_offset), so each outer
  // all-reduce carries about 1/F of the model. 1 = the whole model at once. The rule is derived
  // above DataParallel::after_update (data_parallel.cpp).
  int outer_fragments = 1;
  OuterConfig outer;
  int zero_stage = 0;                // 0..3 with kSync; localsgd: 0 or 1 (outer state sharded); co2: 0;
                                     // with shard_group > 1: 1..3, over each replica's ranks (below)
  // localsgd, co2: shard groups (DiLoCo-style hybrid sharding). The data-parallel ranks D are
  // D / S model replicas of S consecutive ranks each (data rank d: replica d / S, position
  // d % S). Within a replica — the fast link — training is synchronous: DDP with ZeRO stage
  // zero_stage (1..3) over its S ranks every step, exactly as the sync mode over a world of S.
  // Between replicas — the slow link — the mode's outer rule (local SGD / DiLoCo / co2) runs
  // every tau steps on each rank's own ZeRO shard: the anchor, outer momentum and co2's guess
  // are that shard's elements, averaged over the D / S ranks of the same position (S outer
  // all-reduces of 1/S of the model each, at once), the clip's and penalty's norms summed over
  // the replica. What the stage shards with S > 1: 1 the inner optimizer state and the outer
  // state; 2 also the reduced gradients; 3 also the parameters between steps (data_parallel.h).
  // With outer_fragments F > 1 each fragment runs on its pieces of every rank's shard: an outer
  // all-reduce carries ~1/(F S) of the model (shard_group.cpp).
  // 1 (the default): no groups — every rank its own replica, as before.
  int shard_group = 1;
  // localsgd, co2 with an AdamW inner optimizer: each rank normalises its local steps by the
  // second moment expected of the group's averaged gradient, v~ = m^2 + (v - m^2) / N, instead of
  // its own gradient's, so N ranks stepping alone move about as far as one step on the averaged
  // batch would (optim.cpp has the formula); under shard groups N is the replicas, each stepping
  // on its ranks' averaged gradient. Off in every preset (they reproduce the published methods);
  // measured in README (convergence row).
  bool inner_noise_scaling = false;
  // localsgd (the localsgd, SlowMo and DiLoCo presets): at every round end, after the outer step,
  // each rank's inner optimizer state (SGD's momentum; AdamW's two moments) of the round's
  // parameters is replaced by the data ranks' average, so every replica starts the next round
  // with the state DDP's replicas would share, not with its own batches' — one more blocking
  // all-reduce a round, of the state's size (the model's for SGD, twice it for AdamW). A rank
  // whose state is not finite contributes nothing to the average and takes it. Measured in README
  // (#30): CNN, SGD with momentum 0.9, tau 8, three seeds, +0.6 points. Off in every preset.
  bool average_inner_state = false;
  // The outer optimizer (outer.lr, momentum, Nesterov) and outer_bits as the mode's defaults, not
  // the caller's choice: the C ABI sets these for the co2 preset and for outer_bits left 0, and
  // make_parallel_trainer settles them for the inner optimizer (settle_for_optimizer).
  bool outer_as_preset = false;
  bool outer_bits_as_default = false;
  size_t bucket_bytes = 25u << 20;   // DDP gradient bucket size
  // sync: top-k compression of the gradients with error feedback (core/parallel/grad_topk.h has
  // the rule): each bucket sends the grad_keep fraction of its entries of largest magnitude,
  // counting what earlier steps left unsent, and the ranks' messages are all-gathered and
  // averaged; the rest waits in this rank's residual. 1 (the default): off, an all-reduce.
  double grad_keep = 1.0;
  // Tensor parallelism: the grid's tensor axes; the data axis (data_parallel, 0 = the rest of the
  // world) runs the data-parallel mode above over each tensor position. Ranks are laid out
  // row-major over (data, x, y, z): z varies fastest. Collectives overlap compute unless
  // overlap_collectives is false (for comparison).
  TensorGrid tensor;
  bool overlap_collectives = true;
  // Activation checkpointing per transformer block: TrainerOptions::activation_checkpointing.
  bool activation_checkpointing = false;
  // Sequence parallelism over tensor_y (tensor_parallel.h, shard_for_tensor_parallel).
  SequenceParallel sequence_parallel = SequenceParallel::kNone;
  // Pipeline stages, and micro-batches. Ranks are laid out row-major over (data, pipe, x, y, z).
  PipelineConfig pipeline;
  // Grid position i (row-major over data, pipe, x, y, z) is world rank rank_order[i]: a
  // permutation of the world's ranks, or empty (position i is rank i). fence.h chooses it so that
  // neighbouring stages sit on the fastest links.
  std::vector<int> rank_order;
  // Stages, cuts, rank order and keep chosen from measured links (make_parallel_trainer resolves
  // it: every rank takes the whole batch, so no rank's share of the data changes).
  FenceConfig fence;
  // The planner chooses the layout (core/parallel/auto_plan.h): the data, pipeline and tensor
  // axes, micro-batches and schedule, ZeRO and activation checkpointing; the mode and its settings
  // stay this plan's. auto_trials > 0: the best predicted plans are also timed for a few steps
  // each and the fastest measured taken.
  bool automatic = false;
  int auto_trials = 0;
  // Memory a rank may use, bytes: a plan predicted to need more is refused (a forced plan, with
  // the numbers) or passed over (auto). 0: the host's physical memory shared by the world's ranks
  // (every rank on one host).
  double memory_limit_bytes = 0;
  // Ranks of one model replica: pipeline stages x the tensor grid.
  int model_degree() const { return pipeline.stages * tensor.degree(); }
};

// What the plan left to the mode's defaults (outer_as_preset, outer_bits_as_default), settled for
// the inner optimizer: co2 over SGD (sgd) averages plainly (outer lr 1, no momentum), where DiLoCo's
// Nesterov constants, the preset's for AdamW, lost 4-10 points on the CNN, blocking or overlapped;
// and sends 8-bit messages where AdamW's default is 4 (the CNN at tau 2, three seeds: 4 bits cost
// SGD half a point, 8 nothing). Measured in bench/time_to_accuracy/README.md. Anything else is
// left as it is.
void settle_for_optimizer(PlanConfig& plan, bool sgd);

// A preset's settings (tau as given). localsgd: alpha 1, beta 0 = plain parameter averaging.
// SlowMo: alpha 1, beta 0.5. DiLoCo: alpha 0.7, beta 0.9 Nesterov. CO2: DiLoCo's outer
// optimizer with the average merged one step into the next round (overlap 1); penalty off
// (lambda 1), no clipping — measured in README (data-parallel accuracy).
PlanConfig preset(Preset preset, int64_t tau);
const char* mode_name(SyncMode mode);

// co2 with overlap auto: the next merge's overlap and the running round's tau, from the times
// the ranks measured: comm_seconds, how long an average takes to arrive (the quickest rank's,
// the median of recent rounds: data_parallel.cpp), and step_seconds, the compute time of one step
// (the slowest rank's). The average is hidden when it arrives
// within the overlap, so overlap = ceil(1.5 comm / step) (half again for the jitter of a shared
// machine: with a tenth, 4 ranks on 2 cores still waited 8% of the time), at least 1 and
// kept as it was while either time is unknown (<= 0); tau = the largest of tau_floor, twice the
// overlap (half of each round after its merge) and round_pos + 1 (the round now running has
// reached round_pos steps and must not end behind itself) — but tau at most kMaxTauGrowth times
// tau_floor (or round_pos + 1 when that is more), the overlap at most half of that: past it co2
// waits for the average rather than averaging less often (the CNN at 4 ranks ended at 84.5%
// instead of 88-89% when a few slow all-reduces raised tau to 490).
// With F > 1 fragments (plan.outer_fragments) comm_seconds is one fragment's travel (~1/F of the
// model) and the F merges of a round follow one another: each fragment's average is merged
// before the next fragment's round end, so one average travels at a time and its measured time
// is its own, not a share of a link carrying several. So tau >= F x overlap (fragment f ends
// floor(f tau / F) steps into the round: gaps of at least floor(tau / F) >= overlap), the
// overlap at most tau_cap / F, and the round now running, at round_pos (fragment 0's merge),
// must leave fragment 1's round end ahead: tau >= F x round_pos. F = 1 is the rule above.
constexpr int64_t kMaxTauGrowth = 4;
struct RoundShape {
  int64_t overlap = 1, tau = 1;
};
RoundShape choose_round_shape(double comm_seconds, double step_seconds, int64_t overlap, int64_t tau_floor,
                              int64_t round_pos, int fragments = 1);

// Streaming outer synchronisation: the F + 1 parameter indices that cut parameters of the given
// element counts, in order, into F contiguous non-empty fragments balanced by bytes (cut f is
// the parameter boundary nearest to f/F of the model's elements, kept strictly increasing with
// room left for the fragments after it). 1 <= F <= numel.size(). And fragment f's offset into
// each round: f * tau / F steps (rounded down; distinct while F <= tau).
std::vector<size_t> outer_fragment_cuts(const std::vector<int64_t>& numel, int fragments);
inline int64_t outer_fragment_offset(int fragment, int fragments, int64_t tau) {
  return static_cast<int64_t>(fragment) * tau / fragments;
}

// The bits per value co2 sends when the caller leaves outer_bits unset (the C ABI's 0, the CLI
// without --outer-bits): 4 under co2 — with error feedback as accurate as fp32 on the MLP, the
// CNN and the GPT (README, data-parallel accuracy) at 1/8 of its bytes, shard groups included
// (each rank's message its shard's); 32 for every other mode. Over an SGD optimizer (sgd: known
// once the trainer is made, settle_for_optimizer) co2's is 8.
int default_outer_bits(const PlanConfig& plan, bool sgd = false);

// Throws kInvalidPlan naming the first bad field (unknown mode, tau < 1, negative lr, momentum
// or threshold, momentum >= 1, data_parallel < 0, bucket_bytes 0, unknown ZeRO stage, co2's
// overlap outside [1, tau], outer_fragments < 1 or > tau, overlap auto over F > 1 fragments
// starting from an overlap above tau / F, shard_group < 1, shard_group > 1
// without a ZeRO stage) and kUnsupported for stages 2-3 outside the sync mode without shard
// groups (localsgd takes stage 1: its outer state sharded), for any stage under co2 without
// them, for outer_fragments > 1 outside localsgd / co2, and for
// shard_group > 1 in the sync mode (kInvalidPlan with an automatic layout: the planner chooses
// them); grad_keep
// outside (0, 1] is kInvalidPlan, and below 1 kUnsupported outside the sync mode, with ZeRO
// stage 2 or 3, tensor or pipeline axes or automatic.
void validate(const PlanConfig& plan);
// validate() plus the fit with a world of `world_size` ranks: the tensor degree x*y*z and the
// data-parallel degree must divide it and their product equal it, and shard_group must divide
// the data-parallel degree (kInvalidPlan naming the fields and numbers; a product below the
// world size is kUnsupported: no other axis exists).
void validate_for_world(const PlanConfig& plan, int world_size);

// World rank `world_rank`'s position in the plan's grid: its index in rank_order (the rank itself
// when rank_order is empty). The plan must fit the world (validate_for_world).
int grid_position(const PlanConfig& plan, int world_rank);

}  // namespace cohort::parallel
