// The planner (core/parallel/planner.h): the communication table's lookups and scaling, the
// bubble's share of a pipeline's time, data-parallel communication against parameter bytes,
// ZeRO's and activation checkpointing's memory, the layouts rank_plans proposes (only ones the
// world and the model take), memory limits, and the errors of a bad plan. Every prediction uses
// the estimator's default rates (measure = false, a fresh cache path): fast and deterministic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>

#include "core/base/error.h"
#include "core/models/gpt.h"
#include "core/parallel/planner.h"

namespace cohort::parallel {
namespace {

namespace fs = std::filesystem;

class Planner : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort_planner_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    workload_.num_threads = 1;
    workload_.cache_path = (dir_ / "workload.bin").string();
    workload_.measure = false;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A cluster of `world` ranks, 4 to a node, 10 GB/s within a node and 1 GB/s across.
  static ClusterSpec cluster(int world, double within = 10e9, double across = 1e9) {
    ClusterSpec c;
    c.world = world;
    c.ranks_per_node = 4;
    c.comm = ring_comm_table(LinkSpec{within, 5e-6}, LinkSpec{across, 2e-5}, "test");
    return c;
  }
  PlanPrediction predict(const Graph& model, const ClusterSpec& c, const PlanConfig& plan) const {
    return predict_plan(model, c, plan, workload_);
  }
  fs::path dir_;
  WorkloadOptions workload_;
};

models::GptConfig small_gpt() {
  models::GptConfig g;  // batch 8, context 128, vocab 256, 4 layers, width 256, 4 heads
  return g;
}

PlanConfig data_plan(int data, int zero = 0) {
  PlanConfig p;
  p.data_parallel = data;
  p.zero_stage = zero;
  return p;
}

void expect_status(Status status, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error, expected status " << static_cast<int>(status);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
  }
}

TEST_F(Planner, CommTableLooksUpAndScales) {
  CommTable t;
  t.source = "test";
  t.entries.push_back(CommCost{CommOp::kAllReduce, 4, false, 1e-5, 1e9});
  t.entries.push_back(CommCost{CommOp::kAllReduce, 4, true, 1e-4, 1e8});
  t.entries.push_back(CommCost{CommOp::kAllGather, 2, false, 0, 1e9});
  // The entry itself.
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 1e9), 1e-5 + 1.0, 1e-12);
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 1e9, true), 1e-4 + 10.0, 1e-9);
  // Another group size: the ring's 2 (n - 1) / n volume relative to the entry's.
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 8, 1e9), 1e-5 + (7.0 / 8) / (3.0 / 4), 1e-12);
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 2, 1e9), 1e-5 + (1.0 / 2) / (3.0 / 4), 1e-12);
  // all_gather of a block: (n - 1) blocks per rank.
  EXPECT_NEAR(t.seconds(CommOp::kAllGather, 8, 1e9), 7.0, 1e-12);
  // Twice the bytes: twice the bandwidth term.
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 2e9) - 1e-5, 2 * (t.seconds(CommOp::kAllReduce, 4, 1e9) - 1e-5), 1e-9);
  // One rank or nothing to move: free.
  EXPECT_EQ(t.seconds(CommOp::kAllReduce, 1, 1e9), 0.0);
  EXPECT_EQ(t.seconds(CommOp::kAllReduce, 4, 0), 0.0);
  // Measured with the caller waiting: that entry where asked for, the other kind where the table
  // has none (all_gather), and never where not asked for.
  t.entries.push_back(CommCost{CommOp::kAllReduce, 4, false, 2e-6, 2e9, true});
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 1e9, false, true), 2e-6 + 0.5, 1e-12);
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 1e9), 1e-5 + 1.0, 1e-12);
  EXPECT_NEAR(t.seconds(CommOp::kAllReduce, 4, 1e9, true, true), 1e-4 + 10.0, 1e-9);  // placement first
  EXPECT_NEAR(t.seconds(CommOp::kAllGather, 2, 1e9, false, true), 1.0, 1e-12);
  // An op the table lacks.
  expect_status(Status::kNotFound, [&] { (void)t.seconds(CommOp::kReduceScatter, 4, 1e6); });
  EXPECT_STREQ(comm_op_name(CommOp::kReduceScatter), "reduce_scatter");

  // A described cluster: the ring's volumes over each rank's link.
  const CommTable r = ring_comm_table(LinkSpec{1e10, 0}, LinkSpec{1e9, 0}, "ring");
  const double b = 1e8;
  EXPECT_NEAR(r.seconds(CommOp::kAllReduce, 8, b), b * 2 * 7 / 8 / 1e10, 1e-12);
  EXPECT_NEAR(r.seconds(CommOp::kAllReduce, 8, b, true), b * 2 * 7 / 8 / 1e9, 1e-12);
  EXPECT_NEAR(r.seconds(CommOp::kReduceScatter, 16, b), b * 15 / 16 / 1e10, 1e-12);
  EXPECT_NEAR(r.seconds(CommOp::kAllGather, 16, b), b * 15 / 1e10, 1e-12);
  EXPECT_NEAR(r.seconds(CommOp::kPointToPoint, 2, b), b / 1e10, 1e-12);
}

