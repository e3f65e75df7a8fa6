// The outer step. Notation of CO2 (Sun et al., ICLR 2024, arXiv 2401.16265, section 3) and
// SlowMo (Wang et al., 2020): alpha outer lr, beta outer momentum, m outer momentum, d the
// averaged pseudo-gradient, phi the clip threshold, lambda the penalty constant.
#include "core/parallel/outer.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/optim.h"

namespace cohort::parallel {

double OuterOptimizer::step(std::vector<float>& anchor, const float* d, double scale,
                            const std::function<double(double)>& sum_over_ranks, size_t begin, size_t count) {
  const size_t n = anchor.size();
  const size_t end = count > n - std::min(begin, n) ? n : begin + count;
  double m_sq = accumulate(d, n, begin, end, scale);
  if (sum_over_ranks) m_sq = sum_over_ranks(m_sq);  // a shard: ||m||^2 sums over the ranks' shards
  const double m_norm = std::sqrt(m_sq);
  apply(anchor, d, begin, end, scale, m_norm);
  return m_norm;
}

double OuterOptimizer::accumulate(const float* d, size_t n, size_t begin, size_t end, double scale) {
  if (momentum_.size() != n) momentum_.assign(n, 0.0f);
  const float beta = static_cast<float>(config_.momentum);
  const float s = static_cast<float>(scale);
  // m_k = beta * m_{k-1} + s_k * d_k          (s_k: staleness penalty factor, 1 when off)
  for (size_t i = begin; i < end; ++i) momentum_[i] = beta * momentum_[i] + s * d[i];
  return kernels::cpu::sum_of_squares(momentum_.data(), static_cast<int64_t>(n));
}

void OuterOptimizer::apply(std::vector<float>& anchor, const float* d, size_t begin, size_t end, double scale,
                           double m_norm) {
  const float beta = static_cast<float>(config_.momentum);
  const float s = static_cast<float>(scale);
  // Outer momentum clipping (CO2 section 3): m_k <- m_k * min(1, phi / ||m_k||_2), phi > 0.
  // The clipped momentum is what is kept and used (the published fork discarded it).
  if (config_.clip_threshold > 0 && m_norm > config_.clip_threshold) {
    const float c = static_cast<float>(config_.clip_threshold / m_norm);
    for (size_t i = begin; i < end; ++i) momentum_[i] *= c;
  }
  // u_k = s_k * d_k + beta * m_k (Nesterov) or u_k = m_k;  anchor_{k+1} = anchor_k - alpha * u_k
  const float alpha = static_cast<float>(config_.lr);
  for (size_t i = begin; i < end; ++i) {
    float u = config_.nesterov ? s * d[i] + beta * momentum_[i] : momentum_[i];
    anchor[i] -= alpha * u;
  }
}

double OuterOptimizer::staleness_scale_from(double gap_sq, double d_sq) const {
  if (!config_.staleness_penalty) return 1.0;
  // Staleness gap penalty (CO2 section 3, as reconstructed here): progress d was made from a
  // point the model has since been moved away from by `gap`; the more it moved relative to the
  // progress itself, the less of it is kept:
  //     G = ||gap||_2 / (||d||_2 + eps),   s = 1 / (1 + lambda * G)
  // In co2 (data_parallel.cpp) d is the steps a rank took from its guess before the average
  // arrived and gap the guess's distance from the anchor the average gives.
  const double ratio = std::sqrt(gap_sq) / (std::sqrt(d_sq) + 1e-12);
  return 1.0 / (1.0 + config_.penalty_constant * ratio);
}

}  // namespace cohort::parallel
