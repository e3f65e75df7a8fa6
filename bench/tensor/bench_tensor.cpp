// bench_tensor: the GPT training step under tensor parallelism (core/parallel/tensor_parallel.h)
// at every grid of a 4-rank world — Megatron 1D (1x4x1), AxoNN's 2D (2x2x1) and 3D (2x1x2), and
// data 2 x tensor 2 (1x2x1) — each with the collectives overlapped and not, against two anchors
// measured in the same invocation:
//   (a) the single-rank step on the same global batch: rank 0 alone (a plain Trainer, 1 thread)
//       while the other ranks block on the job store (no CPU);
//   (b) an analytical prediction in the spirit of AxoNN (Singh et al. 2024, section 5): every
//       collective node of this rank's training graph (forward + backward as the trainer builds
//       it: shard_for_tensor_parallel's forward graph through build_backward), plus what the
//       trainer and DDP send outside the graph (the model's gradient norm over "tensor", the
//       gradient buckets over "data"), costs latency + bytes / bandwidth of its axis and kind,
//       fitted to the same axis communicators' all_reduce / all_gather / reduce_scatter timed at
//       a few message sizes in this run — between otherwise idle ranks, and again while every
//       rank keeps a thread computing (busy), as in a step. Predicted step (overlap off) =
//       compute + predicted communication, with compute defined two ways (both printed):
//         compute_meas  = the grid's measured step (overlap off) minus the measured wait on its
//                         collectives (executor + DDP), so the ratio tests the communication model;
//         compute_ideal = the single-rank step / min(world, cores): the step's work spread evenly
//                         over the cores the ranks share, no replicated work (AxoNN's premise
//                         that compute does not depend on the grid).
// Step time: the median over N timed steps (after W warm-up steps) of the slowest rank's time of
// that step. A shared box's load drifts within a run (one run's single-rank step went from 757 to
// 458 ms), so a grid's three configurations — single rank, overlap off, overlap on — run in rounds
// of 2 steps each, the order rotated every round, and each ratio is taken within the grid. Ranks
// run with 1 thread each; at 4 ranks on a 2-core box they are oversubscribed (2 processes per
// core), which the output states.
//
//   cohort-run -n 4 -- bench_tensor [--grids 1x4x1,2x2x1,2x1x2,1x2x1] [--batch 8] [--steps 10]
//       [--warmup 3] [--width 256] [--layers 4] [--heads 4] [--context 128] [--vocab 256]
//       [--no-single] [--verbose]
// A grid XxYxZ whose degree is below the world runs data = world / degree replicas (DDP over the
// data axis); the global batch is the same for every grid (rows per rank = batch / (data z)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/models/gpt.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/parallel_trainer.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
namespace coll = cohort::transport::coll;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

struct Options {
  std::vector<parallel::TensorGrid> grids;
  int64_t batch = 8, steps = 10, warmup = 3;
  models::GptConfig gpt;
  bool single = true, verbose = false;
};

parallel::TensorGrid parse_grid(const std::string& s) {
  parallel::TensorGrid g;
  COHORT_CHECK(std::sscanf(s.c_str(), "%dx%dx%d", &g.x, &g.y, &g.z) == 3, Status::kInvalidArgument,
               "bench_tensor: grid '", s, "' is not XxYxZ");
  return g;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string grids = "1x4x1,2x2x1,2x1x2,1x2x1";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      COHORT_CHECK(i + 1 < argc, Status::kInvalidArgument, "bench_tensor: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--grids") grids = next();
    else if (a == "--batch") o.batch = std::stoll(next());
    else if (a == "--steps") o.steps = std::stoll(next());
    else if (a == "--warmup") o.warmup = std::stoll(next());
    else if (a == "--width") o.gpt.width = std::stoll(next());
    else if (a == "--layers") o.gpt.layers = std::stoll(next());
    else if (a == "--heads") o.gpt.heads = std::stoll(next());
    else if (a == "--context") o.gpt.context = std::stoll(next());
    else if (a == "--vocab") o.gpt.vocab = std::stoll(next());
    else if (a == "--no-single") o.single = false;
    else if (a == "--verbose") o.verbose = true;
    else COHORT_CHECK(false, Status::kInvalidArgument, "bench_tensor: unknown argument '", a, "'");
  }
  size_t at = 0;
  while (at <= grids.size()) {
    const size_t comma = std::min(grids.find(',', at), grids.size());
    if (comma > at) o.grids.push_back(parse_grid(grids.substr(at, comma - at)));
    at = comma + 1;
  }
  COHORT_CHECK(o.steps >= 1 && o.warmup >= 0 && o.batch >= 1, Status::kInvalidArgument,
               "bench_tensor: --steps >= 1, --warmup >= 0, --batch >= 1");
  return o;
}

