// Top-k compressed pipeline edges (core/ops/pipe_topk.cpp) at 2 ranks — one thread and one UCX
// engine each, in this process, rank 0 the sending stage and rank 1 the receiving one, on axes
// "pipe" and "pipe_grad" as a pipeline's: the forward against a sorted reference, the exact
// bytes on the wire against pipe_topk.h's layout, the backward run as a trainer runs a chunk
// (forward and backward executors, the values backward reads of forward given to it, sends left
// unfinished), keep = 1, the attribute and shape checks, graph files and rebatching.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/graph/serialize.h"
#include "core/ops/collective.h"
#include "tests/support/expect_error.h"
#include "tests/unit/transport/coll/coll_test_util.h"
#include "transport/coll/work.h"

namespace cohort {
namespace {

namespace ct = transport::coll::testing;
namespace coll = transport::coll;
using test::expect_error;
using Env = std::unordered_map<ValueId, Tensor>;

const Shape kShape = {4, 5};

// x_i = (7 i mod 20) - 10: every integer of [-10, 9] once, so magnitudes 1..9 come in ties of
// two (exact in bf16 too).
float x_value(int64_t i) { return static_cast<float>((i * 7) % 20 - 10); }
// The receiving stage's weights: distinct from x and from one another where it matters.
float w_value(int64_t i) { return static_cast<float>(i % 7) - 3.5f; }

Tensor make_tensor(const Shape& shape, DType dtype, const std::function<float(int64_t)>& value) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF32)
      t.data<float>()[i] = value(i);
    else
      t.data<uint16_t>()[i] = f32_to_bf16(value(i));
  }
  return t;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = t.dtype() == DType::kF32 ? t.data<float>()[i] : bf16_to_f32(t.data<uint16_t>()[i]);
  return out;
}

std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

// The reference choice: positions by magnitude, largest first, ties to the lower index; the first
// k of them, ascending.
std::vector<int32_t> reference_topk(const std::vector<float>& x, int64_t k) {
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

// A pipeline's two axes over the world communicator of 2 ranks (split is collective).
CommAxes pipe_axes(const std::shared_ptr<coll::UcxCommunicator>& comm) {
  CommAxes axes;
  axes.set("pipe", comm);
  axes.set("pipe_grad", comm->split(0, comm->rank(), "pipe_grad"));
  return axes;
}

Attrs send_attrs(double keep) { return pipe_topk_attrs("pipe", "pipe_grad", 1, keep); }
Attrs recv_attrs(double keep, const Shape& shape, DType dtype) {
  Attrs a = pipe_topk_attrs("pipe", "pipe_grad", 0, keep);
  a.set("shape", shape);
  a.set("dtype", static_cast<int64_t>(dtype));
  return a;
}

// Runs `targets` of g, its inputs bound from env; returns env.
Env run(const Graph& g, const std::vector<ValueId>& targets, Env env, const CommAxes& axes) {
  Executor ex(g, targets);
  RunOptions ro;
  ro.axes = &axes;
  ex.run(env, ro);
  return env;
}

struct Forward {
  std::vector<int32_t> sent_idx, received_idx;
  std::vector<float> y;
};

// Rank 0 sends x (x_value, `shape`) with `keep`, rank 1 receives it; each graph is rebatched to
// `batch` first when batch > 0.
Forward run_forward(DType dtype, double keep, const Shape& shape, int64_t batch = 0) {
  Forward f;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<coll::UcxCommunicator>& comm) {
    const CommAxes axes = pipe_axes(comm);
    Graph g;
    if (comm->rank() == 0) {
      g.add_op("pipe_send_topk", "send", {g.add_input("x", dtype, shape)}, send_attrs(keep));
    } else {
      g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(keep, shape, dtype));
    }
    if (batch > 0) g = g.with_batch(batch);
    Env env;
    if (comm->rank() == 0) {
      const ValueId x = g.find("x");
      env[x] = make_tensor(g.value(x).type.shape, dtype, x_value);
      const Node& send = g.nodes().at(0);
      env = run(g, {send.outputs[0], send.outputs[1]}, env, axes);
      f.sent_idx = ints(env.at(send.outputs[1]));
    } else {
      const Node& recv = g.nodes().at(0);
      env = run(g, {recv.outputs[0], recv.outputs[1]}, env, axes);
      f.y = floats(env.at(recv.outputs[0]));
      f.received_idx = ints(env.at(recv.outputs[1]));
    }
  });
  return f;
}

