// The workload estimator (workload.h): counts per node, calibration of operator instances timed
// alone in a one-node graph, the cache file (workload.fbs) and the per-operator fit.
#include "core/parallel/workload.h"

#include <flatbuffers/flatbuffers.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "core/base/error.h"
#include "core/base/file_io.h"
#include "core/checkpoint/format.h"
#include "core/exec/executor.h"
#include "core/exec/trainer.h"
#include "core/graph/autodiff.h"
#include "core/graph/initializer.h"
#include "core/optim/optimizer.h"
#include "core/parallel/workload_generated.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threads.h"

namespace cohort::parallel {

namespace {

namespace wf = workload_file;

// Bump with any change of the key or of count_node_work (cached counts feed the fit).
constexpr uint32_t kWorkloadFormatVersion = 3;  // 2: executor runs' cost ((runs), (gradient pass)); 3: (update)

// Rates used when nothing is timed at this thread count: a modest core, so that a plan made
// before any calibration is not wildly optimistic.
constexpr double kDefaultFlopsPerThread = 5e9;
constexpr double kDefaultBytesPerSecond = 5e9;
constexpr double kDefaultFixedSeconds = 1e-5;

// Timing budget per instance: a warm-up run, then up to kMaxRuns timed runs while their total
// stays under kRunBudget (at least one).
constexpr int kMaxRuns = 5;
constexpr double kRunBudgetSeconds = 0.1;

double bytes_of(const TensorType& t) {
  return static_cast<double>(shape_numel(t.shape)) * static_cast<double>(dtype_size(t.dtype));
}
double numel_of(const TensorType& t) { return static_cast<double>(shape_numel(t.shape)); }

bool is_view(const Node& n) { return n.op->alias_input0; }

// Operators that cannot run in a one-node graph on this process: collectives and the operators
// of a parallel plan need grid axes; internal ones are made only by backward rules.
bool timeable(const Node& n) {
  if (n.op->collective || n.op->internal || n.op->host_only || is_view(n) || !n.op->kernels[0]) return false;
  const auto& all = n.attrs.all();
  auto axis = all.find("axis");
  return axis == all.end() || !std::holds_alternative<std::string>(axis->second);
}

NodeWork count_one(const Graph& g, const Node& n) {
  std::vector<TensorType> in, out;
  for (ValueId v : n.inputs) in.push_back(g.value(v).type);
  for (ValueId v : n.outputs) out.push_back(g.value(v).type);
  double in_bytes = 0, out_bytes = 0;
  for (const auto& t : in) in_bytes += bytes_of(t);
  for (const auto& t : out) out_bytes += bytes_of(t);
  const double io = in_bytes + out_bytes;
  const std::string& op = n.op->name;
  NodeWork w;
  // An elementwise-like node: `per` flops per output element each way, its inputs and outputs
  // read and written once forward and about as much backward (dy read, dx written).
  auto elementwise = [&](double per_fwd, double per_bwd) {
    const double e = out.empty() ? 0 : numel_of(out[0]);
    return NodeWork{e * (per_fwd + per_bwd), 2 * io};
  };
  if (is_view(n)) return w;  // no kernel, no copy
  if (n.op->collective || op == "split_to_axis" || op == "gather_from_axis") {
    w.bytes = 2 * io;  // moved, not computed; the link's time is the planner's communication model
    return w;
  }
  if (op == "matmul" || op == "matmul_sum_batch" || op == "matmul_mul") {
    const Shape& a = in[0].shape;
    const Shape& b = in[1].shape;
    auto flag = [&](const char* name) { return n.attrs.has(name) && n.attrs.get_int(name) != 0; };
    const bool ta = flag("transpose_a"), tb = flag("transpose_b");
    const double K = static_cast<double>(ta ? a[a.size() - 2] : a.back());
    // Multiply-adds: every output element's K, or for matmul_sum_batch (its output summed over
    // the batch) every batch's M x N x K: all of a's elements times N.
    const double products =
        op == "matmul_sum_batch"
            ? static_cast<double>(shape_numel(a)) * static_cast<double>(tb ? b[b.size() - 2] : b.back())
            : numel_of(out[0]) * K;
    w.flops = 3 * 2 * products;  // forward, and one product per operand backward
    w.bytes = 3 * io;
    return w;
  }
  if (op == "linear" || op == "gelu_linear") {
    const double K = static_cast<double>(in[0].shape.back());
    const double mn = numel_of(out[0]);
    w.flops = 3 * 2 * mn * K + (in.size() > 2 ? 2 * mn : 0);  // products, the bias and its gradient
    if (op == "gelu_linear") w.flops += 20 * numel_of(in[0]);  // gelu and its derivative, both ways
    w.bytes = 3 * io;
    return w;
  }
  if (op == "attention") {
    const Shape& q = in[0].shape;  // [B, T, 3C]
    const double B = static_cast<double>(q[0]), T = static_cast<double>(q[1]), C = static_cast<double>(q[2] / 3);
    const double H = static_cast<double>(n.attrs.get_int("heads"));
    // The pairs of positions scored: all, or the causal triangle with its diagonal.
    const double pairs = n.attrs.get_int("causal") != 0 ? T * (T + 1) / 2 : T * T;
    // Forward: Q K^T and P V; backward recomputes Q K^T and forms dP, dV, dQ, dK (attention.cpp
    // keeps the log-sum-exp, not the probabilities). Plus ~5 flops a score for softmax each way.
    w.flops = (2 + 5) * 2 * B * pairs * C + 2 * 5 * B * H * pairs;
    w.bytes = 3 * io;
    return w;
  }
  if (op == "conv2d") {
    const Shape& wt = in[1].shape;  // [O, C/groups, KH, KW]
    const double per_out = static_cast<double>(wt[1] * wt[2] * wt[3]);
    w.flops = 3 * 2 * numel_of(out[0]) * per_out;
    w.bytes = 3 * io;
    return w;
  }
  if (op == "max_pool2d" || op == "avg_pool2d") {
    const auto& k = n.attrs.get_ints("kernel");
    double area = 1;
    for (int64_t d : k) area *= static_cast<double>(d);
    w.flops = 2 * numel_of(out[0]) * area;
    w.bytes = 2 * io;
    return w;
  }
  if (op == "layernorm" || op == "rmsnorm" || op == "groupnorm") {
    const double e = numel_of(in[0]);
    w.flops = e * (8 + 12);
    w.bytes = io + 2 * bytes_of(in[0]) + io;  // backward reads x and dy, writes dx
    return w;
  }
  if (op == "embedding" || op == "vocab_embedding") {
    // Forward gathers rows; backward zeroes the whole table's gradient and adds the rows into it.
    w.flops = numel_of(out[0]);
    w.bytes = 2 * out_bytes + 2 * bytes_of(in[1]) + out_bytes + bytes_of(in[0]);
    return w;
  }
  if (op == "cross_entropy" || op == "vocab_cross_entropy" || op == "vocab_cross_entropy_partials") {
    const double e = numel_of(in[0]);
    w.flops = e * (4 + 3);
    w.bytes = io + 2 * bytes_of(in[0]) + bytes_of(in[1]);  // backward reads the logits, writes their gradient
    return w;
  }
  if (op == "softmax" || op == "log_softmax") return elementwise(5, 4);
  if (op == "gelu" || op == "tanh") return elementwise(10, 10);
  if (op == "dropout") return elementwise(4, 4);  // the mask drawn again backward
  if (op == "relu" || op == "add" || op == "sub" || op == "mul" || op == "scale" || op == "sum" ||
      op == "mean")
    return elementwise(1, 1);
  // transpose, concat, split and operators the counter does not know: bytes, once each way.
  w.bytes = 2 * io;
  return w;
}

// "op|name=value;...|f32[8, 128],i32[8]|t4": what makes two instances cost the same. Seeds (a
// dropout site's, the forward node a dropout_grad follows) do not change the cost, so blocks that
// differ only by them share a timing.
std::string instance_key(const Graph& g, const Node& n, int threads) {
  std::ostringstream s;
  s.precision(17);
  s << n.op->name << '|';
  for (const auto& [name, value] : n.attrs.all()) {
    if (name == "seed" || name == "node") continue;
    s << name << '=';
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
            s << '[';
            for (const auto& x : v) s << x << ',';
            s << ']';
          } else {
            s << v;
          }
        },
        value);
    s << ';';
  }
  s << '|';
  for (ValueId v : n.inputs) s << dtype_name(g.value(v).type.dtype) << shape_str(g.value(v).type.shape) << ',';
  s << "|t" << threads;
  return s.str();
}

