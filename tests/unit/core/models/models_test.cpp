// Model builders: parameter names, shapes and counts (GPT's checked against a hand count),
// config validation messages, and short training runs whose loss falls.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "core/base/error.h"
#include "core/exec/trainer.h"
#include "core/models/cnn.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "tests/support/expect_error.h"

namespace cohort::models {
namespace {

using ::cohort::test::expect_error;

std::map<std::string, Shape> parameter_shapes(const Graph& g) {
  std::map<std::string, Shape> out;
  for (ValueId p : g.parameters()) out[g.value(p).name] = g.value(p).type.shape;
  return out;
}

int64_t parameter_elements(const Graph& g) {
  int64_t n = 0;
  for (ValueId p : g.parameters()) n += shape_numel(g.value(p).type.shape);
  return n;
}

TEST(Mlp, NamesShapesAndInit) {
  MlpConfig c;
  c.batch = 4, c.in_features = 6, c.hidden = {5, 3}, c.classes = 2, c.activation = "tanh";
  Graph g = build_mlp(c);
  auto p = parameter_shapes(g);
  std::map<std::string, Shape> want = {{"fc1.weight", {5, 6}}, {"fc1.bias", {5}}, {"fc2.weight", {3, 5}},
                                       {"fc2.bias", {3}},      {"fc3.weight", {2, 3}}, {"fc3.bias", {2}}};
  EXPECT_EQ(p, want);
  const Value& w = g.value(g.find("fc2.weight"));
  EXPECT_EQ(w.init.kind, InitKind::kKaimingUniform);
  EXPECT_NEAR(w.init.a * std::sqrt(3.0 / 5.0), 1.0 / std::sqrt(5.0), 1e-12);  // bound 1/sqrt(fan_in)
  const Value& b = g.value(g.find("fc2.bias"));
  EXPECT_EQ(b.init.kind, InitKind::kUniform);
  EXPECT_NEAR(b.init.b, 1.0 / std::sqrt(5.0), 1e-12);
  EXPECT_NEAR(b.init.a, -1.0 / std::sqrt(5.0), 1e-12);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "logits");
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{4, 2}));
  EXPECT_EQ(g.value(g.loss()).name, "loss");
  EXPECT_EQ(g.value(g.find("y")).type.dtype, DType::kI32);
}

TEST(Mlp, Validation) {
  MlpConfig c;
  c.activation = "swish";
  expect_error([&] { build_mlp(c); }, Status::kInvalidArgument, "mlp: activation 'swish' must be relu, gelu or tanh");
  c = MlpConfig();
  c.hidden = {4, 0};
  expect_error([&] { build_mlp(c); }, Status::kInvalidArgument, "mlp: hidden[1] (0) must be in 1..2^30");
  c = MlpConfig();
  c.batch = 0;
  expect_error([&] { build_mlp(c); }, Status::kInvalidArgument, "mlp: batch (0)");
}

TEST(Cnn, NamesAndShapes) {
  CnnConfig c;  // Fashion-MNIST defaults: widths 16, 32, 64
  Graph g = build_cnn(c);
  auto p = parameter_shapes(g);
  EXPECT_EQ(p.at("stem.conv.weight"), (Shape{16, 1, 3, 3}));
  EXPECT_EQ(p.at("stem.norm.weight"), (Shape{16}));
  EXPECT_EQ(p.at("layer1.0.conv1.weight"), (Shape{16, 16, 3, 3}));
  EXPECT_EQ(p.count("layer1.0.shortcut.conv.weight"), 0u);  // identity shortcut
  EXPECT_EQ(p.at("layer2.0.conv1.weight"), (Shape{32, 16, 3, 3}));
  EXPECT_EQ(p.at("layer2.0.shortcut.conv.weight"), (Shape{32, 16, 1, 1}));
  EXPECT_EQ(p.at("layer3.0.shortcut.norm.bias"), (Shape{64}));
  EXPECT_EQ(p.at("head.weight"), (Shape{10, 64}));
  EXPECT_EQ(p.at("head.bias"), (Shape{10}));
  // stem 144 + 2*16; layer1 2*2304 + 2*32; layer2 4608 + 9216 + 512 + 3*64; layer3 18432 + 36864 + 2048
  // + 3*128; head 650.
  EXPECT_EQ(parameter_elements(g), 176 + 4672 + 14528 + 57728 + 650);
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{32, 10}));
  EXPECT_EQ(g.value(g.find("layer3.0.relu2")).type.shape, (Shape{32, 64, 7, 7}));
}

TEST(Cnn, Validation) {
  CnnConfig c;
  c.widths = {12, 24};
  expect_error([&] { build_cnn(c); }, Status::kInvalidArgument, "cnn: groups (8) must divide widths[0] (12)");
  c = CnnConfig();
  c.widths = {};
  expect_error([&] { build_cnn(c); }, Status::kInvalidArgument, "cnn: widths has 0 stages");
  c = CnnConfig();
  c.height = -3;
  expect_error([&] { build_cnn(c); }, Status::kInvalidArgument, "cnn: height (-3)");
}