class PipeTopk : public ::testing::TestWithParam<DType> {};

// (1) The receiver's y is x on the k positions of largest |x| and 0 elsewhere; both sides hold
// the same indices, ascending.
TEST_P(PipeTopk, ForwardCarriesTheLargestMagnitudesAndBothSidesHoldTheirIndices) {
  const DType dtype = GetParam();
  const int64_t n = shape_numel(kShape);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = x_value(i);
  for (double keep : {0.3, 0.05, 0.5}) {
    const Forward f = run_forward(dtype, keep, kShape);
    const std::vector<int32_t> want = reference_topk(x, topk_count(n, keep));
    EXPECT_EQ(f.sent_idx, want) << "keep " << keep;
    EXPECT_EQ(f.received_idx, want) << "keep " << keep;
    ASSERT_EQ(f.y.size(), x.size());
    for (int64_t i = 0; i < n; ++i) {
      const bool kept = std::binary_search(want.begin(), want.end(), static_cast<int32_t>(i));
      EXPECT_EQ(f.y[static_cast<size_t>(i)], kept ? x[static_cast<size_t>(i)] : 0.0f) << "keep " << keep << " at " << i;
    }
  }
}

// (3) keep = 1: y is x, every index in order.
TEST_P(PipeTopk, KeepOneSendsTheWholeTensor) {
  const DType dtype = GetParam();
  const Forward f = run_forward(dtype, 1.0, kShape);
  std::vector<int32_t> all(20);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(f.sent_idx, all);
  EXPECT_EQ(f.received_idx, all);
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(f.y[static_cast<size_t>(i)], x_value(i)) << i;
}

// The forward message is exactly topk_message_bytes: the kept entries (at keep 0.3 of 20 a
// bitmap of one word, smaller than 6 int32 indices; at 0.05, one index), then k values in the
// tensor's dtype; the backward message is exactly topk_gradient_bytes of values at those
// indices. A raw receive of that many bytes fails on a longer message (truncated) and leaves the
// last value as the filler on a shorter one.
class PipeTopkWire : public ::testing::TestWithParam<std::tuple<DType, double>> {};

