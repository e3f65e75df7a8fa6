// The planner (planner.h): a communication table, the model of one plan's step (compute, exposed
// communication, bubble) and memory, and the enumeration of the layouts a world allows.
//
// Conventions of the model (each is a choice; README's planner rows measure how good they are):
//
//   - Batch. `model` is at the global batch B (dim 0 of its first input). Each data replica takes
//     B / D rows, and the Z ranks of a tensor grid train on different rows of those (AxoNN's Z:
//     tensor_parallel.h), so a rank runs micro-batches of B / (D Z M) rows: the graph priced is
//     model.with_batch(B / (D Z M)).
//   - Compute per node (forward + backward) from the workload estimator, or under a cluster's
//     rates as a roofline: max(flops / F, bytes / B) (a GPU kernel is bound by one of the two). A
//     node a tensor grid splits is divided by the degree that splits it: the two linear layers of a
//     pair by X Y, the nodes between them (attention, gelu) by Y (X ranks repeat them after the
//     all-reduce over X), the vocabulary-parallel head and its loss by Y, the rest by Y under
//     Megatron's sequence parallelism and not at all otherwise.
//   - Activation checkpointing adds one more forward of every block node: a third of its forward
//     + backward time (a matmul's backward is two products to its forward's one).
//   - Pipeline: the node times (with the tensor axes' exposed communication attributed to the
//     pair it serves) cut by cut_pipeline_stages into P V stages; rank r runs stages r, r + P, ...
//     The step's pipeline time is the schedule's own (simulate_pipeline): every rank runs the
//     order pipeline_schedule gives it, a chunk's forward of a micro-batch a third of its stage's
//     time and its backward two thirds, each waiting for its input from the neighbouring stage
//     and the message that carries it. The bubble is that time without the messages less the
//     slowest rank's work (M t for its time per micro-batch t): (P - 1) t for 1F1B and GPipe
//     over equal stages, (P - 1) / (M + P - 1) of the pipeline; interleaving's share follows
//     from its order, (P - 1) t / V only when M is large. What the messages add is exposed
//     communication.
//   - Optimizer: AdamW (two fp32 moments per element; core/optim/optimizer.h) and, for bf16
//     parameters, an fp32 master copy; gradients in the parameters' dtype.
#include "core/parallel/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/base/error.h"
#include "core/graph/autodiff.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/tensor_parallel.h"

namespace cohort::parallel {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kPointToPoint: return "point_to_point";
    case CommOp::kAllReduce: return "all_reduce";
    case CommOp::kAllGather: return "all_gather";
    case CommOp::kReduceScatter: return "reduce_scatter";
    case CommOp::kBroadcast: return "broadcast";
    case CommOp::kAllToAll: return "all_to_all";
  }
  return "unknown";
}

namespace {

// The bytes a ring moves over each rank's link for `bytes` (planner.h's convention: each rank's
// input; all_gather: each rank's block), relative to `bytes`.
double ring_volume(CommOp op, int ranks) {
  const double n = std::max(ranks, 2);
  switch (op) {
    case CommOp::kAllReduce: return 2 * (n - 1) / n;
    case CommOp::kReduceScatter:
    case CommOp::kAllToAll: return (n - 1) / n;
    case CommOp::kAllGather: return n - 1;
    case CommOp::kPointToPoint:
    case CommOp::kBroadcast: return 1;
  }
  return 1;
}

}  // namespace

double CommTable::message_compute(double bytes) const {
  return message_compute_seconds + bytes * message_compute_seconds_per_byte;
}

double CommTable::seconds(CommOp op, int ranks, double bytes, bool across_nodes, bool caller_waits) const {
  const CommCost* best = nullptr;
  double best_score = std::numeric_limits<double>::infinity();
  for (const CommCost& e : entries) {
    if (e.op != op) continue;
    // The same placement first, then the same kind of waiting, then the nearest group size (by
    // ratio).
    const double score = (e.across_nodes != across_nodes ? 1e6 : 0) + (e.caller_waits != caller_waits ? 1e3 : 0) +
                         std::fabs(std::log(static_cast<double>(std::max(e.ranks, 1)) / std::max(ranks, 1)));
    if (score < best_score) best_score = score, best = &e;
  }
  COHORT_CHECK(best != nullptr, Status::kNotFound, "comm table (", source, "): no entry for ", comm_op_name(op));
  if (op != CommOp::kPointToPoint && ranks <= 1) return 0;  // a group of one moves nothing
  if (bytes <= 0) return 0;
  COHORT_CHECK(best->bytes_per_second > 0, Status::kInvalidArgument, "comm table (", source, "): ",
               comm_op_name(op), " over ", best->ranks, " ranks has bandwidth ", best->bytes_per_second);
  const double scale = ring_volume(op, ranks) / ring_volume(op, best->ranks);
  return best->latency_seconds + bytes * scale / best->bytes_per_second;
}

CommTable ring_comm_table(const LinkSpec& within_node, const LinkSpec& across_nodes, const std::string& source) {
  COHORT_CHECK(within_node.bytes_per_second > 0 && across_nodes.bytes_per_second > 0, Status::kInvalidArgument,
               "ring_comm_table: link bandwidths must be > 0, got ", within_node.bytes_per_second, " and ",
               across_nodes.bytes_per_second);
  CommTable t;
  t.source = source;
  for (bool across : {false, true}) {
    const LinkSpec& link = across ? across_nodes : within_node;
    for (CommOp op : {CommOp::kPointToPoint, CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                      CommOp::kBroadcast, CommOp::kAllToAll}) {
      // seconds() scales an entry by ring_volume(op, n) / ring_volume(op, 2); an entry whose
      // bandwidth is the link's divided by ring_volume(op, 2) gives bytes * volume(n) / link.
      t.entries.push_back(
          CommCost{op, 2, across, link.latency_seconds, link.bytes_per_second / ring_volume(op, 2)});
    }
  }
  return t;
}

std::string PlanPrediction::describe() const {
  const PipelineConfig& pp = plan.pipeline;
  std::ostringstream s;
  s << "data " << (plan.data_parallel) << " x pipe " << pp.stages << " (";
  if (pp.stages > 1) {
    s << schedule_name(pp.schedule);
    if (pp.chunks > 1) s << " x" << pp.chunks;
    s << ", ";
  }
  s << pp.micro_batches << " micro) x grid " << plan.tensor.x << "x" << plan.tensor.y << "x" << plan.tensor.z;
  if (plan.sequence_parallel == SequenceParallel::kMegatron) s << " sp";
  if (plan.sequence_parallel == SequenceParallel::kAllToAll) s << " sp-a2a";
  s << ", zero " << plan.zero_stage;
  if (plan.shard_group > 1) s << " in groups of " << plan.shard_group;
  if (plan.activation_checkpointing) s << ", ckpt";
  if (plan.mode != SyncMode::kSync) s << ", " << mode_name(plan.mode) << " tau " << plan.tau;
  return s.str();
}

