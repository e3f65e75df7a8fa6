// Optimizer updates on the GPU: SGD and AdamW over a whole list of parameters in one launch (a
// block per chunk of one parameter, so 150 parameter tensors cost one launch, not 150), and the
// global gradient norm as a deterministic two-level reduction. Same arithmetic and argument
// structs as kernels/cpu/optim.h, so the two backends take identical settings and track each
// other to fp32 rounding.
//
// The one thing to know: clipping never reads the norm back to the host. The update kernels take
// the device address of the squared norm and compute clip_grad_norm_'s factor themselves, so a
// clipped step queues norm and update back to back on the stream with no host wait between. The
// same address lets them skip a step whose gradients hold NaN or Inf, again without a host wait.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/optim.h"
#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

using AdamWArgs = cpu::AdamWArgs;
using SgdArgs = cpu::SgdArgs;

// One parameter of a multi-tensor update (all device pointers).
struct OptimParam {
  float* param = nullptr;  // the fp32 parameter, or the fp32 master copy of a bf16 one
  const void* grad = nullptr;
  DType grad_type = DType::kF32;
  float* state0 = nullptr;  // SGD: momentum buffer (null without momentum); AdamW: exp_avg
  float* state1 = nullptr;  // AdamW: exp_avg_sq
  uint16_t* param_bf16 = nullptr;  // not null: the bf16 parameter, written rounded in the same pass
  int64_t n = 0;
};

// When sum_sq is not null: a non-finite *sum_sq (NaN or Inf in some gradient) skips the whole
// update — every block reads the same sum, so none writes anything — and, when clip_norm > 0,
// clipping as torch.nn.utils.clip_grad_norm_: every gradient is multiplied by
// clip_norm / (sqrt(*sum_sq) + 1e-6) where that is below 1 (the update's own grad_scale is then
// replaced, as the CPU optimizer does).
struct DeviceClip {
  const double* sum_sq = nullptr;  // device address, e.g. written by grad_sum_of_squares
  double clip_norm = 0.0;
};

// Chunk `index` (elements [index * kChunk, ...)) of parameter `param`: one block's work.
struct OptimChunk {
  int32_t param = 0;
  int32_t index = 0;
};

// The device tables of a multi-tensor launch: the parameters and the chunks they are cut into,
// plus one partial sum per chunk for the norm. set() uploads them only when the list differs
// from the last one (the same parameters and gradient buffers step after step). Memory comes
// from `alloc`, ordered on `stream`.
class OptimTable {
 public:
  static constexpr int64_t kChunk = 1 << 16;  // elements per block

  OptimTable(DeviceAllocator& alloc, cudaStream_t stream) : alloc_(alloc), stream_(stream) {}
  ~OptimTable();
  OptimTable(const OptimTable&) = delete;
  OptimTable& operator=(const OptimTable&) = delete;

  // Throws kInvalidArgument for a negative size or a null param/grad of a non-empty parameter
  // (state pointers are checked by the update that needs them).
  void set(const std::vector<OptimParam>& params);
  const std::vector<OptimParam>& params() const { return params_host_; }
  int64_t chunks() const { return static_cast<int64_t>(chunk_host_.size()); }
  cudaStream_t stream() const { return stream_; }

  // Device views, for the kernels.
  const void* params_device() const { return params_dev_; }
  const void* chunks_device() const { return chunks_dev_; }
  double* partials_device() const { return static_cast<double*>(partials_dev_); }

 private:
  void release();

  DeviceAllocator& alloc_;
  cudaStream_t stream_;
  std::vector<OptimParam> params_host_;
  std::vector<OptimChunk> chunk_host_;
  void* params_dev_ = nullptr;
  void* chunks_dev_ = nullptr;
  void* partials_dev_ = nullptr;
  size_t params_cap_ = 0, chunks_cap_ = 0, partials_cap_ = 0;  // bytes held
};

// *sum_sq (device) = the sum over every parameter of grad^2, accumulated in double, in an order
// fixed by the table (the same bits every run).
void grad_sum_of_squares(const OptimTable& table, double* sum_sq);

// PyTorch SGD over every parameter of the table (kernels/cpu/optim.h, sgd_update).
void sgd_update(const OptimTable& table, const SgdArgs& args, const DeviceClip& clip);

// PyTorch AdamW over every parameter of the table (kernels/cpu/optim.h, adamw_update), with the
// second moment of the mean of args.noise_ranks ranks when that is > 1.
void adamw_update(const OptimTable& table, const AdamWArgs& args, const DeviceClip& clip);

}  // namespace cohort::kernels::cuda