// The schedule simulated over equal stages: 1F1B and GPipe take (M + P - 1) (f + b), the bubble's
// share (P - 1) / (M + P - 1); interleaving lies between that and the ideal (P - 1) t / V, nearer
// the ideal as M grows; a message over every cut delays the fill and the drain at least.
TEST(PipelineSimulation, EqualStagesGiveTheKnownBubbles) {
  const double f = 1, b = 2;
  for (int P : {2, 4})
    for (int M : {4, 8}) {
      for (PipelineSchedule kind : {PipelineSchedule::kOneFOneB, PipelineSchedule::kGPipe}) {
        const std::vector<double> fwd(P, f), bwd(P, b), none(P, 0), msg(P, 0.25);
        EXPECT_NEAR(simulate_pipeline(kind, P, 1, M, fwd, bwd, none), (M + P - 1) * (f + b), 1e-12) << P << " " << M;
        EXPECT_GE(simulate_pipeline(kind, P, 1, M, fwd, bwd, msg), (M + P - 1) * (f + b) + 2 * (P - 1) * 0.25 - 1e-12);
      }
      const int V = 2;
      const std::vector<double> fwd(P * V, f / V), bwd(P * V, b / V), none(P * V, 0);
      const double t = f + b, interleaved = simulate_pipeline(PipelineSchedule::kInterleaved, P, V, M, fwd, bwd, none);
      EXPECT_GE(interleaved, M * t + (P - 1) * t / V - 1e-12) << P << " " << M;
      EXPECT_LT(interleaved, (M + P - 1) * t) << P << " " << M;
    }
  // More micro-batches bring interleaving nearer its ideal share.
  const std::vector<double> fwd(4, 0.5), bwd(4, 1.0), none(4, 0);
  auto excess = [&](int M) {
    return simulate_pipeline(PipelineSchedule::kInterleaved, 2, 2, M, fwd, bwd, none) - (M * 3.0 + 1.5);
  };
  EXPECT_LE(excess(16), excess(2));
}

TEST_F(Planner, BubbleIsItsShareOfThePipeline) {
  const Graph model = models::build_gpt(small_gpt());
  for (auto [V, M] : {std::pair{1, 2}, std::pair{1, 4}, std::pair{2, 4}}) {  // 4 rows a replica
    PlanConfig plan = data_plan(2);
    plan.pipeline.stages = 2;
    plan.pipeline.chunks = V;
    plan.pipeline.micro_batches = M;
    plan.pipeline.schedule = V > 1 ? PipelineSchedule::kInterleaved : PipelineSchedule::kOneFOneB;
    const PlanPrediction p = predict(model, cluster(4), plan);
    const double P = 2;
    // The stages are not equal: the slowest one's (P - 1) t bounds the bubble from above (1F1B).
    ASSERT_GT(p.bubble_seconds, 0);
    const double share = p.bubble_seconds / (p.compute_seconds + p.bubble_seconds);
    EXPECT_LE(share, (P - 1) / (M + P - 1) + 1e-12) << p.describe();
    EXPECT_GT(share, 0.5 * (P - 1) / (V * M + P - 1)) << p.describe();
  }
  // No pipeline, no bubble.
  EXPECT_EQ(predict(model, cluster(4), data_plan(4)).bubble_seconds, 0.0);
}

TEST_F(Planner, DataParallelCommunicationGrowsWithParameterBytes) {
  models::GptConfig small = small_gpt(), wide = small_gpt();
  small.width = 128;
  wide.width = 512;
  // A slow link, so that the all-reduce outlasts backward and shows.
  const ClusterSpec c = cluster(4, 1e8, 1e8);
  const PlanPrediction a = predict(models::build_gpt(small), c, data_plan(4));
  const PlanPrediction b = predict(models::build_gpt(wide), c, data_plan(4));
  EXPECT_GT(a.exposed_comm_seconds, 0);
  EXPECT_GT(b.exposed_comm_seconds, 2 * a.exposed_comm_seconds);
  // A single rank has nothing to reduce.
  PlanConfig one = data_plan(1);
  EXPECT_EQ(predict(models::build_gpt(small), cluster(1), one).exposed_comm_seconds, 0.0);
}

TEST_F(Planner, ZeroShardsMemory) {
  const Graph model = models::build_gpt(small_gpt());
  const ClusterSpec c = cluster(4);
  // Stage 3 holds the buckets in use whole (up to two, one prefetched): 1 MiB buckets, so that
  // the small model spans several, as a large one spans many of the default 25 MiB.
  auto data_plan = [](int data, int zero) {
    PlanConfig p = cohort::parallel::data_plan(data, zero);
    p.bucket_bytes = 1 << 20;
    return p;
  };
  const double m0 = predict(model, c, data_plan(4, 0)).memory_bytes;
  const double m1 = predict(model, c, data_plan(4, 1)).memory_bytes;
  const double m2 = predict(model, c, data_plan(4, 2)).memory_bytes;
  const double m3 = predict(model, c, data_plan(4, 3)).memory_bytes;
  EXPECT_LT(m1, m0);
  EXPECT_LT(m2, m1);
  EXPECT_LT(m3, m2);
  // ZeRO 1 and 2 all-gather the updated parameters: more exposed communication than DDP.
  EXPECT_GT(predict(model, c, data_plan(4, 1)).exposed_comm_seconds, predict(model, c, data_plan(4, 0)).exposed_comm_seconds);
}