struct Timing {
  std::string op;
  int threads = 0;
  double seconds = 0;
  NodeWork work;
};

// One cache file's timings as this process knows them (read from the file, or timed here).
struct CacheState {
  std::map<std::string, Timing> timings;
  std::set<std::string> failed;  // instances that could not run alone: not tried again
};

std::mutex g_mutex;
std::unordered_map<std::string, CacheState>& process_cache() {
  static auto* caches = new std::unordered_map<std::string, CacheState>();
  return *caches;
}

std::string default_cache_path() {
  if (const char* d = std::getenv("COHORT_CACHE_DIR"); d && *d) return std::string(d) + "/workload.bin";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/cohort/workload.bin";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/cohort/workload.bin";
  return "";
}

enum class FileState { kMissing, kValid, kUnreadable };

// Merges the file's timings into `timings` (those already known here win: same machine).
FileState read_cache(const std::string& path, std::map<std::string, Timing>& timings) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::filesystem::exists(path) ? FileState::kUnreadable : FileState::kMissing;
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) return FileState::kUnreadable;
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (data.size() < 8 || !wf::WorkloadCacheBufferHasIdentifier(data.data()) ||
      !wf::VerifyWorkloadCacheBuffer(verifier))
    return FileState::kUnreadable;
  const wf::WorkloadCache* root = wf::GetWorkloadCache(data.data());
  if (root->format_version() != kWorkloadFormatVersion) return FileState::kUnreadable;
  for (const wf::Timing* t : *root->timings()) {
    if (!std::isfinite(t->seconds()) || t->seconds() < 0 || !std::isfinite(t->flops()) ||
        !std::isfinite(t->bytes()))
      return FileState::kUnreadable;
    Timing timing{t->op()->str(), t->threads(), t->seconds(), {t->flops(), t->bytes()}};
    timings.emplace(t->key()->str(), std::move(timing));
  }
  return FileState::kValid;
}

