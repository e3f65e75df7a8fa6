// The planner: which layout (data x pipeline x tensor grid, micro-batches and schedule, ZeRO,
// activation checkpointing) trains a model fastest on a given cluster, from a model of
// computation and communication (AxoNN, Singh et al. 2024; FusionLLM's estimator) rather than
// by trying each.
//
//   - Compute: the workload estimator's seconds per node (workload.h), split over the ranks the
//     layout splits each node over, at the micro-batch size.
//   - Communication: for each layout, the bytes each collective and point-to-point message moves
//     per step (data-parallel gradient reductions, ZeRO's gathers, local modes' outer syncs —
//     under shard groups the replica's ZeRO every step and each shard's outer sync — the tensor
//     axes' reductions and gathers per layer pair, the pipeline's activations and gradients per
//     micro-batch and cut), priced by a CommTable of latency and bandwidth per operation and group — measured at
//     start-up by probe_communication (comm_probe.cpp) or given (a cluster description) — and
//     counted as exposed where it cannot overlap compute.
//     Communication that the model overlaps with compute (Z's weight gathers behind the pair's
//     compute) is hidden only where a rank has a core to spare for the transport's progress
//     (CommTable::cores_per_rank, else ClusterSpec's cores, against the rank's threads + 1).
//     Without that spare core, each message over a pipeline cut also takes processor time from
//     the stages that send and receive it (CommTable::message_compute, measured by the probe), in
//     their compute.
//   - The bubble: (P - 1) / (V M + P - 1) of the pipeline's time for P stages, V chunks per rank
//     and M micro-batches (1F1B and GPipe: V = 1).
//   - Executor runs: under micro-batches or stages, 2 M V runs a step on each rank and M passes
//     accumulating its gradients, at the calibrated cost (ClusterSpec::run_cost), in its compute.
//   - The optimizer's update: once a step, over a rank's parameters (its shard under ZeRO), at
//     RunCost's calibrated cost per byte, in its compute (every layout, micro-batches or not).
//   - Memory per rank: parameters, gradients and optimizer state (ZeRO shards them over the data
//     axis), and activations: what one micro-batch keeps for backward (the graph's exact sizes;
//     under activation checkpointing only each block's input) times the micro-batches in flight
//     (GPipe: M; 1F1B: P - r on rank r).
//
// The one thing to know: a prediction is only as good as the table and the workload it is given;
// bench/planner compares predictions with measured steps, and README lists the errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/parallel/plan.h"
#include "core/parallel/workload.h"

