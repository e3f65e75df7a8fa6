// cohort_plan_* and the data-parallel trainer entry points in one process (a world of one):
// every error path with its status and message, and a CO2 trainer that steps, reports its
// statistics and round-trips its outer state through a checkpoint. Multi-rank behaviour is
// tested by tests/multirank/dp_rank.cpp under cohort-run.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/capi_expect.h"

namespace {

class CapiParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cohort_comm_create_from_env(nullptr, &comm_), COHORT_OK) << cohort_last_error();
    cohort_model_mlp_options m = cohort_model_mlp_options_default();
    int64_t hidden[1] = {8};
    m.batch = 4;
    m.in_features = 6;
    m.hidden = hidden;
    m.num_hidden = 1;
    m.classes = 3;
    ASSERT_EQ(cohort_graph_create_mlp(&m, &graph_), COHORT_OK) << cohort_last_error();
    cohort_optimizer_options o = cohort_optimizer_options_default();
    ASSERT_EQ(cohort_optimizer_create(&o, &optimizer_), COHORT_OK) << cohort_last_error();
  }
  void TearDown() override {
    EXPECT_EQ(cohort_optimizer_destroy(optimizer_), COHORT_OK);
    EXPECT_EQ(cohort_graph_destroy(graph_), COHORT_OK);
    EXPECT_EQ(cohort_comm_destroy(comm_), COHORT_OK);
  }
  float step(cohort_trainer* t, int k) {
    std::vector<float> x(4 * 6);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(k)) % 11) / 11.0f;
    int32_t y[4] = {0, 1, 2, static_cast<int32_t>(k % 3)};
    int64_t xs[2] = {4, 6}, ys[1] = {4};
    cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x.data(), x.size() * sizeof(float)},
                               {"y", COHORT_I32, 1, ys, y, sizeof y}};
    float loss = 0;
    EXPECT_EQ(cohort_trainer_step(t, in, 2, &loss), COHORT_OK) << cohort_last_error();
    return loss;
  }
  // A data-parallel trainer of the fixture's graph over comm_ under a plan of these options
  // (the plan destroyed again: the trainer keeps its copy); opt nullptr: the fixture's optimizer.
  cohort_trainer* parallel_trainer(const cohort_plan_options& o, cohort_optimizer* opt = nullptr) {
    cohort_plan* plan = nullptr;
    EXPECT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
    cohort_trainer* t = nullptr;
    EXPECT_EQ(cohort_trainer_create_parallel(graph_, opt ? opt : optimizer_, plan, comm_, nullptr, &t), COHORT_OK)
        << cohort_last_error();
    EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
    return t;
  }
  std::vector<float> weight(cohort_trainer* t) {
    std::vector<float> w(8 * 6);
    int64_t shape[2] = {8, 6};
    cohort_tensor_ref ref = {"fc1.weight", COHORT_F32, 2, shape, w.data(), w.size() * sizeof(float)};
    EXPECT_EQ(cohort_trainer_get_parameter(t, &ref), COHORT_OK) << cohort_last_error();
    return w;
  }
  cohort_comm* comm_ = nullptr;
  cohort_graph* graph_ = nullptr;
  cohort_optimizer* optimizer_ = nullptr;
};

TEST_F(CapiParallel, PlanErrorPaths) {
  cohort_plan* plan = reinterpret_cast<cohort_plan*>(0x1);
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_STATUS(cohort_plan_create(nullptr, &plan), COHORT_ERR_INVALID_ARGUMENT, "cohort_plan_create: options is NULL");
  EXPECT_STATUS(cohort_plan_create(&o, nullptr), COHORT_ERR_INVALID_ARGUMENT, "plan_out is NULL");
  cohort_plan_options small = o;
  small.size = 8;
  EXPECT_STATUS(cohort_plan_create(&small, &plan), COHORT_ERR_INVALID_ARGUMENT, "options");
  o.tau = 0;
  o.mode = COHORT_SYNC_CO2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "cohort_plan_create: plan: tau = 0 must be >= 1");
  o = cohort_plan_options_default();
  o.mode = static_cast<cohort_sync_mode>(9);
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "unknown sync mode 9");
  o = cohort_plan_options_default();
  o.outer_momentum = -0.5;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "outer momentum = -0.5");
  o = cohort_plan_options_default();
  o.outer_lr = -1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "outer lr = -1 must be >= 0");
  o = cohort_plan_options_default();
  o.clip_threshold = -1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "clip threshold = -1");
  o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_CO2;
  o.tau = 2;
  o.zero_stage = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_UNSUPPORTED, "ZeRO stage 2 needs the sync (DDP) mode");
  o.zero_stage = 7;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "unknown ZeRO stage 7");
  o = cohort_plan_options_default();
  o.bucket_bytes = 0;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "bucket_bytes = 0 must be > 0");
  o = cohort_plan_options_default();
  o.inner_noise_scaling = 1;  // DDP: nothing steps locally
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "inner_noise_scaling applies to local steps");
  // A caller built before the field existed passes a smaller size: the field is not read.
  o.size = offsetof(cohort_plan_options, inner_noise_scaling);
  cohort_plan* older = nullptr;
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  // The tensor grid (appended fields): each degree named with its number.
  o = cohort_plan_options_default();
  EXPECT_EQ(o.tensor_x, 1);
  EXPECT_EQ(o.tensor_y, 1);
  EXPECT_EQ(o.tensor_z, 1);
  EXPECT_EQ(o.tensor_overlap_off, 0);
  o.tensor_y = 0;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: tensor_y = 0 must be in 1..65536");
  o.tensor_y = 2;
  o.tensor_x = 0;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: tensor_x = 0 must be in 1..65536");
  o.tensor_x = 2;
  o.tensor_z = 2;  // AxoNN's 3D grid: fitted to the world and the model when a trainer is made
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  for (int32_t stage : {2, 3}) {  // ZeRO shards over the data axis, the norm summed over the tensor axes
    o.zero_stage = stage;
    EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
    EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  }
  o = cohort_plan_options_default();
  o.tensor_y = 2;
  o.sequence_parallel = 3;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: sequence_parallel = 3 (0 none, 1 Megatron's, 2 all-to-all)");
  o.sequence_parallel = COHORT_SEQUENCE_PARALLEL_ALL_TO_ALL;
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.tensor_y = 1;
  o.sequence_parallel = COHORT_SEQUENCE_PARALLEL_MEGATRON;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: sequence parallelism splits the tokens over tensor_y, which is 1");
  o.size = offsetof(cohort_plan_options, sequence_parallel);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  // A caller built before the tensor fields passes a smaller size: they are not read (0 would
  // be refused).
  o = cohort_plan_options_default();
  o.tensor_y = 0;
  o.size = offsetof(cohort_plan_options, tensor_x);
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  // Pipeline parallelism (appended fields): defaults are no pipeline, 1F1B; 0 means the default;
  // each bad value named with its number.
  o = cohort_plan_options_default();
  EXPECT_EQ(o.pipeline_stages, 1);
  EXPECT_EQ(o.pipeline_chunks, 1);
  EXPECT_EQ(o.micro_batches, 1);
  EXPECT_EQ(o.pipeline_schedule, COHORT_PIPELINE_1F1B);
  EXPECT_EQ(o.pipeline_cuts, nullptr);
  o.pipeline_stages = o.pipeline_chunks = o.micro_batches = 0;
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.pipeline_stages = -1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "cohort_plan_create: plan: pipeline_stages = -1 must be in [1, 65536]");
  o.pipeline_stages = 2;
  o.pipeline_chunks = -3;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline_chunks = -3 must be in [1, 1024]");
  o.pipeline_chunks = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: pipeline_chunks = 2 needs the interleaved schedule (1f1b runs one stage per rank)");
  o.pipeline_schedule = COHORT_PIPELINE_INTERLEAVED;
  o.micro_batches = 3;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: the interleaved schedule needs micro_batches (3) to be a multiple of pipeline_stages (2)");
  o.micro_batches = 4;
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.micro_batches = -4;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: micro_batches = -4 must be >= 1");
  o.micro_batches = 4;
  o.pipeline_schedule = 7;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: unknown pipeline_schedule 7");
  o.pipeline_schedule = COHORT_PIPELINE_GPIPE;
  o.pipeline_chunks = 1;
  o.pipeline_cuts = "h.1.ln_1,h.2.ln_1";  // two cuts for two stages
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline_cuts names 2 node(s); 2 stages need 1");
  o.pipeline_stages = 3;
  o.pipeline_cuts = "h.1.ln_1,";
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline_cuts 'h.1.ln_1,' has an empty name (cut 2)");
  o.pipeline_cuts = "h.1.ln_1,h.2.ln_1";  // copied: names checked against the graph by create_parallel
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.pipeline_cuts = "";  // balanced by the estimator
  o.zero_stage = 3;  // with pipeline stages too (zero.cpp gathers each bucket per schedule slot)
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.size = offsetof(cohort_plan_options, pipeline_stages);  // a caller built before the fields: not read
  o.pipeline_schedule = 9;
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_CO2;
  o.tau = 4;
  o.overlap_steps = 5;  // merged after the next round end: no
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: overlap = 5 must be in [1, tau = 4]");
  o.overlap_steps = -2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: overlap = -2");
  o.overlap_steps = -1;  // auto
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.preset = COHORT_PRESET_DILOCO;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: overlap auto applies to co2");
  o.preset = COHORT_PRESET_CO2;
  o.overlap_steps = 0;
  o.outer_bits = 6;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: outer bits = 6");
  o.size = offsetof(cohort_plan_options, outer_bits);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.outer_bits = 0;
  o.overlap_steps = -1;
  o.size = offsetof(cohort_plan_options, overlap_steps);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o = cohort_plan_options_default();
  o.preset = static_cast<cohort_plan_preset>(42);
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_ARGUMENT, "options->preset 42");
  EXPECT_EQ(plan, reinterpret_cast<cohort_plan*>(0x1));  // outputs written only on success
  EXPECT_EQ(cohort_plan_destroy(nullptr), COHORT_OK);
}

