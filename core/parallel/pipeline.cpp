// Pipeline stages: cut points, the balanced cut, each rank's stage graph and its schedule
// (pipeline.h).
#include "core/parallel/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>

#include "core/base/error.h"
#include "core/ops/collective.h"

namespace cohort::parallel {

namespace {

size_t forward_node_count(const Graph& g) {
  size_t n = 0;
  while (n < g.nodes().size() && !g.nodes()[n].backward) ++n;
  return n;
}

// Parameter-side values: the parameters, and what forward nodes make from them alone — a tensor
// grid's reads of its parameters (tensor_parallel.h): Z's gathers of weight blocks and copies of
// the other parameters, sequence parallelism's copies over Y and the position table's token
// block. They are the same for every micro-batch and made where they are read, so none crosses a
// cut: a stage that reads one makes it itself (build_pipeline_graph), as it holds the parameter.
// Without this, Z's gathers, which the rewrite puts before every node, would start stage 0 and
// be sent through every cut, and a cut point of the model would not be one of its rewrite.
std::vector<bool> parameter_side(const Graph& g) {
  std::vector<bool> side(g.values().size(), false);
  for (const Value& v : g.values()) side[static_cast<size_t>(v.id)] = v.kind == ValueKind::kParameter;
  const size_t n = forward_node_count(g);
  for (size_t k = 0; k < n; ++k) {
    const Node& node = g.nodes()[k];
    bool from_parameters = !node.inputs.empty();
    for (ValueId i : node.inputs) from_parameters = from_parameters && side[static_cast<size_t>(i)];
    if (from_parameters)
      for (ValueId o : node.outputs) side[static_cast<size_t>(o)] = true;
  }
  return side;
}

// A forward node that makes parameter-side values (see above).
bool makes_parameter_side(const Graph& g, const std::vector<bool>& side, size_t k) {
  const Node& node = g.nodes()[k];
  return !node.outputs.empty() && side[static_cast<size_t>(node.outputs[0])];
}

// The activations produced before position k and read at or after it (ascending ids): what a cut
// there sends. Inputs and parameter-side values never cross (every stage has the inputs; a
// parameter lives where it is read).
std::vector<std::vector<ValueId>> crossing_sets(const Graph& g) {
  const size_t n = g.nodes().size();
  const std::vector<bool> side = parameter_side(g);
  std::vector<int64_t> last_read(g.values().size(), -1);
  for (size_t k = 0; k < n; ++k)
    for (ValueId i : g.nodes()[k].inputs) last_read[static_cast<size_t>(i)] = static_cast<int64_t>(k);
  std::vector<std::vector<ValueId>> sets(n + 1);
  std::set<ValueId> live;
  for (size_t k = 0; k < n; ++k) {
    sets[k].assign(live.begin(), live.end());
    for (ValueId o : g.nodes()[k].outputs)
      if (last_read[static_cast<size_t>(o)] > static_cast<int64_t>(k) && !side[static_cast<size_t>(o)]) live.insert(o);
    for (auto it = live.begin(); it != live.end();)
      it = last_read[static_cast<size_t>(*it)] <= static_cast<int64_t>(k) ? live.erase(it) : std::next(it);
  }
  sets[n].assign(live.begin(), live.end());
  return sets;
}

// The position whose stage pays for forward node k: a node making parameter-side values is run
// by the stages that read them, so its cost goes with its first reader that is not one itself.
std::vector<size_t> charged_position(const Graph& g, const std::vector<bool>& side, size_t n) {
  std::vector<size_t> at(n);
  std::vector<int64_t> first_reader(g.values().size(), -1);
  for (size_t k = n; k-- > 0;) {
    at[k] = k;
    if (makes_parameter_side(g, side, k)) {
      int64_t first = -1;
      for (ValueId o : g.nodes()[k].outputs) {
        const int64_t r = first_reader[static_cast<size_t>(o)];
        if (r >= 0 && (first < 0 || r < first)) first = r;
      }
      if (first >= 0) at[k] = at[static_cast<size_t>(first)];
    }
    for (ValueId i : g.nodes()[k].inputs) first_reader[static_cast<size_t>(i)] = static_cast<int64_t>(k);
  }
  return at;
}

}  // namespace

std::vector<size_t> pipeline_cut_points(const Graph& model) {
  const size_t n = forward_node_count(model);
  const std::vector<std::vector<ValueId>> sets = crossing_sets(model);
  const std::vector<bool> side = parameter_side(model);
  size_t fewest = std::numeric_limits<size_t>::max();
  for (size_t k = 1; k < n; ++k)
    if (!sets[k].empty()) fewest = std::min(fewest, sets[k].size());
  std::vector<size_t> points;
  for (size_t k = 1; k < n; ++k) {
    // A stage begins at a node of its own work, not at a parameter-side one (made where read).
    if (sets[k].empty() || sets[k].size() != fewest || makes_parameter_side(model, side, k)) continue;
    bool floats = true;  // the pipe carries f32 and bf16 activations
    for (ValueId v : sets[k]) {
      const DType d = model.value(v).type.dtype;
      floats = floats && (d == DType::kF32 || d == DType::kBF16);
    }
    if (floats) points.push_back(k);
  }
  return points;
}

std::string PipelineStages::describe(const Graph& model) const {
  std::string out;
  const size_t n = forward_node_count(model);
  for (size_t s = 0; s < begin.size(); ++s) {
    const size_t a = begin[s], b = s + 1 < begin.size() ? begin[s + 1] : n;
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f", s < seconds.size() ? seconds[s] * 1e3 : 0.0);
    out += str_cat("stage ", s, ": nodes ", a, "-", b - 1, " '", model.nodes()[a].name, "' .. '",
                   model.nodes()[b - 1].name, "', ", ms, " ms\n");
  }
  return out;
}

std::vector<CutSize> pipeline_cut_sizes(const Graph& model) {
  const size_t n = forward_node_count(model);
  const std::vector<std::vector<ValueId>> sets = crossing_sets(model);
  std::vector<CutSize> out(n + 1);
  for (size_t k = 0; k <= n; ++k)
    for (ValueId v : sets[k]) {
      const TensorType& t = model.value(v).type;
      double entries = 1;
      for (int64_t d : t.shape) entries *= static_cast<double>(d);
      out[k].entries += entries;
      out[k].bytes += entries * static_cast<double>(dtype_size(t.dtype));
    }
  return out;
}

PipelineStages cut_pipeline_stages(const Graph& model, int stages, const std::vector<double>& node_seconds,
                                   const std::vector<std::string>& cuts, const StageCosts* costs) {
  COHORT_CHECK(stages >= 1, Status::kInvalidPlan, "plan: pipeline_stages x pipeline_chunks is ", stages,
               ", expected >= 1");
  const size_t n = forward_node_count(model);
  COHORT_CHECK(node_seconds.size() >= n, Status::kInvalidArgument, "pipeline: ", node_seconds.size(),
               " node costs for ", n, " nodes");
  const std::vector<size_t> points = pipeline_cut_points(model);
  const std::vector<bool> side = parameter_side(model);
  // A node making parameter-side values is paid for where its first reader runs.
  const std::vector<size_t> charged = charged_position(model, side, n);
  std::vector<double> own(n, 0.0);
  for (size_t k = 0; k < n; ++k) own[charged[k]] += std::max(0.0, node_seconds[k]);
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t k = 0; k < n; ++k) prefix[k + 1] = prefix[k] + own[k];
  // Nodes reading a parameter (or a value made from parameters alone), counted: every stage must
  // hold one (a stage with nothing to train would only relay).
  std::vector<size_t> reads(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    bool param = false;
    if (!makes_parameter_side(model, side, k))
      for (ValueId i : model.nodes()[k].inputs) param = param || side[static_cast<size_t>(i)];
    reads[k + 1] = reads[k] + (param ? 1 : 0);
  }
  COHORT_CHECK(costs == nullptr || (costs->scale.size() == static_cast<size_t>(stages) && costs->cut_seconds),
               Status::kInvalidArgument, "pipeline: stage costs for ", costs ? costs->scale.size() : 0, " stages, not ",
               stages);
  auto scale = [&](size_t s) { return costs ? costs->scale[s] : 1.0; };
  // Stage s (0-based) over nodes [b, e): its nodes' compute and its cuts', scaled.
  auto stage_seconds = [&](size_t s, size_t b, size_t e) {
    double t = prefix[e] - prefix[b];
    if (costs && costs->cut_compute_seconds) {
      if (s > 0) t += costs->cut_compute_seconds(s, b);                                   // the cut into it
      if (s + 1 < static_cast<size_t>(stages) && e < n) t += costs->cut_compute_seconds(s + 1, e);  // the cut out
    }
    return t * scale(s);
  };
  PipelineStages out;
  if (!cuts.empty()) {
    COHORT_CHECK(cuts.size() == static_cast<size_t>(stages - 1), Status::kInvalidPlan, "plan: pipeline_cuts names ",
                 cuts.size(), " node(s); ", stages, " stages need ", stages - 1);
    out.begin.push_back(0);
    for (const std::string& name : cuts) {
      size_t k = 0;
      while (k < n && model.nodes()[k].name != name) ++k;
      COHORT_CHECK(k < n, Status::kInvalidPlan, "plan: pipeline_cuts names '", name, "', which is no node of the model");
      COHORT_CHECK(std::find(points.begin(), points.end(), k) != points.end(), Status::kInvalidPlan,
                   "plan: pipeline_cuts names '", name, "', where no stage can begin (", points.size(),
                   " cut points; the first: '", points.empty() ? std::string("none") : model.nodes()[points[0]].name, "')");
      COHORT_CHECK(k > out.begin.back(), Status::kInvalidPlan, "plan: pipeline_cuts: '", name,
                   "' does not come after the cut before it");
      out.begin.push_back(k);
    }
    for (size_t s = 0; s < out.begin.size(); ++s) {
      const size_t b = s + 1 < out.begin.size() ? out.begin[s + 1] : n;
      COHORT_CHECK(reads[b] > reads[out.begin[s]], Status::kInvalidPlan, "plan: pipeline_cuts: stage ", s, " ('",
                   model.nodes()[out.begin[s]].name, "' .. '", model.nodes()[b - 1].name, "') holds no parameter");
    }
  } else {
    COHORT_CHECK(points.size() + 1 >= static_cast<size_t>(stages), Status::kInvalidPlan, "plan: pipeline_stages x pipeline_chunks = ",
                 stages, " stages, but the model has ", points.size(), " cut point(s), so at most ", points.size() + 1,
                 " stages");
    // best[s][j]: the cheapest most expensive stage of s stages covering nodes [0, cut j), where
    // cut j is points[j - 1] (j = 0: nothing; j = P + 1: all n nodes).
    std::vector<size_t> at = {0};
    at.insert(at.end(), points.begin(), points.end());
    at.push_back(n);
    const size_t m = at.size();
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1, std::vector<double>(m, inf));
    std::vector<std::vector<size_t>> from(static_cast<size_t>(stages) + 1, std::vector<size_t>(m, 0));
    best[0][0] = 0.0;
    for (size_t s = 1; s <= static_cast<size_t>(stages); ++s)
      for (size_t j = 1; j < m; ++j)
        for (size_t i = 0; i < j; ++i) {
          if (best[s - 1][i] == inf || reads[at[j]] == reads[at[i]]) continue;
          double cost = std::max(best[s - 1][i], stage_seconds(s - 1, at[i], at[j]));
          if (costs && s > 1) cost = std::max(cost, costs->cut_seconds(s - 1, at[i]));
          if (cost < best[s][j]) {
            best[s][j] = cost;
            from[s][j] = i;
          }
        }
    COHORT_CHECK(best[static_cast<size_t>(stages)][m - 1] < inf, Status::kInvalidPlan, "plan: pipeline_stages x pipeline_chunks = ",
                 stages, " stages, but no cut of the model gives each stage a parameter (", reads[n],
                 " nodes read parameters, ", points.size(), " cut point(s))");
    std::vector<size_t> begins;
    for (size_t s = static_cast<size_t>(stages), j = m - 1; s > 0; --s) {
      j = from[s][j];
      begins.push_back(at[j]);
    }
    std::reverse(begins.begin(), begins.end());
    out.begin = begins;
  }
  for (size_t s = 0; s < out.begin.size(); ++s) {
    const size_t b = s + 1 < out.begin.size() ? out.begin[s + 1] : n;
    out.seconds.push_back(stage_seconds(s, out.begin[s], b));
  }
  return out;
}

