// Parameter initialisers. Fan-based kinds follow Glorot & Bengio (2010) and He et al. (2015):
// fan_in = numel / shape[0] (the PyTorch convention for [out, in, ...] weights), fan_out = shape[0]
// times the receptive field.
#include "core/graph/initializer.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/base/error.h"

namespace cohort {

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

void initialize_parameter(Tensor& t, const Initializer& init, uint64_t run_seed, const std::string& name) {
  const int64_t n = t.numel();
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t seed = init.seed != 0 ? init.seed : (run_seed * 0x9E3779B97F4A7C15ull) ^ fnv1a(name);
  std::mt19937_64 rng(seed);
  const Shape& s = t.shape();
  double fan_out = s.empty() ? 1.0 : static_cast<double>(s[0]);
  double fan_in = s.empty() ? 1.0 : static_cast<double>(n) / fan_out;
  if (s.size() > 2) fan_out *= fan_in / static_cast<double>(s[1]);  // receptive field
  auto uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = static_cast<float>(d(rng));
  };
  auto normal = [&](double mean, double stddev) {
    std::normal_distribution<double> d(mean, stddev);
    for (auto& x : v) x = static_cast<float>(stddev > 0 ? d(rng) : mean);
  };
  switch (init.kind) {
    case InitKind::kZeros: for (auto& x : v) x = 0.0f; break;
    case InitKind::kOnes: for (auto& x : v) x = 1.0f; break;
    case InitKind::kConstant: for (auto& x : v) x = static_cast<float>(init.a); break;
    case InitKind::kUniform: uniform(init.a, init.b); break;
    case InitKind::kNormal: normal(init.a, init.b); break;
    case InitKind::kXavierUniform: {
      double gain = init.a != 0 ? init.a : 1.0;
      double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
      uniform(-bound, bound);
      break;
    }
    case InitKind::kKaimingUniform: {
      double gain = init.a != 0 ? init.a : std::sqrt(2.0);
      double bound = gain * std::sqrt(3.0 / fan_in);
      uniform(-bound, bound);
      break;
    }
    case InitKind::kKaimingNormal: {
      double gain = init.a != 0 ? init.a : std::sqrt(2.0);
      normal(0.0, gain / std::sqrt(fan_in));
      break;
    }
  }
  Tensor src = Tensor::wrap(v.data(), t.shape(), DType::kF32);
  t.copy_from(src);
}

}  // namespace cohort