TEST_F(CapiParallel, TrainerErrorPaths) {
  cohort_plan_options o = cohort_plan_options_default();
  o.data_parallel = 3;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "cohort_trainer_create_parallel: plan: data-parallel degree 3 does not divide the world size 1");
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, nullptr, comm_, nullptr, &t),
                COHORT_ERR_INVALID_HANDLE, "plan is NULL");
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, nullptr, nullptr, &t),
                COHORT_ERR_INVALID_HANDLE, "comm is NULL");
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "trainer_out is NULL");
  EXPECT_EQ(t, nullptr);
  cohort_parallel_stats s{};
  s.size = sizeof s;
  EXPECT_STATUS(cohort_trainer_get_parallel_stats(nullptr, &s), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_get_parallel_stats: trainer is NULL");
  cohort_trainer* plain = nullptr;
  ASSERT_EQ(cohort_trainer_create(graph_, optimizer_, nullptr, &plain), COHORT_OK);
  EXPECT_STATUS(cohort_trainer_get_parallel_stats(plain, &s), COHORT_ERR_INVALID_STATE, "not data-parallel");
  EXPECT_STATUS(cohort_trainer_save_parallel_checkpoint(plain, "/tmp/x"), COHORT_ERR_INVALID_STATE,
                "not data-parallel");
  EXPECT_EQ(cohort_trainer_destroy(plain), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// A tensor grid that does not fit the world or the graph: INVALID_PLAN naming the field, the
// layer and the numbers, before any collective (a world of one here; multi-rank training under
// a tensor grid is tests/multirank/tp_rank.cpp).
TEST_F(CapiParallel, TensorGridThatDoesNotFitIsAnInvalidPlan) {
  cohort_plan_options o = cohort_plan_options_default();
  o.tensor_y = 2;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "cohort_trainer_create_parallel: plan: the tensor grid tensor_x 1 x tensor_y 2 x tensor_z 1 = 2 ranks "
                "does not divide the world size 1");
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// Pipeline fields that do not fit the world or the graph: INVALID_PLAN naming the field and the
// numbers, before any collective. (Stages on several ranks train in tests/cli/parallel_pipeline.sh
// and the core's pipeline_test; a world of one has room for micro-batches only.)
TEST_F(CapiParallel, PipelineThatDoesNotFitIsAnInvalidPlan) {
  cohort_plan_options o = cohort_plan_options_default();
  o.pipeline_stages = 2;
  o.micro_batches = 2;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "cohort_trainer_create_parallel: plan: pipeline_stages 2 x the tensor grid tensor_x 1 x tensor_y 1 x "
                "tensor_z 1 = 2 ranks does not divide the world size 1");
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  o = cohort_plan_options_default();
  o.micro_batches = 3;  // the MLP's batch is 4
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "plan: micro_batches = 3 does not divide the batch 4");
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// The fence fields, pipeline keep and the link probe on one rank: each bad value named, a fence
// plan refused by cohort_plan_choose and, on one rank, by the trainer (a pipeline needs two), the
// probe's matrix 1 x 1 and its argument checks; a caller built before the fields is not read.
TEST_F(CapiParallel, FenceFieldsAndTheLinkProbe) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.fence, 0);
  EXPECT_EQ(o.fence_compression_off, 0);
  EXPECT_EQ(o.fence_min_keep, 0.0);
  EXPECT_EQ(o.pipeline_keep, nullptr);
  cohort_plan* plan = nullptr;
  o.pipeline_stages = 3;
  o.pipeline_keep = "1,1.5";
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline keep of cut 1 is 1.5, expected (0, 1]");
  o.pipeline_keep = "0.5";
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: pipeline keep gives 1 ratio(s); 3 stages have 2 cut(s)");
  o.pipeline_keep = "0.5,x";
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline keep '0.5,x': 'x' is not a number");
  o.pipeline_keep = "0.5,";
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: pipeline keep '0.5,' has an empty share (cut 2)");
  o.pipeline_keep = "0.5,0.25";
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  o = cohort_plan_options_default();
  o.fence = 1;
  o.tensor_y = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_UNSUPPORTED, "plan: fence makes the whole world one pipeline");
  o.tensor_y = 1;
  o.fence_min_keep = 1.5;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: fence_min_keep = 1.5 must be in [0, 1]");
  o.fence_min_keep = 0;
  char report[64];
  cohort_plan_options chosen;
  EXPECT_STATUS(cohort_plan_choose(&o, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, nullptr),
                COHORT_ERR_INVALID_PLAN, "plan: fence and automatic both choose the layout");
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "plan: fence needs at least 2 ranks, the world has 1");
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  o.size = offsetof(cohort_plan_options, fence);  // a caller built before the fields: not read
  o.fence_min_keep = 7;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  double bw[1] = {-1}, lat[1] = {-1};
  size_t needed = 0;
  EXPECT_EQ(cohort_comm_probe_links(comm_, bw, lat, 1, report, sizeof report, &needed), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(bw[0], 0.0);
  EXPECT_EQ(lat[0], 0.0);
  EXPECT_GT(needed, 1u);
  EXPECT_STATUS(cohort_comm_probe_links(comm_, bw, nullptr, 0, nullptr, 0, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "cells is 0, a matrix of 1 ranks needs 1");
  EXPECT_STATUS(cohort_comm_probe_links(comm_, nullptr, nullptr, 0, nullptr, 8, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "report is NULL but report_size is 8");
  EXPECT_STATUS(cohort_comm_probe_links(nullptr, nullptr, nullptr, 0, nullptr, 0, nullptr), COHORT_ERR_INVALID_HANDLE,
                "comm is NULL");
}

// Micro-batches on one rank (gradient accumulation): the same updates as one batch within fp32
// rounding, and the trainer's statistics report them; the pipeline fields of the stats are
// written only when the caller's size covers them.
TEST_F(CapiParallel, MicroBatchesTrainAndReportStats) {
  auto make = [&](int32_t micro_batches, int32_t schedule) {
    cohort_plan_options o = cohort_plan_options_default();
    o.micro_batches = micro_batches;
    o.pipeline_schedule = schedule;
    return parallel_trainer(o);
  };
  cohort_trainer* whole = make(1, COHORT_PIPELINE_1F1B);
  cohort_trainer* one_f_one_b = make(2, COHORT_PIPELINE_1F1B);
  cohort_trainer* gpipe = make(4, COHORT_PIPELINE_GPIPE);
  ASSERT_TRUE(whole && one_f_one_b && gpipe);
  for (int k = 0; k < 3; ++k) {
    const float a = step(whole, k), b = step(one_f_one_b, k), c = step(gpipe, k);
    EXPECT_TRUE(std::isfinite(a));
    EXPECT_NEAR(b, a, 1e-5f);
    EXPECT_NEAR(c, a, 1e-5f);
  }
  std::vector<float> w = weight(whole), w2 = weight(one_f_one_b), w4 = weight(gpipe);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(w2[i], w[i], 1e-5f) << i;
    EXPECT_NEAR(w4[i], w[i], 1e-5f) << i;
  }
  cohort_trainer_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_stats(gpipe, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.micro_batches, 4);
  EXPECT_GT(s.pipeline_busy_seconds, 0.0);
  EXPECT_EQ(s.pipeline_bubble_fraction, 0.0);  // one stage: no neighbour to wait for
  ASSERT_EQ(cohort_trainer_get_stats(whole, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.micro_batches, 1);
  cohort_trainer_stats old{};
  old.size = offsetof(cohort_trainer_stats, micro_batches);  // a caller built before the fields
  old.micro_batches = -7;
  ASSERT_EQ(cohort_trainer_get_stats(gpipe, &old), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(old.micro_batches, -7);
  EXPECT_EQ(old.step, 3);
  // No pipeline stages: the description is empty (its size, 1, asked with a NULL buffer first).
  size_t needed = 0;
  EXPECT_STATUS(cohort_trainer_pipeline_stages(gpipe, nullptr, 0, &needed), COHORT_ERR_INVALID_ARGUMENT,
                "buf holds 0 bytes but the description needs 1");
  EXPECT_EQ(needed, 1u);
  char text[4] = {'x', 'x', 'x', 'x'};
  EXPECT_EQ(cohort_trainer_pipeline_stages(gpipe, text, sizeof text, nullptr), COHORT_OK) << cohort_last_error();
  EXPECT_STREQ(text, "");
  cohort_trainer* plain = nullptr;
  ASSERT_EQ(cohort_trainer_create(graph_, optimizer_, nullptr, &plain), COHORT_OK);
  EXPECT_STATUS(cohort_trainer_pipeline_stages(plain, text, sizeof text, nullptr), COHORT_ERR_INVALID_STATE,
                "cohort_trainer_pipeline_stages: the trainer is not data-parallel");
  EXPECT_EQ(cohort_trainer_destroy(plain), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(gpipe), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(one_f_one_b), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(whole), COHORT_OK);
}

// Activation checkpointing (a plan field appended after tensor_overlap_off): refused for a model
// without transformer blocks, naming why; on a gpt, the same losses bit for bit as without and
// a lower peak of activation memory; a caller of the older size does not turn it on.
TEST_F(CapiParallel, ActivationCheckpointingRecomputesGptBlocks) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.activation_checkpointing, 0);
  o.activation_checkpointing = 1;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "activation checkpointing: the model has no transformer blocks to recompute");
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);

  cohort_model_gpt_options g = cohort_model_gpt_options_default();
  g.batch = 2;
  g.context = 16;
  g.vocab = 32;
  g.layers = 3;
  g.width = 32;
  g.heads = 2;
  g.dropout = 0.1;
  cohort_graph* gpt = nullptr;
  ASSERT_EQ(cohort_graph_create_gpt(&g, &gpt), COHORT_OK) << cohort_last_error();
  std::vector<int32_t> tokens(2 * 16), targets(2 * 16);
  int64_t shape[2] = {2, 16};
  struct Run {
    std::vector<float> losses;
    int64_t peak = 0;
  };
  auto train = [&](int32_t checkpointing, size_t size) {
    cohort_plan_options po = cohort_plan_options_default();
    po.activation_checkpointing = checkpointing;
    po.size = size;
    cohort_plan* p = nullptr;
    EXPECT_EQ(cohort_plan_create(&po, &p), COHORT_OK) << cohort_last_error();
    cohort_trainer* tr = nullptr;
    EXPECT_EQ(cohort_trainer_create_parallel(gpt, optimizer_, p, comm_, nullptr, &tr), COHORT_OK) << cohort_last_error();
    cohort_plan_destroy(p);
    Run r;
    for (int k = 0; k < 3 && tr; ++k) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<int32_t>((i * 5 + static_cast<size_t>(k)) % 32);
        targets[i] = static_cast<int32_t>((i * 3 + 1) % 32);
      }
      cohort_tensor_ref in[2] = {{"tokens", COHORT_I32, 2, shape, tokens.data(), tokens.size() * sizeof(int32_t)},
                                 {"targets", COHORT_I32, 2, shape, targets.data(), targets.size() * sizeof(int32_t)}};
      float loss = 0;
      EXPECT_EQ(cohort_trainer_step(tr, in, 2, &loss), COHORT_OK) << cohort_last_error();
      r.losses.push_back(loss);
    }
    cohort_trainer_stats st{};
    st.size = sizeof st;
    EXPECT_EQ(cohort_trainer_get_stats(tr, &st), COHORT_OK);
    r.peak = st.peak_activation_bytes;
    cohort_trainer_destroy(tr);
    return r;
  };
  const Run off = train(0, sizeof(cohort_plan_options));
  const Run on = train(1, sizeof(cohort_plan_options));
  const Run older = train(1, offsetof(cohort_plan_options, activation_checkpointing));
  ASSERT_EQ(off.losses.size(), 3u);
  EXPECT_EQ(on.losses, off.losses);  // the same updates from the same gradients, dropout included
  EXPECT_LT(on.peak, off.peak);
  EXPECT_EQ(older.peak, off.peak);  // the field was not read
  EXPECT_EQ(cohort_graph_destroy(gpt), COHORT_OK);
}

