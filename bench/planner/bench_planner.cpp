// bench_planner: the planner's predictions against measured steps. Every rank probes the
// communication of the job (comm_probe.h, the same probe `auto` plans run), rank 0 ranks every
// layout of the GPT that the world allows (planner.h, rank_plans), and then every plan that fits
// memory is built and timed for real, in the planner's order: W warm-up steps, then the median of
// S steps of the slowest rank. Printed by rank 0: per plan the predicted step (compute / exposed
// communication / bubble) and the measured one, their ratio; then the median absolute error of
// the predictions and how the plan ranked first compares with the fastest one measured (the
// targets: median error <= 15%, the top-1 prediction within 10% of the fastest measured).
//
// The box's load drifts within a run: every plan is timed in `passes` passes over the list, the
// second in the reverse order, and keeps its fastest pass (the one least disturbed).
//
// The contest: the fastest plan of one sweep is the least of many noisy readings (this box's speed
// moves by 20-40% between minutes; the same plan read 16.1 and 21.3 ms in two runs), so the
// sweep's top-1 check compares one reading with the luckiest of 64. The predicted top-1 and every
// plan measured within --contest-margin of the fastest are timed again in --contest-rounds rounds
// (the order rotated each round), each keeping its fastest reading of all, and the top-1 check is
// repeated over them. Both checks are printed; the sweep's first.
//
//   cohort-run -n 4 -- bench_planner [--steps 5] [--warmup 2] [--passes 2] [--batch 8] [--width 64]
//       [--layers 4] [--heads 4] [--context 64] [--vocab 256] [--limit N (plans timed, 0 = all)]
//       [--contest-rounds 3 (0: none)] [--contest-margin 0.25] [--contest-size 8]
// Under shaped links: bench/planner/run.sh (netns.sh run, UCX over tcp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/models/gpt.h"
#include "core/parallel/auto_plan.h"
#include "core/parallel/comm_probe.h"
#include "core/parallel/parallel_trainer.h"
#include "core/parallel/planner.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
namespace coll = cohort::transport::coll;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

struct Options {
  int64_t steps = 5, warmup = 2, limit = 0, passes = 2;
  int64_t contest_rounds = 3, contest_size = 8;
  double contest_margin = 0.25;
  models::GptConfig gpt;
  bool verbose = false;
};

Options parse(int argc, char** argv) {
  Options o;
  o.gpt.batch = 8;
  o.gpt.width = 64;
  o.gpt.layers = 4;
  o.gpt.heads = 4;
  o.gpt.context = 64;
  o.gpt.vocab = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t {
      COHORT_CHECK(i + 1 < argc, Status::kInvalidArgument, "bench_planner: ", a, " needs a value");
      return std::stoll(argv[++i]);
    };
    if (a == "--steps") o.steps = next();
    else if (a == "--warmup") o.warmup = next();
    else if (a == "--batch") o.gpt.batch = next();
    else if (a == "--width") o.gpt.width = next();
    else if (a == "--layers") o.gpt.layers = next();
    else if (a == "--heads") o.gpt.heads = next();
    else if (a == "--context") o.gpt.context = next();
    else if (a == "--vocab") o.gpt.vocab = next();
    else if (a == "--limit") o.limit = next();
    else if (a == "--passes") o.passes = next();
    else if (a == "--contest-rounds") o.contest_rounds = next();
    else if (a == "--contest-size") o.contest_size = next();
    else if (a == "--contest-margin") {
      COHORT_CHECK(i + 1 < argc, Status::kInvalidArgument, "bench_planner: ", a, " needs a value");
      o.contest_margin = std::stod(argv[++i]);
    } else if (a == "--verbose") o.verbose = true;
    else throw Error(Status::kInvalidArgument, str_cat("bench_planner: unknown argument ", a));
  }
  COHORT_CHECK(o.steps >= 1 && o.warmup >= 0 && o.passes >= 1 && o.contest_rounds >= 0 && o.contest_size >= 1 &&
                   o.contest_margin >= 0,
               Status::kInvalidArgument,
               "bench_planner: --steps >= 1, --warmup >= 0, --passes >= 1, --contest-rounds >= 0, --contest-size >= 1, "
               "--contest-margin >= 0");
  return o;
}

