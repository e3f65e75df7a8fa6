// Error paths of every C entry point: the status and the message, and that nothing changed.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "tests/support/capi_expect.h"

namespace {

using ::cohort::test::last_error;
std::string last() { return last_error(); }

struct Model {
  cohort_graph* g = nullptr;
  int32_t x = -1, y = -1, logits = -1, loss = -1;
  Model() {
    EXPECT_EQ(cohort_graph_create(&g), COHORT_OK);
    int64_t xs[2] = {4, 3}, ys[1] = {4}, ws[2] = {2, 3}, bs[1] = {2};
    cohort_initializer init = cohort_initializer_default();
    init.kind = COHORT_INIT_UNIFORM;
    init.a = -0.5;
    init.b = 0.5;
    int32_t w, b;
    EXPECT_EQ(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "w", COHORT_F32, ws, 2, &init, &w), COHORT_OK);
    EXPECT_EQ(cohort_graph_add_parameter(g, "b", COHORT_F32, bs, 1, nullptr, &b), COHORT_OK);
    int32_t in[3] = {x, w, b};
    EXPECT_EQ(cohort_graph_add_op(g, "linear", "fc", in, 3, nullptr, &logits, 1, nullptr), COHORT_OK) << last();
    int32_t ce[2] = {logits, y};
    EXPECT_EQ(cohort_graph_add_op(g, "cross_entropy", "ce", ce, 2, nullptr, &loss, 1, nullptr), COHORT_OK) << last();
    EXPECT_EQ(cohort_graph_mark_output(g, logits), COHORT_OK);
    EXPECT_EQ(cohort_graph_set_loss(g, loss), COHORT_OK);
  }
  ~Model() { cohort_graph_destroy(g); }
};

cohort_trainer* make_trainer(const Model& m) {
  cohort_optimizer_options o = cohort_optimizer_options_default();
  cohort_optimizer* opt = nullptr;
  EXPECT_EQ(cohort_optimizer_create(&o, &opt), COHORT_OK);
  cohort_trainer* t = nullptr;
  EXPECT_EQ(cohort_trainer_create(m.g, opt, nullptr, &t), COHORT_OK) << last();
  cohort_optimizer_destroy(opt);
  return t;
}

TEST(CapiBasics, VersionAndNames) {
  EXPECT_EQ(cohort_abi_version(), COHORT_ABI_VERSION);
  EXPECT_STREQ(cohort_version_string(), "0.2.0");
  EXPECT_STREQ(cohort_status_name(COHORT_ERR_SHAPE_MISMATCH), "shape mismatch");
  EXPECT_STREQ(cohort_status_name(static_cast<cohort_status>(999)), "unknown status");
  EXPECT_EQ(cohort_dtype_size(COHORT_BF16), 2u);
  EXPECT_EQ(cohort_dtype_size(static_cast<cohort_dtype>(42)), 0u);
}

TEST(CapiBasics, GlobalSettings) {
  EXPECT_STATUS(cohort_set_log_level(7), COHORT_ERR_INVALID_ARGUMENT, "cohort_set_log_level: level must be 0..3, got 7");
  EXPECT_STATUS(cohort_set_num_threads(0), COHORT_ERR_INVALID_ARGUMENT, "cohort_set_num_threads: n must be >= 1");
  EXPECT_EQ(cohort_set_log_level(1), COHORT_OK);
  EXPECT_STREQ(cohort_last_error(), "");  // success clears the message
}