TEST_F(CapiParallel, Co2TrainerStepsReportsAndResumes) {
  cohort_plan_options o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_CO2;
  o.tau = 2;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer *a = nullptr, *b = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &a), COHORT_OK)
      << cohort_last_error();
  for (int k = 0; k < 5; ++k) step(a, k);  // stop mid-round with round 1 in flight
  std::string path = ::testing::TempDir() + "cohort_parallel_capi.ckpt";
  ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(a, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 5; k < 9; ++k) step(a, k);
  cohort_parallel_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.rounds, 4);
  EXPECT_GE(s.hidden_fraction, 0.0);
  EXPECT_LE(s.hidden_fraction, 1.0);
  EXPECT_GT(s.compute_seconds, 0.0);

  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &b), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_parallel_checkpoint(b, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 5; k < 9; ++k) step(b, k);
  EXPECT_EQ(weight(a), weight(b));  // bit for bit
  // The plain checkpoint calls carry the outer state of a data-parallel trainer too, so a user
  // who never heard of the parallel variants loses nothing.
  std::string plain_path = ::testing::TempDir() + "cohort_parallel_plain.ckpt";
  ASSERT_EQ(cohort_trainer_save_checkpoint(a, plain_path.c_str()), COHORT_OK);
  cohort_trainer* c = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &c), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_checkpoint(c, plain_path.c_str()), COHORT_OK) << cohort_last_error();
  step(a, 9);
  step(c, 9);
  EXPECT_EQ(weight(a), weight(c));
  std::remove(path.c_str());
  std::remove(plain_path.c_str());
  EXPECT_EQ(cohort_trainer_destroy(c), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(b), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(a), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// co2's preset over an SGD optimizer averages plainly and sends 8-bit messages: in a world of one
// with fp32 messages that is plain training, step for step, where the same plan spelled out with
// DiLoCo's constants (no preset) moves away from it; the default message width is the explicit
// 8-bit one's over SGD and the 4-bit one's over AdamW (settle_for_optimizer, plan.h).
TEST_F(CapiParallel, Co2PresetOverSgdAveragesPlainlyWithEightBitMessages) {
  cohort_optimizer_options so = cohort_optimizer_options_default();
  so.kind = COHORT_OPTIM_SGD;
  so.lr = 0.05;
  so.momentum = 0.9;
  cohort_optimizer* sgd = nullptr;
  ASSERT_EQ(cohort_optimizer_create(&so, &sgd), COHORT_OK) << cohort_last_error();
  cohort_plan_options preset = cohort_plan_options_default();
  preset.preset = COHORT_PRESET_CO2;
  preset.tau = 2;
  cohort_plan_options fp32 = preset;
  fp32.outer_bits = 32;
  cohort_plan_options spelled = cohort_plan_options_default();  // DiLoCo's constants, no preset
  spelled.mode = COHORT_SYNC_CO2;
  spelled.tau = 2;
  spelled.outer_lr = 0.7;
  spelled.outer_momentum = 0.9;
  spelled.outer_nesterov = 1;
  spelled.outer_bits = 32;
  cohort_trainer* plain = nullptr;
  ASSERT_EQ(cohort_trainer_create(graph_, sgd, nullptr, &plain), COHORT_OK) << cohort_last_error();
  cohort_trainer* averaged = parallel_trainer(fp32, sgd);
  cohort_trainer* nesterov = parallel_trainer(spelled, sgd);
  ASSERT_TRUE(averaged && nesterov);
  for (int k = 0; k < 8; ++k) {
    const float p = step(plain, k), a = step(averaged, k), n = step(nesterov, k);
    EXPECT_NEAR(a, p, 1e-6f * std::fabs(p)) << "step " << k;
    (void)n;
  }
  const std::vector<float> wp = weight(plain), wa = weight(averaged), wn = weight(nesterov);
  float off_a = 0, off_n = 0;
  for (size_t i = 0; i < wp.size(); ++i) {
    off_a = std::max(off_a, std::fabs(wa[i] - wp[i]));
    off_n = std::max(off_n, std::fabs(wn[i] - wp[i]));
  }
  EXPECT_LT(off_a, 1e-6f);
  EXPECT_GT(off_n, 1e-4f);  // the spelled-out Nesterov constants are kept, not settled
  // The default width: an outer sync's bytes as with 8 bits given over SGD, 4 over AdamW.
  auto sync_bytes = [&](cohort_plan_options o, int32_t bits, cohort_optimizer* opt) {
    o.outer_bits = bits;
    cohort_trainer* t = parallel_trainer(o, opt);
    for (int k = 0; k < 2; ++k) step(t, k);
    cohort_parallel_stats st{};
    st.size = sizeof st;
    EXPECT_EQ(cohort_trainer_get_parallel_stats(t, &st), COHORT_OK) << cohort_last_error();
    EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
    return st.outer_sync_bytes;
  };
  cohort_optimizer_options ao = cohort_optimizer_options_default();
  ao.kind = COHORT_OPTIM_ADAMW;
  cohort_optimizer* adamw = nullptr;
  ASSERT_EQ(cohort_optimizer_create(&ao, &adamw), COHORT_OK) << cohort_last_error();
  const int64_t sgd_default = sync_bytes(preset, 0, sgd), sgd_8 = sync_bytes(preset, 8, sgd),
                sgd_4 = sync_bytes(preset, 4, sgd), adamw_default = sync_bytes(preset, 0, adamw),
                adamw_4 = sync_bytes(preset, 4, adamw);
  EXPECT_EQ(cohort_optimizer_destroy(adamw), COHORT_OK);
  EXPECT_GT(sgd_8, sgd_4);
  EXPECT_EQ(sgd_default, sgd_8);
  EXPECT_EQ(adamw_default, adamw_4);
  EXPECT_EQ(cohort_trainer_destroy(nesterov), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(averaged), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(plain), COHORT_OK);
  EXPECT_EQ(cohort_optimizer_destroy(sgd), COHORT_OK);
}

// co2's waits split by whose pace they followed (outer_shared_wait_seconds). Under cohort-run at
// 2 ranks (multirank.capi_shared_wait.n2) the last rank sleeps 40 ms after every step: rank 0
// reaches each merge before the last rank has launched its average and waits for it there,
// while the last rank finds every average arrived. Rank 0's waits are then for a slower rank,
// not for the link: the least any rank waited stays near 0. In one process it is 0 too.
TEST_F(CapiParallel, Co2SharedWaitSeparatesWaitingForSlowerRanks) {
  cohort_plan_options o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_CO2;
  o.tau = 2;
  int32_t rank = 0, world = 1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &world), COHORT_OK);
  cohort_trainer* t = parallel_trainer(o);
  ASSERT_NE(t, nullptr);
  for (int k = 0; k < 12; ++k) {  // 6 rounds, 5 merges: the first 4 merges' waits reduced
    step(t, k);
    if (world > 1 && rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  cohort_parallel_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(t, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.rounds, 6);
  EXPECT_GE(s.outer_shared_wait_seconds, 0.0);
  EXPECT_LE(s.outer_shared_wait_seconds, s.wait_seconds);
  if (world > 1 && rank == 0) {
    EXPECT_GT(s.wait_seconds, 0.15);  // ~80 ms a round for the sleeping rank
    EXPECT_LT(s.outer_shared_wait_seconds, 0.25 * s.wait_seconds) << s.wait_seconds;
  }
  cohort_parallel_stats old{};
  old.size = offsetof(cohort_parallel_stats, outer_shared_wait_seconds);  // a caller built before it
  old.outer_shared_wait_seconds = -7;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(t, &old), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(old.outer_shared_wait_seconds, -7);
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
}

// Local updating measures a round from its anchor. A model loaded from a file without outer state
// (a plain trainer's: fine-tuning under local updating) or written by set_parameter must move the
// anchor too; before, it stayed at the weights attach saw and the first outer step pulled the
// loaded model back toward them. Local SGD with outer lr 0.5 and no momentum on one rank makes
// a round end land halfway between the anchor and the round's own progress: (anchor + x) / 2.
TEST_F(CapiParallel, LocalUpdatingStartsFromLoadedOrWrittenParameters) {
  cohort_plan_options o = cohort_plan_options_default();
  o.mode = COHORT_SYNC_LOCALSGD;
  o.tau = 2;
  o.outer_lr = 0.5;
  o.outer_momentum = 0;
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  auto midway = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> m(a.size());
    for (size_t i = 0; i < a.size(); ++i) m[i] = 0.5f * (a[i] + b[i]);
    return m;
  };
  auto expect_near = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
    EXPECT_LT(worst, 1e-6) << what;
  };
  // A plain trainer's checkpoint after 3 steps: its weights are far from the initial ones.
  cohort_trainer *plain = nullptr, *cont = nullptr, *local = nullptr;
  ASSERT_EQ(cohort_trainer_create(graph_, optimizer_, nullptr, &plain), COHORT_OK);
  const std::vector<float> initial = weight(plain);
  for (int k = 0; k < 3; ++k) step(plain, k);
  const std::vector<float> saved = weight(plain);
  std::string path = ::testing::TempDir() + "cohort_parallel_plain_model.ckpt";
  ASSERT_EQ(cohort_trainer_save_checkpoint(plain, path.c_str()), COHORT_OK) << cohort_last_error();
  // Its continuation, 2 steps: what the round's inner steps reach.
  ASSERT_EQ(cohort_trainer_create(graph_, optimizer_, nullptr, &cont), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_checkpoint(cont, path.c_str()), COHORT_OK) << cohort_last_error();
  step(cont, 3);
  step(cont, 4);
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &local), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_checkpoint(local, path.c_str()), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(weight(local), saved);
  step(local, 3);
  step(local, 4);  // the round end
  expect_near(weight(local), midway(saved, weight(cont)), "loaded: the anchor is the loaded model");
  const std::vector<float> stale = midway(initial, weight(cont));
  EXPECT_GT(std::fabs(weight(local)[0] - stale[0]) + std::fabs(weight(local)[1] - stale[1]), 1e-4)
      << "the loaded and the initial weights must differ for this test to mean anything";

  // set_parameter: fc1.weight written before training; the round end lands halfway between the
  // written values and a plain trainer's two steps from them.
  cohort_trainer *plain2 = nullptr, *local2 = nullptr;
  int64_t shape[2] = {8, 6};
  std::vector<float> written = saved;
  cohort_tensor_ref ref = {"fc1.weight", COHORT_F32, 2, shape, written.data(), written.size() * sizeof(float)};
  ASSERT_EQ(cohort_trainer_create(graph_, optimizer_, nullptr, &plain2), COHORT_OK);
  ASSERT_EQ(cohort_trainer_set_parameter(plain2, &ref), COHORT_OK) << cohort_last_error();
  step(plain2, 0);
  step(plain2, 1);
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &local2), COHORT_OK);
  ASSERT_EQ(cohort_trainer_set_parameter(local2, &ref), COHORT_OK) << cohort_last_error();
  step(local2, 0);
  step(local2, 1);
  expect_near(weight(local2), midway(written, weight(plain2)), "written: the anchor follows set_parameter");
  std::remove(path.c_str());
  for (cohort_trainer* t : {plain, cont, local, plain2, local2}) EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