PipelineGraph build_pipeline_graph(const Graph& model, const PipelineStages& stages, int pipe_size, int rank,
                                   const std::vector<double>& keep) {
  const int count = static_cast<int>(stages.begin.size());
  COHORT_CHECK(pipe_size >= 1 && count % pipe_size == 0 && rank >= 0 && rank < pipe_size, Status::kInvalidPlan,
               "pipeline: ", count, " stages over ", pipe_size, " ranks (rank ", rank, ")");
  COHORT_CHECK(keep.empty() || keep.size() + 1 == static_cast<size_t>(count), Status::kInvalidPlan, "pipeline: ",
               keep.size(), " keep ratio(s) for ", count - 1, " cut(s)");
  auto cut_keep = [&](int c) { return keep.empty() ? 1.0 : keep[static_cast<size_t>(c)]; };
  const size_t n = forward_node_count(model);
  COHORT_CHECK(model.loss() >= 0, Status::kInvalidPlan, "pipeline: the model has no loss");
  const NodeId loss_node = model.value(model.loss()).producer;
  COHORT_CHECK(static_cast<size_t>(loss_node) >= stages.begin.back(), Status::kInvalidPlan, "pipeline: the loss '",
               model.value(model.loss()).name, "' (node ", loss_node, ") is not in the last stage (nodes ",
               stages.begin.back(), "-", n - 1, "): no cut may come after it");
  const std::vector<std::vector<ValueId>> sets = crossing_sets(model);
  const std::vector<bool> side = parameter_side(model);
  auto stage_end = [&](int v) { return v + 1 < count ? stages.begin[static_cast<size_t>(v) + 1] : n; };
  // The parameters a parameter-side value is made from.
  std::function<void(ValueId, std::set<ValueId>&)> sources = [&](ValueId v, std::set<ValueId>& out) {
    if (model.value(v).kind == ValueKind::kParameter) {
      out.insert(v);
      return;
    }
    for (ValueId i : model.node(model.value(v).producer).inputs) sources(i, out);
  };
  // Which stages read each parameter (directly or through parameter-side values, which a stage
  // makes itself): a parameter read by several is held by each (tied).
  std::map<ValueId, std::set<int>> readers;
  for (int v = 0; v < count; ++v)
    for (size_t k = stages.begin[static_cast<size_t>(v)]; k < stage_end(v); ++k) {
      if (makes_parameter_side(model, side, k)) continue;
      for (ValueId i : model.nodes()[k].inputs) {
        if (!side[static_cast<size_t>(i)]) continue;
        std::set<ValueId> params;
        sources(i, params);
        for (ValueId p : params) readers[p].insert(v);
      }
    }

  PipelineGraph out;
  for (const auto& [p, holders] : readers) {
    std::set<int> ranks;
    for (int h : holders) ranks.insert(h % pipe_size);
    if (ranks.size() > 1) out.tied_holders[model.value(p).name] = std::vector<int>(ranks.begin(), ranks.end());
  }
  Graph& g = out.graph;
  std::vector<ValueId> map(model.values().size(), -1);
  for (ValueId i : model.inputs()) map[static_cast<size_t>(i)] = g.add_input(model.value(i).name, model.value(i).type.dtype, model.value(i).type.shape);
  // This rank's parameters and parameter-side values, made at the first read and shared by its
  // chunks (each chunk runs what its loss reads, so a shared one runs in each).
  std::vector<ValueId> held(model.values().size(), -1);
  std::function<ValueId(ValueId)> hold = [&](ValueId i) -> ValueId {
    if (held[static_cast<size_t>(i)] >= 0) return held[static_cast<size_t>(i)];
    const Value& x = model.value(i);
    if (x.kind == ValueKind::kParameter) {
      const ValueId p = g.add_parameter(x.name, x.type.dtype, x.type.shape, x.init);
      if (!x.shard.empty()) g.set_shard(p, x.shard);
      return held[static_cast<size_t>(i)] = p;
    }
    const Node& node = model.node(x.producer);
    std::vector<ValueId> in;
    for (ValueId j : node.inputs) in.push_back(hold(j));
    const std::vector<ValueId> o = g.add_op(node.op->name, node.name, in, node.attrs);
    for (size_t j = 0; j < o.size(); ++j) held[static_cast<size_t>(node.outputs[j])] = o[j];
    return held[static_cast<size_t>(i)];
  };
  for (int v = rank; v < count; v += pipe_size) {
    const size_t a = stages.begin[static_cast<size_t>(v)], b = stage_end(v);
    // Values arriving from the previous stage (and so relayed when they cross the next cut too).
    std::vector<ValueId> local(map);  // this chunk's view: inputs, and what it receives and makes
    if (v > 0) {
      const double k = cut_keep(v - 1);
      for (ValueId x : sets[a]) {
        Attrs at = k < 1 ? pipe_topk_attrs("pipe", "pipe_grad", (v - 1) % pipe_size, k)
                         : pipe_attrs("pipe", "pipe_grad", (v - 1) % pipe_size);
        at.set("shape", model.value(x).type.shape);
        at.set("dtype", static_cast<int64_t>(model.value(x).type.dtype));
        local[static_cast<size_t>(x)] =
            g.add_op(k < 1 ? "pipe_recv_topk" : "pipe_recv", str_cat("pipe.", v, ".recv.", model.value(x).name), {}, at)[0];
      }
    }
    for (size_t k = a; k < b; ++k) {
      if (makes_parameter_side(model, side, k)) continue;  // made where read, below
      const Node& node = model.nodes()[k];
      std::vector<ValueId> in;
      for (ValueId i : node.inputs) {
        const Value& x = model.value(i);
        if (side[static_cast<size_t>(i)]) local[static_cast<size_t>(i)] = hold(i);
        COHORT_ASSERT(local[static_cast<size_t>(i)] >= 0, "pipeline: stage ", v, " reads '", x.name, "' before it exists");
        in.push_back(local[static_cast<size_t>(i)]);
      }
      const std::vector<ValueId> o = g.add_op(node.op->name, node.name, in, node.attrs);
      for (size_t j = 0; j < o.size(); ++j) local[static_cast<size_t>(node.outputs[j])] = o[j];
    }
    if (v + 1 < count) {
      ValueId loss = -1;
      const double k = cut_keep(v);
      for (ValueId x : sets[b]) {
        const int64_t peer = (v + 1) % pipe_size;
        const ValueId token =
            g.add_op(k < 1 ? "pipe_send_topk" : "pipe_send", str_cat("pipe.", v, ".send.", model.value(x).name),
                     {local[static_cast<size_t>(x)]},
                     k < 1 ? pipe_topk_attrs("pipe", "pipe_grad", peer, k) : pipe_attrs("pipe", "pipe_grad", peer))[0];
        loss = loss < 0 ? token : g.add_op("add", str_cat("pipe.", v, ".tokens.", model.value(x).name), {loss, token}, Attrs())[0];
      }
      out.chunk_losses.push_back(g.value(loss).name);
    } else {
      const size_t l = static_cast<size_t>(model.loss());
      const ValueId loss = side[l] ? hold(model.loss()) : local[l];
      g.set_loss(loss);
      out.chunk_losses.push_back(g.value(loss).name);
    }
    for (ValueId o : model.outputs())
      if (local[static_cast<size_t>(o)] >= 0 && model.value(o).producer >= 0 &&
          static_cast<size_t>(model.value(o).producer) >= a && static_cast<size_t>(model.value(o).producer) < b)
        g.mark_output(local[static_cast<size_t>(o)]);
  }
  return out;
}