TEST_P(PipeTopkWire, MessagesAreLaidOutAsPipeTopkHSays) {
  const DType dtype = std::get<0>(GetParam());
  const double keep = std::get<1>(GetParam());
  const int64_t n = shape_numel(kShape), k = topk_count(n, keep);
  const size_t elem = dtype_size(dtype);
  const bool bitmap = (n + 31) / 32 < k;  // pipe_topk.h: the bitmap where it is smaller
  ASSERT_EQ(topk_bitmap(n, k), bitmap);
  const size_t index_bytes = bitmap ? 4 : static_cast<size_t>(4 * k);
  ASSERT_EQ(topk_index_bytes(n, k), index_bytes);
  ASSERT_EQ(topk_message_bytes(n, keep, dtype), index_bytes + static_cast<size_t>(k) * elem);
  std::vector<uint8_t> wire(topk_message_bytes(n, keep, dtype), 0xab);
  // The kept indices the message on the wire names: its one-word bitmap (20 entries) or its list.
  auto wire_indices = [&] {
    std::vector<int32_t> idx;
    if (bitmap) {
      uint32_t word;
      std::memcpy(&word, wire.data(), 4);
      for (int i = 0; i < 32; ++i)
        if (word >> i & 1) idx.push_back(i);
    } else {
      idx.resize(static_cast<size_t>(k));
      std::memcpy(idx.data(), wire.data(), idx.size() * 4);
    }
    return idx;
  };
  std::vector<int32_t> sent_idx;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<coll::UcxCommunicator>& comm) {
    const CommAxes axes = pipe_axes(comm);
    if (comm->rank() == 0) {
      Graph g;
      const ValueId x = g.add_input("x", dtype, kShape);
      const std::vector<ValueId> out = g.add_op("pipe_send_topk", "send", {x}, send_attrs(keep));
      Env env = run(g, {out[1]}, {{x, make_tensor(kShape, dtype, x_value)}}, axes);
      sent_idx = ints(env.at(out[1]));
      // The gradient's way back: g_i = w_i at idx, received as raw bytes.
      Graph h;
      const ValueId grad = h.add_input("g", dtype, kShape);
      const ValueId idx = h.add_input("idx", DType::kI32, {k});
      const ValueId token = h.add_op("pipe_send_at", "back", {grad, idx}, pipe_attrs("pipe_grad", "pipe", 1)).at(0);
      run(h, {token}, {{grad, make_tensor(kShape, dtype, w_value)}, {idx, env.at(out[1])}}, axes);
    } else {
      comm->recv(wire.data(), wire.size(), coll::DataType::kU8, 0)->wait();
      std::vector<uint8_t> back(topk_gradient_bytes(n, keep, dtype), 0xab);
      axes.at("pipe_grad", "test").recv(back.data(), back.size(), coll::DataType::kU8, 0)->wait();
      const std::vector<int32_t> idx = wire_indices();
      ASSERT_EQ(static_cast<int64_t>(idx.size()), k);
      for (int64_t j = 0; j < k; ++j) {
        float value, grad;
        const uint8_t* v = wire.data() + index_bytes + j * static_cast<int64_t>(elem);
        const uint8_t* gv = back.data() + j * static_cast<int64_t>(elem);
        if (dtype == DType::kF32) {
          std::memcpy(&value, v, 4);
          std::memcpy(&grad, gv, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, v, 2);
          value = bf16_to_f32(bits);
          std::memcpy(&bits, gv, 2);
          grad = bf16_to_f32(bits);
        }
        EXPECT_EQ(value, x_value(idx[static_cast<size_t>(j)])) << "value " << j;
        EXPECT_EQ(grad, w_value(idx[static_cast<size_t>(j)])) << "gradient " << j;
      }
      EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    }
  });
  EXPECT_EQ(wire_indices(), sent_idx);
}

INSTANTIATE_TEST_SUITE_P(Wire, PipeTopkWire,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16), ::testing::Values(0.3, 0.05)));

// Runs a stage as the trainer runs a chunk: a forward executor for the loss and the values
// backward reads of forward (kept), a backward executor given those, sends the forward leaves in
// flight waited for at the end. Returns the backward's targets.
Env run_like_trainer(const Graph& g, size_t forward_nodes, ValueId loss, const std::vector<ValueId>& backward_targets,
                     Env env, const CommAxes& axes) {
  std::vector<ValueId> kept;
  for (size_t k = forward_nodes; k < g.nodes().size(); ++k)
    for (ValueId i : g.nodes()[k].inputs) {
      const NodeId p = g.value(i).producer;
      if (p >= 0 && !g.node(p).backward && std::find(kept.begin(), kept.end(), i) == kept.end()) kept.push_back(i);
    }
  std::vector<ValueId> forward_targets = {loss};
  for (ValueId v : kept)
    if (v != loss) forward_targets.push_back(v);
  Executor forward(g, forward_targets);
  Executor backward(g, backward_targets, Device::kCpu, kept);
  std::vector<UnfinishedSend> unfinished;
  RunOptions ro;
  ro.axes = &axes;
  ro.unfinished_sends = &unfinished;
  forward.run(env, ro);
  ro.unfinished_sends = nullptr;
  backward.run(env, ro);
  for (UnfinishedSend& s : unfinished) s.work->wait();
  return env;
}