// Replaces the file atomically; a path that cannot be written is skipped (the timings stay in
// the process).
void write_cache(const std::string& path, const std::map<std::string, Timing>& timings) {
  try {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<wf::Timing>> entries;
    for (const auto& [key, t] : timings)
      entries.push_back(wf::CreateTiming(b, b.CreateString(key), b.CreateString(t.op), t.threads, t.seconds,
                                         t.work.flops, t.work.bytes));
    auto root = wf::CreateWorkloadCache(b, kWorkloadFormatVersion, b.CreateVector(entries));
    wf::FinishWorkloadCacheBuffer(b, root);
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    AtomicFile out(path, "workload cache");
    out.write(b.GetBufferPointer(), b.GetSize());
    out.commit();
  } catch (const std::exception&) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The "operators" of a whole graph's timing (estimate_node_seconds' calibration of the sum) and of
// its executor runs' own cost and a pass over its gradients (estimate_run_cost).
const char* const kWholeGraph = "(graph)";
const char* const kRunOverhead = "(runs)";
const char* const kGradientPass = "(gradient pass)";
const char* const kUpdate = "(update)";

// Seconds of one run of `graph`'s targets, the median of a few after a warm-up.
double time_graph(const Graph& graph, const std::vector<ValueId>& targets,
                  const std::unordered_map<ValueId, Tensor>& bound, int threads) {
  Executor exec(graph, targets);
  RunOptions ro;
  ro.num_threads = threads;
  ro.training = true;
  using Clock = std::chrono::steady_clock;
  auto run_once = [&] {
    std::unordered_map<ValueId, Tensor> env = bound;
    const auto start = Clock::now();
    exec.run(env, ro);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double warm = run_once();  // buffers allocated, oneDNN primitives made
  std::vector<double> runs;
  double spent = 0;
  const int wanted = warm > kRunBudgetSeconds ? 1 : kMaxRuns;
  while (static_cast<int>(runs.size()) < wanted && (runs.empty() || spent < kRunBudgetSeconds)) {
    runs.push_back(run_once());
    spent += runs.back();
  }
  return median(runs);
}

// Forward + backward seconds of node `n` alone, its inputs bound to random values, and its
// output 0 summed into the loss that drives backward (the summed type is returned in `summed`,
// for the caller to subtract that sum's cost). Throws what the graph or the kernels throw.
double time_instance(const Graph& model, const Node& n, int threads, std::optional<TensorType>* summed) {
  Graph g;
  std::unordered_map<ValueId, Tensor> bound;
  std::vector<ValueId> inputs, wrt;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const TensorType& t = model.value(n.inputs[i]).type;
    const std::string name = str_cat("in", i);
    ValueId v;
    Tensor value = Tensor::empty(t.shape, t.dtype);
    if (dtype_is_float(t.dtype)) {
      Initializer init;
      init.kind = InitKind::kUniform;
      init.a = -1.0;
      init.b = 1.0;
      init.seed = i + 1;
      v = g.add_parameter(name, t.dtype, t.shape, init);
      initialize_parameter(value, init, 0, name);
      wrt.push_back(v);
    } else {
      // Indices and labels: valid for an embedding's table (input 0's rows) and for the classes
      // of a cross entropy (input 0's last dim), spread like real tokens.
      const Shape& s0 = model.value(n.inputs[0]).type.shape;
      int64_t bound_n = 1;
      if (!s0.empty()) bound_n = n.op->name == "embedding" ? s0.front() : s0.back();
      bound_n = std::max<int64_t>(1, bound_n);
      v = g.add_input(name, t.dtype, t.shape);
      const int64_t count = shape_numel(t.shape);
      for (int64_t k = 0; k < count; ++k) {
        const int64_t x = (k * 7919) % bound_n;
        if (t.dtype == DType::kI32) value.data<int32_t>()[k] = static_cast<int32_t>(x);
        else if (t.dtype == DType::kI64) value.data<int64_t>()[k] = x;
        else throw Error(Status::kUnsupported, "input dtype");
      }
    }
    inputs.push_back(v);
    bound[v] = value;
  }
  const std::vector<ValueId> outs = g.add_op(n.op->name, "node", inputs, n.attrs);
  const TensorType out0 = g.value(outs[0]).type;
  COHORT_CHECK(dtype_is_float(out0.dtype), Status::kUnsupported, "output 0 is not a float tensor");
  ValueId loss = outs[0];
  summed->reset();
  if (shape_numel(out0.shape) != 1 || out0.shape.size() > 1) {
    loss = g.add_op("sum", "loss", {outs[0]}, Attrs()).at(0);
    *summed = out0;
  }
  g.set_loss(loss);
  std::vector<ValueId> targets = {loss};
  try {
    for (ValueId grad : build_backward(g, loss, wrt))
      if (grad >= 0) targets.push_back(grad);
  } catch (const Error&) {
    // Not differentiable: the forward alone is what it costs.
  }
  return time_graph(g, targets, bound, threads);
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const int configured = kernels::cpu::configured_num_threads();
  return configured > 0 ? configured : std::max(1, omp_get_max_threads());
}