TEST_F(CapiParallel, OuterFragmentsValidateTrainReportAndResume) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.outer_fragments, 0);  // = 1
  o.preset = COHORT_PRESET_CO2;
  o.tau = 4;
  cohort_plan *plan = nullptr, *older = nullptr;
  o.outer_fragments = -1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: outer_fragments = -1 must be >= 1");
  o.outer_fragments = 5;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: outer_fragments = 5 must be <= tau = 4");
  o.outer_fragments = 2;
  o.overlap_steps = -1;  // auto, from 1 step: each fragment's average merged before the next one's sync
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.overlap_steps = 0;
  o.outer_bits = 8;  // each fragment's own low-bit message
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.outer_bits = 0;
  o.preset = COHORT_PRESET_DDP;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_UNSUPPORTED, "plan: outer_fragments = 2 applies to");
  o.size = offsetof(cohort_plan_options, outer_fragments);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  // More fragments than the MLP's 4 parameters: refused where the model is known.
  o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_CO2;
  o.tau = 8;
  o.outer_fragments = 5;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "plan: outer_fragments = 5 must be in [1, 4]");
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  // Two fragments: they train, report the syncs and their size, and resume bit for bit.
  o.tau = 4;
  o.outer_fragments = 2;
  o.overlap_steps = 3;  // both fragments' averages in flight at once
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer *a = nullptr, *b = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &a), COHORT_OK)
      << cohort_last_error();
  for (int k = 0; k < 6; ++k) step(a, k);  // the averages of fragment 0 (step 4) and 1 (step 6) pending
  std::string path = ::testing::TempDir() + "cohort_parallel_fragments.ckpt";
  ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(a, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 6; k < 12; ++k) step(a, k);
  cohort_parallel_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.outer_fragments, 2);
  EXPECT_EQ(s.outer_syncs, 6);  // fragment 0 at steps 4, 8, 12; fragment 1 at 2, 6, 10
  // fc1.weight alone (fc1.bias and fc2 are 35 floats), in co2's default message over the
  // fixture's SGD, 8 bits: its 48 values a byte each, and one fp32 scale for the block of 256 that
  // holds them.
  EXPECT_EQ(s.outer_sync_bytes, 8 * 6 + 4);
  EXPECT_EQ(s.rounds, 3);
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &b), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_parallel_checkpoint(b, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 6; k < 12; ++k) step(b, k);
  EXPECT_EQ(weight(a), weight(b));  // bit for bit
  // A caller built before the stats' fields: they stay as they were.
  cohort_parallel_stats old{};
  old.size = offsetof(cohort_parallel_stats, outer_fragments);
  old.outer_syncs = -7;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &old), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(old.outer_syncs, -7);
  EXPECT_EQ(old.rounds, 3);
  std::remove(path.c_str());
  EXPECT_EQ(cohort_trainer_destroy(b), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(a), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// In one process: validation, and a world of one that shard groups of 2 do not divide. Under
// cohort-run at 4 ranks (multirank.capi_shard_group.n4): co2 in 2 replicas of 2 at ZeRO 3 trains,
// reports its groups, a sync of half the model and its outer all-reduce hidden in part, and
// resumes bit for bit from per-rank checkpoints saved with an average in flight.
TEST_F(CapiParallel, ShardGroupsValidateTrainReportAndResume) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.shard_group, 0);  // = 1
  o.preset = COHORT_PRESET_CO2;
  o.tau = 3;
  o.overlap_steps = 2;
  cohort_plan *plan = nullptr, *older = nullptr;
  o.shard_group = -1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: shard_group = -1 must be >= 1");
  o.shard_group = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "plan: shard_group = 2 runs ZeRO over each replica's ranks: zero_stage must be 1, 2 or 3 (it is 0)");
  o.size = offsetof(cohort_plan_options, shard_group);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o.size = sizeof o;
  o.zero_stage = 3;
  o.outer_bits = 0;  // co2's default: low-bit messages, each rank's of its shard
  o.bucket_bytes = 64;  // two buckets of this MLP's 83 floats
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  int32_t rank = 0, world = 1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &world), COHORT_OK);
  cohort_trainer *a = nullptr, *b = nullptr;
  if (world % 2 != 0) {
    EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &a),
                  COHORT_ERR_INVALID_PLAN,
                  ("plan: shard_group 2 does not divide the data-parallel degree " + std::to_string(world)).c_str());
    EXPECT_EQ(a, nullptr);
    EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
    return;
  }
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &a), COHORT_OK)
      << cohort_last_error();
  for (int k = 0; k < 4; ++k) step(a, k);  // round 1's average (step 3) in flight until step 5
  std::string path = ::testing::TempDir() + "cohort_parallel_groups_" + std::to_string(rank) + ".ckpt";
  ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(a, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 4; k < 9; ++k) step(a, k);
  cohort_parallel_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.shard_group, 2);
  EXPECT_EQ(s.rounds, 3);
  EXPECT_EQ(s.outer_syncs, 3);
  EXPECT_LE(s.outer_sync_bytes, 83 * 4 / 2 + 2 * 4);  // half the model, and a pad float per bucket
  EXPECT_GT(s.outer_hidden_fraction, 0.0);
  EXPECT_LE(s.outer_hidden_fraction, 1.0);
  EXPECT_LT(s.optimizer_state_bytes, 83 * 4 * 4 / 2 + 64);  // inner momentum and 3 outer vectors, halved
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &b), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_parallel_checkpoint(b, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 4; k < 9; ++k) step(b, k);
  EXPECT_EQ(weight(a), weight(b));  // bit for bit (each a gather: collective)
  cohort_parallel_stats old{};
  old.size = offsetof(cohort_parallel_stats, outer_hidden_fraction);
  old.shard_group = -7;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &old), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(old.shard_group, -7);
  std::remove(path.c_str());
  EXPECT_EQ(cohort_trainer_destroy(b), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(a), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// The inner optimizer state averaged at round ends: local SGD's blocking rounds only; a caller
// built before the field leaves it off; a trainer takes it (the averaging itself is checked
// against the reference at 2 and 4 ranks: multirank.dp.*-avgstate*).
TEST_F(CapiParallel, AverageInnerStateIsLocalSgdsAndNotReadFromAnOlderCaller) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.average_inner_state, 0);
  cohort_plan* plan = nullptr;
  o.preset = COHORT_PRESET_CO2;
  o.tau = 2;
  o.average_inner_state = 1;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN,
                "average_inner_state applies to localsgd's blocking round ends (the localsgd, slowmo and diloco presets); "
                "it is co2");
  o.size = offsetof(cohort_plan_options, average_inner_state);  // a caller built before the field: not read
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  o = cohort_plan_options_default();
  o.preset = COHORT_PRESET_DILOCO;
  o.tau = 2;
  o.average_inner_state = 1;
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_OK)
      << cohort_last_error();
  for (int k = 0; k < 4; ++k) step(t, k);  // two round ends
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

