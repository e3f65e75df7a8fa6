// OP-Fence: clusters, the chain of ranks, the cut and its compression (fence.h).
#include "core/parallel/fence.h"

#include "core/ops/pipe_topk.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/base/error.h"
#include "kernels/cpu/pipe_topk.h"

namespace cohort::parallel {

namespace {

// Bytes of one top-k index on the wire (pipe_send_topk's int32 positions).

double value_bytes(const CutSize& cut) { return cut.entries > 0 ? cut.bytes / cut.entries : 4.0; }

}  // namespace

std::vector<std::vector<int>> cluster_ranks(const LinkMatrix& links, double ratio) {
  const int n = links.ranks;
  COHORT_CHECK(ratio >= 1, Status::kInvalidArgument, "fence: cluster ratio ", ratio, " must be >= 1");
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    groups.push_back({r});
    group_of[static_cast<size_t>(r)] = r;
  }
  struct Link {
    double bw;
    int a, b;
  };
  std::vector<Link> order;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) order.push_back({links.bandwidth(i, j), i, j});
  std::stable_sort(order.begin(), order.end(), [](const Link& x, const Link& y) { return x.bw > y.bw; });
  for (const Link& l : order) {
    const int ga = group_of[static_cast<size_t>(l.a)], gb = group_of[static_cast<size_t>(l.b)];
    if (ga == gb) continue;
    std::vector<int> joined = groups[static_cast<size_t>(ga)];
    joined.insert(joined.end(), groups[static_cast<size_t>(gb)].begin(), groups[static_cast<size_t>(gb)].end());
    double fastest = 0, slowest = std::numeric_limits<double>::infinity();
    for (size_t x = 0; x < joined.size(); ++x)
      for (size_t y = x + 1; y < joined.size(); ++y) {
        fastest = std::max(fastest, links.bandwidth(joined[x], joined[y]));
        slowest = std::min(slowest, links.bandwidth(joined[x], joined[y]));
      }
    if (slowest * ratio < fastest) continue;
    std::sort(joined.begin(), joined.end());
    groups[static_cast<size_t>(ga)] = joined;
    groups[static_cast<size_t>(gb)].clear();
    for (int r : joined) group_of[static_cast<size_t>(r)] = ga;
  }
  std::vector<std::vector<int>> out;
  for (auto& g : groups)
    if (!g.empty()) out.push_back(g);
  std::sort(out.begin(), out.end());
  return out;
}

double measure_topk_entry_seconds() {
  // A cut's share of the top-k work for one micro-batch, on each side: the sender selects (an
  // nth_element over the magnitudes, then a scan) and later scatters the gradient back into a
  // dense tensor; the receiver scatters the values and later gathers the gradient at the indices.
  // So each side's cost is about one selection and one scatter of the cut's entries, timed here on
  // 2^20 values at keep 0.1, the best of 3.
  static const double per_entry = [] {
    constexpr int64_t kN = int64_t{1} << 20, kK = kN / 10;
    std::vector<float> x(kN), values(kK), dense(kN);
    std::vector<int32_t> idx(kK);
    for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i % 4099) + 0.01f * static_cast<float>(i));
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      kernels::cpu::topk_select(x.data(), sizeof(float), kN, kK, idx.data(), values.data());
      kernels::cpu::scatter_at(values.data(), sizeof(float), idx.data(), kK, dense.data(), kN);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best / static_cast<double>(kN);
  }();
  return per_entry;
}

double keep_for_cut(const CutSize& cut, double latency_seconds, double bytes_per_second, double target,
                    double min_keep) {
  if (cut.entries <= 0 || latency_seconds + cut.bytes / bytes_per_second <= target) return 1.0;
  if (target <= latency_seconds) return min_keep;
  // The forward message's bytes per entry: keep values, and keep int32 indices or a bitmap's 1/8
  // byte, whichever is smaller (pipe_topk.h). The largest keep that fits either way.
  const double per_entry = (target - latency_seconds) * bytes_per_second / cut.entries, v = value_bytes(cut);
  const double listed = per_entry / (v + 4.0), mapped = (per_entry - 1.0 / 8.0) / v;
  const double k = mapped > 1.0 / 32.0 ? std::max(listed, mapped) : listed;
  return std::clamp(k, min_keep, 1.0);
}

double cut_transfer_seconds(const CutSize& cut, double keep, double latency_seconds, double bytes_per_second) {
  if (cut.entries <= 0) return 0.0;
  const double forward =
      keep >= 1 ? cut.bytes : cut.entries * (keep * value_bytes(cut) + topk_index_bytes_per_entry(keep));
  const double backward = keep * cut.bytes;
  return latency_seconds + std::max(forward, backward) / bytes_per_second;
}

