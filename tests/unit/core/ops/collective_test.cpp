// Collective operators (core/ops/collective.h) at 2 and 4 ranks — one thread and one UCX engine
// each, in this process: every forward against a plain reference, and every backward rule through
// a small SPMD program whose gradient is worked out by hand, so that a wrong rule (the identity
// where a sum belongs, a missing cut) changes the numbers. Collectives have no single-process
// harness cases (op_harness.cpp says why).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/exec/executor.h"
#include "core/graph/autodiff.h"
#include "core/ops/collective.h"
#include "tests/support/expect_error.h"
#include "tests/unit/transport/coll/coll_test_util.h"

namespace cohort {
namespace {

namespace ct = transport::coll::testing;

// Element i of rank r's input `which`: small values, distinct per rank and input.
float input_value(int which, int rank, int64_t i) {
  return static_cast<float>(((which * 5 + rank * 3 + i * 7) % 11) - 5) * 0.25f;
}

Tensor make_input(int which, int rank, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = input_value(which, rank, i);
  return t;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// Runs `g` (built per rank by `build`, whose inputs are named "p<k>", made per rank, or "r<k>",
// the same on every rank) on every rank with its communicator as axis "t"; returns each rank's values of `targets`
// (names), in rank order.
using Build = std::function<std::vector<std::string>(Graph& g, int world)>;
std::vector<std::map<std::string, std::vector<float>>> run_spmd(int world, const Build& build) {
  std::vector<std::map<std::string, std::vector<float>>> out(static_cast<size_t>(world));
  ct::run_ranks_shared(world, ct::RankSetup(), [&](const std::shared_ptr<transport::coll::UcxCommunicator>& comm) {
    Graph g;
    const std::vector<std::string> targets = build(g, comm->size());
    std::vector<ValueId> ids;
    for (const std::string& t : targets) ids.push_back(g.find(t));
    Executor ex(g, ids);
    std::unordered_map<ValueId, Tensor> env;
    for (ValueId v : g.inputs()) {  // "p<k>": per rank; "r<k>": replicated (rank 0's values)
      const std::string& name = g.value(v).name;
      env[v] = make_input(std::stoi(name.substr(1)), name[0] == 'p' ? comm->rank() : 0, g.value(v).type.shape);
    }
    CommAxes axes;
    axes.set("t", comm);
    RunOptions ro;
    ro.axes = &axes;
    ex.run(env, ro);
    auto& mine = out[static_cast<size_t>(comm->rank())];
    for (size_t k = 0; k < ids.size(); ++k) mine[targets[k]] = values(env.at(ids[k]));
  });
  return out;
}

Attrs axis_attrs(int64_t dim = -1, int64_t parts = 0) {
  Attrs a;
  a.set("axis", std::string("t"));
  if (dim >= 0) {
    a.set("dim", dim);
    a.set("parts", parts);
  }
  return a;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " element " << i;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceSumsOverTheAxis) {
  const int world = GetParam();
  auto out = run_spmd(world, [](Graph& g, int) {
    g.add_op("all_reduce", "y", {g.add_input("p0", DType::kF32, {3, 5})}, axis_attrs());
    return std::vector<std::string>{"y"};
  });
  std::vector<double> want(15, 0.0);
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < 15; ++i) want[static_cast<size_t>(i)] += input_value(0, r, i);
  for (int r = 0; r < world; ++r) expect_near(out[static_cast<size_t>(r)]["y"], want, str_cat("rank ", r));
}

// Gathers [2, 3, 4] blocks along each dim: rank r's block lands at [r * extent, (r + 1) * extent)
// of that dim (dims 1 and 2 go through the scratch buffer and its permutation).
TEST_P(Collectives, AllGatherConcatenatesAlongItsDim) {
  const int world = GetParam();
  const Shape block = {2, 3, 4};
  for (int64_t dim = 0; dim < 3; ++dim) {
    auto out = run_spmd(world, [&](Graph& g, int n) {
      g.add_op("all_gather", "y", {g.add_input("p0", DType::kF32, block)}, axis_attrs(dim, n));
      return std::vector<std::string>{"y"};
    });
    Shape whole = block;
    whole[static_cast<size_t>(dim)] *= world;
    std::vector<double> want(static_cast<size_t>(shape_numel(whole)));
    for (int64_t i = 0; i < shape_numel(whole); ++i) {
      Shape at = {i / (whole[1] * whole[2]), (i / whole[2]) % whole[1], i % whole[2]};
      const int r = static_cast<int>(at[static_cast<size_t>(dim)] / block[static_cast<size_t>(dim)]);
      at[static_cast<size_t>(dim)] %= block[static_cast<size_t>(dim)];
      want[static_cast<size_t>(i)] = input_value(0, r, (at[0] * block[1] + at[1]) * block[2] + at[2]);
    }
    for (int r = 0; r < world; ++r) expect_near(out[static_cast<size_t>(r)]["y"], want, str_cat("dim ", dim, " rank ", r));
  }
}

TEST_P(Collectives, ReduceScatterKeepsEachRanksBlockOfTheSum) {
  const int world = GetParam();
  for (int64_t dim = 0; dim < 2; ++dim) {
    const Shape whole = dim == 0 ? Shape{4 * world, 3} : Shape{3, 4 * world};
    auto out = run_spmd(world, [&](Graph& g, int n) {
      g.add_op("reduce_scatter", "y", {g.add_input("p0", DType::kF32, whole)}, axis_attrs(dim, n));
      return std::vector<std::string>{"y"};
    });
    for (int r = 0; r < world; ++r) {
      std::vector<double> want;
      for (int64_t a = 0; a < (dim == 0 ? 4 : 3); ++a)
        for (int64_t b = 0; b < (dim == 0 ? 3 : 4); ++b) {
          const int64_t row = dim == 0 ? r * 4 + a : a, col = dim == 0 ? b : r * 4 + b;
          double s = 0;
          for (int q = 0; q < world; ++q) s += input_value(0, q, row * whole[1] + col);
          want.push_back(s);
        }
      expect_near(out[static_cast<size_t>(r)]["y"], want, str_cat("dim ", dim, " rank ", r));
    }
  }
}

// Megatron's f and g around a per-rank product: y = all_reduce(copy_to_axis(x) W_r), loss =
// sum(y * w), x and w the same on every rank. Then dloss/dx = w (sum_r W_r)^T on every rank
// (copy_to_axis sums the ranks' partial gradients; the identity there would give w W_r^T) and
// dloss/dW_r = x^T w (all_reduce passes the replicated gradient through; a sum would give world
// times it).
TEST_P(Collectives, CopyToAxisAndAllReduceAreMegatronsFAndG) {
  const int world = GetParam();
  std::vector<std::string> names;
  auto out = run_spmd(world, [&](Graph& g, int) {
    ValueId x = g.add_input("r0", DType::kF32, {2, 3});
    ValueId w_r = g.add_input("p1", DType::kF32, {3, 4});
    ValueId w = g.add_input("r2", DType::kF32, {2, 4});
    ValueId xc = g.add_op("copy_to_axis", "f", {x}, axis_attrs()).at(0);
    ValueId h = g.add_op("matmul", "h", {xc, w_r}, Attrs()).at(0);
    ValueId y = g.add_op("all_reduce", "g", {h}, axis_attrs()).at(0);
    ValueId loss = g.add_op("sum", "loss", {g.add_op("mul", "yw", {y, w}, Attrs()).at(0)}, Attrs()).at(0);
    g.set_loss(loss);
    std::vector<ValueId> grads = build_backward(g, loss, {x, w_r});
    names = {g.value(grads[0]).name, g.value(grads[1]).name};
    return std::vector<std::string>{"g", names[0], names[1]};
  });
  auto x = [](int64_t i, int64_t k) { return input_value(0, 0, i * 3 + k); };
  auto w = [](int64_t i, int64_t j) { return input_value(2, 0, i * 4 + j); };
  auto w_sum = [&](int64_t k, int64_t j) {
    double s = 0;
    for (int r = 0; r < world; ++r) s += input_value(1, r, k * 4 + j);
    return s;
  };
  std::vector<double> y(8, 0.0), dx(6, 0.0), dw(12, 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 3; ++k) {
        y[static_cast<size_t>(i * 4 + j)] += x(i, k) * w_sum(k, j);
        dx[static_cast<size_t>(i * 3 + k)] += w(i, j) * w_sum(k, j);
        dw[static_cast<size_t>(k * 4 + j)] += x(i, k) * w(i, j);
      }
  for (int r = 0; r < world; ++r) {
    auto& o = out[static_cast<size_t>(r)];
    expect_near(o["g"], y, str_cat("y on rank ", r));
    expect_near(o[names[0]], dx, str_cat("dloss/dx on rank ", r));
    expect_near(o[names[1]], dw, str_cat("dloss/dW_r on rank ", r));
  }
}

// all_gather feeding per-rank work: G = all_gather(x_r) along dim 0, loss = all_reduce(sum(G *
// W_r)). dloss/dx_r = rows [2r, 2r + 2) of sum_q W_q (the reduce_scatter of the ranks' partial
// gradients), and dloss/dW_r = G.
TEST_P(Collectives, AllGatherBackwardIsReduceScatter) {
  const int world = GetParam();
  std::vector<std::string> names;
  auto out = run_spmd(world, [&](Graph& g, int n) {
    ValueId x = g.add_input("p0", DType::kF32, {2, 3});
    ValueId w_r = g.add_input("p1", DType::kF32, {2 * n, 3});
    ValueId gathered = g.add_op("all_gather", "G", {x}, axis_attrs(0, n)).at(0);
    ValueId s = g.add_op("sum", "s", {g.add_op("mul", "Gw", {gathered, w_r}, Attrs()).at(0)}, Attrs()).at(0);
    ValueId loss = g.add_op("all_reduce", "loss", {s}, axis_attrs()).at(0);
    g.set_loss(loss);
    std::vector<ValueId> grads = build_backward(g, loss, {x, w_r});
    names = {g.value(grads[0]).name, g.value(grads[1]).name};
    return std::vector<std::string>{names[0], names[1]};
  });
  for (int r = 0; r < world; ++r) {
    std::vector<double> dx, dw;
    for (int64_t i = 0; i < 6; ++i) {
      double s = 0;
      for (int q = 0; q < world; ++q) s += input_value(1, q, r * 6 + i);
      dx.push_back(s);
    }
    for (int64_t i = 0; i < 6 * world; ++i) dw.push_back(input_value(0, static_cast<int>(i / 6), i % 6));
    expect_near(out[static_cast<size_t>(r)][names[0]], dx, str_cat("dloss/dx on rank ", r));
    expect_near(out[static_cast<size_t>(r)][names[1]], dw, str_cat("dloss/dW_r on rank ", r));
  }
}

// reduce_scatter of partial values: z_r = rows [2r, 2r + 2) of sum_q x_q, loss =
// all_reduce(sum(z_r * W_r)). dloss/dx_q = the W_r stacked in rank order, on every rank (the
// all_gather of the blocks' gradients), and dloss/dW_r = z_r.
TEST_P(Collectives, ReduceScatterBackwardIsAllGather) {
  const int world = GetParam();
  std::vector<std::string> names;
  auto out = run_spmd(world, [&](Graph& g, int n) {
    ValueId x = g.add_input("p0", DType::kF32, {2 * n, 3});
    ValueId w_r = g.add_input("p1", DType::kF32, {2, 3});
    ValueId z = g.add_op("reduce_scatter", "z", {x}, axis_attrs(0, n)).at(0);
    ValueId s = g.add_op("sum", "s", {g.add_op("mul", "zw", {z, w_r}, Attrs()).at(0)}, Attrs()).at(0);
    ValueId loss = g.add_op("all_reduce", "loss", {s}, axis_attrs()).at(0);
    g.set_loss(loss);
    std::vector<ValueId> grads = build_backward(g, loss, {x, w_r});
    names = {g.value(grads[0]).name, g.value(grads[1]).name};
    return std::vector<std::string>{names[0], names[1]};
  });
  std::vector<double> dx;
  for (int64_t i = 0; i < 6 * world; ++i) dx.push_back(input_value(1, static_cast<int>(i / 6), i % 6));
  for (int r = 0; r < world; ++r) {
    std::vector<double> dw;
    for (int64_t i = 0; i < 6; ++i) {
      double s = 0;
      for (int q = 0; q < world; ++q) s += input_value(0, q, r * 6 + i);
      dw.push_back(s);
    }
    expect_near(out[static_cast<size_t>(r)][names[0]], dx, str_cat("dloss/dx on rank ", r));
    expect_near(out[static_cast<size_t>(r)][names[1]], dw, str_cat("dloss/dW_r on rank ", r));
  }
}

// The pair for replicated data. split: x replicated [2, 3n], s_r = block r of x along dim 1,
// loss = all_reduce(sum(s_r * W_r)): dloss/dx = the W_q side by side along dim 1 on every rank
// (gathered), dloss/dW_r = s_r. gather: G = gather_from_axis(p2_r) along dim 1, used alike by
// every rank (loss2 = sum(G * V), V replicated): dloss2/dp2_r = block r of V (no sum: a sum would
// make it n times too large, what all_gather's backward would give).
TEST_P(Collectives, SplitToAxisAndGatherFromAxisKeepReplicatedGradientsWhole) {
  const int world = GetParam();
  std::vector<std::string> names;
  auto out = run_spmd(world, [&](Graph& g, int n) {
    ValueId x = g.add_input("r0", DType::kF32, {2, 3 * n});
    ValueId w_r = g.add_input("p1", DType::kF32, {2, 3});
    ValueId part = g.add_op("split_to_axis", "s", {x}, axis_attrs(1, n)).at(0);
    ValueId s = g.add_op("sum", "sum", {g.add_op("mul", "sw", {part, w_r}, Attrs()).at(0)}, Attrs()).at(0);
    ValueId loss1 = g.add_op("all_reduce", "loss1", {s}, axis_attrs()).at(0);
    ValueId p2 = g.add_input("p2", DType::kF32, {2, 3});
    ValueId v = g.add_input("r3", DType::kF32, {2, 3 * n});
    ValueId gathered = g.add_op("gather_from_axis", "G", {p2}, axis_attrs(1, n)).at(0);
    ValueId loss2 = g.add_op("sum", "loss2", {g.add_op("mul", "Gv", {gathered, v}, Attrs()).at(0)}, Attrs()).at(0);
    ValueId loss = g.add_op("add", "loss", {loss1, loss2}, Attrs()).at(0);
    g.set_loss(loss);
    std::vector<ValueId> grads = build_backward(g, loss, {x, w_r, p2});
    names = {g.value(grads[0]).name, g.value(grads[1]).name, g.value(grads[2]).name, "s", "G"};
    return names;
  });
  for (int r = 0; r < world; ++r) {
    std::vector<double> dx, dw, dp2, split, gathered;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3 * world; ++j) {
        const int q = static_cast<int>(j / 3);
        dx.push_back(input_value(1, q, i * 3 + j % 3));
        gathered.push_back(input_value(2, q, i * 3 + j % 3));
      }
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        split.push_back(input_value(0, 0, i * 3 * world + r * 3 + j));
        dp2.push_back(input_value(3, 0, i * 3 * world + r * 3 + j));
      }
    dw = split;
    const auto& got = out[static_cast<size_t>(r)];
    expect_near(got.at("s"), split, str_cat("split_to_axis on rank ", r));
    expect_near(got.at("G"), gathered, str_cat("gather_from_axis on rank ", r));
    expect_near(got.at(names[0]), dx, str_cat("dloss/dx on rank ", r));
    expect_near(got.at(names[1]), dw, str_cat("dloss/dW_r on rank ", r));
    expect_near(got.at(names[2]), dp2, str_cat("dloss/dp2_r on rank ", r));
  }
}

