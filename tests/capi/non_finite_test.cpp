// NaN and Inf in a training step through the C ABI (issue #25, item 2): the step returns
// COHORT_ERR_NON_FINITE, leaves every parameter and the optimizer state bit for bit as they were,
// and the next good step is exactly the one a run that never saw the bad batch takes.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>
#include "tests/support/capi_expect.h"

namespace {

using ::cohort::test::last_error;
std::string last() { return last_error(); }

constexpr int64_t kBatch = 8, kIn = 12, kHidden = 16, kClasses = 4;

// x [8, 12] -> linear 'fc1' -> relu -> linear 'fc2' -> cross_entropy with labels y [8]. ReLU is
// what hid a NaN before: it mapped the NaN rows of fc1 to 0, the loss stayed finite while fc1's
// weight gradient was NaN.
struct Mlp {
  cohort_graph* g = nullptr;
  Mlp() {
    EXPECT_EQ(cohort_graph_create(&g), COHORT_OK);
    const int64_t xs[2] = {kBatch, kIn}, ys[1] = {kBatch}, w1[2] = {kHidden, kIn}, b1[1] = {kHidden},
                  w2[2] = {kClasses, kHidden}, b2[1] = {kClasses};
    cohort_initializer init = cohort_initializer_default();
    init.kind = COHORT_INIT_UNIFORM;
    init.a = -0.4;
    init.b = 0.4;
    int32_t x, y, p[4], h, r, logits, loss;
    EXPECT_EQ(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "fc1.weight", COHORT_F32, w1, 2, &init, &p[0]), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "fc1.bias", COHORT_F32, b1, 1, &init, &p[1]), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "fc2.weight", COHORT_F32, w2, 2, &init, &p[2]), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "fc2.bias", COHORT_F32, b2, 1, &init, &p[3]), COHORT_OK);
    const int32_t l1[3] = {x, p[0], p[1]};
    EXPECT_EQ(cohort_graph_add_op(g, "linear", "fc1", l1, 3, nullptr, &h, 1, nullptr), COHORT_OK) << last();
    EXPECT_EQ(cohort_graph_add_op(g, "relu", "act", &h, 1, nullptr, &r, 1, nullptr), COHORT_OK) << last();
    const int32_t l2[3] = {r, p[2], p[3]};
    EXPECT_EQ(cohort_graph_add_op(g, "linear", "fc2", l2, 3, nullptr, &logits, 1, nullptr), COHORT_OK) << last();
    const int32_t ce[2] = {logits, y};
    EXPECT_EQ(cohort_graph_add_op(g, "cross_entropy", "ce", ce, 2, nullptr, &loss, 1, nullptr), COHORT_OK) << last();
    EXPECT_EQ(cohort_graph_set_loss(g, loss), COHORT_OK);
  }
  ~Mlp() { cohort_graph_destroy(g); }
};

const char* const kParams[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
const int64_t kParamSize[] = {kHidden * kIn, kHidden, kClasses * kHidden, kClasses};

// AdamW with clipping (the norm before the update) or SGD with momentum (the norm measured on
// its own): both keep state that a bad step must not touch.
cohort_trainer* make_trainer(const Mlp& m, bool adamw) {
  cohort_optimizer_options o = cohort_optimizer_options_default();
  o.kind = adamw ? COHORT_OPTIM_ADAMW : COHORT_OPTIM_SGD;
  o.lr = adamw ? 0.01 : 0.1;
  o.momentum = adamw ? 0.0 : 0.9;
  o.clip_norm = adamw ? 1.0 : 0.0;
  o.schedule = COHORT_SCHEDULE_WARMUP_COSINE;  // the step count shows in the learning rate
  o.warmup_steps = 2;
  o.total_steps = 10;
  cohort_optimizer* opt = nullptr;
  EXPECT_EQ(cohort_optimizer_create(&o, &opt), COHORT_OK) << last();
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = 7;
  to.num_threads = 1;
  cohort_trainer* t = nullptr;
  EXPECT_EQ(cohort_trainer_create(m.g, opt, &to, &t), COHORT_OK) << last();
  cohort_optimizer_destroy(opt);
  return t;
}

struct Batch {
  std::vector<float> x = std::vector<float>(kBatch * kIn);
  std::vector<int32_t> y = std::vector<int32_t>(kBatch);
  explicit Batch(int k) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i) + 1.9f * static_cast<float>(k));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i * 3 + static_cast<size_t>(k)) % kClasses);
  }
};