std::string FenceChoice::describe(const Graph& model, const LinkMatrix& links) const {
  const std::vector<CutSize> sizes = pipeline_cut_sizes(model);
  size_t n = 0;
  while (n < model.nodes().size() && !model.nodes()[n].backward) ++n;
  std::vector<int> cluster_of(static_cast<size_t>(links.ranks), 0);
  for (size_t c = 0; c < clusters.size(); ++c)
    for (int r : clusters[c]) cluster_of[static_cast<size_t>(r)] = static_cast<int>(c);
  std::string out = "fence: clusters";
  for (size_t c = 0; c < clusters.size(); ++c) {
    out += str_cat(c ? ", " : " ", c, " = {");
    for (size_t i = 0; i < clusters[c].size(); ++i) out += str_cat(i ? "," : "", clusters[c][i]);
    out += "}";
  }
  out += "\nstage  rank  cluster  nodes        first .. last                       compute ms   MB to next   keep    link Mbit/s  latency ms  cut ms\n";
  char line[320];
  const size_t count = stages.begin.size();
  for (size_t s = 0; s < count; ++s) {
    const size_t a = stages.begin[s], b = s + 1 < count ? stages.begin[s + 1] : n;
    const int rank = rank_order[s];
    const std::string span = str_cat(model.nodes()[a].name, " .. ", model.nodes()[b - 1].name);
    std::snprintf(line, sizeof line, "%-6zu %-5d %-8d %4zu-%-7zu %-35.35s %10.3f", s, rank,
                  cluster_of[static_cast<size_t>(rank)], a, b - 1, span.c_str(),
                  s < stages.seconds.size() ? stages.seconds[s] * 1e3 : 0.0);
    out += line;
    if (s + 1 < count) {
      const int next = rank_order[s + 1];
      std::snprintf(line, sizeof line, "   %10.3f   %5.3f  %11.1f  %10.3f  %6.3f", sizes[b].bytes / 1e6, keep[s],
                    links.bandwidth(rank, next) * 8e-6, links.latency(rank, next) * 1e3, cut_seconds[s] * 1e3);
      out += line;
    }
    out += "\n";
  }
  std::snprintf(line, sizeof line, "fence: bottleneck %.3f ms per micro-batch (slowest stage %.3f ms)\n", bottleneck * 1e3,
                compute_bottleneck * 1e3);
  out += line;
  // The same partition as plan fields (rank order aside): --pipeline-cuts and --pipeline-keep.
  std::string cuts, keeps;
  for (size_t s = 1; s < count; ++s) {
    cuts += str_cat(s > 1 ? "," : "", model.nodes()[stages.begin[s]].name);
    std::snprintf(line, sizeof line, "%s%.4g", s > 1 ? "," : "", keep[s - 1]);
    keeps += line;
  }
  return out + "fence: cuts " + cuts + " keep " + keeps + "\n";
}

namespace {

// Compression is taken only where it buys more than this share of the bottleneck: where the
// whole activations are about as fast, the DP's tie among partitions at the compute bound is no
// reason to drop entries (the CNN at 100 Mbit/s: a partition compressing a wide cut to 0.38 ran
// 1.29x slower than the uncompressed one, predicted alike).
constexpr double kCompressionGain = 0.05;

// The fence over one chain of ranks.
FenceChoice fence_for_chain(const Graph& model, const std::vector<double>& node_seconds, const LinkMatrix& links,
                            const std::vector<double>& compute_scales, const FenceConfig& config,
                            const std::vector<int>& chain, const std::vector<CutSize>& sizes,
                            double topk_entry_seconds) {
  const int n = static_cast<int>(chain.size());
  StageCosts costs;
  for (int r : chain) costs.scale.push_back(compute_scales[static_cast<size_t>(r)]);
  // The compute alone: the lower bound on the bottleneck, and the target a compressed cut meets.
  costs.cut_seconds = [](size_t, size_t) { return 0.0; };
  const PipelineStages alone = cut_pipeline_stages(model, n, node_seconds, {}, &costs);
  const double target = *std::max_element(alone.seconds.begin(), alone.seconds.end());
  auto link_of = [&](size_t stage) { return std::make_pair(chain[stage - 1], chain[stage]); };
  auto keep_at = [&](size_t stage, size_t node) {
    const auto [a, b] = link_of(stage);
    return config.compression
               ? keep_for_cut(sizes[node], links.latency(a, b), links.bandwidth(a, b), target, config.min_keep)
               : 1.0;
  };
  costs.cut_seconds = [&](size_t stage, size_t node) {
    const auto [a, b] = link_of(stage);
    return cut_transfer_seconds(sizes[node], keep_at(stage, node), links.latency(a, b), links.bandwidth(a, b));
  };
  // A compressed cut's selection and scatter, on each of its stages (as the search priced the cut).
  costs.cut_compute_seconds = [&](size_t stage, size_t node) {
    return keep_at(stage, node) < 1 ? sizes[node].entries * topk_entry_seconds : 0.0;
  };
  auto choose = [&](bool compress) {
    FenceChoice f;
    f.rank_order = chain;
    f.stages = cut_pipeline_stages(model, n, node_seconds, {}, &costs);
    f.compute_bottleneck = *std::max_element(f.stages.seconds.begin(), f.stages.seconds.end());
    f.bottleneck = f.compute_bottleneck;
    for (int s = 1; s < n; ++s) {
      const auto [a, b] = link_of(static_cast<size_t>(s));
      const double lat = links.latency(a, b), bw = links.bandwidth(a, b);
      const CutSize& cut = sizes[f.stages.begin[static_cast<size_t>(s)]];
      // Against the partition's own slowest stage: a cut need not be faster than that.
      const double k = compress ? keep_for_cut(cut, lat, bw, f.compute_bottleneck, config.min_keep) : 1.0;
      f.keep.push_back(k);
      f.cut_seconds.push_back(cut_transfer_seconds(cut, k, lat, bw));
      f.bottleneck = std::max(f.bottleneck, f.cut_seconds.back());
    }
    return f;
  };
  FenceChoice compressed = choose(config.compression);
  if (!config.compression) return compressed;
  bool drops = false;
  for (double k : compressed.keep) drops = drops || k < 1;
  if (!drops) return compressed;
  costs.cut_seconds = [&](size_t stage, size_t node) {
    const auto [a, b] = link_of(stage);
    return cut_transfer_seconds(sizes[node], 1.0, links.latency(a, b), links.bandwidth(a, b));
  };
  costs.cut_compute_seconds = nullptr;
  FenceChoice whole = choose(false);
  return whole.bottleneck <= compressed.bottleneck * (1 + kCompressionGain) ? whole : compressed;
}

}  // namespace

