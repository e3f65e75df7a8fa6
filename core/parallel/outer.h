// The outer optimizer shared by local SGD, SlowMo, DiLoCo and CO2: one rule, presets differ only
// in constants (core/parallel/plan.h). Works on flat fp32 buffers of all parameters.
//
// Sign convention (the one thing to get right): the pseudo-gradient of a round is
//     d = anchor_at_round_start - params_at_round_end
// i.e. it points like a gradient (uphill); the outer step SUBTRACTS it. With lr 1 and no
// momentum the step lands exactly on the average of the ranks' parameters.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "core/parallel/plan.h"

namespace cohort::parallel {

class OuterOptimizer {
 public:
  explicit OuterOptimizer(const OuterConfig& config) : config_(config) {}

  // One outer step: anchor -= lr * u (formulas in outer.cpp). d: averaged pseudo-gradient
  // (n = anchor.size() floats). scale: the staleness penalty factor (1 = none). Allocates the
  // momentum on first use. Returns the L2 norm of the momentum before clipping.
  // When anchor and d are one rank's shard of the model (ZeRO 1 of the outer state),
  // sum_over_ranks turns this shard's sum of squares into the whole model's, so clipping uses
  // the global norm; every rank must then call step at the same point.
  // With a range [begin, begin + count) of the anchor (streaming outer synchronisation: one
  // fragment of the model), only that range of the anchor and the momentum is stepped (d is
  // still indexed like the anchor); the clip's norm stays the whole momentum's, the other
  // fragments' parts as their own last steps left them, and its factor scales this range only.
  double step(std::vector<float>& anchor, const float* d, double scale,
              const std::function<double(double)>& sum_over_ranks = {}, size_t begin = 0,
              size_t count = static_cast<size_t>(-1));
  // CO2 staleness gap penalty factor for progress d made from a point at distance gap from
  // where it is applied (formula in outer.cpp), from the squared norms gap_sq and d_sq. 1 when
  // the penalty is off.
  double staleness_scale_from(double gap_sq, double d_sq) const;

  // co2's starting point for the steps before a round's average arrives (data_parallel.cpp,
  // end_round_co2), one element: where the outer step would take `anchor` if the group's average
  // were this rank's own pseudo-gradient e, from momentum m, which it leaves as it is (no
  // clipping): m' = beta m + e, anchor - alpha (e + beta m') (Nesterov) or anchor - alpha m'.
  float guess(float anchor, float m, float e) const {
    const float alpha = static_cast<float>(config_.lr), beta = static_cast<float>(config_.momentum);
    const float next = beta * m + e;
    return anchor - alpha * (config_.nesterov ? e + beta * next : next);
  }

  std::vector<float>& momentum() { return momentum_; }
  const std::vector<float>& momentum() const { return momentum_; }
  const OuterConfig& config() const { return config_; }

 private:
  // step()'s two halves: accumulate updates the momentum (n floats) with d over [begin, end)
  // and returns the whole momentum's (local) sum of squares; apply clips the momentum's
  // [begin, end) by m_norm (its whole-model L2 norm) and moves the anchor there.
  double accumulate(const float* d, size_t n, size_t begin, size_t end, double scale);
  void apply(std::vector<float>& anchor, const float* d, size_t begin, size_t end, double scale, double m_norm);

  OuterConfig config_;
  std::vector<float> momentum_;
};

}  // namespace cohort::parallel
