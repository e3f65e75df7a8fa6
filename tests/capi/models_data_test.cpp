// Built-in models and datasets through the C ABI: every entry point's error paths (status and
// message, outputs untouched), the builders' graphs, batches from synthetic datasets written
// here (and from Debian's Fashion-MNIST when installed), and an MLP whose loss falls.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#include "tests/support/capi_expect.h"

namespace {

using ::cohort::test::last_error;
std::string last() { return last_error(); }

cohort_graph* const kUntouched = reinterpret_cast<cohort_graph*>(0x1);

TEST(CapiModels, MlpBuildsAndValidates) {
  cohort_graph* g = kUntouched;
  cohort_model_mlp_options o = cohort_model_mlp_options_default();
  int64_t hidden[2] = {32, 0};
  o.hidden = hidden;
  o.num_hidden = 2;
  EXPECT_STATUS(cohort_graph_create_mlp(&o, &g), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_graph_create_mlp: mlp: hidden[1] (0) must be in 1..2^30");
  o.hidden = nullptr;
  EXPECT_STATUS(cohort_graph_create_mlp(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->hidden is NULL with 2 entries");
  o.num_hidden = 65;
  EXPECT_STATUS(cohort_graph_create_mlp(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->num_hidden must be 0..64");
  o = cohort_model_mlp_options_default();
  o.activation = static_cast<cohort_activation>(9);
  EXPECT_STATUS(cohort_graph_create_mlp(&o, &g), COHORT_ERR_INVALID_ARGUMENT,
                "options->activation 9 is not a cohort_activation");
  o = cohort_model_mlp_options_default();
  o.size = 8;
  EXPECT_STATUS(cohort_graph_create_mlp(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->size is 8");
  EXPECT_STATUS(cohort_graph_create_mlp(nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_graph_create_mlp: graph_out is NULL");
  EXPECT_EQ(g, kUntouched);
  ASSERT_EQ(cohort_graph_create_mlp(nullptr, &g), COHORT_OK) << last();  // defaults: 784 -> 128 -> 10
  int32_t params = 0;
  int64_t elements = 0;
  ASSERT_EQ(cohort_graph_stats(g, nullptr, nullptr, &params, &elements), COHORT_OK);
  EXPECT_EQ(params, 4);
  EXPECT_EQ(elements, 784 * 128 + 128 + 128 * 10 + 10);
  int32_t id = -1;
  EXPECT_EQ(cohort_graph_find(g, "fc2.weight", &id), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(g), COHORT_OK);
}

TEST(CapiModels, CnnBuildsAndValidates) {
  cohort_graph* g = kUntouched;
  cohort_model_cnn_options o = cohort_model_cnn_options_default();
  int64_t widths[2] = {12, 24};
  o.widths = widths;
  o.num_stages = 2;
  EXPECT_STATUS(cohort_graph_create_cnn(&o, &g), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_graph_create_cnn: cnn: groups (8) must divide widths[0] (12)");
  o.num_stages = 0;
  EXPECT_STATUS(cohort_graph_create_cnn(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "cnn: widths has 0 stages");
  o.num_stages = 9;
  EXPECT_STATUS(cohort_graph_create_cnn(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->num_stages must be 0..8");
  o = cohort_model_cnn_options_default();
  o.size = 0;
  EXPECT_STATUS(cohort_graph_create_cnn(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->size is 0");
  EXPECT_STATUS(cohort_graph_create_cnn(nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT, "graph_out is NULL");
  EXPECT_EQ(g, kUntouched);
  ASSERT_EQ(cohort_graph_create_cnn(nullptr, &g), COHORT_OK) << last();
  int64_t elements = 0;
  ASSERT_EQ(cohort_graph_stats(g, nullptr, nullptr, nullptr, &elements), COHORT_OK);
  EXPECT_EQ(elements, 77754);
  int32_t logits = -1, rank = 0;
  int64_t shape[4] = {0};
  ASSERT_EQ(cohort_graph_find(g, "logits", &logits), COHORT_OK);
  ASSERT_EQ(cohort_graph_value_shape(g, logits, shape, 4, &rank, nullptr), COHORT_OK);
  EXPECT_EQ(rank, 2);
  EXPECT_EQ(shape[1], 10);
  cohort_graph_destroy(g);
}

TEST(CapiModels, GptBuildsAndValidates) {
  cohort_graph* g = kUntouched;
  cohort_model_gpt_options o = cohort_model_gpt_options_default();
  o.heads = 3;
  EXPECT_STATUS(cohort_graph_create_gpt(&o, &g), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_graph_create_gpt: gpt: heads (3) must divide width (256)");
  o = cohort_model_gpt_options_default();
  o.dropout = -0.5;
  EXPECT_STATUS(cohort_graph_create_gpt(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "gpt: dropout (-0.5) must be in [0, 1)");
  o = cohort_model_gpt_options_default();
  o.size = 16;
  EXPECT_STATUS(cohort_graph_create_gpt(&o, &g), COHORT_ERR_INVALID_ARGUMENT, "options->size is 16");
  EXPECT_STATUS(cohort_graph_create_gpt(nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT, "graph_out is NULL");
  EXPECT_EQ(g, kUntouched);
  ASSERT_EQ(cohort_graph_create_gpt(nullptr, &g), COHORT_OK) << last();
  int64_t elements = 0;
  int32_t params = 0;
  ASSERT_EQ(cohort_graph_stats(g, nullptr, nullptr, &params, &elements), COHORT_OK);
  EXPECT_EQ(elements, 3257856);
  EXPECT_EQ(params, 52);
  int32_t id = -1;
  EXPECT_EQ(cohort_graph_find(g, "h.3.mlp.c_proj.weight", &id), COHORT_OK);
  cohort_graph_destroy(g);
}

// dtype: bf16 parameters and activations; a caller compiled before the field (a smaller size)
// gets f32; a dtype the model does not take is named.
TEST(CapiModels, GptTakesBf16) {
  auto param_dtype = [](const cohort_model_gpt_options& o) {
    cohort_graph* g = nullptr;
    EXPECT_EQ(cohort_graph_create_gpt(&o, &g), COHORT_OK) << last();
    int32_t id = -1, rank = 0;
    int64_t shape[2] = {0, 0};
    cohort_dtype dtype = COHORT_I64;
    EXPECT_EQ(cohort_graph_find(g, "h.0.ln_1.weight", &id), COHORT_OK);
    EXPECT_EQ(cohort_graph_value_shape(g, id, shape, 2, &rank, &dtype), COHORT_OK);
    cohort_graph_destroy(g);
    return dtype;
  };
  cohort_model_gpt_options o = cohort_model_gpt_options_default();
  EXPECT_EQ(o.dtype, COHORT_F32);
  EXPECT_EQ(param_dtype(o), COHORT_F32);
  o.dtype = COHORT_BF16;
  EXPECT_EQ(param_dtype(o), COHORT_BF16);
  o.size = offsetof(cohort_model_gpt_options, dtype);  // the struct before the field
  EXPECT_EQ(param_dtype(o), COHORT_F32);
  o = cohort_model_gpt_options_default();
  o.dtype = COHORT_I32;
  cohort_graph* g = kUntouched;
  EXPECT_STATUS(cohort_graph_create_gpt(&o, &g), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_graph_create_gpt: options->dtype 2 is not COHORT_F32 or COHORT_BF16");
  EXPECT_EQ(g, kUntouched);
}

// ---- datasets ----

std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

class CapiData : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort_capi_data_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // 6 images of 2x2 (uncompressed IDX files; the reader takes plain and gzip files alike).
    std::vector<uint8_t> px(24), labels(6);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 10);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i);
    write_file(dir_ + "/train-images-idx3-ubyte", idx_bytes({6, 2, 2}, px));
    write_file(dir_ + "/train-labels-idx1-ubyte", idx_bytes({6}, labels));
    write_file(dir_ + "/t10k-images-idx3-ubyte", idx_bytes({6, 2, 2}, px));
    write_file(dir_ + "/t10k-labels-idx1-ubyte", idx_bytes({5}, {0, 1, 2, 3, 4}));
    std::string doc = "\tThe/at cat/nn sat/vbd ./.\n\n\tA/at dog/nn ran/vbd ./.\n";
    for (const char* name : {"ca01", "ca02", "cb01"}) write_file(dir_ + "/" + name, {doc.begin(), doc.end()});
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

TEST_F(CapiData, OpenErrors) {
  cohort_dataset* d = reinterpret_cast<cohort_dataset*>(0x1);
  const std::string missing = dir_ + "/none";
  EXPECT_STATUS(cohort_dataset_open_fashion_mnist(missing.c_str(), COHORT_SPLIT_TRAIN, &d), COHORT_ERR_IO,
                "cohort_dataset_open_fashion_mnist: cannot open '" + missing +
                    "/train-images-idx3-ubyte.gz': No such file or directory (Debian's package dataset-fashion-mnist");
  EXPECT_STATUS(cohort_dataset_open_fashion_mnist(dir_.c_str(), COHORT_SPLIT_VALIDATION, &d), COHORT_ERR_CORRUPT,
                "holds 6 images but '" + dir_ + "/t10k-labels-idx1-ubyte' holds 5 labels");
  EXPECT_STATUS(cohort_dataset_open_fashion_mnist(dir_.c_str(), static_cast<cohort_dataset_split>(5), &d),
                COHORT_ERR_INVALID_ARGUMENT, "split 5 is not a cohort_dataset_split");
  EXPECT_STATUS(cohort_dataset_open_fashion_mnist(dir_.c_str(), COHORT_SPLIT_TRAIN, nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "dataset_out is NULL");
  EXPECT_STATUS(cohort_dataset_open_brown(missing.c_str(), 0.1, COHORT_SPLIT_TRAIN, 4, &d), COHORT_ERR_IO,
                "cohort_dataset_open_brown: no Brown corpus documents (files ca01 .. cr09) in '" + missing + "'");
  EXPECT_STATUS(cohort_dataset_open_brown(dir_.c_str(), 1.5, COHORT_SPLIT_TRAIN, 4, &d), COHORT_ERR_INVALID_ARGUMENT,
                "brown: validation fraction (1.5) must be in [0, 1)");
  EXPECT_STATUS(cohort_dataset_open_brown(dir_.c_str(), 0.1, COHORT_SPLIT_TRAIN, 0, &d), COHORT_ERR_INVALID_ARGUMENT,
                "context must be 1..2^20, got 0");
  EXPECT_STATUS(cohort_dataset_open_brown(dir_.c_str(), 0.1, COHORT_SPLIT_TRAIN, 100, &d), COHORT_ERR_INVALID_ARGUMENT,
                "brown train has 75 tokens, too few for windows of context 100 (needs at least 200)");
  EXPECT_STATUS(cohort_dataset_open_brown(nullptr, 0.1, COHORT_SPLIT_TRAIN, 4, &d), COHORT_ERR_INVALID_ARGUMENT,
                "directory is NULL");
  EXPECT_EQ(d, reinterpret_cast<cohort_dataset*>(0x1));
  int64_t n = -1;
  EXPECT_STATUS(cohort_dataset_size(nullptr, &n), COHORT_ERR_INVALID_HANDLE, "cohort_dataset_size: dataset is NULL");
  EXPECT_EQ(cohort_dataset_destroy(nullptr), COHORT_OK);
  ASSERT_EQ(cohort_dataset_open_fashion_mnist(dir_.c_str(), COHORT_SPLIT_TRAIN, &d), COHORT_OK) << last();
  EXPECT_STATUS(cohort_dataset_size(d, nullptr), COHORT_ERR_INVALID_ARGUMENT, "examples_out is NULL");
  ASSERT_EQ(cohort_dataset_size(d, &n), COHORT_OK);
  EXPECT_EQ(n, 6);
  EXPECT_EQ(cohort_dataset_destroy(d), COHORT_OK);
  EXPECT_STATUS(cohort_dataset_size(d, &n), COHORT_ERR_INVALID_HANDLE, "dataset is not a live cohort_dataset");
  EXPECT_STATUS(cohort_dataset_destroy(d), COHORT_ERR_INVALID_HANDLE, "cohort_dataset_destroy: dataset is not a live");
}

TEST_F(CapiData, SamplerErrorsAndResume) {
  cohort_dataset* d = nullptr;
  ASSERT_EQ(cohort_dataset_open_fashion_mnist(dir_.c_str(), COHORT_SPLIT_TRAIN, &d), COHORT_OK) << last();
  cohort_sampler* s = reinterpret_cast<cohort_sampler*>(0x1);
  cohort_sampler_options o = cohort_sampler_options_default();
  o.world = 7;
  EXPECT_STATUS(cohort_sampler_create(d, &o, &s), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_sampler_create: sampler: 6 examples cannot give each of 7 ranks at least one");
  o.world = 2;
  o.rank = 2;
  EXPECT_STATUS(cohort_sampler_create(d, &o, &s), COHORT_ERR_INVALID_ARGUMENT, "sampler: rank (2) must be in 0..1");
  o = cohort_sampler_options_default();
  o.size = 1;
  EXPECT_STATUS(cohort_sampler_create(d, &o, &s), COHORT_ERR_INVALID_ARGUMENT, "options->size is 1");
  EXPECT_STATUS(cohort_sampler_create(nullptr, nullptr, &s), COHORT_ERR_INVALID_HANDLE, "dataset is NULL");
  EXPECT_STATUS(cohort_sampler_create(d, nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT, "sampler_out is NULL");
  EXPECT_EQ(s, reinterpret_cast<cohort_sampler*>(0x1));
  o = cohort_sampler_options_default();
  o.seed = 11;
  ASSERT_EQ(cohort_sampler_create(d, &o, &s), COHORT_OK) << last();
  EXPECT_STATUS(cohort_sampler_set_position(s, 0, 6), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_sampler_set_position: sampler: index (6) must be in 0..5");
  EXPECT_STATUS(cohort_sampler_set_position(s, -2, 0), COHORT_ERR_INVALID_ARGUMENT, "sampler: epoch (-2) must be >= 0");
  EXPECT_STATUS(cohort_sampler_get_position(nullptr, nullptr, nullptr), COHORT_ERR_INVALID_HANDLE,
                "cohort_sampler_get_position: sampler is NULL");
  EXPECT_STATUS(cohort_sampler_set_position(reinterpret_cast<cohort_sampler*>(d), 0, 0), COHORT_ERR_INVALID_HANDLE,
                "sampler is a cohort_dataset, expected a cohort_sampler");

  // Resume: labels equal example indices here, so batches show the order.
  float x[4 * 4];
  int32_t y[4];
  int64_t xs[2] = {4, 4}, ys[1] = {4};
  cohort_tensor_ref out[2] = {{"x", COHORT_F32, 2, xs, x, sizeof(x)}, {"y", COHORT_I32, 1, ys, y, sizeof(y)}};
  ASSERT_EQ(cohort_dataset_next_batch(d, s, out, 2), COHORT_OK) << last();
  int64_t epoch = -1, index = -1;
  ASSERT_EQ(cohort_sampler_get_position(s, &epoch, &index), COHORT_OK);
  EXPECT_EQ(epoch, 0);
  EXPECT_EQ(index, 4);
  ASSERT_EQ(cohort_dataset_next_batch(d, s, out, 2), COHORT_OK) << last();  // runs into epoch 1
  std::vector<int32_t> after(y, y + 4);
  EXPECT_FLOAT_EQ(x[0], static_cast<float>(y[0] * 40) / 255.0f);
  cohort_sampler* s2 = nullptr;
  ASSERT_EQ(cohort_sampler_create(d, &o, &s2), COHORT_OK);
  ASSERT_EQ(cohort_sampler_set_position(s2, epoch, index), COHORT_OK);
  ASSERT_EQ(cohort_dataset_next_batch(d, s2, out, 2), COHORT_OK) << last();
  EXPECT_EQ(std::vector<int32_t>(y, y + 4), after);
  EXPECT_EQ(cohort_sampler_destroy(s2), COHORT_OK);
  EXPECT_EQ(cohort_sampler_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(cohort_sampler_destroy(s), COHORT_OK);
  EXPECT_STATUS(cohort_sampler_destroy(s), COHORT_ERR_INVALID_HANDLE, "sampler is not a live cohort_sampler");
  cohort_dataset_destroy(d);
}

TEST_F(CapiData, NextBatchErrorsChangeNothing) {
  cohort_dataset* d = nullptr;
  cohort_dataset* text = nullptr;
  cohort_sampler* s = nullptr;
  ASSERT_EQ(cohort_dataset_open_fashion_mnist(dir_.c_str(), COHORT_SPLIT_TRAIN, &d), COHORT_OK) << last();
  ASSERT_EQ(cohort_dataset_open_brown(dir_.c_str(), 0.0, COHORT_SPLIT_TRAIN, 4, &text), COHORT_OK) << last();
  ASSERT_EQ(cohort_sampler_create(d, nullptr, &s), COHORT_OK);
  float x[2 * 4] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int32_t y[2] = {-1, -1};
  int64_t xs[4] = {2, 1, 2, 2}, bad_xs[2] = {2, 3}, ys[1] = {2}, ys3[1] = {3};
  cohort_tensor_ref out[2] = {{nullptr, COHORT_F32, 4, xs, x, sizeof(x)}, {"y", COHORT_I32, 1, ys, y, sizeof(y)}};
  EXPECT_STATUS(cohort_dataset_next_batch(d, s, out, 1), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_dataset_next_batch: num_outputs must be 2 (features, labels), got 1");
  EXPECT_STATUS(cohort_dataset_next_batch(d, s, nullptr, 2), COHORT_ERR_INVALID_ARGUMENT, "outputs is NULL");
  out[1].dtype = COHORT_F32;
  EXPECT_STATUS(cohort_dataset_next_batch(d, s, out, 2), COHORT_ERR_SHAPE_MISMATCH,
                "outputs[1] has dtype f32, fashion-mnist train gives i32");
  out[1].dtype = COHORT_I32;
  out[1].shape = ys3;
  EXPECT_STATUS(cohort_dataset_next_batch(d, s, out, 2), COHORT_ERR_INVALID_ARGUMENT,
                "outputs[1] 'y': buffer has 8 bytes, but shape [3] of i32 needs 12");
  out[1].shape = ys;
  out[0].shape = bad_xs;
  out[0].rank = 2;
  out[0].bytes = 6 * sizeof(float);
  EXPECT_STATUS(cohort_dataset_next_batch(d, s, out, 2), COHORT_ERR_SHAPE_MISMATCH,
                "outputs[0] has shape [2, 3], but 2 examples of fashion-mnist train have shape [1, 2, 2] each");
  out[0].shape = xs;
  out[0].rank = 4;
  out[0].bytes = sizeof(x);
  EXPECT_STATUS(cohort_dataset_next_batch(text, s, out, 2), COHORT_ERR_INVALID_ARGUMENT,
                "sampler was created for 6 examples, but brown train has");
  EXPECT_STATUS(cohort_dataset_next_batch(d, nullptr, out, 2), COHORT_ERR_INVALID_HANDLE, "sampler is NULL");
  EXPECT_EQ(x[0], -1.0f);  // nothing written
  EXPECT_EQ(y[0], -1);
  int64_t epoch = -1, index = -1;
  ASSERT_EQ(cohort_sampler_get_position(s, &epoch, &index), COHORT_OK);
  EXPECT_EQ(index, 0);  // and the sampler did not move
  ASSERT_EQ(cohort_dataset_next_batch(d, s, out, 2), COHORT_OK) << last();
  EXPECT_GE(y[0], 0);

  // Text: tokens and targets are the same window shifted by one byte.
  cohort_sampler* ts = nullptr;
  ASSERT_EQ(cohort_sampler_create(text, nullptr, &ts), COHORT_OK);
  int32_t tok[3 * 4], tgt[3 * 4];
  int64_t ts_shape[2] = {3, 4};
  cohort_tensor_ref tout[2] = {{"tokens", COHORT_I32, 2, ts_shape, tok, sizeof(tok)},
                               {"targets", COHORT_I32, 2, ts_shape, tgt, sizeof(tgt)}};
  ASSERT_EQ(cohort_dataset_next_batch(text, ts, tout, 2), COHORT_OK) << last();
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 3; ++t) EXPECT_EQ(tgt[b * 4 + t], tok[b * 4 + t + 1]);
  cohort_sampler_destroy(ts);
  cohort_sampler_destroy(s);
  cohort_dataset_destroy(text);
  cohort_dataset_destroy(d);
}

TEST(CapiModelsData, NullHandles) {
  int64_t n = 0;
  cohort_sampler* s = nullptr;
  cohort_tensor_ref out[2] = {};
  EXPECT_STATUS(cohort_dataset_size(nullptr, &n), COHORT_ERR_INVALID_HANDLE, "cohort_dataset_size: dataset is NULL");
  EXPECT_STATUS(cohort_sampler_create(nullptr, nullptr, &s), COHORT_ERR_INVALID_HANDLE,
                "cohort_sampler_create: dataset is NULL");
  EXPECT_STATUS(cohort_sampler_get_position(nullptr, &n, &n), COHORT_ERR_INVALID_HANDLE,
                "cohort_sampler_get_position: sampler is NULL");
  EXPECT_STATUS(cohort_sampler_set_position(nullptr, 0, 0), COHORT_ERR_INVALID_HANDLE,
                "cohort_sampler_set_position: sampler is NULL");
  EXPECT_STATUS(cohort_dataset_next_batch(nullptr, nullptr, out, 2), COHORT_ERR_INVALID_HANDLE,
                "cohort_dataset_next_batch: dataset is NULL");
  EXPECT_EQ(cohort_dataset_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(cohort_sampler_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(s, nullptr);
}

TEST(CapiDataReal, FashionMnistFromDebian) {
  struct stat st;
  if (::stat("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", &st) != 0)
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  cohort_dataset* d = nullptr;
  ASSERT_EQ(cohort_dataset_open_fashion_mnist(nullptr, COHORT_SPLIT_VALIDATION, &d), COHORT_OK) << last();
  int64_t n = 0;
  ASSERT_EQ(cohort_dataset_size(d, &n), COHORT_OK);
  EXPECT_EQ(n, 10000);
  cohort_dataset_destroy(d);
}

// An AdamW (lr 0.01) trainer of graph g; g is destroyed (the trainer keeps what it needs). Null
// after a failed expectation.
cohort_trainer* adamw_trainer(cohort_graph* g) {
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_ADAMW;
  oo.lr = 0.01;
  cohort_optimizer* opt = nullptr;
  EXPECT_EQ(cohort_optimizer_create(&oo, &opt), COHORT_OK);
  cohort_trainer* t = nullptr;
  EXPECT_EQ(cohort_trainer_create(g, opt, nullptr, &t), COHORT_OK) << last();
  cohort_optimizer_destroy(opt);
  cohort_graph_destroy(g);
  return t;
}

// recompute_gelu: the MLP's backward keeps h instead of gelu(h) and gelu'(h): the same losses and
// parameters (to rounding: gelu is recomputed in the same arithmetic) with less activation memory;
// an older caller's size gets 0.
TEST(CapiModels, GptRecomputeGeluKeepsLessForTheSameSteps) {
  struct Run {
    float loss[3];
    std::vector<float> wte;
    int64_t peak;
  };
  auto run = [](int32_t recompute, size_t size) {
    cohort_model_gpt_options o = cohort_model_gpt_options_default();
    o.batch = 2, o.context = 16, o.layers = 2, o.width = 32, o.heads = 2;
    o.recompute_gelu = recompute;
    o.size = size;
    cohort_graph* g = nullptr;
    EXPECT_EQ(cohort_graph_create_gpt(&o, &g), COHORT_OK) << last();
    cohort_trainer* t = adamw_trainer(g);
    int32_t tokens[32], targets[32];
    for (int i = 0; i < 32; ++i) tokens[i] = (i * 37) % 256, targets[i] = (i * 37 + 11) % 256;
    int64_t shape[2] = {2, 16};
    cohort_tensor_ref in[2] = {{"tokens", COHORT_I32, 2, shape, tokens, sizeof(tokens)},
                               {"targets", COHORT_I32, 2, shape, targets, sizeof(targets)}};
    Run r;
    for (float& l : r.loss) EXPECT_EQ(cohort_trainer_step(t, in, 2, &l), COHORT_OK) << last();
    r.wte.assign(256 * 32, 0.0f);
    int64_t ws[2] = {256, 32};
    cohort_tensor_ref w = {"wte.weight", COHORT_F32, 2, ws, r.wte.data(), r.wte.size() * sizeof(float)};
    EXPECT_EQ(cohort_trainer_get_parameter(t, &w), COHORT_OK) << last();
    cohort_trainer_stats st;
    std::memset(&st, 0, sizeof(st));
    st.size = sizeof(st);
    EXPECT_EQ(cohort_trainer_get_stats(t, &st), COHORT_OK);
    r.peak = st.peak_activation_bytes;
    cohort_trainer_destroy(t);
    return r;
  };
  const Run keep = run(0, sizeof(cohort_model_gpt_options)), lean = run(1, sizeof(cohort_model_gpt_options));
  const Run old = run(1, offsetof(cohort_model_gpt_options, recompute_gelu));  // the field unseen: kept
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(lean.loss[i], keep.loss[i], 1e-5f * std::fabs(keep.loss[i])) << "step " << i;
    EXPECT_EQ(old.loss[i], keep.loss[i]) << "step " << i;
  }
  float worst = 0;
  for (size_t i = 0; i < keep.wte.size(); ++i) worst = std::max(worst, std::fabs(lean.wte[i] - keep.wte[i]));
  EXPECT_LT(worst, 1e-5f);
  EXPECT_LT(lean.peak, keep.peak);
  EXPECT_EQ(old.peak, keep.peak);
}

// A short training run through the C API: the MLP builder on a synthetic two-class problem.
TEST(CapiModels, MlpTrainsOnSyntheticData) {
  cohort_model_mlp_options o = cohort_model_mlp_options_default();
  int64_t hidden[1] = {16};
  o.batch = 32, o.in_features = 8, o.hidden = hidden, o.num_hidden = 1, o.classes = 3;
  o.activation = COHORT_ACTIVATION_TANH;
  cohort_graph* g = nullptr;
  ASSERT_EQ(cohort_graph_create_mlp(&o, &g), COHORT_OK) << last();
  cohort_trainer* t = adamw_trainer(g);
  ASSERT_NE(t, nullptr);
  float x[32 * 8];
  int32_t y[32];
  for (int n = 0; n < 32; ++n) {  // class c: features centred on a class-specific pattern
    y[n] = n % 3;
    for (int i = 0; i < 8; ++i) x[n * 8 + i] = std::cos(1.7f * static_cast<float>(y[n] * 8 + i)) + 0.1f * (n % 5);
  }
  int64_t xs[2] = {32, 8}, ys[1] = {32};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x, sizeof(x)}, {"y", COHORT_I32, 1, ys, y, sizeof(y)}};
  float first = 0, loss = 0;
  ASSERT_EQ(cohort_trainer_step(t, in, 2, &first), COHORT_OK) << last();
  for (int i = 0; i < 40; ++i) ASSERT_EQ(cohort_trainer_step(t, in, 2, &loss), COHORT_OK) << last();
  EXPECT_NEAR(first, std::log(3.0f), 0.6f);
  EXPECT_LT(loss, 0.2f * first) << "first " << first << " last " << loss;
  cohort_trainer_destroy(t);
}

}  // namespace