// Rows [first, first + count) of a deterministic token stream (a step's batch).
std::map<std::string, Tensor> batch_of(const models::GptConfig& c, int64_t step, int64_t first, int64_t count) {
  Tensor tokens = Tensor::empty({count, c.context}, DType::kI32);
  Tensor targets = Tensor::empty({count, c.context}, DType::kI32);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t t = 0; t < c.context; ++t) {
      const uint64_t g = static_cast<uint64_t>((first + i) * 7919 + step * 131 + t) * 0x9E3779B97F4A7C15ull;
      tokens.data<int32_t>()[i * c.context + t] = static_cast<int32_t>((g >> 33) % static_cast<uint64_t>(c.vocab));
      targets.data<int32_t>()[i * c.context + t] = static_cast<int32_t>((g >> 17) % static_cast<uint64_t>(c.vocab));
    }
  return {{"tokens", tokens}, {"targets", targets}};
}

// A plan's step as measured: the median over `steps` of the slowest rank's step time, after
// `warmup` steps, and the median of the busiest rank's work inside its micro-batch schedule
// (TrainerStats::pipeline_busy_seconds: the forward and backward runs and the accumulation of
// gradients, without the waits and the update; 0 for a plan of one run a step).
struct Measured {
  double step = INFINITY, busy = 0;
};
Measured time_plan(const Options& o, const parallel::PlanConfig& plan, const std::shared_ptr<coll::Communicator>& world) {
  TrainerOptions to;
  to.seed = 1;
  to.num_threads = 1;
  optim::OptimizerConfig opt;
  opt.kind = optim::OptimizerKind::kAdamW;
  opt.lr = 1e-3;
  const int model_ranks = plan.model_degree();
  const int replicas = world->size() / model_ranks;
  const int64_t rows = o.gpt.batch / replicas / plan.tensor.z;
  models::GptConfig c = o.gpt;
  c.batch = rows;
  auto trainer = parallel::make_parallel_trainer(models::build_gpt(c), opt, to, plan, world);
  const int replica = world->rank() / model_ranks;
  const int slice = replica * plan.tensor.z + world->rank() % plan.tensor.z;
  std::vector<double> times, busy;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    const auto in = batch_of(o.gpt, s, slice * rows, rows);
    world->barrier()->wait();
    const auto start = Clock::now();
    trainer->step(in);
    float seconds[2] = {static_cast<float>(std::chrono::duration<double>(Clock::now() - start).count()),
                        static_cast<float>(trainer->stats().pipeline_busy_seconds)};
    world->all_reduce(seconds, 2, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
    if (s >= o.warmup) times.push_back(seconds[0]), busy.push_back(seconds[1]);
  }
  std::sort(times.begin(), times.end());
  std::sort(busy.begin(), busy.end());
  return {times[times.size() / 2], busy[busy.size() / 2]};
}

