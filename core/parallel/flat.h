// The parameters as one flat fp32 vector, in parameter order: what the outer optimizers,
// the broadcast at attach and the outer-state shards work on. The flat buffer is host memory; the
// parameters may live on the CUDA device (copied over, waiting for the work queued before).
#pragma once

#include <vector>

#include "core/device/device.h"
#include "core/tensor/tensor.h"

namespace cohort::parallel {

inline size_t total_numel(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const Tensor& t : ts) n += static_cast<size_t>(t.numel());
  return n;
}

// Where each tensor starts in the flat vector: offsets[i] for tensor i, offsets[size] = the total.
inline std::vector<size_t> flat_offsets(const std::vector<Tensor>& ts) {
  std::vector<size_t> at(ts.size() + 1, 0);
  for (size_t i = 0; i < ts.size(); ++i) at[i + 1] = at[i] + static_cast<size_t>(ts[i].numel());
  return at;
}

// out must hold total_numel(ts) floats (more are left as they are).
inline void flatten(const std::vector<Tensor>& ts, float* out) {
  size_t off = 0;
  for (const Tensor& t : ts) {
    device_copy(out + off, Device::kCpu, t.raw(), t.device(), t.nbytes());
    off += static_cast<size_t>(t.numel());
  }
}

// The inverse of flatten: the parameters take their values from `flat`.
inline void unflatten(const float* flat, std::vector<Tensor>& ts) {
  size_t off = 0;
  for (Tensor& t : ts) {
    device_copy(t.raw(), t.device(), flat + off, Device::kCpu, t.nbytes());
    off += static_cast<size_t>(t.numel());
  }
}

// flatten / unflatten of the tensors `which` only: tensor i's values at flat + at[i] (a layout
// of the caller's, e.g. the outer state's fragment after fragment).
inline void flatten_some(const std::vector<Tensor>& ts, const std::vector<size_t>& which,
                         const std::vector<size_t>& at, float* flat) {
  for (size_t i : which) device_copy(flat + at[i], Device::kCpu, ts[i].raw(), ts[i].device(), ts[i].nbytes());
}
inline void unflatten_some(const float* flat, const std::vector<size_t>& at, std::vector<Tensor>& ts,
                           const std::vector<size_t>& which) {
  for (size_t i : which) device_copy(ts[i].raw(), ts[i].device(), flat + at[i], Device::kCpu, ts[i].nbytes());
}

}  // namespace cohort::parallel