std::string format_plan_table(const std::vector<PlanPrediction>& plans, size_t limit) {
  const size_t n = limit == 0 ? plans.size() : std::min(limit, plans.size());
  size_t width = 4;
  for (size_t i = 0; i < n; ++i) width = std::max(width, plans[i].describe().size());
  std::ostringstream s;
  char line[512];
  // "of it runs" / "of it update": the parts of compute that are the executor runs' own cost and
  // the optimizer's update.
  std::snprintf(line, sizeof line, "%4s  %-*s  %10s  %10s  %11s  %13s  %10s  %10s  %11s  %4s\n", "rank",
                static_cast<int>(width), "plan", "step ms", "compute ms", "of it runs", "of it update", "comm ms",
                "bubble ms", "memory MiB", "fits");
  s << line;
  for (size_t i = 0; i < n; ++i) {
    const PlanPrediction& p = plans[i];
    std::snprintf(line, sizeof line, "%4zu  %-*s  %10.2f  %10.2f  %11.2f  %13.2f  %10.2f  %10.2f  %11.0f  %4s\n",
                  i + 1, static_cast<int>(width), p.describe().c_str(), p.step_seconds() * 1e3,
                  p.compute_seconds * 1e3, p.run_overhead_seconds * 1e3, p.update_seconds * 1e3,
                  p.exposed_comm_seconds * 1e3, p.bubble_seconds * 1e3, p.memory_bytes / (1024.0 * 1024.0),
                  p.fits ? "yes" : "NO");
    s << line;
  }
  return s.str();
}

double simulate_pipeline(PipelineSchedule kind, int P, int V, int M, const std::vector<double>& fwd,
                         const std::vector<double>& bwd, const std::vector<double>& arrive) {
  const int S = P * V;
  COHORT_CHECK(P >= 1 && V >= 1 && M >= 1 && fwd.size() >= static_cast<size_t>(S) && bwd.size() >= fwd.size() &&
                   arrive.size() >= fwd.size(),
               Status::kInvalidArgument, "simulate_pipeline: P ", P, ", V ", V, ", M ", M, ", ", fwd.size(),
               " stage times for ", S, " stages");
  std::vector<std::vector<PipelineOp>> order(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) order[static_cast<size_t>(r)] = pipeline_schedule(kind, P, V, M, r);
  // Finish times of each (stage, micro-batch), -1 until run.
  std::vector<double> f_done(static_cast<size_t>(S * M), -1), b_done(static_cast<size_t>(S * M), -1);
  auto at = [M](int s, int m) { return static_cast<size_t>(s * M + m); };
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  std::vector<double> free_at(static_cast<size_t>(P), 0);
  size_t remaining = 0;
  for (const auto& o : order) remaining += o.size();
  double end = 0;
  // Rank by rank, each runs its next ops while their inputs are known: an op starts when its rank
  // is free and its input has arrived (a longest path through the schedule's dependencies).
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      auto& pos = next[static_cast<size_t>(r)];
      while (pos < order[static_cast<size_t>(r)].size()) {
        const PipelineOp& op = order[static_cast<size_t>(r)][pos];
        const int s = op.chunk * P + r, m = op.micro_batch;
        double ready = 0;
        if (op.forward && s > 0) {
          if (f_done[at(s - 1, m)] < 0) break;
          ready = f_done[at(s - 1, m)] + arrive[static_cast<size_t>(s)];
        } else if (!op.forward) {
          const double dep = s + 1 < S ? b_done[at(s + 1, m)] : f_done[at(s, m)];
          if (dep < 0) break;
          ready = dep + (s + 1 < S ? arrive[static_cast<size_t>(s + 1)] : 0.0);
        }
        double& rank_free = free_at[static_cast<size_t>(r)];
        const double finish = std::max(rank_free, ready) + (op.forward ? fwd : bwd)[static_cast<size_t>(s)];
        (op.forward ? f_done : b_done)[at(s, m)] = finish;
        rank_free = finish;
        end = std::max(end, finish);
        ++pos;
        --remaining;
        progressed = true;
      }
    }
    COHORT_ASSERT(progressed, "planner: the pipeline schedule (P ", P, ", V ", V, ", M ", M, ") deadlocks");
  }
  return end;
}