int run(const Options& o, const std::shared_ptr<coll::Communicator>& world) {
  const bool lead = world->rank() == 0;
  const Graph model = models::build_gpt(o.gpt);
  const parallel::CommTable table =
      parallel::probe_communication(*world, parallel::probe_options_for(model, world->size(), 1));
  parallel::ClusterSpec cluster;
  cluster.world = world->size();
  cluster.ranks_per_node = world->size();
  cluster.cores_per_node = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cluster.threads_per_rank = 1;
  cluster.comm = table;
  std::vector<parallel::PlanPrediction> ranked;
  std::vector<int64_t> fields;
  int64_t count = 0;
  if (lead) {
    parallel::WorkloadOptions w;
    w.num_threads = 1;
    ranked = parallel::rank_plans(model, cluster, w);
    for (const parallel::PlanPrediction& p : ranked) {
      if (!p.fits || (o.limit > 0 && count >= o.limit)) continue;
      const std::vector<int64_t> f = parallel::layout_fields(p.plan);
      fields.insert(fields.end(), f.begin(), f.end());
      ++count;
    }
  }
  world->broadcast(&count, 1, coll::DataType::kI64, 0)->wait();
  fields.resize(static_cast<size_t>(count) * parallel::kLayoutFields);
  if (count > 0) world->broadcast(fields.data(), fields.size(), coll::DataType::kI64, 0)->wait();
  if (lead) {
    std::printf("bench_planner: %d ranks, GPT width %lld, %lld layers, %lld heads, context %lld, vocab %lld, batch %lld\n",
                world->size(), static_cast<long long>(o.gpt.width), static_cast<long long>(o.gpt.layers),
                static_cast<long long>(o.gpt.heads), static_cast<long long>(o.gpt.context),
                static_cast<long long>(o.gpt.vocab), static_cast<long long>(o.gpt.batch));
    std::printf("communication probe: %s\n", table.source.c_str());
    for (const parallel::CommCost& c : table.entries)
      std::printf("  %-14s over %d ranks: latency %8.1f us, %8.3f GB/s%s\n", parallel::comm_op_name(c.op), c.ranks,
                  c.latency_seconds * 1e6, c.bytes_per_second / 1e9, c.caller_waits ? " (caller waiting)" : "");
    std::printf("\n%lld plans fit; timing each (%lld warm-up + %lld steps, median of the slowest rank)\n\n",
                static_cast<long long>(count), static_cast<long long>(o.warmup), static_cast<long long>(o.steps));
    std::printf("| # | plan | predicted ms (compute + comm + bubble) | measured ms | predicted / measured | busy ms "
                "predicted / measured |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
  }
  const size_t n = static_cast<size_t>(count);
  std::vector<double> best(n, INFINITY), best_busy(n, 0);  // the fastest reading's step and busy time
  std::vector<std::string> failures(n);
  // Plan k timed once, its fastest reading kept.
  auto time_once = [&](int64_t k, const char* phase, int64_t round) {
    const parallel::PlanConfig plan = parallel::with_layout(parallel::preset(parallel::Preset::kDdp, 1),
                                                            fields.data() + k * parallel::kLayoutFields);
    if (lead && o.verbose) {
      parallel::PlanPrediction named;
      named.plan = plan;
      std::fprintf(stderr, "%s %lld: plan %lld: %s\n", phase, static_cast<long long>(round + 1),
                   static_cast<long long>(k + 1), named.describe().c_str());
    }
    try {
      const Measured m = time_plan(o, plan, world);
      if (m.step < best[static_cast<size_t>(k)]) {
        best[static_cast<size_t>(k)] = m.step;
        best_busy[static_cast<size_t>(k)] = m.busy;
      }
    } catch (const Error& e) {
      failures[static_cast<size_t>(k)] = e.what();
    }
  };
  for (int64_t pass = 0; pass < o.passes; ++pass)
    for (int64_t j = 0; j < count; ++j) time_once(pass % 2 == 0 ? j : count - 1 - j, "pass", pass);
  std::vector<double> errors;
  double fastest = INFINITY, first_measured = 0;
  int fastest_index = -1;
  size_t shown = 0;
  std::vector<const parallel::PlanPrediction*> shown_plan(n, nullptr);
  for (int64_t k = 0; k < count; ++k) {
    const double measured = best[static_cast<size_t>(k)];
    const std::string& failure = failures[static_cast<size_t>(k)];
    if (!lead) continue;
    while (shown < ranked.size() && !ranked[shown].fits) ++shown;
    const parallel::PlanPrediction& p = ranked[shown++];
    shown_plan[static_cast<size_t>(k)] = &p;
    const double predicted = p.step_seconds();
    if (!failure.empty()) {
      std::printf("| %lld | %s | %.1f | failed: %s | |\n", static_cast<long long>(k + 1), p.describe().c_str(),
                  predicted * 1e3, failure.c_str());
      continue;
    }
    errors.push_back(std::fabs(predicted - measured) / measured);
    if (k == 0) first_measured = measured;
    if (measured < fastest) {
      fastest = measured;
      fastest_index = static_cast<int>(k);
    }
    // Busy: a micro-batch schedule's work, predicted as the compute less the update (which runs
    // after the schedule); plans of one run a step have none measured.
    const double busy = best_busy[static_cast<size_t>(k)];
    std::string busy_text = "-";
    if (busy > 0) {
      char text[64];
      std::snprintf(text, sizeof text, "%.1f / %.1f", (p.compute_seconds - p.update_seconds) * 1e3, busy * 1e3);
      busy_text = text;
    }
    std::printf("| %lld | %s | %.1f (%.1f + %.1f + %.1f) | %.1f | %.2f | %s |\n", static_cast<long long>(k + 1),
                p.describe().c_str(), predicted * 1e3, p.compute_seconds * 1e3, p.exposed_comm_seconds * 1e3,
                p.bubble_seconds * 1e3, measured * 1e3, predicted / measured, busy_text.c_str());
    std::fflush(stdout);
  }
  if (lead && !errors.empty()) {
    std::vector<double> sorted = errors;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("\nmedian |predicted - measured| / measured: %.1f%% over %zu plans (target <= 15%%)\n", median * 100,
                errors.size());
    std::printf("top-1 predicted plan measured %.1f ms; fastest measured %.1f ms (plan %d): %.1f%% slower (target <= 10%%)\n",
                first_measured * 1e3, fastest * 1e3, fastest_index + 1, (first_measured / fastest - 1) * 100);
  }

  // The contest: the predicted top-1 and the plans the sweep measured near the fastest, again.
  std::vector<int64_t> contest;
  if (lead && o.contest_rounds > 0 && fastest_index >= 0 && failures[0].empty()) {
    std::vector<int64_t> near;
    for (int64_t k = 1; k < count; ++k)
      if (failures[static_cast<size_t>(k)].empty() && best[static_cast<size_t>(k)] <= fastest * (1 + o.contest_margin))
        near.push_back(k);
    std::sort(near.begin(), near.end(),
              [&](int64_t a, int64_t b) { return best[static_cast<size_t>(a)] < best[static_cast<size_t>(b)]; });
    contest.push_back(0);
    for (int64_t k : near)
      if (static_cast<int64_t>(contest.size()) < o.contest_size) contest.push_back(k);
  }
  int64_t entrants = static_cast<int64_t>(contest.size());
  world->broadcast(&entrants, 1, coll::DataType::kI64, 0)->wait();
  if (entrants > 1) {
    contest.resize(static_cast<size_t>(entrants));
    world->broadcast(contest.data(), contest.size(), coll::DataType::kI64, 0)->wait();
    const std::vector<double> sweep = best;
    for (int64_t r = 0; r < o.contest_rounds; ++r)
      for (int64_t j = 0; j < entrants; ++j) time_once(contest[static_cast<size_t>((j + r) % entrants)], "contest", r);
    if (lead) {
      std::printf("\ncontest: the predicted top-1 and the plans measured within %.0f%% of the fastest, %lld more "
                  "round(s), each keeping its fastest reading\n\n",
                  o.contest_margin * 100, static_cast<long long>(o.contest_rounds));
      std::printf("| # | plan | predicted ms | sweep ms | contest ms |\n| --- | --- | --- | --- | --- |\n");
      int64_t winner = contest[0];
      for (int64_t k : contest) {
        const size_t i = static_cast<size_t>(k);
        if (!failures[i].empty()) continue;
        if (best[i] < best[static_cast<size_t>(winner)]) winner = k;
        std::printf("| %lld | %s | %.1f | %.1f | %.1f |\n", static_cast<long long>(k + 1),
                    shown_plan[i]->describe().c_str(), shown_plan[i]->step_seconds() * 1e3, sweep[i] * 1e3,
                    best[i] * 1e3);
      }
      std::printf("\ntop-1 after the contest: the predicted top-1 %.1f ms; fastest %.1f ms (plan %lld): %.1f%% slower "
                  "(target <= 10%%)\n",
                  best[0] * 1e3, best[static_cast<size_t>(winner)] * 1e3, static_cast<long long>(winner + 1),
                  (best[0] / best[static_cast<size_t>(winner)] - 1) * 100);
    }
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
    co.timeout = Ms(120000);  // a plan that cannot progress fails the run rather than holding it
    std::shared_ptr<coll::Communicator> world = coll::UcxCommunicator::create(store, env.rank, env.world, co);
    const int rc = run(o, world);
    world->barrier()->wait(Ms(600000));  // rank 0's store outlives every peer's use
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_planner: %s\n", e.what());
    return 1;
  }
}
