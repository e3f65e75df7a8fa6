// The workload estimator (core/parallel/workload.h): exact counts for a product, prices that grow
// with the work, the cache file read back instead of timing again (a file that is read and
// finds every instance is left byte for byte as it was), a corrupt file ignored and rewritten,
// default rates without any timing, the GPT's blocks priced alike, the executor runs' cost
// calibrated and cached, and the probe's step runner.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>

#include "core/base/error.h"
#include "core/graph/autodiff.h"
#include "core/models/cnn.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "core/parallel/workload.h"

namespace cohort::parallel {
namespace {

namespace fs = std::filesystem;

class Workload : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort_workload_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  WorkloadOptions options(const std::string& name, bool measure = true) const {
    WorkloadOptions o;
    o.num_threads = 1;  // the 2-core test machine runs other work too
    o.cache_path = path(name);
    o.measure = measure;
    return o;
  }
  fs::path dir_;
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// a [B, M, K] (an input) times b [K, N] (a parameter).
Graph matmul_graph(int64_t B, int64_t M, int64_t K, int64_t N) {
  Graph g;
  ValueId a = g.add_input("a", DType::kF32, {B, M, K});
  ValueId b = g.add_parameter("b", DType::kF32, {K, N}, Initializer{InitKind::kNormal, 0.0, 0.02, 1});
  g.mark_output(g.add_op("matmul", "mm", {a, b}, Attrs()).at(0));
  return g;
}

models::GptConfig small_gpt() {
  models::GptConfig c;
  c.batch = 2, c.context = 16, c.vocab = 32, c.layers = 2, c.width = 32, c.heads = 2;
  return c;
}

void expect_positive_finite(const Graph& g, const std::vector<double>& s) {
  ASSERT_EQ(s.size(), g.nodes().size());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_TRUE(std::isfinite(s[i])) << g.nodes()[i].name;
    if (g.nodes()[i].op->alias_input0) EXPECT_EQ(s[i], 0.0) << g.nodes()[i].name;  // a view runs nothing
    else EXPECT_GT(s[i], 0.0) << g.nodes()[i].name;
  }
}

TEST_F(Workload, CountsAMatmulsFlopsExactly) {
  const std::vector<NodeWork> w = count_node_work(matmul_graph(4, 8, 16, 32));
  ASSERT_EQ(w.size(), 1u);
  // 2 M N K forward (B = 4 batches), twice that backward (one product per operand).
  EXPECT_EQ(w[0].flops, 3.0 * 2 * 4 * 8 * 16 * 32);
  // Both operands and the result, forward, and about twice backward.
  EXPECT_EQ(w[0].bytes, 3.0 * 4 * (4 * 8 * 16 + 16 * 32 + 4 * 8 * 32));

  Graph lin;
  ValueId x = lin.add_input("x", DType::kF32, {6, 10});
  ValueId wt = lin.add_parameter("w", DType::kF32, {20, 10}, Initializer());
  lin.add_op("linear", "fc", {x, wt}, Attrs());
  EXPECT_EQ(count_node_work(lin)[0].flops, 3.0 * 2 * 6 * 20 * 10);
}

TEST_F(Workload, PricesABiggerMatmulHigher) {
  const Graph small = matmul_graph(1, 32, 32, 32), big = matmul_graph(1, 256, 256, 256);
  // Default rates, nothing timed.
  EXPECT_GT(estimate_node_seconds(big, options("none.bin", false))[0],
            estimate_node_seconds(small, options("none.bin", false))[0]);
  // Timed, and the bigger one priced by the rates fitted to the smaller's timing.
  const double small_s = estimate_node_seconds(small, options("fit.bin"))[0];
  const double big_fitted = estimate_node_seconds(big, options("fit.bin", false))[0];
  EXPECT_GT(big_fitted, small_s);
  const double big_s = estimate_node_seconds(big, options("timed.bin"))[0];
  EXPECT_GT(big_s, small_s);
}

TEST_F(Workload, ReadsTheCacheFileInsteadOfTimingAgain) {
  const Graph g = models::build_gpt(small_gpt());
  const std::vector<double> first = estimate_node_seconds(g, options("a.bin"));
  expect_positive_finite(g, first);
  const std::string written = read_all(path("a.bin"));
  ASSERT_FALSE(written.empty());
  // A second process (here: another path, which this process has not seen) reads the file: it
  // finds every instance, so it neither times nor rewrites, and prices each node the same.
  fs::copy_file(path("a.bin"), path("b.bin"));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> second = estimate_node_seconds(g, options("b.bin"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(second, first);
  EXPECT_EQ(read_all(path("b.bin")), written);
  EXPECT_LT(seconds, 0.5);
  // The same path again is answered from the process's own copy.
  EXPECT_EQ(estimate_node_seconds(g, options("a.bin")), first);
}

TEST_F(Workload, IgnoresAndRewritesACorruptCacheFile) {
  const Graph g = models::build_gpt(small_gpt());
  {
    std::ofstream f(path("bad.bin"), std::ios::binary);
    f << "not a workload cache, not even close";
  }
  const std::vector<double> timed = estimate_node_seconds(g, options("bad.bin"));
  expect_positive_finite(g, timed);
  const std::string rewritten = read_all(path("bad.bin"));
  EXPECT_NE(rewritten.find("CWLD"), std::string::npos);
  // The rewritten file is whole: read from a fresh path, it answers without timing.
  fs::copy_file(path("bad.bin"), path("good.bin"));
  EXPECT_EQ(estimate_node_seconds(g, options("good.bin")), timed);
  EXPECT_EQ(read_all(path("good.bin")), rewritten);

  // Not measuring, a corrupt file is still replaced (here by an empty, valid one).
  {
    std::ofstream f(path("bad2.bin"), std::ios::binary);
    f << std::string(64, '\xff');
  }
  expect_positive_finite(g, estimate_node_seconds(g, options("bad2.bin", false)));
  EXPECT_NE(read_all(path("bad2.bin")).find("CWLD"), std::string::npos);
}

TEST_F(Workload, WithoutMeasuringOrACachePricesByDefaultRates) {
  const Graph g = models::build_gpt(small_gpt());
  expect_positive_finite(g, estimate_node_seconds(g, options("empty.bin", false)));
  EXPECT_FALSE(fs::exists(path("empty.bin")));  // nothing timed, nothing to write
}

TEST_F(Workload, AnUnwritableCacheIsSkippedAndTheTimingsStayInTheProcess) {
  { std::ofstream f(path("file")); }
  const Graph g = matmul_graph(1, 16, 16, 16);
  WorkloadOptions o = options("file/sub/workload.bin");  // under a regular file: cannot be made
  const std::vector<double> first = estimate_node_seconds(g, o);
  expect_positive_finite(g, first);
  EXPECT_EQ(estimate_node_seconds(g, o), first);  // timed again it would differ
}

TEST_F(Workload, PricesEveryNodeOfTheMlpAndTheCnn) {
  models::MlpConfig mlp;
  mlp.batch = 8;
  const Graph m = models::build_mlp(mlp);
  expect_positive_finite(m, estimate_node_seconds(m, options("mlp.bin")));
  models::CnnConfig cnn;
  cnn.batch = 2, cnn.height = 8, cnn.width = 8, cnn.widths = {8, 16};
  const Graph c = models::build_cnn(cnn);
  expect_positive_finite(c, estimate_node_seconds(c, options("cnn.bin")));
  expect_positive_finite(c, estimate_node_seconds(c, options("cnn_none.bin", false)));
}

double block_seconds(const std::vector<NodeId>& block, const std::vector<double>& s) {
  double sum = 0;
  for (NodeId n : block) sum += s[static_cast<size_t>(n)];
  return sum;
}

TEST_F(Workload, PricesTheGptsBlocksAlike) {
  const models::GptConfig config;  // the CLI's default size
  const Graph g = models::build_gpt(config);
  const auto blocks = blocks_by_name(g);
  ASSERT_EQ(blocks.size(), static_cast<size_t>(config.layers));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> timed = estimate_node_seconds(g, options("gpt.bin"));
  std::printf("calibration of the default GPT at 1 thread: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (const std::vector<double>& s : {timed, estimate_node_seconds(g, options("gpt_none.bin", false))}) {
    expect_positive_finite(g, s);
    const double first = block_seconds(blocks[0], s);
    for (const auto& b : blocks) EXPECT_NEAR(block_seconds(b, s), first, 0.3 * first);
  }
  // The blocks hold most of the work: the logits' product and the loss are one block's worth at most.
  const double total = std::accumulate(timed.begin(), timed.end(), 0.0);
  EXPECT_GT(block_seconds(blocks[0], timed) * static_cast<double>(config.layers), 0.5 * total);
}

// The executor runs' cost: nothing before anything is measured; measured once (a trainer running
// each step as one run against one running forward and backward apart, a pass over the gradients
// alone, and the optimizer's update), cached in the file beside the nodes' timings, read back by
// another process; and kept out of the nodes' fit (a cache holding only it prices the nodes as an
// empty one does).
TEST_F(Workload, CalibratesTheExecutorRunsCostAndCachesIt) {
  models::MlpConfig mlp;
  mlp.batch = 4;
  const Graph m = models::build_mlp(mlp);
  const RunCost none = estimate_run_cost(m, options("runs.bin", false));
  EXPECT_EQ(none.seconds_per_run, 0.0);
  EXPECT_EQ(none.seconds_per_gradient_byte, 0.0);
  EXPECT_EQ(none.seconds_per_update_byte, 0.0);
  EXPECT_FALSE(fs::exists(path("runs.bin")));
  const RunCost timed = estimate_run_cost(m, options("runs.bin"));
  std::printf("the MLP at 4 rows: an executor run %.1f us, a gradient pass %.2f GB/s\n", timed.seconds_per_run * 1e6,
              timed.seconds_per_gradient_byte > 0 ? 1e-9 / timed.seconds_per_gradient_byte : 0.0);
  EXPECT_TRUE(std::isfinite(timed.seconds_per_run) && timed.seconds_per_run >= 0 && timed.seconds_per_run < 0.05)
      << timed.seconds_per_run;
  // A pass over 0.4 MB of gradients: timed, so not free, and faster than 10 MB/s.
  EXPECT_GT(timed.seconds_per_gradient_byte, 0.0);
  EXPECT_LT(timed.seconds_per_gradient_byte, 1e-7);
  // AdamW's update reads and writes more than the pass (parameters, both moments): dearer per
  // byte than the pass, and faster than 10 MB/s.
  EXPECT_GT(timed.seconds_per_update_byte, timed.seconds_per_gradient_byte);
  EXPECT_LT(timed.seconds_per_update_byte, 1e-7);
  const std::string written = read_all(path("runs.bin"));
  EXPECT_NE(written.find("(runs)"), std::string::npos);
  EXPECT_NE(written.find("(gradient pass)"), std::string::npos);
  EXPECT_NE(written.find("(update)"), std::string::npos);
  fs::copy_file(path("runs.bin"), path("copy.bin"));
  const RunCost read = estimate_run_cost(m, options("copy.bin", false));
  EXPECT_EQ(read.seconds_per_run, timed.seconds_per_run);
  EXPECT_EQ(read.seconds_per_gradient_byte, timed.seconds_per_gradient_byte);
  EXPECT_EQ(read.seconds_per_update_byte, timed.seconds_per_update_byte);
  EXPECT_EQ(estimate_node_seconds(m, options("copy.bin", false)), estimate_node_seconds(m, options("none.bin", false)));
}

// The probe's step: the model's forward and backward, runnable again and again.
TEST_F(Workload, AStepRunnerRunsTheModelsForwardAndBackward) {
  models::MlpConfig mlp;
  mlp.batch = 2;
  const std::function<void()> step = make_step_runner(models::build_mlp(mlp), 1);
  for (int k = 0; k < 3; ++k) EXPECT_NO_THROW(step());
  Graph no_loss;
  no_loss.mark_output(no_loss.add_input("x", DType::kF32, {2}));
  EXPECT_THROW(make_step_runner(no_loss, 1), Error);
}

}  // namespace
}  // namespace cohort::parallel