// all_to_all as sequence parallelism uses it (heads for tokens): x_r [2 tokens, 3 groups x n] ->
// y_r [2n tokens, 3], y_r[2q + t, g] = x_q[t, g n + r] (rank q's tokens, this rank's column of
// each group). loss = all_reduce(sum(y_r * W_r)): dloss/dx_q[t, g n + r] = W_r[2q + t, g], the
// exchange back.
TEST_P(Collectives, AllToAllExchangesGroupedFeatureBlocksForTokenBlocks) {
  const int world = GetParam();
  std::vector<std::string> names;
  auto out = run_spmd(world, [&](Graph& g, int n) {
    ValueId x = g.add_input("p0", DType::kF32, {2, 3 * n});
    ValueId w = g.add_input("p1", DType::kF32, {2 * n, 3});
    Attrs a = axis_attrs();
    a.set("parts", int64_t{n});
    a.set("split_dim", int64_t{1});
    a.set("split_groups", int64_t{3});
    a.set("concat_dim", int64_t{0});
    ValueId y = g.add_op("all_to_all", "y", {x}, a).at(0);
    ValueId s = g.add_op("sum", "s", {g.add_op("mul", "yw", {y, w}, Attrs()).at(0)}, Attrs()).at(0);
    ValueId loss = g.add_op("all_reduce", "loss", {s}, axis_attrs()).at(0);
    g.set_loss(loss);
    names = {"y", g.value(build_backward(g, loss, {x})[0]).name};
    return names;
  });
  const int64_t n = world;
  for (int r = 0; r < world; ++r) {
    std::vector<double> y, dx;
    for (int64_t q = 0; q < n; ++q)
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t g = 0; g < 3; ++g) y.push_back(input_value(0, static_cast<int>(q), t * 3 * n + g * n + r));
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t f = 0; f < 3 * n; ++f) {
        const int64_t g = f / n, owner = f % n;  // the rank whose y holds this element
        dx.push_back(input_value(1, static_cast<int>(owner), (2 * r + t) * 3 + g));
      }
    expect_near(out[static_cast<size_t>(r)][names[0]], y, str_cat("all_to_all on rank ", r));
    expect_near(out[static_cast<size_t>(r)][names[1]], dx, str_cat("its gradient on rank ", r));
  }
}

