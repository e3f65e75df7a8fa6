// Dropout mask generation. The hash (dropout.h) is SplitMix64's finaliser applied to key +
// element index: counter-based like Philox (Salmon et al., SC 2011), so any element's draw is
// computed independently and every thread count gives the same mask.
#include "kernels/cpu/dropout.h"

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more than they save
}  // namespace

uint64_t dropout_key(uint64_t attr_seed, uint64_t run_seed, int64_t step, int64_t node_id) {
  uint64_t k = dropout_mix64(attr_seed);
  k = dropout_mix64(k ^ run_seed);
  k = dropout_mix64(k ^ static_cast<uint64_t>(step));
  return dropout_mix64(k ^ static_cast<uint64_t>(node_id));
}

void dropout_apply(const float* x, float* out, int64_t n, float p, uint64_t key) {
  const uint64_t threshold = dropout_threshold(p);
  const float keep = 1.0f - p;
  // A dropped element is x * 0, not 0: NaN and Inf stay NaN there, as in PyTorch (x * mask).
  parallel_for(n, n > kParallelMin,
               [&](int64_t i) { out[i] = dropout_keeps(key, i, threshold) ? x[i] / keep : x[i] * 0.0f; });
}

}  // namespace cohort::kernels::cpu