// The forward and backward of a model as a step without micro-batches runs them: the graph with
// its backward, the targets (the loss and every parameter's gradient), zeros bound to its inputs
// and parameters.
struct WholeStep {
  Graph train;
  std::vector<ValueId> targets;
  std::unordered_map<ValueId, Tensor> bound;

  explicit WholeStep(const Graph& forward) : train(forward) {
    const std::vector<ValueId> params = train.parameters();
    targets = {train.loss()};
    for (ValueId g : build_backward(train, train.loss(), params))
      if (g >= 0) targets.push_back(g);
    for (ValueId v : train.inputs()) bound[v] = Tensor::zeros(train.value(v).type.shape, train.value(v).type.dtype);
    for (ValueId v : params) bound[v] = Tensor::zeros(train.value(v).type.shape, train.value(v).type.dtype);
  }
};

// "graph <hash of every node's instance key> <n> nodes, threads <t>": a whole graph's timings.
std::string whole_graph_key(const std::vector<std::string>& keys, int threads) {
  uint64_t h = checkpoint::hash64(nullptr, 0);  // FNV-1a chained over the keys' bytes
  for (const std::string& k : keys) h = checkpoint::hash64(k.data(), k.size(), h);
  return str_cat("graph ", h, " ", keys.size(), " nodes, threads ", threads);
}

// Timings of whole graphs rather than of one operator: kept out of the per-operator fit.
bool whole_graph_entry(const Timing& t) {
  return t.op == kWholeGraph || t.op == kRunOverhead || t.op == kGradientPass || t.op == kUpdate;
}