namespace {

// What a forward node is to a tensor grid.
enum class Role { kOther, kColumn, kRow, kBetween, kHead };

double bytes_of(const TensorType& t) {
  return static_cast<double>(shape_numel(t.shape)) * static_cast<double>(dtype_size(t.dtype));
}

// The facts of the model that do not depend on the batch.
struct ModelFacts {
  int64_t batch = 0;
  std::vector<Role> role;             // per forward node
  std::vector<int> pair_of;           // per node: the pair a column / row / between node serves, else -1
  std::vector<std::vector<NodeId>> blocks;
  std::vector<int> block_of;          // per node, -1 outside every block
  size_t cut_points = 0;
  bool vocab_head = false;  // a linear / matmul head feeding cross_entropy: cut over Y
  std::vector<LinearPair> pairs;
  // Parameters: bytes (at their dtype), the tensor grid's divisor kind, and the nodes reading them.
  struct Param {
    double elements = 0;
    double dtype_bytes = 4;
    Role role = Role::kOther;  // kColumn / kRow: a pair's weight (cut over X, Y and Z); kHead: cut over Y
    bool bias = false;
    std::vector<size_t> readers;  // forward node indices
  };
  std::vector<Param> params;
  std::vector<double> pair_weight_bytes;  // per pair: both weights' bytes (whole)
};

ModelFacts model_facts(const Graph& model) {
  ModelFacts f;
  const std::vector<ValueId> inputs = model.inputs();
  COHORT_CHECK(!inputs.empty() && !model.value(inputs[0]).type.shape.empty(), Status::kInvalidPlan,
               "planner: the model has no batched input");
  COHORT_CHECK(model.loss() >= 0, Status::kInvalidPlan, "planner: the model has no loss");
  f.batch = model.value(inputs[0]).type.shape[0];
  const auto& nodes = model.nodes();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) {
    COHORT_CHECK(!nodes[i].backward, Status::kInvalidPlan, "planner: the model must be a forward graph, '",
                 nodes[i].name, "' is a backward node");
    index[nodes[i].name] = i;
  }
  f.role.assign(nodes.size(), Role::kOther);
  f.pair_of.assign(nodes.size(), -1);
  f.pairs = find_linear_pairs(model);
  for (size_t p = 0; p < f.pairs.size(); ++p) {
    const LinearPair& lp = f.pairs[p];
    auto mark = [&](const std::string& name, Role r) {
      auto it = index.find(name);
      if (it == index.end()) return;
      f.role[it->second] = r;
      f.pair_of[it->second] = static_cast<int>(p);
    };
    for (const std::string& b : lp.between) mark(b, Role::kBetween);
    mark(lp.column, Role::kColumn);
    mark(lp.row, Role::kRow);
  }
  // The vocabulary-parallel head: the loss node and the linear / matmul producing its logits.
  const ValueId loss = model.loss();
  const NodeId loss_node = model.value(loss).producer;
  if (loss_node >= 0) {
    const Node& ln = model.node(loss_node);
    const std::string& op = ln.op->name;
    if (op == "cross_entropy") {
      f.role[static_cast<size_t>(loss_node)] = Role::kHead;
      const NodeId head = model.value(ln.inputs[0]).producer;
      if (head >= 0) {
        const std::string& hop = model.node(head).op->name;
        if (hop == "linear" || hop == "matmul") {
          f.role[static_cast<size_t>(head)] = Role::kHead;
          f.vocab_head = true;
        }
      }
    }
  }
  f.blocks = blocks_by_name(model);
  f.block_of.assign(nodes.size(), -1);
  for (size_t b = 0; b < f.blocks.size(); ++b)
    for (NodeId n : f.blocks[b]) f.block_of[static_cast<size_t>(n)] = static_cast<int>(b);
  f.cut_points = pipeline_cut_points(model).size();
  // Parameters.
  std::map<ValueId, size_t> param_index;
  for (ValueId v : model.parameters()) {
    const Value& val = model.value(v);
    ModelFacts::Param p;
    p.elements = static_cast<double>(shape_numel(val.type.shape));
    p.dtype_bytes = static_cast<double>(dtype_size(val.type.dtype));
    param_index[v] = f.params.size();
    f.params.push_back(p);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t k = 0; k < nodes[i].inputs.size(); ++k) {
      auto it = param_index.find(nodes[i].inputs[k]);
      if (it == param_index.end()) continue;
      ModelFacts::Param& p = f.params[it->second];
      p.readers.push_back(i);
      const Role r = f.role[i];
      if ((r == Role::kColumn || r == Role::kRow) && p.role == Role::kOther) {
        p.role = r;
        p.bias = k >= 2;
      }
      if (r == Role::kHead) p.role = Role::kHead;
    }
  }
  f.pair_weight_bytes.assign(f.pairs.size(), 0);
  for (const auto& p : f.params)
    if ((p.role == Role::kColumn || p.role == Role::kRow) && !p.bias && !p.readers.empty())
      f.pair_weight_bytes[static_cast<size_t>(f.pair_of[p.readers.front()])] += p.elements * p.dtype_bytes;
  return f;
}

// One micro-batch's graph, priced: per node seconds (forward + backward), kept activation bytes,
// and the sizes the tensor axes' communication needs.
struct Priced {
  std::vector<double> seconds;       // per node
  std::vector<double> kept_bytes;    // per node: its outputs backward reads (views excluded)
  std::vector<double> block_input_bytes;  // per block: what activation checkpointing keeps
  std::vector<double> pair_input_bytes;   // per pair: the column layer's input [B, T, C]
  std::vector<double> pair_hidden_bytes;  // per pair: the column layer's output [B, T, hidden]
  std::vector<double> cut_bytes;          // per node k: activation bytes crossing a cut before node k
  double embedding_bytes = 0;             // the first block's input (the vocabulary lookup's sum over Y)
  double rows = 0;                        // B T: positions of the loss (the head's 3 floats a row)
};

Priced price_graph(const Graph& g, const ModelFacts& f, const ClusterSpec& cluster, const WorkloadOptions& workload) {
  Priced p;
  const auto& nodes = g.nodes();
  COHORT_CHECK(nodes.size() == f.role.size(), Status::kInternal, "planner: with_batch changed the node count");
  if (cluster.flops_per_second > 0) {
    const std::vector<NodeWork> work = count_node_work(g);
    const double bw = cluster.bytes_per_second > 0 ? cluster.bytes_per_second : 1e12;
    for (const NodeWork& w : work) p.seconds.push_back(std::max(w.flops / cluster.flops_per_second, w.bytes / bw));
  } else {
    p.seconds = estimate_node_seconds(g, workload);
  }
  p.kept_bytes.assign(nodes.size(), 0);
  // The last forward reader of every value, to find what crosses each cut.
  std::vector<size_t> last_reader(g.values().size(), 0);
  std::vector<bool> read(g.values().size(), false);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId v : nodes[i].inputs) {
      last_reader[static_cast<size_t>(v)] = i;
      read[static_cast<size_t>(v)] = true;
    }
  std::vector<double> delta(nodes.size() + 1, 0);  // + at producer + 1, - after the last reader
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    for (ValueId v : n.outputs) {
      const double b = bytes_of(g.value(v).type);
      if (!n.op->alias_input0 && read[static_cast<size_t>(v)]) p.kept_bytes[i] += b;
      if (read[static_cast<size_t>(v)] && last_reader[static_cast<size_t>(v)] > i) {
        delta[i + 1] += b;
        delta[last_reader[static_cast<size_t>(v)] + 1] -= b;
      }
    }
  }
  p.cut_bytes.assign(nodes.size(), 0);
  double running = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    running += delta[k];
    p.cut_bytes[k] = running;
  }
  // Block inputs: the activations a block reads from outside it.
  for (const auto& block : f.blocks) {
    std::set<NodeId> in_block(block.begin(), block.end());
    std::set<ValueId> seen;
    double b = 0;
    for (NodeId id : block)
      for (ValueId v : g.node(id).inputs) {
        const Value& val = g.value(v);
        if (val.kind != ValueKind::kActivation || in_block.count(val.producer) || !seen.insert(v).second) continue;
        b += bytes_of(val.type);
      }
    p.block_input_bytes.push_back(b);
  }
  p.pair_input_bytes.assign(f.pairs.size(), 0);
  p.pair_hidden_bytes.assign(f.pairs.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (f.role[i] != Role::kColumn) continue;
    const int pr = f.pair_of[i];
    p.pair_input_bytes[static_cast<size_t>(pr)] = bytes_of(g.value(nodes[i].inputs[0]).type);
    p.pair_hidden_bytes[static_cast<size_t>(pr)] = bytes_of(g.value(nodes[i].outputs[0]).type);
  }
  if (!f.blocks.empty()) p.embedding_bytes = p.block_input_bytes.front();
  const Shape& in0 = g.value(g.inputs()[0]).type.shape;
  p.rows = static_cast<double>(in0[0]) * (in0.size() > 1 ? static_cast<double>(in0[1]) : 1.0);
  return p;
}

