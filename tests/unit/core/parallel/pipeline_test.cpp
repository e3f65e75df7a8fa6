// Pipeline parallelism (core/parallel/pipeline.h, parallel_trainer.h): where stages may be cut
// and where the balance puts them, each rank's stage graph, the schedules' orders, the plan's
// checks (each error naming the field), and training at 2 and 4 ranks — threads with their own
// UCX engines — against one process on the same global batch, within tp_reference.h's bound
// (micro-batches add the batch's rows in M partial sums: reordering, as tensor parallelism's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "core/checkpoint/checkpoint.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/parallel_trainer.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/tensor_parallel.h"
#include "tests/support/expect_error.h"
#include "tests/unit/core/parallel/tp_reference.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort::parallel {
namespace {

using test::expect_error;
namespace ct = transport::coll::testing;

std::vector<std::string> names_at(const Graph& g, const std::vector<size_t>& at) {
  std::vector<std::string> out;
  for (size_t k : at) out.push_back(g.nodes()[k].name);
  return out;
}

TEST(Pipeline, StagesMayBeginWhereOnlyTheResidualStreamCrosses) {
  const Graph gpt = test::tp_model("gpt", 2);
  const std::vector<std::string> points = names_at(gpt, pipeline_cut_points(gpt));
  // Between the blocks (and after each block's attention half), never inside attention or the MLP.
  EXPECT_NE(std::find(points.begin(), points.end(), "h.1.ln_1"), points.end());
  for (const std::string& p : points) {
    EXPECT_EQ(p.find("attn.c_proj"), std::string::npos) << p;
    EXPECT_EQ(p.find("mlp.c_proj"), std::string::npos) << p;
  }
  const Graph mlp = test::tp_model("mlp", 2);
  EXPECT_GE(pipeline_cut_points(mlp).size(), 3u);
}

TEST(Pipeline, TheBalancedCutEvensOutTheEstimatedStageTimes) {
  const Graph gpt = test::tp_model("gpt", 2);
  const size_t n = gpt.nodes().size();
  std::vector<double> cost(n, 1.0);
  const PipelineStages two = cut_pipeline_stages(gpt, 2, cost);
  ASSERT_EQ(two.begin.size(), 2u);
  EXPECT_EQ(two.begin[0], 0u);
  // No other cut point makes the most expensive stage cheaper.
  const double worst = std::max(two.seconds[0], two.seconds[1]);
  for (size_t k : pipeline_cut_points(gpt)) EXPECT_GE(std::max<double>(k, n - k), worst) << k;
  // A costly node moves the cut towards it.
  std::vector<double> heavy = cost;
  heavy[n - 2] = static_cast<double>(n);
  const PipelineStages shifted = cut_pipeline_stages(gpt, 2, heavy);
  EXPECT_GT(shifted.begin[1], two.begin[1]);
  EXPECT_NE(two.describe(gpt).find("stage 1: nodes"), std::string::npos) << two.describe(gpt);
  // Named cuts are taken as given.
  const PipelineStages named = cut_pipeline_stages(gpt, 2, cost, {"h.1.ln_1"});
  EXPECT_EQ(gpt.nodes()[named.begin[1]].name, "h.1.ln_1");
}

TEST(Pipeline, BadCutsAndStageCountsNameTheField) {
  const Graph gpt = test::tp_model("gpt", 2);
  const std::vector<double> cost(gpt.nodes().size(), 1.0);
  expect_error([&] { cut_pipeline_stages(gpt, 2, cost, {"nope"}); }, Status::kInvalidPlan,
               "plan: pipeline_cuts names 'nope', which is no node of the model");
  expect_error([&] { cut_pipeline_stages(gpt, 2, cost, {"h.0.attn.c_proj"}); }, Status::kInvalidPlan,
               "plan: pipeline_cuts names 'h.0.attn.c_proj', where no stage can begin");
  expect_error([&] { cut_pipeline_stages(gpt, 3, cost, {"h.1.ln_1"}); }, Status::kInvalidPlan,
               "plan: pipeline_cuts names 1 node(s); 3 stages need 2");
  const size_t points = pipeline_cut_points(gpt).size();
  expect_error([&] { cut_pipeline_stages(gpt, static_cast<int>(points) + 2, cost); }, Status::kInvalidPlan,
               str_cat("stages, but the model has ", points, " cut point(s)"));
  const Graph mlp = test::tp_model("mlp", 2);  // two layers: at most two stages with parameters
  expect_error([&] { cut_pipeline_stages(mlp, 3, std::vector<double>(mlp.nodes().size(), 1.0)); }, Status::kInvalidPlan,
               "plan: pipeline_stages x pipeline_chunks = 3 stages, but no cut of the model gives each stage a parameter");
  PlanConfig p;
  p.pipeline.micro_batches = 0;
  expect_error([&] { validate(p); }, Status::kInvalidPlan, "plan: micro_batches = 0 must be >= 1");
  p.pipeline.micro_batches = 3;
  p.pipeline.stages = 2;
  p.pipeline.schedule = PipelineSchedule::kInterleaved;
  expect_error([&] { validate(p); }, Status::kInvalidPlan,
               "plan: the interleaved schedule needs micro_batches (3) to be a multiple of pipeline_stages (2)");
  p.pipeline.schedule = PipelineSchedule::kOneFOneB;
  p.pipeline.chunks = 2;
  expect_error([&] { validate(p); }, Status::kInvalidPlan, "plan: pipeline_chunks = 2 needs the interleaved schedule");
  p.pipeline.chunks = 1;
  p.zero_stage = 3;  // gathered per schedule slot (zero.cpp; PipelineTraining's zero3 cases)
  EXPECT_NO_THROW(validate(p));
  p.zero_stage = 0;
  p.tensor.z = 2;  // stages compose with Z (UnderTensorZTheStagesAreTheModelsAndOnlyActivationsCross)
  EXPECT_NO_THROW(validate(p));
  expect_error([&] { validate_for_world(p, 6); }, Status::kInvalidPlan,
               "plan: pipeline_stages 2 x the tensor grid tensor_x 1 x tensor_y 1 x tensor_z 2 = 4 ranks does not "
               "divide the world size 6");
  p.tensor.z = 1;
  expect_error([&] { validate_for_world(p, 3); }, Status::kInvalidPlan,
               "plan: pipeline_stages 2 x the tensor grid tensor_x 1 x tensor_y 1 x tensor_z 1 = 2 ranks does not "
               "divide the world size 3");
}

TEST(Pipeline, AMicroBatchCountThatDoesNotDivideTheBatchIsRefusedBeforeAnyCollective) {
  PlanConfig p;
  p.pipeline.micro_batches = 3;
  // One rank, no communicator traffic: the check comes first.
  ct::run_ranks_shared(1, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    expect_error([&] { make_parallel_trainer(test::tp_model("mlp", 8), test::tp_optimizer(), TrainerOptions(), p, comm); },
                 Status::kInvalidPlan, "plan: micro_batches = 3 does not divide the batch 8");
  });
}