TEST(Gpt, ParameterCountByHand) {
  GptConfig c;  // L 4, C 256, H 4, T 128, V 256, tied
  Graph g = build_gpt(c);
  // wte 256*256 = 65536; wpe 128*256 = 32768; per layer: ln_1 512, c_attn 768*256 + 768 = 197376,
  // attn.c_proj 65536 + 256 = 65792, ln_2 512, c_fc 1024*256 + 1024 = 263168, mlp.c_proj
  // 256*1024 + 256 = 262400 -> 789760; 4 layers 3159040; ln_f 512. Total 3257856.
  EXPECT_EQ(parameter_elements(g), 3257856);
  EXPECT_EQ(gpt_parameter_count(c), 3257856);
  EXPECT_EQ(g.parameters().size(), 2u + 4u * 12u + 2u);
  c.tie_weights = false;
  Graph untied = build_gpt(c);
  EXPECT_EQ(parameter_elements(untied), 3257856 + 65536);
  EXPECT_EQ(gpt_parameter_count(c), 3257856 + 65536);
  EXPECT_EQ(parameter_shapes(untied).at("lm_head.weight"), (Shape{256, 256}));
}

TEST(Gpt, NamesShapesAndInit) {
  GptConfig c;
  c.batch = 2, c.layers = 2, c.width = 64, c.heads = 4, c.context = 16, c.vocab = 50;
  Graph g = build_gpt(c);
  auto p = parameter_shapes(g);
  std::map<std::string, Shape> want = {{"wte.weight", {50, 64}}, {"wpe.weight", {16, 64}},
                                       {"ln_f.weight", {64}},    {"ln_f.bias", {64}}};
  for (int l = 0; l < 2; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    want[h + "ln_1.weight"] = {64}, want[h + "ln_1.bias"] = {64};
    want[h + "attn.c_attn.weight"] = {192, 64}, want[h + "attn.c_attn.bias"] = {192};
    want[h + "attn.c_proj.weight"] = {64, 64}, want[h + "attn.c_proj.bias"] = {64};
    want[h + "ln_2.weight"] = {64}, want[h + "ln_2.bias"] = {64};
    want[h + "mlp.c_fc.weight"] = {256, 64}, want[h + "mlp.c_fc.bias"] = {256};
    want[h + "mlp.c_proj.weight"] = {64, 256}, want[h + "mlp.c_proj.bias"] = {64};
  }
  EXPECT_EQ(p, want);
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{2, 16, 50}));
  EXPECT_EQ(g.value(g.find("tokens")).type, (TensorType{DType::kI32, {2, 16}}));
  EXPECT_EQ(g.value(g.find("targets")).type, (TensorType{DType::kI32, {2, 16}}));
  const Initializer& wte = g.value(g.find("wte.weight")).init;
  EXPECT_EQ(wte.kind, InitKind::kNormal);
  EXPECT_DOUBLE_EQ(wte.b, 0.02);
  EXPECT_DOUBLE_EQ(g.value(g.find("h.1.mlp.c_proj.weight")).init.b, 0.02 / 2.0);  // 1/sqrt(2 L), L = 2
  EXPECT_EQ(g.value(g.find("h.0.attn.c_attn.bias")).init.kind, InitKind::kZeros);
  EXPECT_EQ(g.value(g.find("h.0.ln_1.weight")).init.kind, InitKind::kOnes);
  // Evaluation on another batch size replays the graph.
  Graph g3 = g.with_batch(3);
  EXPECT_EQ(g3.value(g3.outputs()[0]).type.shape, (Shape{3, 16, 50}));
}

TEST(Gpt, Validation) {
  GptConfig c;
  c.heads = 3;
  expect_error([&] { build_gpt(c); }, Status::kInvalidArgument, "gpt: heads (3) must divide width (256)");
  c = GptConfig();
  c.dropout = 1.0;
  expect_error([&] { build_gpt(c); }, Status::kInvalidArgument, "gpt: dropout (1) must be in [0, 1)");
  c = GptConfig();
  c.layers = 0;
  expect_error([&] { gpt_parameter_count(c); }, Status::kInvalidArgument, "gpt: layers (0) must be in 1..1024");
  c = GptConfig();
  c.vocab = -1;
  expect_error([&] { build_gpt(c); }, Status::kInvalidArgument, "gpt: vocab (-1)");
}

// Runs `steps` AdamW steps on fixed inputs; returns the first and last losses.
std::pair<float, float> train(const Graph& g, std::map<std::string, Tensor> inputs, int steps, double lr) {
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kAdamW;
  oc.lr = lr;
  TrainerOptions to;
  to.seed = 1234;
  Trainer t(g, oc, to);
  float first = t.step(inputs), last = first;
  for (int i = 1; i < steps; ++i) last = t.step(inputs);
  return {first, last};
}