// Ranks on an axis of `size` ranks whose neighbours are `stride` apart: do they span nodes?
bool spans_nodes(int size, int stride, int ranks_per_node) {
  return size > 1 && static_cast<int64_t>(size) * stride > std::max(ranks_per_node, 1);
}

struct Planner {
  const Graph& model;
  const ClusterSpec& cluster;
  const WorkloadOptions& workload;
  ModelFacts facts;
  std::map<int64_t, std::shared_ptr<Priced>> by_rows;
  std::optional<RunCost> calibrated_runs;
  std::map<std::tuple<int, int, int, int>, bool> grid_ok;

  Planner(const Graph& m, const ClusterSpec& c, const WorkloadOptions& w)
      : model(m), cluster(c), workload(w), facts(model_facts(m)) {}

  const Priced& priced(int64_t rows) {
    auto& slot = by_rows[rows];
    if (!slot) {
      const Graph g = rows == facts.batch ? model : model.with_batch(rows);
      slot = std::make_shared<Priced>(price_graph(g, facts, cluster, workload));
    }
    return *slot;
  }

  // What running a step as several executor runs costs, and the optimizer's update: the
  // cluster's, else calibrated on this machine (none under a cluster's own rates), once, asked by
  // every layout (the update) and for the runs by layouts that run more than one a step.
  // Calibrated at one row a micro-batch: a run's bookkeeping is per node and value and a gradient
  // pass per parameter, neither per row, and the shortest steps make the difference of two step
  // times least noisy (under load at 8 rows it ranged 0-3.8 ms a run where at 1 row 0.04-0.16 ms).
  RunCost run_cost() {
    if (cluster.run_cost.seconds_per_run >= 0 && cluster.run_cost.seconds_per_gradient_byte >= 0)
      return cluster.run_cost;
    if (cluster.flops_per_second > 0) return RunCost{};
    if (!calibrated_runs) calibrated_runs = estimate_run_cost(facts.batch == 1 ? model : model.with_batch(1), workload);
    return *calibrated_runs;
  }

  // Whether the tensor rewrite takes `grid` (cached; the real builder decides).
  bool grid_takes(const TensorGrid& grid, SequenceParallel sp) {
    if (grid.degree() == 1 && sp == SequenceParallel::kNone) return true;
    const auto key = std::make_tuple(grid.x, grid.y, grid.z, static_cast<int>(sp));
    auto it = grid_ok.find(key);
    if (it != grid_ok.end()) return it->second;
    bool ok = true;
    try {
      (void)shard_for_tensor_parallel(model, grid, TensorPosition{}, sp);
    } catch (const Error& e) {
      if (e.status() != Status::kInvalidPlan && e.status() != Status::kUnsupported) throw;
      ok = false;
    }
    grid_ok[key] = ok;
    return ok;
  }

  // Throws kInvalidPlan / kUnsupported as the trainer would for a plan the world or model refuses.
  void check(const PlanConfig& plan, int world) {
    validate_for_world(plan, world);
    COHORT_CHECK(plan.sequence_parallel != SequenceParallel::kAllToAll, Status::kUnsupported,
                 "planner: all-to-all sequence parallelism is not modelled yet (its all_to_all around attention)");
    const PipelineConfig& pp = plan.pipeline;
    COHORT_CHECK(pp.stages >= 1 && pp.chunks >= 1 && pp.micro_batches >= 1, Status::kInvalidPlan,
                 "plan: pipeline stages ", pp.stages, ", chunks ", pp.chunks, ", micro_batches ", pp.micro_batches,
                 " must be >= 1");
    const int data = world / plan.model_degree();
    const int64_t share = static_cast<int64_t>(data) * plan.tensor.z * pp.micro_batches;
    COHORT_CHECK(facts.batch % share == 0, Status::kInvalidPlan, "plan: data ", data, " x tensor_z ", plan.tensor.z,
                 " x micro_batches ", pp.micro_batches, " = ", share, " does not divide the batch ", facts.batch);
    COHORT_CHECK(facts.cut_points + 1 >= static_cast<size_t>(pp.stages * pp.chunks), Status::kInvalidPlan,
                 "plan: pipeline_stages x pipeline_chunks = ", pp.stages * pp.chunks, " stages, but the model has ",
                 facts.cut_points, " cut point(s)");
    if (pp.stages > 1) (void)pipeline_schedule(pp.schedule, pp.stages, pp.chunks, pp.micro_batches, 0);
    COHORT_CHECK(!plan.activation_checkpointing || !facts.blocks.empty(), Status::kInvalidPlan,
                 "plan: activation checkpointing, but the model has no blocks ('h.<l>.' nodes)");
    if (plan.tensor.degree() > 1 || plan.sequence_parallel != SequenceParallel::kNone) {
      const bool ok = grid_takes(plan.tensor, plan.sequence_parallel);
      if (!ok)  // throw the builder's own message
        (void)shard_for_tensor_parallel(model, plan.tensor, TensorPosition{}, plan.sequence_parallel);
    }
  }

  PlanPrediction predict(const PlanConfig& given, int world);
  // predict with the ranks' shared-core stretch scaled to `stretch_share` of its excess over 1.
  PlanPrediction predict_stretched(const PlanConfig& given, int world, double stretch_share);
};

