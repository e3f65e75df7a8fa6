// `auto` plans (core/parallel/auto_plan.h): every rank gets the same concrete plan, one the world
// and the model take, that trains; trials time the best predicted plans; a memory limit nothing
// fits is refused with the numbers; a trainer is not made from an automatic plan.
#include <gtest/gtest.h>

#include <mutex>

#include "core/parallel/auto_plan.h"
#include "core/parallel/parallel_trainer.h"
#include "tests/support/expect_error.h"
#include "tests/unit/core/parallel/tp_reference.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::parallel {
namespace {

namespace ct = transport::coll::testing;
using test::expect_error;

TrainerOptions one_thread() {
  TrainerOptions o;
  o.seed = 3;
  o.num_threads = 1;
  return o;
}

// One training step of the GPT at global batch `global_batch` under `plan` (this rank's rows of
// the first batch); its loss.
float step_once(const Graph& global, int64_t global_batch, const PlanConfig& plan,
                const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
  const int data = comm->size() / plan.model_degree();
  const int64_t rows = global_batch / (data * plan.tensor.z);
  auto trainer = make_parallel_trainer(global.with_batch(rows), test::tp_optimizer(), one_thread(), plan, comm);
  const int slice = comm->rank() / plan.model_degree() * plan.tensor.z + comm->rank() % plan.tensor.z;
  return trainer->step(test::tp_batch("gpt", 0, slice * rows, rows));
}

TEST(AutoPlan, EveryRankGetsTheSameConcretePlanAndItTrains) {
  constexpr int64_t kGlobal = 8;
  std::mutex mutex;
  std::vector<std::vector<int64_t>> chosen(4);
  std::string report;
  ct::run_ranks_shared(4, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig requested = preset(Preset::kDdp, 1);
    requested.automatic = true;
    std::string text;
    const Graph global = test::tp_model("gpt", kGlobal);
    const PlanConfig plan = choose_plan(global, requested, *comm, test::tp_optimizer(), one_thread(), &text);
    EXPECT_FALSE(plan.automatic);
    EXPECT_NO_THROW(validate_for_world(plan, 4));
    const float loss = step_once(global, kGlobal, plan, comm);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_TRUE(std::isfinite(loss));
    chosen[static_cast<size_t>(comm->rank())] = layout_fields(plan);
    if (comm->rank() == 0) report = text;
  });
  for (const auto& c : chosen) EXPECT_EQ(c, chosen[0]);
  EXPECT_NE(report.find("auto plan: chose "), std::string::npos) << report;
  EXPECT_NE(report.find("communication measured in"), std::string::npos) << report;
  std::printf("%s", report.c_str());
}

TEST(AutoPlan, TrialsTimeTheBestPredictedPlansAndKeepTheFastest) {
  std::string report;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig requested = preset(Preset::kDdp, 1);
    requested.automatic = true;
    requested.auto_trials = 2;
    std::string text;
    const PlanConfig plan = choose_plan(test::tp_model("mlp", 8), requested, *comm, test::tp_optimizer(), one_thread(), &text);
    EXPECT_NO_THROW(validate_for_world(plan, 2));
    if (comm->rank() == 0) report = text;
  });
  EXPECT_NE(report.find("trial 1: predicted"), std::string::npos) << report;
  EXPECT_NE(report.find("trial 2: predicted"), std::string::npos) << report;
  std::printf("%s", report.c_str());
}

// An automatic co2 plan is ranked under co2 (the table prices every layout as co2, its ZeRO
// stages only with shard groups: Planner.LocalStepModesGetShardGroupsWhereMemoryNeedsThem) and
// under a memory limit that the plain data-parallel layout exceeds, every rank gets the same
// plan, one that fits, and it trains.
TEST(AutoPlan, Co2IsRankedUnderCo2AndFitsTheLimit) {
  constexpr int64_t kGlobal = 8;
  const Graph global = test::tp_model("gpt", kGlobal);
  PlanConfig requested = preset(Preset::kCo2, 2);
  ClusterSpec c;
  c.world = 4;
  c.ranks_per_node = 4;
  c.comm = ring_comm_table(LinkSpec{1e9, 1e-5}, LinkSpec{1e9, 1e-5}, "nominal");
  WorkloadOptions w;
  w.measure = false;
  PlanConfig data4 = requested;
  data4.data_parallel = 4;
  const double plain = predict_plan(global, c, data4, w).memory_bytes;
  requested.automatic = true;
  requested.memory_limit_bytes = static_cast<int64_t>(plain) - 1;  // per rank: data 4 alone does not fit
  std::mutex mutex;
  std::vector<std::vector<int64_t>> chosen(4);
  std::string report;
  ct::run_ranks_shared(4, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    std::string text;
    const PlanConfig plan = choose_plan(global, requested, *comm, test::tp_optimizer(), one_thread(), &text);
    EXPECT_EQ(plan.mode, SyncMode::kCo2);
    EXPECT_NO_THROW(validate_for_world(plan, 4));
    EXPECT_LE(predict_plan(global, c, plan, w).memory_bytes, static_cast<double>(requested.memory_limit_bytes));
    const float loss = step_once(global, kGlobal, plan, comm);
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_TRUE(std::isfinite(loss));
    chosen[static_cast<size_t>(comm->rank())] = layout_fields(plan);
    if (comm->rank() == 0) report = text;
  });
  for (const auto& ch : chosen) EXPECT_EQ(ch, chosen[0]);
  EXPECT_NE(report.find("co2 tau 2"), std::string::npos) << report;
  EXPECT_EQ(report.find(", zero 1, co2"), std::string::npos) << report;  // no stage without groups
  std::printf("%s", report.c_str());
}

TEST(AutoPlan, AMemoryLimitNothingFitsIsRefusedWithTheNumbers) {
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig requested = preset(Preset::kDdp, 1);
    requested.automatic = true;
    requested.memory_limit_bytes = 1024;
    expect_error([&] { choose_plan(test::tp_model("gpt", 8), requested, *comm, test::tp_optimizer(), one_thread()); },
                 Status::kInvalidPlan, "auto plan: no layout of the model fits 2 ranks with 1024 bytes each (memory_limit_bytes) under mode sync (the smallest needs ");
    // A forced plan over the limit is refused before any collective, with the numbers.
    PlanConfig forced = preset(Preset::kDdp, 1);
    forced.memory_limit_bytes = 1024;
    expect_error([&] { make_parallel_trainer(test::tp_model("gpt", 4), test::tp_optimizer(), one_thread(), forced, comm); },
                 Status::kInvalidPlan, "MiB per rank (parameters, gradients, optimizer state and activations in flight), above the");
    requested.memory_limit_bytes = 0;
    expect_error([&] { make_parallel_trainer(test::tp_model("gpt", 4), test::tp_optimizer(), one_thread(), requested, comm); },
                 Status::kInvalidPlan, "plan: automatic: choose the layout first");
  });
}

}  // namespace
}  // namespace cohort::parallel