// The executor runs' own cost (estimate_run_cost). `forward` trained by two trainers on zeros,
// one running each step as one executor run (no micro-batches), the other as a stage under
// micro-batches does (its whole loss as one chunk, TrainerOptions::chunk_losses: a forward run, a
// backward run given what forward kept, the gradients copied into the trainer's own), their steps
// alternated (a drift of the machine's load falls on both alike): the difference of their fastest
// steps is 2 runs' cost plus one pass over the gradients. That pass is timed on its own (adding
// every parameter's gradient into another, as the trainer accumulates micro-batches), the fastest
// of a few; the rest, halved, is a run's. The fastest, not the median: a difference of two step
// times is small beside either, and another process taking the core adds to some steps, never
// takes away.
RunCost time_run_cost(const Graph& forward, int threads) {
  optim::OptimizerConfig sgd;
  TrainerOptions one, split;
  one.seed = split.seed = 1;
  one.num_threads = split.num_threads = threads;
  split.chunk_losses = {forward.value(forward.loss()).name};
  Trainer whole(forward, sgd, one), chunked(forward, sgd, split);
  std::map<std::string, Tensor> zeros;
  for (ValueId v : forward.inputs())
    zeros[forward.value(v).name] = Tensor::zeros(forward.value(v).type.shape, forward.value(v).type.dtype);
  using Clock = std::chrono::steady_clock;
  auto seconds_of = [](const auto& f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  auto step = [&](Trainer& t) {
    try {
      t.step(zeros);
    } catch (const Error& e) {
      if (e.status() != Status::kNonFinite) throw;  // a skipped update still ran both passes
    }
  };
  step(whole);  // warm-up: buffers, oneDNN primitives, optimizer state
  step(chunked);
  double best_whole = INFINITY, best_chunked = INFINITY, spent = 0;
  // More steps than a node's timing gets: the fastest of a few is what a difference needs.
  for (int k = 0; k < 4 * kMaxRuns && (k < 5 || spent < 3 * kRunBudgetSeconds); ++k) {
    const double a = seconds_of([&] { step(whole); }), b = seconds_of([&] { step(chunked); });
    best_whole = std::min(best_whole, a);
    best_chunked = std::min(best_chunked, b);
    spent += a + b;
  }
  // One pass over the gradients (f32 [n] += [n], per parameter).
  std::vector<Tensor> sums, grads;
  double bytes = 0;
  for (ValueId v : forward.parameters()) {
    const Shape& shape = forward.value(v).type.shape;
    sums.push_back(Tensor::zeros(shape, DType::kF32));
    grads.push_back(Tensor::zeros(shape, DType::kF32));
    bytes += static_cast<double>(sums.back().nbytes());
  }
  double pass = INFINITY;
  for (int k = 0; k < kMaxRuns; ++k)
    pass = std::min(pass, seconds_of([&] {
      for (size_t i = 0; i < sums.size(); ++i)
        kernels::cpu::binary(kernels::cpu::BinaryOp::kAdd, sums[i].data<float>(), sums[i].shape(),
                             grads[i].data<float>(), grads[i].shape(), sums[i].data<float>(), sums[i].shape());
    }));
  // One optimizer update over them: AdamW with clipping, as the models train (the gradients'
  // norm, then the parameters and both moments); the first call allocates the state.
  optim::OptimizerConfig adamw;
  adamw.kind = optim::OptimizerKind::kAdamW;
  adamw.clip_norm = 1.0;
  optim::Optimizer optimizer(adamw);
  kernels::cpu::use_threads(threads);
  optimizer.step(sums, grads);
  double update = INFINITY;
  for (int k = 0; k < kMaxRuns; ++k) update = std::min(update, seconds_of([&] { optimizer.step(sums, grads); }));
  RunCost cost;
  cost.seconds_per_gradient_byte = bytes > 0 ? pass / bytes : 0.0;
  cost.seconds_per_update_byte = bytes > 0 ? update / bytes : 0.0;
  cost.seconds_per_run = std::max(0.0, (best_chunked - best_whole - pass) / 2);
  return cost;
}

// seconds ~ s_op * (fixed + flops / F + bytes / B): F and B the best rates any timed instance
// reached (a roofline of this machine), s_op the median ratio of the operator's timings to that
// line. One factor per operator keeps the fit monotone in the counts and robust to a handful of
// points: a bigger product of the same operator always costs more.
struct Fit {
  double flops_rate = 0, bytes_rate = 0, fixed = 0;
  std::map<std::string, double> factor;
  double default_factor = 1;

  double base(const NodeWork& w) const { return fixed + w.flops / flops_rate + w.bytes / bytes_rate; }
  double price(const std::string& op, const NodeWork& w) const {
    auto it = factor.find(op);
    return (it == factor.end() ? default_factor : it->second) * base(w);
  }
};

Fit fit_rates(const std::map<std::string, Timing>& timings, int threads) {
  Fit f;
  double best_flops = 0, best_bytes = 0, min_seconds = 0;
  for (const auto& [key, t] : timings) {
    if (t.threads != threads || t.seconds <= 0 || whole_graph_entry(t)) continue;
    best_flops = std::max(best_flops, t.work.flops / t.seconds);
    best_bytes = std::max(best_bytes, t.work.bytes / t.seconds);
    min_seconds = min_seconds == 0 ? t.seconds : std::min(min_seconds, t.seconds);
  }
  f.flops_rate = best_flops > 0 ? best_flops : kDefaultFlopsPerThread * threads;
  f.bytes_rate = best_bytes > 0 ? best_bytes : kDefaultBytesPerSecond;
  // The fastest instance bounds the cost of a launch from above; half of it, within reason.
  f.fixed = min_seconds > 0 ? std::clamp(0.5 * min_seconds, 1e-6, 1e-4) : kDefaultFixedSeconds;
  std::map<std::string, std::vector<double>> ratios;
  std::vector<double> all;
  for (const auto& [key, t] : timings) {
    if (t.threads != threads || t.seconds <= 0 || whole_graph_entry(t)) continue;
    const double r = t.seconds / f.base(t.work);
    ratios[t.op].push_back(r);
    all.push_back(r);
  }
  for (auto& [op, r] : ratios) f.factor[op] = median(r);
  if (!all.empty()) f.default_factor = median(all);
  return f;
}

}  // namespace