// ZeRO 3 over the data axis of a tensor grid: priced (the shard 1/data of each tensor rank's
// blocks) and proposed as the last rung of the memory ladder, never with pipeline stages or
// micro-batches (not implemented there yet).
TEST_F(Planner, ZeroThreeShardsTheDataAxisOfATensorGrid) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec c = cluster(4);
  auto grid_plan = [](int zero) {
    PlanConfig p = data_plan(2, zero);
    p.tensor.y = 2;
    p.bucket_bytes = 1 << 20;
    return p;
  };
  const double m2 = predict(model, c, grid_plan(2)).memory_bytes, m3 = predict(model, c, grid_plan(3)).memory_bytes;
  EXPECT_LT(m3, m2);
  c.memory_bytes_per_rank = 1;  // nothing fits: every rung of every layout is listed
  int tensor_zero3 = 0, pipelined_zero3 = 0;  // stage 3 runs under pipeline stages and micro-batches too
  for (const PlanPrediction& p : rank_plans(model, c, workload_)) {
    if (p.plan.zero_stage != 3) continue;
    tensor_zero3 += p.plan.tensor.degree() > 1;
    pipelined_zero3 += p.plan.pipeline.stages > 1 || p.plan.pipeline.micro_batches > 1;
  }
  EXPECT_GT(tensor_zero3, 0);
  EXPECT_GT(pipelined_zero3, 0);
}

TEST_F(Planner, ShardGroupsShardOverTheReplica) {
  // DiLoCo at 4 data ranks: ZeRO 3 inside replicas of 2 holds half of each rank's model state,
  // inside one replica of 4 a quarter; every rank its own replica holds all of it.
  const Graph model = models::build_gpt(small_gpt());
  auto grouped = [](int group) {
    PlanConfig p = preset(Preset::kDiLoCo, 4);
    p.data_parallel = 4;
    p.bucket_bytes = 1 << 20;
    p.zero_stage = group > 1 ? 3 : 0;
    p.shard_group = group;
    return p;
  };
  const double m1 = predict(model, cluster(4), grouped(1)).memory_bytes;
  const double m2 = predict(model, cluster(4), grouped(2)).memory_bytes;
  const double m4 = predict(model, cluster(4), grouped(4)).memory_bytes;
  EXPECT_LT(m2, m1);
  EXPECT_LT(m4, m2);
}

TEST_F(Planner, ShardGroupsPriceTheReplicaEveryStepAndTheShardBetweenReplicas) {
  // DiLoCo, tau 4, at 4 data ranks, 2 to a node, 100 GB/s within a node and 10 MB/s across.
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec c = cluster(4, 100e9, 10e6);
  c.ranks_per_node = 2;
  auto plan = [](int group, int zero) {
    PlanConfig p = preset(Preset::kDiLoCo, 4);
    p.data_parallel = 4;
    p.bucket_bytes = 1 << 20;
    p.zero_stage = zero;
    p.shard_group = group;
    return p;
  };
  const double alone = predict(model, c, plan(1, 0)).exposed_comm_seconds;  // every rank a replica
  ASSERT_GT(alone, 0.0);
  // Replicas of the two ranks of a node: each step's ZeRO traffic on the fast link, and between
  // the 2 replicas half the model each (an all-reduce over 2 moves it once; over 4, 1.5 times).
  const double in_nodes = predict(model, c, plan(2, 1)).exposed_comm_seconds;
  EXPECT_LT(in_nodes, 0.4 * alone);
  EXPECT_GT(in_nodes, alone / 4);
  // Replicas across the nodes (one rank to a node): their ZeRO traffic crosses the slow link
  // every step, the whole model's worth, where the ranks alone send 1.5 times it every 4 steps.
  c.ranks_per_node = 1;
  const double across = predict(model, c, plan(2, 1)).exposed_comm_seconds;
  EXPECT_GT(across, 1.5 * predict(model, c, plan(1, 0)).exposed_comm_seconds);
  EXPECT_GT(across, 4 * in_nodes);
  // One replica of all 4: no outer sync, the sync mode's ZeRO exactly.
  c.ranks_per_node = 2;
  PlanConfig sync = preset(Preset::kDdp, 1);
  sync.data_parallel = 4;
  sync.bucket_bytes = 1 << 20;
  sync.zero_stage = 2;
  EXPECT_DOUBLE_EQ(predict(model, c, plan(4, 2)).exposed_comm_seconds, predict(model, c, sync).exposed_comm_seconds);
}

