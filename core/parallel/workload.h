// The workload estimator: how long each forward node of a model takes on this machine, forward
// and the backward autodiff adds for it, for the pipeline's stage balancing (pipeline.h) and the
// planner's step-time prediction. Two parts:
//
//   - A count per node: the FLOPs and the bytes moved by its forward and its backward (a matmul's
//     2 M N K forward and twice that backward; an elementwise node's inputs and outputs read and
//     written once each way; ...), from the node's operator, attributes and shapes alone.
//   - Calibration: each distinct operator instance of a model (operator, attributes, input shapes
//     and dtypes, thread count) is timed here once, forward and backward, and the result cached
//     in a file (FlatBuffers, core/parallel/workload.fbs), so the next process on this machine
//     reads it instead of timing again. From the timings, per-operator rates (FLOPs/s, bytes/s and
//     a fixed cost per launch) are fitted, which price instances never timed (other shapes, a
//     model too large to run here: the planner's predictions).
//
// The one thing to know: estimate_node_seconds prices a node by its own timing when the cache has
// it, else by the fitted rates; both describe this machine at this thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace cohort::parallel {

// What one forward node does, forward plus its backward.
struct NodeWork {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read and written
};

// The counts for every node of `forward` (indexed like forward.nodes()); a node of an operator
// the counter does not know is priced by its bytes alone (inputs and outputs, once each way).
std::vector<NodeWork> count_node_work(const Graph& forward);

struct WorkloadOptions {
  int num_threads = 0;  // the threads the trainer will use (0: the process setting)
  // Where timings are cached: a file path. Empty: $COHORT_CACHE_DIR/workload.bin, else
  // $XDG_CACHE_HOME/cohort/workload.bin, else ~/.cache/cohort/workload.bin. A cache that cannot be
  // read (corrupt, another version) is ignored and rewritten; one that cannot be written is
  // skipped (the timings stay in the process). The process keeps each path's timings, read or
  // timed, so no instance is timed twice in one process.
  std::string cache_path;
  // Time the model's operator instances the cache lacks (false: price them by the fitted rates,
  // or by default rates when nothing is cached — for tests and the planner's large models).
  bool measure = true;
};

// Seconds per forward node of `forward` (forward + backward), indexed like forward.nodes().
std::vector<double> estimate_node_seconds(const Graph& forward, const WorkloadOptions& options = {});

// What running a step as several executor runs costs beyond its nodes: under micro-batches or
// pipeline stages a trainer runs each micro-batch's forward and backward of each chunk as runs of
// their own (on the chunk's executors, what forward keeps handed to backward) and accumulates
// every micro-batch's gradients into its own, where without them a step is one run of both, as
// estimate_node_seconds' whole-graph timing is.
struct RunCost {
  double seconds_per_run = 0;            // one executor run's bookkeeping
  double seconds_per_gradient_byte = 0;  // accumulating a micro-batch's gradients: one pass
  double seconds_per_update_byte = 0;    // the optimizer's update, per byte of the parameters it steps
};

// The RunCost of `forward` (a graph with a loss; the planner gives it at one row) on this machine,
// calibrated like the nodes (cached, per graph and thread count): the model trained on zeros by a
// trainer of each kind, steps alternated; the difference of their fastest steps less one pass over
// the gradients (timed on its own), halved, is a run's; and an AdamW update with clipping over
// parameters of the model's shapes (the norm, then parameters and both moments), timed alone,
// per parameter byte — what a step adds after its last backward. Zeros when not measured (options.measure
// false and nothing cached, or a graph a trainer alone cannot run).
RunCost estimate_run_cost(const Graph& forward, const WorkloadOptions& options = {});

// One forward and backward of `forward` (a graph with a loss) as a step without micro-batches runs
// them — one executor run, on zeros — at `num_threads` (0: the process setting): work with a
// step's mix of arithmetic and memory traffic, for the communication probe's compute stretch
// (comm_probe.h). Each call runs it once; from one thread at a time. kInvalidArgument without a
// loss.
std::function<void()> make_step_runner(const Graph& forward, int num_threads = 0);

}  // namespace cohort::parallel
