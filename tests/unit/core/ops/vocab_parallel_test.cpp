// Vocabulary-parallel operators (core/ops/vocab_parallel.cpp) in one process: a [V, C] table and
// [rows, V] logits cut into blocks of the vocabulary, each block run as one rank would run it,
// the ranks' results combined by hand as the rewrite's collectives would (the embedding's
// partial outputs summed, the loss's partials stacked). Each must give what the whole-vocabulary
// operator gives — outputs and gradients — within fp32 rounding; and a bad id or label is named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

constexpr int64_t kV = 6, kC = 3, kRows = 5, kParts = 2, kBlock = kV / kParts;

Tensor filled(const Shape& shape, const std::function<float(int64_t)>& f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = f(i);
  return t;
}

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

// Columns [first, first + count) of a [rows, n] tensor.
Tensor columns(const Tensor& t, int64_t first, int64_t count) {
  const int64_t rows = t.dim(0), n = t.dim(1);
  Tensor out = Tensor::empty({rows, count}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < count; ++c) out.data<float>()[r * count + c] = t.data<float>()[r * n + first + c];
  return out;
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return columns(t.reshaped({1, t.numel()}), first * t.dim(1), count * t.dim(1)).reshaped({count, t.dim(1)}); }

// Runs `g` on `env` for `targets`; returns their values.
std::vector<Tensor> run(const Graph& g, std::unordered_map<ValueId, Tensor> env, const std::vector<ValueId>& targets) {
  Executor ex(g, targets);
  ex.run(env, RunOptions());
  std::vector<Tensor> out;
  for (ValueId v : targets) out.push_back(env.at(v));
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 2e-6 * (1 + std::fabs(want.data<float>()[i])))
        << what << " element " << i;
}

Attrs block_attrs(int64_t part) {
  Attrs a;
  a.set("offset", part * kBlock);
  a.set("vocab", kV);
  return a;
}

TEST(VocabParallel, EmbeddingBlocksSumToTheLookupAndKeepTheirRowsGradients) {
  const Tensor table = filled({kV, kC}, [](int64_t i) { return 0.1f * static_cast<float>(i) - 0.7f; });
  const Tensor ids = ints({4, 0, 5, 4, 2});  // 4 twice: the gradient accumulates
  const Tensor dy = filled({kRows, kC}, [](int64_t i) { return std::sin(0.3f * static_cast<float>(i)); });
  // Whole: y = embedding(table, ids), and the table's gradient for dy.
  Graph whole;
  ValueId w = whole.add_input("w", DType::kF32, {kV, kC});
  ValueId i = whole.add_input("ids", DType::kI32, {kRows});
  ValueId y = whole.add_op("embedding", "y", {w, i}, Attrs()).at(0);
  ValueId g = whole.add_input("dy", DType::kF32, {kRows, kC});
  ValueId dw = whole.add_op("embedding_grad", "dw", {i, g}, [] { Attrs a; a.set("vocab", kV); return a; }()).at(0);
  const std::vector<Tensor> want = run(whole, {{w, table}, {i, ids}, {g, dy}}, {y, dw});
  Tensor sum = Tensor::zeros({kRows, kC}, DType::kF32);
  for (int64_t p = 0; p < kParts; ++p) {
    Graph part;
    ValueId pw = part.add_input("w", DType::kF32, {kBlock, kC});
    ValueId pi = part.add_input("ids", DType::kI32, {kRows});
    ValueId py = part.add_op("vocab_embedding", "y", {pw, pi}, block_attrs(p)).at(0);
    ValueId loss = part.add_op("sum", "loss", {part.add_op("mul", "ydy", {py, part.add_input("dy", DType::kF32, {kRows, kC})}, Attrs()).at(0)}, Attrs()).at(0);
    part.set_loss(loss);
    const ValueId pdw = build_backward(part, loss, {pw}).at(0);
    const std::vector<Tensor> got =
        run(part, {{pw, rows_of(table, p * kBlock, kBlock)}, {pi, ids}, {part.find("dy"), dy}}, {py, pdw});
    for (int64_t k = 0; k < sum.numel(); ++k) sum.data<float>()[k] += got[0].data<float>()[k];
    expect_close(got[1], rows_of(want[1], p * kBlock, kBlock), str_cat("the gradient of block ", p));
  }
  expect_close(sum, want[0], "the blocks' outputs summed");
  // An id outside the whole vocabulary is refused by every block, named with its position.
  Graph part;
  ValueId pw = part.add_input("w", DType::kF32, {kBlock, kC});
  ValueId pi = part.add_input("ids", DType::kI32, {kRows});
  ValueId py = part.add_op("vocab_embedding", "y", {pw, pi}, block_attrs(1)).at(0);
  test::expect_error([&] { run(part, {{pw, rows_of(table, 0, kBlock)}, {pi, ints({1, 2, 6, 0, 0})}}, {py}); },
                     Status::kInvalidArgument, "embedding: id 6 at position [2] is outside [0, 6)");
  test::expect_error([&] { Graph bad; bad.add_op("vocab_embedding", "y", {bad.add_input("w", DType::kF32, {4, kC}), bad.add_input("ids", DType::kI32, {2})}, block_attrs(1)); },
                     Status::kInvalidArgument, "rows [3, 7) of the vocabulary are not inside [0, vocab = 6)");
}