// rank_plans under the requested mode: co2 takes no ZeRO stage on its own, so where memory needs
// one its layouts carry shard groups (ZeRO inside replicas of S ranks, S | data); DiLoCo takes
// stage 1 alone and the rest with groups; the sync mode never gets groups. Every plan carries the
// mode's own fields, and with memory to spare no plan has groups (they cost time).
TEST_F(Planner, LocalStepModesGetShardGroupsWhereMemoryNeedsThem) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec c = cluster(8);
  PlanConfig co2 = preset(Preset::kCo2, 4);
  auto groups_in = [](const std::vector<PlanPrediction>& plans) {
    int n = 0;
    for (const auto& p : plans) n += p.plan.shard_group > 1;
    return n;
  };
  std::vector<PlanPrediction> plans = rank_plans(model, c, workload_, co2);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(groups_in(plans), 0) << "memory to spare: no groups";
  for (const auto& p : plans) {
    EXPECT_EQ(p.plan.mode, SyncMode::kCo2) << p.describe();
    EXPECT_EQ(p.plan.tau, 4) << p.describe();
    EXPECT_EQ(p.plan.zero_stage, 0) << p.describe();  // co2 alone takes none
    EXPECT_FALSE(p.plan.automatic) << p.describe();
  }
  // The data-parallel plan (data 8) of co2 alone against its ZeRO 3 in groups: a limit between them.
  PlanConfig alone = co2;
  alone.data_parallel = 8;
  PlanConfig grouped = alone;
  grouped.zero_stage = 3;
  grouped.shard_group = 8;
  const double m_alone = predict(model, c, alone).memory_bytes, m_grouped = predict(model, c, grouped).memory_bytes;
  ASSERT_LT(m_grouped, m_alone);
  c.memory_bytes_per_rank = (m_alone + m_grouped) / 2;
  plans = rank_plans(model, c, workload_, co2);
  bool grouped_fits = false;
  for (const auto& p : plans) {
    if (p.plan.data_parallel != 8) continue;
    if (p.plan.shard_group > 1) {
      EXPECT_GE(p.plan.zero_stage, 1) << p.describe();
      EXPECT_EQ(8 % p.plan.shard_group, 0) << p.describe();
      EXPECT_NE(p.describe().find("in groups of"), std::string::npos) << p.describe();
      grouped_fits |= p.fits;
    } else {
      EXPECT_FALSE(p.fits) << p.describe();
    }
  }
  EXPECT_TRUE(grouped_fits) << format_plan_table(plans);
  // The sync mode under the same limit shards over the whole data axis instead: no groups.
  EXPECT_EQ(groups_in(rank_plans(model, c, workload_)), 0);
  // DiLoCo takes ZeRO 1 on its own (its outer state sharded): some fitting plans without groups.
  PlanConfig diloco = preset(Preset::kDiLoCo, 4);
  bool stage_one_alone = false;
  for (const auto& p : rank_plans(model, c, workload_, diloco))
    stage_one_alone |= p.plan.zero_stage == 1 && p.plan.shard_group == 1;
  EXPECT_TRUE(stage_one_alone);
}

TEST_F(Planner, CheckpointingTradesComputeForMemory) {
  const Graph model = models::build_gpt(small_gpt());
  PlanConfig off = data_plan(4), on = data_plan(4);
  on.activation_checkpointing = true;
  const PlanPrediction a = predict(model, cluster(4), off), b = predict(model, cluster(4), on);
  EXPECT_LT(b.memory_bytes, a.memory_bytes);
  EXPECT_GT(b.compute_seconds, a.compute_seconds);
  EXPECT_LT(b.compute_seconds, 1.5 * a.compute_seconds);  // one more forward: about a third
}

TEST_F(Planner, TensorDegreesDivideTheHeads) {
  models::GptConfig g = small_gpt();
  g.width = 192;
  g.heads = 6;  // 4 does not divide 6
  const Graph model = models::build_gpt(g);
  const std::vector<PlanPrediction> plans = rank_plans(model, cluster(4), workload_);
  ASSERT_FALSE(plans.empty());
  bool some_tensor = false;
  for (const PlanPrediction& p : plans) {
    EXPECT_EQ(g.heads % p.plan.tensor.y, 0) << p.describe();
    some_tensor |= p.plan.tensor.degree() > 1;
  }
  EXPECT_TRUE(some_tensor);  // 2 divides 6: proposed
  // Asked directly, the degree is refused as the trainer would refuse it.
  PlanConfig bad = data_plan(1);
  bad.tensor.y = 4;
  expect_status(Status::kInvalidPlan, [&] { (void)predict(model, cluster(4), bad); });
}

// Megatron's sequence parallelism on the 2D grid X 2 x Y 2 is proposed, and priced below the same
// grid without it: the regions' activations by Y, the X gathers of each pair's output Y times
// smaller (its tokens' block), the Y all-reduce becoming a reduce-scatter and an all-gather of
// the same bytes.
TEST_F(Planner, SequenceParallelismOnTheTwoDimensionalGridIsProposedAndCheaper) {
  const Graph model = models::build_gpt(small_gpt());
  bool proposed = false;
  for (const PlanPrediction& p : rank_plans(model, cluster(4), workload_))
    proposed |= p.plan.tensor.x == 2 && p.plan.tensor.y == 2 && p.plan.sequence_parallel == SequenceParallel::kMegatron;
  EXPECT_TRUE(proposed);
  PlanConfig plain = data_plan(1);
  plain.tensor.x = 2;
  plain.tensor.y = 2;
  PlanConfig sequence = plain;
  sequence.sequence_parallel = SequenceParallel::kMegatron;
  const PlanPrediction a = predict(model, cluster(4), plain), b = predict(model, cluster(4), sequence);
  std::printf("2x2x1: memory %.1f MiB, exposed communication %.3f ms; with sequence parallelism %.1f MiB, %.3f ms\n",
              a.memory_bytes / (1 << 20), a.exposed_comm_seconds * 1e3, b.memory_bytes / (1 << 20),
              b.exposed_comm_seconds * 1e3);
  EXPECT_LT(b.memory_bytes, a.memory_bytes);
  EXPECT_LT(b.exposed_comm_seconds, a.exposed_comm_seconds);
}