// Top-k gradient compression: validation, an older caller's size, and (in one process, and under
// cohort-run at 2 ranks: multirank.capi_grad_keep.n2) training that reports fewer bytes than the
// gradients' and resumes bit for bit from per-rank checkpoints holding the residuals.
TEST_F(CapiParallel, GradKeepValidatesTrainsReportsAndResumes) {
  cohort_plan_options o = cohort_plan_options_default();
  EXPECT_EQ(o.grad_keep, 0.0);  // = 1
  cohort_plan *plan = nullptr, *older = nullptr;
  o.grad_keep = 1.5;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_INVALID_PLAN, "plan: grad_keep = 1.5 must be in (0, 1]");
  o.grad_keep = 0.1;
  o.zero_stage = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_UNSUPPORTED, "it has zero_stage 2");
  o.zero_stage = 0;
  o.preset = COHORT_PRESET_CO2;
  o.tau = 2;
  EXPECT_STATUS(cohort_plan_create(&o, &plan), COHORT_ERR_UNSUPPORTED, "compresses the sync mode's gradients");
  o.size = offsetof(cohort_plan_options, grad_keep);  // a caller built before the field: not read
  EXPECT_EQ(cohort_plan_create(&o, &older), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(cohort_plan_destroy(older), COHORT_OK);
  o = cohort_plan_options_default();
  o.grad_keep = 0.1;
  o.bucket_bytes = 64;  // two buckets of this MLP's 83 floats
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  int32_t rank = 0, world = 1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &world), COHORT_OK);
  cohort_trainer *a = nullptr, *b = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &a), COHORT_OK)
      << cohort_last_error();
  for (int k = 0; k < 4; ++k) step(a, k);
  std::string path = ::testing::TempDir() + "cohort_parallel_topk_" + std::to_string(rank) + ".ckpt";
  ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(a, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 4; k < 8; ++k) step(a, k);
  cohort_parallel_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &s), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(s.grad_keep, 0.1);
  EXPECT_GT(s.gradient_sync_bytes, 0);
  EXPECT_LT(s.gradient_sync_bytes, 83 * 4);
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &b), COHORT_OK);
  ASSERT_EQ(cohort_trainer_load_parallel_checkpoint(b, path.c_str()), COHORT_OK) << cohort_last_error();
  for (int k = 4; k < 8; ++k) step(b, k);
  EXPECT_EQ(weight(a), weight(b));  // bit for bit: the residuals came back
  cohort_parallel_stats old{};
  old.size = offsetof(cohort_parallel_stats, gradient_sync_bytes);
  old.gradient_sync_bytes = -7;
  ASSERT_EQ(cohort_trainer_get_parallel_stats(a, &old), COHORT_OK) << cohort_last_error();
  EXPECT_EQ(old.gradient_sync_bytes, -7);
  std::remove(path.c_str());
  EXPECT_EQ(cohort_trainer_destroy(b), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(a), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}