std::map<std::string, Tensor> gpt_batch(const models::GptConfig& c, int64_t rows, uint64_t salt) {
  Tensor tokens = Tensor::empty({rows, c.context}, DType::kI32);
  Tensor targets = Tensor::empty({rows, c.context}, DType::kI32);
  uint64_t s = 0x9E3779B97F4A7C15ull * (salt + 1);
  for (int64_t i = 0; i < rows * c.context; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tokens.data<int32_t>()[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(c.vocab));
    targets.data<int32_t>()[i] = static_cast<int32_t>((s >> 13) % static_cast<uint64_t>(c.vocab));
  }
  return {{"tokens", tokens}, {"targets", targets}};
}

optim::OptimizerConfig adamw() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdamW;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  o.clip_norm = 1.0;  // the whole model's norm: one all-reduce over "tensor" per step
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Element-wise max over the world of per-rank values (seconds, carried as i64 nanoseconds).
std::vector<double> world_max(coll::Communicator& world, const std::vector<double>& seconds) {
  std::vector<int64_t> ns(seconds.size());
  for (size_t i = 0; i < ns.size(); ++i) ns[i] = static_cast<int64_t>(seconds[i] * 1e9);
  world.all_reduce(ns.data(), ns.size(), coll::DataType::kI64, coll::ReduceOp::kMax)->wait(Ms(600000));
  std::vector<double> out(ns.size());
  for (size_t i = 0; i < ns.size(); ++i) out[i] = static_cast<double>(ns[i]) / 1e9;
  return out;
}

double world_sum(coll::Communicator& world, double v) {
  int64_t ns = static_cast<int64_t>(v * 1e9);
  world.all_reduce(&ns, 1, coll::DataType::kI64, coll::ReduceOp::kSum)->wait(Ms(600000));
  return static_cast<double>(ns) / 1e9;
}

// ---- the communication model: t(bytes) = latency + bytes / bandwidth per (axis, kind) ----

struct Fit {
  double latency = 0, seconds_per_byte = 0;
  std::vector<std::pair<double, double>> points;  // (bytes, seconds)
  double at(double bytes) const { return latency + seconds_per_byte * bytes; }
};
using Model = std::map<std::pair<std::string, std::string>, Fit>;  // (axis, kind) -> fit

// Least squares on the relative error, so that the small messages (latency) weigh as much as
// the large ones (bandwidth): minimise sum ((a + b x_i - t_i) / t_i)^2; a, b clamped at >= 0.
Fit fit_points(const std::vector<std::pair<double, double>>& pts) {
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (auto [x, t] : pts) {
    const double w = 1.0 / (t * t);
    s00 += w; s01 += w * x; s11 += w * x * x; r0 += w * t; r1 += w * x * t;
  }
  Fit f;
  f.points = pts;
  const double det = s00 * s11 - s01 * s01;
  if (pts.size() >= 2 && det > 0) {
    f.latency = (r0 * s11 - r1 * s01) / det;
    f.seconds_per_byte = (s00 * r1 - s01 * r0) / det;
  }
  if (f.seconds_per_byte < 0 || pts.size() < 2) {  // flat: latency alone
    f.seconds_per_byte = 0;
    f.latency = r0 / s00;
  } else if (f.latency < 0) {  // through the origin
    f.latency = 0;
    f.seconds_per_byte = r1 / s11;
  }
  return f;
}