// Pipeline stages compose with tensor_z: proposed at world 4 (2 stages x Z 2), each stage holding
// its own parameters' Z blocks, so below the memory of 2 stages alone with the same rows a rank.
TEST_F(Planner, PipelineStagesWithTensorZAreProposed) {
  const Graph model = models::build_gpt(small_gpt());
  bool proposed = false;
  for (const PlanPrediction& p : rank_plans(model, cluster(4), workload_))
    proposed |= p.plan.pipeline.stages == 2 && p.plan.tensor.z == 2;
  EXPECT_TRUE(proposed);
  PlanConfig stages = data_plan(2);  // data 2 x pipe 2: 2 rows a micro-batch, as under Z 2
  stages.pipeline.stages = 2;
  stages.pipeline.micro_batches = 2;
  PlanConfig z = data_plan(1);
  z.pipeline.stages = 2;
  z.pipeline.micro_batches = 2;
  z.tensor.z = 2;
  const PlanPrediction a = predict(model, cluster(4), stages), b = predict(model, cluster(4), z);
  std::printf("data 2 x pipe 2: %.1f MiB; pipe 2 x Z 2: %.1f MiB\n", a.memory_bytes / (1 << 20),
              b.memory_bytes / (1 << 20));
  EXPECT_LT(b.memory_bytes, a.memory_bytes);
}

TEST_F(Planner, PlansCoverTheWorldAndAreRanked) {
  const Graph model = models::build_gpt(small_gpt());
  for (int world : {1, 2, 4, 8}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<PlanPrediction> plans = rank_plans(model, cluster(world), workload_);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(plans.empty()) << world;
    if (world == 4) {
      EXPECT_LT(seconds, 1.0);
      std::printf("world 4: %zu plans in %.3f s\n%s", plans.size(), seconds, format_plan_table(plans, 8).c_str());
    }
    for (size_t i = 0; i < plans.size(); ++i) {
      const PlanPrediction& p = plans[i];
      EXPECT_EQ(p.plan.data_parallel * p.plan.pipeline.stages * p.plan.tensor.degree(), world) << p.describe();
      EXPECT_EQ(p.plan.mode, SyncMode::kSync);
      EXPECT_NO_THROW(validate_for_world(p.plan, world)) << p.describe();
      if (i > 0) {
        EXPECT_LE(plans[i - 1].step_seconds(), p.step_seconds());
      }
    }
  }
}

TEST_F(Planner, PlansOverMemoryAreMarkedAndLast) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec c = cluster(4);
  std::vector<PlanPrediction> plans = rank_plans(model, c, workload_);
  double lo = plans.front().memory_bytes, hi = lo;
  for (const auto& p : plans) lo = std::min(lo, p.memory_bytes), hi = std::max(hi, p.memory_bytes);
  ASSERT_LT(lo, hi);
  c.memory_bytes_per_rank = (lo + hi) / 2;
  plans = rank_plans(model, c, workload_);
  bool seen_over = false, some_fit = false;
  for (const auto& p : plans) {
    EXPECT_EQ(p.fits, p.memory_bytes <= c.memory_bytes_per_rank) << p.describe();
    if (!p.fits) {
      seen_over = true;
    } else {
      EXPECT_FALSE(seen_over) << "a plan that fits after one that does not: " << p.describe();
    }
    some_fit |= p.fits;
  }
  EXPECT_TRUE(seen_over);
  EXPECT_TRUE(some_fit);
  const std::string table = format_plan_table(plans);
  EXPECT_NE(table.find("NO"), std::string::npos);
  EXPECT_NE(table.find("memory MiB"), std::string::npos);
}

TEST_F(Planner, BadPlansThrow) {
  const Graph model = models::build_gpt(small_gpt());  // batch 8
  PlanConfig p = data_plan(3);  // 3 does not divide 4 ranks
  expect_status(Status::kInvalidPlan, [&] { (void)predict(model, cluster(4), p); });
  p = data_plan(4);
  p.pipeline.micro_batches = 3;  // does not divide the 2 rows of a replica
  expect_status(Status::kInvalidPlan, [&] { (void)predict(model, cluster(4), p); });
  p = data_plan(1);
  p.pipeline.stages = 4;
  p.pipeline.chunks = 4;  // 16 stages, the GPT has fewer cut points
  expect_status(Status::kInvalidPlan, [&] { (void)predict(model, cluster(4), p); });
}

TEST_F(Planner, DescribesAPlan) {
  PlanPrediction p;
  p.plan = data_plan(2, 1);
  p.plan.pipeline.stages = 2;
  p.plan.pipeline.micro_batches = 4;
  EXPECT_EQ(p.describe(), "data 2 x pipe 2 (1f1b, 4 micro) x grid 1x1x1, zero 1");
}

TEST_F(Planner, ClusterRatesPriceNodes) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec slow = cluster(4), fast = cluster(4);
  slow.flops_per_second = 1e12, slow.bytes_per_second = 1e11;
  fast.flops_per_second = 1e14, fast.bytes_per_second = 1e13;
  const double a = predict(model, slow, data_plan(4)).compute_seconds;
  const double b = predict(model, fast, data_plan(4)).compute_seconds;
  EXPECT_NEAR(a / b, 100.0, 1e-6);
}