// (2) Stage 0: x -> pipe_send_topk, loss = the token. Stage 1: y = pipe_recv_topk, loss =
// sum(y * w). The gradient reaching x is dy = w on the kept positions and 0 elsewhere, and stage
// 1's dloss/dw is the compressed y.
TEST_P(PipeTopk, BackwardCarriesTheGradientAtTheKeptPositions) {
  const DType dtype = GetParam();
  const double keep = 0.3;
  const int64_t n = shape_numel(kShape);
  std::vector<float> gx, gw, y;
  std::vector<int32_t> idx;
  ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<coll::UcxCommunicator>& comm) {
    const CommAxes axes = pipe_axes(comm);
    Graph g;
    if (comm->rank() == 0) {
      const ValueId x = g.add_input("x", dtype, kShape);
      const std::vector<ValueId> send = g.add_op("pipe_send_topk", "send", {x}, send_attrs(keep));
      g.set_loss(send[0]);
      const size_t forward_nodes = g.nodes().size();
      const ValueId grad = build_backward(g, send[0], {x}).at(0);
      ASSERT_GE(grad, 0);
      EXPECT_EQ(g.node(g.value(grad).producer).op->name, "pipe_recv_at");
      Env env = run_like_trainer(g, forward_nodes, send[0], {grad}, {{x, make_tensor(kShape, dtype, x_value)}}, axes);
      gx = floats(env.at(grad));
      idx = ints(env.at(send[1]));
    } else {
      const std::vector<ValueId> recv = g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(keep, kShape, dtype));
      const ValueId w = g.add_input("w", dtype, kShape);
      const ValueId prod = g.add_op("mul", "yw", {recv[0], w}, Attrs()).at(0);
      const ValueId loss = g.add_op("sum", "loss", {prod}, Attrs()).at(0);
      g.set_loss(loss);
      const size_t forward_nodes = g.nodes().size();
      const ValueId grad_w = build_backward(g, loss, {w}).at(0);
      std::vector<ValueId> targets = {grad_w};
      for (size_t k = forward_nodes; k < g.nodes().size(); ++k)
        if (g.nodes()[k].op->name == "pipe_send_at") targets.push_back(g.nodes()[k].outputs[0]);
      ASSERT_EQ(targets.size(), 2u) << "one pipe_send_at in stage 1's backward";
      Env env = run_like_trainer(g, forward_nodes, loss, targets, {{w, make_tensor(kShape, dtype, w_value)}}, axes);
      gw = floats(env.at(grad_w));
    }
  });
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = x_value(i);
  ASSERT_EQ(idx, reference_topk(x, topk_count(n, keep)));
  ASSERT_EQ(gx.size(), static_cast<size_t>(n));
  ASSERT_EQ(gw.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const bool kept = std::binary_search(idx.begin(), idx.end(), static_cast<int32_t>(i));
    EXPECT_EQ(gx[static_cast<size_t>(i)], kept ? w_value(i) : 0.0f) << "dloss/dx at " << i;
    EXPECT_EQ(gw[static_cast<size_t>(i)], kept ? x_value(i) : 0.0f) << "dloss/dw at " << i;
  }
}