TEST_F(CapiParallel, ZeroTrainerMatchesDdpAndReportsMemory) {
  for (int32_t stage : {2, 3}) {
    SCOPED_TRACE(stage);
    cohort_plan_options o = cohort_plan_options_default();
    cohort_plan *ddp = nullptr, *zero = nullptr;
    ASSERT_EQ(cohort_plan_create(&o, &ddp), COHORT_OK) << cohort_last_error();
    o.zero_stage = stage;
    ASSERT_EQ(cohort_plan_create(&o, &zero), COHORT_OK) << cohort_last_error();
    cohort_trainer *a = nullptr, *b = nullptr;
    ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, ddp, comm_, nullptr, &a), COHORT_OK);
    ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, zero, comm_, nullptr, &b), COHORT_OK)
        << cohort_last_error();
    for (int k = 0; k < 3; ++k) {
      step(a, k);
      step(b, k);
    }
    std::vector<float> wa = weight(a), wb = weight(b);
    for (size_t i = 0; i < wa.size(); ++i) EXPECT_NEAR(wa[i], wb[i], 1e-6f) << i;
    cohort_parallel_stats s{};
    s.size = sizeof s;
    ASSERT_EQ(cohort_trainer_get_parallel_stats(b, &s), COHORT_OK) << cohort_last_error();
    EXPECT_GT(s.parameter_bytes, 0);
    EXPECT_GT(s.gradient_bytes, 0);
    EXPECT_GE(s.optimizer_state_bytes, 0);
    // Stage 3 gathers its parameters bucket by bucket in every step; the others never do.
    EXPECT_EQ(s.parameter_gathers > 0, stage == 3);
    EXPECT_EQ(cohort_trainer_gather_parameters(b), COHORT_OK) << cohort_last_error();
    EXPECT_EQ(cohort_trainer_gather_parameters(a), COHORT_OK) << cohort_last_error();  // no ZeRO 3: no-op
    EXPECT_GT(s.peak_parameter_bytes, 0);
    // A caller built before the memory fields existed: OK, and the fields past its size untouched.
    cohort_parallel_stats old{};
    old.size = offsetof(cohort_parallel_stats, parameter_bytes);
    old.parameter_bytes = -7;
    ASSERT_EQ(cohort_trainer_get_parallel_stats(b, &old), COHORT_OK) << cohort_last_error();
    EXPECT_EQ(old.parameter_bytes, -7);
    EXPECT_EQ(old.rounds, 3);
    // The shard's optimizer state travels in the checkpoint: a resumed trainer steps identically.
    std::string path = ::testing::TempDir() + "cohort_parallel_zero.ckpt";
    ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(b, path.c_str()), COHORT_OK) << cohort_last_error();
    cohort_trainer* c = nullptr;
    ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, zero, comm_, nullptr, &c), COHORT_OK);
    ASSERT_EQ(cohort_trainer_load_parallel_checkpoint(c, path.c_str()), COHORT_OK) << cohort_last_error();
    step(b, 3);
    step(c, 3);
    EXPECT_EQ(weight(b), weight(c));
    // A DDP trainer's checkpoint has no ZeRO shard.
    std::string ddp_path = ::testing::TempDir() + "cohort_parallel_ddp.ckpt";
    ASSERT_EQ(cohort_trainer_save_parallel_checkpoint(a, ddp_path.c_str()), COHORT_OK);
    EXPECT_STATUS(cohort_trainer_load_parallel_checkpoint(c, ddp_path.c_str()), COHORT_ERR_INVALID_ARGUMENT,
                  "saved without ZeRO");
    EXPECT_STATUS(cohort_trainer_load_parallel_checkpoint(a, path.c_str()), COHORT_ERR_INVALID_ARGUMENT,
                  "holds a ZeRO optimizer shard");
    std::remove(path.c_str());
    std::remove(ddp_path.c_str());
    EXPECT_EQ(cohort_trainer_destroy(c), COHORT_OK);
    EXPECT_EQ(cohort_trainer_destroy(b), COHORT_OK);
    EXPECT_EQ(cohort_trainer_destroy(a), COHORT_OK);
    EXPECT_EQ(cohort_plan_destroy(zero), COHORT_OK);
    EXPECT_EQ(cohort_plan_destroy(ddp), COHORT_OK);
  }
}

}  // namespace

