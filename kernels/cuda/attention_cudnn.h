// Fused attention for bf16 through cuDNN 9's scaled dot-product attention (flash attention: the
// T x T scores never reach memory), forward and backward, with attention.h's layout and
// semantics. attention_forward / attention_backward call these first and run cohort's own
// kernels whenever they return false. The one thing to know: cuDNN's softmax statistics are
// exactly attention.h's lse (natural log-sum-exp of the scaled, masked scores per row), so a
// forward and a backward may come from different implementations.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/attention.h"

namespace cohort::kernels::cuda {

// Whether bf16 attention tries cuDNN. kEnvironment (the default): on unless the environment has
// COHORT_CUDNN_ATTENTION=0 (read at each call); tests and benchmarks force it on or off.
// attention_backward_workspace depends on it: query the workspace after switching.
enum class CudnnAttention { kEnvironment, kOn, kOff };
void attention_cudnn_set_mode(CudnnAttention mode);
bool attention_cudnn_enabled();

// True when cuDNN's path takes this dtype and head size at all (bf16; D a multiple of 8 in
// attention_supports_head_size). Loads nothing.
bool attention_cudnn_supports(DType type, const AttentionDims& d);

// Floats of workspace attention_cudnn_backward needs in the caller's buffer: B*H*T (rowsum(dO*O))
// plus B*H*T*D (dQ accumulated in fp32), 16-byte aligned; 0 when it would not run (disabled or an
// unsupported head size). attention_backward_workspace returns at least this.
int64_t attention_cudnn_backward_workspace(const AttentionDims& d);

// Run on cuDNN and return true, or return false having done nothing when cuDNN does not take the
// call: disabled, not bf16, unsupported head size or cuDNN version, libcudnn.so.9 missing, a
// pointer not 16-byte aligned, or no cuDNN engine for the graph (logged once per shape at kWarn,
// with cuDNN's reason). The first call of each shape builds and caches the plan (it may compile
// kernels: seconds); later calls only enqueue on `stream`. Throws cohort::Error when cuDNN fails
// to run a plan it built. Arguments as attention_forward / attention_backward (already checked
// there); the backward's workspace holds attention_cudnn_backward_workspace(d) floats.
bool attention_cudnn_forward(DType type, const AttentionDims& d, const void* qkv, void* out,
                             float* lse, cudaStream_t stream);
bool attention_cudnn_backward(DType type, const AttentionDims& d, const void* qkv, const void* out,
                              const float* lse, const void* dout, void* dqkv, float* workspace,
                              cudaStream_t stream);

// Whether a cuDNN of `version` (cudnnGetVersion, 91900 for 9.19) runs the backward at this
// sequence length: up to 9.15 its engines need T % 128 == 0 without a padding mask (cohort runs
// its own kernel for the rest).
bool attention_cudnn_backward_takes_length(size_t version, int64_t T);

// Counters for tests and benchmarks (process-wide, since start).
struct AttentionCudnnStats {
  int64_t forward_calls = 0;  // calls that ran on cuDNN
  int64_t backward_calls = 0;
  int64_t plans_built = 0;
  int64_t refusals = 0;      // shapes cuDNN refused (each then runs cohort's kernels)
  std::string last_refusal;  // the reason of the latest refusal or skip ("" when none)
};
AttentionCudnnStats attention_cudnn_stats();

// Builds the forward or backward graph for the device that `device_json` describes (cuDNN's
// device-properties JSON) and searches a plan for it, with no GPU or driver needed: the check of
// the graph construction that runs on machines without a GPU. accepted: an engine took the graph
// (its plan finalized, or it compiled and only the missing driver kept its module from loading).
struct AttentionCudnnOfflineReport {
  bool accepted = false;
  int64_t engine = -1;  // the engine that took it
  std::string detail;   // cuDNN's refusal, or how it was accepted
};
AttentionCudnnOfflineReport attention_cudnn_check_offline(const std::string& device_json,
                                                          DType type, const AttentionDims& d,
                                                          bool backward);

}  // namespace cohort::kernels::cuda