TEST(Pipeline, EachRankGraphHoldsItsStagesWithSendsAndReceives) {
  const Graph gpt = test::tp_model("gpt", 2);
  const PipelineStages stages = cut_pipeline_stages(gpt, 4, std::vector<double>(gpt.nodes().size(), 1.0));
  std::set<std::string> params;
  for (int rank = 0; rank < 2; ++rank) {
    const PipelineGraph pg = build_pipeline_graph(gpt, stages, 2, rank);
    ASSERT_EQ(pg.chunk_losses.size(), 2u);  // two virtual stages per rank
    int sends = 0, recvs = 0;
    for (const Node& n : pg.graph.nodes()) {
      sends += n.op->name == "pipe_send";
      recvs += n.op->name == "pipe_recv";
    }
    EXPECT_EQ(recvs, rank == 0 ? 1 : 2);  // stage 0 receives nothing
    EXPECT_EQ(sends, rank == 0 ? 2 : 1);  // the last stage sends nothing
    EXPECT_EQ(pg.graph.loss() >= 0, rank == 1);
    for (ValueId p : pg.graph.parameters()) params.insert(pg.graph.value(p).name);
    // The tied embedding: read by the first stage (lookup) and the last (the head).
    ASSERT_EQ(pg.tied_holders.count("wte.weight"), 1u);
    EXPECT_EQ(pg.tied_holders.at("wte.weight"), (std::vector<int>{0, 1}));
  }
  EXPECT_EQ(params.size(), gpt.parameters().size());  // every parameter somewhere
}