TEST(CapiAttrs, Errors) {
  EXPECT_STATUS(cohort_attrs_create(nullptr), COHORT_ERR_INVALID_ARGUMENT, "cohort_attrs_create: attrs_out is NULL");
  EXPECT_EQ(cohort_attrs_destroy(nullptr), COHORT_OK);
  EXPECT_STATUS(cohort_attrs_set_int(nullptr, "k", 1), COHORT_ERR_INVALID_HANDLE, "cohort_attrs_set_int: attrs is NULL");
  cohort_attrs* a = nullptr;
  ASSERT_EQ(cohort_attrs_create(&a), COHORT_OK);
  EXPECT_STATUS(cohort_attrs_set_float(a, nullptr, 1.0), COHORT_ERR_INVALID_ARGUMENT, "name is NULL");
  EXPECT_STATUS(cohort_attrs_set_string(a, "s", nullptr), COHORT_ERR_INVALID_ARGUMENT, "value is NULL");
  EXPECT_STATUS(cohort_attrs_set_ints(a, "p", nullptr, 2), COHORT_ERR_INVALID_ARGUMENT, "values is NULL with count 2");
  EXPECT_STATUS(cohort_attrs_set_floats(a, "p", nullptr, -1), COHORT_ERR_INVALID_ARGUMENT, "count must be 0..1024");
  EXPECT_EQ(cohort_attrs_destroy(a), COHORT_OK);
  EXPECT_STATUS(cohort_attrs_set_int(a, "k", 1), COHORT_ERR_INVALID_HANDLE, "not a live cohort_attrs");
  EXPECT_STATUS(cohort_attrs_destroy(a), COHORT_ERR_INVALID_HANDLE, "cohort_attrs_destroy: attrs is not a live");
}

TEST(CapiGraph, InputAndParameterErrors) {
  cohort_graph* g = nullptr;
  EXPECT_STATUS(cohort_graph_create(nullptr), COHORT_ERR_INVALID_ARGUMENT, "graph_out is NULL");
  ASSERT_EQ(cohort_graph_create(&g), COHORT_OK);
  int64_t s[2] = {4, 3}, zero[2] = {4, 0};
  int32_t id = -7;
  EXPECT_STATUS(cohort_graph_add_input(g, "x", static_cast<cohort_dtype>(9), s, 2, &id), COHORT_ERR_INVALID_ARGUMENT,
                "input 'x' has unknown dtype 9");
  EXPECT_STATUS(cohort_graph_add_input(g, "x", COHORT_F32, s, 9, &id), COHORT_ERR_INVALID_ARGUMENT, "rank must be 0..8");
  EXPECT_STATUS(cohort_graph_add_input(g, "x", COHORT_F32, zero, 2, &id), COHORT_ERR_INVALID_ARGUMENT,
                "shape [4, 0] has an extent outside");
  EXPECT_STATUS(cohort_graph_add_input(g, "", COHORT_F32, s, 2, &id), COHORT_ERR_INVALID_ARGUMENT,
                "name must be 1 to 256 characters");
  EXPECT_EQ(id, -7);  // outputs untouched on failure
  ASSERT_EQ(cohort_graph_add_input(g, "x", COHORT_F32, s, 2, &id), COHORT_OK);
  EXPECT_STATUS(cohort_graph_add_input(g, "x", COHORT_F32, s, 2, &id), COHORT_ERR_INVALID_ARGUMENT,
                "the name 'x' is already used");
  EXPECT_STATUS(cohort_graph_add_parameter(g, "p", COHORT_I32, s, 2, nullptr, &id), COHORT_ERR_SHAPE_MISMATCH,
                "parameter 'p': dtype i32 is not a float type");
  cohort_initializer bad = cohort_initializer_default();
  bad.kind = static_cast<cohort_init_kind>(77);
  EXPECT_STATUS(cohort_graph_add_parameter(g, "p", COHORT_F32, s, 2, &bad, &id), COHORT_ERR_INVALID_ARGUMENT,
                "init->kind 77 is not a cohort_init_kind");
  bad = cohort_initializer_default();
  bad.size = 4;
  EXPECT_STATUS(cohort_graph_add_parameter(g, "p", COHORT_F32, s, 2, &bad, &id), COHORT_ERR_INVALID_ARGUMENT,
                "init->size is 4");
  EXPECT_EQ(cohort_graph_destroy(g), COHORT_OK);
  EXPECT_STATUS(cohort_graph_add_input(g, "y", COHORT_F32, s, 2, &id), COHORT_ERR_INVALID_HANDLE,
                "cohort_graph_add_input: graph is not a live cohort_graph");
}