std::vector<PipelineOp> pipeline_schedule(PipelineSchedule kind, int pipe_size, int chunks, int micro_batches,
                                          int rank) {
  COHORT_CHECK(pipe_size >= 1 && chunks >= 1 && micro_batches >= 1 && rank >= 0 && rank < pipe_size,
               Status::kInvalidPlan, "pipeline schedule: ", pipe_size, " stages, ", chunks, " chunks, ", micro_batches,
               " micro-batches, rank ", rank);
  COHORT_CHECK(chunks == 1 || kind == PipelineSchedule::kInterleaved, Status::kInvalidPlan,
               "plan: pipeline_chunks ", chunks, " > 1 needs the interleaved schedule");
  std::vector<PipelineOp> ops;
  const int m = micro_batches, p = pipe_size;
  if (kind == PipelineSchedule::kGPipe) {
    for (int k = 0; k < m; ++k) ops.push_back({true, 0, k});
    for (int k = 0; k < m; ++k) ops.push_back({false, 0, k});
    return ops;
  }
  if (kind == PipelineSchedule::kOneFOneB && chunks == 1) {
    const int warm = std::min(p - rank - 1, m);
    for (int k = 0; k < warm; ++k) ops.push_back({true, 0, k});
    for (int k = 0; k < m - warm; ++k) {
      ops.push_back({true, 0, warm + k});
      ops.push_back({false, 0, k});
    }
    for (int k = m - warm; k < m; ++k) ops.push_back({false, 0, k});
    return ops;
  }
  COHORT_CHECK(kind == PipelineSchedule::kInterleaved, Status::kInvalidPlan, "plan: unknown pipeline schedule ",
               static_cast<int>(kind));
  COHORT_CHECK(m % p == 0, Status::kInvalidPlan, "plan: the interleaved schedule needs micro_batches (", m,
               ") to be a multiple of pipeline_stages (", p, ")");
  // The k-th forward (backward) of every rank: groups of P micro-batches go through the chunks in
  // turn (backward: the chunks in reverse), so that each rank's neighbours work on what it sends.
  const int total = m * chunks;
  auto forward_op = [&](int k) { return PipelineOp{true, (k / p) % chunks, (k / (p * chunks)) * p + k % p}; };
  auto backward_op = [&](int k) {
    return PipelineOp{false, chunks - 1 - (k / p) % chunks, (k / (p * chunks)) * p + k % p};
  };
  const int warm = m == p ? total : std::min((p - rank - 1) * 2 + (chunks - 1) * p, total);
  for (int k = 0; k < warm; ++k) ops.push_back(forward_op(k));
  for (int k = 0; k < total - warm; ++k) {
    ops.push_back(forward_op(warm + k));
    ops.push_back(backward_op(k));
  }
  for (int k = total - warm; k < total; ++k) ops.push_back(backward_op(k));
  return ops;
}

}  // namespace cohort::parallel