// Where ranks take turns on cores (compute stretch above 1), a pipeline stage shares its core with
// ranks that idle through their own bubble and waits: it is stretched only by the share of the
// step its core-mates compute. The pipeline's stages balanced, that share is the busy share of the
// step the full stretch predicts, and the stretch is applied to that share of its excess over 1,
// once (4 ranks on 2 cores at 1 Gbit/s, 4 stages: busy predicted 8.5 ms against 4.9 measured with
// the full stretch of 2.05, 2026-11-29).
PlanPrediction Planner::predict(const PlanConfig& given, int world) {
  const PlanPrediction full = predict_stretched(given, world, 1.0);
  if (given.pipeline.stages <= 1 || cluster.comm.compute_stretch <= 1.0 || full.step_seconds() <= 0) return full;
  const double busy_share = std::clamp(full.compute_seconds / full.step_seconds(), 0.0, 1.0);
  return predict_stretched(given, world, busy_share);
}

PlanPrediction Planner::predict_stretched(const PlanConfig& given, int world, double stretch_share) {
  check(given, world);
  PlanPrediction out;
  out.plan = given;
  const PlanConfig& plan = out.plan;
  const PipelineConfig& pp = plan.pipeline;
  const int P = pp.stages, V = pp.chunks, M = pp.micro_batches;
  const int X = plan.tensor.x, Y = plan.tensor.y, Z = plan.tensor.z, T = X * Y * Z;
  const int D = world / plan.model_degree();
  out.plan.data_parallel = D;
  const bool sp = plan.sequence_parallel == SequenceParallel::kMegatron;
  const int rpn = std::max(cluster.ranks_per_node, 1);
  const CommTable& comm = cluster.comm;
  // Placement (row-major over data, pipe, x, y, z; z fastest).
  const bool z_across = spans_nodes(Z, 1, rpn), y_across = spans_nodes(Y, Z, rpn), x_across = spans_nodes(X, Y * Z, rpn);
  const bool pipe_across = spans_nodes(P, T, rpn), data_across = spans_nodes(D, P * T, rpn);

  // Ranks taking turns on a node's cores (ClusterSpec): every node's compute stretches alike.
  const double contention =
      cluster.comm.compute_stretch > 0 ? 1.0 + (std::max(1.0, cluster.comm.compute_stretch) - 1.0) * stretch_share
      : cluster.cores_per_node > 0
          ? std::max(1.0, static_cast<double>(std::min(rpn, world)) * std::max(1, cluster.threads_per_rank) /
                              cluster.cores_per_node)
          : 1.0;
  // A core to spare per rank for the transport's progress beside its compute threads: without one,
  // communication the model would overlap with compute takes turns with it instead. Not known
  // (no probe, no cores given: devices compute, host cores drive the transport): spare. Over tcp
  // too (tried: 2 ranks of 1 core each in namespaces at 1 Gbit/s, the gathers priced hidden, the
  // 1x1x2 plan came out at 0.83 of its measured step and ranked first, 46.8% slower than the
  // fastest): the rank's core still drives the transport there.
  const double cores_per_rank =
      cluster.comm.cores_per_rank > 0 ? cluster.comm.cores_per_rank
      : cluster.cores_per_node > 0
          ? static_cast<double>(cluster.cores_per_node) / std::min(rpn, world)
          : std::numeric_limits<double>::infinity();
  const bool spare_core = cores_per_rank >= std::max(1, cluster.threads_per_rank) + 1;
  const int64_t rows = facts.batch / (static_cast<int64_t>(D) * Z * M);
  const Priced& g = priced(rows);
  const size_t n_nodes = facts.role.size();

  // Per node: compute seconds on this rank, and the tensor axes' exposed communication it causes.
  std::vector<double> compute(n_nodes, 0), tcomm(n_nodes, 0), act(n_nodes, 0);
  for (size_t i = 0; i < n_nodes; ++i) {
    double div = 1, adiv = 1;
    switch (facts.role[i]) {
      case Role::kColumn: div = X * Y, adiv = Y; break;
      case Role::kRow: div = X * Y, adiv = sp ? Y : 1; break;
      case Role::kBetween: div = Y, adiv = Y; break;
      case Role::kHead: div = Y, adiv = Y; break;
      case Role::kOther: div = sp ? Y : 1, adiv = sp ? Y : 1; break;
    }
    compute[i] = g.seconds[i] / div * contention;
    if (plan.activation_checkpointing && facts.block_of[i] >= 0) compute[i] += compute[i] / 3;
    act[i] = g.kept_bytes[i] / adiv;
  }
  // The tensor axes' communication per micro-batch (forward and backward), at the pair's column
  // node. Megatron's collectives and AxoNN's X / Y ones sit on the critical path of the layer they
  // serve: counted as exposed, at the table's times for a caller that waits
  // (CommCost::caller_waits). Z's weight gathers are prefetched (FSDP-style) and hidden behind the
  // pair's own compute, exposed only beyond it — where a core is spare for the transport; else
  // exposed whole (no core moves their bytes while the pair computes).
  // Without a core to spare for the transport, each of those collectives also takes the probe's
  // measured processor time of a message from its rank (CommTable::message_compute: handing the
  // operation to the progress thread and being woken when it ends), in compute, stretched like
  // the nodes — at 2 ranks on 2 cores a tensor step's collectives cost their caller 18-25 us each
  // to issue, 2026-11-29.
  constexpr bool kCallerWaits = true;  // CommTable::seconds' last argument
  auto waited = [&](CommOp op, int ranks, double bytes, bool across, size_t node) {
    if (!spare_core) compute[node] += comm.message_compute(bytes) * contention;
    return comm.seconds(op, ranks, bytes, across, kCallerWaits);
  };
  double z_other_grad_bytes = 0;  // parameters outside the pairs: gradients summed over Z
  std::vector<double> pair_compute(facts.pairs.size(), 0);
  for (size_t i = 0; i < n_nodes; ++i)
    if (facts.pair_of[i] >= 0) pair_compute[static_cast<size_t>(facts.pair_of[i])] += compute[i];
  if (T > 1 || sp) {
    for (size_t i = 0; i < n_nodes; ++i) {
      if (facts.role[i] != Role::kColumn) continue;
      const size_t pr = static_cast<size_t>(facts.pair_of[i]);
      const double a = g.pair_input_bytes[pr], h = g.pair_hidden_bytes[pr];
      double both_ways = 0;
      // Under sequence parallelism the pair's output X blocks hold the rank's tokens alone
      // ([B, T / Y, C / X]), and Y gathers the tokens of an X block and reduce-scatters them.
      const double token_share = sp ? Y : 1;
      // Forward and backward: the same collectives (each one's backward is its mirror image).
      for (int pass = 0; pass < 2; ++pass) {
        if (X > 1) {
          both_ways += waited(CommOp::kAllReduce, X, h / Y, x_across, i);
          both_ways += waited(CommOp::kAllGather, X, a / X / token_share, x_across, i);
        }
        if (Y > 1) {
          if (sp)
            both_ways += waited(CommOp::kReduceScatter, Y, a / X, y_across, i) +
                         waited(CommOp::kAllGather, Y, a / (X * Y), y_across, i);
          else
            both_ways += waited(CommOp::kAllReduce, Y, a / X, y_across, i);
        }
      }
      tcomm[i] += both_ways;
      if (Z > 1) {
        // Both weights of the pair: their X Y block, gathered over Z forward and again backward,
        // the gradient reduce-scattered.
        const double w = facts.pair_weight_bytes[pr] / (X * Y);
        const double zc = 2 * comm.seconds(CommOp::kAllGather, Z, w / Z, z_across) +
                          comm.seconds(CommOp::kReduceScatter, Z, w, z_across);
        tcomm[i] += spare_core ? std::max(0.0, zc - pair_compute[pr]) : zc;
      }
    }
    if (Y > 1 && facts.vocab_head && g.embedding_bytes > 0) {
      // The vocabulary-parallel lookup sums its rows over Y (forward), the loss gathers 3 floats a
      // row: at the first and the last node.
      tcomm[0] += waited(sp ? CommOp::kReduceScatter : CommOp::kAllReduce, Y, g.embedding_bytes, y_across, 0);
      tcomm[n_nodes - 1] += waited(CommOp::kAllGather, Y, g.rows * 3 * 4 / Y, y_across, n_nodes - 1);
    }
    if (Z > 1) {
      for (const auto& p : facts.params)
        if (p.role == Role::kOther || p.role == Role::kHead || p.bias)
          z_other_grad_bytes += p.elements * p.dtype_bytes / (p.role == Role::kHead ? Y : 1);
      tcomm[n_nodes - 1] += comm.seconds(CommOp::kAllReduce, Z, z_other_grad_bytes, z_across);
    }
  }

  // Pipeline: stages and ranks.
  const int stage_count = P * V;
  std::vector<size_t> begin{0};
  std::vector<int> stage_of(n_nodes, 0);
  if (stage_count > 1) {
    std::vector<double> cost(n_nodes);
    for (size_t i = 0; i < n_nodes; ++i) cost[i] = compute[i] + tcomm[i];
    begin = cut_pipeline_stages(model, stage_count, cost, pp.cuts).begin;
  }
  for (size_t s = 0; s < begin.size(); ++s) {
    const size_t end = s + 1 < begin.size() ? begin[s + 1] : n_nodes;
    for (size_t i = begin[s]; i < end; ++i) stage_of[i] = static_cast<int>(s);
  }
  // Parameters (and so gradients and optimizer state) per rank.
  std::vector<double> rank_param_elements(P, 0), rank_param_bytes(P, 0);
  double master_bytes_per_element = 0;
  for (const auto& p : facts.params) {
    double div = 1;
    if (p.role == Role::kColumn || p.role == Role::kRow) div = p.bias ? (p.role == Role::kColumn ? Y : 1) : X * Y * Z;
    if (p.role == Role::kHead) div = Y;
    std::set<int> holders;
    for (size_t n : p.readers) holders.insert(stage_of[n] % P);
    if (holders.empty()) holders.insert(0);
    for (int r : holders) {
      rank_param_elements[r] += p.elements / div;
      rank_param_bytes[r] += p.elements * p.dtype_bytes / div;
    }
    if (p.dtype_bytes != 4) master_bytes_per_element = 4;
  }
  std::vector<double> rank_compute(P, 0), rank_tcomm(P, 0), rank_act(P, 0), rank_block_act(P, 0);
  // Micro-batches or stages: per micro-batch a forward and a backward run of each of a rank's V
  // chunks and a pass accumulating its gradients (f32), at the calibrated cost (stretched like the
  // nodes); one run a step otherwise, whose cost the whole-graph calibration already holds.
  std::vector<double> rank_runs(P, 0);  // per micro-batch
  if (P > 1 || M > 1) {
    const RunCost rc = run_cost();
    for (int r = 0; r < P; ++r)
      rank_runs[r] = (2.0 * V * rc.seconds_per_run + rc.seconds_per_gradient_byte * rank_param_elements[r] * 4) *
                     contention;
  }
  rank_compute = rank_runs;
  for (size_t i = 0; i < n_nodes; ++i) {
    const int r = stage_of[i] % P;
    rank_compute[r] += compute[i];
    rank_tcomm[r] += tcomm[i];
    if (!plan.activation_checkpointing || facts.block_of[i] < 0) rank_act[r] += act[i];
  }
  if (plan.activation_checkpointing) {
    // Kept: each block's input; while one block is recomputed, its activations too (the largest).
    std::vector<double> block_full(facts.blocks.size(), 0);
    for (size_t i = 0; i < n_nodes; ++i)
      if (facts.block_of[i] >= 0) block_full[static_cast<size_t>(facts.block_of[i])] += act[i];
    for (size_t b = 0; b < facts.blocks.size(); ++b) {
      const int r = stage_of[static_cast<size_t>(facts.blocks[b].front())] % P;
      rank_act[r] += g.block_input_bytes[b] / (sp ? Y : 1);
      rank_block_act[r] = std::max(rank_block_act[r], block_full[b]);
    }
  }
  // Without a core to spare for the transport, each message a stage sends or receives takes the
  // probe's measured processor time from it (CommTable::message_compute), stretched like the nodes:
  // a forward receives over the cut into its stage and sends over the cut out of it, a backward
  // the other way round. One way:
  std::vector<double> stage_messages(static_cast<size_t>(stage_count), 0);
  auto cut_bytes = [&](int s) { return g.cut_bytes[begin[static_cast<size_t>(s)]] / (sp ? Y : 1); };
  if (!spare_core && stage_count > 1) {
    for (int s = 0; s < stage_count; ++s) {
      double& m = stage_messages[static_cast<size_t>(s)];
      if (s > 0) m += comm.message_compute(cut_bytes(s)) * contention;
      if (s + 1 < stage_count) m += comm.message_compute(cut_bytes(s + 1)) * contention;
      rank_compute[s % P] += 2 * m;
    }
  }
  int slow = 0;
  for (int r = 0; r < P; ++r)
    if (rank_compute[r] + rank_tcomm[r] > rank_compute[slow] + rank_tcomm[slow]) slow = r;
  const double t_micro = rank_compute[slow] + rank_tcomm[slow];
  out.compute_seconds = M * rank_compute[slow];
  out.run_overhead_seconds = M * rank_runs[slow];
  // ZeRO shards over the data ranks, or under shard groups over a replica's ranks.
  const double zero_shards = plan.shard_group > 1 ? plan.shard_group : D;
  // The optimizer's update, once a step after the last backward, over the rank's parameters (its
  // shard of them under ZeRO), at the calibrated cost per f32 byte (stretched like the nodes).
  const double update_shards = plan.zero_stage >= 1 ? zero_shards : 1;
  out.update_seconds = run_cost().seconds_per_update_byte * rank_param_elements[slow] * 4 / update_shards * contention;
  out.compute_seconds += out.update_seconds;
  double exposed = M * rank_tcomm[slow];
  out.bubble_seconds = 0;
  if (P > 1) {
    // The schedule simulated (simulate_pipeline): each virtual stage's micro-batch at its nodes'
    // time and its rank's executor runs (a forward and a backward of each of its V chunks), a
    // third forward and two thirds backward; the point-to-point message over each cut
    // (activations forward, their gradients backward, the same bytes) delays the op waiting on it.
    std::vector<double> fwd(stage_count, 0), bwd(stage_count, 0), arrive(stage_count, 0), none(stage_count, 0);
    for (int s = 0; s < stage_count; ++s) {
      const size_t first = begin[static_cast<size_t>(s)];
      const size_t last = s + 1 < stage_count ? begin[static_cast<size_t>(s) + 1] : n_nodes;
      double t = rank_runs[s % P] / V;
      for (size_t i = first; i < last; ++i) t += compute[i] + tcomm[i];
      fwd[static_cast<size_t>(s)] = t / 3 + stage_messages[static_cast<size_t>(s)];
      bwd[static_cast<size_t>(s)] = 2 * t / 3 + stage_messages[static_cast<size_t>(s)];
      if (s > 0) arrive[static_cast<size_t>(s)] = comm.seconds(CommOp::kPointToPoint, 2, cut_bytes(s), pipe_across);
    }
    const double without_messages = simulate_pipeline(pp.schedule, P, V, M, fwd, bwd, none);
    const double with_messages = simulate_pipeline(pp.schedule, P, V, M, fwd, bwd, arrive);
    out.bubble_seconds = std::max(0.0, without_messages - M * t_micro);
    exposed += std::max(0.0, with_messages - without_messages);
  }

  // AdamW's moments (fp32) and the fp32 master copy of low-precision parameters; local SGD and
  // co2 add an fp32 anchor and outer momentum.
  const double outer = plan.mode == SyncMode::kSync ? 0 : 8;
  double memory = 0;
  double dp_exposed = 0;
  for (int r = 0; r < P; ++r) {
    const double params = rank_param_bytes[r], grads = rank_param_bytes[r];
    const double state = rank_param_elements[r] * (8 + master_bytes_per_element);
    const double outer_state = rank_param_elements[r] * outer;
    const int zs = plan.zero_stage;
    // Under shard groups the outer state follows the ZeRO shard.
    const bool outer_sharded = plan.shard_group > 1 || (plan.mode == SyncMode::kLocalSgd && zs >= 1);
    double m = (zs >= 3 ? params / zero_shards : params) + (zs >= 2 ? grads / zero_shards : grads) +
               (zs >= 1 ? state / zero_shards : state) + (outer_sharded ? outer_state / zero_shards : outer_state);
    // ZeRO 3: the bucket in use gathered whole, and the next one prefetched.
    if (zs >= 3) m += std::min(params, 2.0 * static_cast<double>(plan.bucket_bytes));
    // Activations: micro-batches in flight (GPipe M; 1F1B P - r; interleaved rank 0 keeps
    // (1 + (P - 1) / (P V)) times 1F1B's, Narayanan et al. 2021 section 2.2.2).
    double in_flight = 1;
    if (P > 1) {
      if (pp.schedule == PipelineSchedule::kGPipe) in_flight = M;
      else in_flight = std::min<double>(M, P - r);
      if (V > 1) in_flight = std::min<double>(M * V, in_flight * V * (1.0 + (P - 1.0) / (P * V))) / V;
    }
    m += rank_act[r] * in_flight + rank_block_act[r];
    memory = std::max(memory, m);

    // Data-parallel communication of this rank's gradients (its stages' parameters).
    if (D <= 1) continue;
    const double backward = (2.0 / 3.0) * rank_compute[r];  // the last micro-batch's backward
    const double bucket = std::min(grads, static_cast<double>(plan.bucket_bytes));
    // The synchronous path over a group of G data ranks (`across`: spanning nodes), every step.
    auto sync_exposed = [&](int G, bool across) {
      // Buckets reduce as backward produces them: what takes longer than the last micro-batch's
      // backward is exposed, and the last bucket always is (it is ready only when backward ends).
      const CommOp red = zs == 0 ? CommOp::kAllReduce : CommOp::kReduceScatter;
      const double t_red = comm.seconds(red, G, grads, across);
      double s = std::max(comm.seconds(red, G, bucket, across), t_red - backward);
      // ZeRO 1-2: the updated parameter shards are all-gathered after the step, before the next
      // forward: exposed. ZeRO 3: gathered in every forward and backward instead, prefetched
      // behind compute; the first bucket waits.
      if (zs == 1 || zs == 2) s += comm.seconds(CommOp::kAllGather, G, params / G, across);
      if (zs == 3) {
        const double gathers = 2.0 * M * comm.seconds(CommOp::kAllGather, G, params / G, across);
        s += std::max(comm.seconds(CommOp::kAllGather, G, bucket / G, across), gathers - M * rank_compute[r]);
      }
      return s;
    };
    double e = 0;
    if (plan.mode == SyncMode::kSync) {
      e = sync_exposed(D, data_across);
    } else {
      // Shard groups (S > 1): each replica of S consecutive data ranks steps synchronously under
      // ZeRO, every step; between the D / S replicas, each rank's shard (1/S of its parameters)
      // is averaged over the ranks of its position, S such groups at once.
      const int S = std::max(plan.shard_group, 1), replicas = D / S;
      if (S > 1) e = sync_exposed(S, spans_nodes(S, P * T, rpn));
      // Every tau steps the pseudo-gradient (fp32; outer_bits under co2) is averaged. localsgd
      // waits for it; co2 hides it behind `overlap` steps of the next round.
      const bool outer_across = spans_nodes(replicas, S * P * T, rpn);
      const double pseudo = rank_param_elements[r] * 4 / S;
      double t = replicas <= 1 ? 0.0
                 : plan.mode == SyncMode::kCo2 && plan.outer_bits < 32
                     ? comm.seconds(CommOp::kAllGather, replicas, pseudo * plan.outer_bits / 32.0, outer_across)
                     : comm.seconds(CommOp::kAllReduce, replicas, pseudo, outer_across);
      if (plan.mode == SyncMode::kCo2) {
        const double step = M * t_micro + out.bubble_seconds + e;
        t = std::max(0.0, t - static_cast<double>(plan.overlap) * step);
      }
      e += t / static_cast<double>(std::max<int64_t>(plan.tau, 1));
    }
    dp_exposed = std::max(dp_exposed, e);
  }
  out.exposed_comm_seconds = exposed + dp_exposed;
  out.memory_bytes = memory;
  out.fits = cluster.memory_bytes_per_rank <= 0 || memory <= cluster.memory_bytes_per_rank;
  return out;
}

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(static_cast<int>(k));
  return d;
}

}  // namespace