// Times `kind` on `comm` for a message of `bytes` (all_reduce: the buffer; all_gather: the
// gathered whole; reduce_scatter: the whole input), the median of 3 repeats of the slowest rank
// of the world (every rank of the world times its own axis group at the same moment, as in a
// step). Collective over the world.
double time_collective(coll::Communicator& world, coll::Communicator& comm, const std::string& kind,
                       size_t bytes) {
  const size_t n = static_cast<size_t>(comm.size());
  const size_t per_rank = std::max<size_t>(bytes / 4 / n, 1);
  const size_t whole = per_rank * n;
  std::vector<float> a(whole, 1.0f), b(whole, 0.0f);
  auto op = [&]() -> coll::WorkPtr {
    if (kind == "all_reduce") return comm.all_reduce(a.data(), b.data(), whole, coll::DataType::kF32, coll::ReduceOp::kSum);
    if (kind == "all_gather") return comm.all_gather(a.data(), b.data(), per_rank, coll::DataType::kF32);
    return comm.reduce_scatter(a.data(), b.data(), per_rank, coll::DataType::kF32, coll::ReduceOp::kSum);
  };
  const size_t iters = std::clamp<size_t>((8u << 20) / std::max<size_t>(bytes, 1), 4, 64);
  op()->wait(Ms(600000));  // warm-up
  std::vector<double> reps;
  for (int r = 0; r < 3; ++r) {
    world.barrier()->wait(Ms(600000));
    const auto t0 = Clock::now();
    for (size_t i = 0; i < iters; ++i) op()->wait(Ms(600000));
    const double t = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(iters);
    reps.push_back(world_max(world, {t})[0]);
  }
  return median(reps);
}

// The fits for every axis of this grid (the same names on every rank: a collective over world).
// busy: each rank keeps one thread computing meanwhile, as its training thread does in a step, so
// the collectives' progress threads compete with compute for the cores (on an oversubscribed box,
// with their peers' compute too).
Model measure_axes(coll::Communicator& world, const CommAxes& axes, bool busy) {
  std::unique_ptr<parallel::BusyThread> worker;
  if (busy) worker = std::make_unique<parallel::BusyThread>(false);  // never yields: the upper bound
  Model m;
  const std::vector<size_t> sizes = {4u << 10, 64u << 10, 512u << 10, 2u << 20, 8u << 20};
  for (const char* axis : {"x", "y", "z", "data"}) {
    coll::Communicator* c = axes.find(axis);
    if (c == nullptr || c->size() == 1) continue;
    for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter"}) {
      if (std::string(axis) == "data" && std::string(kind) != "all_reduce") continue;  // DDP all-reduces only
      std::vector<std::pair<double, double>> pts;
      for (size_t bytes : sizes) pts.emplace_back(static_cast<double>(bytes), time_collective(world, *c, kind, bytes));
      m[{axis, kind}] = fit_points(pts);
    }
  }
  if (coll::Communicator* t = axes.find("tensor"); t != nullptr && t->size() > 1)  // the norm: one float
    m[{"tensor", "all_reduce"}] = fit_points({{4.0, time_collective(world, *t, "all_reduce", 4)}});
  return m;
}

// One collective the step runs, as the model prices it.
struct CommItem {
  std::string axis, kind;
  int64_t count = 0;
  double bytes = 0, seconds = 0;
};