TEST(VocabParallel, CrossEntropyFromEveryBlocksPartialsIsTheWholeVocabularysLoss) {
  const Tensor logits = filled({kRows, kV}, [](int64_t i) { return 3.0f * std::sin(0.7f * static_cast<float>(i)); });
  const Tensor labels = ints({5, 0, -100, 3, 2});  // one ignored row
  Graph whole;
  ValueId x = whole.add_input("x", DType::kF32, {kRows, kV});
  ValueId l = whole.add_input("labels", DType::kI32, {kRows});
  std::vector<ValueId> ce = whole.add_op("cross_entropy", "loss", {x, l}, Attrs());
  whole.set_loss(ce[0]);
  const ValueId dx = build_backward(whole, ce[0], {x}).at(0);
  const std::vector<Tensor> want = run(whole, {{x, logits}, {l, labels}}, {ce[0], ce[1], dx});
  // Every block's partials, stacked in block order as the all_gather over the axis does.
  Tensor stacked = Tensor::empty({kParts, kRows, 3}, DType::kF32);
  for (int64_t p = 0; p < kParts; ++p) {
    Graph part;
    ValueId px = part.add_input("x", DType::kF32, {kRows, kBlock});
    ValueId pl = part.add_input("labels", DType::kI32, {kRows});
    ValueId s = part.add_op("vocab_cross_entropy_partials", "s", {px, pl}, block_attrs(p)).at(0);
    const Tensor got = run(part, {{px, columns(logits, p * kBlock, kBlock)}, {pl, labels}}, {s})[0];
    ASSERT_EQ(got.shape(), (Shape{1, kRows, 3}));
    std::copy(got.data<float>(), got.data<float>() + got.numel(), stacked.data<float>() + p * kRows * 3);
  }
  for (int64_t p = 0; p < kParts; ++p) {
    Graph part;
    ValueId px = part.add_input("x", DType::kF32, {kRows, kBlock});
    ValueId pl = part.add_input("labels", DType::kI32, {kRows});
    ValueId ps = part.add_input("partials", DType::kF32, {kParts, kRows, 3});
    std::vector<ValueId> out = part.add_op("vocab_cross_entropy", "loss", {px, pl, ps}, block_attrs(p));
    part.set_loss(out[0]);
    const ValueId pdx = build_backward(part, out[0], {px}).at(0);
    const std::vector<Tensor> got =
        run(part, {{px, columns(logits, p * kBlock, kBlock)}, {pl, labels}, {ps, stacked}}, {out[0], out[1], pdx});
    expect_close(got[0], want[0], str_cat("the loss on block ", p));
    expect_close(got[1], want[1], str_cat("the log-sum-exp on block ", p));
    expect_close(got[2], columns(want[2], p * kBlock, kBlock), str_cat("the logits' gradient on block ", p));
  }
  // A label outside the whole vocabulary is named, as cross_entropy names it.
  Graph part;
  ValueId px = part.add_input("x", DType::kF32, {kRows, kBlock});
  ValueId pl = part.add_input("labels", DType::kI32, {kRows});
  ValueId s = part.add_op("vocab_cross_entropy_partials", "s", {px, pl}, block_attrs(0)).at(0);
  test::expect_error([&] { run(part, {{px, columns(logits, 0, kBlock)}, {pl, ints({1, 9, 0, 0, 0})}}, {s}); },
                     Status::kInvalidArgument, "cross_entropy: label 9 at position [1] is outside [0, 6)");
}

}  // namespace
}  // namespace cohort