TEST(Gpt, TinyModelLearnsASequence) {
  GptConfig c;
  c.batch = 4, c.layers = 2, c.width = 32, c.heads = 2, c.context = 16, c.vocab = 32, c.dropout = 0.1;
  Graph g = build_gpt(c);
  Tensor tokens = Tensor::empty({4, 16}, DType::kI32), targets = Tensor::empty({4, 16}, DType::kI32);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 16; ++t) {
      tokens.data<int32_t>()[b * 16 + t] = static_cast<int32_t>((b * 5 + t * 3) % 32);
      targets.data<int32_t>()[b * 16 + t] = static_cast<int32_t>((b * 5 + t * 3 + 3) % 32);
    }
  auto [first, last] = train(g, {{"tokens", tokens}, {"targets", targets}}, 30, 3e-3);
  EXPECT_NEAR(first, std::log(32.0), 0.5);  // small init: close to uniform
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

// bf16 parameters and activations, an fp32 master copy in the optimizer: the same sequence is
// learnt, and the first loss is the fp32 model's to bf16 precision.
TEST(Gpt, Bf16ModelLearnsLikeTheF32One) {
  GptConfig c;
  c.batch = 4, c.layers = 2, c.width = 32, c.heads = 2, c.context = 16, c.vocab = 32;
  Tensor tokens = Tensor::empty({4, 16}, DType::kI32), targets = Tensor::empty({4, 16}, DType::kI32);
  for (int64_t i = 0; i < 64; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 3) % 32);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 3 + 3) % 32);
  }
  const auto [f32_first, f32_last] = train(build_gpt(c), {{"tokens", tokens}, {"targets", targets}}, 30, 3e-3);
  c.dtype = DType::kBF16;
  const Graph g = build_gpt(c);
  for (ValueId p : g.parameters()) EXPECT_EQ(g.value(p).type.dtype, DType::kBF16) << g.value(p).name;
  const auto [first, last] = train(g, {{"tokens", tokens}, {"targets", targets}}, 30, 3e-3);
  EXPECT_NEAR(first, f32_first, 0.02 * f32_first);
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
  EXPECT_NEAR(last, f32_last, 0.1 * f32_first) << "f32 " << f32_first << " -> " << f32_last;
  c.dtype = DType::kI32;
  expect_error([&] { build_gpt(c); }, Status::kInvalidArgument, "gpt: dtype i32 (f32 or bf16)");
}

TEST(Gpt, UntiedTrains) {
  GptConfig c;
  c.batch = 2, c.layers = 1, c.width = 16, c.heads = 2, c.context = 8, c.vocab = 16, c.tie_weights = false;
  Tensor tokens = Tensor::empty({2, 8}, DType::kI32), targets = Tensor::empty({2, 8}, DType::kI32);
  for (int64_t i = 0; i < 16; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>(i % 16),
                                   targets.data<int32_t>()[i] = static_cast<int32_t>((i + 1) % 16);
  auto [first, last] = train(build_gpt(c), {{"tokens", tokens}, {"targets", targets}}, 20, 1e-2);
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

TEST(Cnn, TinyModelLearns) {
  CnnConfig c;
  c.batch = 8, c.channels = 1, c.height = 8, c.width = 8, c.classes = 4, c.widths = {8, 16}, c.groups = 4;
  Graph g = build_cnn(c);
  Tensor x = Tensor::empty({8, 1, 8, 8}, DType::kF32), y = Tensor::empty({8}, DType::kI32);
  for (int64_t n = 0; n < 8; ++n) {
    const int32_t label = static_cast<int32_t>(n % 4);
    y.data<int32_t>()[n] = label;
    for (int64_t i = 0; i < 64; ++i)  // class k: a bright quadrant k plus a little texture
      x.data<float>()[n * 64 + i] = ((i / 32) * 2 + (i % 8) / 4 == label ? 1.0f : 0.0f) + 0.05f * ((n + i) % 3);
  }
  auto [first, last] = train(g, {{"x", x}, {"y", y}}, 15, 1e-2);
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

TEST(Mlp, TrainsOnSeparableData) {
  MlpConfig c;
  c.batch = 16, c.in_features = 4, c.hidden = {16}, c.classes = 2, c.activation = "gelu";
  Tensor x = Tensor::empty({16, 4}, DType::kF32), y = Tensor::empty({16}, DType::kI32);
  for (int64_t n = 0; n < 16; ++n) {
    y.data<int32_t>()[n] = static_cast<int32_t>(n % 2);
    for (int64_t i = 0; i < 4; ++i) x.data<float>()[n * 4 + i] = (n % 2 ? 1.0f : -1.0f) * (0.5f + 0.1f * i);
  }
  auto [first, last] = train(build_mlp(c), {{"x", x}, {"y", y}}, 20, 1e-2);
  EXPECT_LT(last, 0.3f * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace cohort::models