// Walks this rank's training graph (the trainer's forward graph through build_backward, the
// nodes its executor runs, in order) and adds what runs outside it: the gradient norm over
// "tensor" (clip_norm), DDP's gradient buckets over "data" (bucket_bytes, as build_buckets cuts).
std::map<std::pair<std::string, std::string>, CommItem> predict(const Trainer& t, const parallel::PlanConfig& plan,
                                                                const Model& model) {
  Graph g = t.forward_graph();
  const std::vector<ValueId> params = g.parameters();
  const std::vector<ValueId> grads = build_backward(g, g.loss(), params);
  std::vector<ValueId> targets = {g.loss()};
  for (ValueId v : grads) if (v >= 0) targets.push_back(v);
  Executor ex(g, targets, Device::kCpu);
  std::map<std::pair<std::string, std::string>, CommItem> out;
  auto add = [&](const std::string& axis, const std::string& kind, double bytes) {
    CommItem& it = out[{axis, kind}];
    it.axis = axis;
    it.kind = kind;
    ++it.count;
    it.bytes += bytes;
    auto f = model.find({axis, kind});
    COHORT_CHECK(f != model.end(), Status::kInternal, "bench_tensor: no measurement for ", kind, " over '", axis, "'");
    it.seconds += f->second.at(bytes);
  };
  for (NodeId n : ex.order()) {
    const Node& node = g.node(n);
    const std::string& op = node.op->name;
    auto bytes_of = [&](ValueId v) {
      const TensorType& ty = g.value(v).type;
      return static_cast<double>(shape_numel(ty.shape)) * static_cast<double>(dtype_size(ty.dtype));
    };
    if (op == "all_reduce") add(node.attrs.get_string("axis"), "all_reduce", bytes_of(node.inputs[0]));
    else if (op == "all_gather" || op == "gather_from_axis")
      add(node.attrs.get_string("axis"), "all_gather", bytes_of(node.outputs[0]));
    else if (op == "reduce_scatter") add(node.attrs.get_string("axis"), "reduce_scatter", bytes_of(node.inputs[0]));
  }
  if (model.count({"tensor", "all_reduce"})) add("tensor", "all_reduce", 4);
  if (model.count({"data", "all_reduce"})) {  // DDP: buckets filled from the last parameter back
    double bucket = 0;
    for (size_t k = t.parameters().size(); k-- > 0;) {
      if (bucket >= static_cast<double>(plan.bucket_bytes)) {
        add("data", "all_reduce", bucket);
        bucket = 0;
      }
      bucket += static_cast<double>(t.parameters()[k].nbytes());
    }
    if (bucket > 0) add("data", "all_reduce", bucket);
  }
  return out;
}

// ---- timing a trainer ----

struct StepTiming {
  double step = 0;         // median over steps of the slowest rank
  double wait = 0;         // mean over ranks: seconds per step blocked on collectives
  // The least-waiting rank's: the rank that comes last to a collective waits for the transfer
  // alone, the others also for it (skew: on an oversubscribed box, for a core).
  double wait_min = 0;
  double started = 0;      // collectives per step (graph), rank mean
  double hidden = 0;       // share found complete when needed, rank mean
};

double dp_wait(const Trainer& t) {
  auto* dp = dynamic_cast<const parallel::DataParallel*>(t.step_hook().get());
  return dp ? dp->stats().wait_seconds : 0.0;
}

// The timed steps of one trainer, gathered round by round.
struct Series {
  std::vector<double> times;  // this rank's, per step
  double wait = 0;
  int64_t started = 0, hidden = 0;

