// Checkpoints through the C ABI: a save/load round trip that resumes bit-identically, checkpoint
// values, and every error path with its status and message (the trainer unchanged after each).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cohort/cohort.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "tests/support/capi_expect.h"

namespace {

using ::cohort::test::last_error;
std::string last() { return last_error(); }

// x [4, 3] -> linear 'fc' (w [2, 3], b [2]) -> cross_entropy with labels y [4].
struct Model {
  cohort_graph* g = nullptr;
  explicit Model(int64_t out = 2) {
    EXPECT_EQ(cohort_graph_create(&g), COHORT_OK);
    int64_t xs[2] = {4, 3}, ys[1] = {4}, ws[2] = {out, 3}, bs[1] = {out};
    cohort_initializer init = cohort_initializer_default();
    init.kind = COHORT_INIT_UNIFORM;
    init.a = -0.5;
    init.b = 0.5;
    int32_t x, y, w, b, logits, loss;
    EXPECT_EQ(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "w", COHORT_F32, ws, 2, &init, &w), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "b", COHORT_F32, bs, 1, nullptr, &b), COHORT_OK);
    int32_t in[3] = {x, w, b};
    EXPECT_EQ(cohort_graph_add_op(g, "linear", "fc", in, 3, nullptr, &logits, 1, nullptr), COHORT_OK) << last();
    int32_t ce[2] = {logits, y};
    EXPECT_EQ(cohort_graph_add_op(g, "cross_entropy", "ce", ce, 2, nullptr, &loss, 1, nullptr), COHORT_OK) << last();
    EXPECT_EQ(cohort_graph_set_loss(g, loss), COHORT_OK);
  }
  ~Model() { cohort_graph_destroy(g); }
};

cohort_trainer* make_trainer(const Model& m, uint64_t seed) {
  cohort_optimizer_options o = cohort_optimizer_options_default();
  o.kind = COHORT_OPTIM_ADAMW;
  o.lr = 0.05;
  cohort_optimizer* opt = nullptr;
  EXPECT_EQ(cohort_optimizer_create(&o, &opt), COHORT_OK) << last();
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = seed;
  cohort_trainer* t = nullptr;
  EXPECT_EQ(cohort_trainer_create(m.g, opt, &to, &t), COHORT_OK) << last();
  cohort_optimizer_destroy(opt);
  return t;
}

float step(cohort_trainer* t, int k) {
  float x[12];
  int32_t y[4];
  for (int i = 0; i < 12; ++i) x[i] = static_cast<float>((i * 7 + k * 5) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < 4; ++i) y[i] = (i + k) % 2;
  int64_t xs[2] = {4, 3}, ys[1] = {4};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x, sizeof x}, {"y", COHORT_I32, 1, ys, y, sizeof y}};
  float loss = 0;
  EXPECT_EQ(cohort_trainer_step(t, in, 2, &loss), COHORT_OK) << last();
  return loss;
}

std::vector<float> weights(cohort_trainer* t) {
  std::vector<float> w(8);
  int64_t ws[2] = {2, 3}, bs[1] = {2};
  cohort_tensor_ref rw = {"w", COHORT_F32, 2, ws, w.data(), 6 * sizeof(float)};
  cohort_tensor_ref rb = {"b", COHORT_F32, 1, bs, w.data() + 6, 2 * sizeof(float)};
  EXPECT_EQ(cohort_trainer_get_parameter(t, &rw), COHORT_OK) << last();
  EXPECT_EQ(cohort_trainer_get_parameter(t, &rb), COHORT_OK) << last();
  return w;
}

class CapiCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort_capi_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/t.ckpt";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_, path_;
};

TEST_F(CapiCheckpoint, RoundTripResumesBitIdentically) {
  Model m;
  cohort_trainer* a = make_trainer(m, 1);
  for (int k = 0; k < 3; ++k) step(a, k);
  ASSERT_EQ(cohort_trainer_set_checkpoint_value(a, "data.position", 12), COHORT_OK);
  ASSERT_EQ(cohort_trainer_save_checkpoint(a, path_.c_str()), COHORT_OK) << last();
  std::vector<float> losses_a;
  for (int k = 3; k < 8; ++k) losses_a.push_back(step(a, k));

  cohort_trainer* b = make_trainer(m, 2);
  step(b, 40);
  int64_t v = -1;
  EXPECT_STATUS(cohort_trainer_get_checkpoint_value(b, "data.position", &v), COHORT_ERR_NOT_FOUND,
                "cohort_trainer_get_checkpoint_value: the trainer has no checkpoint value named 'data.position'");
  EXPECT_EQ(v, -1);
  ASSERT_EQ(cohort_trainer_load_checkpoint(b, path_.c_str()), COHORT_OK) << last();
  ASSERT_EQ(cohort_trainer_get_checkpoint_value(b, "data.position", &v), COHORT_OK) << last();
  EXPECT_EQ(v, 12);
  cohort_trainer_stats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  ASSERT_EQ(cohort_trainer_get_stats(b, &s), COHORT_OK);
  EXPECT_EQ(s.step, 3);
  std::vector<float> losses_b;
  for (int k = 3; k < 8; ++k) losses_b.push_back(step(b, k));
  EXPECT_EQ(std::memcmp(losses_a.data(), losses_b.data(), losses_a.size() * sizeof(float)), 0);
  EXPECT_EQ(weights(a), weights(b));
  cohort_trainer_destroy(a);
  cohort_trainer_destroy(b);
}