// Z's weight gathers hide behind the pair's compute only where a rank has a core to spare for the
// transport: with 2 cores for 2 ranks of 1 thread each they are exposed whole. Here the links are
// fast beside the pairs' compute, so with a spare core the gathers are hidden entirely and the
// difference is every pair's gathers: 2 all-gathers of half the pair's weights and 1
// reduce-scatter of them, over Z = 2.
TEST_F(Planner, TensorZGathersAreExposedWithoutASpareCore) {
  const models::GptConfig config = small_gpt();
  const Graph model = models::build_gpt(config);
  PlanConfig plan = data_plan(1);
  plan.tensor.z = 2;
  ClusterSpec spare = cluster(2), none = cluster(2);
  spare.cores_per_node = 4;  // 2 ranks on the node: 2 cores each
  none.cores_per_node = 2;   // 1 core each: no room for the transport
  const PlanPrediction a = predict(model, spare, plan), b = predict(model, none, plan);
  // The ring table's times over 2 ranks at 10 GB/s, 5 us: all_gather of a block b: 5 us + b / L;
  // reduce_scatter of b: 5 us + b / (2 L). A layer's pairs: attention (qkv [C, 3C], proj [C, C])
  // and the MLP (fc [C, 4C], proj [4C, C]), 12 C^2 floats.
  const double L = 10e9, C = static_cast<double>(config.width);
  const double weights = static_cast<double>(config.layers) * 12 * C * C * 4;
  const double pairs = 2.0 * static_cast<double>(config.layers);
  const double gathers = pairs * 3 * 5e-6 + 2 * (weights / 2) / L + weights / (2 * L);
  EXPECT_NEAR(b.exposed_comm_seconds - a.exposed_comm_seconds, gathers, 1e-9)
      << a.exposed_comm_seconds << " vs " << b.exposed_comm_seconds;
  EXPECT_EQ(a.compute_seconds, b.compute_seconds);  // 2 ranks on 2 or 4 cores: no turns taken
  // The probe's figure wins over the cluster's cores: 2 cores a rank measured, spare again.
  ClusterSpec probed = none;
  probed.comm.cores_per_rank = 2;
  EXPECT_EQ(predict(model, probed, plan).exposed_comm_seconds, a.exposed_comm_seconds);
  probed.comm.cores_per_rank = 1;
  EXPECT_EQ(predict(model, probed, plan).exposed_comm_seconds, b.exposed_comm_seconds);
  // Without Z there is nothing to gather: the cores change nothing.
  EXPECT_EQ(predict(model, spare, data_plan(2)).step_seconds(), predict(model, none, data_plan(2)).step_seconds());
}

// The tensor axes' collectives, which the step waits for, are priced from the entries measured
// with the caller waiting (CommCost::caller_waits) where the table has them; the data axis's
// overlapped reductions from the others.
TEST_F(Planner, TensorAxesArePricedAsACallerWaits) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec base = cluster(2), waited = cluster(2);
  for (const CommCost& c : base.comm.entries)
    if (!c.across_nodes && c.op != CommOp::kPointToPoint) {
      CommCost w = c;
      w.caller_waits = true;
      w.latency_seconds = c.latency_seconds + 1e-3;  // a millisecond more a collective
      waited.comm.entries.push_back(w);
    }
  PlanConfig tensor = data_plan(1);
  tensor.tensor.y = 2;
  const PlanPrediction a = predict(model, base, tensor), b = predict(model, waited, tensor);
  EXPECT_GT(b.exposed_comm_seconds, a.exposed_comm_seconds + 8 * 1e-3) << a.describe();  // 4 layers, 2 a layer at least
  EXPECT_EQ(a.compute_seconds, b.compute_seconds);
  EXPECT_EQ(predict(model, base, data_plan(2)).step_seconds(), predict(model, waited, data_plan(2)).step_seconds());
}

// Where ranks take turns on cores (a measured compute stretch above 1), a pipeline's stages are
// stretched by their busy share of the step only (their core-mates idle through bubbles and
// waits); a layout without stages by the whole stretch.
TEST_F(Planner, PipelineStagesStretchByTheirBusyShare) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec alone = cluster(2), shared = cluster(2);
  alone.comm.compute_stretch = 1.0;
  shared.comm.compute_stretch = 2.0;
  const PlanConfig data = data_plan(2);
  EXPECT_NEAR(predict(model, shared, data).compute_seconds, 2 * predict(model, alone, data).compute_seconds, 1e-12);
  PlanConfig pipe = data_plan(1);
  pipe.pipeline.stages = 2;
  pipe.pipeline.micro_batches = 2;
  pipe.pipeline.schedule = PipelineSchedule::kOneFOneB;
  const PlanPrediction a = predict(model, alone, pipe), b = predict(model, shared, pipe);
  const double ratio = b.compute_seconds / a.compute_seconds;
  EXPECT_GT(ratio, 1.2) << b.describe();  // stretched, by its busy share: 2 micro-batches over 2 stages leave a bubble
  EXPECT_LT(ratio, 1.95) << b.describe();
}