// Under tensor_z the rewrite gathers every weight block and copies every other parameter before
// the first node; those values are made from parameters alone, so they cross no cut: the
// rewritten graph has the model's cut points (a cut named by the model's node is taken), each
// stage makes the gathers and copies of what it reads, and only the residual stream is sent.
TEST(Pipeline, UnderTensorZTheStagesAreTheModelsAndOnlyActivationsCross) {
  const Graph gpt = test::tp_model("gpt", 2);
  TensorGrid z2;
  z2.z = 2;
  const Graph tp = shard_for_tensor_parallel(gpt, z2, TensorPosition{0, 0, 1}).graph;
  // Every cut point of the model is one of the rewrite (which adds the steps of the loss's mean
  // over Z, after the last stage's start).
  const std::vector<std::string> model_points = names_at(gpt, pipeline_cut_points(gpt)),
                                 tp_points = names_at(tp, pipeline_cut_points(tp));
  for (const std::string& p : model_points)
    EXPECT_NE(std::find(tp_points.begin(), tp_points.end(), p), tp_points.end()) << p;
  for (const std::string& p : tp_points) {
    const bool models = std::find(model_points.begin(), model_points.end(), p) != model_points.end();
    EXPECT_TRUE(models || p.rfind("loss.", 0) == 0) << p;
  }
  const PipelineStages stages = cut_pipeline_stages(tp, 2, std::vector<double>(tp.nodes().size(), 1.0), {"h.1.ln_1"});
  // Unnamed, the balanced cut on unit costs falls between the blocks too: each stage pays for
  // the gathers of what it reads, wherever the rewrite put them.
  const PipelineStages balanced = cut_pipeline_stages(tp, 2, std::vector<double>(tp.nodes().size(), 1.0));
  EXPECT_EQ(tp.nodes()[balanced.begin[1]].name, "h.1.ln_1") << balanced.describe(tp);
  std::set<std::string> params;
  for (int rank = 0; rank < 2; ++rank) {
    const PipelineGraph pg = build_pipeline_graph(tp, stages, 2, rank);
    std::vector<std::string> sent;
    std::set<std::string> nodes;
    for (const Node& n : pg.graph.nodes()) {
      nodes.insert(n.name);
      if (n.op->name == "pipe_send" || n.op->name == "pipe_recv") sent.push_back(n.name);
    }
    EXPECT_EQ(sent.size(), 1u) << rank;  // the residual stream, one way
    const std::string mine = rank == 0 ? "h.0." : "h.1.", other = rank == 0 ? "h.1." : "h.0.";
    for (const char* w : {"attn.c_attn.weight.gather_z", "mlp.c_proj.weight.gather_z", "ln_1.weight.copy_to_z"}) {
      EXPECT_TRUE(nodes.count(mine + w)) << rank << ": " << mine + w;
      EXPECT_FALSE(nodes.count(other + w)) << rank << ": " << other + w;
    }
    // The tied embedding: each stage copies it over Z itself; its gradient summed over both.
    EXPECT_TRUE(nodes.count("wte.weight.copy_to_z")) << rank;
    ASSERT_EQ(pg.tied_holders.count("wte.weight"), 1u);
    EXPECT_EQ(pg.tied_holders.at("wte.weight"), (std::vector<int>{0, 1}));
    for (ValueId p : pg.graph.parameters()) params.insert(pg.graph.value(p).name);
  }
  EXPECT_EQ(params.size(), tp.parameters().size());  // every parameter somewhere
}

TEST(Pipeline, SchedulesRunEveryMicroBatchOnceEachWayWithTheirInFlightBounds) {
  for (PipelineSchedule kind : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB, PipelineSchedule::kInterleaved}) {
    const int p = 4, m = 8, chunks = kind == PipelineSchedule::kInterleaved ? 2 : 1;
    for (int rank = 0; rank < p; ++rank) {
      const std::vector<PipelineOp> ops = pipeline_schedule(kind, p, chunks, m, rank);
      ASSERT_EQ(ops.size(), static_cast<size_t>(2 * m * chunks));
      std::set<std::pair<int, int>> open, done;
      size_t most = 0;
      for (const PipelineOp& op : ops) {
        const auto key = std::make_pair(op.chunk, op.micro_batch);
        if (op.forward) {
          EXPECT_TRUE(open.insert(key).second);
        } else {
          EXPECT_EQ(open.erase(key), 1u) << "backward before forward";
          done.insert(key);
        }
        most = std::max(most, open.size());
      }
      EXPECT_EQ(done.size(), static_cast<size_t>(m * chunks));
      // GPipe keeps every micro-batch; 1F1B at most P - r; interleaved its warm-up + 1.
      size_t bound = static_cast<size_t>(m);
      if (kind == PipelineSchedule::kOneFOneB) bound = static_cast<size_t>(p - rank);
      if (kind == PipelineSchedule::kInterleaved)
        bound = static_cast<size_t>(std::min((p - rank - 1) * 2 + (chunks - 1) * p + 1, m * chunks));
      EXPECT_EQ(most, bound) << schedule_name(kind) << " rank " << rank;
    }
  }
}

