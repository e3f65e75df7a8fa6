// Dropout mask from a counter-based hash: element i of a tensor is kept iff
// hash(key, i) >= p, where key mixes (attribute seed, run seed, step, forward node id). The mask
// is a pure function of those numbers, so the backward pass regenerates it instead of storing it.
// The hash and the keep test are inline here, host and device alike, so that the GPU's dropout
// (kernels/cuda/dropout.cu) draws the same mask bit for bit from this one definition.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef COHORT_HD
#if defined(__CUDACC__)
#define COHORT_HD __host__ __device__
#else
#define COHORT_HD
#endif
#endif

namespace cohort::kernels::cpu {

constexpr int kDropoutBits = 24;  // resolution of the keep test: p is rounded to 2^-24

// SplitMix64's finaliser (Steele, Lea, Flood, "Fast Splittable Pseudorandom Number Generators",
// OOPSLA 2014), with its golden-ratio increment.
COHORT_HD inline uint64_t dropout_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The keep test's threshold on a kDropoutBits-bit draw: p * 2^24, rounded.
inline uint64_t dropout_threshold(float p) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(p) * (1 << kDropoutBits)));
}

// Whether element i survives under `key`: its kDropoutBits-bit draw is at least the threshold.
COHORT_HD inline bool dropout_keeps(uint64_t key, int64_t i, uint64_t threshold) {
  return (dropout_mix64(key + static_cast<uint64_t>(i)) >> (64 - kDropoutBits)) >= threshold;
}

uint64_t dropout_key(uint64_t attr_seed, uint64_t run_seed, int64_t step, int64_t node_id);
// out[i] = keep(key, i) ? x[i] / (1 - p) : 0, for p in [0, 1). Used for y (x) and dx (dy) alike.
void dropout_apply(const float* x, float* out, int64_t n, float p, uint64_t key);

}  // namespace cohort::kernels::cpu