// (6) Rebatched graphs (Graph::with_batch): the received shape follows the batch, and so do k and
// idx on both sides.
TEST_P(PipeTopk, RebatchedEdgesCarryKOfTheNewBatch) {
  const DType dtype = GetParam();
  const double keep = 0.3;
  const Shape wide = {8, 5};
  const Forward f = run_forward(dtype, keep, kShape, 8);
  std::vector<float> x(40);
  for (int64_t i = 0; i < 40; ++i) x[static_cast<size_t>(i)] = x_value(i);
  const std::vector<int32_t> want = reference_topk(x, 12);
  EXPECT_EQ(topk_count(40, keep), 12);
  EXPECT_EQ(f.sent_idx, want);
  EXPECT_EQ(f.received_idx, want);
  ASSERT_EQ(f.y.size(), 40u);
  for (int64_t i = 0; i < 40; ++i) {
    const bool kept = std::binary_search(want.begin(), want.end(), static_cast<int32_t>(i));
    EXPECT_EQ(f.y[static_cast<size_t>(i)], kept ? x[static_cast<size_t>(i)] : 0.0f) << i;
  }
  // The shape rules: every op with a 'shape' rewrites it, idx follows.
  Graph g;
  const std::vector<ValueId> recv = g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(keep, kShape, dtype));
  Attrs at = pipe_attrs("pipe_grad", "pipe", 0);
  at.set("shape", kShape);
  at.set("dtype", static_cast<int64_t>(dtype));
  g.add_op("pipe_recv_at", "back", {recv[1]}, at);
  const Graph h = g.with_batch(8);
  EXPECT_EQ(h.nodes()[0].attrs.get_ints("shape"), wide);
  EXPECT_EQ(h.value(h.nodes()[0].outputs[0]).type.shape, wide);
  EXPECT_EQ(h.value(h.nodes()[0].outputs[1]).type.shape, (Shape{12}));
  EXPECT_EQ(h.nodes()[1].attrs.get_ints("shape"), wide);
  EXPECT_EQ(h.value(h.nodes()[1].outputs[0]).type.shape, wide);
}