// Checkpoints are the whole model's, whatever the layout: saved by 2 stages (1F1B, with the
// tied embedding on both) or by 2 stages x tensor_z 2 (each stage's weight blocks gathered over
// Z), they load on one process, parameters bit for bit; the first loads under 4 stages, a tensor
// axis and tensor_z, parameters and optimizer state bit for bit, and training goes on alike (every
// Z rank fed the same rows, so their mean loss is the one process's).
TEST(Pipeline, CheckpointsLoadUnderAnotherStageCountOrOnOneRank) {
  constexpr int64_t kRows = 4;
  const std::string dir = ::testing::TempDir();
  auto path = [&](const std::string& layout, int rank) {
    return dir + "pipe_checkpoint_" + layout + ".rank" + std::to_string(rank);
  };
  auto make = [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm, int stages, int y, int z) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.pipeline.stages = stages;
    plan.pipeline.micro_batches = 2;
    plan.tensor.y = y;
    plan.tensor.z = z;
    TrainerOptions o;
    o.seed = 5;
    o.num_threads = 1;
    return make_parallel_trainer(test::tp_model("gpt", kRows), test::tp_optimizer(), o, plan, comm);
  };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  TrainerOptions o;
  o.seed = 99;  // the checkpoint's seed replaces it
  o.num_threads = 1;
  std::mutex mutex;
  float alone_loss = 0;
  for (int z : {1, 2}) {
    const std::string layout = z == 1 ? "p2" : "p2_z2";
    std::map<std::string, Tensor> held;  // every stage's whole parameters at the save
    ct::run_ranks_shared(2 * z, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      auto t = make(comm, 2, 1, z);
      for (int64_t s = 0; s < 3; ++s) t->step(test::tp_batch("gpt", s, 0, kRows));
      checkpoint::save_checkpoint(*t, path(layout, comm->rank()), {});
      std::map<std::string, Tensor> whole;
      for (const std::string& name : t->parameter_names()) whole[name] = t->whole_parameter(name);
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [name, w] : whole) held[name] = w;
    });
    Trainer alone(test::tp_model("gpt", kRows), test::tp_optimizer(), o);
    checkpoint::load_checkpoint(alone, path(layout, 2 * z - 1), nullptr);
    ASSERT_EQ(held.size(), alone.parameters().size()) << layout;
    for (size_t i = 0; i < alone.parameters().size(); ++i)
      EXPECT_TRUE(same_bits(alone.parameters()[i], held.at(alone.parameter_names()[i])))
          << layout << ": " << alone.parameter_names()[i];
    EXPECT_EQ(alone.step_count(), 3) << layout;
    const float loss = alone.step(test::tp_batch("gpt", 3, 0, kRows));
    if (z == 1) {
      alone_loss = loss;
    } else {  // the same rows every step: the same training within fp32 rounding
      EXPECT_NEAR(loss, alone_loss, std::fabs(alone_loss) * test::tp_longest_sum("gpt", kRows) * test::kUnitRoundoff);
    }
  }
  Trainer fresh(test::tp_model("gpt", kRows), test::tp_optimizer(), o);
  checkpoint::load_checkpoint(fresh, path("p2", 0), nullptr);
  struct Layout {
    int stages, y, z;
  };
  for (const Layout& l : {Layout{4, 1, 1}, Layout{2, 2, 1}, Layout{2, 1, 2}}) {
    ct::run_ranks_shared(4, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
      auto t = make(comm, l.stages, l.y, l.z);
      checkpoint::load_checkpoint(*t, path("p2", 0), nullptr);
      for (size_t i = 0; i < t->parameters().size(); ++i) {
        const std::string& name = t->parameter_names()[i];
        const size_t j = static_cast<size_t>(fresh.local_parameter(name));
        EXPECT_TRUE(same_bits(t->parameters()[i], t->block_of(i, fresh.parameters()[j]))) << name;
        auto mine = t->optimizer().state(i), want = fresh.optimizer().state(j);
        ASSERT_EQ(mine.size(), want.size());
        for (size_t k = 0; k < mine.size(); ++k)
          EXPECT_TRUE(same_bits(mine[k].second, t->block_of(i, want[k].second))) << name << "/" << mine[k].first;
      }
      EXPECT_EQ(t->step_count(), 3);
      const float loss = t->step(test::tp_batch("gpt", 3, 0, kRows));
      std::lock_guard<std::mutex> lock(mutex);
      EXPECT_NEAR(loss, alone_loss, std::fabs(alone_loss) * test::tp_longest_sum("gpt", kRows) * test::kUnitRoundoff)
          << l.stages << " stages, y " << l.y << ", z " << l.z << ", rank " << comm->rank();
    });
  }
}

