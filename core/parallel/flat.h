// The parameters as one flat fp32 vector, in parameter order: what the outer optimizers,
// the broadcast at attach and the outer-state shards work on.
#pragma once

#include <cstring>
#include <vector>

#include "core/tensor/tensor.h"

namespace cohort::parallel {

inline size_t total_numel(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const Tensor& t : ts) n += static_cast<size_t>(t.numel());
  return n;
}

// out must hold total_numel(ts) floats (more are left as they are).
inline void flatten(const std::vector<Tensor>& ts, std::vector<float>& out) {
  size_t off = 0;
  for (const Tensor& t : ts) {
    std::memcpy(out.data() + off, t.raw(), t.nbytes());
    off += static_cast<size_t>(t.numel());
  }
}

// The inverse of flatten: the parameters take their values from `flat`.
inline void unflatten(const std::vector<float>& flat, std::vector<Tensor>& ts) {
  size_t off = 0;
  for (Tensor& t : ts) {
    std::memcpy(t.raw(), flat.data() + off, t.nbytes());
    off += static_cast<size_t>(t.numel());
  }
}

}  // namespace cohort::parallel