INSTANTIATE_TEST_SUITE_P(DTypes, PipeTopk, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(PipeTopkCount, KIsTheCeilingOfKeepTimesNumelAtLeastOne) {
  EXPECT_EQ(topk_count(30, 0.1), 3);  // 0.1 * 30 is 3.0000000000000004 in doubles
  EXPECT_EQ(topk_count(20, 0.3), 6);
  EXPECT_EQ(topk_count(7, 0.5), 4);
  EXPECT_EQ(topk_count(3, 0.34), 2);
  EXPECT_EQ(topk_count(10, 1e-9), 1);
  EXPECT_EQ(topk_count(20, 1.0), 20);
  EXPECT_EQ(topk_count(1, 0.01), 1);
  // 3 of 30: a one-word bitmap (4 bytes) instead of 3 indices (12).
  EXPECT_EQ(topk_message_bytes(30, 0.1, DType::kF32), 16u);
  EXPECT_EQ(topk_message_bytes(30, 0.1, DType::kBF16), 10u);
  // 1 of 30: one index (4 bytes), no smaller than the bitmap.
  EXPECT_EQ(topk_message_bytes(30, 0.02, DType::kF32), 8u);
  // 100 of 10000: 400 bytes of indices against a 1252-byte bitmap; 1000: 4000 against 1252.
  EXPECT_FALSE(topk_bitmap(10000, 100));
  EXPECT_EQ(topk_index_bytes(10000, 100), 400u);
  EXPECT_TRUE(topk_bitmap(10000, 1000));
  EXPECT_EQ(topk_index_bytes(10000, 1000), 1252u);
  EXPECT_DOUBLE_EQ(topk_index_bytes_per_entry(0.01), 0.04);
  EXPECT_DOUBLE_EQ(topk_index_bytes_per_entry(0.5), 0.125);
  EXPECT_EQ(topk_gradient_bytes(30, 0.1, DType::kF32), 12u);
  EXPECT_EQ(topk_gradient_bytes(30, 0.1, DType::kBF16), 6u);
  expect_error([] { topk_count(10, 0.0); }, Status::kInvalidArgument,
               "top-k: keep is 0, expected a fraction in (0, 1]");
  expect_error([] { topk_count(0, 0.5); }, Status::kInvalidArgument, "top-k: 0 elements, expected 1 to 2147483647");
  expect_error([] { topk_message_bytes(10, 0.5, DType::kI32); }, Status::kInvalidArgument,
               "top-k: dtype i32, expected f32 or bf16");
}

// (4) Attributes and shapes, checked when the node is added, each error naming what is wrong.
TEST(PipeTopkChecks, BadKeepShapeDtypeAndIndicesAreRefusedByName) {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, kShape);
  for (double keep :
       {0.0, 1.5, -0.25, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    expect_error([&] { g.add_op("pipe_send_topk", "send", {x}, send_attrs(keep)); }, Status::kInvalidArgument,
                 {"pipe_send_topk 'send': attribute 'keep' is ", ", expected a fraction in (0, 1]"});
    expect_error([&] { g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(keep, kShape, DType::kF32)); },
                 Status::kInvalidArgument,
                 {"pipe_recv_topk 'recv': attribute 'keep' is ", "expected a fraction in (0, 1]"});
  }
  expect_error([&] { g.add_op("pipe_send_topk", "send", {x}, send_attrs(1.5)); }, Status::kInvalidArgument,
               "attribute 'keep' is 1.5, expected a fraction in (0, 1]");
  expect_error(
      [&] {
        g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(0.5, {0, 5}, DType::kF32));
      },
      Status::kInvalidArgument,
      "pipe_recv_topk 'recv': attribute 'shape' is [0, 5]: a top-k edge carries 1 to 2147483647 elements");
  expect_error(
      [&] {
        g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(0.5, {-1, 5}, DType::kF32));
      },
      Status::kInvalidArgument, "attribute 'shape' is [-1, 5]: a negative dim");
  expect_error(
      [&] {
        g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(0.5, {1 << 16, 1 << 16}, DType::kF32));
      },
      Status::kInvalidArgument, "a top-k edge carries 1 to 2147483647 elements (int32 indices)");
  expect_error([&] { g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(0.5, kShape, DType::kI32)); },
               Status::kInvalidArgument, "attribute 'dtype' is i32, expected f32 or bf16");
  const ValueId huge = g.add_input("huge", DType::kF32, {1 << 16, 1 << 16});
  expect_error([&] { g.add_op("pipe_send_topk", "send", {huge}, send_attrs(0.5)); }, Status::kShapeMismatch,
               "pipe_send_topk 'send': input 0 is [65536, 65536]: a top-k edge carries 1 to 2147483647 elements");
  const ValueId ids = g.add_input("ids", DType::kI32, kShape);
  expect_error([&] { g.add_op("pipe_send_topk", "send", {ids}, send_attrs(0.5)); }, Status::kShapeMismatch,
               "pipe_send_topk 'send': input 0 has dtype i32, expected f32 or bf16");
  expect_error([&] { g.add_op("pipe_send_topk", "send", {x}, pipe_topk_attrs("", "pipe_grad", 1, 0.5)); },
               Status::kInvalidArgument, "attributes 'axis' and 'reverse_axis' must name grid axes");
  // The index input of the gradient's pair: i32 [k], k at most the dense tensor's elements.
  Attrs at = pipe_attrs("pipe_grad", "pipe", 0);
  at.set("shape", kShape);
  const ValueId long_idx = g.add_input("long_idx", DType::kI32, {21});
  const ValueId wide_idx = g.add_input("wide_idx", DType::kI64, {6});
  expect_error([&] { g.add_op("pipe_recv_at", "back", {long_idx}, at); }, Status::kShapeMismatch,
               "pipe_recv_at 'back': input 0 (idx) holds 21 indices, expected 1 to 20");
  expect_error(
      [&] {
        g.add_op("pipe_send_at", "back", {x, wide_idx}, pipe_attrs("pipe_grad", "pipe", 0));
      },
      Status::kShapeMismatch, "pipe_send_at 'back': input 1 (idx) is [6] i64, expected i32 [k]");
  Attrs no_shape = pipe_attrs("pipe_grad", "pipe", 0);
  expect_error([&] { g.add_op("pipe_recv_at", "back", {long_idx}, no_shape); }, Status::kInvalidArgument, "shape");
}

