// Sharded parameters (Value::shard, core/graph/shard.h): blocks taken from and put back into the
// whole layout, fused q|k|v groups, several cuts, the graph's checks, and graph files and
// with_batch keeping the cuts.
#include <gtest/gtest.h>

#include "core/graph/serialize.h"
#include "core/graph/shard.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

using test::expect_error;

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// A [6, 2] weight of 3 groups (q|k|v, 2 rows each) cut in 2 parts: block 1 holds row 1 of each
// group, i.e. rows 1, 3, 5.
TEST(Shard, GroupsKeepTheirOrderAndEachGivesItsBlock) {
  const ShardCut cut{0, 3, 2, 1, "y"};
  Tensor block = take_shard(iota({6, 2}), {cut});
  EXPECT_EQ(block.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(block), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  EXPECT_EQ(shard_whole_shape(block.shape(), {cut}), (Shape{6, 2}));
}

TEST(Shard, ACutAlongTheLastDimTakesColumns) {
  const ShardCut cut{1, 1, 4, 2, "y"};  // [2, 8] in 4 parts of 2 columns: columns 4, 5
  EXPECT_EQ(values(take_shard(iota({2, 8}), {cut})), (std::vector<float>{4, 5, 12, 13}));
}

// Blocks of every rank put back together give the whole tensor again, also through two cuts.
TEST(Shard, EveryRanksBlocksPutBackMakeTheWhole) {
  const Tensor whole = iota({4, 6});
  Tensor rebuilt = Tensor::zeros({4, 6}, DType::kF32);
  for (int64_t x = 0; x < 2; ++x)
    for (int64_t y = 0; y < 3; ++y) {
      const std::vector<ShardCut> cuts = {{1, 1, 3, y, "x"}, {0, 2, 2, x, "y"}};
      Tensor block = take_shard(whole, cuts);
      EXPECT_EQ(block.shape(), (Shape{2, 2}));
      EXPECT_EQ(shard_whole_shape(block.shape(), cuts), (Shape{4, 6}));
      put_shard(rebuilt, block, cuts);
    }
  EXPECT_EQ(values(rebuilt), values(whole));
}

TEST(Shard, TheGraphChecksCuts) {
  Graph g;
  ValueId w = g.add_parameter("w", DType::kF32, {4, 6}, Initializer());
  ValueId x = g.add_input("x", DType::kF32, {4});
  expect_error([&] { g.set_shard(x, {{0, 1, 2, 0, "y"}}); }, Status::kInvalidArgument, "'x' [4] f32 is not a parameter");
  expect_error([&] { g.set_shard(w, {{2, 1, 2, 0, "y"}}); }, Status::kInvalidArgument, "shard dim 2 is out of range");
  expect_error([&] { g.set_shard(w, {{0, 1, 2, 2, "y"}}); }, Status::kInvalidArgument, "index 2");
  expect_error([&] { g.set_shard(w, {{1, 4, 2, 0, "y"}}); }, Status::kInvalidArgument,
               "extent 6 of dim 1 is not a multiple of the 4 groups");
  expect_error([&] { g.set_shard(w, {{0, 1, 2, 0, ""}}); }, Status::kInvalidArgument, "needs the name of its grid axis");
  g.set_shard(w, {{0, 2, 2, 1, "y"}});
  EXPECT_EQ(g.value(w).shard.size(), 1u);
}

TEST(Shard, GraphFilesAndWithBatchKeepTheCuts) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {3, 4});
  ValueId w = g.add_parameter("w", DType::kF32, {2, 4}, Initializer());
  g.set_shard(w, {{0, 1, 3, 2, "y"}});
  ValueId y = g.add_op("linear", "fc", {x, w}, Attrs()).at(0);
  g.set_loss(g.add_op("sum", "loss", {y}, Attrs()).at(0));
  const std::vector<uint8_t> bytes = serialize_graph(g);
  Graph back = deserialize_graph(bytes.data(), bytes.size(), "test");
  EXPECT_EQ(back.value(back.find("w")).shard, g.value(w).shard);
  Graph b5 = g.with_batch(5);
  EXPECT_EQ(b5.value(b5.find("w")).shard, g.value(w).shard);
  // A graph without shards encodes exactly as before shards existed: nothing is written for them.
  Graph plain;
  plain.add_parameter("w", DType::kF32, {2, 4}, Initializer());
  Graph sharded = plain;
  sharded.set_shard(0, {{0, 1, 2, 0, "y"}});
  EXPECT_LT(encode_graph(plain).size(), encode_graph(sharded).size());
}

}  // namespace
}  // namespace cohort