// A NaN in one micro-batch's input reaches only the stages after it, but every stage skips the
// step alike (the model's loss is broadcast from the last stage): kNonFinite on every rank,
// parameters unchanged, and the next clean step trains on.
TEST(Pipeline, ANonFiniteBatchIsSkippedByEveryStageAlike) {
  std::mutex mutex;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.pipeline.stages = 2;
    plan.pipeline.micro_batches = 2;
    TrainerOptions o;
    o.num_threads = 1;
    auto t = make_parallel_trainer(test::tp_model("mlp", 8), test::tp_optimizer(), o, plan, comm);
    t->step(test::tp_batch("mlp", 0, 0, 8));
    std::vector<Tensor> before;
    for (const Tensor& p : t->parameters()) {
      before.push_back(Tensor::empty(p.shape(), p.dtype()));
      before.back().copy_from(p);
    }
    auto bad = test::tp_batch("mlp", 1, 0, 8);
    bad.at("x").data<float>()[5 * 12] = NAN;  // a row of the second micro-batch
    expect_error([&] { t->step(bad); }, Status::kNonFinite, "the update was skipped");
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_EQ(std::memcmp(before[i].raw(), t->parameters()[i].raw(), before[i].nbytes()), 0) << t->parameter_names()[i];
    EXPECT_EQ(t->step_count(), 1);
    const float loss = t->step(test::tp_batch("mlp", 2, 0, 8));
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(t->step_count(), 2);
  });
}

// Under micro-batches the trainer hands DDP its gradients before the loss (which a stage before
// the last receives after the schedule): the step's last bucket waits for the loss and carries
// a non-finite one to every rank of the group, whose averaged gradients then hold a NaN; with a
// finite loss they are the plain average. Several buckets, the hook driven directly.
TEST(Pipeline, ALossAfterTheGradientsStillReachesEveryRanksAverage) {
  std::mutex mutex;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.bucket_bytes = 64;  // a bucket or more per parameter
    TrainerOptions o;
    o.num_threads = 1;
    auto t = make_parallel_trainer(test::tp_model("mlp", 8), test::tp_optimizer(), o, plan, comm);
    StepHook& hook = *t->step_hook();
    for (const bool poisoned : {false, true}) {
      std::vector<Tensor> grads;
      for (const Tensor& p : t->parameters()) {
        grads.push_back(Tensor::empty(p.shape(), DType::kF32));
        grads.back().fill(static_cast<float>(comm->rank() + 1));
      }
      hook.begin_step();
      for (size_t i = grads.size(); i-- > 0;) hook.on_gradient(i, grads[i]);
      Tensor loss = Tensor::empty({}, DType::kF32);
      loss.data<float>()[0] = poisoned && comm->rank() == 0 ? std::nanf("") : 2.0f;
      hook.on_loss(loss);
      hook.before_update(grads);
      size_t nans = 0, others = 0;
      for (const Tensor& g : grads)
        for (int64_t k = 0; k < g.numel(); ++k) {
          const float v = g.data<float>()[k];
          if (std::isnan(v)) ++nans;
          else if (v != 1.5f) ++others;
        }
      std::lock_guard<std::mutex> lock(mutex);
      EXPECT_EQ(others, 0u) << "rank " << comm->rank() << (poisoned ? ", poisoned" : "");
      if (poisoned) EXPECT_GT(nans, 0u) << "rank " << comm->rank() << ": rank 0's NaN loss did not arrive";
      else EXPECT_EQ(nans, 0u) << "rank " << comm->rank();
    }
  });
}

