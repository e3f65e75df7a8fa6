// A GPT-2 style decoder-only transformer (Radford et al., 2019), pre-LN:
//   x = wte[tokens] + wpe                                   tokens: (B, T) -> x: (B, T, C)
//   per layer l: x += c_proj(attention(c_attn(ln_1(x))))    "h.<l>.ln_1", "h.<l>.attn.c_attn", ...
//                x += c_proj(gelu(c_fc(ln_2(x))))           "h.<l>.ln_2", "h.<l>.mlp.c_fc", ...
//   logits = ln_f(x) wte^T (tied) or lm_head(ln_f(x))       (B, T, V)
//   loss = cross_entropy(logits, targets)
// Parameter names match Hugging Face's GPT2LMHeadModel state_dict without the "transformer."
// prefix, one to one. One difference a parity script must know: weights use nn.Linear's layout
// [out, in] (c_attn.weight is [3C, C]); GPT-2's Conv1D stores the transpose. qkv is laid out
// [q | k | v] along the last dimension, heads contiguous within each, as GPT-2 splits it.
// Init as GPT-2: embeddings and linear weights normal(0, 0.02), the residual projections
// (attn.c_proj, mlp.c_proj) normal(0, 0.02 / sqrt(2 L)), biases 0, layernorm 1 / 0.
#pragma once

#include <cstdint>

#include "core/graph/graph.h"

namespace cohort::models {

struct GptConfig {
  int64_t batch = 8;
  int64_t context = 128;  // T: tokens per sequence (and rows of wpe)
  int64_t vocab = 256;    // V
  int64_t layers = 4;     // L
  int64_t width = 256;    // C
  int64_t heads = 4;      // H; must divide C
  bool tie_weights = true;  // logits = ln_f(x) wte^T; else a separate "lm_head.weight" [V, C]
  double dropout = 0.0;     // on embeddings and both residual branches; 0 adds no node
  double eps = 1e-5;        // layernorm
  bool scale_residual_init = true;  // GPT-2's 1/sqrt(2 L) on the residual projections
  // f32, or bf16: bf16 parameters and activations (math in fp32 inside the kernels); the optimizer
  // keeps an fp32 master copy of each parameter (mixed precision).
  DType dtype = DType::kF32;
  // The MLP's backward recomputes gelu(h) and gelu'(h) from h instead of keeping both through
  // forward (gelu_linear's recompute attr): [B, T, 4C] less kept a layer, two elementwise passes
  // more. What a GPU wants (cohort train and bench_gpu_gpt turn it on with --device cuda); the
  // CPU keeps them (the passes cost it more than the memory).
  bool recompute_gelu = false;
};

// Throws kInvalidArgument naming the first bad field ("gpt: heads (3) must divide width (256)").
void validate(const GptConfig& config);

// Inputs "tokens" and "targets", both i32 [batch, context]; output "logits" [batch, context,
// vocab]; loss "loss" (mean cross entropy over all B*T positions).
Graph build_gpt(const GptConfig& config);

// Number of parameter elements build_gpt(config) creates (validates first).
int64_t gpt_parameter_count(const GptConfig& config);

}  // namespace cohort::models