// Without a core to spare for the transport, each collective of the tensor axes a caller waits
// for takes the probe's measured processor time of a message from its rank, in compute (handing
// it to the progress thread, being woken when it ends); with a spare core, or unmeasured, none.
// The small GPT's 4 layers hold 2 pairs each (attention, MLP), each pair's collectives run forward
// and backward: Y 2 all-reduces once a pass, under Megatron's sequence parallelism a
// reduce-scatter and an all-gather; X 2 an all-reduce and an all-gather. The vocabulary's lookup
// and loss add one each over Y.
TEST_F(Planner, TensorCollectivesTakeComputeWithoutASpareCore) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec spare = cluster(2), none = cluster(2), unmeasured = cluster(2);
  spare.cores_per_node = 4;
  none.cores_per_node = 2;
  unmeasured.cores_per_node = 2;
  for (ClusterSpec* c : {&spare, &none}) c->comm.message_compute_seconds = 1e-4;
  struct Case {
    int x, y;
    bool sp;
    double collectives;  // a step's, one micro-batch
  };
  for (const Case& k : {Case{1, 2, false, 8 * 2 + 2}, Case{1, 2, true, 8 * 4 + 2}, Case{2, 1, false, 8 * 4}}) {
    PlanConfig plan = data_plan(1);
    plan.tensor.x = k.x;
    plan.tensor.y = k.y;
    if (k.sp) plan.sequence_parallel = SequenceParallel::kMegatron;
    const PlanPrediction a = predict(model, spare, plan), b = predict(model, none, plan),
                         u = predict(model, unmeasured, plan);
    EXPECT_EQ(u.compute_seconds, a.compute_seconds) << u.describe();
    EXPECT_NEAR(b.compute_seconds - a.compute_seconds, k.collectives * 1e-4, 1e-9) << b.describe();
  }
  // Data parallelism's all-reduce overlaps the backward: no such charge.
  EXPECT_EQ(predict(model, spare, data_plan(2)).compute_seconds, predict(model, none, data_plan(2)).compute_seconds);
}

// Without a core to spare for the transport, each message over a pipeline cut takes the probe's
// measured processor time (CommTable::message_compute) from the stage that sends or receives it, in
// its compute: a stage's forward receives over the cut into it and sends over the cut out of it,
// its backward the reverse. With a spare core, or where the probe measured nothing, it costs no
// compute. The cost is a fixed part plus a part per byte.
TEST_F(Planner, PipelineMessagesTakeComputeWithoutASpareCore) {
  CommTable t;
  t.message_compute_seconds = 1e-5;
  t.message_compute_seconds_per_byte = 1e-9;
  EXPECT_NEAR(t.message_compute(1000), 1e-5 + 1e-6, 1e-15);
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec spare = cluster(2), none = cluster(2), unmeasured = cluster(2);
  spare.cores_per_node = 4;  // 2 ranks: 2 cores each
  none.cores_per_node = 2;   // 1 core each: the transport progresses on the ranks' cores
  unmeasured.cores_per_node = 2;
  for (ClusterSpec* c : {&spare, &none}) c->comm.message_compute_seconds = 1e-4;  // per message, any size
  struct Case {
    int chunks, micro;
    double messages;  // per micro-batch on the busier rank: both ways over its stages' cuts
  };
  // 1F1B over 2 stages: each rank's stage has one cut, a message forward and one backward. Two
  // chunks: virtual stages 0-3, rank 0 holding 0 (one cut) and 2 (two cuts), both ways.
  for (const Case& k : {Case{1, 4, 2}, Case{2, 4, 6}}) {
    PlanConfig plan = data_plan(1);
    plan.pipeline.stages = 2;
    plan.pipeline.chunks = k.chunks;
    plan.pipeline.micro_batches = k.micro;
    plan.pipeline.schedule = k.chunks > 1 ? PipelineSchedule::kInterleaved : PipelineSchedule::kOneFOneB;
    const PlanPrediction a = predict(model, spare, plan), b = predict(model, none, plan),
                         u = predict(model, unmeasured, plan);
    EXPECT_EQ(u.compute_seconds, a.compute_seconds) << u.describe();
    EXPECT_NEAR(b.compute_seconds - a.compute_seconds, k.micro * k.messages * 1e-4, 1e-9) << b.describe();
    EXPECT_GE(b.step_seconds() - a.step_seconds(), k.micro * k.messages * 1e-4 - 1e-9) << b.describe();
  }
  // Nothing crosses a cut without stages.
  PlanConfig data = data_plan(2);
  data.pipeline.micro_batches = 2;
  EXPECT_EQ(predict(model, none, data).compute_seconds, predict(model, unmeasured, data).compute_seconds);
}