TEST_F(CapiCheckpoint, ErrorPaths) {
  Model m;
  cohort_trainer* t = make_trainer(m, 1);
  step(t, 0);
  const char* p = path_.c_str();
  EXPECT_STATUS(cohort_trainer_save_checkpoint(nullptr, p), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_save_checkpoint: trainer is NULL");
  EXPECT_STATUS(cohort_trainer_load_checkpoint(nullptr, p), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_load_checkpoint: trainer is NULL");
  EXPECT_STATUS(cohort_trainer_set_checkpoint_value(nullptr, "a", 1), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_set_checkpoint_value: trainer is NULL");
  EXPECT_STATUS(cohort_trainer_get_checkpoint_value(nullptr, "a", nullptr), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_get_checkpoint_value: trainer is NULL");
  EXPECT_STATUS(cohort_trainer_save_checkpoint(t, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_save_checkpoint: path is NULL");
  EXPECT_STATUS(cohort_trainer_load_checkpoint(t, ""), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_load_checkpoint: path is empty");
  EXPECT_STATUS(cohort_trainer_set_checkpoint_value(t, "", 1), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_set_checkpoint_value: name must be 1 to 256 characters");
  EXPECT_STATUS(cohort_trainer_get_checkpoint_value(t, nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_get_checkpoint_value: name is NULL");
  EXPECT_STATUS(cohort_trainer_get_checkpoint_value(t, "a", nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_get_checkpoint_value: value_out is NULL");

  const std::vector<float> before = weights(t);
  const std::string missing = dir_ + "/missing.ckpt";
  EXPECT_STATUS(cohort_trainer_load_checkpoint(t, missing.c_str()), COHORT_ERR_IO,
                "cohort_trainer_load_checkpoint: checkpoint '" + missing + "': open failed: No such file or directory");
  const std::string under_file = path_ + "/x.ckpt";
  ASSERT_EQ(cohort_trainer_save_checkpoint(t, p), COHORT_OK) << last();
  EXPECT_STATUS(cohort_trainer_save_checkpoint(t, under_file.c_str()), COHORT_ERR_IO,
                "cohort_trainer_save_checkpoint: checkpoint '" + under_file + "': open('" + under_file + ".tmp.");

  // Truncated: CORRUPT; the trainer and its values unchanged.
  ASSERT_EQ(cohort_trainer_set_checkpoint_value(t, "kept", 5), COHORT_OK);
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 1);
  EXPECT_STATUS(cohort_trainer_load_checkpoint(t, p), COHORT_ERR_CORRUPT,
                "cohort_trainer_load_checkpoint: checkpoint '" + path_ + "': truncated");
  int64_t v = 0;
  EXPECT_EQ(cohort_trainer_get_checkpoint_value(t, "kept", &v), COHORT_OK);
  EXPECT_EQ(v, 5);
  EXPECT_EQ(weights(t), before);

  // Another model: INVALID_ARGUMENT naming the parameter.
  Model wider(3);
  cohort_trainer* other = make_trainer(wider, 1);
  ASSERT_EQ(cohort_trainer_save_checkpoint(other, p), COHORT_OK) << last();
  EXPECT_STATUS(cohort_trainer_load_checkpoint(t, p), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_trainer_load_checkpoint: checkpoint '" + path_ +
                    "' is for another model: parameter 'w' has shape [3, 3] there, [2, 3] here");
  EXPECT_EQ(weights(t), before);
  cohort_trainer_destroy(other);
  cohort_trainer_destroy(t);
  EXPECT_STATUS(cohort_trainer_save_checkpoint(t, p), COHORT_ERR_INVALID_HANDLE,
                "cohort_trainer_save_checkpoint: trainer is not a live cohort_trainer");
}

}  // namespace
