// Sampler: determinism, permutation per epoch, disjoint sharding, exact resume; batch assembly
// of the image and token-window datasets.
#include "core/data/sampler.h"

#include <algorithm>
#include <set>

#include "core/data/dataset.h"
#include "tests/unit/core/data/data_test_util.h"

namespace cohort::data {
namespace {

using testing::expect_error;

std::vector<int64_t> examples(const std::vector<SampleId>& ids) {
  std::vector<int64_t> out;
  for (const auto& id : ids) out.push_back(id.example);
  return out;
}

TEST(Sampler, DeterministicPermutationPerEpoch) {
  SamplerOptions o;
  o.seed = 42;
  Sampler a(100, o), b(100, o);
  auto ea = examples(a.next_batch(100)), eb = examples(b.next_batch(100));
  EXPECT_EQ(ea, eb);
  std::vector<int64_t> sorted = ea;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(ea, a.epoch_order(1));  // the next epoch has another order
  EXPECT_EQ(a.position(), (SamplerPosition{1, 0}));
  auto e1 = a.next_batch(100);
  EXPECT_EQ(examples(e1), a.epoch_order(1));
  EXPECT_EQ(e1[0].epoch, 1);
  o.seed = 43;
  EXPECT_NE(Sampler(100, o).epoch_order(0), ea);  // the seed matters
  o.shuffle = false;
  EXPECT_EQ(Sampler(5, o).epoch_order(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, RanksGetDisjointEqualShares) {
  for (int64_t world : {1, 2, 3, 7}) {
    std::set<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      Sampler s(101, SamplerOptions{9, r, world, true});
      EXPECT_EQ(s.per_epoch(), 101 / world);
      for (const auto& id : s.next_batch(s.per_epoch())) {
        EXPECT_EQ(id.epoch, 0);
        EXPECT_TRUE(seen.insert(id.example).second) << "example " << id.example << " given twice, world " << world;
      }
      EXPECT_EQ(s.position(), (SamplerPosition{1, 0}));
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), (101 / world) * world);
  }
  // All ranks agree on the order: rank r's k-th example is position r + k w of the epoch's order.
  Sampler r1(50, SamplerOptions{5, 1, 4, true});
  auto order = r1.epoch_order(0);
  auto got = examples(r1.next_batch(3));
  EXPECT_EQ(got, (std::vector<int64_t>{order[1], order[5], order[9]}));
}

TEST(Sampler, ResumeFromSavedPosition) {
  SamplerOptions o{7, 1, 3, true};
  Sampler a(64, o);
  a.next_batch(50);  // runs into epoch 2 (21 per epoch)
  SamplerPosition saved = a.position();
  EXPECT_EQ(saved, (SamplerPosition{2, 8}));
  auto rest = a.next_batch(40);
  Sampler b(64, o);
  b.set_position(saved);
  auto again = b.next_batch(40);
  ASSERT_EQ(rest.size(), again.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].example, again[i].example) << i;
    EXPECT_EQ(rest[i].epoch, again[i].epoch) << i;
  }
  expect_error([&] { b.set_position({0, 21}); }, Status::kInvalidArgument, "sampler: index (21) must be in 0..20");
  expect_error([&] { b.set_position({-1, 0}); }, Status::kInvalidArgument, "sampler: epoch (-1) must be >= 0");
}

TEST(Sampler, Validation) {
  expect_error([] { Sampler(3, SamplerOptions{0, 0, 4, true}); }, Status::kInvalidArgument,
               "sampler: 3 examples cannot give each of 4 ranks at least one");
  expect_error([] { Sampler(8, SamplerOptions{0, 4, 4, true}); }, Status::kInvalidArgument,
               "sampler: rank (4) must be in 0..3");
  expect_error([] { Sampler(8, SamplerOptions{0, 0, 0, true}); }, Status::kInvalidArgument,
               "sampler: world (0) must be >= 1");
}

TEST(Datasets, ImageBatchAssembly) {
  ImageDataset d("toy", {1, 2, 2}, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {5, 6, 7});
  std::vector<float> x(8);
  std::vector<int32_t> y(2);
  d.gather({{2, 0}, {0, 0}}, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<float>{20, 21, 22, 23, 0, 1, 2, 3}));
  EXPECT_EQ(y, (std::vector<int32_t>{7, 5}));
  Tensor ok = Tensor::empty({2, 4}, DType::kF32);
  check_batch(d, 0, ok, 2, "x");  // [B, 4] takes [1, 2, 2] images
  Tensor wrong = Tensor::empty({2, 5}, DType::kF32);
  expect_error([&] { check_batch(d, 0, wrong, 2, "outputs[0]"); }, Status::kShapeMismatch,
               "outputs[0] has shape [2, 5], but 2 examples of toy have shape [1, 2, 2] each");
  Tensor ints = Tensor::empty({2}, DType::kF32);
  expect_error([&] { check_batch(d, 1, ints, 2, "outputs[1]"); }, Status::kShapeMismatch,
               "outputs[1] has dtype f32, toy gives i32");
}

TEST(Datasets, TokenWindows) {
  std::vector<uint8_t> stream(100);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<uint8_t>(i);
  TokenWindowDataset d("text", stream, 8);
  EXPECT_EQ(d.size(), (100 - 8) / 8);
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    std::set<int64_t> starts;
    for (int64_t k = 0; k < d.size(); ++k) {
      const int64_t s = d.window_start({k, epoch});
      EXPECT_LE(s + 8, 99);  // the target of the last token is inside the stream
      starts.insert(s % 8);
    }
    EXPECT_EQ(starts.size(), 1u);  // one shift per epoch: windows do not overlap
  }
  std::vector<int32_t> tokens(16), targets(16);
  d.gather({{3, 0}, {0, 0}}, tokens.data(), targets.data());
  const int64_t s = d.window_start({3, 0});
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(tokens[static_cast<size_t>(t)], s + t);
    EXPECT_EQ(targets[static_cast<size_t>(t)], s + t + 1);
  }
  EXPECT_EQ(targets[8], tokens[9]);
  expect_error([&] { TokenWindowDataset("short", std::vector<uint8_t>(15), 8); }, Status::kInvalidArgument,
               "short has 15 tokens, too few for windows of context 8 (needs at least 16)");
}

}  // namespace
}  // namespace cohort::data