// Under micro-batches or pipeline stages every micro-batch's forward and backward of each chunk is
// an executor run of its own: 2 M V runs a step, each at the cluster's (or the calibration's)
// cost of a run; a step without either is one run, already in the whole-graph calibration. The
// gradients' passes are priced below.
TEST_F(Planner, ExecutorRunsCostPerMicroBatchAndChunk) {
  const Graph model = models::build_gpt(small_gpt());
  ClusterSpec free_runs = cluster(4), costly = cluster(4);
  free_runs.run_cost = RunCost{};
  costly.run_cost = RunCost{1e-3, 0};
  struct Case {
    int data, stages, chunks, micro;
    double runs;  // 2 M V, or 0 for one run of the whole step
  };
  for (const Case& c : {Case{4, 1, 1, 1, 0}, Case{4, 1, 1, 2, 4}, Case{2, 2, 1, 4, 8}, Case{2, 2, 1, 2, 4},
                        Case{1, 4, 1, 8, 16}, Case{2, 2, 2, 4, 16}}) {
    PlanConfig plan = data_plan(c.data);
    plan.pipeline.stages = c.stages;
    plan.pipeline.chunks = c.chunks;
    plan.pipeline.micro_batches = c.micro;
    plan.pipeline.schedule = c.chunks > 1 ? PipelineSchedule::kInterleaved : PipelineSchedule::kOneFOneB;
    const PlanPrediction a = predict(model, free_runs, plan), b = predict(model, costly, plan);
    EXPECT_EQ(a.run_overhead_seconds, 0.0) << b.describe();
    EXPECT_NEAR(b.run_overhead_seconds, c.runs * 1e-3, 1e-12) << b.describe();
    EXPECT_NEAR(b.compute_seconds - a.compute_seconds, c.runs * 1e-3, 1e-9) << b.describe();
    // A stage's micro-batch takes the runs' time too: the bubble grows with them.
    if (c.stages > 1) {
      EXPECT_GT(b.bubble_seconds, a.bubble_seconds) << b.describe();
    }
  }
  // Taking turns on the cores stretches a run like the nodes.
  ClusterSpec shared = costly;
  shared.comm.compute_stretch = 2;
  PlanConfig two = data_plan(4);
  two.pipeline.micro_batches = 2;
  EXPECT_NEAR(predict(model, shared, two).run_overhead_seconds, 2 * 4e-3, 1e-12);
  // The printed table shows the runs' part of compute.
  EXPECT_NE(format_plan_table({predict(model, costly, two)}).find("of it runs"), std::string::npos);
}

// Each micro-batch's gradients are accumulated into the trainer's own: a pass over the parameters
// a rank holds, M a step — the whole model's on a data rank, about half of it on each of 2 stages
// (the tied embedding on both), the pairs' Z blocks under tensor_z 2.
TEST_F(Planner, GradientPassesCostPerMicroBatchAndTheRanksParameters) {
  const models::GptConfig config = small_gpt();
  const Graph model = models::build_gpt(config);
  ClusterSpec c = cluster(4);
  c.run_cost = RunCost{0, 1e-9};
  const double whole = static_cast<double>(models::gpt_parameter_count(config)) * 4 * 1e-9;
  PlanConfig data = data_plan(4);
  EXPECT_EQ(predict(model, c, data).run_overhead_seconds, 0.0);  // one run, no accumulation
  data.pipeline.micro_batches = 2;
  EXPECT_NEAR(predict(model, c, data).run_overhead_seconds, 2 * whole, 1e-12);
  PlanConfig stages = data_plan(2), z = data_plan(2);
  stages.pipeline.stages = 2;
  z.tensor.z = 2;
  for (PlanConfig& plan : {std::ref(stages), std::ref(z)}) {
    plan.pipeline.micro_batches = 2;
    const PlanPrediction p = predict(model, c, plan);
    EXPECT_LT(p.run_overhead_seconds, 2 * whole * 0.75) << p.describe();
    EXPECT_GT(p.run_overhead_seconds, 2 * whole * 0.5) << p.describe();
  }
}

// The optimizer's update runs once a step after the last backward, over the parameters a rank
// steps: the whole model on a data rank whatever the micro-batches, its shard under ZeRO 1,
// about half on each of 2 stages; shown in the table.
TEST_F(Planner, OptimizerUpdateCostsOnceAStepOverTheRanksParameters) {
  const models::GptConfig config = small_gpt();
  const Graph model = models::build_gpt(config);
  ClusterSpec c = cluster(4), free_update = cluster(4);
  c.run_cost = RunCost{0, 0, 1e-9};
  free_update.run_cost = RunCost{0, 0, 0};
  const double whole = static_cast<double>(models::gpt_parameter_count(config)) * 4 * 1e-9;
  PlanConfig data = data_plan(4);
  for (int micro : {1, 2}) {
    data.pipeline.micro_batches = micro;
    const PlanPrediction a = predict(model, c, data), b = predict(model, free_update, data);
    EXPECT_NEAR(a.update_seconds, whole, 1e-12) << a.describe();
    EXPECT_NEAR(a.compute_seconds - b.compute_seconds, whole, 1e-12) << a.describe();
    EXPECT_EQ(b.update_seconds, 0.0);
  }
  data.pipeline.micro_batches = 1;
  data.zero_stage = 1;
  EXPECT_NEAR(predict(model, c, data).update_seconds, whole / 4, 1e-12);
  PlanConfig stages = data_plan(2);
  stages.pipeline.stages = 2;
  stages.pipeline.micro_batches = 2;
  const PlanPrediction p = predict(model, c, stages);
  EXPECT_LT(p.update_seconds, whole * 0.75) << p.describe();
  EXPECT_GT(p.update_seconds, whole * 0.5) << p.describe();
  EXPECT_NE(format_plan_table({p}).find("of it update"), std::string::npos);
}

}  // namespace
}  // namespace cohort::parallel