struct PipeCase {
  std::string model;
  int world;
  int stages, chunks, micro_batches;
  PipelineSchedule schedule;
  std::string label;
  TensorGrid tensor{};
  SyncMode mode = SyncMode::kSync;
  int zero_stage = 0;
  SequenceParallel sequence = SequenceParallel::kNone;
};

// Every rank trains its stages for kSteps steps on its replica's rows; each must match the
// reference's loss and the reference's values of the parameters it holds.
class PipelineTraining : public ::testing::TestWithParam<PipeCase> {};

TEST_P(PipelineTraining, MatchesOneProcessOnTheGlobalBatch) {
  const PipeCase& c = GetParam();
  constexpr int64_t kSteps = 3, kRows = 8;  // rows per replica and step
  const int model_ranks = c.stages * c.tensor.degree(), data = c.world / model_ranks;
  const int64_t global = kRows * data * c.tensor.z;  // each Z rank of a replica its own rows
  const test::TpReference ref = test::tp_reference(c.model, global, kSteps, 1);
  std::mutex mutex;
  ct::run_ranks_shared(c.world, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    PlanConfig plan = preset(Preset::kDdp, 1);
    plan.tensor = c.tensor;
    plan.pipeline.stages = c.stages;
    plan.pipeline.chunks = c.chunks;
    plan.pipeline.micro_batches = c.micro_batches;
    plan.pipeline.schedule = c.schedule;
    plan.zero_stage = c.zero_stage;
    if (c.zero_stage == 3) plan.bucket_bytes = 256;  // several buckets: gathered and released one by one
    plan.sequence_parallel = c.sequence;
    TrainerOptions o;
    o.seed = 1 + static_cast<uint64_t>(comm->rank());  // the model and data axes take rank 0's
    o.num_threads = 1;
    auto trainer = make_parallel_trainer(test::tp_model(c.model, kRows), test::tp_optimizer(), o, plan, comm);
    const int slice = comm->rank() / model_ranks * c.tensor.z + comm->rank() % c.tensor.z;  // z varies fastest
    double worst_loss = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const float loss = trainer->step(test::tp_batch(c.model, s, slice * kRows, kRows));
      if (data == 1) {
        const double rel = std::fabs(loss - ref.losses[static_cast<size_t>(s)]) / std::fabs(ref.losses[static_cast<size_t>(s)]);
        worst_loss = std::max(worst_loss, rel / static_cast<double>(s + 1));
      }
    }
    // ZeRO 3: between steps only the shard, 1/data of this rank's stage parameters (plus each
    // bucket's padding); within a step never all of them whole at once (gathered per slot).
    test::Zero3Memory zm;
    if (c.zero_stage == 3) {
      zm = test::zero3_memory(*trainer, data, c.model == "gpt");
      trainer->gather_parameters();  // a collective over the data axis
    }
    const test::TpDiff diff = test::tp_parameter_diff(*trainer, ref);
    const TrainerStats st = trainer->stats();
    std::lock_guard<std::mutex> lock(mutex);
    if (c.zero_stage == 3) {
      std::printf("%s rank %d: %s\n", c.label.c_str(), comm->rank(), zm.describe().c_str());
      EXPECT_TRUE(zm.ok) << c.label << ": " << zm.describe();
    }
    std::printf("%s rank %d: %zu parameters, max |param - reference| %.3g (%s), bound %.3g; loss rel. diff per step "
                "%.3g (bound %.3g); busy %.2f ms, bubble %.2f\n",
                c.label.c_str(), comm->rank(), trainer->parameters().size(), diff.max_abs, diff.worst.c_str(),
                ref.parameter_bound(), worst_loss, ref.loss_relative_per_step, st.pipeline_busy_seconds * 1e3,
                st.pipeline_bubble_fraction);
    if (c.stages > 1) {
      EXPECT_LT(trainer->parameters().size(), ref.parameters.size());  // only its stages'
    }
    EXPECT_LE(diff.max_abs, ref.parameter_bound()) << c.label << " rank " << comm->rank() << ": parameter " << diff.worst;
    EXPECT_LE(worst_loss, ref.loss_relative_per_step) << c.label << " rank " << comm->rank();
    EXPECT_EQ(st.micro_batches, c.micro_batches);
    EXPECT_GE(st.pipeline_bubble_fraction, 0.0);
    EXPECT_LT(st.pipeline_bubble_fraction, 1.0);
  });
}