namespace cohort::parallel {

// The operations the planner prices. kPointToPoint: one message between two ranks.
enum class CommOp : int { kPointToPoint = 0, kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };
const char* comm_op_name(CommOp op);

// Time of one operation on `bytes` (each rank's input; for all_gather, each rank's block) over a
// group of `ranks` ranks: latency + bytes / bandwidth.
struct CommCost {
  CommOp op = CommOp::kAllReduce;
  int ranks = 2;
  // Whether the group spans more than one node (a cluster description's inter-node links; the
  // probe of one machine measures within a node only).
  bool across_nodes = false;
  double latency_seconds = 0;
  double bytes_per_second = 0;
  // Measured with the caller blocked on the operation and the rank's core otherwise idle (the
  // tensor axes' collectives, which the step waits for), rather than beside a rank computing (an
  // overlapped reduction). The probe measures both only where they differ: ranks that do not
  // share cores but whose transport has no core of its own while they compute.
  bool caller_waits = false;
};

struct CommTable {
  std::vector<CommCost> entries;
  // How much slower a rank computes while every rank of the host computes at once than alone
  // (cores shared, progress threads polling): measured by the probe; 0 when not measured (the
  // planner then counts threads against ClusterSpec::cores_per_node).
  double compute_stretch = 0;
  // The cores of the host over the ranks on it (probe_communication: the cores this process may
  // run on); 0 when not measured (the planner then divides ClusterSpec::cores_per_node). Below
  // threads_per_rank + 1, no core is spare for a transport's progress while a rank computes.
  double cores_per_rank = 0;
  // The processor time a point-to-point message costs its rank (the transport's progress thread,
  // the kernel's network stack and the wake-ups, on the cores the ranks compute on): per message
  // sent or received, a fixed part and a part per byte. Measured by the probe (ping-pongs between
  // neighbours, in process processor time); 0 when not measured. The planner charges it to a
  // pipeline's stages where no core is spare for the transport (cores_per_rank).
  double message_compute_seconds = 0;
  double message_compute_seconds_per_byte = 0;
  // message_compute_seconds + bytes x message_compute_seconds_per_byte.
  double message_compute(double bytes) const;
  std::string source;  // "measured in 1.8 s over 4 ranks", "cluster description", ...
  // The time of `op` on `bytes` over `ranks` ranks: the entry of that op and group size (and
  // placement), else the nearest measured group size (an entry of the other placement only when
  // none of this one exists), its bytes term scaled by the ring's volume at `ranks` over that at
  // the entry's: (ranks - 1) / ranks for all_reduce, reduce_scatter and all_to_all, ranks - 1 for
  // all_gather (bytes is each rank's block), 1 for point-to-point and broadcast; the latency as
  // measured. `caller_waits`: an entry measured so (CommCost::caller_waits) where the table has
  // one, else the other kind. 0 for a collective over one rank or of no bytes. kNotFound naming
  // the op when the table has none of it.
  double seconds(CommOp op, int ranks, double bytes, bool across_nodes = false, bool caller_waits = false) const;
};

// A table for a described cluster (no probe): every operation at every placement, from the
// bandwidth of one rank's link within a node and across nodes and a latency per operation.
// Entries are at 2 ranks with bytes_per_second set so that CommTable::seconds gives the ring's
// time at any group size: all_reduce moves 2 (n - 1) / n of the bytes over each rank's link,
// all_gather and reduce_scatter (n - 1) / n (of the whole gathered size), broadcast and
// point-to-point the bytes once, all_to_all (n - 1) / n.
struct LinkSpec {
  double bytes_per_second = 0;  // one rank's link (for across: its share of the node's NICs)
  double latency_seconds = 0;   // per operation
};
CommTable ring_comm_table(const LinkSpec& within_node, const LinkSpec& across_nodes, const std::string& source);

// A cluster to plan for: the world, how many ranks share a node (tensor and pipeline groups are
// placed within nodes first), the device memory per rank, and the rates of its devices
// (0: the workload estimator's calibration of this machine).
struct ClusterSpec {
  int world = 1;
  int ranks_per_node = 1;
  double memory_bytes_per_rank = 0;  // 0: no limit
  double flops_per_second = 0;       // 0: this machine's calibrated rates
  double bytes_per_second = 0;
  // The cores of a node and the threads each rank computes with: where a node's ranks run more
  // threads than it has cores, they take turns, and every rank's compute stretches by
  // ranks_per_node x threads_per_rank / cores_per_node (0 cores: not modelled; devices) — unless
  // the table measured the stretch (CommTable::compute_stretch), which is used instead.
  int cores_per_node = 0;
  int threads_per_rank = 1;
  // What running a step as several executor runs costs (workload.h): a layout with micro-batches
  // or pipeline stages runs every micro-batch's forward and backward of each of a rank's V chunks
  // as runs of their own, 2 M V a step, and accumulates each micro-batch's gradients, M passes
  // over the rank's (f32); and every layout's optimizer update, per parameter byte. Negative: the
  // workload estimator's calibration (estimate_run_cost, at one row a micro-batch), or none under
  // the cluster's own rates (flops_per_second).
  RunCost run_cost{-1, -1};
  CommTable comm;
};

// One candidate layout and what the model predicts for it.
struct PlanPrediction {
  PlanConfig plan;
  double compute_seconds = 0;         // per step, the slowest rank's
  double run_overhead_seconds = 0;    // of compute_seconds: its executor runs and gradient passes
  double update_seconds = 0;          // of compute_seconds: the optimizer's update (RunCost)
  double exposed_comm_seconds = 0;    // communication the step waits for
  double bubble_seconds = 0;          // pipeline idle time
  double step_seconds() const { return compute_seconds + exposed_comm_seconds + bubble_seconds; }
  double memory_bytes = 0;            // per rank, the largest
  bool fits = true;                   // memory_bytes within the cluster's
  std::string describe() const;       // "data 2 x pipe 2 (1f1b, 4 micro) x grid 1x1x1, zero 0"
};

// One step's pipeline time under a schedule: rank r (of P) runs pipeline_schedule(kind, P, V, M,
// r) in order, virtual stage s = chunk P + r (P V stages); the op of stage s on a micro-batch takes
// fwd[s] forward and bwd[s] backward; a forward waits for stage s - 1's forward of the same
// micro-batch and then arrive[s] (the message over the cut into s), a backward for stage s + 1's
// backward and then arrive[s + 1]. Returns the latest finish over the ranks: (M + P - 1) (f + b)
// for 1F1B and GPipe over equal stages without messages. The planner prices pipelines with it.
double simulate_pipeline(PipelineSchedule kind, int P, int V, int M, const std::vector<double>& fwd,
                         const std::vector<double>& bwd, const std::vector<double>& arrive);

// The batch: `model` is at the global batch B (dim 0 of its first input). A layout with data
// degree D, tensor_z Z and M micro-batches runs micro-batches of B / (D Z M) rows on each rank
// (Z's ranks train on different rows, tensor_parallel.h), so make_parallel_trainer, which takes
// the model at one rank's batch, is to be given model.with_batch(B / (D Z)) for it.
//
// Every layout of `model` (a single-rank forward graph with a loss, at the global batch) that the
// world allows and the model can take (degrees dividing widths, heads and cut points, micro-
// batches dividing the batch), predicted and ranked fastest first; those that do not fit memory
// last, marked. Nodes are priced at each layout's own micro-batch shapes: by the workload
// estimator (workload.h, with `workload`'s options) where the cluster gives no rates, else by
// count_node_work at the cluster's rates (a roofline: the larger of flops / flops_per_second and
// bytes / bytes_per_second).
//
// What is enumerated (bounded: a few hundred plans for a GPT at world 1024, well under a second
// for the default GPT at world 4 with measure = false): the sync mode only (localsgd and co2
// change what is trained, not only how fast: predict_plan prices them when asked); every
// factorisation world = data x pipe x (x y z) with tensor degrees up to ranks_per_node (8 when
// it is 1), X and Z in {1, 2}, Megatron's sequence parallelism as an option when Y > 1, each
// grid checked by shard_for_tensor_parallel itself; stages up to the cut points + 1
// (and 64); micro-batches P, 2P, 4P (1, 2, 4 without a pipeline) dividing each rank's rows;
// 1F1B, and interleaved with 2 chunks where M is a multiple of P and the cut points allow; then
// per layout the memory ladder — ZeRO 0, 1, 2, then each with activation checkpointing, then
// ZeRO 3 without and with it (not with pipeline stages or micro-batches) — until a rung fits
// (later rungs only save memory at a cost in time, so they are left out). Every layout runs the
// data-parallel mode of `mode` (its mode, tau, overlap, outer fields: the sync mode by default),
// and a rung's ZeRO stage only where that mode takes it: under localsgd / co2 a stage above what
// the mode shards alone comes with shard groups (each S > 1 dividing the data degree: ZeRO over
// replicas of S ranks, the outer rule between them).
std::vector<PlanPrediction> rank_plans(const Graph& model, const ClusterSpec& cluster,
                                       const WorkloadOptions& workload = {}, const PlanConfig& mode = {});

// The prediction for one given plan (kInvalidPlan when it does not fit the world or the model).
PlanPrediction predict_plan(const Graph& model, const ClusterSpec& cluster, const PlanConfig& plan,
                            const WorkloadOptions& workload = {});

// The ranked table as text: plan, predicted step time split into compute (and of it the executor
// runs' own cost) / exposed communication / bubble, predicted memory per rank; `limit` rows (0: all).
std::string format_plan_table(const std::vector<PlanPrediction>& plans, size_t limit = 0);

}  // namespace cohort::parallel