cohort_status step(cohort_trainer* t, Batch& b, float* loss) {
  const int64_t xs[2] = {kBatch, kIn}, ys[1] = {kBatch};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, b.x.data(), b.x.size() * sizeof(float)},
                             {"y", COHORT_I32, 1, ys, b.y.data(), b.y.size() * sizeof(int32_t)}};
  return cohort_trainer_step(t, in, 2, loss);
}

std::vector<std::vector<float>> parameters(cohort_trainer* t) {
  std::vector<std::vector<float>> all;
  for (size_t i = 0; i < 4; ++i) {
    std::vector<float> v(static_cast<size_t>(kParamSize[i]));
    const int64_t shape2[2] = {i == 0 ? kHidden : kClasses, i == 0 ? kIn : kHidden}, shape1[1] = {kParamSize[i]};
    const bool matrix = i % 2 == 0;
    cohort_tensor_ref r = {kParams[i], COHORT_F32, matrix ? 2 : 1, matrix ? shape2 : shape1, v.data(),
                           v.size() * sizeof(float)};
    EXPECT_EQ(cohort_trainer_get_parameter(t, &r), COHORT_OK) << last();
    all.push_back(v);
  }
  return all;
}

bool bitwise_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// The whole training state as bytes: a checkpoint holds every parameter, every optimizer state
// tensor, the optimizer's and the trainer's step counts.
std::vector<char> state_bytes(cohort_trainer* t, const std::string& path) {
  EXPECT_EQ(cohort_trainer_save_checkpoint(t, path.c_str()), COHORT_OK) << last();
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return bytes;
}

class NonFiniteStep : public ::testing::TestWithParam<bool> {};  // AdamW + clipping, or SGD momentum

TEST_P(NonFiniteStep, IsReportedAndChangesNothing) {
  Mlp m;
  cohort_trainer* t = make_trainer(m, GetParam());
  cohort_trainer* clean = make_trainer(m, GetParam());  // never sees the bad batches
  const std::string path = ::testing::TempDir() + "/non_finite_" + std::to_string(GetParam()) + ".ckpt";
  float loss = 0, clean_loss = 0;
  Batch first(1), second(2);
  ASSERT_EQ(step(t, first, &loss), COHORT_OK) << last();
  ASSERT_EQ(step(clean, first, &clean_loss), COHORT_OK) << last();
  const std::vector<std::vector<float>> before = parameters(t);
  const std::vector<char> state = state_bytes(t, path);
  cohort_trainer_stats stats_before{};
  stats_before.size = sizeof stats_before;
  ASSERT_EQ(cohort_trainer_get_stats(t, &stats_before), COHORT_OK);

  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    SCOPED_TRACE("x[5] = " + std::to_string(bad));
    Batch poisoned(3);
    poisoned.x[5] = bad;
    loss = 12345.0f;
    EXPECT_STATUS(step(t, poisoned, &loss), COHORT_ERR_NON_FINITE, "cohort_trainer_step");
    EXPECT_NE(last().find("the update was skipped"), std::string::npos) << last();
    EXPECT_NE(last().find("'fc1.weight'"), std::string::npos) << last();  // names the parameter
    EXPECT_EQ(loss, 12345.0f);                                            // loss_out not written
    EXPECT_TRUE(bitwise_equal(parameters(t), before)) << "a parameter changed";
    EXPECT_EQ(state_bytes(t, path), state) << "the training state (optimizer, step counts) changed";
    cohort_trainer_stats s{};
    s.size = sizeof s;
    ASSERT_EQ(cohort_trainer_get_stats(t, &s), COHORT_OK);
    EXPECT_EQ(s.step, stats_before.step);
    EXPECT_EQ(s.learning_rate, stats_before.learning_rate);
    EXPECT_FALSE(std::isfinite(s.grad_norm));
  }
  // The next good step is the one the clean run takes next, bit for bit.
  ASSERT_EQ(step(t, second, &loss), COHORT_OK) << last();
  ASSERT_EQ(step(clean, second, &clean_loss), COHORT_OK) << last();
  EXPECT_EQ(loss, clean_loss);
  EXPECT_TRUE(bitwise_equal(parameters(t), parameters(clean)));
  EXPECT_EQ(state_bytes(t, path), state_bytes(clean, path));
  EXPECT_STREQ(cohort_status_name(COHORT_ERR_NON_FINITE), "non-finite values");
  cohort_trainer_destroy(t);
  cohort_trainer_destroy(clean);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, NonFiniteStep, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "AdamWClipped" : "SgdMomentum"; });

}  // namespace