TensorGrid y2() {
  TensorGrid g;
  g.y = 2;
  return g;
}

TensorGrid z2() {
  TensorGrid g;
  g.z = 2;
  return g;
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineTraining,
    ::testing::Values(PipeCase{"mlp", 1, 1, 1, 4, PipelineSchedule::kGPipe, "mlp_micro4"},
                      PipeCase{"gpt", 1, 1, 1, 2, PipelineSchedule::kOneFOneB, "gpt_micro2"},
                      PipeCase{"mlp", 2, 2, 1, 4, PipelineSchedule::kGPipe, "mlp_p2_gpipe"},
                      PipeCase{"gpt", 2, 2, 1, 4, PipelineSchedule::kGPipe, "gpt_p2_gpipe"},
                      PipeCase{"gpt", 2, 2, 1, 4, PipelineSchedule::kOneFOneB, "gpt_p2_1f1b"},
                      PipeCase{"mlp", 2, 2, 1, 4, PipelineSchedule::kOneFOneB, "mlp_p2_1f1b"},
                      PipeCase{"gpt", 4, 4, 1, 8, PipelineSchedule::kOneFOneB, "gpt_p4_1f1b"},
                      PipeCase{"gpt", 4, 4, 1, 4, PipelineSchedule::kGPipe, "gpt_p4_gpipe"},
                      PipeCase{"gpt", 2, 2, 2, 4, PipelineSchedule::kInterleaved, "gpt_p2_interleaved2"},
                      PipeCase{"gpt", 4, 2, 2, 2, PipelineSchedule::kInterleaved, "gpt_data2_p2_interleaved2"},
                      PipeCase{"gpt", 4, 2, 1, 4, PipelineSchedule::kOneFOneB, "gpt_data2_p2_1f1b"},
                      PipeCase{"gpt", 4, 2, 1, 2, PipelineSchedule::kOneFOneB, "gpt_data2_p2_zero1", TensorGrid{},
                               SyncMode::kSync, 1},
                      PipeCase{"mlp", 4, 2, 1, 4, PipelineSchedule::kGPipe, "mlp_data2_p2_zero2", TensorGrid{},
                               SyncMode::kSync, 2},
                      PipeCase{"gpt", 4, 2, 1, 2, PipelineSchedule::kOneFOneB, "gpt_data2_p2_zero3", TensorGrid{},
                               SyncMode::kSync, 3},
                      PipeCase{"mlp", 4, 2, 1, 4, PipelineSchedule::kGPipe, "mlp_data2_p2_zero3", TensorGrid{},
                               SyncMode::kSync, 3},
                      PipeCase{"gpt", 4, 2, 2, 2, PipelineSchedule::kInterleaved, "gpt_data2_p2_interleaved2_zero3",
                               TensorGrid{}, SyncMode::kSync, 3},
                      PipeCase{"gpt", 2, 1, 1, 2, PipelineSchedule::kOneFOneB, "gpt_data2_micro2_zero3", TensorGrid{},
                               SyncMode::kSync, 3},
                      PipeCase{"mlp", 2, 1, 1, 2, PipelineSchedule::kGPipe, "mlp_data2_micro2_zero3", TensorGrid{},
                               SyncMode::kSync, 3},
                      PipeCase{"gpt", 4, 2, 1, 2, PipelineSchedule::kOneFOneB, "gpt_p2_y2_1f1b", y2()},
                      PipeCase{"gpt", 4, 2, 2, 2, PipelineSchedule::kInterleaved, "gpt_p2_y2_sequence_interleaved", y2(),
                               SyncMode::kSync, 0, SequenceParallel::kMegatron},
                      PipeCase{"gpt", 4, 2, 1, 2, PipelineSchedule::kOneFOneB, "gpt_p2_z2_1f1b", z2()},
                      PipeCase{"mlp", 4, 2, 1, 4, PipelineSchedule::kGPipe, "mlp_p2_z2_gpipe", z2()},
                      PipeCase{"gpt", 4, 2, 2, 2, PipelineSchedule::kInterleaved, "gpt_p2_z2_interleaved2", z2()}),
    [](const ::testing::TestParamInfo<PipeCase>& i) { return i.param.label; });

}  // namespace
}  // namespace cohort::parallel