TEST(CapiGraph, AddOpErrorsLeaveGraphUnchanged) {
  Model m;
  int32_t nodes_before = 0, nodes_after = 0;
  ASSERT_EQ(cohort_graph_stats(m.g, nullptr, &nodes_before, nullptr, nullptr), COHORT_OK);
  int32_t out = -1;
  EXPECT_STATUS(cohort_graph_add_op(m.g, "nope", "n", &m.x, 1, nullptr, &out, 1, nullptr), COHORT_ERR_NOT_FOUND,
                "cohort_graph_add_op: unknown operator 'nope'");
  int32_t mm[2] = {m.x, m.x};  // [4, 3] x [4, 3]
  EXPECT_STATUS(cohort_graph_add_op(m.g, "matmul", "bad_mm", mm, 2, nullptr, &out, 1, nullptr),
                COHORT_ERR_SHAPE_MISMATCH, "cohort_graph_add_op: matmul 'bad_mm': input 1 has shape [4, 3]");
  int32_t ghost = 999;
  EXPECT_STATUS(cohort_graph_add_op(m.g, "relu", "r", &ghost, 1, nullptr, &out, 1, nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "relu 'r': input 0 (x) refers to value 999, which does not exist");
  EXPECT_STATUS(cohort_graph_add_op(m.g, "relu", "r", &m.x, 1, nullptr, nullptr, 2, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "outputs_out is NULL with max_outputs 2");
  cohort_attrs* a = nullptr;
  ASSERT_EQ(cohort_attrs_create(&a), COHORT_OK);
  ASSERT_EQ(cohort_attrs_set_string(a, "factor", "big"), COHORT_OK);
  EXPECT_STATUS(cohort_graph_add_op(m.g, "scale", "s", &m.x, 1, a, &out, 1, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "scale 's': attribute 'factor' is string, expected float");
  ASSERT_EQ(cohort_attrs_set_int(a, "bogus", 1), COHORT_OK);
  EXPECT_STATUS(cohort_graph_add_op(m.g, "relu", "r2", &m.x, 1, a, &out, 1, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "relu 'r2': unknown attribute");
  cohort_attrs_destroy(a);
  EXPECT_STATUS(cohort_graph_add_op(m.g, "relu", "fc", &m.x, 1, nullptr, &out, 1, nullptr), COHORT_ERR_INVALID_ARGUMENT,
                "relu 'fc': another node already has this name");
  ASSERT_EQ(cohort_graph_stats(m.g, nullptr, &nodes_after, nullptr, nullptr), COHORT_OK);
  EXPECT_EQ(nodes_before, nodes_after);
  EXPECT_EQ(out, -1);
}

TEST(CapiGraph, OutputsLossLookupAndFiles) {
  Model m;
  EXPECT_STATUS(cohort_graph_mark_output(m.g, 1234), COHORT_ERR_INVALID_ARGUMENT, "output refers to value 1234");
  EXPECT_STATUS(cohort_graph_set_loss(m.g, m.logits), COHORT_ERR_SHAPE_MISMATCH, "loss 'fc' [4, 2] f32 must be a float scalar");
  int32_t id = -1;
  EXPECT_STATUS(cohort_graph_find(m.g, "nothing", &id), COHORT_ERR_NOT_FOUND, "the graph has no value named 'nothing'");
  ASSERT_EQ(cohort_graph_find(m.g, "fc", &id), COHORT_OK);
  EXPECT_EQ(id, m.logits);
  int64_t shape[4];
  int32_t rank = 0;
  cohort_dtype dt;
  ASSERT_EQ(cohort_graph_value_shape(m.g, m.logits, shape, 4, &rank, &dt), COHORT_OK);
  EXPECT_EQ(rank, 2);
  EXPECT_EQ(shape[1], 2);
  EXPECT_STATUS(cohort_graph_value_shape(m.g, m.logits, nullptr, 4, &rank, &dt), COHORT_ERR_INVALID_ARGUMENT,
                "shape_out is NULL");
  EXPECT_STATUS(cohort_graph_save(m.g, "/nonexistent-dir/g.cohort"), COHORT_ERR_IO, "/nonexistent-dir/g.cohort");
  cohort_graph* loaded = nullptr;
  EXPECT_STATUS(cohort_graph_load("/nonexistent-dir/g.cohort", &loaded), COHORT_ERR_IO, "/nonexistent-dir/g.cohort");
  std::string junk = ::testing::TempDir() + "/junk.cohort";
  std::ofstream(junk) << "this is not a graph file at all, not even close";
  EXPECT_STATUS(cohort_graph_load(junk.c_str(), &loaded), COHORT_ERR_CORRUPT, "junk.cohort");
  EXPECT_EQ(loaded, nullptr);
  std::string good = ::testing::TempDir() + "/good.cohort";
  ASSERT_EQ(cohort_graph_save(m.g, good.c_str()), COHORT_OK) << last();
  ASSERT_EQ(cohort_graph_load(good.c_str(), &loaded), COHORT_OK) << last();
  int32_t n1 = 0, n2 = 0;
  cohort_graph_stats(m.g, nullptr, &n1, nullptr, nullptr);
  cohort_graph_stats(loaded, nullptr, &n2, nullptr, nullptr);
  EXPECT_EQ(n1, n2);
  cohort_graph_destroy(loaded);
  std::remove(junk.c_str());
  std::remove(good.c_str());
}

// Issue #25, item 7: a graph file with one changed byte, or cut short anywhere, never loads as
// another model: cohort_graph_load refuses it with CORRUPT and creates nothing.
TEST(CapiGraph, ChangedOrTruncatedFileIsCorrupt) {
  Model m;
  const std::string good = ::testing::TempDir() + "/flip_good.cohort", bad = ::testing::TempDir() + "/flip_bad.cohort";
  ASSERT_EQ(cohort_graph_save(m.g, good.c_str()), COHORT_OK) << last();
  std::ifstream in(good, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  auto expect_refused = [&](const std::vector<char>& content, const std::string& what) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc).write(content.data(), static_cast<std::streamsize>(content.size()));
    SCOPED_TRACE(what);
    cohort_graph* loaded = nullptr;
    EXPECT_STATUS(cohort_graph_load(bad.c_str(), &loaded), COHORT_ERR_CORRUPT, "flip_bad.cohort");
    EXPECT_EQ(loaded, nullptr);
    cohort_graph_destroy(loaded);
  };
  for (size_t pos = 0; pos < bytes.size(); ++pos)
    for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
      std::vector<char> changed = bytes;
      changed[pos] = static_cast<char>(changed[pos] ^ mask);
      expect_refused(changed, "byte " + std::to_string(pos) + " xor " + std::to_string(mask));
    }
  for (size_t len = 0; len < bytes.size(); ++len)
    expect_refused(std::vector<char>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len)),
                   "cut to " + std::to_string(len) + " bytes");
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(CapiGraph, OpList) {
  size_t need = 0;
  char tiny[4];
  EXPECT_STATUS(cohort_op_list(tiny, sizeof tiny, &need), COHORT_ERR_INVALID_ARGUMENT, "buf holds 4 bytes");
  ASSERT_GT(need, 4u);
  std::vector<char> buf(need);
  ASSERT_EQ(cohort_op_list(buf.data(), buf.size(), nullptr), COHORT_OK);
  std::string list(buf.data());
  EXPECT_NE(list.find("linear"), std::string::npos);
  EXPECT_EQ(list.find("relu_grad"), std::string::npos);  // internal ops are not listed
}

TEST(CapiOptimizer, Errors) {
  cohort_optimizer* o = nullptr;
  EXPECT_STATUS(cohort_optimizer_create(nullptr, &o), COHORT_ERR_INVALID_ARGUMENT, "options is NULL");
  cohort_optimizer_options opts = cohort_optimizer_options_default();
  opts.lr = -1;
  EXPECT_STATUS(cohort_optimizer_create(&opts, &o), COHORT_ERR_INVALID_ARGUMENT, "lr");
  opts = cohort_optimizer_options_default();
  opts.kind = static_cast<cohort_optimizer_kind>(5);
  EXPECT_STATUS(cohort_optimizer_create(&opts, &o), COHORT_ERR_INVALID_ARGUMENT, "options->kind 5");
  opts = cohort_optimizer_options_default();
  opts.size = 8;
  EXPECT_STATUS(cohort_optimizer_create(&opts, &o), COHORT_ERR_INVALID_ARGUMENT, "options->size is 8");
  EXPECT_EQ(o, nullptr);
  EXPECT_EQ(cohort_optimizer_destroy(nullptr), COHORT_OK);
}

TEST(CapiTrainer, CreateErrors) {
  Model m;
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  cohort_optimizer* opt = nullptr;
  ASSERT_EQ(cohort_optimizer_create(&oo, &opt), COHORT_OK);
  cohort_trainer* t = nullptr;
  EXPECT_STATUS(cohort_trainer_create(nullptr, opt, nullptr, &t), COHORT_ERR_INVALID_HANDLE, "graph is NULL");
  EXPECT_STATUS(cohort_trainer_create(m.g, nullptr, nullptr, &t), COHORT_ERR_INVALID_HANDLE, "optimizer is NULL");
  EXPECT_STATUS(cohort_trainer_create(reinterpret_cast<cohort_graph*>(opt), opt, nullptr, &t),
                COHORT_ERR_INVALID_HANDLE, "graph is a cohort_optimizer, expected a cohort_graph");
  cohort_graph* empty = nullptr;
  ASSERT_EQ(cohort_graph_create(&empty), COHORT_OK);
  EXPECT_STATUS(cohort_trainer_create(empty, opt, nullptr, &t), COHORT_ERR_INVALID_STATE, "the graph has no loss");
  cohort_trainer_options to = cohort_trainer_options_default();
  to.num_threads = -2;
  EXPECT_STATUS(cohort_trainer_create(m.g, opt, &to, &t), COHORT_ERR_INVALID_ARGUMENT, "num_threads must be >= 0");
  to = cohort_trainer_options_default();
  to.device = 7;
  EXPECT_STATUS(cohort_trainer_create(m.g, opt, &to, &t), COHORT_ERR_INVALID_ARGUMENT,
                "options->device = 7 is not a cohort_device");
  EXPECT_EQ(t, nullptr);
  cohort_graph_destroy(empty);
  cohort_optimizer_destroy(opt);
}

// The device option: the host always works; the CUDA device either works or is refused with the
// reason cohort_device_usable gives (every machine without a GPU, and builds without CUDA).
TEST(CapiTrainer, DeviceIsUsableOrRefusedWithItsReason) {
  int32_t usable = -1;
  char why[256] = "unset";
  ASSERT_EQ(cohort_device_usable(COHORT_DEVICE_CPU, &usable, why, sizeof(why)), COHORT_OK);
  EXPECT_EQ(usable, 1);
  EXPECT_STREQ(why, "");
  EXPECT_STATUS(cohort_device_usable(static_cast<cohort_device>(3), &usable, nullptr, 0),
                COHORT_ERR_INVALID_ARGUMENT, "device = 3 is not a cohort_device");
  EXPECT_STATUS(cohort_device_usable(COHORT_DEVICE_CPU, nullptr, nullptr, 0), COHORT_ERR_INVALID_ARGUMENT,
                "usable_out is NULL");
  char tiny[4];
  ASSERT_EQ(cohort_device_usable(COHORT_DEVICE_CUDA, &usable, tiny, sizeof(tiny)), COHORT_OK);
  EXPECT_LE(std::string(tiny).size(), 3u);  // cut, NUL-terminated
  ASSERT_EQ(cohort_device_usable(COHORT_DEVICE_CUDA, &usable, why, sizeof(why)), COHORT_OK);
  EXPECT_EQ(usable == 1, std::string(why).empty()) << why;

  Model m;
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  cohort_optimizer* opt = nullptr;
  ASSERT_EQ(cohort_optimizer_create(&oo, &opt), COHORT_OK);
  cohort_trainer_options to = cohort_trainer_options_default();
  EXPECT_EQ(to.device, COHORT_DEVICE_CPU);
  to.device = COHORT_DEVICE_CUDA;
  cohort_trainer* t = nullptr;
  if (usable) {
    EXPECT_EQ(cohort_trainer_create(m.g, opt, &to, &t), COHORT_OK) << cohort_last_error();
    cohort_trainer_destroy(t);
  } else {
    EXPECT_STATUS(cohort_trainer_create(m.g, opt, &to, &t), COHORT_ERR_UNSUPPORTED, why);
    EXPECT_EQ(t, nullptr);
  }
  cohort_optimizer_destroy(opt);
}

TEST(CapiTrainer, StepEvaluateAndParameterErrors) {
  Model m;
  cohort_trainer* t = make_trainer(m);
  ASSERT_NE(t, nullptr);
  float x[12] = {0}, logits[8];
  int32_t y[4] = {0, 1, 0, 1};
  int64_t xs[2] = {4, 3}, ys[1] = {4}, bad[2] = {4, 4}, ls[2] = {4, 2};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x, sizeof x}, {"y", COHORT_I32, 1, ys, y, sizeof y}};
  float loss = -1;
  EXPECT_STATUS(cohort_trainer_step(t, in, 1, &loss), COHORT_ERR_INVALID_ARGUMENT, "input 'y' is needed by the loss");
  cohort_tensor_ref wrong_shape[2] = {{"x", COHORT_F32, 2, bad, x, sizeof x}, in[1]};
  EXPECT_STATUS(cohort_trainer_step(t, wrong_shape, 2, &loss), COHORT_ERR_INVALID_ARGUMENT,
                "inputs[0] 'x': buffer has 48 bytes, but shape [4, 4] of f32 needs 64");
  float big[16] = {0};
  cohort_tensor_ref mis[2] = {{"x", COHORT_F32, 2, bad, big, sizeof big}, in[1]};
  EXPECT_STATUS(cohort_trainer_step(t, mis, 2, &loss), COHORT_ERR_SHAPE_MISMATCH,
                "cohort_trainer_step: step: input 'x' has shape [4, 4], expected [4, 3]");
  cohort_tensor_ref wrong_type[2] = {in[0], {"y", COHORT_F32, 1, ys, y, sizeof y}};
  EXPECT_STATUS(cohort_trainer_step(t, wrong_type, 2, &loss), COHORT_ERR_SHAPE_MISMATCH, "has dtype f32, expected i32");
  cohort_tensor_ref unknown[2] = {in[0], {"z", COHORT_I32, 1, ys, y, sizeof y}};
  EXPECT_STATUS(cohort_trainer_step(t, unknown, 2, &loss), COHORT_ERR_NOT_FOUND, "no input named 'z'");
  cohort_tensor_ref twice[2] = {in[0], in[0]};
  EXPECT_STATUS(cohort_trainer_step(t, twice, 2, &loss), COHORT_ERR_INVALID_ARGUMENT, "'x' is given twice");
  cohort_tensor_ref null_data[2] = {{"x", COHORT_F32, 2, xs, nullptr, sizeof x}, in[1]};
  EXPECT_STATUS(cohort_trainer_step(t, null_data, 2, &loss), COHORT_ERR_INVALID_ARGUMENT, "'x': data is NULL");
  int32_t bad_label[4] = {0, 7, 0, 1};
  cohort_tensor_ref bad_y[2] = {in[0], {"y", COHORT_I32, 1, ys, bad_label, sizeof bad_label}};
  EXPECT_STATUS(cohort_trainer_step(t, bad_y, 2, &loss), COHORT_ERR_INVALID_ARGUMENT, "7");
  EXPECT_EQ(loss, -1.0f);
  cohort_trainer_stats st{};
  st.size = sizeof st;
  ASSERT_EQ(cohort_trainer_get_stats(t, &st), COHORT_OK);
  EXPECT_EQ(st.step, 0);  // none of the failed steps counted
  ASSERT_EQ(cohort_trainer_step(t, in, 2, &loss), COHORT_OK) << last();
  EXPECT_GT(loss, 0.0f);

  cohort_tensor_ref out = {"fc", COHORT_F32, 2, bad, logits, sizeof logits};
  EXPECT_STATUS(cohort_trainer_evaluate(t, in, 1, &out, 1), COHORT_ERR_INVALID_ARGUMENT, "outputs[0] 'fc': buffer has 32 bytes");
  cohort_tensor_ref missing = {"nothing", COHORT_F32, 2, ls, logits, sizeof logits};
  EXPECT_STATUS(cohort_trainer_evaluate(t, in, 1, &missing, 1), COHORT_ERR_NOT_FOUND, "no value named 'nothing'");
  // A buffer of another element type is refused by name before anything runs (it was an
  // UNSUPPORTED "copy from f32 to i32" after the forward pass, naming nothing).
  int32_t int_logits[8] = {0};
  cohort_tensor_ref int_out = {"fc", COHORT_I32, 2, ls, int_logits, sizeof int_logits};
  EXPECT_STATUS(cohort_trainer_evaluate(t, in, 1, &int_out, 1), COHORT_ERR_SHAPE_MISMATCH,
                "cohort_trainer_evaluate: evaluate: output 'fc' is f32, but the buffer has dtype i32");
  out = {"fc", COHORT_F32, 2, ls, logits, sizeof logits};
  EXPECT_EQ(cohort_trainer_evaluate(t, in, 1, &out, 1), COHORT_OK) << last();
  uint16_t bf16_logits[8] = {0};  // f32 results convert to a bf16 buffer
  cohort_tensor_ref bf16_out = {"fc", COHORT_BF16, 2, ls, bf16_logits, sizeof bf16_logits};
  EXPECT_EQ(cohort_trainer_evaluate(t, in, 1, &bf16_out, 1), COHORT_OK) << last();

  float w[6];
  int64_t ws[2] = {2, 3};
  cohort_tensor_ref p = {"nope", COHORT_F32, 2, ws, w, sizeof w};
  EXPECT_STATUS(cohort_trainer_get_parameter(t, &p), COHORT_ERR_NOT_FOUND, "no parameter named 'nope'");
  p.name = "w";
  ASSERT_EQ(cohort_trainer_get_parameter(t, &p), COHORT_OK);
  int64_t ws_bad[2] = {3, 2};
  cohort_tensor_ref pb = {"w", COHORT_F32, 2, ws_bad, w, sizeof w};
  EXPECT_STATUS(cohort_trainer_set_parameter(t, &pb), COHORT_ERR_SHAPE_MISMATCH, "parameter 'w' has shape [2, 3]");
  int32_t wi[6] = {0};
  cohort_tensor_ref pi = {"w", COHORT_I32, 2, ws, wi, sizeof wi};
  EXPECT_STATUS(cohort_trainer_set_parameter(t, &pi), COHORT_ERR_SHAPE_MISMATCH,
                "cohort_trainer_set_parameter: parameter 'w' is f32, but the buffer has dtype i32");
  EXPECT_STATUS(cohort_trainer_get_parameter(t, &pi), COHORT_ERR_SHAPE_MISMATCH,
                "cohort_trainer_get_parameter: parameter 'w' is f32, but the buffer has dtype i32");
  // The model state split in three (w [2, 3] and b [2] under this optimizer), summing to
  // parameter_bytes; a caller of the size before the split gets its fields and no more.
  st = cohort_trainer_stats{};
  st.size = sizeof st;
  ASSERT_EQ(cohort_trainer_get_stats(t, &st), COHORT_OK);
  EXPECT_GT(st.parameter_value_bytes, 0);
  EXPECT_EQ(st.gradient_bytes, st.parameter_value_bytes);
  EXPECT_EQ(st.parameter_value_bytes + st.gradient_bytes + st.optimizer_state_bytes, st.parameter_bytes);
  EXPECT_GT(st.peak_activation_bytes, 0);
  cohort_trainer_stats old{};
  old.size = offsetof(cohort_trainer_stats, parameter_value_bytes);
  old.gradient_bytes = -7;
  ASSERT_EQ(cohort_trainer_get_stats(t, &old), COHORT_OK);
  EXPECT_EQ(old.parameter_bytes, st.parameter_bytes);
  EXPECT_EQ(old.gradient_bytes, -7);
  st.size = 3;
  EXPECT_STATUS(cohort_trainer_get_stats(t, &st), COHORT_ERR_INVALID_ARGUMENT, "stats_out->size is 3");
  EXPECT_EQ(cohort_trainer_destroy(t), COHORT_OK);
  EXPECT_STATUS(cohort_trainer_step(t, in, 2, &loss), COHORT_ERR_INVALID_HANDLE, "not a live cohort_trainer");
  EXPECT_EQ(cohort_trainer_destroy(nullptr), COHORT_OK);
}

}  // namespace