namespace {

cohort_graph* mlp_at(int64_t batch, int64_t in_features = 6, int64_t width = 8) {
  cohort_model_mlp_options m = cohort_model_mlp_options_default();
  int64_t hidden[1] = {width};
  m.batch = batch;
  m.in_features = in_features;
  m.hidden = hidden;
  m.num_hidden = 1;
  m.classes = 3;
  cohort_graph* g = nullptr;
  EXPECT_EQ(cohort_graph_create_mlp(&m, &g), COHORT_OK) << cohort_last_error();
  return g;
}

// One step of mlp_at's model on `rows` rows of a pattern that differs by rank; the loss (NaN when
// the step fails, which is also reported).
float step_mlp(cohort_trainer* t, int64_t rows, int64_t in_features, int32_t rank) {
  std::vector<float> x(static_cast<size_t>(rows * in_features));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(rank)) % 11) / 11.0f;
  std::vector<int32_t> y(static_cast<size_t>(rows));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 3);
  int64_t xs[2] = {rows, in_features}, ys[1] = {rows};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x.data(), x.size() * sizeof(float)},
                             {"y", COHORT_I32, 1, ys, y.data(), y.size() * sizeof(int32_t)}};
  float loss = NAN;
  EXPECT_EQ(cohort_trainer_step(t, in, 2, &loss), COHORT_OK) << cohort_last_error();
  return loss;
}

// The layout fields cohort_plan_choose writes, as integers to compare across ranks.
std::vector<int32_t> layout_of(const cohort_plan_options& o) {
  return {o.data_parallel,   o.tensor_x,          o.tensor_y,      o.tensor_z,        o.sequence_parallel,
          o.pipeline_stages, o.pipeline_chunks,   o.micro_batches, o.pipeline_schedule, o.zero_stage,
          o.activation_checkpointing, o.automatic, o.shard_group};
}

}  // namespace

// An automatic plan at any world size (one here; 2 ranks under cohort-run:
// multirank.capi_plan_choose.n2): every rank gets the same concrete options — the layout chosen,
// the rest as given — world rank 0 the report, and the options make a plan whose trainer, built
// from the graph at each rank's share of the global batch, trains a step.
TEST_F(CapiParallel, PlanChooseAgreesAndTrains) {
  int32_t rank = 0, world = 1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &world), COHORT_OK);
  if (const char* expected = std::getenv("COHORT_WORLD_SIZE")) {
    EXPECT_EQ(world, std::atoi(expected));  // cohort-run's
  }
  const int64_t global = 4 * world;
  cohort_graph* global_graph = mlp_at(global);
  ASSERT_NE(global_graph, nullptr);
  cohort_plan_options o = cohort_plan_options_default();
  o.automatic = 1;
  o.tau = 3;
  o.bucket_bytes = 1 << 20;
  cohort_plan_options chosen;
  std::memset(&chosen, 0xff, sizeof chosen);
  std::vector<char> report(1 << 16, 'x');
  size_t needed = 0;
  ASSERT_EQ(cohort_plan_choose(&o, global_graph, optimizer_, nullptr, comm_, &chosen, report.data(), report.size(),
                               &needed),
            COHORT_OK)
      << cohort_last_error();
  const std::string text = report.data();
  EXPECT_EQ(needed, text.size() + 1);
  if (rank == 0) {
    EXPECT_NE(text.find("auto plan: chose"), std::string::npos) << text;
  } else {
    EXPECT_EQ(text, "");
  }
  // The rest as given; the layout concrete.
  EXPECT_EQ(chosen.size, sizeof chosen);
  EXPECT_EQ(chosen.tau, 3);
  EXPECT_EQ(chosen.bucket_bytes, 1 << 20);
  EXPECT_EQ(chosen.mode, COHORT_SYNC_DDP);
  EXPECT_EQ(chosen.automatic, 0);
  EXPECT_EQ(chosen.pipeline_cuts, nullptr);
  EXPECT_EQ(chosen.memory_limit_bytes, 0.0);
  const int32_t degree = chosen.pipeline_stages * chosen.tensor_x * chosen.tensor_y * chosen.tensor_z;
  ASSERT_GE(degree, 1);
  ASSERT_EQ(world % degree, 0);
  const int32_t data = world / degree;
  EXPECT_TRUE(chosen.data_parallel == 0 || chosen.data_parallel == data) << chosen.data_parallel;
  // The same on every rank.
  const std::vector<int32_t> mine = layout_of(chosen);
  std::vector<int32_t> negated(mine.size()), low(mine.size()), high(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) negated[i] = -mine[i];
  ASSERT_EQ(cohort_comm_all_reduce(comm_, mine.data(), high.data(), mine.size(), COHORT_I32, COHORT_REDUCE_MAX, nullptr),
            COHORT_OK);
  ASSERT_EQ(cohort_comm_all_reduce(comm_, negated.data(), low.data(), mine.size(), COHORT_I32, COHORT_REDUCE_MAX,
                                   nullptr),
            COHORT_OK);
  for (int32_t& v : low) v = -v;  // the minimum
  EXPECT_EQ(low, mine);
  EXPECT_EQ(high, mine);

  // The report cut to fit a small buffer, with the whole size still reported. (A second choice
  // measures the links again and may choose another layout: the first one trains below.)
  char small[16];
  size_t small_needed = 0;
  cohort_plan_options again = chosen;
  ASSERT_EQ(cohort_plan_choose(&o, global_graph, optimizer_, nullptr, comm_, &again, small, sizeof small,
                               &small_needed),
            COHORT_OK)
      << cohort_last_error();
  if (rank == 0) {
    EXPECT_EQ(std::strlen(small), sizeof small - 1);
    EXPECT_EQ(std::string(small), text.substr(0, sizeof small - 1));
    EXPECT_GT(small_needed, sizeof small);
  } else {
    EXPECT_STREQ(small, "");
    EXPECT_EQ(small_needed, 1u);
  }

  // Each rank's graph: the global batch over the data replicas and the Z slices.
  const int64_t rows = global / (data * chosen.tensor_z);
  cohort_graph* g = mlp_at(rows);
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&chosen, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(g, optimizer_, plan, comm_, nullptr, &t), COHORT_OK) << cohort_last_error();
  EXPECT_TRUE(std::isfinite(step_mlp(t, rows, 6, rank)));
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(g), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(global_graph), COHORT_OK);
}

