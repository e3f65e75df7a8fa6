// Resuming from a checkpoint is bit-identical: a run saved at step k and continued by a second
// trainer (built with another seed) gives the same losses and the same bytes of every
// parameter and optimizer state as the uninterrupted run — SGD with momentum, AdamW with a
// schedule and clipping, dropout in the model, fp32 and bf16 parameters.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/core/checkpoint/checkpoint_fixture.h"

namespace cohort::checkpoint {
namespace {

using namespace test_support;

struct ResumeCase {
  const char* name;
  optim::OptimizerConfig config;
  ModelSpec model;
};

optim::OptimizerConfig sgd_momentum() {
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::kSgd;
  c.lr = 0.05;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 1e-4;
  return c;
}

optim::OptimizerConfig adamw_scheduled() {
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::kAdamW;
  c.lr = 3e-3;
  c.weight_decay = 0.01;
  c.schedule = optim::ScheduleKind::kWarmupCosine;
  c.warmup_steps = 3;
  c.total_steps = 12;
  c.min_lr = 1e-4;
  c.clip_norm = 0.5;
  return c;
}

ModelSpec bf16_model() {
  ModelSpec m;
  m.dtype = DType::kBF16;
  return m;
}

class Resume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(Resume, BitIdentical) {
  const ResumeCase& c = GetParam();
  constexpr int64_t kSteps = 12, kSaveAt = 5;
  ScratchDir dir;
  const std::string path = dir.file("run.ckpt");
  const Graph g = make_model(c.model);
  TrainerOptions a_opts;
  a_opts.seed = 7;
  Trainer a(g, c.config, a_opts);
  std::vector<float> losses_a;
  std::map<std::string, std::vector<uint8_t>> at_save;
  for (int64_t s = 0; s < kSteps; ++s) {
    if (s == kSaveAt) {
      CheckpointExtra extra;
      extra.ints["sampler.position"] = s * c.model.batch;
      save_checkpoint(a, path, extra);
      at_save = snapshot(a);
    }
    losses_a.push_back(a.step(make_batch(c.model, s)));
  }

  TrainerOptions b_opts;
  b_opts.seed = 999;  // the checkpoint restores seed 7: dropout masks must follow
  Trainer b(g, c.config, b_opts);
  b.step(make_batch(c.model, 100));  // state that the load must replace
  CheckpointExtra extra;
  load_checkpoint(b, path, &extra);
  EXPECT_EQ(snapshot(b), at_save);
  ASSERT_EQ(extra.ints.size(), 1u);
  const int64_t position = extra.ints.at("sampler.position");
  ASSERT_EQ(position, kSaveAt * c.model.batch);
  std::vector<float> losses_b;
  for (int64_t s = position / c.model.batch; s < kSteps; ++s) losses_b.push_back(b.step(make_batch(c.model, s)));

  ASSERT_EQ(losses_b.size(), static_cast<size_t>(kSteps - kSaveAt));
  EXPECT_EQ(std::memcmp(losses_b.data(), losses_a.data() + kSaveAt, losses_b.size() * sizeof(float)), 0);
  for (size_t i = 0; i < losses_b.size(); ++i)
    EXPECT_EQ(losses_b[i], losses_a[kSaveAt + i]) << "step " << kSaveAt + static_cast<int64_t>(i);
  const auto final_a = snapshot(a), final_b = snapshot(b);
  ASSERT_EQ(final_a.size(), final_b.size());
  for (const auto& [name, bytes] : final_a) EXPECT_TRUE(final_b.at(name) == bytes) << name << " differs";
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoint, Resume,
    ::testing::Values(ResumeCase{"SgdMomentumDropout", sgd_momentum(), ModelSpec{}},
                      ResumeCase{"AdamWDropout", adamw_scheduled(), ModelSpec{}},
                      ResumeCase{"SgdMomentumBf16", sgd_momentum(), bf16_model()},
                      ResumeCase{"AdamWBf16", adamw_scheduled(), bf16_model()}),
    [](const ::testing::TestParamInfo<ResumeCase>& p) { return std::string(p.param.name); });

// Dropout must matter, or the tests above would not show that the seed is restored.
TEST(Resume, DropoutDependsOnTheSeed) {
  const ModelSpec m;
  const Graph g = make_model(m);
  TrainerOptions o1, o2;
  o1.seed = 7;
  o2.seed = 999;
  Trainer a(g, sgd_momentum(), o1), b(g, sgd_momentum(), o2);
  // Same initial values (the initializers carry their own seeds), different masks.
  ASSERT_EQ(snapshot(a).at("param:fc1.weight"), snapshot(b).at("param:fc1.weight"));
  EXPECT_NE(a.step(make_batch(m, 0)), b.step(make_batch(m, 0)));
}

// A checkpoint written before the first step holds no optimizer state; loading it into a trainer
// that has stepped resets the state, and both trainers then continue identically.
TEST(Resume, FromStepZeroResetsOptimizerState) {
  ScratchDir dir;
  const ModelSpec m = bf16_model();
  const Graph g = make_model(m);
  TrainerOptions o;
  o.seed = 3;
  Trainer a(g, adamw_scheduled(), o), b(g, adamw_scheduled(), o);
  save_checkpoint(a, dir.file("zero.ckpt"), CheckpointExtra());
  for (int s = 0; s < 3; ++s) b.step(make_batch(m, 50 + s));
  load_checkpoint(b, dir.file("zero.ckpt"), nullptr);
  EXPECT_EQ(b.step_count(), 0);
  EXPECT_EQ(b.optimizer().step_count(), 0);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(a.step(make_batch(m, s)), b.step(make_batch(m, s))) << "step " << s;
  EXPECT_EQ(snapshot(a), snapshot(b));
}

}  // namespace
}  // namespace cohort::checkpoint
