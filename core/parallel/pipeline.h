// Pipeline parallelism as a cut of the OP-DAG: the model's forward nodes, in their topological
// (id) order, are cut into contiguous stages; each rank builds the graph of its own stages only,
// where the values crossing a cut arrive through pipe_recv nodes and leave through pipe_send
// nodes (core/ops/collective.h), and autodiff turns them into the gradients' way back. The
// trainer runs each stage's forward and backward per micro-batch in the schedule's order
// (TrainerOptions::chunk_losses, schedule).
//
// Where a cut may go (cut points): between two nodes where the fewest values cross — for a GPT
// between blocks (the residual stream), for an MLP between layers. A value crossing several cuts
// is relayed stage to stage, so every stage talks to its two neighbours only. Values made from
// parameters alone (a tensor grid's reads of them: Z's weight gathers and copies, which its
// rewrite puts before every other node, sequence parallelism's copies) never cross: each stage
// makes those it reads, as it holds the parameters, and pays for them in the balance. So the cut
// points of a rewritten graph are its model's, and a cut named by a model's node holds for it. Where the cuts go:
// the workload estimator (workload.h) prices every node on this machine, and the cuts minimise
// the most expensive stage; a plan may name them instead (PipelineConfig::cuts).
//
// Schedules (Narayanan et al. 2021, "Efficient large-scale language model training on GPU
// clusters using Megatron-LM", section 2.2): GPipe (every micro-batch forward, then every one
// backward: M micro-batches in flight), 1F1B (after P - r - 1 forwards, rank r alternates one
// forward and one backward: at most P - r in flight; the same bubble, (P - 1) / (M + P - 1) of the
// time) and interleaved 1F1B (each rank holds V stages, r, r + P, ...: the bubble shrinks V
// times, for V times the messages).
//
// The one thing to know: virtual stage v lives on pipe rank v % P as its chunk v / P; the model's
// loss is in the last stage, on rank P - 1. Every rank of the pipe axis builds its graph from the
// same model and cuts, so the sends and receives of two neighbours are issued in the same order.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/exec/trainer.h"
#include "core/graph/graph.h"
#include "core/parallel/plan.h"

namespace cohort::parallel {

// Positions k in the model's forward nodes (0 < k < nodes) where a stage may begin (see above).
std::vector<size_t> pipeline_cut_points(const Graph& model);

// The stages of a model: stage s is nodes [begin[s], begin[s + 1]) (begin[0] = 0).
struct PipelineStages {
  std::vector<size_t> begin;
  std::vector<double> seconds;  // estimated forward + backward time of each stage
  // "stage 0: nodes 0-41 'wte' .. 'h.1.mlp.c_proj', 0.84 ms" per line.
  std::string describe(const Graph& model) const;
};

// The bytes of the activations crossing a cut before forward node k, for every k in 0..n (one
// micro-batch's; what pipe_send carries, relayed values counted at every cut they cross), and
// their entries.
struct CutSize {
  double bytes = 0;
  double entries = 0;
};
std::vector<CutSize> pipeline_cut_sizes(const Graph& model);

// What a stage costs where the ranks differ (fence.h): stage s's node seconds times scale[s] (the
// speed of the rank it lands on), and a cut, beginning stage s >= 1 at forward node k, priced
// cut_seconds(s, k) (its transfer over the link between the ranks of stages s - 1 and s). The
// most expensive stage or cut is what the cut minimises.
// Per-rank costs of a cut search (fence.cpp): each stage's compute scale, the seconds of the cut
// into stage `stage` made at `node`, and (optional) the compute that cut adds to each of its two
// stages, before their scale (a top-k cut's selection and scatter).
struct StageCosts {
  std::vector<double> scale;
  std::function<double(size_t stage, size_t node)> cut_seconds;
  std::function<double(size_t stage, size_t node)> cut_compute_seconds;
};

// Cuts `model` into `stages` stages at its cut points: at the plan's named cuts (the first node
// of stages 1..S-1; kInvalidPlan naming 'pipeline_cuts' for a name that is no node, not a cut
// point, or out of order), else where the most expensive stage (and, given `costs`, cut) is
// cheapest given node_seconds (per forward node). kInvalidPlan naming 'pipeline_stages' when there
// are fewer cut points than stages - 1. PipelineStages::seconds are scaled by costs->scale and
// include the compute of the cuts on either side (costs->cut_compute_seconds).
PipelineStages cut_pipeline_stages(const Graph& model, int stages, const std::vector<double>& node_seconds,
                                   const std::vector<std::string>& cuts = {}, const StageCosts* costs = nullptr);

// The part of a model this pipe rank runs: its stages' graph, and what the trainer needs.
struct PipelineGraph {
  Graph graph;
  std::vector<std::string> chunk_losses;            // TrainerOptions::chunk_losses
  // Parameters held by several pipe ranks (every such parameter of the model, whether this rank
  // holds it or not), each with those ranks (ascending): make_parallel_trainer makes an axis of
  // them for each, a collective every pipe rank takes part in.
  std::map<std::string, std::vector<int>> tied_holders;
};

// The graph of pipe rank `rank` of `pipe_size` ranks, holding virtual stages rank, rank + P, ...
// of `stages` (as many stages as pipe_size x chunks). Every model input is an input of it (a
// stage reads those it needs). Sends and receives name the axes "pipe" (activations) and
// "pipe_grad" (gradients); a cut c with keep[c] < 1 sends its top-k (PipelineConfig::keep;
// empty: none). kInvalidPlan when the loss is not in the last stage.
PipelineGraph build_pipeline_graph(const Graph& model, const PipelineStages& stages, int pipe_size, int rank,
                                   const std::vector<double>& keep = {});

// Rank `rank`'s order of forward and backward work (see above). kInvalidPlan for an interleaved
// schedule whose micro-batches are not a multiple of pipe_size, or chunks > 1 with another kind.
std::vector<PipelineOp> pipeline_schedule(PipelineSchedule kind, int pipe_size, int chunks, int micro_batches,
                                          int rank);

}  // namespace cohort::parallel