// An automatic co2 plan whose memory only its smallest layout fits (the limit from the refusal's
// "the smallest needs" figure). The MLP is its first layer (512 x 257) almost whole, and 257
// hidden units give the tensor axes nothing to split, so the smallest layout is ZeRO 3 in shard
// groups (co2 takes ZeRO only inside them): every rank gets those options, shard_group included,
// and they make a plan and a trainer that trains a step. At 2 ranks under cohort-run
// (multirank.capi_plan_choose.n2); one rank has no data axis to group.
TEST_F(CapiParallel, PlanChooseUnderCo2KeepsItsShardGroups) {
  int32_t rank = 0, world = 1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &world), COHORT_OK);
  if (world < 2) GTEST_SKIP() << "one rank: no data-parallel axis (multirank.capi_plan_choose.n2 runs it)";
  const int64_t global = 4 * world, in_features = 512, width = 257;
  cohort_graph* global_graph = mlp_at(global, in_features, width);
  ASSERT_NE(global_graph, nullptr);
  cohort_plan_options o = cohort_plan_options_default();
  o.mode = COHORT_SYNC_CO2;
  o.tau = 2;
  o.automatic = 1;
  o.bucket_bytes = 1 << 16;
  o.memory_limit_bytes = 1024;  // nothing fits: the refusal names the smallest
  cohort_plan_options chosen;
  EXPECT_EQ(cohort_plan_choose(&o, global_graph, optimizer_, nullptr, comm_, &chosen, nullptr, 0, nullptr),
            COHORT_ERR_INVALID_PLAN);
  const std::string refusal = cohort_last_error();
  const size_t at = refusal.find("the smallest needs ");
  ASSERT_NE(at, std::string::npos) << refusal;
  const double figure = std::atof(refusal.c_str() + at + std::strlen("the smallest needs "));
  const bool mib = refusal.find("MiB", at) != std::string::npos;
  o.memory_limit_bytes = (figure + 0.05) * (mib ? 1 << 20 : 1);  // the smallest fits (the figure is rounded)
  ASSERT_EQ(cohort_plan_choose(&o, global_graph, optimizer_, nullptr, comm_, &chosen, nullptr, 0, nullptr), COHORT_OK)
      << cohort_last_error();
  std::printf("rank %d: chose data %d, zero %d, shard_group %d, tensor %dx%dx%d, stages %d\n", rank,
              chosen.data_parallel, chosen.zero_stage, chosen.shard_group, chosen.tensor_x, chosen.tensor_y,
              chosen.tensor_z, chosen.pipeline_stages);
  EXPECT_EQ(chosen.mode, COHORT_SYNC_CO2);
  EXPECT_EQ(chosen.zero_stage, 3);
  EXPECT_EQ(chosen.shard_group, world);  // co2's ZeRO only inside groups
  cohort_plan* plan = nullptr;
  ASSERT_EQ(cohort_plan_create(&chosen, &plan), COHORT_OK) << cohort_last_error();
  const int32_t degree = chosen.pipeline_stages * chosen.tensor_x * chosen.tensor_y * chosen.tensor_z;
  const int64_t rows = global / ((world / degree) * chosen.tensor_z);
  cohort_graph* g = mlp_at(rows, in_features, width);
  cohort_trainer* t = nullptr;
  ASSERT_EQ(cohort_trainer_create_parallel(g, optimizer_, plan, comm_, nullptr, &t), COHORT_OK) << cohort_last_error();
  EXPECT_TRUE(std::isfinite(step_mlp(t, rows, in_features, rank)));
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(g), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(global_graph), COHORT_OK);
}

// cohort_plan_choose's refusals, each before any collective, and an automatic plan refused by
// cohort_trainer_create_parallel naming cohort_plan_choose.
TEST_F(CapiParallel, PlanChooseErrorPaths) {
  cohort_plan_options o = cohort_plan_options_default();
  o.automatic = 1;
  cohort_plan_options chosen = cohort_plan_options_default();
  char report[64];
  size_t needed = 0;
  EXPECT_STATUS(cohort_plan_choose(nullptr, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_ARGUMENT, "cohort_plan_choose: options is NULL");
  EXPECT_STATUS(cohort_plan_choose(&o, graph_, optimizer_, nullptr, comm_, nullptr, report, sizeof report, &needed),
                COHORT_ERR_INVALID_ARGUMENT, "chosen_out is NULL");
  EXPECT_STATUS(cohort_plan_choose(&o, graph_, optimizer_, nullptr, comm_, &chosen, nullptr, 8, &needed),
                COHORT_ERR_INVALID_ARGUMENT, "report is NULL");
  EXPECT_STATUS(cohort_plan_choose(&o, nullptr, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_HANDLE, "global_graph is NULL");
  EXPECT_STATUS(cohort_plan_choose(&o, graph_, nullptr, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_HANDLE, "optimizer is NULL");
  EXPECT_STATUS(cohort_plan_choose(&o, graph_, optimizer_, nullptr, nullptr, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_HANDLE, "comm is NULL");
  cohort_plan_options old = o;
  old.size = offsetof(cohort_plan_options, automatic);  // a caller from before automatic plans
  EXPECT_STATUS(cohort_plan_choose(&old, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_ARGUMENT, "options");
  cohort_plan_options bad = o;
  bad.auto_trials = 65;
  EXPECT_STATUS(cohort_plan_choose(&bad, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_PLAN, "auto_trials = 65 must be in [0, 64]");
  cohort_plan* plan = nullptr;
  EXPECT_STATUS(cohort_plan_create(&bad, &plan), COHORT_ERR_INVALID_PLAN, "auto_trials = 65");
  bad.auto_trials = -1;
  EXPECT_STATUS(cohort_plan_create(&bad, &plan), COHORT_ERR_INVALID_PLAN, "auto_trials = -1");
  bad = o;
  bad.memory_limit_bytes = -1;
  EXPECT_STATUS(cohort_plan_choose(&bad, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_PLAN, "memory_limit_bytes = -1");
  // Nothing fits in a kilobyte: the limit and the smallest need named.
  bad.memory_limit_bytes = 1024;
  EXPECT_STATUS(cohort_plan_choose(&bad, graph_, optimizer_, nullptr, comm_, &chosen, report, sizeof report, &needed),
                COHORT_ERR_INVALID_PLAN, "memory_limit_bytes");
  EXPECT_NE(std::string(cohort_last_error()).find("the smallest needs"), std::string::npos) << cohort_last_error();
  EXPECT_EQ(plan, nullptr);

  // A trainer cannot be made from an automatic plan; a forced plan over the limit is refused.
  ASSERT_EQ(cohort_plan_create(&o, &plan), COHORT_OK) << cohort_last_error();
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "cohort_trainer_create_parallel: plan: automatic = 1: resolve the layout with cohort_plan_choose");
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  cohort_plan_options forced = cohort_plan_options_default();
  forced.memory_limit_bytes = 1024;
  ASSERT_EQ(cohort_plan_create(&forced, &plan), COHORT_OK) << cohort_last_error();
  EXPECT_STATUS(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_ERR_INVALID_PLAN,
                "memory_limit_bytes");
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
  // An older caller's size does not reach automatic: its plan is the layout as given.
  old.automatic = 1;
  ASSERT_EQ(cohort_plan_create(&old, &plan), COHORT_OK) << cohort_last_error();
  ASSERT_EQ(cohort_trainer_create_parallel(graph_, optimizer_, plan, comm_, nullptr, &t), COHORT_OK)
      << cohort_last_error();
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_EQ(cohort_plan_destroy(plan), COHORT_OK);
}
