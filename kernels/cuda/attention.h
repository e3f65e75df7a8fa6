// Multi-head self-attention forward and backward on the GPU over the fused qkv buffer of GPT-2,
// with the layout and semantics of kernels/cpu/attention.h (the dims struct is shared):
//   qkv [B, T, 3C] (q, k, v the C-sized thirds, head h at columns h*D), out [B, T, C],
//   lse [B, H, T] = log sum_j exp(scale q_i . k_j) over the keys row i sees (fp32).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

using AttentionDims = cpu::AttentionDims;

// True when attention_forward supports head size D (16, 32, 64 or 128).
bool attention_supports_head_size(int64_t D);

// S = scale Q K^T, causal mask (keys j > i dropped) when d.causal, P = softmax(S), O = P V
// (Vaswani et al. 2017, eq. 1), never materialising S: one pass over the keys with the online
// softmax (as in Dao et al. 2022, FlashAttention, alg. 1). qkv/out of `type`, accumulation in
// fp32. D 64 and 128 run on tensor cores (attention_flash.cuh) for bf16, and for fp32 when
// allow_tf32 (products of TF32-rounded inputs, like cuBLAS's TF32 GEMMs); otherwise, and for
// D 16 and 32, fp32 products on CUDA cores. Throws kUnsupported for other head sizes.
void attention_forward(DType type, const AttentionDims& d, const void* qkv, void* out, float* lse,
                       cudaStream_t stream, bool allow_tf32 = false);

// Floats of workspace attention_backward needs (delta = rowsum(dO * O), [B, H, T]; more when bf16
// may run through cuDNN: attention_cudnn_backward_workspace).
int64_t attention_backward_workspace(const AttentionDims& d);

// dqkv [B, T, 3C] (overwritten) from the forward's qkv, out and lse and dout [B, T, C], as
// kernels/cpu's attention_backward (Dao et al. 2022, alg. 4): probabilities recomputed from lse,
// no atomics, deterministic. Same head sizes, and the same choice of kernels, as the forward.
void attention_backward(DType type, const AttentionDims& d, const void* qkv, const void* out,
                        const float* lse, const void* dout, void* dqkv, float* workspace,
                        cudaStream_t stream, bool allow_tf32 = false);

// True when attention_forward/backward run these dims on the tensor-core kernels (D 64 or 128,
// bf16 or TF32 allowed, T <= 65535 * 64, the current device grants their shared memory), given
// 16-byte aligned tensors (else CUDA cores). Throws a CUDA error when no device is usable.
bool attention_uses_tensor_cores(DType type, const AttentionDims& d, bool allow_tf32);

}  // namespace cohort::kernels::cuda