// A message whose indices are not strictly ascending within the tensor, or whose bitmap marks
// an entry past it or another count than k (a corrupt or mismatched peer), is refused before any
// index is used.
TEST(PipeTopkChecks, AReceivedMessageWithBadIndicesIsRefused) {
  struct Bad {
    double keep;
    std::vector<int32_t> head;  // the index block as sent (then zeros for the values)
    std::string error;
  };
  const std::vector<Bad> cases = {
      {0.05, {25}, "index 0 is 25, expected strictly ascending indices below 20"},
      {0.3, {static_cast<int32_t>(0x3f | 1u << 25)}, "its bitmap marks an entry at or past 20, expected 6 of 20"},
      {0.3, {0x1f}, "its bitmap marks 5 entries, expected 6 of 20"},
  };
  for (const Bad& bad : cases) {
    ct::run_ranks_shared(2, ct::RankSetup(), [&](const std::shared_ptr<coll::UcxCommunicator>& comm) {
      const CommAxes axes = pipe_axes(comm);
      const int64_t k = topk_count(20, bad.keep);
      if (comm->rank() == 0) {
        std::vector<int32_t> message = bad.head;
        message.resize(message.size() + static_cast<size_t>(k), 0);
        comm->send(message.data(), message.size() * 4, coll::DataType::kU8, 1)->wait();
      } else {
        Graph g;
        const std::vector<ValueId> recv =
            g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(bad.keep, kShape, DType::kF32));
        expect_error([&] { run(g, {recv[0]}, {}, axes); }, Status::kCorrupt,
                     "pipe_recv_topk: the message from peer 0 of grid axis 'pipe': " + bad.error);
      }
    });
  }
}

// (5) Graph files keep the four operators with their attributes; shape inference agrees after.
TEST(PipeTopkGraphFile, TheOperatorsRoundTripThroughSerialization) {
  Graph g;
  const ValueId x = g.add_input("x", DType::kBF16, kShape);
  g.add_op("pipe_send_topk", "send", {x}, send_attrs(0.3));
  const std::vector<ValueId> recv = g.add_op("pipe_recv_topk", "recv", {}, recv_attrs(0.3, kShape, DType::kBF16));
  g.add_op("pipe_send_at", "back_send", {recv[0], recv[1]}, pipe_attrs("pipe_grad", "pipe", 0));
  Attrs at = pipe_attrs("pipe_grad", "pipe", 1);
  at.set("shape", kShape);
  at.set("dtype", static_cast<int64_t>(DType::kBF16));
  const ValueId dense = g.add_op("pipe_recv_at", "back_recv", {recv[1]}, at).at(0);
  g.mark_output(dense);
  const std::vector<uint8_t> bytes = serialize_graph(g);
  const Graph h = deserialize_graph(bytes.data(), bytes.size(), "test");
  ASSERT_EQ(h.nodes().size(), g.nodes().size());
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& a = g.nodes()[k];
    const Node& b = h.nodes()[k];
    EXPECT_EQ(b.op->name, a.op->name);
    EXPECT_EQ(b.name, a.name);
    EXPECT_TRUE(b.attrs == a.attrs) << a.name;
    ASSERT_EQ(b.outputs.size(), a.outputs.size()) << a.name;
    for (size_t o = 0; o < a.outputs.size(); ++o)
      EXPECT_TRUE(h.value(b.outputs[o]).type == g.value(a.outputs[o]).type) << a.name << " output " << o;
  }
  EXPECT_EQ(h.nodes()[0].attrs.get_float("keep"), 0.3);
  EXPECT_EQ(serialize_graph(h), bytes);
}

}  // namespace
}  // namespace cohort
