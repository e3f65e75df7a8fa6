// OP-Fence (after FusionLLM, Tang et al. 2024): training one model across machines joined by
// uneven links. The ranks are grouped by the bandwidth measured between them (probe_links,
// comm_probe.h), the groups chained so that neighbouring stages sit on the fastest links, and the
// model's forward nodes cut into one contiguous stage per rank so that the slowest of (a stage's
// compute on its rank, a cut's transfer over its link) is as fast as it can be: a slow link gets a
// cut where few activations cross. A cut whose transfer would still be the bottleneck sends only
// the top-k of its activations (PipelineConfig::keep), k chosen from its link (keep_for_cut).
//
// The one thing to know: everything here is arithmetic on measured numbers, one micro-batch at a
// time (node seconds, cut bytes and link times of one micro-batch); make_parallel_trainer runs
// the probes on every rank and this on world rank 0, which ships each rank its stage
// (stage_package.h).
#pragma once

#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/plan.h"

namespace cohort::parallel {

// Ranks grouped by bandwidth, greedily from the fastest link: two groups join when every link
// between their ranks is at least 1 / ratio of the fastest link within the joined group. Each
// group ascending, the groups by their first rank.
std::vector<std::vector<int>> cluster_ranks(const LinkMatrix& links, double ratio);

// The share of a cut's entries to send so that its transfer takes no longer than `target`
// seconds: 1 when latency + bytes / bandwidth already fits; else the largest k with latency +
// entries * (k * value bytes + index bytes) / bandwidth = target, the index bytes per entry 4k
// (int32 indices) or 1/8 (a bitmap, the smaller above k = 1/32: pipe_topk.h), clamped to [min_keep, 1]
// (min_keep when even the latency exceeds target). The way back carries k * entries values and
// no indices (pipe_send_at), so the forward message, the larger, decides.
double keep_for_cut(const CutSize& cut, double latency_seconds, double bytes_per_second, double target,
                    double min_keep);

// Seconds of one micro-batch's cut with keep k over a link: the larger of the two directions
// (a link carries both at once): forward entries * (k * value bytes + index bytes per entry, as
// above) (all of it, no indices, when k is 1), backward k * entries values.
double cut_transfer_seconds(const CutSize& cut, double keep, double latency_seconds, double bytes_per_second);

struct FenceChoice {
  std::vector<std::vector<int>> clusters;
  std::vector<int> rank_order;      // stage s runs on world rank rank_order[s]
  PipelineStages stages;            // seconds: each stage's compute on its rank
  std::vector<double> keep;         // per cut (all 1 without compression)
  std::vector<double> cut_seconds;  // per cut, as sent
  double compute_bottleneck = 0;    // the slowest stage's seconds
  double bottleneck = 0;            // the slowest stage or cut
  // The partition as a table: stage, rank, cluster, nodes, compute, bytes crossing to the next
  // stage, keep, the link, the cut's time; then the bottleneck.
  std::string describe(const Graph& model, const LinkMatrix& links) const;
};

// The partition of `model` (one micro-batch; node_seconds per forward node on world rank 0, as
// estimate_node_seconds gives them) over the links' ranks, each rank's compute scaled by
// compute_scales (measure_compute_scales). Cluster orders are searched whole up to 7 clusters
// (greedily past that), each cluster's ranks in ascending order; for each, the cut minimises the
// bottleneck, cuts priced with the keep ratios a cut would get against the compute-only optimum
// when config.compression (the ratios are then chosen again against the chosen partition's
// slowest stage) — unless the best partition sending every cut whole is within 5% as fast: then
// that one. A compressed cut also costs each of its two stages topk_entry_seconds per entry (the
// selection and scatter; negative: measure_topk_entry_seconds()), so compression is taken only
// where it pays for its own compute. kInvalidPlan when the model has fewer cut points than
// ranks - 1, or a stage would hold no parameter.
FenceChoice choose_fence(const Graph& model, const std::vector<double>& node_seconds, const LinkMatrix& links,
                         const std::vector<double>& compute_scales, const FenceConfig& config,
                         double topk_entry_seconds = -1);

// Seconds per entry of one side's top-k work on a cut (selection and scatter of 2^20 fp32 values
// at keep 0.1, timed once per process on this rank).
double measure_topk_entry_seconds();

}  // namespace cohort::parallel
