// Multi-head self-attention on a fused qkv buffer (GPT-2 layout), forward and backward.
// Only the per-row log-sum-exp of the scores is kept for backward; the probabilities are
// recomputed there (as in FlashAttention), so memory stays O(B*H*T) instead of O(B*H*T*T).
// The per-head products go through matmul.h's gemm_batched (oneDNN); call from outside any
// OpenMP parallel region.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

struct AttentionDims {
  int64_t B = 0;  // batch
  int64_t T = 0;  // tokens
  int64_t H = 0;  // heads
  int64_t D = 0;  // head size; C = H * D
  bool causal = true;
  float scale = 0.0f;  // applied to Q K^T (usually 1/sqrt(D))
};

// qkv [B, T, 3C]: q, k, v are the C-sized thirds of the last dim, head h at columns h*D.
// out [B, T, C] (heads interleaved the same way), lse [B, H, T] = log sum_j exp(scale q_i.k_j).
void attention_forward(const AttentionDims& d, const float* qkv, float* out, float* lse);

// dqkv [B, T, 3C] from the forward's qkv and lse, and dout [B, T, C]. dqkv is overwritten. The
// forward's output is not needed: rowsum(dO * O) is formed from the recomputed scores.
void attention_backward(const AttentionDims& d, const float* qkv, const float* lse, const float* dout,
                        float* dqkv);

}  // namespace cohort::kernels::cpu