std::vector<NodeWork> count_node_work(const Graph& forward) {
  std::vector<NodeWork> work;
  work.reserve(forward.nodes().size());
  for (const Node& n : forward.nodes()) work.push_back(count_one(forward, n));
  return work;
}

std::vector<double> estimate_node_seconds(const Graph& forward, const WorkloadOptions& options) {
  const std::vector<NodeWork> work = count_node_work(forward);
  const int threads = resolve_threads(options.num_threads);
  const std::string path = options.cache_path.empty() ? default_cache_path() : options.cache_path;
  std::vector<std::string> keys;
  for (const Node& n : forward.nodes()) keys.push_back(instance_key(forward, n, threads));

  // One calibration at a time in the process: two timing at once would disturb each other.
  std::lock_guard<std::mutex> lock(g_mutex);
  CacheState& cache = process_cache()[path];
  FileState file = path.empty() ? FileState::kMissing : read_cache(path, cache.timings);
  bool added = false;

  if (options.measure) {
    kernels::cpu::use_threads(threads);
    // The sum that turns an output into the loss is an instance like any other: timed (and
    // cached) once per shape, and subtracted from the instances it served.
    auto timed = [&](const std::string& key) -> const Timing* {
      auto it = cache.timings.find(key);
      return it == cache.timings.end() ? nullptr : &it->second;
    };
    for (size_t i = 0; i < forward.nodes().size(); ++i) {
      const Node& n = forward.nodes()[i];
      if (!timeable(n) || timed(keys[i]) || cache.failed.count(keys[i])) continue;
      try {
        std::optional<TensorType> summed;
        double seconds = time_instance(forward, n, threads, &summed);
        if (summed) {
          Graph sg;
          ValueId x = sg.add_parameter("x", summed->dtype, summed->shape, Initializer());
          sg.add_op("sum", "node", {x}, Attrs());
          const Node& sum = sg.nodes().back();
          const std::string sum_key = instance_key(sg, sum, threads);
          if (!timed(sum_key)) {
            std::optional<TensorType> unused;
            const double s = time_instance(sg, sum, threads, &unused);
            cache.timings[sum_key] = Timing{"sum", threads, s, count_one(sg, sum)};
          }
          // Kept above a fifth of the whole: a node as cheap as the sum itself (an add) must not
          // come out free from timing noise.
          seconds = std::max(seconds - timed(sum_key)->seconds, 0.2 * seconds);
        }
        cache.timings[keys[i]] = Timing{n.op->name, threads, seconds, work[i]};
        added = true;
      } catch (const std::exception&) {
        cache.failed.insert(keys[i]);  // priced by the fit
      }
    }
    kernels::cpu::use_threads(0);
  }
  // The whole graph, forward and backward, timed once too: a step runs its nodes one after
  // another through the executor's buffer pool, with the caches each node leaves to the next,
  // which a node timed alone does not see (small nodes cost several times their lone timing).
  // The nodes' prices are scaled to sum to it; the key is every node's instance key.
  const std::string graph_key = whole_graph_key(keys, threads);
  if (options.measure && forward.loss() >= 0 && !cache.timings.count(graph_key) && !cache.failed.count(graph_key)) {
    kernels::cpu::use_threads(threads);
    try {
      const WholeStep step(forward);
      NodeWork total;
      for (const NodeWork& w : work) {
        total.flops += w.flops;
        total.bytes += w.bytes;
      }
      cache.timings[graph_key] = Timing{kWholeGraph, threads, time_graph(step.train, step.targets, step.bound, threads), total};
      added = true;
    } catch (const std::exception&) {
      cache.failed.insert(graph_key);  // collectives without their axes, ...: the nodes' sum stands
    }
    kernels::cpu::use_threads(0);
  }
  if (!path.empty() && (added || file == FileState::kUnreadable)) write_cache(path, cache.timings);

  const Fit fit = fit_rates(cache.timings, threads);
  std::vector<double> seconds(forward.nodes().size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const Node& n = forward.nodes()[i];
    if (is_view(n)) continue;  // no kernel runs
    auto it = cache.timings.find(keys[i]);
    seconds[i] = it != cache.timings.end() ? it->second.seconds : fit.price(n.op->name, work[i]);
    sum += seconds[i];
  }
  auto whole = cache.timings.find(graph_key);
  if (whole != cache.timings.end() && sum > 0)
    for (double& s : seconds) s *= whole->second.seconds / sum;
  return seconds;
}