FenceChoice choose_fence(const Graph& model, const std::vector<double>& node_seconds, const LinkMatrix& links,
                         const std::vector<double>& compute_scales, const FenceConfig& config,
                         double topk_entry_seconds) {
  if (topk_entry_seconds < 0) topk_entry_seconds = config.compression ? measure_topk_entry_seconds() : 0.0;
  const int n = links.ranks;
  COHORT_CHECK(n >= 2, Status::kInvalidPlan, "plan: fence needs at least 2 ranks, the world has ", n);
  COHORT_CHECK(compute_scales.size() == static_cast<size_t>(n), Status::kInvalidArgument, "fence: ",
               compute_scales.size(), " compute scales for ", n, " ranks");
  const std::vector<CutSize> sizes = pipeline_cut_sizes(model);
  const std::vector<std::vector<int>> clusters = cluster_ranks(links, config.cluster_ratio);
  auto chain_of = [&](const std::vector<size_t>& order) {
    std::vector<int> chain;
    for (size_t c : order) chain.insert(chain.end(), clusters[c].begin(), clusters[c].end());
    return chain;
  };
  std::vector<size_t> order(clusters.size());
  std::iota(order.begin(), order.end(), 0);
  FenceChoice best;
  bool have = false;
  auto consider = [&](const std::vector<size_t>& o) {
    FenceChoice f =
        fence_for_chain(model, node_seconds, links, compute_scales, config, chain_of(o), sizes, topk_entry_seconds);
    double sent = 0, best_sent = 0;
    for (double t : f.cut_seconds) sent += t;
    for (double t : best.cut_seconds) best_sent += t;
    // The fastest bottleneck; within 1% of it, the least time on the links.
    if (!have || f.bottleneck < best.bottleneck * 0.99 || (f.bottleneck <= best.bottleneck * 1.01 && sent < best_sent)) {
      best = std::move(f);
      have = true;
    }
  };
  if (clusters.size() <= 7) {
    do consider(order);
    while (std::next_permutation(order.begin(), order.end()));
  } else {
    // Greedy: from the cluster of rank 0, each next cluster the one with the fastest link to the
    // last rank so far.
    std::vector<size_t> greedy = {0};
    std::vector<bool> used(clusters.size(), false);
    used[0] = true;
    for (size_t step = 1; step < clusters.size(); ++step) {
      const int last = clusters[greedy.back()].back();
      size_t pick = 0;
      double fastest = -1;
      for (size_t c = 0; c < clusters.size(); ++c)
        if (!used[c] && links.bandwidth(last, clusters[c].front()) > fastest) {
          fastest = links.bandwidth(last, clusters[c].front());
          pick = c;
        }
      used[pick] = true;
      greedy.push_back(pick);
    }
    consider(greedy);
  }
  best.clusters = clusters;
  return best;
}

}  // namespace cohort::parallel
