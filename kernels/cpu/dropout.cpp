// Dropout mask generation. The hash is SplitMix64's finaliser (Steele, Lea, Flood, "Fast
// Splittable Pseudorandom Number Generators", OOPSLA 2014), applied to key + element index:
// counter-based like Philox (Salmon et al., SC 2011), so any element's draw is computed
// independently and every thread count gives the same mask.
#include "kernels/cpu/dropout.h"

#include <cmath>

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more than they save
constexpr int kBits = 24;                  // resolution of the keep test: p is rounded to 2^-24

inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t dropout_key(uint64_t attr_seed, uint64_t run_seed, int64_t step, int64_t node_id) {
  uint64_t k = mix64(attr_seed);
  k = mix64(k ^ run_seed);
  k = mix64(k ^ static_cast<uint64_t>(step));
  return mix64(k ^ static_cast<uint64_t>(node_id));
}

void dropout_apply(const float* x, float* out, int64_t n, float p, uint64_t key) {
  const uint64_t threshold = static_cast<uint64_t>(std::llround(static_cast<double>(p) * (1 << kBits)));
  const float keep = 1.0f - p;
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t draw = mix64(key + static_cast<uint64_t>(i)) >> (64 - kBits);
    out[i] = draw >= threshold ? x[i] / keep : 0.0f;
  }
}

}  // namespace cohort::kernels::cpu