PlanPrediction predict_plan(const Graph& model, const ClusterSpec& cluster, const PlanConfig& plan,
                            const WorkloadOptions& workload) {
  Planner planner(model, cluster, workload);
  return planner.predict(plan, cluster.world);
}

std::vector<PlanPrediction> rank_plans(const Graph& model, const ClusterSpec& cluster, const WorkloadOptions& workload,
                                       const PlanConfig& mode) {
  COHORT_CHECK(cluster.world >= 1, Status::kInvalidArgument, "planner: world ", cluster.world, " must be >= 1");
  Planner planner(model, cluster, workload);
  const ModelFacts& f = planner.facts;
  const int world = cluster.world;
  // Tensor grids within a node (its collectives are the most frequent): degrees up to the ranks
  // of a node (8 when the cluster does not say), X and Z at most 2 (Megatron's 1D, AxoNN's 2D and
  // 3D at their smallest), Megatron's sequence parallelism as an option of every Y > 1.
  const int max_tensor = cluster.ranks_per_node > 1 ? cluster.ranks_per_node : std::min(world, 8);
  struct GridChoice {
    TensorGrid grid;
    SequenceParallel sp;
  };
  std::vector<GridChoice> grids;
  for (int t : divisors(world)) {
    if (t > max_tensor) break;
    for (int x : {1, 2})
      for (int z : {1, 2}) {
        if (t % (x * z) != 0) continue;
        const TensorGrid grid{x, t / (x * z), z};
        if (t > 1 && f.pairs.empty()) continue;
        for (SequenceParallel sp : {SequenceParallel::kNone, SequenceParallel::kMegatron}) {
          if (sp == SequenceParallel::kMegatron && grid.y == 1) continue;
          if (!planner.grid_takes(grid, sp)) continue;
          grids.push_back({grid, sp});
        }
      }
  }
  std::vector<PlanPrediction> out;
  const int max_stages = static_cast<int>(std::min<size_t>(f.cut_points + 1, 64));
  for (const GridChoice& gc : grids) {
    const int t = gc.grid.degree();
    for (int P : divisors(world / t)) {
      if (P > max_stages) break;
      const int D = world / (t * P);
      const int64_t share = static_cast<int64_t>(D) * gc.grid.z;
      if (f.batch % share != 0) continue;
      const int64_t per_rank = f.batch / share;
      // Micro-batches: P, 2P, 4P (1, 2, 4 without a pipeline) where they divide the rows, else the
      // largest divisor below P.
      std::vector<int> micro;
      for (int k : {1, 2, 4}) {
        const int64_t m = static_cast<int64_t>(P) * k;
        if (m <= per_rank && per_rank % m == 0) micro.push_back(static_cast<int>(m));
      }
      if (micro.empty())
        for (int m : divisors(per_rank))
          if (m <= P) micro = {m};
      for (int M : micro)
        for (int V : {1, 2}) {
          if (V > 1 && (P == 1 || M % P != 0 || static_cast<size_t>(P * V) > f.cut_points + 1)) continue;
          // The memory ladder: ZeRO 0, 1, 2, then the same with activation checkpointing; each
          // rung saves memory for time (in this model ZeRO 1-2 move as many bytes as DDP, the
          // all-gather after the step exposed; checkpointing adds a forward), so a layout's rungs
          // are tried in order until one fits and the rest, slower and not needed, are left out.
          // ZeRO 3 (parameters sharded too, gathered in every pass: with micro-batches in every
          // slot, 2 M gathers a step, as predict prices it) comes last, without and then with
          // checkpointing.
          bool fitted = false;
          for (int rung = 0; rung < 4; ++rung) {
            const bool ckpt = rung % 2 == 1;
            if (ckpt && f.blocks.empty()) continue;
            const std::vector<int> zeros = rung < 2 ? std::vector<int>{0, 1, 2} : std::vector<int>{3};
            // Shard groups: the ZeRO stages the mode takes only inside replicas (localsgd / co2).
            std::vector<int> groups{1};
            if (mode.mode != SyncMode::kSync)
              for (int S : divisors(D))
                if (S > 1) groups.push_back(S);
            for (int zero : zeros)
              for (int S : groups) {
                if ((zero > 0 && D == 1) || (zero == 0 && S > 1) || fitted) continue;
                PlanConfig plan = mode;
                plan.automatic = false;
                plan.data_parallel = D;
                plan.zero_stage = zero;
                plan.shard_group = S;
                plan.tensor = gc.grid;
                plan.sequence_parallel = gc.sp;
                plan.activation_checkpointing = ckpt;
                plan.pipeline = PipelineConfig{};
                plan.pipeline.stages = P;
                plan.pipeline.chunks = V;
                plan.pipeline.micro_batches = M;
                plan.pipeline.schedule = V > 1 ? PipelineSchedule::kInterleaved : PipelineSchedule::kOneFOneB;
                try {  // the mode refuses some stages (validate): skipped
                  out.push_back(planner.predict(plan, world));
                  fitted = out.back().fits;
                } catch (const Error& e) {
                  if (e.status() != Status::kInvalidPlan && e.status() != Status::kUnsupported) throw;
                }
              }
          }
        }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const PlanPrediction& a, const PlanPrediction& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.step_seconds() != b.step_seconds()) return a.step_seconds() < b.step_seconds();
    return a.memory_bytes < b.memory_bytes;
  });
  return out;
}

}  // namespace cohort::parallel