// Without the axes (a graph not made by a plan) a collective names what is missing.
TEST(CollectivesAlone, WithoutAxesTheRunFailsNamingTheAxis) {
  Graph g;
  ValueId y = g.add_op("all_reduce", "y", {g.add_input("x", DType::kF32, {4})}, axis_attrs()).at(0);
  Executor ex(g, {y});
  std::unordered_map<ValueId, Tensor> env = {{g.find("x"), Tensor::zeros({4}, DType::kF32)}};
  test::expect_error([&] { ex.run(env, RunOptions()); }, Status::kInvalidState,
                     "all_reduce: the run has no grid axes");
  CommAxes none;
  RunOptions ro;
  ro.axes = &none;
  env = {{g.find("x"), Tensor::zeros({4}, DType::kF32)}};
  test::expect_error([&] { ex.run(env, ro); }, Status::kInvalidState, "no communicator for grid axis 't'");
}

TEST(CollectivesAlone, ShapeRulesCheckDimAndParts) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {6, 4});
  test::expect_error([&] { g.add_op("reduce_scatter", "rs", {x}, axis_attrs(1, 3)); }, Status::kShapeMismatch,
                     "reduce_scatter 'rs': input 0 has shape [6, 4]: dim 1 (4) is not divisible by the 3 ranks of axis 't'");
  test::expect_error([&] { g.add_op("all_gather", "ag", {x}, axis_attrs(2, 2)); }, Status::kInvalidArgument,
                     "all_gather 'ag': attribute 'dim' is 2, out of range");
  Attrs empty;
  empty.set("axis", std::string());
  test::expect_error([&] { g.add_op("all_reduce", "ar", {x}, empty); }, Status::kInvalidArgument,
                     "attribute 'axis' is empty");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return str_cat(i.param, "ranks"); });

}  // namespace
}  // namespace cohort