RunCost estimate_run_cost(const Graph& forward, const WorkloadOptions& options) {
  const int threads = resolve_threads(options.num_threads);
  const std::string path = options.cache_path.empty() ? default_cache_path() : options.cache_path;
  std::vector<std::string> keys;
  for (const Node& n : forward.nodes()) keys.push_back(instance_key(forward, n, threads));
  const std::string graph = whole_graph_key(keys, threads);
  const std::string run_key = "runs " + graph, pass_key = "gradient pass " + graph, update_key = "update " + graph;
  std::lock_guard<std::mutex> lock(g_mutex);
  CacheState& cache = process_cache()[path];
  const FileState file = path.empty() ? FileState::kMissing : read_cache(path, cache.timings);
  if (options.measure && forward.loss() >= 0 && (!cache.timings.count(run_key) || !cache.timings.count(update_key)) &&
      !cache.failed.count(run_key)) {
    try {
      const RunCost measured = time_run_cost(forward, threads);
      cache.timings[run_key] = Timing{kRunOverhead, threads, measured.seconds_per_run, {}};
      cache.timings[pass_key] = Timing{kGradientPass, threads, measured.seconds_per_gradient_byte, {}};
      cache.timings[update_key] = Timing{kUpdate, threads, measured.seconds_per_update_byte, {}};
      if (!path.empty()) write_cache(path, cache.timings);
    } catch (const std::exception&) {
      cache.failed.insert(run_key);  // collectives without their axes, ...: no cost known
      if (!path.empty() && file == FileState::kUnreadable) write_cache(path, cache.timings);
    }
    kernels::cpu::use_threads(0);
  }
  RunCost cost;
  auto run = cache.timings.find(run_key), pass = cache.timings.find(pass_key), update = cache.timings.find(update_key);
  if (run != cache.timings.end()) cost.seconds_per_run = run->second.seconds;
  if (pass != cache.timings.end()) cost.seconds_per_gradient_byte = pass->second.seconds;
  if (update != cache.timings.end()) cost.seconds_per_update_byte = update->second.seconds;
  return cost;
}

std::function<void()> make_step_runner(const Graph& forward, int num_threads) {
  COHORT_CHECK(forward.loss() >= 0, Status::kInvalidArgument, "step runner: the graph has no loss");
  const int threads = resolve_threads(num_threads);
  auto step = std::make_shared<WholeStep>(forward);
  auto exec = std::make_shared<Executor>(step->train, step->targets);
  return [step, exec, threads] {
    kernels::cpu::use_threads(threads);
    RunOptions ro;
    ro.num_threads = threads;
    ro.training = true;
    std::unordered_map<ValueId, Tensor> env = step->bound;
    exec->run(env, ro);
    kernels::cpu::use_threads(0);
  };
}

}  // namespace cohort::parallel