  void run(Trainer& t, const std::map<std::string, Tensor>& batch, int64_t steps) {
    const CollectiveStats c0 = t.stats().collectives;
    const double w0 = dp_wait(t);
    for (int64_t s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      t.step(batch);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const CollectiveStats c1 = t.stats().collectives;
    wait += c1.wait_seconds - c0.wait_seconds + dp_wait(t) - w0;
    started += c1.started - c0.started;
    hidden += c1.complete_when_needed - c0.complete_when_needed;
  }
  // Collective over the world when given: each step's slowest rank, the rank means of the rest.
  StepTiming finish(coll::Communicator* world) const {
    const double steps = static_cast<double>(times.size());
    StepTiming r;
    std::vector<double> t = times;
    r.wait = wait / steps;
    r.started = static_cast<double>(started) / steps;
    r.hidden = started > 0 ? static_cast<double>(hidden) / static_cast<double>(started) : 0.0;
    if (world) {
      t = world_max(*world, t);
      const double n = world->size();
      r.wait_min = -world_max(*world, {-r.wait})[0];
      r.wait = world_sum(*world, r.wait) / n;
      r.started = world_sum(*world, r.started) / n;
      r.hidden = world_sum(*world, r.hidden) / n;
    }
    if (!world) r.wait_min = r.wait;
    r.step = median(t);
    return r;
  }
};

std::string grid_name(const parallel::TensorGrid& g, int data) {
  std::string s = std::to_string(g.x) + "x" + std::to_string(g.y) + "x" + std::to_string(g.z);
  return data > 1 ? "data " + std::to_string(data) + " x " + s : s;
}

struct Row {
  std::string grid;
  StepTiming off, on;
  double comm_pred = 0;       // collectives timed between otherwise idle ranks
  double comm_pred_busy = 0;  // timed while every rank computes on another thread
  double single = 0;  // the single-rank anchor, timed in the same rounds as this grid
};

int run(const Options& o, const std::shared_ptr<coll::Communicator>& world,
        const std::shared_ptr<transport::Store>& store) {
  const int rank = world->rank(), size = world->size();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const models::GptConfig cfg = o.gpt;
  // Rounds: every configuration of a grid (the single rank, overlap off, overlap on) runs
  // steps_per_round steps in turn, the order rotated each round, so that the box's load drifts
  // over all three alike.
  const int64_t steps_per_round = 2;
  const int64_t rounds = std::max<int64_t>(1, (o.steps + steps_per_round - 1) / steps_per_round);
  if (rank == 0) {
    std::printf("bench_tensor: GPT width %lld, %lld layers, %lld heads, context %lld, vocab %lld, %lld parameters; "
                "global batch %lld; AdamW, clip 1.0; median of %lld steps (%lld rounds of %lld, interleaved with the "
                "single rank's and the other overlap setting's) after %lld warm-up\n",
                static_cast<long long>(cfg.width), static_cast<long long>(cfg.layers), static_cast<long long>(cfg.heads),
                static_cast<long long>(cfg.context), static_cast<long long>(cfg.vocab),
                static_cast<long long>(models::gpt_parameter_count(cfg)), static_cast<long long>(o.batch),
                static_cast<long long>(rounds * steps_per_round), static_cast<long long>(rounds),
                static_cast<long long>(steps_per_round), static_cast<long long>(o.warmup));
    std::printf("bench_tensor: %d ranks, 1 thread each, on %u cores%s\n", size, cores,
                static_cast<unsigned>(size) > cores ? " — OVERSUBSCRIBED: ranks share cores, so every parallel figure "
                                                      "includes waiting for a core, not only for the network"
                                                    : "");
    std::fflush(stdout);
  }
  // (a) The single-rank anchor: a plain Trainer on rank 0 on the global batch, timed while the
  // other ranks block on the job store (no CPU).
  std::unique_ptr<Trainer> single;
  models::GptConfig single_cfg = cfg;
  single_cfg.batch = o.batch;
  const auto single_batch = gpt_batch(single_cfg, o.batch, 0);
  if (rank == 0 && o.single) {
    TrainerOptions to;
    to.seed = 1;
    to.num_threads = 1;
    single = std::make_unique<Trainer>(models::build_gpt(single_cfg), adamw(), to);
    for (int64_t s = 0; s < o.warmup; ++s) single->step(single_batch);
  }
  int64_t single_turns = 0;
  auto single_turn = [&](Series& series) {
    const std::string key = str_cat("bench_tensor/single/", single_turns++);
    if (rank == 0) {
      series.run(*single, single_batch, steps_per_round);
      store->set(key, transport::Bytes{1});
    } else {
      (void)store->get(key, Ms(1800000));
    }
  };

  std::vector<Row> rows;
  for (const parallel::TensorGrid& grid : o.grids) {
    const int data = size / grid.degree();
    COHORT_CHECK(data * grid.degree() == size, Status::kInvalidArgument, "bench_tensor: grid ", grid.x, "x", grid.y,
                 "x", grid.z, " does not divide the world of ", size);
    const int64_t rows_per_rank = o.batch / (data * grid.z);
    COHORT_CHECK(rows_per_rank * data * grid.z == o.batch, Status::kInvalidArgument, "bench_tensor: batch ", o.batch,
                 " is not a multiple of data x z = ", data * grid.z);
    Row row;
    row.grid = grid_name(grid, data);
    models::GptConfig c = cfg;
    c.batch = rows_per_rank;
    const auto batch = gpt_batch(c, rows_per_rank, static_cast<uint64_t>(rank));
    std::unique_ptr<Trainer> trainers[2];  // overlap off, on
    for (int k = 0; k < 2; ++k) {
      parallel::PlanConfig plan = parallel::preset(parallel::Preset::kDdp, 1);
      plan.tensor = grid;
      plan.data_parallel = data;
      plan.overlap_collectives = k == 1;
      TrainerOptions to;
      to.seed = 1;
      to.num_threads = 1;
      trainers[k] = parallel::make_parallel_trainer(models::build_gpt(c), adamw(), to, plan, world);
      if (k == 1) continue;
      // (b) The model: this grid's axes timed now, this rank's graph priced with them.
      const Model model = measure_axes(*world, *trainers[k]->axes(), false);
      const Model busy = measure_axes(*world, *trainers[k]->axes(), true);
      const auto items = predict(*trainers[k], plan, model);
      const auto items_busy = predict(*trainers[k], plan, busy);
      for (const auto& [key, it] : items) row.comm_pred += it.seconds;
      for (const auto& [key, it] : items_busy) row.comm_pred_busy += it.seconds;
      if (rank == 0) {
        std::printf("\n== %s (rows per rank %lld) ==\n", row.grid.c_str(), static_cast<long long>(rows_per_rank));
        for (const auto& [key, f] : model) {
          const Fit& fb = busy.at(key);
          std::printf("  fit %-6s %-14s latency %7.1f us, bandwidth %7.3f GB/s; busy: %7.1f us, %7.3f GB/s",
                      key.first.c_str(), key.second.c_str(), f.latency * 1e6,
                      f.seconds_per_byte > 0 ? 1e-9 / f.seconds_per_byte : 0.0, fb.latency * 1e6,
                      fb.seconds_per_byte > 0 ? 1e-9 / fb.seconds_per_byte : 0.0);
          if (o.verbose)
            for (auto [bytes, sec] : f.points) std::printf("  [%.0f B: %.1f us, model %.1f]", bytes, sec * 1e6, f.at(bytes) * 1e6);
          std::printf("\n");
        }
        for (const auto& [key, it] : items)
          std::printf("  step: %3lld x %-14s over %-6s %9.3f MiB -> predicted %7.2f ms (busy: %.2f)\n",
                      static_cast<long long>(it.count), it.kind.c_str(), it.axis.c_str(), it.bytes / (1 << 20),
                      it.seconds * 1e3, items_busy.at(key).seconds * 1e3);
        std::fflush(stdout);
      }
    }
    for (auto& t : trainers)
      for (int64_t s = 0; s < o.warmup; ++s) t->step(batch);
    Series series[3];  // overlap off, on, single rank
    for (int64_t r = 0; r < rounds; ++r) {
      for (int j = 0; j < 3; ++j) {
        const int which = static_cast<int>((r + j) % 3);
        if (which == 2) {
          if (o.single) single_turn(series[2]);
          continue;
        }
        world->barrier()->wait(Ms(600000));
        series[which].run(*trainers[which], batch, steps_per_round);
      }
    }
    row.off = series[0].finish(world.get());
    row.on = series[1].finish(world.get());
    if (o.single) row.single = world_max(*world, {rank == 0 ? series[2].finish(nullptr).step : 0.0})[0];
    if (rank == 0) {
      for (int k = 0; k < 2; ++k) {
        const StepTiming& s = k ? row.on : row.off;
        std::printf("  overlap %-3s: step %7.1f ms, waiting on collectives %6.1f ms/step (rank mean; least %.1f), "
                    "%.0f collectives/step, %.0f%% complete when needed\n",
                    k ? "on" : "off", s.step * 1e3, s.wait * 1e3, s.wait_min * 1e3, s.started, 100 * s.hidden);
      }
      if (o.single) std::printf("  single rank, batch %lld (rank 0 alone, the others blocked on the store): step %7.1f ms\n",
                                static_cast<long long>(o.batch), row.single * 1e3);
      std::fflush(stdout);
    }
    world->barrier()->wait(Ms(600000));  // every rank done with these trainers' communicators
    rows.push_back(row);
  }

  if (rank == 0) {
    double lo = 1e30, hi = 0;
    for (const Row& r : rows) lo = std::min(lo, r.single), hi = std::max(hi, r.single);
    std::printf("\nGPT step at %d ranks on %u cores (oversubscribed: %s); single rank (1 thread, rank 0 alone) "
                "%.1f to %.1f ms across the grids' rounds\n",
                size, cores, static_cast<unsigned>(size) > cores ? "yes" : "no", lo * 1e3, hi * 1e3);
    std::printf("prediction (overlap off) = compute + predicted communication, compute = measured step - measured wait "
                "on collectives; the collectives timed between idle ranks (idle) or while each rank computes (busy); "
                "ideal: compute = single / min(ranks, cores), idle collectives\n");
    std::printf("%-16s %9s %9s %9s %6s %6s | %8s %8s %9s %9s | %8s %8s %8s %8s\n", "grid", "single ms", "off ms",
                "on ms", "off/1", "on/1", "wait ms", "least ms", "idle pred", "busy pred", "compute", "idle/off",
                "busy/off", "idl/off");
    for (const Row& r : rows) {
      const double compute = r.off.step - r.off.wait;
      const double ideal = r.single / std::min<double>(size, cores);
      std::printf("%-16s %9.1f %9.1f %9.1f %6.2f %6.2f | %8.1f %8.1f %9.1f %9.1f | %8.1f %8.2f %8.2f %8.2f\n",
                  r.grid.c_str(), r.single * 1e3, r.off.step * 1e3, r.on.step * 1e3,
                  r.single > 0 ? r.off.step / r.single : 0.0, r.single > 0 ? r.on.step / r.single : 0.0,
                  r.off.wait * 1e3, r.off.wait_min * 1e3, r.comm_pred * 1e3, r.comm_pred_busy * 1e3, compute * 1e3,
                  (compute + r.comm_pred) / r.off.step, (compute + r.comm_pred_busy) / r.off.step,
                  (ideal + r.comm_pred) / r.off.step);
    }
    std::printf("columns: single ms = single-rank step on the global batch, timed in the grid's rounds; off/on ms = "
                "measured step (median, slowest rank) with overlap off/on; off/1, on/1 = parallel / single-rank step; "
                "wait ms = measured wait on collectives per step (overlap off), rank mean; least ms = the least-waiting "
                "rank's; idle/busy pred = the model's communication per step from collectives timed between idle ranks "
                "/ while every rank computes; compute = off ms - wait ms; idle/off, busy/off, idl/off = predicted / "
                "measured step (overlap off), the last with compute = single / min(ranks, cores)\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    transport::JobEnv env = transport::detect_job_env();
    auto store = transport::connect_job_store(env, Ms(30000));
    coll::CommOptions co;
    co.timeout = Ms(600000);  // rank 0's single-rank run and the oversubscribed steps are slow
    std::shared_ptr<coll::Communicator> world = coll::UcxCommunicator::create(store, env.rank, env.world, co);
    const int rc = run(o, world, store);
    world->barrier()->wait(Ms(600000));  // rank 0's store outlives every peer's use
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tensor: %s\n", e.what());
    return 1;
  }
}
