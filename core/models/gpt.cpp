// The GPT-2 style builder; see gpt.h for the architecture and the naming.
#include "core/models/gpt.h"

#include <cmath>

#include "core/base/error.h"
#include "core/models/layers.h"

namespace cohort::models {

namespace {
constexpr double kInitStd = 0.02;

void check_range(const char* field, int64_t v, int64_t max) {
  COHORT_CHECK(v >= 1 && v <= max, Status::kInvalidArgument, "gpt: ", field, " (", v, ") must be in 1..", max);
}

// Dropout with a distinct seed per site so two sites never share a mask.
ValueId maybe_dropout(Graph& g, const GptConfig& c, const std::string& name, ValueId x, int64_t site) {
  if (c.dropout == 0.0) return x;
  Attrs a;
  a.set("p", c.dropout);
  a.set("seed", site);
  return g.add_op("dropout", name, {x}, a).at(0);
}

// One pre-LN block; x: (B, T, C) -> (B, T, C).
ValueId add_block(Graph& g, const GptConfig& c, int64_t l, ValueId x) {
  const int64_t C = c.width;
  const std::string p = "h." + std::to_string(l);
  LinearInit lin;
  lin.weight = normal_init(kInitStd);
  lin.torch_bias = false;  // GPT-2: biases start at 0
  LinearInit proj = lin;
  if (c.scale_residual_init) proj.weight = normal_init(kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers)));

  ValueId h = add_layernorm(g, p + ".ln_1", x, C, c.eps);
  h = add_linear(g, p + ".attn.c_attn", h, C, 3 * C, true, lin);  // (B, T, 3C)
  Attrs at;
  at.set("heads", c.heads);
  at.set("causal", int64_t{1});
  h = g.add_op("attention", p + ".attn", {h}, at).at(0);  // (B, T, C)
  h = add_linear(g, p + ".attn.c_proj", h, C, C, true, proj);
  h = maybe_dropout(g, c, p + ".attn.dropout", h, 2 * l + 1);
  x = add_binary(g, "add", p + ".residual_1", x, h);

  h = add_layernorm(g, p + ".ln_2", x, C, c.eps);
  h = add_linear(g, p + ".mlp.c_fc", h, C, 4 * C, true, lin);                   // (B, T, 4C)
  Attrs mlp;
  if (c.recompute_gelu) mlp.set("recompute", int64_t{1});
  h = add_linear(g, p + ".mlp.c_proj", h, 4 * C, C, true, proj, "gelu_linear", mlp);  // of gelu(h)
  h = maybe_dropout(g, c, p + ".mlp.dropout", h, 2 * l + 2);
  return add_binary(g, "add", p + ".residual_2", x, h);
}
}  // namespace

void validate(const GptConfig& c) {
  check_range("batch", c.batch, int64_t{1} << 20);
  check_range("context", c.context, int64_t{1} << 20);
  check_range("vocab", c.vocab, int64_t{1} << 24);
  check_range("layers", c.layers, 1024);
  check_range("width", c.width, int64_t{1} << 16);
  check_range("heads", c.heads, c.width);
  COHORT_CHECK(c.width % c.heads == 0, Status::kInvalidArgument, "gpt: heads (", c.heads, ") must divide width (",
               c.width, ")");
  COHORT_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, Status::kInvalidArgument, "gpt: dropout (", c.dropout,
               ") must be in [0, 1)");
  COHORT_CHECK(c.eps > 0.0, Status::kInvalidArgument, "gpt: eps (", c.eps, ") must be > 0");
  COHORT_CHECK(c.dtype == DType::kF32 || c.dtype == DType::kBF16, Status::kInvalidArgument, "gpt: dtype ",
               dtype_name(c.dtype), " (f32 or bf16)");
}

Graph build_gpt(const GptConfig& c) {
  validate(c);
  const int64_t B = c.batch, T = c.context, C = c.width, V = c.vocab;
  Graph g;
  ValueId tokens = g.add_input("tokens", DType::kI32, {B, T});
  ValueId targets = g.add_input("targets", DType::kI32, {B, T});
  ValueId wte = g.add_parameter("wte.weight", c.dtype, {V, C}, normal_init(kInitStd));
  ValueId wpe = g.add_parameter("wpe.weight", c.dtype, {T, C}, normal_init(kInitStd));
  ValueId x = g.add_op("embedding", "tok_emb", {wte, tokens}, Attrs()).at(0);  // (B, T, C)
  x = add_binary(g, "add", "emb", x, wpe);                                     // + (T, C)
  x = maybe_dropout(g, c, "emb.dropout", x, 0);
  for (int64_t l = 0; l < c.layers; ++l) x = add_block(g, c, l, x);
  x = add_layernorm(g, "ln_f", x, C, c.eps);
  ValueId logits;
  if (c.tie_weights) {
    Attrs a;
    a.set("transpose_b", int64_t{1});
    logits = g.add_op("matmul", "logits", {x, wte}, a).at(0);  // (B, T, C) x (V, C)^T
  } else {
    LinearInit head;
    head.weight = normal_init(kInitStd);
    ValueId fc = add_linear(g, "lm_head", x, C, V, false, head);
    Attrs a;
    a.set("shape", std::vector<int64_t>{-1, T, V});
    logits = g.add_op("reshape", "logits", {fc}, a).at(0);
  }
  add_classification_loss(g, logits, targets);
  return g;
}

int64_t gpt_parameter_count(const GptConfig& c) {
  validate(c);
  const int64_t C = c.width;
  const int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) +
                            (4 * C * C + C);
  return c.vocab * C + c.context * C + c.layers * per_layer + 2 * C + (c.tie_weights ? 0 : c.vocab * C);
}

}  // namespace cohort::models
